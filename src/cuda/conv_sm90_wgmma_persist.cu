/* The wgmma conv on a persistent grid (W22_WGMMA_PERSIST=1; a measurement variant, docs/PERF.md v8, off by
 * default until measured). Same GEMM, tiles, stage ring, producer (v5's: rows in registers, early hand-off) and
 * epilogue as the default kernel (conv_sm90_wgmma.cu, whose opening comment is the design); what differs is below. */
#include "wgmma_common.cuh"

/* One CTA per SM walks the tiles tile = blockIdx.x + k * gridDim.x; the stage ring, its parities and the
 * producer's hand-off run on across tiles, so while the consumers store one tile's outputs the producer already
 * fills up to STAGES stages of the next: the pipeline's fill (a few microseconds per tile: CTA launch, barrier
 * and table setup, the first loads' latency) is paid once per SM instead of once per tile. Why: at v5 a
 * 256-channel tile is ~89 us of MMAs, a 512-channel phase conv's ~39 us, a time_conv's ~57 us; the fill (~2-4 us) is
 * 2-4% of the first and 4-10% of the others. The producer works as v5's default (rows in registers, early hand-off),
 * computing its rows per tile itself (no shared tables, so no block-wide barrier per tile): the row offsets and
 * the two frames' bases in registers; tiles over more than two frames (tiny shapes only) and the shortcut's
 * stages compute their rows' frames and offsets per stage. The consumers release the tile's last stage after
 * its final wait (the non-persistent kernel never refills it). */
template <int BN, int STAGES>
__global__ void __launch_bounds__(WG_THREADS, 1)
    w22_conv_wgmma_persist_kernel(const __grid_constant__ CUtensorMap tm_b, const __grid_constant__ CUtensorMap tm_sc,
                                  const w22_mm g, int main_iters, int iters, int tiles_n, int tiles) {
    typedef wg_layout<BN, STAGES> L;
    constexpr int LAG = L::lag;
    extern __shared__ unsigned char smem_raw[];
    const uint32_t raw = (uint32_t)__cvta_generic_to_shared(smem_raw);
    const uint32_t base = (raw + 1023u) & ~1023u;
    const uint32_t full0 = base + L::bars_off, empty0 = full0 + STAGES * 8;
    const int tid = threadIdx.x, wg = tid >> 7;
    const int HW = g.H * g.W;
    if (tid == 0) wg_init_ring<STAGES>(full0, empty0, FULL_ARRIVALS, EMPTY_ARRIVALS, &tm_b, &tm_sc, g);
    __syncthreads();

    if (wg == 0) {
        /* ---------------- producer ---------------- */
        asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(WG_PRODUCER_REGS_P));
        const int p = tid, cc = p & 7, r0 = p >> 3;
        const uint32_t my_chunk = (uint32_t)(r0 * WG_ROW_BYTES + ((cc ^ (r0 & 7)) << 4));
        const int ash = (int)g.a_sh, asw = (int)g.a_sw;
        int s = 0, sd = 0, loads = 0; /* stage of the next load, of the next hand-off; loads issued so far */
        uint32_t ph = 0;
        for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
            const int tile_n = tile % tiles_n, m0 = (tile / tiles_n) * WG_BM, n0 = tile_n * BN;
            const int t_lo = m0 / HW;
            const int m_last = (m0 + WG_BM < g.M ? m0 + WG_BM : g.M) - 1;
            const bool two_frames = m_last / HW - t_lo <= 1;
            int ro_r[WG_BM / 16]; /* as rows_a: offset in its frame, bit 0 the frame t_lo + 1; -1 past M */
#pragma unroll
            for (int j = 0; j < WG_BM / 16; j++) {
                const int m = m0 + r0 + 16 * j;
                ro_r[j] = -1;
                if (m < g.M) {
                    const int t = m / HW, rem = m - t * HW, y = rem / g.W, x = rem - y * g.W;
                    ro_r[j] = y * ash + x * asw + ((t - t_lo) & 1);
                }
            }
            int c0 = 0, dt = 0, dy = 0, dx = 0;
            for (int it = 0; it < iters; it++, loads++) {
                if (loads >= LAG) { /* early hand-off of load `loads - LAG` (v5) */
                    cp_async_wait<LAG - 1>();
                    fence_proxy_async();
                    mbar_arrive(full0 + 8 * sd);
                    if (++sd == STAGES) sd = 0;
                }
                if (loads >= STAGES) mbar_wait(empty0 + 8 * s, ph ^ 1);
                const uint32_t sa = base + s * L::stage_bytes, sb = sa + L::a_bytes, full = full0 + 8 * s;
                if (it < main_iters) {
                    const int tap = (dt * g.ks + dy) * g.ks + dx;
                    if (p == 0) {
                        mbar_arrive_expect_tx(full, L::b_bytes);
                        tma_load_2d(sb, &tm_b, full, tap * g.cin + c0, n0);
                    }
                    const int off = (dy - g.pad_y) * ash + (dx - g.pad_x) * asw + c0 + cc * 8;
                    if (two_frames) {
                        const bf16 *f0 = w22_gemm_frame(g, t_lo + dt) + off, *f1 = w22_gemm_frame(g, t_lo + dt + 1) + off;
#pragma unroll
                        for (int j = 0; j < WG_BM / 16; j++) {
                            const int ro = ro_r[j];
                            const bool ok = ro >= 0;
                            cp_async16(sa + my_chunk + j * 16 * WG_ROW_BYTES,
                                       ok ? ((ro & 1) ? f1 : f0) + (ro & ~1) : g.a, ok);
                        }
                    } else { /* tiles over more than two frames (H x W < 128): each row's frame, per stage */
#pragma unroll
                        for (int j = 0; j < WG_BM / 16; j++) {
                            const int ro = ro_r[j];
                            const bool ok = ro >= 0;
                            const bf16 *fp = ok ? w22_gemm_frame(g, (m0 + r0 + 16 * j) / HW + dt) : g.a;
                            cp_async16(sa + my_chunk + j * 16 * WG_ROW_BYTES, ok ? fp + (ro & ~1) + off : g.a, ok);
                        }
                    }
                    c0 += WG_BK;
                    if (c0 == g.cin) {
                        c0 = 0;
                        if (++dx == g.ks) {
                            dx = 0;
                            if (++dy == g.ks) dy = 0, dt++;
                        }
                    }
                } else {
                    if (p == 0) {
                        mbar_arrive_expect_tx(full, L::b_bytes);
                        tma_load_2d(sb, &tm_sc, full, c0, n0);
                    }
                    const int off = c0 + cc * 8;
#pragma unroll
                    for (int j = 0; j < WG_BM / 16; j++) {
                        const int m = m0 + r0 + 16 * j;
                        const bool ok = m < g.M;
                        long os = 0;
                        if (ok) {
                            const int t = m / HW, rem = m - t * HW, y = rem / g.W, x = rem - y * g.W;
                            os = t * g.sc_sf + y * g.sc_sh + x * g.sc_sw;
                        }
                        cp_async16(sa + my_chunk + j * 16 * WG_ROW_BYTES, g.sc + (ok ? os + off : 0), ok);
                    }
                    c0 += WG_BK;
                }
                cp_async_commit();
                if (++s == STAGES) s = 0, ph ^= 1;
            }
        }
        cp_async_wait<0>();
        fence_proxy_async();
        for (int k = loads < LAG ? loads : LAG; k > 0; k--) {
            mbar_arrive(full0 + 8 * sd);
            if (++sd == STAGES) sd = 0;
        }
    } else {
        /* ---------------- consumers ---------------- */
        asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(WG_CONSUMER_REGS_P));
        const int cw = wg - 1, lane = tid & 31, warp4 = (tid >> 5) & 3;
        constexpr int NACC = BN / 2;
        const uint64_t da0 = smem_desc(base + cw * 64 * WG_ROW_BYTES), db0 = smem_desc(base + L::a_bytes);
        constexpr uint64_t STAGE_DESC = L::stage_bytes >> 4;
        int s = 0, sp = 0;
        uint32_t ph = 0;
        for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
            const int m0 = (tile / tiles_n) * WG_BM, n0 = (tile % tiles_n) * BN;
            float acc[NACC];
#pragma unroll
            for (int i = 0; i < NACC; i++) acc[i] = 0.f;
            for (int it = 0; it < iters; it++) {
                mbar_wait(full0 + 8 * s, ph);
                wg_mma_stage<BN>(acc, da0 + s * STAGE_DESC, db0 + s * STAGE_DESC);
                wgmma_wait<1>();
                if (it > 0 && lane == 0) mbar_arrive(empty0 + 8 * sp);
                sp = s;
                if (++s == STAGES) s = 0, ph ^= 1;
            }
            wgmma_wait<0>();
            if (lane == 0) mbar_arrive(empty0 + 8 * sp); /* the tile's last stage: the producer refills it */
#pragma unroll
            for (int i = 0; i < NACC; i++) reg_fence(acc[i]);
            wg_store_tile<BN>(g, acc, m0, g.M, n0, cw, warp4, lane, HW, 0, 0);
            __syncwarp(); /* the rows past M diverged: converged again before the next tile's .aligned wgmma ops */
        }
    }
}

/* W22_WGMMA_PERSIST: 1 or 0, -1 when unset (read once per process) */
int w22_wgmma_persist_env(void) {
    static int v = -2;
    if (v == -2) {
        const char *e = getenv("W22_WGMMA_PERSIST");
        v = !e ? -1 : !strcmp(e, "1") ? 1 : !strcmp(e, "0") ? 0 : -1;
    }
    return v;
}

/* this kernel (the cp.async loads' persistent variant): only when asked for, W22_WGMMA_PERSIST=1 (v8: slower) */
int w22_cuda_wgmma_persist_on(const w22_cuda *c) { return w22_wgmma_persist_env() == 1 && c->sms > 0; }

w22_status w22_cuda_wgmma_persist_init(w22_cuda *c) {
    (void)c;
    CU_TRY(cudaFuncSetAttribute(w22_conv_wgmma_persist_kernel<256, 4>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                wg_layout<256, 4>::bytes));
    CU_TRY(cudaFuncSetAttribute(w22_conv_wgmma_persist_kernel<128, 6>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                wg_layout<128, 6>::bytes));
    return W22_OK;
}

template <int BN, int STAGES> static w22_status launch(w22_cuda *c, const w22_mm *g, const char *what) {
    const long K = (long)g->kt * g->ks * g->ks * g->cin;
    CUtensorMap tb, ts;
    W22_TRY(w22_wgmma_kmajor_map(c, &tb, g->b, K, g->N, g->b_sw, BN, what));
    if (g->sc)
        W22_TRY(w22_wgmma_kmajor_map(c, &ts, g->scb, g->sc_cin, g->N, g->sc_cin, BN, what));
    else
        ts = tb; /* never read */
    const int main_iters = g->kt * g->ks * g->ks * (g->cin / WG_BK);
    const int iters = main_iters + (g->sc ? g->sc_cin / WG_BK : 0);
    const int tiles_n = g->N / BN;
    const long tiles = (long)((g->M + WG_BM - 1) / WG_BM) * tiles_n;
    if (tiles > INT_MAX) return w22_fail(W22_ERR_INVALID_ARG, "%s: %ld tiles is too many for one grid", what, tiles);
    const int grid = (int)(tiles < c->sms ? tiles : c->sms); /* one CTA per SM (194 KB of shared memory each) */
    w22_conv_wgmma_persist_kernel<BN, STAGES><<<grid, WG_THREADS, wg_layout<BN, STAGES>::bytes, c->stream>>>(
        tb, ts, *g, main_iters, iters, tiles_n, (int)tiles);
    return W22_OK;
}

w22_status w22_cuda_gemm_wgmma_persist(w22_cuda *c, const w22_mm *g, const char *what) {
    const int big = g->N % 256 == 0;
    c->last_path = big ? "wgmma 128x256 persistent" : "wgmma 128x128 persistent";
    const w22_status s = big ? launch<256, 4>(c, g, what) : launch<128, 6>(c, g, what);
    if (s != W22_OK) return s;
    CU_LAUNCHED(c, what);
    return W22_OK;
}
