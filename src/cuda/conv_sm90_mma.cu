/* The conv (and every other matrix product of the backend) as an implicit GEMM on the tensor cores, with the
 * warp-level mma.sync.m16n8k16 bf16 instructions (fp32 accumulators), ldmatrix fragment loads, and cp.async
 * 16-byte copies into a multi-stage shared-memory ring: portable Ampere-style instructions, built for every listed
 * GPU (sm_80 .. sm_120). On the Hopper path the GEMMs the wgmma kernel takes (conv_sm90_wgmma.cu: the heavy convs)
 * go there and this one keeps the rest; on the portable path (route.h, issue 45) it runs them all but conv_out's,
 * on its tiles of at most W22_PORTABLE_SMEM, and Winograd's 36 component GEMMs as one launch (w22_mm.batch: grid.y
 * the GEMM; fp16 operands, w22_mm.f16, on the 128 x 128 tile: mma.sync's f16 form).
 *
 * GEMM: M = output pixels (t, y, x), N = output channels, K = taps (dt, dy, dx) x cin, then the optional 1x1
 * shortcut's sc_cin as extra K iterations over a second A source (exact fp32 accumulation in the same registers).
 * A is read straight from the channels-last input through the tap offsets (no im2col buffer). K runs packed: step
 * it covers K indices 64 it .. 64 it + 63 of taps x cin, so with cin % 64 != 0 a step spans two taps (cin 96: three
 * steps for two taps, where a step per tap's 64 channels ran 25% zeros) and only the last step has a zero tail. Each
 * loader thread's 16-byte chunk (8 channels: cin % 8 == 0 is required, so a chunk never straddles two taps) keeps its
 * own tap cursor. The border rows/cols of the input are read, never bounds-checked (backend.h).
 * Epilogue straight from registers: + bias (+ shortcut bias), time-split scatter, + residual, bf16 (or fp32). */
#include "cuda_internal.h"
#include "conv_epilogue.cuh"
#include "conv_tiles.h"
#include "mma_sync.cuh"
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#define BK W22_CONV_BK

/* F16: A and B fp16 and the output fp16 (w22_mm.f16: a batch's, no residual; instantiated for the tiles a batch of
 * them gets, mma_launch), else bf16. The operands' type changes only the MMA instruction and the epilogue's rounding:
 * the loads copy 16-byte chunks of either. */
template <int BM, int BN, int WM, int WN, int STAGES, int MINB, bool F16>
__global__ void __launch_bounds__(WM *WN * 32, MINB)
    w22_conv_mma_kernel(const w22_mm g, int main_iters, int iters, int tiles_n) {
    constexpr int THREADS = WM * WN * 32;
    constexpr int TM = BM / WM, TN = BN / WN, MT = TM / 16, NT = TN / 8;
    constexpr int RSTEP = THREADS / 8; /* rows between a thread's successive loads (8 chunks per row) */
    constexpr int A_CH = BM / RSTEP, B_CH = BN / RSTEP;
    constexpr uint32_t STAGE_BYTES = (BM + BN) * ROW_BYTES;
    static_assert(BM % RSTEP == 0 && BN % RSTEP == 0, "tile rows must split evenly over the loader threads");
    static_assert(TM % 16 == 0 && TN % 16 == 0, "warp tile must be a multiple of 16 x 16");
    static_assert(RSTEP % 8 == 0, "the swizzle assumes a thread's rows share row & 7");

    extern __shared__ __align__(128) unsigned char smem[];
    const uint32_t smem0 = (uint32_t)__cvta_generic_to_shared(smem);
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int wm = warp / WN, wn = warp % WN;
    const int tile_n = blockIdx.x % tiles_n, tile_m = blockIdx.x / tiles_n;
    const int m0 = tile_m * BM, n0 = tile_n * BN;
    const int cc = tid & 7, r0 = tid >> 3;
    const int HW = g.H * g.W;
    const int ash = (int)g.a_sh, asw = (int)g.a_sw;
    /* A batch (route.h's w22_route_mma_batch_blocker): GEMM blockIdx.y reads A frames from blockIdx.y a_frames on
     * (no history: its frame index carries it), B rows from blockIdx.y N on (in b_off: an int there) and writes
     * blockIdx.y ph_o[1] further (the epilogue); 0 without a batch. No register lives through the loop for it. */
    const int bat = blockIdx.y;

    /* Loader state: per A row its pixel offset (y, x halved in upsample mode) and parity/valid bits; per B row
     * its row offset. Host guarantees every offset fits in int. */
    int a_off[A_CH], a_bits[A_CH], s_off[A_CH], b_off[B_CH];
#pragma unroll
    for (int j = 0; j < A_CH; j++) {
        int m = m0 + r0 + j * RSTEP;
        a_off[j] = 0;
        a_bits[j] = 0;
        s_off[j] = 0;
        if (m < g.M) {
            int t = m / HW, rem = m - t * HW, y = rem / g.W, x = rem - y * g.W;
            int yy = g.upsample ? (y >> 1) : y, xx = g.upsample ? (x >> 1) : x;
            a_off[j] = yy * ash + xx * asw; /* within its frame: the frame (t + dt) comes per tap */
            a_bits[j] = 4 | (g.upsample ? ((y & 1) | ((x & 1) << 1)) : 0) | ((t + bat * (int)g.a_frames) << 3);
            s_off[j] = t * (int)g.sc_sf + y * (int)g.sc_sh + x * (int)g.sc_sw;
        }
    }
#pragma unroll
    for (int j = 0; j < B_CH; j++) {
        int n = n0 + r0 + j * RSTEP;
        b_off[j] = n < g.N ? (int)(n / g.b_w) * (int)g.b_sh + (int)(n % g.b_w + bat * g.N) * (int)g.b_sw : -1;
    }

    /* This thread's load cursor (its chunk cc of each row): stages are loaded strictly in K order, so the channel
     * ld_ch of the next load and its tap (ld_dt, ld_dy, ld_dx) advance by counting, without divisions; past the
     * last tap (ld_dt == kt) the chunk is the zero tail. */
    int ld_ch = cc * 8, ld_dt = 0, ld_dy = 0, ld_dx = 0;
    auto next_tap = [&]() {
        if (++ld_dx == g.ks) {
            ld_dx = 0;
            if (++ld_dy == g.ks) ld_dy = 0, ld_dt++;
        }
    };
    while (ld_ch >= g.cin && ld_dt < g.kt) ld_ch -= g.cin, next_tap(); /* cin < 64: the chunk's first tap */

    /* Loads K step ld_it into its stage of the ring. The steps are loaded strictly in order (0, 1, .. from the
     * prologue on, each once), so the step index is the caller's, no counter of its own (a register less in the loop). */
    auto load_stage = [&](int ld_it) {
        const uint32_t sa = smem0 + (ld_it % STAGES) * STAGE_BYTES, sb = sa + BM * ROW_BYTES;
        if (ld_it < main_iters) {
            const bool chok = ld_dt < g.kt;
            const int base = ld_ch;
            const int tap_k = ((ld_dt * g.ks + ld_dy) * g.ks + ld_dx) * g.cin;
#pragma unroll
            for (int j = 0; j < A_CH; j++) {
                const int bits = a_bits[j];
                int oy = ld_dy - g.pad_y, ox = ld_dx - g.pad_x;
                if (g.upsample) {
                    oy = ((bits & 1) + oy) >> 1; /* arithmetic shift: floor, reaches row -1 */
                    ox = (((bits >> 1) & 1) + ox) >> 1;
                }
                const bool ok = chok && (bits & 4);
                const bf16 *src = ok ? w22_gemm_frame(g, (bits >> 3) + ld_dt) + (a_off[j] + base + oy * ash + ox * asw)
                                     : g.a;
                cp_async16(sa + swz(r0 + j * RSTEP, cc), src, ok);
            }
            const int kof = tap_k + ld_ch;
#pragma unroll
            for (int j = 0; j < B_CH; j++) {
                const bool ok = chok && b_off[j] >= 0;
                const bf16 *src = ok ? g.b + (b_off[j] + kof) : g.b;
                cp_async16(sb + swz(r0 + j * RSTEP, cc), src, ok);
            }
            ld_ch += BK; /* the next step's channel: on in this tap, or into the next (several, with cin < 64) */
            while (ld_ch >= g.cin && ld_dt < g.kt) ld_ch -= g.cin, next_tap();
        } else {
            const int ch = (ld_it - main_iters) * BK + cc * 8; /* the shortcut's channels, from 0 */
            const bool chok = ch < g.sc_cin;
#pragma unroll
            for (int j = 0; j < A_CH; j++) {
                const bool ok = chok && (a_bits[j] & 4);
                const bf16 *src = ok ? g.sc + (s_off[j] + ch) : g.sc;
                cp_async16(sa + swz(r0 + j * RSTEP, cc), src, ok);
            }
#pragma unroll
            for (int j = 0; j < B_CH; j++) {
                const int n = n0 + r0 + j * RSTEP;
                const bool ok = chok && n < g.N;
                const bf16 *src = ok ? g.scb + (n * g.sc_cin + ch) : g.scb;
                cp_async16(sb + swz(r0 + j * RSTEP, cc), src, ok);
            }
        }
    };

    float acc[MT][NT][4];
#pragma unroll
    for (int i = 0; i < MT; i++)
#pragma unroll
        for (int j = 0; j < NT; j++)
#pragma unroll
            for (int k = 0; k < 4; k++) acc[i][j][k] = 0.f;

#pragma unroll
    for (int s = 0; s < STAGES - 1; s++) {
        if (s < iters) load_stage(s);
        cp_async_commit();
    }

    /* ldmatrix lane addressing (fixed per thread): A rows wm*TM + i*16 + (lane & 15), chunk half lane >> 4;
     * B rows wn*TN + jj*16 + (lane & 7) + 8 * (lane >> 4), chunk half (lane >> 3) & 1. Every such row has
     * row & 7 == lane & 7, which the swizzle uses. */
    const int a_row = wm * TM + (lane & 15), a_half = lane >> 4;
    const int b_row = wn * TN + (lane & 7) + ((lane >> 4) << 3), b_half = (lane >> 3) & 1;
    const int l7 = lane & 7;
    /* Their byte offsets at kk = 0 from the stage's base (B's rows after A's BM): step kk reads chunk 2 kk + half,
     * and (2 kk + half) ^ l7 == (half ^ l7) ^ 2 kk, so its offset is this one XOR kk << 5 (bits 5-6: within the
     * row's 128 bytes). The same addresses as swz's, two registers for them all. */
    const uint32_t a_lane = a_row * ROW_BYTES + ((a_half ^ l7) << 4);
    const uint32_t b_lane = (BM + b_row) * ROW_BYTES + ((b_half ^ l7) << 4);

    for (int it = 0; it < iters; it++) {
        cp_async_wait<STAGES - 2>();
        __syncthreads(); /* stage it is in smem for all threads; stage it-1 is free for the next load */
        {
            const int nx = it + STAGES - 1;
            if (nx < iters) load_stage(nx);
            cp_async_commit();
        }
        const uint32_t sa = smem0 + (it % STAGES) * STAGE_BYTES;
#pragma unroll
        for (int kk = 0; kk < BK / 16; kk++) {
            /* A's MT fragments, then B's per 16 columns, each used at once: 4 B registers live, not 2 NT (issue 45:
             * the 128 x 96 tile spilled under its 128-register bound). Every accumulator still takes its MMAs in
             * kk order, the same bits. */
            uint32_t af[MT][4];
#pragma unroll
            for (int i = 0; i < MT; i++)
                ldmatrix_x4(af[i], sa + (a_lane ^ (kk << 5)) + i * 16 * ROW_BYTES);
#pragma unroll
            for (int jj = 0; jj < NT / 2; jj++) {
                uint32_t r[4];
                ldmatrix_x4(r, sa + (b_lane ^ (kk << 5)) + jj * 16 * ROW_BYTES);
#pragma unroll
                for (int i = 0; i < MT; i++) {
                    mma_16<F16>(acc[i][2 * jj], af[i], r[0], r[1]);
                    mma_16<F16>(acc[i][2 * jj + 1], af[i], r[2], r[3]);
                }
            }
        }
    }
    cp_async_wait<0>();

    /* Epilogue: thread holds rows g, g+8 of each 16-row tile and column pairs 2*(lane&3) of each 8-col tile. */
    const int gq = lane >> 2, tq = lane & 3;
#pragma unroll
    for (int i = 0; i < MT; i++) {
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int m = m0 + wm * TM + i * 16 + gq + h * 8;
            if (m >= g.M) continue;
            long orow, rrow;
            w22_epilogue_row(g, m, HW, &orow, &rrow);
            orow += (long)bat * g.ph_o[1];
#pragma unroll
            for (int j = 0; j < NT; j++) {
                const int n = n0 + wn * TN + j * 8 + tq * 2;
                if (n >= g.N) continue; /* N is even: n + 1 < N too */
                float v0 = acc[i][j][2 * h], v1 = acc[i][j][2 * h + 1];
                w22_epilogue_pair<F16>(g, orow, rrow, n, v0, v1);
            }
        }
    }
}

/* ---- host side: the tile table's configs, eligibility, dispatch ---- */

template <int BM, int BN, int WM, int WN, int STAGES, int MINB> struct tile_cfg {
    static constexpr int threads = WM * WN * 32;
    static constexpr int smem = STAGES * (BM + BN) * ROW_BYTES;
    static void *kernel() { return (void *)w22_conv_mma_kernel<BM, BN, WM, WN, STAGES, MINB, false>; }
    static void *kernel_f16() { return (void *)w22_conv_mma_kernel<BM, BN, WM, WN, STAGES, MINB, true>; }
    /* batch: the GEMMs of w22_mm.batch (grid.y), 1 without; F16: the fp16 kernel (instantiated only where used) */
    template <bool F16 = false>
    static w22_status launch(w22_cuda *c, const w22_mm *g, int main_iters, int iters, int batch, const char *what) {
        const int tiles_n = (g->N + BN - 1) / BN;
        const long tiles = (long)((g->M + BM - 1) / BM) * tiles_n;
        if (tiles > INT_MAX) return w22_fail(W22_ERR_INVALID_ARG, "%s: %ld tiles is too many for one grid", what, tiles);
        w22_conv_mma_kernel<BM, BN, WM, WN, STAGES, MINB, F16>
            <<<dim3((unsigned)tiles, (unsigned)batch), threads, smem, c->stream>>>(*g, main_iters, iters, tiles_n);
        return W22_OK;
    }
};
typedef tile_cfg<W22_TILE_MID> cfg_mid;
typedef tile_cfg<W22_TILE_SMALL> cfg_small;
typedef tile_cfg<W22_TILE_N96> cfg_n96;

static_assert(cfg_mid::smem * 2 <= 228 * 1024, "mid tile: 2 blocks per SM must fit");
static_assert(cfg_small::smem * 2 <= 228 * 1024, "small tile: 2 blocks per SM must fit");
static_assert(cfg_n96::smem * 2 <= 228 * 1024, "the 96-wide tile: 2 blocks per SM must fit");
/* both paths launch these (route.h's w22_route_mma_tile): every GPU from sm_80 on holds them */
static_assert(cfg_mid::smem <= W22_PORTABLE_SMEM, "mid tile exceeds the portable path's shared memory (99 KB)");
static_assert(cfg_small::smem <= W22_PORTABLE_SMEM, "small tile exceeds the portable path's shared memory (99 KB)");
static_assert(cfg_n96::smem <= W22_PORTABLE_SMEM, "the 96-wide tile exceeds the portable path's shared memory (99 KB)");

w22_status w22_cuda_gemm_init(w22_cuda *c) {
    /* a build for other GPUs (make CUDA_ARCHS=...) holds no code for this one: said plainly, before any launch */
    cudaFuncAttributes fa;
    const cudaError_t img = cudaFuncGetAttributes(&fa, cfg_mid::kernel());
    if (img != cudaSuccess) {
        (void)cudaGetLastError();
        return w22_fail(W22_ERR_UNSUPPORTED, "this build of wan22vae holds no GPU code for sm_%d%d (%s): rebuild it "
                        "with that arch in make's CUDA_ARCHS, or decode on the CPU backend", c->cc_major, c->cc_minor,
                        cudaGetErrorString(img));
    }
    /* the tiles (route.h): the largest, mid, within what the GPU allows a block */
    const int need = cfg_mid::smem;
    if (c->smem_optin < need)
        return w22_fail(W22_ERR_UNSUPPORTED, "the GPU allows %d bytes of shared memory per block; the %s path's conv "
                        "needs %d", c->smem_optin, c->hopper ? "Hopper" : "portable", need);
    CU_TRY(cudaFuncSetAttribute(cfg_mid::kernel(), cudaFuncAttributeMaxDynamicSharedMemorySize, cfg_mid::smem));
    CU_TRY(cudaFuncSetAttribute(cfg_small::kernel(), cudaFuncAttributeMaxDynamicSharedMemorySize, cfg_small::smem));
    CU_TRY(cudaFuncSetAttribute(cfg_n96::kernel(), cudaFuncAttributeMaxDynamicSharedMemorySize, cfg_n96::smem));
    CU_TRY(cudaFuncSetAttribute(cfg_mid::kernel_f16(), cudaFuncAttributeMaxDynamicSharedMemorySize, cfg_mid::smem));
    /* Qualifying GEMMs run on the wgmma conv (conv_sm90_wgmma.cu, conv_sm90_wgmma_tma.cu): sm_90a code, the Hopper
     * path's alone (its kernels have no image for another GPU) */
    if (c->hopper) W22_TRY(w22_cuda_wgmma_init(c));
    W22_TRY(w22_cuda_rows2d_init(c));
    return W22_OK;
}

/* The launch of g on the mma tile k (route.h), batch GEMMs (grid.y; 1: none). */
static w22_status mma_launch(w22_cuda *c, const w22_mm *g, w22_gemm_kernel k, int batch, const char *what) {
    const long kmain = (long)g->kt * g->ks * g->ks * g->cin; /* K packed across the taps (the kernel's cursor) */
    const int main_iters = (int)((kmain + BK - 1) / BK);
    const int iters = main_iters + (g->sc ? (g->sc_cin + BK - 1) / BK : 0);
    w22_status s;
    if (g->f16) { /* a batch's fp16 GEMMs: the tile route.h's w22_route_mma_batch_blocker lets them have */
        if (k != W22_GEMM_MMA_MID || !g->batch || g->res)
            return w22_fail(W22_ERR_INTERNAL, "%s: fp16 operands on mma tile %d (batch %d, residual %d): only a batch "
                            "on the 128 x 128 tile without a residual", what, (int)k, g->batch, g->res != NULL);
        c->last_path = "mma 128x128 f16", c->route.ran_kernel = W22_GEMM_MMA_MID;
        s = cfg_mid::launch<true>(c, g, main_iters, iters, batch, what);
    } else if (k == W22_GEMM_MMA_SMALL) {
        c->last_path = "mma 128x32", c->route.ran_kernel = W22_GEMM_MMA_SMALL;
        s = cfg_small::launch(c, g, main_iters, iters, batch, what);
    } else if (k == W22_GEMM_MMA_N96) {
        c->last_path = "mma 128x96", c->route.ran_kernel = W22_GEMM_MMA_N96;
        s = cfg_n96::launch(c, g, main_iters, iters, batch, what);
    } else if (k == W22_GEMM_MMA_MID) {
        c->last_path = "mma 128x128", c->route.ran_kernel = W22_GEMM_MMA_MID;
        s = cfg_mid::launch(c, g, main_iters, iters, batch, what);
    } else {
        return w22_fail(W22_ERR_INTERNAL, "%s: mma tile %d on the %s path", what, (int)k,
                        c->hopper ? "Hopper" : "portable");
    }
    if (s != W22_OK) return s;
    CU_LAUNCHED(c, what);
    return W22_OK;
}

/* A batch GEMM (w22_mm.batch, route.h's w22_route_mma_batch_blocker passed) as one launch of the mma kernel. */
w22_status w22_cuda_gemm_mma_batch(w22_cuda *c, const w22_mm *g, const char *what) {
    const char *why = w22_route_mma_batch_blocker(g);
    if (why) return w22_fail(W22_ERR_INTERNAL, "%s: the batch on the mma kernel: %s", what, why);
    const w22_gemm_kernel k = w22_route_mma_tile(g->N);
    c->route.kernel = k, c->route.why = NULL, c->route.launches = 0, c->route.batch = g->batch;
    return mma_launch(c, g, k, g->batch, what);
}

w22_status w22_cuda_gemm(w22_cuda *c, const w22_mm *g, const char *what) {
    if (g->M <= 0 || g->N <= 0) return W22_OK;
    const char *why;
    const int hopper = c->hopper && c->use_wgmma && w22_cuda_wgmma_tma_on(c);
    const w22_gemm_kernel k = w22_route_gemm(g, hopper, &why); /* route.h */
    c->route.kernel = k, c->route.why = why, c->route.launches = 0, c->route.ran_kernel = W22_GEMM_SCALAR;
    if (g->f16) return w22_fail(W22_ERR_INVALID_ARG, "%s: %s", what, why); /* a batch's only (route.h) */
    if (k == W22_GEMM_TMA) return w22_cuda_gemm_wgmma(c, g, what);
    if (k == W22_GEMM_ROWS2D) return w22_cuda_gemm_rows2d(c, g, what);
    if (k == W22_GEMM_SCALAR) {
        c->last_path = why;
        c->route.ran_kernel = W22_GEMM_SCALAR;
        return w22_cuda_gemm_scalar(c, g, what);
    }
    return mma_launch(c, g, k, 1, what);
}

w22_status w22_cuda_gemm_phases(w22_cuda *c, const w22_mm q[4], const char *what) {
    /* one launch of the TMA conv where route.h takes the four (the Hopper path with its kernels: wgmma and the TMA's
     * im2col encoder) */
    const int one = c->hopper && c->use_wgmma && w22_cuda_wgmma_tma_on(c) && !w22_route_phases_blocker(q, 1);
    if (one) {
        c->route.phases4 = 1;
        c->route.kernel = W22_GEMM_TMA, c->route.why = NULL; /* w22_route_gemm's answer for each phase */
        return w22_cuda_gemm_wgmma_phases(c, q, what);
    }
    c->route.phases4 = 0;
    for (int p = 0; p < 4; p++) W22_TRY(w22_cuda_gemm(c, &q[p], what));
    return W22_OK;
}
