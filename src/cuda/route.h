/* Which kernel a GEMM (w22_mm, mm.h) runs on: the one place that decides it, pure functions of the GEMM and of
 * whether the backend has the wgmma conv, in a header that the CPU suite compiles (tests/test_route.c: the decoder's
 * real shapes, the 4K frames of issue 27's cliff, the shapes that must fall back). conv.cu decides the conv-level
 * step before it (partial sums, upsample phases, Winograd or direct; winograd.cu's blocker); the TMA conv's launch
 * shape (tiles or pairs, the split tail, the epilogue) is its own (tma_plan.cuh, mode_for). The order, and why:
 *   1. the layout every tensor-core kernel needs (alignment, strides, even N, int weight offsets), else scalar;
 *   2. the TMA wgmma conv where it takes the GEMM (64-bit tensor maps: no limit on the input's offsets);
 *   3. the row kernels (N <= 48, centred 3x3(x3); 64-bit frame bases): the 2D tiles from 6 rows on, else the rows;
 *   4. the mma.sync kernel, whose input offsets must fit an int (else scalar), tile by N (conv_tiles.h). */
#ifndef W22_CUDA_ROUTE_H
#define W22_CUDA_ROUTE_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include "mm.h"
#include "conv_tiles.h"

#define W22_WG_BK 64    /* the wgmma conv's K slice: 64 bf16, one 128-byte swizzled row (wgmma_common.cuh's WG_BK) */
#define W22_ROWS_BN 16  /* the row kernel's output channels (conv_rows.cu's CR_BN) */
#define W22_ROWS_BM 128 /* the row kernel's output pixels per tile (CR_BM) */
#define W22_R2_TH 16    /* the 2D tiles' output rows and columns per tile (conv_rows2d.cu's R2_TH, R2_TW) */
#define W22_R2_TW 32
#define W22_R2_MIN_H 6  /* below: 18 input rows per 16-row tile cost more than the row kernel's 3 per output row */
#define W22_R2_MAX_N 48 /* three 16-channel blocks */

typedef enum {
    W22_GEMM_SCALAR,    /* conv_scalar.cu: what no tensor-core kernel takes */
    W22_GEMM_TMA,       /* conv_sm90_wgmma_tma.cu */
    W22_GEMM_ROWS2D,    /* conv_rows2d.cu */
    W22_GEMM_ROWS,      /* conv_rows.cu */
    W22_GEMM_MMA_SMALL, /* conv_sm90_mma.cu, 128 x 32 (N <= 32) */
    W22_GEMM_MMA_MID,   /* 128 x 128 (N < 256) */
    W22_GEMM_MMA_BIG    /* 128 x 256 */
} w22_gemm_kernel;

static inline int w22_fits_int(long v) { return v >= 0 && v < (long)INT_MAX; }
static inline int w22_aligned(const void *p, int bytes) { return ((uintptr_t)p % (uintptr_t)bytes) == 0; }

/* NULL when the tensor-core kernels can take this GEMM's layout (alignment, strides, even N), else why not.
 * What they need of the offsets is apart (w22_route_int_blocker): the TMA conv addresses through 64-bit tensor maps and
 * the row kernels from 64-bit frame bases, so only the mma.sync kernel needs every offset in an int. */
static inline const char *w22_route_layout_blocker(const w22_mm *g) {
    if (g->cin % 8) return "scalar: cin % 8 != 0";
    if (g->sc && g->sc_cin % 8) return "scalar: shortcut cin % 8 != 0";
    if (g->N % 2) return "scalar: N odd";
    if (g->split_c % 2) return "scalar: time-split channels odd";
    if (!w22_aligned(g->a, 16) || g->a_sf % 8 || g->a_sh % 8 || g->a_sw % 8) return "scalar: input not 16-byte aligned";
    for (int i = 0; i < g->hist_n; i++)
        if (!w22_aligned(g->a_hist[i], 16)) return "scalar: history frame not 16-byte aligned";
    if (!w22_aligned(g->b, 16) || g->b_sh % 8 || g->b_sw % 8) return "scalar: weights not 16-byte aligned";
    if (g->sc && (!w22_aligned(g->sc, 16) || !w22_aligned(g->scb, 16) || g->sc_sf % 8 || g->sc_sh % 8 || g->sc_sw % 8))
        return "scalar: shortcut not 16-byte aligned";
    if (!w22_aligned(g->out, g->out_f32 ? 8 : 4) || g->o_sf % 2 || g->o_sh % 2 || g->o_sw % 2)
        return "scalar: output not aligned for pair stores";
    if (g->res && (!w22_aligned(g->res, 4) || g->r_sf % 2 || g->r_sh % 2 || g->r_sw % 2))
        return "scalar: residual not aligned for pair loads";
    if (g->a_sf < 0 || g->a_sh < 0 || g->a_sw < 0 || g->o_sf < 0 || g->o_sh < 0 || g->o_sw < 0 || g->b_sh < 0 ||
        g->b_sw < 0 || g->b_w < 1 || g->sc_sf < 0 || g->sc_sh < 0 || g->sc_sw < 0 || g->r_sf < 0 || g->r_sh < 0 ||
        g->r_sw < 0)
        return "scalar: negative strides";
    const long K = (long)g->kt * g->ks * g->ks * g->cin; /* the weights: int offsets in every kernel */
    if (!w22_fits_int(g->b_sh * (g->N / g->b_w + 1) + g->b_sw * g->b_w + K)) return "scalar: weight offsets exceed int";
    if (g->sc && !w22_fits_int((long)g->N * g->sc_cin)) return "scalar: shortcut weight offsets exceed int";
    if (!w22_fits_int((long)g->M + 2 * W22_CONV_BK)) return "scalar: M exceeds int";
    return NULL;
}

/* NULL when every input offset the mma.sync kernel forms fits its int (border included), else why not. Past 4K UHD
 * (a 256-channel frame of 1080 x 1920 is 532 M elements) they do not; those GEMMs must reach the TMA conv, not the
 * scalar kernel (issue 27: 105 s for one 3840 x 2160 frame when this check came first). */
static inline const char *w22_route_int_blocker(const w22_mm *g) {
    const int ih = g->upsample ? g->H / 2 + 1 : g->H, iw = g->upsample ? g->W / 2 + 1 : g->W;
    if (!w22_fits_int(g->a_sf * (g->F + g->kt) + g->a_sh * (ih + 2) + g->a_sw * (iw + 2) + g->cin))
        return "scalar: input offsets exceed int";
    if (g->sc && !w22_fits_int(g->sc_sf * g->F + g->sc_sh * g->H + g->sc_sw * g->W + g->sc_cin))
        return "scalar: shortcut offsets exceed int";
    return NULL;
}

static inline int w22_st16(long stride_elems) { return stride_elems > 0 && stride_elems % 8 == 0; }
/* A view's origin for the TMA's map: pixel (-1, -1) with the border (ks > 1), else (0, 0). */
static inline const bf16 *w22_map_origin(const bf16 *p, long sh, long sw, int border) {
    return border ? p - sh - sw : p;
}

static inline int w22_al16(const void *p) { return ((uintptr_t)p & 15) == 0; }

/* NULL when the wgmma kernel takes this GEMM (which has passed the mma kernel's checks), else why not. */
static inline const char *w22_route_wgmma_blocker(const w22_mm *g) {
    if (g->upsample) return "upsample";
    if (g->cin % W22_WG_BK) return "cin % 64";
    if (g->sc && g->sc_cin % W22_WG_BK) return "sc_cin % 64";
    if (g->N % 128) return "N % 128";
    if (g->kt != 1 && g->kt != 3) return "kt";
    if (g->ks < 1 || g->ks > 3) return "ks";
    if (g->b_w < g->N) return "weights not one [N][K] block";
    const long K = (long)g->kt * g->ks * g->ks * g->cin;
    if (!w22_al16(g->b) || (g->b_sw * 2) % 16 || g->b_sw < K || g->b_sw * 2 >= (1L << 40)) return "weights not TMA-able";
    if (g->sc && (!w22_al16(g->scb) || ((long)g->sc_cin * 2) % 16)) return "shortcut weights not TMA-able";
    if (K >= INT_MAX || (long)g->N >= INT_MAX) return "too large";
    return NULL;
}

/* NULL when this kernel takes a GEMM that the default wgmma kernel takes, else why not. */
static inline const char *w22_route_tma_blocker(const w22_mm *g) {
    const int border = g->ks > 1;
    if (border) {
        /* taps read rows y + dy - pad in [-1, H]: the one-pixel border */
        if (g->pad_y < 0 || g->pad_y > 1 || g->ks - 1 - g->pad_y < 0 || g->ks - 1 - g->pad_y > 1) return "pad_y";
        if (g->pad_x < 0 || g->pad_x > 1 || g->ks - 1 - g->pad_x < 0 || g->ks - 1 - g->pad_x > 1) return "pad_x";
    } else if (g->pad_y || g->pad_x)
        return "pad with ks 1";
    if (g->hist_n != 0 && g->hist_n != 2) return "hist_n";
    if (g->H <= 0 || g->W <= 0 || g->M % (g->H * g->W)) return "M not frames x H x W";
    const int F = g->M / (g->H * g->W); /* a frame stride is only stepped on with two frames or more */
    if (!w22_st16(g->a_sw) || !w22_st16(g->a_sh) || (F + g->kt - 1 - g->hist_n > 1 && !w22_st16(g->a_sf)) || g->a_sw < g->cin)
        return "A strides not TMA-able";
    if (!w22_al16(w22_map_origin(g->a, g->a_sh, g->a_sw, border))) return "A not 16-byte aligned";
    for (int k = 0; k < g->hist_n; k++)
        if (!w22_al16(w22_map_origin(g->a_hist[k], g->a_sh, g->a_sw, border))) return "history frame not 16-byte aligned";
    if (g->sc && (!w22_st16(g->sc_sw) || !w22_st16(g->sc_sh) || (F > 1 && !w22_st16(g->sc_sf)) || !w22_al16(g->sc) ||
                  g->sc_sw < g->sc_cin))
        return "shortcut input not TMA-able";
    return NULL;
}

static inline int w22_route_rows2d_takes(const w22_mm *g) {
    return g->N <= W22_R2_MAX_N && g->H >= W22_R2_MIN_H && g->a_sh * ((W22_R2_TH + 2) + 1) + g->a_sw * (W22_R2_TW + 2) < INT_MAX &&
           (long)g->F * ((g->H + W22_R2_TH - 1) / W22_R2_TH) * ((g->W + W22_R2_TW - 1) / W22_R2_TW) < INT_MAX;
}

static inline const char *w22_route_rows_blocker(const w22_mm *g) {
    if (g->upsample || g->sc) return "upsample or shortcut";
    if (g->ks != 3 || (g->kt != 1 && g->kt != 3) || g->pad_y != 1 || g->pad_x != 1) return "not a centred 3x3(x3)";
    if (g->N % 2) return "N odd";
    /* N <= 16: either kernel; 16 < N <= 48: the 2D tiles' three channel blocks alone (w22_rows2d_takes checks
     * N <= 48 and H >= 6), else the mma kernel */
    if (g->N > W22_ROWS_BN && !w22_route_rows2d_takes(g))
        return "N > 16 and not on the 2D tiles (N > 48 or H < 6)";
    if (g->cin % 64) return "cin % 64";
    if (g->b_w < g->N) return "weights not one [N][K] block";
    if ((long)g->F * g->H * ((g->W + W22_ROWS_BM - 1) / W22_ROWS_BM) > 0x7fffffffL) return "too many tiles";
    return NULL;
}

/* The kernel for g, and why not a faster one where it falls back (*why: a static string, or NULL). wgmma_on: the
 * backend has the wgmma conv (w22_cuda.use_wgmma and the TMA's im2col encoder). */
static inline w22_gemm_kernel w22_route_gemm(const w22_mm *g, int wgmma_on, const char **why) {
    *why = w22_route_layout_blocker(g);
    if (!*why) {
        /* 64-bit addressing first (the TMA conv, the row kernels: disjoint, N % 128 against N <= 48), then what
         * needs int offsets */
        if (wgmma_on && !w22_route_wgmma_blocker(g) && !w22_route_tma_blocker(g)) return W22_GEMM_TMA;
        if (!w22_route_rows_blocker(g)) return w22_route_rows2d_takes(g) ? W22_GEMM_ROWS2D : W22_GEMM_ROWS;
        *why = w22_route_int_blocker(g);
    }
    if (*why) return W22_GEMM_SCALAR;
    return g->N <= 32 ? W22_GEMM_MMA_SMALL : g->N < 256 ? W22_GEMM_MMA_MID : W22_GEMM_MMA_BIG;
}

#endif
