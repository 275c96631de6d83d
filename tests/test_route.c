/* Which kernel a GEMM runs on (src/cuda/route.h), on the CPU: the decoder's real GEMMs at 704x1248 and at 4K, and the
 * shapes that must fall back. route.h is the one place that decides; this pins its answers, so that a change of
 * routing shows here before a GPU sees it (issue 29's one dispatch), and keeps issue 27's 4K cliff fixed: past 4K
 * UHD the 256-channel convs' input offsets exceed an int, and they must still reach the TMA conv (64-bit tensor
 * maps), not the scalar kernel (105 s for one 3840x2160 frame when the int check came first). */
#include <stdio.h>
#include <string.h>
#include "cuda/route.h"
#include "cuda/lower.h"
#include "conv_gemms.h"
#include "model/model.h"
#include "testutil.h"

/* A conv's GEMM as conv.cu builds it: F frames of H x W output pixels, cin -> cout, kt x ks x ks taps, channels-last
 * views with a one-pixel border (ks 3) in 256-byte aligned buffers; history frames in the caches (hist). */
static w22_mm conv(int F, int H, int W, int cin, int cout, int kt, int ks, int hist) {
    /* only the pointers' alignment matters (nothing is read): addresses as cudaMalloc would give, 256-byte aligned */
    bf16 *base = (bf16 *)(uintptr_t)0x7f0000000000ull;
    w22_mm g;
    memset(&g, 0, sizeof g);
    const int b = ks == 3 ? 1 : 0;
    g.F = F, g.H = H, g.W = W, g.M = F * H * W, g.N = cout;
    g.cin = cin, g.kt = kt, g.ks = ks, g.pad_y = g.pad_x = ks / 2;
    g.a_sw = cin, g.a_sh = (long)(W + 2 * b) * cin, g.a_sf = (long)(H + 2 * b) * g.a_sh;
    g.a = (const bf16 *)((uintptr_t)base + 2 * (uintptr_t)(g.a_sh + g.a_sw)); /* pixel (0, 0) inside the border */
    if (hist) {
        g.a_hist[0] = g.a_hist[1] = g.a;
        g.hist_n = 2;
    }
    g.b = base, g.b_w = cout, g.b_sw = (long)kt * ks * ks * cin;
    g.out = base, g.o_sw = cout, g.o_sh = (long)W * cout, g.o_sf = (long)H * g.o_sh;
    return g;
}

#define kernel_names(k) w22_route_kernel_name(k)

static void expect(const char *what, const w22_mm *g, int wgmma_on, w22_gemm_kernel want) {
    const char *why = NULL;
    const w22_gemm_kernel k = w22_route_gemm(g, wgmma_on, &why);
    CHECK(k == want, "%s: routed to %s (%s), expected %s", what, kernel_names(k), why ? why : "-", kernel_names(want));
}

/* ---- the portable path (issue 45: hopper 0; route.h section 0): the decoder's GEMMs at their real sizes, none on a
 * Hopper-only kernel or the scalar one; the path by the compute capability; the tiles' shared memory ---- */
static void portable_cases(void) {
    /* the path: sm_90 Hopper unless the portable kernels are asked for; sm_80 .. sm_120 portable; below: none */
    CHECK(w22_route_path(9, 0, 0) == 1 && w22_route_path(9, 0, 1) == 0, "sm_90: the Hopper path, or portable asked");
    CHECK(w22_route_path(8, 0, 0) == 0 && w22_route_path(8, 6, 0) == 0 && w22_route_path(8, 9, 0) == 0 &&
          w22_route_path(10, 0, 0) == 0 && w22_route_path(12, 0, 0) == 0, "sm_80/86/89/100/120: the portable path");
    CHECK(w22_route_path(7, 5, 0) == -1 && w22_route_path(7, 0, 1) == -1, "sm_75, sm_70: no path (the CPU backend)");
    /* the decoder's GEMMs at 704 x 1248 (latents 44 x 78): F frames of each stage's resolution. At the real sizes no
     * GEMM falls to the scalar kernel, none is routed to a Hopper-only kernel, every N >= 256 on the 128x128 tile */
    static const struct { const char *what; int F, H, W, cin, cout, kt, ks, hist; w22_gemm_kernel want; } dec[] = {
        {"conv_in (cin 48)", 1, 44, 78, 48, 1024, 3, 3, 1, W22_GEMM_MMA_MID},
        {"stage 0's 1024-channel 3x3x3 conv", 2, 44, 78, 1024, 1024, 3, 3, 1, W22_GEMM_MMA_MID},
        {"the attention's to_qkv (1x1, N 3072)", 1, 44, 78, 1024, 3072, 1, 1, 0, W22_GEMM_MMA_MID},
        {"stage 0's time_conv (3x1x1, N 2048)", 2, 44, 78, 1024, 2048, 3, 1, 0, W22_GEMM_MMA_MID},
        {"stage 1's 3x3x3 conv, 1024 -> 1024 at 88 x 156", 2, 88, 156, 1024, 1024, 3, 3, 1, W22_GEMM_MMA_MID},
        {"stage 2's 512-channel conv at 176 x 312", 2, 176, 312, 512, 512, 3, 3, 1, W22_GEMM_MMA_MID},
        {"stage 2's shortcut-free 1024 -> 512", 2, 176, 312, 1024, 512, 3, 3, 1, W22_GEMM_MMA_MID},
        {"stage 3's 256-channel conv at 352 x 624", 1, 352, 624, 256, 256, 3, 3, 1, W22_GEMM_MMA_MID},
        {"stage 3's 512 -> 256", 1, 352, 624, 512, 256, 3, 3, 1, W22_GEMM_MMA_MID},
        {"conv_out (N 12) at 352 rows: the 2D tiles", 1, 352, 624, 256, 12, 3, 3, 1, W22_GEMM_ROWS2D},
        {"conv_out of 4 rows: the mma.sync 128 x 32 tile", 1, 4, 624, 256, 12, 3, 3, 1, W22_GEMM_MMA_SMALL},
        {"the head's partial-sums GEMM (N 36): the 96-wide tile", 1, 352, 624, 256, 36, 1, 3, 0, W22_GEMM_MMA_N96},
        {"post_quant_conv (1x1, 48): the 96-wide tile", 2, 44, 78, 48, 48, 1, 1, 0, W22_GEMM_MMA_N96},
        {"Wan2.1's 96-channel conv at 720 x 1280", 1, 720, 1280, 96, 96, 3, 3, 1, W22_GEMM_MMA_N96},
        {"Wan2.1's 192-channel conv at 360 x 640", 1, 360, 640, 192, 192, 3, 3, 1, W22_GEMM_MMA_N96},
        {"Wan2.1's 384-channel conv at 180 x 320", 2, 180, 320, 384, 384, 3, 3, 1, W22_GEMM_MMA_MID},
        {"4K stage 3 (4 frames: past an int in all, not in a frame)", 4, 1080, 1920, 256, 256, 3, 3, 1,
         W22_GEMM_MMA_MID},
        {"4096 x 2160's conv_out", 4, 1080, 2048, 256, 12, 3, 3, 1, W22_GEMM_ROWS2D},
    };
    for (size_t i = 0; i < sizeof dec / sizeof dec[0]; i++) {
        w22_mm g = conv(dec[i].F, dec[i].H, dec[i].W, dec[i].cin, dec[i].cout, dec[i].kt, dec[i].ks, dec[i].hist);
        expect(dec[i].what, &g, 0, dec[i].want);
    }
    /* the upsamplers' phase GEMMs (ks 2 on the low-resolution grid, pads 1 - py), four launches on this path */
    for (int p = 0; p < 4; p++) {
        w22_mm g = conv(1, 88, 156, 512, 512, 1, 3, 0);
        g.ks = 2, g.pad_y = 1 - (p >> 1), g.pad_x = 1 - (p & 1), g.b_sw = 4L * 512;
        expect("an upsample's phase GEMM (512 ch at 88 x 156)", &g, 0, W22_GEMM_MMA_MID);
    }
    /* the attention's Q K^T and P V */
    w22_mm g = conv(1, 44, 78, 1024, 3432, 1, 1, 0);
    g.b_w = 78, g.b_sh = 78L * 1024, g.b_sw = 1024, g.out_f32 = 1;
    expect("attention Q K^T", &g, 0, W22_GEMM_MMA_MID);
    /* the tile for N, the same on both paths: 128 x 96 where it pads N less than 128 x 128 */
    CHECK(w22_route_mma_tile(1024) == W22_GEMM_MMA_MID && w22_route_mma_tile(12) == W22_GEMM_MMA_SMALL &&
          w22_route_mma_tile(128) == W22_GEMM_MMA_MID && w22_route_mma_tile(96) == W22_GEMM_MMA_N96 &&
          w22_route_mma_tile(192) == W22_GEMM_MMA_N96 && w22_route_mma_tile(384) == W22_GEMM_MMA_MID &&
          w22_route_mma_tile(64) == W22_GEMM_MMA_N96 && w22_route_mma_tile(256) == W22_GEMM_MMA_MID &&
          w22_route_mma_tile(33) == W22_GEMM_MMA_N96, "the mma tile by N");
    /* every N from 1 to 4096: the tile chosen pads N no more than any other tile would */
    for (int n = 1; n <= 4096; n++) {
        const w22_gemm_kernel k = w22_route_mma_tile(n);
        const int bn = k == W22_GEMM_MMA_SMALL ? 32 : k == W22_GEMM_MMA_N96 ? 96 : 128;
        const int pad = (n + bn - 1) / bn * bn - n;
        if (n > 32 && (pad > (n + 95) / 96 * 96 - n || pad > (n + 127) / 128 * 128 - n))
            CHECK(0, "N %d: tile %d pads %d", n, bn, pad);
    }
    /* the TMA conv's tile: 256, 128, then 192 (Wan2.1); none for other N */
    CHECK(w22_route_tma_bn(512) == 256 && w22_route_tma_bn(384) == 128 && w22_route_tma_bn(192) == 192 &&
          w22_route_tma_bn(576) == 192 && w22_route_tma_bn(96) == 96 && w22_route_tma_bn(288) == 96 &&
          !w22_route_tma_bn(320) && !w22_route_tma_bn(48) && w22_route_tma_stages(192, 0) == 5 &&
          w22_route_tma_stages(96, 0) == 7, "the TMA conv's tile by N");
    /* its input channels: multiples of 64, or of 32 from 96 on (a zero half slice per tap); K stages per tap */
    CHECK(w22_route_tma_cin_ok(64) && w22_route_tma_cin_ok(96) && w22_route_tma_cin_ok(160) && !w22_route_tma_cin_ok(32) &&
          !w22_route_tma_cin_ok(48) && !w22_route_tma_cin_ok(112) && w22_route_tma_slices(96) == 2 &&
          w22_route_tma_slices(192) == 3, "the TMA conv's input channels");
    g = conv(1, 720, 1280, 96, 96, 3, 3, 1);
    expect("Wan2.1's 96-channel conv at 720 x 1280, Hopper: the TMA conv", &g, 1, W22_GEMM_TMA);
    g = conv(1, 360, 640, 192, 192, 3, 3, 1);
    expect("Wan2.1's 192-channel conv at 360 x 640, Hopper: the TMA conv", &g, 1, W22_GEMM_TMA);
    /* the 2D tiles: N <= 48 on the Hopper path, N <= 16 on the portable one */
    g = conv(1, 352, 624, 256, 36, 1, 3, 0);
    CHECK(w22_route_rows2d_takes(&g, 1) && !w22_route_rows2d_takes(&g, 0), "N 36: the 2D tiles on Hopper only");
    /* Winograd's 36 component GEMMs (fp16) as one mma.sync launch, as lower.h makes them: stage 0's 1024-channel conv
     * at 44 x 78 (11 x 20 tiles, 2 output frames, 4 input frames); outputs evenly spaced; not with uneven outputs or
     * a residual */
    w22_mm q;
    bf16 *base = (bf16 *)(uintptr_t)0x7f0000000000ull;
    const int F = 2, ci = 1024, co = 1024;
    w22_lower_wino_batch(F, 3, 11, 20, ci, co, base, base, base, &q);
    CHECK(q.batch == 36 && q.f16 && q.M == F * 11 * 20, "lower.h's Winograd batch: 36 fp16 GEMMs of 2 x 11 x 20 rows");
    const char *why = w22_route_mma_batch_blocker(&q);
    CHECK(why == NULL, "Winograd's batch at 44 x 78 on one mma launch: %s", why ? why : "-");
    q.ph_o[5] += 8;
    CHECK(w22_route_mma_batch_blocker(&q) != NULL, "a batch with uneven outputs: refused");
    q.ph_o[5] -= 8, q.res = base;
    CHECK(w22_route_mma_batch_blocker(&q) != NULL, "a batch with a residual: refused");
    q.res = NULL, q.a_frames = F + 1;
    CHECK(w22_route_mma_batch_blocker(&q) != NULL, "a batch whose frames are under a GEMM's window: refused");
    /* shared memory: every kernel the portable path launches fits the smallest part's 99 KB (the kernels'
     * static_asserts hold it at build time; the tile table here) */
    CHECK(3 * (128 + 128) * 128 <= W22_PORTABLE_SMEM && 4 * (128 + 32) * 128 <= W22_PORTABLE_SMEM &&
          4 * (130 + 48) * 128 <= W22_PORTABLE_SMEM && 2 * (612 * 64 + 9 * 16 * 64) <= W22_PORTABLE_SMEM &&
          W22_PORTABLE_SMEM == 101376, "the portable tiles within 99 KB (101376 bytes)");
}

/* ---- the TMA conv's launch (route.h section 3) on an H200's counts: 132 SMs, 66 clusters of 2 ---- */
static const w22_route_gpu h200 = {132, 66, 0};

static void tma_launch_cases(void) {
    long lim, t0;
    /* stage 2's 512-channel 3x3x3 conv at 176 x 312 (f121's frames): 429 M tiles x 2 N tiles = 858 tiles. On the
     * SMs 6.5 rounds with the split tail; as 430 pairs on 66 clusters 7 x 0.97 (the 34 left cannot split in two);
     * 6 rounds of pairs and the last 66 tiles in 2 pieces each on the SMs: 6 x 0.97 + 0.5 (v15, route.h) */
    w22_mm g = conv(1, 176, 312, 512, 512, 3, 3, 1);
    int plan = w22_route_tma_plan(&g, &h200, 0, &lim, &t0);
    CHECK(plan == W22_TMA_PAIRS_TAIL && lim == 396 && t0 == 792, "512ch 176x312: plan %d, %ld pairs, tail from tile %ld "
          "(expected pairs then a tail: 396 pairs, tile 792)", plan, lim, t0);
    CHECK(w22_route_tma_split(&g, &h200, 256, 1, 0, t0, 1) == 2, "512ch 176x312: the tail's 66 tiles in 2 pieces");
    CHECK(w22_route_tma_split(&g, &h200, 256, 2, lim, 0, 0) == 1, "512ch 176x312: the pairs' whole rounds unsplit");
    /* tests/cuda_ops' pairs-and-tail case: 99 M tiles x 2 N tiles = 100 pairs, one round of 66, then 66 tiles */
    g = conv(1, 96, 132, 128, 512, 1, 3, 0);
    plan = w22_route_tma_plan(&g, &h200, 0, &lim, &t0);
    CHECK(plan == W22_TMA_PAIRS_TAIL && lim == 66 && t0 == 132, "cuda_ops' pairs+tail case: plan %d lim %ld t0 %ld",
          plan, lim, t0);
    CHECK(w22_route_tma_split(&g, &h200, 256, 1, 0, t0, 1) == 2, "cuda_ops' pairs+tail case: its tail split in 2");
    /* the split tail's rule: 152 tiles of 27 stages on 132 CTAs: the 20 left in 3 pieces of 9 stages; 8 stages a
     * piece at least; within the slots; never a grid of one round unless one_round */
    CHECK(w22_route_split_of(152, 27, 132, 132, 0) == 3, "152 tiles: 20 in 3 pieces");
    CHECK(w22_route_split_of(152, 20, 132, 132, 0) == 2, "20 stages: 2 pieces of 10, not 3 of 6");
    CHECK(w22_route_split_of(100, 27, 132, 132, 0) == 1, "one round: no split");
    CHECK(w22_route_split_of(66, 18, 132, 132, 1) == 2, "one round that may split: 66 tiles in 2");
    CHECK(w22_route_split_of(264, 27, 132, 132, 0) == 1, "whole rounds: no split");
    /* 128-channel tiles, batch GEMMs and the side stream: tiles on the SMs, no clusters; no split on the side */
    g = conv(1, 176, 312, 512, 384, 3, 3, 1);
    CHECK(w22_route_tma_plan(&g, &h200, 0, &lim, &t0) == W22_TMA_TILES, "N 384 (128-channel tiles): no pairs");
    g = conv(1, 88, 156, 512, 512, 1, 1, 0);
    g.batch = 16;
    CHECK(w22_route_tma_plan(&g, &h200, 0, &lim, &t0) == W22_TMA_TILES, "a batch GEMM (Winograd's): tiles");
    const w22_route_gpu side = {132, 66, 1};
    g = conv(1, 76, 256, 64, 256, 3, 3, 0);
    CHECK(w22_route_tma_split(&g, &h200, 256, 1, 0, 0, 0) == 3, "76x256, 64->256: its 20-tile tail in 3 pieces");
    CHECK(w22_route_tma_split(&g, &side, 256, 1, 0, 0, 0) == 1, "on the side stream: no split tail");
    /* the tile table: 256 channels on 4 stages, 128 on 6, the TMA store's 256 on 3 */
    CHECK(w22_route_tma_stages(256, 0) == 4 && w22_route_tma_stages(128, 0) == 6 && w22_route_tma_stages(256, 4) == 3,
          "the TMA conv's tile table");
}

/* ---- fp16 operands (w22_mm.f16: Winograd F(4x4, 3x3)'s 36 component GEMMs): a batch's only ----
 * A batch as lower.h builds one: F output frames of hh x w2 tiles (F + 2 input frames a component, the temporal taps
 * as K = 3 cin), cin -> cout, n components with dense outputs one after another. */
static w22_mm f16_batch(int F, int hh, int w2, int ci, int co, int n) {
    bf16 *base = (bf16 *)(uintptr_t)0x7f0000000000ull;
    w22_mm q;
    memset(&q, 0, sizeof q);
    q.F = F, q.H = hh, q.W = w2, q.M = F * hh * w2, q.N = co;
    q.a = base, q.a_sf = (long)hh * w2 * ci, q.a_sh = (long)w2 * ci, q.a_sw = ci;
    q.cin = ci, q.kt = 3, q.ks = 1;
    q.b = base, q.b_w = co, q.b_sw = 3L * ci;
    q.out = base, q.o_sf = (long)hh * w2 * co, q.o_sh = (long)w2 * co, q.o_sw = co;
    q.batch = n, q.a_frames = F + 2, q.f16 = 1;
    for (int p = 0; p < n; p++) q.ph_o[p] = p * (int)(F * q.o_sf);
    return q;
}

static void f16_cases(void) {
    /* a single GEMM: refused on both paths (the scalar and row kernels are bf16 only), whatever its shape */
    w22_mm g = conv(1, 44, 78, 512, 512, 3, 3, 1);
    g.f16 = 1;
    for (int hopper = 0; hopper < 2; hopper++) {
        const char *why = NULL;
        const w22_gemm_kernel k = w22_route_gemm(&g, hopper, &why);
        CHECK(k == W22_GEMM_SCALAR && why && !strcmp(why, W22_ROUTE_F16_SINGLE),
              "an fp16 single GEMM (path %d): refused, got %s (%s)", hopper, kernel_names(k), why ? why : "-");
    }
    g = conv(1, 352, 624, 256, 12, 3, 3, 1); /* conv_out's shape: the 2D tiles in bf16 */
    g.f16 = 1;
    expect("an fp16 GEMM of the 2D tiles' shape: refused", &g, 1, W22_GEMM_SCALAR);
    /* the four phases as one launch: bf16 only */
    w22_mm ph[4];
    for (int p = 0; p < 4; p++) {
        ph[p] = conv(1, 88, 156, 512, 512, 1, 3, 0);
        ph[p].ks = 2, ph[p].pad_y = 1 - (p >> 1), ph[p].pad_x = 1 - (p & 1), ph[p].b_sw = 4L * 512;
        ph[p].b = ph[0].b + (size_t)p * 512 * ph[p].b_sw, ph[p].out = (bf16 *)ph[0].out + p * 64;
    }
    const char *pwhy = w22_route_phases_blocker(ph, 1);
    CHECK(pwhy == NULL, "bf16 phases: one launch (%s)", pwhy ? pwhy : "-");
    ph[2].f16 = 1;
    CHECK(w22_route_phases_blocker(ph, 1) != NULL, "fp16 phases: not one launch");
    /* Winograd F(4x4, 3x3)'s batch of 36: N 256, 512, 1024 at 704 x 1248's stages (tiles of 4 x 4 outputs); routed
     * as the bf16 batch is: the TMA conv on the Hopper path (its TMA store), the mma.sync 128 x 128 tile on the
     * portable one */
    static const struct { int F, hh, w2, ci, co; } wb[] = {{2, 11, 20, 1024, 1024}, {2, 22, 39, 512, 512},
                                                           {1, 44, 78, 256, 256},   {1, 44, 78, 512, 256},
                                                           {2, 5, 7, 256, 256}};
    for (size_t i = 0; i < sizeof wb / sizeof wb[0]; i++) {
        w22_mm q = f16_batch(wb[i].F, wb[i].hh, wb[i].w2, wb[i].ci, wb[i].co, W22_GEMM_BATCH);
        w22_mm b16 = q;
        b16.f16 = 0;
        const char *tw = w22_route_tma_batch_blocker(&q), *mw = w22_route_mma_batch_blocker(&q);
        CHECK(tw == NULL && w22_route_batch(&q, 1) == W22_BATCH_TMA && w22_route_batch(&b16, 1) == W22_BATCH_TMA,
              "fp16 batch of 36, %d -> %d at %d x %d tiles: the TMA conv on the Hopper path (%s)", wb[i].ci, wb[i].co,
              wb[i].hh, wb[i].w2, tw ? tw : "-");
        CHECK(mw == NULL && w22_route_batch(&q, 0) == W22_BATCH_MMA && w22_route_batch(&b16, 0) == W22_BATCH_MMA &&
              w22_route_mma_tile(q.N) == W22_GEMM_MMA_MID,
              "fp16 batch of 36, %d -> %d: the mma.sync 128 x 128 tile on the portable path (%s)", wb[i].ci, wb[i].co,
              mw ? mw : "-");
    }
    /* the fp16 kernels are built for those alone: an output the TMA store does not take (not dense) goes to the mma
     * kernel on the Hopper path too; N whose mma tile is not 128 x 128 (448: 128 x 96) runs on neither, where bf16
     * does */
    w22_mm q = f16_batch(2, 22, 39, 512, 512, W22_GEMM_BATCH);
    q.o_sw = 520, q.o_sh = 39L * 520, q.o_sf = 22L * q.o_sh;
    for (int p = 0; p < q.batch; p++) q.ph_o[p] = p * (int)(2 * q.o_sf);
    CHECK(w22_route_tma_batch_blocker(&q) != NULL && w22_route_batch(&q, 1) == W22_BATCH_MMA,
          "fp16 batch, outputs not dense: the mma kernel on the Hopper path");
    q.f16 = 0;
    CHECK(w22_route_batch(&q, 1) == W22_BATCH_TMA, "the same in bf16: the TMA conv (its overlapped epilogue)");
    q = f16_batch(2, 22, 39, 512, 448, W22_GEMM_BATCH);
    CHECK(w22_route_batch(&q, 0) == W22_BATCH_APART && w22_route_batch(&q, 1) == W22_BATCH_APART,
          "fp16 batch, N 448: no fp16 kernel takes it (then refused apart)");
    q.f16 = 0;
    CHECK(w22_route_batch(&q, 0) == W22_BATCH_MMA, "the same in bf16: the mma kernel's 128 x 96 tile");
    q = f16_batch(2, 22, 39, 512, 512, W22_GEMM_BATCH);
    q.res = q.a;
    CHECK(w22_route_batch(&q, 0) == W22_BATCH_APART && w22_route_batch(&q, 1) == W22_BATCH_APART,
          "fp16 batch with a residual: neither kernel");
}

/* ---- the TMA conv's epilogue ---- */
static void epilogue_cases(void) {
    const int zero[1] = {0};
    /* stage 3's 256-channel conv: bf16 out, dense rows, W 624 (boxes of 16 pixels): the overlapped tail, and the
     * TMA store; with a plain residual, that residual as extra K first */
    w22_mm g = conv(1, 352, 624, 256, 256, 3, 3, 1);
    CHECK(w22_route_tail_epilogue(&g, 1, zero, zero) == W22_EPI_OVERLAP, "256ch bf16: the overlapped epilogue");
    CHECK(w22_route_tma_store_direct_but_res(&g), "256ch 352x624: the TMA store");
    CHECK(w22_route_frame_box_px(624) == 16 && w22_route_frame_box_px(78) == 0 && w22_route_frame_box_px(1920) == 128,
          "TMA store boxes: 16 px at W 624, none at 78, 128 at 1920");
    g.res = g.a, g.r_sw = g.a_sw, g.r_sh = g.a_sh, g.r_sf = g.a_sf;
    CHECK(w22_route_residual_as_k(&g), "a plain dense residual goes in as extra K");
    g.r_csh = 1;
    CHECK(!w22_route_residual_as_k(&g), "a DupUp residual (r_csh) does not");
    /* W 78 (f121's stage 0): no box, no TMA store; the time split's outputs: none either */
    g = conv(1, 44, 78, 1024, 1024, 3, 3, 1);
    CHECK(!w22_route_tma_store_direct_but_res(&g), "W 78: no TMA store");
    g = conv(2, 88, 156, 1024, 2048, 3, 1, 0);
    g.split_c = 1024;
    CHECK(!w22_route_tma_store_direct_but_res(&g), "a time split: no TMA store");
    /* fp32 output (the attention's scores): the vector stores, not the overlapped tail; misaligned: pairs */
    g = conv(1, 44, 78, 1024, 1024, 3, 3, 1);
    g.out_f32 = 1;
    CHECK(w22_route_tail_epilogue(&g, 1, zero, zero) == W22_EPI_VEC, "fp32 output: the vector stores");
    g.out_f32 = 0, g.o_sw = 1026;
    CHECK(w22_route_tail_epilogue(&g, 1, zero, zero) == W22_EPI_PAIRS, "rows not 16-byte aligned: pair stores");
    /* offsets past an int: no overlapped epilogue (4K's 256-channel frames, 4 at once) */
    g = conv(4, 1080, 1920, 256, 256, 3, 3, 1);
    CHECK(w22_route_tail_epilogue(&g, 1, zero, zero) == W22_EPI_VEC, "4K, 4 frames: offsets past an int, vectors");
}

/* ---- the conv's step and Winograd's blocker ---- */
static void step_cases(void) {
    w22_view in = {NULL, 3, 44, 78, 512, 0, 0, 0, 2}, out = {NULL, 1, 44, 78, 512, 0, 0, 0, 2};
    in.sw = 512, in.sh = 78L * 512, in.sf = 44L * in.sh, out.sw = 512, out.sh = in.sh, out.sf = in.sf;
    w22_conv_args a;
    memset(&a, 0, sizeof a);
    a.in = in, a.out = out, a.kt = 3, a.ks = 3;
    CHECK(w22_route_winograd_blocker(&a, 512, 512, 1, 1000) == NULL, "512ch 3x3x3 at 44x78: Winograd");
    CHECK(w22_route_winograd_blocker(&a, 512, 512, 0, 1000) != NULL, "without Winograd weights (exact): direct");
    a.work = &a, a.work_bytes = 999;
    CHECK(w22_route_winograd_blocker(&a, 512, 512, 1, 1000) != NULL, "a scratch under one tile row: direct");
    a.work = NULL, a.out.w = 77, a.in.w = 77;
    CHECK(w22_route_winograd_blocker(&a, 512, 512, 1, 1000) == NULL, "odd width: Winograd (F(4x4) takes any size)");
    a.out.w = a.in.w = 78;
    CHECK(w22_route_conv_step(&a, 0, NULL) == W22_CONV_WINOGRAD, "step: Winograd");
    CHECK(w22_route_conv_step(&a, 0, "why") == W22_CONV_DIRECT, "step: direct");
    a.upsample = 1;
    CHECK(w22_route_conv_step(&a, 1, "upsample") == W22_CONV_PHASES, "step: an upsample with phase weights");
    CHECK(w22_route_conv_step(&a, 0, "upsample") == W22_CONV_DIRECT, "step: an upsample without them");
    w22_view st = out;
    a.upsample = 0, a.psum = &st;
    CHECK(w22_route_conv_step(&a, 0, "psum") == W22_CONV_PSUM, "step: the history as partial sums");
}

/* The GEMMs a decoder layer makes at F frames of H x W (the layer's input resolution): its convs' w22_conv_args as
 * exec.c passes them (channels-last views, a one-pixel border where ks is 3, the history frames in the caches), lowered
 * by lower.h, the functions conv.cu and conv_psum.cu lower through; the attention's products as attention.cu forms
 * them. At most eight, each with what it is. */
#define W22_LOWERED_MAX 8

/* A view of f frames of h x w x c at fake, 256-byte aligned addresses (nothing is read): a one-pixel border where
 * border, the pointer at pixel (0, 0) inside it */
static w22_view view_at(uintptr_t base, int f, int h, int w, int c, int border) {
    w22_view v;
    memset(&v, 0, sizeof v);
    v.f = f, v.h = h, v.w = w, v.c = c, v.es = 2;
    v.sw = c, v.sh = (long)(w + 2 * border) * c, v.sf = (long)(h + 2 * border) * v.sh;
    v.ptr = (void *)(base + (border ? 2 * (uintptr_t)(v.sh + v.sw) : 0));
    return v;
}

static const uintptr_t IN = 0x7f0000000000ull, OUT = 0x7e0000000000ull, HIST = 0x7d0000000000ull,
                       RES = 0x7c0000000000ull, WTS = 0x7b0000000000ull;

/* One conv's args: F output frames (kt 3 with history: F fresh frames in; without: F + kt - 1) of H x W, cin -> cout */
typedef struct {
    w22_conv_args a;
    w22_view hist[2], res, sc, dup, ps;
} conv_call;
static void conv_call_make(conv_call *k, int F, int H, int W, int cin, int cout, int kt, int ks, int hist) {
    memset(k, 0, sizeof *k);
    const int b = ks == 3;
    k->a.kt = kt, k->a.ks = ks;
    k->a.in = view_at(IN, hist ? F : F + kt - 1, H, W, cin, b);
    if (hist)
        for (int i = 0; i < 2; i++) k->a.hist[i] = view_at(HIST + (uintptr_t)i * 0x100000000ull, 1, H, W, cin, b);
    k->a.out = view_at(OUT, F, H, W, cout, 0);
}
static w22_conv_operands operands(int cin, int cout) {
    w22_conv_operands o;
    memset(&o, 0, sizeof o);
    o.cin = cin, o.cout = cout, o.dev = (const bf16 *)WTS, o.dev_phase = (const bf16 *)(WTS + 0x40000000ull);
    return o;
}

/* A stage's first chunk (backend.h's hist_zero 2): a one-frame conv lowers to the weight's last temporal tap alone
 * (lower.h's w22_lower_zero_hist): K 9 cin from tap 18 of the [cout][27][cin] rows, no history; its Winograd batch to
 * one input frame and the U rows' last tap; on the same kernels as the full conv, both paths. More frames, an
 * upsample or hist_zero 1 keep the three taps. */
static void zero_hist_cases(void) {
    static const int sizes[][4] = {{352, 624, 256, 256}, {176, 312, 512, 512}, {44, 78, 1024, 1024},
                                   {90, 160, 384, 384}, {720, 1280, 96, 96}};
    for (int i = 0; i < 5; i++) {
        const int H = sizes[i][0], W = sizes[i][1], ci = sizes[i][2], co = sizes[i][3];
        conv_call k;
        conv_call_make(&k, 1, H, W, ci, co, 3, 3, 1);
        const w22_conv_operands o = operands(ci, co);
        w22_mm full, z;
        w22_lower_direct(&k.a, &o, &full);
        k.a.hist_zero = 2;
        CHECK(w22_lower_zero_hist(&k.a), "%dx%d c%d: a first chunk's one frame takes the last tap alone", H, W, ci);
        w22_lower_direct(&k.a, &o, &z);
        CHECK(full.kt == 3 && full.hist_n == 2 && z.kt == 1 && z.hist_n == 0 && !z.a_hist[0] && z.M == full.M &&
                  z.b == full.b + 18L * ci && z.b_sw == full.b_sw && z.b_sw == 27L * ci && z.a == full.a,
              "%dx%d c%d: the zero-history GEMM (kt %d, hist %d, b +%ld, b_sw %ld)", H, W, ci, z.kt, z.hist_n,
              (long)(z.b - full.b), z.b_sw);
        for (int hopper = 0; hopper <= 1; hopper++) {
            const char *w1 = NULL, *w2 = NULL;
            const w22_gemm_kernel kf = w22_route_gemm(&full, hopper, &w1), kz = w22_route_gemm(&z, hopper, &w2);
            CHECK(kz == kf && kz != W22_GEMM_SCALAR, "%dx%d c%d, the %s path: the zero-history GEMM on %s, the full "
                  "one on %s (%s)", H, W, ci, hopper ? "Hopper" : "portable", kernel_names(kz), kernel_names(kf),
                  w2 ? w2 : "-");
        }
        w22_mm q3, q1;
        bf16 *u = (bf16 *)(uintptr_t)0x7a0000000000ull;
        w22_lower_wino_batch(1, 3, 8, (W + 3) / 4, ci, co, u, u, u, &q3);
        w22_lower_wino_batch(1, 1, 8, (W + 3) / 4, ci, co, u, u, u, &q1);
        CHECK(q3.a_frames == 3 && q1.a_frames == 1 && q1.kt == 1 && q1.b == u + 2L * ci && q1.b_sw == 3L * ci,
              "%dx%d c%d: the zero-history Winograd batch (frames %ld, b +%ld)", H, W, ci, q1.a_frames,
              (long)(q1.b - u));
        for (int hopper = 0; hopper <= 1 && ci >= w22_route_wino_min_default(hopper); hopper++) /* Winograd's convs */
            CHECK(w22_route_batch(&q1, hopper) == w22_route_batch(&q3, hopper) &&
                      w22_route_batch(&q1, hopper) != W22_BATCH_APART,
                  "%dx%d c%d, the %s path: the zero-history batch launched as the full one", H, W, ci,
                  hopper ? "Hopper" : "portable");
        /* not taken: two frames, hist_zero 1, an upsample */
        conv_call k2;
        conv_call_make(&k2, 2, H, W, ci, co, 3, 3, 1);
        k2.a.hist_zero = 2;
        CHECK(!w22_lower_zero_hist(&k2.a), "two frames: the three taps");
        k.a.hist_zero = 1;
        CHECK(!w22_lower_zero_hist(&k.a), "hist_zero 1: the three taps");
    }
}

/* The kernel a lowered GEMM runs on (a batch: one launch of the TMA conv or of the mma.sync kernel, else a component
 * apart), and why not a faster one */
static w22_gemm_kernel route_lowered(const w22_mm *g, int hopper, const char **why) {
    *why = NULL;
    if (!g->batch) return w22_route_gemm(g, hopper, why);
    switch (w22_route_batch(g, hopper)) {
    case W22_BATCH_TMA: return W22_GEMM_TMA;
    case W22_BATCH_MMA: return w22_route_mma_tile(g->N);
    default: {
        w22_mm one = *g;
        one.batch = 0, one.a_frames = 0;
        memset(one.ph_o, 0, sizeof one.ph_o);
        return w22_route_gemm(&one, hopper, why);
    }
    }
}

static int lower_layer(const w22_model *m, int li, int F, int H, int W, int hopper, lowered out[W22_LOWERED_MAX]) {
    const w22_layer *L = &m->layers[li];
    const int ci = L->cin, co = L->cout;
    int n = 0;
    conv_call k;
    w22_conv_operands o = operands(ci, co);
    switch (L->kind) {
    case W22_L_POST_QUANT:
        conv_call_make(&k, F, H, W, ci, co, 1, 1, 0);
        out[n].what = "1x1x1";
        w22_lower_direct(&k.a, &o, &out[n++].g);
        break;
    case W22_L_CONV_IN:
        conv_call_make(&k, F, H, W, ci, co, 3, 3, 1);
        n += conv_gemms(&k.a, &o, k.a.kt, k.a.ks, k.a.ks, k.a.upsample, hopper, "3x3x3 conv_in", out + n);
        break;
    case W22_L_RESBLOCK: {
        conv_call_make(&k, F, H, W, ci, co, 3, 3, 1);
        n += conv_gemms(&k.a, &o, k.a.kt, k.a.ks, k.a.ks, k.a.upsample, hopper, "conv1", out + n);
        conv_call_make(&k, F, H, W, co, co, 3, 3, 1);
        o = operands(co, co);
        if (ci != co) { /* the 1x1 shortcut as extra K (exec.c's run_resblock passes it to conv2) */
            k.sc = view_at(RES, F, H, W, ci, 0);
            k.a.sc_in = &k.sc;
            o.sc_cin = ci, o.sc_dev = (const bf16 *)(WTS + 0x80000000ull);
        } else { /* the residual in place */
            k.res = k.a.out;
            k.a.residual = &k.res;
        }
        n += conv_gemms(&k.a, &o, k.a.kt, k.a.ks, k.a.ks, k.a.upsample, hopper, ci != co ? "conv2 + shortcut" : "conv2 + residual",
                        out + n);
        break;
    }
    case W22_L_ATTN: {
        conv_call_make(&k, 1, H, W, ci, 3 * ci, 1, 1, 0);
        o = operands(ci, 3 * ci);
        out[n].what = "to_qkv";
        w22_lower_direct(&k.a, &o, &out[n++].g);
        /* the products as attention.cu forms them (lower.h), the whole frame one band: q and the output are the
         * qkv and proj views' pixels (channels-last), the scratch's S, Pm, Vt and Kp dense */
        const int Pp = (H * W + 7) / 8 * 8;
        w22_mm g;
        w22_lower_attn_scores((const bf16 *)IN, (long)W * 3 * ci, 3 * ci, H, W, ci, Pp, (const bf16 *)WTS,
                              (float *)RES, &g);
        out[n++] = (lowered){"Q K^T", g};
        w22_lower_attn_values((const bf16 *)HIST, H, W, ci, Pp, (const bf16 *)(WTS + 0x40000000ull), (bf16 *)OUT,
                              (long)W * ci, ci, &g);
        out[n++] = (lowered){"P V", g};
        conv_call_make(&k, 1, H, W, ci, ci, 1, 1, 0);
        o = operands(ci, ci);
        k.res = view_at(RES, 1, H, W, ci, 0);
        k.a.residual = &k.res;
        out[n].what = "proj";
        w22_lower_direct(&k.a, &o, &out[n++].g);
        break;
    }
    case W22_L_UPSAMPLE: {
        int f = F;
        if (L->temporal) { /* time_conv C -> 2C, its output split over two frames */
            conv_call_make(&k, F, H, W, ci, 2 * ci, 3, 1, 1);
            k.a.out = view_at(OUT, 2 * F, H, W, ci, 0);
            k.a.time_split = 1;
            o = operands(ci, 2 * ci);
            out[n].what = "time_conv";
            w22_lower_direct(&k.a, &o, &out[n++].g);
            f = 2 * F;
        }
        /* nearest 2x + 3x3 as four 2x2 phase GEMMs on the low-resolution grid (lower.h), C -> cout, and the
         * Wan2.2 up block's DupUp shortcut as their residual where it fuses */
        conv_call_make(&k, f, H, W, ci, co, 1, 3, 0);
        k.a.upsample = 1;
        k.a.out = view_at(OUT, f, 2 * H, 2 * W, co, 0);
        if (li + 1 < m->nlayers && m->layers[li + 1].kind == W22_L_DUPUP) { /* exec.c's run_upsample */
            int bi = li;
            while (bi > 0 && m->layers[bi].kind != W22_L_BLOCK_BEGIN) bi--;
            k.dup = view_at(RES, F, H, W, m->layers[bi].cin, 0);
            k.a.dup_in = &k.dup, k.a.dup_ft = L->temporal ? 2 : 1;
        }
        o = operands(ci, co);
        n += conv_gemms(&k.a, &o, k.a.kt, k.a.ks, k.a.ks, k.a.upsample, hopper, "upsample", out + n);
        break;
    }
    case W22_L_HEAD: { /* the three temporal taps as one 3x3 GEMM of even N, fp32 (conv_psum.cu) */
        conv_call_make(&k, F, H, W, ci, co, 3, 3, 0);
        k.a.in = view_at(IN, F, H, W, ci, 1);
        k.ps = view_at(RES, 2, H, W, co, 0);
        k.a.psum = &k.ps;
        k.a.psum_tmp = view_at(OUT + 0x10000000000ull, F, H, W, w22_psum_tmp_channels(co), 0);
        k.a.psum_tmp.es = 4, k.a.psum_tmp.sh *= 1;
        n += conv_gemms(&k.a, &o, 3, 3, 3, 0, hopper, "conv_out", out + n);
        break;
    }
    default: break;
    }
    return n;
}

/* The kernel the Wan2.1 table below pins on the Hopper path for a lowered GEMM (-1: any tensor-core one). */
static int wan21_want(const w22_layer *L, const char *what) {
    switch (L->kind) {
    case W22_L_POST_QUANT: return W22_GEMM_MMA_SMALL;
    case W22_L_CONV_IN: return W22_GEMM_MMA_MID;
    /* every resblock conv on the TMA conv: tiles 128 (384 channels), 192 and 96; cin 96 in slices of 64; but the
     * 384-channel convs' Winograd batches (the threshold 256 takes them, session 41) on the mma.sync kernel's 128 x 128
     * tile: the TMA conv's fp16 batch is built for the TMA store's 256-channel tile alone */
    case W22_L_RESBLOCK: return !strcmp(what, "Winograd's batch") ? W22_GEMM_MMA_MID : W22_GEMM_TMA;
    case W22_L_ATTN: return !strcmp(what, "to_qkv") || !strcmp(what, "proj") ? W22_GEMM_TMA : -1;
    /* the time_conv and every upsampler's phases (to 192 and to 96 channels) on the TMA conv */
    case W22_L_UPSAMPLE: return W22_GEMM_TMA;
    case W22_L_HEAD: return W22_GEMM_ROWS2D; /* the partial sums (N 10) on the 2D tiles: cin 96 in 32-channel slices */
    default: return -1;
    }
}

/* One GEMM of the Wan2.1 decoder: never the scalar kernel, and the kernel the table below pins (want < 0: any
 * tensor-core one). */
static void wan21_gemm(const char *layer, const char *what, const w22_mm *g, int want) {
    const char *why = NULL;
    const w22_gemm_kernel k = route_lowered(g, 1, &why);
    printf("  %-40s %-22s M %8d N %5d cin %5d: %s\n", layer, what, g->M, g->N, g->cin, kernel_names(k));
    CHECK(k != W22_GEMM_SCALAR, "Wan2.1 %s %s (N %d, cin %d): the scalar kernel (%s)", layer, what, g->N, g->cin,
          why ? why : "-");
    if (want >= 0)
        CHECK((int)k == want, "Wan2.1 %s %s: routed to %s, expected %s", layer, what, kernel_names(k),
              kernel_names(want));
}

/* The Wan2.1 VAE's decoder (w22_config_wan21) at 1280 x 720 (latents 90 x 160), every GEMM its layers make
 * (lower_layer), walked from the model's layer list (not restated): stage 0 in one-frame passes, stages 1 and 2 in
 * chunks of 2, stage 3 of 1 (plan.c's default chunks). Its channels (96, 192, 384) are not multiples of 128 or 256
 * where they are narrowest: the 384-channel convs take the TMA conv (128-channel tiles), the 192- and 96-channel ones
 * the mma.sync kernel; the head's partial-sums GEMM runs N = 10 (3 x 3 rounded up to even: an odd N goes to the
 * scalar kernel, which its N 9 would). */
static void wan21_cases(void) {
    w22_config cfg;
    w22_config_wan21(&cfg);
    static w22_model m;
    w22_model_build(&cfg, &m);
    const int h = 90, w = 160, chunk[4] = {1, 2, 2, 1};
    printf("Wan2.1 at 1280x720 (latents 90x160):\n");
    for (int i = 0; i < m.nlayers; i++) {
        const w22_layer *L = &m.layers[i];
        lowered gs[W22_LOWERED_MAX];
        const int n = lower_layer(&m, i, chunk[L->level], h << L->level, w << L->level, 1, gs); /* the Hopper path's */
        for (int j = 0; j < n; j++) wan21_gemm(L->prefix, gs[j].what, &gs[j].g, wan21_want(L, gs[j].what));
        if (L->kind == W22_L_HEAD) {
            CHECK(gs[0].g.N == 10, "the head's partial sums for 3 outputs: %d channels, expected 10", gs[0].g.N);
            w22_mm g = gs[0].g;
            g.N = g.b_w = 3 * L->cout, g.o_sw = 3 * L->cout, g.o_sh = (long)g.W * g.o_sw, g.o_sf = (long)g.H * g.o_sh;
            const char *why = NULL;
            CHECK(w22_route_gemm(&g, 1, &why) == W22_GEMM_SCALAR, "N 9 (no padding): expected the scalar kernel");
        }
    }
}

/* Issue 47.11's census: every latent size 1..160 x 1..160, both VAEs (Wan2.2 TI2V-5B, Wan2.1), both kernel paths
 * (Hopper, portable): no GEMM of the decoder on the scalar kernel (the one cliff route.h allows: 100x slower, issue
 * 27's 105 s frame, issue 46's 52 ms attention). Each failure names the first size, model, path and layer. */
static void census(void) {
    static w22_model ms[2];
    w22_config cfg[2];
    w22_config_default(&cfg[0]);
    w22_config_wan21(&cfg[1]);
    const char *const model_name[2] = {"Wan2.2", "Wan2.1"};
    const int chunk[4] = {1, 2, 2, 1};
    long gemms = 0, scalar = 0, expected = 0;
    for (int mi = 0; mi < 2; mi++) {
        w22_model_build(&cfg[mi], &ms[mi]);
        for (int hopper = 0; hopper <= 1; hopper++) {
            for (int i = 0; i < ms[mi].nlayers; i++) { /* every size lowers a layer to the same GEMMs (on one path) */
                lowered gs[W22_LOWERED_MAX];
                expected += 160L * 160 * lower_layer(&ms[mi], i, 1, 8, 8, hopper, gs);
            }
            for (int h = 1; h <= 160; h++)
                for (int w = 1; w <= 160; w++)
                    for (int i = 0; i < ms[mi].nlayers; i++) {
                        const w22_layer *L = &ms[mi].layers[i];
                        lowered gs[W22_LOWERED_MAX];
                        const int n = lower_layer(&ms[mi], i, chunk[L->level], h << L->level, w << L->level, hopper, gs);
                        for (int j = 0; j < n; j++, gemms++) {
                            const char *why = NULL;
                            if (route_lowered(&gs[j].g, hopper, &why) != W22_GEMM_SCALAR) continue;
                            if (scalar++ < 5)
                                CHECK(0, "census: %s latents %dx%d, the %s path: %s %s (M %d, N %d, cin %d) on the "
                                      "scalar kernel (%s)", model_name[mi], h, w, hopper ? "Hopper" : "portable",
                                      L->prefix, gs[j].what, gs[j].g.M, gs[j].g.N, gs[j].g.cin, why ? why : "-");
                        }
                    }
        }
    }
    CHECK(scalar == 0, "census: %ld of %ld GEMMs on the scalar kernel", scalar, gemms);
    CHECK(gemms == expected && gemms > 0, "census: %ld GEMMs walked, expected %ld", gemms, expected);
    printf("census: %ld GEMMs (latents 1..160 x 1..160, Wan2.2 and Wan2.1, both paths): %ld on the scalar kernel\n",
           gemms, scalar);
}

int main(void) {
    wan21_cases();
    census();
    zero_hist_cases();
    /* 704 x 1248 (latents 44 x 78): the stages' 3x3x3 convs with history, the upsamplers' time convs, conv_in */
    w22_mm g = conv(1, 44, 78, 1024, 1024, 3, 3, 1);
    expect("stage 0's 1024-channel 3x3x3 conv", &g, 1, W22_GEMM_TMA);
    expect("the same on the portable path", &g, 0, W22_GEMM_MMA_MID);
    g = conv(1, 352, 624, 256, 256, 3, 3, 1);
    expect("stage 3's 256-channel conv", &g, 1, W22_GEMM_TMA);
    g = conv(2, 88, 156, 1024, 2048, 3, 1, 0);
    expect("a time_conv (3x1x1, N 2 cout)", &g, 1, W22_GEMM_TMA);
    g = conv(1, 44, 78, 48, 1024, 3, 3, 1);
    expect("conv_in (cin 48: not a multiple of 64)", &g, 1, W22_GEMM_MMA_MID);
    g = conv(1, 352, 624, 256, 12, 3, 3, 1);
    expect("conv_out (N 12, 352 rows)", &g, 1, W22_GEMM_ROWS2D);
    g = conv(1, 4, 624, 256, 12, 3, 3, 1);
    expect("conv_out of 4 rows: the mma.sync 128 x 32 tile (the row kernel, which no decode reached, deleted)", &g, 1,
           W22_GEMM_MMA_SMALL);
    g = conv(1, 352, 624, 256, 36, 1, 3, 0);
    expect("the head's partial-sums GEMM (N 36)", &g, 1, W22_GEMM_ROWS2D);
    g = conv(1, 4, 624, 256, 36, 1, 3, 0);
    expect("the partial-sums GEMM under 6 rows", &g, 1, W22_GEMM_MMA_N96);
    /* the attention's Q K^T: N = the frame's pixels (3432), weights = K's pixels, not one [N][K] block */
    g = conv(1, 44, 78, 1024, 3432, 1, 1, 0);
    g.b_w = 78, g.b_sh = 78L * 1024, g.b_sw = 1024, g.out_f32 = 1;
    expect("attention Q K^T", &g, 1, W22_GEMM_MMA_MID);
    /* 4K (3840 x 2160: latents 135 x 240; stage 3 at 1080 x 1920, 256 channels): four frames of it exceed an int */
    g = conv(4, 1080, 1920, 256, 256, 3, 3, 1);
    CHECK(g.a_sf * (g.F + g.kt) > INT_MAX && w22_route_int_blocker(&g) == NULL,
          "4K stage 3: its input past an int in all, each frame's within (the mma kernel's frames are 64-bit bases)");
    expect("4K stage 3's conv (issue 27's cliff)", &g, 1, W22_GEMM_TMA);
    expect("4K stage 3 on the portable path: 64-bit frame bases, the mma kernel", &g, 0, W22_GEMM_MMA_MID);
    /* 4096x2160's stage-3 conv with the 512-channel shortcut of its first resblock (a frame of 1.13 G elements at
     * 1080 x 2048): its int offsets hold one frame's (the portable path's mma kernel), not two */
    g = conv(1, 1080, 2048, 256, 256, 3, 3, 1);
    g.sc = g.a, g.sc_cin = 512, g.sc_sw = 512, g.sc_sh = 2048L * 512, g.sc_sf = 1080L * g.sc_sh, g.scb = g.b;
    expect("4096x2160's conv with a 512-channel shortcut, one frame, portable: the mma kernel", &g, 0, W22_GEMM_MMA_MID);
    g.F = 2, g.M *= 2;
    expect("the same over two frames (past an int): scalar", &g, 0, W22_GEMM_SCALAR);
    g = conv(1, 4320, 2160, 256, 256, 3, 3, 1); /* one frame of 2.4 G elements: past an int within the frame */
    expect("a frame past an int on the portable path: scalar", &g, 0, W22_GEMM_SCALAR);
    g = conv(4, 1080, 2048, 256, 12, 3, 3, 1);
    expect("4096 x 2160's conv_out (64-bit frame bases)", &g, 1, W22_GEMM_ROWS2D);
    /* what must fall back */
    g = conv(1, 8, 8, 12, 16, 3, 3, 1);
    expect("cin 12 (not a multiple of 8)", &g, 1, W22_GEMM_SCALAR);
    g = conv(1, 8, 8, 64, 17, 3, 3, 1);
    expect("N odd", &g, 1, W22_GEMM_SCALAR);
    g = conv(1, 8, 8, 64, 128, 3, 3, 1);
    g.a = (const bf16 *)((const char *)g.a + 2);
    expect("an input 2 bytes off 16-byte alignment", &g, 1, W22_GEMM_SCALAR);
    g = conv(1, 8, 8, 64, 128, 3, 3, 1);
    g.upsample = 1, g.H = 16, g.W = 16, g.M = 256;
    expect("an upsample read (no phases)", &g, 1, W22_GEMM_MMA_MID);
    portable_cases();
    tma_launch_cases();
    epilogue_cases();
    step_cases();
    f16_cases();
    return t_finish("test_route");
}
