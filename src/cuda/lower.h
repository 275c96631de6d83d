/* A conv's GEMMs (w22_mm) from its w22_conv_args, as the CUDA backend runs them: the direct implicit GEMM, an upsample's
 * four 2x2 phase GEMMs with the DupUp residual fused where its channel map allows, the partial-sums GEMM of the head.
 * conv.cu and conv_psum.cu lower through these, after their checks; tests/test_route.c lowers the decoder's convs
 * through the same functions (its census of every latent size), so that what it routes is what the backend would
 * launch, not a copy of it (issue 47.11). Pure, in a header C compiles too: the weights' device pointers come in
 * w22_conv_operands, and nothing is read through any pointer. route.h then says which kernel takes each GEMM. */
#ifndef W22_CUDA_LOWER_H
#define W22_CUDA_LOWER_H

#include <limits.h>
#include <string.h>
#include "backend.h"
#include "mm.h"

/* What of a conv's prepared weights the lowering needs (the CUDA backend's w22_cuda_weight: conv.cu fills it) */
typedef struct {
    int cin, cout;
    const bf16 *dev;       /* [cout][kt ks ks cin], K-major (the psum head's: [3 cout (+1)][9 cin]) */
    const bf16 *dev_phase; /* an upsample conv's four phase blocks [4][cout][4 cin], or NULL */
    const float *bias;     /* fp32 [cout] or NULL */
    int sc_cin;            /* the 1x1 shortcut's (sc_in): its input channels, weights, bias */
    const bf16 *sc_dev;
    const float *sc_bias;
} w22_conv_operands;

/* The conv's frames of output: its input's, less kt - 1 without history frames (backend.h) */
static inline int w22_lower_frames(const w22_conv_args *a) {
    return a->hist[0].ptr ? a->in.f : a->in.f - a->kt + 1;
}

/* Whether a conv runs as its last temporal tap alone: one output frame whose two history frames are zero
 * (backend.h's hist_zero: a stage's first chunk), so its other two taps add exact zeros; a T = 1 decode runs every
 * 3x3x3 conv so, 9 of its 27 taps. More frames would need a GEMM per frame (frame t's taps from 2 - t): not done. */
static inline int w22_lower_zero_hist(const w22_conv_args *a) {
    return a->kt == 3 && a->hist[0].ptr && a->hist_zero == 2 && a->in.f == 1 && !a->upsample && !a->time_split &&
           !a->psum;
}

/* The one implicit GEMM of a conv (the direct step; Winograd starts from it too): M = the output's pixels of its
 * frames, N = cout, K = kt ks ks cin in (dt, dy, dx, c) order; the history frames read in place; the shortcut as extra
 * K; the residual and bias in the epilogue. */
static inline void w22_lower_direct(const w22_conv_args *a, const w22_conv_operands *o, w22_mm *g) {
    const int nf = w22_lower_frames(a);
    memset(g, 0, sizeof *g);
    g->F = nf;
    g->H = a->out.h;
    g->W = a->out.w;
    g->M = nf * a->out.h * a->out.w;
    g->N = o->cout;
    g->a = (const bf16 *)a->in.ptr;
    g->a_sf = a->in.sf, g->a_sh = a->in.sh, g->a_sw = a->in.sw;
    if (a->hist[0].ptr) {
        g->a_hist[0] = (const bf16 *)a->hist[0].ptr;
        g->a_hist[1] = (const bf16 *)a->hist[1].ptr;
        g->hist_n = 2;
    }
    g->cin = o->cin, g->kt = a->kt, g->ks = a->ks, g->upsample = a->upsample ? 1 : 0;
    g->pad_y = g->pad_x = a->ks / 2;
    g->b = o->dev;
    g->b_w = o->cout, g->b_sh = 0, g->b_sw = (long)a->kt * a->ks * a->ks * o->cin;
    if (a->sc_in) {
        g->sc = (const bf16 *)a->sc_in->ptr;
        g->sc_sf = a->sc_in->sf, g->sc_sh = a->sc_in->sh, g->sc_sw = a->sc_in->sw;
        g->sc_cin = o->sc_cin;
        g->scb = o->sc_dev;
        g->sc_bias = o->sc_bias;
    }
    g->bias = o->bias;
    g->out = a->out.ptr;
    g->o_sf = a->out.sf, g->o_sh = a->out.sh, g->o_sw = a->out.sw;
    g->split_c = a->time_split ? a->out.c : 0;
    if (a->residual) {
        g->res = (const bf16 *)a->residual->ptr;
        g->r_sf = a->residual->sf, g->r_sh = a->residual->sh, g->r_sw = a->residual->sw;
    }
    if (w22_lower_zero_hist(a)) { /* the weight's last temporal tap alone: its rows keep their stride */
        g->kt = 1, g->hist_n = 0, g->a_hist[0] = g->a_hist[1] = NULL;
        g->b = o->dev + 2L * a->ks * a->ks * o->cin;
    }
}

/* The DupUp residual of upsample phase (py, px) as w22_mm's r_tsh .. r_coff, or 0 when the epilogue cannot take this
 * DupUp. The phase GEMM's row (T, y, x) is the DupUp input pixel (y, x) of frame (T + ft - 1) >> 1 with first_single,
 * else T >> 1 (ft 2; T with ft 1), time copy the rest, and output channel o reads input channel (o ft 4 + tc 4 +
 * py 2 + px) / r (backend.h), r = cout ft 4 / cin. When r divides ft 4 that is o cs + (tc 4 + py 2 + px) / r with
 * cs = ft 4 / r; the epilogue takes cs 1 or 2 and an offset that no time copy changes (one GEMM row serves every time
 * copy of its frame only through T). The model's two: ft 2, r 8 (cin = cout): o; ft 1, r 2 (cin = 2 cout): 2 o + py.
 * Others (cs 4 or 8, or ft 2 with r 4: the offset is tc: configs of another dim_mult) the CUDA backend does not take
 * (it has no DupUp outside these phases; its open refuses such configs). w22_lower_dup_sub_ok: phase sub = py 2 + px
 * of the map r at ft. */
static inline int w22_lower_dup_sub_ok(int r, int ft, int sub) {
    if (r <= 0 || (ft * 4) % r || ft * 4 / r > 2) return 0;
    for (int tc = 1; tc < ft; tc++)
        if ((tc * 4 + sub) / r != sub / r) return 0;
    return !(ft * 4 / r == 1 && sub / r); /* never (cs 1: r = ft 4 > sub); the pair store's bf16x2 load needs it */
}
/* Whether every phase takes the DupUp of an up block mapping cin channels to cout at ft time copies: the CUDA
 * backend runs no other (its open refuses a config of another map: w22_backend_cuda_model_ok) */
static inline int w22_lower_dup_fusable(int cout, int cin, int ft) {
    const int r = cin > 0 ? cout * ft * 4 / cin : 0;
    for (int sub = 0; sub < 4; sub++)
        if (!w22_lower_dup_sub_ok(r, ft, sub)) return 0;
    return 1;
}
static inline int w22_lower_dup_phase(const w22_conv_args *a, int py, int px, w22_mm *q) {
    const int ft = a->dup_ft, r = a->out.c * ft * 4 / a->dup_in->c, sub = py * 2 + px;
    if (!w22_lower_dup_sub_ok(r, ft, sub)) return 0;
    const int cs = ft * 4 / r, coff = sub / r;
    q->res = (const bf16 *)a->dup_in->ptr; /* the vector loads' base: r_coff is applied in the pick */
    q->r_sf = a->dup_in->sf, q->r_sh = a->dup_in->sh, q->r_sw = a->dup_in->sw;
    q->r_tsh = ft == 2, q->r_toff = a->dup_first_single ? ft - 1 : 0;
    q->r_csh = cs == 2, q->r_coff = coff;
    return 1;
}

/* An upsampling conv (nearest 2x, then 3x3) as four 2x2 phase convs on the low-resolution grid, from its direct GEMM
 * g (w22_lower_direct): phase py 2 + px writes output rows 2y + py, columns 2x + px, with the phase weights (made at
 * upload, contiguous) and pads 1 - py, 1 - px. Returns 1 when the DupUp residual (dup_in) is fused into every
 * phase's epilogue, 0 when it runs as the separate kernel after the conv (or there is none). */
static inline int w22_lower_phases(const w22_conv_args *a, const w22_conv_operands *o, const w22_mm *g, w22_mm q[4]) {
    const int nf = w22_lower_frames(a), kv = 4 * o->cin;
    int fuse = a->dup_in != NULL;
    for (int p = 0; p < 4 && fuse; p++) {
        w22_mm t = *g;
        fuse = w22_lower_dup_phase(a, p >> 1, p & 1, &t);
    }
    for (int py = 0; py < 2; py++)
        for (int px = 0; px < 2; px++) {
            w22_mm *p = &q[py * 2 + px];
            *p = *g;
            p->H = a->in.h, p->W = a->in.w, p->M = nf * a->in.h * a->in.w;
            p->ks = 2, p->upsample = 0, p->pad_y = 1 - py, p->pad_x = 1 - px;
            p->b = o->dev_phase + (size_t)(py * 2 + px) * o->cout * kv; /* the phases contiguous */
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
            if (fuse) w22_lower_dup_phase(a, py, px, p); /* rows are the DupUp's input pixels: its own strides */
        }
    return fuse;
}

/* The head's partial-sums GEMM (the causal history as partial sums, conv_psum.cu): the three temporal taps of each
 * output channel as one 3x3 GEMM over the fresh frames, N = a->psum_tmp.c (3 cout, one more where cout is odd: even),
 * fp32 into psum_tmp; conv_psum.cu's combine kernel then adds the history's sums. */
static inline void w22_lower_psum(const w22_conv_args *a, const w22_conv_operands *o, w22_mm *g) {
    const w22_view *tmp = &a->psum_tmp;
    memset(g, 0, sizeof *g);
    g->F = a->in.f, g->H = a->out.h, g->W = a->out.w;
    g->M = g->F * g->H * g->W;
    g->N = tmp->c;
    g->a = (const bf16 *)a->in.ptr;
    g->a_sf = a->in.sf, g->a_sh = a->in.sh, g->a_sw = a->in.sw;
    g->cin = o->cin, g->kt = 1, g->ks = 3, g->pad_y = g->pad_x = 1;
    g->b = o->dev; /* row n = o * 3 + dt at n * 9 cin: the taps of (o, dt) */
    g->b_w = g->N, g->b_sh = 0, g->b_sw = 9L * o->cin;
    g->out = tmp->ptr;
    g->out_f32 = 1;
    g->o_sf = tmp->sf, g->o_sh = tmp->sh, g->o_sw = tmp->sw;
}

/* A Winograd conv's 1x1 shortcut (winograd.cu): from the conv's direct GEMM g (w22_lower_direct, g->sc set), its own
 * GEMM with the shortcut's bias and the residual, into g's output first; the Winograd output transform then adds the
 * transformed conv to it. */
static inline void w22_lower_wino_shortcut(const w22_mm *g, w22_mm *q) {
    memset(q, 0, sizeof *q);
    q->F = g->F, q->H = g->H, q->W = g->W, q->M = g->M, q->N = g->N;
    q->a = g->sc, q->a_sf = g->sc_sf, q->a_sh = g->sc_sh, q->a_sw = g->sc_sw;
    q->cin = g->sc_cin, q->kt = 1, q->ks = 1;
    q->b = g->scb, q->b_w = g->N, q->b_sw = g->sc_cin;
    q->bias = g->sc_bias;
    q->out = g->out, q->o_sf = g->o_sf, q->o_sh = g->o_sh, q->o_sw = g->o_sw;
    q->res = g->res, q->r_sf = g->r_sf, q->r_sh = g->r_sh, q->r_sw = g->r_sw;
}

/* Winograd F(4x4, 3x3)'s 36 component GEMMs for a band of hh tile rows (winograd.cu's wino_band) as one batch GEMM
 * in fp16 (w22_mm.f16): component xi reads its transformed input V + xi vcs (F + kt - 1 frames of hh x w4 tiles, cin;
 * the kt temporal taps as K = kt cin: 3, or 1 for the last tap alone, w22_lower_zero_hist) and its weights u + xi cout
 * 3 cin (the last kt of the 3 taps), and writes M + xi mcs (F frames, cout). The
 * band's height keeps 36 mcs in an int (route.h's w22_route_wino_band_rows). The pointers go in as the 2-byte
 * elements they are (mm.h's bf16 type names the element size; f16 says how to read them). */
static inline void w22_lower_wino_batch(int F, int kt, int hh, int w4, int ci, int co, const void *u, const void *V,
                                        void *M, w22_mm *q) {
    const long mcs = (long)F * hh * w4 * co; /* a component's output elements */
    memset(q, 0, sizeof *q);
    q->F = F, q->H = hh, q->W = w4, q->M = F * hh * w4, q->N = co;
    q->a = (const bf16 *)V, q->a_sf = (long)hh * w4 * ci, q->a_sh = (long)w4 * ci, q->a_sw = ci;
    q->cin = ci, q->kt = kt, q->ks = 1;
    q->b = (const bf16 *)u + (3L - kt) * ci, q->b_w = co, q->b_sw = 3L * ci;
    q->out = M, q->o_sf = (long)hh * w4 * co, q->o_sh = (long)w4 * co, q->o_sw = co;
    q->f16 = 1;
    q->batch = 36, q->a_frames = F + kt - 1;
    for (int xi = 0; xi < 36; xi++) q->ph_o[xi] = (int)(xi * mcs);
}

/* The attention's two products for a band of nr query rows of width qw (attention.cu): the scores S = Q Kp^T (fp32,
 * N = Pp: the frame's P pixels rounded up to 8, Kp the packed keys, one dense [Pp][C] block), and after the softmax
 * O = Pm Vt^T (K = Pp, B = the transposed values Vt [C][Pp]) into the output rows. */
static inline void w22_lower_attn_scores(const bf16 *q, long q_sh, long q_sw, int nr, int qw, int C, int Pp,
                                         const bf16 *Kp, float *S, w22_mm *g) {
    memset(g, 0, sizeof *g);
    g->M = nr * qw, g->N = Pp, g->F = 1, g->H = nr, g->W = qw;
    g->a = q, g->a_sf = 0, g->a_sh = q_sh, g->a_sw = q_sw;
    g->cin = C, g->kt = 1, g->ks = 1;
    g->b = Kp, g->b_w = Pp, g->b_sh = 0, g->b_sw = C;
    g->out = S, g->out_f32 = 1, g->o_sf = 0, g->o_sh = (long)qw * Pp, g->o_sw = Pp;
}
static inline void w22_lower_attn_values(const bf16 *Pm, int nr, int qw, int C, int Pp, const bf16 *Vt, bf16 *o,
                                         long o_sh, long o_sw, w22_mm *g) {
    memset(g, 0, sizeof *g);
    g->M = nr * qw, g->N = C, g->F = 1, g->H = nr, g->W = qw;
    g->a = Pm, g->a_sf = 0, g->a_sh = (long)qw * Pp, g->a_sw = Pp;
    g->cin = Pp, g->kt = 1, g->ks = 1;
    g->b = Vt, g->b_w = C, g->b_sh = 0, g->b_sw = Pp;
    g->out = o, g->o_sf = 0, g->o_sh = o_sh, g->o_sw = o_sw;
}

#endif
