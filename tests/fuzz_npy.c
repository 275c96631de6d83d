/* libFuzzer target for the .npy header parser (w22_npy_parse) and the reads of what it accepts: any input must
 * parse or fail with a message, never crash, leak or read outside the buffer (ASan + UBSan).
 *
 * Each input is tried twice: as a whole file, and as [byte k][header text][k data bytes] made into a version 1.0
 * file (magic, version and header length filled in), so that mutations of the dict are not all stopped by a
 * header length that no longer matches. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "common.h"
#include "io/io.h"

static volatile float sink;

static void try_parse(const uint8_t *buf, size_t size) {
    w22_npy_info info;
    w22_clear_error();
    if (w22_npy_parse(buf, size, "fuzz.npy", &info) != W22_OK) {
        if (!w22_last_error()[0]) abort(); /* a failure must say why */
        return;
    }
    /* what an accepted header promises: the data fills the rest of the file exactly, as the shape says */
    int64_t numel = 1;
    for (int i = 0; i < info.ndim; i++) {
        if (info.shape[i] < 0) abort();
        numel *= info.shape[i];
    }
    size_t es = info.type == W22_NPY_F32 ? 4 : 2;
    if (info.ndim < 0 || info.ndim > W22_NPY_MAX_DIMS || numel != info.numel) abort();
    if (info.data_bytes != (size_t)info.numel * es || info.data_offset + info.data_bytes != size) abort();
    /* the data read as the loaders read it: converted (at any offset, odd ones too) and checked for NaN/Inf */
    w22_dtype t = info.type == W22_NPY_F32 ? W22_DTYPE_F32 : info.type == W22_NPY_F16 ? W22_DTYPE_F16
                                                                                       : W22_DTYPE_BF16;
    float *out = malloc((size_t)info.numel * 4 + 1);
    if (!out) return;
    w22_to_f32(buf + info.data_offset, t, (size_t)info.numel, out);
    if (w22_check_finite(buf + info.data_offset, t, info.ndim, info.shape, "fuzz") != W22_OK && !w22_last_error()[0])
        abort();
    float acc = 0;
    for (int64_t i = 0; i < info.numel; i++) acc += out[i];
    sink = acc;
    free(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    try_parse(data, size);
    if (size >= 1) {
        size_t k = data[0], body = size - 1;
        if (k <= body && body - k <= 65535) {
            size_t text = body - k, n = 10 + body;
            uint8_t *b = malloc(n);
            if (!b) return 0;
            memcpy(b, "\x93NUMPY\x01\x00", 8);
            b[8] = (uint8_t)(text & 0xff);
            b[9] = (uint8_t)(text >> 8);
            memcpy(b + 10, data + 1, body);
            try_parse(b, n);
            free(b);
        }
    }
    return 0;
}
