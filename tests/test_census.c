/* Issue 47.11's census through the real plan: exec.c decodes on a recording backend (no arithmetic, fake 256-byte
 * aligned addresses, as cudaMalloc gives), and every conv and attention the plan issues is lowered by lower.h and
 * routed by route.h as the CUDA backend would (conv.cu's step: partial sums, upsample phases, Winograd at the default
 * threshold, direct; the phases as one launch of the TMA conv where route.h takes them; a batch as one launch or
 * apart), with the arguments exec.c passes, not a test's copy of them (test_route.c's census walks every size with
 * its own). For both VAEs, at the sizes below (every latent size from 1 to 48 on a side, the sizes users decode, odd
 * ones to 160), T = 3 (a first frame, a pass of two and one of one), on both kernel paths: no GEMM on the scalar
 * kernel, and the GEMM kernels any decode reaches printed per path (what issue 47.10's deletions must rest on: a
 * kernel no decode reaches is not compiled in). Then each rank of 2, 3 and 4 (a comm that moves nothing): the ranks'
 * row slices, and the edge rows exec.c's conv_with_halo runs apart beside the interior's conv. The plain ops too
 * (norms, copies, zeros, borders, DupUps: route.h's section 4), path-independent, pinned below. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "conv_gemms.h"
#include "dist/comm.h"
#include "plan/plan_internal.h"
#include "testutil.h"

/* ---- the recording backend ---- */
static uintptr_t next_addr;
static w22_status rec_alloc(w22_backend *b, size_t bytes, void **ptr) {
    (void)b;
    *ptr = (void *)next_addr;
    next_addr += (bytes + 255) & ~(uintptr_t)255;
    next_addr += 256; /* no two buffers adjacent */
    return W22_OK;
}
static void rec_free(w22_backend *b, void *p) { (void)b, (void)p; }

typedef struct {
    w22_weight_kind kind;
    int cout, cin, kt, kh, kw, phases;
    const bf16 *dev, *dev_phase;
} rec_weight;
static w22_status rec_upload(w22_backend *b, w22_weight_kind kind, w22_wsrc src, const int64_t *shape, int ndim,
                             w22_bweight **out) {
    (void)src;
    rec_weight *w = calloc(1, sizeof *w);
    if (!w) return W22_ERR_OUT_OF_MEMORY;
    w->kind = kind;
    if (kind == W22_WK_CONV) {
        w->cout = (int)shape[0], w->cin = (int)shape[1];
        w->kt = ndim == 5 ? (int)shape[2] : 1;
        w->kh = (int)shape[ndim - 2], w->kw = (int)shape[ndim - 1];
        w->phases = ndim == 4 && w->kh == 3 && w->kw == 3; /* cuda_backend.cu: every 2D 3x3 conv (the resamplers) */
    } else {
        w->cout = (int)shape[0];
    }
    void *p;
    rec_alloc(b, 1 << 20, &p);
    w->dev = (const bf16 *)p;
    rec_alloc(b, 1 << 20, &p);
    w->dev_phase = w->phases ? (const bf16 *)p : NULL;
    *out = (w22_bweight *)w;
    return W22_OK;
}
static void rec_weight_free(w22_backend *b, w22_bweight *w) { (void)b, free(w); }
static size_t rec_weight_bytes(const w22_bweight *w) { (void)w; return 0; }
static w22_status rec_bytes(w22_backend *b, void *d, const void *s, size_t n) { (void)b, (void)d, (void)s, (void)n; return W22_OK; }
/* the plain ops' kernels (route.h's section 4), path-independent: the norm's kernel, and for the copy, the zero, the
 * border and the DupUp whether they run 8 channels a thread (1) or one (0) */
enum { OP_COPY, OP_ZERO, OP_BORDER, OP_DUPUP, OP_N };
static const char *const op_names[OP_N] = {"copy", "zero", "zero_border", "dupup_add"};
static const char *const norm_names[W22_NORM_KERNELS + 1] = {"rows<1>", "rows<2>", "rows<4>", "group<16>",
                                                             "group<32>", "pixel", "none"};
static long norm_tally[W22_NORM_KERNELS + 1], op_tally[OP_N][2];
static const char *where; /* the case, for a failure's message */
static void plain_one(int op, int vec, const w22_view *v) {
    op_tally[op][vec]++;
    if (!vec && op_tally[op][0] <= 3)
        printf("  %s: %s of %dx%dx%dx%d (strides %ld %ld %ld) one channel a thread\n", where, op_names[op], v->f, v->h,
               v->w, v->c, v->sf, v->sh, v->sw);
}
static w22_status rec_zero(w22_backend *b, w22_view v) {
    (void)b;
    plain_one(OP_ZERO, w22_route_copy(&v, NULL), &v);
    return W22_OK;
}
static w22_status rec_border(w22_backend *b, w22_view v) {
    (void)b;
    plain_one(OP_BORDER, w22_route_vec8(&v), &v);
    return W22_OK;
}
static w22_status rec_copy(w22_backend *b, w22_view d, w22_view s) {
    (void)b;
    plain_one(OP_COPY, w22_route_copy(&d, &s), &d);
    return W22_OK;
}
static w22_status rec_latents(w22_backend *b, const void *z, w22_dtype zt, int C, int T, int H, int W, int t0, int y0,
                              w22_view out) {
    (void)b, (void)z, (void)zt, (void)C, (void)T, (void)H, (void)W, (void)t0, (void)y0, (void)out;
    return W22_OK;
}
static w22_status rec_norm(w22_backend *b, w22_view in, w22_view out, const w22_bweight *g, int silu) {
    (void)b, (void)silu;
    const w22_norm_kernel k = w22_route_norm(&in, &out, ((const rec_weight *)g)->dev);
    if (k == W22_NORM_NONE && norm_tally[k] < 3)
        CHECK(0, "%s: an rmsnorm of %dx%dx%dx%d no norm kernel takes", where, in.f, in.h, in.w, in.c);
    norm_tally[k]++;
    return W22_OK;
}
static w22_status rec_dupup(w22_backend *b, w22_view out, w22_view in, int ft, int first) {
    (void)b, (void)in, (void)ft, (void)first;
    plain_one(OP_DUPUP, 1, &out); /* exec.c's dupup_add, which the CUDA backend refuses */
    return W22_OK;
}
static w22_status rec_unpatchify(w22_backend *b, w22_view in, int p, w22_video_dst dst) {
    (void)b, (void)in, (void)p, (void)dst;
    return W22_OK;
}
static w22_status rec_b(w22_backend *b) { (void)b; return W22_OK; }
static w22_status rec_fill(w22_backend *b, void *p, size_t n, int v) { (void)b, (void)p, (void)n, (void)v; return W22_OK; }
static w22_status rec_copy_begin(w22_backend *b, void *d, const void *s, size_t n, int tag) {
    (void)b, (void)d, (void)s, (void)n, (void)tag;
    return W22_OK;
}
static w22_status rec_copy_wait(w22_backend *b, int tag) { (void)b, (void)tag; return W22_OK; }

/* the tally: GEMMs per path and kernel, and what fell back */
static long tally[2][W22_GEMM_KERNELS], phases_one, batches[3], gemms, scalar;

static void route_one(const w22_mm *g, const char *what, int hopper_only) {
    for (int hopper = 0; hopper <= 1; hopper++) {
        if (hopper_only >= 0 && hopper != hopper_only) continue;
        const char *why = NULL;
        w22_gemm_kernel k;
        if (g->batch) {
            const w22_batch_launch how = w22_route_batch(g, hopper);
            batches[how]++;
            if (how == W22_BATCH_TMA) k = W22_GEMM_TMA;
            else if (how == W22_BATCH_MMA) k = w22_route_mma_tile(g->N);
            else {
                w22_mm one = *g;
                one.batch = 0, one.a_frames = 0;
                memset(one.ph_o, 0, sizeof one.ph_o);
                k = w22_route_gemm(&one, hopper, &why);
            }
        } else {
            k = w22_route_gemm(g, hopper, &why);
        }
        tally[hopper][k]++;
        gemms++;
        if (k == W22_GEMM_SCALAR && scalar++ < 5)
            CHECK(0, "census: %s, the %s path: %s (M %d, N %d, cin %d) on the scalar kernel (%s)", where,
                  hopper ? "Hopper" : "portable", what, g->M, g->N, g->cin, why ? why : "-");
    }
}

static w22_conv_operands operands_of(const w22_conv_args *a) {
    const rec_weight *w = (const rec_weight *)a->weight, *sw = (const rec_weight *)a->sc_weight;
    w22_conv_operands o = {w->cin, w->cout, w->dev, w->dev_phase, a->bias ? (const float *)w->dev : NULL,
                           sw ? sw->cin : 0, sw ? sw->dev : NULL, NULL};
    return o;
}

/* conv.cu's step and lowering (conv_gemms.h), then the routes */
static w22_status rec_conv(w22_backend *b, const w22_conv_args *a) {
    (void)b;
    const rec_weight *w = (const rec_weight *)a->weight;
    const w22_conv_operands o = operands_of(a);
    for (int hopper = 0; hopper <= 1; hopper++) { /* each path lowers at its own Winograd threshold */
        lowered gs[5];
        const int n = conv_gemms(a, &o, w->kt, w->kh, w->kw, w->phases, hopper, "a direct conv", gs);
        if (hopper && n == 4 && !w22_route_phases_blocker((const w22_mm[4]){gs[0].g, gs[1].g, gs[2].g, gs[3].g}, 1))
            phases_one++; /* the Hopper path's one launch */
        for (int i = 0; i < n; i++) route_one(&gs[i].g, gs[i].what, hopper);
    }
    if (conv_dup_apart) plain_one(OP_DUPUP, 1, &a->out); /* a DupUp the phases do not fuse: conv.cu refuses it */
    return W22_OK;
}

static w22_status rec_attention(w22_backend *b, w22_view q, w22_view k, w22_view v, w22_view out, void *work,
                                size_t work_bytes) {
    (void)k, (void)v, (void)work, (void)work_bytes;
    const int C = q.c, P = k.h * k.w, Pp = (P + 7) & ~7;
    void *s, *pm, *vt, *kp;
    rec_alloc(b, 1 << 20, &s), rec_alloc(b, 1 << 20, &pm), rec_alloc(b, 1 << 20, &vt), rec_alloc(b, 1 << 20, &kp);
    for (int f = 0; f < q.f; f++) {
        w22_mm g;
        w22_lower_attn_scores((const bf16 *)q.ptr + f * q.sf, q.sh, q.sw, q.h, q.w, C, Pp, (const bf16 *)kp,
                              (float *)s, &g);
        route_one(&g, "the attention's Q K^T", -1);
        w22_lower_attn_values((const bf16 *)pm, q.h, q.w, C, Pp, (const bf16 *)vt, (bf16 *)out.ptr + f * out.sf,
                              out.sh, out.sw, &g);
        route_one(&g, "the attention's P V", -1);
    }
    return W22_OK;
}

/* the ranks' comm: nothing moves (the census reads no data) */
static w22_status comm_exchange(w22_comm *c, w22_backend *b, const w22_xfer *x, int n) {
    (void)c, (void)b, (void)x, (void)n;
    return W22_OK;
}
static w22_status comm_agree(w22_comm *c, int *ok) { (void)c, (void)ok; return W22_OK; }
static void comm_abort(w22_comm *c, const char *why) { (void)c, (void)why; }
static const w22_comm_ops census_comm_ops = {comm_exchange, comm_agree, comm_abort, NULL};

static int deliver_none(w22_decoder *d, const void *staging, int m) { (void)d, (void)staging, (void)m; return 0; }

static w22_backend_ops rec_ops;
static void ops_init(void) {
    rec_ops.name = "census";
    rec_ops.elem_size = 2;
    rec_ops.alloc = rec_alloc, rec_ops.free = rec_free;
    rec_ops.weight_upload = rec_upload, rec_ops.weight_free = rec_weight_free, rec_ops.weight_bytes = rec_weight_bytes;
    rec_ops.to_host = rec_bytes, rec_ops.from_host = rec_bytes, rec_ops.copy_bytes = rec_bytes;
    rec_ops.zero = rec_zero, rec_ops.copy = rec_copy, rec_ops.latents_in = rec_latents;
    rec_ops.conv = rec_conv, rec_ops.rmsnorm = rec_norm, rec_ops.attention = rec_attention;
    rec_ops.dupup_add = rec_dupup, rec_ops.unpatchify = rec_unpatchify, rec_ops.sync = rec_b;
    rec_ops.zero_border = rec_border, rec_ops.fill = rec_fill;
    rec_ops.copy_begin = rec_copy_begin, rec_ops.copy_wait = rec_copy_wait;
    rec_ops.side_begin = rec_b, rec_ops.side_end = rec_b, rec_ops.side_join = rec_b; /* the halo's side queue */
}

/* A decoder of cfg's model on the recording backend, its weights "uploaded" (shapes only) */
static w22_decoder *open_rec(w22_backend *b, const w22_config *cfg, w22_comm *comm) {
    w22_decoder *d = calloc(1, sizeof *d);
    w22_model_build(cfg, &d->model);
    d->backend = b, d->frames_per_pass = 2; /* decoder.c's default */
    d->comm = comm, d->rank = comm ? comm->rank : 0, d->world = comm ? comm->world : 1;
    d->rank_rows = calloc((size_t)d->world + 1, sizeof *d->rank_rows);
    d->rank_off = calloc((size_t)d->world, sizeof *d->rank_off);
    d->rank_bytes = calloc((size_t)d->world, sizeof *d->rank_bytes);
    for (int i = 0; i < d->model.nweights; i++) {
        const w22_weight_desc *wd = &d->model.weights[i];
        const w22_weight_kind kind = (wd->is_gamma || wd->ndim == 1) ? W22_WK_VECTOR : W22_WK_CONV;
        w22_wsrc none = {NULL, W22_DTYPE_F32, -1};
        CHECK_OK(rec_upload(b, kind, none, wd->shape, kind == W22_WK_VECTOR ? 1 : wd->ndim, &d->wt[i]));
    }
    d->deliver = deliver_none;
    return d;
}

/* One decode of T = 3 at latents h x w through exec.c, its GEMMs routed (label: the case, for a failure) */
static void census_decode(w22_decoder *d, int h, int w, const char *label) {
    where = label;
    next_addr = (uintptr_t)0x100000000000ull;
    w22_status s = w22_plan_prepare(d, h, w);
    CHECK(s == W22_OK, "%s: the plan: %s", where, w22_last_error());
    if (s != W22_OK) return;
    d->z = (const void *)(uintptr_t)0x7f0000000000ull, d->zt = W22_DTYPE_BF16, d->T = 3;
    w22_video_shape(&d->model.cfg, 3, h, w, &d->video_frames, &d->video_h, &d->video_w);
    s = w22_plan_run(d);
    CHECK(s == W22_OK, "%s: the decode: %s", where, w22_last_error());
}

static void close_rec(w22_decoder *d) {
    w22_plan_release(d);
    for (int i = 0; i < d->model.nweights; i++) free(d->wt[i]);
    free(d->rank_rows), free(d->rank_off), free(d->rank_bytes);
    free(d);
}

int main(void) {
    ops_init();
    w22_backend b;
    memset(&b, 0, sizeof b);
    b.ops = &rec_ops;
    b.threads = 1;
    static const int users[][2] = {{44, 80}, {80, 44}, {45, 80}, {30, 52}, {52, 30}, {64, 64}, {68, 120}, {44, 78},
                                   {45, 45}, {45, 81}, {33, 57}, {60, 104}, {90, 160}, {135, 240}, {135, 256},
                                   {101, 159}, {127, 127}, {159, 33}, {160, 160}};
    for (int mi = 0; mi < 2; mi++) {
        w22_config cfg;
        if (mi) w22_config_wan21(&cfg);
        else w22_config_default(&cfg);
        w22_decoder *d = open_rec(&b, &cfg, NULL);
        long before = gemms;
        const int nsizes = 48 * 48 + (int)(sizeof users / sizeof users[0]);
        for (int i = 0; i < nsizes; i++) {
            const int h = i < 2304 ? i / 48 + 1 : users[i - 2304][0], w = i < 2304 ? i % 48 + 1 : users[i - 2304][1];
            char buf[96];
            snprintf(buf, sizeof buf, "%s latents %dx%d", mi ? "Wan2.1" : "Wan2.2", h, w);
            census_decode(d, h, w, buf);
        }
        printf("%s: %ld GEMMs routed at %d sizes (both paths)\n", mi ? "Wan2.1" : "Wan2.2 TI2V-5B", gemms - before,
               nsizes);
        close_rec(d);
        /* the ranks: each of 2, 3 and 4 at latent heights from the world up (a row each at least), a few widths */
        before = gemms;
        int cases = 0;
        for (int world = 2; world <= 4; world++)
            for (int rank = 0; rank < world; rank++) {
                w22_comm comm = {&census_comm_ops, rank, world, NULL};
                d = open_rec(&b, &cfg, &comm);
                for (int h = world; h <= 48; h += h < 12 ? 1 : 7)
                    for (int wi = 0; wi < 3; wi++) {
                        const int w = wi == 0 ? 7 : wi == 1 ? 30 : 80;
                        char buf[96];
                        snprintf(buf, sizeof buf, "%s latents %dx%d, rank %d of %d", mi ? "Wan2.1" : "Wan2.2", h, w,
                                 rank, world);
                        census_decode(d, h, w, buf);
                        cases++;
                    }
                close_rec(d);
            }
        printf("%s: %ld GEMMs routed in %d rank slices (both paths)\n", mi ? "Wan2.1" : "Wan2.2 TI2V-5B",
               gemms - before, cases);
    }
    CHECK(gemms > 0 && scalar == 0, "census: %ld of %ld GEMMs on the scalar kernel", scalar, gemms);
    for (int hopper = 1; hopper >= 0; hopper--) {
        printf("the %s path:", hopper ? "Hopper" : "portable");
        for (int k = 0; k < W22_GEMM_KERNELS; k++) printf(" %s %ld%s", w22_route_kernel_name(k), tally[hopper][k],
                                                          k + 1 < W22_GEMM_KERNELS ? "," : "\n");
    }
    printf("upsample phases as one launch on the Hopper path: %ld; batches (both paths): TMA %ld, mma %ld, apart %ld\n",
           phases_one, batches[W22_BATCH_TMA], batches[W22_BATCH_MMA], batches[W22_BATCH_APART]);
    /* what the decoder reaches on each path, pinned: the TMA conv on the Hopper path only; the scalar kernel nowhere */
    CHECK(tally[0][W22_GEMM_TMA] == 0, "the portable path reached the Hopper-only TMA conv %ld times",
          tally[0][W22_GEMM_TMA]);
    CHECK(tally[1][W22_GEMM_TMA] > 0 && tally[1][W22_GEMM_ROWS2D] > 0 && tally[0][W22_GEMM_MMA_MID] > 0,
          "the census reached too little (tma %ld, rows2d %ld, portable mma 128x128 %ld)", tally[1][W22_GEMM_TMA],
          tally[1][W22_GEMM_ROWS2D], tally[0][W22_GEMM_MMA_MID]);
    printf("census: %ld GEMMs through exec.c's decode: %ld on the scalar kernel\n", gemms, scalar);
    /* The plain ops (route.h's section 4): every norm of a decode on a kernel (none on NONE, which the decoder's open
     * makes sure of on CUDA by refusing feature channels not a multiple of 8), pinned with the kernels each reaches;
     * the dupup_add op in no decode of either VAE (the upsample conv fuses their DupUps, and the CUDA backend has no
     * other DupUp: conv.cu); the copies, zeros
     * and borders of a decode 8 channels a thread (the one-channel forms stay for what a decode does not make: a
     * video buffer of the caller's at any address, latents of z_dim not a multiple of 8). */
    CHECK(norm_tally[W22_NORM_NONE] == 0 && norm_tally[W22_NORM_ROWS1] && norm_tally[W22_NORM_ROWS4] &&
              norm_tally[W22_NORM_GROUP16] && norm_tally[W22_NORM_GROUP32] && norm_tally[W22_NORM_PIXEL8],
          "the norms' kernels: none %ld, rows<1> %ld, rows<4> %ld, group<16> %ld, group<32> %ld, pixel %ld",
          norm_tally[W22_NORM_NONE], norm_tally[W22_NORM_ROWS1], norm_tally[W22_NORM_ROWS4],
          norm_tally[W22_NORM_GROUP16], norm_tally[W22_NORM_GROUP32], norm_tally[W22_NORM_PIXEL8]);
    CHECK(op_tally[OP_DUPUP][0] + op_tally[OP_DUPUP][1] == 0, "a DupUp outside the upsample conv's phases %ld times",
          op_tally[OP_DUPUP][0] + op_tally[OP_DUPUP][1]);
    for (int op = 0; op < OP_N; op++)
        CHECK(op_tally[op][0] == 0, "%s one channel a thread %ld times", op_names[op], op_tally[op][0]);
    CHECK(op_tally[OP_COPY][1] > 0 && op_tally[OP_BORDER][1] > 0, "the census saw no copy (%ld) or border (%ld)",
          op_tally[OP_COPY][1], op_tally[OP_BORDER][1]);
    /* the open's rule (decoder.c): both VAEs pass it, configs of feature channels not a multiple of 8 do not */
    for (int mi = 0; mi < 4; mi++) {
        w22_config cfg;
        if (mi % 2) w22_config_wan21(&cfg);
        else w22_config_default(&cfg);
        if (mi >= 2) cfg.base_dim = 12; /* 48, 24, 12 (TI2V-5B's structure); Wan2.1's: 48, 24, 12 and 6 */
        w22_model *m = malloc(sizeof *m);
        w22_model_build(&cfg, m);
        const char *at;
        const int c = w22_model_feature_channels_off(m, 8, &at);
        CHECK(mi < 2 ? c == 0 : c == 12 && strstr(at, "up_blocks"), "%s base_dim %d: feature channels off 8: %d at %s",
              w22_model_name(&cfg), cfg.base_dim, c, at);
        free(m);
    }
    /* and its DupUp rule (w22_backend_cuda_model_ok: the phases' epilogue takes every DupUp, lower.h): TI2V-5B's maps
     * (1024 -> 1024 in time, 1024 -> 512 and 512 -> 256 in space) fuse; dim_mult [1, 1, 4, 4]'s 1024 -> 256 does not */
    for (int mi = 0; mi < 2; mi++) {
        w22_config cfg;
        w22_config_default(&cfg);
        if (mi) cfg.dim_mult[1] = 1, cfg.dim_mult[2] = 4;
        w22_model *m = malloc(sizeof *m);
        w22_model_build(&cfg, m);
        int dups = 0, fused = 0;
        for (int i = 0; i < m->nlayers; i++)
            if (m->layers[i].kind == W22_L_DUPUP)
                dups++, fused += w22_lower_dup_fusable(m->layers[i].cout, m->layers[i].cin, m->layers[i].temporal ? 2 : 1);
        CHECK(dups == 3 && (mi ? fused < dups : fused == dups), "dim_mult [%d %d %d %d]: %d of %d DupUps fused",
              cfg.dim_mult[0], cfg.dim_mult[1], cfg.dim_mult[2], cfg.dim_mult[3], fused, dups);
        free(m);
    }
    printf("the norms:");
    for (int k = 0; k <= W22_NORM_KERNELS; k++)
        printf(" %s %ld%s", norm_names[k], norm_tally[k], k < W22_NORM_KERNELS ? "," : "\n");
    for (int op = 0; op < OP_DUPUP; op++)
        printf("%s: 8 channels a thread %ld, one %ld\n", op_names[op], op_tally[op][1], op_tally[op][0]);
    printf("a DupUp outside the upsample conv's phases: %ld\n", op_tally[OP_DUPUP][0] + op_tally[OP_DUPUP][1]);
    return t_finish("test_census");
}
