/* The DiT passes' CPU versions (src/dit/dit.c): every argument check (the status and a message that names the
 * field), then the float32 results against a straightforward double-precision reimplementation of diffusers'
 * WanTransformerBlock steps written here, at L = 1, odd L, B > 1, odd dims, dim 1, both temb layouts, in place and
 * strided. Outputs are NaN before each call (an element left unwritten fails); inputs that must not change are
 * compared afterwards.
 *
 * Tolerance: the CPU versions compute in float32 (statistics in double); against double each output carries a few
 * float32 roundings of its terms: |err| <= 1e-5 (|ref| + 1) over the magnitudes here (|h| <= 5, |mod| <= 1.5,
 * outputs <= ~10), with float32's 6e-8 per rounding that is 100x margin, and a wrong index or a missing term moves
 * results by 1e-2 or more. The device entry points share the checks: their refusals are checked here too (no
 * launch happens for a refused call). */
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "common.h"
#include "dit/dit.h"
#include "testutil.h"
#include "wan22vae.h"

static uint64_t seed = 7;

static float *rnd(size_t n, float lo, float hi) {
    float *x = malloc(n * sizeof(float));
    t_fill_uniform(x, n, seed++, lo, hi);
    return x;
}

static float *nans(size_t n) {
    float *x = malloc(n * sizeof(float));
    t_fill_nan(x, n);
    return x;
}

static void expect(w22_status got, w22_status want, const char *word, const char *what) {
    CHECK(got == want, "%s: %s, expected %s (%s)", what, w22_status_string(got), w22_status_string(want),
          w22_last_error());
    if (got == want && word)
        CHECK(strstr(w22_last_error(), word) != NULL, "%s: message \"%s\" does not say \"%s\"", what, w22_last_error(),
              word);
}

/* ---- argument checks ---- */
static void test_checks(void) {
    enum { B = 2, L = 3, D = 8 };
    float *h = rnd(B * L * D, -1, 1), *y = rnd(B * L * D, -1, 1), *ho = nans(B * L * D), *out = nans(B * L * D);
    float *table = rnd(6 * D, -1, 1), *temb = rnd(B * L * 6 * D, -1, 1), *w = rnd(D, 0, 1);
    w22_dit_mod m = {table, temb, 1, W22_DTYPE_F32};
    const w22_dit_resnorm ok = {B, L, D, 1e-6f, h, ho, y, &m, 2, out, w, w, NULL, 0};
    w22_dit_resnorm a;
    CHECK_OK(w22_dit_resnorm_cpu(&ok));
    expect(w22_dit_resnorm_cpu(NULL), W22_ERR_INVALID_ARG, "NULL", "NULL args");
    expect(w22_dit_resnorm_cuda(NULL, NULL), W22_ERR_INVALID_ARG, "w22_dit_resnorm_cuda", "cuda NULL args");
#define BAD(field_assign, status, word)                                 \
    do {                                                                \
        a = ok;                                                         \
        field_assign;                                                   \
        expect(w22_dit_resnorm_cpu(&a), status, word, #field_assign);   \
    } while (0)
    BAD(a.batch = 0, W22_ERR_BAD_SHAPE, "batch 0");
    BAD(a.len = -1, W22_ERR_BAD_SHAPE, "len -1");
    BAD(a.dim = 0, W22_ERR_BAD_SHAPE, "dim 0");
    BAD(a.dim = 32769, W22_ERR_BAD_SHAPE, "32768");
    BAD((a.batch = INT_MAX, a.len = 2), W22_ERR_BAD_SHAPE, "tokens");
    BAD(a.eps = NAN, W22_ERR_INVALID_ARG, "eps");
    BAD(a.eps = -1e-6f, W22_ERR_INVALID_ARG, "eps");
    BAD(a.eps = INFINITY, W22_ERR_INVALID_ARG, "eps");
    BAD(a.h = NULL, W22_ERR_INVALID_ARG, "h is NULL");
    BAD(a.h_out = NULL, W22_ERR_INVALID_ARG, "h_out is NULL");
    BAD((a.y = NULL, a.gate = NULL), W22_ERR_INVALID_ARG, "h_out is given without y");
    BAD((a.y = NULL, a.h_out = NULL), W22_ERR_INVALID_ARG, "gate is given without y");
    BAD((a.y = NULL, a.h_out = NULL, a.gate = NULL, a.out = NULL, a.norm_weight = a.norm_bias = NULL),
        W22_ERR_INVALID_ARG, "nothing");
    BAD(a.gate_chunk = 6, W22_ERR_INVALID_ARG, "gate_chunk 6");
    BAD(a.gate_chunk = -1, W22_ERR_INVALID_ARG, "gate_chunk -1");
    BAD((a.mod = &m, a.shift_chunk = 5), W22_ERR_INVALID_ARG, "shift_chunk 5");
    BAD(a.out = NULL, W22_ERR_INVALID_ARG, "out is NULL");
    BAD(a.norm_weight = NULL, W22_ERR_INVALID_ARG, "norm_bias without norm_weight");
    BAD(a.h_out = h + 1, W22_ERR_INVALID_ARG, "h_out overlaps h");
    BAD(a.out = h, W22_ERR_INVALID_ARG, "out overlaps h");
    BAD(a.out = ho + D, W22_ERR_INVALID_ARG, "out overlaps h or h_out");
    BAD(a.out = y + 1, W22_ERR_INVALID_ARG, "out overlaps y");
    BAD(a.y = ho + 3, W22_ERR_INVALID_ARG, "y overlaps h_out");
    {
        w22_dit_mod bad = m;
        bad.table = NULL;
        BAD(a.gate = &bad, W22_ERR_INVALID_ARG, "gate: table and temb");
        bad = m, bad.per_token = 2;
        BAD(a.gate = &bad, W22_ERR_INVALID_ARG, "per_token is 2");
        bad = m, bad.temb_dtype = W22_DTYPE_BF16;
        BAD(a.gate = &bad, W22_ERR_BAD_DTYPE, "host memory is float32");
        BAD((a.mod = &bad, a.gate = &m), W22_ERR_BAD_DTYPE, "mod: temb_dtype BF16");
        bad = m, bad.temb_dtype = (w22_dtype)7;
        a = ok, a.gate = &bad;
        expect(w22_dit_resnorm_cuda(&a, NULL), W22_ERR_BAD_DTYPE, "W22_DTYPE_F32 or W22_DTYPE_BF16", "cuda dtype 7");
    }
    /* the allowed aliases: h_out == h, out == y */
    a = ok, a.h = ho, a.h_out = ho, a.out = y;
    memcpy(ho, h, sizeof(float) * B * L * D);
    CHECK_OK(w22_dit_resnorm_cpu(&a));
#undef BAD
    /* qknorm */
    float *x = rnd(B * L * 3 * D, -1, 1), *qo = nans(B * L * 3 * D), *cs = rnd(L * 4, -1, 1);
    const w22_dit_qknorm qok = {B, L, 2, 4, 1e-6f, x, 3 * D, qo, D, w, cs, cs};
    w22_dit_qknorm q;
    CHECK_OK(w22_dit_qknorm_cpu(&qok));
    expect(w22_dit_qknorm_cpu(NULL), W22_ERR_INVALID_ARG, "NULL", "qknorm NULL");
#define QBAD(field_assign, status, word)                              \
    do {                                                              \
        q = qok;                                                      \
        field_assign;                                                 \
        expect(w22_dit_qknorm_cpu(&q), status, word, #field_assign);  \
        expect(w22_dit_qknorm_cuda(&q, NULL), status, word, "cuda: " #field_assign); \
    } while (0)
    QBAD(q.heads = 0, W22_ERR_BAD_SHAPE, "heads 0");
    QBAD(q.head_dim = -2, W22_ERR_BAD_SHAPE, "head_dim -2");
    QBAD((q.heads = 1 << 16, q.head_dim = 1 << 16), W22_ERR_BAD_SHAPE, "dim");
    QBAD(q.x = NULL, W22_ERR_INVALID_ARG, "x (");
    QBAD(q.out = NULL, W22_ERR_INVALID_ARG, "out (");
    QBAD(q.sin = NULL, W22_ERR_INVALID_ARG, "both NULL");
    QBAD((q.head_dim = 3, q.heads = 2, q.x_stride = 6, q.out_stride = 6), W22_ERR_BAD_SHAPE, "odd");
    QBAD(q.x_stride = 7, W22_ERR_BAD_SHAPE, "x_stride 7");
    QBAD(q.out_stride = 1ll << 41, W22_ERR_BAD_SHAPE, "2^40");
    QBAD((q.batch = 1 << 29, q.len = 2, q.x_stride = q.out_stride = 1ll << 39), W22_ERR_BAD_SHAPE, "2^60");
    QBAD(q.out = x, W22_ERR_INVALID_ARG, "in place");
    QBAD(q.out = x + 2, W22_ERR_INVALID_ARG, "overlaps");
    QBAD(q.eps = NAN, W22_ERR_INVALID_ARG, "eps");
#undef QBAD
    free(h), free(y), free(ho), free(out), free(table), free(temb), free(w), free(x), free(qo), free(cs);
}

/* ---- the CUDA kernels' vector width: a pure function of the arguments (dit.h), pinned here ---- */
static void test_vector_width(void) {
    static _Alignas(16) char buf[1 << 16];
    char *p = buf;
    w22_dit_mod m = {(const float *)p, p, 1, W22_DTYPE_BF16};
    w22_dit_resnorm r = {1, 4, 3072, 1e-6f, p, p, p, &m, 2, p, (const float *)p, (const float *)p, &m, 0};
    CHECK(w22_dit_resnorm_vector(&r) == 8, "aligned, dim 3072: %d", w22_dit_resnorm_vector(&r));
    r.dim = 50;
    CHECK(w22_dit_resnorm_vector(&r) == 2, "dim 50: %d", w22_dit_resnorm_vector(&r));
    r.dim = 33;
    CHECK(w22_dit_resnorm_vector(&r) == 1, "dim 33: %d", w22_dit_resnorm_vector(&r));
    r.dim = 3072, r.y = p + 2; /* one bf16 element off: neither 16- nor 4-byte aligned */
    CHECK(w22_dit_resnorm_vector(&r) == 1, "y 2 bytes off: %d", w22_dit_resnorm_vector(&r));
    r.y = p + 4;
    CHECK(w22_dit_resnorm_vector(&r) == 2, "y 4 bytes off: %d", w22_dit_resnorm_vector(&r));
    r.y = p, m.temb_dtype = W22_DTYPE_F32, m.temb = p + 8; /* float32 temb 8 bytes off: float2, not float4 */
    CHECK(w22_dit_resnorm_vector(&r) == 2, "f32 temb 8 bytes off: %d", w22_dit_resnorm_vector(&r));
    w22_dit_qknorm q = {1, 4, 24, 128, 1e-6f, p, 3 * 3072, p, 3 * 3072, (const float *)p, (const float *)p,
                        (const float *)p};
    CHECK(w22_dit_qknorm_vector(&q) == 8, "q of a fused QKV: %d", w22_dit_qknorm_vector(&q));
    q.heads = 3, q.head_dim = 10, q.x_stride = q.out_stride = 30;
    CHECK(w22_dit_qknorm_vector(&q) == 2, "head_dim 10 with RoPE: %d", w22_dit_qknorm_vector(&q));
    q.x = p + 2;
    CHECK(w22_dit_qknorm_vector(&q) == 0, "RoPE on an odd address: %d", w22_dit_qknorm_vector(&q));
    q.cos = q.sin = NULL;
    CHECK(w22_dit_qknorm_vector(&q) == 1, "no RoPE on an odd address: %d", w22_dit_qknorm_vector(&q));
}

/* ---- the CUDA kernels' row layout: a pure function of dim and the width (dit.h), pinned here; cuda_dit runs both
 * sides of each boundary ---- */
static void test_rows_plan(void) {
    struct {
        int dim, vec, per_thread, row_threads, rows_per_block;
    } c[] = {
        {3072, 8, 1, 384, 1},   /* TI2V-5B: a 16-byte chunk a thread, a row a block */
        {5120, 8, 1, 640, 1},   /* A14B */
        {1536, 8, 1, 192, 1},   /* Wan2.1 1.3B */
        {96, 8, 1, 32, 8},      /* small rows: 8 a block of 256 threads */
        {1000, 8, 1, 128, 2},   /* 125 chunks: 3 idle threads a row */
        {8192, 8, 1, 1024, 1},  /* the register path's last dim at 8 */
        {8200, 8, 0, 1024, 1},  /* past it: the shared-memory kernel */
        {32768, 8, 0, 1024, 1},
        {50, 2, 4, 32, 8},      /* pairs: 4 a thread */
        {8190, 2, 4, 1024, 1},  /* 4095 pairs: the last at 2 */
        {8194, 2, 0, 1024, 1},
        {33, 1, 4, 32, 8},      /* single elements: 4 a thread */
        {4095, 1, 4, 1024, 1},
        {4097, 1, 0, 1024, 1},
        {1, 1, 4, 32, 8},
    };
    for (size_t k = 0; k < sizeof c / sizeof *c; k++) {
        w22_dit_rows p = w22_dit_rows_plan(c[k].dim, c[k].vec);
        CHECK(p.per_thread == c[k].per_thread && p.row_threads == c[k].row_threads &&
                  p.rows_per_block == c[k].rows_per_block,
              "rows plan dim %d vec %d: %d a thread, %d threads a row, %d rows a block; expected %d, %d, %d", c[k].dim,
              c[k].vec, p.per_thread, p.row_threads, p.rows_per_block, c[k].per_thread, c[k].row_threads,
              c[k].rows_per_block);
    }
    /* every dim the API takes, at each width: the layout covers the row, within 1024 threads */
    for (int vec = 1; vec <= 8; vec = vec == 1 ? 2 : vec == 2 ? 8 : 9) {
        for (int dim = vec; dim <= W22_DIT_MAX_DIM; dim += vec) {
            w22_dit_rows p = w22_dit_rows_plan(dim, vec);
            const int nch = dim / vec;
            int ok = p.row_threads % 32 == 0 && p.row_threads >= 32 && p.row_threads <= 1024 &&
                     p.rows_per_block >= 1 && p.row_threads * p.rows_per_block <= 1024;
            if (p.per_thread) /* covers the row, and no warp of the row idle */
                ok = ok && p.per_thread * p.row_threads >= nch &&
                     p.row_threads - 32 < (nch + p.per_thread - 1) / p.per_thread;
            else
                ok = ok && p.row_threads == 1024 && nch > 1024;
            if (!ok) {
                CHECK(0, "rows plan dim %d vec %d: %d a thread, %d threads a row, %d rows a block", dim, vec,
                      p.per_thread, p.row_threads, p.rows_per_block);
                break;
            }
        }
    }
}

/* ---- numerics against double ---- */

static double mod_d(const float *table, const float *temb, int per_token, int L, int D, int b, int l, int c, int i) {
    size_t row = per_token ? ((size_t)b * L + l) * 6 + c : (size_t)b * 6 + c;
    return (double)table[(size_t)c * D + i] + temb[row * D + i];
}

typedef struct {
    int B, L, D, per_token, y, gate, out, w, bias, mod, in_place;
} rcase;

static void run_resnorm(rcase c) {
    const int B = c.B, L = c.L, D = c.D;
    const size_t N = (size_t)B * L * D, TN = (c.per_token ? (size_t)B * L : (size_t)B) * 6 * D;
    float *h = rnd(N, -3, 5), *y = rnd(N, -2, 2), *table = rnd(6 * (size_t)D, -0.5f, 0.5f);
    float *temb = rnd(TN, -0.5f, 0.5f), *w = rnd(D, 0.5f, 1.5f), *bias = rnd(D, -0.5f, 0.5f);
    float *hcopy = malloc(N * 4), *ho = nans(N), *out = nans(N), *ycopy = malloc(N * 4);
    memcpy(hcopy, h, N * 4), memcpy(ycopy, y, N * 4);
    w22_dit_mod m = {table, temb, c.per_token, W22_DTYPE_F32};
    if (c.in_place && c.y) memcpy(ho, h, N * 4);
    float *hin = (c.in_place && c.y) ? ho : h;
    float *o = (c.in_place && c.y && c.out) ? y : out;
    w22_dit_resnorm a = {B, L, D, 1e-6f, hin, c.y ? ho : NULL, c.y ? y : NULL, c.gate ? &m : NULL, 5,
                         c.out ? o : NULL, c.w ? w : NULL, c.bias ? bias : NULL, c.mod ? &m : NULL, 3};
    CHECK_OK(w22_dit_resnorm_cpu(&a));
    char name[128];
    snprintf(name, sizeof name, "resnorm B%d L%d D%d pt%d y%d gate%d out%d w%d b%d mod%d inplace%d", B, L, D,
             c.per_token, c.y, c.gate, c.out, c.w, c.bias, c.mod, c.in_place);
    size_t bad_h = 0, bad_o = 0, nonfinite = 0;
    double worst = 0;
    double *hv = malloc(D * sizeof(double));
    for (int b = 0; b < B; b++)
        for (int l = 0; l < L; l++) {
            size_t off = ((size_t)b * L + l) * D;
            for (int i = 0; i < D; i++) {
                double v = hcopy[off + i];
                if (c.y) v += (double)ycopy[off + i] * (c.gate ? mod_d(table, temb, c.per_token, L, D, b, l, 5, i) : 1.0);
                hv[i] = v;
                if (c.y) {
                    double e = fabs(ho[off + i] - v);
                    if (!(e <= 1e-5 * (fabs(v) + 1))) bad_h++;
                }
            }
            if (!c.out) continue;
            double mean = 0, var = 0;
            for (int i = 0; i < D; i++) mean += hv[i];
            mean /= D;
            for (int i = 0; i < D; i++) var += (hv[i] - mean) * (hv[i] - mean);
            var /= D;
            for (int i = 0; i < D; i++) {
                double n = (hv[i] - mean) / sqrt(var + 1e-6);
                if (c.w) n = n * w[i] + (c.bias ? bias[i] : 0.0);
                if (c.mod)
                    n = n * (1 + mod_d(table, temb, c.per_token, L, D, b, l, 4, i)) +
                        mod_d(table, temb, c.per_token, L, D, b, l, 3, i);
                float g = o[off + i];
                if (!isfinite(g)) nonfinite++;
                double e = fabs(g - n);
                if (e / (fabs(n) + 1) > worst) worst = e / (fabs(n) + 1);
                if (!(e <= 1e-5 * (fabs(n) + 1))) bad_o++;
            }
        }
    CHECK(bad_h == 0, "%s: %zu new-h elements off", name, bad_h);
    CHECK(bad_o == 0 && nonfinite == 0, "%s: %zu outputs off (%zu not finite), worst %.3g", name, bad_o, nonfinite,
          worst);
    if (!(c.in_place && c.y)) {
        CHECK(!memcmp(h, hcopy, N * 4), "%s: h changed", name);
    }
    if (!c.y) {
        size_t w_ = 0;
        for (size_t i = 0; i < N; i++) w_ += !isnan(ho[i]);
        CHECK(w_ == 0, "%s: h_out memory written without y", name);
    }
    if (!c.out) {
        size_t w_ = 0;
        for (size_t i = 0; i < N; i++) w_ += !isnan(out[i]);
        CHECK(w_ == 0, "%s: out written without a norm", name);
    }
    if (!(c.in_place && c.y && c.out)) CHECK(!memcmp(y, ycopy, N * 4), "%s: y changed", name);
    free(h), free(y), free(table), free(temb), free(w), free(bias), free(hcopy), free(ho), free(out), free(ycopy),
        free(hv);
}

static void run_qknorm(int B, int L, int heads, int hd, int rope, int weight, int stride_mul, int in_place) {
    const int D = heads * hd;
    const long long S = (long long)stride_mul * D;
    const size_t rows = (size_t)B * L, N = (rows - 1) * S + D;
    float *x = rnd(N, -3, 3), *xc = malloc(N * 4), *w = rnd(D, 0.5f, 1.5f), *cs = rnd((size_t)L * hd, -1, 1),
          *sn = rnd((size_t)L * hd, -1, 1), *out = nans(N);
    memcpy(xc, x, N * 4);
    float *o = in_place ? x : out;
    w22_dit_qknorm q = {B, L, heads, hd, 1e-6f, x, S, o, S, weight ? w : NULL, rope ? cs : NULL, rope ? sn : NULL};
    CHECK_OK(w22_dit_qknorm_cpu(&q));
    size_t bad = 0, gaps = 0;
    double *n = malloc(D * sizeof(double));
    for (size_t r = 0; r < rows; r++) {
        const float *xr = xc + r * S;
        double ss = 0;
        for (int i = 0; i < D; i++) ss += (double)xr[i] * xr[i];
        double rs = 1 / sqrt(ss / D + 1e-6);
        for (int i = 0; i < D; i++) n[i] = xr[i] * rs * (weight ? w[i] : 1.0);
        int l = (int)(r % L);
        for (int i = 0; i < D; i++) {
            double ref = n[i];
            if (rope) {
                int d = i % hd, p = i - i % 2, dp = d - d % 2;
                double x1 = n[p], x2 = n[p + 1], co = cs[(size_t)l * hd + dp], si = sn[(size_t)l * hd + dp + 1];
                ref = i % 2 ? x1 * si + x2 * co : x1 * co - x2 * si;
            }
            double e = fabs(o[r * S + i] - ref);
            if (!(e <= 1e-5 * (fabs(ref) + 1))) bad++;
        }
        if (r + 1 < rows)
            for (long long k = r * S + D; k < (long long)(r + 1) * S; k++)
                gaps += in_place ? !(o[k] == xc[k]) : !isnan(o[k]);
    }
    CHECK(bad == 0, "qknorm B%d L%d %dx%d rope%d w%d stride x%d inplace%d: %zu elements off", B, L, heads, hd, rope,
          weight, stride_mul, in_place, bad);
    CHECK(gaps == 0, "qknorm: %zu elements between rows changed", gaps);
    if (!in_place) CHECK(!memcmp(x, xc, N * 4), "qknorm: x changed");
    free(x), free(xc), free(w), free(cs), free(sn), free(out), free(n);
}

int main(void) {
    test_checks();
    test_vector_width();
    test_rows_plan();
    int shapes[][3] = {{1, 1, 64}, {2, 7, 48}, {3, 5, 33}, {1, 9, 1}, {2, 1, 96}};
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
        for (int pt = 0; pt < 2; pt++) {
            int B = shapes[s][0], L = shapes[s][1], D = shapes[s][2];
            run_resnorm((rcase){B, L, D, pt, 0, 0, 1, 0, 0, 1, 0});  /* norm1 + mod */
            run_resnorm((rcase){B, L, D, pt, 1, 1, 1, 1, 1, 0, 0});  /* gate + norm2 */
            run_resnorm((rcase){B, L, D, pt, 1, 1, 1, 1, 1, 0, 1});  /* the same in place (out == y) */
            run_resnorm((rcase){B, L, D, pt, 1, 0, 1, 0, 0, 1, 1});  /* add + norm3 + mod, in place */
            run_resnorm((rcase){B, L, D, pt, 1, 1, 0, 0, 0, 0, 0});  /* gate only */
            run_resnorm((rcase){B, L, D, pt, 0, 0, 1, 1, 0, 1, 0});  /* weight (no bias) + mod */
        }
    run_qknorm(1, 1, 4, 8, 1, 1, 1, 0);
    run_qknorm(2, 7, 3, 10, 1, 1, 1, 0);
    run_qknorm(2, 5, 2, 16, 1, 1, 3, 1);
    run_qknorm(3, 3, 2, 16, 1, 0, 2, 0);
    run_qknorm(1, 4, 1, 33, 0, 1, 1, 0);
    run_qknorm(2, 3, 5, 7, 0, 1, 2, 1);
    return t_finish("test_dit");
}
