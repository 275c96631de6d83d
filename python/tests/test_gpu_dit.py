"""GPU tests of the DiT passes (src/dit/, wan22vae.dit, wan22vae.diffusers.enable_transformer) against diffusers'
eager WanTransformerBlock (diffusers 0.42.1), at the TI2V-5B config (dim 3072, 24 heads of 128, ffn 14336, temb per
token [B, L, 6, dim]) and the A14B config (dim 5120, 40 heads, ffn 13824, temb per batch [B, 6, dim]), random weights.

The rule (the project's): against diffusers' float32 block (TF32 off) on the same inputs, our bf16 result's error
is at most 3x the error of diffusers' own bf16 block (both the max and the rms of the difference). The bf16 modules
are made as from_pretrained(torch_dtype=torch.bfloat16) makes them: bf16 weights except the _keep_in_fp32_modules
(scale_shift_table, norm1/2/3), which stay float32. Each fused op is checked alone (the eager expressions copied
from transformer_wan.py), then whole blocks (two in a row),
at odd L, L = 1, B = 2 and 480x832x81's 8190 tokens, with the caching allocator's free memory NaN before each fused
call (a buffer the passes leave unwritten shows); then a tiny WanPipeline's video with and without the fusions
(per-token and per-batch timesteps), the fallbacks' messages, and a full-size denoising step (704x1280x121: the
TI2V-5B transformer's 30 blocks at 27,280 tokens, one step with guidance) with and without the fusions against the
float32 pipeline.

Skipped without torch, a CUDA GPU, the library's CUDA backend or diffusers.
    python3 -m pytest -q python/tests/test_gpu_dit.py -m "not full_size"   (about a minute on an H100)
    python3 -m pytest -q -s python/tests/test_gpu_dit.py -m full_size      (the full-size step: ~2-3 minutes, 40 GB)
"""
import copy
import warnings

import pytest

torch = pytest.importorskip("torch")
diffusers = pytest.importorskip("diffusers")
import wan22vae  # noqa: E402
import wan22vae.diffusers as wd  # noqa: E402
from wan22vae import dit  # noqa: E402

pytestmark = [
    pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU visible to torch"),
    pytest.mark.skipif(not wan22vae.cuda_available(),
                       reason=f"libwan22vae has no usable CUDA backend: {wan22vae.cuda_unavailable_reason()}"),
]

from diffusers.models.transformers.transformer_wan import (WanRotaryPosEmbed,  # noqa: E402
                                                           WanTransformerBlock)

DEV = torch.device("cuda")
CONFIGS = {  # name: (dim, heads, ffn, per-token temb)
    "ti2v5b": (3072, 24, 14336, True),
    "a14b": (5120, 40, 13824, False),
}
SHAPES = [(1, (3, 11, 13)), (1, (1, 1, 1)), (2, (2, 5, 7))]  # (B, (F, H, W) of the patch grid): L 429, 1, 70
BLOCK_SHAPES = SHAPES + [(1, (21, 15, 26))]  # and 480x832x81's 8190 tokens
TEXT = 512


@pytest.fixture(autouse=True, scope="module")
def _no_tf32():
    old = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = old


def _block32(dim, heads, ffn, seed):
    torch.manual_seed(seed)
    with torch.device(DEV):  # made on the GPU: the A14B block's 350 M parameters initialize there in no time
        b = WanTransformerBlock(dim, ffn, heads, "rms_norm_across_heads", True, 1e-6, None).eval()
    with torch.no_grad():  # norm weights away from their init of ones, so that using them wrongly shows
        for m in (b.attn1.norm_q, b.attn1.norm_k, b.attn2.norm_q, b.attn2.norm_k):
            m.weight.uniform_(0.5, 1.5)
        b.norm2.weight.uniform_(0.5, 1.5)
        b.norm2.bias.uniform_(-0.2, 0.2)
    return b


def _bf16(block32):
    """As from_pretrained(torch_dtype=bf16) makes it: bf16, the _keep_in_fp32_modules float32."""
    b = copy.deepcopy(block32).to(torch.bfloat16)
    b.scale_shift_table.data = block32.scale_shift_table.data.clone()
    for name in ("norm1", "norm2", "norm3"):
        getattr(b, name).float()
    return b


def _bf(t):
    return t.to(torch.bfloat16)


def _inputs(dim, heads, per_token, B, fhw, seed):
    g = torch.Generator(device=DEV).manual_seed(seed)
    F, H, W = fhw
    L = F * H * W
    h = _bf(torch.randn(B, L, dim, device=DEV, generator=g))
    enc = _bf(torch.randn(B, TEXT, dim, device=DEV, generator=g))
    tshape = (B, L, 6, dim) if per_token else (B, 6, dim)
    temb = _bf(torch.randn(*tshape, device=DEV, generator=g) * 0.5)
    rope = WanRotaryPosEmbed(dim // heads, (1, 2, 2), 1024).to(DEV)
    cos, sin = rope(torch.empty(B, 1, F, 2 * H, 2 * W, device=DEV))
    return h, enc, temb, (cos, sin)


def _poison_cache(nbytes=2 << 30):
    """Fills the caching allocator's free memory with NaN (0xffff in bf16): the fused forward's buffers
    (torch.empty_like) come from it, so an element a pass leaves unwritten reaches the output as NaN."""
    torch.cuda.synchronize()
    torch.cuda.empty_cache()  # the free memory left in the cache is then only what is poisoned here
    free = torch.cuda.mem_get_info()[0]
    big = torch.empty(min(nbytes, free // 2), dtype=torch.uint8, device=DEV).fill_(0xFF)
    small = [torch.empty(1 << 20, dtype=torch.uint8, device=DEV).fill_(0xFF) for _ in range(16)]  # the small pool
    del big, small


def _errs(x, ref):
    d = (x.float() - ref.float()).flatten()
    return float(d.abs().max()), float(d.pow(2).mean().sqrt())


def _within(name, ours, eager, ref, factor=3.0):
    (om, orms), (em, erms) = _errs(ours, ref), _errs(eager, ref)
    assert torch.isfinite(ours.float()).all(), f"{name}: non-finite values"
    assert om <= factor * em + 1e-6 and orms <= factor * erms + 1e-7, \
        f"{name}: ours max {om:.3g} rms {orms:.3g}; diffusers bf16 max {em:.3g} rms {erms:.3g} (allowed {factor}x)"
    return om / max(em, 1e-12), orms / max(erms, 1e-12)


def _chunks(block, temb):
    """diffusers' shift_msa, scale_msa, gate_msa, c_shift_msa, c_scale_msa, c_gate_msa (float32)."""
    if temb.ndim == 4:
        return [c.squeeze(2) for c in (block.scale_shift_table.unsqueeze(0) + temb.float()).chunk(6, dim=2)]
    return list((block.scale_shift_table + temb.float()).chunk(6, dim=1))


def _rotary(x, cos, sin):  # WanAttnProcessor's apply_rotary_emb
    x1, x2 = x.unflatten(-1, (-1, 2)).unbind(-1)
    c, s = cos[..., 0::2], sin[..., 1::2]
    out = torch.empty_like(x)
    out[..., 0::2] = x1 * c - x2 * s
    out[..., 1::2] = x1 * s + x2 * c
    return out.type_as(x)


def _table(block):
    return block.scale_shift_table.detach().float().reshape(6, -1).contiguous()


@pytest.mark.parametrize("cfg", list(CONFIGS))
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"B{s[0]}-L{s[1][0] * s[1][1] * s[1][2]}")
@torch.no_grad()
def test_fused_ops(cfg, shape):
    dim, heads, ffn, per_token = CONFIGS[cfg]
    B, fhw = shape
    b32 = _block32(dim, heads, 256, 1)  # the ffn's size does not enter these ops
    b16 = _bf16(b32)
    h, enc, temb, (cos, sin) = _inputs(dim, heads, per_token, B, fhw, 2)
    L = h.shape[1]
    y = _bf(torch.randn_like(h.float()))
    mod = (_table(b16), temb.contiguous())
    c16, c32 = _chunks(b16, temb), _chunks(b32, temb.float())
    hf = h.float()
    # norm1 + modulation
    eager = (b16.norm1(h.float()) * (1 + c16[1]) + c16[0]).type_as(h)
    ref = b32.norm1(hf) * (1 + c32[1]) + c32[0]
    ours = torch.full_like(h, float("nan"))
    dit.resnorm(h, out=ours, mod=mod, shift_chunk=0)
    _within(f"{cfg} norm1+mod", ours, eager, ref)
    # q / k RMSNorm + RoPE (in place on a fused-QKV-like strided view, and out of place), and RMSNorm alone
    cs = cos.reshape(L, -1).float().contiguous(), sin.reshape(L, -1).float().contiguous()
    for which in ("norm_q", "norm_k"):
        m16, m32 = getattr(b16.attn1, which), getattr(b32.attn1, which)
        x = _bf(torch.randn(B, L, 3 * dim, device=DEV))[:, :, dim:2 * dim]
        eager = _rotary(m16(x).unflatten(2, (heads, -1)), cos, sin).flatten(2)
        ref = _rotary(m32(x.float()).unflatten(2, (heads, -1)), cos, sin).flatten(2)
        w = m16.weight.float().contiguous()
        out = torch.full((B, L, dim), float("nan"), dtype=torch.bfloat16, device=DEV)
        dit.qknorm(x, heads, weight=w, eps=m16.eps, cos=cs[0], sin=cs[1], out=out)
        _within(f"{cfg} {which}+rope", out, eager, ref)
        xin = x.clone()
        dit.qknorm(x, heads, weight=w, eps=m16.eps, cos=cs[0], sin=cs[1])
        assert torch.equal(x, out), f"{cfg} {which}: in place differs from out of place"
        eager, ref = b16.attn2.norm_q(xin), b32.attn2.norm_q(xin.float())
        out = dit.qknorm(xin.contiguous(), heads, weight=b16.attn2.norm_q.weight.float().contiguous(), eps=1e-6)
        _within(f"{cfg} cross {which}", out, eager, ref)
    # gated residual + norm2 (out written over y)
    e_h = (h.float() + y * c16[2]).type_as(h)
    e_n = b16.norm2(e_h.float()).type_as(e_h)
    r_h = hf + y.float() * c32[2]
    r_n = b32.norm2(r_h)
    o_h, yy = torch.full_like(h, float("nan")), y.clone()
    dit.resnorm(h, y=yy, h_out=o_h, gate=mod, gate_chunk=2, out=yy, norm_weight=b16.norm2.weight.float(),
                norm_bias=b16.norm2.bias.float(), eps=b16.norm2.eps)
    assert torch.equal(o_h, e_h), f"{cfg}: the gated residual differs from diffusers' (the same float32 steps)"
    _within(f"{cfg} gate+norm2", yy, e_n, r_n)
    # residual + norm3 + modulation (in place on h)
    e_h2 = e_h + y
    e_n3 = (b16.norm3(e_h2.float()) * (1 + c16[4]) + c16[3]).type_as(e_h2)
    r_h2 = r_h + y.float()
    r_n3 = b32.norm3(r_h2) * (1 + c32[4]) + c32[3]
    hh, out = e_h.clone(), torch.full_like(h, float("nan"))
    dit.resnorm(hh, y=y, h_out=hh, out=out, mod=mod, shift_chunk=3)
    assert torch.equal(hh, e_h2), f"{cfg}: the cross-attention residual differs from diffusers' bf16 add"
    _within(f"{cfg} add+norm3+mod", out, e_n3, r_n3)
    # the FFN's gated residual
    e_h3 = (e_h2.float() + y.float() * c16[5]).type_as(e_h2)
    dit.resnorm(hh, y=y, h_out=hh, gate=mod, gate_chunk=5)
    assert torch.equal(hh, e_h3), f"{cfg}: the FFN's gated residual differs from diffusers'"


@pytest.mark.parametrize("cfg", list(CONFIGS))
@torch.no_grad()
def test_blocks_match_diffusers(cfg):
    """Two blocks in a row, fused vs diffusers' bf16 forward, both against
    the float32 blocks, at each shape."""
    dim, heads, ffn, per_token = CONFIGS[cfg]
    b32 = [_block32(dim, heads, ffn, s) for s in (11, 12)]
    b16 = [_bf16(b) for b in b32]
    fused = [_bf16(b) for b in b32]
    holder = torch.nn.Module()
    holder.blocks = torch.nn.ModuleList(fused)
    assert wd.enable_transformer(holder)
    ratios = []
    for i, (B, fhw) in enumerate(BLOCK_SHAPES):
        h, enc, temb, rope = _inputs(dim, heads, per_token, B, fhw, 20 + i)
        ref, eager, ours = h.float(), h, h
        rope32 = tuple(r.float() for r in rope)
        for k in range(2):
            ref = b32[k](ref, enc.float(), temb.float(), rope32)
            eager = b16[k](eager, enc, temb, rope)
            _poison_cache()
            ours = fused[k](ours, enc, temb, rope)
            st = wd.transformer_status(holder)
            assert st["path"] == "fused", st
        ratios.append(_within(f"{cfg} 2 blocks B{B} L{h.shape[1]}", ours, eager, ref))
    print(f"{cfg}: error ratios (ours / diffusers bf16; max, rms) per shape: {ratios}")


def _tiny_pipe(expand, dtype):
    pytest.importorskip("transformers")  # WanPipeline needs it importable (no text encoder is used)
    from diffusers import AutoencoderKLWan, FlowMatchEulerDiscreteScheduler, WanPipeline, WanTransformer3DModel
    torch.manual_seed(0)
    transformer = WanTransformer3DModel(patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=32,
                                        in_channels=4, out_channels=4, text_dim=16, freq_dim=32, ffn_dim=96,
                                        num_layers=2, cross_attn_norm=True, rope_max_seq_len=64).eval()
    with torch.no_grad():
        for p in transformer.parameters():  # larger than the init, so that the blocks' work shows in the video
            p.mul_(3.0)
    vae = AutoencoderKLWan(base_dim=8, decoder_base_dim=8, z_dim=4, dim_mult=[1, 2, 4, 4], num_res_blocks=1,
                           attn_scales=[], temperal_downsample=[False, True, True], is_residual=True, in_channels=12,
                           out_channels=12, patch_size=2, scale_factor_temporal=4, scale_factor_spatial=16,
                           latents_mean=[0.1, -0.2, 0.05, 0.0], latents_std=[1.0, 0.8, 1.2, 0.9]).eval()
    transformer = transformer.to(DEV, dtype)
    if dtype == torch.bfloat16:  # as from_pretrained(torch_dtype=bf16) leaves it: _keep_in_fp32_modules in float32
        keep = set(transformer._keep_in_fp32_modules)
        for name, mod in transformer.named_modules():
            if keep & set(name.split(".")):
                mod.float()
        for name, p in transformer.named_parameters():
            if keep & set(name.split(".")):
                p.data = p.data.float()
    pipe = WanPipeline(tokenizer=None, text_encoder=None, vae=vae.to(DEV), transformer=transformer,
                       scheduler=FlowMatchEulerDiscreteScheduler(shift=5.0), expand_timesteps=expand)
    pipe.set_progress_bar_config(disable=True)
    return pipe


@pytest.mark.parametrize("expand", [True, False], ids=["per-token", "per-batch"])
def test_tiny_pipeline_video(expand):
    """A tiny WanPipeline (2 blocks, 3 steps, 9 frames of 64 x 96): the video with enable(pipe) against diffusers'
    bf16 pipeline, both against the float32 pipeline."""
    g = torch.Generator().manual_seed(3)
    args = dict(prompt_embeds=torch.randn(1, 8, 16, generator=g), negative_prompt_embeds=torch.randn(1, 8, 16,
                generator=g), height=64, width=96, num_frames=9, num_inference_steps=3, guidance_scale=2.0,
                output_type="pt")
    videos = {}
    for name, dtype in (("ref", torch.float32), ("eager", torch.bfloat16), ("ours", torch.bfloat16)):
        pipe = _tiny_pipe(expand, dtype)
        a = dict(args, prompt_embeds=args["prompt_embeds"].to(DEV, dtype),
                 negative_prompt_embeds=args["negative_prompt_embeds"].to(DEV, dtype))
        if name == "ours":
            with warnings.catch_warnings(record=True):
                warnings.simplefilter("always")
                wd.enable(pipe)  # the VAE here is not TI2V-5B's: it keeps diffusers' decode, with its message
            assert wd.transformer_status(pipe.transformer)["fused_possible"]
        videos[name] = pipe(**a, generator=torch.Generator().manual_seed(1)).frames.float()
        if name == "ours":
            assert wd.transformer_status(pipe.transformer)["path"] == "fused"
    assert videos["ours"].shape == videos["ref"].shape
    _within(f"tiny pipeline ({'per-token' if expand else 'per-batch'})", videos["ours"], videos["eager"],
            videos["ref"])


@torch.no_grad()
def test_fallbacks_say_why_once():
    dim, heads = 64, 2
    b32 = _block32(dim, heads, 128, 5)
    holder = torch.nn.Module()
    holder.blocks = torch.nn.ModuleList([copy.deepcopy(b32)])
    assert wd.enable_transformer(holder)
    h, enc, temb, rope = _inputs(dim, heads, True, 1, (1, 2, 3), 6)
    ref = b32(h.float(), enc.float(), temb.float(), rope)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        for _ in range(3):  # float32 on the GPU: diffusers' forward, one message
            out = holder.blocks[0](h.float(), enc.float(), temb.float(), rope)
    msgs = [str(x.message) for x in w if "wan22vae" in str(x.message)]
    assert len(msgs) == 1 and "torch.bfloat16" in msgs[0], msgs
    assert torch.equal(out, ref)
    st = wd.transformer_status(holder)
    assert st["path"] == "diffusers" and "torch.bfloat16" in st["reason"]
    # a processor the user replaced
    from diffusers.models.transformers.transformer_wan import WanAttnProcessor

    class Mine(WanAttnProcessor):
        pass
    blk = _bf16(b32)
    holder.blocks = torch.nn.ModuleList([blk])
    assert wd.enable_transformer(holder)
    blk.attn1.set_processor(Mine())
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        out = blk(h, enc, temb, rope)
    assert any("Mine" in str(x.message) for x in w)
    assert wd.transformer_status(holder)["path"] == "diffusers"
    wd.disable_transformer(holder)
    assert "forward" not in blk.__dict__


@pytest.mark.full_size
@torch.no_grad()
def test_full_size_denoising_step():
    """One denoising step (guidance 5: two forwards) of a WanPipeline with the TI2V-5B transformer (30 blocks, random
    weights) at 704x1280x121 (latents [1, 48, 31, 44, 80]: 27,280 tokens), per-token timesteps as TI2V-5B's pipeline
    has them: the latents after the step with enable(pipe) and with diffusers' bf16, each against the float32
    pipeline on the same weights (rounded to bf16) and inputs, tensor to tensor (the 3x rule, max and rms)."""
    pytest.importorskip("transformers")
    from diffusers import AutoencoderKLWan, FlowMatchEulerDiscreteScheduler, WanPipeline, WanTransformer3DModel
    cfg = dict(patch_size=(1, 2, 2), num_attention_heads=24, attention_head_dim=128, in_channels=48, out_channels=48,
               text_dim=4096, freq_dim=256, ffn_dim=14336, num_layers=30, cross_attn_norm=True, eps=1e-6,
               rope_max_seq_len=1024)
    torch.manual_seed(0)
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        with torch.device(DEV):
            t16 = WanTransformer3DModel(**cfg).eval()
    finally:
        torch.set_default_dtype(old)
    keep = set(t16._keep_in_fp32_modules)  # as from_pretrained(torch_dtype=bf16) leaves them
    for name, p in t16.named_parameters():
        if keep & set(name.split(".")):
            p.data = p.data.float()
    with torch.no_grad():  # norm weights and biases away from ones / zeros, so that using them wrongly shows
        for name, p in t16.named_parameters():
            if "norm" in name:
                p.add_(torch.randn_like(p) * 0.1)

    def pipe(transformer):  # a VAE only for its scale factors: output_type="latent" does not decode
        vae = AutoencoderKLWan(base_dim=8, decoder_base_dim=8, z_dim=48, dim_mult=[1, 2, 4, 4], num_res_blocks=1,
                               attn_scales=[], temperal_downsample=[False, True, True], is_residual=True,
                               in_channels=12, out_channels=12, patch_size=2, scale_factor_temporal=4,
                               scale_factor_spatial=16).eval().to(DEV)
        p = WanPipeline(tokenizer=None, text_encoder=None, vae=vae, transformer=transformer,
                        scheduler=FlowMatchEulerDiscreteScheduler(shift=5.0), expand_timesteps=True)
        p.set_progress_bar_config(disable=True)
        return p
    g = torch.Generator(device=DEV).manual_seed(3)
    pe, ne = (torch.randn(1, 512, 4096, device=DEV, generator=g) for _ in range(2))
    args = dict(height=704, width=1280, num_frames=121, num_inference_steps=1, guidance_scale=5.0,
                output_type="latent")

    def run(p, dtype):
        return p(prompt_embeds=pe.to(dtype), negative_prompt_embeds=ne.to(dtype), **args,
                 generator=torch.Generator(device=DEV).manual_seed(1)).frames.float()
    p16 = pipe(t16)
    eager = run(p16, torch.bfloat16)
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        wd.enable(p16)  # this VAE is not TI2V-5B's: it keeps diffusers' decode (unused here)
    _poison_cache(8 << 30)
    ours = run(p16, torch.bfloat16)
    st = wd.transformer_status(t16)
    assert st["path"] == "fused" and st["blocks"] == 30, st
    wd.disable_transformer(t16)
    with torch.device(DEV):
        t32 = WanTransformer3DModel(**cfg).eval()
    t32.load_state_dict({k: v.float() for k, v in t16.state_dict().items()})
    del t16, p16
    torch.cuda.empty_cache()
    ref = run(pipe(t32), torch.float32)
    assert ours.shape == ref.shape == (1, 48, 31, 44, 80), ours.shape
    d = (ours - eager).abs()
    print(f"full-size step: ours vs diffusers bf16: max {float(d.max()):.3g}, rms {float(d.pow(2).mean().sqrt()):.3g}"
          f" (latents' rms {float(ref.pow(2).mean().sqrt()):.3g})")
    r = _within("full-size denoising step (704x1280x121)", ours, eager, ref)
    print(f"full-size step: error ratios (ours / diffusers bf16) max {r[0]:.2f}, rms {r[1]:.2f}")
