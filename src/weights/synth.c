/* Synthetic weights and latents, deterministic from a 64-bit seed, bit for bit as docs/synthetic.md specifies
 * (tools/synth.py is the same generator in numpy; the diffusers fixtures are made with it). */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common.h"
#include "weights/weights.h"

#define GAMMA 0x9E3779B97F4A7C15ull
#define STREAM_WEIGHTS 1
#define STREAM_LATENTS 2

static inline uint64_t mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static uint64_t key(uint64_t seed, uint64_t stream, uint64_t tensor) {
    return mix(mix(seed + GAMMA * stream) + GAMMA * (tensor + 1));
}

/* v = 2u - 1 with u = (bits >> 40) * 2^-24: the same number as (bits >> 40) * 2^-23 - 1, exact in float64. */
static inline double v_of(uint64_t bits) { return (double)(bits >> 40) * (1.0 / 8388608.0) - 1.0; }
static inline double u_of(uint64_t bits) { return (double)(bits >> 40) * (1.0 / 16777216.0); }

/* a + p with p rounded to float64 first: the volatile keeps the compiler from fusing a product into the sum
 * (an FMA would round once and differ from numpy in the last bit). */
static inline double add_rounded(double a, double p) {
    volatile double pr = p;
    return a + pr;
}

typedef enum { KIND_CONV_W, KIND_BIAS, KIND_GAMMA } weight_kind;

static weight_kind kind_of(const w22_weight_desc *d) {
    if (d->is_gamma) return KIND_GAMMA;
    return d->ndim == 1 ? KIND_BIAS : KIND_CONV_W;
}

/* Elements [i0, i1) of tensor t into dst (dst points at element i0). */
static void fill_range(const w22_weight_desc *d, int t, uint64_t seed, int64_t i0, int64_t i1, float *dst) {
    const uint64_t k = key(seed, STREAM_WEIGHTS, (uint64_t)t);
    uint64_t s = k + GAMMA * (uint64_t)(i0 + 1);
    const int64_t n = i1 - i0;
    const weight_kind kind = kind_of(d);
    const double b = d->fan_in > 0 ? 1.0 / sqrt((double)d->fan_in) : 0.0;
    if (kind == KIND_CONV_W) {
        for (int64_t j = 0; j < n; j++, s += GAMMA) dst[j] = (float)(b * v_of(mix(s)));
    } else if (kind == KIND_BIAS) {
        for (int64_t j = 0; j < n; j++, s += GAMMA) dst[j] = (float)((b * v_of(mix(s))) * 0.1);
    } else {
        for (int64_t j = 0; j < n; j++, s += GAMMA) dst[j] = (float)add_rounded(1.0, 0.1 * v_of(mix(s)));
    }
}

typedef struct {
    const w22_model *m;
    float *base;
    const int64_t *offset;
    uint64_t seed;
    int part, parts;
} fill_job;

/* Every thread takes the same share of every tensor, which balances the work without a schedule. */
static void *fill_thread(void *arg) {
    const fill_job *j = arg;
    for (int t = 0; t < j->m->nweights; t++) {
        const w22_weight_desc *d = &j->m->weights[t];
        int64_t i0 = d->numel * j->part / j->parts, i1 = d->numel * (j->part + 1) / j->parts;
        fill_range(d, t, j->seed, i0, i1, j->base + j->offset[t] + i0);
    }
    return NULL;
}

w22_status w22_weights_synthetic(const w22_config *cfg, uint64_t seed, w22_weights **out) {
    if (!out) return w22_fail(W22_ERR_INVALID_ARG, "w22_weights_synthetic: out is NULL");
    *out = NULL;
    W22_TRY(w22_config_check(cfg));
    w22_weights *w = w22_calloc(1, sizeof *w, "the weights object");
    if (!w) return W22_ERR_OUT_OF_MEMORY;
    w22_model_build(cfg, &w->model);
    const w22_model *m = &w->model;

    int64_t offset[W22_MAX_WEIGHTS], total = 0;
    for (int t = 0; t < m->nweights; t++) {
        offset[t] = total;
        total += m->weights[t].numel;
    }
    float *base = w22_malloc((size_t)total * sizeof(float), "synthetic weights");
    if (!base) {
        free(w);
        return W22_ERR_OUT_OF_MEMORY;
    }

    /* Two threads fill the 555M parameters of the full model in about a second; more cores help little
     * because the writes are bound by memory bandwidth and first-touch page faults. */
    enum { MAX_THREADS = 8 };
    int parts = w22_num_cores();
    if (parts > MAX_THREADS) parts = MAX_THREADS;
    if (parts < 1 || total < (1 << 20)) parts = 1;
    fill_job jobs[MAX_THREADS];
    pthread_t tid[MAX_THREADS];
    int started = 0;
    for (int p = 0; p < parts; p++) jobs[p] = (fill_job){m, base, offset, seed, p, parts};
    for (int p = 1; p < parts; p++) {
        if (pthread_create(&tid[p], NULL, fill_thread, &jobs[p]) != 0) break;
        started = p;
    }
    fill_thread(&jobs[0]);
    for (int p = 1; p <= started; p++) pthread_join(tid[p], NULL);
    /* A thread that could not be started leaves its shares to this one. */
    for (int p = started + 1; p < parts; p++) fill_thread(&jobs[p]);

    for (int t = 0; t < m->nweights; t++) {
        w->data[t] = base + offset[t];
        w->dtype[t] = W22_DTYPE_F32;
    }
    w->owned = base;
    snprintf(w->source, sizeof w->source, "synthetic seed %llu", (unsigned long long)seed);
    *out = w;
    return W22_OK;
}

w22_status w22_latents_synthetic(const w22_config *cfg, uint64_t seed, int T, int h, int w, float *out) {
    W22_TRY(w22_config_check(cfg));
    if (!out) return w22_fail(W22_ERR_INVALID_ARG, "w22_latents_synthetic: out is NULL");
    if (T < 1 || h < 1 || w < 1)
        return w22_fail(W22_ERR_INVALID_ARG, "w22_latents_synthetic: T=%d h=%d w=%d, expected each >= 1", T, h, w);
    const int C = cfg->z_dim;
    const uint64_t kx = key(seed, STREAM_LATENTS, 0), km = key(seed, STREAM_LATENTS, 1),
                   ks = key(seed, STREAM_LATENTS, 2);
    const int64_t per_channel = (int64_t)T * h * w;
    const double sqrt3 = sqrt(3.0);
    for (int c = 0; c < C; c++) {
        const double mc = v_of(mix(km + GAMMA * (uint64_t)(c + 1)));
        const double sc = 0.5 + 1.5 * u_of(mix(ks + GAMMA * (uint64_t)(c + 1)));
        const double ac = sc * sqrt3;
        const int64_t i0 = (int64_t)c * per_channel;
        uint64_t s = kx + GAMMA * (uint64_t)(i0 + 1);
        for (int64_t j = 0; j < per_channel; j++, s += GAMMA) out[i0 + j] = (float)add_rounded(mc, ac * v_of(mix(s)));
    }
    return W22_OK;
}
