#!/usr/bin/env python3
"""Synthetic weights and latents in numpy, bit for bit as docs/synthetic.md specifies (the C side is
src/weights/synth.c). The weight table mirrors src/model/model.c: diffusers' names and shapes, in diffusers'
named_parameters() order of post_quant_conv + decoder, which is also the tensor index of the generator.

    python3 tools/synth.py --pin      # prints the constants that tests/test_synth.c and tools/test_synth.py pin
"""
import math
import sys

import numpy as np

GAMMA = 0x9E3779B97F4A7C15
M1 = 0xBF58476D1CE4E5B9
M2 = 0x94D049BB133111EB
MASK = (1 << 64) - 1
STREAM_WEIGHTS = 1
STREAM_LATENTS = 2
CHUNK = 1 << 22  # elements per numpy pass: bounds the temporaries (8 bytes each) to a few tens of MB

# The configs of the tests: TI2V-5B, and the narrow one that keeps every structural feature; the Wan2.1 VAE
# (is_residual 0: diffusers' AutoencoderKLWan defaults) and its narrow version.
TI2V_5B = dict(z_dim=48, base_dim=256, dim_mult=(1, 2, 4, 4), num_res_blocks=2, temporal_up=(1, 1, 0),
               out_channels=12, patch_size=2, is_residual=1)
NARROW = dict(TI2V_5B, z_dim=8, base_dim=16)
WAN21 = dict(z_dim=16, base_dim=96, dim_mult=(1, 2, 4, 4), num_res_blocks=2, temporal_up=(1, 1, 0),
             out_channels=3, patch_size=1, is_residual=0)
NARROW21 = dict(WAN21, z_dim=4, base_dim=8)


def mix_int(z):
    """splitmix64's finalizer on a Python int (mod 2^64)."""
    z &= MASK
    z = ((z ^ (z >> 30)) * M1) & MASK
    z = ((z ^ (z >> 27)) * M2) & MASK
    return z ^ (z >> 31)


def key(seed, stream, tensor):
    return mix_int((mix_int((seed + GAMMA * stream) & MASK) + GAMMA * (tensor + 1)) & MASK)


def mix_arr(z):
    """The same on a uint64 array (numpy's array arithmetic wraps mod 2^64 without a warning)."""
    z = (z ^ (z >> np.uint64(30))) * np.uint64(M1)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(M2)
    return z ^ (z >> np.uint64(31))


def bits(k, i0, n):
    """bits(k, i) for i in [i0, i0 + n)."""
    idx = np.arange(i0 + 1, i0 + n + 1, dtype=np.uint64)
    return mix_arr(idx * np.uint64(GAMMA) + np.uint64(k))


def v_of(b):
    """2u - 1 with u = (b >> 40) * 2^-24, as float64 (exact)."""
    return (b >> np.uint64(40)).astype(np.float64) * (2.0 ** -23) - 1.0


def u_of(b):
    return (b >> np.uint64(40)).astype(np.float64) * (2.0 ** -24)


def weight_table(cfg):
    """[(name, shape, kind, fan_in)] in model.c's order; kind is 'weight', 'bias' or 'gamma'."""
    t = []

    def conv(prefix, cout, cin, kernel):
        fan = cin * int(np.prod(kernel))
        t.append((prefix + ".weight", (cout, cin) + tuple(kernel), "weight", fan))
        t.append((prefix + ".bias", (cout,), "bias", fan))

    def gamma(prefix, c, images=False):
        t.append((prefix + ".gamma", (c, 1, 1) if images else (c, 1, 1, 1), "gamma", 0))

    def resblock(prefix, cin, cout):
        gamma(prefix + ".norm1", cin)
        conv(prefix + ".conv1", cout, cin, (3, 3, 3))
        gamma(prefix + ".norm2", cout)
        conv(prefix + ".conv2", cout, cout, (3, 3, 3))
        if cin != cout:
            conv(prefix + ".conv_shortcut", cout, cin, (1, 1, 1))

    base, dm, z = cfg["base_dim"], cfg["dim_mult"], cfg["z_dim"]
    dims = [base * dm[3]] + [base * dm[3 - i] for i in range(4)]
    c0 = dims[0]
    conv("post_quant_conv", z, z, (1, 1, 1))
    conv("decoder.conv_in", c0, z, (3, 3, 3))
    ap = "decoder.mid_block.attentions.0"
    gamma(ap + ".norm", c0, images=True)
    conv(ap + ".to_qkv", 3 * c0, c0, (1, 1))
    conv(ap + ".proj", c0, c0, (1, 1))
    resblock("decoder.mid_block.resnets.0", c0, c0)
    resblock("decoder.mid_block.resnets.1", c0, c0)
    res = cfg.get("is_residual", 1)
    for b in range(4):
        cin, cout = dims[b], dims[b + 1]
        if b > 0 and not res:
            cin //= 2  # Wan2.1: the previous upsampler halved the channels
        c = cin
        for r in range(cfg["num_res_blocks"] + 1):
            resblock(f"decoder.up_blocks.{b}.resnets.{r}", c, cout)
            c = cout
        if b != 3:
            up = "upsampler" if res else "upsamplers.0"
            conv(f"decoder.up_blocks.{b}.{up}.resample.1", cout if res else cout // 2, cout, (3, 3))
            if cfg["temporal_up"][b]:
                conv(f"decoder.up_blocks.{b}.{up}.time_conv", 2 * cout, cout, (3, 1, 1))
    gamma("decoder.norm_out", dims[4])
    conv("decoder.conv_out", cfg["out_channels"], dims[4], (3, 3, 3))
    return t


def synth_tensor(kind, fan_in, shape, seed, t):
    n = int(np.prod(shape))
    k = key(seed, STREAM_WEIGHTS, t)
    out = np.empty(n, dtype=np.float32)
    b = 1.0 / math.sqrt(fan_in) if fan_in > 0 else 0.0
    for i0 in range(0, n, CHUNK):
        m = min(CHUNK, n - i0)
        v = v_of(bits(k, i0, m))
        if kind == "weight":
            x = b * v
        elif kind == "bias":
            x = (b * v) * 0.1
        else:
            x = 1.0 + 0.1 * v
        out[i0:i0 + m] = x.astype(np.float32)
    return out.reshape(shape)


def synth_weights(cfg, seed):
    """{diffusers name: float32 array} for post_quant_conv + decoder, in the generator's (model.c's) order."""
    return {name: synth_tensor(kind, fan, shape, seed, t)
            for t, (name, shape, kind, fan) in enumerate(weight_table(cfg))}


def synth_latents(cfg, seed, T, h, w):
    """float32 [1, z_dim, T, h, w]."""
    C = cfg["z_dim"]
    kx, km, ks = (key(seed, STREAM_LATENTS, i) for i in range(3))
    m = v_of(bits(km, 0, C))
    s = 0.5 + 1.5 * u_of(bits(ks, 0, C))
    a = s * math.sqrt(3.0)
    per = T * h * w
    v = v_of(bits(kx, 0, C * per)).reshape(C, per)
    x = m[:, None] + a[:, None] * v  # numpy: the product is rounded, then the sum (no FMA)
    return x.astype(np.float32).reshape(1, C, T, h, w)


# ---- pinned values (tests/test_synth.c holds the same) ----
def f32_bits(x):
    return int(np.float32(x).view(np.uint32))


def checksum(a):
    """sum over i of (i + 1) * bits(a[i]) mod 2^64: order-sensitive, exact, the same in C."""
    b = np.ascontiguousarray(a, dtype=np.float32).reshape(-1).view(np.uint32).astype(np.uint64)
    i = np.arange(1, b.size + 1, dtype=np.uint64)
    return int(np.sum(b * i, dtype=np.uint64))


PIN_TENSORS = ["post_quant_conv.weight", "post_quant_conv.bias", "decoder.conv_in.weight",
               "decoder.mid_block.attentions.0.norm.gamma", "decoder.mid_block.attentions.0.to_qkv.bias",
               "decoder.up_blocks.0.upsampler.time_conv.weight", "decoder.up_blocks.2.resnets.0.conv_shortcut.weight",
               "decoder.up_blocks.3.resnets.2.norm2.gamma", "decoder.conv_out.bias"]


def pins():
    """[(label, config name, seed, what, index, float32 bits)] and checksums [(label, value)]."""
    vals, sums = [], []
    for cname, seed in (("narrow", 0), ("narrow", 12345), ("ti2v5b", 0)):
        cfg = NARROW if cname == "narrow" else TI2V_5B
        table = weight_table(cfg)
        names = [t[0] for t in table]
        for name in PIN_TENSORS:
            ti = names.index(name)
            _, shape, kind, fan = table[ti]
            a = synth_tensor(kind, fan, shape, seed, ti).reshape(-1)
            for i in sorted({0, a.size // 2, a.size - 1}):
                vals.append((cname, seed, name, i, f32_bits(a[i])))
        if cname == "narrow":
            total = 0
            for ti, (name, shape, kind, fan) in enumerate(table):
                total = (total + (ti + 1) * checksum(synth_tensor(kind, fan, shape, seed, ti))) & MASK
            sums.append((cname, seed, "weights", total))
    for cname, seed, T, h, w in (("narrow", 7, 3, 5, 7), ("ti2v5b", 7, 2, 3, 4)):
        cfg = NARROW if cname == "narrow" else TI2V_5B
        a = synth_latents(cfg, seed, T, h, w).reshape(-1)
        for i in sorted({0, 1, a.size // 2, a.size - 1}):
            vals.append((cname, seed, f"latents {T}x{h}x{w}", i, f32_bits(a[i])))
        sums.append((cname, seed, f"latents {T}x{h}x{w}", checksum(a)))
    return vals, sums


def main():
    if sys.argv[1:] != ["--pin"]:
        print(__doc__.strip())
        return 2
    vals, sums = pins()
    print("/* values: config, seed, tensor, flat index, float32 bits */")
    for cname, seed, what, i, b in vals:
        f = float(np.array([b], dtype=np.uint32).view(np.float32)[0])
        print(f'    {{"{cname}", {seed}, "{what}", {i}, 0x{b:08x}u}}, /* {f:.9g} */')
    print("/* checksums: config, seed, what, sum of (i + 1) x bits(x[i]) mod 2^64 */")
    for cname, seed, what, s in sums:
        print(f'    {{"{cname}", {seed}, "{what}", 0x{s:016x}ull}},')
    return 0


if __name__ == "__main__":
    sys.exit(main())
