/* The wgmma conv: the implicit GEMM of a conv (w22_mm, cuda_internal.h) on wgmma.mma_async (bf16 x bf16 -> fp32, or
 * fp16 x fp16 for a batch of w22_mm.f16 on the TMA store's tile; both operands in shared memory), a warp-specialized
 * ring on mbarriers: one producer thread issues the TMA loads of A and B, two consumer warpgroups of 64 rows x BN
 * columns multiply. Tiles 128 x 256 (4 stages, 128 fp32 accumulators a
 * consumer thread), 128 x 128 (6 stages) where N % 256 != 0, 128 x 192 (5 stages) or 128 x 96 (7) where N % 128 != 0
 * (route.h's w22_route_tma_bn). Its measurements: docs/PERF.md v9-v21.
 * The pieces: this file, the kernel's setup and its launch; tma_producer.cuh, the loads (warpgroup 0);
 * tma_consumer.cuh, the wgmmas and the choice of epilogue (warpgroups 1-2); tma_split_tail.cuh, the split tail;
 * tma_epi_store.cuh, the TMA-store epilogue; tma_maps.cuh, the host's tensor maps; route.h, which GEMMs come here and
 * how they launch (tile, tiles or pairs, split tail, epilogue); wgmma_common.cuh, the PTX wrappers, the named barrier
 * (WG_BAR_CONSUMERS), the ring's layout, the other epilogues.
 *
 * A: the TMA's im2col mode, one instruction per stage (128 rows x 64 channels). The map describes the frames as
 * {C, W, H, frames} (with a border: {C, W + 2, H + 2, frames} from pixel (-1, -1)); a stage walks tap (0, 0)'s H x W
 * box in (x, y, frame) order from the tile's first pixel, each read at (x + dx, y + dy). What must hold:
 *   - a tile never spans two frames (the causal history frames are other sources: one map per source, chosen per
 *     tap), so tiles are per frame, ceil(H W / 128) of them; a partial last tile reads on into the next frame or past
 *     the tensor (zeros from the TMA) and stores none of those rows;
 *   - padding is the stored border (zeros, or a neighbour rank's halo rows), never the TMA's zero fill: with ks > 1
 *     output (y, x)'s tap (dy, dx) reads map coordinate (x + dx + 1 - pad_x, y + dy + 1 - pad_y); with ks = 1 the map
 *     starts at (0, 0). The 1x1 shortcut is the same with ks = 1 over g.sc.
 * Tiles run on a persistent grid (one CTA per SM, the ring carried across tiles). Epilogues: the overlapped one (a
 * tile's outputs packed in its tail, stored during the next tile's first stages: wgmma_common.cuh) for convs with
 * phases, a DupUp or time-split output, or a residual and a shortcut; the others (and the Winograd batch GEMMs) store
 * by the TMA from the 4th stage's shared memory (MODE_EPI_TMA, a ring of 3), a plain residual taken as extra K.
 * An upsample conv's four phase GEMMs are one launch (w22_mm.phases), tiles ordered (M tile or pair, phase, N tile)
 * so that a pixel block's four phases read their input and DupUp residual from L2; phase p's A map, load corner and
 * B rows are the producer's, its output and residual offsets (ph_o, ph_r) the consumers', so the deferred store
 * needs nothing of the phase.
 * Clusters of 2: the 128 x 256 tiles of two M tiles of one N tile share B, each CTA multicasting half of it. What
 * must hold: empty[s] counts both CTAs' consumer warps (a stage is refilled only when the peer has released it); the
 * pair starts and ends with a cluster barrier; with odd M tiles the last pair's second CTA loads its B half and
 * stores nothing; the remote arrival releases at CTA scope (at cluster scope it also waited for the warp's global
 * stores: pairs 30% slower, v15). */
#include "wgmma_common.cuh"

/* The kernel's `mode` bits: the epilogue's store (MODE_EPI_VEC: 8 channels per 16-byte access, else pairs;
 * MODE_EPI_OVERLAP: stored during the next tile's first stages, row half 1 from registers, row half 0 through
 * shared memory;
 * MODE_EPI_TMA: the TMA store), chosen per GEMM by route.h (w22_route_tail_epilogue, w22_route_tma_store_*; mode_of
 * maps its answer to these bits), and the phase tiles' order. No measurement modes: time a part with ncu. */
enum {
    MODE_EPI_VEC = 1, MODE_EPI_OVERLAP = 8, MODE_PHASE_MINOR = 32,
    MODE_EPI_TMA = 64 /* the tile through shared memory to TMA stores (kernel TE > 0: wg_epi_tma) */
};

/* The stage ring (wg_layout) and, where the cp.async kernels keep their row tables, the overlapped epilogue's staging
 * of row half 0 (MODE_EPI_OVERLAP): BN / 32 vectors of 16 bytes per consumer thread. */
template <int BN, int STAGES, int TE = 0> struct tma_layout {
    static constexpr int epi_off = wg_layout<BN, STAGES>::ftab_off;
    /* TE > 0: the TMA store's staging, TE buffers of one box each, 128 rows x 64 channels (16 KB; 128B swizzle:
     * 1024-aligned): BN / 64 of them hold the whole tile, fewer take it in turns (wg_epi_tma) */
    static constexpr int stg_off = (epi_off + 1023) / 1024 * 1024;
    static constexpr int word_off = TE ? stg_off + TE * WG_BM * 128 /* the split tail's "arrived last" */
                                       : epi_off + BN / 32 * WG_EPI_STRIDE;
    static constexpr int bytes = word_off + 16 + 1024; /* + slack to align the base */
    static_assert(bytes <= 227 * 1024, "shared memory beyond the sm_90 per-block limit (227 KB)");
};

#include "tma_split_tail.cuh" /* the split tail: work items, the pieces' arrival and sum */

#include "tma_epi_store.cuh" /* the TMA store epilogue (wg_epi_tma) */

/* Work item w's tile: its phase p, M tile tm (of mt per phase) and first output channel n0. In a cluster of 2 (CL 2)
 * a tile index names a pair of M tiles of one N tile: rank r takes M tile 2 q + r; where mt is odd the last pair's
 * rank 1 has none (valid false: it loads M tile mt - 1, for its B half, and stores nothing). Phase-major (tpp tiles
 * per phase), or with MODE_PHASE_MINOR (np phases) the phases of an M tile (pair) adjacent: (q, p, n), n fastest. */
struct wg_tile {
    int p, tm, n0;
    bool valid;
};
template <int BN, int CL>
static __device__ __forceinline__ wg_tile wg_tile_of(int tile_ix, int tpp, int tiles_n, int mt, int crank, int np_minor) {
    wg_tile r;
    int j, q;
    if (np_minor) {
        q = tile_ix / (np_minor * tiles_n);
        j = tile_ix - q * np_minor * tiles_n;
        r.p = j / tiles_n;
        j = j - r.p * tiles_n + q * tiles_n; /* as phase-major's j: q tiles_n + n */
    } else {
        r.p = tile_ix / tpp;
        j = tile_ix - r.p * tpp, q = j / tiles_n;
    }
    r.n0 = (j - q * tiles_n) * BN;
    r.tm = CL * q + crank;
    r.valid = r.tm < mt;
    if (!r.valid) r.tm = mt - 1;
    return r;
}

/* The kernel's schedule, as both roles read it: the items (tiles, pairs' tiles, pieces of split tiles) and their
 * order, the K stages, the load corner's shift. */
#define TMA_SCHED_PARAMS                                                                                         \
    int tpf, int cx, int cy, int main_iters, int iters, int tiles_n, int tpp, int mt, int tile0, int whole, int split, \
        int items, int np_minor, int crank, int w0, int wstep
#define TMA_SCHED_ARGS tpf, cx, cy, main_iters, iters, tiles_n, tpp, mt, tile0, whole, split, items, np_minor, crank, w0, wstep

#include "tma_producer.cuh" /* warpgroup 0: the loads */
#include "tma_consumer.cuh" /* warpgroups 1 and 2: the wgmmas and the epilogues */

/* F16: fp16 operands and output (w22_mm.f16, a batch's; built for the TMA store's tile alone), else bf16. The loads
 * copy 2-byte elements of either; the wgmma's type and the store's rounding differ. */
template <int BN, int STAGES, int CL, int TE, bool F16>
__global__ void __launch_bounds__(WG_THREADS, 1)
    w22_conv_wgmma_tma_kernel(const __grid_constant__ CUtensorMap tm_b, const __grid_constant__ CUtensorMap tm_scb,
                              const __grid_constant__ CUtensorMap tm_a, const __grid_constant__ CUtensorMap tm_h0,
                              const __grid_constant__ CUtensorMap tm_h1, const __grid_constant__ CUtensorMap tm_sca,
                              const __grid_constant__ CUtensorMap tm_o, /* TE: the output's map */
                              const __grid_constant__ w22_mm g, int tpf, int cx, int cy, int main_iters, int iters,
                              int tiles_n, int tpp, int mt, int tile0, int whole, int split, int items,
                              float *part, unsigned *count, int mode, int box_px) {
    typedef wg_layout<BN, STAGES> L;
    extern __shared__ unsigned char smem_raw[];
    const uint32_t raw = (uint32_t)__cvta_generic_to_shared(smem_raw);
    const uint32_t base = (raw + 1023u) & ~1023u;
    const uint32_t full0 = base + L::bars_off, empty0 = full0 + STAGES * 8;
    const int tid = threadIdx.x, wg = tid >> 7; /* 0: the producer warpgroup; 1, 2: consumers */
    const int HW = g.H * g.W;
    const int np_minor = mode & MODE_PHASE_MINOR ? g.phases : 0; /* the tile order (wg_tile_of) */
    /* CL 2: this CTA's rank in its cluster; the clusters share out the items as the CTAs do with CL 1 */
    const int crank = CL == 2 ? (int)cluster_rank() : 0, w0 = blockIdx.x / CL, wstep = gridDim.x / CL;
    if (tid == 0) { /* full[s]: the producer's one arrive.expect_tx; the TMA completes both loads' bytes */
        wg_init_ring<STAGES>(full0, empty0, 1, EMPTY_ARRIVALS * CL, &tm_b, &tm_scb, g);
        prefetch_tensormap(&tm_a);
        if (g.hist_n || g.phases) prefetch_tensormap(&tm_h0), prefetch_tensormap(&tm_h1);
        if (g.sc || g.phases) prefetch_tensormap(&tm_sca);
        if (TE) prefetch_tensormap(&tm_o);
    }
    __syncthreads();
    if (CL == 2) cluster_sync_all(); /* the peer's barriers are initialized before any multicast or remote arrival */

    if (wg == 0) {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(WG_PRODUCER_REGS));
        if (tid == 0)
            tma_produce<BN, STAGES, CL>(tm_b, tm_scb, tm_a, tm_h0, tm_h1, tm_sca, g, TMA_SCHED_ARGS, base, full0, empty0);
    } else {
        asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(WG_CONSUMER_REGS));
        tma_consume<BN, STAGES, CL, TE, F16>(&tm_o, g, TMA_SCHED_ARGS, HW, base, full0, empty0, tid, wg, mode, part,
                                             count, box_px);
    }
    if (CL == 2) cluster_sync_all(); /* no CTA leaves while its peer may still arrive on its barriers or load into it */
}

/* ---- host side ---- */


/* route.h's epilogue as the kernel's mode bits: the overlapped one (stores overlapped with the next tile, row half 0
 * through shared memory; docs/PERF.md v10-v12) where the GEMM allows it, else the vector or pair stores in the
 * tile's tail, or the TMA store. The bits must be the ones a kernel in run_tma's list is instantiated for. */
static int mode_of(w22_epilogue e) {
    return e == W22_EPI_TMA_STORE ? MODE_EPI_TMA
           : e == W22_EPI_OVERLAP ? MODE_EPI_OVERLAP | MODE_EPI_VEC
           : e == W22_EPI_VEC     ? MODE_EPI_VEC
                                  : 0;
}

static w22_route_gpu gpu_of(const w22_cuda *c) {
    w22_route_gpu u;
    u.sms = c->sms, u.clusters = c->tma_clusters, u.on_side = c->on_side;
    return u;
}

int w22_cuda_wgmma_tma_on(const w22_cuda *c) { return c->tmap_im2col != NULL; }

/* The launch attribute of a cluster of 2 along x. */
static cudaLaunchAttribute cluster2_attr(void) {
    cudaLaunchAttribute a;
    memset(&a, 0, sizeof a);
    a.id = cudaLaunchAttributeClusterDimension;
    a.val.clusterDim.x = 2;
    a.val.clusterDim.y = a.val.clusterDim.z = 1;
    return a;
}

w22_status w22_cuda_wgmma_tma_init(w22_cuda *c) {
    CU_TRY(cudaFuncSetAttribute(w22_conv_wgmma_tma_kernel<256, 4, 1, 0, false>,
                                cudaFuncAttributeMaxDynamicSharedMemorySize, tma_layout<256, 4>::bytes));
    CU_TRY(cudaFuncSetAttribute(w22_conv_wgmma_tma_kernel<256, 4, 2, 0, false>,
                                cudaFuncAttributeMaxDynamicSharedMemorySize, tma_layout<256, 4>::bytes));
    CU_TRY(cudaFuncSetAttribute(w22_conv_wgmma_tma_kernel<128, 6, 1, 0, false>,
                                cudaFuncAttributeMaxDynamicSharedMemorySize, tma_layout<128, 6>::bytes));
    CU_TRY(cudaFuncSetAttribute(w22_conv_wgmma_tma_kernel<192, 5, 1, 0, false>,
                                cudaFuncAttributeMaxDynamicSharedMemorySize, tma_layout<192, 5>::bytes));
    CU_TRY(cudaFuncSetAttribute(w22_conv_wgmma_tma_kernel<96, 7, 1, 0, false>,
                                cudaFuncAttributeMaxDynamicSharedMemorySize, tma_layout<96, 7>::bytes));
    CU_TRY(cudaFuncSetAttribute(w22_conv_wgmma_tma_kernel<256, 3, 1, 4, false>,
                                cudaFuncAttributeMaxDynamicSharedMemorySize, tma_layout<256, 3, 4>::bytes));
    CU_TRY(cudaFuncSetAttribute(w22_conv_wgmma_tma_kernel<256, 3, 2, 4, false>,
                                cudaFuncAttributeMaxDynamicSharedMemorySize, tma_layout<256, 3, 4>::bytes));
    CU_TRY(cudaFuncSetAttribute(w22_conv_wgmma_tma_kernel<256, 3, 1, 4, true>, /* fp16: a batch's */
                                cudaFuncAttributeMaxDynamicSharedMemorySize, tma_layout<256, 3, 4>::bytes));
    /* the clusters of 2 that fit at once: the persistent grid of the cluster kernel (an SM left alone in its GPC
     * idles); 0: no cluster launches */
    c->tma_clusters = 0;
    {
        cudaLaunchConfig_t lc;
        memset(&lc, 0, sizeof lc);
        cudaLaunchAttribute at = cluster2_attr();
        lc.gridDim = dim3(2 * (unsigned)(c->sms > 0 ? c->sms : 2));
        lc.blockDim = dim3(WG_THREADS);
        lc.dynamicSmemBytes = tma_layout<256, 4>::bytes;
        lc.attrs = &at;
        lc.numAttrs = 1;
        int n = 0;
        CU_TRY(cudaOccupancyMaxActiveClusters(&n, w22_conv_wgmma_tma_kernel<256, 4, 2, 0, false>, &lc));
        c->tma_clusters = n;
    }
    void *fn = NULL;
    cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
    CU_TRY(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeIm2col", &fn, 12000, cudaEnableDefault, &q));
    if (!fn || q != cudaDriverEntryPointSuccess)
        return w22_fail(W22_ERR_CUDA, "wgmma conv: the driver has no cuTensorMapEncodeIm2col (query %d)", (int)q);
    c->tmap_im2col = q == cudaDriverEntryPointSuccess ? fn : NULL;
    return W22_OK;
}

#include "tma_maps.cuh" /* the host side's tensor maps: the pixels' im2col maps, the TMA store's */

/* The split tail's partial accumulators: one slot per piece, 128 fp32 accumulators per consumer thread. */
#define SPLIT_PART_BYTES ((size_t)W22_SPLIT_SLOTS * 128 * 256 * 4)

/* The partial slots and the tiles' arrival counts, at the first split launch (16.5 MB; the counts zeroed once:
 * each launch leaves them at 0). */
static w22_status split_buffers(w22_cuda *c) {
    if (c->split_part) return W22_OK;
    const size_t bytes = SPLIT_PART_BYTES + W22_SPLIT_SLOTS * sizeof(unsigned);
    W22_TRY(w22_cuda_malloc(c, bytes, &c->split_part, "the TMA conv's split tail (partial accumulators)"));
    CU_TRY(cudaMemsetAsync((char *)c->split_part + SPLIT_PART_BYTES, 0, W22_SPLIT_SLOTS * sizeof(unsigned), c->stream));
    return W22_OK;
}

/* A launch of the GEMM's items: with CL 2 the first `lim` pairs (0: all), with CL 1 the tiles from `tile0` on (the
 * tail the pairs left: one_round lets a single round split). F16: the fp16 kernel (w22_mm.f16; CL 1 only). */
template <int BN, int STAGES, int CL, int TE, bool F16 = false>
static w22_status launch(w22_cuda *c, const w22_mm *g, int mode, int *split_used, const char *what,
                         long lim, long tile0, int one_round) {
    const long K = (long)g->kt * g->ks * g->ks * g->cin;
    const int HW = g->H * g->W, F = g->M / HW, border = g->ks > 1, np = g->phases ? 4 : g->batch ? g->batch : 1;
    CUtensorMap tb, ts, ta, th0, th1, tsa;
    /* with phases: their four blocks of N rows as one map (phase p's rows from p N on); CL 2: half the box each */
    W22_TRY(w22_wgmma_kmajor_map(c, &tb, g->b, K, (long)np * g->N, g->b_sw, BN / CL, g->f16, what));
    /* the window's frames after the history: F + kt - 1 in all */
    /* a batch: one map over its GEMMs' frames, a_frames each */
    W22_TRY(im2col_map(c, &ta, g->a, g->a_sw, g->a_sh, g->a_sf, g->cin, g->W, g->H,
                       g->batch ? (int)(g->batch * g->a_frames) : F + g->kt - 1 - g->hist_n, border, g->pad_y, g->pad_x,
                       g->f16, what));
    th0 = th1 = ta; /* never read without history */
    if (g->hist_n) {
        W22_TRY(im2col_map(c, &th0, g->a_hist[0], g->a_sw, g->a_sh, g->a_sf, g->cin, g->W, g->H, 1, border, g->pad_y,
                           g->pad_x, g->f16, what));
        W22_TRY(im2col_map(c, &th1, g->a_hist[1], g->a_sw, g->a_sh, g->a_sf, g->cin, g->W, g->H, 1, border, g->pad_y,
                           g->pad_x, g->f16, what));
    }
    ts = tb, tsa = ta; /* never read without a shortcut */
    if (g->sc) {
        W22_TRY(w22_wgmma_kmajor_map(c, &ts, g->scb, g->sc_cin, g->N, g->sc_cin, BN / CL, g->f16, what));
        W22_TRY(im2col_map(c, &tsa, g->sc, g->sc_sw, g->sc_sh, g->sc_sf, g->sc_cin, g->W, g->H, F, 0, 0, 0, g->f16,
                           what));
    }
    if (g->phases) { /* phases 1-3's A maps (their pads) in the slots of the history and the shortcut, unused here */
        CUtensorMap *pm[3] = {&th0, &th1, &tsa};
        for (int p = 1; p < 4; p++)
            W22_TRY(im2col_map(c, pm[p - 1], g->a, g->a_sw, g->a_sh, g->a_sf, g->cin, g->W, g->H, F + g->kt - 1,
                               border, g->pad_y - (p >> 1), g->pad_x - (p & 1), g->f16, what));
    }
    CUtensorMap to = tb; /* never read without the TMA store */
    int box_px = 0;      /* the TMA store's pixels a box: 0 for a batch's dense rows (boxes of 128) */
    if (TE && g->batch) W22_TRY(out_map(c, &to, g, what));
    if (TE && !g->batch) W22_TRY(out_map_frames(c, &to, g, &box_px, what));
    const int main_iters = g->kt * g->ks * g->ks * w22_route_tma_slices(g->cin); /* route.h */
    const int iters = main_iters + (g->sc ? g->sc_cin / WG_BK : 0);
    const int tiles_n = g->N / BN, tpf = (HW + WG_BM - 1) / WG_BM;
    /* tiles per phase (the order: the kernel's wg_tile_of); CL 2: a tile index names a pair of M tiles */
    const long mt = (long)F * tpf, tpp = (mt + CL - 1) / CL * tiles_n, all = np * tpp;
    if (all > INT_MAX / CL || mt > INT_MAX)
        return w22_fail(W22_ERR_INVALID_ARG, "%s: %ld tiles is too many for one grid", what, all);
    const long tiles = lim ? lim : all - tile0; /* this launch's items */
    const int slots = CL == 2 ? c->tma_clusters : c->sms; /* what runs at once: CTAs, or clusters of 2 */
    const int cx = border ? 1 - g->pad_x : 0, cy = border ? 1 - g->pad_y : 0;
    const w22_route_gpu u = gpu_of(c);
    int whole = (int)tiles;
    const int split = w22_route_tma_split(g, &u, BN, CL, lim, tile0, one_round); /* route.h */
    if (split > 1) {
        whole = (int)tiles - (int)(tiles % slots);
        W22_TRY(split_buffers(c));
    }
    *split_used = split;
    c->route.ran_kernel = W22_GEMM_TMA;
    if (c->route.launches < 2) { /* as launched: the template's tile, clusters and staging */
        w22_route_launch *r = &c->route.ran[c->route.launches++];
        r->bn = BN, r->stages = STAGES, r->cl = CL, r->te = TE, r->split = split;
    }
    const int items = whole + ((int)tiles - whole) * split;
    const int grid = items > slots ? slots : items; /* the items' runners: CTAs or clusters */
    float *part = (float *)c->split_part;
    unsigned *count = (unsigned *)((char *)c->split_part + SPLIT_PART_BYTES);
    w22_mm kg = *g;
    if (!kg.phases && !kg.batch) /* the kernel adds them */
        memset(kg.ph_o, 0, sizeof kg.ph_o), memset(kg.ph_r, 0, sizeof kg.ph_r);
    static_assert(!F16 || CL == 1, "fp16: no clusters");
    if (CL == 1) {
        w22_conv_wgmma_tma_kernel<BN, STAGES, 1, TE, F16><<<grid, WG_THREADS, tma_layout<BN, STAGES, TE>::bytes,
                                                            c->stream>>>(
            tb, ts, ta, th0, th1, tsa, to, kg, tpf, cx, cy, main_iters, iters, tiles_n, (int)tpp, (int)mt, (int)tile0,
            whole, split, items, part, count, mode, box_px);
        return W22_OK;
    }
    cudaLaunchConfig_t lc;
    memset(&lc, 0, sizeof lc);
    cudaLaunchAttribute at = cluster2_attr();
    lc.gridDim = dim3(2 * (unsigned)grid);
    lc.blockDim = dim3(WG_THREADS);
    lc.dynamicSmemBytes = tma_layout<BN, STAGES, TE>::bytes;
    lc.stream = c->stream;
    lc.attrs = &at;
    lc.numAttrs = 1;
    CU_TRY(cudaLaunchKernelEx(&lc, w22_conv_wgmma_tma_kernel<BN, STAGES, CL, TE, F16>, tb, ts, ta, th0, th1, tsa, to,
                              kg, tpf, cx, cy, main_iters, iters, tiles_n, (int)tpp, (int)mt, 0, whole, split, items,
                              part, count, mode, box_px));
    return W22_OK;
}

/* The epilogue's mode bits for the GEMMs q[0..n-1] run as one launch (route.h). */
static int mode_for(const w22_mm *q, int n, const int *o_add, const int *r_add) {
    return mode_of(w22_route_tail_epilogue(q, n, o_add, r_add));
}

/* The kernel's path names: [tma_plan][phases][split][epilogue][tile: 128, 256, 192, 96]; a cluster needs the
 * 128 x 256 tile; with a tail, the split is the tail launch's. */
#define TMA_NAMES4(e, sfx)                                                                                        \
    {"wgmma 128x128 tma persistent" e sfx, "wgmma 128x256 tma persistent" e sfx, "wgmma 128x192 tma persistent" e sfx, \
     "wgmma 128x96 tma persistent" e sfx}
#define TMA_NAMES(sfx)                                                                                          \
    {TMA_NAMES4("", sfx), TMA_NAMES4(" vec", sfx), TMA_NAMES4(" defer", sfx)}
#define TMA_SPLIT(cl) {{TMA_NAMES(cl), TMA_NAMES(cl " split")}, {TMA_NAMES(cl " phases4"), TMA_NAMES(cl " split phases4")}}
static const char *const tma_names[3][2][2][3][4] = {TMA_SPLIT(""), TMA_SPLIT(" cluster2"),
                                                     TMA_SPLIT(" cluster2 tail")};
#undef TMA_SPLIT
#undef TMA_NAMES
#undef TMA_NAMES4
static const char *const tma_tma_names[3][2] = {
    {"wgmma 128x256 tma tma-store", "wgmma 128x256 tma tma-store split"},
    {"wgmma 128x256 tma tma-store cluster2", "wgmma 128x256 tma tma-store cluster2 split"},
    {"wgmma 128x256 tma tma-store cluster2 tail", "wgmma 128x256 tma tma-store cluster2 tail split"}};

/* A launch with the TMA store: its staging the whole tile (64 KB) on a ring of 3 stages (docs/PERF.md v20-v21):
 * the stage ring and the staging must fit the 227 KB together. */
template <int CL>
static w22_status launch_te(w22_cuda *c, const w22_mm *g, int mode, int *split, const char *what,
                            long lim, long tile0, int one_round) {
    return launch<256, 3, CL, 4>(c, g, mode, split, what, lim, tile0, one_round);
}

static w22_status run_tma(w22_cuda *c, const w22_mm *g, int mode, const char *what) {
    if (g->phases) mode |= MODE_PHASE_MINOR;
    /* always on a persistent grid (v9's run: -0.6% on f121 against one tile per CTA; c->sms >= 1) */
    const int bn = w22_route_tma_bn(g->N), tile = bn == 256 ? 1 : bn == 192 ? 2 : bn == 96 ? 3 : 0; /* route.h */
    const int epi = mode & MODE_EPI_OVERLAP ? 2 : mode & MODE_EPI_VEC ? 1 : 0;
    long lim, tile0;
    const w22_route_gpu u = gpu_of(c);
    const int plan = w22_route_tma_plan(g, &u, (mode & MODE_PHASE_MINOR) != 0, &lim, &tile0); /* route.h */
    w22_route *r = &c->route; /* the decision; launch() adds the launches as they ran */
    r->kernel = W22_GEMM_TMA, r->why = NULL, r->plan = plan, r->batch = g->batch, r->launches = 0;
    r->epi = mode & MODE_EPI_TMA     ? W22_EPI_TMA_STORE
             : mode & MODE_EPI_OVERLAP ? W22_EPI_OVERLAP
             : mode & MODE_EPI_VEC  ? W22_EPI_VEC
                                    : W22_EPI_PAIRS;
    r->want_split = plan == W22_TMA_PAIRS_TAIL ? w22_route_tma_split(g, &u, 256, 1, 0, tile0, 1)
                    : plan == W22_TMA_PAIRS    ? w22_route_tma_split(g, &u, 256, 2, 0, 0, 0)
                                               : w22_route_tma_split(g, &u, bn, 1, 0, 0, 0);
    int split = 1;
    w22_status s = W22_OK;
    if (g->f16) { /* a batch's fp16 GEMMs: route.h's w22_route_tma_batch_blocker gave them the TMA store's tile */
        if (!(mode & MODE_EPI_TMA) || plan != W22_TMA_TILES || bn != 256 || !g->batch)
            return w22_fail(W22_ERR_INTERNAL, "%s: fp16 operands on the TMA conv without the batch's TMA store "
                            "(mode %d, plan %d, tile %d)", what, mode, plan, bn);
        s = launch<256, 3, 1, 4, true>(c, g, mode, &split, what, 0, 0, 0);
    } else if ((mode & MODE_EPI_TMA) && plan == W22_TMA_PAIRS_TAIL) { /* the TMA store (launch_te: its staging) */
        s = launch_te<2>(c, g, mode, &split, what, lim, 0, 0);
        if (s == W22_OK) s = launch_te<1>(c, g, mode, &split, what, 0, tile0, 1);
    } else if (mode & MODE_EPI_TMA) {
        s = plan == W22_TMA_PAIRS ? launch_te<2>(c, g, mode, &split, what, 0, 0, 0)
                              : launch_te<1>(c, g, mode, &split, what, 0, 0, 0);
    } else if (plan == W22_TMA_PAIRS_TAIL) { /* the pairs' rounds, then the tail on the SMs (its split is the one named) */
        s = launch<256, 4, 2, 0>(c, g, mode, &split, what, lim, 0, 0);
        if (s == W22_OK) s = launch<256, 4, 1, 0>(c, g, mode, &split, what, 0, tile0, 1);
    } else {
        s = plan == W22_TMA_PAIRS ? launch<256, 4, 2, 0>(c, g, mode, &split, what, 0, 0, 0)
            : bn == 256       ? launch<256, 4, 1, 0>(c, g, mode, &split, what, 0, 0, 0)
            : bn == 192       ? launch<192, 5, 1, 0>(c, g, mode, &split, what, 0, 0, 0)
            : bn == 96        ? launch<96, 7, 1, 0>(c, g, mode, &split, what, 0, 0, 0)
                              : launch<128, 6, 1, 0>(c, g, mode, &split, what, 0, 0, 0);
    }
    if (s != W22_OK) return s;
    static const char *const f16_names[2] = {"wgmma 128x256 tma tma-store f16", "wgmma 128x256 tma tma-store f16 split"};
    c->last_path = g->f16                ? f16_names[split > 1]
                   : mode & MODE_EPI_TMA ? tma_tma_names[plan][split > 1]
                                         : tma_names[plan][g->phases != 0][split > 1][epi][tile];
    CU_LAUNCHED(c, what);
    return W22_OK;
}

/* The direct convs that allow it (route.h's w22_route_tma_store_direct_but_res, a plain residual taken as extra K) store their tiles by the TMA
 * as the batch GEMMs do (v21: f121 -1.2%, the 256-channel convs at 352 x 624 -1.3 to -5.7%, against v20's
 * overlapped epilogue). */

/* The identity [n][n] in bf16, the weights of a residual taken as the GEMM's extra K (residual_as_k): one per n
 * (the decode's 1024-channel attention projection and its 256-channel convs), made at the first conv of that n and
 * kept for the backend's life (2 MB at 1024). Never replaced while a decode runs: v21-v24 kept one identity and
 * re-made it whenever n changed, several times a decode, each a free, an allocation and an upload that raced the
 * kernels of the decode (issue 27). */
static w22_status identity_weights(w22_cuda *c, int n, const bf16 **out) {
    int k = 0;
    while (k < W22_IDENT_MAX && c->ident[k] && c->ident_n[k] != n) k++;
    if (k == W22_IDENT_MAX)
        return w22_fail(W22_ERR_INTERNAL, "the residual's identity weights: more than %d channel counts", W22_IDENT_MAX);
    if (!c->ident[k]) {
        uint16_t *h = (uint16_t *)calloc((size_t)n * n, 2);
        if (!h) return w22_fail(W22_ERR_OUT_OF_MEMORY, "out of host memory: %zu bytes for an identity", (size_t)n * n * 2);
        for (int i = 0; i < n; i++) h[(size_t)i * n + i] = 0x3F80; /* bf16 1.0 */
        const w22_status s = w22_cuda_upload(c, &c->ident[k], h, (size_t)n * n * 2, "the residual's identity weights");
        free(h);
        W22_TRY(s);
        c->ident_n[k] = n;
    }
    *out = (const bf16 *)c->ident[k];
    return W22_OK;
}

/* A plain residual (not DupUp's: same pixel and channel as the output) as the GEMM's extra K, where the shortcut's
 * slot is free: its pixels' N channels times the identity, 4 more stages of 64 at N = 256 (108 + 4 for the
 * 256-channel 3x3x3 conv), so that the epilogue adds nothing and the tile may take the TMA store (v21). The sum is
 * made in fp32 (conv + residual, + bias) and rounded once, where the epilogue added the residual to the rounded conv
 * output and rounded again. A residual that is the output itself is read by the tile's loads before its epilogue
 * writes it, and no other tile reads those rows. Where it cannot, g keeps its residual. */
static w22_status residual_as_k(w22_cuda *c, w22_mm *g) {
    if (!w22_route_residual_as_k(g)) return W22_OK; /* route.h */
    const bf16 *id;
    W22_TRY(identity_weights(c, g->N, &id));
    g->sc = g->res, g->sc_sf = g->r_sf, g->sc_sh = g->r_sh, g->sc_sw = g->r_sw, g->sc_cin = g->N, g->scb = id;
    g->sc_bias = NULL;
    g->res = NULL, g->r_sf = g->r_sh = g->r_sw = 0;
    return W22_OK;
}

w22_status w22_cuda_gemm_wgmma_tma(w22_cuda *c, const w22_mm *g, const char *what) {
    const int zero[1] = {0};
    int mode = mode_for(g, 1, zero, zero);
    if (mode & MODE_EPI_OVERLAP) { /* the GEMMs whose geometry allows the overlapped epilogue */
        w22_mm q = *g; /* a residual as extra K where that lets the tile take the TMA store */
        if (q.res && w22_route_tma_store_direct_but_res(&q)) W22_TRY(residual_as_k(c, &q));
        if (!q.res && w22_route_tma_store_direct_but_res(&q)) return run_tma(c, &q, mode_of(W22_EPI_TMA_STORE), what);
    }
    return run_tma(c, g, mode, what);
}

/* The four phase GEMMs as one (w22_mm.phases): phase 0's fields, the others' offsets. */
w22_status w22_cuda_gemm_wgmma_phases(w22_cuda *c, const w22_mm q[4], const char *what) {
    const char *why = w22_route_phases_blocker(q, 1);
    if (why) return w22_fail(W22_ERR_INVALID_ARG, "%s: the four phases as one launch: %s", what, why);
    w22_mm g = q[0];
    g.phases = 4, g.r_coff = 0; /* each phase's r_coff is in its ph_r */
    for (int p = 0; p < 4; p++) g.ph_o[p] = (int)w22_route_phase_o(q, p), g.ph_r[p] = (int)w22_route_phase_r(q, p);
    return run_tma(c, &g, mode_for(q, 4, g.ph_o, g.ph_r), what);
}

/* A batch GEMM's tiles are stored through shared memory by the TMA (MODE_EPI_TMA, v20: f121 -1.8% in the decode,
 * against v19's overlapped epilogue on a ring of 4). */
/* The batch as one launch (w22_mm.batch). */
w22_status w22_cuda_gemm_wgmma_batch(w22_cuda *c, const w22_mm *g, const char *what) {
    const char *why = w22_route_tma_batch_blocker(g);
    if (why) return w22_fail(W22_ERR_INVALID_ARG, "%s: the GEMMs as one launch: %s", what, why);
    w22_mm q[W22_GEMM_BATCH];
    for (int p = 0; p < g->batch; p++) q[p] = *g;
    int mode = mode_for(q, g->batch, g->ph_o, g->ph_r);
    if (w22_route_tma_store_batch(g)) mode = mode_of(W22_EPI_TMA_STORE); /* route.h */
    return run_tma(c, g, mode, what);
}
