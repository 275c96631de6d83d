/* libFuzzer target for the safetensors reader: any input must parse or fail with a message, never crash, leak or
 * read outside the buffer, and what parses keeps the format's layout rule (built with ASan + UBSan by `make fuzz`).
 *
 * Each input is tried twice: as a whole file, and as [byte d][JSON + d data bytes] with the header length filled
 * in, so that mutations of the JSON are not all stopped by a header length that no longer matches. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "common.h"
#include "weights/safetensors.h"

static volatile unsigned sink;

static int cmp_range(const void *a, const void *b) {
    const size_t *x = a, *y = b;
    return x[0] != y[0] ? (x[0] < y[0] ? -1 : 1) : (x[1] > y[1]) - (x[1] < y[1]);
}

/* The tensors' byte ranges, sorted, follow each other from the data section's start to the buffer's end. */
static void check_layout(const w22_st_file *f, const uint8_t *buf, size_t size) {
    size_t (*r)[2] = malloc(((size_t)f->ntensors + 1) * sizeof *r);
    if (!r) abort();
    for (int i = 0; i < f->ntensors; i++) {
        r[i][0] = (size_t)((const uint8_t *)f->tensors[i].data - buf);
        r[i][1] = r[i][0] + f->tensors[i].nbytes;
    }
    qsort(r, (size_t)f->ntensors, sizeof *r, cmp_range);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | buf[i];
    size_t end = 8 + (size_t)hlen;
    for (int i = 0; i < f->ntensors; i++) {
        if (r[i][0] != end) abort();
        end = r[i][1];
    }
    if (end != size) abort();
    free(r);
}

static void try_parse(const uint8_t *buf, size_t size) {
    w22_st_file f;
    if (w22_st_parse(buf, size, &f) != W22_OK) {
        if (!w22_last_error()[0]) abort(); /* a failure must say why */
        return;
    }
    unsigned acc = 0;
    for (int i = 0; i < f.ntensors; i++) {
        const w22_st_tensor *t = &f.tensors[i];
        const uint8_t *d = t->data;
        /* the data lies inside the buffer, after the header, and its size matches the shape */
        if (d < buf + 8 || d + t->nbytes > buf + size) abort();
        if ((size_t)t->numel * w22_dtype_size(t->dtype) != t->nbytes) abort();
        for (size_t k = 0; k < t->nbytes; k++) acc += d[k];
        acc += (unsigned)strlen(t->name);
        if (w22_st_find(&f, t->name) != t) abort(); /* names are unique */
    }
    check_layout(&f, buf, size);
    for (int i = 0; i < f.nmeta; i++) {
        acc += (unsigned)strlen(f.meta_keys[i]) + (unsigned)strlen(f.meta_values[i]);
        if (!w22_st_meta(&f, f.meta_keys[i])) abort();
    }
    if (f.metadata_json) acc += (unsigned)strlen(f.metadata_json);
    sink = acc;
    w22_st_close(&f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    try_parse(data, size);
    if (size >= 1) {
        size_t d = data[0] % 64, body = size - 1;
        if (d <= body) {
            uint8_t *b = malloc(body + 8);
            if (!b) return 0;
            uint64_t h = body - d;
            for (int i = 0; i < 8; i++) b[i] = (uint8_t)(h >> (8 * i));
            memcpy(b + 8, data + 1, body);
            try_parse(b, body + 8);
            free(b);
        }
    }
    return 0;
}
