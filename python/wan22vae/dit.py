"""The DiT passes of libwan22vae from torch (ctypes on tensors' data_ptr), and the switch that puts them into
diffusers' Wan transformer:

    import wan22vae.diffusers
    wan22vae.diffusers.enable_transformer(pipe.transformer)   # or enable(pipe): the VAE and every transformer
    wan22vae.diffusers.transformer_status(pipe.transformer)   # {"path": "fused" | "diffusers", "reason": ...}

Each WanTransformerBlock's forward is replaced by one that runs the same computation (diffusers 0.42.1,
transformer_wan.py) with its elementwise passes fused (include/wan22vae.h, "DiT"):
    norm1 + modulation (scale_shift_table + temb read inside the kernel),
    norm_q / norm_k RMSNorm across the heads + RoPE (self-attention), RMSNorm alone (cross-attention, I2V's image k),
    the gated residual + norm2, the residual + norm3 + modulation, the FFN's gated residual.
The GEMMs (to_q/k/v/out, the FFN) and the attention (diffusers' dispatch_attention_fn, SDPA by default) stay torch's.
On the GPU the kernels take bf16 activations (a bf16 transformer) and queue on torch's current stream; on the CPU a
float32 transformer runs the library's float32 CPU versions.

Where a fusion does not apply (a dtype or device the kernels do not take, autograd on, an unknown block layout, an
attention processor the user replaced, context parallelism, a hook that replaced a block's forward) the block runs
diffusers' own forward, and the reason is said once (warnings.warn and the "wan22vae" logger).
"""
import ctypes
import logging
import sys
import warnings

from . import _lib
from ._lib import Error

logger = logging.getLogger("wan22vae")
_ATTR = "_wan22vae_dit"


# ---- ctypes: include/wan22vae.h's DiT structs ----

class DitMod(ctypes.Structure):
    _fields_ = [("table", ctypes.c_void_p), ("temb", ctypes.c_void_p), ("per_token", ctypes.c_int),
                ("temb_dtype", ctypes.c_int)]


class DitResnorm(ctypes.Structure):
    _fields_ = [("batch", ctypes.c_int), ("len", ctypes.c_int), ("dim", ctypes.c_int), ("eps", ctypes.c_float),
                ("h", ctypes.c_void_p), ("h_out", ctypes.c_void_p), ("y", ctypes.c_void_p),
                ("gate", ctypes.POINTER(DitMod)), ("gate_chunk", ctypes.c_int), ("out", ctypes.c_void_p),
                ("norm_weight", ctypes.c_void_p), ("norm_bias", ctypes.c_void_p), ("mod", ctypes.POINTER(DitMod)),
                ("shift_chunk", ctypes.c_int)]


class DitQknorm(ctypes.Structure):
    _fields_ = [("batch", ctypes.c_int), ("len", ctypes.c_int), ("heads", ctypes.c_int), ("head_dim", ctypes.c_int),
                ("eps", ctypes.c_float), ("x", ctypes.c_void_p), ("x_stride", ctypes.c_longlong),
                ("out", ctypes.c_void_p), ("out_stride", ctypes.c_longlong), ("weight", ctypes.c_void_p),
                ("cos", ctypes.c_void_p), ("sin", ctypes.c_void_p)]


_fns = None


def _functions():
    global _fns
    if _fns is None:
        L = _lib.lib()
        fns = {}
        for name, st, dev in (("w22_dit_resnorm_cpu", DitResnorm, False), ("w22_dit_resnorm_cuda", DitResnorm, True),
                              ("w22_dit_qknorm_cpu", DitQknorm, False), ("w22_dit_qknorm_cuda", DitQknorm, True)):
            f = getattr(L, name)
            f.restype = ctypes.c_int
            f.argtypes = [ctypes.POINTER(st), ctypes.c_void_p] if dev else [ctypes.POINTER(st)]
            fns[name] = f
        _fns = fns
    return _fns


def _torch():
    return sys.modules["torch"]


def _ptr(t):
    return None if t is None else t.data_ptr()


def _call(kind, args, device):
    """Runs w22_dit_<kind>_cpu or _cuda (on torch's current stream of device)."""
    torch = _torch()
    fns = _functions()
    if device.type == "cuda":
        with torch.cuda.device(device):
            stream = torch.cuda.current_stream(device).cuda_stream
            _lib.check(fns[f"w22_dit_{kind}_cuda"](ctypes.byref(args), stream))
    else:
        _lib.check(fns[f"w22_dit_{kind}_cpu"](ctypes.byref(args)))


def _act_dtype(device):
    torch = _torch()
    return torch.bfloat16 if device.type == "cuda" else torch.float32


def _need(cond, status, message):
    if not cond:
        raise _lib.fail(status, message)


def _check_act(name, t, device, shape=None):
    torch = _torch()
    _need(isinstance(t, torch.Tensor), "W22_ERR_INVALID_ARG", f"{name} is a {type(t).__name__}, not a tensor")
    _need(t.device == device, "W22_ERR_INVALID_ARG", f"{name} is on {t.device}, expected {device}")
    want = _act_dtype(device)
    _need(t.dtype == want, "W22_ERR_BAD_DTYPE", f"{name} is {t.dtype}; on {device.type} the passes take {want}")
    _need(t.is_contiguous(), "W22_ERR_BAD_SHAPE", f"{name} {list(t.shape)} is not contiguous")
    if shape is not None:
        _need(tuple(t.shape) == tuple(shape), "W22_ERR_BAD_SHAPE", f"{name} is {list(t.shape)}, expected {list(shape)}")


def _check_f32(name, t, device, numel):
    torch = _torch()
    _need(isinstance(t, torch.Tensor) and t.device == device and t.dtype == torch.float32 and t.is_contiguous()
          and t.numel() == numel, "W22_ERR_BAD_SHAPE",
          f"{name}: expected a contiguous float32 tensor of {numel} elements on {device}, got "
          f"{getattr(t, 'dtype', type(t).__name__)} {list(getattr(t, 'shape', []))} on {getattr(t, 'device', '?')}")


def _mod(name, mod, device, B, L, dim):
    """(table float32 [6, dim] (or [1, 6, dim]), temb [B, L, 6, dim] | [B, 6, dim]) -> DitMod, kept alive by the
    caller's tensors."""
    torch = _torch()
    table, temb = mod
    _check_f32(f"{name} table", table, device, 6 * dim)
    _need(isinstance(temb, torch.Tensor) and temb.device == device and temb.is_contiguous(), "W22_ERR_INVALID_ARG",
          f"{name} temb: expected a contiguous tensor on {device}")
    if temb.dim() == 4:
        _need(tuple(temb.shape) == (B, L, 6, dim), "W22_ERR_BAD_SHAPE",
              f"{name} temb is {list(temb.shape)}, expected [{B}, {L}, 6, {dim}] (per token) or [{B}, 6, {dim}]")
        per_token = 1
    else:
        _need(tuple(temb.shape) == (B, 6, dim), "W22_ERR_BAD_SHAPE",
              f"{name} temb is {list(temb.shape)}, expected [{B}, 6, {dim}] (per batch) or [{B}, {L}, 6, {dim}]")
        per_token = 0
    dtypes = {torch.float32: _lib.DTYPE_F32, torch.bfloat16: _lib.DTYPE_BF16}
    _need(temb.dtype in dtypes and (device.type == "cuda" or temb.dtype == torch.float32), "W22_ERR_BAD_DTYPE",
          f"{name} temb is {temb.dtype}; expected float32" + (" or bfloat16" if device.type == "cuda" else ""))
    return DitMod(table.data_ptr(), temb.data_ptr(), per_token, dtypes[temb.dtype])


def resnorm(h, *, y=None, h_out=None, gate=None, gate_chunk=2, out=None, norm_weight=None, norm_bias=None, mod=None,
            shift_chunk=0, eps=1e-6):
    """w22_dit_resnorm on torch tensors [B, L, dim] (CUDA: bf16; CPU: float32), on torch's current stream:
    with y, h_out = h + y * (table[gate_chunk] + temb[.., gate_chunk, :]) (gate=(table, temb)) or h + y; then with
    out, out = LayerNorm(new h) [* norm_weight + norm_bias] [* (1 + mod(shift_chunk + 1)) + mod(shift_chunk)]
    (mod=(table, temb)). table: float32 [6, dim]; temb [B, L, 6, dim] or [B, 6, dim] (float32, or bf16 on CUDA).
    Returns (h_out, out)."""
    device = h.device
    _check_act("h", h, device)
    _need(h.dim() == 3, "W22_ERR_BAD_SHAPE", f"h is {list(h.shape)}, expected [B, L, dim]")
    B, L, dim = h.shape
    for name, t in (("y", y), ("h_out", h_out), ("out", out)):
        if t is not None:
            _check_act(name, t, device, h.shape)
    for name, t in (("norm_weight", norm_weight), ("norm_bias", norm_bias)):
        if t is not None:
            _check_f32(name, t, device, dim)
    g = _mod("gate", gate, device, B, L, dim) if gate is not None else None
    m = _mod("mod", mod, device, B, L, dim) if mod is not None else None
    args = DitResnorm(B, L, dim, eps, _ptr(h), _ptr(h_out), _ptr(y), ctypes.pointer(g) if g else None, gate_chunk,
                      _ptr(out), _ptr(norm_weight), _ptr(norm_bias), ctypes.pointer(m) if m else None, shift_chunk)
    _call("resnorm", args, device)
    return h_out, out


def qknorm(x, heads, *, weight=None, eps=1e-6, cos=None, sin=None, out=None):
    """w22_dit_qknorm on a torch tensor x [B, L, heads * head_dim] (CUDA: bf16; CPU: float32) whose tokens may be
    a fixed stride apart (a chunk of a fused QKV projection): RMSNorm across the heads (weight: float32 [dim] or
    None), then RoPE with cos, sin (float32 [L, head_dim], WanRotaryPosEmbed's as diffusers uses them) if given.
    out: None for in place (x is overwritten), else a tensor of x's shape. Returns the result."""
    torch = _torch()
    device = x.device
    _need(isinstance(x, torch.Tensor) and x.dim() == 3, "W22_ERR_BAD_SHAPE",
          f"x is {list(getattr(x, 'shape', []))}, expected [B, L, heads * head_dim]")
    want = _act_dtype(device)
    _need(x.dtype == want, "W22_ERR_BAD_DTYPE", f"x is {x.dtype}; on {device.type} the passes take {want}")
    B, L, dim = x.shape

    def row_stride(t, name):
        # rows of dim contiguous elements, token (b, l) at (b * L + l) * stride
        s0, s1, s2 = t.stride()
        if L > 1:
            s, ok = s1, s2 == 1 and s1 >= dim and (B == 1 or s0 == L * s1)
        else:
            s = s0 if B > 1 else dim
            ok = s2 == 1 and s >= dim
        _need(ok, "W22_ERR_BAD_SHAPE", f"{name} {list(t.shape)} with strides {list(t.stride())}: its tokens must be "
              "rows of contiguous elements a fixed stride apart")
        return s

    xs = row_stride(x, "x")
    if out is None:
        out, os_ = x, xs
    else:
        _need(out.device == device and out.dtype == x.dtype and tuple(out.shape) == tuple(x.shape),
              "W22_ERR_BAD_SHAPE", f"out must be a {x.dtype} tensor {list(x.shape)} on {device}")
        os_ = row_stride(out, "out")
    _need(heads >= 1 and dim % heads == 0, "W22_ERR_BAD_SHAPE", f"dim {dim} is not a multiple of heads {heads}")
    hd = dim // heads
    if weight is not None:
        _check_f32("weight", weight, device, dim)
    if cos is not None or sin is not None:
        _check_f32("cos", cos, device, L * hd)
        _check_f32("sin", sin, device, L * hd)
    args = DitQknorm(B, L, heads, hd, eps, _ptr(x), xs, _ptr(out), os_, _ptr(weight), _ptr(cos), _ptr(sin))
    _call("qknorm", args, device)
    return out


# ---- the switch for diffusers' WanTransformer3DModel ----

class _State:
    def __init__(self):
        self.blocks = []        # the blocks whose forward is ours
        self.reason = None      # why no block can take the fused path (None: they may)
        self.warned = set()
        self.last = {"path": None, "reason": None}
        self.f32 = {}           # id(param) -> (param, version, float32 copy)
        self.rope = None        # (cos source, sin source, cos float32 [L, hd], sin float32 [L, hd])
        self.gpus = {}          # device index -> why the kernels cannot run there (None: they can)


def _note(st, reason):
    st.last = {"path": "diffusers", "reason": reason}
    if reason not in st.warned:
        st.warned.add(reason)
        msg = f"wan22vae: WanTransformerBlock falls back to diffusers' own forward: {reason}"
        logger.warning(msg)
        warnings.warn(msg, RuntimeWarning, stacklevel=4)


def _f32(st, t, shape=None):
    """A float32 contiguous copy of a parameter on its device, made once and again only when it changes."""
    key = id(t)
    hit = st.f32.get(key)
    if hit is not None and hit[0] is t and hit[1] == (t.data_ptr(), t._version, t.device, t.dtype):
        return hit[2]
    c = t.detach().float().contiguous()
    if shape is not None:
        c = c.reshape(shape)
    st.f32[key] = (t, (t.data_ptr(), t._version, t.device, t.dtype), c)
    return c


def _rope(st, rotary_emb, L, hd):
    """rotary_emb (diffusers' (freqs_cos, freqs_sin), [1, L, 1, hd] each, float64/32) as float32 [L, hd], converted
    once per forward: every block gets the same tuple's tensors (held here, so the identity check is exact)."""
    cos, sin = rotary_emb
    if st.rope is not None and st.rope[0] is cos and st.rope[1] is sin:
        return st.rope[2], st.rope[3]
    c = cos.detach().reshape(L, hd).float().contiguous()
    s = sin.detach().reshape(L, hd).float().contiguous()
    st.rope = (cos, sin, c, s)
    return c, s


def _is_rmsnorm(m, dim):
    torch = _torch()
    return isinstance(m, torch.nn.RMSNorm) and tuple(m.normalized_shape) == (dim,) and m.eps is not None


def _is_layernorm(m, dim, affine):
    torch = _torch()
    if not isinstance(m, torch.nn.LayerNorm) or tuple(m.normalized_shape) != (dim,):
        return False
    if affine is None:
        return True
    return (m.weight is not None) == affine and (affine or m.bias is None)


def _block_reason(block):
    """Why this block's layout is not the one the fused forward computes (None: it is)."""
    torch = _torch()
    if type(block).__name__ != "WanTransformerBlock":
        return f"a {type(block).__name__}, not a WanTransformerBlock"
    if "forward" in block.__dict__:
        return "the block's forward was replaced already (a hook or another patch)"
    try:
        sst = block.scale_shift_table
        dim = sst.shape[-1]
        if tuple(sst.shape) != (1, 6, dim):
            return f"scale_shift_table is {list(sst.shape)}, expected [1, 6, dim]"
        if not _is_layernorm(block.norm1, dim, False) or not _is_layernorm(block.norm3, dim, False):
            return "norm1 / norm3 are not LayerNorms without affine over the block's dim"
        if not (isinstance(block.norm2, torch.nn.Identity) or _is_layernorm(block.norm2, dim, None)):
            return f"norm2 is a {type(block.norm2).__name__}, expected a LayerNorm or Identity"
        for name in ("attn1", "attn2"):
            attn = getattr(block, name)
            if type(attn).__name__ != "WanAttention":
                return f"{name} is a {type(attn).__name__}, not a WanAttention"
            if attn.inner_dim != dim or attn.kv_inner_dim != dim or dim % attn.heads:
                return f"{name}'s inner dims ({attn.inner_dim}, {attn.kv_inner_dim}) differ from the block's {dim}"
            if not _is_rmsnorm(attn.norm_q, dim) or not _is_rmsnorm(attn.norm_k, dim):
                return f"{name}'s norm_q / norm_k are not RMSNorms across the heads ({dim}) with an eps"
            if attn.add_k_proj is not None and not _is_rmsnorm(attn.norm_added_k, dim):
                return f"{name}'s norm_added_k is not an RMSNorm across the heads"
        if block.attn1.is_cross_attention or block.attn1.add_k_proj is not None:
            return "attn1 is not a self-attention"
        if not block.attn2.is_cross_attention:
            return "attn2 is not a cross-attention"
    except AttributeError as e:
        return f"an unknown block layout ({e})"
    return None


def _gpu_reason(dev):
    """Why the kernels cannot run on this GPU (None: they can): the passes' kernels are portable CUDA (src/dit/, built
    for sm_80 and later: Ampere, Ada, Hopper, Blackwell)."""
    torch = _torch()
    from .decoder import cuda_available, cuda_unavailable_reason
    if not cuda_available():
        return f"libwan22vae cannot use the GPU: {cuda_unavailable_reason(plain=True)}"
    cap = torch.cuda.get_device_capability(dev)
    if cap < (8, 0):
        return f"{dev} ({torch.cuda.get_device_name(dev)}) is sm_{cap[0]}{cap[1]}; the fused passes need sm_80 or " \
               "later"
    return None


def _call_reason(st, block, hidden, enc, temb, rotary_emb):
    """Why this call cannot take the fused path (None: it can)."""
    torch = _torch()
    from diffusers.models.transformers.transformer_wan import WanAttnProcessor
    for name in ("attn1", "attn2"):
        proc = getattr(block, name).processor
        if type(proc) is not WanAttnProcessor:
            return f"{name}'s attention processor is a {type(proc).__name__}, not diffusers' WanAttnProcessor " \
                   "(replaced by the user)"
        if getattr(proc, "_parallel_config", None) is not None:
            return "context parallelism is configured (the fused forward does not split sequences)"
    if torch.is_grad_enabled() and (hidden.requires_grad or block.scale_shift_table.requires_grad):
        return "autograd is on (run under torch.no_grad() or torch.inference_mode(); the passes have no backward)"
    dev = hidden.device
    if dev.type == "cuda":
        if dev.index not in st.gpus:
            st.gpus[dev.index] = _gpu_reason(dev)
        if st.gpus[dev.index]:
            return st.gpus[dev.index]
        if hidden.dtype != torch.bfloat16:
            return f"hidden states are {hidden.dtype}; on the GPU the fused passes take torch.bfloat16"
        if temb.dtype not in (torch.bfloat16, torch.float32):
            return f"temb is {temb.dtype}; the fused passes take torch.bfloat16 or torch.float32"
    elif dev.type == "cpu":
        if hidden.dtype != torch.float32 or temb.dtype != torch.float32:
            return f"hidden states {hidden.dtype}, temb {temb.dtype} on the CPU; the CPU passes take torch.float32"
    else:
        return f"hidden states on {dev}; the fused passes run on CUDA GPUs and the CPU"
    if hidden.dim() != 3:
        return f"hidden states {list(hidden.shape)}, expected [B, L, dim]"
    B, L, dim = hidden.shape
    if dim != block.scale_shift_table.shape[-1]:
        return f"hidden states' dim {dim} is not the block's {block.scale_shift_table.shape[-1]}"
    if temb.device != dev or tuple(temb.shape) not in ((B, L, 6, dim), (B, 6, dim)):
        return f"temb {list(temb.shape)} on {temb.device}; expected [{B}, {L}, 6, {dim}] or [{B}, 6, {dim}] on {dev}"
    if not isinstance(enc, torch.Tensor) or enc.device != dev or enc.dim() != 3 or enc.shape[0] != B:
        return "encoder_hidden_states is not a [B, S, C] tensor on the hidden states' device"
    if block.attn2.add_k_proj is not None and enc.shape[1] <= 512:
        return f"encoder_hidden_states has {enc.shape[1]} tokens; an I2V block needs the image's before the 512 " \
               "text tokens"
    if rotary_emb is not None:
        hd = dim // block.attn1.heads
        if (not isinstance(rotary_emb, (tuple, list)) or len(rotary_emb) != 2
                or any(not isinstance(t, torch.Tensor) or t.numel() != L * hd or t.device != dev
                       for t in rotary_emb)):
            return f"rotary_emb is not diffusers' (cos, sin) pair of [1, {L}, 1, {hd}] tensors on {dev}"
    return None


def _attention(st, attn, x, enc, rope):
    """WanAttnProcessor.__call__ (diffusers 0.42.1) with norm_q / norm_k (/ norm_added_k) and RoPE fused."""
    from diffusers.models.attention_dispatch import dispatch_attention_fn
    from diffusers.models.transformers.transformer_wan import _get_added_kv_projections, _get_qkv_projections
    proc = attn.processor
    enc_img = None
    if attn.add_k_proj is not None:
        n_img = enc.shape[1] - 512  # the text encoder's 512 tokens, as diffusers has it
        enc_img, enc = enc[:, :n_img], enc[:, n_img:]
    q, k, v = _get_qkv_projections(attn, x, enc)
    cos, sin = rope if rope is not None else (None, None)

    def norm(t, m, c, s):
        if t.stride(-1) != 1:
            t = t.contiguous()
        return qknorm(t, attn.heads, weight=_f32(st, m.weight) if m.weight is not None else None, eps=m.eps,
                      cos=c, sin=s)

    q = norm(q, attn.norm_q, cos, sin)
    k = norm(k, attn.norm_k, cos, sin)
    q, k, v = (t.unflatten(2, (attn.heads, -1)) for t in (q, k, v))
    hidden_img = None
    if enc_img is not None:
        k_img, v_img = _get_added_kv_projections(attn, enc_img)
        k_img = norm(k_img, attn.norm_added_k, None, None)
        k_img, v_img = (t.unflatten(2, (attn.heads, -1)) for t in (k_img, v_img))
        hidden_img = dispatch_attention_fn(q, k_img, v_img, attn_mask=None, dropout_p=0.0, is_causal=False,
                                           backend=proc._attention_backend, parallel_config=None)
        hidden_img = hidden_img.flatten(2, 3).type_as(q)
    out = dispatch_attention_fn(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False,
                                backend=proc._attention_backend, parallel_config=None)
    out = out.flatten(2, 3).type_as(q)
    if hidden_img is not None:
        out = out + hidden_img
    out = attn.to_out[0](out)
    return attn.to_out[1](out)


def _fused_forward(st, block, hidden_states, encoder_hidden_states, temb, rotary_emb):
    """WanTransformerBlock.forward (diffusers 0.42.1) with its elementwise passes in the library."""
    torch = _torch()
    B, L, dim = hidden_states.shape
    hidden_states = hidden_states.contiguous()
    temb = temb.contiguous()
    table = _f32(st, block.scale_shift_table, (6, dim))
    mod = (table, temb)
    heads = block.attn1.heads
    rope = _rope(st, rotary_emb, L, dim // heads) if rotary_emb is not None else None
    # 1. self-attention: n1 = norm1(h) * (1 + scale_msa) + shift_msa
    n1 = torch.empty_like(hidden_states)
    resnorm(hidden_states, out=n1, mod=mod, shift_chunk=0, eps=block.norm1.eps)
    a = _attention(st, block.attn1, n1, None, rope).contiguous()
    del n1
    # h = h + a * gate_msa; n2 = norm2(h) (into a's memory: out == y)
    h = torch.empty_like(hidden_states)
    if isinstance(block.norm2, torch.nn.LayerNorm):
        n2w = _f32(st, block.norm2.weight) if block.norm2.weight is not None else None
        n2b = _f32(st, block.norm2.bias) if block.norm2.bias is not None else None
        resnorm(hidden_states, y=a, h_out=h, gate=mod, gate_chunk=2, out=a, norm_weight=n2w, norm_bias=n2b,
                eps=block.norm2.eps)
        n2 = a
    else:
        resnorm(hidden_states, y=a, h_out=h, gate=mod, gate_chunk=2)
        n2 = h
    # 2. cross-attention; h = h + a2; n3 = norm3(h) * (1 + c_scale_msa) + c_shift_msa (into a2's memory)
    a2 = _attention(st, block.attn2, n2, encoder_hidden_states, None).contiguous()
    del a, n2
    resnorm(h, y=a2, h_out=h, out=a2, mod=mod, shift_chunk=3, eps=block.norm3.eps)
    # 3. feed-forward; h = h + ff * c_gate_msa
    ff = block.ffn(a2).contiguous()
    del a2
    resnorm(h, y=ff, h_out=h, gate=mod, gate_chunk=5)
    return h


def _make_forward(st, block):
    from diffusers.models.transformers.transformer_wan import WanTransformerBlock
    original = WanTransformerBlock.forward

    def forward(hidden_states, encoder_hidden_states, temb, rotary_emb):
        reason = st.reason or _call_reason(st, block, hidden_states, encoder_hidden_states, temb, rotary_emb)
        if not reason:
            try:  # the passes never write the caller's tensors: diffusers' forward can still run after a refusal
                out = _fused_forward(st, block, hidden_states, encoder_hidden_states, temb, rotary_emb)
            except Error as e:
                reason = f"the library refused the call: {e}"
        if reason:
            _note(st, reason)
            return original(block, hidden_states, encoder_hidden_states, temb, rotary_emb)
        st.last = {"path": "fused", "reason": None}
        return out

    forward.__wrapped__ = original.__get__(block)
    return forward


def enable_transformer(transformer):
    """Puts the fused passes into every WanTransformerBlock of a diffusers WanTransformer3DModel (or a single
    block). Returns True when the blocks can take the fused path (each call still checks its tensors and falls back
    with one message where they do not fit), False when none can (transformer_status() says why)."""
    _torch()  # torch must be imported (diffusers is)
    old = getattr(transformer, _ATTR, None)
    if old is not None:
        disable_transformer(transformer)
    st = _State()
    blocks = list(getattr(transformer, "blocks", None) or [])
    if not blocks and type(transformer).__name__ == "WanTransformerBlock":
        blocks = [transformer]
    reason = None
    if not blocks:
        reason = f"a {type(transformer).__name__} has no WanTransformerBlocks (.blocks)"
    else:
        try:
            _functions()
        except Error as e:
            reason = str(e)
    skipped = []
    if reason is None:
        for i, block in enumerate(blocks):
            r = _block_reason(block)
            if r:
                skipped.append((i, r))
                continue
            block.forward = _make_forward(st, block)
            st.blocks.append(block)
        if skipped:
            i, r = skipped[0]
            msg = f"{len(skipped)} of {len(blocks)} blocks keep diffusers' forward (block {i}: {r})"
            if not st.blocks:
                reason = msg
            else:
                _note(st, msg)
    st.reason = reason
    if reason:
        _note(st, reason)
    else:
        logger.info("wan22vae: %d WanTransformerBlocks run their norms, modulation, RoPE and residuals on "
                    "libwan22vae's fused passes (bf16 on the GPU, float32 on the CPU); GEMMs and attention stay "
                    "torch's", len(st.blocks))
    setattr(transformer, _ATTR, st)
    return reason is None


def disable_transformer(transformer):
    """Gives every block its diffusers forward back."""
    st = getattr(transformer, _ATTR, None)
    if st is None:
        return
    for block in st.blocks:
        block.__dict__.pop("forward", None)
    st.blocks = []
    st.f32.clear()
    st.rope = None
    setattr(transformer, _ATTR, None)


def transformer_status(transformer):
    """{"enabled", "fused_possible", "blocks" (how many are ours), "path" of the last block call ("fused",
    "diffusers" or None), "reason" (why the last call fell back, or why every call will)}."""
    st = getattr(transformer, _ATTR, None)
    if st is None:
        return {"enabled": False, "fused_possible": False, "blocks": 0, "path": None,
                "reason": "wan22vae.diffusers.enable_transformer() was not called on this transformer"}
    return {"enabled": True, "fused_possible": st.reason is None, "blocks": len(st.blocks), "path": st.last["path"],
            "reason": st.last["reason"] if st.last["path"] == "diffusers" else st.reason}
