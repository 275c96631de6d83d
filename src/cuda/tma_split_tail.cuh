/* The TMA conv's split tail, device side (conv_sm90_wgmma_tma.cu includes it where the kernel needs it; the host
 * side's rule, w22_route_split_of, is in route.h). */
#ifndef W22_TMA_SPLIT_TAIL_CUH
#define W22_TMA_SPLIT_TAIL_CUH

/* ---- the split tail (v13) ----
 * Why: the persistent grid runs ceil(tiles / SMs) rounds of equal tiles, and with one-frame chunks the last round
 * of stages 1-2 is part-empty: 432 tiles of a 1024-channel conv at 88 x 156 take 4 rounds for 3.27 of work, 858 of
 * a 512-channel one at 176 x 312 take 7 for 6.5. So the R tiles of the last round, when R <= SMs / 2, run as
 * `split` pieces of K each (contiguous stage ranges) on R x split CTAs of that round. Work item w < whole is tile
 * w; past it, piece p of tile whole + (w - whole) / split. Each piece stores its fp32 accumulators (each thread its
 * own registers' values, float4s of the 256 consumer threads side by side) and counts itself in; the piece that
 * arrives last adds the others' (in piece order: the same sum whichever arrives last) and runs the epilogue. Nobody
 * waits, so the pieces finish whatever the order the CTAs run in (two grids sharing the GPU included). */
struct wg_item {
    int tile, k0, k1; /* the tile and its stage range [k0, k1) */
    int piece;        /* -1: the whole tile; else the piece */
};
static __device__ __forceinline__ wg_item wg_item_of(int w, int whole, int split, int iters) {
    wg_item r;
    if (w < whole) {
        r.tile = w, r.k0 = 0, r.k1 = iters, r.piece = -1;
        return r;
    }
    const int q = w - whole, p = q % split;
    r.tile = whole + q / split, r.piece = p;
    r.k0 = p * iters / split, r.k1 = (p + 1) * iters / split;
    return r;
}

/* A piece's accumulators to its partial slot, then (after every consumer thread's stores) the tile's count:
 * atomicInc wraps it to 0 at the last arrival, ready for the next launch. Whether this piece arrived last (the
 * answer passes through the shared word `word`). */
template <int NACC>
static __device__ __forceinline__ bool wg_split_arrive(float *part, unsigned *count, int slot, int split,
                                                       const float *acc, int ct, uint32_t word) {
    float4 *dst = (float4 *)part + (size_t)slot * (NACC / 4) * 256 + ct;
#pragma unroll
    for (int v = 0; v < NACC / 4; v++)
        __stcg(dst + v * 256, make_float4(acc[4 * v], acc[4 * v + 1], acc[4 * v + 2], acc[4 * v + 3]));
    __threadfence();
    consumers_sync(); /* the two consumer warpgroups */
    if (ct == 0) {
        const unsigned last = atomicInc(count, (unsigned)split - 1) == (unsigned)split - 1;
        __threadfence(); /* the other pieces' partials, before this CTA reads them */
        asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(word), "r"(last) : "memory");
    }
    consumers_sync();
    uint32_t last;
    asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(last) : "r"(word) : "memory");
    return last != 0;
}

/* The last piece: the tile's sum read back from every piece's slot, its own included, as ((P0 + P1) + P2) whichever
 * piece arrived last, so that the decode's output does not depend on the CTAs' timing (fp32 addition is not
 * associative). Two copies of the unrolled slot loop (the first slot, then the rest in order): a fold that kept the
 * piece's own part in registers doubled the kernel's code (7772de2). */
template <int NACC>
static __device__ __forceinline__ void wg_split_sum(const float *part, int slot0, int split, float *acc, int ct) {
    const float4 *src = (const float4 *)part + (size_t)slot0 * (NACC / 4) * 256 + ct;
#pragma unroll
    for (int v = 0; v < NACC / 4; v++) {
        const float4 x = __ldcg(src + v * 256);
        acc[4 * v] = x.x, acc[4 * v + 1] = x.y, acc[4 * v + 2] = x.z, acc[4 * v + 3] = x.w;
    }
#pragma unroll 1
    for (int k = 1; k < split; k++) {
        const float4 *p = src + (size_t)k * (NACC / 4) * 256;
#pragma unroll
        for (int v = 0; v < NACC / 4; v++) {
            const float4 x = __ldcg(p + v * 256);
            acc[4 * v] += x.x, acc[4 * v + 1] += x.y, acc[4 * v + 2] += x.z, acc[4 * v + 3] += x.w;
        }
    }
}

#endif
