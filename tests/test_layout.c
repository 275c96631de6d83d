/* The GPU backend's weight layouts made on every core (src/weights/layout.c) give the same bits as the serial
 * loops they replace (copied here as the reference), at odd and even channel counts; then the time of both over
 * the TI2V-5B decoder's conv weights on this machine (issue 30: the open's host work). Random weights. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "common.h"
#include "testutil.h"
#include "weights/layout.h"
#include "cuda/route.h"
#include "wan22vae.h"

static void ref_conv(const float *data, int cout, int cin, int vol, uint16_t *h) {
    for (int o = 0; o < cout; o++)
        for (int ci = 0; ci < cin; ci++)
            for (int t = 0; t < vol; t++)
                h[((size_t)o * vol + t) * cin + ci] = w22_f32_to_bf16(data[((size_t)o * cin + ci) * vol + t]);
}

static void ref_wino(const float *data, int co, int ci, uint16_t *h) {
    const size_t per = (size_t)co * 3 * ci;
    static const float G[4][3] = {{1, 0, 0}, {.5f, .5f, .5f}, {.5f, -.5f, .5f}, {0, 0, 1}};
    for (int o = 0; o < co; o++)
        for (int i = 0; i < ci; i++)
            for (int dt = 0; dt < 3; dt++) {
                const float *g = data + (((size_t)o * ci + i) * 3 + dt) * 9;
                float gt[3][4];
                for (int a = 0; a < 3; a++)
                    for (int j = 0; j < 4; j++) gt[a][j] = g[a * 3] * G[j][0] + g[a * 3 + 1] * G[j][1] + g[a * 3 + 2] * G[j][2];
                for (int r = 0; r < 4; r++)
                    for (int j = 0; j < 4; j++) {
                        const float u = G[r][0] * gt[0][j] + G[r][1] * gt[1][j] + G[r][2] * gt[2][j];
                        h[(size_t)(4 * r + j) * per + ((size_t)o * 3 + dt) * ci + i] = w22_f32_to_bf16(u);
                    }
            }
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

/* w22_prefault: a zero at the range's first byte and at every page start within it, nothing else and nothing outside
 * it (ASan sees a write past the end), for sizes below a page, at page multiples and between, at page offsets 0, 16
 * and 4095. */
static void test_prefault(void) {
    static const size_t sizes[] = {1, 4095, 4096, 4097, 3 * 4096 + 17, (size_t)5 << 20};
    static const size_t offsets[] = {0, 16, 4095};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++)
        for (size_t o = 0; o < 3; o++) {
            const size_t n = sizes[k];
            void *mem = NULL;
            if (posix_memalign(&mem, 4096, n + 8192)) return;
            unsigned char *buf = mem, *p = buf + offsets[o];
            memset(buf, 0x5a, n + 8192);
            w22_prefault(p, n);
            int ok = 1;
            for (size_t i = 0; i < n + 8192; i++) {
                const int in = i >= offsets[o] && i < offsets[o] + n;
                const int zero = in && (i == offsets[o] || i % 4096 == 0);
                ok &= buf[i] == (zero ? 0 : 0x5a);
            }
            CHECK(ok, "prefault of %zu bytes at page offset %zu: expected a zero at its first byte and at each page "
                  "start within it, nothing else", n, offsets[o]);
            free(buf);
        }
}

int main(void) {
    test_prefault();
    static const int shapes[][3] = {{64, 48, 27}, {7, 5, 1}, {33, 16, 9}, {1, 3, 27}, {40, 24, 27}, {3, 130, 9},
                                       {130, 37, 27}, {200, 3, 9}, {65, 17, 1}};
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
        const int co = shapes[k][0], ci = shapes[k][1], vol = shapes[k][2];
        const size_t n = (size_t)co * ci * vol, nw = (size_t)16 * co * 3 * ci, np = (size_t)16 * co * ci;
        float *d = malloc(n * 4);
        t_fill_uniform(d, n, 100 + k, -1.f, 1.f);
        uint16_t *a = malloc((nw > n ? nw : n) * 2), *b = malloc((nw > n ? nw : n) * 2);
        memset(a, 0xab, n * 2), memset(b, 0xcd, n * 2);
        ref_conv(d, co, ci, vol, a);
        w22_layout_conv_bf16(d, co, ci, vol, b);
        CHECK(!memcmp(a, b, n * 2), "conv layout %dx%dx%d differs from the serial loops", co, ci, vol);
        if (vol == 27) {
            memset(a, 0xab, nw * 2), memset(b, 0xcd, nw * 2);
            ref_wino(d, co, ci, a);
            w22_layout_winograd_bf16(d, co, ci, b);
            CHECK(!memcmp(a, b, nw * 2), "winograd layout %dx%d differs from the serial loops", co, ci);
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
        const int wino =
            nd == 5 && w22_route_wino_weights((int)s[2], (int)s[3], (int)s[4], ci, co, W22_WINO_MIN_DEFAULT);
        const size_t n = (size_t)co * ci * vol, m = wino ? (size_t)16 * co * 3 * ci : n;
        float *d = malloc(n * 4);
        t_fill_uniform(d, n, i, -1.f, 1.f);
        uint16_t *a = malloc(m * 2), *b = malloc(m * 2);
        double t0 = now();
        if (wino) ref_wino(d, co, ci, a);
        else ref_conv(d, co, ci, vol, a);
        ts += now() - t0;
        t0 = now();
        if (wino) w22_layout_winograd_bf16(d, co, ci, b);
        else w22_layout_conv_bf16(d, co, ci, vol, b);
        tp += now() - t0;
        CHECK(!memcmp(a, b, m * 2), "weight %d (%s): layouts differ", i, w22_weight_name(&cfg, i));
        free(d), free(a), free(b);
    }
    printf("TI2V-5B conv weights' layouts on %d cores: serial %.2f s, layout.c %.2f s\n", w22_num_cores(), ts, tp);
    return t_finish("test_layout");
}
