"""wan22vae: the Wan VAE decoders of libwan22vae (Wan2.2 TI2V-5B's; the Wan2.1 VAE of Wan2.1, Wan2.2 A14B and
Qwen-Image: z [B, 16, T, h, w] -> [B, 3, 4T-3, 8h, 8w]), from Python (ctypes; torch optional).

    import wan22vae
    dec = wan22vae.Decoder.from_pretrained("Wan2.2-TI2V-5B-Diffusers", subfolder="vae")   # GPU if usable, else CPU
    video = dec(z, progress=True)                  # torch CUDA z [B, 48, T, h, w] -> bf16 [B, 3, 4T-3, 16h, 16w]
    frames = wan22vae.to_uint8_frames(video)       # numpy uint8 [4T-3, 16h, 16w, 3], one device-to-host copy
    for frame0, x in dec.frames(z, dtype="uint8"):  # or as they finish: uint8 [n, 16h, 16w, 3] on the GPU
        ...

    import wan22vae.diffusers
    wan22vae.diffusers.enable(pipe.vae)            # AutoencoderKLWan.decode through the library where it applies

    z = wan22vae.denormalize_latents(latents, pipe.vae)    # a pipeline's output_type="latent" -> vae.decode's input

The seed benchmark's protocol is wan22vae.prepare / wan22vae.run (see wan22vae.protocol). Importing the package
needs neither torch nor a GPU; the library (libwan22vae.so) is loaded on first use.
"""
from ._lib import Error
from .decoder import (Decoder, Weights, config_from_diffusers, cuda_available, cuda_unavailable_reason,
                      decode_flops, default_config, load_weights, model_name, synthetic_latents, synthetic_weights,
                      video_shape, wan21_config, weight_table, weights_from_tensors)
from .frames import to_uint8_frames
from .latents import TI2V_5B_LATENTS_MEAN, TI2V_5B_LATENTS_STD, denormalize_latents, latents_statistics
from .protocol import prepare, run

__version__ = "0.1.0"


def library_version():
    """The version of the libwan22vae.so this package loaded (w22_version(); loads it)."""
    from ._lib import lib
    return lib().w22_version().decode()


def library_path():
    """The path of the libwan22vae.so this package loaded (loads it)."""
    from . import _lib
    return _lib.path()


__all__ = ["Error", "Decoder", "Weights", "config_from_diffusers", "cuda_available", "cuda_unavailable_reason",
           "decode_flops", "default_config", "load_weights", "synthetic_latents", "synthetic_weights", "video_shape",
           "weight_table", "weights_from_tensors", "to_uint8_frames", "prepare", "run", "library_path", "library_version",
           "denormalize_latents", "latents_statistics", "TI2V_5B_LATENTS_MEAN", "TI2V_5B_LATENTS_STD",
           "wan21_config", "model_name"]
