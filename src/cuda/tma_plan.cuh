/* The TMA conv's launch heuristics, host side, each with the measurement that chose it (FlashAttention-3's
 * heuristics.h is the model): the split tail's pieces (w22_wgmma_split_of), the persistent grid's rounds
 * (tma_rounds), and the choice of tiles, pairs of M tiles in clusters of 2, or pairs and a tail (tma_plan). Pure
 * arithmetic on the GEMM and the GPU's counts. Included by conv_sm90_wgmma_tma.cu. */
#ifndef W22_TMA_PLAN_CUH
#define W22_TMA_PLAN_CUH

/* The split tail's pieces per tile for `tiles` tiles of `iters` stages on a persistent grid of `grid` CTAs (or
 * clusters): the last round's R tiles are split when R <= grid / 2, into grid / R pieces (at most SPLIT_MAX, each of
 * 8 stages or more, R x pieces within `slots`: a cluster's tile is two tiles, each with its pieces' slots); 1: no
 * split. A grid of one round splits only where `one_round` (the tail launch after the pairs' rounds: the tiles they
 * left, fewer than the SMs). (v13: before it, the last round ran part-empty.) */
#define SPLIT_MAX 3
#define SPLIT_SLOTS 132 /* partial slots, one per piece: R split <= the grid (132 on an H200; more SMs: fewer pieces) */
#define SPLIT_PART_BYTES ((size_t)SPLIT_SLOTS * 128 * 256 * 4) /* 128 fp32 accumulators per consumer thread */
int w22_wgmma_split_of(int tiles, int iters, int grid, int slots, int one_round) {
    if (grid <= 0 || (tiles <= grid && !one_round)) return 1;
    const int r = tiles % grid;
    if (r == 0) return 1;
    int s = grid / r < SPLIT_MAX ? grid / r : SPLIT_MAX;
    while (s > 1 && (iters / s < 8 || r * s > slots)) s--;
    return s;
}

/* The persistent grid's rounds for `tiles` items of `iters` stages on `grid` runners (CTAs or clusters), the
 * part-empty last one counted as the 1 / split of a tile that its pieces take (split: 1 where not allowed). */
static double tma_rounds(long tiles, int iters, int grid, int slots, int split_ok, int one_round) {
    const long full = tiles / grid;
    if (tiles % grid == 0) return (double)full;
    return (double)full + 1.0 / (split_ok ? w22_wgmma_split_of((int)tiles, iters, grid, slots, one_round) : 1);
}

/* How the TMA conv runs a GEMM (v15): tiles on the SMs (TMA_TILES), pairs of M tiles in clusters of 2 sharing B
 * (TMA_PAIRS), or the pairs' whole rounds and then the tiles they leave on the SMs (TMA_PAIRS_TAIL, from tile
 * *tile0 on; the pairs: the first *lim). A pair's tile ran 2-5% faster than a tile alone (a third less L2 traffic
 * per stage; v15's run), so a round of pairs counts PAIR_COST of a round of tiles, and the plan of the fewest
 * rounds wins. Pairs round differently: the 512-channel conv at 176 x 312 is 858 tiles on 132 CTAs (6.5 rounds with
 * the split tail) but 430 pairs on 66 clusters (7: the 34 pairs left cannot split in two; measured 3% slower), and
 * 6 rounds of pairs + its last 66 tiles in 2 pieces each on the SMs (0.5) beat both. Only the 256-channel tiles; a
 * tail only where the pairs' rounds end on a whole row of N tiles (the tail's tiles
 * then follow on in tile order). */
enum { TMA_TILES, TMA_PAIRS, TMA_PAIRS_TAIL };
#define PAIR_COST 0.97
/* The batch GEMMs (Winograd's) run as single tiles, no clusters, since v23: 22B's ncu at the base clock had the
 * 512-channel one 2% faster so, and v23's decode A/B f121 -0.3%. */
static int tma_plan(const w22_cuda *c, const w22_mm *g, int persist, int minor, long *lim, long *tile0) {
    *lim = *tile0 = 0;
    if (g->N % 256 || c->tma_clusters <= 0 || g->batch) return TMA_TILES;
    if (!persist) return TMA_PAIRS;
    const int HW = g->H * g->W, np = g->phases ? 4 : g->batch ? g->batch : 1, tn = g->N / 256, ok = !c->on_side,
              cl = c->tma_clusters;
    const long mt = (long)(g->M / HW) * ((HW + WG_BM - 1) / WG_BM), ppp = (mt + 1) / 2 * tn; /* pairs per phase */
    const long pairs = np * ppp, tiles = np * mt * tn;
    const int iters = g->kt * g->ks * g->ks * (g->cin / WG_BK) + (g->sc ? g->sc_cin / WG_BK : 0);
    const double r_tiles = tma_rounds(tiles, iters, c->sms, SPLIT_SLOTS, ok, 0);
    const double r_pairs = PAIR_COST * tma_rounds(pairs, iters, cl, SPLIT_SLOTS / 2, ok, 0);
    int plan = r_pairs <= r_tiles ? TMA_PAIRS : TMA_TILES;
    const long full = pairs / cl, done = full * cl, p = done / ppp, j = done - p * ppp; /* the pairs' whole rounds */
    /* phase-minor (MODE_PHASE_MINOR): the pairs' rounds must end on a whole pair of M tiles, all phases */
    const long group = (long)np * tn;
    if (full >= 1 && done < pairs && (minor ? done % group == 0 : j % tn == 0)) {
        const long t0 = minor ? 2 * (done / group) * group : (p * mt + j / tn * 2) * tn;
        const double r_tail = PAIR_COST * full + tma_rounds(tiles - t0, iters, c->sms, SPLIT_SLOTS, ok, 1);
        if (r_tail < (plan == TMA_PAIRS ? r_pairs : r_tiles)) plan = TMA_PAIRS_TAIL, *lim = done, *tile0 = t0;
    }
    return plan;
}

/* An upsample conv's phase tiles are ordered (M tile, phase, N tile) (MODE_PHASE_MINOR, since v19), so that the
 * four phases of an M tile read its input pixels and its DupUp residual while they are in L2 (phase-major, each
 * phase read the whole 112 MB residual of the 512-channel conv from DRAM: 1012 -> 904 us, f121 -0.5%). */

#endif
