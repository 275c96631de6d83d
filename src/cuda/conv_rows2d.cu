/* conv_out (the 3x3(x3) conv with N <= 16 output channels: 256 -> 12) and the head's partial-sums conv_out GEMM
 * (conv_psum.cu: N = 36, kt 1, fp32 out) on 2D tiles that serve all nine spatial taps from one shared-memory tile.
 * They run the shapes route.h's w22_route_rows_blocker takes (from 6 rows on; shorter ones go to the mma kernel).
 * docs/PERF.md v14: conv_out 1.95x faster than on the row kernel of one-row tiles (deleted in session 37, no decode
 * reaching it), whose tiles fetched each input pixel from L2 three times per dt.
 *
 * A tile is 16 output rows x 32 columns; per (dt, 32-channel slice) it loads the 18 x 34 input pixels around it
 * once, and every tap (dy, dx) reads its window of that tile by ldmatrix row addresses. Block = 256 threads (8 warps
 * as 4 rows x 2 columns), one block per SM on a persistent grid (tiles blockIdx.x + k gridDim.x, the stage ring
 * running on across tiles). A warp = 4 output rows x 16 columns x 16 NB channels (mma.sync.m16n8k16, m16 along x):
 * per 16-channel k step and dx it loads B for dy = 0..2 and walks the 6 input rows its 4 output rows read, each A
 * fragment feeding every output row that reads it. NB = 1..3 channel blocks (N <= 48): 4 stages at NB 1, 3 at NB 3
 * (66816 B each); 234 registers at NB 3, no spills.
 * Stage (cp.async ring): A [18 x 34 pixels][32 bf16] (pixel (iy, ix) = input (y0 - 1 + iy, x0 - 1 + ix)), B [9 taps]
 * [16 NB rows][32 bf16]. What must hold: rows past the bottom border H or columns past the right border W are
 * zero-filled and feed only masked outputs; B rows n >= N are zeroed once at the start and never loaded; smem rows
 * are 64 bytes with 16-byte chunks XOR-swizzled by bits 1-2 of the row (swz64), so the 8 rows one ldmatrix phase
 * reads fill 8 distinct slots (every A window and B read conflict-free). K order per tile: 32-channel slices outer,
 * dt inner, so a place's frames are read within 3 consecutive stages, together in L2.
 * Requirements: w22_route_rows_blocker's (ks 3, kt 1 or 3, centred pads, N <= 48 and even, cin % 32 == 0, one [N][K]
 * weight block, the mma kernel's alignment and int-offset checks) and w22_rows2d_takes' (N <= 48, H >= 6, the
 * tile's pixel offsets fit an int). Epilogue: the shared one (conv_epilogue.cuh): bias, residual, time split, bf16 or
 * fp32. */
#include "cuda_internal.h"
#include "conv_epilogue.cuh"
#include "mma_sync.cuh"
#include <limits.h>

#define R2_TH W22_R2_TH                                  /* output rows per tile */
#define R2_TW W22_R2_TW                                  /* output columns per tile */
#define R2_WR 4                                   /* output rows per warp (warps: 4 rows x 2 columns of 16) */
#define R2_AH (R2_TH + 2)                         /* input rows per tile: one above, one below */
#define R2_AW (R2_TW + 2)                         /* input columns per tile */
#define R2_APIX (R2_AH * R2_AW)                   /* 612 input pixels */
#define R2_BK 32                                  /* input channels per stage */
#define R2_ROW (R2_BK * 2)                        /* bytes per smem row */
#define R2_THREADS 256
#define R2_A_BYTES (R2_APIX * R2_ROW)             /* 39168 */
#define R2_AJ ((R2_APIX + 63) / 64)               /* A pixels per loader thread: 10 (4 threads per pixel) */
#define R2_MIN_H W22_R2_MIN_H /* below: 18 input rows per 16-row tile cost more than the row kernel's 3 per output row */
#define R2_MAX_N W22_R2_MAX_N                               /* NB = 3 */

/* NB 16-channel blocks per warp: 1 for N <= 16, 3 for N <= 48 (the psum conv_out's 36). The B stage grows with NB;
 * at NB = 3 four stages (267264 B) exceed the 227 KB a block may have, so three: two stages in flight while one is
 * consumed, and each stage's 3x MMAs give the loads more time to land. ST stages: the Hopper path's 4 (NB 1) and 3
 * (NB 3); the portable path's NB 1 on 2 (96768 B within W22_PORTABLE_SMEM: one stage loads while one is consumed;
 * NB 3's single stage of 65 KB would leave none in flight, so N > 16 goes to the mma kernel there, route.h). */
template <int NB, int ST> struct r2_cfg {
    static constexpr int BN = 16 * NB;                               /* output channels, padded */
    static constexpr int STAGES = ST;
    static constexpr int B_BYTES = 9 * BN * R2_ROW;                  /* 9216 NB */
    static constexpr int STAGE_BYTES = R2_A_BYTES + B_BYTES;         /* 48384; 66816 at NB = 3 */
    static constexpr int SMEM = STAGES * STAGE_BYTES;                /* 193536; 200448 at NB = 3 */
    static constexpr int BJ = (9 * BN * 4 + R2_THREADS - 1) / R2_THREADS; /* B chunks per loader thread: 3; 7 */
    static_assert(R2_A_BYTES % 128 == 0 && STAGE_BYTES % 128 == 0, "the swizzle's slots assume 128-byte tiles");
    static_assert(SMEM <= 227 * 1024, "the ring exceeds the sm_90 shared-memory limit");
    static_assert(STAGES >= 2, "a ring of one stage has no load in flight");
};
typedef r2_cfg<1, 4> r2_hopper1;
typedef r2_cfg<3, 3> r2_hopper3;
typedef r2_cfg<1, 2> r2_portable1;
static_assert(r2_portable1::SMEM <= W22_PORTABLE_SMEM, "the portable 2D tiles exceed its shared memory (99 KB)");

static_assert(R2_TH == 4 * R2_WR && R2_TW == 2 * 16 && R2_THREADS == 8 * 32, "8 warps: 4 x 2 of 4 rows x 16 columns");

/* Byte offset of 16-byte chunk `chunk` (0..3) of 64-byte smem row `row`. */
static __device__ __forceinline__ uint32_t swz64(int row, int chunk) {
    return (uint32_t)(row * R2_ROW + ((chunk ^ ((row >> 1) & 3)) << 4));
}

/* Tile i: the frame fastest (the F tiles of one place share input frames in L2), then columns, then rows. */
static __device__ __forceinline__ void r2_tile(int i, int F, int xtiles, int *t, int *y0, int *x0) {
    const int s = i / F, ty = s / xtiles;
    *t = i - s * F;
    *y0 = ty * R2_TH;
    *x0 = (s - ty * xtiles) * R2_TW;
}

/* A warp's outputs of tile `tile`: rows y0 + 4 wr + o, columns x0 + 16 wc + (lane / 4) (+ 8), channel pairs
 * 16 jb + 2 (lane % 4) (+ 8) (the m16n8 accumulator layout); outside H x W or past N masked. */
template <int NB>
static __device__ __forceinline__ void r2_store(const w22_mm &g, const float (&acc)[R2_WR][NB][2][4], int tile,
                                                int xtiles, int wr, int wc, int lane) {
    int t, y0, x0;
    r2_tile(tile, g.F, xtiles, &t, &y0, &x0);
    const int HW = g.H * g.W, gq = lane >> 2, tq = lane & 3;
#pragma unroll
    for (int o = 0; o < R2_WR; o++) {
        const int y = y0 + wr * R2_WR + o;
        if (y >= g.H) continue;
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int x = x0 + wc * 16 + gq + 8 * h;
            if (x >= g.W) continue;
            long orow, rrow;
            w22_epilogue_row(g, (t * g.H + y) * g.W + x, HW, &orow, &rrow);
#pragma unroll
            for (int jb = 0; jb < NB; jb++)
#pragma unroll
                for (int j = 0; j < 2; j++) {
                    const int n = jb * 16 + j * 8 + tq * 2;
                    if (n < g.N) w22_epilogue_pair(g, orow, rrow, n, acc[o][jb][j][2 * h], acc[o][jb][j][2 * h + 1]);
                }
        }
    }
}

/* A warp's accumulators to zero (a tile's start). */
template <int NB> static __device__ __forceinline__ void r2_zero(float (&acc)[R2_WR][NB][2][4]) {
#pragma unroll
    for (int o = 0; o < R2_WR; o++)
#pragma unroll
        for (int jb = 0; jb < NB; jb++)
#pragma unroll
            for (int j = 0; j < 2; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) acc[o][jb][j][e] = 0.f;
}

template <int NB, int ST>
__global__ void __launch_bounds__(R2_THREADS, ST == 2 ? 2 : 1)
    w22_conv_rows2d_kernel(const w22_mm g, int xtiles, int tiles) {
    typedef r2_cfg<NB, ST> C;
    constexpr int BN = C::BN, STAGES = C::STAGES, STAGE_BYTES = C::STAGE_BYTES, BJ = C::BJ;
    extern __shared__ __align__(128) unsigned char smem[];
    const uint32_t smem0 = (uint32_t)__cvta_generic_to_shared(smem);
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int nslice = g.cin / R2_BK, per_tile = g.kt * nslice; /* stages per tile */
    const int total = (tiles - (int)blockIdx.x + (int)gridDim.x - 1) / (int)gridDim.x * per_tile;

    /* B rows n >= N of every stage: zero, written here once and never loaded (the first read is after a barrier) */
    for (int s = tid; s < STAGES * 9 * BN * 4; s += R2_THREADS) {
        const int q = s >> 2, st = q / (9 * BN), row = q - st * 9 * BN; /* row = tap * BN + n */
        if (row % BN >= g.N)
            *(uint4 *)(smem + st * STAGE_BYTES + R2_A_BYTES + swz64(row, s & 3)) = make_uint4(0, 0, 0, 0);
    }

    /* Loader: chunk ca (8 channels) of A pixels ia + 64 j; a_off[j] is that pixel's offset from the tile's corner
     * (y0 - 1, x0 - 1), the same in every tile. Its smem row's swizzle is ia's: (ia + 64 j) >> 1 & 3 == ia >> 1 & 3. */
    const int ca = tid & 3, ia = tid >> 2;
    const uint32_t a_dst = swz64(ia, ca);
    int a_off[R2_AJ];
#pragma unroll
    for (int j = 0; j < R2_AJ; j++) {
        const int i = ia + 64 * j, iy = i / R2_AW, ix = i - iy * R2_AW;
        a_off[j] = (int)(iy * g.a_sh + ix * g.a_sw); /* w22_rows2d_takes: fits (pixels past 612 are never loaded) */
    }
    /* B: chunk s & 3 of smem row s >> 2 = tap * BN + n for s = tid + 256 q; only rows n < N are loaded. The offset
     * within the weight fits an int (mma_blocker's weight check covers n < N and K). */
    int b_src[BJ];
    uint32_t b_dst[BJ];
    int b_ok = 0;
#pragma unroll
    for (int q = 0; q < BJ; q++) {
        const int s = tid + R2_THREADS * q, row = s >> 2, tap = row / BN, n = row - tap * BN, c = s & 3;
        const bool ok = s < 9 * BN * 4 && n < g.N;
        b_ok |= ok << q;
        b_src[q] = ok ? (int)((long)n * g.b_sw + (long)tap * g.cin + c * 8) : 0;
        b_dst[q] = R2_A_BYTES + swz64(row, c);
    }

    /* The load cursor: tile, 32-channel slice, dt of the next stage, by counting; per tile its frame, its corner's
     * offset and which of this thread's pixels lie inside the bordered input (else zero-filled). */
    int ld_tile = blockIdx.x, ld_slice = 0, ld_dt = 0, ld_t = 0, ld_mask = 0;
    long ld_corner = 0;
    auto ld_setup = [&]() {
        int y0, x0;
        r2_tile(ld_tile, g.F, xtiles, &ld_t, &y0, &x0);
        ld_corner = (long)(y0 - 1) * g.a_sh + (long)(x0 - 1) * g.a_sw + ca * 8;
        ld_mask = 0;
#pragma unroll
        for (int j = 0; j < R2_AJ; j++) {
            const int i = ia + 64 * j, iy = i / R2_AW, ix = i - iy * R2_AW;
            /* rows -1 .. H and columns -1 .. W are the readable border */
            if (i < R2_APIX && y0 - 1 + iy <= g.H && x0 - 1 + ix <= g.W) ld_mask |= 1 << j;
        }
    };
    ld_setup();
    auto load_stage = [&](int stage) {
        const uint32_t sa = smem0 + stage * STAGE_BYTES;
        const bf16 *fa = w22_gemm_frame(g, ld_t + ld_dt) + ld_corner + ld_slice * R2_BK;
#pragma unroll
        for (int j = 0; j < R2_AJ; j++) {
            if (j < R2_AJ - 1 || ia + 64 * j < R2_APIX) { /* the last round: pixels below 612 only */
                const bool ok = (ld_mask >> j) & 1;
                cp_async16(sa + a_dst + j * 64 * R2_ROW, ok ? fa + a_off[j] : g.a, ok);
            }
        }
        /* K = ((dt * 3 + dy) * 3 + dx) * cin + c */
        const bf16 *fb = g.b + (long)ld_dt * 9 * g.cin + ld_slice * R2_BK;
#pragma unroll
        for (int q = 0; q < BJ; q++)
            if ((b_ok >> q) & 1) cp_async16(sa + b_dst[q], fb + b_src[q], true);
        if (++ld_dt == g.kt) {
            ld_dt = 0;
            if (++ld_slice == nslice) {
                ld_slice = 0;
                ld_tile += gridDim.x;
                if (ld_tile < tiles) ld_setup();
            }
        }
    };

    /* ldmatrix lanes: A input row 4 wr + r, column 16 wc + dx + (lane & 15), chunk half lane >> 4 (a_at[r][dx]);
     * B row tap * BN + 16 jb + (lane & 7) + 8 (lane >> 4), chunk half (lane >> 3) & 1, whose swizzle does not depend
     * on the tap or jb (multiples of 8 rows). The k step kk (chunks 2 kk, 2 kk + 1) flips bit 5: ^ (kk << 5). */
    const int wr = warp >> 1, wc = warp & 1;
    uint32_t a_at[R2_WR + 2][3];
#pragma unroll
    for (int r = 0; r < R2_WR + 2; r++)
#pragma unroll
        for (int dx = 0; dx < 3; dx++)
            a_at[r][dx] = swz64((wr * R2_WR + r) * R2_AW + wc * 16 + dx + (lane & 15), lane >> 4);
    const uint32_t b_at = R2_A_BYTES + swz64((lane & 7) + ((lane >> 4) << 3), (lane >> 3) & 1);

    float acc[R2_WR][NB][2][4];
    r2_zero<NB>(acc);

#pragma unroll
    for (int s = 0; s < STAGES - 1; s++) {
        if (s < total) load_stage(s);
        cp_async_commit();
    }
    int c_tile = blockIdx.x, c_stage = 0; /* the compute side's tile and stage within it */
    for (int it = 0; it < total; it++) {
        cp_async_wait<STAGES - 2>();
        __syncthreads(); /* stage it is in smem for all threads; stage it - 1 is free for the next load */
        {
            const int nx = it + STAGES - 1;
            if (nx < total) load_stage(nx % STAGES);
            cp_async_commit();
        }
        const uint32_t sa = smem0 + (it % STAGES) * STAGE_BYTES;
#pragma unroll
        for (int kk = 0; kk < R2_BK / 16; kk++) {
#pragma unroll
            for (int dx = 0; dx < 3; dx++) {
                uint32_t b[3][NB][4];
#pragma unroll
                for (int dy = 0; dy < 3; dy++)
#pragma unroll
                    for (int jb = 0; jb < NB; jb++)
                        ldmatrix_x4(b[dy][jb], sa + ((b_at + ((dy * 3 + dx) * BN + jb * 16) * R2_ROW) ^ (kk << 5)));
#pragma unroll
                for (int r = 0; r < R2_WR + 2; r++) { /* input row r feeds output rows r - dy */
                    uint32_t a[4];
                    ldmatrix_x4(a, sa + (a_at[r][dx] ^ (kk << 5)));
#pragma unroll
                    for (int dy = 0; dy < 3; dy++) {
                        const int o = r - dy;
                        if (o < 0 || o >= R2_WR) continue;
#pragma unroll
                        for (int jb = 0; jb < NB; jb++) {
                            mma_bf16(acc[o][jb][0], a, b[dy][jb][0], b[dy][jb][1]);
                            mma_bf16(acc[o][jb][1], a, b[dy][jb][2], b[dy][jb][3]);
                        }
                    }
                }
            }
        }
        if (++c_stage == per_tile) { /* the tile's last stage: store it while the next tile's loads are in flight */
            r2_store<NB>(g, acc, c_tile, xtiles, wr, wc, lane);
            __syncwarp(); /* the masked stores diverged: converged again before the next .aligned ldmatrix / mma */
            r2_zero<NB>(acc);
            c_stage = 0;
            c_tile += gridDim.x;
        }
    }
    cp_async_wait<0>();
}

w22_status w22_cuda_rows2d_init(w22_cuda *c) {
    const int need = c->hopper ? (r2_hopper1::SMEM > r2_hopper3::SMEM ? r2_hopper1::SMEM : r2_hopper3::SMEM)
                               : r2_portable1::SMEM;
    if (c->smem_optin < need)
        return w22_fail(W22_ERR_UNSUPPORTED, "2D row conv: the GPU allows %d bytes of shared memory per block; the "
                        "kernel needs %d", c->smem_optin, need);
    if (c->hopper) {
        CU_TRY(cudaFuncSetAttribute(w22_conv_rows2d_kernel<1, 4>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    r2_hopper1::SMEM));
        CU_TRY(cudaFuncSetAttribute(w22_conv_rows2d_kernel<3, 3>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    r2_hopper3::SMEM));
    } else {
        CU_TRY(cudaFuncSetAttribute(w22_conv_rows2d_kernel<1, 2>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    r2_portable1::SMEM));
    }
    /* the persistent grid: one block per SM on the Hopper path (its 4-stage ring); the portable path's 2-stage blocks
     * as many per SM as fit, so that an SM that holds two (sm_80, sm_90, sm_100: 228 KB) keeps 4 stages in flight as
     * the Hopper ring does, and one that holds one (sm_86, sm_89, sm_120: 100 KB) runs one */
    c->rows2d_blocks = 1;
    if (!c->hopper) {
        int nb = 0;
        CU_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&nb, w22_conv_rows2d_kernel<1, 2>, R2_THREADS,
                                                             r2_portable1::SMEM));
        c->rows2d_blocks = nb < 1 ? 1 : nb > 2 ? 2 : nb;
    }
    return W22_OK;
}

w22_status w22_cuda_gemm_rows2d(w22_cuda *c, const w22_mm *g, const char *what) {
    const int xtiles = (g->W + R2_TW - 1) / R2_TW;
    const int tiles = g->F * ((g->H + R2_TH - 1) / R2_TH) * xtiles;
    const int runners = c->sms * (c->rows2d_blocks > 0 ? c->rows2d_blocks : 1);
    const int grid = tiles < runners ? tiles : runners;
    c->route.ran_kernel = W22_GEMM_ROWS2D;
    if (g->N <= 16 && !c->hopper) {
        c->last_path = "rows2d 16x32x16 (2 stages)";
        w22_conv_rows2d_kernel<1, 2><<<grid, R2_THREADS, r2_portable1::SMEM, c->stream>>>(*g, xtiles, tiles);
    } else if (g->N <= 16) {
        c->last_path = "rows2d 16x32x16";
        w22_conv_rows2d_kernel<1, 4><<<grid, R2_THREADS, r2_hopper1::SMEM, c->stream>>>(*g, xtiles, tiles);
    } else if (c->hopper) {
        c->last_path = "rows2d 16x32x48";
        w22_conv_rows2d_kernel<3, 3><<<grid, R2_THREADS, r2_hopper3::SMEM, c->stream>>>(*g, xtiles, tiles);
    } else {
        return w22_fail(W22_ERR_INTERNAL, "%s: the 2D tiles of N %d on the portable path (route.h sends N > 16 to "
                        "the mma kernel)", what, g->N);
    }
    CU_LAUNCHED(c, what);
    return W22_OK;
}
