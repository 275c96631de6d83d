/* Winograd F(2x2, 3x3) for the 3x3x3 convs with cin and cout >= W22_WINOGRAD (default 512; 0: off; docs/PERF.md
 * v17-v18), over the spatial taps, not fused: per input frame an input transform into 16 components V = B^T d B
 * (bf16, 4x the frame's bytes), the 16 GEMMs as one launch of the TMA conv (3x1x1 convs over the components' frames
 * with U = G g G^T per temporal tap: 12 of the direct conv's 27 MACs per output), and an output transform
 * Y = A^T M A + bias (+ the residual, or the shortcut's 1x1 GEMM written first). V and M live in the caller's free
 * memory (w22_conv_args.work: in a decode, what the stage leaves free), in bands of tile rows that fit it, so the
 * path adds nothing to the workspace. Its error is about 2.2x the direct conv's (dev/winograd_probe.cu); f121 is
 * checked at 0.33 of the bench's allowance with it, 0.25 without (v18). */
#include <stdlib.h>
#include <string.h>
#include "cuda_internal.h"
#include "lower.h"

/* VW bf16 channels (8: one 16-byte vector; 4: 8 bytes) <-> VW floats */
template <int VW> struct w_vec;
template <> struct w_vec<8> { typedef uint4 t; };
template <> struct w_vec<4> { typedef uint2 t; };
template <int VW> static __device__ __forceinline__ void w_unpack(const typename w_vec<VW>::t &u, float *f) {
    const __nv_bfloat162 *h = (const __nv_bfloat162 *)&u;
#pragma unroll
    for (int k = 0; k < VW / 2; k++) {
        const float2 v = __bfloat1622float2(h[k]);
        f[2 * k] = v.x, f[2 * k + 1] = v.y;
    }
}
template <int VW> static __device__ __forceinline__ void w_load(const bf16 *p, float *f) {
    w_unpack<VW>(*(const typename w_vec<VW>::t *)p, f);
}
template <int VW> static __device__ __forceinline__ void w_store(bf16 *p, const float *f) {
    typename w_vec<VW>::t u;
    __nv_bfloat162 *h = (__nv_bfloat162 *)&u;
#pragma unroll
    for (int k = 0; k < VW / 2; k++) h[k] = __floats2bfloat162_rn(f[2 * k], f[2 * k + 1]);
    *(typename w_vec<VW>::t *)p = u;
}

/* Input frames (up to W22_WINO_FRAMES a launch, blockIdx.y the frame): V[xi = 4i + j](f, ty, tx, c) = (B^T d B)[i][j],
 * d the 4 x 4 window of frame f at rows 2ty - 1.., cols 2tx - 1.. (x readable one pixel beyond its edges: the conv's
 * zero border); B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1]. A thread: one tile, VW channels (WINO_VW,
 * 4 since v19); the window held as loaded (bf16: half the registers of floats), each output row of B^T d B made from
 * two of its rows. The kernel is DRAM-bound (ncu, v22: 72% of the DRAM peak; 0.85 GB moved, the input read once and
 * V written once); two tiles a thread (sharing two window columns: 24 loads for 2 tiles instead of 32) came out even. */
struct w22_wino_frames {
    const bf16 *p[W22_WINO_FRAMES];
};
template <int VW>
__global__ void __launch_bounds__(256, VW == 4 ? 4 : 2)
    w22_wino_in_kernel(const __grid_constant__ w22_wino_frames x, long xsh, long xsw, bf16 *__restrict__ v, long vcs,
                       long vsf, long vsh, long vsw, int h2, int w2, int C) {
    typedef typename w_vec<VW>::t vec;
    const long i = (long)blockIdx.x * blockDim.x + threadIdx.x, cv = C / VW;
    if (i >= (long)h2 * w2 * cv) return;
    const int c = (int)(i % cv) * VW, tx = (int)(i / cv % w2), ty = (int)(i / cv / w2);
    const bf16 *p = x.p[blockIdx.y] + (2 * ty - 1) * xsh + (2 * tx - 1) * xsw + c;
    vec raw[4][4];
#pragma unroll
    for (int s = 0; s < 4; s++)
#pragma unroll
        for (int r = 0; r < 4; r++) raw[r][s] = *(const vec *)(p + r * xsh + s * xsw);
    bf16 *q = v + blockIdx.y * vsf + ty * vsh + tx * vsw + c;
#pragma unroll
    for (int r = 0; r < 4; r++) { /* row r of B^T d: rows (0, 2), (1, 2), (2, 1), (1, 3) of d, +- */
        const int ra = r == 0 ? 0 : r == 2 ? 2 : 1, rb = r == 0 ? 2 : r == 3 ? 3 : r == 1 ? 2 : 1;
        const float sg = r == 1 ? 1.f : -1.f;
        float t[4][VW], o[4][VW];
#pragma unroll
        for (int s = 0; s < 4; s++) {
            float da[VW], db[VW];
            w_unpack<VW>(raw[ra][s], da);
            w_unpack<VW>(raw[rb][s], db);
#pragma unroll
            for (int k = 0; k < VW; k++) t[s][k] = da[k] + sg * db[k];
        }
#pragma unroll
        for (int k = 0; k < VW; k++) {
            o[0][k] = t[0][k] - t[2][k];
            o[1][k] = t[1][k] + t[2][k];
            o[2][k] = t[2][k] - t[1][k];
            o[3][k] = t[1][k] - t[3][k];
        }
#pragma unroll
        for (int s = 0; s < 4; s++) w_store<VW>(q + (4 * r + s) * vcs, o[s]);
    }
}

/* y(f, 2ty + a, 2tx + b, c) = (A^T M A)[a][b] + bias[c] + res(f, 2ty + a, 2tx + b, c), M[i][j] = m[4i + j](f, ty, tx, c);
 * A^T = [1 1 1 0; 0 1 -1 -1]. res may alias y: a thread reads its four pixels' residual before it writes them. */
template <int VW>
__global__ void w22_wino_out_kernel(const bf16 *m, long mcs, long msf, long msh, long msw, bf16 *y, long ysf, long ysh,
                                    long ysw, const bf16 *res, long rsf, long rsh, long rsw, const float *bias, int F,
                                    int h2, int w2, int C) {
    const long i = (long)blockIdx.x * blockDim.x + threadIdx.x, cv = C / VW;
    if (i >= (long)F * h2 * w2 * cv) return;
    const int c = (int)(i % cv) * VW, tx = (int)(i / cv % w2), ty = (int)(i / cv / w2 % h2), f = (int)(i / cv / w2 / h2);
    const bf16 *p = m + f * msf + ty * msh + tx * msw + c;
    float r[2][4][VW];
#pragma unroll
    for (int s = 0; s < 4; s++) {
        float a[4][VW];
#pragma unroll
        for (int k4 = 0; k4 < 4; k4++) w_load<VW>(p + (4 * k4 + s) * mcs, a[k4]);
#pragma unroll
        for (int k = 0; k < VW; k++) {
            r[0][s][k] = a[0][k] + a[1][k] + a[2][k];
            r[1][s][k] = a[1][k] - a[2][k] - a[3][k];
        }
    }
    float b[VW], o[2][2][VW];
#pragma unroll
    for (int k = 0; k < VW; k++) b[k] = bias ? bias[c + k] : 0.f;
#pragma unroll
    for (int a = 0; a < 2; a++)
#pragma unroll
        for (int k = 0; k < VW; k++) {
            o[a][0][k] = r[a][0][k] + r[a][1][k] + r[a][2][k] + b[k];
            o[a][1][k] = r[a][1][k] - r[a][2][k] - r[a][3][k] + b[k];
        }
    if (res) {
        const bf16 *rp = res + f * rsf + 2 * ty * rsh + 2 * tx * rsw + c;
#pragma unroll
        for (int a = 0; a < 2; a++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                float rv[VW];
                w_load<VW>(rp + a * rsh + e * rsw, rv);
#pragma unroll
                for (int k = 0; k < VW; k++) o[a][e][k] += rv[k];
            }
    }
    bf16 *q = y + f * ysf + 2 * ty * ysh + 2 * tx * ysw + c;
#pragma unroll
    for (int a = 0; a < 2; a++)
#pragma unroll
        for (int e = 0; e < 2; e++) w_store<VW>(q + a * ysh + e * ysw, o[a][e]);
}

/* The transforms run 4 channels a thread (v19: 8-byte accesses, 54-56 registers, 32 warps an SM; the input
 * transform 2.4 -> 3.1 TB/s, f121 -2.5% against v18's 8 channels: 88-102 registers, 16 warps, too few loads in
 * flight). */
#define WINO_VW 4

template <int VW>
static void wino_in_launch(cudaStream_t st, const w22_wino_frames &x, int nf, long xsh, long xsw, bf16 *v, long vcs,
                           long vsf, long vsh, long vsw, int h2, int w2, int C) {
    const long n = (long)h2 * w2 * (C / VW);
    w22_wino_in_kernel<VW><<<dim3((unsigned)((n + 255) / 256), (unsigned)nf), 256, 0, st>>>(x, xsh, xsw, v, vcs, vsf,
                                                                                            vsh, vsw, h2, w2, C);
}

/* The transforms' launches (also dev/winograd_probe.s): nf <= W22_WINO_FRAMES input frames x[j] (h2 x w2 tiles, C
 * channels, the same strides) into V's 16 components (vcs elements apart; frame j at j vsf) in one launch; F
 * frames of M's components into y (+ bias, + res: NULL for none). */
w22_status w22_cuda_wino_in(cudaStream_t st, const bf16 *const *x, int nf, long xsh, long xsw, bf16 *v, long vcs,
                            long vsf, long vsh, long vsw, int h2, int w2, int C) {
    if (nf < 1 || nf > W22_WINO_FRAMES)
        return w22_fail(W22_ERR_INTERNAL, "winograd input transform: %d frames, expected 1 to %d", nf, W22_WINO_FRAMES);
    w22_wino_frames f;
    for (int j = 0; j < W22_WINO_FRAMES; j++) f.p[j] = j < nf ? x[j] : NULL;
    wino_in_launch<WINO_VW>(st, f, nf, xsh, xsw, v, vcs, vsf, vsh, vsw, h2, w2, C);
    CU_TRY(cudaGetLastError());
    return W22_OK;
}

w22_status w22_cuda_wino_out(cudaStream_t st, const bf16 *m, long mcs, long msf, long msh, long msw, bf16 *y, long ysf,
                             long ysh, long ysw, const bf16 *res, long rsf, long rsh, long rsw, const float *bias, int F,
                             int h2, int w2, int C) {
    const long n = (long)F * h2 * w2 * (C / WINO_VW);
    w22_wino_out_kernel<WINO_VW><<<(unsigned)((n + 255) / 256), 256, 0, st>>>(m, mcs, msf, msh, msw, y, ysf, ysh, ysw,
                                                                               res, rsf, rsh, rsw, bias, F, h2, w2, C);
    CU_TRY(cudaGetLastError());
    return W22_OK;
}

/* W22_WINOGRAD=N: the 3x3x3 convs with cin and cout >= N take the path (default 512; 0: off). Read at each
 * backend's create (no cached copy: backends are created on any thread, and a lazily set static was a race). */
int w22_cuda_winograd_min_cin(void) {
    const char *e = getenv("W22_WINOGRAD");
    const int v = e ? atoi(e) : W22_WINO_MIN_DEFAULT;
    return v < 0 ? 0 : v;
}

/* The 16 components' weights of a 3x3x3 conv weight (float [cout][cin][3][3][3]): component xi's B operand
 * [cout][dt][cin] bf16 (K-major, K = 3 cin), the components contiguous. G = [1 0 0; .5 .5 .5; .5 -.5 .5; 0 0 1]. */
/* Whether conv a takes the Winograd path (route.h's rule); NULL: it does, else why not. */
const char *w22_cuda_winograd_blocker(const w22_conv_args *a, const w22_cuda_weight *w) {
    return w22_route_winograd_blocker(a, w->cin, w->cout, w->dev_wino != NULL,
                                      w22_route_wino_row_bytes(a->out.f, a->out.w / 2, w->cin, w->cout));
}

/* One band: tile rows [ty0, ty0 + hh) of the output (rows 2 ty0..), the 16 GEMMs and both transforms, V and M the
 * band's (component-major). */
static w22_status wino_band(w22_cuda *c, const w22_cuda_weight *w, const w22_mm *g, bf16 *V, bf16 *M, int ty0, int hh,
                            int w2, const bf16 *res, long rsf, long rsh, long rsw) {
    const int F = g->F, ci = w->cin, co = w->cout, FI = F + 2;
    const long vcs = (long)FI * hh * w2 * ci, mcs = (long)F * hh * w2 * co; /* a component's elements */
    int part = w22_cuda_prof_part_begin(c); /* W22_PROFILE=2: the transforms and the GEMMs apart */
    for (int j0 = 0; j0 < FI; j0 += W22_WINO_FRAMES) { /* frames j0.. in one launch */
        const bf16 *xf[W22_WINO_FRAMES];
        const int n = FI - j0 < W22_WINO_FRAMES ? FI - j0 : W22_WINO_FRAMES;
        for (int j = 0; j < n; j++) xf[j] = w22_gemm_frame(*g, j0 + j) + 2L * ty0 * g->a_sh;
        W22_TRY(w22_cuda_wino_in(c->stream, xf, n, g->a_sh, g->a_sw, V + (long)j0 * hh * w2 * ci, vcs,
                                 (long)hh * w2 * ci, (long)w2 * ci, ci, hh, w2, ci));
        CU_LAUNCHED(c, "winograd input transform");
    }
    w22_cuda_prof_part_end(c, part, 0, 2.0 * FI * hh * w2 * ci * (4 + 16), "winograd input transform c%d %dx%d f%d", ci,
                           2 * hh, 2 * w2, FI);
    /* the 16 GEMMs (lower.h): one launch where the TMA conv takes the batch (v18; the Hopper path), else one launch of
     * the mma.sync kernel (the portable path), else 16 launches (route.h's w22_route_batch) */
    w22_mm q;
    w22_lower_wino_batch(F, hh, w2, ci, co, (const bf16 *)w->dev_wino, V, M, &q);
    part = w22_cuda_prof_part_begin(c);
    const w22_batch_launch how = w22_route_batch(&q, c->hopper);
    if (how == W22_BATCH_TMA) {
        W22_TRY(w22_cuda_gemm_wgmma_batch(c, &q, "conv (winograd components, one launch)"));
    } else if (how == W22_BATCH_MMA) {
        W22_TRY(w22_cuda_gemm_mma_batch(c, &q, "conv (winograd components, one mma launch)"));
    } else {
        q.batch = 0, q.a_frames = 0;
        memset(q.ph_o, 0, sizeof q.ph_o);
        for (int xi = 0; xi < 16; xi++) {
            w22_mm r = q;
            r.a = V + xi * vcs, r.b = (const bf16 *)w->dev_wino + (size_t)xi * co * 3 * ci, r.out = M + xi * mcs;
            W22_TRY(w22_cuda_gemm(c, &r, "conv (winograd component)"));
        }
    }
    w22_cuda_prof_part_end(c, part, 2.0 * 16 * q.M * co * 3 * ci, 0, "winograd 16 GEMMs %d->%d %dx%d f%d [%s]", ci, co,
                           2 * hh, 2 * w2, F, c->last_path);
    part = w22_cuda_prof_part_begin(c);
    W22_TRY(w22_cuda_wino_out(c->stream, M, mcs, (long)hh * w2 * co, (long)w2 * co, co,
                              (bf16 *)g->out + 2L * ty0 * g->o_sh, g->o_sf, g->o_sh, g->o_sw,
                              res ? res + 2L * ty0 * rsh : NULL, rsf, rsh, rsw, g->bias, F, hh, w2, co));
    CU_LAUNCHED(c, "winograd output transform");
    w22_cuda_prof_part_end(c, part, 0, 2.0 * F * hh * w2 * co * (16 + 4 + (res ? 4 : 0)),
                           "winograd output transform c%d %dx%d f%d%s", co, 2 * hh, 2 * w2, F, res ? " res" : "");
    return W22_OK;
}

w22_status w22_cuda_conv_winograd(w22_cuda *c, const w22_conv_args *a, const w22_cuda_weight *w, const w22_mm *g) {
    const int F = g->F, h2 = a->out.h / 2, w2 = a->out.w / 2, ci = w->cin, co = w->cout, FI = F + 2;
    const size_t row = w22_route_wino_row_bytes(F, w2, ci, co);
    /* the caller's free memory (a decode's: plan.c's w22_stage_free), else the backend's own grow-only scratch;
     * bands of equal height, as few as fit */
    const int own = !a->work;
    const size_t have = own ? (size_t)h2 * row : a->work_bytes;
    int hb = (int)(have / row);
    if (hb < 1) hb = 1;
    if (hb > h2) hb = h2;
    const int nb = (h2 + hb - 1) / hb;
    hb = (h2 + nb - 1) / nb;
    bf16 *V;
    if (!own) {
        V = (bf16 *)a->work;
    } else {
        W22_TRY(w22_cuda_scratch(c, &c->wino_scratch, &c->wino_bytes, (size_t)hb * row, "the Winograd scratch (V, M)"));
        V = (bf16 *)c->wino_scratch;
    }
    bf16 *M = V + (size_t)16 * FI * hb * w2 * ci;
    const bf16 *res = g->res;
    long rsf = g->r_sf, rsh = g->r_sh, rsw = g->r_sw;
    if (g->sc) { /* the shortcut's 1x1 GEMM (its bias, and the residual if any) into out first, then added */
        w22_mm q;
        w22_lower_wino_shortcut(g, &q); /* lower.h */
        const int part = w22_cuda_prof_part_begin(c);
        W22_TRY(w22_cuda_gemm(c, &q, "conv (winograd: the shortcut)"));
        w22_cuda_prof_part_end(c, part, 2.0 * q.M * co * q.cin, 0, "winograd: the shortcut's 1x1 GEMM %d->%d", q.cin, co);
        res = (const bf16 *)g->out, rsf = g->o_sf, rsh = g->o_sh, rsw = g->o_sw;
    }
    for (int ty0 = 0; ty0 < h2; ty0 += hb)
        W22_TRY(wino_band(c, w, g, V, M, ty0, h2 - ty0 < hb ? h2 - ty0 : hb, w2, res, rsf, rsh, rsw));
    c->last_path = "winograd F(2x2,3x3): transforms + 16 GEMMs";
    return W22_OK;
}
