/* The GPU backend's weight layouts made on every core (src/weights/layout.c) give the same bits as the serial
 * loops they replace (copied here as the reference), or (Winograd, phases) compute what they are for, at odd and even
 * channel counts; then the time of both over
 * the TI2V-5B decoder's conv weights on this machine (issue 30: the open's host work). Random weights. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "common.h"
#include "testutil.h"
#include "weights/layout.h"
#include "weights/winograd4.h"
#include "cuda/route.h"
#include "wan22vae.h"

static void ref_conv(const float *data, int cout, int cin, int vol, uint16_t *h) {
    for (int o = 0; o < cout; o++)
        for (int ci = 0; ci < cin; ci++)
            for (int t = 0; t < vol; t++)
                h[((size_t)o * vol + t) * cin + ci] = w22_f32_to_bf16(data[((size_t)o * cin + ci) * vol + t]);
}

/* Winograd F(4x4, 3x3)'s 36 components U = G g G^T per (o, i, dt) of float weights, fp16, [36][cout][3][cin]: what
 * winograd.cu's w22_wino_u_kernel makes on the GPU (there from the bf16 direct layout), here to check winograd4.h's
 * matrices by what they are for (below). */
static void wino_u_host(const float *data, int co, int ci, uint16_t *out) {
    static const float G[W22_W4_N][3] = W22_W4_G;
    const size_t per = (size_t)co * 3 * ci;
    for (int o = 0; o < co; o++)
        for (int i = 0; i < ci; i++)
            for (int dt = 0; dt < 3; dt++) {
                const float *g = data + (((size_t)o * ci + i) * 3 + dt) * 9;
                float gt[3][W22_W4_N]; /* g G^T */
                for (int a = 0; a < 3; a++)
                    for (int k = 0; k < W22_W4_N; k++)
                        gt[a][k] = g[a * 3] * G[k][0] + g[a * 3 + 1] * G[k][1] + g[a * 3 + 2] * G[k][2];
                for (int r = 0; r < W22_W4_N; r++)
                    for (int k = 0; k < W22_W4_N; k++)
                        out[(size_t)(W22_W4_N * r + k) * per + ((size_t)o * 3 + dt) * ci + i] =
                            w22_f32_to_f16(G[r][0] * gt[0][k] + G[r][1] * gt[1][k] + G[r][2] * gt[2][k]);
            }
}

/* The Winograd components by what they are for: with V = B^T d B of a random 6 x 6 window d per input channel, A^T (sum over
 * cin of U . V) A must be the direct 3x3 correlation of d with the float weights, for every output channel and
 * temporal tap, at the window's 4 x 4 outputs (winograd4.h's matrices, in double here). Tolerance: what U's fp16
 * rounding allows, the same sum over |A^T| |U| 2^-11 |V| |A| (fp16: 11 significant bits, subnormals below 2^-14 at an
 * absolute 2^-25) plus 1e-9. Returns the worst error over that tolerance (<= 1: within). */
static double wino_vs_direct_conv(const float *w, int co, int ci, const uint16_t *u) {
    static const float BT[6][6] = W22_W4_BT, AT[4][6] = W22_W4_AT;
    const size_t per = (size_t)co * 3 * ci;
    double *d = malloc((size_t)ci * 36 * 8), *v = malloc((size_t)ci * 36 * 8), worst = 0;
    uint64_t st = 12345;
    for (int c = 0; c < ci; c++)
        for (int k = 0; k < 36; k++) {
            st = st * 6364136223846793005ull + 1442695040888963407ull;
            d[c * 36 + k] = (double)(st >> 11) / 9007199254740992.0 * 2 - 1;
        }
    for (int c = 0; c < ci; c++) /* V = B^T d B */
        for (int i = 0; i < 6; i++)
            for (int j = 0; j < 6; j++) {
                double x = 0;
                for (int r = 0; r < 6; r++)
                    for (int q = 0; q < 6; q++) x += BT[i][r] * d[c * 36 + r * 6 + q] * BT[j][q];
                v[c * 36 + i * 6 + j] = x;
            }
    for (int o = 0; o < co; o++)
        for (int dt = 0; dt < 3; dt++) {
            double m[36] = {0}, mb[36] = {0};
            for (int c = 0; c < ci; c++)
                for (int k = 0; k < 36; k++) {
                    const double uu = w22_f16_to_f32(u[(size_t)k * per + ((size_t)o * 3 + dt) * ci + c]);
                    m[k] += uu * v[c * 36 + k];
                    mb[k] += (fabs(uu) * 0x1p-11 + 0x1p-25) * fabs(v[c * 36 + k]);
                }
            for (int a = 0; a < 4; a++)
                for (int b = 0; b < 4; b++) {
                    double y = 0, tol = 1e-9, ref = 0;
                    for (int i = 0; i < 6; i++)
                        for (int j = 0; j < 6; j++) {
                            y += AT[a][i] * m[i * 6 + j] * AT[b][j];
                            tol += fabs(AT[a][i]) * mb[i * 6 + j] * fabs(AT[b][j]);
                        }
                    for (int c = 0; c < ci; c++)
                        for (int ky = 0; ky < 3; ky++)
                            for (int kx = 0; kx < 3; kx++)
                                ref += (double)w[(((size_t)o * ci + c) * 3 + dt) * 9 + ky * 3 + kx] *
                                       d[c * 36 + (a + ky) * 6 + b + kx];
                    const double e = fabs(y - ref) / tol;
                    if (e > worst) worst = e;
                }
        }
    free(d), free(v);
    return worst;
}

/* The phase layout by what it is for, not by a copy of its loops: for each phase (py, px), the 2x2 conv of its
 * weights over the low-resolution input x with pads (1 - py, 1 - px) must equal the 3x3 conv (pad 1) of x upsampled
 * by nearest 2x at output pixel (2 i + py, 2 j + px). On a random x of cin channels at 3 x 4 (every border case),
 * every output channel. Each output's tolerance is what the bf16 rounding of its phase weights allows (a weight is
 * a float sum of up to four taps rounded once: within 2^-8 of its magnitude, plus float noise): the sum over its
 * terms of |x| |w_bf16| 2^-8 (1 + 2^-6) + 1e-6. Returns the worst error over that tolerance (<= 1: within). */
static double phases_vs_upsample_conv(const float *w, int cout, int cin, const uint16_t *ph) {
    enum { H = 3, W = 4 };
    float *x = malloc((size_t)H * W * cin * sizeof *x);
    t_fill_uniform(x, (size_t)H * W * cin, 7, -1.f, 1.f);
    double worst = 0;
    for (int o = 0; o < cout; o++)
        for (int Y = 0; Y < 2 * H; Y++)
            for (int X = 0; X < 2 * W; X++) {
                double want = 0, got = 0, tol = 1e-6;
                for (int ky = 0; ky < 3; ky++)
                    for (int kx = 0; kx < 3; kx++) {
                        const int uy = Y + ky - 1, ux = X + kx - 1; /* the upsampled image, zero outside */
                        if (uy < 0 || uy >= 2 * H || ux < 0 || ux >= 2 * W) continue;
                        for (int c = 0; c < cin; c++)
                            want += (double)w[(((size_t)o * cin + c) * 3 + ky) * 3 + kx] *
                                    x[((size_t)(uy >> 1) * W + (ux >> 1)) * cin + c];
                    }
                const int py = Y & 1, px = X & 1, i = Y >> 1, j = X >> 1;
                for (int d = 0; d < 4; d++) {
                    const int yy = i + (d >> 1) - (1 - py), xx = j + (d & 1) - (1 - px);
                    if (yy < 0 || yy >= H || xx < 0 || xx >= W) continue;
                    for (int c = 0; c < cin; c++) {
                        const double v = w22_bf16_to_f32(ph[((((size_t)(py * 2 + px) * cout + o) * 4) + d) * cin + c]),
                                     xv = x[((size_t)yy * W + xx) * cin + c];
                        got += v * xv;
                        tol += fabs(v * xv) * (1.0 / 256.0) * (1.0 + 1.0 / 64.0);
                    }
                }
                const double e = fabs(got - want) / tol;
                if (e > worst) worst = e;
            }
    free(x);
    return worst;
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(void) {
    static const int shapes[][3] = {{64, 48, 27}, {7, 5, 1}, {33, 16, 9}, {1, 3, 27}, {40, 24, 27}, {3, 130, 9},
                                       {130, 37, 27}, {200, 3, 9}, {65, 17, 1}};
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
        const int co = shapes[k][0], ci = shapes[k][1], vol = shapes[k][2];
        const size_t n = (size_t)co * ci * vol, nw = (size_t)36 * co * 3 * ci, np = (size_t)16 * co * ci;
        float *d = malloc(n * 4);
        t_fill_uniform(d, n, 100 + k, -1.f, 1.f);
        uint16_t *a = malloc((nw > n ? nw : n) * 2), *b = malloc((nw > n ? nw : n) * 2);
        memset(a, 0xab, n * 2), memset(b, 0xcd, n * 2);
        ref_conv(d, co, ci, vol, a);
        w22_layout_conv_bf16(d, co, ci, vol, b);
        CHECK(!memcmp(a, b, n * 2), "conv layout %dx%dx%d differs from the serial loops", co, ci, vol);
        if (vol == 27) {
            memset(b, 0xcd, nw * 2);
            wino_u_host(d, co, ci, b);
            const double err = wino_vs_direct_conv(d, co, ci, b);
            CHECK(err <= 1.0, "Winograd F(4x4, 3x3) layout %dx%d: its transform differs from the direct conv by %.3g of "
                  "what the fp16 components allow", co, ci, err);
            /* and not by accident: two components swapped must fail */
            const size_t per = (size_t)co * 3 * ci;
            memcpy(a, b, nw * 2);
            memcpy(a + 7 * per, b + 8 * per, per * 2), memcpy(a + 8 * per, b + 7 * per, per * 2);
            CHECK(wino_vs_direct_conv(d, co, ci, a) > 1.0, "Winograd layout %dx%d: components 7 and 8 swapped pass",
                  co, ci);
        }
        if (vol == 9) {
            memset(a, 0xab, np * 2), memset(b, 0xcd, np * 2);
            w22_layout_phases_bf16(d, co, ci, b);
            const double err = phases_vs_upsample_conv(d, co, ci, b);
            CHECK(err <= 1.0, "phase layout %dx%d: its four 2x2 convs differ from nearest-2x + the 3x3 conv by %.3g of "
                  "what the bf16 phase weights allow", co, ci, err);
            /* and not by accident: the same weights with two phases swapped must fail */
            memcpy(a, b, np * 2);
            for (size_t q = 0; q < (size_t)4 * co * ci; q++) {
                const uint16_t t = a[q];
                a[q] = a[(size_t)4 * co * ci + q], a[(size_t)4 * co * ci + q] = t;
            }
            CHECK(phases_vs_upsample_conv(d, co, ci, a) > 1.0, "phase layout %dx%d: the check tells phases apart",
                  co, ci);
        }
        float *fa = malloc(n * 4), *fb = malloc(n * 4);
        for (int o = 0; o < co; o++) /* the CPU backend's serial loop */
            for (int i = 0; i < ci; i++)
                for (int t = 0; t < vol; t++) fa[((long)t * ci + i) * co + o] = d[((long)o * ci + i) * vol + t];
        w22_layout_taps_f32(d, co, ci, vol, fb);
        CHECK(!memcmp(fa, fb, n * 4), "CPU taps layout %dx%dx%d differs from the serial loop", co, ci, vol);
        free(fa), free(fb);
        free(d), free(a), free(b);
    }
    /* the decoder's conv weights: serial loops against every core */
    w22_config cfg;
    w22_config_default(&cfg);
    double ts = 0, tp = 0;
    for (int i = 0; i < w22_weight_count(&cfg); i++) {
        int64_t s[5];
        const int nd = w22_weight_shape(&cfg, i, s);
        if (nd < 4) continue;
        const int co = (int)s[0], ci = (int)s[1];
        int vol = 1;
        for (int k = 2; k < nd; k++) vol *= (int)s[k];
        const size_t n = (size_t)co * ci * vol, m = n; /* the direct layout (Winograd components are checked above) */
        float *d = malloc(n * 4);
        t_fill_uniform(d, n, i, -1.f, 1.f);
        uint16_t *a = malloc(m * 2), *b = malloc(m * 2);
        double t0 = now();
        ref_conv(d, co, ci, vol, a);
        ts += now() - t0;
        t0 = now();
        w22_layout_conv_bf16(d, co, ci, vol, b);
        tp += now() - t0;
        CHECK(!memcmp(a, b, m * 2), "weight %d (%s): layouts differ", i, w22_weight_name(&cfg, i));
        free(d), free(a), free(b);
    }
    printf("TI2V-5B conv weights' layouts on %d cores: serial %.2f s, layout.c %.2f s\n", w22_num_cores(), ts, tp);
    return t_finish("test_layout");
}
