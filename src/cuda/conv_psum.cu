/* The causal 3x3x3 conv with its history kept as fp32 partial sums (w22_conv_args.psum, backend.h): the head's
 * conv_out (256 -> 12), whose cache would otherwise hold two 256-channel input frames (2 x 113.5 MB at 704 x 1248)
 * where the sums need 2 x 12 floats per pixel (21 MB).
 *
 * Two launches per call. (1) The three temporal taps as ONE spatial 3x3 GEMM of the new frames, N = 3 cout, into
 * fp32 scratch (psum_tmp): the weight needs no copy of its own, because the backend stores a conv weight as
 * [cout][tap = (dt, dy, dx)][cin] (cuda_backend.cu), so GEMM row n = o * 3 + dt (the taps of o at dt) starts at
 * n * 9 cin: rows of stride 9 cin (w22_mm's b_sw), K = 9 cin contiguous in (dy, dx, c). The input is read once
 * for all three dt. (2) A combine kernel per pixel and output channel walks the call's frames in order:
 * out = Y_2 + A + bias (rounded to bf16 once), A = Y_1 + B, B = Y_0.
 *
 * An odd cout (the Wan2.1 VAE's conv_out: 96 -> 3) makes N = 3 cout odd, which only the scalar kernel takes: the
 * GEMM runs N + 1 (w22_psum_tmp_channels), its last row of B the zero row that weights_gpu.cu puts after every
 * 3x3x3 conv weight of odd cout, its last output channel in the scratch never read.
 *
 * Which kernel runs (1): N = 36 is not a multiple of 128 (no wgmma), so
 * the 2D tiles' three-channel-block variant (conv_rows2d.cu, `rows2d 16x32x48`: each input pixel loaded once per
 * 32-channel slice for all nine taps, fp32 stores) from 6 rows on; under 6 rows, the mma.sync kernel's 128 x 128 tile (conv_sm90_mma.cu), which gathers A per tap. */
#include "cuda_internal.h"
#include "lower.h"
#include "cuda_ops.h"

/* One thread per (pixel, output channel o): Y of frame f at y + f * ysf + pixel + 3 o + dt (fp32). */
__global__ void w22_psum_combine_kernel(const float *y, long ysf, long ysh, long ysw, bf16 *out, long osf, long osh,
                                        long osw, float *st, long ssf, long ssh, long ssw, const float *bias, int F,
                                        int H, int W, int C) {
    const long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long)H * W * C) return;
    const int o = (int)(i % C);
    const long p = i / C;
    const int x = (int)(p % W), yy = (int)(p / W);
    float *A = st + yy * ssh + x * ssw + o, *B = A + ssf;
    float a = *A, b = *B;
    const float bo = bias ? bias[o] : 0.0f;
    const float *yp = y + yy * ysh + x * ysw + 3 * o;
    bf16 *op = out + yy * osh + x * osw + o;
    for (int f = 0; f < F; f++, yp += ysf, op += osf) {
        *op = __float2bfloat16_rn(yp[2] + a + bo); /* (Y_2 + A) + bias, as the CPU backend sums it */
        a = yp[1] + b;
        b = yp[0];
    }
    *A = a;
    *B = b;
}

static w22_status bad(const char *what, long got, long want) {
    return w22_fail(W22_ERR_BAD_SHAPE, "cuda conv (partial sums): %s is %ld, expected %ld", what, got, want);
}
#define EXPECT(what, got, want)                                       \
    do {                                                              \
        if ((long)(got) != (long)(want)) return bad(what, got, want); \
    } while (0)

w22_status w22_cuda_conv_psum(w22_backend *b, const w22_conv_args *a) {
    w22_cuda *c = cuda_of(b);
    const w22_cuda_weight *w = (const w22_cuda_weight *)a->weight;
    const w22_view *ps = a->psum, *tmp = &a->psum_tmp;
    if (a->hist[0].ptr || a->upsample || a->time_split || a->residual || a->sc_in || a->dup_in)
        return w22_fail(W22_ERR_INVALID_ARG, "cuda conv (partial sums): no hist, upsample, time_split, residual, "
                        "shortcut or dup_in with psum (hist %d, upsample %d, time_split %d, residual %d, shortcut %d, "
                        "dup_in %d)", a->hist[0].ptr != NULL, a->upsample, a->time_split, a->residual != NULL,
                        a->sc_in != NULL, a->dup_in != NULL);
    EXPECT("kt", a->kt, 3);
    EXPECT("ks", a->ks, 3);
    EXPECT("weight kt", w->kt, 3);
    EXPECT("weight kh", w->kh, 3);
    EXPECT("weight kw", w->kw, 3);
    EXPECT("in.es", a->in.es, 2);
    EXPECT("out.es", a->out.es, 2);
    EXPECT("in.c vs weight cin", a->in.c, w->cin);
    EXPECT("out.c vs weight cout", a->out.c, w->cout);
    EXPECT("out.f (in.f)", a->out.f, a->in.f);
    EXPECT("out.h", a->out.h, a->in.h);
    EXPECT("out.w", a->out.w, a->in.w);
    EXPECT("psum.es (fp32)", ps->es, 4);
    EXPECT("psum.f (A and B)", ps->f, 2);
    EXPECT("psum.h", ps->h, a->out.h);
    EXPECT("psum.w", ps->w, a->out.w);
    EXPECT("psum.c", ps->c, w->cout);
    EXPECT("psum_tmp.es (fp32)", tmp->es, 4);
    EXPECT("psum_tmp.f", tmp->f, a->in.f);
    EXPECT("psum_tmp.h", tmp->h, a->out.h);
    EXPECT("psum_tmp.w", tmp->w, a->out.w);
    EXPECT("psum_tmp.c (3 x cout, rounded up to even)", tmp->c, w22_psum_tmp_channels(w->cout));
    if (!tmp->ptr) return w22_fail(W22_ERR_INVALID_ARG, "cuda conv (partial sums): psum_tmp has no memory");
    const w22_cuda_weight *bias = (const w22_cuda_weight *)a->bias;
    if (bias) {
        if (bias->kind != W22_WK_VECTOR) return w22_fail(W22_ERR_INVALID_ARG, "cuda conv: bias is not a vector");
        EXPECT("bias length", bias->n, w->cout);
    }
    W22_TRY(w22_cuda_check_view(c, &a->in, 1, "conv (partial sums) in"));
    W22_TRY(w22_cuda_check_view(c, &a->out, 0, "conv (partial sums) out"));
    W22_TRY(w22_cuda_check_view(c, ps, 0, "conv (partial sums) state"));
    W22_TRY(w22_cuda_check_view(c, tmp, 0, "conv (partial sums) scratch"));

    w22_conv_operands o;
    memset(&o, 0, sizeof o);
    o.cin = w->cin, o.cout = w->cout, o.dev = (const bf16 *)w->dev;
    w22_mm g;
    w22_lower_psum(a, &o, &g); /* lower.h: N = tmp->c, 3 cout or one more where cout is odd (a zero weight row) */
    W22_TRY(w22_cuda_gemm(c, &g, "conv (partial sums: the three temporal taps)"));

    const long n = (long)a->out.h * a->out.w * w->cout;
    if (n <= 0) return W22_OK;
    if ((n + 255) / 256 > 0x7fffffffL)
        return w22_fail(W22_ERR_INVALID_ARG, "cuda conv (partial sums): %ld outputs per frame is too many", n);
    w22_psum_combine_kernel<<<(unsigned)((n + 255) / 256), 256, 0, c->stream>>>(
        (const float *)tmp->ptr, tmp->sf, tmp->sh, tmp->sw, (bf16 *)a->out.ptr, a->out.sf, a->out.sh, a->out.sw,
        (float *)ps->ptr, ps->sf, ps->sh, ps->sw, bias ? (const float *)bias->dev : NULL, a->in.f, a->out.h,
        a->out.w, w->cout);
    CU_LAUNCHED(c, "conv (partial sums: combine)");
    return W22_OK;
}
