/* The CPU backend's conv with its causal history read in place (w22_conv_args.hist, what the plan does with its
 * caches) against the same conv over one contiguous window: random inputs and weights, the window's own first two
 * frames poisoned in the hist call, outputs poisoned before each call. Same arithmetic in the same order, so the
 * results must be bitwise equal. Also: the misuses the op must refuse. */
#include <stdlib.h>
#include <string.h>
#include "backend.h"
#include "testutil.h"

static w22_backend *cpu;
static uint64_t seed = 100;

static float *fresh_buf(size_t n, int poison) {
    float *p = malloc(n * sizeof(float) + 4);
    if (poison) t_fill_nan(p, n);
    else t_fill_uniform(p, n, seed++, -1, 1);
    return p;
}

/* f frames of h x w x c in a buffer with a one-pixel border (zeroed), channels-last, optionally wider rows
 * (pixel stride c + pad_c: a channel slice of a wider tensor, which takes the CPU conv's per-row path). */
static w22_view view_in(float *buf, int f, int h, int w, int c, int pad_c) {
    const long sw = c + pad_c, sh = (w + 2) * sw, sf = (h + 2) * sh;
    w22_view v = {buf + sh + sw, f, h, w, c, sf, sh, sw, 4};
    for (int ff = 0; ff < f; ff++)
        for (int y = -1; y <= h; y++)
            for (int x = -1; x <= w; x++)
                if (y < 0 || y >= h || x < 0 || x >= w) memset(w22_view_at(v, ff, y, x, 0), 0, 4 * sw);
    return v;
}

static void one(const char *name, int F, int h, int w, int cin, int cout, int ks, int time_split, int residual,
                int sc_cin, int pad_c) {
    const int oc = time_split ? cout / 2 : cout, of = time_split ? 2 * F : F;
    const long fin = (long)(h + 2) * (w + 2) * (cin + pad_c);
    float *in = fresh_buf(fin * (F + 2), 0), *in2 = malloc(fin * (F + 2) * sizeof(float));
    w22_view win = view_in(in, F + 2, h, w, cin, pad_c);
    memcpy(in2, in, fin * (F + 2) * sizeof(float));
    float *h0 = malloc(fin * sizeof(float)), *h1 = malloc(fin * sizeof(float));
    memcpy(h0, in, fin * sizeof(float));
    memcpy(h1, in + fin, fin * sizeof(float));
    t_fill_nan(in2, 2 * fin); /* the hist call must not read the window's own history frames */
    w22_view win2 = view_in(in2, F + 2, h, w, cin, pad_c);
    t_fill_nan(in2, 2 * fin); /* view_in zeroed the borders of frames 0-1 again: poison them once more */
    w22_view vh0 = view_in(h0, 1, h, w, cin, pad_c), vh1 = view_in(h1, 1, h, w, cin, pad_c);

    const size_t nout = (size_t)of * h * w * oc;
    float *o1 = fresh_buf(nout, 1), *o2 = fresh_buf(nout, 1), *res = fresh_buf(nout, 0);
    w22_view vo1 = {o1, of, h, w, oc, (long)h * w * oc, (long)w * oc, oc, 4}, vo2 = vo1, vr = vo1;
    vo2.ptr = o2;
    vr.ptr = res;
    float *sc = sc_cin ? fresh_buf((size_t)F * h * w * sc_cin, 0) : NULL;
    w22_view vsc = {sc, F, h, w, sc_cin, (long)h * w * sc_cin, (long)w * sc_cin, sc_cin, 4};

    const int64_t ws[5] = {cout, cin, 3, ks, ks}, bs[1] = {cout}, scs[5] = {cout, sc_cin, 1, 1, 1};
    const size_t nw = (size_t)cout * cin * 3 * ks * ks;
    float *wd = fresh_buf(nw, 0), *bd = fresh_buf(cout, 0), *scw = sc_cin ? fresh_buf((size_t)cout * sc_cin, 0) : NULL;
    w22_bweight *W = NULL, *B = NULL, *SW = NULL;
    CHECK_OK(cpu->ops->weight_upload(cpu, W22_WK_CONV, wd, ws, 5, &W));
    CHECK_OK(cpu->ops->weight_upload(cpu, W22_WK_VECTOR, bd, bs, 1, &B));
    if (sc_cin) CHECK_OK(cpu->ops->weight_upload(cpu, W22_WK_CONV, scw, scs, 5, &SW));

    w22_conv_args a = {.in = win, .out = vo1, .weight = W, .bias = B, .kt = 3, .ks = ks, .time_split = time_split,
                       .residual = residual ? &vr : NULL, .sc_in = sc_cin ? &vsc : NULL, .sc_weight = SW};
    CHECK_OK(cpu->ops->conv(cpu, &a));
    w22_conv_args b = a;
    b.in = w22_view_frames(win2, 2, F);
    b.out = vo2;
    b.hist[0] = vh0;
    b.hist[1] = vh1;
    CHECK_OK(cpu->ops->conv(cpu, &b));
    t_diff d = t_compare(o2, o1, nout);
    printf("%-34s max|d| %.3g, %zu not finite\n", name, d.max_abs, d.nonfinite);
    CHECK(d.nonfinite == 0 && memcmp(o1, o2, nout * 4) == 0, "%s: hist differs from the contiguous window", name);

    /* misuse: hist with kt 1, and hist frames of another row stride */
    if (!strcmp(name, "3x3x3 residual")) {
        w22_conv_args bad = b;
        bad.kt = 1;
        CHECK(cpu->ops->conv(cpu, &bad) != W22_OK, "hist with kt 1 accepted");
        bad = b;
        bad.hist[1].sh += 1;
        CHECK(cpu->ops->conv(cpu, &bad) != W22_OK, "hist frame of another row stride accepted");
    }
    cpu->ops->weight_free(cpu, W);
    cpu->ops->weight_free(cpu, B);
    if (SW) cpu->ops->weight_free(cpu, SW);
    free(in), free(in2), free(h0), free(h1), free(o1), free(o2), free(res), free(sc), free(wd), free(bd), free(scw);
}

int main(void) {
    CHECK_OK(w22_backend_cpu_create(1, &cpu));
    if (!cpu) return t_finish("test_conv");
    one("3x3x3 one frame", 1, 5, 7, 16, 24, 3, 0, 0, 0, 0);
    one("3x3x3 residual", 3, 4, 6, 32, 32, 3, 0, 1, 0, 0);
    one("3x3x3 shortcut", 2, 3, 5, 16, 16, 3, 0, 1, 8, 0);
    one("3x3x3 row path (channel slice)", 2, 4, 5, 16, 8, 3, 0, 0, 0, 8);
    one("time_conv (3x1x1, split)", 3, 4, 6, 16, 32, 1, 1, 0, 0, 0);
    cpu->ops->destroy(cpu);
    return t_finish("test_conv");
}
