/* Internal helpers shared by every part of the library: error reporting and small utilities. */
#ifndef W22_COMMON_H
#define W22_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include "wan22vae.h"

/* Records the message of a failure for w22_last_error() and returns the status, so that a failing path reads
 * `return w22_fail(W22_ERR_BAD_SHAPE, "%s: shape %s, expected %s", ...)`. */
w22_status w22_fail(w22_status s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Prepends context to the current message ("loading x.safetensors: " + message). Returns s. */
w22_status w22_fail_context(w22_status s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void w22_clear_error(void);

#define W22_TRY(expr)                          \
    do {                                       \
        w22_status w22_try_s_ = (expr);        \
        if (w22_try_s_ != W22_OK) return w22_try_s_; \
    } while (0)

/* env.c: whether name is one of the W22_* variables of the library, its package or its tools; and the warning, once
 * per process, about any other W22_* variable set (called when a backend is created). */
int w22_env_known(const char *name);
void w22_env_check(void);
w22_status w22_env_validate(void);
/* The latent sizes a decode takes (T <= 100000, h, w <= 4096): the decoder's check, which the CLI makes before the
 * weights load. */
w22_status w22_check_latent_size(int z_dim, int T, int h, int w);
int w22_env_on(const char *name);

/* malloc that records W22_ERR_OUT_OF_MEMORY with what was asked for; NULL on failure. */
void *w22_malloc(size_t bytes, const char *what);
void *w22_calloc(size_t n, size_t size, const char *what);

static inline float w22_bf16_to_f32(uint16_t h) {
    union { uint32_t u; float f; } v;
    v.u = (uint32_t)h << 16;
    return v.f;
}
/* Round to nearest even, as torch does; NaN stays NaN. */
static inline uint16_t w22_f32_to_bf16(float f) {
    union { uint32_t u; float f; } v;
    v.f = f;
    if ((v.u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((v.u >> 16) | 0x40);
    uint32_t r = 0x7fffu + ((v.u >> 16) & 1u);
    return (uint16_t)((v.u + r) >> 16);
}
float w22_f16_to_f32(uint16_t h);
uint16_t w22_f32_to_f16(float f);
/* Converts n elements of type t at src to float32. */
void w22_to_f32(const void *src, w22_dtype t, size_t n, float *dst);
void w22_from_f32(const float *src, size_t n, w22_dtype t, void *dst);

/* "[1, 48, 3, 44, 78]" into buf, for messages. */
void w22_shape_text(char *buf, size_t cap, int ndim, const int64_t *shape);

int w22_num_cores(void);
double w22_now(void); /* seconds, monotonic */

#endif
