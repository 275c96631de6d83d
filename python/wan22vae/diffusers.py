"""Routes diffusers' AutoencoderKLWan.decode through libwan22vae where it applies:

    import wan22vae.diffusers
    wan22vae.diffusers.enable(pipe.vae)            # or enable(pipe.vae, group=pg) to split each decode over pg
    video = pipe(...).frames                       # decodes through the library
    wan22vae.diffusers.status(pipe.vae)            # {"path": "kernel" | "diffusers", "reason": ...}
    wan22vae.diffusers.enable(pipe)                # a pipeline: the VAE and the transformers' fused DiT passes
                                                   # (enable_transformer(pipe.transformer) alone: wan22vae/dit.py)

The kernel path applies to the two Wan VAE configs, Wan2.2 TI2V-5B's and the Wan2.1 VAE's (diffusers'
AutoencoderKLWan defaults: the VAE of Wan2.1, Wan2.2 A14B and Qwen-Image, whose
AutoencoderKLQwenImage is taken too), with float32, bfloat16 or float16 weights
on an NVIDIA GPU of sm_80 or later (a Hopper's sm_90a kernels, the portable kernels on Ampere, Ada, Blackwell;
enable(vae, kernels="portable") those on a Hopper too) and a build of the library with CUDA, when no tiling is asked
for, for latents [B, z_dim, T, h, w] (48 or 16 channels) of the VAE's dtype on the VAE's GPU. Anything else goes to
diffusers' own decode, and the reason is said once, as one RuntimeWarning (warnings.warn; the "wan22vae" logger
records it at DEBUG only, so that it is not printed twice). The output is what diffusers returns: a DecoderOutput, or a tuple with
return_dict=False, holding video clamped to [-1, 1] in the VAE's dtype; batches are decoded one latent at a time.

The arithmetic is the library's whatever the VAE's dtype: bf16 storage (weights and activations) with fp32
accumulation, the 3x3x3 convs of 256 channels and more as Winograd F(4x4, 3x3) in fp16 (W22_WINOGRAD=0: all
direct). Against diffusers' float32 decode its error stays within 3x diffusers' own bf16 decode's error (the bench's check: 0.28 of
that allowance at 121 frames, 55.9 dB PSNR; docs/PERF.md). A float32 or float16 VAE's decoder weights are converted
to bf16 once, at enable() (the library keeps them: about 1.1 GB of GPU memory more), and the video comes back in the
VAE's dtype; enable() says so on the "wan22vae" logger (INFO). enable(vae, allow_fp32=False), or W22_ALLOW_FP32=0 in
the environment, keeps diffusers' own decode for every VAE that is not bf16 (the behaviour before).

Call enable() again after replacing or reloading the VAE's weights (a decode after they changed falls back and says
so); enable() on a VAE whose weights have not changed keeps the decoder it has (no second conversion). With a
process group every rank calls enable() and every decode with the same latents; the ranks agree at enable() whether
every one of them can take the kernel path (else none does), and again at each decode (one small all-reduce), so
that no rank waits in a collective the others skipped. The video comes back on every rank.

Ctrl-C during a decode on the kernel path (one process, main thread) stops it at the end of the running pass and
raises KeyboardInterrupt.
"""
import logging
import os
import sys
import warnings

from . import _dist
from ._lib import Error
from .dit import disable_transformer, enable_transformer, transformer_status  # noqa: F401 (the DiT's switch)
from .decoder import (MAX_HW, MAX_T, Decoder, config_from_diffusers, cuda_available, cuda_unavailable_reason,
                      video_shape, weights_from_tensors)

logger = logging.getLogger("wan22vae")

# The configs the kernel path takes: diffusers' AutoencoderKLWan config (decoder side) of Wan2.2 TI2V-5B, and of the
# Wan2.1 VAE (diffusers' defaults; Wan2.1's, Wan2.2 A14B's and Qwen-Image's VAE folders say so).
TI2V_5B = {"decoder_base_dim": 256, "z_dim": 48, "dim_mult": [1, 2, 4, 4], "num_res_blocks": 2,
           "temperal_downsample": [False, True, True], "is_residual": True, "patch_size": 2, "out_channels": 12,
           "attn_scales": []}
WAN21 = {"decoder_base_dim": 96, "z_dim": 16, "dim_mult": [1, 2, 4, 4], "num_res_blocks": 2,
         "temperal_downsample": [False, True, True], "is_residual": False, "patch_size": None, "out_channels": 3,
         "attn_scales": []}
_CONFIGS = (("Wan2.2 TI2V-5B", TI2V_5B), ("the Wan2.1 VAE", WAN21))
# The classes: diffusers' AutoencoderKLWan, and Qwen-Image's AutoencoderKLQwenImage (the Wan2.1 VAE under other class
# names: the same 108 decoder parameters, the same decode; its config has no is_residual, i.e. the Wan2.1 structure)
_CLASSES = ("AutoencoderKLWan", "AutoencoderKLQwenImage")
# diffusers' AutoencoderKLWan defaults, for a config that leaves a field out
_DEFAULTS = {"base_dim": 96, "z_dim": 16, "dim_mult": [1, 2, 4, 4], "num_res_blocks": 2,
             "temperal_downsample": [False, True, True], "is_residual": False, "patch_size": None, "out_channels": 3,
             "attn_scales": []}
_ATTR = "_wan22vae"
# The weight dtypes the kernel path takes (converted to bf16 at enable() when not bf16).
_DTYPES = ("float32", "bfloat16", "float16")
# The bench's figures for the log line (README, docs/PERF.md: v24, f121 against diffusers' fp32 decode).
ACCURACY = ("within 3x diffusers' own bf16 decode's error against diffusers' float32 decode (the bench's check: "
            "0.28 of that allowance at 121 frames, 55.9 dB PSNR; docs/PERF.md)")


class _State:
    def __init__(self, vae, group):
        self.original = vae.decode
        self.had_instance_decode = "decode" in vae.__dict__
        self.group = group
        self.rank, self.world = 0, 1
        self.decoder = None
        self.comm = None
        self.device = None
        self.dtype = None           # the VAE's dtype: the latents' and the video's
        self.config = None          # our config dict (from the VAE's)
        self.reason = None          # why the kernel path is out for good (None: it may be taken)
        self.fingerprint = None     # the decoder weights' (address, version, dtype) when the library copied them
        self.allow_fp32 = True
        self.frames_per_pass = 0
        self.exact = False
        self.kernels = "auto"
        self.flag = None            # [1] int32 on the GPU: the per-decode agreement over the group
        self.warned = set()
        self.last = {"path": None, "reason": None}


def _decoder_params(vae):
    return list(vae.post_quant_conv.parameters()) + list(vae.decoder.parameters())


def _fingerprint(vae):
    """What says the decoder weights are still the ones the library copied: each one's address, in-place version
    counter and dtype."""
    return tuple((p.data_ptr(), p._version, p.dtype) for p in _decoder_params(vae))


def _allow_fp32(value):
    """enable()'s allow_fp32: the argument, else W22_ALLOW_FP32 (0/false/no/off: False), else True."""
    if value is not None:
        return bool(value)
    env = os.environ.get("W22_ALLOW_FP32", "").strip().lower()
    return env not in ("0", "false", "no", "off")


def _config_off(cfg, want_cfg):
    """The fields of cfg that differ from want_cfg's, as "key got (expected want)"."""
    off = []
    for key, want in want_cfg.items():
        got = cfg.get(key, _DEFAULTS.get(key))
        if key == "decoder_base_dim" and got is None:
            got = cfg.get("base_dim", _DEFAULTS["base_dim"])
        if isinstance(want, list):
            got = list(got) if got is not None else got
        if key == "is_residual":
            got = bool(got)
        if got != want:
            off.append(f"{key} {got!r} (expected {want!r})")
    return off


def _config_reason(cfg):
    """None when cfg is one of the two Wan VAE configs, else the fields that differ from the nearer one (the one of
    its is_residual: the field that tells the two structures apart)."""
    cfg = dict(cfg)
    offs = [(name, _config_off(cfg, want)) for name, want in _CONFIGS]
    if any(not off for _, off in offs):
        return None
    name, off = offs[0] if cfg.get("is_residual", False) else offs[1]
    return f"the VAE's config is not a supported Wan VAE's (the nearest, {name}'s, differs in: " + ", ".join(off) + \
        "); the kernel path takes Wan2.2 TI2V-5B's and the Wan2.1 VAE's"


def _structure_reason(vae, allow_fp32=True):
    """Why this VAE cannot take the kernel path whatever the machine (its class, config, weight dtypes), or None."""
    torch = sys.modules["torch"]
    if type(vae).__name__ not in _CLASSES:
        return f"the VAE is a {type(vae).__name__}, not an AutoencoderKLWan (or Qwen-Image's AutoencoderKLQwenImage)"
    r = _config_reason(vae.config)
    if r:
        return r
    dtypes = {p.dtype for p in _decoder_params(vae)}
    names = ", ".join(sorted(str(d) for d in dtypes))
    if len(dtypes) != 1 or str(next(iter(dtypes))).replace("torch.", "") not in _DTYPES:
        return f"the VAE's decoder weights are {names}; the kernel path takes one of torch.float32, torch.bfloat16 " \
               "and torch.float16 (layerwise casting is not supported)"
    if not allow_fp32 and dtypes != {torch.bfloat16}:
        return f"the VAE's decoder weights are {names}; with allow_fp32=False (or W22_ALLOW_FP32=0) the kernel path " \
               "takes torch.bfloat16 only (vae.to(torch.bfloat16), or enable(vae) to convert them)"
    return None


def _gpu_reason(vae):
    """Why this VAE's GPU (or its absence) rules the kernel path out, or None: no GPU at all is said as such (not as
    the VAE's device)."""
    torch = sys.modules["torch"]
    devices = {p.device for p in _decoder_params(vae)}
    if not torch.cuda.is_available():
        return "no CUDA GPU is available (torch.cuda.is_available() is False); the kernel path runs on a GPU"
    if len(devices) != 1 or next(iter(devices)).type != "cuda":
        return f"the VAE's decoder weights are on {', '.join(sorted(str(d) for d in devices))}; the kernel path " \
               "needs them on one GPU (CPU offload is not supported)"
    dev = next(iter(devices))
    cap = torch.cuda.get_device_capability(dev)
    if cap < (8, 0):
        return f"{dev} ({torch.cuda.get_device_name(dev)}) is sm_{cap[0]}{cap[1]}; the kernel path needs sm_80 or later"
    if not cuda_available():
        return f"libwan22vae cannot use the GPU: {cuda_unavailable_reason()}"
    return None


def _static_reason(vae, allow_fp32=True):
    """Why this VAE cannot take the kernel path at all, or None."""
    return _structure_reason(vae, allow_fp32) or _gpu_reason(vae)


def _our_weights(vae, config):
    """The VAE's post_quant_conv + decoder weights in the library's order, converted to bf16 where they are not
    (on their device, one tensor at a time) and copied to the host once."""
    torch = sys.modules["torch"]
    sd = {}
    for prefix, module in (("post_quant_conv.", vae.post_quant_conv), ("decoder.", vae.decoder)):
        for k, v in module.state_dict().items():
            sd[prefix + k] = v.detach().to(torch.bfloat16).cpu()
    return weights_from_tensors(sd, config)


def _winograd_words(exact=False):
    v = os.environ.get("W22_WINOGRAD", "").strip()
    if exact or v == "0":
        return "every conv direct (" + ("enable(vae, exact=True)" if exact else "W22_WINOGRAD=0") + ")"
    n = int(v) if v.isdigit() else 512
    return f"the 3x3x3 convs of {n} channels and more as Winograd F(4x4, 3x3) in fp16"


def arithmetic_note(st):
    """The log line enable() writes when the kernel path is taken: the arithmetic, and how close it is."""
    dt = str(st.dtype).replace("torch.", "")
    if st.device.type == "cuda":
        weights = "its decoder weights converted once to bfloat16" if dt != "bfloat16" else \
            "its bfloat16 decoder weights copied once"
        kind = f" ({st.decoder.path})" if st.decoder is not None and not st.decoder.closed else ""
        note = (f"wan22vae: AutoencoderKLWan.decode runs on wan22vae's CUDA kernels{kind} on {st.device} for this "
                f"{st.dtype} "
                f"VAE ({weights}, kept by the library); arithmetic: bf16 storage, fp32 accumulation, "
                f"{_winograd_words(st.exact)}; accuracy: {ACCURACY}; the video is returned in {st.dtype}")
    else:
        note = (f"wan22vae: AutoencoderKLWan.decode runs on wan22vae's CPU backend for this {st.dtype} VAE (its "
                f"decoder weights rounded once to bfloat16); arithmetic: float32; the video is returned in {st.dtype}")
    if dt != "bfloat16":
        note += f". enable(vae, allow_fp32=False) or W22_ALLOW_FP32=0 keeps diffusers' own {st.dtype} decode"
    return note


def _note(st, reason):
    """The fallback's reason, said once per reason: one RuntimeWarning (the logger's record at DEBUG: a WARNING record
    would print it a second time through logging's last-resort handler)."""
    st.last = {"path": "diffusers", "reason": reason}
    if reason not in st.warned:
        st.warned.add(reason)
        msg = f"wan22vae: AutoencoderKLWan.decode falls back to diffusers' own decode: {reason}"
        logger.debug(msg)
        warnings.warn(msg, RuntimeWarning, stacklevel=3)


def _is_pipeline(obj):
    return hasattr(obj, "vae") and hasattr(obj, "transformer") and not hasattr(obj, "decoder")


def _enable_pipeline(pipe, group, frames_per_pass, allow_fp32, exact, kernels):
    """enable(pipe): the VAE's decode and every Wan transformer's fused passes (pipe.transformer, and
    pipe.transformer_2 where the pipeline has two, as Wan2.2 A14B does). True when every part can take our path."""
    ok = True
    if getattr(pipe, "vae", None) is not None:
        ok = enable(pipe.vae, group=group, frames_per_pass=frames_per_pass, allow_fp32=allow_fp32, exact=exact,
                    kernels=kernels) and ok
    for name in ("transformer", "transformer_2"):
        t = getattr(pipe, name, None)
        if t is not None:
            ok = enable_transformer(t) and ok
    return ok


def enable(vae, group=None, frames_per_pass=0, allow_fp32=None, exact=False, kernels="auto"):
    """Routes vae.decode through the library where it applies. Given a pipeline (an object with .vae and
    .transformer, e.g. WanPipeline), does that for pipe.vae and turns on the transformers' fused DiT passes
    (enable_transformer) too; returns True when every part can take the library's path. Returns True when the kernel path can be taken
    (per decode, the latents and use_tiling still decide), False when every decode falls back (status() says
    why). group: a torch.distributed process group to split each decode over (every rank calls enable).
    allow_fp32: whether a float32 or float16 VAE takes the kernel path (its weights converted once to bf16, the
    video returned in its dtype); None: True unless W22_ALLOW_FP32=0; False: only a bf16 VAE does. exact: every conv
    in the direct arithmetic (Decoder's exact; the default takes Winograd for the 3x3x3 convs of 256 channels up).
    kernels: "auto" or "portable" (Decoder's kernels: the portable kernels on a Hopper too)."""
    if _is_pipeline(vae):
        return _enable_pipeline(vae, group, frames_per_pass, allow_fp32, exact, kernels)
    import torch
    allow = _allow_fp32(allow_fp32)
    old = getattr(vae, _ATTR, None)
    if old is not None:
        if (group is None and old.group is None and old.decoder is not None and old.reason is None
                and old.frames_per_pass == frames_per_pass and old.allow_fp32 == allow and old.exact == bool(exact)
                and old.kernels == kernels
                and old.fingerprint == _fingerprint(vae)):
            logger.info("wan22vae: enable(): the VAE's decoder weights are unchanged; the library keeps its copy")
            return True  # the weights the library holds are still the VAE's: no second conversion
        disable(vae)
    st = _State(vae, group)
    st.allow_fp32, st.frames_per_pass, st.exact, st.kernels = allow, frames_per_pass, bool(exact), kernels
    weights = None
    try:
        reason = _static_reason(vae, allow)
        if reason is None:
            st.config = config_from_diffusers(vae.config)
            st.dtype = vae.post_quant_conv.weight.dtype
            st.fingerprint = _fingerprint(vae)
            weights = _our_weights(vae, st.config)
            st.device = vae.post_quant_conv.weight.device
    except Error as e:
        reason = str(e)
    if group is not None:
        import torch.distributed as dist
        st.rank, st.world = dist.get_rank(group), dist.get_world_size(group)
    if st.world == 1:
        if reason is None:
            try:
                st.decoder = Decoder(weights, device=st.device, frames_per_pass=frames_per_pass, exact=st.exact,
                                     kernels=st.kernels)
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
                                     video_on_all_ranks=True, exact=st.exact, kernels=st.kernels)
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
        logger.info(arithmetic_note(st))
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
    "reason" (why the last decode fell back, or why every decode will), "dtype" (the VAE's, the video's on the
    kernel path)}."""
    st = getattr(vae, _ATTR, None)
    if st is None:
        return {"enabled": False, "kernel_possible": False, "path": None, "reason": "wan22vae.diffusers.enable() was "
                "not called on this VAE", "dtype": None}
    return {"enabled": True, "kernel_possible": st.reason is None, "path": st.last["path"],
            "reason": st.last["reason"] if st.last["path"] == "diffusers" else st.reason, "dtype": st.dtype}


def _call_reason(vae, st, z):
    """Why this decode cannot take the kernel path, or None."""
    torch = sys.modules["torch"]
    if getattr(vae, "use_tiling", False):
        return "tiling is on (vae.enable_tiling()); diffusers' tiled decode is used"
    if _fingerprint(vae) != st.fingerprint:
        return "the VAE's decoder weights were moved, replaced or changed in place since enable(); call enable() again"
    if not isinstance(z, torch.Tensor) or z.device != st.device:
        return f"latents on {getattr(z, 'device', type(z).__name__)}, the kernel path takes them on {st.device}"
    if z.dtype != st.dtype:
        return f"latents are {z.dtype}; the kernel path takes {st.dtype} (the VAE's dtype)"
    z_dim = st.config["z_dim"]
    if z.dim() != 5 or z.shape[1] != z_dim or min(z.shape) < 1:
        return f"latents {list(z.shape)}; the kernel path takes [B, {z_dim}, T, h, w]"
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
    F, H, W = video_shape(st.config, T, h, w)
    video = torch.empty((B, 3, F, H, W), dtype=st.dtype, device=z.device)
    try:
        st.decoder(z, out=video)  # one latent at a time; bf16 latents made from others, the video in st.dtype
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
