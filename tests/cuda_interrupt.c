/* A CUDA decode's stop flag (w22_decoder_set_interrupt, issue 47): the standard clip f121 (T = 31 at 44 x 78, ~2.5 s
 * on an H100) on synthetic TI2V-5B weights, the flag set from another thread 0.5 s in: the decode returns within 1 s
 * of it with W22_ERR_INVALID_ARG "stopped" (the plan reads the flag between ops; the work already queued on the
 * stream finishes first); a decode begun with the flag set stops at once; then, the flag reset, a small decode on
 * the same decoder is bitwise a fresh decoder's. The GPU suite runs it (`make test` on a GPU machine). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <cuda_runtime.h>
#include "wan22vae.h"
#include "testutil.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

typedef struct {
    volatile int *flag;
    double after, set_at;
} timer_arg;

static void *set_later(void *p) {
    timer_arg *t = p;
    usleep((useconds_t)(t->after * 1e6));
    t->set_at = now();
    __atomic_store_n((int *)t->flag, 1, __ATOMIC_RELAXED);
    return NULL;
}

/* bf16 latents on the GPU from the synthetic float32 ones */
static void *latents_dev(const w22_config *cfg, int T, int h, int w) {
    const size_t n = (size_t)cfg->z_dim * T * h * w;
    float *z = malloc(n * 4);
    uint16_t *zb = malloc(n * 2);
    void *d = NULL;
    if (z && zb && w22_latents_synthetic(cfg, 3, T, h, w, z) == W22_OK) {
        for (size_t i = 0; i < n; i++) {
            uint32_t u;
            memcpy(&u, &z[i], 4);
            zb[i] = (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
        }
        if (cudaMalloc(&d, n * 2) == cudaSuccess) cudaMemcpy(d, zb, n * 2, cudaMemcpyHostToDevice);
    }
    free(z), free(zb);
    return d;
}

int main(void) {
    if (!w22_cuda_available()) {
        printf("cuda_interrupt: no usable GPU; 0 passed, 0 failed\n");
        return 0;
    }
    w22_config cfg;
    w22_config_default(&cfg);
    w22_weights *w = NULL;
    CHECK_OK(w22_weights_synthetic(&cfg, 1, &w));
    w22_decoder_params p;
    w22_decoder_params_init(&p);
    p.device = W22_DEVICE_CUDA;
    w22_decoder *d = NULL, *fresh = NULL;
    CHECK_OK(w22_decoder_open(w, &p, &d));
    CHECK_OK(w22_decoder_open(w, &p, &fresh));
    volatile int flag = 0;
    w22_decoder_set_interrupt(d, &flag);
    const int T = 31, h = 44, wd = 78;
    int F, H, W;
    w22_video_shape(&cfg, T, h, wd, &F, &H, &W);
    void *z = latents_dev(&cfg, T, h, wd), *v = NULL;
    CHECK(z && cudaMalloc(&v, (size_t)3 * F * H * W * 2) == cudaSuccess, "device memory for f121");
    if (d && fresh && z && v) {
        timer_arg t = {&flag, 0.5, 0};
        pthread_t th;
        pthread_create(&th, NULL, set_later, &t);
        const double t0 = now();
        const w22_status s = w22_decode_device(d, z, T, h, wd, v, NULL);
        const double t1 = now();
        pthread_join(th, NULL);
        CHECK(s == W22_ERR_INVALID_ARG && strstr(w22_last_error(), "stopped"), "f121 stopped: %s, %s (%.2f s)",
              w22_status_string(s), w22_last_error(), t1 - t0);
        CHECK(t1 - t.set_at < 1.0, "f121 returned %.2f s after the flag (%.2f s in all), expected < 1 s",
              t1 - t.set_at, t1 - t0);
        printf("f121: stopped %.3f s after the flag, %.3f s in all\n", t1 - t.set_at, t1 - t0);
        const double t2 = now();
        CHECK(w22_decode_device(d, z, T, h, wd, v, NULL) == W22_ERR_INVALID_ARG, "begun with the flag set: stops");
        CHECK(now() - t2 < 0.5, "begun with the flag set: %.2f s", now() - t2);
        flag = 0;
        const int T2 = 2, h2 = 8, w2 = 12;
        int F2, H2, W2;
        w22_video_shape(&cfg, T2, h2, w2, &F2, &H2, &W2);
        const size_t nv = (size_t)3 * F2 * H2 * W2;
        void *z2 = latents_dev(&cfg, T2, h2, w2), *a = NULL, *b = NULL;
        cudaMalloc(&a, nv * 2);
        cudaMalloc(&b, nv * 2);
        cudaMemset(a, 0xff, nv * 2);
        cudaMemset(b, 0xff, nv * 2);
        CHECK_OK(w22_decode_device(d, z2, T2, h2, w2, a, NULL));
        CHECK_OK(w22_decode_device(fresh, z2, T2, h2, w2, b, NULL));
        uint16_t *ha = malloc(nv * 2), *hb = malloc(nv * 2);
        cudaMemcpy(ha, a, nv * 2, cudaMemcpyDeviceToHost);
        cudaMemcpy(hb, b, nv * 2, cudaMemcpyDeviceToHost);
        CHECK(memcmp(ha, hb, nv * 2) == 0, "after a stopped decode: a fresh decoder's bits");
        free(ha), free(hb);
        cudaFree(a), cudaFree(b), cudaFree(z2);
    }
    cudaFree(z), cudaFree(v);
    w22_decoder_free(d);
    w22_decoder_free(fresh);
    w22_weights_free(w);
    return t_finish("cuda_interrupt");
}
