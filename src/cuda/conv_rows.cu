/* The 3x3(x3) conv with few output channels (conv_out: 256 -> 12) as row tiles that reuse their input across the
 * three horizontal taps; and the choice between this kernel and the 2D tiles (conv_rows2d.cu), which run conv_out
 * where w22_rows2d_takes (H >= 6), this kernel the shorter convs (a rank's edge rows). v7 (docs/PERF.md) made this
 * kernel conv_out's (2.46x over the mma kernel), v14 the 2D tiles. 16 < N <= 48 (the partial-sums conv_out GEMM's
 * 36, conv_psum.cu) only the 2D tiles take (H >= 6); else the mma kernel.
 *
 * Why: conv_out is 4.1% of the decode's GPU time (the v5 audit: 138 of 3411 ms at f121) at ~41 TFLOP/s. With
 * N = 12 its MMAs are nothing; the cost is the A gather: the generic kernels read 27 taps x 64-channel slices of
 * 128 pixels, 1.7 MB per tile for 128 x 12 outputs, from L2 (~6 TB/s). Here a tile is up to 128 consecutive
 * pixels of one output row; per (dt, dy) and 64-channel slice it loads the 130 input pixels x0 - 1 .. x0 + 128 of
 * that input row once and runs the three dx taps on rows shifted by dx of the same shared-memory tile: a third of
 * the A traffic, and B (3 taps x 16 rows) rides along.
 * Block = 128 threads (4 warps), a warp = 32 output pixels x 16 channels (2 x 2 mma.sync.m16n8k16 tiles);
 * STAGES-deep cp.async ring as the mma.sync kernel (conv_sm90_mma.cu), whose 128-byte swizzled rows and ldmatrix
 * addressing it shares: chunk c of smem row r at r * 128 + ((c ^ (r & 7)) << 4).
 * Stage: A [130 rows][64 bf16] (input columns x0 - 1 + i; columns past the right border W are zero-filled and feed
 * only masked outputs), B [3 dx][16 rows][64 bf16] (rows n >= N zero). K order: (dt, dy) outer, channel slices
 * inner. Requirements (route.h's w22_route_rows_blocker): ks 3, kt 1 or 3, centred pads, no upsample, no shortcut,
 * N <= 16 and even, cin % 64 == 0, weights one [N][K] block; the mma kernel's alignment and int-offset checks have
 * passed.
 * Epilogue: the shared one (conv_epilogue.cuh): bias, residual, time split, bf16 or fp32 pair stores. */
#include "cuda_internal.h"
#include "conv_epilogue.cuh"
#include "mma_sync.cuh"
#include <stdlib.h>
#include <string.h>

#define CR_BM W22_ROWS_BM                 /* output pixels per tile (one row segment) */
#define CR_AROWS (CR_BM + 2)      /* input pixels per tile: one each side for dx = 0 and dx = 2 */
#define CR_BN W22_ROWS_BN                  /* output channels, padded */
#define CR_ROW ROW_BYTES           /* bytes per smem row: 64 bf16 (mma_sync.cuh) */
#define CR_THREADS 128
#define CR_STAGES 4
#define CR_A_BYTES (CR_AROWS * CR_ROW)         /* 16640 */
#define CR_B_BYTES (3 * CR_BN * CR_ROW)        /* 6144 */
#define CR_STAGE_BYTES (CR_A_BYTES + CR_B_BYTES)
#define CR_SMEM (CR_STAGES * CR_STAGE_BYTES)   /* 91136: two blocks per SM */
static_assert(CR_SMEM <= W22_PORTABLE_SMEM, "the row kernel exceeds the portable path's shared memory (99 KB)");

__global__ void __launch_bounds__(CR_THREADS, 2) w22_conv_rows_kernel(const w22_mm g, int xtiles, int iters) {
    extern __shared__ __align__(128) unsigned char smem[];
    const uint32_t smem0 = (uint32_t)__cvta_generic_to_shared(smem);
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int cc = tid & 7, r0 = tid >> 3; /* loader: chunk cc of rows r0 + 16 j */
    /* tile = (t, y, x segment): x segments fastest, so neighbouring blocks share input rows in L2 */
    const int xt = blockIdx.x % xtiles, ty = blockIdx.x / xtiles;
    const int t = ty / g.H, y = ty - t * g.H, x0 = xt * CR_BM;

    /* The load cursor: (dt, dy) and the channel slice c0 of the next stage, by counting. */
    int ld_it = 0, ld_c0 = 0, ld_dt = 0, ld_dy = 0;
    auto load_stage = [&](int stage) {
        const uint32_t sa = smem0 + stage * CR_STAGE_BYTES, sb = sa + CR_A_BYTES;
        const bf16 *row = w22_gemm_frame(g, t + ld_dt) + (long)(y + ld_dy - g.pad_y) * g.a_sh + ld_c0 + cc * 8;
#pragma unroll
        for (int j = 0; j < (CR_AROWS + 15) / 16; j++) {
            const int i = r0 + 16 * j, ix = x0 - g.pad_x + i; /* ix >= -1: the readable left border */
            if (i < CR_AROWS) {
                const bool ok = ix <= g.W; /* column W is the right border; past it only masked outputs read */
                cp_async16(sa + swz(i, cc), ok ? row + (long)ix * g.a_sw : g.a, ok);
            }
        }
        const int n = r0; /* B: rows dx * 16 + n, n = r0 (16 rows), one per dx */
#pragma unroll
        for (int dx = 0; dx < 3; dx++) {
            const bool ok = n < g.N;
            const long k = (long)((ld_dt * 3 + ld_dy) * 3 + dx) * g.cin + ld_c0 + cc * 8;
            cp_async16(sb + swz(dx * CR_BN + n, cc), ok ? g.b + n * g.b_sw + k : g.b, ok);
        }
        ld_c0 += 64;
        if (ld_c0 == g.cin) {
            ld_c0 = 0;
            if (++ld_dy == 3) ld_dy = 0, ld_dt++;
        }
        ld_it++;
    };

    float acc[2][2][4];
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int j = 0; j < 2; j++)
#pragma unroll
            for (int k = 0; k < 4; k++) acc[i][j][k] = 0.f;

#pragma unroll
    for (int s = 0; s < CR_STAGES - 1; s++) {
        if (s < iters) load_stage(s);
        cp_async_commit();
    }
    /* ldmatrix lanes: A rows warp * 32 + i * 16 + (lane & 15) (+ dx), chunk half lane >> 4; B rows
     * dx * 16 + (lane & 7) + 8 (lane >> 4), chunk half (lane >> 3) & 1 (its row & 7 == lane & 7). */
    const int a_row = warp * 32 + (lane & 15), a_half = lane >> 4;
    const int b_row = (lane & 7) + ((lane >> 4) << 3), b_half = (lane >> 3) & 1, l7 = lane & 7;

    for (int it = 0; it < iters; it++) {
        cp_async_wait<CR_STAGES - 2>();
        __syncthreads(); /* stage it is in smem for all threads; stage it - 1 is free for the next load */
        {
            const int nx = it + CR_STAGES - 1;
            if (nx < iters) load_stage(nx % CR_STAGES);
            cp_async_commit();
        }
        const uint32_t sa = smem0 + (it % CR_STAGES) * CR_STAGE_BYTES, sb = sa + CR_A_BYTES;
#pragma unroll
        for (int dx = 0; dx < 3; dx++) {
#pragma unroll
            for (int kk = 0; kk < 4; kk++) {
                uint32_t af[2][4], r[4];
#pragma unroll
                for (int i = 0; i < 2; i++) {
                    const int ar = a_row + i * 16 + dx; /* output row r reads input row r + dx */
                    ldmatrix_x4(af[i], sa + ar * CR_ROW + (((kk * 2 + a_half) ^ (ar & 7)) << 4));
                }
                ldmatrix_x4(r, sb + (dx * CR_BN + b_row) * CR_ROW + (((kk * 2 + b_half) ^ l7) << 4));
#pragma unroll
                for (int i = 0; i < 2; i++) {
                    mma_bf16(acc[i][0], af[i], r[0], r[1]);
                    mma_bf16(acc[i][1], af[i], r[2], r[3]);
                }
            }
        }
    }
    cp_async_wait<0>();

    /* Epilogue. m16n8 accumulators: rows lane / 4 (+ 8), columns 2 (lane % 4) + {0, 1}. */
    const int HW = g.H * g.W, gq = lane >> 2, tq = lane & 3;
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int x = x0 + warp * 32 + i * 16 + gq + 8 * h;
            if (x >= g.W) continue;
            long orow, rrow;
            w22_epilogue_row(g, (t * g.H + y) * g.W + x, HW, &orow, &rrow);
#pragma unroll
            for (int j = 0; j < 2; j++) {
                const int n = j * 8 + tq * 2;
                if (n < g.N) w22_epilogue_pair(g, orow, rrow, n, acc[i][j][2 * h], acc[i][j][2 * h + 1]);
            }
        }
}

/* The 2D tiles (conv_rows2d.cu) where they take the GEMM, else the row tiles: the row kernel for all (v7's) and the
 * mma.sync kernel for conv_out measured slower (docs/PERF.md v7, v14). */

w22_status w22_cuda_rows_init(w22_cuda *c) {
    if (c->smem_optin < CR_SMEM)
        return w22_fail(W22_ERR_UNSUPPORTED, "row conv: the GPU allows %d bytes of shared memory per block; the "
                        "kernel needs %d", c->smem_optin, CR_SMEM);
    CU_TRY(cudaFuncSetAttribute(w22_conv_rows_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, CR_SMEM));
    W22_TRY(w22_cuda_rows2d_init(c));
    return W22_OK;
}

w22_status w22_cuda_gemm_rows(w22_cuda *c, const w22_mm *g, const char *what) {
    if (w22_route_rows2d_takes(g, c->hopper)) return w22_cuda_gemm_rows2d(c, g, what); /* route.h */
    const int xtiles = (g->W + CR_BM - 1) / CR_BM;
    const long tiles = (long)g->F * g->H * xtiles;
    const int iters = g->kt * 3 * (g->cin / 64);
    c->last_path = "rows 128x16";
    c->route.ran_kernel = W22_GEMM_ROWS;
    w22_conv_rows_kernel<<<(unsigned)tiles, CR_THREADS, CR_SMEM, c->stream>>>(*g, xtiles, iters);
    CU_LAUNCHED(c, what);
    return W22_OK;
}
