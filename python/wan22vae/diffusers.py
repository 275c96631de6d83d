"""Routes diffusers' AutoencoderKLWan.decode through libwan22vae where it applies:

    import wan22vae.diffusers
    wan22vae.diffusers.enable(pipe.vae)            # or enable(pipe.vae, group=pg) to split each decode over pg
    video = pipe(...).frames                       # decodes through the library
    wan22vae.diffusers.status(pipe.vae)            # {"path": "kernel" | "diffusers", "reason": ...}

The kernel path applies to the Wan2.2 TI2V-5B config with bf16 weights on a Hopper GPU (sm_90) and a build of the
library with CUDA, when no tiling is asked for, for bf16 latents [B, 48, T, h, w] on the VAE's GPU. Anything else
goes to diffusers' own decode, and the reason is said once (warnings.warn, and the "wan22vae" logger). The output
is what diffusers returns: a DecoderOutput, or a tuple with return_dict=False, holding bf16 video clamped to
[-1, 1]; batches are decoded one latent at a time.

enable() copies the VAE's decoder weights into the library (through the host once; about 1.1 GB of GPU memory
more). Call it again after replacing or reloading the VAE's weights. With a process group every rank calls
enable() and every decode with the same latents; the ranks agree at enable() whether every one of them can take
the kernel path (else none does), and again at each decode (one small all-reduce), so that no rank waits in a
collective the others skipped. The video comes back on every rank.
"""
import logging
import sys
import warnings

from . import _dist
from ._lib import Error
from .decoder import (MAX_HW, MAX_T, Decoder, cuda_available, cuda_unavailable_reason, video_shape,
                      weights_from_tensors)

logger = logging.getLogger("wan22vae")

# The one config the kernel path takes: diffusers' AutoencoderKLWan config of Wan2.2 TI2V-5B (decoder side).
TI2V_5B = {"decoder_base_dim": 256, "z_dim": 48, "dim_mult": [1, 2, 4, 4], "num_res_blocks": 2,
           "temperal_downsample": [False, True, True], "is_residual": True, "patch_size": 2, "out_channels": 12,
           "attn_scales": []}
_OUR_CONFIG = {"z_dim": 48, "base_dim": 256}
_ATTR = "_wan22vae"


class _State:
    def __init__(self, vae, group):
        self.original = vae.decode
        self.had_instance_decode = "decode" in vae.__dict__
        self.group = group
        self.rank, self.world = 0, 1
        self.decoder = None
        self.comm = None
        self.device = None
        self.reason = None          # why the kernel path is out for good (None: it may be taken)
        self.param_ptrs = None
        self.flag = None            # [1] int32 on the GPU: the per-decode agreement over the group
        self.warned = set()
        self.last = {"path": None, "reason": None}


def _param_ptrs(vae):
    return tuple(p.data_ptr() for p in vae.parameters())


def _config_reason(cfg):
    cfg = dict(cfg)
    off = []
    for key, want in TI2V_5B.items():
        got = cfg.get(key)
        if key == "decoder_base_dim" and got is None:
            got = cfg.get("base_dim")
        if isinstance(want, list):
            got = list(got) if got is not None else got
        if got != want:
            off.append(f"{key} {got!r} (expected {want!r})")
    if off:
        return "the VAE's config is not Wan2.2 TI2V-5B's: " + ", ".join(off)
    return None


def _static_reason(vae):
    """Why this VAE cannot take the kernel path at all, or None."""
    torch = sys.modules["torch"]
    if type(vae).__name__ != "AutoencoderKLWan":
        return f"the VAE is a {type(vae).__name__}, not an AutoencoderKLWan"
    r = _config_reason(vae.config)
    if r:
        return r
    params = list(vae.post_quant_conv.parameters()) + list(vae.decoder.parameters())
    dtypes = {p.dtype for p in params}
    if dtypes != {torch.bfloat16}:
        return f"the VAE's decoder weights are {', '.join(sorted(str(d) for d in dtypes))}; the kernel path takes " \
               "torch.bfloat16 (vae.to(torch.bfloat16))"
    devices = {p.device for p in params}
    if len(devices) != 1 or next(iter(devices)).type != "cuda":
        return f"the VAE's decoder weights are on {', '.join(sorted(str(d) for d in devices))}; the kernel path " \
               "needs them on one GPU (CPU offload is not supported)"
    dev = next(iter(devices))
    cap = torch.cuda.get_device_capability(dev)
    if cap != (9, 0):
        return f"{dev} ({torch.cuda.get_device_name(dev)}) is sm_{cap[0]}{cap[1]}; the kernel path needs sm_90 (Hopper)"
    if not cuda_available():
        return f"libwan22vae cannot use the GPU: {cuda_unavailable_reason()}"
    return None


def _our_weights(vae):
    """The VAE's post_quant_conv + decoder weights in the library's order (bf16, through the host)."""
    sd = {f"post_quant_conv.{k}": v for k, v in vae.post_quant_conv.state_dict().items()}
    sd.update({f"decoder.{k}": v for k, v in vae.decoder.state_dict().items()})
    return weights_from_tensors(sd, _OUR_CONFIG)


def _note(st, reason):
    st.last = {"path": "diffusers", "reason": reason}
    if reason not in st.warned:
        st.warned.add(reason)
        msg = f"wan22vae: AutoencoderKLWan.decode falls back to diffusers' own decode: {reason}"
        logger.warning(msg)
        warnings.warn(msg, RuntimeWarning, stacklevel=3)


def enable(vae, group=None, frames_per_pass=0):
    """Routes vae.decode through the library where it applies. Returns True when the kernel path can be taken
    (per decode, the latents and use_tiling still decide), False when every decode falls back (status() says
    why). group: a torch.distributed process group to split each decode over (every rank calls enable)."""
    import torch
    if getattr(vae, _ATTR, None) is not None:
        disable(vae)
    st = _State(vae, group)
    weights = None
    try:
        reason = _static_reason(vae)
        if reason is None:
            weights = _our_weights(vae)
            st.device = vae.post_quant_conv.weight.device
    except Error as e:
        reason = str(e)
    if group is not None:
        import torch.distributed as dist
        st.rank, st.world = dist.get_rank(group), dist.get_world_size(group)
    if st.world == 1:
        if reason is None:
            try:
                st.decoder = Decoder(weights, device=st.device, frames_per_pass=frames_per_pass)
            except Error as e:
                reason = str(e)
    else:
        gpu = st.device if st.device is not None else (
            torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else None)
        failed = _dist.first_failure(_dist.agree(group, reason is None, reason, gpu))
        if failed:
            reason = f"not every rank of the group can take the kernel path ({failed})"
        else:
            ok, mine = True, None
            try:
                st.comm = _dist.nccl_comm(group, st.rank, st.world, st.device.index)
                st.decoder = Decoder(weights, device=st.device, frames_per_pass=frames_per_pass, comm=st.comm,
                                     video_on_all_ranks=True)
            except Error as e:
                ok, mine = False, str(e)
            failed = _dist.first_failure(_dist.agree(group, ok, mine, gpu))
            if failed:
                reason = f"not every rank of the group could open its decoder ({failed})"
                if st.decoder is not None:
                    st.decoder.close()
                    st.decoder = None
                _dist.free_comm(st.comm)
                st.comm = None
            else:
                st.flag = torch.ones(1, dtype=torch.int32, device=st.device)
    if weights is not None:
        weights.free()
    st.reason = reason
    if reason is None:
        st.param_ptrs = _param_ptrs(vae)
    else:
        _note(st, reason)

    def decode(z, return_dict=True):
        return _decode(vae, st, z, return_dict)

    decode.__wrapped__ = st.original
    decode.__doc__ = st.original.__doc__
    vae.decode = decode
    setattr(vae, _ATTR, st)
    return reason is None


def disable(vae):
    """Gives vae.decode back to diffusers and frees the library's decoder."""
    st = getattr(vae, _ATTR, None)
    if st is None:
        return
    if st.had_instance_decode:
        vae.decode = st.original
    else:
        vae.__dict__.pop("decode", None)
    if st.decoder is not None:
        st.decoder.close()
    _dist.free_comm(st.comm)
    st.decoder = st.comm = None
    setattr(vae, _ATTR, None)


def status(vae):
    """{"enabled", "kernel_possible", "path" (of the last decode: "kernel", "diffusers" or None before any),
    "reason" (why the last decode fell back, or why every decode will)}."""
    st = getattr(vae, _ATTR, None)
    if st is None:
        return {"enabled": False, "kernel_possible": False, "path": None, "reason": "wan22vae.diffusers.enable() was "
                "not called on this VAE"}
    return {"enabled": True, "kernel_possible": st.reason is None, "path": st.last["path"],
            "reason": st.last["reason"] if st.last["path"] == "diffusers" else st.reason}


def _call_reason(vae, st, z):
    """Why this decode cannot take the kernel path, or None."""
    torch = sys.modules["torch"]
    if getattr(vae, "use_tiling", False):
        return "tiling is on (vae.enable_tiling()); diffusers' tiled decode is used"
    if _param_ptrs(vae) != st.param_ptrs or vae.post_quant_conv.weight.dtype != torch.bfloat16:
        return "the VAE's parameters were moved or replaced since enable(); call enable() again"
    if not isinstance(z, torch.Tensor) or z.device != st.device:
        return f"latents on {getattr(z, 'device', type(z).__name__)}, the kernel path takes them on {st.device}"
    if z.dtype != torch.bfloat16:
        return f"latents are {z.dtype}; the kernel path takes torch.bfloat16 (the VAE's dtype)"
    if z.dim() != 5 or z.shape[1] != 48 or min(z.shape) < 1:
        return f"latents {list(z.shape)}; the kernel path takes [B, 48, T, h, w]"
    if z.shape[2] > MAX_T or z.shape[3] > MAX_HW or z.shape[4] > MAX_HW:
        return f"latents {list(z.shape)} exceed the kernel path's sizes (T <= {MAX_T}, h, w <= {MAX_HW})"
    if z.shape[3] < st.world:
        return f"latent height {z.shape[3]} is smaller than the group's {st.world} ranks"
    return None


def _decode(vae, st, z, return_dict):
    torch = sys.modules["torch"]
    reason = st.reason or _call_reason(vae, st, z)
    if st.reason is None and st.world > 1:
        # every rank takes the same path for this decode: the library's decode is a collective
        st.flag.fill_(0 if reason else 1)
        torch.distributed.all_reduce(st.flag, op=torch.distributed.ReduceOp.MIN, group=st.group)
        if not reason and int(st.flag.item()) == 0:
            reason = "another rank of the group cannot take the kernel path for this decode"
    if reason:
        _note(st, reason)
        return st.original(z, return_dict=return_dict)
    B, _, T, h, w = z.shape
    F, H, W = video_shape(_OUR_CONFIG, T, h, w)
    zc = z if z.is_contiguous() else z.contiguous()
    video = torch.empty((B, 3, F, H, W), dtype=torch.bfloat16, device=z.device)
    try:
        for b in range(B):
            st.decoder(zc[b:b + 1], out=video[b:b + 1])
    except Error as e:
        if st.world > 1 or e.status not in ("W22_ERR_BAD_SHAPE", "W22_ERR_OUT_OF_MEMORY"):
            raise
        _note(st, f"the library could not decode these latents: {e}")
        return st.original(z, return_dict=return_dict)
    st.last = {"path": "kernel", "reason": None}
    if not return_dict:
        return (video,)
    from diffusers.models.autoencoders.vae import DecoderOutput
    return DecoderOutput(sample=video)
