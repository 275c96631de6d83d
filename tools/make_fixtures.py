#!/usr/bin/env python3
"""Golden fixtures from diffusers: decodes synthetic latents with diffusers' AutoencoderKLWan loaded with synthetic
decoder weights (docs/synthetic.md), in float32 with TF32 off, and writes tests/fixtures/<case>.safetensors with
"latents" [1, z, T, h, w] and "video" [1, 3, 4T-3, 16h, 16w] (TI2V-5B's structure; the Wan2.1 VAE's: 8h, 8w)
(float32) and the case in __metadata__ (is_residual says which structure).
tests/test_fixtures.c decodes the same latents with this library's CPU backend and compares. docs/fixtures.md
says how the committed fixtures were made.

    python3 tools/make_fixtures.py [--out tests/fixtures] [--only CASE ...]

Needs numpy, torch, diffusers (0.42.1 for the committed set) and safetensors.
"""
import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import synth  # noqa: E402

# name: (config, weights seed, latents seed, T, h, w). The narrow config (z_dim 8, decoder_base_dim 16) keeps
# every structural feature of TI2V-5B: channel changes with conv_shortcut (64 -> 32 -> 16), two temporal
# upsamples, DupUp with ft=2 and with channel pairs (up_blocks.2: 64 -> 32), the mid attention.
NARROW = synth.NARROW
WIDE = dict(synth.NARROW, z_dim=16, base_dim=32)
NARROW21 = synth.NARROW21
WIDE21 = dict(synth.NARROW21, z_dim=16, base_dim=16)
CASES = {
    "narrow_t1_4x4": (NARROW, 1, 101, 1, 4, 4),      # one frame: the first-frame paths only
    "narrow_t2_4x6": (NARROW, 2, 102, 2, 4, 6),      # non-square, the first later frame
    "narrow_t5_3x5": (NARROW, 3, 103, 5, 3, 5),      # odd sizes, causal caches carried over 4 later frames
    "narrow_t3_5x3": (NARROW, 4, 104, 3, 5, 3),      # taller than wide, odd
    "narrow_t2_1x1": (NARROW, 5, 105, 2, 1, 1),      # one latent pixel: attention over one pixel, all borders
    "narrow_t4_2x2": (NARROW, 6, 106, 4, 2, 2),
    "wide_t3_3x4": (WIDE, 7, 107, 3, 3, 4),          # z_dim 16, base 32: another channel split of DupUp
    "ti2v5b_t3_2x3": (synth.TI2V_5B, 8, 108, 3, 2, 3),  # the real config, tiny latents
    # The Wan2.1 VAE's structure (is_residual False): the narrow config (z_dim 4, base 8: 32, 32, 32, 16, 8
    # channels) keeps its features: upsample convs that halve the channels (32 -> 16, 16 -> 8), the 16 -> 32
    # conv_shortcut that opens up_blocks.1, two temporal upsamplers, 3 output channels without unpatchify.
    "wan21n_t1_4x4": (NARROW21, 11, 111, 1, 4, 4),   # one frame
    "wan21n_t2_5x3": (NARROW21, 12, 112, 2, 5, 3),   # the first later frame, odd, taller than wide
    "wan21n_t5_3x4": (NARROW21, 13, 113, 5, 3, 4),   # causal caches over 4 later frames
    "wan21n_t2_1x1": (NARROW21, 14, 114, 2, 1, 1),   # one latent pixel
    "wan21w_t3_3x5": (WIDE21, 15, 115, 3, 3, 5),     # z_dim 16 as the real one, base 16
    "wan21_t3_2x3": (synth.WAN21, 16, 116, 3, 2, 3),  # the real config (base 96: 384, 384, 384, 192, 96)
}


def diffusers_config(cfg):
    """AutoencoderKLWan's arguments for a w22 config (the encoder is built too; its base_dim is irrelevant to
    decoding, so the narrow configs use the decoder's to keep it small)."""
    real = cfg == synth.TI2V_5B
    res = bool(cfg.get("is_residual", 1))
    return dict(base_dim=160 if real else cfg["base_dim"], decoder_base_dim=cfg["base_dim"], z_dim=cfg["z_dim"],
                dim_mult=list(cfg["dim_mult"]), num_res_blocks=cfg["num_res_blocks"], attn_scales=[],
                temperal_downsample=[bool(t) for t in cfg["temporal_up"][::-1]], is_residual=res,
                in_channels=cfg["out_channels"], out_channels=cfg["out_channels"],
                patch_size=cfg["patch_size"] if cfg["patch_size"] != 1 else None,
                scale_factor_temporal=4, scale_factor_spatial=8 * cfg["patch_size"])


def make_case(name, case, out_dir, f64_check=False):
    import diffusers
    import torch
    from diffusers import AutoencoderKLWan
    from safetensors.numpy import save_file

    cfg, wseed, zseed, T, h, w = case
    t0 = time.time()
    torch.manual_seed(0)  # the encoder keeps its init; fixed anyway so a rerun builds the same module
    vae = AutoencoderKLWan(**diffusers_config(cfg)).eval()

    # The synthetic table must be diffusers' own parameter list of the decoder side, in the same order: the
    # generator's tensor index is the position in that list.
    table = synth.weight_table(cfg)
    params = [(n, tuple(p.shape)) for n, p in vae.named_parameters()
              if n.startswith("post_quant_conv.") or n.startswith("decoder.")]
    ours = [(n, tuple(s)) for n, s, _, _ in table]
    if params != ours:
        diff = [(a, b) for a, b in zip(params, ours) if a != b][:5]
        raise SystemExit(f"{name}: weight table differs from diffusers' (first differences {diff}, "
                         f"{len(params)} vs {len(ours)} tensors)")

    weights = synth.synth_weights(cfg, wseed)
    sd = {k: torch.from_numpy(v) for k, v in weights.items()}
    # strict on the decoder side: every decoder key present, nothing unexpected; the encoder is left at init.
    missing, unexpected = vae.load_state_dict(sd, strict=False)
    dec_missing = [k for k in missing if k.startswith("post_quant_conv.") or k.startswith("decoder.")]
    if dec_missing or unexpected:
        raise SystemExit(f"{name}: load_state_dict: missing {dec_missing[:5]}, unexpected {unexpected[:5]}")
    for k, v in vae.state_dict().items():
        if k in weights and not np.array_equal(v.numpy(), weights[k]):
            raise SystemExit(f"{name}: {k} did not load exactly")
    t_build = time.time() - t0

    z = synth.synth_latents(cfg, zseed, T, h, w)
    t0 = time.time()
    with torch.no_grad():
        video = vae.decode(torch.from_numpy(z.copy())).sample.numpy().astype(np.float32)
    t_decode = time.time() - t0
    p = cfg["patch_size"]
    expect = (1, 3, 4 * T - 3, 8 * p * h, 8 * p * w)
    if video.shape != expect:
        raise SystemExit(f"{name}: video shape {video.shape}, expected {expect}")
    if not np.isfinite(video).all():
        raise SystemExit(f"{name}: the video has non-finite values")

    meta = dict(z_dim=cfg["z_dim"], base_dim=cfg["base_dim"], is_residual=int(cfg.get("is_residual", 1)),
                weights_seed=wseed, latents_seed=zseed, T=T, h=h,
                w=w, diffusers_version=diffusers.__version__, torch_version=torch.__version__)
    path = os.path.join(out_dir, name + ".safetensors")
    save_file({"latents": z, "video": np.ascontiguousarray(video)}, path,
              metadata={k: str(v) for k, v in meta.items()})
    if f64_check:
        # The float32 decode's own rounding error, against the same decode in float64: the scale of the
        # difference any correct float32 implementation may have from the fixture (tests/test_fixtures.c).
        with torch.no_grad():
            v64 = vae.double().decode(torch.from_numpy(z.astype(np.float64))).sample.numpy()
        e = video.astype(np.float64) - v64
        print(f"{name}: float32 vs float64 decode: max abs {np.abs(e).max():.3g}, rms {np.sqrt(np.mean(e ** 2)):.3g}")
    clamped = float(np.mean(np.abs(video) >= 1.0))
    print(f"{name}: video {video.shape}, rms {np.sqrt(np.mean(video.astype(np.float64) ** 2)):.4f}, "
          f"clamped {100 * clamped:.2f}%, build {t_build:.1f} s, decode {t_decode:.1f} s, "
          f"{os.path.getsize(path)} bytes")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                                  "fixtures"))
    ap.add_argument("--only", nargs="*", help="cases to make (default: all)")
    ap.add_argument("--f64-check", action="store_true",
                    help="also decode in float64 and print the float32 decode's difference from it")
    args = ap.parse_args()

    import torch
    # float32 throughout: TF32 would round the convolutions' inputs to 10-bit mantissas (CPU runs are unaffected,
    # but a CUDA torch must not differ).
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.set_grad_enabled(False)

    os.makedirs(args.out, exist_ok=True)
    for name in args.only or CASES:
        if name not in CASES:
            raise SystemExit(f"unknown case {name!r}; the cases are {', '.join(CASES)}")
        make_case(name, CASES[name], args.out, args.f64_check)
    return 0


if __name__ == "__main__":
    sys.exit(main())
