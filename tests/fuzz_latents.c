/* libFuzzer target for the latents loader, the whole path from a file's bytes to checked float32 latents
 * (w22_io_parse_latents, which w22_io_load_latents runs on the file it reads): .npy through w22_npy_parse and
 * .safetensors through w22_st_parse, the shape and dtype checks, the NaN/Inf check and the conversion. Any input
 * must load or fail with a message, never crash, leak or read outside the buffer (ASan + UBSan).
 *
 * Each input is tried as a whole .npy and a whole .safetensors file, and as [byte s][header][data] with the
 * header's length filled in: s & 1 picks the format (.npy version 1.0 / .safetensors), s >> 1 is the number of
 * data bytes at the end, so that mutations of the header are not all stopped by its length. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "common.h"
#include "io/io.h"

static volatile float sink;

static void try_load(const uint8_t *buf, size_t size, const char *name) {
    static float poison;
    float *z = &poison;
    int T = 0, h = 0, w = 0, c = 0;
    w22_clear_error();
    if (w22_io_parse_latents(buf, size, name, &z, &T, &h, &w, &c) != W22_OK) {
        if (z != NULL) abort();            /* nothing handed out on failure */
        if (!w22_last_error()[0]) abort(); /* a failure must say why */
        return;
    }
    /* what a load promises: positive sizes that the file held, and only finite values */
    if (!z || c < 1 || T < 1 || h < 1 || w < 1) abort();
    size_t n = (size_t)c * (size_t)T * (size_t)h * (size_t)w;
    if (n > size / 2) abort(); /* every element came from at least 2 bytes of the file */
    float acc = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(z[i])) abort();
        acc += z[i];
    }
    sink = acc;
    free(z);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    try_load(data, size, "fuzz.npy");
    try_load(data, size, "fuzz.safetensors");
    if (size >= 1) {
        int st = data[0] & 1;
        size_t k = data[0] >> 1, body = size - 1;
        if (k <= body && (st || body - k <= 65535)) {
            size_t hdr = body - k, prefix = st ? 8 : 10, n = prefix + body;
            uint8_t *b = malloc(n);
            if (!b) return 0;
            if (st) {
                for (int i = 0; i < 8; i++) b[i] = (uint8_t)((uint64_t)hdr >> (8 * i));
            } else {
                memcpy(b, "\x93NUMPY\x01\x00", 8);
                b[8] = (uint8_t)(hdr & 0xff);
                b[9] = (uint8_t)(hdr >> 8);
            }
            memcpy(b + prefix, data + 1, body);
            try_load(b, n, st ? "fuzz.safetensors" : "fuzz.npy");
            free(b);
        }
    }
    return 0;
}
