/* Which kernel a conv runs, and how: the one place that decides it, pure functions of the conv's GEMM (w22_mm, mm.h)
 * and of the GPU's counts, in a header that the CPU suite compiles (tests/test_route.c: the decoder's real shapes,
 * the 4K frames of issue 27's cliff, the shapes that must fall back, the TMA conv's launch plans). The executors
 * (conv.cu, conv_sm90_mma.cu, conv_sm90_wgmma_tma.cu, winograd.cu; the GEMMs themselves from lower.h) call these and
 * record the answer in w22_route,
 * which the backend's query (w22_backend_cuda_last_route) returns and tests/cuda_ops checks against what launched.
 *   0. The kernel path, taken by the backend at open from the GPU's compute capability (w22_route_path; issue 45):
 *      sm_90 the Hopper path (hopper 1: the sm_90a kernels, wgmma + TMA + clusters, beside the mma.sync tiles both
 *      paths share), any other sm_80+ GPU the portable path (hopper 0: mma.sync, cp.async and ldmatrix only, every
 *      launched kernel within W22_PORTABLE_SMEM of shared memory, built as SASS for sm_80 .. sm_120). A Hopper runs
 *      the portable path when asked (w22_decoder_params.kernels, W22_KERNELS=portable). Every function below that
 *      takes `hopper` answers for that path; the Hopper-only kernels are never the answer with hopper 0.
 *   1. The conv's step (w22_route_conv_step): the causal history as partial sums (psum), an upsample as four 2x2
 *      phase GEMMs (one launch of the TMA conv where it takes them, the Hopper path; four launches on the portable
 *      one), Winograd F(4x4, 3x3) for the 3x3x3 convs of the backend's threshold (w22_route_winograd_blocker: on
 *      both paths, its 36 fp16 GEMMs one launch of the TMA conv or of the mma.sync kernel), else the direct implicit
 *      GEMM.
 *   2. The GEMM's kernel (w22_route_gemm), in this order, and why:
 *      a. the layout every tensor-core kernel needs (alignment, strides, even N, int weight offsets), else scalar;
 *      b. the TMA wgmma conv where it takes the GEMM (64-bit tensor maps: no limit on the input's offsets); Hopper;
 *      c. the 2D row tiles (centred 3x3(x3); 64-bit frame bases) from 6 rows on: N <= 48 on the Hopper path, N <= 16
 *         on the portable one, whose 99 KB hold no 48-channel tile's stages;
 *      d. the mma.sync kernel, whose in-frame offsets must fit an int (else scalar), tile by N (conv_tiles.h), the
 *         same on both paths: 128 x 32 to N 32, 128 x 96 where it pads N less than 128 x 128 (N 96, 192), else
 *         128 x 128 (96 KB). Its K runs packed across the taps (cin % 64 != 0
 *         wastes no K step: a step of 64 spans two taps of cin 96).
 *   3. The TMA conv's launch (w22_route_tma_launch): its tile (the table below), tiles or pairs of M tiles in
 *      clusters of 2 or pairs and a tail, the split tail; and its epilogue (w22_route_tma_epilogue).
 * Each heuristic carries the measurement that chose it (docs/PERF.md's version rows). */
#ifndef W22_CUDA_ROUTE_H
#define W22_CUDA_ROUTE_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include "backend.h"
#include "mm.h"
#include "conv_tiles.h"

#define W22_WG_BK 64    /* the wgmma conv's K slice: 64 bf16, one 128-byte swizzled row (wgmma_common.cuh's WG_BK) */
#define W22_ROWS_BN 16  /* the 2D tiles' channel block: the most output channels the portable path's tile takes */
#define W22_R2_TH 16    /* the 2D tiles' output rows and columns per tile (conv_rows2d.cu's R2_TH, R2_TW) */
#define W22_R2_TW 32
#define W22_R2_MIN_H 6  /* below: 18 input rows per 16-row tile cost more than the row kernel's 3 per output row */
#define W22_R2_MAX_N 48 /* three 16-channel blocks (the Hopper path; the portable path's 2D tiles: one) */
/* The shared memory per block every kernel the portable path launches fits (static_asserts at each kernel): the
 * smallest opt-in of its GPUs, 99 KB on sm_86, sm_89 and sm_120 (sm_80, sm_90 and sm_100 allow 227 KB). */
#define W22_PORTABLE_SMEM (99 * 1024)

/* The kernel path for a GPU of compute capability major.minor, `portable` asked for (w22_decoder_params.kernels or
 * W22_KERNELS): 1 the Hopper path, 0 the portable one, -1 none (below sm_80: the CPU backend is the one left). */
static inline int w22_route_path(int major, int minor, int portable) {
    (void)minor;
    if (major < 8) return -1;
    return major == 9 && !portable ? 1 : 0;
}

typedef enum {
    W22_GEMM_SCALAR,    /* conv_scalar.cu: what no tensor-core kernel takes */
    W22_GEMM_TMA,       /* conv_sm90_wgmma_tma.cu */
    W22_GEMM_ROWS2D,    /* conv_rows2d.cu */
    W22_GEMM_MMA_SMALL, /* conv_sm90_mma.cu, 128 x 32 (N <= 32) */
    W22_GEMM_MMA_MID,   /* 128 x 128 */
    W22_GEMM_MMA_N96    /* 128 x 96: N that 96 pads less than 128 does (96, 192: the Wan2.1 decoder's) */
} w22_gemm_kernel;
#define W22_GEMM_KERNELS 6
/* Its name in logs and tests (the backend's last_path names its launches the same way) */
static inline const char *w22_route_kernel_name(w22_gemm_kernel k) {
    static const char *const names[W22_GEMM_KERNELS] = {"scalar", "tma", "rows2d", "mma 128x32", "mma 128x128",
                                                        "mma 128x96"};
    return (unsigned)k < W22_GEMM_KERNELS ? names[k] : "?";
}

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

/* NULL when every input offset the mma.sync kernel forms in an int fits (border included), else why not. Its frames
 * are 64-bit bases (w22_gemm_frame), so only a frame's own offsets count: a 256-channel frame of 1080 x 1920 is
 * 532 M elements, and 4K UHD's GEMMs of several frames (past an int in all) reach it on the portable path, not the
 * scalar kernel (issue 27: 105 s for one 3840 x 2160 frame there). */
static inline const char *w22_route_int_blocker(const w22_mm *g) {
    const int ih = g->upsample ? g->H / 2 + 1 : g->H, iw = g->upsample ? g->W / 2 + 1 : g->W;
    if (!w22_fits_int(g->a_sh * (ih + 2) + g->a_sw * (iw + 2) + g->cin))
        return "scalar: input offsets within a frame exceed int";
    /* the shortcut's: ints from its base (conv_sm90_mma.cu's s_off = t sc_sf + y sc_sh + x sc_sw, plus the channel),
     * so the last pixel's of the last frame, and a frame stride that fits where there is a second frame. Exact, not
     * a frame more: the census through exec.c found 4096x2160's stage-3 conv with its 512-channel shortcut (one frame,
     * 1.13 G elements) on the scalar kernel on the portable path, where the bound counted F + 1 frames (session 37) */
    if (g->sc && (!w22_fits_int((long)(g->F > 1 ? g->F - 1 : 0) * g->sc_sf + (long)(g->H > 1 ? g->H - 1 : 0) * g->sc_sh +
                                (long)(g->W > 1 ? g->W - 1 : 0) * g->sc_sw + g->sc_cin) ||
                  (g->F > 1 && !w22_fits_int(g->sc_sf))))
        return "scalar: shortcut offsets exceed int";
    return NULL;
}

static inline int w22_st16(long stride_elems) { return stride_elems > 0 && stride_elems % 8 == 0; }
/* A view's origin for the TMA's map: pixel (-1, -1) with the border (ks > 1), else (0, 0). */
static inline const bf16 *w22_map_origin(const bf16 *p, long sh, long sw, int border) {
    return border ? p - sh - sw : p;
}

static inline int w22_al16(const void *p) { return ((uintptr_t)p & 15) == 0; }

/* The TMA conv's tile width for N output channels: 256 where it divides N, else 128, else 192, else 96 (the Wan2.1
 * decoder's 192- and 96-channel convs: no N waste); 0 where none does (then the mma.sync kernel). */
static inline int w22_route_tma_bn(int N) {
    return N % 256 == 0 ? 256 : N % 128 == 0 ? 128 : N % 192 == 0 ? 192 : N % 96 == 0 ? 96 : 0;
}

/* Whether the TMA conv takes cin input channels: its K stages are 64-channel slices of one tap, so cin % 64 != 0
 * leaves the last slice of each tap part past cin, which the TMA fills with zeros (the weights' rows it meets there,
 * the next tap's, multiply those zeros). Taken from cin 96 on with cin % 32 == 0: 96 runs 75% of its K (the Wan2.1
 * decoder's 96-channel convs; the mma.sync kernel's packed K runs all of it, at well under the wgmma's rate). */
static inline int w22_route_tma_cin_ok(int cin) { return cin % 64 == 0 || (cin % 32 == 0 && cin >= 96); }
/* The TMA conv's K slices per tap of cin channels. */
static inline int w22_route_tma_slices(int cin) { return (cin + W22_WG_BK - 1) / W22_WG_BK; }

/* NULL when the wgmma kernel takes this GEMM (which has passed the mma kernel's checks), else why not. */
static inline const char *w22_route_wgmma_blocker(const w22_mm *g) {
    if (g->upsample) return "upsample";
    if (!w22_route_tma_cin_ok(g->cin)) return "cin not a multiple of 64 (nor one of 32 from 96 on)";
    if (g->sc && g->sc_cin % W22_WG_BK) return "sc_cin % 64";
    if (!w22_route_tma_bn(g->N)) return "N not a multiple of 128 or 192";
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

/* Whether the 2D tiles take g (which the row blocker passed): up to 3 channel blocks on the Hopper path, 1 on the
 * portable one (conv_rows2d.cu: its 48-channel stage is 65 KB). */
static inline int w22_route_rows2d_takes(const w22_mm *g, int hopper) {
    return g->N <= (hopper ? W22_R2_MAX_N : W22_ROWS_BN) && g->H >= W22_R2_MIN_H &&
           g->a_sh * ((W22_R2_TH + 2) + 1) + g->a_sw * (W22_R2_TW + 2) < INT_MAX &&
           (long)g->F * ((g->H + W22_R2_TH - 1) / W22_R2_TH) * ((g->W + W22_R2_TW - 1) / W22_R2_TW) < INT_MAX;
}

/* NULL when the 2D row tiles (conv_rows2d.cu) take g, else why not. The row kernel of one-row tiles that took what
 * they did not (under 6 rows: a rank's edge rows, N <= 16 and cin % 64 == 0) was deleted in session 37: the census
 * through exec.c's decode (tests/test_census.c) found no conv of either VAE that reaches it, at any size or rank
 * count (the heads' partial sums are N 36, and cin 96 for Wan2.1's N 10); such a GEMM goes to the mma.sync kernel. */
static inline const char *w22_route_rows_blocker(const w22_mm *g, int hopper) {
    if (g->upsample || g->sc) return "upsample or shortcut";
    if (g->ks != 3 || (g->kt != 1 && g->kt != 3) || g->pad_y != 1 || g->pad_x != 1) return "not a centred 3x3(x3)";
    if (g->N % 2) return "N odd";
    if (!w22_route_rows2d_takes(g, hopper))
        return hopper ? "not on the 2D tiles (N > 48 or H < 6)" : "not on the 2D tiles (N > 16 or H < 6)";
    /* the 2D tiles load 32-channel slices (conv_rows2d.cu's R2_BK): Wan2.1's conv_out (cin 96) on them, where the
     * mma.sync 128 x 32 tile ran its partial sums at 18 TFLOP/s */
    if (g->cin % 32) return "cin % 32";
    if (g->b_w < g->N) return "weights not one [N][K] block";
    return NULL;
}

/* The mma.sync kernel's tile for N output channels, the same on both paths (conv_tiles.h): 128 x 32 up to 32; 128 x
 * 96 where it pads N less than 128 x 128 does (96, 192: the Wan2.1 decoder's 96- and 192-channel convs, which 128 x
 * 128 ran with 25% of its MMAs on padding), 128 x 128 otherwise (N >= 256 too: session 38's 128 x 256, one block of
 * 192 KB an SM, ran the portable path's f121 38% slower on an H100; docs/PERF.md). */
static inline w22_gemm_kernel w22_route_mma_tile(int N) {
    if (N <= 32) return W22_GEMM_MMA_SMALL;
    return (N + 95) / 96 * 96 < (N + 127) / 128 * 128 ? W22_GEMM_MMA_N96 : W22_GEMM_MMA_MID;
}

/* Why no kernel takes fp16 operands (w22_mm.f16) in a single GEMM: only a batch's run, on the TMA conv or the
 * mma.sync kernel (w22_route_batch); the scalar and row kernels are bf16 only. The launch site fails with it. */
#define W22_ROUTE_F16_SINGLE "refused: fp16 operands outside a batch (the scalar and row kernels are bf16 only)"

/* The kernel for g, and why not a faster one where it falls back (*why: a static string, or NULL). wgmma_on: the
 * Hopper path (w22_route_path 1: the backend has the wgmma conv, w22_cuda.use_wgmma and the TMA's im2col encoder);
 * 0 the portable path. fp16 operands: W22_GEMM_SCALAR with *why W22_ROUTE_F16_SINGLE, which the caller refuses. */
static inline w22_gemm_kernel w22_route_gemm(const w22_mm *g, int wgmma_on, const char **why) {
    if (g->f16) {
        *why = W22_ROUTE_F16_SINGLE;
        return W22_GEMM_SCALAR;
    }
    *why = w22_route_layout_blocker(g);
    if (!*why) {
        /* 64-bit addressing first (the TMA conv, the row kernels: disjoint, N % 128 or 192 against N <= 48), then what
         * needs int offsets */
        if (wgmma_on && !w22_route_wgmma_blocker(g) && !w22_route_tma_blocker(g)) return W22_GEMM_TMA;
        if (!w22_route_rows_blocker(g, wgmma_on)) return W22_GEMM_ROWS2D;
        *why = w22_route_int_blocker(g);
    }
    if (*why) return W22_GEMM_SCALAR;
    return w22_route_mma_tile(g->N);
}

/* NULL when a batch GEMM (w22_mm.batch: Winograd's 36 components) runs as one launch of the mma.sync kernel (grid.y
 * the GEMM: the portable path's, and the Hopper path's where the TMA conv does not take it), else why not: then
 * as `batch` launches. GEMM p reads A frames from p a_frames on (frame indices: 28 bits of its row state), B rows
 * from p N on (int offsets) and writes out + p ph_o[1] (evenly spaced outputs: the kernel indexes no parameter
 * array by its block). */
static inline const char *w22_route_mma_batch_blocker(const w22_mm *g) {
    if (g->batch < 2 || g->batch > W22_GEMM_BATCH) return "batch: not 2-36 GEMMs";
    if (g->phases || g->hist_n || g->sc || g->res || g->split_c || g->upsample)
        return "batch: phases, history, shortcut, residual or split output";
    if (g->H <= 0 || g->W <= 0 || g->a_frames < (long)g->M / ((long)g->H * g->W) + g->kt - 1)
        return "batch: a_frames under a GEMM's window";
    if (g->b_w != g->N || g->b_sh) return "batch: weights not one [N][K] block per GEMM";
    if (g->f16 && w22_route_mma_tile(g->N) != W22_GEMM_MMA_MID) return "batch: fp16 only on the 128 x 128 tile";
    if (!w22_fits_int((long)g->batch * g->N * g->b_sw) || (long)g->batch * g->a_frames >= (1L << 27))
        return "batch: weight rows or frames past the kernel's int";
    for (int p = 0; p < g->batch; p++)
        if (g->ph_o[p] != (long)p * g->ph_o[1]) return "batch: outputs not evenly spaced";
    const char *why = NULL;
    w22_mm one = *g;
    one.batch = 0, one.f16 = 0; /* fp16: the same layout as bf16 */
    const w22_gemm_kernel k = w22_route_gemm(&one, 0, &why); /* the mma.sync kernel's own checks */
    if (k == W22_GEMM_SCALAR) return why;
    if (k < W22_GEMM_MMA_SMALL) return "batch: a row kernel's shape";
    return NULL;
}

static inline int w22_route_tma_store_batch(const w22_mm *g); /* section 3 */

/* NULL when a batch GEMM (w22_mm.batch: Winograd's 36 components) runs as one launch of the TMA conv (the Hopper path),
 * else why not. */
static inline const char *w22_route_tma_batch_blocker(const w22_mm *g) {
    if (g->batch < 2 || g->batch > W22_GEMM_BATCH) return "batch: not 2-36 GEMMs";
    if (g->phases || g->hist_n || g->sc || g->res || g->out_f32 || g->split_c || g->upsample)
        return "batch: phases, history, shortcut, residual, fp32 or split output";
    if (g->a_frames < (long)g->M / ((long)g->H * g->W) + g->kt - 1) return "batch: a_frames under a GEMM's window";
    if ((long)g->batch * g->a_frames > INT_MAX / 2) return "batch: too many frames";
    const char *why = w22_route_tma_blocker(g);
    if (why) return why;
    for (int p = 0; p < g->batch; p++)
        if (g->ph_o[p] < 0 || (p == 0 && g->ph_o[p] != 0)) return "batch: output offsets negative, or GEMM 0's not 0";
    /* the fp16 kernel is built for the TMA store's tile alone (conv_sm90_wgmma_tma.cu's run_tma) */
    if (g->f16 && !w22_route_tma_store_batch(g)) return "batch: fp16 only with the TMA store";
    return NULL;
}

/* How a batch GEMM launches: one launch of the TMA conv (the Hopper path), one of the mma.sync kernel, or its GEMMs
 * apart (batch 0: lower.h's w22_lower_wino_batch leaves it so where the outputs' offsets pass an int), each then
 * routed by w22_route_gemm. */
typedef enum { W22_BATCH_TMA, W22_BATCH_MMA, W22_BATCH_APART } w22_batch_launch;
static inline w22_batch_launch w22_route_batch(const w22_mm *g, int hopper) {
    if (!g->batch) return W22_BATCH_APART;
    if (hopper && !w22_route_tma_batch_blocker(g)) return W22_BATCH_TMA;
    return w22_route_mma_batch_blocker(g) ? W22_BATCH_APART : W22_BATCH_MMA;
}

/* Phase p's output and residual offsets from phase 0's (elements; the residual's with p's DupUp r_coff). */
static inline long w22_route_phase_o(const w22_mm q[4], int p) {
    return (const bf16 *)q[p].out - (const bf16 *)q[0].out;
}
static inline long w22_route_phase_r(const w22_mm q[4], int p) {
    return q[p].res ? q[p].res - q[0].res + q[p].r_coff : 0;
}

/* NULL when an upsample's four phase GEMMs q[py 2 + px] (lower.h's w22_lower_phases) run as one launch of the TMA
 * conv (w22_mm.phases: one ramp and one part-empty last round instead of four; v16), else why not: then each is
 * routed by w22_route_gemm. hopper: the Hopper path with its TMA conv. */
static inline const char *w22_route_phases_blocker(const w22_mm q[4], int hopper) {
    if (!hopper) return "phases: the portable path (four launches)";
    for (int p = 0; p < 4; p++) {
        if (q[p].M <= 0 || q[p].N <= 0) return "phases: an empty GEMM";
        const char *why = w22_route_layout_blocker(&q[p]);
        if (!why) why = w22_route_wgmma_blocker(&q[p]);
        if (why) return why;
    }
    const w22_mm *a = &q[0];
    if (a->hist_n || a->sc) return "phases: history or shortcut (their map slots carry phases 1-3's A)";
    for (int p = 0; p < 4; p++)
        if (q[p].f16) return "phases: fp16 operands (a batch's only)";
    if (a->out_f32) return "phases: fp32 output";
    for (int p = 0; p < 4; p++) {
        const w22_mm *b = &q[p];
        const char *why = w22_route_tma_blocker(b);
        if (why) return why;
#define SAME(f) (b->f == a->f)
        if (b->phases || !SAME(M) || !SAME(N) || !SAME(F) || !SAME(H) || !SAME(W) || !SAME(a) || !SAME(a_sf) ||
            !SAME(a_sh) || !SAME(a_sw) || !SAME(hist_n) || !SAME(cin) || !SAME(kt) || !SAME(ks) || !SAME(upsample) ||
            !SAME(b_w) || !SAME(b_sh) || !SAME(b_sw) || !SAME(sc) || !SAME(bias) || !SAME(sc_bias) || !SAME(out_f32) ||
            !SAME(o_sf) || !SAME(o_sh) || !SAME(o_sw) || !SAME(split_c) || !SAME(r_sf) || !SAME(r_sh) ||
            !SAME(r_sw) || !SAME(r_tsh) || !SAME(r_toff) || !SAME(r_csh) || !b->res != !a->res)
            return "phases: GEMMs differ beyond pads, weights, output and residual";
#undef SAME
        if (b->pad_y != a->pad_y - (p >> 1) || b->pad_x != a->pad_x - (p & 1)) return "phases: pads not pad - (py, px)";
        if (b->b != a->b + (size_t)p * a->N * a->b_sw) return "phases: weights not one block of 4 N rows";
        if (((const char *)b->out - (const char *)a->out) % 2) return "phases: output offset not in elements";
        const long po = w22_route_phase_o(q, p), pr = w22_route_phase_r(q, p);
        if (po < 0 || po >= INT_MAX || pr < 0 || pr >= INT_MAX) return "phases: offsets from phase 0 not in int";
    }
    return NULL;
}

/* ---- 1. the conv's step ---- */

typedef enum {
    W22_CONV_DIRECT,   /* one implicit GEMM (w22_route_gemm) */
    W22_CONV_PSUM,     /* the causal history as partial sums (conv_psum.cu) */
    W22_CONV_PHASES,   /* nearest-2x + 3x3 as four 2x2 phase GEMMs on the low-resolution grid */
    W22_CONV_WINOGRAD  /* F(4x4, 3x3) per frame tap: transforms + one fp16 batch GEMM of 36 (winograd.cu) */
} w22_conv_step;

/* NULL when a conv runs as Winograd F(4x4, 3x3), else why not. Both paths: its 36 component GEMMs are one launch of
 * the TMA conv on the Hopper path and one of the mma.sync kernel on the portable path (w22_route_mma_batch_blocker;
 * the transforms are plain kernels; fp16 operands, which only those two take). has_wino: the backend made Winograd
 * weights for this conv at upload (its threshold: w22_route_wino_min_default, or W22_WINOGRAD; none in exact mode);
 * row_bytes: the scratch of one tile row (winograd.cu). Any height and width: the transforms read zeros past the
 * frame and store only inside it. */
static inline const char *w22_route_winograd_blocker(const w22_conv_args *a, int cin, int cout, int has_wino,
                                                     size_t row_bytes) {
    if (!has_wino) return "no Winograd weights (exact arithmetic, or channels below the threshold)";
    if (a->kt != 3 || a->ks != 3 || a->upsample || a->time_split || a->dup_in || a->psum) return "not a plain 3x3x3 conv";
    if (cin % 64 || cout % 64) return "channels not a multiple of 64";
    /* its fp16 batch runs on the mma.sync 128 x 128 tile where the TMA conv does not take it (w22_route_batch): an N
     * that the 128 x 96 tile pads less (64, 192, ...) would find no fp16 kernel */
    if (w22_route_mma_tile(cout) != W22_GEMM_MMA_MID) return "output channels off the fp16 batch's 128 x 128 tile";
    if (a->in.sw != a->in.c || a->out.sw != a->out.c || (a->residual && a->residual->sw != a->residual->c))
        return "pixels not dense";
    if (a->work && a->work_bytes < row_bytes) return "the caller's scratch holds no tile row";
    return NULL;
}

/* The scratch of one Winograd tile row (four output rows) of a conv of F output frames, w4 tile columns: V (36
 * components of F + 2 input frames, cin) and M (36 components of F frames, cout), fp16 (winograd.cu's bands). */
static inline size_t w22_route_wino_row_bytes(int F, int w4, int cin, int cout) {
    return (size_t)36 * w4 * ((size_t)(F + 2) * cin + (size_t)F * cout) * 2;
}

/* The most tile rows a Winograd band may have: its 36 GEMMs are one batch launch only while every component's
 * output offset (36 x F x rows x w4 x cout elements) and its A frames fit the kernels' ints (route.h's batch
 * blockers), and no GEMM of fp16 runs apart. */
static inline int w22_route_wino_band_rows(int F, int w4, int cin, int cout) {
    const long per = 36L * F * w4 * (cout > cin ? cout : cin);
    const long rows = (INT_MAX / 2) / (per > 0 ? per : 1);
    return rows < 1 ? 1 : rows > (1 << 20) ? (1 << 20) : (int)rows;
}

/* A Winograd conv's band height in tile rows (winograd.cu): as many as `have` bytes of scratch hold (at least one),
 * at most w22_route_wino_band_rows, then evened out over the bands that takes (h4 tile rows in all). */
static inline int w22_route_wino_band(int F, int h4, int w4, int cin, int cout, size_t have) {
    const size_t row = w22_route_wino_row_bytes(F, w4, cin, cout);
    const size_t fit = have / row;
    const int hmax = w22_route_wino_band_rows(F, w4, cin, cout);
    int hb = fit > (size_t)hmax ? hmax : (int)fit;
    if (hb < 1) hb = 1;
    if (hb > h4) hb = h4;
    const int nb = (h4 + hb - 1) / hb;
    return (h4 + nb - 1) / nb;
}

/* The Winograd threshold when W22_WINOGRAD is unset, by path (hopper 1: the sm_90a kernels; 0: the portable ones):
 * F(4x4, 3x3) pays from 256 channels on both. The portable path's direct conv is the mma.sync tile's (session 40: f121
 * 4303 -> 3830 ms at 256); the Hopper path's TMA conv ran the 256-channel convs direct faster while the input
 * transform ran at 1.3 TB/s (session 40: +14% at 256), and slower once it ran at 2.4 TB/s (session 41: f121 2197 ->
 * 2157 ms; docs/PERF.md). The path stays an argument: the answer is measured per path, and may part again. */
static inline int w22_route_wino_min_default(int hopper) {
    (void)hopper;
    return 256;
}

/* Whether the backend makes Winograd weights at upload for a kt x kh x kw conv weight, cin -> cout, at the threshold
 * min_cin (0: exact arithmetic, none): the 3x3x3 convs with both channel counts >= min_cin and cout even (the zero
 * row after an odd cout's taps, conv_psum.cu, must follow the direct layout). Tests ask this, not a copy of it. */
static inline int w22_route_wino_weights(int kt, int kh, int kw, int cin, int cout, int min_cin) {
    return min_cin > 0 && kt == 3 && kh == 3 && kw == 3 && cin >= min_cin && cout >= min_cin && !(cout & 1);
}

/* The tile rows of the Winograd band the plan keeps free for a conv (or all of its rows where fewer): fewer bands,
 * fewer launches (a band of 8 rows at 352 x 624 is 36 GEMMs of 1248 rows a frame). */
#define W22_WINO_BAND_ROWS 8

/* The bytes of w22_conv_args.work a 3x3x3 conv of frames x h x w output pixels, cin -> cout, wants for its Winograd
 * bands at the backend's threshold min_cin (0: it runs direct): what the plan keeps free at the conv's stage
 * (backend.h's conv_work). Without it a threshold under 512 found no tile row free at the last stage, which sizes the
 * plan's scratch: w22_route_winograd_blocker sent those convs to the direct kernel in silence (session 37). The
 * components U are not in it: they take the span only where it holds them beside a tile row, else the backend's own
 * scratch (winograd.cu). The blocker's shape rules are its own; test_workspace checks that every conv given this
 * much passes them. */
static inline size_t w22_route_winograd_work(int kt, int ks, int cin, int cout, int frames, int h, int w, int min_cin) {
    if (!w22_route_wino_weights(kt, ks, ks, cin, cout, min_cin) || cin % 64 || cout % 64 || frames < 1 || h < 1 ||
        w < 1)
        return 0;
    const int h4 = (h + 3) / 4, rows = h4 < W22_WINO_BAND_ROWS ? h4 : W22_WINO_BAND_ROWS;
    return (size_t)rows * w22_route_wino_row_bytes(frames, (w + 3) / 4, cin, cout);
}

/* The step of a conv: has_phases, the backend made the upsample's phase weights at upload (it does for every
 * upsample conv); wino_blocker, w22_route_winograd_blocker's answer. */
static inline w22_conv_step w22_route_conv_step(const w22_conv_args *a, int has_phases, const char *wino_blocker) {
    if (a->psum) return W22_CONV_PSUM;
    if (a->upsample && has_phases) return W22_CONV_PHASES;
    return wino_blocker ? W22_CONV_DIRECT : W22_CONV_WINOGRAD;
}

/* ---- 3. the TMA conv's launch ----
 * Its tiles (conv_sm90_wgmma_tma.cu), 128 output pixels (two consumer warpgroups of 64 rows) by BN channels:
 * | BN  | stages | clusters | epilogue   | used when                  | why |
 * | 256 | 4      | 1 or 2   | overlapped | N % 256 == 0               | 128 fp32 accumulators a consumer thread; 575-621 TFLOP/s on the heavy convs (v5-v9) |
 * | 128 | 6      | 1        | overlapped | N % 256 != 0 (N % 128 = 0) | half a 256 tile's N waste (Wan2.1's N 384 and the like) |
 * | 192 | 5      | 1        | overlapped | N % 128 != 0 (N % 192 = 0) | Wan2.1's 192-channel convs, one tile wide (128: 25% waste) |
 * |  96 | 7      | 1        | overlapped | N % 192 != 0 (N % 96 = 0)  | Wan2.1's 96-channel convs at 720 x 1280 |
 * | 256 | 3      | 1 or 2   | TMA store  | w22_route_tma_store_*      | its 64 KB staging on a ring of 3: batch GEMMs f121 -1.8% (v20), direct convs -1.2% (v21) |
 * A persistent grid, one CTA per SM (v9: f121 -0.6% against one tile per CTA). */
#define W22_WG_BM 128
/* The stages of a tile of bn channels by the table above (te: the TMA store's staging); the launch sites instantiate
 * these, and tests/cuda_ops checks what launched against this. */
static inline int w22_route_tma_stages(int bn, int te) {
    return te ? 3 : bn == 256 ? 4 : bn == 192 ? 5 : bn == 96 ? 7 : 6;
}
#define W22_SPLIT_MAX 3     /* pieces of K per split tile */
#define W22_SPLIT_SLOTS 132 /* partial slots, one per piece: R split <= the grid (132 on an H200; more SMs: fewer pieces) */
#define W22_PAIR_COST 0.97  /* a round of pairs against a round of tiles: a pair's tile ran 2-5% faster (v15) */

typedef struct {
    int sms;      /* the persistent grid: one CTA per SM (at least 1) */
    int clusters; /* the clusters of 2 of the TMA conv that fit at once (0: none) */
    int on_side;  /* work on the backend's side stream: no split tail (its slots are the main stream's) */
} w22_route_gpu;

enum { W22_TMA_TILES, W22_TMA_PAIRS, W22_TMA_PAIRS_TAIL };

/* The split tail's pieces per tile for `tiles` tiles of `iters` stages on a persistent grid of `grid` CTAs (or
 * clusters): the last round's R tiles are split when R <= grid / 2, into grid / R pieces (at most W22_SPLIT_MAX,
 * each of 8 stages or more, R x pieces within `slots`: a cluster's tile is two tiles, each with its pieces' slots);
 * 1: no split. A grid of one round splits only where `one_round` (the tail launch after the pairs' rounds: the
 * tiles they left, fewer than the SMs). (v13: before it, the last round ran part-empty.) */
static inline int w22_route_split_of(long tiles, int iters, int grid, int slots, int one_round) {
    if (grid <= 0 || (tiles <= grid && !one_round)) return 1;
    const long r = tiles % grid;
    if (r == 0) return 1;
    int s = grid / r < W22_SPLIT_MAX ? (int)(grid / r) : W22_SPLIT_MAX;
    while (s > 1 && (iters / s < 8 || r * s > slots)) s--;
    return s;
}

/* The persistent grid's rounds for `tiles` items of `iters` stages on `grid` runners (CTAs or clusters), the
 * part-empty last one counted as the 1 / split of a tile that its pieces take (split_ok 0: no split). */
static inline double w22_route_rounds(long tiles, int iters, int grid, int slots, int split_ok, int one_round) {
    const long full = tiles / grid;
    if (tiles % grid == 0) return (double)full;
    return (double)full + 1.0 / (split_ok ? w22_route_split_of(tiles, iters, grid, slots, one_round) : 1);
}

/* The K stages of one tile of g on the TMA conv: the taps' 64-channel slices, then the shortcut's. */
static inline int w22_route_tma_iters(const w22_mm *g) {
    return g->kt * g->ks * g->ks * w22_route_tma_slices(g->cin) + (g->sc ? g->sc_cin / W22_WG_BK : 0);
}

/* Tiles on the SMs (TMA_TILES), pairs of M tiles in clusters of 2 sharing B (TMA_PAIRS), or the pairs' whole rounds
 * and then the tiles they leave on the SMs (TMA_PAIRS_TAIL, from tile *tile0 on; the pairs: the first *lim). A round
 * of pairs counts W22_PAIR_COST of a round of tiles, and the plan of the fewest rounds wins. Pairs round
 * differently: the 512-channel conv at 176 x 312 is 858 tiles on 132 CTAs (6.5 rounds with the split tail) but 430
 * pairs on 66 clusters (7: the 34 pairs left cannot split in two; measured 3% slower), and 6 rounds of pairs + its
 * last 66 tiles in 2 pieces each on the SMs (0.5) beat both (v15). Only the 256-channel tiles; a tail only where the
 * pairs' rounds end on a whole row of N tiles (the tail's tiles then follow on in tile order). The batch GEMMs
 * (Winograd's) run as single tiles, no clusters, since v23 (the 512-channel one 2% faster so; f121 -0.3%).
 * minor: an upsample's phase tiles are ordered (M tile, phase, N tile) (since v19: the four phases of an M tile read
 * its input and DupUp residual while they are in L2; f121 -0.5%): the pairs' rounds must end on a whole pair of M
 * tiles, all phases. */
static inline int w22_route_tma_plan(const w22_mm *g, const w22_route_gpu *u, int minor, long *lim, long *tile0) {
    *lim = *tile0 = 0;
    if (g->N % 256 || u->clusters <= 0 || g->batch) return W22_TMA_TILES;
    const int HW = g->H * g->W, np = g->phases ? 4 : g->batch ? g->batch : 1, tn = g->N / 256, ok = !u->on_side,
              cl = u->clusters;
    const long mt = (long)(g->M / HW) * ((HW + W22_WG_BM - 1) / W22_WG_BM), ppp = (mt + 1) / 2 * tn; /* per phase */
    const long pairs = np * ppp, tiles = np * mt * tn;
    const int iters = w22_route_tma_iters(g);
    const double r_tiles = w22_route_rounds(tiles, iters, u->sms, W22_SPLIT_SLOTS, ok, 0);
    const double r_pairs = W22_PAIR_COST * w22_route_rounds(pairs, iters, cl, W22_SPLIT_SLOTS / 2, ok, 0);
    int plan = r_pairs <= r_tiles ? W22_TMA_PAIRS : W22_TMA_TILES;
    const long full = pairs / cl, done = full * cl, p = done / ppp, j = done - p * ppp; /* the pairs' whole rounds */
    const long group = (long)np * tn;
    if (full >= 1 && done < pairs && (minor ? done % group == 0 : j % tn == 0)) {
        const long t0 = minor ? 2 * (done / group) * group : (p * mt + j / tn * 2) * tn;
        const double r_tail = W22_PAIR_COST * full + w22_route_rounds(tiles - t0, iters, u->sms, W22_SPLIT_SLOTS, ok, 1);
        if (r_tail < (plan == W22_TMA_PAIRS ? r_pairs : r_tiles)) plan = W22_TMA_PAIRS_TAIL, *lim = done, *tile0 = t0;
    }
    return plan;
}

/* One launch of the TMA conv: cl 2 runs the first `lim` pairs (0: all), cl 1 the tiles from `tile0` on (the tail
 * the pairs left: one_round lets a single round split). Its pieces per split tile (1: none) and its items. */
static inline int w22_route_tma_split(const w22_mm *g, const w22_route_gpu *u, int bn, int cl, long lim, long tile0,
                                      int one_round) {
    const int HW = g->H * g->W, np = g->phases ? 4 : g->batch ? g->batch : 1;
    const long mt = (long)(g->M / HW) * ((HW + W22_WG_BM - 1) / W22_WG_BM), tpp = (mt + cl - 1) / cl * (g->N / bn);
    const long tiles = lim ? lim : np * tpp - tile0;
    if (u->on_side) return 1;
    return w22_route_split_of(tiles, w22_route_tma_iters(g), cl == 2 ? u->clusters : u->sms, W22_SPLIT_SLOTS / cl,
                              one_round);
}

/* The epilogues of the TMA conv (the kernel's mode bits in conv_sm90_wgmma_tma.cu): */
typedef enum {
    W22_EPI_PAIRS,    /* bf16 pairs from the accumulators, in the tile's tail */
    W22_EPI_VEC,      /* 8 channels per 16-byte access, in the tile's tail (v10) */
    W22_EPI_OVERLAP,  /* packed in the tail and stored during the next tile's first stages, row half 0 through
                       * shared memory (v12; v11's half overlap lost) */
    W22_EPI_TMA_STORE /* the tile through shared memory to TMA stores (v20 batch GEMMs, v21 direct convs) */
} w22_epilogue;

/* Whether a GEMM's epilogue may store eight channels at a time (conv_epilogue.cuh's w22_epilogue_vec8): bias, residual
 * and output rows 16-byte aligned, split_c % 8 == 0. A DupUp residual's vectors start at rrow + (n << r_csh), r_coff
 * applied in the pick: the same alignment conditions. */
static inline int w22_route_epilogue_vec_ok(const w22_mm *g) {
    const long el = g->out_f32 ? 4 : 8; /* elements per 16 bytes */
    int ok = w22_al16(g->out) && g->o_sf % el == 0 && g->o_sh % el == 0 && g->o_sw % el == 0 && g->N % 8 == 0 &&
             g->split_c % 8 == 0 && w22_al16(g->bias) && w22_al16(g->sc_bias);
    if (g->res) ok = ok && w22_al16(g->res) && g->r_sf % 8 == 0 && g->r_sh % 8 == 0 && g->r_sw % 8 == 0;
    return ok;
}

/* Whether every output and residual row offset of g, plus o_add and r_add (a phase's ph_o, ph_r), fits the overlapped
 * epilogue's int (the last frame's last row; the time split's second output frame adds o_sf, a DupUp residual has
 * its own frame map, and the columns come on top, as long). */
static inline int w22_route_defer_offsets_fit(const w22_mm *g, long o_add, long r_add) {
    const long F = g->M / (g->H * (long)g->W), tf = g->split_c ? 2 * F : F, rf = (tf + g->r_toff) >> g->r_tsh;
    const long last_o = tf * g->o_sf + (long)g->H * g->o_sh + (long)g->W * g->o_sw + o_add;
    const long last_r = g->res ? rf * g->r_sf + (long)g->H * g->r_sh + (long)g->W * g->r_sw + r_add : 0;
    return last_o < INT_MAX && last_r < INT_MAX;
}

/* The tail epilogue for the GEMMs q[0..n-1] run as one launch (each phase's own geometry): the overlapped one where
 * every GEMM has bf16 outputs, int offsets and the vector alignment, else the vector one where they align, else
 * pairs. */
static inline w22_epilogue w22_route_tail_epilogue(const w22_mm *q, int n, const int *o_add, const int *r_add) {
    w22_epilogue e = W22_EPI_OVERLAP;
    for (int p = 0; p < n; p++) {
        if (e != W22_EPI_PAIRS && !w22_route_epilogue_vec_ok(&q[p])) e = W22_EPI_PAIRS;
        if (e == W22_EPI_OVERLAP && (q[p].out_f32 || !w22_route_defer_offsets_fit(&q[p], o_add[p], r_add[p])))
            e = W22_EPI_VEC;
    }
    return e;
}

/* The pixels of a direct conv's TMA store box: the largest power of two dividing both W and 128, at least 8 (the
 * 128B swizzle's 1024-byte atom: a box starts on one); 0: none. */
static inline int w22_route_frame_box_px(int W) {
    int p = 128;
    while (p >= 8 && W % p) p /= 2;
    return p >= 8 ? p : 0;
}

/* Whether a direct conv's output takes the TMA store but for a residual: bf16, one frame map (no time split, phases
 * or batch), 16-byte strides, W a multiple of 8; a plain residual goes in as extra K first (w22_route_residual_as_k),
 * since the TMA store adds none. */
static inline int w22_route_tma_store_direct_but_res(const w22_mm *g) {
    if (g->batch || g->phases || g->N % 256 || g->out_f32 || g->split_c || !w22_route_frame_box_px(g->W)) return 0;
    if (g->o_sw % 8 || g->o_sh % 8 || g->o_sf % 8 || g->o_sw < g->N || !w22_al16(g->out)) return 0;
    return 1;
}

/* Whether a plain residual (not DupUp's: same pixel and channel as the output) goes in as the GEMM's extra K, its N
 * channels times the identity in the shortcut's free slot (v21: then the tile may take the TMA store). */
static inline int w22_route_residual_as_k(const w22_mm *g) {
    if (!g->res || g->sc || g->phases || g->batch || g->split_c || g->r_csh || g->r_tsh || g->r_toff || g->r_coff)
        return 0;
    const long F = g->M / ((long)g->H * g->W);
    return !(g->N % 64 || !w22_st16(g->r_sw) || !w22_st16(g->r_sh) || (F > 1 && !w22_st16(g->r_sf)) ||
             !w22_al16(g->res) || g->r_sw < g->N);
}

/* Whether a batch's output takes the TMA store: bf16, nothing added, dense rows of N channels, GEMM p's output p F
 * frames on, 16-byte aligned. */
static inline int w22_route_tma_store_batch(const w22_mm *g) {
    const long F = g->M / ((long)g->H * g->W);
    if (!g->batch || g->N % 256 || g->bias || g->sc_bias || g->res || g->out_f32 || g->split_c) return 0;
    if (g->o_sw != g->N || g->o_sh != (long)g->W * g->o_sw || g->o_sf != (long)g->H * g->o_sh) return 0;
    if (!w22_al16(g->out) || (long)g->batch * F * g->o_sf >= ((long)1 << 40)) return 0;
    for (int p = 0; p < g->batch; p++)
        if (g->ph_o[p] != p * F * g->o_sf) return 0;
    return 1;
}

/* ---- 4. The plain ops (norm.cu, move.cu): memory-bound, 8 channels a thread (one 16-byte access) ----
 * tests/test_census.c asks these for every norm, copy, zero and border a decode of either VAE issues, at every size
 * and rank count, on the recording backend: what no decode reaches is not compiled in. */

/* A bf16 view whose start and strides are whole 16-byte vectors and whose channels fill them. */
static inline int w22_route_vec8(const w22_view *v) {
    return v->c % 8 == 0 && w22_al16(v->ptr) && v->sf % 8 == 0 && v->sh % 8 == 0 && v->sw % 8 == 0;
}

/* A view of one channel whose pixels are adjacent along the row (sw 1: the video's planes) as rows of W channels:
 * the same elements, but 16-byte accesses where W allows (the video delivery's 121 x 3 plane copies ran one element
 * per thread, 12.6 ms of f121 at ~0.1 TB/s). */
static inline w22_view w22_route_fold_row(w22_view v) {
    if (v.c == 1 && v.sw == 1) v.c = v.w, v.w = 1, v.sw = v.c;
    return v;
}

/* A copy (src NULL: a zero) as the kernel runs it: both views folded into rows where both fold (*dst, *src
 * rewritten), then 1 where every view takes 8 channels a thread, 0 where one does not. */
static inline int w22_route_copy(w22_view *dst, w22_view *src) {
    const w22_view fd = w22_route_fold_row(*dst), fs = src ? w22_route_fold_row(*src) : fd;
    if (fd.c != dst->c && (!src || fs.c != src->c)) {
        *dst = fd;
        if (src) *src = fs;
    }
    return w22_route_vec8(dst) && (!src || w22_route_vec8(src));
}

/* The rmsnorm's kernel (norm.cu), by the views and gamma's address: a warp's two pixels in registers for C = 256,
 * 512, 1024 (rows; its grid's y counts F x H rows, at most 65535); lane groups of 16 or 32 for the other C up to 256
 * (the Wan2.1 decoder's 96 and 192; C <= 64, narrow test configs, on 16 with lanes idle); a warp a pixel otherwise
 * (384), 8 channels a lane. NONE: views not of whole 16-byte vectors, which no decode makes (its buffers are
 * cudaMalloc'd and the decoder's open refuses feature channels not a multiple of 8: w22_model_feature_channels_off;
 * tests/test_census.c counts every norm of both VAEs' decodes); the op fails on them. */
typedef enum {
    W22_NORM_ROWS1, W22_NORM_ROWS2, W22_NORM_ROWS4, /* C / 256 */
    W22_NORM_GROUP16, W22_NORM_GROUP32,             /* lanes a pixel */
    W22_NORM_PIXEL8,                                /* a warp a pixel */
    W22_NORM_NONE,
    W22_NORM_KERNELS = W22_NORM_NONE
} w22_norm_kernel;
static inline w22_norm_kernel w22_route_norm(const w22_view *in, const w22_view *out, const void *gamma) {
    if (!w22_route_vec8(in) || !w22_route_vec8(out)) return W22_NORM_NONE;
    const int g16 = w22_al16(gamma), nv = in->c / 256;
    if (g16 && in->c % 256 == 0 && (nv == 1 || nv == 2 || nv == 4) && (long)in->f * in->h < 65536)
        return nv == 1 ? W22_NORM_ROWS1 : nv == 2 ? W22_NORM_ROWS2 : W22_NORM_ROWS4;
    if (g16 && in->c <= 256) return in->c <= 128 ? W22_NORM_GROUP16 : W22_NORM_GROUP32;
    return W22_NORM_PIXEL8;
}

/* The decision for one conv (or GEMM) as the backend made it, returned by w22_backend_cuda_last_route; tests/cuda_ops
 * compares it with what launched (w22_route_ran) and counts the routes its cases covered. */
typedef struct {
    int bn, stages, cl, te; /* a launch's tile, clusters and TMA-store staging (te 4), as its template had them */
    int split;              /* its pieces per split tile (1: none) */
} w22_route_launch;

typedef struct {
    w22_conv_step step;      /* the conv's step (a GEMM outside a conv op: W22_CONV_DIRECT) */
    w22_gemm_kernel kernel;  /* the (last) GEMM's kernel, as decided */
    w22_gemm_kernel ran_kernel; /* ... and as its launch site ran it */
    const char *why;         /* W22_GEMM_SCALAR: why no tensor-core kernel took it */
    int phases4;             /* W22_CONV_PHASES: the four phases as one launch of the TMA conv */
    int dup_fused;           /* W22_CONV_PHASES: the DupUp residual added in the phases' epilogue (the only way) */
    /* kernel W22_GEMM_TMA: the decision (route.h) and the launches as they ran (the launch site's template) */
    int plan;                /* W22_TMA_TILES, _PAIRS, _PAIRS_TAIL */
    w22_epilogue epi;
    int batch;               /* GEMMs in the launch (Winograd's 36), 0: one */
    int want_split;          /* the last launch's pieces per split tile, as decided */
    int launches;            /* 1, or 2 for pairs and a tail */
    w22_route_launch ran[2];
} w22_route;

/* The CUDA backend's query (cuda_backend.cu; tests only, not in backend.h): the last conv's w22_route. */
#ifdef __cplusplus
extern "C" {
#endif
void w22_backend_cuda_last_route(const w22_backend *b, w22_route *out);
#ifdef __cplusplus
}
#endif

#endif
