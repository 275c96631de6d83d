/* bench/bits: the bits and the time of the GPU decode, for refactors that must keep both (issue 29: "the decode's
 * output stays bitwise the same at 704x1248 and at the sizes of the call-sequence test, and f121's time stays within
 * 1%"). It prints one line per case, "case T h w fpp <hash of the video>", from one decoder (full TI2V-5B config,
 * synthetic weights seed 1, seeded bf16 latents), then f121's decode times. bench/ab.sh runs two builds of it in
 * one lease, alternating, and compares. Usage: bits [f121 repeats (default 3)]. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cuda_runtime.h>
#include "wan22vae.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

/* xorshift uniform in [-2, 2), as bf16 */
static void fill_bf16(uint16_t *z, size_t n, uint64_t seed) {
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        const float f = (float)((x >> 40) * (1.0 / 16777216.0)) * 4.f - 2.f;
        uint32_t u;
        memcpy(&u, &f, 4);
        z[i] = (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
    }
}

static uint64_t fnv(const uint16_t *v, size_t n) {
    uint64_t h = 1469598103934665603ull;
    const unsigned char *p = (const unsigned char *)v;
    for (size_t i = 0; i < 2 * n; i++) h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

static int fail(const char *what) {
    fprintf(stderr, "bits: %s: %s\n", what, w22_last_error());
    return 1;
}

int main(int argc, char **argv) {
    const int reps = argc > 1 ? atoi(argv[1]) : 3;
    /* T, h, w, frames per pass: 704x1248 (44 x 78) at 1 and 2 frames per pass and T 1, 2, 5; the call-sequence
     * test's kinds of sizes (odd, multiples of 8 and 16, portrait, landscape, tiny, 96); each after another size */
    static const int cases[][4] = {{2, 44, 78, 2}, {5, 44, 78, 1}, {1, 44, 78, 2}, {8, 5, 95, 1}, {5, 78, 9, 1},
                                   {3, 31, 17, 2}, {3, 45, 19, 1}, {7, 2, 96, 2}, {2, 96, 45, 3}, {3, 64, 8, 1},
                                   {1, 96, 96, 2}, {5, 17, 44, 3}, {2, 1, 1, 1},  {3, 16, 16, 3}, {2, 44, 80, 2},
                                   {2, 80, 44, 2}, {5, 44, 78, 3}};
    const int ncases = sizeof cases / sizeof cases[0];
    w22_config cfg;
    w22_config_default(&cfg);
    w22_weights *w = NULL;
    if (w22_weights_synthetic(&cfg, 1, &w) != W22_OK) return fail("weights");
    w22_decoder *dec[3] = {NULL, NULL, NULL}; /* one per frames-per-pass value (a decoder's parameter) */
    for (int k = 0; k < 3; k++) {
        w22_decoder_params p;
        w22_decoder_params_init(&p);
        p.device = W22_DEVICE_CUDA;
        p.frames_per_pass = k + 1;
        if (w22_decoder_open(w, &p, &dec[k]) != W22_OK) return fail("open");
    }
    int rc = 0;
    for (int i = 0; i <= ncases && rc == 0; i++) {
        const int f121 = i == ncases; /* last: f121, timed */
        const int T = f121 ? 31 : cases[i][0], h = f121 ? 44 : cases[i][1], wd = f121 ? 78 : cases[i][2],
                  fpp = f121 ? 2 : cases[i][3];
        w22_decoder *d = dec[fpp - 1];
        int F, H, W;
        w22_video_shape(&cfg, T, h, wd, &F, &H, &W);
        const size_t nz = (size_t)cfg.z_dim * T * h * wd, nv = (size_t)3 * F * H * W;
        uint16_t *z = malloc(nz * 2), *v = malloc(nv * 2);
        void *zd = NULL, *vd = NULL;
        fill_bf16(z, nz, 1000 + T * 97 + h * 31 + wd);
        if (!z || !v || cudaMalloc(&zd, nz * 2) != cudaSuccess || cudaMalloc(&vd, nv * 2) != cudaSuccess) {
            fprintf(stderr, "bits: out of memory\n");
            return 1;
        }
        cudaMemcpy(zd, z, nz * 2, cudaMemcpyHostToDevice);
        for (int r = 0; r < (f121 ? reps + 1 : 1) && rc == 0; r++) {
            cudaMemset(vd, 0xff, nv * 2);
            cudaDeviceSynchronize();
            const double t0 = now();
            if (w22_decode_device(d, zd, T, h, wd, vd, NULL) != W22_OK) rc = fail("decode");
            const double ms = (now() - t0) * 1e3;
            if (f121 && r > 0) printf("f121 %.1f ms\n", ms); /* the first call plans: not timed */
        }
        cudaMemcpy(v, vd, nv * 2, cudaMemcpyDeviceToHost);
        printf("case T %d %dx%d fpp %d %016llx\n", T, h, wd, fpp, (unsigned long long)fnv(v, nv));
        fflush(stdout);
        cudaFree(zd), cudaFree(vd);
        free(z), free(v);
    }
    for (int k = 0; k < 3; k++) w22_decoder_free(dec[k]);
    w22_weights_free(w);
    return rc;
}
