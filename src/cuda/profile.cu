/* W22_PROFILE=1 (read at backend creation): the CUDA backend's ops timed one by one with events, summed by what
 * they were (op, shape, and for a conv the kernel path it took), and printed to stderr when the backend is
 * destroyed. For finding where a decode's time goes by layer, which a kernel-name profile cannot tell (every
 * conv is one kernel). The events sit between the launches, so the total runs a little slower than without.
 * W22_PROFILE=2: also the parts of an op that launches several kernels (the Winograd path's transforms and GEMMs),
 * as rows marked "part:", inside their op's time and not added to the total. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include "cuda_internal.h"

typedef struct {
    char key[160];
    long calls;
    double ms, flops, bytes;
} prof_row;

typedef struct {
    char key[160];
    double flops, bytes;
    int part; /* a part of an op (W22_PROFILE=2): not added to the ops' time */
} prof_pend;

struct w22_cuda_prof {
    cudaEvent_t *ev;
    prof_pend *pend;
    int n, cap;
    prof_row *rows;
    int nrows, caprows;
    double span_ms, op_ms; /* first event to last, per collect, summed; and the ops' own time */
    long syncs;
    int parts; /* W22_PROFILE=2 */
};

static int prof_row_cmp(const void *a, const void *b) {
    const double x = ((const prof_row *)a)->ms, y = ((const prof_row *)b)->ms;
    return x < y ? 1 : x > y ? -1 : 0;
}

static prof_row *prof_find(w22_cuda_prof *p, const char *key) {
    for (int i = 0; i < p->nrows; i++)
        if (!strcmp(p->rows[i].key, key)) return &p->rows[i];
    if (p->nrows == p->caprows) {
        int cap = p->caprows ? 2 * p->caprows : 64;
        prof_row *r = (prof_row *)realloc(p->rows, cap * sizeof *r);
        if (!r) return NULL;
        p->rows = r;
        p->caprows = cap;
    }
    prof_row *r = &p->rows[p->nrows++];
    memset(r, 0, sizeof *r);
    snprintf(r->key, sizeof r->key, "%s", key);
    return r;
}

/* Reads the recorded events (the stream is synchronized by the caller) into the rows. */
static w22_status prof_collect(w22_cuda *c) {
    w22_cuda_prof *p = c->prof;
    if (!p || !p->n) return W22_OK;
    CU_TRY(cudaEventSynchronize(p->ev[2 * p->n - 1]));
    float span = 0; /* to the last op's end: a part (W22_PROFILE=2) may be the last slot and end before its op */
    for (int i = p->n - 1; i >= 0; i--)
        if (!p->pend[i].part) {
            CU_TRY(cudaEventElapsedTime(&span, p->ev[0], p->ev[2 * i + 1]));
            break;
        }
    p->span_ms += span;
    for (int i = 0; i < p->n; i++) {
        float ms = 0;
        CU_TRY(cudaEventElapsedTime(&ms, p->ev[2 * i], p->ev[2 * i + 1]));
        prof_row *r = prof_find(p, p->pend[i].key);
        if (!r) return w22_fail(W22_ERR_OUT_OF_MEMORY, "profile: out of host memory");
        r->calls++;
        r->ms += ms;
        r->flops += p->pend[i].flops;
        r->bytes += p->pend[i].bytes;
        if (!p->pend[i].part) p->op_ms += ms;
    }
    p->n = 0;
    p->syncs++;
    return W22_OK;
}

static w22_status prof_begin(w22_cuda *c, int *slot) {
    w22_cuda_prof *p = c->prof;
    if (p->n == p->cap) {
        /* a full buffer is read out first (a sync mid-decode: the figures stay right, the run a little slower) */
        if (p->n >= 16384) {
            CU_TRY(cudaStreamSynchronize(c->stream));
            W22_TRY(prof_collect(c));
        } else {
            int cap = p->cap ? 2 * p->cap : 1024;
            cudaEvent_t *ev = (cudaEvent_t *)realloc(p->ev, 2 * cap * sizeof *ev);
            if (!ev) return w22_fail(W22_ERR_OUT_OF_MEMORY, "profile: out of host memory");
            p->ev = ev;
            prof_pend *pd = (prof_pend *)realloc(p->pend, cap * sizeof *pd);
            if (!pd) return w22_fail(W22_ERR_OUT_OF_MEMORY, "profile: out of host memory");
            p->pend = pd;
            for (int i = 2 * p->cap; i < 2 * cap; i++) CU_TRY(cudaEventCreate(&p->ev[i]));
            p->cap = cap;
        }
    }
    *slot = p->n++;
    p->pend[*slot].part = 0;
    CU_TRY(cudaEventRecord(p->ev[2 * *slot], c->stream));
    return W22_OK;
}

static w22_status prof_end(w22_cuda *c, int slot, w22_status s, double flops, double bytes, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
static w22_status prof_end(w22_cuda *c, int slot, w22_status s, double flops, double bytes, const char *fmt, ...) {
    w22_cuda_prof *p = c->prof;
    prof_pend *pd = &p->pend[slot];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(pd->key, sizeof pd->key, fmt, ap);
    va_end(ap);
    pd->flops = flops;
    pd->bytes = bytes;
    cudaError_t e = cudaEventRecord(p->ev[2 * slot + 1], c->stream);
    if (s != W22_OK) return s;
    CU_TRY(e);
    return W22_OK;
}

/* The parts (cuda_internal.h): a slot + 1 from begin (0: parts are off), ended with its key. */
int w22_cuda_prof_part_begin(w22_cuda *c) {
    if (!c->prof || !c->prof->parts) return 0;
    /* a full buffer is read out at an op's begin, never inside an op (its own slot still open): the part is left out */
    if (c->prof->n == c->prof->cap && c->prof->n >= 16384) return 0;
    int slot;
    if (prof_begin(c, &slot) != W22_OK) return 0; /* a profile that cannot time a part leaves it out */
    c->prof->pend[slot].part = 1;
    return slot + 1;
}

void w22_cuda_prof_part_end(w22_cuda *c, int part, double flops, double bytes, const char *fmt, ...) {
    if (!part) return;
    w22_cuda_prof *p = c->prof;
    prof_pend *pd = &p->pend[part - 1];
    int n = snprintf(pd->key, sizeof pd->key, "part: ");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(pd->key + n, sizeof pd->key - n, fmt, ap);
    va_end(ap);
    pd->flops = flops;
    pd->bytes = bytes;
    cudaEventRecord(p->ev[2 * (part - 1) + 1], c->stream);
}

static double elems(w22_view v) { return (double)v.f * v.h * v.w * v.c; }

#define PROF(call, flops, bytes, ...)                                   \
    do {                                                                \
        w22_cuda *c_ = cuda_of(b);                                      \
        int slot_;                                                      \
        W22_TRY(prof_begin(c_, &slot_));                                \
        w22_status s_ = (call);                                         \
        return prof_end(c_, slot_, s_, (flops), (bytes), __VA_ARGS__);  \
    } while (0)

static w22_status p_conv(w22_backend *b, const w22_conv_args *a) {
    const w22_cuda_weight *w = (const w22_cuda_weight *)a->weight;
    const w22_cuda_weight *sc = (const w22_cuda_weight *)a->sc_weight;
    if (!w) return w22_cuda_ops_plain.conv(b, a);
    const int nf = a->time_split ? a->out.f / 2 : a->out.f;
    const double pix = (double)nf * a->out.h * a->out.w;
    /* the work the kernels do: an upsampling 3x3 conv runs as 2x2 phase convs (4 taps) */
    const double taps = a->upsample && w->dev_phase ? 4 : (double)a->kt * a->ks * a->ks;
    const double flops = 2 * pix * w->cout * (taps * w->cin + (a->sc_in && sc ? sc->cin : 0));
    char fl[64];
    snprintf(fl, sizeof fl, "%s%s%s%s%s%s%s", a->upsample ? " up" : "", a->time_split ? " tsplit" : "",
             a->residual ? " res" : "", a->sc_in ? " sc" : "", a->hist[0].ptr ? " hist" : "", a->psum ? " psum" : "",
             a->dup_in ? " dup" : "");
    PROF(w22_cuda_ops_plain.conv(b, a), flops, 0, "conv %dx%dx%d %4d->%4d %4dx%-4d f%d%s [%s]", a->kt, a->ks, a->ks,
         w->cin, w->cout, a->out.h, a->out.w, a->out.f, fl, cuda_of(b)->last_path);
}
static w22_status p_rmsnorm(w22_backend *b, w22_view in, w22_view out, const w22_bweight *g, int silu) {
    PROF(w22_cuda_ops_plain.rmsnorm(b, in, out, g, silu), 0, 2.0 * (elems(in) + elems(out)),
         "rmsnorm%s c%d %dx%d f%d%s", silu ? "+silu" : "", in.c, in.h, in.w, in.f, in.ptr == out.ptr ? " in place" : "");
}
static w22_status p_zero(w22_backend *b, w22_view v) {
    PROF(w22_cuda_ops_plain.zero(b, v), 0, 2.0 * elems(v), "zero c%d %dx%d f%d", v.c, v.h, v.w,
         v.f);
}
static w22_status p_zero_border(w22_backend *b, w22_view v) {
    PROF(w22_cuda_ops_plain.zero_border(b, v), 0, 2.0 * v.f * (2 * (v.w + 2) + 2 * v.h) * v.c, "zero_border");
}
static w22_status p_copy(w22_backend *b, w22_view dst, w22_view src) {
    PROF(w22_cuda_ops_plain.copy(b, dst, src), 0, 4.0 * elems(src), "copy c%d %dx%d f%d", src.c, src.h, src.w, src.f);
}
static w22_status p_copy_bytes(w22_backend *b, void *dst, const void *src, size_t n) {
    PROF(w22_cuda_ops_plain.copy_bytes(b, dst, src, n), 0, 2.0 * n, "copy_bytes");
}
static w22_status p_latents_in(w22_backend *b, const void *z, w22_dtype zt, int C, int T, int H, int W, int t0, int y0,
                               w22_view out) {
    PROF(w22_cuda_ops_plain.latents_in(b, z, zt, C, T, H, W, t0, y0, out), 0, 4.0 * elems(out), "latents_in");
}
static w22_status p_attention(w22_backend *b, w22_view q, w22_view k, w22_view v, w22_view out, void *work,
                              size_t work_bytes) {
    const double flops = 4.0 * q.f * q.h * q.w * (double)k.h * k.w * q.c;
    PROF(w22_cuda_ops_plain.attention(b, q, k, v, out, work, work_bytes), flops, 0, "attention c%d %dx%d f%d", q.c, q.h, q.w, q.f);
}
static w22_status p_dupup_add(w22_backend *b, w22_view out, w22_view in, int ft, int first_single) {
    PROF(w22_cuda_ops_plain.dupup_add(b, out, in, ft, first_single), 0, 2.0 * (2 * elems(out) + elems(in)),
         "dupup_add c%d %dx%d f%d", out.c, out.h, out.w, out.f);
}
static w22_status p_unpatchify(w22_backend *b, w22_view in, int pch, w22_video_dst dst) {
    PROF(w22_cuda_ops_plain.unpatchify(b, in, pch, dst), 0, 4.0 * elems(in), "unpatchify");
}
static w22_status p_sync(w22_backend *b) {
    W22_TRY(w22_cuda_ops_plain.sync(b));
    return prof_collect(cuda_of(b));
}

/* The rows, slowest first, with each one's share of the ops' time and its rate. */
static void prof_report(w22_cuda *c) {
    w22_cuda_prof *p = c->prof;
    if (p->n) {
        cudaStreamSynchronize(c->stream);
        if (prof_collect(c) != W22_OK) fprintf(stderr, "w22 profile: reading the events failed: %s\n", w22_last_error());
    }
    qsort(p->rows, p->nrows, sizeof *p->rows, prof_row_cmp);
    fprintf(stderr, "w22 profile (W22_PROFILE=%d): %ld syncs; ops %.1f ms of %.1f ms from the first event to the last "
            "(%.1f ms between ops); kernels: %s\n", p->parts ? 2 : 1, p->syncs, p->op_ms, p->span_ms,
            p->span_ms - p->op_ms, w22_cuda_path_words(c));
    fprintf(stderr, "%10s %6s %7s %9s %8s %7s  %s\n", "ms", "share", "calls", "us/call", "TFLOP/s", "GB/s", "op");
    for (int i = 0; i < p->nrows; i++) {
        const prof_row *r = &p->rows[i];
        char tf[16] = "", gb[16] = "";
        if (r->flops > 0 && r->ms > 0) snprintf(tf, sizeof tf, "%.0f", r->flops / (r->ms * 1e9));
        if (r->bytes > 0 && r->ms > 0) snprintf(gb, sizeof gb, "%.0f", r->bytes / (r->ms * 1e6));
        fprintf(stderr, "%10.2f %5.1f%% %7ld %9.1f %8s %7s  %s\n", r->ms, 100 * r->ms / (p->op_ms > 0 ? p->op_ms : 1),
                r->calls, 1000 * r->ms / r->calls, tf, gb, r->key);
    }
}

static void p_destroy(w22_backend *b) {
    w22_cuda *c = b ? cuda_of(b) : NULL;
    if (c && c->prof) {
        cudaSetDevice(c->device);
        prof_report(c);
        w22_cuda_prof *p = c->prof;
        for (int i = 0; i < 2 * p->cap; i++) cudaEventDestroy(p->ev[i]);
        free(p->ev);
        free(p->pend);
        free(p->rows);
        free(p);
        c->prof = NULL;
    }
    w22_cuda_ops_plain.destroy(b);
}

static w22_backend_ops make_profiled(void) {
    w22_backend_ops o = w22_cuda_ops_plain;
    o.destroy = p_destroy;
    o.copy_bytes = p_copy_bytes;
    o.zero = p_zero;
    o.zero_border = p_zero_border;
    o.copy = p_copy;
    o.latents_in = p_latents_in;
    o.conv = p_conv;
    o.rmsnorm = p_rmsnorm;
    o.attention = p_attention;
    o.dupup_add = p_dupup_add;
    o.unpatchify = p_unpatchify;
    o.sync = p_sync;
    return o;
}
static const w22_backend_ops cuda_ops_profiled = make_profiled();

/* At creation: the profiled op table when W22_PROFILE is set (and not "0"). */
w22_status w22_cuda_prof_init(w22_backend *b) {
    const char *e = getenv("W22_PROFILE");
    if (!e || !e[0] || !strcmp(e, "0")) return W22_OK;
    w22_cuda *c = cuda_of(b);
    c->prof = (w22_cuda_prof *)calloc(1, sizeof *c->prof);
    if (!c->prof) return w22_fail(W22_ERR_OUT_OF_MEMORY, "profile: out of host memory");
    c->prof->parts = !strcmp(e, "2");
    b->ops = &cuda_ops_profiled;
    return W22_OK;
}
