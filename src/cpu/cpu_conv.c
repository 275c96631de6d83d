/* The CPU backend's convolution: one GEMM per kernel tap, accumulated. Rows of a bordered channels-last buffer
 * are evenly strided, so a whole frame is one GEMM over "flat" positions p = y * RS + x (RS = the row stride in
 * pixels): a tap (dy, dx) is the same matrix shifted by (dy - 1) * RS + dx - 1 pixels. Positions with x >= w are
 * computed and thrown away. An upsampling conv first writes its nearest-2x input with its border; its DupUp residual
 * (dup_in) is added with the bias, by the same index map as dupup_add (backend.h's w22_dupup_frame/_channel). A conv
 * with its history as partial sums (psum: the head's conv_out) runs the three temporal taps as three spatial convs of
 * the new frame and combines them with the fp32 state in backend.h's order. */
#include <stdlib.h>
#include <string.h>
#include "backend.h"
#include "common.h"
#include "cpu/cpu.h"
#include "cpu/gemm.h"

/* The nearest-2x upsample of frames of `in` with a one-pixel border: rows/cols [-1, 2h] read in((Y)>>1, (X)>>1),
 * which is in's own border at the edges. Returns a view of the interior. */
static w22_status upsample_input(w22_view in, float **buf, w22_view *out) {
    const int H = 2 * in.h, W = 2 * in.w, C = in.c;
    const long RS = W + 2;
    float *u = malloc(sizeof(float) * (size_t)in.f * (H + 2) * RS * C);
    if (!u) return w22_fail(W22_ERR_OUT_OF_MEMORY, "out of host memory for an upsampled conv input");
    w22_view v = {u + (RS + 1) * C, in.f, H, W, C, (long)(H + 2) * RS * C, RS * C, C, sizeof(float)};
    for (int f = 0; f < in.f; f++)
        for (int Y = -1; Y <= H; Y++)
            for (int X = -1; X <= W; X++)
                memcpy(w22_view_at(v, f, Y, X, 0), w22_view_at(in, f, Y >> 1, X >> 1, 0), sizeof(float) * C);
    *buf = u;
    *out = v;
    return W22_OK;
}

/* tmp (Ho rows of Wo pixels at a row stride of RS pixels, cout channels) += the spatial tap (dy, dx) of one frame
 * times B ([cin][cout]): one GEMM over the flat positions, else one per output row. */
static int tap_gemm(int threads, const volatile int *stop, w22_view frame, int dy, int dx, int pad, const float *B,
                    int flat, long M, long RS, int Ho, int Wo, int cin, int cout, float *tmp) {
    if (flat) {
        const float *A = w22_view_at(frame, 0, dy - pad, dx - pad, 0);
        return w22_sgemm_stop(threads, stop, (int)M, cout, cin, 1.0f, A, frame.sw, B, cout, 0, 1.0f, tmp, cout);
    }
    for (int y = 0; y < Ho; y++) {
        const float *A = w22_view_at(frame, 0, y + dy - pad, dx - pad, 0);
        if (w22_sgemm_stop(threads, stop, Wo, cout, cin, 1.0f, A, frame.sw, B, cout, 0, 1.0f,
                           tmp + (size_t)y * RS * cout, cout))
            return 1;
    }
    return 0;
}

/* The causal 3x3x3 conv with its history as partial sums (backend.h, w22_conv_args.psum): per frame the three
 * temporal taps' spatial convs Y_0..Y_2 (taps dt * 9 .. dt * 9 + 8 of the weight), then the state update. */
static w22_status conv_psum(int threads, const volatile int *stop, const w22_conv_args *a) {
    const w22_bweight *W = a->weight;
    const w22_view src = a->in, out = a->out, *ps = a->psum;
    const int cin = W->cin, cout = W->cout, Ho = out.h, Wo = out.w;
    if (a->kt != 3 || a->ks != 3 || W->kt != 3 || W->kh != 3 || W->kw != 3 || a->hist[0].ptr || a->upsample ||
        a->time_split || a->residual || a->sc_in || a->dup_in)
        return w22_fail(W22_ERR_INVALID_ARG, "cpu conv (partial sums): needs kt 3, ks 3 and a 3x3x3 weight, and no "
                        "hist, upsample, time_split, residual, shortcut or dup_in (kt %d, ks %d, weight %dx%dx%d, "
                        "hist %d, upsample %d)", a->kt, a->ks, W->kt, W->kh, W->kw, a->hist[0].ptr != NULL,
                        a->upsample);
    if (src.c != cin || out.c != cout || out.f != src.f || src.f < 1 || Ho != src.h || Wo != src.w || ps->f != 2 ||
        ps->h != Ho || ps->w != Wo || ps->c != cout || ps->es != 4)
        return w22_fail(W22_ERR_BAD_SHAPE, "cpu conv (partial sums): in %dx%dx%dx%d, out %dx%dx%dx%d, state "
                        "%dx%dx%dx%d (es %d), weight %d -> %d: expected out of in's frames and size with cout "
                        "channels, state 2 x out's size, fp32", src.f, src.h, src.w, src.c, out.f, out.h, out.w,
                        out.c, ps->f, ps->h, ps->w, ps->c, ps->es, cin, cout);
    const int flat = src.sw == cin && src.sh % src.sw == 0 && src.sh / src.sw >= Wo;
    const long RS = flat ? src.sh / src.sw : Wo;
    const long M = (long)(Ho - 1) * RS + Wo;
    const size_t ny = (size_t)M * cout; /* one Y */
    float *tmp = malloc(sizeof(float) * 3 * ny);
    if (!tmp) return w22_fail(W22_ERR_OUT_OF_MEMORY, "out of host memory for partial sums (3 x %ld x %d)", M, cout);
    for (int t = 0; t < src.f; t++) {
        const w22_view frame = w22_view_frames(src, t, 1);
        memset(tmp, 0, sizeof(float) * 3 * ny);
        for (int dt = 0; dt < 3; dt++)
            for (int dy = 0; dy < 3; dy++)
                for (int dx = 0; dx < 3; dx++)
                    if (tap_gemm(threads, stop, frame, dy, dx, 1,
                                 W->data + (size_t)((dt * 3 + dy) * 3 + dx) * cin * cout, flat, M, RS, Ho, Wo, cin,
                                 cout, tmp + dt * ny)) {
                        free(tmp);
                        return w22_stopped();
                    }
        for (int y = 0; y < Ho; y++)
            for (int x = 0; x < Wo; x++) {
                const float *y0 = tmp + ((size_t)y * RS + x) * cout, *y1 = y0 + ny, *y2 = y1 + ny;
                float *A = w22_view_at(*ps, 0, y, x, 0), *B = w22_view_at(*ps, 1, y, x, 0);
                float *o = w22_view_at(out, t, y, x, 0);
                for (int co = 0; co < cout; co++) {
                    o[co] = y2[co] + A[co] + (a->bias ? a->bias->data[co] : 0.0f);
                    A[co] = y1[co] + B[co];
                    B[co] = y0[co];
                }
            }
    }
    free(tmp);
    return W22_OK;
}

w22_status w22_cpu_conv(w22_backend *b, const w22_conv_args *a) {
    const int threads = b->threads;
    const volatile int *stop = b->interrupt;
    if (a->psum) return conv_psum(threads, stop, a);
    const w22_bweight *W = a->weight;
    w22_view src = a->in, out = a->out;
    const int kt = a->kt, ks = a->ks, pad = ks == 3 ? 1 : 0;
    const int cin = W->cin, cout = W->cout;
    const int hist = a->hist[0].ptr != NULL;
    const int nconv = hist ? src.f : src.f - kt + 1;
    if (hist && (kt != 3 || a->upsample || !a->hist[1].ptr || a->hist[0].sh != src.sh || a->hist[0].sw != src.sw ||
                 a->hist[1].sh != src.sh || a->hist[1].sw != src.sw || a->hist[0].c != cin || a->hist[1].c != cin ||
                 a->hist[0].h != src.h || a->hist[1].h != src.h || a->hist[0].w != src.w || a->hist[1].w != src.w))
        return w22_fail(W22_ERR_INTERNAL, "cpu conv: history frames need kt 3, no upsample, and the input's "
                        "geometry (%dx%dx%d, strides %ld/%ld)", src.h, src.w, cin, src.sh, src.sw);
    if (a->hist_zero < 0 || a->hist_zero > 2 || (a->hist_zero && !hist))
        return w22_fail(W22_ERR_INTERNAL, "cpu conv: hist_zero %d, expected 0 to 2 and 0 without history frames",
                        a->hist_zero);
    const int Ho = out.h, Wo = out.w;
    if (src.c != cin || W->kt != kt || W->kh != ks || W->kw != ks || nconv < 1 ||
        (a->time_split ? (out.f != 2 * nconv || 2 * out.c != cout) : (out.f != nconv || out.c != cout)) ||
        (a->upsample ? (Ho != 2 * src.h || Wo != 2 * src.w) : (Ho != src.h || Wo != src.w)))
        return w22_fail(W22_ERR_INTERNAL,
                        "cpu conv: in %dx%dx%dx%d, out %dx%dx%dx%d, weight %dx%dx%dx%dx%d, kt %d ks %d up %d split %d",
                        src.f, src.h, src.w, src.c, out.f, out.h, out.w, out.c, cout, cin, W->kt, W->kh, W->kw, kt,
                        ks, a->upsample, a->time_split);
    const w22_view *dup = a->dup_in;
    int dup_r = 0;
    if (dup) {
        if (!a->upsample || a->residual || a->time_split)
            return w22_fail(W22_ERR_INVALID_ARG, "cpu conv: a DupUp residual (dup_in) needs upsample, and no residual "
                            "or time_split (upsample %d, residual %d, time_split %d)", a->upsample,
                            a->residual != NULL, a->time_split);
        W22_TRY(w22_dupup_check("cpu conv (dup_in)", &out, dup, a->dup_ft, a->dup_first_single));
        dup_r = out.c * a->dup_ft * 4 / dup->c;
    }
    float *ubuf = NULL;
    if (a->upsample) W22_TRY(upsample_input(src, &ubuf, &src));
    /* Flat GEMMs need evenly strided rows with contiguous pixels; else one GEMM per output row. */
    const int flat = src.sw == cin && src.sh % src.sw == 0 && src.sh / src.sw >= Wo;
    const long RS = flat ? src.sh / src.sw : Wo;
    const long M = (long)(Ho - 1) * RS + Wo;
    float *tmp = malloc(sizeof(float) * (size_t)M * cout);
    if (!tmp) {
        free(ubuf);
        return w22_fail(W22_ERR_OUT_OF_MEMORY, "out of host memory for a conv's output (%ld x %d)", M, cout);
    }
    const int C = a->time_split ? cout / 2 : cout;
    /* input frame j of the window: the history views first (when given), then src's frames */
#define FRAME(j) (hist && (j) < 2 ? a->hist[(j)] : w22_view_frames(src, hist ? (j) - 2 : (j), 1))
    for (int t = 0; t < nconv; t++) {
        int ds = 0, dcopy = 0; /* DupUp: input frame and time copy of output frame t */
        if (dup) w22_dupup_frame(t, a->dup_ft, a->dup_first_single, &ds, &dcopy);
        memset(tmp, 0, sizeof(float) * (size_t)M * cout);
        for (int dt = 0; dt < kt; dt++)
            for (int dy = 0; dy < ks && !(hist && t + dt < a->hist_zero); dy++) /* a zero frame's taps add zeros */
                for (int dx = 0; dx < ks; dx++)
                    if (tap_gemm(threads, stop, FRAME(t + dt), dy, dx, pad,
                                 W->data + (size_t)((dt * ks + dy) * ks + dx) * cin * cout, flat, M, RS, Ho, Wo, cin,
                                 cout, tmp)) {
                        free(tmp);
                        free(ubuf);
                        return w22_stopped();
                    }
        if (a->sc_in) {
            const w22_view s = *a->sc_in;
            const w22_bweight *SW = a->sc_weight;
            for (int y = 0; y < Ho; y++)
                w22_sgemm(threads, Wo, cout, SW->cin, 1.0f, w22_view_at(s, t, y, 0, 0), s.sw, SW->data, cout, 0, 1.0f,
                          tmp + (size_t)y * RS * cout, cout);
        }
        for (int y = 0; y < Ho; y++)
            for (int x = 0; x < Wo; x++) {
                const float *r = tmp + ((size_t)y * RS + x) * cout;
                for (int co = 0; co < cout; co++) {
                    float v = r[co] + (a->bias ? a->bias->data[co] : 0.0f);
                    if (a->sc_bias) v += a->sc_bias->data[co];
                    int fo = a->time_split ? 2 * t + co / C : t, c = co % C;
                    float *o = w22_view_at(out, fo, y, x, c);
                    if (a->residual) v += *(const float *)w22_view_at(*a->residual, fo, y, x, c);
                    if (dup) /* as dupup_add after the conv: the same sum in the same order */
                        v += *(const float *)w22_view_at(*dup, ds, y >> 1, x >> 1,
                                                         w22_dupup_channel(co, dcopy, y & 1, x & 1, a->dup_ft, dup_r));
                    *o = v;
                }
            }
    }
#undef FRAME
    free(tmp);
    free(ubuf);
    return W22_OK;
}
