"""CPU tests of the DiT passes (wan22vae.dit, wan22vae.diffusers.enable_transformer): the library's float32 CPU
functions against diffusers' own eager ops and blocks (diffusers 0.42.1, float32 on the CPU), at tiny configs of
both temb layouts (per token as TI2V-5B, per batch as Wan2.1 / A14B), I2V's added image K/V, norm2 as Identity,
fused QKV projections, odd L, L = 1 and B > 1; outputs NaN before each call. Skipped without torch or diffusers.

Tolerance: both sides compute in float32 (the library takes its statistics in double), so they differ by float32
rounding in a different order: per op a few ulps of the values' magnitude, 1e-5 relative to the largest output
leaves 10x room; through two blocks and the attention 1e-4. A wrong chunk, index or rounding step is 1e-2 or more.
"""
import copy
import warnings

import pytest

torch = pytest.importorskip("torch")
diffusers = pytest.importorskip("diffusers")
import wan22vae  # noqa: E402
import wan22vae.diffusers as wd  # noqa: E402
from wan22vae import dit  # noqa: E402
from diffusers.models.transformers.transformer_wan import WanRotaryPosEmbed, WanTransformerBlock  # noqa: E402


def _close(ours, ref, rel, what):
    assert torch.isfinite(ours).all(), f"{what}: non-finite values (an element left unwritten?)"
    err = float((ours - ref).abs().max())
    scale = float(ref.abs().max()) + 1e-12
    assert err <= rel * scale, f"{what}: max error {err:.3g} > {rel} x {scale:.3g}"


def _model(per_token_ok=True, **kw):
    from diffusers import WanTransformer3DModel
    cfg = dict(patch_size=(1, 2, 2), num_attention_heads=3, attention_head_dim=12, in_channels=4, out_channels=4,
               text_dim=16, freq_dim=16, ffn_dim=40, num_layers=2, cross_attn_norm=True, rope_max_seq_len=32)
    cfg.update(kw)
    torch.manual_seed(0)
    m = WanTransformer3DModel(**cfg).eval()
    with torch.no_grad():
        for p in m.parameters():  # away from the init (norm weights of 1, zero biases) so that each one matters
            p.add_(torch.randn_like(p) * 0.2)
    return m


def _run(m, x, ts, enc, img=None):
    with torch.no_grad():
        return m(x, ts, enc, encoder_hidden_states_image=img, return_dict=False)[0]


CASES = [  # (B, T, h, w): latent frames and size (patch 2x2 -> L = T * h/2 * w/2)
    (1, 3, 6, 10),   # L 45 (odd)
    (2, 2, 2, 2),    # L 2, B 2
    (1, 1, 2, 2),    # L 1
    (2, 3, 10, 6),   # L 45, B 2
]


@pytest.mark.parametrize("per_token", [True, False], ids=["per-token", "per-batch"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"B{c[0]}-L{c[1] * c[2] * c[3] // 4}")
def test_transformer_matches_diffusers(per_token, case):
    B, T, h, w = case
    m = _model()
    ref_m = copy.deepcopy(m)
    assert wd.enable_transformer(m)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(B, 4, T, h, w, generator=g)
    L = T * (h // 2) * (w // 2)
    ts = torch.randint(0, 1000, (B, L), generator=g).float() if per_token else torch.tensor([900.0, 200.0][:B])
    enc = torch.randn(B, 7, 16, generator=g)
    ref = _run(ref_m, x, ts, enc)
    ours = _run(m, x, ts, enc)
    st = wd.transformer_status(m)
    assert st["path"] == "fused" and st["blocks"] == 2, st
    _close(ours, ref, 1e-4, f"transformer per_token={per_token} {case}")


def test_layouts_i2v_identity_norm2_fused_qkv():
    """I2V's image K/V (norm_added_k), cross_attn_norm=False (norm2 Identity), fused QKV projections (strided
    q, k views)."""
    g = torch.Generator().manual_seed(2)
    # I2V: image tokens before the 512 text tokens, added K/V over the blocks' dim
    m = _model(image_dim=8, added_kv_proj_dim=36)
    ref_m = copy.deepcopy(m)
    assert wd.enable_transformer(m)
    x, ts = torch.randn(1, 4, 2, 4, 6, generator=g), torch.tensor([500.0])
    enc, img = torch.randn(1, 512, 16, generator=g), torch.randn(1, 5, 8, generator=g)
    _close(_run(m, x, ts, enc, img), _run(ref_m, x, ts, enc, img), 1e-4, "I2V")
    assert wd.transformer_status(m)["path"] == "fused"
    # norm2 as Identity
    m = _model(cross_attn_norm=False)
    ref_m = copy.deepcopy(m)
    assert wd.enable_transformer(m)
    enc = torch.randn(1, 7, 16, generator=g)
    _close(_run(m, x, ts, enc), _run(ref_m, x, ts, enc), 1e-4, "norm2 Identity")
    # fused projections
    m = _model()
    ref_m = copy.deepcopy(m)
    m.fuse_qkv_projections()
    assert wd.enable_transformer(m)
    _close(_run(m, x, ts, enc), _run(ref_m, x, ts, enc), 1e-4, "fused QKV")
    assert wd.transformer_status(m)["path"] == "fused"


def _chunks(block, temb):
    if temb.ndim == 4:
        return [c.squeeze(2) for c in (block.scale_shift_table.unsqueeze(0) + temb.float()).chunk(6, dim=2)]
    return list((block.scale_shift_table + temb.float()).chunk(6, dim=1))


@pytest.mark.parametrize("per_token", [True, False])
@pytest.mark.parametrize("B,F,H,W", [(1, 3, 3, 5), (2, 1, 1, 1), (3, 2, 1, 3)])
@torch.no_grad()
def test_ops_match_diffusers_expressions(per_token, B, F, H, W):
    """Each pass against the expressions of WanTransformerBlock.forward / WanAttnProcessor, outputs NaN before."""
    dim, heads = 48, 4
    torch.manual_seed(3)
    blk = WanTransformerBlock(dim, 64, heads, "rms_norm_across_heads", True, 1e-6, None).eval()
    with torch.no_grad():
        for p in blk.parameters():
            p.add_(torch.randn_like(p) * 0.2)
    L = F * H * W
    g = torch.Generator().manual_seed(4)
    h, y = torch.randn(B, L, dim, generator=g) * 2 + 0.5, torch.randn(B, L, dim, generator=g)
    temb = torch.randn(*((B, L, 6, dim) if per_token else (B, 6, dim)), generator=g) * 0.5
    table = blk.scale_shift_table.detach().reshape(6, dim).contiguous()
    mod = (table, temb)
    c = _chunks(blk, temb)
    nan = lambda: torch.full((B, L, dim), float("nan"))  # noqa: E731
    out = nan()
    dit.resnorm(h, out=out, mod=mod, shift_chunk=0)
    _close(out, blk.norm1(h) * (1 + c[1]) + c[0], 1e-5, "norm1 + modulation")
    ho, out = nan(), nan()
    dit.resnorm(h, y=y, h_out=ho, gate=mod, gate_chunk=2, out=out, norm_weight=blk.norm2.weight.detach(),
                norm_bias=blk.norm2.bias.detach(), eps=blk.norm2.eps)
    e_h = h + y * c[2]
    _close(ho, e_h, 1e-6, "gated residual")
    _close(out, blk.norm2(e_h), 1e-5, "norm2")
    hh, out = e_h.clone(), nan()
    dit.resnorm(hh, y=y, h_out=hh, out=out, mod=mod, shift_chunk=3)
    _close(hh, e_h + y, 1e-6, "residual")
    _close(out, blk.norm3(e_h + y) * (1 + c[4]) + c[3], 1e-5, "norm3 + modulation")
    dit.resnorm(hh, y=y, h_out=hh, gate=mod, gate_chunk=5)
    _close(hh, e_h + y + y * c[5], 1e-6, "FFN's gated residual")
    # q / k: RMSNorm across heads + RoPE (WanRotaryPosEmbed's tables), and alone
    rope = WanRotaryPosEmbed(dim // heads, (1, 2, 2), 32)
    cos, sin = rope(torch.empty(B, 1, F, 2 * H, 2 * W))
    x = torch.randn(B, L, dim, generator=g)
    ref = blk.attn1.norm_q(x).unflatten(2, (heads, -1))
    x1, x2 = ref.unflatten(-1, (-1, 2)).unbind(-1)
    co, si = cos[..., 0::2], sin[..., 1::2]
    rr = torch.empty_like(ref)
    rr[..., 0::2] = x1 * co - x2 * si
    rr[..., 1::2] = x1 * si + x2 * co
    out = nan()
    dit.qknorm(x, heads, weight=blk.attn1.norm_q.weight.detach(), cos=cos.reshape(L, -1).float().contiguous(),
               sin=sin.reshape(L, -1).float().contiguous(), out=out)
    _close(out, rr.flatten(2).float(), 1e-5, "RMSNorm + RoPE")
    out = nan()
    dit.qknorm(x, heads, weight=blk.attn2.norm_k.weight.detach(), out=out)
    _close(out, blk.attn2.norm_k(x), 1e-5, "RMSNorm")


def test_wrapper_errors():
    h = torch.zeros(1, 3, 8)
    with pytest.raises(wan22vae.Error, match="bfloat16|float32"):
        dit.resnorm(h.bfloat16(), out=torch.zeros(1, 3, 8).bfloat16())
    with pytest.raises(wan22vae.Error, match="expected"):
        dit.resnorm(h, out=torch.zeros(1, 3, 9))
    with pytest.raises(wan22vae.Error, match=r"\[1, 6, 8\]"):
        dit.resnorm(h, out=torch.zeros(1, 3, 8), mod=(torch.zeros(6, 8), torch.zeros(1, 5, 8)))
    with pytest.raises(wan22vae.Error, match="W22_ERR_INVALID_ARG"):  # the C library's own check: nothing to do
        dit.resnorm(h)
    with pytest.raises(wan22vae.Error, match="multiple"):
        dit.qknorm(torch.zeros(1, 2, 10), 3)
    with pytest.raises(wan22vae.Error, match="odd"):  # from C: RoPE needs pairs
        dit.qknorm(torch.zeros(1, 2, 6), 2, cos=torch.zeros(2, 3), sin=torch.zeros(2, 3))


def test_fallbacks_say_why_once_and_match_diffusers():
    m = _model().to(torch.bfloat16)
    ref_m = copy.deepcopy(m)
    assert wd.enable_transformer(m)
    x, ts, enc = torch.randn(1, 4, 2, 4, 4).bfloat16(), torch.tensor([300.0]), torch.randn(1, 7, 16).bfloat16()
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        outs = [_run(m, x, ts, enc) for _ in range(2)]
    msgs = [str(a.message) for a in w if "wan22vae" in str(a.message)]
    assert len(msgs) == 1 and "float32" in msgs[0], msgs
    assert torch.equal(outs[0], _run(ref_m, x, ts, enc))
    assert wd.transformer_status(m)["path"] == "diffusers"
    # autograd on: diffusers' forward (the passes have no backward)
    m = _model()
    assert wd.enable_transformer(m)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        m(torch.randn(1, 4, 1, 2, 2), torch.tensor([1.0]), torch.randn(1, 7, 16))
    assert any("autograd" in str(a.message) for a in w)
    # a block whose forward a hook replaced keeps it, and says so
    m = _model()
    m.blocks[1].forward = lambda *a, **k: a[0]
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        assert wd.enable_transformer(m)
    assert any("1 of 2 blocks" in str(a.message) for a in w)
    assert wd.transformer_status(m)["blocks"] == 1
    # not a Wan transformer at all
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        assert not wd.enable_transformer(torch.nn.Linear(2, 2))
    wd.disable_transformer(m)
    assert "forward" not in m.blocks[0].__dict__


def test_enable_pipeline():
    """enable(pipe) on a tiny WanPipeline (float32, CPU): the transformer's blocks take the fused passes, the VAE
    (not TI2V-5B's config here) keeps diffusers' decode with its message, and the video matches diffusers'."""
    pytest.importorskip("transformers")  # WanPipeline needs it importable (no text encoder is used)
    from diffusers import AutoencoderKLWan, FlowMatchEulerDiscreteScheduler, WanPipeline

    def pipe():
        torch.manual_seed(0)
        vae = AutoencoderKLWan(base_dim=8, decoder_base_dim=8, z_dim=4, dim_mult=[1, 2, 4, 4], num_res_blocks=1,
                               attn_scales=[], temperal_downsample=[False, True, True], is_residual=True,
                               in_channels=12, out_channels=12, patch_size=2, scale_factor_temporal=4,
                               scale_factor_spatial=16, latents_mean=[0.0] * 4, latents_std=[1.0] * 4).eval()
        p = WanPipeline(tokenizer=None, text_encoder=None, vae=vae, transformer=_model(),
                        scheduler=FlowMatchEulerDiscreteScheduler(shift=5.0), expand_timesteps=True)
        p.set_progress_bar_config(disable=True)
        return p
    args = dict(prompt_embeds=torch.randn(1, 8, 16, generator=torch.Generator().manual_seed(2)), height=32,
                width=64, num_frames=5, num_inference_steps=2, guidance_scale=1.0, output_type="pt")
    ref = pipe()(**args, generator=torch.Generator().manual_seed(1)).frames
    p = pipe()
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        assert not wd.enable(p)  # the VAE's config is not TI2V-5B's
    assert wd.transformer_status(p.transformer)["fused_possible"]
    ours = p(**args, generator=torch.Generator().manual_seed(1)).frames
    assert wd.transformer_status(p.transformer)["path"] == "fused"
    _close(ours, ref, 1e-4, "pipeline video")


def test_enable_pipeline_two_transformers():
    """A14B's layout: a WanPipeline with transformer and transformer_2 (boundary_ratio: the high-noise steps on the
    first, the low-noise ones on the second), per-batch timesteps. enable(pipe) fuses both; each takes the fused path
    in its steps and the latents match diffusers'."""
    pytest.importorskip("transformers")
    from diffusers import AutoencoderKLWan, FlowMatchEulerDiscreteScheduler, WanPipeline

    def pipe():
        torch.manual_seed(0)
        vae = AutoencoderKLWan(base_dim=8, decoder_base_dim=8, z_dim=4, dim_mult=[1, 2, 4, 4], num_res_blocks=1,
                               attn_scales=[], temperal_downsample=[False, True, True], is_residual=True,
                               in_channels=12, out_channels=12, patch_size=2, scale_factor_temporal=4,
                               scale_factor_spatial=16, latents_mean=[0.0] * 4, latents_std=[1.0] * 4).eval()
        t1 = _model()
        torch.manual_seed(5)
        t2 = _model()
        with torch.no_grad():  # a different second transformer: a swap of the two would show
            for p in t2.parameters():
                p.add_(torch.randn_like(p) * 0.1)
        p = WanPipeline(tokenizer=None, text_encoder=None, vae=vae, transformer=t1, transformer_2=t2,
                        scheduler=FlowMatchEulerDiscreteScheduler(shift=5.0), boundary_ratio=0.875)
        p.set_progress_bar_config(disable=True)
        return p
    g = torch.Generator().manual_seed(2)
    args = dict(prompt_embeds=torch.randn(1, 8, 16, generator=g), negative_prompt_embeds=torch.randn(1, 8, 16,
                generator=g), height=32, width=64, num_frames=5, num_inference_steps=4, guidance_scale=3.0,
                output_type="latent")
    ref = pipe()(**args, generator=torch.Generator().manual_seed(1)).frames
    p = pipe()
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        wd.enable(p)
    ours = p(**args, generator=torch.Generator().manual_seed(1)).frames
    for t in (p.transformer, p.transformer_2):
        st = wd.transformer_status(t)
        assert st["blocks"] == 2 and st["path"] == "fused", st
    _close(ours, ref, 1e-4, "two-transformer pipeline latents")
