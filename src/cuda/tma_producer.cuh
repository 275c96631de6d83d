/* The TMA conv's producer (conv_sm90_wgmma_tma.cu's kernel, warpgroup 0, one thread): for each work item (a tile, a
 * pair's tile, or a piece of K of a split tile) it walks the K stages, waits until a stage of the ring is free, and
 * issues the stage's two loads on its full barrier: A by the TMA's im2col mode (tap (dx, dy) of 128 output pixels,
 * 64 channels; the tap's frame from the history maps or the new frames) and B by a 2D load (CL 2: this CTA's half of
 * the rows, multicast into both CTAs). What must hold: a stage is refilled only after every consumer warp (both CTAs'
 * with CL 2) released it (empty[s]); full[s] expects the stage's whole bytes, A's and B's, in one arrive. */
#ifndef W22_TMA_PRODUCER_CUH
#define W22_TMA_PRODUCER_CUH

/* The producer's channel slice and tap at stage k0 (the main taps, then the shortcut's channels). */
static __device__ __forceinline__ void wg_k_start(const w22_mm &g, int k0, int main_iters, int &c0, int &dt,
                                                  int &dy, int &dx) {
    if (k0 < main_iters) {
        const int cs = (g.cin + WG_BK - 1) / WG_BK, tap = k0 / cs; /* route.h's w22_route_tma_slices */
        c0 = (k0 - tap * cs) * WG_BK;
        dx = tap % g.ks, dy = tap / g.ks % g.ks, dt = tap / (g.ks * g.ks);
    } else {
        c0 = (k0 - main_iters) * WG_BK, dt = g.kt, dy = dx = 0;
    }
}

template <int BN, int STAGES, int CL>
static __device__ __forceinline__ void tma_produce(const CUtensorMap &tm_b, const CUtensorMap &tm_scb,
                                                   const CUtensorMap &tm_a, const CUtensorMap &tm_h0,
                                                   const CUtensorMap &tm_h1, const CUtensorMap &tm_sca, const w22_mm &g,
                                                   TMA_SCHED_PARAMS, uint32_t base, uint32_t full0, uint32_t empty0) {
    typedef wg_layout<BN, STAGES> L;
    int s = 0, loads = 0; /* stage of the next load; loads issued so far */
    uint32_t ph = 0;
    for (int w = w0; w < items; w += wstep) {
        const wg_item wi = wg_item_of(w, whole, split, iters);
        const wg_tile wt = wg_tile_of<BN, CL>(tile0 + wi.tile, tpp, tiles_n, mt, crank, np_minor);
        const int p = wt.p, tm = wt.tm, n0 = wt.n0; /* p: the phase (0 for a single GEMM) */
        const int t = tm / tpf, r0 = (tm - t * tpf) * WG_BM, y0 = r0 / g.W, x0 = r0 - y0 * g.W;
        /* phase p = py 2 + px: its A map (phases 1-3's in the history's and shortcut's slots, which a phase
         * GEMM does not use), its load corner (+ (px, py): its pads are phase 0's - (py, px)), its B rows */
        const CUtensorMap *ma = p == 0 || !g.phases ? &tm_a : p == 1 ? &tm_h0 : p == 2 ? &tm_h1 : &tm_sca;
        /* a batch's GEMM p (g.batch): its frames from p a_frames on in the one A map, no corner shift */
        const int pq = g.phases ? p : 0, pf = g.batch ? p * (int)g.a_frames : 0;
        /* CL 2: this CTA's half of the B rows, multicast into both CTAs' stage */
        const int xa = x0 + cx + (pq & 1), ya = y0 + cy + (pq >> 1), nb = n0 + p * g.N + crank * (BN / 2);
        const uint32_t b_off = crank * (L::b_bytes / 2);
        int c0, dt, dy, dx;
        wg_k_start(g, wi.k0, main_iters, c0, dt, dy, dx);
        for (int it = wi.k0; it < wi.k1; it++, loads++) {
            if (loads >= STAGES) mbar_wait(empty0 + 8 * s, ph ^ 1);
            const uint32_t sa = base + s * L::stage_bytes, sb = sa + L::a_bytes, full = full0 + 8 * s;
            if (it < main_iters) {
                mbar_arrive_expect_tx(full, L::stage_bytes);
                const int j = t + dt; /* the input frame of this tap: a history frame or a new one */
                const bool nw = j >= g.hist_n;
                tma_load_im2col(sa, nw ? ma : j == 0 ? &tm_h0 : &tm_h1, full, c0, xa, ya,
                                nw ? j - g.hist_n + pf : 0, (uint16_t)dx, (uint16_t)dy);
                const int kb = ((dt * g.ks + dy) * g.ks + dx) * g.cin + c0;
                if (CL == 2)
                    tma_load_2d_mc(sb + b_off, &tm_b, full, kb, nb, 3);
                else
                    tma_load_2d(sb, &tm_b, full, kb, nb);
            } else {
                mbar_arrive_expect_tx(full, L::stage_bytes);
                tma_load_im2col(sa, &tm_sca, full, c0, x0, y0, t, 0, 0);
                if (CL == 2)
                    tma_load_2d_mc(sb + b_off, &tm_scb, full, c0, n0 + crank * (BN / 2), 3);
                else
                    tma_load_2d(sb, &tm_scb, full, c0, n0);
            }
            /* the next stage's channels and tap; after the last tap c0 restarts for the shortcut's */
            c0 += WG_BK;
            if (it < main_iters && c0 >= g.cin) { /* cin % 64 != 0: the tap's last slice ran past cin (zeros) */
                c0 = 0;
                if (++dx == g.ks) {
                    dx = 0;
                    if (++dy == g.ks) dy = 0, dt++;
                }
            }
            if (++s == STAGES) s = 0, ph ^= 1;
        }
    }
}

#endif
