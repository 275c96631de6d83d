"""Pipeline latents: diffusers' Wan pipelines work on normalized latents and de-normalize them before vae.decode.

    video = pipe(prompt, ..., output_type="latent").frames      # normalized latents [B, 48, T, h, w]
    z = wan22vae.denormalize_latents(video, pipe.vae)            # what WanPipeline does before vae.decode
    frames = wan22vae.Decoder.from_pretrained(repo, subfolder="vae")(z)

WanPipeline (diffusers 0.42, pipeline_wan.py), after the denoising loop:

    latents = latents.to(vae device, dtype=vae.dtype)
    latents_mean = torch.tensor(vae.config.latents_mean).view(1, z_dim, 1, 1, 1).to(latents.device, latents.dtype)
    latents_std = 1.0 / torch.tensor(vae.config.latents_std).view(1, z_dim, 1, 1, 1).to(latents.device, latents.dtype)
    latents = latents / latents_std + latents_mean
    video = vae.decode(latents)

that is z * std + mean per channel. denormalize_latents makes the same operations in the same order and dtype (on a
torch tensor: bit for bit what the pipeline hands vae.decode, for latents already in the VAE's dtype).
"""
import os
import sys
from collections.abc import Mapping

import numpy as np

from ._lib import fail

# Wan2.2 TI2V-5B's statistics: the official Wan2_2_VAE's mean / std (wan/modules/vae2_2.py), which
# Wan-AI/Wan2.2-TI2V-5B-Diffusers/vae/config.json holds as latents_mean / latents_std.
TI2V_5B_LATENTS_MEAN = (
    -0.2289, -0.0052, -0.1323, -0.2339, -0.2799, 0.0174, 0.1838, 0.1557,
    -0.1382, 0.0542, 0.2813, 0.0891, 0.1570, -0.0098, 0.0375, -0.1825,
    -0.2246, -0.1207, -0.0698, 0.5109, 0.2665, -0.2108, -0.2158, 0.2502,
    -0.2055, -0.0322, 0.1109, 0.1567, -0.0729, 0.0899, -0.2799, -0.1230,
    -0.0313, -0.1649, 0.0117, 0.0723, -0.2839, -0.2083, -0.0520, 0.3748,
    0.0152, 0.1957, 0.1433, -0.2944, 0.3573, -0.0548, -0.1681, -0.0667)
TI2V_5B_LATENTS_STD = (
    0.4765, 1.0364, 0.4514, 1.1677, 0.5313, 0.4990, 0.4818, 0.5013,
    0.8158, 1.0344, 0.5894, 1.0901, 0.6885, 0.6165, 0.8454, 0.4978,
    0.5759, 0.3523, 0.7135, 0.6804, 0.5833, 1.4146, 0.8986, 0.5659,
    0.7069, 0.5338, 0.4889, 0.4917, 0.4069, 0.4999, 0.6866, 0.4093,
    0.5709, 0.6065, 0.6415, 0.4944, 0.5726, 1.2042, 0.5458, 1.6887,
    0.3971, 1.0600, 0.3943, 0.5537, 0.5444, 0.4089, 0.7468, 0.7744)


def _config_file(path):
    """The config.json for a path: the file itself, a VAE folder's, a pipeline folder's vae/, or the one next to a
    weight file."""
    if os.path.isdir(path):
        for cand in (os.path.join(path, "config.json"), os.path.join(path, "vae", "config.json")):
            if os.path.isfile(cand):
                return cand
        raise fail("W22_ERR_IO", f"{path}: no config.json there (nor in vae/); expected a diffusers VAE folder or a "
                   "pipeline folder")
    if path.endswith(".json"):
        return path
    if os.path.isfile(path):
        cand = os.path.join(os.path.dirname(path), "config.json")
        if os.path.isfile(cand):
            return cand
        raise fail("W22_ERR_IO", f"{path}: no config.json next to it to read latents_mean / latents_std from; pass "
                   "the VAE's config (a dict) or its folder")
    raise fail("W22_ERR_IO", f"{path}: no such file or folder; expected a VAE config (dict), a diffusers VAE, or "
               "the path of its folder or config.json")


def _read_json(path):
    from .decoder import _read_config_json  # one reader of config.json (its errors: wan22vae.Error naming the file)
    return _read_config_json(path)


def _attr(obj, name):
    """getattr(obj, name, None), also for objects whose __getattr__ raises something else than AttributeError
    (diffusers' ModelMixin raises KeyError for a name it does not know)."""
    try:
        return getattr(obj, name, None)
    except Exception:
        return None


def latents_statistics(source=None):
    """(mean, std, where) of a VAE's latents: from a config dict, a diffusers VAE (its .config), an object with a
    config dict, a path (a config.json, a VAE folder, a pipeline folder with vae/, a weight file with config.json
    next to it), or None: Wan2.2 TI2V-5B's. mean and std are tuples of floats, one per latent channel."""
    if source is None:
        return TI2V_5B_LATENTS_MEAN, TI2V_5B_LATENTS_STD, "Wan2.2 TI2V-5B's statistics"
    where = type(source).__name__
    if isinstance(source, (str, bytes, os.PathLike)):
        path = os.fsdecode(os.fspath(source))
        where = _config_file(path)
        cfg = _read_json(where)
    elif isinstance(source, Mapping):
        cfg = dict(source)
    elif _attr(source, "config") is not None:
        cfg = _attr(source, "config")
        where = f"{type(source).__name__}.config"
        try:
            cfg = dict(cfg)
        except (TypeError, ValueError):
            cfg = {k: getattr(cfg, k) for k in ("latents_mean", "latents_std") if hasattr(cfg, k)}
    else:
        raise fail("W22_ERR_INVALID_ARG", f"latent statistics from a {type(source).__name__}; expected a VAE config "
                   "(dict), a diffusers VAE, the path of its folder or config.json, or None (Wan2.2 TI2V-5B's)")
    mean, std = cfg.get("latents_mean"), cfg.get("latents_std")
    if mean is None or std is None:
        raise fail("W22_ERR_MISSING_TENSOR", f"{where}: no {'latents_mean' if mean is None else 'latents_std'} in "
                   "the VAE's config; expected both latents_mean and latents_std (lists, one number per latent "
                   "channel)")
    try:
        mean = tuple(float(x) for x in mean)
        std = tuple(float(x) for x in std)
    except (TypeError, ValueError):
        raise fail("W22_ERR_FORMAT", f"{where}: latents_mean / latents_std are not lists of numbers") from None
    if len(mean) != len(std) or not mean:
        raise fail("W22_ERR_FORMAT", f"{where}: latents_mean has {len(mean)} values, latents_std {len(std)}; expected "
                   "one of each per latent channel")
    if any(s == 0 or not np.isfinite(s) for s in std) or not all(np.isfinite(mean)):
        raise fail("W22_ERR_FORMAT", f"{where}: latents_std has a zero or non-finite value (or latents_mean a "
                   "non-finite one)")
    return mean, std, where


def denormalize_latents(z, source=None):
    """The latents a Wan pipeline hands vae.decode, from the normalized latents it denoises (what
    pipe(..., output_type="latent") returns): z * latents_std + latents_mean per channel, computed as WanPipeline
    computes it (z / (1 / std) + mean, in z's dtype). z: [B, C, T, h, w] or [C, T, h, w], a torch tensor (any
    device; the result is on it, in its dtype; integers become float32) or a numpy array (float16/32/64 kept, else
    float32). source: where latents_mean / latents_std come from: a VAE config dict, a diffusers VAE (pipe.vae), its
    folder or config.json (a pipeline folder's vae/ too), or None for Wan2.2 TI2V-5B's statistics. Returns a new
    array / tensor; z is not changed. The pipeline casts its latents to vae.dtype first: do the same (z.to(dtype))
    for bit-identical results."""
    mean, std, where = latents_statistics(source)
    torch = sys.modules.get("torch")
    is_tensor = torch is not None and isinstance(z, torch.Tensor)
    shape = tuple(z.shape) if is_tensor or hasattr(z, "shape") else np.shape(z)
    if len(shape) not in (4, 5) or shape[-4] != len(mean):
        raise fail("W22_ERR_BAD_SHAPE", f"latents {list(shape)}, expected [B, {len(mean)}, T, h, w] or "
                   f"[{len(mean)}, T, h, w] (the {len(mean)} channels of {where})")
    view = (1, len(mean), 1, 1, 1) if len(shape) == 5 else (len(mean), 1, 1, 1)
    if is_tensor:
        if z.is_complex() or not (z.is_floating_point()):
            z = z.float()
        m = torch.tensor(mean).view(view).to(z.device, z.dtype)
        inv = 1.0 / torch.tensor(std).view(view).to(z.device, z.dtype)
        return z / inv + m
    a = np.asarray(z)
    if a.dtype.kind not in "fiub":
        raise fail("W22_ERR_BAD_DTYPE", f"latents have dtype {a.dtype}; expected real numbers")
    dt = a.dtype if a.dtype in (np.float16, np.float32, np.float64) else np.dtype(np.float32)
    a = a.astype(dt, copy=False)
    # torch.tensor(list) is float32; then .to(dtype); the reciprocal in dtype
    m = np.asarray(mean, np.float32).astype(dt).reshape(view)
    inv = (np.asarray(1.0, dt) / np.asarray(std, np.float32).astype(dt)).reshape(view)
    return a / inv + m
