#!/usr/bin/env python3
"""A probe, not a product path (issue 46's lever "larger Winograd tiles with fp16 operands"): the error of a 3x3x3
causal conv computed as the decoder's GPU path computes it, against float64, for

    direct      bf16 inputs and weights, fp32 accumulation (the direct conv, cin < 512)
    F2          Winograd F(2x2, 3x3): V = B^T d B and U = G g G^T rounded to bf16, the GEMMs' M stored in bf16 (the
                Winograd path today, cin and cout >= 512), and with M in fp32
    F4          Winograd F(4x4, 3x3) on the points 0, +-1, +-2 (Lavin's) and on other point sets (--points: their
                transforms built by toom_cook), operands in bf16 or fp16 (3 more mantissa bits, the same
                tensor-core rate), M in bf16, fp16 or fp32
    F6          F(6x6, 3x3) for scale (--hw a multiple of 12)

on the same random bf16 input (each tap frame: silu(rmsnorm(.)) of Gaussian pixels, as every decoder conv's input is)
and float32 weights (uniform, scaled to keep the outputs O(1)). The temporal taps sum inside the GEMM's K (fp32), as
the Winograd path's 3x1x1 batch GEMMs do; the output transform runs in fp32 and the output is rounded to bf16 (the
reference is not). Prints, per variant: the RMS error and the largest error over the outputs' RMS, and each as a
multiple of the direct conv's, and how far the transforms
amplify the largest values (|V| over |d|, |M| over |y|: fp16's range). The decode's allowance is 3x diffusers' bf16 error; F2 bf16's 2.1-2.3x the direct
conv's error is what v17-v18 measured on the GPU and took (docs/PERF.md).

    python3 dev/winograd_f4_probe.py [--cin 512] [--cout 48] [--hw 24] [--seeds 3]

numpy only; the transforms are checked exact in float64 before the runs.
"""
import argparse
import numpy as np

BT2 = np.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]], dtype=np.float64)
G2 = np.array([[1, 0, 0], [.5, .5, .5], [.5, -.5, .5], [0, 0, 1]], dtype=np.float64)
AT2 = np.array([[1, 1, 1, 0], [0, 1, -1, -1]], dtype=np.float64)



def toom_cook(points, m=4, r=3):
    """F(m, r)'s A^T, G, B^T from its n - 1 finite points and infinity (A^T's columns are the points' powers, G's rows
    the kernel's values at them over the Lagrange denominators; B^T solved from y = A^T [(G g) . (B^T d)], which must
    be the correlation for every unit g and d). Rows may be rescaled freely (a_j g_j b_j = 1): floating-point rounding
    is relative, so the points alone set the error."""
    n = m + r - 1
    pts = [float(q) for q in points]
    assert len(pts) == n - 1
    AT, G = np.zeros((m, n)), np.zeros((n, r))
    for j, q in enumerate(pts):
        AT[:, j] = [q ** i for i in range(m)]
        f = np.prod([q - o for l, o in enumerate(pts) if l != j])
        G[j] = [q ** k / f for k in range(r)]
    AT[m - 1, n - 1] = G[n - 1, r - 1] = 1
    rows = np.array([AT[i] * G[:, k] for i in range(m) for k in range(r)])
    BT = np.zeros((n, n))
    for l in range(n):
        rhs = np.array([1.0 if l == i + k else 0.0 for i in range(m) for k in range(r)])
        BT[:, l] = np.linalg.lstsq(rows, rhs, rcond=None)[0]
    assert np.abs(rows @ BT - np.array([[1.0 if l == i + k else 0.0 for l in range(n)] for i in range(m)
                                        for k in range(r)])).max() < 1e-9
    return BT, G, AT


def bf16(x):
    """Round to bfloat16 (nearest even), returned as float64."""
    f = np.asarray(x, dtype=np.float32)
    u = f.view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000
    return u.astype(np.uint32).view(np.float32).astype(np.float64)


def fp16(x):
    return np.asarray(x, dtype=np.float64).astype(np.float16).astype(np.float64)


def fp32(x):
    return np.asarray(x, dtype=np.float64).astype(np.float32).astype(np.float64)


def direct(d, w):
    """d [3][C][H+2][W+2] (zero border), w [O][C][3][3][3] -> [O][H][W], float64 sums."""
    _, C, H2, W2 = d.shape
    H, W = H2 - 2, W2 - 2
    out = np.zeros((w.shape[0], H, W))
    for t in range(3):
        for dy in range(3):
            for dx in range(3):
                out += np.einsum('oc,chw->ohw', w[:, :, t, dy, dx], d[t, :, dy:dy + H, dx:dx + W], optimize=True)
    return out


def winograd(d, w, BT, G, AT, rnd, mrnd=None, stats=None):
    """F(m x m, 3 x 3) per temporal tap, summed in K: operands rounded by rnd, M accumulated in float64 (fp32
    accumulation's error is far below the operands' rounding) and stored rounded by mrnd (the GEMM's epilogue: bf16
    today), the output transform in fp32. stats: a dict given the largest |V| and |M|."""
    n = BT.shape[0]
    m = AT.shape[0]
    _, C, H2, W2 = d.shape
    H, W = H2 - 2, W2 - 2
    ty, tx = H // m, W // m
    O = w.shape[0]
    M = np.zeros((O, ty, tx, n, n))
    for t in range(3):
        U = rnd(np.einsum('ia,ocab,jb->ocij', G, w[:, :, t], G))  # [O][C][n][n]
        # the input tiles: [C][ty][tx][n][n], stride m, overlapping by 2
        tiles = np.lib.stride_tricks.sliding_window_view(d[t], (n, n), axis=(1, 2))[:, ::m, ::m][:, :ty, :tx]
        V = rnd(fp32(np.einsum('ia,cyxab,jb->cyxij', BT, tiles, BT, optimize=True)))
        M += np.einsum('ocij,cyxij->oyxij', U, V, optimize=True)
    if stats is not None:
        stats['V'] = max(stats.get('V', 0), float(np.abs(V).max()))
        stats['M'] = max(stats.get('M', 0), float(np.abs(M).max()))
    M = (mrnd or fp32)(M)
    Y = fp32(np.einsum('ki,oyxij,lj->oykxl', AT, M, AT, optimize=True))  # [O][ty][m][tx][m]
    return Y.reshape(O, ty * m, tx * m)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--cin', type=int, default=512)
    ap.add_argument('--cout', type=int, default=48)
    ap.add_argument('--hw', type=int, default=24, help='output rows and columns (a multiple of 4)')
    ap.add_argument('--seeds', type=int, default=3)
    ap.add_argument('--points', nargs='*', default=['0,1,-1,0.5,-2', '0,1,-1,0.5,-0.5'],
                    help='F(4x4, 3x3) point sets to try in fp16 beside Lavin\'s, comma-separated (5 finite points)')
    a = ap.parse_args()
    assert a.hw % 4 == 0
    # exactness of the transforms in float64
    rng = np.random.default_rng(0)
    d0 = rng.standard_normal((3, 4, 10, 10))
    w0 = rng.standard_normal((3, 4, 3, 3, 3))
    ident = lambda x: x
    for BT, G, AT in [(BT2, G2, AT2)] + [toom_cook([float(v) for v in q.split(',')]) for q in ['0,1,-1,2,-2'] + a.points]:
        ref = direct(d0, w0)
        got = winograd(d0, w0, BT, G, AT, ident)
        # fp32 rounding of V, M and Y is in the model; compare loosely
        assert np.abs(got - ref).max() < 1e-4 * np.abs(ref).max(), (np.abs(got - ref).max(), np.abs(ref).max())
    variants = {  # name: (points or None for F2, m, operand rounding, M's rounding)
        'F2 bf16, M bf16 (today)': (None, 2, bf16, bf16),
        'F2 bf16, M fp32': (None, 2, bf16, fp32),
        'F4 Lavin bf16, M bf16': ('0,1,-1,2,-2', 4, bf16, bf16),
        'F4 Lavin fp16, M fp16': ('0,1,-1,2,-2', 4, fp16, fp16),
    }
    for q in a.points:
        for mn, mr in (('fp16', fp16), ('fp32', fp32), ('bf16', bf16)):
            variants[f'F4 {q} fp16, M {mn}'] = (q, 4, fp16, mr)
    if a.hw % 6 == 0:
        variants['F6 0,1,-1,.5,-.5,2,-2 fp16, M fp16'] = ('0,1,-1,0.5,-0.5,2,-2', 6, fp16, fp16)
    mats = {k: ((BT2, G2, AT2) if v[0] is None else toom_cook([float(x) for x in v[0].split(',')], m=v[1]))
            for k, v in variants.items()}
    names = ['direct'] + list(variants)
    rms = {k: [] for k in names}
    mx = {k: [] for k in names}
    stats = {k: {} for k in names}
    for s in range(a.seeds):
        rng = np.random.default_rng(100 + s)
        x = rng.standard_normal((3, a.cin, a.hw, a.hw))
        x = x / np.sqrt((x * x).mean(axis=1, keepdims=True))  # rmsnorm over channels (gamma 1)
        x = x / (1 + np.exp(-x))  # silu
        d = np.zeros((3, a.cin, a.hw + 2, a.hw + 2))
        d[:, :, 1:-1, 1:-1] = bf16(x)
        bound = 1 / np.sqrt(27 * a.cin)
        w = fp32(rng.uniform(-bound, bound, (a.cout, a.cin, 3, 3, 3)) * np.sqrt(3))
        ref = direct(d, w)
        scale = np.sqrt((ref * ref).mean())
        outs = {'direct': bf16(direct(d, bf16(w)))}
        for k, (_, _, rnd, mrnd) in variants.items():
            BT, G, AT = mats[k]
            outs[k] = bf16(winograd(d, w, BT, G, AT, rnd, mrnd, stats[k]))
            stats[k]['d'], stats[k]['Y'] = float(np.abs(d).max()), float(np.abs(ref).max())
        for k, o in outs.items():
            e = o - ref
            rms[k].append(np.sqrt((e * e).mean()) / scale)
            mx[k].append(np.abs(e).max() / scale)
    print(f'cin {a.cin}, {a.cout} output channels sampled, {a.hw}x{a.hw} outputs, {a.seeds} seeds; errors over the '
          f'outputs\' RMS, and as a multiple of the direct conv\'s')
    r0, m0 = np.mean(rms['direct']), np.mean(mx['direct'])
    for k in names:
        r, m = np.mean(rms[k]), np.mean(mx[k])
        st = stats[k]
        amp = f'   |V| <= {st["V"] / st["d"]:.1f} |d|, |M| <= {st["M"] / st["Y"]:.1f} |y|' if st else ''
        print(f'  {k:36s}  rms {r:.3e} (x{r / r0:.2f})   max {m:.3e} (x{m / m0:.2f}){amp}')


if __name__ == '__main__':
    main()
