/* The float32 CPU backend: the oracle the CUDA kernels are checked against, and a real fallback. Activations are
 * float views (channels last); convolutions are GEMMs per kernel tap (cpu_conv.c); the rest are plain loops. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "backend.h"
#include "common.h"
#include "cpu/cpu.h"
#include "cpu/gemm.h"
#include "weights/layout.h"

static void cpu_destroy(w22_backend *b) { free(b); }

static w22_status cpu_alloc(w22_backend *b, size_t bytes, void **ptr) {
    (void)b;
    void *p = NULL;
    if (posix_memalign(&p, 64, bytes ? (bytes + 63) / 64 * 64 : 64) != 0 || !p)
        return w22_fail(W22_ERR_OUT_OF_MEMORY, "out of host memory: %zu bytes for the CPU workspace", bytes);
    *ptr = p;
    return W22_OK;
}

static void cpu_free(w22_backend *b, void *ptr) { (void)b; free(ptr); }

static w22_status cpu_weight_upload(w22_backend *b, w22_weight_kind kind, w22_wsrc src, const int64_t *shape,
                                    int ndim, w22_bweight **out) {
    (void)b;
    /* float32 in host memory: the decoder converts (w22_weights_get_f32) */
    if (!src.data || src.dtype != W22_DTYPE_F32 || src.cuda_device >= 0)
        return w22_fail(W22_ERR_INVALID_ARG, "cpu weight_upload: expected float32 in host memory (data %p, dtype %d, "
                        "cuda_device %d)", src.data, (int)src.dtype, src.cuda_device);
    const float *data = (const float *)src.data;
    w22_bweight *w = calloc(1, sizeof *w);
    if (!w) return w22_fail(W22_ERR_OUT_OF_MEMORY, "out of host memory for a weight");
    if (kind == W22_WK_VECTOR) {
        w->n = shape[0];
        w->data = malloc(sizeof(float) * w->n);
        if (!w->data) { free(w); return w22_fail(W22_ERR_OUT_OF_MEMORY, "out of host memory for a weight"); }
        memcpy(w->data, data, sizeof(float) * w->n);
    } else {
        /* [cout][cin][kt][kh][kw] (2D: [cout][cin][kh][kw]) -> taps [kt*kh*kw][cin][cout]: each tap a GEMM B. */
        int cout = (int)shape[0], cin = (int)shape[1];
        int kt = ndim == 5 ? (int)shape[2] : 1, kh = (int)shape[ndim - 2], kw = (int)shape[ndim - 1];
        int taps = kt * kh * kw;
        w->cout = cout; w->cin = cin; w->kt = kt; w->kh = kh; w->kw = kw;
        w->n = (long)taps * cin * cout;
        w->data = malloc(sizeof(float) * w->n);
        if (!w->data) { free(w); return w22_fail(W22_ERR_OUT_OF_MEMORY, "out of host memory for a weight"); }
        w22_layout_taps_f32(data, cout, cin, taps, w->data); /* on every core (src/weights/layout.c) */
    }
    *out = w;
    return W22_OK;
}

static void cpu_weight_free(w22_backend *b, w22_bweight *w) {
    (void)b;
    if (w) free(w->data);
    free(w);
}

static size_t cpu_weight_bytes(const w22_bweight *w) { return w ? sizeof(float) * w->n : 0; }

static w22_status cpu_bytes(w22_backend *b, void *dst, const void *src, size_t bytes) {
    (void)b;
    memmove(dst, src, bytes);
    return W22_OK;
}

static w22_status cpu_zero(w22_backend *b, w22_view v) {
    (void)b;
    for (int f = 0; f < v.f; f++)
        for (int y = 0; y < v.h; y++) {
            float *row = w22_view_at(v, f, y, 0, 0);
            if (v.sw == v.c) memset(row, 0, sizeof(float) * v.w * v.c);
            else for (int x = 0; x < v.w; x++) memset(row + x * v.sw, 0, sizeof(float) * v.c);
        }
    return W22_OK;
}

static w22_status cpu_copy(w22_backend *b, w22_view dst, w22_view src) {
    (void)b;
    if (dst.f != src.f || dst.h != src.h || dst.w != src.w || dst.c != src.c)
        return w22_fail(W22_ERR_INTERNAL, "cpu copy: view %dx%dx%dx%d to %dx%dx%dx%d", src.f, src.h, src.w, src.c,
                        dst.f, dst.h, dst.w, dst.c);
    for (int f = 0; f < src.f; f++)
        for (int y = 0; y < src.h; y++)
            for (int x = 0; x < src.w; x++)
                memmove(w22_view_at(dst, f, y, x, 0), w22_view_at(src, f, y, x, 0), sizeof(float) * src.c);
    return W22_OK;
}

static w22_status cpu_latents_in(w22_backend *b, const void *z, w22_dtype zt, int C, int T, int H, int W, int t0,
                                 int y0, w22_view out) {
    (void)b;
    for (int f = 0; f < out.f; f++)
        for (int y = 0; y < out.h; y++)
            for (int x = 0; x < out.w; x++) {
                float *o = w22_view_at(out, f, y, x, 0);
                for (int c = 0; c < C; c++) {
                    size_t i = (((size_t)c * T + t0 + f) * H + y0 + y) * W + x;
                    o[c] = zt == W22_DTYPE_F32 ? ((const float *)z)[i]
                                               : w22_bf16_to_f32(((const uint16_t *)z)[i]);
                }
            }
    return W22_OK;
}

static w22_status cpu_rmsnorm(w22_backend *b, w22_view in, w22_view out, const w22_bweight *gamma, int silu) {
    (void)b;
    const int C = in.c;
    const float scale = sqrtf((float)C);
    for (int f = 0; f < in.f; f++)
        for (int y = 0; y < in.h; y++)
            for (int x = 0; x < in.w; x++) {
                const float *i = w22_view_at(in, f, y, x, 0);
                float *o = w22_view_at(out, f, y, x, 0);
                double ss = 0;
                for (int c = 0; c < C; c++) ss += (double)i[c] * i[c];
                float n = (float)sqrt(ss);
                float inv = 1.0f / (n > 1e-12f ? n : 1e-12f);
                for (int c = 0; c < C; c++) {
                    float v = i[c] * inv * scale * gamma->data[c];
                    o[c] = silu ? v / (1.0f + expf(-v)) : v;
                }
            }
    return W22_OK;
}

/* Per frame: S = Q K^T / sqrt(C) (GEMM), a row softmax, O = P V (GEMM). Q, K, V rows are pixels. */
static w22_status cpu_attention(w22_backend *b, w22_view q, w22_view k, w22_view v, w22_view out, void *work,
                                size_t work_bytes) {
    (void)work, (void)work_bytes; /* host memory: its own */
    const int C = q.c, nq = q.h * q.w, nk = k.h * k.w;
    float *Q = malloc(sizeof(float) * ((size_t)nq * C * 2 + (size_t)nk * C * 2 + (size_t)nq * nk));
    if (!Q) return w22_fail(W22_ERR_OUT_OF_MEMORY, "out of host memory for attention (%d x %d scores)", nq, nk);
    float *O = Q + (size_t)nq * C, *K = O + (size_t)nq * C, *V = K + (size_t)nk * C, *S = V + (size_t)nk * C;
    for (int f = 0; f < q.f; f++) {
        for (int p = 0; p < nq; p++) memcpy(Q + (size_t)p * C, w22_view_at(q, f, p / q.w, p % q.w, 0), 4 * C);
        for (int p = 0; p < nk; p++) {
            memcpy(K + (size_t)p * C, w22_view_at(k, f, p / k.w, p % k.w, 0), 4 * C);
            memcpy(V + (size_t)p * C, w22_view_at(v, f, p / v.w, p % v.w, 0), 4 * C);
        }
        if (w22_sgemm_stop(b->threads, b->interrupt, nq, nk, C, 1.0f / sqrtf((float)C), Q, C, K, C, 1, 0.0f, S, nk))
            break;
        for (int p = 0; p < nq; p++) {
            float *s = S + (size_t)p * nk, mx = -INFINITY;
            for (int j = 0; j < nk; j++) mx = s[j] > mx ? s[j] : mx;
            double sum = 0;
            for (int j = 0; j < nk; j++) sum += (s[j] = expf(s[j] - mx));
            float inv = (float)(1.0 / sum);
            for (int j = 0; j < nk; j++) s[j] *= inv;
        }
        if (w22_sgemm_stop(b->threads, b->interrupt, nq, C, nk, 1.0f, S, nk, V, C, 0, 0.0f, O, C)) break;
        for (int p = 0; p < nq; p++) memcpy(w22_view_at(out, f, p / out.w, p % out.w, 0), O + (size_t)p * C, 4 * C);
    }
    free(Q);
    return w22_interrupted(b->interrupt) ? w22_stopped() : W22_OK;
}

/* out += DupUp(in), by backend.h's map (the conv's fused dup_in uses the same helpers). */
static w22_status cpu_dupup_add(w22_backend *b, w22_view out, w22_view in, int ft, int first_single) {
    (void)b;
    W22_TRY(w22_dupup_check("cpu dupup_add", &out, &in, ft, first_single));
    const int r = out.c * ft * 4 / in.c;
    for (int fo = 0; fo < out.f; fo++) {
        int s, t;
        w22_dupup_frame(fo, ft, first_single, &s, &t);
        for (int y = 0; y < out.h; y++)
            for (int x = 0; x < out.w; x++) {
                float *o = w22_view_at(out, fo, y, x, 0);
                const float *i = w22_view_at(in, s, y >> 1, x >> 1, 0);
                for (int c = 0; c < out.c; c++) o[c] += i[w22_dupup_channel(c, t, y & 1, x & 1, ft, r)];
            }
    }
    return W22_OK;
}

static w22_status cpu_unpatchify(w22_backend *b, w22_view in, int p, w22_video_dst dst) {
    (void)b;
    for (int f = 0; f < in.f; f++)
        for (int y = 0; y < in.h; y++)
            for (int x = 0; x < in.w; x++) {
                const float *i = w22_view_at(in, f, y, x, 0);
                for (int c = 0; c < 3; c++)
                    for (int p1 = 0; p1 < p; p1++)
                        for (int p2 = 0; p2 < p; p2++) {
                            float v = i[c * p * p + p1 * p + p2];
                            v = v < -1.0f ? -1.0f : v > 1.0f ? 1.0f : v;
                            long o = c * dst.sc + f * dst.sf + (long)(p * y + p2) * dst.sy + (long)(p * x + p1) * dst.sx;
                            if (dst.dtype == W22_DTYPE_F32) ((float *)dst.ptr)[o] = v;
                            else ((uint16_t *)dst.ptr)[o] = w22_f32_to_bf16(v);
                        }
            }
    return W22_OK;
}

static w22_status cpu_sync(w22_backend *b) { (void)b; return W22_OK; }

/* One queue: the side work runs in order; having the ops makes the plan take its overlapped path on the CPU too,
 * which is how the simulated ranks test that path's row split. */
static w22_status cpu_side_noop(w22_backend *b) {
    (void)b;
    return W22_OK;
}

static w22_status cpu_fill(w22_backend *b, void *ptr, size_t bytes, int byte) {
    (void)b;
    if (bytes) memset(ptr, byte, bytes);
    return W22_OK;
}

/* An element's bits: not finite when its exponent is all ones; zero when all but the sign are 0. */
static void cpu_count(const char *p, int es, size_t *nonfinite, size_t *nonzero) {
    if (es == 4) {
        uint32_t u;
        memcpy(&u, p, 4);
        *nonfinite += (u & 0x7f800000u) == 0x7f800000u;
        *nonzero += (u & 0x7fffffffu) != 0;
    } else {
        uint16_t u;
        memcpy(&u, p, 2);
        *nonfinite += (u & 0x7f80u) == 0x7f80u;
        *nonzero += (u & 0x7fffu) != 0;
    }
}

static w22_status cpu_inspect(w22_backend *b, w22_view v, int border, size_t counts[2]) {
    (void)b;
    size_t nz = 0, nf = 0, bnf = 0;
    counts[0] = counts[1] = 0;
    for (long f = 0; f < v.f; f++)
        for (long y = -border; y < v.h + border; y++)
            for (long x = -border; x < v.w + border; x++) {
                const int edge = y < 0 || y >= v.h || x < 0 || x >= v.w;
                for (long c = 0; c < v.c; c++) {
                    const char *p = w22_view_at(v, f, y, x, c);
                    if (edge) cpu_count(p, v.es, &bnf, &nz);
                    else cpu_count(p, v.es, &nf, &(size_t){0});
                }
            }
    counts[0] = nf;
    counts[1] = nz;
    return W22_OK;
}

/* The copy queue (backend.h's copy_begin): one queue on the CPU, so a copy is done when it returns; the plan's
 * prefetching path runs here as on a GPU (tests/test_plan.c also runs it with the copies deferred to the wait). */
static w22_status cpu_copy_begin(w22_backend *b, void *dst, const void *src, size_t bytes, int tag) {
    if (tag < 0 || tag >= W22_COPY_TAGS)
        return w22_fail(W22_ERR_INTERNAL, "cpu copy_begin: tag %d, expected 0 .. %d", tag, W22_COPY_TAGS - 1);
    return cpu_bytes(b, dst, src, bytes);
}
static w22_status cpu_copy_wait(w22_backend *b, int tag) {
    (void)b;
    if (tag < 0 || tag >= W22_COPY_TAGS)
        return w22_fail(W22_ERR_INTERNAL, "cpu copy_wait: tag %d, expected 0 .. %d", tag, W22_COPY_TAGS - 1);
    return W22_OK;
}

static const w22_backend_ops cpu_ops = {
    .name = "cpu",
    .elem_size = sizeof(float),
    .destroy = cpu_destroy,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .weight_upload = cpu_weight_upload,
    .weight_free = cpu_weight_free,
    .weight_bytes = cpu_weight_bytes,
    .to_host = cpu_bytes,
    .from_host = cpu_bytes,
    .copy_bytes = cpu_bytes,
    .zero = cpu_zero,
    .copy = cpu_copy,
    .latents_in = cpu_latents_in,
    .conv = w22_cpu_conv,
    .rmsnorm = cpu_rmsnorm,
    .attention = cpu_attention,
    .dupup_add = cpu_dupup_add,
    .unpatchify = cpu_unpatchify,
    .sync = cpu_sync,
    .side_begin = cpu_side_noop,
    .side_end = cpu_side_noop,
    .side_join = cpu_side_noop,
    .fill = cpu_fill,
    .inspect = cpu_inspect,
    .copy_begin = cpu_copy_begin,
    .copy_wait = cpu_copy_wait,
};

w22_status w22_backend_cpu_create(int threads, w22_backend **out) {
    w22_env_check();
    w22_backend *b = calloc(1, sizeof *b);
    if (!b) return w22_fail(W22_ERR_OUT_OF_MEMORY, "out of host memory for the CPU backend");
    b->ops = &cpu_ops;
    b->threads = threads > 0 ? threads : w22_num_cores(); /* the GEMM's, passed with each call (gemm.h) */
    *out = b;
    return W22_OK;
}
