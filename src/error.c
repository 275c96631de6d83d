/* Status names, the per-thread last-error message, and small utilities (dtype conversion, allocation). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "common.h"

static _Thread_local char last_error[2048];

const char *w22_version(void) { return W22_VERSION; }

const char *w22_status_string(w22_status s) {
    switch (s) {
    case W22_OK: return "W22_OK";
    case W22_ERR_INVALID_ARG: return "W22_ERR_INVALID_ARG";
    case W22_ERR_IO: return "W22_ERR_IO";
    case W22_ERR_FORMAT: return "W22_ERR_FORMAT";
    case W22_ERR_MISSING_TENSOR: return "W22_ERR_MISSING_TENSOR";
    case W22_ERR_BAD_SHAPE: return "W22_ERR_BAD_SHAPE";
    case W22_ERR_BAD_DTYPE: return "W22_ERR_BAD_DTYPE";
    case W22_ERR_NONFINITE: return "W22_ERR_NONFINITE";
    case W22_ERR_OUT_OF_MEMORY: return "W22_ERR_OUT_OF_MEMORY";
    case W22_ERR_UNSUPPORTED: return "W22_ERR_UNSUPPORTED";
    case W22_ERR_CUDA: return "W22_ERR_CUDA";
    case W22_ERR_COMM: return "W22_ERR_COMM";
    case W22_ERR_EXISTS: return "W22_ERR_EXISTS";
    case W22_ERR_INTERNAL: return "W22_ERR_INTERNAL";
    }
    return "W22_ERR_UNKNOWN";
}

const char *w22_last_error(void) { return last_error; }
void w22_clear_error(void) { last_error[0] = 0; }

w22_status w22_fail(w22_status s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    return s;
}

w22_status w22_fail_context(w22_status s, const char *fmt, ...) {
    char prefix[1024], old[sizeof last_error];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, last_error, sizeof old);
    snprintf(last_error, sizeof last_error, "%s%s", prefix, old);
    return s;
}

void *w22_malloc(size_t bytes, const char *what) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) w22_fail(W22_ERR_OUT_OF_MEMORY, "out of host memory: %zu bytes for %s", bytes, what);
    return p;
}

void *w22_calloc(size_t n, size_t size, const char *what) {
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p) w22_fail(W22_ERR_OUT_OF_MEMORY, "out of host memory: %zu x %zu bytes for %s", n, size, what);
    return p;
}

size_t w22_dtype_size(w22_dtype t) { return t == W22_DTYPE_F32 ? 4 : t == W22_DTYPE_BF16 || t == W22_DTYPE_F16 ? 2 : 0; }

const char *w22_dtype_name(w22_dtype t) {
    switch (t) {
    case W22_DTYPE_F32: return "F32";
    case W22_DTYPE_BF16: return "BF16";
    case W22_DTYPE_F16: return "F16";
    }
    return "?";
}

float w22_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 0x1f, man = h & 0x3ff, u;
    if (exp == 0) {
        if (man == 0) {
            u = sign;
        } else { /* subnormal: renormalize */
            exp = 127 - 15 + 1;
            while (!(man & 0x400)) { man <<= 1; exp--; }
            u = sign | (exp << 23) | ((man & 0x3ff) << 13);
        }
    } else if (exp == 31) {
        u = sign | 0x7f800000u | (man << 13);
    } else {
        u = sign | ((exp - 15 + 127) << 23) | (man << 13);
    }
    union { uint32_t u; float f; } v = {u};
    return v.f;
}

uint16_t w22_f32_to_f16(float f) {
    union { float f; uint32_t u; } v = {f};
    uint32_t sign = (v.u >> 16) & 0x8000, x = v.u & 0x7fffffffu;
    if (x > 0x7f800000u) return (uint16_t)(sign | 0x7e00);
    if (x >= 0x477ff000u) return (uint16_t)(sign | 0x7c00); /* rounds to inf */
    if (x < 0x38800000u) { /* subnormal or zero in f16 */
        if (x < 0x33000000u) return (uint16_t)sign;
        /* exact RNE via float arithmetic */
        float a = v.f < 0 ? -v.f : v.f;
        float scaled = a * 16777216.0f; /* 2^24: f16 subnormal unit is 2^-24 */
        uint32_t q = (uint32_t)scaled;
        float rem = scaled - (float)q;
        if (rem > 0.5f || (rem == 0.5f && (q & 1))) q++;
        return (uint16_t)(sign | q);
    }
    uint32_t r = x + 0x0fffu + ((x >> 13) & 1u) - (112u << 23);
    return (uint16_t)(sign | (r >> 13));
}

void w22_to_f32(const void *src, w22_dtype t, size_t n, float *dst) {
    if (t == W22_DTYPE_F32) {
        memcpy(dst, src, n * 4);
    } else {
        /* src may sit at any byte offset (a safetensors or .npy data section): each element through memcpy, not a
         * uint16_t pointer, whose misaligned load is undefined behaviour (memcpy compiles to a plain load). */
        const unsigned char *s = src;
        for (size_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, s + 2 * i, 2);
            dst[i] = t == W22_DTYPE_BF16 ? w22_bf16_to_f32(h) : w22_f16_to_f32(h);
        }
    }
}

void w22_from_f32(const float *src, size_t n, w22_dtype t, void *dst) {
    if (t == W22_DTYPE_F32) {
        memcpy(dst, src, n * 4);
    } else {
        unsigned char *d = dst; /* any byte offset, as in w22_to_f32 */
        for (size_t i = 0; i < n; i++) {
            uint16_t h = t == W22_DTYPE_BF16 ? w22_f32_to_bf16(src[i]) : w22_f32_to_f16(src[i]);
            memcpy(d + 2 * i, &h, 2);
        }
    }
}

void w22_shape_text(char *buf, size_t cap, int ndim, const int64_t *s) {
    size_t k = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < ndim && k < cap; i++)
        k += (size_t)snprintf(buf + k, cap - k, "%s%lld", i ? ", " : "", (long long)s[i]);
    if (k < cap) snprintf(buf + k, cap - k, "]");
}

int w22_num_cores(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

double w22_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}
