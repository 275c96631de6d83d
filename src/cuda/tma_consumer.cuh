/* The TMA conv's consumers (conv_sm90_wgmma_tma.cu's kernel, warpgroups 1 and 2, 64 rows of the 128-pixel tile each):
 * for each work item they wait for each stage's loads, issue its wgmmas and release the stage before last; then the
 * tile's epilogue: the split tail's pieces (tma_split_tail.cuh), the TMA store (tma_epi_store.cuh), or the tail
 * epilogues (wgmma_common.cuh: the overlapped one, whose stores run during the next tile's first stages, the vector
 * or pair stores). What must hold: a stage is released only after its wgmmas completed (wgmma_wait<1> retires the
 * stage before the one just issued); the warps are converged before every .aligned wgmma; a pair's missing M tile
 * (CL 2, odd M tiles) and a split tile's non-last pieces store nothing. */
#ifndef W22_TMA_CONSUMER_CUH
#define W22_TMA_CONSUMER_CUH

/* A consumer warp's release of stage s: to its own producer, and in a cluster of 2 to the peer's too, whose B half
 * lands in this CTA's stage as well (CL 2: empty[s] counts both CTAs' consumer warps). */
template <int CL>
static __device__ __forceinline__ void wg_release(uint32_t empty0, uint32_t peer_empty0, int s) {
    mbar_arrive(empty0 + 8 * s);
    if (CL == 2) mbar_arrive_remote(peer_empty0 + 8 * s);
}

/* One stage of a consumer warpgroup in the tile's main loop, in two halves (the overlapped epilogue's step runs
 * between them): wait for the stage and issue its wgmmas; then wait for the previous stage's wgmmas (that stage may
 * be refilled: released by lane 0 of each warp) and step the ring. */
template <int BN, int STAGES, bool F16>
static __device__ __forceinline__ void wg_issue(float *acc, int s, uint32_t ph, uint32_t full0, uint64_t da0,
                                                uint64_t db0) {
    constexpr uint64_t STAGE_DESC = wg_layout<BN, STAGES>::stage_bytes >> 4;
    mbar_wait_nt(full0 + 8 * s, ph);
    wg_mma_stage<BN, F16>(acc, da0 + s * STAGE_DESC, db0 + s * STAGE_DESC);
}
template <int STAGES, int CL>
static __device__ __forceinline__ void wg_retire(int it, int &s, int &sp, uint32_t &ph, uint32_t empty0,
                                                 uint32_t peer_empty0, int lane) {
    wgmma_wait<1>(); /* stage it - 1's wgmmas are done: it may be refilled */
    if (it > 0 && lane == 0) wg_release<CL>(empty0, peer_empty0, sp);
    sp = s;
    if (++s == STAGES) s = 0, ph ^= 1;
}

/* Deferred-store step j: the held half 1 first (from registers, shifted down), then half 0 (from the staging). */
template <int BN>
static __device__ __forceinline__ void defer_step(wg_defer<BN> &dq, const w22_mm &g, int j, int tq, uint32_t epi) {
    if (j < BN / 32) {
        wg_defer_step<BN>(dq, g, j, tq);
        wg_defer_shift<BN>(dq);
    } else {
        wg_defer_step_smem<BN>(dq, g, j - BN / 32, tq, epi);
    }
}

/* F16: fp16 operands and output (w22_mm.f16), with the TMA store alone (TE > 0; the tail epilogues are bf16). */
template <int BN, int STAGES, int CL, int TE, bool F16>
static __device__ __forceinline__ void tma_consume(const CUtensorMap *tm_o, const w22_mm &g, TMA_SCHED_PARAMS,
                                                   int HW, uint32_t base, uint32_t full0, uint32_t empty0, int tid, int wg,
                                                   int mode, float *part, unsigned *count, int box_px) {
    typedef wg_layout<BN, STAGES> L;
    static_assert(!F16 || TE, "fp16 output: the TMA store only");
    const int cw = wg - 1, lane = tid & 31, warp4 = (tid >> 5) & 3, tq = lane & 3;
    constexpr int NACC = BN / 2;
    const uint64_t da0 = smem_desc(base + cw * 64 * WG_ROW_BYTES), db0 = smem_desc(base + L::a_bytes);
    const bool defer = mode & MODE_EPI_OVERLAP;
    const uint32_t peer_empty0 = CL == 2 ? cluster_map(empty0, crank ^ 1) : 0;
    /* this thread's staging of row half 0 (MODE_EPI_OVERLAP) */
    const uint32_t epi = defer ? base + tma_layout<BN, STAGES, TE>::epi_off + (tid - 128) * 16 : 0;
    const int steps = 2 * (BN / 32); /* stages of the next tile that store the held outputs: half 1, then half 0 */
    wg_defer<BN> dq; /* the previous tile's outputs, stored during this tile's first stages */
    dq.orow[0] = dq.orow[1] = dq.rrow[0] = dq.rrow[1] = -1;
    dq.n0 = 0;
    int s = 0, sp = 0;
    uint32_t ph = 0;
    for (int w = w0; w < items; w += wstep) {
        const wg_item wi = wg_item_of(w, whole, split, iters);
        const wg_tile wt = wg_tile_of<BN, CL>(tile0 + wi.tile, tpp, tiles_n, mt, crank, np_minor);
        const int p = wt.p, tm = wt.tm, n0 = wt.n0;
        const int t = tm / tpf, m0 = t * HW + (tm - t * tpf) * WG_BM;
        const int m_end = m0 + WG_BM < (t + 1) * HW ? m0 + WG_BM : (t + 1) * HW; /* this frame's rows only */
        const int n_it = wi.k1 - wi.k0;
        float acc[NACC];
#pragma unroll
        for (int i = 0; i < NACC; i++) acc[i] = 0.f;
        for (int it = 0; it < n_it; it++) {
            wg_issue<BN, STAGES, F16>(acc, s, ph, full0, da0, db0);
            if (defer && it < steps) defer_step<BN>(dq, g, it, tq, epi);
            wg_retire<STAGES, CL>(it, s, sp, ph, empty0, peer_empty0, lane);
            __syncwarp(); /* converged before the next .aligned wgmma */
        }
        if (defer) /* a tile of fewer stages than the store's steps: the rest now */
            for (int j = n_it; j < steps; j++) defer_step<BN>(dq, g, j, tq, epi);
        wgmma_wait<0>();
        if (lane == 0) wg_release<CL>(empty0, peer_empty0, sp); /* the tile's last stage: the next tile's loads refill it */
#pragma unroll
        for (int i = 0; i < NACC; i++) reg_fence(acc[i]);
        if (!wt.valid) { /* CL 2: the pair's missing M tile (its loads fed the peer's B half) */
            dq.orow[0] = dq.orow[1] = -1;
            __syncwarp();
            continue;
        }
        if (wi.piece >= 0) { /* a split tile (its pieces run in the grid's last round) */
            const int ti = (wi.tile - whole) * CL + crank; /* CL 2: a pair's two tiles, each its own slots */
            if (!wg_split_arrive<NACC>(part, count + ti, ti * split + wi.piece, split, acc, tid - 128,
                                       base + tma_layout<BN, STAGES, TE>::word_off)) {
                dq.orow[0] = dq.orow[1] = -1; /* not the last piece: nothing of this item to store */
                __syncwarp();
                continue;
            }
            wg_split_sum<NACC>(part, ti * split, split, acc, tid - 128);
        }
        if (TE) { /* frame t of GEMM p (a batch's; 0 for a direct conv): frame p F + t of the map, F = mt / tpf */
            wg_epi_tma<BN, TE ? TE : 1, F16>(g, acc, base + tma_layout<BN, STAGES, TE>::stg_off, tm_o, cw, warp4,
                                             lane, tid == 128, m0 - t * HW, p * (mt / tpf) + t, n0, box_px);
            __syncwarp();
            continue;
        }
        /* the phase's offsets: g is a __grid_constant__ so that this runtime index is an indexed constant load
         * (a copy of g would go to local memory; selects of the four values made ptxas hoist all eight out of
         * the tile loop, and the registers they took cost the stage loop 17 instructions on the 128 tile) */
        const int po = g.ph_o[p], pr = g.ph_r[p];
        if (defer)
            wg_defer_pack<BN>(dq, g, acc, m0, m_end, n0, cw, warp4, lane, HW, po, pr, epi);
        else if (mode & MODE_EPI_VEC)
            wg_store_tile_vec<BN>(g, acc, m0, m_end, n0, cw, warp4, lane, HW, po, pr);
        else
            wg_store_tile<BN>(g, acc, m0, m_end, n0, cw, warp4, lane, HW, po, pr);
        __syncwarp(); /* the rows past m_end diverged: converged again before the next tile's .aligned wgmma ops */
    }
    if (defer) /* the CTA's last tile: nothing left to overlap with */
        for (int j = 0; j < steps; j++) defer_step<BN>(dq, g, j, tq, epi);
    if (TE && tid == 128) asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory"); /* the last stores done */
}

#endif
