/* A decode's stop flag (w22_decoder_set_interrupt, issue 47): set from another thread mid-decode, the CPU decode
 * returns within a second (0.2 s of CPU time: the flag is read between ops and inside the products' row blocks, not only
 * at the end of a pass of seconds); a product alone stops between its row blocks; a decode begun with the flag set
 * stops at once; the decoder, the flag reset, decodes again to the same bits as a fresh decoder. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "wan22vae.h"
#include "common.h"
#include "cpu/gemm.h"
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

int main(void) {
    /* A product of ~17 GFLOP (seconds on one core) with the flag set after 0.1 s: it returns within 0.5 s of it. */
    {
        const int n = 2048;
        float *A = malloc(sizeof(float) * n * n), *B = malloc(sizeof(float) * n * n), *C = malloc(sizeof(float) * n * n);
        t_fill_uniform(A, (size_t)n * n, 1, -1, 1);
        t_fill_uniform(B, (size_t)n * n, 2, -1, 1);
        volatile int flag = 0;
        timer_arg t = {&flag, 0.1, 0};
        pthread_t th;
        pthread_create(&th, NULL, set_later, &t);
        const double t0 = now();
        const int stopped = w22_sgemm_stop(1, &flag, n, n, n, 1.0f, A, n, B, n, 0, 0.0f, C, n);
        const double t1 = now();
        pthread_join(th, NULL);
        CHECK(stopped == 1, "the product stopped (it took %.2f s)", t1 - t0);
        CHECK(t1 - t.set_at < 1.0, "the product returned %.2f s after the flag, expected < 1 s", t1 - t.set_at);
        free(A), free(B), free(C);
    }

    /* A decode whose one pass takes seconds on one thread (base_dim 32, 2 latent frames of 32 x 32). */
    w22_config cfg;
    w22_config_default(&cfg);
    cfg.z_dim = 4;
    cfg.base_dim = 32;
    w22_weights *w = NULL;
    CHECK_OK(w22_weights_synthetic(&cfg, 1, &w));
    w22_decoder_params p;
    w22_decoder_params_init(&p);
    p.threads = 1;
    w22_decoder *d = NULL, *fresh = NULL;
    CHECK_OK(w22_decoder_open(w, &p, &d));
    CHECK_OK(w22_decoder_open(w, &p, &fresh));
    const int T = 2, h = 32, wd = 32;
    int F, H, W;
    w22_video_shape(&cfg, T, h, wd, &F, &H, &W);
    float *z = malloc(sizeof(float) * cfg.z_dim * T * h * wd);
    CHECK_OK(w22_latents_synthetic(&cfg, 2, T, h, wd, z));
    float *v = malloc(sizeof(float) * 3 * (size_t)F * H * W);
    volatile int flag = 0;
    w22_decoder_set_interrupt(d, &flag);
    if (d && fresh && z && v) {
        timer_arg t = {&flag, 0.3, 0};
        pthread_t th;
        pthread_create(&th, NULL, set_later, &t);
        const double t0 = now();
        const w22_status s = w22_decode(d, z, W22_DTYPE_F32, T, h, wd, v, W22_DTYPE_F32);
        const double t1 = now();
        pthread_join(th, NULL);
        CHECK(s == W22_ERR_INVALID_ARG && strstr(w22_last_error(), "stopped"), "a stopped decode: %s, %s",
              w22_status_string(s), w22_last_error());
        CHECK(t1 - t.set_at < 1.0, "the decode returned %.2f s after the flag (%.2f s in all), expected < 1 s",
              t1 - t.set_at, t1 - t0);
        /* begun with the flag set: stops at once */
        const double t2 = now();
        CHECK(w22_decode(d, z, W22_DTYPE_F32, T, h, wd, v, W22_DTYPE_F32) == W22_ERR_INVALID_ARG,
              "a decode begun with the flag set stops");
        CHECK(now() - t2 < 0.5, "a decode begun with the flag set took %.2f s", now() - t2);
        /* reset: the next decode (smaller, quick) gives a fresh decoder's bits */
        flag = 0;
        const int T2 = 2, h2 = 4, w2 = 6;
        int F2, H2, W2;
        w22_video_shape(&cfg, T2, h2, w2, &F2, &H2, &W2);
        const size_t nv = 3 * (size_t)F2 * H2 * W2;
        float *a = malloc(sizeof(float) * nv), *b = malloc(sizeof(float) * nv);
        t_fill_nan(a, nv);
        t_fill_nan(b, nv);
        CHECK_OK(w22_decode(d, z, W22_DTYPE_F32, T2, h2, w2, a, W22_DTYPE_F32));
        CHECK_OK(w22_decode(fresh, z, W22_DTYPE_F32, T2, h2, w2, b, W22_DTYPE_F32));
        CHECK(memcmp(a, b, sizeof(float) * nv) == 0, "after a stopped decode: the same bits as a fresh decoder");
        free(a), free(b);
    }
    w22_decoder_set_interrupt(NULL, &flag); /* NULL: nothing happens */
    w22_decoder_free(d);
    w22_decoder_free(fresh);
    w22_weights_free(w);
    free(z), free(v);
    return t_finish("test_interrupt");
}
