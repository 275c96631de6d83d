/* The conv op: checks a w22_conv_args against backend.h's contract and lowers it to the implicit GEMM
 * (w22_mm), as route.h decides: the step (w22_route_conv_step), then each GEMM's kernel (w22_route_gemm) and the TMA
 * conv's launch. A conv with its history as partial sums (psum) goes to conv_psum.cu. An upsampling conv is four
 * phase GEMMs (2x2 convs on the low-resolution grid), run as one launch of the TMA wgmma kernel where it takes them
 * (w22_cuda_gemm_phases: one ramp and one part-empty last round instead of four), else as four GEMMs. Its DupUp
 * residual (dup_in) becomes the phase GEMMs' residual (lower.h's w22_lower_dup_phase); a map they do not take (no
 * Wan VAE's: the decoder's open refuses such configs) is refused before any launch, as is the dupup_add op (the
 * backend has no separate DupUp kernel: no decode of either VAE ran one, tests/test_census.c). */
#include <stdlib.h>
#include "cuda_internal.h"
#include "cuda_ops.h"
#include "lower.h"

static w22_status bad(const char *fmt_what, long got, long want) {
    return w22_fail(W22_ERR_BAD_SHAPE, "cuda conv: %s is %ld, expected %ld", fmt_what, got, want);
}
#define EXPECT(what, got, want)                                   \
    do {                                                          \
        if ((long)(got) != (long)(want)) return bad(what, got, want); \
    } while (0)

w22_status w22_cuda_conv(w22_backend *b, const w22_conv_args *a) {
    w22_cuda *c = cuda_of(b);
    if (!a || !a->weight) return w22_fail(W22_ERR_INVALID_ARG, "cuda conv: NULL args or weight");
    CU_ENTER(c);
    const w22_cuda_weight *w = (const w22_cuda_weight *)a->weight;
    if (w->kind != W22_WK_CONV) return w22_fail(W22_ERR_INVALID_ARG, "cuda conv: the weight is not a conv weight");
    memset(&c->route, 0, sizeof c->route); /* the decision this conv makes (route.h), for w22_backend_cuda_last_route */
    c->route.step = w22_route_conv_step(a, w->dev_phase != NULL, a->psum ? "psum" : w22_cuda_winograd_blocker(c, a, w));
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
        if (c->route.step != W22_CONV_PHASES || !w22_lower_dup_fusable(a->out.c, dup->c, a->dup_ft))
            return w22_cuda_dupup_add(b, a->out, *dup, a->dup_ft, a->dup_first_single); /* the refusal */
    }
    W22_TRY(w22_cuda_check_view(c, &a->in, a->ks == 3 ? 1 : 0, "conv in"));
    W22_TRY(w22_cuda_check_view(c, &a->out, 0, "conv out"));
    if (a->residual) W22_TRY(w22_cuda_check_view(c, a->residual, 0, "conv residual"));
    if (a->sc_in) W22_TRY(w22_cuda_check_view(c, a->sc_in, 0, "conv sc_in"));

    /* the GEMMs (lower.h: the lowering test_route's census runs too) */
    w22_conv_operands o = {w->cin, w->cout, (const bf16 *)w->dev, (const bf16 *)w->dev_phase,
                           bias ? (const float *)bias->dev : NULL, scw ? scw->cin : 0,
                           scw ? (const bf16 *)scw->dev : NULL, scb ? (const float *)scb->dev : NULL};
    w22_mm g;
    w22_lower_direct(a, &o, &g);
    const int phases = c->route.step == W22_CONV_PHASES; /* phase weights are made at upload for every upsample conv */
    if (phases) {
        /* nearest-2x + 3x3 as four 2x2 phase convs on the low-resolution grid, the DupUp fused where every phase
         * takes it (the one 9-tap GEMM without phases has high-resolution rows: not there) */
        w22_mm q[4];
        const int fuse = w22_lower_phases(a, &o, &g, q); /* every phase takes a DupUp (checked above) */
        c->route.dup_fused = fuse;
        const char *what = fuse ? "conv (upsample phases + DupUp)" : "conv (upsample phases)";
        W22_TRY(w22_cuda_gemm_phases(c, q, what)); /* one launch where the TMA conv takes them (v16), else four */
    } else if (c->route.step == W22_CONV_WINOGRAD) {
        W22_TRY(w22_cuda_conv_winograd(c, a, w, &g));
    } else {
        W22_TRY(w22_cuda_gemm(c, &g, "conv")); /* g.b as lowered: a first chunk's one frame reads the last tap's rows */
    }
    return W22_OK;
}

/* The dupup_add op (backend.h): the DupUp runs fused into the upsample conv's phases (above); the plan calls this op
 * only where a conv did not take it, which on CUDA is never (w22_backend_cuda_model_ok refuses such configs). */
w22_status w22_cuda_dupup_add(w22_backend *b, w22_view out, w22_view in, int ft, int first_single) {
    (void)b, (void)first_single;
    return w22_fail(W22_ERR_UNSUPPORTED, "cuda dupup_add (%d -> %d channels, %d time copies): the CUDA backend adds a "
                    "DupUp only in its upsample conv's phases, for the maps of both Wan VAEs (lower.h's "
                    "w22_lower_dup_fusable); decode this config on the CPU backend", in.c, out.c, ft);
}
