/* libFuzzer target for the whole path from bytes to a validated weights object (w22_weights_parse): the
 * safetensors parse, the config in __metadata__ (or inferred from the tensors), the name prefix and mapping, every
 * shape and dtype, the copies of misaligned tensors and the finiteness check. Any input must load or fail with a
 * message, never crash, leak or read outside the buffer; what loads must be what the loader promises.
 *
 * Each input is tried twice: as a whole file, and as [d: 2 bytes, little-endian][JSON][d data bytes] with the
 * header length filled in, so that mutations of the JSON are not all stopped by a length that no longer matches
 * (tools/fuzz_corpus.py writes the seeds of tests/fuzz_corpus_weights/ in both forms). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "common.h"
#include "weights/weights.h"

static volatile float sink;

/* A loaded object holds the config's tensors, aligned, inside the buffer or its own copies, all finite. */
static void check_loaded(const w22_weights *w, const uint8_t *buf, size_t size) {
    const w22_model *m = &w->model;
    if (w22_config_check(&m->cfg) != W22_OK || m->nweights != w22_weight_count(&m->cfg)) abort();
    float acc = 0;
    for (int i = 0; i < m->nweights; i++) {
        const uint8_t *d = w->data[i];
        size_t n = (size_t)m->weights[i].numel, bytes = n * w22_dtype_size(w->dtype[i]);
        if ((uintptr_t)d % w22_dtype_size(w->dtype[i])) abort();
        int in_buf = d >= buf && d < buf + size; /* else one of the copies of misaligned tensors */
        if (in_buf ? d < buf + 8 || bytes > (size_t)(buf + size - d) : !w->owned) abort();
        float *f = malloc(n * sizeof *f);
        if (!f) abort();
        w22_weights_get_f32(w, i, f);
        for (size_t k = 0; k < n; k++) {
            if (!isfinite(f[k])) abort(); /* the finiteness check let a NaN/Inf through */
            acc += f[k];
        }
        free(f);
    }
    sink = acc;
}

static void try_load(const uint8_t *buf, size_t size) {
    w22_weights *w = (w22_weights *)1;
    if (w22_weights_parse(buf, size, NULL, &w) != W22_OK) {
        if (w || !w22_last_error()[0]) abort(); /* a failure clears out and says why */
        return;
    }
    check_loaded(w, buf, size);
    /* the same bytes with the config passed in load the same way */
    w22_config cfg = w->model.cfg;
    w22_weights *again = NULL;
    if (w22_weights_parse(buf, size, &cfg, &again) != W22_OK || again->model.nweights != w->model.nweights) abort();
    w22_weights_free(again);
    w22_weights_free(w);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    try_load(data, size);
    if (size >= 2) {
        size_t d = (size_t)data[0] | (size_t)data[1] << 8, body = size - 2;
        if (d <= body) {
            uint8_t *b = malloc(body + 8);
            if (!b) return 0;
            uint64_t h = body - d;
            for (int i = 0; i < 8; i++) b[i] = (uint8_t)(h >> (8 * i));
            memcpy(b + 8, data + 2, body);
            try_load(b, body + 8);
            free(b);
        }
    }
    return 0;
}
