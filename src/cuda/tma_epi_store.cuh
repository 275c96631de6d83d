/* The TMA conv's TMA-store epilogue, device side (conv_sm90_wgmma_tma.cu includes it; the host side's maps are in
 * tma_maps.cuh). */
#ifndef W22_TMA_EPI_STORE_CUH
#define W22_TMA_EPI_STORE_CUH

/* The TMA store epilogue (MODE_EPI_TMA, v20): the tile's accumulators (+ biases) as bf16 (F16: fp16) into the staging
 * (the TMA's 128B swizzle: 16-byte chunk c of row r at chunk c ^ (r % 8), so that the 8 rows of a warp's store hit 8
 * different chunks, no bank conflicts), then one thread stores them. A batch GEMM's dense output (box_px 0): boxes of 64
 * channels x 128 rows of a map {N, H W, frames}, the rows past the frame clipped by it. A direct conv's bordered
 * frames (box_px > 0, since v21): the tile's 128 pixels wrap image rows, so boxes of box_px pixels of one
 * row (box_px divides both W and 128: no box crosses a row) of a map {N, W, H, frames}, those past the frame skipped.
 * Why: ncu had the 512-channel batch GEMM 73% tensor-busy with the overlapped epilogue and 87% without stores, the
 * 256-channel direct conv 81% and 92%; the overlapped one costs each stage instructions (the held vectors' shifts, the
 * addresses) and the tile's tail a long pack (the quad transposes), while the tensor cores wait. Here a tile's tail is
 * 64 shared stores and a few barriers per thread, and the stores run in the TMA unit during the next tile.
 * NB staging buffers of one 64-channel box: NB = BN / 64 (the whole tile: one round, on a ring of 3 stages, so that
 * ring and staging fit the 227 KB; docs/PERF.md v20-v21), the boxes in rounds of NB. A buffer is free again
 * when the store that used it has read it: the storing thread waits for that before each round's first barrier (the
 * first round's, the previous tile's stores: long done). */
template <int BN, int NB, bool F16 = false>
static __device__ __forceinline__ void wg_epi_tma(const w22_mm &g, const float *acc, uint32_t stg,
                                                  const CUtensorMap *tm_o, int cw, int warp4, int lane, bool storer,
                                                  int r0, int frame, int n0, int box_px) {
    static_assert(BN / 64 % NB == 0, "the boxes in whole rounds of NB");
    const int gq = lane >> 2, tq = lane & 3, HW = g.H * g.W;
    const uint32_t rb = stg + (uint32_t)(cw * 64 + warp4 * 16 + gq) * 128 + tq * 4;
#pragma unroll
    for (int q = 0; q < BN / 64 / NB; q++) { /* round q: boxes q NB .. q NB + NB - 1 */
        if (storer) asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
        consumers_sync(); /* the two consumer warpgroups */
#pragma unroll
        for (int jj = 0; jj < NB * 8; jj++) { /* channels 8 j ..: box j / 8 (buffer jj / 8), chunk j % 8 */
            const int j = q * NB * 8 + jj, n = n0 + 8 * j + 2 * tq;
            float2 bs = make_float2(0.f, 0.f);
            if (g.bias) bs = *(const float2 *)(g.bias + n);
            if (g.sc_bias) {
                const float2 sb = *(const float2 *)(g.sc_bias + n);
                bs.x += sb.x, bs.y += sb.y;
            }
            const uint32_t a = rb + (jj >> 3) * (WG_BM * 128) + (((jj & 7) ^ gq) << 4);
#pragma unroll
            for (int h = 0; h < 2; h++) /* rows gq and gq + 8: the same chunk (8 rows on) */
                asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(a + h * 8 * 128),
                             "r"(F16 ? wg_pack_f16(acc[4 * j + 2 * h] + bs.x, acc[4 * j + 2 * h + 1] + bs.y)
                                     : wg_pack_bf16(acc[4 * j + 2 * h] + bs.x, acc[4 * j + 2 * h + 1] + bs.y))
                             : "memory");
        }
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); /* the writes, before the TMA reads them */
        consumers_sync();
        if (!storer) continue;
#pragma unroll 1
        for (int b = 0; b < NB; b++) {
            const uint32_t src = stg + b * (WG_BM * 128);
            const int c0 = n0 + 64 * (q * NB + b);
            if (!box_px) {
                asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.tile.bulk_group [%0, {%1, %2, %3}], [%4];\n" ::"l"(
                                 (uint64_t)tm_o),
                             "r"(c0), "r"(r0), "r"(frame), "r"(src)
                             : "memory");
                continue;
            }
#pragma unroll 1
            for (int k = 0; k < WG_BM && r0 + k < HW; k += box_px) {
                const int y = (r0 + k) / g.W, x = r0 + k - y * g.W;
                asm volatile("cp.async.bulk.tensor.4d.global.shared::cta.tile.bulk_group [%0, {%1, %2, %3, %4}], [%5];\n" ::"l"(
                                 (uint64_t)tm_o),
                             "r"(c0), "r"(x), "r"(y), "r"(frame), "r"(src + k * 128)
                             : "memory");
            }
        }
        asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
    }
}

#endif
