/* The wgmma conv's host side: the weights' tensor maps, its init, and
 * the routing to its one kernel, the TMA-loaded persistent conv (conv_sm90_wgmma_tma.cu: its opening comment is the
 * design). GEMMs it does not take run on the mma.sync kernel (conv_sm90_mma.cu). The Hopper path only: the backend
 * calls nothing here with c->hopper 0 (route.h). The A tiles are loaded by the TMA's im2col mode, which needs the
 * driver's cuTensorMapEncodeIm2col/Tiled (found at init): without them the backend fails to open on the Hopper path
 * rather than run another kernel (docs/PERF.md v5-v9: the TMA loads' measurements). */
#include "wgmma_common.cuh"

/* Sets the driver entry point the weights' maps need and the TMA kernel up; use_wgmma 1 when both are there. */
w22_status w22_cuda_wgmma_init(w22_cuda *c) {
    W22_TRY(w22_cuda_wgmma_tma_init(c));
    void *fn = NULL;
    cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
    CU_TRY(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q));
    if (!fn || q != cudaDriverEntryPointSuccess)
        return w22_fail(W22_ERR_CUDA, "wgmma conv: the driver has no cuTensorMapEncodeTiled (query %d)",
                        (int)q);
    c->tmap_encode = fn;
    c->use_wgmma = 1;
    return W22_OK;
}

/* K-major [rows][K] bf16 (row stride `stride` elements) as a 2D tensor map with {64, box_rows} boxes, 128B swizzle. */
w22_status w22_wgmma_kmajor_map(w22_cuda *c, CUtensorMap *m, const bf16 *ptr, long K, long rows, long stride,
                                int box_rows, int f16, const char *what) {
    const cuuint64_t dims[2] = {(cuuint64_t)K, (cuuint64_t)rows};
    const cuuint64_t strides[1] = {(cuuint64_t)stride * 2};
    const cuuint32_t box[2] = {WG_BK, (cuuint32_t)box_rows};
    const cuuint32_t estr[2] = {1, 1};
    const CUresult r = ((encode_tiled_fn)c->tmap_encode)(
        m, w22_map_type(f16), 2, (void *)ptr, dims, strides, box, estr, CU_TENSOR_MAP_INTERLEAVE_NONE,
        CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS)
        return w22_fail(W22_ERR_CUDA, "%s: cuTensorMapEncodeTiled (K %ld, rows %ld, stride %ld, box %d) failed: %d",
                        what, K, rows, stride, box_rows, (int)r);
    return W22_OK;
}


/* g is one route.h's w22_route_gemm gives W22_GEMM_TMA (conv_sm90_mma.cu's w22_cuda_gemm routes). */
w22_status w22_cuda_gemm_wgmma(w22_cuda *c, const w22_mm *g, const char *what) {
    return w22_cuda_gemm_wgmma_tma(c, g, what); /* on its persistent grid */
}
