/* Winograd F(4x4, 3x3) for the 3x3x3 convs with cin and cout >= W22_WINOGRAD (default 256; 0: off; docs/PERF.md
 * v17-v18 for F(2x2, 3x3), session 39 for this form), over the spatial taps, not fused: per input frame an input
 * transform into 36 components V = B^T d B (fp16, 2.25x the frame's bytes), the 36 GEMMs as one launch of the TMA conv
 * or the mma.sync kernel with fp16 operands and an fp16 M (3x1x1 convs over the components' frames with U = G g G^T
 * per temporal tap: 2.25 x 3 of the direct conv's 27 MACs per output), and an output transform Y = A^T M A + bias
 * (+ the residual, or the shortcut's 1x1 GEMM written first); U is made from the conv's direct weights at each conv
 * (w22_wino_u_kernel). The matrices and why these points: weights/winograd4.h.
 * V and M live in the caller's free memory (w22_conv_args.work: in a decode, what the stage leaves free), in bands of
 * tile rows that fit it, so the path adds nothing to the workspace. Any height and width: the last tile row and
 * column read zeros past the frame's border and store only the outputs inside it. */
#include <stdlib.h>
#include <string.h>
#include "cuda_internal.h"
#include "lower.h"
#include "weights/winograd4.h"

/* Two channels a thread in the transforms: the 6 x 6 window held as loaded (one 32-bit register a pixel: bf16x2 in,
 * fp16x2 for M), about 60 registers, where four channels would hold twice the window (~115 registers, half the warps
 * an SM for kernels bound by DRAM). */
static __device__ __forceinline__ float2 w_unpack(uint32_t u) { return __bfloat1622float2(*(const __nv_bfloat162 *)&u); }
static __device__ __forceinline__ float2 h_unpack(uint32_t u) { return __half22float2(*(const __half2 *)&u); }
static __device__ __forceinline__ void w_store2(bf16 *p, float a, float b) {
    *(__nv_bfloat162 *)p = __floats2bfloat162_rn(a, b);
}
static __device__ __forceinline__ void h_store2(__half *p, float a, float b) { *(__half2 *)p = __floats2half2_rn(a, b); }

/* Input frames (up to W22_WINO_FRAMES a launch, blockIdx.y the frame): V[xi = 6i + j](f, ty, tx, c) = (B^T d B)[i][j],
 * d the 6 x 6 window of frame f at rows 4ty - 1.., cols 4tx - 1.. (x readable from row and column -1 to row hv and
 * column wv, the conv's zero border; past them the window reads zeros: the last tile row and column of a size that is
 * not a multiple of 4, whose outputs past the frame the output transform drops, but whose garbage would reach the
 * kept ones through the transforms' sums). A thread: one tile, 2 channels; each row of B^T d made from the held
 * window, then its 6 components stored.
 * The 36 loads are unconditional, each from a readable pixel (its row and column clamped to hv and wv) and zeroed past
 * them after: a load under its own condition was sunk by the compiler to its first use, one or two loads in flight a
 * thread, and the kernel ran at 1.26-1.34 TB/s (session 40's profile); so all 36 issue before the first sum. The index
 * is 32-bit (a frame's h4 w4 C / 2 < 2^31: w22_cuda_wino_in checks it), no 64-bit division. */
struct w22_wino_frames {
    const bf16 *p[W22_WINO_FRAMES];
};
__global__ void __launch_bounds__(256)
    w22_wino_in_kernel(const __grid_constant__ w22_wino_frames x, long xsh, long xsw, __half *__restrict__ v, long vcs,
                       long vsf, long vsh, long vsw, int h4, int w4, int hv, int wv, int C) {
    const float BT[6][6] = W22_W4_BT;
    const unsigned cv = (unsigned)C / 2, i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (unsigned)h4 * (unsigned)w4 * cv) return;
    const unsigned t = i / cv;
    const int c = (int)(i - t * cv) * 2, tx = (int)(t % (unsigned)w4), ty = (int)(t / (unsigned)w4);
    const int y0 = 4 * ty - 1, x0 = 4 * tx - 1;
    const bf16 *p = x.p[blockIdx.y] + c;
    uint32_t raw[6][6];
#pragma unroll
    for (int r = 0; r < 6; r++) {
        const bf16 *row = p + (long)min(y0 + r, hv) * xsh;
#pragma unroll
        for (int s = 0; s < 6; s++) raw[r][s] = __ldg((const unsigned *)(row + (long)min(x0 + s, wv) * xsw));
    }
#pragma unroll
    for (int r = 0; r < 6; r++)
#pragma unroll
        for (int s = 0; s < 6; s++)
            if (y0 + r > hv || x0 + s > wv) raw[r][s] = 0u;
    __half *q = v + blockIdx.y * vsf + ty * vsh + tx * vsw + c;
#pragma unroll
    for (int a = 0; a < 6; a++) {
        float2 t[6]; /* row a of B^T d */
#pragma unroll
        for (int s = 0; s < 6; s++) {
            t[s] = make_float2(0.f, 0.f);
#pragma unroll
            for (int r = 0; r < 6; r++)
                if (BT[a][r] != 0.f) {
                    const float2 d = w_unpack(raw[r][s]);
                    t[s].x += BT[a][r] * d.x, t[s].y += BT[a][r] * d.y;
                }
        }
#pragma unroll
        for (int b = 0; b < 6; b++) {
            float ox = 0.f, oy = 0.f;
#pragma unroll
            for (int s = 0; s < 6; s++)
                if (BT[b][s] != 0.f) ox += t[s].x * BT[b][s], oy += t[s].y * BT[b][s];
            h_store2(q + (6 * a + b) * vcs, ox, oy);
        }
    }
}

/* y(f, 4ty + a, 4tx + b, c) = (A^T M A)[a][b] + bias[c] + res(f, 4ty + a, 4tx + b, c), M[i][j] = m[6i + j](f, ty, tx, c),
 * for the outputs inside the band (rows < ho, columns < wo); blockIdx.y the frame. res may alias y: a thread reads its
 * tile's 16 residuals (each from a pixel inside the band: row and column clamped to ho - 1 and wo - 1, so every load
 * is unconditional and all issue with M's) before it writes any pixel, and no other thread's pixels. A thread: one
 * tile, 2 channels, M held as loaded. 32-bit index: a frame's h4 w4 C / 2 < 2^31 (w22_cuda_wino_out checks it). */
__global__ void __launch_bounds__(256)
    w22_wino_out_kernel(const __half *m, long mcs, long msf, long msh, long msw, bf16 *y, long ysf, long ysh, long ysw,
                        const bf16 *res, long rsf, long rsh, long rsw, const float *bias, int h4, int w4, int ho,
                        int wo, int C) {
    const float AT[4][6] = W22_W4_AT;
    const unsigned cv = (unsigned)C / 2, i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (unsigned)h4 * (unsigned)w4 * cv) return;
    const unsigned t = i / cv;
    const int c = (int)(i - t * cv) * 2, tx = (int)(t % (unsigned)w4), ty = (int)(t / (unsigned)w4), f = blockIdx.y;
    const __half *p = m + f * msf + ty * msh + tx * msw + c;
    uint32_t raw[36], rr[4][4];
#pragma unroll
    for (int k = 0; k < 36; k++) raw[k] = *(const uint32_t *)(p + k * mcs);
    if (res) {
        const bf16 *r0 = res + f * rsf + c;
#pragma unroll
        for (int a = 0; a < 4; a++)
#pragma unroll
            for (int b = 0; b < 4; b++)
                rr[a][b] = *(const uint32_t *)(r0 + (long)min(4 * ty + a, ho - 1) * rsh +
                                               (long)min(4 * tx + b, wo - 1) * rsw);
    }
    const float2 bb = bias ? make_float2(bias[c], bias[c + 1]) : make_float2(0.f, 0.f);
#pragma unroll
    for (int a = 0; a < 4; a++) {
        if (4 * ty + a >= ho) break;
        float2 r[6]; /* row a of A^T M */
#pragma unroll
        for (int j = 0; j < 6; j++) {
            r[j] = make_float2(0.f, 0.f);
#pragma unroll
            for (int ii = 0; ii < 6; ii++)
                if (AT[a][ii] != 0.f) {
                    const float2 mv = h_unpack(raw[6 * ii + j]);
                    r[j].x += AT[a][ii] * mv.x, r[j].y += AT[a][ii] * mv.y;
                }
        }
#pragma unroll
        for (int b = 0; b < 4; b++) {
            if (4 * tx + b >= wo) break;
            float ox = 0.f, oy = 0.f;
#pragma unroll
            for (int j = 0; j < 6; j++)
                if (AT[b][j] != 0.f) ox += r[j].x * AT[b][j], oy += r[j].y * AT[b][j];
            ox += bb.x, oy += bb.y;
            if (res) { /* not a + 0 without one: that would turn a -0 into +0 */
                const float2 rv = w_unpack(rr[a][b]);
                ox += rv.x, oy += rv.y;
            }
            w_store2(y + f * ysf + (long)(4 * ty + a) * ysh + (long)(4 * tx + b) * ysw + c, ox, oy);
        }
    }
}

/* The transforms' launches: nf <= W22_WINO_FRAMES input frames x[j] (h4 x w4 tiles, C channels, the same strides,
 * readable to row hv and column wv) into V's 36 components (vcs elements apart; frame j at j vsf) in one launch; F
 * frames of M's components into y's rows < ho and columns < wo (+ bias, + res: NULL for none). C even. */
w22_status w22_cuda_wino_in(cudaStream_t st, const bf16 *const *x, int nf, long xsh, long xsw, __half *v, long vcs,
                            long vsf, long vsh, long vsw, int h4, int w4, int hv, int wv, int C) {
    if (nf < 1 || nf > W22_WINO_FRAMES)
        return w22_fail(W22_ERR_INTERNAL, "winograd input transform: %d frames, expected 1 to %d", nf, W22_WINO_FRAMES);
    if (C % 2) return w22_fail(W22_ERR_INTERNAL, "winograd input transform: %d channels, expected a multiple of 2", C);
    const long n = (long)h4 * w4 * (C / 2);
    if (n > 0x7fffffffL)
        return w22_fail(W22_ERR_INTERNAL, "winograd input transform: %ld tile-channel pairs a frame, expected < 2^31", n);
    w22_wino_frames f;
    for (int j = 0; j < W22_WINO_FRAMES; j++) f.p[j] = j < nf ? x[j] : NULL;
    w22_wino_in_kernel<<<dim3((unsigned)((n + 255) / 256), (unsigned)nf), 256, 0, st>>>(f, xsh, xsw, v, vcs, vsf, vsh,
                                                                                       vsw, h4, w4, hv, wv, C);
    CU_TRY(cudaGetLastError());
    return W22_OK;
}

w22_status w22_cuda_wino_out(cudaStream_t st, const __half *m, long mcs, long msf, long msh, long msw, bf16 *y,
                             long ysf, long ysh, long ysw, const bf16 *res, long rsf, long rsh, long rsw,
                             const float *bias, int F, int h4, int w4, int ho, int wo, int C) {
    if (C % 2) return w22_fail(W22_ERR_INTERNAL, "winograd output transform: %d channels, expected a multiple of 2", C);
    const long n = (long)h4 * w4 * (C / 2);
    if (n > 0x7fffffffL || F < 1 || F > 65535)
        return w22_fail(W22_ERR_INTERNAL, "winograd output transform: %ld tile-channel pairs a frame, %d frames, expected "
                        "< 2^31 and 1 to 65535", n, F);
    w22_wino_out_kernel<<<dim3((unsigned)((n + 255) / 256), (unsigned)F), 256, 0, st>>>(
        m, mcs, msf, msh, msw, y, ysf, ysh, ysw, res, rsf, rsh, rsw, bias, h4, w4, ho, wo, C);
    CU_TRY(cudaGetLastError());
    return W22_OK;
}

/* W22_WINOGRAD=N: the 3x3x3 convs with cin and cout >= N take the path (unset: route.h's default for the path, 256
 * on both; 0: off). Read at each backend's create (no cached copy: backends are created on any thread, and a lazily
 * set static was a race). */
int w22_cuda_winograd_min_cin(int hopper) {
    const char *e = getenv("W22_WINOGRAD");
    const int v = e ? atoi(e) : w22_route_wino_min_default(hopper);
    return v < 0 ? 0 : v;
}

/* Whether conv a takes the Winograd path (route.h's rule at the backend's threshold); NULL: it does, else why not. */
const char *w22_cuda_winograd_blocker(const w22_cuda *c, const w22_conv_args *a, const w22_cuda_weight *w) {
    const int on = w22_route_wino_weights(w->kt, w->kh, w->kw, w->cin, w->cout, c->wino_min);
    return w22_route_winograd_blocker(a, w->cin, w->cout, on,
                                      w22_route_wino_row_bytes(a->out.f, (a->out.w + 3) / 4, w->cin, w->cout));
}

/* The 36 components U = G g G^T (fp16, winograd4.h) of a 3x3x3 conv from its direct layout d ([cout][27][cin] bf16,
 * tap = 9 dt + 3 dy + dx: weights_gpu.cu's), component xi's GEMM operand B at u + xi cout 3 cin, [cout][dt][cin]. Made
 * at each conv, not kept: 36 x 3 of the 27 direct taps would hold 4x the weights' memory on the device (3.9 GiB of
 * TI2V-5B's at 512 channels and up alone), where this reads them and writes U once a conv (~0.1 ms at 1024 channels). From
 * the bf16 weights, not the source's floats: x1.4 the direct conv's error where float weights give x1.3
 * (dev/winograd_f4_probe.py's model). One thread per (o, dt, ci): 9 loads and 36 stores, each coalesced over ci. Only
 * the taps dt >= dt0 (dt0 2: a first chunk's conv reads the last tap alone, lower.h's w22_lower_zero_hist), at their
 * places in the full layout. */
__global__ void w22_wino_u_kernel(const bf16 *__restrict__ d, int cout, int cin, int dt0, __half *__restrict__ u) {
    const float G[6][3] = W22_W4_G;
    const int nt = 3 - dt0;
    const long n = (long)cout * nt * cin, per = (long)cout * 3 * cin;
    for (long j = (long)blockIdx.x * blockDim.x + threadIdx.x; j < n; j += (long)gridDim.x * blockDim.x) {
        const int ci = (int)(j % cin), dt = dt0 + (int)(j / cin % nt), o = (int)(j / cin / nt);
        const long i = ((long)o * 3 + dt) * cin + ci; /* its place among the three taps */
        const bf16 *p = d + ((long)o * 27 + 9 * dt) * cin + ci;
        float g[3][3], gt[3][6]; /* g G^T */
#pragma unroll
        for (int a = 0; a < 3; a++)
#pragma unroll
            for (int b = 0; b < 3; b++) g[a][b] = __bfloat162float(p[(3 * a + b) * (long)cin]);
#pragma unroll
        for (int a = 0; a < 3; a++)
#pragma unroll
            for (int k = 0; k < 6; k++) gt[a][k] = g[a][0] * G[k][0] + g[a][1] * G[k][1] + g[a][2] * G[k][2];
#pragma unroll
        for (int r = 0; r < 6; r++)
#pragma unroll
            for (int k = 0; k < 6; k++)
                u[(6 * r + k) * per + i] = __float2half_rn(G[r][0] * gt[0][k] + G[r][1] * gt[1][k] + G[r][2] * gt[2][k]);
    }
}

/* One band: tile rows [ty0, ty0 + hh) of the output (rows 4 ty0..), the 36 GEMMs and both transforms, V and M the
 * band's (component-major). H, W: the conv's output (and input) size. */
static w22_status wino_band(w22_cuda *c, const w22_cuda_weight *w, const __half *U, const w22_mm *g, __half *V,
                            __half *M, int ty0, int hh, int w4, const bf16 *res, long rsf, long rsh, long rsw) {
    const int F = g->F, ci = w->cin, co = w->cout, FI = F + g->kt - 1, hl = g->H - 4 * ty0;
    const long vcs = (long)FI * hh * w4 * ci, mcs = (long)F * hh * w4 * co; /* a component's elements */
    int part = w22_cuda_prof_part_begin(c); /* W22_PROFILE=2: the transforms and the GEMMs apart */
    for (int j0 = 0; j0 < FI; j0 += W22_WINO_FRAMES) { /* frames j0.. in one launch */
        const bf16 *xf[W22_WINO_FRAMES];
        const int n = FI - j0 < W22_WINO_FRAMES ? FI - j0 : W22_WINO_FRAMES;
        for (int j = 0; j < n; j++) xf[j] = w22_gemm_frame(*g, j0 + j) + 4L * ty0 * g->a_sh;
        W22_TRY(w22_cuda_wino_in(c->stream, xf, n, g->a_sh, g->a_sw, V + (long)j0 * hh * w4 * ci, vcs,
                                 (long)hh * w4 * ci, (long)w4 * ci, ci, hh, w4, hl, g->W, ci));
        CU_LAUNCHED(c, "winograd input transform");
    }
    w22_cuda_prof_part_end(c, part, 0, 2.0 * FI * hh * w4 * ci * (16 + W22_W4_K),
                           "winograd input transform c%d %dx%d f%d", ci, 4 * hh, 4 * w4, FI);
    /* the 36 GEMMs (lower.h) in fp16: one launch of the TMA conv (the Hopper path) or of the mma.sync kernel (the
     * portable path); the band's height keeps their offsets in an int (w22_cuda_conv_winograd), so no GEMM runs
     * apart (the row and scalar kernels take no fp16) */
    w22_mm q;
    w22_lower_wino_batch(F, g->kt, hh, w4, ci, co, U, V, M, &q);
    part = w22_cuda_prof_part_begin(c);
    const w22_batch_launch how = w22_route_batch(&q, c->hopper);
    if (how == W22_BATCH_TMA) {
        W22_TRY(w22_cuda_gemm_wgmma_batch(c, &q, "conv (winograd components, one launch)"));
    } else if (how == W22_BATCH_MMA) {
        W22_TRY(w22_cuda_gemm_mma_batch(c, &q, "conv (winograd components, one mma launch)"));
    } else {
        return w22_fail(W22_ERR_INTERNAL, "winograd: the 36 component GEMMs of %d -> %d at %d x %d tiles, f%d take no "
                        "batch launch (%s), expected one", ci, co, hh, w4, F,
                        w22_route_mma_batch_blocker(&q) ? w22_route_mma_batch_blocker(&q) : "the route");
    }
    w22_cuda_prof_part_end(c, part, 2.0 * W22_W4_K * q.M * co * 3 * ci, 0, "winograd 36 GEMMs %d->%d %dx%d f%d [%s]",
                           ci, co, 4 * hh, 4 * w4, F, c->last_path);
    part = w22_cuda_prof_part_begin(c);
    W22_TRY(w22_cuda_wino_out(c->stream, M, mcs, (long)hh * w4 * co, (long)w4 * co, co,
                              (bf16 *)g->out + 4L * ty0 * g->o_sh, g->o_sf, g->o_sh, g->o_sw,
                              res ? res + 4L * ty0 * rsh : NULL, rsf, rsh, rsw, g->bias, F, hh, w4, hl, g->W, co));
    CU_LAUNCHED(c, "winograd output transform");
    w22_cuda_prof_part_end(c, part, 0, 2.0 * F * hh * w4 * co * (W22_W4_K + 16 + (res ? 16 : 0)),
                           "winograd output transform c%d %dx%d f%d%s", co, 4 * hh, 4 * w4, F, res ? " res" : "");
    return W22_OK;
}

w22_status w22_cuda_conv_winograd(w22_cuda *c, const w22_conv_args *a, const w22_cuda_weight *w, const w22_mm *g) {
    const int F = g->F, h4 = (a->out.h + 3) / 4, w4 = (a->out.w + 3) / 4, ci = w->cin, co = w->cout;
    const int FI = F + g->kt - 1; /* input frames: kt 1 where a first chunk's zero history is skipped (lower.h) */
    const size_t row = w22_route_wino_row_bytes(F, w4, ci, co);
    /* U (w22_wino_u_kernel: 36 x 3 cin x cout fp16) and V, M in the caller's free memory (a decode's: plan.c's
     * w22_stage_free) where it holds U and one tile row, U first; else U in the backend's own grow-only scratch and
     * V, M in the caller's span or, without one, another own scratch. Bands of equal height, as few as fit, each
     * small enough that its 36 GEMMs' offsets fit an int (route.h). */
    const size_t un = (size_t)W22_W4_K * co * 3 * ci, ub = (un * 2 + 255) / 256 * 256;
    const int own = !a->work, u_in = !own && a->work_bytes >= ub + row;
    const size_t have = own ? (size_t)h4 * row : a->work_bytes - (u_in ? ub : 0);
    const int hb = w22_route_wino_band(F, h4, w4, ci, co, have);
    __half *U, *V;
    if (u_in) {
        U = (__half *)a->work, V = (__half *)((char *)a->work + ub);
    } else {
        W22_TRY(w22_cuda_scratch(c, &c->wino_u, &c->wino_u_bytes, un * 2, "the Winograd components U"));
        U = (__half *)c->wino_u;
        if (own) {
            W22_TRY(w22_cuda_scratch(c, &c->wino_scratch, &c->wino_bytes, (size_t)hb * row,
                                     "the Winograd scratch (V, M)"));
            V = (__half *)c->wino_scratch;
        } else {
            V = (__half *)a->work;
        }
    }
    __half *M = V + (size_t)W22_W4_K * FI * hb * w4 * ci;
    {
        const int part = w22_cuda_prof_part_begin(c);
        const int dt0 = 3 - g->kt; /* the taps the batch reads (lower.h's w22_lower_wino_batch) */
        const long n = (long)co * g->kt * ci;
        w22_wino_u_kernel<<<(unsigned)((n + 255) / 256 < 65535 * 4 ? (n + 255) / 256 : 65535 * 4), 256, 0,
                            c->stream>>>((const bf16 *)w->dev, co, ci, dt0, U);
        CU_LAUNCHED(c, "winograd weights transform");
        w22_cuda_prof_part_end(c, part, 0, 2.0 * (9 + W22_W4_K) * g->kt * co * ci, "winograd weights transform %d->%d", ci,
                               co);
    }
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
    for (int ty0 = 0; ty0 < h4; ty0 += hb)
        W22_TRY(wino_band(c, w, U, g, V, M, ty0, h4 - ty0 < hb ? h4 - ty0 : hb, w4, res, rsf, rsh, rsw));
    c->last_path = "winograd F(4x4,3x3) fp16: transforms + 36 GEMMs";
    return W22_OK;
}
