/* RMS norm over channels, per pixel, with optional SiLU: out = x / max(||x||, 1e-12) * sqrt(C) * gamma. One warp
 * per pixel, fp32 statistics; 16-byte loads when C % 8 == 0 and the views allow, else one element per lane. The
 * pixel is read twice (sum of squares, then scale); the second read hits L1/L2. In place (out == in) is fine: a
 * lane writes only elements it has read in both passes. */
#include <stdlib.h>
#include <string.h>
#include "cuda_internal.h"
#include "cuda_ops.h"
#include "wgmma_common.cuh" /* the mbarrier wrappers */

/* SiLU with the fast reciprocal: the IEEE division (a check and a slow-path call per element) made the norm
 * instruction-bound at ~3 TB/s (docs/PERF.md v13). Exact to a few ulp of fp32, far below the bf16 rounding after;
 * below a of about -88, exp(-a) is inf and the result 0 (the limit). */
static __device__ __forceinline__ float w22_silu(float a) { return __fdividef(a, 1.f + __expf(-a)); }

template <int VEC>
__global__ void w22_rmsnorm_kernel(const bf16 *in, long isf, long ish, long isw, bf16 *out, long osf, long osh, long osw,
                               const float *gamma, int F, int H, int W, int C, int silu) {
    const long pix = (long)blockIdx.x * (blockDim.x / 32) + (threadIdx.x >> 5);
    const int lane = threadIdx.x & 31;
    if (pix >= (long)F * H * W) return;
    const int x = (int)(pix % W), y = (int)((pix / W) % H), f = (int)(pix / ((long)W * H));
    const bf16 *ip = in + f * isf + y * ish + x * isw;
    bf16 *op = out + f * osf + y * osh + x * osw;
    float ss = 0.f;
    for (int c = lane * VEC; c < C; c += 32 * VEC) {
        if (VEC == 8) {
            uint4 u = *(const uint4 *)(ip + c);
            const __nv_bfloat162 *h2 = (const __nv_bfloat162 *)&u;
#pragma unroll
            for (int k = 0; k < 4; k++) {
                float2 v = __bfloat1622float2(h2[k]);
                ss += v.x * v.x + v.y * v.y;
            }
        } else {
            float v = __bfloat162float(ip[c]);
            ss += v * v;
        }
    }
#pragma unroll
    for (int o = 16; o; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    const float scale = sqrtf((float)C) / fmaxf(sqrtf(ss), 1e-12f);
    for (int c = lane * VEC; c < C; c += 32 * VEC) {
        if (VEC == 8) {
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
        } else {
            float a = __bfloat162float(ip[c]) * scale * gamma[c];
            if (silu) a = w22_silu(a);
            op[c] = __float2bfloat16_rn(a);
        }
    }
}

/* The same op for C = 256 NV (NV = 1, 2, 4) with 16-byte aligned views: a warp's pixel stays in registers
 * between the sum of squares and the scaling (one read instead of two), blocks of 8 pixels along a row (grid: x
 * blocks by F * H rows, no divisions), gamma as float4. The default since v5 (docs/PERF.md: 2.00 -> 2.57 TB/s at
 * 256 channels); W22_NORM=v1 selects the two-pass kernel above for A/B runs. In place (out == in) is fine:
 * a lane reads its elements of all P pixels before writing any. */
template <int NV, int P>
__global__ void __launch_bounds__(256) w22_rmsnorm_rows_kernel(const bf16 *in, long isf, long ish, long isw, bf16 *out,
                                                             long osf, long osh, long osw, const float *gamma, int H,
                                                             int W, int silu) {
    /* P adjacent pixels per warp (v10: P = 2): all their loads are issued before the first reduction, P times the
     * bytes in flight per warp of v5's one pixel (P = 1, W22_NORM=v2) */
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

/* v24: the same op for C = 256 NV with its loads as a pipeline of bulk copies. The rows kernel above held its pixels'
 * loads in registers for one short block each (3.0-3.1 TB/s at 256 channels against the copy's 4.2, ~2.7 in a decode
 * at its lower SM clock: bound by the bytes in flight, not by the DRAM). Here each CTA (persistent, 3 a SM) streams
 * chunks of 16 KB (one row's next 32 / 16 / 8 pixels) through a ring of 4 shared-memory slots: thread 0 keeps the
 * next chunks' cp.async.bulk loads in flight while the 8 warps take chunk i from its slot into registers, free the
 * slot for chunk i + 4, normalize and store with 16-byte stores: up to 64 KB in flight a CTA, whatever the
 * registers. (The stores stay plain: compute-sanitizer's initcheck does not count the TMA unit's bulk stores as
 * writes, and a store from registers needs no slot.) Views with adjacent pixels (sw = C) and 16-byte aligned rows;
 * in place is fine (a chunk is written where it was read, after its load completed). */
#define NB_SLOTS 4
#define NB_SLOT_BYTES 16384
#define NB_CTAS_PER_SM 3

template <int NV>
__global__ void __launch_bounds__(256, NB_CTAS_PER_SM) w22_rmsnorm_bulk_kernel(const bf16 *in, long isf, long ish, bf16 *out,
                                                             long osf, long osh, const float *gamma, int H, int W,
                                                             int cpr, int chunks, int silu) {
    constexpr int C = 256 * NV, PX = NB_SLOT_BYTES / (2 * C), PPW = PX / 8; /* pixels a chunk, a warp */
    extern __shared__ __align__(128) unsigned char nb_smem[];
    __shared__ __align__(8) uint64_t nb_full[NB_SLOTS];
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const uint32_t sbase = (uint32_t)__cvta_generic_to_shared(nb_smem);
    const uint32_t fbar = (uint32_t)__cvta_generic_to_shared(nb_full);
    if (tid == 0) {
        for (int s = 0; s < NB_SLOTS; s++) mbar_init(fbar + 8 * s, 1);
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
        fence_proxy_async();
    }
    float gm[NV][8]; /* this lane's channels are the same in every pixel */
#pragma unroll
    for (int i = 0; i < NV; i++) {
        const float4 g0 = *(const float4 *)(gamma + (i * 32 + lane) * 8), g1 = *(const float4 *)(gamma + (i * 32 + lane) * 8 + 4);
        gm[i][0] = g0.x, gm[i][1] = g0.y, gm[i][2] = g0.z, gm[i][3] = g0.w;
        gm[i][4] = g1.x, gm[i][5] = g1.y, gm[i][6] = g1.z, gm[i][7] = g1.w;
    }
    __syncthreads();
    const float root_c = sqrtf((float)C);
    /* chunk q: row q / cpr (frame and row), pixels from (q % cpr) PX on, npx of them */
    auto chunk_at = [&](int q, long &io, long &oo, int &npx) {
        const int row = q / cpr, j = q - row * cpr, f = row / H, y = row - f * H, x0 = j * PX;
        npx = W - x0 < PX ? W - x0 : PX;
        io = f * isf + y * ish + (long)x0 * C;
        oo = f * osf + y * osh + (long)x0 * C;
    };
    const int n = chunks > (int)blockIdx.x ? (chunks - 1 - (int)blockIdx.x) / (int)gridDim.x + 1 : 0; /* this CTA's */
    auto load = [&](int i) { /* thread 0: this CTA's chunk i into its slot */
        long io, oo;
        int npx;
        chunk_at((int)blockIdx.x + i * (int)gridDim.x, io, oo, npx);
        const uint32_t bytes = (uint32_t)npx * C * 2, bar = fbar + 8 * (i % NB_SLOTS);
        mbar_arrive_expect_tx(bar, bytes);
        asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
                         sbase + (i % NB_SLOTS) * NB_SLOT_BYTES),
                     "l"(in + io), "r"(bytes), "r"(bar)
                     : "memory");
    };
    if (tid == 0)
        for (int i = 0; i < NB_SLOTS && i < n; i++) load(i);
    for (int i = 0; i < n; i++) {
        long io, oo;
        int npx;
        chunk_at((int)blockIdx.x + i * (int)gridDim.x, io, oo, npx);
        const uint32_t slot = sbase + (i % NB_SLOTS) * NB_SLOT_BYTES;
        mbar_wait(fbar + 8 * (i % NB_SLOTS), (i / NB_SLOTS) & 1);
        uint4 u[PPW][NV];
        float ss[PPW];
#pragma unroll
        for (int k = 0; k < PPW; k++) {
            ss[k] = 0.f;
            const int p = warp * PPW + k;
#pragma unroll
            for (int v = 0; v < NV; v++) {
                u[k][v] = make_uint4(0, 0, 0, 0);
                if (p < npx)
                    asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n"
                                 : "=r"(u[k][v].x), "=r"(u[k][v].y), "=r"(u[k][v].z), "=r"(u[k][v].w)
                                 : "r"(slot + (uint32_t)(p * C + (v * 32 + lane) * 8) * 2)
                                 : "memory");
                const __nv_bfloat162 *h2 = (const __nv_bfloat162 *)&u[k][v];
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const float2 a = __bfloat1622float2(h2[e]);
                    ss[k] += a.x * a.x + a.y * a.y;
                }
            }
        }
        __syncthreads(); /* every warp has chunk i in its registers: its slot takes chunk i + SLOTS */
        if (tid == 0 && i + NB_SLOTS < n) load(i + NB_SLOTS);
#pragma unroll
        for (int o = 16; o; o >>= 1)
#pragma unroll
            for (int k = 0; k < PPW; k++) ss[k] += __shfl_xor_sync(0xffffffffu, ss[k], o);
#pragma unroll
        for (int k = 0; k < PPW; k++) {
            const int p = warp * PPW + k;
            if (p >= npx) continue;
            const float scale = root_c / fmaxf(sqrtf(ss[k]), 1e-12f);
#pragma unroll
            for (int v = 0; v < NV; v++) {
                __nv_bfloat162 *h2 = (__nv_bfloat162 *)&u[k][v];
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const float2 a = __bfloat1622float2(h2[e]);
                    float x = a.x * scale * gm[v][2 * e], y = a.y * scale * gm[v][2 * e + 1];
                    if (silu) x = w22_silu(x), y = w22_silu(y);
                    h2[e] = __floats2bfloat162_rn(x, y);
                }
                *(uint4 *)(out + oo + (long)p * C + (v * 32 + lane) * 8) = u[k][v];
            }
        }
    }
}

/* W22_NORM: v1 the two-pass kernel, v2 the rows kernel with one pixel per warp (v5), v3 with two (v10; four per warp
 * ran slower at 512 and 1024 channels: docs/PERF.md v13), else (default) the bulk pipeline (v24) */
static int norm_version(void) {
    static int v = -1;
    if (v < 0) {
        const char *e = getenv("W22_NORM");
        v = e && !strcmp(e, "v1") ? 1 : e && !strcmp(e, "v2") ? 2 : e && !strcmp(e, "v3") ? 3 : 4;
    }
    return v;
}

/* The bulk kernel's launch for NV: its grid (persistent: NB_CTAS_PER_SM a SM, fewer with fewer chunks), its shared
 * memory set once per instance. */
template <int NV>
static w22_status norm_bulk_launch(w22_cuda *c, const w22_view &in, const w22_view &out, const float *gamma,
                                   int cpr, int chunks, int silu) {
    static int ready = 0;
    const int smem = NB_SLOTS * NB_SLOT_BYTES;
    if (!ready) {
        CU_TRY(cudaFuncSetAttribute(w22_rmsnorm_bulk_kernel<NV>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
        ready = 1;
    }
    const int sms = c->sms > 0 ? c->sms : 132;
    const int grid = chunks < sms * NB_CTAS_PER_SM ? chunks : sms * NB_CTAS_PER_SM;
    w22_rmsnorm_bulk_kernel<NV><<<grid, 256, smem, c->stream>>>((const bf16 *)in.ptr, in.sf, in.sh, (bf16 *)out.ptr,
                                                                out.sf, out.sh, gamma, in.h, in.w, cpr, chunks, silu);
    return W22_OK;
}

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
    const int vec = in.c % 8 == 0 && (uintptr_t)in.ptr % 16 == 0 && (uintptr_t)out.ptr % 16 == 0 && in.sf % 8 == 0 &&
                    in.sh % 8 == 0 && in.sw % 8 == 0 && out.sf % 8 == 0 && out.sh % 8 == 0 && out.sw % 8 == 0;
    const int nv = in.c / 256;
    const int px = nv ? NB_SLOT_BYTES / (2 * in.c) : 0, cpr = px ? (in.w + px - 1) / px : 0;
    if (vec && norm_version() == 4 && in.c % 256 == 0 && (nv == 1 || nv == 2 || nv == 4) && in.sw == in.c &&
        out.sw == out.c && (uintptr_t)g->dev % 16 == 0 && (long)in.f * in.h * cpr < INT_MAX) {
        const int chunks = in.f * in.h * cpr;
        const float *gd = (const float *)g->dev;
        W22_TRY(nv == 1   ? norm_bulk_launch<1>(c, in, out, gd, cpr, chunks, silu)
                : nv == 2 ? norm_bulk_launch<2>(c, in, out, gd, cpr, chunks, silu)
                          : norm_bulk_launch<4>(c, in, out, gd, cpr, chunks, silu));
    } else if (vec && norm_version() >= 2 && in.c % 256 == 0 && (nv == 1 || nv == 2 || nv == 4) &&
        (uintptr_t)g->dev % 16 == 0 && (long)in.f * in.h < 65536) {
        const int pix = norm_version() == 2 ? 1 : 2; /* pixels per warp */
        const dim3 grid((in.w + 8 * pix - 1) / (8 * pix), in.f * in.h);
#define W22_NORM_ROWS(NV, P)                                                                                   \
    w22_rmsnorm_rows_kernel<NV, P><<<grid, 256, 0, c->stream>>>((const bf16 *)in.ptr, in.sf, in.sh, in.sw,    \
                                                                (bf16 *)out.ptr, out.sf, out.sh, out.sw,       \
                                                                (const float *)g->dev, in.h, in.w, silu)
#define W22_NORM_NV(P) (nv == 1 ? W22_NORM_ROWS(1, P) : nv == 2 ? W22_NORM_ROWS(2, P) : W22_NORM_ROWS(4, P))
        if (pix == 1) W22_NORM_NV(1);
        else W22_NORM_NV(2);
#undef W22_NORM_NV
#undef W22_NORM_ROWS
    } else if (vec)
        w22_rmsnorm_kernel<8><<<(unsigned)blocks, warps * 32, 0, c->stream>>>(
            (const bf16 *)in.ptr, in.sf, in.sh, in.sw, (bf16 *)out.ptr, out.sf, out.sh, out.sw,
            (const float *)g->dev, in.f, in.h, in.w, in.c, silu);
    else
        w22_rmsnorm_kernel<1><<<(unsigned)blocks, warps * 32, 0, c->stream>>>(
            (const bf16 *)in.ptr, in.sf, in.sh, in.sw, (bf16 *)out.ptr, out.sf, out.sh, out.sw,
            (const float *)g->dev, in.f, in.h, in.w, in.c, silu);
    CU_LAUNCHED(c, "rmsnorm");
    return W22_OK;
}
