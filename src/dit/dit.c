/* The DiT passes (include/wan22vae.h, "DiT"): argument checks, the float32 CPU versions (the reference the CUDA
 * kernels are tested against, and what diffusers' float32 WanTransformerBlock computes), and the public entry points
 * that route to src/dit/dit_cuda.cu.
 *
 * The CPU versions follow diffusers' order of float32 operations where it is visible (mod(c) = table + temb, then
 * 1 + scale, then n * (1 + scale), then + shift; y * gate, then h + that) and take the statistics (mean, variance,
 * mean square) in double: a reference more exact than either side it judges. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "common.h"
#include "dit/dit.h"

/* ---- checks ---- */

typedef struct {
    uintptr_t lo, hi;
} span;

static span span_of(const void *p, long long rows, long long stride, long long dim, size_t el) {
    span s = {0, 0};
    if (!p) return s;
    s.lo = (uintptr_t)p;
    s.hi = s.lo + (uintptr_t)(((rows - 1) * stride + dim) * (long long)el);
    return s;
}

static int overlap(span a, span b) { return a.lo && b.lo && a.lo < b.hi && b.lo < a.hi; }

static w22_status check_mod(const w22_dit_mod *m, int device, const char *fn, const char *what) {
    if (!m->table || !m->temb)
        return w22_fail(W22_ERR_INVALID_ARG, "%s: %s: table and temb must not be NULL (table %p, temb %p)", fn, what,
                        (const void *)m->table, m->temb);
    if (m->per_token != 0 && m->per_token != 1)
        return w22_fail(W22_ERR_INVALID_ARG, "%s: %s: per_token is %d, expected 0 ([B, 6, dim]) or 1 ([B, L, 6, dim])",
                        fn, what, m->per_token);
    if (m->temb_dtype != W22_DTYPE_F32 && !(device && m->temb_dtype == W22_DTYPE_BF16))
        return w22_fail(W22_ERR_BAD_DTYPE, "%s: %s: temb_dtype %s (%d); expected %s", fn, what,
                        w22_dtype_name(m->temb_dtype), (int)m->temb_dtype,
                        device ? "W22_DTYPE_F32 or W22_DTYPE_BF16" : "W22_DTYPE_F32 (host memory is float32)");
    return W22_OK;
}

static w22_status check_sizes(const char *fn, int B, int L, long long dim) {
    if (B < 1 || L < 1 || dim < 1 || dim > W22_DIT_MAX_DIM)
        return w22_fail(W22_ERR_BAD_SHAPE, "%s: batch %d, len %d, dim %lld; expected batch >= 1, len >= 1, "
                        "1 <= dim <= %d", fn, B, L, dim, W22_DIT_MAX_DIM);
    if ((long long)B * L > INT32_MAX)
        return w22_fail(W22_ERR_BAD_SHAPE, "%s: batch x len = %lld tokens; at most %d", fn, (long long)B * L,
                        INT32_MAX);
    return W22_OK;
}

static int bad_eps(float eps) { return !(eps >= 0.f) || isinf(eps); }

w22_status w22_dit_resnorm_check(const w22_dit_resnorm *a, int device, const char *fn) {
    if (!a) return w22_fail(W22_ERR_INVALID_ARG, "%s: the arguments are NULL", fn);
    W22_TRY(check_sizes(fn, a->batch, a->len, a->dim));
    if (bad_eps(a->eps)) return w22_fail(W22_ERR_INVALID_ARG, "%s: eps %g; expected finite and >= 0", fn, a->eps);
    if (!a->h) return w22_fail(W22_ERR_INVALID_ARG, "%s: h is NULL", fn);
    if (a->y && !a->h_out)
        return w22_fail(W22_ERR_INVALID_ARG, "%s: y is given but h_out is NULL (the new h goes to h_out; it may be h)",
                        fn);
    if (!a->y && a->h_out)
        return w22_fail(W22_ERR_INVALID_ARG, "%s: h_out is given without y (nothing to add: pass h_out NULL)", fn);
    if (!a->y && a->gate) return w22_fail(W22_ERR_INVALID_ARG, "%s: gate is given without y", fn);
    if (!a->y && !a->out)
        return w22_fail(W22_ERR_INVALID_ARG, "%s: neither y nor out: the call would do nothing", fn);
    if (a->gate) {
        if (a->gate_chunk < 0 || a->gate_chunk > 5)
            return w22_fail(W22_ERR_INVALID_ARG, "%s: gate_chunk %d; expected 0..5", fn, a->gate_chunk);
        W22_TRY(check_mod(a->gate, device, fn, "gate"));
    }
    if (!a->out && (a->norm_weight || a->norm_bias || a->mod))
        return w22_fail(W22_ERR_INVALID_ARG, "%s: a norm weight, bias or modulation is given but out is NULL", fn);
    if (a->norm_bias && !a->norm_weight)
        return w22_fail(W22_ERR_INVALID_ARG, "%s: norm_bias without norm_weight", fn);
    if (a->mod) {
        if (a->shift_chunk < 0 || a->shift_chunk > 4)
            return w22_fail(W22_ERR_INVALID_ARG, "%s: shift_chunk %d; expected 0..4 (scale is shift_chunk + 1)", fn,
                            a->shift_chunk);
        W22_TRY(check_mod(a->mod, device, fn, "mod"));
    }
    long long rows = (long long)a->batch * a->len;
    size_t el = device ? 2 : 4;
    span h = span_of(a->h, rows, a->dim, a->dim, el), ho = span_of(a->h_out, rows, a->dim, a->dim, el);
    span y = span_of(a->y, rows, a->dim, a->dim, el), o = span_of(a->out, rows, a->dim, a->dim, el);
    if (a->h_out && a->h_out != a->h && overlap(ho, h))
        return w22_fail(W22_ERR_INVALID_ARG, "%s: h_out overlaps h without being h", fn);
    if (overlap(o, h) || overlap(o, ho))
        return w22_fail(W22_ERR_INVALID_ARG, "%s: out overlaps h or h_out (the norm's output needs its own memory)",
                        fn);
    if (a->out && a->out != a->y && overlap(o, y))
        return w22_fail(W22_ERR_INVALID_ARG, "%s: out overlaps y without being y", fn);
    if (overlap(y, ho)) return w22_fail(W22_ERR_INVALID_ARG, "%s: y overlaps h_out", fn);
    return W22_OK;
}

w22_status w22_dit_qknorm_check(const w22_dit_qknorm *a, int device, const char *fn) {
    if (!a) return w22_fail(W22_ERR_INVALID_ARG, "%s: the arguments are NULL", fn);
    if (a->heads < 1 || a->head_dim < 1)
        return w22_fail(W22_ERR_BAD_SHAPE, "%s: heads %d, head_dim %d; expected both >= 1", fn, a->heads, a->head_dim);
    long long dim = (long long)a->heads * a->head_dim;
    W22_TRY(check_sizes(fn, a->batch, a->len, dim));
    if (bad_eps(a->eps)) return w22_fail(W22_ERR_INVALID_ARG, "%s: eps %g; expected finite and >= 0", fn, a->eps);
    if (!a->x || !a->out)
        return w22_fail(W22_ERR_INVALID_ARG, "%s: x (%p) and out (%p) must not be NULL", fn, a->x, a->out);
    if ((a->cos == NULL) != (a->sin == NULL))
        return w22_fail(W22_ERR_INVALID_ARG, "%s: cos and sin are both given (RoPE) or both NULL", fn);
    if (a->cos && a->head_dim % 2)
        return w22_fail(W22_ERR_BAD_SHAPE, "%s: head_dim %d is odd; RoPE rotates pairs", fn, a->head_dim);
    const long long max_stride = 1ll << 40;
    if (a->x_stride < dim || a->out_stride < dim || a->x_stride > max_stride || a->out_stride > max_stride)
        return w22_fail(W22_ERR_BAD_SHAPE, "%s: x_stride %lld, out_stride %lld; expected >= heads x head_dim = %lld "
                        "(and < 2^40)", fn, a->x_stride, a->out_stride, dim);
    long long rows = (long long)a->batch * a->len;
    long long smax = a->x_stride > a->out_stride ? a->x_stride : a->out_stride;
    if (rows > 1 && smax > ((1ll << 60) - dim) / (rows - 1))
        return w22_fail(W22_ERR_BAD_SHAPE, "%s: %lld rows %lld elements apart span more than 2^60 elements", fn, rows,
                        smax);
    size_t el = device ? 2 : 4;
    span x = span_of(a->x, rows, a->x_stride, dim, el), o = span_of(a->out, rows, a->out_stride, dim, el);
    if (a->out == a->x) {
        if (a->out_stride != a->x_stride)
            return w22_fail(W22_ERR_INVALID_ARG, "%s: in place (out == x) with out_stride %lld != x_stride %lld", fn,
                            a->out_stride, a->x_stride);
    } else if (overlap(x, o)) {
        return w22_fail(W22_ERR_INVALID_ARG, "%s: out overlaps x without being x (in place needs out == x)", fn);
    }
    return W22_OK;
}

/* ---- CPU versions (float32) ---- */

static inline float mod_at(const w22_dit_mod *m, int L, int dim, int b, int l, int c, int i) {
    const float *t = (const float *)m->temb;
    size_t row = m->per_token ? ((size_t)b * L + l) * 6 + c : (size_t)b * 6 + c;
    return m->table[(size_t)c * dim + i] + t[row * dim + i];
}

w22_status w22_dit_resnorm_cpu(const w22_dit_resnorm *a) {
    W22_TRY(w22_dit_resnorm_check(a, 0, "w22_dit_resnorm_cpu"));
    const int B = a->batch, L = a->len, D = a->dim;
    for (int b = 0; b < B; b++) {
        for (int l = 0; l < L; l++) {
            size_t off = ((size_t)b * L + l) * D;
            const float *h = (const float *)a->h + off;
            const float *hv = h; /* the new h */
            if (a->y) {
                const float *y = (const float *)a->y + off;
                float *ho = (float *)a->h_out + off;
                for (int i = 0; i < D; i++) {
                    float add = a->gate ? y[i] * mod_at(a->gate, L, D, b, l, a->gate_chunk, i) : y[i];
                    ho[i] = h[i] + add;
                }
                hv = ho;
            }
            if (!a->out) continue;
            double s = 0;
            for (int i = 0; i < D; i++) s += hv[i];
            double mean = s / D, v = 0;
            for (int i = 0; i < D; i++) v += ((double)hv[i] - mean) * ((double)hv[i] - mean);
            float rstd = (float)(1.0 / sqrt(v / D + a->eps)), fmean = (float)mean;
            float *o = (float *)a->out + off;
            for (int i = 0; i < D; i++) {
                float n = (hv[i] - fmean) * rstd;
                if (a->norm_weight) n = n * a->norm_weight[i] + (a->norm_bias ? a->norm_bias[i] : 0.f);
                if (a->mod) {
                    float shift = mod_at(a->mod, L, D, b, l, a->shift_chunk, i);
                    float scale = mod_at(a->mod, L, D, b, l, a->shift_chunk + 1, i);
                    n = n * (1.f + scale) + shift;
                }
                o[i] = n;
            }
        }
    }
    return W22_OK;
}

w22_status w22_dit_qknorm_cpu(const w22_dit_qknorm *a) {
    W22_TRY(w22_dit_qknorm_check(a, 0, "w22_dit_qknorm_cpu"));
    const int L = a->len, hd = a->head_dim, D = a->heads * a->head_dim;
    const long long rows = (long long)a->batch * L;
    float *n = w22_malloc((size_t)D * sizeof(float), "w22_dit_qknorm_cpu: a row");
    if (!n) return W22_ERR_OUT_OF_MEMORY;
    for (long long r = 0; r < rows; r++) {
        const float *x = (const float *)a->x + r * a->x_stride;
        float *o = (float *)a->out + r * a->out_stride;
        double ss = 0;
        for (int i = 0; i < D; i++) ss += (double)x[i] * x[i];
        float rstd = (float)(1.0 / sqrt(ss / D + a->eps));
        for (int i = 0; i < D; i++) n[i] = a->weight ? x[i] * rstd * a->weight[i] : x[i] * rstd;
        if (!a->cos) {
            memcpy(o, n, (size_t)D * sizeof(float));
            continue;
        }
        const int l = (int)(r % L);
        const float *cs = a->cos + (size_t)l * hd, *sn = a->sin + (size_t)l * hd;
        for (int i = 0; i < D; i += 2) {
            int d = i % hd;
            float x1 = n[i], x2 = n[i + 1], c = cs[d], s = sn[d + 1];
            o[i] = x1 * c - x2 * s;
            o[i + 1] = x1 * s + x2 * c;
        }
    }
    free(n);
    return W22_OK;
}

/* ---- the CUDA kernels' vector width (dit.h) ---- */

static int aligned(const void *p, unsigned bytes) { return ((uintptr_t)p % bytes) == 0; }

static int mod_vec_ok(const w22_dit_mod *m, unsigned bf16_align, unsigned f32_align) {
    if (!m) return 1;
    return aligned(m->table, f32_align) && aligned(m->temb, m->temb_dtype == W22_DTYPE_BF16 ? bf16_align : f32_align);
}

static int resnorm_fits(const w22_dit_resnorm *a, int V) {
    unsigned bb = 2 * V, fb = V == 8 ? 16 : 4 * V; /* bf16 rows at 2 B an element; float4 loads need 16 B */
    if (a->dim % V) return 0;
    return aligned(a->h, bb) && aligned(a->h_out, bb) && aligned(a->y, bb) && aligned(a->out, bb) &&
           aligned(a->norm_weight, fb) && aligned(a->norm_bias, fb) && mod_vec_ok(a->gate, bb, fb) &&
           mod_vec_ok(a->mod, bb, fb);
}

int w22_dit_resnorm_vector(const w22_dit_resnorm *a) { return resnorm_fits(a, 8) ? 8 : resnorm_fits(a, 2) ? 2 : 1; }

static int qknorm_fits(const w22_dit_qknorm *a, int V) {
    unsigned bb = 2 * V, fb = V == 8 ? 16 : 4 * V;
    const int dim = a->heads * a->head_dim;
    if (dim % V || a->x_stride % V || a->out_stride % V || (a->cos && a->head_dim % V)) return 0;
    return aligned(a->x, bb) && aligned(a->out, bb) && aligned(a->weight, fb) && aligned(a->cos, fb) &&
           aligned(a->sin, fb);
}

int w22_dit_qknorm_vector(const w22_dit_qknorm *a) {
    return qknorm_fits(a, 8) ? 8 : qknorm_fits(a, 2) ? 2 : a->cos ? 0 : 1;
}

w22_dit_rows w22_dit_rows_plan(int dim, int vec) {
    w22_dit_rows p = {0, 0, 1};
    if (vec != 8 && vec != 2) vec = 1;
    const int nch = dim / vec, per = vec == 8 ? 1 : 4; /* the register kernels' instances (dit_cuda.cu) */
    const int t = (nch + per - 1) / per;
    if (t <= 1024) {
        p.per_thread = per;
        p.row_threads = (t + 31) / 32 * 32;
        p.rows_per_block = p.row_threads < 256 ? 256 / p.row_threads : 1;
    } else {
        p.row_threads = nch > 1024 ? 1024 : (nch + 31) / 32 * 32;
    }
    return p;
}

/* ---- CUDA entry points ---- */

w22_status w22_dit_resnorm_cuda(const w22_dit_resnorm *a, void *stream) {
    W22_TRY(w22_dit_resnorm_check(a, 1, "w22_dit_resnorm_cuda"));
    return w22_dit_resnorm_launch(a, stream);
}

w22_status w22_dit_qknorm_cuda(const w22_dit_qknorm *a, void *stream) {
    W22_TRY(w22_dit_qknorm_check(a, 1, "w22_dit_qknorm_cuda"));
    return w22_dit_qknorm_launch(a, stream);
}

#ifndef W22_HAVE_CUDA
w22_status w22_dit_resnorm_launch(const w22_dit_resnorm *a, void *stream) {
    (void)a, (void)stream;
    return w22_fail(W22_ERR_UNSUPPORTED, "w22_dit_resnorm_cuda: this build of wan22vae has no CUDA (built without nvcc)");
}
w22_status w22_dit_qknorm_launch(const w22_dit_qknorm *a, void *stream) {
    (void)a, (void)stream;
    return w22_fail(W22_ERR_UNSUPPORTED, "w22_dit_qknorm_cuda: this build of wan22vae has no CUDA (built without nvcc)");
}
#endif
