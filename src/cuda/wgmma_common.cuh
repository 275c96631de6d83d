/* What the wgmma conv (conv_sm90_wgmma_tma.cu, its host side in conv_sm90_wgmma.cu) uses: tile constants, register
 * splits, the barrier counts, the PTX wrappers (mbarriers, TMA, clusters, wgmma), the shared-memory layout
 * of a stage ring, the epilogues, and the host's tensor-map helper. conv_sm90_wgmma_tma.cu's opening comment is the
 * design; docs/PERF.md v3-v24 the measurements. */
#ifndef W22_WGMMA_COMMON_CUH
#define W22_WGMMA_COMMON_CUH

#include <cuda.h> /* CUtensorMap and the cuTensorMapEncodeTiled types only: no libcuda link */
#include "cuda_internal.h"
#include "conv_epilogue.cuh"
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#define WG_BM 128
#define WG_BK W22_WG_BK                /* bf16 per stage row: 128 bytes, the swizzle span */
#define WG_ROW_BYTES 128
#define WG_THREADS 384          /* producer warpgroup + 2 consumer warpgroups */
#define WG_PRODUCER_REGS 40
#define WG_CONSUMER_REGS 232    /* 128 * 40 + 256 * 232 = 64512 <= 65536 */

enum wg_arrivals {
    EMPTY_ARRIVALS = 8, /* lane 0 of each consumer warp (a full barrier: the producer thread's one arrive.expect_tx) */
};

/* ---- PTX wrappers ---- */

/* Named barriers: bar.sync's ids, one place (0 is __syncthreads'; the hardware has 16). The one the kernels use:
 * the two consumer warpgroups (256 threads) among themselves, while the producer warp goes on. */
enum wg_named_barrier {
    WG_BAR_SYNCTHREADS = 0, /* reserved: __syncthreads() */
    WG_BAR_CONSUMERS = 1,   /* warpgroups 1 and 2, 256 threads */
};
static __device__ __forceinline__ void consumers_sync(void) {
    asm volatile("bar.sync %0, 256;\n" ::"n"((int)WG_BAR_CONSUMERS) : "memory");
}

static __device__ __forceinline__ void mbar_init(uint32_t bar, int count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
static __device__ __forceinline__ void mbar_arrive(uint32_t bar) {
    asm volatile("mbarrier.arrive.release.cta.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
static __device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.release.cta.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
                 : "memory");
}
/* try_wait with acquire at CTA scope, or at cluster scope (CLUSTER_SCOPE: arrivals from the peer CTA release at
 * cluster scope). */
template <bool CLUSTER_SCOPE = false>
static __device__ __forceinline__ bool mbar_try(uint32_t bar, uint32_t parity) {
    uint32_t done;
    if (CLUSTER_SCOPE)
        asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2;\n"
                     "selp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done)
                     : "r"(bar), "r"(parity)
                     : "memory");
    else
        asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.acquire.cta.shared::cta.b64 p, [%1], %2;\n"
                     "selp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done)
                     : "r"(bar), "r"(parity)
                     : "memory");
    return done != 0;
}
/* Waits for the phase of parity `parity` to complete. A wait of 2^26 tries (seconds) is a protocol bug: trap, so
 * that it shows as a launch error (at once under W22_CUDA_DEBUG=1) instead of a hung GPU. */
template <bool CLUSTER_SCOPE = false>
static __device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
    for (uint32_t n = 0; !mbar_try<CLUSTER_SCOPE>(bar, parity);)
        if (++n == (1u << 26)) __trap();
}
/* The same with the trap in a function of its own, for kernels whose consumers need more registers than the launch
 * bound's: a trap inlined in the consumers' code makes ptxas (13.0) compile them for the launch bound (168 at 384
 * threads) instead of their setmaxnreg count (the overlapped epilogue then spilled 700+ bytes); called, it does not
 * (same registers, R205 the highest, and no spills, as with no trap at all). */
static __device__ __noinline__ void wg_hang_trap() { __trap(); }
static __device__ __forceinline__ void mbar_wait_nt(uint32_t bar, uint32_t parity) {
    for (uint32_t n = 0; !mbar_try<false>(bar, parity);)
        if (++n == (1u << 26)) wg_hang_trap();
}
static __device__ __forceinline__ void fence_proxy_async() {
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
/* 2D TMA tile load into this CTA's shared memory, completing `bytes` on the mbarrier (a CTA is a cluster of 1). */
static __device__ __forceinline__ void tma_load_2d(uint32_t dst, const CUtensorMap *map, uint32_t bar, int c0, int c1) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], "
                 "[%2];\n" ::"r"(dst),
                 "l"((uint64_t)map), "r"(bar), "r"(c0), "r"(c1)
                 : "memory");
}
/* 4D im2col TMA load (conv_sm90_wgmma_tma.cu): the map's pixelsPerColumn pixels from (c, w, h, n) on, walking the
 * map's bounding box in (w, h, n) order, each read at (w + ow, h + oh); outside the tensor: zeros. */
static __device__ __forceinline__ void tma_load_im2col(uint32_t dst, const CUtensorMap *map, uint32_t bar, int c, int w,
                                                       int h, int n, uint16_t ow, uint16_t oh) {
    asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.im2col.mbarrier::complete_tx::bytes [%0], [%1, {%3, "
                 "%4, %5, %6}], [%2], {%7, %8};\n" ::"r"(dst),
                 "l"((uint64_t)map), "r"(bar), "r"(c), "r"(w), "r"(h), "r"(n), "h"(ow), "h"(oh)
                 : "memory");
}
/* The same load multicast to the CTAs of `mask` in this cluster: each receives the box at the same shared-memory
 * offset and the bytes are completed on its own mbarrier at the offset of `bar`. */
static __device__ __forceinline__ void tma_load_2d_mc(uint32_t dst, const CUtensorMap *map, uint32_t bar, int c0, int c1,
                                                      uint16_t mask) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster "
                 "[%0], [%1, {%3, %4}], [%2], %5;\n" ::"r"(dst),
                 "l"((uint64_t)map), "r"(bar), "r"(c0), "r"(c1), "h"(mask)
                 : "memory");
}
/* ---- clusters (the WG_CLUSTER variant) ---- */
static __device__ __forceinline__ uint32_t cluster_rank() {
    uint32_t r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
    return r;
}
/* The shared::cluster address of this CTA's shared-memory address `a` in CTA `rank` of the cluster. */
static __device__ __forceinline__ uint32_t cluster_map(uint32_t a, uint32_t rank) {
    uint32_t r;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(r) : "r"(a), "r"(rank));
    return r;
}
/* An arrival on the peer CTA's barrier with CTA-scope release, as CUTLASS's ClusterBarrier::arrive(cta_id): what it
 * orders is this warp's finished wgmma reads of the stage before the peer's TMA refills it. A cluster-scope release
 * (mbarrier.arrive.release.cluster) also waits for the warp's earlier global stores to become visible across the
 * cluster (the overlapped epilogue's, in the same stage), which stalls the next wgmma issue: the TMA kernel's pairs
 * ran 30% slower with it (docs/PERF.md v15). */
static __device__ __forceinline__ void mbar_arrive_remote(uint32_t cluster_addr) {
    asm volatile("mbarrier.arrive.release.cta.shared::cluster.b64 _, [%0];\n" ::"r"(cluster_addr) : "memory");
}
/* Every thread of every CTA of the cluster (not .aligned: warps arrive from divergent paths). */
static __device__ __forceinline__ void cluster_sync_all() {
    asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;\n" ::: "memory");
}
static __device__ __forceinline__ void prefetch_tensormap(const CUtensorMap *map) {
    asm volatile("prefetch.tensormap [%0];\n" ::"l"((uint64_t)map) : "memory");
}
/* Shared-memory matrix descriptor of a K-major tile with 128-byte rows in the 128B swizzle: start address >> 4
 * (bits 0-13), leading byte offset (unused for swizzled K-major, 1 by convention; bits 16-29), stride byte offset
 * 1024 >> 4 between 8-row groups (bits 32-45), base offset 0 (1024-aligned tiles; bits 49-51), layout 1 = 128B
 * swizzle (bits 62-63). */
static __device__ __forceinline__ uint64_t smem_desc(uint32_t addr) {
    return (uint64_t)((addr & 0x3FFFF) >> 4) | ((uint64_t)1 << 16) | ((uint64_t)(1024 >> 4) << 32) |
           ((uint64_t)1 << 62);
}
static __device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
static __device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N> static __device__ __forceinline__ void wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
/* Keeps the compiler from moving reads/writes of an accumulator across the asynchronous wgmma's wait. */
static __device__ __forceinline__ void reg_fence(float &r) { asm volatile("" : "+f"(r)::"memory"); }

#define F8(d, i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), \
                 "+f"(d[i + 6]), "+f"(d[i + 7])
#define F32(d, i) F8(d, i), F8(d, i + 8), F8(d, i + 16), F8(d, i + 24)

/* D[64 x 256] += A[64 x 16] B[16 x 256]^T, A and B K-major in shared memory: bf16, or fp16 (F16: w22_mm.f16). T is
 * the operands' PTX type. */
#define WG_N256_ASM(T)                                                                                                 \
    asm volatile(                                                                                                      \
        "{\n"                                                                                                          \
        "wgmma.mma_async.sync.aligned.m64n256k16.f32." T "." T " {"                                                    \
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"                                        \
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31,"                              \
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47,"                              \
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63,"                              \
        "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79,"                              \
        "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95,"                              \
        "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111,"                  \
        "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"               \
        "}, %128, %129, 1, 1, 1, 0, 0;\n" /* scale-d (accumulate), scale-a, scale-b, A and B not transposed */         \
        "}\n"                                                                                                          \
        : F32(d, 0), F32(d, 32), F32(d, 64), F32(d, 96)                                                                \
        : "l"(da), "l"(db))
template <bool F16 = false>
static __device__ __forceinline__ void wgmma_n256(float d[128], uint64_t da, uint64_t db) {
    if (F16)
        WG_N256_ASM("f16");
    else
        WG_N256_ASM("bf16");
}
#undef WG_N256_ASM
/* D[64 x 192] += A[64 x 16] B[16 x 192]^T (route.h's 192 tile: the Wan2.1 decoder's 192-channel convs). */
static __device__ __forceinline__ void wgmma_n192(float d[96], uint64_t da, uint64_t db) {
    asm volatile(
        "{\n"
        "wgmma.mma_async.sync.aligned.m64n192k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31,"
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47,"
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63,"
        "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79,"
        "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95"
        "}, %96, %97, 1, 1, 1, 0, 0;\n"
        "}\n"
        : F32(d, 0), F32(d, 32), F32(d, 64)
        : "l"(da), "l"(db));
}
/* D[64 x 96] += A[64 x 16] B[16 x 96]^T (route.h's 96 tile: the Wan2.1 decoder's 96-channel convs). */
static __device__ __forceinline__ void wgmma_n96(float d[48], uint64_t da, uint64_t db) {
    asm volatile(
        "{\n"
        "wgmma.mma_async.sync.aligned.m64n96k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31,"
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47"
        "}, %48, %49, 1, 1, 1, 0, 0;\n"
        "}\n"
        : F32(d, 0), F8(d, 32), F8(d, 40)
        : "l"(da), "l"(db));
}
/* D[64 x 128] += A[64 x 16] B[16 x 128]^T. */
static __device__ __forceinline__ void wgmma_n128(float d[64], uint64_t da, uint64_t db) {
    asm volatile(
        "{\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31,"
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47,"
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
        "}, %64, %65, 1, 1, 1, 0, 0;\n"
        "}\n"
        : F32(d, 0), F32(d, 32)
        : "l"(da), "l"(db));
}
#undef F32
#undef F8

/* ---- the stage ring in shared memory ---- */

template <int BN, int STAGES> struct wg_layout {
    static constexpr int a_bytes = WG_BM * WG_ROW_BYTES;            /* 16 KB */
    static constexpr int b_bytes = BN * WG_ROW_BYTES;               /* 32, 24, 16 or 12 KB */
    static constexpr int stage_bytes = a_bytes + b_bytes;           /* multiple of 1024: every tile 1024-aligned */
    static constexpr int bars_off = STAGES * stage_bytes;           /* full[STAGES], empty[STAGES] */
    static constexpr int ftab_off = bars_off + 2 * STAGES * 8;      /* frame pointers ftab[BM + 3] */
    static constexpr int rows_off = ftab_off + (WG_BM + 4) * 8;     /* rows_a[BM], rows_f[BM], rows_s[BM] */
    static constexpr int bytes = rows_off + 3 * WG_BM * 4 + 1024;   /* + slack to align the base to 1024 */
    static_assert(stage_bytes % 1024 == 0, "the 128B swizzle needs 1024-aligned tiles");
    static_assert(bytes <= 227 * 1024, "shared memory beyond the sm_90 per-block limit (227 KB)");
    static_assert(STAGES >= 3, "at least 3 stages");
};

/* ---- pieces of the kernels ---- */

/* Thread 0: the ring's barriers (full[s] counts `full_arrivals`, empty[s] `empty_arrivals`), made visible to the
 * TMA unit, and the tensor maps prefetched (the shortcut's where g has one). The caller synchronizes the block after. */
template <int STAGES>
static __device__ __forceinline__ void wg_init_ring(uint32_t full0, uint32_t empty0, int full_arrivals,
                                                    int empty_arrivals, const CUtensorMap *tm_b,
                                                    const CUtensorMap *tm_sc, const w22_mm &g) {
    for (int s = 0; s < STAGES; s++) {
        mbar_init(full0 + 8 * s, full_arrivals);
        mbar_init(empty0 + 8 * s, empty_arrivals);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    fence_proxy_async(); /* the inits, before the TMA unit (async proxy) completes bytes on them */
    prefetch_tensormap(tm_b);
    if (g.sc) prefetch_tensormap(tm_sc);
}

/* One stage of a consumer warpgroup: 4 x wgmma (K = 64; +32 bytes along the swizzled row per k16 step), one
 * commit group. F16: fp16 operands (w22_mm.f16), built for the 256 tile alone (a batch's TMA store). */
template <int BN, bool F16 = false>
static __device__ __forceinline__ void wg_mma_stage(float *acc, uint64_t da, uint64_t db) {
    static_assert(!F16 || BN == 256, "fp16 operands: the 128 x 256 tile only");
    wgmma_fence();
#pragma unroll
    for (int k = 0; k < WG_BK / 16; k++) {
        if (BN == 256)
            wgmma_n256<F16>(acc, da + 2 * k, db + 2 * k);
        else if (BN == 192)
            wgmma_n192(acc, da + 2 * k, db + 2 * k);
        else if (BN == 96)
            wgmma_n96(acc, da + 2 * k, db + 2 * k);
        else
            wgmma_n128(acc, da + 2 * k, db + 2 * k);
    }
    wgmma_commit();
}

/* The epilogue of consumer warpgroup cw from its registers: rows m0 + r below m_end. Accumulator layout of m64nN:
 * thread (warp w, lane l) holds rows 16 w + l / 4 (+ 8) and, per 8-column block j, columns 8 j + 2 (l % 4) + {0, 1}:
 * acc[4 j + 2 h + {0, 1}] for row half h. N % BN == 0: every column is < N. po, pr: the tile's phase's output and
 * residual offsets (w22_mm.ph_o, ph_r; 0 for a single GEMM). */
template <int BN>
static __device__ __forceinline__ void wg_store_tile(const w22_mm &g, const float *acc, int m0, int m_end, int n0,
                                                     int cw, int warp4, int lane, int HW, int po, int pr) {
    const int gq = lane >> 2, tq = lane & 3;
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int m = m0 + cw * 64 + warp4 * 16 + gq + h * 8;
        if (m >= m_end) continue;
        long orow, rrow;
        w22_epilogue_row(g, m, HW, &orow, &rrow);
        orow += po, rrow += pr;
#pragma unroll
        for (int j = 0; j < BN / 8; j++) {
            const int n = n0 + j * 8 + tq * 2;
            w22_epilogue_pair(g, orow, rrow, n, acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1]);
        }
    }
}

/* 4 x 4 transpose of one register per lane and block within a quad: before, v[b] is this lane's pair (packed) of
 * block b of a group of four; after, it is lane b's pair of block tq. Two butterfly steps (xor 1, xor 2), each
 * sending the two registers whose block index differs from the lane's in that bit; every lane of the warp takes
 * part. */
static __device__ __forceinline__ void wg_quad_transpose_u32(uint32_t v[4], int tq) {
#pragma unroll
    for (int bit = 1; bit <= 2; bit <<= 1) {
        const bool mine = tq & bit;
#pragma unroll
        for (int k = 0; k < 2; k++) {
            const int lo = bit == 1 ? 2 * k : k, hi = lo + bit;
            uint32_t x = mine ? v[lo] : v[hi];
            x = __shfl_xor_sync(0xffffffffu, x, bit);
            if (mine) v[lo] = x;
            else v[hi] = x;
        }
    }
}

/* Within each quad of lanes (the four that hold one accumulator row's 8-column blocks as pairs), a 4 x 4 transpose of
 * pairs: before, v[2 b + e] is this lane's pair (columns 2 tq + e) of block b of a group of four; after, it is lane
 * b's pair of block tq: the lane holds block tq's 8 adjacent columns. As two transposes of one register per pair. */
static __device__ __forceinline__ void wg_quad_transpose(float v[8], int tq) {
#pragma unroll
    for (int e = 0; e < 2; e++) {
        uint32_t u[4] = {__float_as_uint(v[e]), __float_as_uint(v[2 + e]), __float_as_uint(v[4 + e]),
                         __float_as_uint(v[6 + e])};
        wg_quad_transpose_u32(u, tq);
#pragma unroll
        for (int b = 0; b < 4; b++) v[2 * b + e] = __uint_as_float(u[b]);
    }
}

/* wg_store_tile with 16-byte accesses (v10's; the GEMM passed w22_route_epilogue_vec_ok): per group of four
 * 8-column blocks the quad transposes its pairs, then each lane adds bias and residual to 8 adjacent channels and
 * stores them as one vector. A quarter of the memory instructions of the pair store, and whole 32-byte sectors.
 * Every lane runs the shuffles; only rows below m_end touch memory. */
template <int BN>
static __device__ __forceinline__ void wg_store_tile_vec(const w22_mm &g, const float *acc, int m0, int m_end,
                                                         int n0, int cw, int warp4, int lane, int HW, int po, int pr) {
    const int gq = lane >> 2, tq = lane & 3;
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int m = m0 + cw * 64 + warp4 * 16 + gq + h * 8;
        const bool live = m < m_end;
        long orow = 0, rrow = 0;
        if (live) w22_epilogue_row(g, m, HW, &orow, &rrow);
        orow += po, rrow += pr;
#pragma unroll
        for (int jg = 0; jg < BN / 32; jg++) {
            float v[8];
#pragma unroll
            for (int b = 0; b < 4; b++) {
                v[2 * b] = acc[4 * (4 * jg + b) + 2 * h];
                v[2 * b + 1] = acc[4 * (4 * jg + b) + 2 * h + 1];
            }
            wg_quad_transpose(v, tq);
            if (live) w22_epilogue_vec8(g, orow, rrow, n0 + (4 * jg + tq) * 8, v);
        }
    }
}

/* ---- the overlapped epilogue (the TMA kernel's) ----
 * Why: with the stores in the tile's tail the tensor cores idle while the consumers add and store (docs/PERF.md
 * v10: 10% of a 256-channel conv, 20% of a phase conv). Here a tile's tail packs its accumulators: + bias (+ shortcut
 * bias) in fp32, rounded to bf16 pairs, transposed within the quad (8 adjacent channels per lane, as
 * wg_store_tile_vec); row half 1 is held in registers (32: with 128 accumulators the consumers' 232 have no room
 * for both halves, which spilled) and row half 0 staged in shared memory (the 32 KB the stage ring leaves; where
 * there is no staging, epi 0, half 0 is stored in the tile's tail); both are stored one 16-byte vector per stage during the next
 * tile's first BN / 16 stages, between each stage's wgmma issue and its wait, so the stores overlap the MMAs
 * (docs/PERF.md v11, v12). The residual is added to the bf16-rounded conv output and rounded again (as diffusers' bf16
 * decode does; the vec store rounds once). bf16 outputs only (out_f32: the vec store). */
#define WG_EPI_STRIDE (256 * 16) /* staging: vector v of consumer thread t at v * 4 KB + t * 16 (lanes side by side) */

template <int BN> struct wg_defer {
    static constexpr int NV = BN / 32; /* vectors per thread held in registers: row half 1 */
    uint32_t pk[NV][4]; /* the vectors still to store, next first (each step stores pk[0] and shifts the rest down:
                         * register arrays take no runtime index, and one copy of the step's code keeps the loop
                         * small; indexing pk[step] needs a branch per step, which costs more than it hides:
                         * docs/PERF.md v11) */
    int orow[2]; /* output row offset of each half (elements, the phase's included: the host checks that they fit);
                  * -1: past the tile */
    int rrow[2]; /* residual row offset (the phase's r_coff included) */
    int n0;
};
static __device__ __forceinline__ uint32_t wg_pack_bf16(float a, float b) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
    return *(const uint32_t *)&h;
}
static __device__ __forceinline__ uint32_t wg_pack_f16(float a, float b) {
    const __half2 h = __floats2half2_rn(a, b);
    return *(const uint32_t *)&h;
}

/* One vector of 8 channels from n on (packed bf16 pairs) + residual (bf16 + bf16 in fp32, rounded), one 16-byte
 * store. */
static __device__ __forceinline__ void wg_defer_store_vec(const w22_mm &g, const uint32_t p[4], int orow, int rrow,
                                                          int n) {
    long ocol, rcol;
    w22_epilogue_cols(g, n, &ocol, &rcol);
    uint32_t w[4] = {p[0], p[1], p[2], p[3]};
    if (g.res) {
        float f[8];
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const float2 a = __bfloat1622float2(*(const __nv_bfloat162 *)&w[k]);
            f[2 * k] = a.x, f[2 * k + 1] = a.y;
        }
        w22_add_res8(g, rrow + rcol, f);
#pragma unroll
        for (int k = 0; k < 4; k++) w[k] = wg_pack_bf16(f[2 * k], f[2 * k + 1]);
    }
    *(uint4 *)((bf16 *)g.out + orow + ocol) = make_uint4(w[0], w[1], w[2], w[3]);
}

/* The tile's tail: accumulators (+ biases) into d, rows m0 + r below m_end marked for storing, their offsets with
 * the tile's phase's po, pr (wg_store_tile) in them: the next tile may be of another phase. Every lane runs the
 * shuffles. */
template <int BN>
static __device__ __forceinline__ void wg_defer_pack(wg_defer<BN> &d, const w22_mm &g, const float *acc, int m0,
                                                     int m_end, int n0, int cw, int warp4, int lane, int HW, int po,
                                                     int pr, uint32_t epi) {
    const int gq = lane >> 2, tq = lane & 3;
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int m = m0 + cw * 64 + warp4 * 16 + gq + h * 8;
        d.orow[h] = d.rrow[h] = -1;
        if (m < m_end) {
            long orow, rrow;
            w22_epilogue_row(g, m, HW, &orow, &rrow);
            d.orow[h] = (int)orow + po;
            d.rrow[h] = (int)rrow + pr;
        }
    }
    d.n0 = n0;
#pragma unroll
    for (int jg = 0; jg < BN / 32; jg++) {
        uint32_t p0[4];
#pragma unroll
        for (int b = 0; b < 4; b++) {
            const int n = n0 + (4 * jg + b) * 8 + 2 * tq;
            float2 bs = make_float2(0.f, 0.f);
            if (g.bias) bs = *(const float2 *)(g.bias + n);
            if (g.sc_bias) {
                const float2 sb = *(const float2 *)(g.sc_bias + n);
                bs.x += sb.x, bs.y += sb.y;
            }
            const int a = 4 * (4 * jg + b);
            p0[b] = wg_pack_bf16(acc[a] + bs.x, acc[a + 1] + bs.y);
            d.pk[jg][b] = wg_pack_bf16(acc[a + 2] + bs.x, acc[a + 3] + bs.y);
        }
        wg_quad_transpose_u32(p0, tq);
        wg_quad_transpose_u32(d.pk[jg], tq);
        if (epi) /* always, where called (MODE_EPI_OVERLAP); the test keeps the kernels' register budget */
            asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(epi + jg * WG_EPI_STRIDE), "r"(p0[0]),
                         "r"(p0[1]), "r"(p0[2]), "r"(p0[3])
                         : "memory"); /* half 0 to this thread's staging: wg_defer_step_smem stores it */
    }
}

/* Step `step` (0 .. BN / 32 - 1, in order) of the deferred store: pk[0], the held half's vector of channel group
 * `step`, unless its row is past the tile. Called right after a stage's wgmmas are issued, while the previous
 * stage's still run: two stages of MMAs cover its latency (the residual's load included). */
template <int BN>
static __device__ __forceinline__ void wg_defer_step(const wg_defer<BN> &d, const w22_mm &g, int step, int tq) {
    if (d.orow[1] >= 0) wg_defer_store_vec(g, d.pk[0], d.orow[1], d.rrow[1], d.n0 + (4 * step + tq) * 8);
}

/* Step BN / 32 + v (v12): half 0's vector of channel group v, staged in shared
 * memory by wg_defer_pack (each thread reads back only what it wrote: no barrier). */
template <int BN>
static __device__ __forceinline__ void wg_defer_step_smem(const wg_defer<BN> &d, const w22_mm &g, int v, int tq,
                                                          uint32_t epi) {
    if (d.orow[0] < 0) return;
    uint32_t p[4];
    asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(p[0]), "=r"(p[1]), "=r"(p[2]), "=r"(p[3])
                 : "r"(epi + v * WG_EPI_STRIDE)
                 : "memory");
    wg_defer_store_vec(g, p, d.orow[0], d.rrow[0], d.n0 + (4 * v + tq) * 8);
}

/* After each step (every lane, stored or not): the next vector to pk[0]. */
template <int BN> static __device__ __forceinline__ void wg_defer_shift(wg_defer<BN> &d) {
#pragma unroll
    for (int v = 0; v + 1 < wg_defer<BN>::NV; v++)
#pragma unroll
        for (int k = 0; k < 4; k++) d.pk[v][k] = d.pk[v + 1][k];
}

typedef CUresult (*encode_tiled_fn)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *, const cuuint64_t *,
                                    const cuuint64_t *, const cuuint32_t *, const cuuint32_t *, CUtensorMapInterleave,
                                    CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
/* The tensor maps' element type: fp16 for w22_mm.f16's operands and output, else bf16 (2 bytes either way). */
static inline CUtensorMapDataType w22_map_type(int f16) {
    return f16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
}
/* K-major [rows][K] bf16 (f16: fp16; row stride `stride` elements) as a 2D tensor map with {64, box_rows} boxes,
 * 128B swizzle. */
w22_status w22_wgmma_kmajor_map(w22_cuda *c, CUtensorMap *m, const bf16 *ptr, long K, long rows, long stride,
                                int box_rows, int f16, const char *what);
typedef CUresult (*encode_im2col_fn)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *, const cuuint64_t *,
                                     const cuuint64_t *, const int *, const int *, cuuint32_t, cuuint32_t,
                                     const cuuint32_t *, CUtensorMapInterleave, CUtensorMapSwizzle,
                                     CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
/* conv_sm90_wgmma_tma.cu: init (sets c->tmap_im2col), whether the im2col encoder is there, the launch (which GEMMs
 * it takes: route.h's w22_route_tma_blocker) */
w22_status w22_cuda_wgmma_tma_init(w22_cuda *c);
int w22_cuda_wgmma_tma_on(const w22_cuda *c);
w22_status w22_cuda_gemm_wgmma_tma(w22_cuda *c, const w22_mm *g, const char *what);


#endif
