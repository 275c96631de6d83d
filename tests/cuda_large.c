/* The large sizes on the GPU (issues 27 and 28), at the full TI2V-5B config (synthetic weights), bf16 latents and
 * video in device memory, outputs poisoned with NaN before each call:
 *  1. 3840x2160 (latents 135x240, T = 1): once took 105 s on every call (GEMMs whose int offsets overflowed went to
 *     the scalar kernel, not to the TMA conv, which addresses in 64 bits). Timed; it must stay within a bound that
 *     the scalar path cannot meet (MAX_S below), and its video must be finite and in [-1, 1].
 *  2. 4096x2160 (latents 135x256, T = 2) twice on one decoder with different latents (past the point where a cache
 *     holds more than 2^31 elements: issue 28's negative view widths); the second video bitwise equal to a fresh
 *     decoder's decode of the same latents, both finite.
 * Usage: cuda_large [which: 0 all (default), 1, 2]. Takes about a minute and ~90 GiB of device memory (two
 * decoders' workspaces at 4096x2160). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cuda_runtime.h>
#include "common.h"
#include "plan/plan.h"
#include "testutil.h"

/* The slowest a 3840x2160 T=1 decode may take: 1920x1088 at T=1 takes 0.07 s, 4x the pixels must not take 100x. */
#define MAX_S 10.0

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

static w22_decoder *open_dec(w22_weights *w) {
    w22_decoder_params p;
    w22_decoder_params_init(&p);
    p.device = W22_DEVICE_CUDA;
    w22_decoder *d = NULL;
    CHECK_OK(w22_decoder_open(w, &p, &d));
    return d;
}

/* One decode of seeded latents into host memory; its seconds in *sec. */
static w22_status dec(w22_decoder *d, int T, int h, int w, uint64_t seed, uint16_t *out, size_t nv, double *sec) {
    const size_t nz = (size_t)d->model.cfg.z_dim * T * h * w;
    float *f = malloc(nz * 4);
    uint16_t *z = malloc(nz * 2);
    t_fill_uniform(f, nz, seed, -2.f, 2.f);
    for (size_t i = 0; i < nz; i++) z[i] = w22_f32_to_bf16(f[i]);
    void *zd = NULL, *vd = NULL;
    w22_status s = W22_ERR_OUT_OF_MEMORY;
    if (cudaMalloc(&zd, nz * 2) == cudaSuccess && cudaMalloc(&vd, nv * 2) == cudaSuccess) {
        cudaMemcpy(zd, z, nz * 2, cudaMemcpyHostToDevice);
        cudaMemset(vd, 0xff, nv * 2);
        cudaDeviceSynchronize();
        const double t0 = now();
        s = w22_decode_device(d, zd, T, h, w, vd, NULL);
        *sec = now() - t0;
        cudaMemcpy(out, vd, nv * 2, cudaMemcpyDeviceToHost);
    } else
        w22_fail(W22_ERR_OUT_OF_MEMORY, "test: device memory for latents and video");
    cudaFree(zd), cudaFree(vd);
    free(f), free(z);
    return s;
}

static void range_ok(const char *what, const uint16_t *v, size_t n) {
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        const float x = w22_bf16_to_f32(v[i]);
        bad += !(x >= -1.f && x <= 1.f);
    }
    CHECK(bad == 0, "%s: %zu of %zu elements not finite or outside [-1, 1]", what, bad, n);
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    const int which = argc > 1 ? atoi(argv[1]) : 0;
    w22_config cfg;
    w22_config_default(&cfg);
    w22_weights *w = NULL;
    CHECK_OK(w22_weights_synthetic(&cfg, 1, &w));
    if (!w) return t_finish("cuda_large");
    int F, H, W;
    if (which == 0 || which == 1) {
        w22_video_shape(&cfg, 1, 135, 240, &F, &H, &W);
        const size_t nv = (size_t)3 * F * H * W;
        uint16_t *v = malloc(nv * 2);
        w22_decoder *d = open_dec(w);
        double sec[2] = {0, 0};
        for (int k = 0; d && k < 2; k++) CHECK_OK(dec(d, 1, 135, 240, 7 + k, v, nv, &sec[k]));
        printf("3840x2160 T=1 (135x240): %.3f s, then %.3f s (bound %.0f s)\n", sec[0], sec[1], MAX_S);
        CHECK(sec[1] < MAX_S, "3840x2160 T=1 took %.1f s, more than %.0f s", sec[1], MAX_S);
        range_ok("3840x2160 T=1", v, nv);
        w22_decoder_free(d);
        free(v);
    }
    if (which == 0 || which == 2) {
        w22_video_shape(&cfg, 2, 135, 256, &F, &H, &W);
        const size_t nv = (size_t)3 * F * H * W;
        uint16_t *a = malloc(nv * 2), *b = malloc(nv * 2), *fr = malloc(nv * 2);
        w22_decoder *d = open_dec(w);
        double sa = 0, sb = 0, sf = 0;
        if (d) {
            CHECK_OK(dec(d, 2, 135, 256, 11, a, nv, &sa));
            CHECK_OK(dec(d, 2, 135, 256, 12, b, nv, &sb));
        }
        w22_decoder_free(d);
        w22_decoder *f = open_dec(w);
        if (f) CHECK_OK(dec(f, 2, 135, 256, 12, fr, nv, &sf));
        w22_decoder_free(f);
        size_t diff = 0;
        for (size_t i = 0; i < nv; i++) diff += b[i] != fr[i];
        printf("4096x2160 T=2 (135x256): %.3f s, %.3f s on one decoder, %.3f s fresh; the second vs fresh: %zu of %zu "
               "differ\n", sa, sb, sf, diff, nv);
        CHECK(diff == 0, "4096x2160: the second decode on one decoder differs from a fresh decoder's in %zu of %zu", diff,
              nv);
        CHECK(memcmp(a, b, nv * 2) != 0, "4096x2160: two different latents gave the same video");
        range_ok("4096x2160 first", a, nv);
        range_ok("4096x2160 second", b, nv);
        free(a), free(b), free(fr);
    }
    w22_weights_free(w);
    return t_finish("cuda_large");
}
