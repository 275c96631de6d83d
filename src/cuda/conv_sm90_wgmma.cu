/* The conv's implicit GEMM on Hopper's own instructions: wgmma.mma_async (bf16 x bf16 -> fp32, both operands in
 * shared memory), a warp-specialized producer/consumer pipeline on mbarriers, the weights by the tensor-memory
 * accelerator (TMA), the pixels by 16-byte cp.async gathers. Same GEMM, same semantics, same epilogue as the
 * mma.sync kernel (conv_sm90_mma.cu; w22_mm in cuda_internal.h); a subset of its shapes (below). Since v9
 * the default for its shapes is the variant that loads the pixels by TMA too (conv_sm90_wgmma_tma.cu); this kernel
 * runs with W22_WGMMA_LOAD=cpasync or where that one's checks fail (W22_CONV_KERNEL=mma: the mma.sync kernel).
 *
 * ---- Design ----
 * Block = 384 threads = 3 warpgroups, one CTA per SM (__launch_bounds__(384, 1)), one output tile per CTA:
 *   warpgroup 0 (producer, setmaxnreg 56; 40 with W22_WGMMA_ROWS=smem): fills a ring of STAGES shared-memory stages; per stage one K slice of
 *     64 channels of one tap (dt, dy, dx), or of the 1x1 shortcut's input after the main K:
 *       A [128 rows][64 bf16]: row r = output pixel m0 + r, read through the tap offset from the channels-last
 *         input with cp.async.cg 16 B (8 chunks per 128-byte row; thread p owns chunk p & 7 of rows
 *         (p >> 3) + 16 j, j < 8); rows past M are zero-filled (src-size 0). No bounds checks: the input has a
 *         readable one-pixel border (backend.h), and cin % 64 == 0 keeps every slice inside one pixel.
 *       B [BN rows][64 bf16]: weights [N][K] K-major, one 2D TMA box {64, BN} at (k, n0) of a tensor map
 *         {K, N} (stride b_sw), SWIZZLE_128B; the shortcut's weights [N][sc_cin] through a second map.
 *     Both land in the 128-byte swizzle (16-byte chunk c of row r at r * 128 + ((c ^ (r & 7)) << 4), tile base
 *     1024-aligned): TMA produces it by itself, the cp.async addresses compute it (the same swizzle as the mma
 *     kernel's swz()).
 *   warpgroups 1, 2 (consumers, setmaxnreg 224; 232 with W22_WGMMA_ROWS=smem): rows [64 w, 64 w + 64) of the tile, all BN columns:
 *     per stage 4 x wgmma.m64n{BN}k16 (K = 64), fp32 accumulators in registers (BN / 2 per thread: 128 for
 *     BN = 256), one commit group per stage, wait_group 1 (one stage of wgmma in flight while the next is
 *     issued), then the stage before is released. Epilogue from registers: + bias (+ sc_bias), time-split
 *     scatter, + residual (may alias out), bf16 pair stores (fp32 with out_f32), exactly the mma kernel's code.
 * K order: taps (dt, dy, dx) outer, 64-channel slices inner, then the shortcut's slices (as the mma kernel).
 * Why A is not a TMA box: a tile is 128 consecutive output pixels in (t, y, x) order, which crosses output rows
 * wherever W % 128 != 0 (W = 78, 156, 312, 624): a fixed-size box cannot follow the wrap, and rectangular tiles
 * (whole rows) would waste 18-39% of the MMAs at W = 156 / 312. The gather costs the producer 8 cp.async per
 * thread per stage, which it has the issue slots for (1024 clocks of wgmma per stage).
 *
 * ---- Barrier protocol (shared-memory mbarriers; enum wg_arrivals) ----
 *   full[s]  (count FULL_ARRIVALS = 128 producer threads + 1): thread 0 does arrive.expect_tx(B bytes) and
 *            issues the TMA, which completes the transaction bytes; each producer thread arrives once its own
 *            cp.async copies of that stage have landed: at the top of iteration i (before its empty wait) it
 *            hands off load i - LAG, LAG = STAGES - 2, letting load i - 1 stay in flight (cp.async.wait_group
 *            LAG - 1; W22_WGMMA_HANDOFF=late: after issuing load i, wait_group LAG), then
 *            fence.proxy.async.shared::cta (its generic-proxy
 *            writes before the consumers' async-proxy wgmma reads), then mbarrier.arrive (release). The phase
 *            completes with all 129 arrivals and the TMA's bytes: A and B of stage s are in shared memory.
 *   empty[s] (count EMPTY_ARRIVALS = 8 consumer warps): lane 0 of each consumer warp arrives after its
 *            warpgroup's wgmma.wait_group shows the stage's wgmmas done (they read shared memory
 *            asynchronously). The producer waits on it before refilling stage s (from the second round on).
 *   Parities: load i uses stage i % STAGES in round r = i / STAGES; consumers wait full[s] for parity r & 1,
 *   the producer waits empty[s] (r >= 1) for parity (r - 1) & 1.
 *   No deadlock: the producer's refill of stage s for load i needs the release of load i - STAGES, which the
 *   consumers give after issuing load i - STAGES + 1, whose full barrier the producer completed at its
 *   iteration i - STAGES + 1 + LAG <= i - 1 (LAG <= STAGES - 2; early: at the top of that iteration, late: at its
 *   end, both before iteration i's empty wait).
 *
 * ---- Tile table (one place: the wg_cfg typedefs below) ----
 * | BM x BN | stages | smem   | used when     | why |
 * | 128x256 | 4      | 194 KB | N % 256 == 0  | every heavy conv (N = 256 ... 3072): 2 x 64x256 per CTA is the largest tile whose 128 accumulators per consumer thread fit in 232 registers; 48 KB per stage, 4 stages is what 227 KB holds (5 would be 240 KB) |
 * | 128x128 | 6      | 194 KB | N % 128 == 0  | the rest (N = 128, 384, ...): same rows, half the columns; 32 KB per stage buys 6 stages |
 * (smem = stages x stage + 2 x stages mbarriers + a 132-pointer frame table + three 128-int row tables + 1 KB
 * to align the ring to 1024 B.)
 * Input frames: a row's tap dt reads input frame t + dt, whose base comes from a per-tile table (w22_gemm_frame:
 * the causal history frames live in the plan's caches, not before the new frames). A tile spanning two frames (all
 * real shapes) keeps both bases in registers and picks one by bit 0 of the row's offset; a table read per row cost
 * 12-15% of the kernel's rate (docs/PERF.md v4): the producer's issue rate is one of its bounds.
 * Not measured yet: the choice is the standard Hopper GEMM tile (CUTLASS's 128x256x64 warp-specialized default);
 * 256x128 (A twice as large: twice the cp.async work per stage) is the alternative. A persistent grid is prepared
 * (w22_conv_wgmma_persist_kernel below, W22_WGMMA_PERSIST=1), a B-multicast cluster measured slower (WG_CLUSTER).
 * Everything else (cin or sc_cin % 64 != 0, N % 128 != 0, upsample, weights not one [N][K] block, ...) stays on the
 * mma.sync kernel (wgmma_blocker).
 *
 * ---- What to expect on an H200 (to be measured) ----
 * Tensor cores: 4096 bf16 FLOP/clock/SM (dense), at 1.98 GHz x 132 SMs = 1070 TFLOP/s. One 128x256x64 stage is
 * 2 * 128 * 256 * 64 = 4.19 MFLOP = 1024 clocks of one SM's tensor cores (512 for 128x128). It brings 16 KB
 * of A (cp.async) + 32 KB of B (TMA) = 48 KB, i.e. 47 B/clock/SM = 12.3 TB/s across the chip at the peak,
 * mostly L2 hits (each input pixel is read by 9 or 27 taps, the weights by every M tile): L2-to-SM bandwidth,
 * not the tensor cores, is the likely ceiling; a 2-CTA cluster multicasting B (one L2 read for two M tiles)
 * is the next step if the profile says so. Latency: with 4 stages the producer keeps LAG + 1 = 3 stages of
 * loads in flight while 1 is computed, ~2000-3000 clocks (1-1.5 us) of cover against ~600-1000 clocks of
 * L2/TMA latency. One producer warpgroup issues 1024 cp.async (8 per thread) + 1 TMA per 1024 clocks.
 * Expectation: 600-750 TFLOP/s on the 3x3x3 convs (cuDNN 709-765 measured), i.e. 1.8-2.2x the mma kernel.
 * Measured (H200, 2026-12-02, cuda_ops --perf --kernel both, 6 frames): 575 / 575 / 621 TFLOP/s at 256ch 352x624 /
 * 512ch 176x312 / 1024ch 88x156 (1.7-1.9x the mma kernel, 76-81% of cuDNN); phase convs 425 / 507; time_conv 414.
 * The epilogue (no overlap with the next tile: one tile per CTA, not persistent) costs ~1-3% at K >= 6912
 * (108 stages per tile at 256 channels); the phase convs (K = 4 cin) and the time_conv (K = 3 cin) have 4-9x
 * fewer stages per tile, so their epilogue share is larger (~5-10%): the case for a persistent grid later.
 * v5 (2026-12-02, same tool): rows in registers and the early hand-off (VAR below) took the heavy convs to
 * 665-675 / 703-714 / 747-751 TFLOP/s, 0.86 / 0.93 / 1.04 of cuDNN's channels-last conv3d side by side, phase convs
 * 449 / 568, time_conv 465 (docs/PERF.md v5).
 * Why the producer waits on its own copies (cp.async.wait_group, LAG stages behind) instead of
 * cp.async.mbarrier.arrive.noinc: the proxy fence must follow the writes it orders in the writing thread, which
 * only a completed wait gives; the cost is a producer that blocks LAG stages behind its newest load.
 *
 * ---- Validate and time it (device) ----
 *   make -j16 build/tests/cuda_ops && W22_CUDA_DEBUG=1 build/tests/cuda_ops --kernel wgmma -o conv && \
 *   build/tests/cuda_ops --perf --kernel both
 * The first runs every conv case through the wgmma path where it qualifies (and fails a qualifying case that did
 * not run on it); the second prints both kernels' TFLOP/s side by side.
 *
 * ---- Validated on an H200 (2026-12-02): every conv case of cuda_ops under W22_CUDA_DEBUG=1, and the f121 decode
 * checked against diffusers' fp32 decode (bench/results/2026-12-02-h200-wgmma.json). The points that were
 * written without a GPU, and are now borne out by those runs: ----
 *  - the wgmma descriptor (start >> 4, LBO 1, SBO 1024 >> 4, layout 1 = 128B swizzle in bits 62-63) and the
 *    K advance by +32 bytes (start + 2) inside a swizzled 128-byte row;
 *  - TMA's SWIZZLE_128B layout equal to the cp.async swizzle (chunk ^ (row & 7)) on a 1024-aligned base;
 *  - cp.async.wait_group + fence.proxy.async + mbarrier.arrive as the hand-off of cp.async data to wgmma;
 *  - setmaxnreg honoured (ptxas prints no C7508/C7509 warning; the build shows none);
 *  - one empty arrival per consumer warp after its wgmma.wait_group (the wgmma is one warpgroup-wide operation);
 *  - a wait that never completes traps after 2^26 try_wait calls: a hang becomes "unspecified launch failure".
 * Build facts (nvcc 13.0, -Xptxas -v): all eight instantiations 168 registers at entry (384 x 168 = 64512), 0 spill
 * bytes, no stack frame; SASS: HGMMA.64x256x16 / 64x128x16, UTMALDG.2D, LDGSTS.E.BYPASS.128, USETMAXREG.
 */
#include "wgmma_common.cuh"

/* ---- the kernel ---- */

/* Producer variants, bits of VAR; both on by default since v5 (docs/PERF.md: together with the norm's v2 they took
 * the heavy convs from 535-587 to 665-747 TFLOP/s and f121 from 4159 to 3538 ms in one run). The old paths stay for
 * A/B runs: W22_WGMMA_ROWS=smem, W22_WGMMA_HANDOFF=late.
 *  WG_ROWREG: the producer keeps its 8 rows' offsets in registers for the whole tile instead of reading them from
 *    shared memory every stage (alone: +12-19% on the heavy convs).
 *  WG_EARLY: the producer hands load it - LAG to the consumers at the top of iteration it, before it waits for
 *    stage it to be empty, instead of after issuing load it. The consumers need load it - LAG right after they
 *    release load it - LAG - 2; in the late order its hand-off waits for the release of load it - STAGES =
 *    it - LAG - 2 itself plus the producer's issue of a stage (no slack: the tensor cores live on the one stage
 *    still queued), in the early order for the release of load it - 1 - STAGES (one stage of slack). The price: one
 *    group fewer in flight at the wait (cp.async.wait_group LAG - 1 instead of LAG). Alone: +1-7%; on top of
 *    ROWREG: +5-8%. */
/*  WG_CLUSTER (W22_WGMMA_CLUSTER=2; a measurement variant, 128x256 only; measured slower, docs/PERF.md v6: the
 *    heavy convs 551-577 TFLOP/s against 672-754, f121 +14%, correct): CTA pairs in clusters of 2 along M share
 *    their B tiles: each CTA loads half the B box (BN / 2 rows) by TMA multicast into both CTAs' stage, so a stage
 *    reads 16 KB of A + 16 KB of B from L2 per CTA instead of 16 + 32. Why: at 675 TFLOP/s a CTA pulls 48 KB per
 *    1024-clock stage, 7.7 TB/s across the chip, about what Hopper's L2 delivers. The price: a stage is free only
 *    when both CTAs' consumers released it (empty[s] counts 16 warps: 8 local, 8 remote arrivals), the pair starts
 *    and ends together (cluster barriers), the M tiles are padded to an even count (a padded CTA loads zeros and
 *    stores nothing), and an SM left over in a GPC with an odd count of free SMs idles. */
enum { WG_ROWREG = 1, WG_EARLY = 2, WG_CLUSTER = 4 };
template <int BN, int STAGES, int VAR>
__global__ void __launch_bounds__(WG_THREADS, 1)
    w22_conv_wgmma_kernel(const __grid_constant__ CUtensorMap tm_b, const __grid_constant__ CUtensorMap tm_sc,
                          const w22_mm g, int main_iters, int iters, int tiles_n) {
    typedef wg_layout<BN, STAGES> L;
    constexpr int LAG = L::lag;
    constexpr bool ROWREG = (VAR & WG_ROWREG) != 0, EARLY = (VAR & WG_EARLY) != 0, CLUSTER = (VAR & WG_CLUSTER) != 0;
    constexpr int CL = CLUSTER ? 2 : 1; /* CTAs that share a B tile */
    extern __shared__ unsigned char smem_raw[];
    const uint32_t raw = (uint32_t)__cvta_generic_to_shared(smem_raw);
    const uint32_t base = (raw + 1023u) & ~1023u;
    unsigned char *gbase = smem_raw + (base - raw);
    const uint32_t full0 = base + L::bars_off, empty0 = full0 + STAGES * 8;
    const bf16 **ftab = (const bf16 **)(gbase + L::ftab_off);
    int *rows_a = (int *)(gbase + L::rows_off), *rows_f = rows_a + WG_BM, *rows_s = rows_f + WG_BM;

    const int tid = threadIdx.x, wg = tid >> 7;
    /* cluster: the pair (blockIdx.x / 2) owns M tiles 2 q and 2 q + 1 of one N tile; rank = blockIdx.x % 2 */
    const uint32_t crank = CLUSTER ? cluster_rank() : 0;
    const int tile_n = CLUSTER ? (int)(blockIdx.x >> 1) % tiles_n : blockIdx.x % tiles_n;
    const int tile_m = CLUSTER ? 2 * ((int)(blockIdx.x >> 1) / tiles_n) + (int)crank : blockIdx.x / tiles_n;
    const int m0 = tile_m * WG_BM, n0 = tile_n * BN;
    const int HW = g.H * g.W;

    /* Per tile row: the offset of its pixel (tap (0, pad_y, pad_x)) within its input frame, -1 past M; its frame
     * relative to the tile's first (t_lo); the shortcut's pixel offset. Per input frame the tile's taps reach
     * (t_lo .. t_hi + kt - 1): its base pointer, which the causal history frames (a_hist) make irregular. */
    const int t_lo = m0 / HW;
    if (tid < WG_BM) {
        const int m = m0 + tid;
        int oa = -1, os = -1, tf = 0;
        if (m < g.M) {
            const int t = m / HW, rem = m - t * HW, y = rem / g.W, x = rem - y * g.W;
            tf = t - t_lo;
            /* offsets are multiples of 64 elements (cin % 64 == 0): bit 0 says frame t_lo or t_lo + 1 */
            oa = y * (int)g.a_sh + x * (int)g.a_sw + (tf & 1);
            os = t * (int)g.sc_sf + y * (int)g.sc_sh + x * (int)g.sc_sw;
        }
        rows_a[tid] = oa;
        rows_f[tid] = tf;
        rows_s[tid] = os;
    }
    const int m_last = (m0 + WG_BM < g.M ? m0 + WG_BM : g.M) - 1;
    const bool two_frames = m_last / HW - t_lo <= 1; /* every real shape: H x W >= 128; else the table per row */
    if (tid < m_last / HW - t_lo + g.kt + 1) ftab[tid] = w22_gemm_frame(g, t_lo + tid); /* + 1: f1 below */
    if (tid == 0) wg_init_ring<STAGES>(full0, empty0, FULL_ARRIVALS, EMPTY_ARRIVALS * CL, &tm_b, &tm_sc, g);
    __syncthreads();
    if (CLUSTER) cluster_sync_all(); /* the peer's barriers are initialized before any multicast or remote arrive */

    if (wg == 0) {
        /* ---------------- producer ---------------- */
        asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(ROWREG ? WG_PRODUCER_REGS_RR : WG_PRODUCER_REGS));
        const int p = tid, cc = p & 7, r0 = p >> 3;
        /* this thread's rows r0 + 16 j: smem offset of its chunk in row r0 (+ j * 2048 per j), swizzled by r0 & 7 */
        const uint32_t my_chunk = (uint32_t)(r0 * WG_ROW_BYTES + ((cc ^ (r0 & 7)) << 4));
        const int ash = (int)g.a_sh, asw = (int)g.a_sw;
        int ro_r[WG_BM / 16];
#pragma unroll
        for (int j = 0; j < WG_BM / 16; j++) ro_r[j] = ROWREG ? rows_a[r0 + 16 * j] : 0;
        int c0 = 0, dt = 0, dy = 0, dx = 0; /* the load cursor: tap and channel slice of load `it` */
        int s = 0, sd = 0;                  /* stage of load it, of load it - LAG */
        uint32_t ph = 0;                    /* round parity of load it */
        for (int it = 0; it < iters; it++) {
            if (EARLY && it >= LAG) { /* load it - LAG has landed (this thread's part): hand it to the consumers */
                cp_async_wait<LAG - 1>();
                fence_proxy_async();
                mbar_arrive(full0 + 8 * sd);
                if (++sd == STAGES) sd = 0;
            }
            if (it >= STAGES) {
                if (CLUSTER)
                    mbar_wait<true>(empty0 + 8 * s, ph ^ 1);
                else
                    mbar_wait(empty0 + 8 * s, ph ^ 1);
            }
            const uint32_t sa = base + s * L::stage_bytes, sb = sa + L::a_bytes, full = full0 + 8 * s;
            if (it < main_iters) {
                const int tap = (dt * g.ks + dy) * g.ks + dx;
                if (p == 0) {
                    mbar_arrive_expect_tx(full, L::b_bytes);
                    if (CLUSTER) /* this CTA's half of the B rows, into both CTAs */
                        tma_load_2d_mc(sb + crank * (L::b_bytes / 2), &tm_b, full, tap * g.cin + c0,
                                       n0 + (int)crank * (BN / 2), 3);
                    else
                        tma_load_2d(sb, &tm_b, full, tap * g.cin + c0, n0);
                }
                const int off = (dy - g.pad_y) * ash + (dx - g.pad_x) * asw + c0 + cc * 8;
                if (two_frames) { /* the two frames' bases in registers: no table read per row */
                    const bf16 *f0 = ftab[dt] + off, *f1 = ftab[dt + 1] + off;
#pragma unroll
                    for (int j = 0; j < WG_BM / 16; j++) {
                        const int ro = ROWREG ? ro_r[j] : rows_a[r0 + 16 * j];
                        const bool ok = ro >= 0;
                        cp_async16(sa + my_chunk + j * 16 * WG_ROW_BYTES, ok ? ((ro & 1) ? f1 : f0) + (ro & ~1) : g.a,
                                   ok);
                    }
                } else {
#pragma unroll
                    for (int j = 0; j < WG_BM / 16; j++) {
                        const int ro = rows_a[r0 + 16 * j];
                        const bool ok = ro >= 0;
                        const bf16 *fp = ftab[rows_f[r0 + 16 * j] + dt];
                        cp_async16(sa + my_chunk + j * 16 * WG_ROW_BYTES, ok ? fp + (ro & ~1) + off : g.a, ok);
                    }
                }
                c0 += WG_BK;
                if (c0 == g.cin) { /* next tap; after the last one c0 restarts for the shortcut's channels */
                    c0 = 0;
                    if (++dx == g.ks) {
                        dx = 0;
                        if (++dy == g.ks) dy = 0, dt++;
                    }
                }
            } else {
                if (p == 0) {
                    mbar_arrive_expect_tx(full, L::b_bytes);
                    if (CLUSTER)
                        tma_load_2d_mc(sb + crank * (L::b_bytes / 2), &tm_sc, full, c0, n0 + (int)crank * (BN / 2), 3);
                    else
                        tma_load_2d(sb, &tm_sc, full, c0, n0);
                }
                const int off = c0 + cc * 8;
#pragma unroll
                for (int j = 0; j < WG_BM / 16; j++) {
                    const int ro = rows_s[r0 + 16 * j];
                    const bool ok = ro >= 0;
                    cp_async16(sa + my_chunk + j * 16 * WG_ROW_BYTES, g.sc + (ok ? ro + off : 0), ok);
                }
                c0 += WG_BK;
            }
            cp_async_commit();
            if (!EARLY && it >= LAG) { /* the same hand-off, after issuing load it */
                cp_async_wait<LAG>();
                fence_proxy_async();
                mbar_arrive(full0 + 8 * sd);
                if (++sd == STAGES) sd = 0;
            }
            if (++s == STAGES) s = 0, ph ^= 1;
        }
        cp_async_wait<0>();
        fence_proxy_async();
        for (int k = iters < LAG ? iters : LAG; k > 0; k--) {
            mbar_arrive(full0 + 8 * sd);
            if (++sd == STAGES) sd = 0;
        }
    } else {
        /* ---------------- consumers ---------------- */
        asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(ROWREG ? WG_CONSUMER_REGS_RR : WG_CONSUMER_REGS));
        const int cw = wg - 1, lane = tid & 31, warp4 = (tid >> 5) & 3;
        constexpr int NACC = BN / 2;
        float acc[NACC];
#pragma unroll
        for (int i = 0; i < NACC; i++) acc[i] = 0.f;
        const uint64_t da0 = smem_desc(base + cw * 64 * WG_ROW_BYTES), db0 = smem_desc(base + L::a_bytes);
        const uint32_t peer_empty0 = CLUSTER ? cluster_map(empty0, crank ^ 1) : 0;
        constexpr uint64_t STAGE_DESC = L::stage_bytes >> 4; /* a stage, in descriptor address units */
        int s = 0, sp = STAGES - 1;                          /* stage of load it, of load it - 1 */
        uint32_t ph = 0;
        for (int it = 0; it < iters; it++) {
            mbar_wait(full0 + 8 * s, ph);
            wg_mma_stage<BN>(acc, da0 + s * STAGE_DESC, db0 + s * STAGE_DESC);
            wgmma_wait<1>(); /* stage it - 1's wgmmas are done: it may be refilled */
            if (it > 0 && lane == 0) {
                mbar_arrive(empty0 + 8 * sp);
                if (CLUSTER) mbar_arrive_cluster(peer_empty0 + 8 * sp); /* the peer writes its B half here too */
            }
            sp = s;
            if (++s == STAGES) s = 0, ph ^= 1;
        }
        wgmma_wait<0>();
#pragma unroll
        for (int i = 0; i < NACC; i++) reg_fence(acc[i]);

        wg_store_tile<BN>(g, acc, m0, g.M, n0, cw, warp4, lane, HW, 0, 0);
    }
    if (CLUSTER) cluster_sync_all(); /* no CTA leaves while its peer may still arrive on its barriers */
}

/* ---- host side: tensor maps, tile configs, eligibility, launch ---- */

template <int BN, int STAGES, int VAR> struct wg_cfg {
    typedef wg_layout<BN, STAGES> L;
    static constexpr int bn = BN, stages = STAGES, var = VAR;
    static constexpr int smem = L::bytes;
    static void *kernel() { return (void *)w22_conv_wgmma_kernel<BN, STAGES, VAR>; }
};
typedef wg_cfg<256, 4, 0> wg_big;

/* The variant bits: ROWREG and EARLY unless W22_WGMMA_ROWS=smem / W22_WGMMA_HANDOFF=late; CLUSTER with
 * W22_WGMMA_CLUSTER=2 (read once per process). W22_WGMMA_PERSIST=1 (conv_sm90_wgmma_persist.cu) on top of the
 * default ROWREG | EARLY only. */
static int wg_variant(void) {
    static int v = -1;
    if (v < 0) {
        const char *r = getenv("W22_WGMMA_ROWS"), *h = getenv("W22_WGMMA_HANDOFF"), *k = getenv("W22_WGMMA_CLUSTER");
        v = (r && !strcmp(r, "smem") ? 0 : WG_ROWREG) | (h && !strcmp(h, "late") ? 0 : WG_EARLY) |
            (k && !strcmp(k, "2") ? WG_CLUSTER : 0);
    }
    return v;
}
/* the path names (c->last_path) by variant * 2 + (BN == 256) */
static const char *const wg_path_name[8] = {"wgmma 128x128 smem-rows late", "wgmma 128x256 smem-rows late",
                                            "wgmma 128x128 late", "wgmma 128x256 late",
                                            "wgmma 128x128 smem-rows", "wgmma 128x256 smem-rows",
                                            "wgmma 128x128", "wgmma 128x256"};

/* the 2 tiles x 4 variants: each kernel may use its shared memory */
static w22_status wg_allow_smem(void) {
#define WG_ALLOW(BN, ST, V) CU_TRY(cudaFuncSetAttribute(wg_cfg<BN, ST, V>::kernel(), \
                                   cudaFuncAttributeMaxDynamicSharedMemorySize, wg_cfg<BN, ST, V>::smem))
    WG_ALLOW(256, 4, 0); WG_ALLOW(256, 4, 1); WG_ALLOW(256, 4, 2); WG_ALLOW(256, 4, 3);
    WG_ALLOW(128, 6, 0); WG_ALLOW(128, 6, 1); WG_ALLOW(128, 6, 2); WG_ALLOW(128, 6, 3);
    WG_ALLOW(256, 4, 7);
#undef WG_ALLOW
    return W22_OK;
}

w22_status w22_cuda_wgmma_init(w22_cuda *c) {
    if (c->smem_optin < wg_big::smem)
        return w22_fail(W22_ERR_UNSUPPORTED, "wgmma conv: the GPU allows %d bytes of shared memory per "
                        "block; the kernel needs %d", c->smem_optin, wg_big::smem);
    W22_TRY(wg_allow_smem());
    W22_TRY(w22_cuda_wgmma_persist_init(c));
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

static int al16(const void *p) { return ((uintptr_t)p & 15) == 0; }

/* NULL when the wgmma kernel takes this GEMM (which has passed the mma kernel's checks), else why not. */
const char *w22_cuda_wgmma_blocker(const w22_mm *g) {
    if (g->upsample) return "upsample";
    if (g->cin % WG_BK) return "cin % 64";
    if (g->sc && g->sc_cin % WG_BK) return "sc_cin % 64";
    if (g->N % 128) return "N % 128";
    if (g->kt != 1 && g->kt != 3) return "kt";
    if (g->ks < 1 || g->ks > 3) return "ks";
    if (g->b_w < g->N) return "weights not one [N][K] block";
    const long K = (long)g->kt * g->ks * g->ks * g->cin;
    if (!al16(g->b) || (g->b_sw * 2) % 16 || g->b_sw < K || g->b_sw * 2 >= (1L << 40)) return "weights not TMA-able";
    if (g->sc && (!al16(g->scb) || ((long)g->sc_cin * 2) % 16)) return "shortcut weights not TMA-able";
    if (K >= INT_MAX || (long)g->N >= INT_MAX) return "too large";
    return NULL;
}

/* K-major [rows][K] bf16 (row stride `stride` elements) as a 2D tensor map with {64, box_rows} boxes, 128B swizzle. */
w22_status w22_wgmma_kmajor_map(w22_cuda *c, CUtensorMap *m, const bf16 *ptr, long K, long rows, long stride,
                                int box_rows, const char *what) {
    const cuuint64_t dims[2] = {(cuuint64_t)K, (cuuint64_t)rows};
    const cuuint64_t strides[1] = {(cuuint64_t)stride * 2};
    const cuuint32_t box[2] = {WG_BK, (cuuint32_t)box_rows};
    const cuuint32_t estr[2] = {1, 1};
    const CUresult r = ((encode_tiled_fn)c->tmap_encode)(
        m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, (void *)ptr, dims, strides, box, estr, CU_TENSOR_MAP_INTERLEAVE_NONE,
        CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS)
        return w22_fail(W22_ERR_CUDA, "%s: cuTensorMapEncodeTiled (K %ld, rows %ld, stride %ld, box %d) failed: %d",
                        what, K, rows, stride, box_rows, (int)r);
    return W22_OK;
}

template <class CFG> static w22_status wg_launch(w22_cuda *c, const w22_mm *g, const char *what) {
    const int BN = CFG::bn;
    const bool cluster = (CFG::var & WG_CLUSTER) != 0;
    const long K = (long)g->kt * g->ks * g->ks * g->cin;
    CUtensorMap tb, ts;
    const int box_rows = cluster ? BN / 2 : BN; /* cluster: each CTA of the pair loads half the B rows */
    W22_TRY(w22_wgmma_kmajor_map(c, &tb, g->b, K, g->N, g->b_sw, box_rows, what));
    if (g->sc)
        W22_TRY(w22_wgmma_kmajor_map(c, &ts, g->scb, g->sc_cin, g->N, g->sc_cin, box_rows, what));
    else
        ts = tb; /* never read */
    const int main_iters = g->kt * g->ks * g->ks * (g->cin / WG_BK);
    const int iters = main_iters + (g->sc ? g->sc_cin / WG_BK : 0);
    const int tiles_n = g->N / BN;
    long tiles_m = (g->M + WG_BM - 1) / WG_BM;
    if (cluster) tiles_m += tiles_m & 1; /* pairs: an odd count gets one CTA that loads zeros and stores nothing */
    const long tiles = tiles_m * tiles_n;
    if (tiles > INT_MAX) return w22_fail(W22_ERR_INVALID_ARG, "%s: %ld tiles is too many for one grid", what, tiles);
    if (!cluster) {
        w22_conv_wgmma_kernel<CFG::bn, CFG::stages, CFG::var>
            <<<(unsigned)tiles, WG_THREADS, CFG::smem, c->stream>>>(tb, ts, *g, main_iters, iters, tiles_n);
        return W22_OK;
    }
    cudaLaunchConfig_t lc;
    memset(&lc, 0, sizeof lc);
    cudaLaunchAttribute at[1];
    memset(at, 0, sizeof at);
    at[0].id = cudaLaunchAttributeClusterDimension;
    at[0].val.clusterDim.x = 2;
    at[0].val.clusterDim.y = 1;
    at[0].val.clusterDim.z = 1;
    lc.gridDim = dim3((unsigned)tiles);
    lc.blockDim = dim3(WG_THREADS);
    lc.dynamicSmemBytes = CFG::smem;
    lc.stream = c->stream;
    lc.attrs = at;
    lc.numAttrs = 1;
    CU_TRY(cudaLaunchKernelEx(&lc, w22_conv_wgmma_kernel<CFG::bn, CFG::stages, CFG::var>, tb, ts, *g, main_iters,
                              iters, tiles_n));
    return W22_OK;
}

/* The phases' one launch is the TMA kernel's (the default variant's, as w22_cuda_gemm_wgmma routes). */
const char *w22_cuda_wgmma_phases_blocker(const w22_cuda *c, const w22_mm q[4]) {
    if (wg_variant() != (WG_ROWREG | WG_EARLY)) return "phases: a W22_WGMMA_ROWS / HANDOFF / CLUSTER variant";
    if (!w22_cuda_wgmma_tma_on(c)) return "phases: not the TMA kernel (W22_WGMMA_LOAD=cpasync)";
    return w22_cuda_wgmma_tma_phases_blocker(q);
}

/* Whether w22_cuda_gemm_wgmma runs g (which passed w22_cuda_wgmma_blocker) on the TMA conv: 64-bit addressing */
int w22_cuda_wgmma_tma_takes(w22_cuda *c, const w22_mm *g) {
    return wg_variant() == (WG_ROWREG | WG_EARLY) && w22_cuda_wgmma_tma_on(c) && !w22_cuda_wgmma_tma_blocker(g);
}

w22_status w22_cuda_gemm_wgmma(w22_cuda *c, const w22_mm *g, const char *what) {
    const int v = wg_variant(), big = g->N % 256 == 0;
    w22_status s;
    if (v == (WG_ROWREG | WG_EARLY) && w22_cuda_wgmma_tma_on(c) && !w22_cuda_wgmma_tma_blocker(g))
        return w22_cuda_gemm_wgmma_tma(c, g, what); /* with W22_WGMMA_PERSIST=1 on a persistent grid */
    if (v == (WG_ROWREG | WG_EARLY) && w22_cuda_wgmma_persist_on(c)) return w22_cuda_gemm_wgmma_persist(c, g, what);
    if ((v & WG_CLUSTER) && big && v == (WG_ROWREG | WG_EARLY | WG_CLUSTER)) { /* the one cluster instantiation */
        c->last_path = "wgmma 128x256 cluster2";
        s = wg_launch<wg_cfg<256, 4, 7> >(c, g, what);
        if (s != W22_OK) return s;
        CU_LAUNCHED(c, what);
        return W22_OK;
    }
    c->last_path = wg_path_name[(v & 3) * 2 + big];
    switch ((v & 3) * 2 + big) {
    case 0: s = wg_launch<wg_cfg<128, 6, 0> >(c, g, what); break;
    case 1: s = wg_launch<wg_cfg<256, 4, 0> >(c, g, what); break;
    case 2: s = wg_launch<wg_cfg<128, 6, 1> >(c, g, what); break;
    case 3: s = wg_launch<wg_cfg<256, 4, 1> >(c, g, what); break;
    case 4: s = wg_launch<wg_cfg<128, 6, 2> >(c, g, what); break;
    case 5: s = wg_launch<wg_cfg<256, 4, 2> >(c, g, what); break;
    case 6: s = wg_launch<wg_cfg<128, 6, 3> >(c, g, what); break;
    default: s = wg_launch<wg_cfg<256, 4, 3> >(c, g, what); break;
    }
    if (s != W22_OK) return s;
    CU_LAUNCHED(c, what);
    return W22_OK;
}
