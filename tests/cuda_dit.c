/* The DiT passes' CUDA kernels (src/dit/dit_cuda.cu) against their float32 CPU versions (src/dit/dit.c).
 *
 *   cuda_dit              every case; one line each, then "N passed, N failed"; exit 0 iff all pass
 *   cuda_dit -o NAME      only the cases whose name contains NAME
 *   cuda_dit --perf       the passes at TI2V-5B's 704x1280x121 (L = 27,280, dim 3072) and A14B's dim 5120:
 *                         us per call, GB/s of the bytes each must move, and that as a share of the device's
 *                         cudaMemcpy rate on the same buffers
 *
 * Method: inputs are random values rounded to bf16 on the host, so both sides see the same numbers; every output
 * buffer starts as NaN and sits between margins of a known pattern that must not change (an element the kernel
 * skips stays NaN and fails; a write outside the view fails); an input that must stay unchanged (h when h_out is
 * elsewhere, x when out is elsewhere) is compared bit for bit afterwards. Shapes: L = 1, odd L, B > 1, dims that
 * take each vector width (8: dim % 8 == 0 and 16-byte pointers; 2; 1: odd dims or pointers off by one element),
 * each on both kernels (w22_dit_rows_plan: registers up to 1024 threads a row, the last dim of that reach and the
 * next, several rows a block, idle threads in a row; shared memory beyond, up to a row of 32768 = 128 KB), the real
 * dims (3072, 5120, also misaligned), strided rows (a view of a fused QKV), in place (h_out == h, out == y, qknorm's
 * out == x), bf16 and float32 temb (and both in one call), per token and per batch, a gate with a modulation.
 *
 * The reference repeats the kernel's bf16 roundings where they change what follows: the new residual h is rounded
 * to bf16 before its norm (the CPU version is called twice: the residual, then the norm of the rounded h), and the
 * RMSNorm's output is rounded to bf16 before RoPE (the rotation is redone here in double on the rounded values).
 * Tolerances, then: the new h must be bit-exact (the same float32 steps, one rounding: y * gate, + h, to bf16);
 * an output may differ by its final rounding to bf16 (at most 1 ulp, 2^-7 relative, where float32 noise moves a
 * value across a rounding midpoint) plus float32 reduction-order noise on the statistics (~1e-6 relative, 1e-4
 * absolute covers the outputs here, whose magnitude stays under ~30); after RoPE the rounding of the normalized
 * pair may flip too, 2^-7 (|x1| + |x2|) (|cos|, |sin| <= 1). The rms error must stay under 1e-2 of the reference's
 * (bf16 rounding alone gives ~2e-3). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cuda_runtime.h>
#include "common.h"
#include "dit/dit.h"
#include "testutil.h"

#define MARGIN 64 /* elements of pattern before and after every device buffer */
static const char *filter;
static uint64_t seed = 1;

static int selected(const char *name) { return !filter || strstr(name, filter); }

/* The vector widths and row layouts the cases ran (dit.h's w22_dit_*_vector and w22_dit_rows_plan, the launchers' own
 * choices): a full run must cover each width of each kernel, RoPE's 8 and 2 included, on both the register and the
 * shared-memory kernel. [kernel: 0 resnorm, 1 qknorm, 2 qknorm with RoPE][width][0 smem, 1 registers] */
static int covered[3][9][2];

static void cuda_ok(cudaError_t e, const char *what) {
    if (e != cudaSuccess) {
        fprintf(stderr, "FATAL: %s: %s\n", what, cudaGetErrorString(e));
        exit(2);
    }
}

/* A device buffer of n elements of el bytes (2: bf16, 4: float32) with margins; p points past the front margin
 * plus `shift` elements (shift 1 misaligns it). */
typedef struct {
    void *base, *p;
    size_t n, el, total;
    int shift;
} dbuf;

static const uint16_t PAT16 = 0x5a5a;
static const uint32_t PAT32 = 0x5a5a5a5au;
static const uint16_t NAN16 = 0x7fc0;

static dbuf dalloc(size_t n, size_t el, int shift) {
    dbuf b = {0};
    b.n = n, b.el = el, b.shift = shift, b.total = n + 2 * MARGIN + shift;
    cuda_ok(cudaMalloc(&b.base, b.total * el), "cudaMalloc");
    b.p = (char *)b.base + (MARGIN + shift) * el;
    /* everything the pattern, then the view NaN (outputs) or its data (inputs, dput) */
    void *h = malloc(b.total * el);
    for (size_t i = 0; i < b.total; i++) {
        if (el == 2) ((uint16_t *)h)[i] = PAT16;
        else ((uint32_t *)h)[i] = PAT32;
    }
    for (size_t i = 0; i < n; i++) {
        if (el == 2) ((uint16_t *)h)[MARGIN + shift + i] = NAN16;
        else ((uint32_t *)h)[MARGIN + shift + i] = 0x7fc00000u;
    }
    cuda_ok(cudaMemcpy(b.base, h, b.total * el, cudaMemcpyHostToDevice), "upload");
    free(h);
    return b;
}

static void dfree(dbuf *b) {
    if (b->base) cudaFree(b->base);
    b->base = b->p = NULL;
}

/* host float32 values -> the buffer's view (bf16 or float32) */
static void dput(dbuf *b, const float *x) {
    if (b->el == 2) {
        uint16_t *h = malloc(b->n * 2);
        for (size_t i = 0; i < b->n; i++) h[i] = w22_f32_to_bf16(x[i]);
        cuda_ok(cudaMemcpy(b->p, h, b->n * 2, cudaMemcpyHostToDevice), "upload");
        free(h);
    } else {
        cuda_ok(cudaMemcpy(b->p, x, b->n * 4, cudaMemcpyHostToDevice), "upload");
    }
}

/* the view back as float32; the margins checked (returns the count of changed margin elements) */
static size_t dget(const dbuf *b, float *x) {
    void *h = malloc(b->total * b->el);
    cuda_ok(cudaMemcpy(h, b->base, b->total * b->el, cudaMemcpyDeviceToHost), "download");
    size_t bad = 0;
    for (size_t i = 0; i < b->total; i++) {
        if (i >= (size_t)(MARGIN + b->shift) && i < MARGIN + b->shift + b->n) continue;
        if (i >= MARGIN && i < (size_t)(MARGIN + b->shift)) continue; /* the shift's gap is pattern too */
        int same = b->el == 2 ? ((uint16_t *)h)[i] == PAT16 : ((uint32_t *)h)[i] == PAT32;
        bad += !same;
    }
    for (size_t i = 0; i < b->n; i++)
        x[i] = b->el == 2 ? w22_bf16_to_f32(((uint16_t *)h)[MARGIN + b->shift + i])
                          : ((float *)h)[MARGIN + b->shift + i];
    free(h);
    return bad;
}

static void round_bf16(float *x, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = w22_bf16_to_f32(w22_f32_to_bf16(x[i]));
}

static float *rnd(size_t n, float lo, float hi) {
    float *x = malloc(n * sizeof(float));
    t_fill_uniform(x, n, seed++, lo, hi);
    round_bf16(x, n);
    return x;
}

/* Compares got with ref: tol_i = 2^-7 |ref_i| + extra_i + 1e-4; returns 1 when within, prints the worst. */
static int compare(const char *name, const char *what, const float *got, const float *ref, const float *extra,
                   size_t n) {
    size_t bad = 0, nonfinite = 0, worst = 0;
    double worst_ratio = 0, e2 = 0, r2 = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(got[i])) {
            nonfinite++;
            continue;
        }
        double e = fabs((double)got[i] - ref[i]), tol = fabs(ref[i]) / 128.0 + (extra ? extra[i] : 0) + 1e-4;
        e2 += e * e, r2 += (double)ref[i] * ref[i];
        if (e > tol) bad++;
        if (e / tol > worst_ratio) worst_ratio = e / tol, worst = i;
    }
    double rel_rms = r2 > 0 ? sqrt(e2 / r2) : sqrt(e2);
    CHECK(nonfinite == 0, "%s: %s: %zu of %zu elements not finite (never written?)", name, what, nonfinite, n);
    CHECK(bad == 0, "%s: %s: %zu of %zu beyond tolerance; worst [%zu] %g vs %g (%.2f of its tolerance)", name, what,
          bad, n, worst, got[worst], ref[worst], worst_ratio);
    CHECK(rel_rms < 1e-2, "%s: %s: relative rms error %.3g", name, what, rel_rms);
    return nonfinite == 0 && bad == 0 && rel_rms < 1e-2;
}

/* ---- resnorm ---- */

/* R_ALL (a gate, the affine norm and a modulation in one call; no Wan block has it) takes the register kernel's other
 * order: shift and scale read after the new h, the weights after the reductions */
enum { R_NORM1, R_GATE_AFFINE, R_ADD_MOD, R_GATE_ONLY, R_AFFINE_MOD, R_WEIGHT_ONLY, R_ALL, R_MODES };
static const char *rmode_name[] = {"norm1", "gate+norm2", "add+norm3", "gate", "affine+mod", "weight", "all"};

typedef struct {
    int B, L, dim, mode, per_token, temb_bf16;
    int in_place;  /* h_out == h; and out == y */
    int shift;     /* misalign every activation buffer by this many elements (1: 2 bytes, 2: 4 bytes) */
    int mixed;     /* the gate's temb bf16, the modulation's float32 (the same values) */
} rcase;

static void run_resnorm(rcase c) {
    char name[160];
    snprintf(name, sizeof name, "resnorm %s B%d L%d dim%d %s temb %s%s%s", rmode_name[c.mode], c.B, c.L, c.dim,
             c.per_token ? "per-token" : "per-batch", c.mixed ? "bf16+f32" : c.temb_bf16 ? "bf16" : "f32",
             c.in_place ? " in-place" : "", c.shift ? " misaligned" : "");
    if (!selected(name)) return;
    const int B = c.B, L = c.L, D = c.dim;
    const size_t N = (size_t)B * L * D, TN = (size_t)(c.per_token ? (size_t)B * L : (size_t)B) * 6 * D;
    int has_y = c.mode == R_GATE_AFFINE || c.mode == R_ADD_MOD || c.mode == R_GATE_ONLY || c.mode == R_ALL;
    int has_gate = c.mode == R_GATE_AFFINE || c.mode == R_GATE_ONLY || c.mode == R_ALL;
    int has_out = c.mode != R_GATE_ONLY;
    int has_w = c.mode == R_GATE_AFFINE || c.mode == R_AFFINE_MOD || c.mode == R_WEIGHT_ONLY || c.mode == R_ALL;
    int has_b = c.mode == R_GATE_AFFINE || c.mode == R_AFFINE_MOD || c.mode == R_ALL;
    int has_mod = c.mode == R_NORM1 || c.mode == R_ADD_MOD || c.mode == R_AFFINE_MOD || c.mode == R_ALL;
    /* inputs: h with an offset so that the mean matters, the branch smaller, the modulation around 0 */
    float *h = rnd(N, -3.f, 5.f), *y = rnd(N, -2.f, 2.f), *table = rnd(6 * (size_t)D, -0.5f, 0.5f);
    float *temb = rnd(TN, -0.5f, 0.5f), *w = rnd(D, 0.5f, 1.5f), *bias = rnd(D, -0.5f, 0.5f);
    if (!c.temb_bf16) t_fill_uniform(temb, TN, seed++, -0.5f, 0.5f); /* float32 temb: not bf16-representable */
    /* reference: the new h in float32, rounded to bf16, then the norm of that */
    w22_dit_mod m = {table, temb, c.per_token, W22_DTYPE_F32};
    float *href = malloc(N * 4), *oref = malloc(N * 4);
    memcpy(href, h, N * 4);
    if (has_y) {
        w22_dit_resnorm r = {B, L, D, 1e-6f, h, href, y, has_gate ? &m : NULL, c.mode == R_GATE_ONLY ? 5 : 2,
                             NULL, NULL, NULL, NULL, 0};
        CHECK_OK(w22_dit_resnorm_cpu(&r));
        round_bf16(href, N);
    }
    if (has_out) {
        w22_dit_resnorm r = {B, L, D, 1e-6f, href, NULL, NULL, NULL, 0, oref, has_w ? w : NULL, has_b ? bias : NULL,
                             has_mod ? &m : NULL, c.mode == R_ADD_MOD || c.mode == R_ALL ? 3 : 0};
        CHECK_OK(w22_dit_resnorm_cpu(&r));
    }
    /* device */
    dbuf dh = dalloc(N, 2, c.shift), dy = dalloc(N, 2, c.shift), dho = dalloc(N, 2, c.shift),
         dout = dalloc(N, 2, c.shift), dt = dalloc(6 * (size_t)D, 4, 0), dtemb = dalloc(TN, c.temb_bf16 ? 2 : 4, 0),
         dw = dalloc(D, 4, 0), db = dalloc(D, 4, 0);
    dbuf dtemb32 = dalloc(c.mixed ? TN : 0, 4, 0); /* mixed: the same (bf16-exact) values as float32 */
    dput(&dh, h), dput(&dy, y), dput(&dt, table), dput(&dtemb, temb), dput(&dw, w), dput(&db, bias);
    if (c.mixed) dput(&dtemb32, temb);
    w22_dit_mod dm = {dt.p, dtemb.p, c.per_token, c.temb_bf16 ? W22_DTYPE_BF16 : W22_DTYPE_F32};
    w22_dit_mod dm32 = {dt.p, dtemb32.p, c.per_token, W22_DTYPE_F32};
    void *hout = !has_y ? NULL : c.in_place ? dh.p : dho.p;
    void *out = !has_out ? NULL : (c.in_place && has_y) ? dy.p : dout.p;
    w22_dit_resnorm r = {B, L, D, 1e-6f, dh.p, hout, has_y ? dy.p : NULL, has_gate ? &dm : NULL,
                         c.mode == R_GATE_ONLY ? 5 : 2, out, has_w ? dw.p : NULL, has_b ? db.p : NULL,
                         has_mod ? (c.mixed ? &dm32 : &dm) : NULL, c.mode == R_ADD_MOD || c.mode == R_ALL ? 3 : 0};
    const int vec = w22_dit_resnorm_vector(&r);
    const w22_dit_rows plan = w22_dit_rows_plan(D, vec);
    covered[0][vec][plan.per_thread > 0]++;
    w22_status s = w22_dit_resnorm_cuda(&r, NULL);
    CHECK(s == W22_OK, "%s: %s: %s", name, w22_status_string(s), w22_last_error());
    cuda_ok(cudaDeviceSynchronize(), name);
    int fails0 = t_failures;
    float *got = malloc(N * 4);
    size_t margins = 0;
    if (has_y) {
        margins += dget(c.in_place ? &dh : &dho, got);
        size_t diff = 0;
        for (size_t i = 0; i < N; i++) diff += !(got[i] == href[i]);
        CHECK(diff == 0, "%s: new h: %zu of %zu elements differ from the float32 steps rounded once to bf16", name,
              diff, N);
    }
    if (!has_y || !c.in_place) {
        margins += dget(&dh, got);
        size_t changed = 0;
        for (size_t i = 0; i < N; i++) changed += !(got[i] == h[i]);
        CHECK(changed == 0, "%s: h changed (%zu elements) though the new h goes elsewhere", name, changed);
    }
    if (has_out) {
        margins += dget((c.in_place && has_y) ? &dy : &dout, got);
        compare(name, "out", got, oref, NULL, N);
    } else {
        margins += dget(&dout, got);
        size_t written = 0;
        for (size_t i = 0; i < N; i++) written += !isnan(got[i]);
        CHECK(written == 0, "%s: out was written (%zu elements) though the call has none", name, written);
    }
    CHECK(margins == 0, "%s: %zu elements outside the views changed", name, margins);
    printf("%-80s vec %d %s %s\n", name, vec, plan.per_thread ? "regs" : "smem", t_failures == fails0 ? "ok" : "FAILED");
    dbuf *all[] = {&dh, &dy, &dho, &dout, &dt, &dtemb, &dw, &db, &dtemb32};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) dfree(all[i]);
    free(h), free(y), free(table), free(temb), free(w), free(bias), free(href), free(oref), free(got);
}

/* ---- qknorm ---- */

typedef struct {
    int B, L, heads, hd, rope, weight;
    int stride_mul; /* rows stride_mul * dim apart (3: q of a fused QKV) */
    int in_place, shift;
} qcase;

static void run_qknorm(qcase c) {
    char name[160];
    snprintf(name, sizeof name, "qknorm%s B%d L%d %dx%d%s%s%s%s", c.rope ? "+rope" : "", c.B, c.L, c.heads, c.hd,
             c.weight ? "" : " no-weight", c.stride_mul > 1 ? " strided" : "", c.in_place ? " in-place" : "",
             c.shift ? " misaligned" : "");
    if (!selected(name)) return;
    const int B = c.B, L = c.L, D = c.heads * c.hd;
    const long long S = (long long)c.stride_mul * D;
    const size_t rows = (size_t)B * L, N = (rows - 1) * S + D;
    float *x = rnd(N, -3.f, 3.f), *w = rnd(D, 0.5f, 1.5f);
    float *cs = rnd((size_t)L * c.hd, -1.f, 1.f), *sn = rnd((size_t)L * c.hd, -1.f, 1.f);
    /* reference: the norm in float32 (CPU), rounded to bf16, then RoPE in double on the rounded values */
    float *n = malloc(N * 4), *ref = malloc(N * 4), *extra = calloc(N, 4);
    memcpy(n, x, N * 4), memcpy(ref, x, N * 4);
    w22_dit_qknorm q = {B, L, c.heads, c.hd, 1e-6f, x, S, n, S, c.weight ? w : NULL, NULL, NULL};
    CHECK_OK(w22_dit_qknorm_cpu(&q));
    for (size_t r = 0; r < rows; r++) {
        const int l = (int)(r % L);
        for (int i = 0; i < D; i++) {
            size_t k = r * S + i;
            if (!c.rope) {
                ref[k] = n[k];
                continue;
            }
            if (i % 2) continue;
            int d = i % c.hd;
            double x1 = w22_bf16_to_f32(w22_f32_to_bf16(n[k])), x2 = w22_bf16_to_f32(w22_f32_to_bf16(n[k + 1]));
            double co = cs[(size_t)l * c.hd + d], si = sn[(size_t)l * c.hd + d + 1];
            ref[k] = (float)(x1 * co - x2 * si);
            ref[k + 1] = (float)(x1 * si + x2 * co);
            extra[k] = extra[k + 1] = (float)((fabs(x1) + fabs(x2)) / 128.0);
        }
    }
    dbuf dx = dalloc(N, 2, c.shift), dout = dalloc(N, 2, c.shift), dw = dalloc(D, 4, 0),
         dc = dalloc((size_t)L * c.hd, 4, 0), ds = dalloc((size_t)L * c.hd, 4, 0);
    dput(&dx, x), dput(&dw, w), dput(&dc, cs), dput(&ds, sn);
    if (c.in_place) dfree(&dout);
    void *out = c.in_place ? dx.p : dout.p;
    w22_dit_qknorm dq = {B, L, c.heads, c.hd, 1e-6f, dx.p, S, out, S, c.weight ? dw.p : NULL,
                         c.rope ? dc.p : NULL, c.rope ? ds.p : NULL};
    const int vec = w22_dit_qknorm_vector(&dq);
    const w22_dit_rows plan = w22_dit_rows_plan(D, vec);
    covered[c.rope ? 2 : 1][vec][plan.per_thread > 0]++;
    w22_status s = w22_dit_qknorm_cuda(&dq, NULL);
    CHECK(s == W22_OK, "%s: %s: %s", name, w22_status_string(s), w22_last_error());
    cuda_ok(cudaDeviceSynchronize(), name);
    int fails0 = t_failures;
    float *got = malloc(N * 4);
    size_t margins = dget(c.in_place ? &dx : &dout, got);
    /* the rows' elements compared; between rows (a strided view) out keeps NaN, or x's own values in place */
    float *g2 = malloc(rows * D * 4), *r2 = malloc(rows * D * 4), *e2 = malloc(rows * D * 4);
    size_t gap_bad = 0;
    for (size_t r = 0; r < rows; r++) {
        memcpy(g2 + r * D, got + r * S, D * 4), memcpy(r2 + r * D, ref + r * S, D * 4),
            memcpy(e2 + r * D, extra + r * S, D * 4);
        if (r + 1 < rows)
            for (long long k = r * S + D; k < (long long)(r + 1) * S; k++)
                gap_bad += c.in_place ? !(got[k] == x[k]) : !isnan(got[k]);
    }
    compare(name, "out", g2, r2, e2, rows * D);
    CHECK(gap_bad == 0, "%s: %zu elements between the rows changed", name, gap_bad);
    if (!c.in_place) {
        margins += dget(&dx, got);
        size_t changed = 0;
        for (size_t i = 0; i < N; i++) changed += !(got[i] == x[i]);
        CHECK(changed == 0, "%s: x changed (%zu elements) though out is elsewhere", name, changed);
    }
    CHECK(margins == 0, "%s: %zu elements outside the views changed", name, margins);
    printf("%-80s vec %d %s %s\n", name, vec, plan.per_thread ? "regs" : "smem", t_failures == fails0 ? "ok" : "FAILED");
    dfree(&dx), dfree(&dout), dfree(&dw), dfree(&dc), dfree(&ds);
    free(x), free(w), free(cs), free(sn), free(n), free(ref), free(extra), free(got), free(g2), free(r2), free(e2);
}

/* ---- the device calls' own refusals (the checks are shared with the CPU versions; test_dit covers them) ---- */
static void run_refusals(void) {
    if (!selected("refusals")) return;
    int fails0 = t_failures;
    w22_dit_qknorm q = {1, 1, 1, 6, 1e-6f, NULL, 6, NULL, 6, NULL, NULL, NULL};
    CHECK(w22_dit_qknorm_cuda(&q, NULL) == W22_ERR_INVALID_ARG, "NULL x accepted");
    CHECK(strstr(w22_last_error(), "w22_dit_qknorm_cuda") != NULL, "message names the call: %s", w22_last_error());
    /* RoPE on a pointer off by one element: pairs cannot be formed, refused rather than misread */
    dbuf dx = dalloc(64, 2, 1), dc = dalloc(8, 4, 0);
    w22_dit_qknorm r = {1, 1, 2, 8, 1e-6f, dx.p, 16, dx.p, 16, NULL, dc.p, dc.p};
    w22_status s = w22_dit_qknorm_cuda(&r, NULL);
    CHECK(s == W22_ERR_INVALID_ARG, "RoPE on an odd bf16 address: %s", w22_status_string(s));
    dfree(&dx), dfree(&dc);
    printf("%-80s %s\n", "refusals", t_failures == fails0 ? "ok" : "FAILED");
}

/* ---- perf ---- */
static void perf(void) {
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0), cudaEventCreate(&e1);
    const int L = 27280;
    int dims[] = {3072, 5120};
    for (int di = 0; di < 2; di++) {
        const int D = dims[di];
        const size_t N = (size_t)L * D;
        dbuf h = dalloc(N, 2, 0), y = dalloc(N, 2, 0), o = dalloc(N, 2, 0), t = dalloc(6 * (size_t)D, 4, 0),
             te = dalloc((size_t)L * 6 * D, 2, 0), w = dalloc(D, 4, 0), cs = dalloc((size_t)L * 128, 4, 0);
        cudaMemset(h.p, 0, N * 2), cudaMemset(y.p, 0, N * 2), cudaMemset(te.p, 0, (size_t)L * 6 * D * 2);
        cudaMemset(t.p, 0, 6 * (size_t)D * 4), cudaMemset(w.p, 0, D * 4), cudaMemset(cs.p, 0, (size_t)L * 128 * 4);
        w22_dit_mod m = {t.p, te.p, 1, W22_DTYPE_BF16};
        /* the device's copy rate on these buffers (a read and a write of one activation), the bar each pass is read
         * against */
        double copy_gbs;
        {
            for (int it = 0; it < 3; it++) cuda_ok(cudaMemcpyAsync(o.p, h.p, N * 2, cudaMemcpyDeviceToDevice, 0), "copy");
            cudaEventRecord(e0, 0);
            for (int it = 0; it < 20; it++) cudaMemcpyAsync(o.p, h.p, N * 2, cudaMemcpyDeviceToDevice, 0);
            cudaEventRecord(e1, 0);
            cudaEventSynchronize(e1);
            float ms;
            cudaEventElapsedTime(&ms, e0, e1);
            const double us = ms * 1e3 / 20;
            copy_gbs = 4.0 * N / (us * 1e-6) / 1e9;
            printf("perf dim %d L %d %-44s %8.1f us %7.0f GB/s\n", D, L, "copy (cudaMemcpy of h: read + write)", us,
                   copy_gbs);
        }
        struct {
            const char *name;
            w22_dit_resnorm r;
            double bytes_per_el;
        } rs[] = {
            {"norm1+mod (h, 2 temb chunks -> out)", {1, L, D, 1e-6f, h.p, NULL, NULL, NULL, 0, o.p, NULL, NULL, &m, 0}, 8},
            {"gate+norm2 (h, y, 1 chunk -> h, out)", {1, L, D, 1e-6f, h.p, h.p, y.p, &m, 2, o.p, w.p, w.p, NULL, 0}, 10},
            {"add+norm3+mod (h, y, 2 chunks -> h, out)", {1, L, D, 1e-6f, h.p, h.p, y.p, NULL, 0, o.p, NULL, NULL, &m, 3}, 12},
            {"gate (h, y, 1 chunk -> h)", {1, L, D, 1e-6f, h.p, h.p, y.p, &m, 5, NULL, NULL, NULL, NULL, 0}, 8},
        };
        for (size_t k = 0; k < sizeof rs / sizeof *rs; k++) {
            for (int it = 0; it < 3; it++) CHECK_OK(w22_dit_resnorm_cuda(&rs[k].r, NULL));
            cudaEventRecord(e0, 0);
            const int iters = 20;
            for (int it = 0; it < iters; it++) w22_dit_resnorm_cuda(&rs[k].r, NULL);
            cudaEventRecord(e1, 0);
            cudaEventSynchronize(e1);
            float ms;
            cudaEventElapsedTime(&ms, e0, e1);
            double us = ms * 1e3 / iters;
            const double gbs = rs[k].bytes_per_el * N / (us * 1e-6) / 1e9;
            printf("perf dim %d L %d %-44s %8.1f us %7.0f GB/s %4.0f%% of copy\n", D, L, rs[k].name, us, gbs,
                   100 * gbs / copy_gbs);
        }
        w22_dit_qknorm q = {1, L, D / 128, 128, 1e-6f, h.p, D, h.p, D, w.p, cs.p, cs.p};
        for (int it = 0; it < 3; it++) CHECK_OK(w22_dit_qknorm_cuda(&q, NULL));
        cudaEventRecord(e0, 0);
        for (int it = 0; it < 20; it++) w22_dit_qknorm_cuda(&q, NULL);
        cudaEventRecord(e1, 0);
        cudaEventSynchronize(e1);
        float ms;
        cudaEventElapsedTime(&ms, e0, e1);
        double us = ms * 1e3 / 20;
        const double gbs = (4.0 * N + 8.0 * L * 128) / (us * 1e-6) / 1e9;
        printf("perf dim %d L %d %-44s %8.1f us %7.0f GB/s %4.0f%% of copy\n", D, L, "qknorm+rope in place (x -> x)", us,
               gbs, 100 * gbs / copy_gbs);
        dbuf *all[] = {&h, &y, &o, &t, &te, &w, &cs};
        for (size_t i = 0; i < sizeof all / sizeof *all; i++) dfree(all[i]);
    }
    cuda_ok(cudaDeviceSynchronize(), "perf");
    cudaEventDestroy(e0), cudaEventDestroy(e1);
}

int main(int argc, char **argv) {
    int do_perf = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-o") && i + 1 < argc) filter = argv[++i];
        else if (!strcmp(argv[i], "--perf")) do_perf = 1;
        else {
            fprintf(stderr, "usage: cuda_dit [-o NAME] [--perf]\n");
            return 2;
        }
    }
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n < 1) {
        fprintf(stderr, "cuda_dit: no GPU\n");
        return 2;
    }
    if (do_perf) {
        perf();
        return t_finish("cuda_dit --perf");
    }
    /* resnorm: every mode at a small even dim, both temb layouts and dtypes; the real dims; hostile shapes */
    for (int mode = 0; mode < R_MODES; mode++)
        for (int pt = 0; pt < 2; pt++)
            for (int tb = 0; tb < 2; tb++) run_resnorm((rcase){2, 37, 96, mode, pt, tb, 0, 0, 0});
    for (int mode = 0; mode < R_MODES; mode++) {
        run_resnorm((rcase){1, 1, 3072, mode, 1, 1, 0, 0, 0});            /* L = 1 */
        run_resnorm((rcase){2, 19, 3072, mode, 1, 1, 1, 0, 0});           /* TI2V-5B: per token, in place */
        run_resnorm((rcase){3, 7, 5120, mode, 0, 1, 1, 0, 0});            /* A14B: per batch */
        run_resnorm((rcase){2, 5, 50, mode, 1, 0, 0, 0, 0});              /* dim % 8 != 0: pairs */
        run_resnorm((rcase){1, 3, 33, mode, 0, 1, 0, 0, 0});              /* odd dim: one element at a time */
        run_resnorm((rcase){2, 3, 64, mode, 1, 1, mode % 2, 1 + mode % 2, 0}); /* 2 or 4 bytes off: scalar, pairs */
    }
    run_resnorm((rcase){1, 2, 32768, R_ADD_MOD, 1, 1, 0, 0, 0});          /* 128 KB of shared memory */
    run_resnorm((rcase){1, 3, 1, R_GATE_AFFINE, 1, 1, 0, 0, 0});          /* dim 1 */
    /* both sides of the register kernel's reach (w22_dit_rows_plan; test_dit pins it) at each width, a row a block
     * of 1024 threads on the inside; idle threads in a row (dim 1000: 125 chunks on 128 threads, 2 rows a block);
     * the real dim off by an element (scalar) and by two (pairs); temb of both dtypes in one call */
    const int modes4[] = {R_NORM1, R_GATE_AFFINE, R_ADD_MOD, R_ALL};
    for (int k = 0; k < 4; k++) {
        const int m = modes4[k], ip = k % 2;
        run_resnorm((rcase){2, 3, 8192, m, 1, 1, ip, 0, 0});              /* vec 8, registers, 1024 threads */
        run_resnorm((rcase){1, 3, 8200, m, 1, 1, ip, 0, 0});              /* vec 8, shared memory */
        run_resnorm((rcase){1, 3, 8190, m, 0, 1, ip, 0, 0});              /* pairs, registers, 1024 threads */
        run_resnorm((rcase){1, 3, 8194, m, 1, 0, ip, 0, 0});              /* pairs, shared memory */
        run_resnorm((rcase){2, 3, 4095, m, 1, 1, ip, 0, 0});              /* single, registers, 1024 threads */
        run_resnorm((rcase){1, 3, 4097, m, 0, 1, ip, 0, 0});              /* single, shared memory */
        run_resnorm((rcase){2, 5, 1000, m, 1, 1, ip, 0, 0});
        run_resnorm((rcase){1, 5, 3072, m, 1, 1, !ip, 1, 0});             /* 2 bytes off at 3072: single, registers */
        run_resnorm((rcase){2, 3, 3072, m, 0, 1, ip, 2, 0});              /* 4 bytes off at 3072: pairs, registers */
    }
    run_resnorm((rcase){2, 7, 3072, R_ALL, 1, 1, 1, 0, 1});            /* gate bf16, modulation float32 */
    run_resnorm((rcase){2, 37, 96, R_ALL, 0, 1, 0, 0, 1});
    /* qknorm */
    run_qknorm((qcase){1, 1, 24, 128, 1, 1, 1, 0, 0});
    run_qknorm((qcase){2, 37, 24, 128, 1, 1, 1, 0, 0});
    run_qknorm((qcase){2, 37, 24, 128, 1, 1, 1, 1, 0});
    run_qknorm((qcase){1, 11, 40, 128, 1, 1, 3, 1, 0});                /* q of a fused QKV, in place */
    run_qknorm((qcase){2, 5, 40, 128, 1, 1, 3, 0, 0});
    run_qknorm((qcase){2, 13, 24, 128, 0, 1, 1, 0, 0});                /* cross-attention: no RoPE */
    run_qknorm((qcase){1, 9, 3, 10, 1, 1, 1, 0, 0});                   /* head_dim % 8 != 0: pairs */
    run_qknorm((qcase){1, 9, 3, 10, 1, 0, 1, 1, 0});
    run_qknorm((qcase){1, 4, 1, 33, 0, 1, 1, 0, 1});                   /* odd dim, misaligned: scalar */
    run_qknorm((qcase){3, 3, 2, 16, 1, 1, 2, 0, 2});                   /* 4 bytes off: pairs */
    run_qknorm((qcase){2, 5, 5, 6, 0, 1, 1, 1, 0});                    /* dim 30, no RoPE: pairs */
    /* both sides of the register kernel's reach, as resnorm's */
    run_qknorm((qcase){2, 3, 64, 128, 1, 1, 1, 0, 0});                 /* 8192, vec 8: registers, 1024 threads */
    run_qknorm((qcase){1, 3, 72, 128, 1, 1, 3, 1, 0});                 /* 9216: shared memory, strided, in place */
    run_qknorm((qcase){1, 3, 819, 10, 1, 1, 1, 0, 0});                 /* 8190, pairs: registers, 1024 threads */
    run_qknorm((qcase){2, 3, 820, 10, 1, 1, 1, 1, 0});                 /* 8200, pairs: shared memory */
    run_qknorm((qcase){1, 3, 1, 8200, 0, 1, 1, 0, 2});                 /* no RoPE, 4 bytes off: pairs, shared memory */
    run_qknorm((qcase){1, 5, 1, 4095, 0, 1, 1, 0, 1});                 /* single: registers, 1024 threads */
    run_qknorm((qcase){2, 3, 1, 4097, 0, 0, 1, 1, 1});                 /* single: shared memory */
    run_qknorm((qcase){2, 5, 1, 9216, 0, 1, 1, 0, 0});                 /* vec 8 no RoPE: shared memory */
    run_qknorm((qcase){3, 5, 8, 125, 0, 1, 1, 0, 0});                  /* 1000 (odd head_dim): idle threads */
    run_qknorm((qcase){2, 7, 24, 128, 1, 1, 3, 0, 2});                 /* 3072 4 bytes off, RoPE: pairs, registers */
    run_refusals();
    if (!filter) {
        const char *kn[] = {"resnorm", "qknorm", "qknorm+rope"};
        for (int k = 0; k < 3; k++)
            for (int v = 1; v <= 8; v *= (v == 1 ? 2 : 4)) {
                if (k == 2 && v == 1) continue; /* RoPE needs pairs */
                for (int path = 0; path < 2; path++)
                    CHECK(covered[k][v][path] > 0, "no %s case ran with vector width %d on the %s kernel", kn[k], v,
                          path ? "register" : "shared-memory");
            }
    }
    return t_finish("cuda_dit");
}
