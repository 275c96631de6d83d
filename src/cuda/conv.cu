/* The conv op: checks a w22_conv_args against backend.h's contract and lowers it to the implicit GEMM
 * (w22_mm), as route.h decides: the step (w22_route_conv_step), then each GEMM's kernel (w22_route_gemm) and the TMA
 * conv's launch. A conv with its history as partial sums (psum) goes to conv_psum.cu. An upsampling conv is four
 * phase GEMMs (2x2 convs on the low-resolution grid), run as one launch of the TMA wgmma kernel where it takes them
 * (w22_cuda_gemm_phases: one ramp and one part-empty last round instead of four), else as four GEMMs. Its DupUp residual (dup_in) becomes the phase GEMMs' residual where its channel
 * map allows (dup_phase), else the separate dupup_add kernel runs after the conv. */
#include <stdlib.h>
#include "cuda_internal.h"
#include "cuda_ops.h"

static w22_status bad(const char *fmt_what, long got, long want) {
    return w22_fail(W22_ERR_BAD_SHAPE, "cuda conv: %s is %ld, expected %ld", fmt_what, got, want);
}
#define EXPECT(what, got, want)                                   \
    do {                                                          \
        if ((long)(got) != (long)(want)) return bad(what, got, want); \
    } while (0)

/* The DupUp residual of upsample phase (py, px) as w22_mm's r_tsh .. r_coff (cuda_internal.h), or 0 when the
 * epilogue cannot take this DupUp. The phase GEMM's row (T, y, x) is the DupUp input pixel (y, x) of frame (T + ft - 1)
 * >> 1 with first_single, else T >> 1 (ft 2; T with ft 1), time copy the rest, and output channel o reads input channel
 * (o ft 4 + tc 4 + py 2 + px) / r (backend.h), r = cout ft 4 / cin. When r divides ft 4 that is o cs + (tc 4 + py 2 +
 * px) / r with cs = ft 4 / r; the epilogue takes cs 1 or 2 and an offset that no time copy changes (one GEMM row
 * serves every time copy of its frame only through T). The model's two: ft 2, r 8 (cin = cout): o; ft 1, r 2
 * (cin = 2 cout): 2 o + py. Others (cs 4 or 8, or ft 2 with r 4: the offset is tc) run the separate kernel. */
static int dup_phase(const w22_conv_args *a, int py, int px, w22_mm *q) {
    const int ft = a->dup_ft, r = a->out.c * ft * 4 / a->dup_in->c, sub = py * 2 + px;
    if ((ft * 4) % r) return 0;
    const int cs = ft * 4 / r, coff = sub / r;
    if (cs > 2) return 0;
    for (int tc = 1; tc < ft; tc++)
        if ((tc * 4 + sub) / r != coff) return 0;
    if (cs == 1 && coff) return 0; /* never (cs 1: r = ft 4 > sub); the pair store's bf16x2 load needs it */
    q->res = (const bf16 *)a->dup_in->ptr; /* the vector loads' base: r_coff is applied in the pick */
    q->r_sf = a->dup_in->sf, q->r_sh = a->dup_in->sh, q->r_sw = a->dup_in->sw;
    q->r_tsh = ft == 2, q->r_toff = a->dup_first_single ? ft - 1 : 0;
    q->r_csh = cs == 2, q->r_coff = coff;
    return 1;
}

w22_status w22_cuda_conv(w22_backend *b, const w22_conv_args *a) {
    w22_cuda *c = cuda_of(b);
    if (!a || !a->weight) return w22_fail(W22_ERR_INVALID_ARG, "cuda conv: NULL args or weight");
    CU_ENTER(c);
    const w22_cuda_weight *w = (const w22_cuda_weight *)a->weight;
    if (w->kind != W22_WK_CONV) return w22_fail(W22_ERR_INVALID_ARG, "cuda conv: the weight is not a conv weight");
    memset(&c->route, 0, sizeof c->route); /* the decision this conv makes (route.h), for w22_backend_cuda_last_route */
    c->route.step = w22_route_conv_step(a, w->dev_phase != NULL, a->psum ? "psum" : w22_cuda_winograd_blocker(a, w));
    if (c->route.step == W22_CONV_PSUM) return w22_cuda_conv_psum(b, a); /* the history as partial sums */
    EXPECT("in.es", a->in.es, 2);
    EXPECT("out.es", a->out.es, 2);
    if (a->kt != 1 && a->kt != 3) return bad("kt", a->kt, 3);
    if (a->ks != 1 && a->ks != 3) return bad("ks", a->ks, 3);
    EXPECT("weight kt vs args kt", w->kt, a->kt);
    EXPECT("weight kh vs args ks", w->kh, a->ks);
    EXPECT("weight kw vs args ks", w->kw, a->ks);
    EXPECT("in.c vs weight cin", a->in.c, w->cin);
    const int hist = a->hist[0].ptr != NULL;
    const int nf = hist ? a->in.f : a->in.f - a->kt + 1;
    if (nf < 1) return w22_fail(W22_ERR_BAD_SHAPE, "cuda conv: in.f %d < kt %d", a->in.f, a->kt);
    if (hist) {
        if (a->kt != 3 || a->upsample)
            return w22_fail(W22_ERR_INVALID_ARG, "cuda conv: history frames need kt 3 and no upsample");
        for (int i = 0; i < 2; i++) {
            const w22_view *h = &a->hist[i];
            if (!h->ptr) return w22_fail(W22_ERR_INVALID_ARG, "cuda conv: hist[1] missing");
            EXPECT("hist.es", h->es, 2);
            EXPECT("hist.h vs in.h", h->h, a->in.h);
            EXPECT("hist.w vs in.w", h->w, a->in.w);
            EXPECT("hist.c vs in.c", h->c, a->in.c);
            EXPECT("hist.sh vs in.sh", h->sh, a->in.sh);
            EXPECT("hist.sw vs in.sw", h->sw, a->in.sw);
            W22_TRY(w22_cuda_check_view(c, h, a->ks == 3 ? 1 : 0, "conv history frame"));
        }
    }
    if (a->time_split) {
        EXPECT("out.c * 2 (time_split) vs cout", 2L * a->out.c, w->cout);
        EXPECT("out.f (time_split: 2 x conv frames)", a->out.f, 2 * nf);
    } else {
        EXPECT("out.c vs cout", a->out.c, w->cout);
        EXPECT("out.f (in.f - kt + 1)", a->out.f, nf);
    }
    EXPECT("out.h", a->out.h, a->upsample ? 2 * a->in.h : a->in.h);
    EXPECT("out.w", a->out.w, a->upsample ? 2 * a->in.w : a->in.w);
    const w22_cuda_weight *bias = (const w22_cuda_weight *)a->bias;
    if (bias) {
        if (bias->kind != W22_WK_VECTOR) return w22_fail(W22_ERR_INVALID_ARG, "cuda conv: bias is not a vector");
        EXPECT("bias length", bias->n, w->cout);
    }
    if (a->residual) {
        const w22_view *r = a->residual;
        EXPECT("residual.es", r->es, 2);
        EXPECT("residual.f", r->f, a->out.f);
        EXPECT("residual.h", r->h, a->out.h);
        EXPECT("residual.w", r->w, a->out.w);
        EXPECT("residual.c", r->c, a->out.c);
    }
    const w22_cuda_weight *scw = (const w22_cuda_weight *)a->sc_weight, *scb = (const w22_cuda_weight *)a->sc_bias;
    if (a->sc_in) {
        if (!scw || scw->kind != W22_WK_CONV)
            return w22_fail(W22_ERR_INVALID_ARG, "cuda conv: sc_in without a conv sc_weight");
        EXPECT("sc_in.es", a->sc_in->es, 2);
        EXPECT("sc_weight kernel volume", (long)scw->kt * scw->kh * scw->kw, 1);
        EXPECT("sc_weight cout", scw->cout, w->cout);
        EXPECT("sc_in.c vs sc_weight cin", a->sc_in->c, scw->cin);
        EXPECT("sc_in.f (conv frames)", a->sc_in->f, nf);
        EXPECT("sc_in.h", a->sc_in->h, a->out.h);
        EXPECT("sc_in.w", a->sc_in->w, a->out.w);
        if (scb) {
            if (scb->kind != W22_WK_VECTOR) return w22_fail(W22_ERR_INVALID_ARG, "cuda conv: sc_bias is not a vector");
            EXPECT("sc_bias length", scb->n, w->cout);
        }
    }
    const w22_view *dup = a->dup_in;
    if (dup) {
        if (!a->upsample || a->residual || a->time_split)
            return w22_fail(W22_ERR_INVALID_ARG, "cuda conv: a DupUp residual (dup_in) needs upsample, and no residual "
                            "or time_split (upsample %d, residual %d, time_split %d)", a->upsample,
                            a->residual != NULL, a->time_split);
        EXPECT("dup_in.es", dup->es, 2);
        W22_TRY(w22_dupup_check("cuda conv (dup_in)", &a->out, dup, a->dup_ft, a->dup_first_single));
        W22_TRY(w22_cuda_check_view(c, dup, 0, "conv dup_in"));
    }
    W22_TRY(w22_cuda_check_view(c, &a->in, a->ks == 3 ? 1 : 0, "conv in"));
    W22_TRY(w22_cuda_check_view(c, &a->out, 0, "conv out"));
    if (a->residual) W22_TRY(w22_cuda_check_view(c, a->residual, 0, "conv residual"));
    if (a->sc_in) W22_TRY(w22_cuda_check_view(c, a->sc_in, 0, "conv sc_in"));

    w22_mm g;
    memset(&g, 0, sizeof g);
    g.F = nf;
    g.H = a->out.h;
    g.W = a->out.w;
    g.M = nf * a->out.h * a->out.w;
    g.N = w->cout;
    g.a = (const bf16 *)a->in.ptr;
    g.a_sf = a->in.sf, g.a_sh = a->in.sh, g.a_sw = a->in.sw;
    if (hist) {
        g.a_hist[0] = (const bf16 *)a->hist[0].ptr;
        g.a_hist[1] = (const bf16 *)a->hist[1].ptr;
        g.hist_n = 2;
    }
    g.cin = w->cin, g.kt = a->kt, g.ks = a->ks, g.upsample = a->upsample ? 1 : 0;
    g.pad_y = g.pad_x = a->ks / 2;
    g.b = (const bf16 *)w->dev;
    g.b_w = w->cout, g.b_sh = 0, g.b_sw = (long)a->kt * a->ks * a->ks * w->cin;
    if (a->sc_in) {
        g.sc = (const bf16 *)a->sc_in->ptr;
        g.sc_sf = a->sc_in->sf, g.sc_sh = a->sc_in->sh, g.sc_sw = a->sc_in->sw;
        g.sc_cin = scw->cin;
        g.scb = (const bf16 *)scw->dev;
        g.sc_bias = scb ? (const float *)scb->dev : NULL;
    }
    g.bias = bias ? (const float *)bias->dev : NULL;
    g.out = a->out.ptr;
    g.o_sf = a->out.sf, g.o_sh = a->out.sh, g.o_sw = a->out.sw;
    g.split_c = a->time_split ? a->out.c : 0;
    if (a->residual) {
        g.res = (const bf16 *)a->residual->ptr;
        g.r_sf = a->residual->sf, g.r_sh = a->residual->sh, g.r_sw = a->residual->sw;
    }
    const int phases = c->route.step == W22_CONV_PHASES; /* phase weights are made at upload for every upsample conv */
    /* the DupUp fused when every phase takes it (the one 9-tap GEMM without phases has high-resolution rows: not
     * there) */
    int fuse = dup && phases;
    for (int p = 0; p < 4 && fuse; p++) {
        w22_mm q = g;
        fuse = dup_phase(a, p >> 1, p & 1, &q);
    }
    if (phases) {
        /* nearest-2x + 3x3 as four 2x2 phase convs on the low-resolution grid (cuda_internal.h) */
        const int kv = 4 * w->cin;
        w22_mm q[4];
        for (int py = 0; py < 2; py++)
            for (int px = 0; px < 2; px++) {
                w22_mm *p = &q[py * 2 + px];
                *p = g;
                p->H = a->in.h, p->W = a->in.w, p->M = nf * a->in.h * a->in.w;
                p->ks = 2, p->upsample = 0, p->pad_y = 1 - py, p->pad_x = 1 - px;
                p->b = (const bf16 *)w->dev_phase + (size_t)(py * 2 + px) * w->cout * kv; /* phases contiguous */
                p->b_sw = kv;
                p->out = (char *)a->out.ptr + (py * a->out.sh + px * a->out.sw) * 2;
                p->o_sh = 2 * a->out.sh, p->o_sw = 2 * a->out.sw;
                if (a->residual) {
                    p->res = (const bf16 *)a->residual->ptr + py * a->residual->sh + px * a->residual->sw;
                    p->r_sh = 2 * a->residual->sh, p->r_sw = 2 * a->residual->sw;
                }
                if (a->sc_in) {
                    p->sc = (const bf16 *)a->sc_in->ptr + py * a->sc_in->sh + px * a->sc_in->sw;
                    p->sc_sh = 2 * a->sc_in->sh, p->sc_sw = 2 * a->sc_in->sw;
                }
                if (fuse) dup_phase(a, py, px, p); /* rows are the DupUp's input pixels: its own strides */
            }
        const char *what = fuse ? "conv (upsample phases + DupUp)" : "conv (upsample phases)";
        W22_TRY(w22_cuda_gemm_phases(c, q, what)); /* one launch where the TMA conv takes them (v16), else four */
    } else if (c->route.step == W22_CONV_WINOGRAD) {
        W22_TRY(w22_cuda_conv_winograd(c, a, w, &g));
    } else {
        W22_TRY(w22_cuda_weight_direct(c, (w22_cuda_weight *)w));
        g.b = (const bf16 *)w->dev;
        W22_TRY(w22_cuda_gemm(c, &g, "conv"));
    }
    if (dup && !fuse) {
        const int part = w22_cuda_prof_part_begin(c); /* W22_PROFILE=2 */
        W22_TRY(w22_cuda_dupup_add(b, a->out, *dup, a->dup_ft, a->dup_first_single));
        w22_cuda_prof_part_end(c, part, 0, 2.0 * 3 * a->out.f * a->out.h * a->out.w * a->out.c,
                               "dupup_add after the conv c%d %dx%d f%d", a->out.c, a->out.h, a->out.w, a->out.f);
        c->last_path = "conv, then the separate dupup_add";
        c->route.dup_separate = 1;
    }
    return W22_OK;
}
