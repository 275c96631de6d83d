/* The finiteness check of a weights object: a NaN or Inf in any weight decodes to a NaN video (the output is
 * promised in [-1, 1]), so loading refuses it, naming the tensor and its first bad element. A whole model is
 * 555M elements; the scan is split over a few threads as the synthetic fill is (reading a mapped file is bound by
 * page-table walks more than by bandwidth, and those scale with cores). */
#include <pthread.h>
#include <stdlib.h>
#include "common.h"
#include "weights/weights.h"

/* Whether any of elements [i0, i0 + c) of x is NaN or Inf. A magnitude at or above the exponent-all-ones pattern
 * is non-finite; adding (sign bit - that pattern) carries it into the sign bit, and an OR of those sums is a loop
 * the compiler vectorizes. */
static int block_nonfinite(const void *x, w22_dtype t, size_t i0, size_t c) {
    if (t == W22_DTYPE_F32) {
        const uint32_t *p = (const uint32_t *)x + i0;
        uint32_t acc = 0;
        for (size_t i = 0; i < c; i++) acc |= (p[i] & 0x7fffffffu) + (0x80000000u - 0x7f800000u);
        return acc >> 31;
    }
    const uint16_t *p = (const uint16_t *)x + i0;
    const uint16_t add = (uint16_t)(0x8000u - (t == W22_DTYPE_BF16 ? 0x7f80u : 0x7c00u));
    uint16_t acc = 0;
    for (size_t i = 0; i < c; i++) acc |= (uint16_t)((p[i] & 0x7fffu) + add);
    return acc >> 15;
}

/* The index of the first NaN/Inf among elements [i0, i1) of x (aligned for t), or i1 when all are finite. */
static size_t first_nonfinite(const void *x, w22_dtype t, size_t i0, size_t i1) {
    enum { BLOCK = 4096 };
    for (size_t b = i0; b < i1; b += BLOCK) {
        size_t c = i1 - b < BLOCK ? i1 - b : BLOCK;
        if (!block_nonfinite(x, t, b, c)) continue;
        for (size_t i = b; i < b + c; i++)
            if (block_nonfinite(x, t, i, 1)) return i;
    }
    return i1;
}

enum { MAX_THREADS = 8 };

typedef struct {
    const w22_weights *w;
    int part, parts;
    size_t first[W22_MAX_WEIGHTS]; /* per tensor: the first bad index in this part's share, or numel */
} scan_job;

/* Every part takes the same share of every tensor, which balances the work without a schedule. */
static void *scan_thread(void *arg) {
    scan_job *j = arg;
    const w22_model *m = &j->w->model;
    for (int t = 0; t < m->nweights; t++) {
        size_t n = (size_t)m->weights[t].numel, i0 = n * (size_t)j->part / (size_t)j->parts,
               i1 = n * (size_t)(j->part + 1) / (size_t)j->parts;
        size_t k = first_nonfinite(j->w->data[t], j->w->dtype[t], i0, i1);
        j->first[t] = k < i1 ? k : n;
    }
    return NULL;
}

static void run_scan(scan_job *jobs, int parts) {
    pthread_t tid[MAX_THREADS];
    int started = 0;
    for (int p = 1; p < parts; p++) {
        if (pthread_create(&tid[p], NULL, scan_thread, &jobs[p]) != 0) break;
        started = p;
    }
    scan_thread(&jobs[0]);
    for (int p = 1; p <= started; p++) pthread_join(tid[p], NULL);
    for (int p = started + 1; p < parts; p++) scan_thread(&jobs[p]); /* parts no thread could take */
}

static w22_status report(const w22_weights *w, int t, size_t k, const char *source, const char *prefix) {
    const w22_weight_desc *d = &w->model.weights[t];
    float v;
    w22_to_f32((const char *)w->data[t] + k * w22_dtype_size(w->dtype[t]), w->dtype[t], 1, &v);
    int64_t at[5] = {0}, rest = (int64_t)k;
    for (int j = d->ndim - 1; j >= 0; j--) {
        at[j] = rest % d->shape[j];
        rest /= d->shape[j];
    }
    char shape[128], index[128];
    w22_shape_text(shape, sizeof shape, d->ndim, d->shape);
    w22_shape_text(index, sizeof index, d->ndim, at);
    return w22_fail(W22_ERR_NONFINITE, "%s: tensor '%s%s' (%s, shape %s) holds %s at index %zu %s, the first "
                    "non-finite element; expected finite weights", source, prefix, d->name,
                    w22_dtype_name(w->dtype[t]), shape, v != v ? "NaN" : v > 0 ? "+Inf" : "-Inf", k, index);
}

w22_status w22_weights_check_finite(const w22_weights *w, const char *source, const char *prefix) {
    const w22_model *m = &w->model;
    size_t total = 0;
    for (int t = 0; t < m->nweights; t++) total += (size_t)m->weights[t].numel;
    int parts = w22_num_cores();
    if (parts > MAX_THREADS) parts = MAX_THREADS;
    if (parts < 1 || total < ((size_t)1 << 22)) parts = 1;
    scan_job *jobs = w22_calloc((size_t)parts, sizeof *jobs, "the finiteness scan");
    if (!jobs) return W22_ERR_OUT_OF_MEMORY;
    for (int p = 0; p < parts; p++) {
        jobs[p].w = w;
        jobs[p].part = p;
        jobs[p].parts = parts;
    }
    run_scan(jobs, parts);
    w22_status s = W22_OK;
    for (int t = 0; t < m->nweights && s == W22_OK; t++) {
        size_t k = (size_t)m->weights[t].numel;
        for (int p = 0; p < parts; p++) k = jobs[p].first[t] < k ? jobs[p].first[t] : k;
        if (k < (size_t)m->weights[t].numel) s = report(w, t, k, source, prefix);
    }
    free(jobs);
    return s;
}
