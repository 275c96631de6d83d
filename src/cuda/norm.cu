/* RMS norm over channels, per pixel, with optional SiLU: out = x / max(||x||, 1e-12) * sqrt(C) * gamma, fp32
 * statistics, 16-byte accesses (8 channels a lane: the views' starts and strides whole vectors, C % 8 == 0, which every
 * decode's views are: route.h's w22_route_norm picks the kernel and refuses others). In place (out == in) is fine in
 * each kernel: a lane writes only elements it has read. */
#include <stdlib.h>
#include <string.h>
#include "cuda_internal.h"
#include "cuda_ops.h"

/* SiLU with the fast reciprocal: the IEEE division (a check and a slow-path call per element) made the norm
 * instruction-bound at ~3 TB/s (docs/PERF.md v13). Exact to a few ulp of fp32, far below the bf16 rounding after;
 * below a of about -88, exp(-a) is inf and the result 0 (the limit). */
static __device__ __forceinline__ float w22_silu(float a) { return __fdividef(a, 1.f + __expf(-a)); }

/* A warp a pixel, 8 channels a lane (C > 256 not a multiple of 256: the Wan2.1 decoder's 384). The pixel is read twice
 * (sum of squares, then scale); the second read hits L1/L2. */
__global__ void w22_rmsnorm_kernel(const bf16 *in, long isf, long ish, long isw, bf16 *out, long osf, long osh, long osw,
                                   const float *gamma, int F, int H, int W, int C, int silu) {
    const long pix = (long)blockIdx.x * (blockDim.x / 32) + (threadIdx.x >> 5);
    const int lane = threadIdx.x & 31;
    if (pix >= (long)F * H * W) return;
    const int x = (int)(pix % W), y = (int)((pix / W) % H), f = (int)(pix / ((long)W * H));
    const bf16 *ip = in + f * isf + y * ish + x * isw;
    bf16 *op = out + f * osf + y * osh + x * osw;
    float ss = 0.f;
    for (int c = lane * 8; c < C; c += 32 * 8) {
        uint4 u = *(const uint4 *)(ip + c);
        const __nv_bfloat162 *h2 = (const __nv_bfloat162 *)&u;
#pragma unroll
        for (int k = 0; k < 4; k++) {
            float2 v = __bfloat1622float2(h2[k]);
            ss += v.x * v.x + v.y * v.y;
        }
    }
#pragma unroll
    for (int o = 16; o; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    const float scale = sqrtf((float)C) / fmaxf(sqrtf(ss), 1e-12f);
    for (int c = lane * 8; c < C; c += 32 * 8) {
        uint4 u = *(const uint4 *)(ip + c);
        __nv_bfloat162 *h2 = (__nv_bfloat162 *)&u;
#pragma unroll
        for (int k = 0; k < 4; k++) {
            float2 v = __bfloat1622float2(h2[k]);
            float a = v.x * scale * gamma[c + 2 * k], b = v.y * scale * gamma[c + 2 * k + 1];
            if (silu) a = w22_silu(a), b = w22_silu(b);
            h2[k] = __floats2bfloat162_rn(a, b);
        }
        *(uint4 *)(op + c) = u;
    }
}

/* The same op for C <= 256 not a multiple of 256 (the Wan2.1 decoder's 96 and 192 channels), 16-byte aligned views:
 * LP lanes a pixel (8, 16 or 32: C / 8 chunks of 8 channels, the rest of the group idle), 32 / LP pixels a warp, each
 * lane's chunk held in registers between the sum of squares and the scaling (one read). The warp-per-pixel kernel
 * above ran C = 96 with 12 of 32 lanes and two reads: 781 GB/s, 13.8% of the Wan2.1 decode at 1280x720 (session 36's
 * H100 profile). In place is fine: a lane reads its chunk before any lane of its group writes. */
template <int LP>
__global__ void __launch_bounds__(256) w22_rmsnorm_group_kernel(const bf16 *in, long isf, long ish, long isw, bf16 *out,
                                                              long osf, long osh, long osw, const float *gamma,
                                                              int F, int H, int W, int C, int silu) {
    const int lane = threadIdx.x & 31, sub = lane % LP;
    const long pix = ((long)blockIdx.x * (blockDim.x / 32) + (threadIdx.x >> 5)) * (32 / LP) + lane / LP;
    const bool live = pix < (long)F * H * W, mine = live && sub * 8 < C;
    const int x = live ? (int)(pix % W) : 0, y = live ? (int)((pix / W) % H) : 0;
    const int f = live ? (int)(pix / ((long)W * H)) : 0;
    const bf16 *ip = in + f * isf + y * ish + x * isw + sub * 8;
    uint4 u = make_uint4(0, 0, 0, 0);
    if (mine) u = *(const uint4 *)ip;
    __nv_bfloat162 *h2 = (__nv_bfloat162 *)&u;
    float ss = 0.f;
#pragma unroll
    for (int k = 0; k < 4; k++) {
        const float2 v = __bfloat1622float2(h2[k]);
        ss += v.x * v.x + v.y * v.y;
    }
#pragma unroll
    for (int o = LP / 2; o; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o); /* within the group of LP lanes */
    if (!mine) return;
    const float scale = sqrtf((float)C) / fmaxf(sqrtf(ss), 1e-12f);
    const float4 g0 = *(const float4 *)(gamma + sub * 8), g1 = *(const float4 *)(gamma + sub * 8 + 4);
    const float gm[8] = {g0.x, g0.y, g0.z, g0.w, g1.x, g1.y, g1.z, g1.w};
#pragma unroll
    for (int k = 0; k < 4; k++) {
        const float2 v = __bfloat1622float2(h2[k]);
        float a = v.x * scale * gm[2 * k], b = v.y * scale * gm[2 * k + 1];
        if (silu) a = w22_silu(a), b = w22_silu(b);
        h2[k] = __floats2bfloat162_rn(a, b);
    }
    *(uint4 *)(out + f * osf + y * osh + x * osw + sub * 8) = u;
}

/* The same op for C = 256 NV (NV = 1, 2, 4) with 16-byte aligned views: a warp's pixel stays in registers
 * between the sum of squares and the scaling (one read instead of two), blocks of 8 pixels along a row (grid: x
 * blocks by F * H rows, no divisions), gamma as float4. The default since v5 (docs/PERF.md: 2.00 -> 2.57 TB/s at
 * 256 channels against the kernel above, which runs what this one does not take). In place (out == in) is fine:
 * a lane reads its elements of all P pixels before writing any. */
template <int NV, int P>
__global__ void __launch_bounds__(256) w22_rmsnorm_rows_kernel(const bf16 *in, long isf, long ish, long isw, bf16 *out,
                                                             long osf, long osh, long osw, const float *gamma, int H,
                                                             int W, int silu) {
    /* P adjacent pixels per warp (v10: P = 2): all their loads are issued before the first reduction, P times the
     * bytes in flight per warp of v5's one pixel (P = 1) */
    const int x0 = (blockIdx.x * 8 + (threadIdx.x >> 5)) * P, lane = threadIdx.x & 31;
    if (x0 >= W) return;
    const int fy = blockIdx.y, f = fy / H, y = fy - f * H;
    const bf16 *ip = in + f * isf + y * ish + x0 * isw;
    bf16 *op = out + f * osf + y * osh + x0 * osw;
    uint4 u[P][NV];
    float ss[P];
#pragma unroll
    for (int p = 0; p < P; p++)
#pragma unroll
        for (int i = 0; i < NV; i++)
            u[p][i] = x0 + p < W ? *(const uint4 *)(ip + p * isw + (i * 32 + lane) * 8) : make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int p = 0; p < P; p++) {
        ss[p] = 0.f;
#pragma unroll
        for (int i = 0; i < NV; i++) {
            const __nv_bfloat162 *h2 = (const __nv_bfloat162 *)&u[p][i];
#pragma unroll
            for (int k = 0; k < 4; k++) {
                const float2 v = __bfloat1622float2(h2[k]);
                ss[p] += v.x * v.x + v.y * v.y;
            }
        }
    }
#pragma unroll
    for (int o = 16; o; o >>= 1)
#pragma unroll
        for (int p = 0; p < P; p++) ss[p] += __shfl_xor_sync(0xffffffffu, ss[p], o);
#pragma unroll
    for (int i = 0; i < NV; i++) {
        const int c = (i * 32 + lane) * 8;
        const float4 g0 = *(const float4 *)(gamma + c), g1 = *(const float4 *)(gamma + c + 4);
        const float gm[8] = {g0.x, g0.y, g0.z, g0.w, g1.x, g1.y, g1.z, g1.w};
#pragma unroll
        for (int p = 0; p < P; p++) {
            if (x0 + p >= W) continue;
            const float scale = sqrtf((float)(NV * 256)) / fmaxf(sqrtf(ss[p]), 1e-12f);
            __nv_bfloat162 *h2 = (__nv_bfloat162 *)&u[p][i];
#pragma unroll
            for (int k = 0; k < 4; k++) {
                const float2 v = __bfloat1622float2(h2[k]);
                float a = v.x * scale * gm[2 * k], b = v.y * scale * gm[2 * k + 1];
                if (silu) a = w22_silu(a), b = w22_silu(b);
                h2[k] = __floats2bfloat162_rn(a, b);
            }
            *(uint4 *)(op + p * osw + c) = u[p][i];
        }
    }
}

/* The rows kernel takes two pixels per warp (v10; one, v5-v9's, and four ran slower at 512 and 1024 channels:
 * docs/PERF.md v13); the lane groups C <= 256 otherwise, the per-pixel kernel the rest (route.h's w22_route_norm). */
w22_status w22_cuda_rmsnorm(w22_backend *b, w22_view in, w22_view out, const w22_bweight *gw, int silu) {
    w22_cuda *c = cuda_of(b);
    const w22_cuda_weight *g = (const w22_cuda_weight *)gw;
    if (!g || g->kind != W22_WK_VECTOR) return w22_fail(W22_ERR_INVALID_ARG, "cuda rmsnorm: gamma is not a vector");
    if (in.es != 2 || out.es != 2) return w22_fail(W22_ERR_BAD_SHAPE, "cuda rmsnorm: element size %d/%d, expected 2", in.es, out.es);
    if (in.f != out.f || in.h != out.h || in.w != out.w || in.c != out.c)
        return w22_fail(W22_ERR_BAD_SHAPE, "cuda rmsnorm: in (%d,%d,%d,%d) and out (%d,%d,%d,%d) differ", in.f, in.h,
                        in.w, in.c, out.f, out.h, out.w, out.c);
    if (g->n != in.c) return w22_fail(W22_ERR_BAD_SHAPE, "cuda rmsnorm: gamma has %d elements, C is %d", g->n, in.c);
    CU_ENTER(c);
    W22_TRY(w22_cuda_check_view(c, &in, 0, "rmsnorm in"));
    W22_TRY(w22_cuda_check_view(c, &out, 0, "rmsnorm out"));
    const long pixels = (long)in.f * in.h * in.w;
    if (pixels == 0 || in.c == 0) return W22_OK;
    const int warps = 8;
    const long blocks = (pixels + warps - 1) / warps;
    const w22_norm_kernel k = w22_route_norm(&in, &out, g->dev); /* route.h */
    if (k == W22_NORM_NONE)
        return w22_fail(W22_ERR_UNSUPPORTED, "cuda rmsnorm: C %d with strides %ld %ld %ld / %ld %ld %ld: the kernels take "
                        "views of whole 16-byte vectors (C a multiple of 8, 16-byte aligned starts and strides)", in.c,
                        in.sf, in.sh, in.sw, out.sf, out.sh, out.sw);
    if (k <= W22_NORM_ROWS4) {
        const int pix = 2; /* pixels per warp */
        const dim3 grid((in.w + 8 * pix - 1) / (8 * pix), in.f * in.h);
#define W22_NORM_ROWS(NV, P)                                                                                   \
    w22_rmsnorm_rows_kernel<NV, P><<<grid, 256, 0, c->stream>>>((const bf16 *)in.ptr, in.sf, in.sh, in.sw,    \
                                                                (bf16 *)out.ptr, out.sf, out.sh, out.sw,       \
                                                                (const float *)g->dev, in.h, in.w, silu)
        if (k == W22_NORM_ROWS1) W22_NORM_ROWS(1, 2);
        else if (k == W22_NORM_ROWS2) W22_NORM_ROWS(2, 2);
        else W22_NORM_ROWS(4, 2);
#undef W22_NORM_ROWS
    } else if (k <= W22_NORM_GROUP32) {
        /* LP lanes a pixel: the power of two that holds C / 8 chunks (C <= 64 on 16, half of them idle) */
        const int lp = k == W22_NORM_GROUP16 ? 16 : 32;
        const long gblocks = (pixels + warps * (32 / lp) - 1) / (warps * (32 / lp));
#define W22_NORM_GROUP(LP)                                                                                     \
    w22_rmsnorm_group_kernel<LP><<<(unsigned)gblocks, warps * 32, 0, c->stream>>>(                              \
        (const bf16 *)in.ptr, in.sf, in.sh, in.sw, (bf16 *)out.ptr, out.sf, out.sh, out.sw, (const float *)g->dev, \
        in.f, in.h, in.w, in.c, silu)
        if (lp == 16) W22_NORM_GROUP(16);
        else W22_NORM_GROUP(32);
#undef W22_NORM_GROUP
    } else {
        w22_rmsnorm_kernel<<<(unsigned)blocks, warps * 32, 0, c->stream>>>(
            (const bf16 *)in.ptr, in.sf, in.sh, in.sw, (bf16 *)out.ptr, out.sf, out.sh, out.sw,
            (const float *)g->dev, in.f, in.h, in.w, in.c, silu);
    }
    CU_LAUNCHED(c, "rmsnorm");
    return W22_OK;
}
