/* GPU op conformance (ggml test-backend-ops style): every op of the CUDA backend against the float32 CPU backend
 * on real decoder shapes at reduced spatial size and on edge shapes, plus a conv micro-benchmark.
 *
 *   cuda_ops                 all cases; one line each, then "N passed, N failed"; exit 0 iff all pass
 *   cuda_ops -o conv         only cases whose name contains "conv" (-o psum: the partial-sums conv alone)
 *   cuda_ops --perf          conv (and attention, norm) timings at the real heavy shapes, TFLOP/s; with -o NAME
 *                            only the lines whose name contains NAME (--perf -o conv_out); --iters N timed calls
 *                            per line (default 10: short bursts; a few hundred reach the sustained clock)
 *   cuda_ops --device N      GPU ordinal (default 0)
 *   cuda_ops --selftest-cpu  the harness itself, CPU backend against CPU backend (no GPU needed)
 *
 * Kernel paths: nothing here restates the dispatch (src/cuda/route.h decides). After each conv the backend's query
 * (w22_backend_cuda_last_route) gives its decision and what its launch sites ran, which must agree (the kernel; for
 * the TMA conv the launches of its plan, each with route.h's tile, clusters, staging and split); and the routes the
 * cases cover are counted: a full run fails if one the cases were built for was never taken (check_coverage).
 *
 * Method: inputs are fresh random values per case, rounded to bf16 on the host, so that both backends see the same
 * numbers; outputs start as NaN on both sides (an element the op does not write fails), and every buffer has a
 * margin around the op's view whose contents must not change (a write outside the view fails). Nonfinite outputs
 * are reported apart from numeric errors.
 *
 * Tolerances: with identical bf16 inputs the CUDA result differs from the CPU's fp32 result only by (a) its one
 * final rounding to bf16, at most 2^-8 relative (half an ulp of an 8-bit significand), and (b) fp32 summation
 * order, ~K * 2^-24 relative to the sum of |terms|, far below (a). So max abs err <= 2^-7 * max|ref| (2x margin)
 * + 1e-5, and relative rms err <= 1e-2 (bf16 rounding alone gives ~1e-3). Attention adds the rounding of the
 * probabilities to bf16 before P V: an error <= 2^-8 * sum_j p_j |v_j| <= 2^-8 max|v|, so its bound is
 * 2^-7 * max(|v|, |ref|). Pure data movement (zero, copy, latents_in, unpatchify) must be exact. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cuda_runtime.h>
#include "backend.h"
#include "common.h"
#include "testutil.h"
#include "weights/layout.h"
#include "cuda/route.h"
#include "cuda/lower.h"

/* Not in backend.h: which kernel the CUDA backend's last GEMM ran on (src/cuda/cuda_backend.cu). */
const char *w22_backend_cuda_last_path(const w22_backend *b);
int w22_backend_cuda_tma_clusters(const w22_backend *b); /* the TMA conv's clusters of 2 that fit at once */

static w22_backend *cpu, *gpu;
static int selftest; /* --selftest-cpu: "gpu" is a second CPU backend, to check this harness without a GPU */

static const char *gpu_path(void) { return selftest ? "cpu" : w22_backend_cuda_last_path(gpu); }

static int check_route(const char *op, const char *shape);
static const char *filter;
static uint64_t seed = 1;
#define TOL_BF16 (1.0 / 128.0) /* 2^-7 */
#define RMS_TOL 1e-2

static int selected(const char *name) { return !filter || strstr(name, filter); }

/* ---- buffers on both backends ---- */

/* A tensor of f x h x w x c inside a buffer with a margin of `border` rows and cols on each side (the conv's
 * readable border), on the CPU (float) and the GPU (bf16), with its host copy. */
typedef struct {
    int f, h, w, c, border;
    size_t n;     /* elements of the whole buffer */
    float *host;  /* what was uploaded (bf16-rounded values, NaN for poison) */
    void *cbuf, *gbuf;
    w22_view cv, gv;
} tens;

enum { FILL_RANDOM, FILL_POISON, FILL_ALL_RANDOM }; /* random interior & zero margin / NaN everywhere / random all */

static float bf16r(float x) { return w22_bf16_to_f32(w22_f32_to_bf16(x)); }

static int upload(w22_backend *b, void *dst, const float *src, size_t n) {
    w22_status s;
    if (b->ops->elem_size == 4) {
        s = b->ops->from_host(b, dst, src, n * 4);
    } else {
        uint16_t *t = malloc(n * 2 + 2);
        for (size_t i = 0; i < n; i++) t[i] = w22_f32_to_bf16(src[i]);
        s = b->ops->from_host(b, dst, t, n * 2);
        free(t);
    }
    if (s != W22_OK) fprintf(stderr, "  upload to %s: %s\n", b->ops->name, w22_last_error());
    return s == W22_OK;
}

static int download(w22_backend *b, float *dst, const void *src, size_t n) {
    w22_status s;
    if (b->ops->elem_size == 4) {
        s = b->ops->to_host(b, dst, src, n * 4);
    } else {
        uint16_t *t = malloc(n * 2 + 2);
        s = b->ops->to_host(b, t, src, n * 2);
        for (size_t i = 0; i < n; i++) dst[i] = w22_bf16_to_f32(t[i]);
        free(t);
    }
    if (s != W22_OK) fprintf(stderr, "  download from %s: %s\n", b->ops->name, w22_last_error());
    return s == W22_OK;
}

static w22_view make_view(void *base, int es, int f, int h, int w, int c, int border) {
    const long W2 = w + 2L * border, H2 = h + 2L * border;
    w22_view v = {(char *)base + (size_t)((border * W2 + border) * c) * es, f, h, w, c, H2 * W2 * c, W2 * c, c, es};
    return v;
}

static int tens_new(tens *t, int f, int h, int w, int c, int border, int fill, float lo, float hi) {
    memset(t, 0, sizeof *t);
    t->f = f, t->h = h, t->w = w, t->c = c, t->border = border;
    t->n = (size_t)f * (h + 2 * border) * (w + 2 * border) * c;
    t->host = malloc(t->n * 4 + 4);
    if (!t->host) return 0;
    if (fill == FILL_POISON) {
        t_fill_nan(t->host, t->n);
    } else {
        t_fill_uniform(t->host, t->n, seed++, lo, hi);
        for (size_t i = 0; i < t->n; i++) t->host[i] = bf16r(t->host[i]);
        if (fill == FILL_RANDOM && border) {
            w22_view hv = make_view(t->host, 4, f, h, w, c, border);
            for (int ff = 0; ff < f; ff++)
                for (int y = -border; y < h + border; y++)
                    for (int x = -border; x < w + border; x++)
                        if (y < 0 || y >= h || x < 0 || x >= w) memset(w22_view_at(hv, ff, y, x, 0), 0, 4 * c);
        }
    }
    if (cpu->ops->alloc(cpu, t->n * 4, &t->cbuf) != W22_OK || gpu->ops->alloc(gpu, t->n * gpu->ops->elem_size, &t->gbuf) != W22_OK) {
        fprintf(stderr, "  alloc of %zu elements: %s\n", t->n, w22_last_error());
        return 0;
    }
    t->cv = make_view(t->cbuf, 4, f, h, w, c, border);
    t->gv = make_view(t->gbuf, (int)gpu->ops->elem_size, f, h, w, c, border);
    return upload(cpu, t->cbuf, t->host, t->n) && upload(gpu, t->gbuf, t->host, t->n);
}

static void tens_free(tens *t) {
    if (t->cbuf) cpu->ops->free(cpu, t->cbuf);
    if (t->gbuf) gpu->ops->free(gpu, t->gbuf);
    free(t->host);
    memset(t, 0, sizeof *t);
}

static float max_abs_interior(const tens *t) {
    w22_view hv = make_view(t->host, 4, t->f, t->h, t->w, t->c, t->border);
    float m = 0;
    for (int f = 0; f < t->f; f++)
        for (int y = 0; y < t->h; y++)
            for (int x = 0; x < t->w; x++)
                for (int c = 0; c < t->c; c++) m = fmaxf(m, fabsf(*(float *)w22_view_at(hv, f, y, x, c)));
    return m;
}

/* ---- comparison ---- */

static int same_or_both_nan(float a, float b) { return (isnan(a) && isnan(b)) || a == b; }

/* Compares the GPU's and the CPU's contents of t: channels [c0, c0 + nc) of the interior against each other
 * within the tolerance tol_rel * max(max|ref|, scale_ref) + tol_abs (tol_rel 0: exact), and everything else of
 * the buffer against what was uploaded (no writes outside the op's view, on either backend). Prints the case line. */
static void compare(const char *op, const char *shape, const tens *t, int c0, int nc, double tol_rel,
                    double tol_abs, double scale_ref, const char *path) {
    float *g = malloc(t->n * 4 + 4), *c = malloc(t->n * 4 + 4);
    int ok = download(gpu, g, t->gbuf, t->n) && download(cpu, c, t->cbuf, t->n);
    w22_view gv = make_view(g, 4, t->f, t->h, t->w, t->c, t->border);
    w22_view cv = make_view(c, 4, t->f, t->h, t->w, t->c, t->border);
    w22_view hv = make_view(t->host, 4, t->f, t->h, t->w, t->c, t->border);
    size_t inside = (size_t)t->f * t->h * t->w * nc, k = 0, g_out = 0, c_out = 0, c_nonfinite = 0;
    float *a = malloc(inside * 4 + 4), *r = malloc(inside * 4 + 4);
    long worst_at[4] = {0};
    for (int f = 0; f < t->f; f++)
        for (int y = -t->border; y < t->h + t->border; y++)
            for (int x = -t->border; x < t->w + t->border; x++)
                for (int ch = 0; ch < t->c; ch++) {
                    float gvv = *(float *)w22_view_at(gv, f, y, x, ch), cvv = *(float *)w22_view_at(cv, f, y, x, ch);
                    float h0 = *(float *)w22_view_at(hv, f, y, x, ch);
                    if (y >= 0 && y < t->h && x >= 0 && x < t->w && ch >= c0 && ch < c0 + nc) {
                        a[k] = gvv;
                        r[k] = cvv;
                        if (!isfinite(cvv)) c_nonfinite++;
                        k++;
                    } else {
                        g_out += !same_or_both_nan(gvv, h0);
                        c_out += !same_or_both_nan(cvv, h0);
                    }
                }
    t_diff d = t_compare(a, r, inside);
    double maxref = 0;
    for (size_t i = 0; i < inside; i++)
        if (isfinite(r[i])) maxref = fmax(maxref, fabs(r[i]));
    {
        size_t w = d.worst;
        worst_at[3] = (long)(w % nc);
        w /= nc;
        worst_at[2] = (long)(w % t->w);
        w /= t->w;
        worst_at[1] = (long)(w % t->h);
        worst_at[0] = (long)(w / t->h);
    }
    const double tol = tol_rel * fmax(maxref, scale_ref) + tol_abs;
    const double rel_rms = d.ref_rms > 0 ? d.rms / d.ref_rms : d.rms;
    const int pass = ok && d.nonfinite == 0 && c_nonfinite == 0 && g_out == 0 && c_out == 0 && d.max_abs <= tol &&
                     (tol_rel == 0 ? d.max_abs == 0 : rel_rms <= RMS_TOL);
    printf("%-10s %-46s max_abs %.3e (tol %.3e, max|ref| %.3g) rel_rms %.2e", op, shape, d.max_abs, tol, maxref,
           rel_rms);
    if (path && path[0]) printf(" [%s]", path);
    printf(" %s\n", pass ? "ok" : "FAIL");
    if (!pass) {
        if (!ok) printf("    a download failed\n");
        if (d.nonfinite) printf("    %zu GPU outputs are NaN/Inf (unwritten, or overflow) of %zu\n", d.nonfinite, inside);
        if (c_nonfinite) printf("    %zu CPU outputs are NaN/Inf: the reference itself is broken\n", c_nonfinite);
        if (g_out) printf("    %zu elements outside the view changed on the GPU (writes out of bounds)\n", g_out);
        if (c_out) printf("    %zu elements outside the view changed on the CPU backend\n", c_out);
        if (inside)
            printf("    worst at (f %ld, y %ld, x %ld, c %ld): gpu %.6g cpu %.6g\n", worst_at[0], worst_at[1],
                   worst_at[2], worst_at[3] + c0, a[d.worst], r[d.worst]);
    }
    CHECK(pass, "%s %s", op, shape);
    free(a);
    free(r);
    free(g);
    free(c);
}

/* Both backends ran the op; a failure of either is a failed case with the message. */
static int both_ok(const char *op, const char *shape, w22_status sc, const char *cpu_err, w22_status sg) {
    if (sc == W22_OK && sg == W22_OK) return 1;
    printf("%-10s %-46s FAIL: cpu %s %s / gpu %s %s\n", op, shape, w22_status_string(sc), sc ? cpu_err : "",
           w22_status_string(sg), sg ? w22_last_error() : "");
    CHECK(0, "%s %s ran", op, shape);
    return 0;
}

/* ---- weights ---- */

typedef struct {
    w22_bweight *c, *g;
} wpair;

static int wpair_new(wpair *w, w22_weight_kind kind, const int64_t *shape, int ndim, float lo, float hi) {
    size_t n = 1;
    for (int i = 0; i < ndim; i++) n *= (size_t)shape[i];
    float *d = malloc(n * 4 + 4);
    t_fill_uniform(d, n, seed++, lo, hi);
    if (kind == W22_WK_CONV)
        for (size_t i = 0; i < n; i++) d[i] = bf16r(d[i]); /* the GPU stores conv weights in bf16 */
    w->c = w->g = NULL;
    const w22_wsrc src = {d, W22_DTYPE_F32, -1};
    w22_status s1 = cpu->ops->weight_upload(cpu, kind, src, shape, ndim, &w->c);
    w22_status s2 = gpu->ops->weight_upload(gpu, kind, src, shape, ndim, &w->g);
    free(d);
    if (s1 != W22_OK || s2 != W22_OK) {
        printf("weight upload failed: %s\n", w22_last_error());
        CHECK(0, "weight upload");
        return 0;
    }
    return 1;
}

void w22_backend_cuda_weight_bufs(const w22_bweight *bw, const void *dev[2], size_t bytes[2]);
int w22_backend_cuda_swap_winograd_min(w22_backend *b, int n);

/* Bytes of a GPU buffer (or, dev NULL, of host memory) against the host's; prints the first difference. */
static int same_bytes(const char *what, const void *dev, const void *host_copy, const void *ref, size_t bytes) {
    unsigned char *got = malloc(bytes);
    if (dev) {
        if (cudaMemcpy(got, dev, bytes, cudaMemcpyDeviceToHost) != cudaSuccess) memset(got, 0xff, bytes);
    } else if (host_copy) {
        memcpy(got, host_copy, bytes);
    } else {
        memset(got, 0xff, bytes);
    }
    size_t k = 0;
    while (k < bytes && got[k] == ((const unsigned char *)ref)[k]) k++;
    if (k < bytes) printf("  %s: byte %zu of %zu differs (0x%02x, layout.c 0x%02x)\n", what, k, bytes, got[k],
                          ((const unsigned char *)ref)[k]);
    free(got);
    return k == bytes;
}

/* The GPU's weight layouts (src/cuda/weights_gpu.cu) against layout.c's host functions, byte for byte: each source
 * dtype, from host and from GPU memory, for a direct 3x3x3 conv, a Winograd one (the backend's threshold, 512), a 2D
 * 3x3 conv with its phases, a 1x1x1 conv and a vector. Random values over several binades, so that the sums and
 * products of the phases and G g G^T round: a reordered or fused sum differs in some bytes. */
static void weight_layout_case(const char *name, w22_weight_kind kind, const int64_t *shape, int ndim, w22_dtype dt,
                               int on_gpu) {
    char label[160];
    snprintf(label, sizeof label, "weights %s %s from %s", name, dt == W22_DTYPE_F32 ? "f32" : dt == W22_DTYPE_BF16 ?
             "bf16" : "f16", on_gpu ? "GPU memory" : "host memory");
    if (!selected(label)) return;
    size_t n = 1;
    for (int i = 0; i < ndim; i++) n *= (size_t)shape[i];
    float *f = malloc(n * 4);
    t_fill_uniform(f, n, seed++, -1.f, 1.f);
    for (size_t i = 0; i < n; i++) f[i] *= (float)(1 << (i * 7 % 9)) / 16.f; /* magnitudes 1/16 .. 16 */
    const size_t es = w22_dtype_size(dt);
    void *src = malloc(n * es);
    w22_from_f32(f, n, dt, src);
    w22_to_f32(src, dt, n, f); /* the reference's input: the source's values, widened as the GPU widens them */
    void *dsrc = NULL;
    if (on_gpu && (cudaMalloc(&dsrc, n * es) != cudaSuccess || cudaMemcpy(dsrc, src, n * es, cudaMemcpyHostToDevice)
                   != cudaSuccess)) {
        CHECK(0, label);
        free(f), free(src);
        return;
    }
    /* The caller's side of w22_weights_from_device's contract: what wrote the weights is complete before the call.
     * cudaMemcpy from pageable memory may return before its last DMA lands, and the backend reads on its own
     * non-blocking stream (the public call's finite check on the legacy stream orders it; this op-level call does
     * not): without this sync one byte in 331776 came back stale on the H200 in session 29. */
    if (on_gpu) cudaDeviceSynchronize();
    const w22_wsrc ws = {on_gpu ? dsrc : src, dt, on_gpu ? 0 : -1};
    w22_bweight *w = NULL;
    w22_status s = gpu->ops->weight_upload(gpu, kind, ws, shape, ndim, &w);
    int ok = s == W22_OK;
    if (!ok) printf("  %s: %s\n", label, w22_last_error());
    if (ok) {
        const void *dev[2];
        size_t bytes[2];
        w22_backend_cuda_weight_bufs(w, dev, bytes);
        if (kind == W22_WK_VECTOR) {
            ok = same_bytes("vector", dev[0], NULL, f, n * 4);
        } else {
            const int cout = (int)shape[0], cin = (int)shape[1], vol = (int)(n / ((size_t)cout * cin));
            uint16_t *ref = malloc((size_t)16 * cout * cin * 2 > n * 2 ? (size_t)16 * cout * cin * 2 : n * 2);
            w22_layout_conv_bf16(f, cout, cin, vol, ref);
            ok = same_bytes("direct", dev[0], NULL, ref, bytes[0]);
            if (vol == 27 && (cout & 1)) { /* the zero row after an odd cout's taps (conv_psum.cu) */
                const size_t pad = (size_t)9 * cin * 2;
                unsigned char *z = malloc(pad), *zero = calloc(1, pad);
                ok &= cudaMemcpy(z, (const char *)dev[0] + bytes[0], pad, cudaMemcpyDeviceToHost) == cudaSuccess &&
                      memcmp(z, zero, pad) == 0;
                free(z), free(zero);
            }
            const int phases = ndim == 4 && shape[2] == 3 && shape[3] == 3;
            CHECK(phases == (dev[1] != NULL), "phase weights for a 2D 3x3 conv");
            if (phases) {
                w22_layout_phases_bf16(f, cout, cin, ref);
                ok &= same_bytes("phases", dev[1], NULL, ref, bytes[1]);
            }
            free(ref);
        }
        gpu->ops->weight_free(gpu, w);
    }
    printf("%-64s %s\n", label, ok ? "ok (bytes equal layout.c's)" : "FAIL");
    CHECK(ok, label);
    if (dsrc) cudaFree(dsrc);
    free(f), free(src);
}

static void weight_layout_cases(void) {
    static const int64_t direct[] = {96, 64, 3, 3, 3}, wino[] = {512, 512, 3, 3, 3}, two_d[] = {48, 64, 3, 3},
                         pw[] = {40, 48, 1, 1, 1}, vec[] = {1000}, odd[] = {3, 96, 3, 3, 3};
    /* the decoder's default threshold (this program runs with W22_WINOGRAD=0, see main) */
    const int old = w22_backend_cuda_swap_winograd_min(gpu, w22_route_wino_min_default(!strcmp(w22_backend_cuda_path(gpu), "hopper")));
    for (int dt = 0; dt < 3; dt++)
        for (int on_gpu = 0; on_gpu < 2; on_gpu++) {
            const w22_dtype t = dt == 0 ? W22_DTYPE_F32 : dt == 1 ? W22_DTYPE_BF16 : W22_DTYPE_F16;
            weight_layout_case("conv 3x3x3 64->96", W22_WK_CONV, direct, 5, t, on_gpu);
            weight_layout_case("conv 3x3x3 512->512 (a Winograd conv: the direct layout too)", W22_WK_CONV, wino, 5, t,
                               on_gpu);
            weight_layout_case("conv 3x3 64->48 (phases)", W22_WK_CONV, two_d, 4, t, on_gpu);
            weight_layout_case("conv 1x1x1 48->40", W22_WK_CONV, pw, 5, t, on_gpu);
            weight_layout_case("conv 3x3x3 96->3 (odd cout: a zero row after)", W22_WK_CONV, odd, 5, t, on_gpu);
            weight_layout_case("vector 1000", W22_WK_VECTOR, vec, 1, t, on_gpu);
        }
    w22_backend_cuda_swap_winograd_min(gpu, old);
    w22_backend_cuda_weights_done(gpu);
}

static void wpair_free(wpair *w) {
    if (w->c) cpu->ops->weight_free(cpu, w->c);
    if (w->g) gpu->ops->weight_free(gpu, w->g);
}

/* ---- cases ---- */

enum { RES_NONE, RES_SEPARATE, RES_INPLACE };

/* conv_hist_case sets it: the GPU conv reads its two history frames from separate buffers (w22_conv_args.hist,
 * the plan's in-place causal caches) while the CPU reference reads the usual contiguous window; the GPU copy of
 * the window's first two frames is poisoned, so a kernel that reads them there fails. */
static int conv_hist;
/* With conv_hist, conv_zero_hist sets w22_conv_args.hist_zero = 2 on the GPU conv (a decode's first chunk: its taps
 * over the two history frames may be skipped; one output frame lowers to the last tap alone, lower.h): the CPU
 * reference's window starts with two zero frames, the GPU's history buffers hold NaN, so a kernel that still reads
 * them fails. */
static int conv_zero_hist;

/* ---- kernel paths: the backend's answer ---- */

static const char *const plan_names[] = {"tiles", "pairs", "pairs+tail"};
static const char *const epi_names[] = {"pairs", "vec", "overlapped", "tma-store"};
static const char *const step_names[] = {"direct", "psum", "phases", "winograd"};
/* the routes the cases took: kernels, and on the TMA conv its plans, epilogues, split tails, phases in one launch */
static long seen_kernel[W22_GEMM_KERNELS], seen_plan[3], seen_epi[4], seen_split, seen_phases4, seen_step[4], seen_dup_fused,
    seen_wino_mma_batch;

/* Set by a block of cases built for one step of the conv (the Winograd cases, W22_CONV_WINOGRAD, and one that must
 * fall back, W22_CONV_DIRECT); -1: any. */
static int want_step = -1;
int w22_backend_cuda_swap_winograd_min(w22_backend *b, int n); /* tests only: the threshold for the next uploads */
size_t w22_backend_cuda_swap_attention_max(w22_backend *b, size_t bytes); /* tests only: the attention's own cap */

/* The last conv's decision against what ran, and counted. Returns 1 when they agree (or under --selftest-cpu). */
static int check_route(const char *op, const char *shape) {
    if (selftest) return 1;
    w22_route r;
    w22_backend_cuda_last_route(gpu, &r);
    int ok = r.kernel == r.ran_kernel;
    if (r.kernel == W22_GEMM_TMA) {
        ok &= r.launches == (r.plan == W22_TMA_PAIRS_TAIL ? 2 : 1);
        for (int i = 0; i < r.launches && i < 2; i++) {
            const w22_route_launch *l = &r.ran[i];
            const int cl = r.plan == W22_TMA_TILES || (r.plan == W22_TMA_PAIRS_TAIL && i == 1) ? 1 : 2;
            ok &= l->cl == cl && l->te == (r.epi == W22_EPI_TMA_STORE ? 4 : 0) &&
                  l->stages == w22_route_tma_stages(l->bn, l->te) && (l->bn == 256 || (cl == 1 && !l->te));
        }
        ok &= r.launches > 0 && r.ran[r.launches - 1].split == r.want_split;
        if (ok) {
            seen_plan[r.plan]++, seen_epi[r.epi]++, seen_split += r.want_split > 1, seen_phases4 += r.phases4;
        }
    }
    if (ok) {
        seen_kernel[r.kernel]++, seen_step[r.step]++;
        seen_wino_mma_batch += r.step == W22_CONV_WINOGRAD && r.batch && r.kernel != W22_GEMM_TMA;
        seen_dup_fused += r.step == W22_CONV_PHASES && r.dup_fused;
    }
    if (!ok) {
        printf("    route of the last conv: step %s, kernel %s (ran %s)", step_names[r.step], w22_route_kernel_name(r.kernel),
               w22_route_kernel_name(r.ran_kernel));
        if (r.kernel == W22_GEMM_TMA) {
            printf(", plan %s, epilogue %s, split %d, %d launch(es):", plan_names[r.plan], epi_names[r.epi],
                   r.want_split, r.launches);
            for (int i = 0; i < r.launches && i < 2; i++)
                printf(" [bn %d stages %d cl %d te %d split %d]", r.ran[i].bn, r.ran[i].stages, r.ran[i].cl,
                       r.ran[i].te, r.ran[i].split);
        }
        printf(": FAIL (the decision and the launch disagree)\n");
    }
    CHECK(ok, "%s %s: the route decided is the route run", op, shape);
    if (want_step >= 0 && (int)r.step != want_step) {
        printf("    expected the step %s, ran %s: FAIL\n", step_names[want_step], step_names[r.step]);
        CHECK(0, "%s %s: the step built for", op, shape);
        ok = 0;
    }
    return ok;
}

/* Every route the cases were built for was taken at least once (a full run only: -o runs a subset), on the backend's
 * kernel path (route.h): the Hopper path's TMA conv and its launches, or the portable path's mma.sync tiles (the
 * widest route.h gives N 1024 there) and Winograd's batch as one mma launch; both the row kernels. */
static void check_coverage(void) {
    if (selftest) return;
    const int hopper = !strcmp(w22_backend_cuda_path(gpu), "hopper");
    printf("-- routes taken:");
    for (int k = 0; k < W22_GEMM_KERNELS; k++) printf(" %s %ld,", w22_route_kernel_name(k), seen_kernel[k]);
    printf("\n   TMA plans: tiles %ld, pairs %ld, pairs+tail %ld; epilogues: pairs %ld, vec %ld, overlapped %ld, "
           "tma-store %ld; split tails %ld; phases in one launch %ld\n   steps: direct %ld, psum %ld, phases %ld, "
           "winograd %ld; DupUp fused %ld --\n", seen_plan[0], seen_plan[1], seen_plan[2], seen_epi[0],
           seen_epi[1], seen_epi[2], seen_epi[3], seen_split, seen_phases4, seen_step[0], seen_step[1], seen_step[2],
           seen_step[3], seen_dup_fused);
    if (filter) return;
    const w22_gemm_kernel wide = w22_route_mma_tile(1024); /* the mma.sync tile of the widest convs */
    const struct { const char *what; long n; int path; } need[] = { /* path: 1 Hopper, 0 portable, -1 both */
        {"the TMA conv", seen_kernel[W22_GEMM_TMA], 1},
        {"the 2D row tiles", seen_kernel[W22_GEMM_ROWS2D], -1},
        {"the mma.sync tile of N >= 256", seen_kernel[wide], -1},
        {"the mma.sync 128 x 96 tile", seen_kernel[W22_GEMM_MMA_N96], -1},
        {"the scalar kernel", seen_kernel[W22_GEMM_SCALAR], -1},
        {"TMA tiles on the SMs", seen_plan[W22_TMA_TILES], 1},
        {"TMA pairs, then a tail", seen_plan[W22_TMA_PAIRS_TAIL], 1},
        {"the split tail", seen_split, 1},
        {"the TMA store", seen_epi[W22_EPI_TMA_STORE], 1},
        {"the overlapped epilogue", seen_epi[W22_EPI_OVERLAP], 1},
        {"four phases in one launch", seen_phases4, 1},
        {"the partial-sums conv", seen_step[W22_CONV_PSUM], -1},
        {"the DupUp fused into the phases", seen_dup_fused, -1},
        {"Winograd F(4x4, 3x3)", seen_step[W22_CONV_WINOGRAD], -1},
        {"Winograd's 36 GEMMs as one mma.sync launch", seen_wino_mma_batch, 0}};
    for (size_t i = 0; i < sizeof need / sizeof need[0]; i++)
        if (need[i].path < 0 || need[i].path == hopper) CHECK(need[i].n > 0, "the cases took %s", need[i].what);
    if (!hopper) /* nothing of the Hopper path's own ran (its kernels have no image on other GPUs) */
        CHECK(!seen_kernel[W22_GEMM_TMA] && !seen_phases4, "the portable path ran no Hopper kernel (TMA %ld, phases4 %ld)",
              seen_kernel[W22_GEMM_TMA], seen_phases4);
}

static void conv_case(const char *tag, int cin, int cout, int F, int h, int w, int kt, int ks, int upsample,
                      int time_split, int res, int sc_cin) {
    char shape[160];
    snprintf(shape, sizeof shape, "%s %dx%dx%dx%d->%d k%dx%d%s%s%s%s%s", tag, F + kt - 1, h, w, cin, cout, kt, ks,
             upsample ? " up" : "", time_split ? " split" : "", res == RES_INPLACE ? " res=out" : res ? " res" : "",
             sc_cin ? " sc" : "", conv_zero_hist ? " hist=0" : conv_hist ? " hist" : "");
    if (!selected("conv")) return;
    const int oh = upsample ? 2 * h : h, ow = upsample ? 2 * w : w;
    const int of = time_split ? 2 * F : F, oc = time_split ? cout / 2 : cout;
    tens in, out, rs, sc;
    memset(&rs, 0, sizeof rs);
    memset(&sc, 0, sizeof sc);
    /* weights ~ U(-a, a) with a = sqrt(3 / fan_in): outputs of unit size */
    const float a = sqrtf(3.0f / (cin * kt * ks * ks)), asc = sc_cin ? sqrtf(3.0f / sc_cin) : 0;
    wpair wt, bias, scw = {0}, scb = {0};
    int64_t wshape[5] = {cout, cin, kt, ks, ks}, b1[1] = {cout};
    int ndim = 5;
    if (kt == 1 && ks == 3) { /* 2D conv weights come as [cout, cin, kh, kw] */
        wshape[2] = ks;
        ndim = 4;
    }
    if (!tens_new(&in, F + kt - 1, h, w, cin, 1, FILL_RANDOM, -1, 1) ||
        !tens_new(&out, of, oh, ow, oc, 1, res == RES_INPLACE ? FILL_RANDOM : FILL_POISON, -1, 1) ||
        !wpair_new(&wt, W22_WK_CONV, wshape, ndim, -a, a) || !wpair_new(&bias, W22_WK_VECTOR, b1, 1, -0.5f, 0.5f)) {
        CHECK(0, "conv setup %s", shape);
        return;
    }
    if (res == RES_SEPARATE && !tens_new(&rs, of, oh, ow, oc, 0, FILL_RANDOM, -1, 1)) return;
    if (sc_cin) {
        int64_t s5[5] = {cout, sc_cin, 1, 1, 1};
        if (!tens_new(&sc, F, oh, ow, sc_cin, 0, FILL_RANDOM, -1, 1) ||
            !wpair_new(&scw, W22_WK_CONV, s5, 5, -asc, asc) || !wpair_new(&scb, W22_WK_VECTOR, b1, 1, -0.5f, 0.5f))
            return;
    }
    w22_view rc = res == RES_INPLACE ? out.cv : rs.cv, rg = res == RES_INPLACE ? out.gv : rs.gv;
    w22_conv_args ac = {.in = in.cv, .out = out.cv, .weight = wt.c, .bias = bias.c, .kt = kt, .ks = ks,
                        .upsample = upsample, .time_split = time_split, .residual = res ? &rc : NULL,
                        .sc_in = sc_cin ? &sc.cv : NULL, .sc_weight = scw.c, .sc_bias = scb.c};
    w22_conv_args ag = {.in = in.gv, .out = out.gv, .weight = wt.g, .bias = bias.g, .kt = kt, .ks = ks,
                        .upsample = upsample, .time_split = time_split, .residual = res ? &rg : NULL,
                        .sc_in = sc_cin ? &sc.gv : NULL, .sc_weight = scw.g, .sc_bias = scb.g};
    tens h0, h1;
    memset(&h0, 0, sizeof h0);
    memset(&h1, 0, sizeof h1);
    if (conv_hist && kt == 3) {
        const size_t fb = in.n / in.f * gpu->ops->elem_size; /* one frame with its border */
        if (!tens_new(&h0, 1, h, w, cin, 1, FILL_POISON, 0, 0) || !tens_new(&h1, 1, h, w, cin, 1, FILL_POISON, 0, 0) ||
            (!conv_zero_hist && (gpu->ops->copy_bytes(gpu, h0.gbuf, in.gbuf, fb) != W22_OK ||
                                 gpu->ops->copy_bytes(gpu, h1.gbuf, (char *)in.gbuf + fb, fb) != W22_OK))) {
            CHECK(0, "conv hist setup %s", shape);
            return;
        }
        if (conv_zero_hist) { /* the reference's history: the causal zero padding (the CPU buffer, borders and all) */
            memset(in.cbuf, 0, 2 * (in.n / in.f) * sizeof(float));
            ag.hist_zero = 2;
        }
        float *nan2 = malloc(2 * fb / gpu->ops->elem_size * sizeof(float));
        t_fill_nan(nan2, 2 * fb / gpu->ops->elem_size);
        upload(gpu, in.gbuf, nan2, 2 * fb / gpu->ops->elem_size); /* the window's first two frames: NaN on the GPU */
        free(nan2);
        ag.in = w22_view_frames(in.gv, 2, F);
        ag.hist[0] = h0.gv;
        ag.hist[1] = h1.gv;
        /* where the conv keeps the three taps (lower.h: more than one frame), its history must be the zeros it was
         * told of: NaN only where the taps are skipped */
        if (conv_zero_hist && !w22_lower_zero_hist(&ag) &&
            (gpu->ops->fill(gpu, h0.gbuf, fb, 0) != W22_OK || gpu->ops->fill(gpu, h1.gbuf, fb, 0) != W22_OK)) {
            CHECK(0, "conv zero hist setup %s", shape);
            return;
        }
    }
    w22_status s1 = cpu->ops->conv(cpu, &ac);
    char cerr[512];
    snprintf(cerr, sizeof cerr, "%s", w22_last_error());
    w22_status s2 = gpu->ops->conv(gpu, &ag);
    if (s2 == W22_OK) s2 = gpu->ops->sync(gpu);
    if (both_ok("conv", shape, s1, cerr, s2)) {
        compare("conv", shape, &out, 0, oc, TOL_BF16, 1e-5, 0, gpu_path());
        check_route("conv", shape);
    }
    tens_free(&in);
    tens_free(&h0);
    tens_free(&h1);
    tens_free(&out);
    tens_free(&rs);
    tens_free(&sc);
    wpair_free(&wt);
    wpair_free(&bias);
    wpair_free(&scw);
    wpair_free(&scb);
}

/* The upsample conv (C -> C, nearest 2x + 3x3) with the up block's DupUp as its residual (w22_conv_args.dup_in, what
 * the plan runs at the end of an up block) on the GPU, against the CPU's conv and then its dupup_add (the separate
 * order: the reference does not share the fused code). The DupUp input has f frames of h x w x cd (a margin of
 * dborder around each frame: other strides), ft copies; the conv has its F output frames.
 * expect: "refused" where the DupUp map is one the phase GEMMs' epilogue does not take (the backend has no other
 * DupUp), else fused ("wgmma": the phases' route is the backend's, check_route). Tolerance as conv_case's: the output is conv +
 * DupUp input (|.| <= 1) with one bf16 rounding, or two on the TMA kernel's deferred store (the conv's, then the
 * sum's): <= 2^-9 (max|conv| + max|ref|) <= 2^-9 (2 max|ref| + 1), inside 2^-7 max|ref|
 * for max|ref| >= 0.5 (conv outputs here are of unit size). */
static void dupconv_case(const char *tag, int C, int cd, int ft, int first_single, int f, int h, int w, int dborder,
                         const char *expect) {
    char shape[160];
    const int F = w22_dupup_frames(f, ft, first_single);
    snprintf(shape, sizeof shape, "%s %dx%dx%dx%d->%d up + dupup %dx%d ft%d%s%s", tag, F, h, w, C, C, f, cd, ft,
             first_single ? " first" : "", dborder ? " strided" : "");
    if (!selected("conv") && !selected("dupup")) return;
    tens in, out, din;
    const float a = sqrtf(3.0f / (C * 9));
    wpair wt, bias;
    int64_t wshape[4] = {C, C, 3, 3}, b1[1] = {C};
    if (!tens_new(&in, F, h, w, C, 1, FILL_RANDOM, -1, 1) || !tens_new(&out, F, 2 * h, 2 * w, C, 1, FILL_POISON, 0, 0) ||
        !tens_new(&din, f, h, w, cd, dborder, FILL_RANDOM, -1, 1) || !wpair_new(&wt, W22_WK_CONV, wshape, 4, -a, a) ||
        !wpair_new(&bias, W22_WK_VECTOR, b1, 1, -0.5f, 0.5f)) {
        CHECK(0, "dupconv setup %s", shape);
        return;
    }
    w22_conv_args ac = {.in = in.cv, .out = out.cv, .weight = wt.c, .bias = bias.c, .kt = 1, .ks = 3, .upsample = 1};
    w22_conv_args ag = {.in = in.gv, .out = out.gv, .weight = wt.g, .bias = bias.g, .kt = 1, .ks = 3, .upsample = 1,
                        .dup_in = &din.gv, .dup_ft = ft, .dup_first_single = first_single};
    w22_status s1 = cpu->ops->conv(cpu, &ac);
    if (s1 == W22_OK) s1 = cpu->ops->dupup_add(cpu, out.cv, din.cv, ft, first_single);
    char cerr[512];
    snprintf(cerr, sizeof cerr, "%s", w22_last_error());
    w22_status s2 = gpu->ops->conv(gpu, &ag);
    const char *path = gpu_path(); /* before the sync: a static string */
    if (!strcmp(expect, "refused") && !selftest) {
        /* a map the phase GEMMs' epilogue does not take (lower.h's w22_lower_dup_fusable): refused before any launch
         * (the backend has no separate DupUp kernel; the decoder's open refuses such configs) */
        CHECK(s2 == W22_ERR_UNSUPPORTED && strstr(w22_last_error(), "w22_lower_dup_fusable"),
              "conv+dupup %s: status %d (%s), expected the refusal", shape, (int)s2, w22_last_error());
    } else {
        if (s2 == W22_OK) s2 = gpu->ops->sync(gpu);
        if (both_ok("conv+dupup", shape, s1, cerr, s2)) {
            compare("conv+dupup", shape, &out, 0, C, TOL_BF16, 1e-5, 0, path);
            if (!selftest && check_route("conv+dupup", shape)) {
                w22_route r;
                w22_backend_cuda_last_route(gpu, &r);
                CHECK(r.dup_fused, "conv+dupup %s: the DupUp not in the phases' epilogue [%s]", shape, path);
            }
        }
    }
    tens_free(&in);
    tens_free(&out);
    tens_free(&din);
    wpair_free(&wt);
    wpair_free(&bias);
}

/* The same conv run `reps` times on the GPU must give the same bits each time: the split tail's last piece adds
 * the pieces in piece order whichever CTA arrives last (the bench's agreement check saw 0.016 between calls when it
 * added them in arrival order). The output is NaN before each run. */
static void repeat_case(int cin, int cout, int h, int w, int reps) {
    char shape[160];
    snprintf(shape, sizeof shape, "3x%dx%dx%d->%d k3x3 x%d runs", h, w, cin, cout, reps);
    if (!selected("conv") || selftest) return;
    tens in, out;
    wpair wt, bias;
    const float a = sqrtf(3.0f / (cin * 27));
    int64_t wshape[5] = {cout, cin, 3, 3, 3}, b1[1] = {cout};
    if (!tens_new(&in, 3, h, w, cin, 1, FILL_RANDOM, -1, 1) || !tens_new(&out, 1, h, w, cout, 1, FILL_POISON, 0, 0) ||
        !wpair_new(&wt, W22_WK_CONV, wshape, 5, -a, a) || !wpair_new(&bias, W22_WK_VECTOR, b1, 1, -0.5f, 0.5f)) {
        CHECK(0, "repeat setup %s", shape);
        return;
    }
    w22_conv_args ag = {.in = in.gv, .out = out.gv, .weight = wt.g, .bias = bias.g, .kt = 3, .ks = 3};
    float *first = malloc(out.n * sizeof(float)), *now = malloc(out.n * sizeof(float));
    long differ = 0, nan = 0;
    int ok = first && now;
    for (int r = 0; r < reps && ok; r++) {
        ok = upload(gpu, out.gbuf, out.host, out.n) && gpu->ops->conv(gpu, &ag) == W22_OK &&
             gpu->ops->sync(gpu) == W22_OK && download(gpu, r ? now : first, out.gbuf, out.n);
        if (ok && r)
            for (size_t i = 0; i < out.n; i++) differ += memcmp(&first[i], &now[i], sizeof(float)) != 0;
    }
    /* the interior is written (not NaN) */
    for (int y = 0; ok && y < h; y++)
        for (int x = 0; x < w; x++)
            for (int c = 0; c < cout; c++) nan += isnan(first[((size_t)(y + 1) * (w + 2) + x + 1) * cout + c]);
    printf("%-10s %-46s %s (%ld elements differ between runs, %ld unwritten) [%s]\n", "conv", shape,
           ok && !differ && !nan ? "ok" : "FAIL", differ, nan, gpu_path());
    CHECK(ok && !differ && !nan, "conv %s repeats bit for bit", shape);
    check_route("conv", shape);
    free(first);
    free(now);
    tens_free(&in);
    tens_free(&out);
    wpair_free(&wt);
    wpair_free(&bias);
}

/* Attention over frames of kh x kw pixels, queries = rows [qy0, qy0 + qrows); q, k, v channel slices of one
 * [3C] buffer (as the plan lays out to_qkv's output) or three separate buffers. */
static void attention_case(int C, int F, int kh, int kw, int qy0, int qrows, int packed) {
    char shape[160];
    snprintf(shape, sizeof shape, "C%d %dx%dx%d q rows [%d,%d)%s", C, F, kh, kw, qy0, qy0 + qrows,
             packed ? " qkv packed" : "");
    if (!selected("attention")) return;
    tens qkv, q, k, v, out;
    memset(&qkv, 0, sizeof qkv), memset(&q, 0, sizeof q), memset(&k, 0, sizeof k), memset(&v, 0, sizeof v);
    /* q in [-4, 4) so that the softmax is not flat: q.k / sqrt(C) has a std of ~1.3 */
    w22_view qc, kc, vc, qg, kg, vg;
    if (packed) {
        if (!tens_new(&qkv, F, kh, kw, 3 * C, 0, FILL_RANDOM, -1, 1)) return;
        for (size_t i = 0; i < qkv.n; i++)
            if ((i % (3 * C)) < (size_t)C) qkv.host[i] = bf16r(4 * qkv.host[i]);
        if (!upload(cpu, qkv.cbuf, qkv.host, qkv.n) || !upload(gpu, qkv.gbuf, qkv.host, qkv.n)) return;
        qc = w22_view_rows(w22_view_channels(qkv.cv, 0, C), qy0, qrows);
        qg = w22_view_rows(w22_view_channels(qkv.gv, 0, C), qy0, qrows);
        kc = w22_view_channels(qkv.cv, C, C), kg = w22_view_channels(qkv.gv, C, C);
        vc = w22_view_channels(qkv.cv, 2 * C, C), vg = w22_view_channels(qkv.gv, 2 * C, C);
    } else {
        if (!tens_new(&q, F, qrows, kw, C, 1, FILL_RANDOM, -4, 4) || !tens_new(&k, F, kh, kw, C, 0, FILL_RANDOM, -1, 1) ||
            !tens_new(&v, F, kh, kw, C, 1, FILL_RANDOM, -1, 1))
            return;
        qc = q.cv, qg = q.gv, kc = k.cv, kg = k.gv, vc = v.cv, vg = v.gv;
    }
    if (!tens_new(&out, F, qrows, kw, C, 1, FILL_POISON, 0, 0)) return;
    w22_status s1 = cpu->ops->attention(cpu, qc, kc, vc, out.cv, NULL, 0);
    char cerr[512];
    snprintf(cerr, sizeof cerr, "%s", w22_last_error());
    /* the packed cases (a decode's q|k|v) with the scratch in memory we give it, poisoned; the others its own */
    const size_t wb = packed ? ((size_t)F * 4 + 1) << 20 : 0;
    void *work = NULL;
    w22_status s2 = wb ? gpu->ops->alloc(gpu, wb, &work) : W22_OK;
    if (s2 == W22_OK && work && selftest) memset(work, 0xff, wb); /* the "GPU" is a CPU backend: host memory */
    else if (s2 == W22_OK && work && cudaMemset(work, 0xff, wb) != cudaSuccess) /* NaN in fp32 and bf16 */
        s2 = w22_fail(W22_ERR_CUDA, "cudaMemset of the attention's work");
    if (s2 == W22_OK) s2 = gpu->ops->attention(gpu, qg, kg, vg, out.gv, work, wb);
    if (s2 == W22_OK) s2 = gpu->ops->sync(gpu);
    if (work) gpu->ops->free(gpu, work);
    if (both_ok("attention", shape, s1, cerr, s2)) {
        float vmax = packed ? 1.0f : max_abs_interior(&v);
        compare("attention", shape, &out, 0, C, TOL_BF16, 1e-5, vmax, gpu_path());
    }
    tens_free(&qkv), tens_free(&q), tens_free(&k), tens_free(&v), tens_free(&out);
}

static void rmsnorm_case(int C, int F, int h, int w, int silu, int inplace) {
    char shape[160];
    snprintf(shape, sizeof shape, "%dx%dx%dx%d%s%s", F, h, w, C, silu ? " silu" : "", inplace ? " in place" : "");
    if (!selected("rmsnorm")) return;
    tens in, out;
    wpair gm;
    int64_t g1[3] = {C, 1, 1};
    if (!tens_new(&in, F, h, w, C, 1, FILL_RANDOM, -2, 2) || !wpair_new(&gm, W22_WK_VECTOR, g1, 3, 0.5f, 1.5f)) return;
    if (!inplace && !tens_new(&out, F, h, w, C, 1, FILL_POISON, 0, 0)) return;
    tens *o = inplace ? &in : &out;
    w22_status s1 = cpu->ops->rmsnorm(cpu, in.cv, o->cv, gm.c, silu);
    char cerr[512];
    snprintf(cerr, sizeof cerr, "%s", w22_last_error());
    w22_status s2 = gpu->ops->rmsnorm(gpu, in.gv, o->gv, gm.g, silu);
    if (C % 8 && !selftest) /* route.h's w22_route_norm: no kernel (the decoder's open refuses such configs) */
        CHECK(s2 == W22_ERR_UNSUPPORTED && strstr(w22_last_error(), "16-byte"), "rmsnorm %s: status %d (%s), expected "
              "the refusal of C not a multiple of 8", shape, (int)s2, w22_last_error());
    else {
        if (s2 == W22_OK) s2 = gpu->ops->sync(gpu);
        if (both_ok("rmsnorm", shape, s1, cerr, s2)) compare("rmsnorm", shape, o, 0, C, TOL_BF16, 1e-5, 0, NULL);
    }
    tens_free(&in);
    if (!inplace) tens_free(&out);
    wpair_free(&gm);
}

static void dupup_case(int cin, int cout, int ft, int first_single, int f, int h, int w) {
    char shape[160];
    const int F = first_single ? 1 + (f - 1) * ft : f * ft;
    snprintf(shape, sizeof shape, "%dx%dx%dx%d -> %dx%dx%dx%d ft%d%s", f, h, w, cin, F, 2 * h, 2 * w, cout, ft,
             first_single ? " first_single" : "");
    if (!selected("dupup")) return;
    tens in, out;
    if (!tens_new(&in, f, h, w, cin, 0, FILL_RANDOM, -1, 1) || !tens_new(&out, F, 2 * h, 2 * w, cout, 1, FILL_RANDOM, -1, 1))
        return;
    w22_status s1 = cpu->ops->dupup_add(cpu, out.cv, in.cv, ft, first_single);
    char cerr[512];
    snprintf(cerr, sizeof cerr, "%s", w22_last_error());
    w22_status s2 = gpu->ops->dupup_add(gpu, out.gv, in.gv, ft, first_single);
    if (!selftest) /* the CUDA backend adds a DupUp only in the upsample conv's phases (dupconv_case): the op refuses */
        CHECK(s2 == W22_ERR_UNSUPPORTED && strstr(w22_last_error(), "w22_lower_dup_fusable"), "dupup_add %s: status %d "
              "(%s), expected the refusal", shape, (int)s2, w22_last_error());
    else {
        if (s2 == W22_OK) s2 = gpu->ops->sync(gpu);
        if (both_ok("dupup_add", shape, s1, cerr, s2)) compare("dupup_add", shape, &out, 0, cout, TOL_BF16, 1e-5, 0, NULL);
    }
    tens_free(&in);
    tens_free(&out);
}

/* A raw byte buffer on both backends (latents, video). */
typedef struct {
    void *c, *g;
} rawpair;

static int raw_new(rawpair *r, size_t bytes, const void *init) {
    r->c = r->g = NULL;
    if (cpu->ops->alloc(cpu, bytes, &r->c) != W22_OK || gpu->ops->alloc(gpu, bytes, &r->g) != W22_OK) return 0;
    return cpu->ops->from_host(cpu, r->c, init, bytes) == W22_OK && gpu->ops->from_host(gpu, r->g, init, bytes) == W22_OK;
}
static void raw_free(rawpair *r) {
    if (r->c) cpu->ops->free(cpu, r->c);
    if (r->g) gpu->ops->free(gpu, r->g);
}

/* The causal 3x3x3 conv with its history as fp32 partial sums (w22_conv_args.psum: the head's conv_out) over F frames
 * of h x w, cin -> cout, in calls of `step` frames, so that the state A, B carries over between calls and within a
 * call. On the GPU: the three temporal taps as one GEMM of N = 3 cout (the weight's rows o * 3 + dt at a stride of
 * 9 cin) into fp32 scratch, then the combine; the CPU backend sums per tap. Checked against the CPU backend: every
 * output (bf16 on the GPU: conv_case's tolerance) and, after the last call, the state (fp32 on both sides, the same
 * bf16 products summed in another order: ~K 2^-24 of the sums of |terms|, a few max|ref| here; tolerance 1e-4
 * max|ref| + 1e-5, errors of the map (a wrong tap or channel) are O(max|ref|)). The state starts random, the same on
 * both sides (a history already there); the outputs and the GPU's scratch start as NaN. The GEMM's route is the
 * backend's (check_route). */
static void psum_case(const char *tag, int cin, int cout, int F, int h, int w, int step) {
    char shape[160];
    snprintf(shape, sizeof shape, "%s %dx%dx%dx%d->%d k3x3 psum, calls of %d", tag, F, h, w, cin, cout, step);
    if (!selected("conv") && !selected("psum")) return;
    tens in, out;
    wpair wt, bias;
    const float a = sqrtf(3.0f / (cin * 27));
    int64_t wshape[5] = {cout, cin, 3, 3, 3}, b1[1] = {cout};
    if (!tens_new(&in, F, h, w, cin, 1, FILL_RANDOM, -1, 1) || !tens_new(&out, F, h, w, cout, 1, FILL_POISON, 0, 0) ||
        !wpair_new(&wt, W22_WK_CONV, wshape, 5, -a, a) || !wpair_new(&bias, W22_WK_VECTOR, b1, 1, -0.5f, 0.5f)) {
        CHECK(0, "psum setup %s", shape);
        return;
    }
    /* the Ys' scratch: 3 cout channels, one more where cout is odd (backend.h's w22_psum_tmp_channels) */
    const int ntc = w22_psum_tmp_channels(cout);
    const size_t nst = (size_t)2 * h * w * cout, ntmp = (size_t)F * h * w * ntc;
    float *init = malloc(nst * 4), *nan = malloc(ntmp * 4);
    t_fill_uniform(init, nst, seed++, -1, 1);
    t_fill_nan(nan, ntmp);
    rawpair st, tmp;
    if (!raw_new(&st, nst * 4, init) || !raw_new(&tmp, ntmp * 4, nan)) {
        CHECK(0, "psum state setup %s", shape);
        return;
    }
    w22_view sc = make_view(st.c, 4, 2, h, w, cout, 0), sg = make_view(st.g, 4, 2, h, w, cout, 0);
    w22_view tg = make_view(tmp.g, 4, F, h, w, ntc, 0);
    w22_status s1 = W22_OK, s2 = W22_OK;
    char cerr[512] = "";
    int path_ok = 1;
    char path[96] = "";
    for (int t = 0; t < F && s1 == W22_OK && s2 == W22_OK; t += step) {
        const int n = F - t < step ? F - t : step;
        w22_conv_args ac = {.in = w22_view_frames(in.cv, t, n), .out = w22_view_frames(out.cv, t, n),
                            .weight = wt.c, .bias = bias.c, .kt = 3, .ks = 3, .psum = &sc};
        w22_conv_args ag = {.in = w22_view_frames(in.gv, t, n), .out = w22_view_frames(out.gv, t, n),
                            .weight = wt.g, .bias = bias.g, .kt = 3, .ks = 3, .psum = &sg,
                            .psum_tmp = w22_view_frames(tg, 0, n)};
        s1 = cpu->ops->conv(cpu, &ac);
        if (s1 != W22_OK) snprintf(cerr, sizeof cerr, "%s", w22_last_error());
        s2 = gpu->ops->conv(gpu, &ag);
        if (s2 == W22_OK) s2 = gpu->ops->sync(gpu);
        snprintf(path, sizeof path, "%s", gpu_path());
        if (!selftest && s2 == W22_OK) path_ok &= check_route("conv psum", shape);
    }
    if (both_ok("conv psum", shape, s1, cerr, s2)) {
        compare("conv psum", shape, &out, 0, cout, TOL_BF16, 1e-5, 0, path);
        CHECK(path_ok, "conv psum %s: the route decided is the route run", shape);
        float *gs = malloc(nst * 4), *cs = malloc(nst * 4);
        const int ok = gpu->ops->to_host(gpu, gs, st.g, nst * 4) == W22_OK &&
                       cpu->ops->to_host(cpu, cs, st.c, nst * 4) == W22_OK;
        t_diff d = t_compare(gs, cs, nst);
        double maxref = 0;
        for (size_t i = 0; i < nst; i++) maxref = fmax(maxref, fabs(cs[i]));
        const double tol = 1e-4 * maxref + 1e-5;
        const int pass = ok && d.nonfinite == 0 && d.max_abs <= tol;
        printf("%-10s %-46s max_abs %.3e (tol %.3e, max|ref| %.3g) %s\n", "psum state", shape, d.max_abs, tol, maxref,
               pass ? "ok" : "FAIL");
        if (!pass && d.nonfinite) printf("    %zu state elements NaN/Inf on the GPU\n", d.nonfinite);
        CHECK(pass, "psum state %s", shape);
        free(gs);
        free(cs);
    }
    free(init);
    free(nan);
    raw_free(&st);
    raw_free(&tmp);
    tens_free(&in);
    tens_free(&out);
    wpair_free(&wt);
    wpair_free(&bias);
}

/* Unpatchify into a video buffer larger than the frames written ([3][VF][VH][VW], or frames-major when
 * frames_major), at an offset: every element must match exactly, those outside stay NaN. */
static void unpatchify_case(w22_dtype dt, int f, int h, int w, int frames_major, int p) {
    char shape[160];
    const int VF = f + 2, VH = p * h + 4, VW = p * w + 6, nc = 3 * p * p; /* p 1: the Wan2.1 VAE's 3 channels */
    snprintf(shape, sizeof shape, "%dx%dx%dx%d -> %s video%s", f, h, w, nc, w22_dtype_name(dt),
             frames_major ? " [F][3][H][W]" : " [3][F][H][W]");
    if (!selected("unpatchify")) return;
    tens in;
    if (!tens_new(&in, f, h, w, nc, 1, FILL_RANDOM, -1.5f, 1.5f)) return; /* beyond [-1, 1]: the clamp is tested */
    const size_t n = (size_t)3 * VF * VH * VW, es = w22_dtype_size(dt);
    void *init = malloc(n * es);
    for (size_t i = 0; i < n; i++) {
        if (dt == W22_DTYPE_F32) ((float *)init)[i] = NAN;
        else ((uint16_t *)init)[i] = 0x7fc0;
    }
    rawpair v;
    if (!raw_new(&v, n * es, init)) {
        CHECK(0, "unpatchify setup");
        return;
    }
    w22_video_dst d = {NULL, dt, (long)VF * VH * VW, (long)VH * VW, VW, 1};
    if (frames_major) d.sf = 3L * VH * VW, d.sc = (long)VH * VW;
    const long off = 1 * d.sf + 2 * d.sy + 3 * d.sx;
    w22_video_dst dc = d, dg = d;
    dc.ptr = (char *)v.c + off * es;
    dg.ptr = (char *)v.g + off * es;
    w22_status s1 = cpu->ops->unpatchify(cpu, in.cv, p, dc);
    char cerr[512];
    snprintf(cerr, sizeof cerr, "%s", w22_last_error());
    w22_status s2 = gpu->ops->unpatchify(gpu, in.gv, p, dg);
    if (s2 == W22_OK) s2 = gpu->ops->sync(gpu);
    if (both_ok("unpatchify", shape, s1, cerr, s2)) {
        void *hc = malloc(n * es), *hg = malloc(n * es);
        size_t bad = 0, nan_inside = 0, first = (size_t)-1;
        int ok = cpu->ops->to_host(cpu, hc, v.c, n * es) == W22_OK && gpu->ops->to_host(gpu, hg, v.g, n * es) == W22_OK;
        for (size_t i = 0; ok && i < n; i++) {
            float a = dt == W22_DTYPE_F32 ? ((float *)hg)[i] : w22_bf16_to_f32(((uint16_t *)hg)[i]);
            float r = dt == W22_DTYPE_F32 ? ((float *)hc)[i] : w22_bf16_to_f32(((uint16_t *)hc)[i]);
            if (!same_or_both_nan(a, r)) {
                bad++;
                if (first == (size_t)-1) first = i;
            }
            if (!isnan(r) && fabsf(r) > 1) bad++; /* the clamp */
            if (isnan(r)) nan_inside++;
        }
        const size_t expect_nan = n - (size_t)3 * f * p * h * p * w;
        const int pass = ok && bad == 0 && nan_inside == expect_nan;
        printf("%-10s %-46s mismatches %zu, untouched %zu of %zu expected %s\n", "unpatchify", shape, bad, nan_inside,
               expect_nan, pass ? "ok" : "FAIL");
        if (bad && first != (size_t)-1) printf("    first mismatch at element %zu of the video buffer\n", first);
        CHECK(pass, "unpatchify %s", shape);
        free(hc);
        free(hg);
    }
    free(init);
    raw_free(&v);
    tens_free(&in);
}

static void latents_case(w22_dtype zt, int C, int T, int H, int W, int t0, int y0, int nf, int nh) {
    char shape[160];
    snprintf(shape, sizeof shape, "%s z[%d][%d][%d][%d] frames %d+%d rows %d+%d", w22_dtype_name(zt), C, T, H, W,
             t0, nf, y0, nh);
    if (!selected("latents")) return;
    const size_t n = (size_t)C * T * H * W;
    float *z = malloc(n * 4);
    t_fill_uniform(z, n, seed++, -3, 3);
    for (size_t i = 0; i < n; i++) z[i] = bf16r(z[i]); /* the GPU keeps bf16: give the CPU the same values */
    void *zb = z;
    uint16_t *z16 = NULL;
    if (zt == W22_DTYPE_BF16) {
        z16 = malloc(n * 2);
        for (size_t i = 0; i < n; i++) z16[i] = w22_f32_to_bf16(z[i]);
        zb = z16;
    }
    rawpair zp;
    tens out;
    if (!raw_new(&zp, n * w22_dtype_size(zt), zb) || !tens_new(&out, nf, nh, W, C, 1, FILL_POISON, 0, 0)) {
        CHECK(0, "latents setup");
        return;
    }
    w22_status s1 = cpu->ops->latents_in(cpu, zp.c, zt, C, T, H, W, t0, y0, out.cv);
    char cerr[512];
    snprintf(cerr, sizeof cerr, "%s", w22_last_error());
    w22_status s2 = gpu->ops->latents_in(gpu, zp.g, zt, C, T, H, W, t0, y0, out.gv);
    if (s2 == W22_OK) s2 = gpu->ops->sync(gpu);
    if (both_ok("latents_in", shape, s1, cerr, s2)) compare("latents_in", shape, &out, 0, C, 0, 0, 0, NULL);
    raw_free(&zp);
    tens_free(&out);
    free(z);
    free(z16);
}

/* zero of a view (c0, nc channel slice) inside a buffer that is random everywhere: only the view may change. */
static void zero_case(int f, int h, int w, int c, int c0, int nc) {
    char shape[160];
    snprintf(shape, sizeof shape, "%dx%dx%dx%d channels [%d,%d)", f, h, w, c, c0, c0 + nc);
    if (!selected("zero")) return;
    tens t;
    if (!tens_new(&t, f, h, w, c, 1, FILL_ALL_RANDOM, -1, 1)) return;
    w22_status s1 = cpu->ops->zero(cpu, w22_view_channels(t.cv, c0, nc));
    char cerr[512];
    snprintf(cerr, sizeof cerr, "%s", w22_last_error());
    w22_status s2 = gpu->ops->zero(gpu, w22_view_channels(t.gv, c0, nc));
    if (s2 == W22_OK) s2 = gpu->ops->sync(gpu);
    if (both_ok("zero", shape, s1, cerr, s2)) {
        /* the channels outside the slice are inside the interior: compare them exactly too (all channels) */
        compare("zero", shape, &t, 0, c, 0, 0, 0, NULL);
    }
    tens_free(&t);
}

/* zero_border (the CUDA op) and w22_zero_border's four zero calls (the CPU backend has no op): a buffer random
 * everywhere with a margin of 2, so that the ring beyond the one-pixel border shows writes past it; exact: the
 * border zero, everything else as uploaded, on both. */
static void zero_border_case(int f, int h, int w, int c) {
    char shape[160];
    snprintf(shape, sizeof shape, "%dx%dx%dx%d", f, h, w, c);
    if (!selected("zero")) return;
    tens t;
    if (!tens_new(&t, f, h, w, c, 2, FILL_ALL_RANDOM, -1, 1)) return;
    w22_status s1 = w22_zero_border(cpu, t.cv);
    char cerr[512];
    snprintf(cerr, sizeof cerr, "%s", w22_last_error());
    /* --selftest-cpu: the CPU backend has no op; its side is w22_zero_border's, as the reference */
    w22_status s2 = gpu->ops->zero_border ? gpu->ops->zero_border(gpu, t.gv)
                    : selftest            ? w22_zero_border(gpu, t.gv)
                                          : w22_fail(W22_ERR_INTERNAL, "the backend has no zero_border op");
    if (s2 == W22_OK) s2 = gpu->ops->sync(gpu);
    if (both_ok("zero_border", shape, s1, cerr, s2)) {
        float *g = malloc(t.n * 4 + 4), *cc = malloc(t.n * 4 + 4);
        long bad[2] = {0, 0};
        if (download(gpu, g, t.gbuf, t.n) && download(cpu, cc, t.cbuf, t.n)) {
            w22_view gv = make_view(g, 4, f, h, w, c, 2), cv = make_view(cc, 4, f, h, w, c, 2),
                     hv = make_view(t.host, 4, f, h, w, c, 2);
            for (int ff = 0; ff < f; ff++)
                for (int y = -2; y < h + 2; y++)
                    for (int x = -2; x < w + 2; x++)
                        for (int ch = 0; ch < c; ch++) {
                            const int ring = (y == -1 || y == h) && x >= -1 && x <= w;
                            const int side = (x == -1 || x == w) && y >= -1 && y <= h;
                            const float want = ring || side ? 0.f : *(float *)w22_view_at(hv, ff, y, x, ch);
                            bad[0] += *(float *)w22_view_at(gv, ff, y, x, ch) != want;
                            bad[1] += *(float *)w22_view_at(cv, ff, y, x, ch) != want;
                        }
        } else {
            bad[0] = bad[1] = -1;
        }
        CHECK(bad[0] == 0 && bad[1] == 0, "zero_border %s: %ld wrong elements on the GPU, %ld on the CPU", shape,
              bad[0], bad[1]);
        printf("%-10s %-46s gpu %ld wrong, cpu %ld wrong %s\n", "zero_border", shape, bad[0], bad[1],
               bad[0] == 0 && bad[1] == 0 ? "ok" : "FAIL");
        free(g);
        free(cc);
    }
    tens_free(&t);
}

/* copy of src (border 1) into a channel slice of a differently bordered dst, random everywhere. */
static void copy_case(int f, int h, int w, int c, int dc, int c0) {
    char shape[160];
    snprintf(shape, sizeof shape, "%dx%dx%dx%d -> channels [%d,%d) of %d", f, h, w, c, c0, c0 + c, dc);
    if (!selected("copy")) return;
    tens s, d;
    if (!tens_new(&s, f, h, w, c, 1, FILL_RANDOM, -1, 1) || !tens_new(&d, f, h, w, dc, 2, FILL_ALL_RANDOM, -1, 1)) return;
    w22_status s1 = cpu->ops->copy(cpu, w22_view_channels(d.cv, c0, c), s.cv);
    char cerr[512];
    snprintf(cerr, sizeof cerr, "%s", w22_last_error());
    w22_status s2 = gpu->ops->copy(gpu, w22_view_channels(d.gv, c0, c), s.gv);
    if (s2 == W22_OK) s2 = gpu->ops->sync(gpu);
    if (both_ok("copy", shape, s1, cerr, s2)) compare("copy", shape, &d, 0, dc, 0, 0, 0, NULL);
    tens_free(&s);
    tens_free(&d);
}

/* The video delivery's plane copies (decoder.c deliver_device): channel k of a staging laid out [h][f][3][w] into
 * plane k of an NCDHW video, one-channel views whose pixels are adjacent along the row (the copy folds them into
 * rows of w channels: 16-byte accesses when w % 8 == 0 and the planes are aligned, one element otherwise). The
 * video is NaN before; every element must arrive exactly. */
static void plane_copy_case(int f, int h, int w) {
    char shape[160];
    snprintf(shape, sizeof shape, "%d frames of %dx%d, 3 planes", f, h, w);
    if (!selected("copy")) return;
    const size_t n = (size_t)3 * f * h * w, es = gpu->ops->elem_size;
    float *src = malloc(n * 4), *dst = malloc(n * 4);
    t_fill_uniform(src, n, seed++, -1, 1);
    for (size_t i = 0; i < n; i++) src[i] = bf16r(src[i]);
    t_fill_nan(dst, n);
    void *gs = NULL, *gd = NULL;
    int ok = gpu->ops->alloc(gpu, n * es, &gs) == W22_OK && gpu->ops->alloc(gpu, n * es, &gd) == W22_OK &&
             upload(gpu, gs, src, n) && upload(gpu, gd, dst, n);
    for (int k = 0; k < 3 && ok; k++) {
        w22_view vs = {(char *)gs + (size_t)k * w * es, f, h, w, 1, 3L * w, (long)f * 3 * w, 1, (int)es};
        w22_view vd = {(char *)gd + (size_t)k * f * h * w * es, f, h, w, 1, (long)h * w, w, 1, (int)es};
        ok = gpu->ops->copy(gpu, vd, vs) == W22_OK;
    }
    ok = ok && gpu->ops->sync(gpu) == W22_OK && download(gpu, dst, gd, n);
    long bad = 0;
    for (int k = 0; k < 3 && ok; k++)
        for (int t = 0; t < f; t++)
            for (int y = 0; y < h; y++)
                for (int x = 0; x < w; x++)
                    bad += !(dst[(((size_t)k * f + t) * h + y) * w + x] == src[(((size_t)y * f + t) * 3 + k) * w + x]);
    printf("%-10s %-46s %s (%ld of %zu differ)\n", "copy", shape, ok && !bad ? "ok" : "FAIL", bad, n);
    CHECK(ok && !bad, "plane copy %s: %s", shape, ok ? "elements differ" : w22_last_error());
    if (gs) gpu->ops->free(gpu, gs);
    if (gd) gpu->ops->free(gpu, gd);
    free(src);
    free(dst);
}

static void bytes_case(void) {
    if (!selected("bytes")) return;
    const size_t n = 1 << 20;
    unsigned char *h = malloc(n), *back = malloc(n);
    for (size_t i = 0; i < n; i++) h[i] = (unsigned char)(i * 2654435761u >> 13);
    void *a = NULL, *b = NULL;
    int ok = gpu->ops->alloc(gpu, n, &a) == W22_OK && gpu->ops->alloc(gpu, n, &b) == W22_OK &&
             gpu->ops->from_host(gpu, a, h, n) == W22_OK && gpu->ops->copy_bytes(gpu, b, a, n) == W22_OK &&
             gpu->ops->to_host(gpu, back, b, n) == W22_OK && memcmp(h, back, n) == 0;
    size_t peak = 0, now = selftest ? 0 : w22_backend_cuda_bytes(gpu, &peak);
    ok = ok && (selftest || (now >= 2 * n && peak >= now));
    printf("%-10s %-46s %s (backend holds %zu bytes, peak %zu)\n", "bytes", "from_host/copy_bytes/to_host 1 MiB",
           ok ? "ok" : "FAIL", now, peak);
    CHECK(ok, "byte copies: %s", w22_last_error());
    gpu->ops->free(gpu, a);
    gpu->ops->free(gpu, b);
    free(h);
    free(back);
    /* an impossible allocation fails cleanly and leaves the backend usable */
    void *huge = NULL;
    w22_status s = gpu->ops->alloc(gpu, (size_t)1 << 50, &huge);
    void *small = NULL;
    w22_status s2 = gpu->ops->alloc(gpu, 4096, &small);
    ok = s == W22_ERR_OUT_OF_MEMORY && huge == NULL && s2 == W22_OK;
    if (selftest) ok = s2 == W22_OK; /* a host may overcommit */
    if (huge) gpu->ops->free(gpu, huge);
    printf("%-10s %-46s %s\n", "alloc", "1 PiB fails with OUT_OF_MEMORY, then 4 KiB works", ok ? "ok" : "FAIL");
    CHECK(ok, "OOM handling: status %s", w22_status_string(s));
    if (small) gpu->ops->free(gpu, small);
}

/* Winograd F(4x4, 3x3) (winograd.cu: the decoder's default for the 3x3x3 convs of 256 channels and up; the rest of
 * this program runs without it): the conv op on cases whose weights are uploaded with the backend's threshold lowered
 * to 64 channels, so that each runs as the input transform, one fp16 batch GEMM of 36 and the output transform, and
 * the route must say so (want_step). Tolerance: the direct conv's (TOL_BF16 of max|ref| + 1e-5, rel rms 1e-2).
 * Winograd adds three fp16 roundings, of the weights' U = G g G^T (made at upload), of V = B^T d B (|V| within ~7x
 * the input's largest) and of M (the GEMM's fp32 sums; |M| within ~4.2x the output's, and the output transform
 * sums 36 of them with weights up to 8 x 8), each <= 2^-11 of its magnitude: for these unit-scale inputs the sum is
 * inside 2^-7 max|ref| (dev/winograd_f4_probe.py: x1.2-1.3 the direct conv's rms error, x1.2 its max). The shapes:
 * 512 and 1024 channels as the decoder's, a residual (separate and in place), a 1x1 shortcut and both (its GEMM
 * written first), 9 input frames (two transform launches), N 384 (no TMA store), the causal history read in place,
 * and heights and widths that are not multiples of 4 (the last tile row and column partly outside the frame). */
static void winograd_cases(void) {
    if (!selected("conv") && !selected("winograd")) return;
    const int old = selftest ? 0 : w22_backend_cuda_swap_winograd_min(gpu, 64);
    want_step = selftest ? -1 : W22_CONV_WINOGRAD;
    conv_case("winograd", 1024, 1024, 2, 8, 12, 3, 3, 0, 0, RES_NONE, 0);
    conv_case("winograd", 512, 512, 1, 6, 10, 3, 3, 0, 0, RES_SEPARATE, 0);
    conv_case("winograd", 256, 256, 2, 12, 20, 3, 3, 0, 0, RES_INPLACE, 0);
    conv_case("winograd", 512, 512, 1, 8, 12, 3, 3, 0, 0, RES_NONE, 1024);
    conv_case("winograd", 256, 256, 1, 6, 10, 3, 3, 0, 0, RES_SEPARATE, 512);
    conv_case("winograd", 64, 128, 7, 4, 6, 3, 3, 0, 0, RES_NONE, 0);
    conv_case("winograd", 256, 256, 1, 36, 40, 3, 3, 0, 0, RES_NONE, 256);
    conv_case("winograd", 128, 384, 1, 10, 18, 3, 3, 0, 0, RES_SEPARATE, 0);
    conv_hist = 1;
    conv_case("winograd", 1024, 1024, 2, 8, 12, 3, 3, 0, 0, RES_NONE, 0);
    conv_case("winograd", 256, 256, 3, 6, 10, 3, 3, 0, 0, RES_INPLACE, 0);
    conv_case("winograd", 256, 256, 1, 7, 10, 3, 3, 0, 0, RES_INPLACE, 0); /* 7 rows: 1 past the frame */
    conv_zero_hist = 1; /* a first chunk's one frame: one input frame transformed, the U rows' last tap */
    conv_case("winograd", 1024, 1024, 1, 8, 12, 3, 3, 0, 0, RES_NONE, 0);
    conv_case("winograd", 256, 256, 1, 7, 10, 3, 3, 0, 0, RES_INPLACE, 512);
    conv_case("winograd", 384, 384, 1, 9, 16, 3, 3, 0, 0, RES_SEPARATE, 0); /* N 384: the mma.sync batch */
    conv_case("winograd", 512, 512, 2, 6, 10, 3, 3, 0, 0, RES_NONE, 0); /* two frames: three taps over zeros */
    conv_zero_hist = 0;
    conv_hist = 0;
    conv_case("winograd", 256, 256, 1, 8, 9, 3, 3, 0, 0, RES_SEPARATE, 0); /* 9 columns: 3 past it */
    conv_case("winograd", 512, 512, 2, 5, 6, 3, 3, 0, 0, RES_NONE, 0);
    conv_case("winograd", 256, 256, 1, 1, 1, 3, 3, 0, 0, RES_NONE, 0);  /* one pixel: one tile, 15 outputs dropped */
    conv_case("winograd", 512, 512, 1, 11, 78, 3, 3, 0, 0, RES_NONE, 0); /* the decoder's 78 columns: 2 past */
    want_step = -1;
    if (!selftest) w22_backend_cuda_swap_winograd_min(gpu, old);
}

/* Not in backend.h (tests only; src/cuda/cuda_backend.cu): a batch GEMM as the backend launches one (*how: route.h's
 * w22_route_batch). */
w22_status w22_backend_cuda_batch_gemm(w22_backend *b, const w22_mm *g, int *how);

/* fp16 batch GEMMs (w22_mm.f16: Winograd F(4x4, 3x3)'s 36 component GEMMs, as lower.h lays them out): n GEMMs, each
 * F output frames of hh x w2 pixels, cin -> cout over the three temporal taps as K = 3 cin (kt 3, ks 1; F + 2 input
 * frames a GEMM), on the kernel route.h gives (want: W22_BATCH_TMA on the Hopper path with dense outputs, the mma.sync
 * 128 x 128 tile otherwise; W22_BATCH_APART: refused, nothing written). ow: the output's pixel stride (cout: dense).
 * Inputs are fp16 values of [-1, 1) (A) and [-a, a) (B); the reference is exact (double) from those values. Tolerance:
 * the output's one rounding to fp16, 2^-11 |ref| (half an ulp of an 11-bit significand), plus the fp32 accumulation's
 * error, ~K 2^-24 of the sum of |terms| in the worst case and far less in practice: 2^-20 sum|terms| (a wrong type, a
 * bf16 rounding (2^-9) or a wrong tap is orders beyond it). The outputs and a 64-element margin around them start as
 * fp16 NaN: an unwritten output or a write past them fails. */
static void f16_batch_case(int n, int F, int hh, int w2, int ci, int co, int ow, int want) {
    char shape[160];
    snprintf(shape, sizeof shape, "%d x f%d %dx%dx3x%d->%d ow %d", n, F, hh, w2, ci, co, ow);
    if (selftest || !selected("f16")) return;
    const int hopper = !strcmp(w22_backend_cuda_path(gpu), "hopper");
    if (want == W22_BATCH_TMA && !hopper) want = W22_BATCH_MMA;
    const int P = hh * w2, M = F * P, K = 3 * ci, MARGIN = 64;
    const size_t na = (size_t)n * (F + 2) * P * ci, nb = (size_t)n * co * K, per = (size_t)M * ow,
                 no = (size_t)n * per + 2 * MARGIN;
    float *fa = malloc(na * 4), *fb = malloc(nb * 4);
    double *dref = malloc((size_t)n * M * co * sizeof(double)), *dabs = malloc((size_t)n * M * co * sizeof(double));
    uint16_t *ha = malloc(na * 2), *hb = malloc(nb * 2), *ho = malloc(no * 2);
    const float a = sqrtf(3.0f / K);
    t_fill_uniform(fa, na, seed++, -1, 1);
    t_fill_uniform(fb, nb, seed++, -a, a);
    for (size_t i = 0; i < na; i++) ha[i] = w22_f32_to_f16(fa[i]), fa[i] = w22_f16_to_f32(ha[i]);
    for (size_t i = 0; i < nb; i++) hb[i] = w22_f32_to_f16(fb[i]), fb[i] = w22_f16_to_f32(hb[i]);
    for (size_t i = 0; i < no; i++) ho[i] = 0x7e00; /* fp16 NaN */
    void *ga = NULL, *gb = NULL, *go = NULL;
    int ok = gpu->ops->alloc(gpu, na * 2, &ga) == W22_OK && gpu->ops->alloc(gpu, nb * 2, &gb) == W22_OK &&
             gpu->ops->alloc(gpu, no * 2, &go) == W22_OK && gpu->ops->from_host(gpu, ga, ha, na * 2) == W22_OK &&
             gpu->ops->from_host(gpu, gb, hb, nb * 2) == W22_OK && gpu->ops->from_host(gpu, go, ho, no * 2) == W22_OK;
    w22_mm q;
    memset(&q, 0, sizeof q);
    q.F = F, q.H = hh, q.W = w2, q.M = M, q.N = co;
    q.a = (const bf16 *)ga, q.a_sf = (long)P * ci, q.a_sh = (long)w2 * ci, q.a_sw = ci;
    q.cin = ci, q.kt = 3, q.ks = 1;
    q.b = (const bf16 *)gb, q.b_w = co, q.b_sw = K;
    q.out = (bf16 *)go + MARGIN, q.o_sf = (long)P * ow, q.o_sh = (long)w2 * ow, q.o_sw = ow;
    q.batch = n, q.a_frames = F + 2, q.f16 = 1;
    for (int p = 0; p < n; p++) q.ph_o[p] = p * (int)per;
    int how = -1;
    const w22_status st = ok ? w22_backend_cuda_batch_gemm(gpu, &q, &how) : W22_ERR_INTERNAL;
    char err[512] = "";
    if (st != W22_OK) snprintf(err, sizeof err, "%s", w22_last_error());
    const w22_status ss = gpu->ops->sync(gpu);
    ok = ok && ss == W22_OK && gpu->ops->to_host(gpu, ho, go, no * 2) == W22_OK;
    char path[96];
    snprintf(path, sizeof path, "%s", gpu_path());
    w22_route r;
    w22_backend_cuda_last_route(gpu, &r);
    if (want == W22_BATCH_APART) { /* refused: an error, nothing written */
        size_t touched = 0;
        for (size_t i = 0; ok && i < no; i++) touched += ho[i] != 0x7e00;
        const int pass = ok && how == W22_BATCH_APART && st != W22_OK && strstr(err, W22_ROUTE_F16_SINGLE) &&
                         touched == 0;
        printf("%-10s %-46s refused (%s): %s %s\n", "f16 batch", shape, w22_status_string(st), err,
               pass ? "ok" : "FAIL");
        CHECK(pass, "f16 batch %s: refused (how %d, %zu outputs written)", shape, how, touched);
    } else {
        /* the reference, in double from the fp16 values */
        for (int p = 0; p < n; p++)
            for (int m = 0; m < M; m++) {
                const int t = m / P, pix = m - t * P;
                for (int o = 0; o < co; o++) {
                    double sum = 0, sabs = 0;
                    for (int dt = 0; dt < 3; dt++) {
                        const float *ar = fa + (((size_t)p * (F + 2) + t + dt) * P + pix) * ci;
                        const float *br = fb + ((size_t)p * co + o) * K + (size_t)dt * ci;
                        for (int c = 0; c < ci; c++) {
                            const double v = (double)ar[c] * br[c];
                            sum += v, sabs += fabs(v);
                        }
                    }
                    const size_t i = ((size_t)p * M + m) * co + o;
                    dref[i] = sum, dabs[i] = sabs;
                }
            }
        size_t bad = 0, nonfinite = 0, margin = 0, worst = 0;
        double worst_ratio = 0, max_abs = 0, maxref = 0;
        for (size_t i = 0; ok && i < no; i++) {
            const size_t j = i < (size_t)MARGIN ? (size_t)-1 : i - MARGIN;
            const size_t p = j / per, rem = j - p * per, m = rem / ow, o = rem - m * ow;
            if (j == (size_t)-1 || p >= (size_t)n || (int)o >= co) { /* the margin, a row's padding */
                margin += ho[i] != 0x7e00;
                continue;
            }
            const float v = w22_f16_to_f32(ho[i]);
            const size_t k = (p * M + m) * co + o;
            if (!isfinite(v)) {
                nonfinite++;
                continue;
            }
            const double e = fabs(v - dref[k]), tol = ldexp(fabs(dref[k]), -11) + ldexp(dabs[k], -20) + ldexp(1.0, -24);
            bad += e > tol;
            max_abs = fmax(max_abs, e), maxref = fmax(maxref, fabs(dref[k]));
            if (e / tol > worst_ratio) worst_ratio = e / tol, worst = k;
        }
        const int tma_ok = r.kernel == W22_GEMM_TMA && r.ran_kernel == W22_GEMM_TMA && r.ran[0].bn == 256 &&
                           r.ran[0].te == 4 && r.ran[0].cl == 1,
                  mma_ok = r.kernel == W22_GEMM_MMA_MID && r.ran_kernel == W22_GEMM_MMA_MID;
        const int route_ok = how == want && r.batch == n && (want == W22_BATCH_TMA ? tma_ok : mma_ok);
        const int pass = ok && st == W22_OK && route_ok && bad == 0 && nonfinite == 0 && margin == 0;
        printf("%-10s %-46s max_abs %.3e (max|ref| %.3g, worst err/tol %.3f) [%s] %s\n", "f16 batch", shape, max_abs,
               maxref, worst_ratio, path, pass ? "ok" : "FAIL");
        if (!pass) {
            if (st != W22_OK || !ok) printf("    the launch or a copy failed: %s\n", err);
            if (!route_ok)
                printf("    route: how %d (want %d), kernel %d, ran %d, batch %d\n", how, want, (int)r.kernel,
                       (int)r.ran_kernel, r.batch);
            if (bad) printf("    %zu outputs beyond the tolerance\n", bad);
            if (nonfinite) printf("    %zu outputs NaN/Inf (unwritten, or overflow)\n", nonfinite);
            if (margin) printf("    %zu elements outside the outputs changed (writes out of bounds)\n", margin);
            if (bad) printf("    worst at GEMM %zu row %zu channel %zu: ref %.6g\n", worst / ((size_t)M * co),
                            worst / co % M, worst % co, dref[worst]);
        }
        CHECK(pass, "f16 batch %s", shape);
    }
    if (ga) gpu->ops->free(gpu, ga);
    if (gb) gpu->ops->free(gpu, gb);
    if (go) gpu->ops->free(gpu, go);
    free(fa), free(fb), free(dref), free(dabs), free(ha), free(hb), free(ho);
}

/* The fp16 batch GEMMs: Winograd F(4x4, 3x3)'s 36 of a 256-channel conv's band (M 308: 2 frames of 11 x 14 tiles,
 * partial M tiles), on the TMA conv (Hopper path: its TMA store) or the mma.sync 128 x 128 tile (portable path, and the
 * Hopper path where the TMA store does not take the output: padded rows); 512 channels and a batch of 16; N 448 (whose
 * mma tile is 128 x 96: no fp16 kernel) refused. */
static void f16_batch_cases(void) {
    f16_batch_case(36, 2, 11, 14, 256, 256, 256, W22_BATCH_TMA);
    f16_batch_case(36, 2, 11, 14, 256, 256, 264, W22_BATCH_MMA);
    f16_batch_case(16, 1, 9, 20, 512, 512, 512, W22_BATCH_TMA);
    f16_batch_case(4, 1, 4, 8, 128, 448, 448, W22_BATCH_APART);
}

static void run_cases(void) {
    bytes_case();
    /* conv: real decoder shapes at reduced spatial size */
    conv_case("mid", 1024, 1024, 2, 8, 12, 3, 3, 0, 0, RES_NONE, 0);
    conv_case("up1", 512, 512, 2, 16, 24, 3, 3, 0, 0, RES_NONE, 0);
    conv_case("frames", 64, 128, 7, 4, 6, 3, 3, 0, 0, RES_NONE, 0); /* Winograd: 9 input frames, 2 transform launches */
    conv_case("up3", 256, 256, 1, 32, 48, 3, 3, 0, 0, RES_NONE, 0);
    conv_case("conv_in", 48, 1024, 1, 8, 12, 3, 3, 0, 0, RES_NONE, 0);
    conv_case("conv_out", 256, 12, 2, 16, 24, 3, 3, 0, 0, RES_NONE, 0);
    conv_case("post_quant", 48, 48, 2, 8, 12, 1, 1, 0, 0, RES_NONE, 0);
    /* the Wan2.1 VAE's shapes (tests/test_route.c lists which kernel each takes at 720p): 16 latent channels, the
     * 384-channel convs on the TMA conv's 128-channel tiles, 192 and 96 on mma.sync, upsample convs that halve the
     * channels, the 192 -> 384 shortcut, its conv_out (odd cout: scalar in the direct form; the psum form is the
     * decode's, below) */
    conv_case("w21 post_quant", 16, 16, 2, 8, 12, 1, 1, 0, 0, RES_NONE, 0);
    conv_case("w21 conv_in", 16, 384, 2, 8, 12, 3, 3, 0, 0, RES_NONE, 0);
    conv_case("w21 res384", 384, 384, 2, 8, 12, 3, 3, 0, 0, RES_INPLACE, 0);
    conv_case("w21 conv1 192->384", 192, 384, 2, 8, 12, 3, 3, 0, 0, RES_NONE, 0);
    conv_case("w21 shortcut", 384, 384, 2, 12, 20, 3, 3, 0, 0, RES_NONE, 192);
    conv_case("w21 time_conv", 384, 768, 2, 8, 12, 3, 1, 0, 1, RES_NONE, 0);
    conv_case("w21 upsample3d", 384, 192, 3, 4, 6, 1, 3, 1, 0, RES_NONE, 0);
    conv_case("w21 upsample2d", 192, 96, 2, 8, 12, 1, 3, 1, 0, RES_NONE, 0);
    conv_case("w21 res192", 192, 192, 2, 16, 24, 3, 3, 0, 0, RES_INPLACE, 0);
    conv_case("w21 res96", 96, 96, 1, 32, 48, 3, 3, 0, 0, RES_INPLACE, 0);
    conv_case("w21 conv_out", 96, 3, 2, 16, 24, 3, 3, 0, 0, RES_NONE, 0);
    /* the tiles made for Wan2.1's channel counts: the TMA conv's 128 x 192 (Hopper; with a shortcut, 3 N tiles, 135
     * tiles with the split tail) and the mma.sync 128 x 96 with K packed across the taps (cin 96, 40, 16: steps
     * that span two or more taps and a zero tail) */
    conv_case("w21 tile192 sc", 192, 192, 1, 10, 18, 3, 3, 0, 0, RES_SEPARATE, 384);
    conv_case("w21 tile192 x3", 64, 576, 1, 9, 17, 3, 3, 0, 0, RES_NONE, 0);
    conv_case("w21 tile192 split", 192, 192, 1, 130, 132, 3, 3, 0, 0, RES_INPLACE, 0);
    conv_case("w21 n96 packed", 96, 192, 2, 9, 13, 3, 3, 0, 0, RES_SEPARATE, 96);
    conv_case("w21 n96 cin40", 40, 96, 1, 7, 11, 3, 3, 0, 0, RES_NONE, 0);
    conv_case("w21 n96 cin16", 16, 96, 2, 5, 9, 3, 3, 0, 0, RES_INPLACE, 0);
    conv_case("w21 n96 upsample", 96, 96, 1, 6, 10, 1, 3, 1, 0, RES_NONE, 0);
    /* the TMA conv's cin % 64 != 0 (Hopper): slices of 64 whose last per tap runs past cin into the TMA's zeros */
    conv_case("w21 tma cin160", 160, 192, 1, 9, 13, 3, 3, 0, 0, RES_SEPARATE, 0);
    conv_case("w21 tma cin96 x3", 96, 288, 2, 7, 11, 3, 3, 0, 0, RES_NONE, 0);
    conv_case("time_conv", 1024, 2048, 2, 8, 12, 3, 1, 0, 1, RES_NONE, 0);
    conv_case("upsample3d", 1024, 1024, 3, 4, 6, 1, 3, 1, 0, RES_NONE, 0);
    conv_case("upsample2d", 512, 512, 1, 8, 12, 1, 3, 1, 0, RES_NONE, 0);
    conv_case("res", 256, 256, 2, 12, 20, 3, 3, 0, 0, RES_INPLACE, 0);
    conv_case("res", 512, 512, 1, 6, 10, 3, 3, 0, 0, RES_SEPARATE, 0);
    /* W 24 and 16 (multiples of 8): the residual goes in as extra K and the tiles take the TMA store
     * (tests/cuda_epi_tma.sh): boxes of 8 and 16 pixels, res = out and a residual of its own */
    conv_case("res", 256, 256, 2, 12, 24, 3, 3, 0, 0, RES_INPLACE, 0);
    conv_case("res", 256, 256, 1, 10, 16, 3, 3, 0, 0, RES_SEPARATE, 0);
    conv_case("shortcut", 256, 256, 2, 12, 20, 3, 3, 0, 0, RES_NONE, 512);
    conv_case("shortcut", 512, 512, 1, 8, 12, 3, 3, 0, 0, RES_NONE, 1024);
    conv_case("sc+res", 256, 256, 1, 6, 10, 3, 3, 0, 0, RES_SEPARATE, 512);
    conv_case("proj", 1024, 1024, 1, 6, 13, 1, 1, 0, 0, RES_INPLACE, 0);
    conv_case("to_qkv", 1024, 3072, 1, 6, 13, 1, 1, 0, 0, RES_NONE, 0);
    /* edge shapes: 1 frame, odd sizes, tiny channel counts, M and N tails */
    conv_case("edge", 4, 12, 1, 3, 5, 3, 3, 0, 0, RES_NONE, 0);      /* cin 4: scalar path */
    conv_case("edge", 4, 4, 2, 3, 5, 1, 1, 0, 0, RES_NONE, 0);
    conv_case("edge", 8, 8, 1, 3, 5, 3, 3, 0, 0, RES_NONE, 0);
    conv_case("edge", 16, 12, 3, 7, 9, 3, 3, 0, 0, RES_INPLACE, 0);
    conv_case("edge", 32, 16, 2, 3, 5, 1, 3, 1, 0, RES_NONE, 0);
    conv_case("edge", 64, 64, 3, 5, 7, 3, 3, 0, 0, RES_NONE, 0);     /* M = 105: one partial tile */
    conv_case("edge", 24, 40, 1, 9, 11, 3, 3, 0, 0, RES_NONE, 0);    /* cin not a multiple of 64, N tail */
    conv_case("edge", 8, 3, 1, 3, 5, 3, 3, 0, 0, RES_NONE, 0);       /* odd cout: scalar path */
    conv_case("edge", 32, 64, 2, 3, 5, 3, 1, 0, 1, RES_NONE, 0);     /* time split, small */
    conv_case("edge", 16, 16, 1, 5, 7, 3, 3, 0, 0, RES_SEPARATE, 8); /* tiny shortcut */
    conv_case("edge", 6, 10, 1, 3, 5, 1, 3, 1, 0, RES_NONE, 0);      /* scalar upsample */
    conv_case("edge", 96, 264, 1, 5, 7, 3, 3, 0, 0, RES_NONE, 0);    /* big tile with an N tail */
    conv_case("edge", 32, 300, 1, 9, 15, 1, 1, 0, 0, RES_NONE, 0);   /* many M tiles, N tail */
    /* shapes the wgmma kernel takes (cin % 64, cout % 128): both tiles, M tails, the phase convs, shortcut */
    conv_case("wg", 128, 128, 2, 7, 19, 3, 3, 0, 0, RES_NONE, 0);      /* 128x128 tile, M = 266: a partial tile */
    conv_case("wg", 128, 384, 1, 9, 17, 3, 3, 0, 0, RES_SEPARATE, 0);  /* 3 N tiles of 128 */
    conv_case("wg", 64, 256, 1, 3, 5, 1, 3, 0, 0, RES_NONE, 0);        /* one slice per tap, M = 15 < 128 */
    conv_case("wg", 64, 128, 2, 3, 7, 1, 1, 0, 0, RES_NONE, 0);        /* 1x1x1, one K step */
    conv_case("wg", 128, 128, 2, 5, 9, 1, 3, 1, 0, RES_NONE, 0);       /* 4 phase convs ks 2, pads (1,1) .. (0,0) */
    conv_case("wg", 256, 256, 1, 5, 9, 1, 3, 1, 0, RES_INPLACE, 0);    /* phases on the 256 tile, res = out */
    /* the four phases in one launch (phase-major tiles, each phase's output and residual offsets): 50 x 100 pixels
     * are 40 tiles per phase, the last of 8 rows; 160 in one launch leave 28 for the split tail (2 pieces of 8
     * stages); a residual of its own. On the 128 tile: 2 frames of 135 pixels (2 tiles each, the second of 7 rows) */
    conv_case("wg", 256, 256, 1, 50, 100, 1, 3, 1, 0, RES_SEPARATE, 0);
    conv_case("wg", 128, 128, 2, 9, 15, 1, 3, 1, 0, RES_SEPARATE, 0);
    conv_case("wg", 128, 128, 2, 6, 11, 3, 3, 0, 0, RES_INPLACE, 64);  /* shortcut on the 128 tile, res = out */
    conv_case("wg", 256, 256, 1, 36, 40, 3, 3, 0, 0, RES_NONE, 256);   /* M = 1440: 11.25 tiles, shortcut */
    conv_case("wg", 128, 256, 3, 4, 6, 3, 1, 0, 1, RES_NONE, 0);       /* time split on the 256 tile */
    /* more tiles than an H200 has SMs (132): on the persistent grid some CTAs run two tiles (the ring, its
     * parities and the hand-off carried across tiles), with a shortcut and a residual */
    conv_case("wg", 128, 128, 1, 130, 132, 3, 3, 0, 0, RES_INPLACE, 128); /* 135 tiles of 128x128 */
    /* the overlapped epilogue stores a tile during the next one's first 16 (8) stages: here tiles of one stage
     * (1x1, cin 64), so the stores run on past the next tile's loop; two N tiles, 146 tiles, a residual */
    conv_case("wg", 64, 512, 1, 70, 132, 1, 1, 0, 0, RES_SEPARATE, 0);
    /* the split tail (132 SMs): the last round's tiles as pieces of K, the owner adding the others' partials: 152
     * tiles (20 in 3 pieces of 9 stages), 192 tiles of 128x256 (60 in 2 pieces, the second running on into the
     * shortcut's K), 182 tiles of 128x128 (50 in 2); residuals. Whichever piece arrives last runs the epilogue. */
    conv_case("wg", 64, 256, 1, 76, 256, 3, 3, 0, 0, RES_SEPARATE, 0);
    conv_case("wg", 128, 512, 1, 64, 192, 3, 3, 0, 0, RES_INPLACE, 64);
    conv_case("wg", 64, 128, 1, 91, 256, 3, 3, 0, 0, RES_NONE, 0);
    /* pairs of M tiles in clusters of 2, then a tail (route.h, w22_route_tma_plan): 99 M tiles x 2 N tiles of 256 are
     * 100 pairs (the last one's second tile missing), one round of 66 on the clusters, then the 66 tiles left on the
     * SMs in 2 pieces each (a single round that splits); a residual */
    conv_case("wg", 128, 512, 1, 96, 132, 1, 3, 0, 0, RES_SEPARATE, 0);
    repeat_case(64, 256, 76, 256, 6); /* 20 tiles in 3 pieces: the last to arrive varies from run to run */
    /* N <= 16 under 6 rows: the mma.sync kernel's 128 x 32 tile (the row kernel that took them, which no decode
     * reached: tests/test_census.c, was deleted in session 37): kt 1, N 2, residuals */
    conv_case("rows", 256, 12, 1, 3, 200, 3, 3, 0, 0, RES_NONE, 0);   /* x tiles 128 + 72 */
    conv_case("rows", 64, 16, 2, 5, 130, 1, 3, 0, 0, RES_SEPARATE, 0); /* kt 1, x tiles 128 + 2 */
    conv_case("rows", 128, 2, 1, 4, 9, 3, 3, 0, 0, RES_INPLACE, 0);    /* N 2, one partial tile */
    /* from 6 rows on the 2D tiles (16 rows x 32 columns): partial tiles in
     * both directions, kt 1, N 16 and 2, residuals, and more tiles than SMs (the persistent grid's later rounds) */
    conv_case("rows2d", 256, 12, 2, 19, 37, 3, 3, 0, 0, RES_NONE, 0);    /* tiles 16 + 3 rows, 32 + 5 columns */
    conv_case("rows2d", 64, 16, 2, 33, 70, 1, 3, 0, 0, RES_SEPARATE, 0); /* kt 1: 3 x 3 tiles, all edges partial */
    conv_case("rows2d", 128, 2, 1, 6, 9, 3, 3, 0, 0, RES_INPLACE, 0);    /* N 2, the fewest rows it takes */
    conv_case("rows2d", 96, 12, 2, 19, 37, 3, 3, 0, 0, RES_NONE, 0);     /* cin 96: three 32-channel slices */
    conv_case("rows2d", 32, 16, 1, 7, 40, 3, 3, 0, 0, RES_SEPARATE, 0);  /* cin 32: one slice */
    conv_case("rows", 96, 12, 1, 4, 40, 3, 3, 0, 0, RES_NONE, 0);        /* cin 96 under 6 rows: not the row kernel */
    conv_case("rows2d", 64, 12, 2, 48, 320, 3, 3, 0, 0, RES_NONE, 0);   /* 2 x 3 x 10 tiles, none partial */
    conv_case("rows2d", 64, 12, 3, 80, 300, 3, 3, 0, 0, RES_SEPARATE, 0); /* 150 tiles: a second round on 132 SMs */
    /* 16 < N <= 48 on the 2D tiles' three 16-channel blocks per warp (the psum conv_out's N = 36), from 6 rows on and
     * on the Hopper path (the portable path: the mma kernel): N 36, 48, 24 and 40 (a third block part-filled or empty),
     * partial tiles both ways, kt 1, residuals, a second round of the 3-stage ring's persistent grid */
    conv_case("rows2d", 256, 36, 2, 19, 37, 3, 3, 0, 0, RES_NONE, 0);     /* tiles 16 + 3 rows, 32 + 5 columns */
    conv_case("rows2d", 64, 48, 2, 33, 70, 1, 3, 0, 0, RES_SEPARATE, 0);  /* kt 1: 3 x 3 tiles, all edges partial */
    conv_case("rows2d", 128, 24, 1, 6, 9, 3, 3, 0, 0, RES_INPLACE, 0);    /* N 24, the fewest rows it takes */
    conv_case("rows2d", 64, 40, 3, 80, 300, 3, 3, 0, 0, RES_SEPARATE, 0); /* 150 tiles: a second round on 132 SMs */
    conv_case("rows", 64, 36, 1, 5, 40, 3, 3, 0, 0, RES_NONE, 0);         /* under 6 rows: the mma kernel */
    /* the causal history read in place (w22_conv_args.hist): one and several output frames, each kernel, tiles
     * spanning frames (h x w < 128 rows), the time_conv, residual and shortcut */
    conv_hist = 1;
    conv_case("mid", 1024, 1024, 2, 8, 12, 3, 3, 0, 0, RES_NONE, 0);
    conv_case("up3", 256, 256, 1, 32, 48, 3, 3, 0, 0, RES_INPLACE, 0);
    conv_case("wg", 256, 256, 3, 5, 9, 3, 3, 0, 0, RES_NONE, 256);    /* 45-pixel frames: tiles span 3-4 frames */
    conv_case("wg", 128, 128, 4, 7, 19, 3, 3, 0, 0, RES_SEPARATE, 0); /* the 128x128 tile */
    conv_case("wg", 128, 256, 3, 4, 6, 3, 1, 0, 1, RES_NONE, 0);      /* time_conv */
    conv_case("time_conv", 1024, 2048, 1, 8, 12, 3, 1, 0, 1, RES_NONE, 0);
    conv_case("conv_in", 48, 1024, 2, 8, 12, 3, 3, 0, 0, RES_NONE, 0); /* mma kernel (cin 48) */
    conv_case("conv_out", 256, 12, 2, 16, 24, 3, 3, 0, 0, RES_NONE, 0); /* mma kernel (N 12), or the row conv */
    conv_case("rows", 256, 12, 3, 2, 140, 3, 3, 0, 0, RES_NONE, 0);      /* row conv: history, 2 x tiles */
    conv_case("rows2d", 256, 12, 1, 21, 45, 3, 3, 0, 0, RES_NONE, 0);   /* 2D tiles: one frame as the decode's */
    conv_case("rows2d", 64, 12, 3, 70, 310, 3, 3, 0, 0, RES_INPLACE, 0); /* 150 tiles, partial both ways, res = out */
    conv_case("rows2d", 256, 36, 1, 21, 45, 3, 3, 0, 0, RES_NONE, 0);   /* N 36 on the 2D tiles: one frame */
    conv_case("rows2d", 64, 48, 2, 22, 40, 3, 3, 0, 0, RES_INPLACE, 0);  /* N 48, two frames, res = out */
    conv_case("wg", 256, 512, 2, 48, 96, 3, 3, 0, 0, RES_NONE, 0);       /* 144 tiles of 128x256: persistent */
    conv_case("edge", 4, 12, 2, 3, 5, 3, 3, 0, 0, RES_NONE, 0);         /* scalar kernel */
    conv_case("edge", 64, 64, 3, 5, 7, 3, 3, 0, 0, RES_INPLACE, 0);     /* mma kernel, one partial tile */
    /* a decode's first chunk (hist_zero 2): one frame as the weight's last tap alone on each kernel the decoder's
     * first-chunk convs take; two frames keep the three taps */
    conv_zero_hist = 1;
    conv_case("mid", 1024, 1024, 1, 8, 12, 3, 3, 0, 0, RES_NONE, 0);
    conv_case("up3", 256, 256, 1, 32, 48, 3, 3, 0, 0, RES_INPLACE, 0);
    conv_case("wg", 256, 256, 1, 5, 9, 3, 3, 0, 0, RES_NONE, 256);
    conv_case("wg", 96, 96, 1, 20, 36, 3, 3, 0, 0, RES_SEPARATE, 0);  /* Wan2.1's last stage: cin 96 */
    conv_case("conv_in", 48, 1024, 1, 8, 12, 3, 3, 0, 0, RES_NONE, 0);
    conv_case("edge", 64, 64, 1, 5, 7, 3, 3, 0, 0, RES_INPLACE, 0);
    conv_case("mid", 512, 512, 2, 8, 12, 3, 3, 0, 0, RES_NONE, 0);
    conv_zero_hist = 0;
    conv_hist = 0;
    winograd_cases();
    f16_batch_cases();
    /* the causal conv with its history as partial sums (the head's conv_out): one frame per call, several, a call
     * of all frames with rows of two x tiles (3 rows: the mma kernel); the GEMM (N = 3 cout) on the 2D tiles into
     * fp32: N 36, 48 and 24 with partial tiles both ways; N = 48 under 6 rows on the mma kernel; the scalar kernel
     * (cin 4, N odd) */
    psum_case("conv_out", 256, 12, 5, 16, 24, 1);
    psum_case("conv_out", 256, 12, 5, 16, 24, 2);
    psum_case("conv_out", 256, 12, 3, 3, 140, 3);
    psum_case("rows2d", 256, 12, 3, 19, 37, 1); /* N 36: tiles 16 + 3 rows, 32 + 5 columns */
    psum_case("rows2d", 64, 16, 3, 33, 70, 3);  /* N 48: 3 x 3 tiles per frame, all edges partial */
    psum_case("rows2d", 128, 8, 4, 6, 9, 2);    /* N 24, the fewest rows the 2D tiles take */
    psum_case("edge", 64, 16, 4, 5, 7, 3);
    psum_case("edge", 4, 12, 3, 3, 5, 1);
    psum_case("edge", 32, 3, 2, 4, 6, 1);
    /* the Wan2.1 VAE's conv_out (96 -> 3): N 9 run as 10 on its zero weight row (conv_psum.cu), mma.sync */
    psum_case("w21 conv_out", 96, 3, 5, 16, 24, 1);
    psum_case("w21 conv_out", 96, 3, 4, 9, 40, 2);
    /* the upsample conv with the DupUp fused (w22_conv_args.dup_in): the model's two maps (ft 2, cd = C: channel o;
     * ft 1, cd = 2C: channel 2o + py) at reduced size, first_single on and off, on each kernel the phase GEMMs reach,
     * frames of 45 pixels (tiles span frames: the frame map per row), a strided DupUp input; and maps the phases do
     * not take (ft 2, cd = 2C: the channel offset is the time copy; cs 4), which the backend refuses */
    dupconv_case("up1", 1024, 1024, 2, 1, 2, 4, 6, 0, "wgmma");  /* up_blocks.1: the 128x256 tile */
    dupconv_case("up2", 512, 1024, 1, 0, 2, 8, 12, 0, "wgmma");  /* up_blocks.2: two input channels per output */
    dupconv_case("wg", 128, 128, 2, 0, 3, 5, 9, 0, "wgmma");     /* 128x128 tile, tiles spanning frames */
    dupconv_case("wg", 128, 128, 2, 1, 3, 5, 9, 1, "wgmma");     /* first_single, strided DupUp input */
    dupconv_case("wg", 256, 512, 1, 1, 2, 5, 9, 1, "wgmma");     /* 2o + py on the 256 tile, strided */
    dupconv_case("wg", 128, 256, 1, 0, 1, 12, 20, 0, "wgmma");   /* several tiles per frame */
    /* the split tail: 192 tiles per phase (were the phases four launches: split) are 768 in one launch (no split); 2500 pixels
     * are 20 tiles (the last of 68 rows), 2 N tiles: 160 in one launch, 28 split in 3 pieces, each phase its own
     * DupUp channel (2o + py); 3 frames of 1520 pixels on the 256 tile (ft 2, first_single): 144 tiles, 12 split in
     * 2 pieces */
    dupconv_case("split", 512, 1024, 1, 0, 1, 64, 192, 0, "wgmma");
    dupconv_case("split", 512, 1024, 1, 0, 1, 50, 50, 0, "wgmma");
    dupconv_case("split", 256, 256, 2, 1, 2, 40, 38, 1, "wgmma");
    dupconv_case("mma", 64, 64, 2, 1, 2, 5, 7, 0, "mma");        /* N 64: the mma kernel's pair store */
    dupconv_case("mma", 32, 64, 1, 0, 2, 5, 7, 1, "mma");        /* N 32: 2o + py as two scalar loads */
    dupconv_case("scalar", 4, 8, 1, 1, 2, 3, 5, 0, "scalar");    /* cin 4: the scalar kernel */
    dupconv_case("scalar", 4, 4, 2, 1, 2, 3, 5, 0, "scalar");
    dupconv_case("sep", 128, 256, 2, 1, 2, 5, 9, 0, "refused"); /* offset = time copy: no kernel takes it */
    dupconv_case("sep", 32, 16, 1, 0, 2, 3, 5, 0, "refused");   /* cd = C / 2: cs 4 */
    /* attention */
    attention_case(1024, 1, 6, 13, 0, 6, 1);
    attention_case(1024, 2, 6, 13, 2, 3, 1); /* a rank's rows */
    attention_case(1024, 1, 6, 13, 0, 6, 0);
    attention_case(64, 2, 5, 7, 1, 3, 1);    /* P = 35: odd (the scores GEMM at N = Pp = 40, issue 46) */
    attention_case(1024, 1, 5, 9, 0, 5, 1);  /* 5 x 9: odd x odd at the real C */
    attention_case(20, 1, 4, 6, 0, 4, 0);    /* C % 8 != 0 */
    attention_case(256, 1, 22, 39, 0, 22, 1); /* P = 858: several key tiles */
    attention_case(384, 1, 9, 16, 0, 9, 1);   /* the Wan2.1 VAE's mid block */
    attention_case(384, 2, 9, 16, 3, 4, 1);
    /* bands of query rows (attention.cu: a frame whose scratch exceeds the caller's memory and the backend's own
     * cap; a 1280x720 Wan2.1 frame's is 1.2 GB): a cap of a few rows' scratch, bands of 2 and 3 rows and a tail */
    if (!selftest) {
        const size_t old = w22_backend_cuda_swap_attention_max(gpu, (size_t)160 << 10);
        attention_case(384, 2, 9, 16, 0, 9, 0);  /* 144 keys: V^T 110 KB + 13.8 KB a row: 3 rows a band */
        attention_case(64, 1, 20, 30, 2, 17, 0); /* 600 keys: V^T 77 KB + 115 KB a row: one row a band */
        w22_backend_cuda_swap_attention_max(gpu, old);
    }
    /* rmsnorm */
    rmsnorm_case(48, 2, 5, 7, 0, 0);
    rmsnorm_case(256, 2, 9, 11, 1, 0);
    rmsnorm_case(1024, 1, 6, 13, 1, 0);
    rmsnorm_case(512, 3, 5, 9, 1, 0);
    rmsnorm_case(1024, 2, 4, 5, 0, 1);
    rmsnorm_case(20, 1, 3, 5, 1, 0); /* C % 8: refused (route.h) */
    /* C <= 256 not a multiple of 256 (Wan2.1's 96 and 192): LP lanes a pixel (16, 32; C <= 64 on 16 with lanes
     * idle), pixels past the last in the last warp, in place */
    rmsnorm_case(96, 2, 5, 7, 1, 0);
    rmsnorm_case(96, 1, 9, 13, 1, 1);
    rmsnorm_case(192, 3, 5, 9, 1, 0);
    rmsnorm_case(40, 1, 7, 9, 0, 0);
    rmsnorm_case(128, 1, 3, 5, 1, 1);
    rmsnorm_case(384, 1, 5, 7, 1, 0);
    /* larger frames: many blocks of rows, odd widths (a warp's second pixel past the row's end), in place; they
     * ran v24's bulk-copy trial kernel (e14807d, 2095c01) over every slot of its ring */
    rmsnorm_case(256, 2, 264, 100, 1, 0);
    rmsnorm_case(512, 1, 200, 150, 1, 1);
    rmsnorm_case(1024, 1, 100, 130, 0, 0);
    /* dupup */
    dupup_case(32, 32, 2, 0, 2, 3, 5);
    dupup_case(32, 32, 2, 1, 3, 3, 5);
    dupup_case(64, 32, 1, 0, 2, 4, 6);
    dupup_case(1024, 1024, 2, 1, 2, 4, 6);
    dupup_case(1024, 512, 1, 0, 2, 4, 6);
    dupup_case(12, 6, 1, 0, 1, 3, 5);
    /* unpatchify */
    unpatchify_case(W22_DTYPE_BF16, 2, 5, 7, 0, 2);
    unpatchify_case(W22_DTYPE_F32, 3, 4, 6, 0, 2);
    unpatchify_case(W22_DTYPE_F32, 1, 3, 5, 1, 2);
    unpatchify_case(W22_DTYPE_BF16, 2, 6, 13, 1, 2);
    unpatchify_case(W22_DTYPE_BF16, 2, 10, 14, 0, 1); /* the Wan2.1 VAE: 3 channels, no patch */
    unpatchify_case(W22_DTYPE_F32, 1, 7, 9, 1, 1);
    /* latents in */
    latents_case(W22_DTYPE_F32, 48, 3, 6, 13, 0, 0, 3, 6);
    latents_case(W22_DTYPE_BF16, 48, 4, 6, 13, 1, 2, 2, 3);
    latents_case(W22_DTYPE_F32, 4, 2, 3, 5, 1, 1, 1, 2);
    /* zero, copy */
    zero_case(2, 5, 7, 48, 0, 48);
    zero_case(2, 5, 7, 48, 8, 16);
    zero_case(1, 3, 5, 12, 3, 5);
    zero_border_case(2, 5, 7, 48);  /* 16-byte stores */
    zero_border_case(3, 4, 9, 12);  /* one element per thread (12 channels: 24-byte pixels) */
    zero_border_case(1, 1, 1, 64);
    copy_case(2, 5, 7, 48, 48, 0);
    copy_case(2, 5, 7, 16, 64, 32);
    copy_case(1, 3, 5, 5, 12, 3);
    plane_copy_case(3, 5, 16); /* folded, 16-byte accesses */
    plane_copy_case(2, 4, 12); /* folded, planes 8-byte aligned: one element per thread */
    plane_copy_case(2, 3, 7);
}

/* ---- perf ---- */

static void fill_bf16_random(void *dev, size_t n) {
    uint16_t *h = malloc(n * 2);
    uint64_t s = seed++ * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < n; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        h[i] = w22_f32_to_bf16(((float)(s >> 40) / 16777216.0f - 0.5f) * 2.0f);
    }
    gpu->ops->from_host(gpu, dev, h, n * 2);
    free(h);
}

/* --perf's options for the lines after them: the output added in place as the residual (the resblocks' conv2), and
 * the timed calls (--iters, default 10: ~12 ms bursts, which run above the decode's power-capped clock; a
 * few hundred give the sustained state) */
static int perf_residual, perf_iters = 10;

/* Times conv F x h x w (input size) cin -> cout: warm-up, then iterations alternating two input buffers (each
 * larger than the L2), with cudaEvents on the backend's stream. */
static double perf_conv_on(w22_backend *gb, const char **path, int cin, int cout, int F, int h, int w, int kt,
                           int ks, int upsample, int time_split) {
    const int oh = upsample ? 2 * h : h, ow = upsample ? 2 * w : w;
    const int of = time_split ? 2 * F : F, oc = time_split ? cout / 2 : cout;
    const size_t nin = (size_t)(F + kt - 1) * (h + 2) * (w + 2) * cin, nout = (size_t)of * (oh + 2) * (ow + 2) * oc;
    void *in[2] = {NULL, NULL}, *out = NULL;
    w22_bweight *wt = NULL, *bias = NULL;
    const size_t wn = (size_t)cout * cin * kt * ks * ks;
    float *wh = malloc(wn * 4), *bh = malloc(cout * 4);
    t_fill_uniform(wh, wn, seed++, -0.02f, 0.02f);
    t_fill_uniform(bh, cout, seed++, -0.1f, 0.1f);
    int64_t ws[5] = {cout, cin, kt, ks, ks}, b1[1] = {cout};
    /* 2D 3x3 weights come as [cout, cin, 3, 3] (as conv_case and the decoder's upsamplers): the backend then runs
     * an upsample conv as four 2x2 phase convs, the production path */
    const int ndim = kt == 1 && ks == 3 ? 4 : 5;
    if (ndim == 4) ws[2] = ks;
    gpu = gb;
    w22_status s = gpu->ops->weight_upload(gpu, W22_WK_CONV, (w22_wsrc){wh, W22_DTYPE_F32, -1}, ws, ndim, &wt);
    if (s == W22_OK) s = gpu->ops->weight_upload(gpu, W22_WK_VECTOR, (w22_wsrc){bh, W22_DTYPE_F32, -1}, b1, 1, &bias);
    for (int i = 0; i < 2 && s == W22_OK; i++) s = gpu->ops->alloc(gpu, nin * 2, &in[i]);
    if (s == W22_OK) s = gpu->ops->alloc(gpu, nout * 2, &out);
    if (s != W22_OK) {
        printf("perf setup failed: %s\n", w22_last_error());
        CHECK(0, "perf setup");
        free(wh);
        free(bh);
        return -1;
    }
    for (int i = 0; i < 2; i++) fill_bf16_random(in[i], nin); /* borders random too: only speed is measured */
    w22_conv_args a = {.out = make_view(out, 2, of, oh, ow, oc, 1), .weight = wt, .bias = bias, .kt = kt, .ks = ks,
                       .upsample = upsample, .time_split = time_split};
    if (perf_residual) a.residual = &a.out;
    cudaStream_t st = (cudaStream_t)w22_backend_cuda_stream(gpu);
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    const int warm = 2, iters = perf_iters;
    for (int i = 0; i < warm + iters && s == W22_OK; i++) {
        if (i == warm) cudaEventRecord(e0, st);
        a.in = make_view(in[i & 1], 2, F + kt - 1, h, w, cin, 1);
        s = gpu->ops->conv(gpu, &a);
    }
    cudaEventRecord(e1, st);
    cudaError_t ce = cudaEventSynchronize(e1);
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    double ret = ms / iters;
    *path = gpu_path();
    if (s != W22_OK || ce != cudaSuccess) {
        printf("perf FAILED: %s %s\n", w22_last_error(), cudaGetErrorString(ce));
        CHECK(0, "perf conv %dx%d", cin, cout);
        ret = -1;
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    gpu->ops->free(gpu, in[0]);
    gpu->ops->free(gpu, in[1]);
    gpu->ops->free(gpu, out);
    gpu->ops->weight_free(gpu, wt);
    gpu->ops->weight_free(gpu, bias);
    free(wh);
    free(bh);
    return ret;
}

/* One line per conv shape: its time and TFLOP/s on the kernel route.h picks (the FLOPs of the work done: an upsample conv
 * runs as four 2x2 phase convs, 4 taps per output pixel instead of 9). */
static void perf_conv(const char *name, int cin, int cout, int F, int h, int w, int kt, int ks, int upsample,
                      int time_split, double cudnn) {
    const int oh = upsample ? 2 * h : h, ow = upsample ? 2 * w : w;
    const int taps = upsample && kt == 1 && ks == 3 ? 4 : kt * ks * ks;
    const double flops = 2.0 * F * oh * ow * cout * ((double)cin * taps);
    if (!selected(name)) return;
    const char *path = "";
    w22_backend *keep = gpu;
    printf("perf %-28s %dx%dx%dx%d->%d k%dx%d%s:", name, F + kt - 1, h, w, cin, cout, kt, ks, upsample ? " up" : "");
    const double t = perf_conv_on(gpu, &path, cin, cout, F, h, w, kt, ks, upsample, time_split);
    if (t > 0) printf(" %.3f ms %.1f TFLOP/s [%s]", t, flops / (t * 1e-3) / 1e12, path);
    gpu = keep;
    if (cudnn > 0 && t > 0) printf(" (cuDNN measured %.0f: %.0f%%)", cudnn, 100 * flops / (t * 1e-3) / 1e12 / cudnn);
    printf("\n");
}

/* conv_out with its history as partial sums (w22_conv_args.psum) as the decode runs it: one frame per call at
 * h x w, 256 -> 12; the time per frame covers both launches (the N = 36 GEMM into fp32 scratch, the combine). To set
 * against the plain conv_out's one-frame line above it. FLOPs counted as the plain conv's (27 taps x 12 outputs). */
static void perf_psum(int h, int w) {
    const int cin = 256, cout = 12, calls = 8;
    const size_t nin = (size_t)2 * (h + 2) * (w + 2) * cin, nout = (size_t)(h + 2) * (w + 2) * cout;
    const size_t nst = (size_t)2 * h * w * cout, ntmp = (size_t)h * w * 3 * cout;
    void *in = NULL, *out = NULL, *st = NULL, *tmp = NULL;
    w22_bweight *wt = NULL, *bias = NULL;
    const size_t wn = (size_t)cout * cin * 27;
    float *wh = malloc(wn * 4), *bh = malloc(cout * 4);
    t_fill_uniform(wh, wn, seed++, -0.02f, 0.02f);
    t_fill_uniform(bh, cout, seed++, -0.1f, 0.1f);
    int64_t ws[5] = {cout, cin, 3, 3, 3}, b1[1] = {cout};
    w22_status s = gpu->ops->weight_upload(gpu, W22_WK_CONV, (w22_wsrc){wh, W22_DTYPE_F32, -1}, ws, 5, &wt);
    if (s == W22_OK) s = gpu->ops->weight_upload(gpu, W22_WK_VECTOR, (w22_wsrc){bh, W22_DTYPE_F32, -1}, b1, 1, &bias);
    if (s == W22_OK) s = gpu->ops->alloc(gpu, nin * 2, &in);
    if (s == W22_OK) s = gpu->ops->alloc(gpu, nout * 2, &out);
    if (s == W22_OK) s = gpu->ops->alloc(gpu, nst * 4, &st);
    if (s == W22_OK) s = gpu->ops->alloc(gpu, ntmp * 4, &tmp);
    if (s != W22_OK) {
        printf("perf psum setup failed: %s\n", w22_last_error());
        CHECK(0, "perf psum setup");
    } else {
        fill_bf16_random(in, nin);
        cudaMemset(st, 0, nst * 4);
        w22_view vs = make_view(st, 4, 2, h, w, cout, 0);
        w22_conv_args a = {.out = make_view(out, 2, 1, h, w, cout, 1), .weight = wt, .bias = bias, .kt = 3, .ks = 3,
                           .psum = &vs, .psum_tmp = make_view(tmp, 4, 1, h, w, 3 * cout, 0)};
        cudaStream_t stream = (cudaStream_t)w22_backend_cuda_stream(gpu);
        cudaEvent_t e0, e1;
        cudaEventCreate(&e0);
        cudaEventCreate(&e1);
        for (int i = 0; i < 2 + calls && s == W22_OK; i++) {
            if (i == 2) cudaEventRecord(e0, stream);
            a.in = w22_view_frames(make_view(in, 2, 2, h, w, cin, 1), i & 1, 1); /* alternate frames */
            s = gpu->ops->conv(gpu, &a);
        }
        cudaEventRecord(e1, stream);
        cudaError_t ce = cudaEventSynchronize(e1);
        float ms = 0;
        cudaEventElapsedTime(&ms, e0, e1);
        const double per = ms / calls, flops = 2.0 * h * w * cout * cin * 27;
        if (s != W22_OK || ce != cudaSuccess) {
            printf("perf psum FAILED: %s %s\n", w22_last_error(), cudaGetErrorString(ce));
            CHECK(0, "perf psum");
        } else {
            printf("perf %-28s 1x%dx%dx%d->%d k3x3, 1 frame per call: %.3f ms per frame, %.1f TFLOP/s (as 27 taps) "
                   "[%s, then the combine]\n", "conv_out psum", h, w, cin, cout, per, flops / (per * 1e-3) / 1e12,
                   gpu_path());
        }
        cudaEventDestroy(e0);
        cudaEventDestroy(e1);
    }
    void *bufs[4] = {in, out, st, tmp};
    for (int i = 0; i < 4; i++)
        if (bufs[i]) gpu->ops->free(gpu, bufs[i]);
    if (wt) gpu->ops->weight_free(gpu, wt);
    if (bias) gpu->ops->weight_free(gpu, bias);
    free(wh);
    free(bh);
}

/* Times attention at one latent frame of H x W, C = 1024 (issue 46: odd x odd frames ran their scores on the scalar
 * kernel, 45 x 45 about 80x slower a frame than 44 x 46). */
static void perf_attention(int H, int W) {
    const int C = 1024, P = H * W;
    void *qkv = NULL, *out = NULL;
    w22_status s = gpu->ops->alloc(gpu, (size_t)P * 3 * C * 2, &qkv);
    if (s == W22_OK) s = gpu->ops->alloc(gpu, (size_t)P * C * 2, &out);
    if (s != W22_OK) {
        printf("perf attention setup failed: %s\n", w22_last_error());
        return;
    }
    fill_bf16_random(qkv, (size_t)P * 3 * C);
    w22_view all = make_view(qkv, 2, 1, H, W, 3 * C, 0), o = make_view(out, 2, 1, H, W, C, 0);
    cudaStream_t st = (cudaStream_t)w22_backend_cuda_stream(gpu);
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    float ms = 0;
    for (int i = 0; i < 5 && s == W22_OK; i++) {
        if (i == 2) cudaEventRecord(e0, st);
        s = gpu->ops->attention(gpu, w22_view_channels(all, 0, C), w22_view_channels(all, C, C),
                                w22_view_channels(all, 2 * C, C), o, NULL, 0);
    }
    cudaEventRecord(e1, st);
    cudaEventSynchronize(e1);
    cudaEventElapsedTime(&ms, e0, e1);
    printf("perf %-28s 1 frame %dx%d C %d: %.3f ms, %.1f TFLOP/s (2 GEMMs) %s\n", "attention", H, W, C, ms / 3,
           4.0 * P * P * C / (ms / 3 * 1e-3) / 1e12, s == W22_OK ? "" : w22_last_error());
    gpu->ops->free(gpu, qkv);
    gpu->ops->free(gpu, out);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
}

/* Times attention at the real frame (44 x 78) and at odd x odd and even sizes of about one area, and rmsnorm's
 * bandwidth at 256ch 352x624 x 4. */
static void perf_other(void) {
    if (!selected("attention")) return;
    perf_attention(44, 78);
    perf_attention(45, 45);
    perf_attention(44, 46);
}

/* RMS norm + SiLU of F frames h x w x c, bytes read + written per second (the copy's 4.24 TB/s is the ceiling) */
static void perf_norm(int F, int h, int w, int c) {
    if (!selected("rmsnorm")) return;
    cudaStream_t st = (cudaStream_t)w22_backend_cuda_stream(gpu);
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    float ms = 0;
    void *big = NULL;
    const size_t n = (size_t)F * h * w * c;
    w22_bweight *gm = NULL;
    float *gh = malloc(c * 4);
    for (int i = 0; i < c; i++) gh[i] = 1.0f;
    int64_t g1[1] = {c};
    w22_status s = gpu->ops->alloc(gpu, n * 2 * 2, &big);
    if (s == W22_OK) s = gpu->ops->weight_upload(gpu, W22_WK_VECTOR, (w22_wsrc){gh, W22_DTYPE_F32, -1}, g1, 1, &gm);
    if (s != W22_OK) {
        printf("perf rmsnorm setup failed: %s\n", w22_last_error());
        free(gh);
        return;
    }
    fill_bf16_random(big, n);
    w22_view vi = make_view(big, 2, F, h, w, c, 0), vo = make_view((char *)big + n * 2, 2, F, h, w, c, 0);
    for (int i = 0; i < 5 && s == W22_OK; i++) {
        if (i == 2) cudaEventRecord(e0, st);
        s = gpu->ops->rmsnorm(gpu, vi, vo, gm, 1);
    }
    cudaEventRecord(e1, st);
    cudaEventSynchronize(e1);
    cudaEventElapsedTime(&ms, e0, e1);
    printf("perf %-28s %dx%dx%dx%d silu: %.3f ms, %.2f TB/s (read + write; copy measured 4.24) %s\n", "rmsnorm", F, h,
           w, c, ms / 3, 2.0 * n * 2 / (ms / 3 * 1e-3) / 1e12, s == W22_OK ? "" : w22_last_error());
    gpu->ops->free(gpu, big);
    gpu->ops->weight_free(gpu, gm);
    free(gh);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
}

static void run_perf(void) {
    /* the heavy 3x3x3 convs, 4 output frames (cuDNN channels-last figures from docs/wan22-decoder.md) */
    perf_conv("up_blocks.3 conv 256ch", 256, 256, 4, 352, 624, 3, 3, 0, 0, 709);
    perf_conv("up_blocks.2 conv 512ch", 512, 512, 4, 176, 312, 3, 3, 0, 0, 758);
    perf_conv("up_blocks.1 conv 1024ch", 1024, 1024, 4, 88, 156, 3, 3, 0, 0, 765);
    /* the upsample convs (four 2x2 phase convs on the low-resolution grid: FLOPs counted as 4 taps) */
    perf_conv("up_blocks.2 upsample 512ch", 512, 512, 4, 176, 312, 1, 3, 1, 0, 0);
    perf_conv("up_blocks.1 upsample 1024ch", 1024, 1024, 4, 88, 156, 1, 3, 1, 0, 0);
    perf_conv("up_blocks.1 time_conv", 1024, 2048, 2, 88, 156, 3, 1, 0, 1, 0);
    perf_conv("conv_out 256->12", 256, 12, 4, 352, 624, 3, 3, 0, 0, 0);
    perf_conv("conv_out 256->12 1f", 256, 12, 1, 352, 624, 3, 3, 0, 0, 0); /* the decode's chunks: one frame */
    /* one frame, as the decode runs stages 1-3 (one-frame chunks): 432 / 858 / 1716 tiles on 132 SMs */
    perf_conv("up_blocks.1 conv 1024ch 1f", 1024, 1024, 1, 88, 156, 3, 3, 0, 0, 0);
    perf_conv("up_blocks.2 conv 512ch 1f", 512, 512, 1, 176, 312, 3, 3, 0, 0, 0);
    perf_conv("up_blocks.2 upsample 1f", 512, 512, 1, 176, 312, 1, 3, 1, 0, 0);
    /* the other upsample convs as the decode runs them: 2 frames (time_conv's) per chunk at stages 0 and 1 */
    perf_conv("up_blocks.1 upsample 2f", 1024, 1024, 2, 88, 156, 1, 3, 1, 0, 0);
    perf_conv("up_blocks.0 upsample 2f", 1024, 1024, 2, 44, 78, 1, 3, 1, 0, 0);
    perf_conv("up_blocks.3 conv 256ch 1f", 256, 256, 1, 352, 624, 3, 3, 0, 0, 0);
    /* the resblocks' conv2: the same convs adding their output's old contents in place */
    perf_residual = 1;
    perf_conv("up_blocks.3 conv 256ch 1f res", 256, 256, 1, 352, 624, 3, 3, 0, 0, 0);
    perf_conv("up_blocks.2 conv 512ch 1f res", 512, 512, 1, 176, 312, 3, 3, 0, 0, 0);
    perf_conv("up_blocks.1 conv 1024ch 1f res", 1024, 1024, 1, 88, 156, 3, 3, 0, 0, 0);
    perf_residual = 0;
    /* the Wan2.1 decoder at 1280x720 (latents 90x160; issue 44): 96 / 192 / 384 channels, not multiples of 256 (96
     * not of 64), as its decode runs them (stages 2-3 one frame per call, stages 0-1 two) */
    perf_conv("wan21 up_blocks.3 conv 96ch 1f", 96, 96, 1, 720, 1280, 3, 3, 0, 0, 0);
    perf_conv("wan21 up_blocks.2 conv 192ch 1f", 192, 192, 1, 360, 640, 3, 3, 0, 0, 0);
    perf_conv("wan21 up_blocks.1 conv 384ch 2f", 384, 384, 2, 180, 320, 3, 3, 0, 0, 0);
    perf_conv("wan21 up_blocks.1 conv 192->384 2f", 192, 384, 2, 180, 320, 3, 3, 0, 0, 0);
    perf_conv("wan21 up_blocks.0 conv 384ch 2f", 384, 384, 2, 90, 160, 3, 3, 0, 0, 0);
    perf_conv("wan21 up_blocks.2 upsample 192->96 1f", 192, 96, 1, 360, 640, 1, 3, 1, 0, 0);
    perf_conv("wan21 up_blocks.1 upsample 384->192 1f", 384, 192, 1, 180, 320, 1, 3, 1, 0, 0);
    perf_conv("wan21 up_blocks.1 time_conv 2f", 384, 768, 2, 180, 320, 3, 1, 0, 1, 0);
    perf_conv("wan21 conv_out 96->3 1f", 96, 3, 1, 720, 1280, 3, 3, 0, 0, 0);
    perf_residual = 1;
    perf_conv("wan21 up_blocks.3 conv 96ch 1f res", 96, 96, 1, 720, 1280, 3, 3, 0, 0, 0);
    perf_conv("wan21 up_blocks.2 conv 192ch 1f res", 192, 192, 1, 360, 640, 3, 3, 0, 0, 0);
    perf_residual = 0;
    perf_psum(352, 624);
    perf_other();
    perf_norm(4, 352, 624, 256);
    perf_norm(4, 176, 312, 512);
    perf_norm(4, 88, 156, 1024);
    /* as the decode calls it: one frame at stage 3, two at stages 1-2 */
    perf_norm(1, 352, 624, 256);
    perf_norm(2, 176, 312, 512);
    perf_norm(2, 88, 156, 1024);
    /* the Wan2.1 decoder's at 1280x720: one frame at 96 channels, two at 192 */
    perf_norm(1, 720, 1280, 96);
    perf_norm(2, 360, 640, 192);
}

int main(int argc, char **argv) {
    int perf = 0, device = 0;
    /* The decoder's Winograd path (src/cuda/winograd.cu, on by default for 256 channels and up) is off here but for
     * winograd_cases(), which lower the threshold for their own weights: every other case is the direct conv the
     * --perf lines time against cuDNN. */
    setenv("W22_WINOGRAD", "0", 0);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--perf")) perf = 1;
        else if (!strcmp(argv[i], "--iters") && i + 1 < argc) perf_iters = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-o") && i + 1 < argc) filter = argv[++i];
        else if (!strcmp(argv[i], "--device") && i + 1 < argc) device = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--selftest-cpu")) selftest = 1;
        else {
            fprintf(stderr, "usage: %s [--perf [--iters N]] [-o OPNAME] [--device N] [--selftest-cpu]\n", argv[0]);
            return 2;
        }
    }
    if (selftest) {
        if (w22_backend_cpu_create(0, &cpu) != W22_OK || w22_backend_cpu_create(0, &gpu) != W22_OK) return 1;
        run_cases();
        return t_finish("cuda_ops --selftest-cpu");
    }
    if (!w22_cuda_available()) {
        printf("cuda_ops: no usable sm_80+ GPU here; this test runs only where one is\n");
        return 1;
    }
    /* conformance: every op synchronizes and checks its views against the allocations (src/cuda debug mode) */
    if (!perf) {
        setenv("W22_CUDA_DEBUG", "1", 0);
        w22_status s = w22_backend_cpu_create(0, &cpu);
        if (s != W22_OK) {
            printf("cuda_ops: w22_backend_cpu_create: %s\n", w22_last_error());
            return 1;
        }
    }
    /* one CUDA backend, on the kernel path W22_KERNELS asks for (route.h's w22_route_path) */
    w22_backend *made = NULL;
    w22_status s = w22_backend_cuda_create(device, &made);
    if (s != W22_OK) {
        printf("cuda_ops: w22_backend_cuda_create(%d): %s: %s\n", device, w22_status_string(s), w22_last_error());
        return 1;
    }
    gpu = made;
    if (!perf) {
        printf("-- kernel path: %s (W22_KERNELS=%s); the TMA conv's clusters of 2: %d --\n", w22_backend_cuda_path(gpu),
               getenv("W22_KERNELS") ? getenv("W22_KERNELS") : "", w22_backend_cuda_tma_clusters(gpu));
        run_cases();
        weight_layout_cases();
        check_coverage();
        cpu->ops->destroy(cpu);
    } else {
        run_perf();
    }
    size_t peak = 0;
    size_t now = w22_backend_cuda_bytes(made, &peak);
    printf("CUDA backend memory: %zu bytes held at the end (attention scratch included), peak %zu\n", now, peak);
    made->ops->destroy(made);
    return t_finish("cuda_ops");
}
