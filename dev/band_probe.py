"""Issue 44's band decode, proved with diffusers' own modules (CPU, float64): the decoder's conv_in and mid block
(whose attention sees the whole frame) run on the whole latent frame, everything after them on a band of latent rows
widened by H rows each side (zero padding at the band's cut, as at the frame's edge), and the band's own rows are
kept. Prints, per H, the largest difference from the whole-frame decode over the kept rows: the smallest H at
rounding level is the halo the plan must carry. Wan2.1's structure (and TI2V-5B's with --ti2v), narrow channels.
  python3 dev/band_probe.py [--ti2v] [--cut=K: the first K up blocks on the whole frame too; default 0]"""
import sys, torch
from diffusers import AutoencoderKLWan
from diffusers.models.autoencoders.autoencoder_kl_wan import CACHE_T

torch.manual_seed(0)
ti2v = "--ti2v" in sys.argv
if ti2v:
    cfg = dict(base_dim=16, decoder_base_dim=16, z_dim=8, dim_mult=[1, 2, 4, 4], num_res_blocks=2,
               temperal_downsample=[False, True, True], is_residual=True, patch_size=2, in_channels=12, out_channels=12,
               scale_factor_spatial=16)
else:
    cfg = dict(base_dim=16, z_dim=4, dim_mult=[1, 2, 4, 4], num_res_blocks=2, temperal_downsample=[False, True, True])
vae = AutoencoderKLWan(**cfg).double().eval()
for p in vae.parameters():  # diffusers zero-inits nothing that matters here, but make every weight count
    p.data.normal_(0, 0.2)
dec = vae.decoder
T, R, C = 3, 24, 6
z = torch.randn(1, cfg["z_dim"], T, R, C, dtype=torch.float64)


def cached(conv, x, cache, i):
    cache_x = x[:, :, -CACHE_T:].clone()
    if cache_x.shape[2] < 2 and cache[i] is not None:
        cache_x = torch.cat([cache[i][:, :, -1:], cache_x], dim=2)
    y = conv(x, cache[i])
    cache[i] = cache_x
    return y


CUT = int(next((a.split("=")[1] for a in sys.argv if a.startswith("--cut=")), "0"))  # up blocks in the front


def front(x, cache, first):  # conv_in, the mid block and CUT up blocks: the whole frame
    idx = [1]
    x = cached(dec.conv_in, x, cache, 0)
    x = dec.mid_block(x, feat_cache=cache, feat_idx=idx)
    for ub in dec.up_blocks[:CUT]:
        x = ub(x, feat_cache=cache, feat_idx=idx, first_chunk=first)
    return x


def back(x, cache, first):  # the other up blocks and the head: a band
    idx = [0]
    for ub in dec.up_blocks[CUT:]:
        x = ub(x, feat_cache=cache, feat_idx=idx, first_chunk=first)
    x = dec.nonlinearity(dec.norm_out(x))
    return cached(dec.conv_out, x, cache, idx[0])


def decode(r0, r1):  # latent rows [r0, r1) of the back half (the whole frame: 0, R)
    x = vae.post_quant_conv(z)
    ca, cb, out = [None] * 64, [None] * 64, []
    for t in range(T):
        f = front(x[:, :, t:t + 1], ca, t == 0)
        k = f.shape[3] // R  # the front's rows a latent row
        out.append(back(f[:, :, :, r0 * k:r1 * k], cb, t == 0))
    y = torch.cat(out, 2)
    if ti2v:
        y = vae.unpatchify(y, patch_size=2) if hasattr(vae, "unpatchify") else y
    return y


with torch.no_grad():
    ref = decode(0, R)
    s = ref.shape[3] // R  # video rows per latent row
    print(f"{'TI2V-5B' if ti2v else 'Wan2.1'} structure, the band after {CUT} up blocks, latents {T}x{R}x{C}, video {tuple(ref.shape)}, {s} rows a latent row")
    lo, hi = 8, 16  # the kept band: latent rows [8, 16)
    for H in range(0, 9):
        y = decode(lo - H, hi + H)
        keep = y[:, :, :, H * s:(H + hi - lo) * s]
        err = (keep - ref[:, :, :, lo * s:hi * s]).abs().max().item()
        print(f"H {H}: max |band - whole| over the kept rows {err:.3e}")
