/* The CPU backend's conv with its causal history read in place (w22_conv_args.hist, what the plan does with its
 * caches) against the same conv over one contiguous window: random inputs and weights, the window's own first two
 * frames poisoned in the hist call, outputs poisoned before each call. Same arithmetic in the same order, so the
 * results must be bitwise equal. Also: the misuses the op must refuse.
 *
 * The upsample conv with a fused DupUp residual (w22_conv_args.dup_in, what the plan does at the end of an up
 * block) against the conv and then dupup_add, and dupup_add itself against DupUp3D written out literally
 * (repeat_interleave, view, permute, first-chunk cut): both maps of the model (ft 2 with cin = cout, ft 1 with
 * cin = 2 cout), one the CUDA backend runs separately (ft 2, cin = 2 cout), with and without first_single, a
 * DupUp input that is a channel slice. The fused sum is the separate one's (conv + bias, then + DupUp, in fp32),
 * so equality is bitwise; the literal DupUp adds to zero, so it is exact too.
 *
 * The causal conv with its history as partial sums (w22_conv_args.psum, the head's conv_out) against the plain conv
 * over a window that starts with two zero frames (zero state = the causal zero padding): the 27 taps' fp32 sum is
 * regrouped by temporal tap, so they differ by the roundings of the partial sums: about 27 x 2^-24 of the sums of
 * |terms|, which stay within a few max|ref| with these random weights: tolerance 8e-5 max|ref| (measured: 2e-7).
 * One call over all frames and calls of one and two frames (the state carried between calls) compute the same
 * per-frame sums: bitwise equal, state included. */
#include <math.h>
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
    CHECK_OK(cpu->ops->weight_upload(cpu, W22_WK_CONV, (w22_wsrc){wd, W22_DTYPE_F32, -1}, ws, 5, &W));
    CHECK_OK(cpu->ops->weight_upload(cpu, W22_WK_VECTOR, (w22_wsrc){bd, W22_DTYPE_F32, -1}, bs, 1, &B));
    if (sc_cin) CHECK_OK(cpu->ops->weight_upload(cpu, W22_WK_CONV, (w22_wsrc){scw, W22_DTYPE_F32, -1}, scs, 5, &SW));

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

    /* hist_zero (backend.h: the first n history frames are zero; their taps may be skipped): against the same conv
     * given those frames as zeros and told nothing, bit for bit, with the frames said zero full of NaN (never read) */
    for (int nz = 1; nz <= 2; nz++) {
        float *z0 = malloc(fin * sizeof(float)), *z1 = malloc(fin * sizeof(float));
        memcpy(z0, h0, fin * sizeof(float)), memcpy(z1, h1, fin * sizeof(float));
        memset(z0, 0, fin * sizeof(float));
        if (nz == 2) memset(z1, 0, fin * sizeof(float));
        w22_conv_args c = b;
        c.out = vo1;
        c.hist[0] = view_in(z0, 1, h, w, cin, pad_c), c.hist[1] = view_in(z1, 1, h, w, cin, pad_c);
        t_fill_nan(o1, nout);
        CHECK_OK(cpu->ops->conv(cpu, &c));
        t_fill_nan(z0, fin);
        if (nz == 2) t_fill_nan(z1, fin);
        c.out = vo2, c.hist_zero = nz;
        t_fill_nan(o2, nout);
        CHECK_OK(cpu->ops->conv(cpu, &c));
        t_diff dz = t_compare(o2, o1, nout);
        CHECK(dz.nonfinite == 0 && memcmp(o1, o2, nout * 4) == 0, "%s: hist_zero %d differs from zero history frames "
              "(max|d| %.3g, %zu not finite)", name, nz, dz.max_abs, dz.nonfinite);
        free(z0), free(z1);
    }
    if (!strcmp(name, "3x3x3 residual")) {
        w22_conv_args bad = b;
        bad.hist_zero = 3;
        CHECK(cpu->ops->conv(cpu, &bad) != W22_OK, "hist_zero 3 accepted");
        bad = a;
        bad.hist_zero = 2;
        CHECK(cpu->ops->conv(cpu, &bad) != W22_OK, "hist_zero without history frames accepted");
    }

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

/* DupUp3D of in (f, h, w, cin) as diffusers computes it: channels repeat_interleave'd r times, viewed as
 * [cout][ft][2][2], permuted to (frame s ft + t, row 2 y + i, col 2 x + j), the first ft - 1 frames dropped with
 * first_single. Into ref (F, 2h, 2w, cout), dense. */
static void dupup_literal(w22_view in, int cout, int ft, int first_single, float *ref) {
    const int r = cout * ft * 4 / in.c, H = 2 * in.h, W = 2 * in.w, cut = first_single ? ft - 1 : 0;
    for (int s = 0; s < in.f; s++)
        for (int t = 0; t < ft; t++) {
            const int fo = s * ft + t - cut;
            if (fo < 0) continue;
            for (int y = 0; y < in.h; y++)
                for (int i = 0; i < 2; i++)
                    for (int x = 0; x < in.w; x++)
                        for (int j = 0; j < 2; j++)
                            for (int o = 0; o < cout; o++) {
                                const int rep = ((o * ft + t) * 2 + i) * 2 + j; /* the viewed channel */
                                ref[(((size_t)fo * H + 2 * y + i) * W + 2 * x + j) * cout + o] =
                                    *(const float *)w22_view_at(in, s, y, x, rep / r);
                            }
        }
}

/* Upsample conv (C -> C, 3x3) of F = DupUp frames of f, h x w -> 2h x 2w, + DupUp of a (f, h, w, cd) input with ft
 * copies; the DupUp input a channel slice (pixel stride cd + pad_c) when pad_c > 0. */
static void dup_one(const char *name, int C, int cd, int ft, int first_single, int f, int h, int w, int pad_c) {
    const int F = w22_dupup_frames(f, ft, first_single), H = 2 * h, W = 2 * w;
    const long fin = (long)(h + 2) * (w + 2) * C;
    float *in = fresh_buf(fin * F, 0);
    w22_view vin = view_in(in, F, h, w, C, 0);
    const long dsw = cd + pad_c;
    float *dbuf = fresh_buf((size_t)f * h * w * dsw, 0);
    w22_view vd = {dbuf, f, h, w, cd, (long)h * w * dsw, (long)w * dsw, dsw, 4};
    const size_t nout = (size_t)F * H * W * C;
    float *o1 = fresh_buf(nout, 1), *o2 = fresh_buf(nout, 1), *o3 = malloc(nout * 4), *ref = fresh_buf(nout, 1);
    memset(o3, 0, nout * 4);
    w22_view vo1 = {o1, F, H, W, C, (long)H * W * C, (long)W * C, C, 4}, vo2 = vo1, vo3 = vo1;
    vo2.ptr = o2;
    vo3.ptr = o3;
    const int64_t ws[5] = {C, C, 1, 3, 3}, bs[1] = {C};
    float *wd = fresh_buf((size_t)C * C * 9, 0), *bd = fresh_buf(C, 0);
    w22_bweight *Wt = NULL, *B = NULL;
    CHECK_OK(cpu->ops->weight_upload(cpu, W22_WK_CONV, (w22_wsrc){wd, W22_DTYPE_F32, -1}, ws, 5, &Wt));
    CHECK_OK(cpu->ops->weight_upload(cpu, W22_WK_VECTOR, (w22_wsrc){bd, W22_DTYPE_F32, -1}, bs, 1, &B));

    w22_conv_args a = {.in = vin, .out = vo1, .weight = Wt, .bias = B, .kt = 1, .ks = 3, .upsample = 1,
                       .dup_in = &vd, .dup_ft = ft, .dup_first_single = first_single};
    CHECK_OK(cpu->ops->conv(cpu, &a));
    w22_conv_args b = a;
    b.out = vo2;
    b.dup_in = NULL;
    CHECK_OK(cpu->ops->conv(cpu, &b));
    CHECK_OK(cpu->ops->dupup_add(cpu, vo2, vd, ft, first_single));
    t_diff d = t_compare(o1, o2, nout);
    printf("%-34s max|d| %.3g, %zu not finite\n", name, d.max_abs, d.nonfinite);
    CHECK(d.nonfinite == 0 && memcmp(o1, o2, nout * 4) == 0, "%s: fused DupUp differs from conv + dupup_add", name);
    /* dupup_add alone (onto zeros) against the literal DupUp3D */
    CHECK_OK(cpu->ops->dupup_add(cpu, vo3, vd, ft, first_single));
    dupup_literal(vd, C, ft, first_single, ref);
    d = t_compare(o3, ref, nout);
    CHECK(d.nonfinite == 0 && memcmp(o3, ref, nout * 4) == 0, "%s: dupup_add differs from DupUp3D (max|d| %g)", name,
          d.max_abs);

    /* misuse: dup_in without upsample, with a residual, of the wrong frame count, ft 3 */
    if (!strcmp(name, "upsample + DupUp ft2 first")) {
        w22_conv_args bad = a;
        bad.upsample = 0;
        CHECK(cpu->ops->conv(cpu, &bad) != W22_OK, "dup_in without upsample accepted");
        bad = a;
        bad.residual = &vo2;
        CHECK(cpu->ops->conv(cpu, &bad) != W22_OK, "dup_in with a residual accepted");
        bad = a;
        bad.dup_first_single = !first_single;
        CHECK(cpu->ops->conv(cpu, &bad) != W22_OK, "dup_in of the wrong frame count accepted");
        bad = a;
        bad.dup_ft = 3;
        CHECK(cpu->ops->conv(cpu, &bad) != W22_OK, "dup_ft 3 accepted");
    }
    cpu->ops->weight_free(cpu, Wt);
    cpu->ops->weight_free(cpu, B);
    free(in), free(dbuf), free(o1), free(o2), free(o3), free(ref), free(wd), free(bd);
}

/* F frames of h x w, cin -> cout: psum over calls of `step` frames (0: one call) against the plain conv. */
static void psum_one(const char *name, int F, int h, int w, int cin, int cout) {
    const long fin = (long)(h + 2) * (w + 2) * cin;
    float *win = fresh_buf(fin * (F + 2), 0);
    w22_view vwin = view_in(win, F + 2, h, w, cin, 0);
    memset(win, 0, 2 * fin * sizeof(float)); /* two zero history frames */
    const int64_t ws[5] = {cout, cin, 3, 3, 3}, bs[1] = {cout};
    float *wd = fresh_buf((size_t)cout * cin * 27, 0), *bd = fresh_buf(cout, 0);
    w22_bweight *W = NULL, *B = NULL;
    CHECK_OK(cpu->ops->weight_upload(cpu, W22_WK_CONV, (w22_wsrc){wd, W22_DTYPE_F32, -1}, ws, 5, &W));
    CHECK_OK(cpu->ops->weight_upload(cpu, W22_WK_VECTOR, (w22_wsrc){bd, W22_DTYPE_F32, -1}, bs, 1, &B));
    const size_t nout = (size_t)F * h * w * cout, nst = (size_t)2 * h * w * cout;
    float *ref = fresh_buf(nout, 1);
    w22_view vref = {ref, F, h, w, cout, (long)h * w * cout, (long)w * cout, cout, 4};
    w22_conv_args a = {.in = vwin, .out = vref, .weight = W, .bias = B, .kt = 3, .ks = 3};
    CHECK_OK(cpu->ops->conv(cpu, &a));
    const w22_view frames = w22_view_frames(vwin, 2, F);
    float *outs[3], *states[3];
    const int steps[3] = {F, 1, 2};
    for (int i = 0; i < 3; i++) {
        outs[i] = fresh_buf(nout, 1);
        states[i] = calloc(nst, sizeof(float));
        w22_view vo = vref, vs = {states[i], 2, h, w, cout, (long)h * w * cout, (long)w * cout, cout, 4};
        vo.ptr = outs[i];
        for (int t = 0; t < F; t += steps[i]) {
            const int n = F - t < steps[i] ? F - t : steps[i];
            w22_conv_args p = {.in = w22_view_frames(frames, t, n), .out = w22_view_frames(vo, t, n), .weight = W,
                               .bias = B, .kt = 3, .ks = 3, .psum = &vs};
            CHECK_OK(cpu->ops->conv(cpu, &p));
        }
    }
    t_diff d = t_compare(outs[0], ref, nout);
    double maxref = 0;
    for (size_t i = 0; i < nout; i++) maxref = fmax(maxref, fabs(ref[i]));
    printf("%-34s max|d| %.3g (max|ref| %.3g), %zu not finite\n", name, d.max_abs, maxref, d.nonfinite);
    CHECK(d.nonfinite == 0 && d.max_abs <= 8e-5 * maxref, "%s: partial sums differ from the plain conv by %g", name,
          d.max_abs);
    for (int i = 1; i < 3; i++)
        CHECK(memcmp(outs[i], outs[0], nout * 4) == 0 && memcmp(states[i], states[0], nst * 4) == 0,
              "%s: calls of %d frames differ from one call", name, steps[i]);

    /* misuse: with hist, with kt 1 weights' args, a state of the wrong size, fp32 state of another es */
    if (F > 1) {
        w22_view vs = {states[0], 2, h, w, cout, (long)h * w * cout, (long)w * cout, cout, 4};
        w22_conv_args p = {.in = frames, .out = vref, .weight = W, .bias = B, .kt = 3, .ks = 3, .psum = &vs};
        w22_conv_args bad = p;
        bad.hist[0] = bad.hist[1] = w22_view_frames(vwin, 0, 1);
        CHECK(cpu->ops->conv(cpu, &bad) != W22_OK, "psum with hist accepted");
        bad = p;
        bad.kt = 1;
        CHECK(cpu->ops->conv(cpu, &bad) != W22_OK, "psum with kt 1 accepted");
        w22_view vs1 = vs;
        vs1.f = 1;
        bad = p;
        bad.psum = &vs1;
        CHECK(cpu->ops->conv(cpu, &bad) != W22_OK, "psum state of one frame accepted");
        bad = p;
        bad.out = w22_view_frames(vref, 0, F - 1);
        CHECK(cpu->ops->conv(cpu, &bad) != W22_OK, "psum with out.f != in.f accepted");
    }
    for (int i = 0; i < 3; i++) free(outs[i]), free(states[i]);
    cpu->ops->weight_free(cpu, W);
    cpu->ops->weight_free(cpu, B);
    free(win), free(wd), free(bd), free(ref);
}

int main(void) {
    CHECK_OK(w22_backend_cpu_create(1, &cpu));
    if (!cpu) return t_finish("test_conv");
    one("3x3x3 one frame", 1, 5, 7, 16, 24, 3, 0, 0, 0, 0);
    one("3x3x3 residual", 3, 4, 6, 32, 32, 3, 0, 1, 0, 0);
    one("3x3x3 shortcut", 2, 3, 5, 16, 16, 3, 0, 1, 8, 0);
    one("3x3x3 row path (channel slice)", 2, 4, 5, 16, 8, 3, 0, 0, 0, 8);
    one("time_conv (3x1x1, split)", 3, 4, 6, 16, 32, 1, 1, 0, 0, 0);
    dup_one("upsample + DupUp ft2", 16, 16, 2, 0, 2, 3, 5, 0);
    dup_one("upsample + DupUp ft2 first", 16, 16, 2, 1, 3, 3, 5, 0);
    dup_one("upsample + DupUp ft1 cin 2C", 8, 16, 1, 0, 2, 4, 3, 0);
    dup_one("upsample + DupUp ft1 first, slice", 8, 16, 1, 1, 2, 3, 4, 8);
    dup_one("upsample + DupUp ft2 cin 2C first", 8, 16, 2, 1, 2, 3, 3, 0);
    dup_one("upsample + DupUp ft2 slice", 16, 16, 2, 0, 1, 2, 3, 4);
    psum_one("partial sums 5 frames", 5, 4, 6, 16, 12);
    psum_one("partial sums 1 frame", 1, 3, 5, 8, 4);
    psum_one("partial sums 4 frames, 1 channel", 4, 5, 3, 24, 1);
    cpu->ops->destroy(cpu);
    return t_finish("test_conv");
}
