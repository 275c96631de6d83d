/* The TMA conv's tensor maps, host side: the pixels' im2col maps (one per source frame range), and the TMA store's
 * output maps (a batch's dense output; a direct conv's bordered frames). Included by conv_sm90_wgmma_tma.cu. */
#ifndef W22_TMA_MAPS_CUH
#define W22_TMA_MAPS_CUH

/* frames of a channels-last view (C channels of pixel stride sw, rows sh, frames sf; bf16, f16: fp16) as an im2col
 * map: 128 pixels x 64 channels per load, 128B swizzle (the layout the consumers' descriptors expect) */
static w22_status im2col_map(w22_cuda *c, CUtensorMap *m, const bf16 *p, long sw, long sh, long sf, int C, int W, int H,
                             int frames, int border, int pad_y, int pad_x, int f16, const char *what) {
    const int b = border ? 1 : 0;
    if (frames == 1) sf = sh * (H + 2 * b); /* never stepped on (past it: zeros); any valid stride */
    const cuuint64_t dims[4] = {(cuuint64_t)C, (cuuint64_t)(W + 2 * b), (cuuint64_t)(H + 2 * b), (cuuint64_t)frames};
    const cuuint64_t strides[3] = {(cuuint64_t)sw * 2, (cuuint64_t)sh * 2, (cuuint64_t)sf * 2};
    const int lower[2] = {b ? 1 - pad_x : 0, b ? 1 - pad_y : 0}; /* {W, H} */
    const int upper[2] = {b ? -1 - pad_x : 0, b ? -1 - pad_y : 0};
    const cuuint32_t estr[4] = {1, 1, 1, 1};
    const CUresult r = ((encode_im2col_fn)c->tmap_im2col)(
        m, w22_map_type(f16), 4, (void *)w22_map_origin(p, sh, sw, border), dims, strides, lower, upper,
        WG_BK, WG_BM, estr, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
        CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS)
        return w22_fail(W22_ERR_CUDA, "%s: cuTensorMapEncodeIm2col (C %d, %dx%d, %d frames, strides %ld/%ld/%ld, "
                        "border %d, pad %d,%d) failed: %d", what, C, H, W, frames, sw, sh, sf, b, pad_y, pad_x, (int)r);
    return W22_OK;
}

static w22_status store_map(w22_cuda *c, CUtensorMap *m, const w22_mm *g, int rank, const cuuint64_t *dims,
                            const long *strides, int box1, const char *what) {
    cuuint64_t sb[3];
    for (int i = 0; i + 1 < rank; i++) sb[i] = (cuuint64_t)strides[i] * 2;
    const cuuint32_t box[4] = {64, (cuuint32_t)box1, 1, 1}, estr[4] = {1, 1, 1, 1};
    const CUresult r = ((encode_tiled_fn)c->tmap_encode)(
        m, w22_map_type(g->f16), rank, g->out, dims, sb, box, estr, CU_TENSOR_MAP_INTERLEAVE_NONE,
        CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS)
        return w22_fail(W22_ERR_CUDA, "%s: cuTensorMapEncodeTiled (the output's store map: N %d, %dx%d, %llu frames, "
                        "box %d) failed: %d", what, g->N, g->H, g->W, (unsigned long long)dims[rank - 1], box1, (int)r);
    return W22_OK;
}

static w22_status out_map(w22_cuda *c, CUtensorMap *m, const w22_mm *g, const char *what) {
    const long F = g->M / ((long)g->H * g->W);
    const cuuint64_t dims[3] = {(cuuint64_t)g->N, (cuuint64_t)g->H * g->W, (cuuint64_t)(g->batch * F)};
    const long strides[2] = {g->o_sw, g->o_sf};
    return store_map(c, m, g, 3, dims, strides, WG_BM, what);
}


/* The TMA store's map of a direct conv's output frames ({N, W, H, F} at the output's strides; boxes of box_px pixels
 * of one row x 64 channels). */
static w22_status out_map_frames(w22_cuda *c, CUtensorMap *m, const w22_mm *g, int *box_px, const char *what) {
    const long F = g->M / ((long)g->H * g->W);
    *box_px = w22_route_frame_box_px(g->W); /* route.h */
    const cuuint64_t dims[4] = {(cuuint64_t)g->N, (cuuint64_t)g->W, (cuuint64_t)g->H, (cuuint64_t)F};
    const long strides[3] = {g->o_sw, g->o_sh, F > 1 ? g->o_sf : g->o_sh * g->H}; /* one frame: never stepped */
    return store_map(c, m, g, 4, dims, strides, *box_px, what);
}

#endif
