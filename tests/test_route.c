/* Which kernel a GEMM runs on (src/cuda/route.h), on the CPU: the decoder's real GEMMs at 704x1248 and at 4K, and the
 * shapes that must fall back. route.h is the one place that decides; this pins its answers, so that a change of
 * routing shows here before a GPU sees it (issue 29's one dispatch), and keeps issue 27's 4K cliff fixed: past 4K
 * UHD the 256-channel convs' input offsets exceed an int, and they must still reach the TMA conv (64-bit tensor
 * maps), not the scalar kernel (105 s for one 3840x2160 frame when the int check came first). */
#include <stdio.h>
#include <string.h>
#include "cuda/route.h"
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

static void expect(const char *what, const w22_mm *g, int wgmma_on, w22_gemm_kernel want) {
    const char *why = NULL;
    const w22_gemm_kernel k = w22_route_gemm(g, wgmma_on, &why);
    static const char *const names[] = {"scalar", "tma", "rows2d", "rows", "mma small", "mma mid", "mma big"};
    CHECK(k == want, "%s: routed to %s (%s), expected %s", what, names[k], why ? why : "-", names[want]);
}

int main(void) {
    /* 704 x 1248 (latents 44 x 78): the stages' 3x3x3 convs with history, the upsamplers' time convs, conv_in */
    w22_mm g = conv(1, 44, 78, 1024, 1024, 3, 3, 1);
    expect("stage 0's 1024-channel 3x3x3 conv", &g, 1, W22_GEMM_TMA);
    expect("the same without the wgmma conv", &g, 0, W22_GEMM_MMA_BIG);
    g = conv(1, 352, 624, 256, 256, 3, 3, 1);
    expect("stage 3's 256-channel conv", &g, 1, W22_GEMM_TMA);
    g = conv(2, 88, 156, 1024, 2048, 3, 1, 0);
    expect("a time_conv (3x1x1, N 2 cout)", &g, 1, W22_GEMM_TMA);
    g = conv(1, 44, 78, 48, 1024, 3, 3, 1);
    expect("conv_in (cin 48: not a multiple of 64)", &g, 1, W22_GEMM_MMA_BIG);
    g = conv(1, 352, 624, 256, 12, 3, 3, 1);
    expect("conv_out (N 12, 352 rows)", &g, 1, W22_GEMM_ROWS2D);
    g = conv(1, 4, 624, 256, 12, 3, 3, 1);
    expect("conv_out of 4 rows (a rank's edge)", &g, 1, W22_GEMM_ROWS);
    g = conv(1, 352, 624, 256, 36, 1, 3, 0);
    expect("the head's partial-sums GEMM (N 36)", &g, 1, W22_GEMM_ROWS2D);
    g = conv(1, 4, 624, 256, 36, 1, 3, 0);
    expect("the partial-sums GEMM under 6 rows", &g, 1, W22_GEMM_MMA_MID);
    /* the attention's Q K^T: N = the frame's pixels (3432), weights = K's pixels, not one [N][K] block */
    g = conv(1, 44, 78, 1024, 3432, 1, 1, 0);
    g.b_w = 78, g.b_sh = 78L * 1024, g.b_sw = 1024, g.out_f32 = 1;
    expect("attention Q K^T", &g, 1, W22_GEMM_MMA_BIG);
    /* 4K (3840 x 2160: latents 135 x 240; stage 3 at 1080 x 1920, 256 channels): four frames of it exceed an int */
    g = conv(4, 1080, 1920, 256, 256, 3, 3, 1);
    CHECK(w22_route_int_blocker(&g) != NULL, "4K stage 3: expected input offsets past an int");
    expect("4K stage 3's conv (issue 27's cliff)", &g, 1, W22_GEMM_TMA);
    expect("4K stage 3 without the wgmma conv: the int check sends it to scalar", &g, 0, W22_GEMM_SCALAR);
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
    return t_finish("test_route");
}
