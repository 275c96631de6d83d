/* The plan's device workspace for the standard clip (44 x 78 latents -> 704 x 1248), counted with a backend whose
 * allocations only add up their sizes (bf16 elements, as on CUDA): it must not depend on T (the plan never sees T
 * when it sizes the workspace), must grow with the frames per pass, and its parts are printed for docs/PERF.md.
 *
 * The memory target: the device memory beyond the weights at most 6 GiB (issue 46: the default may grow where it buys
 * time; it held 4 GiB until stage 3's two-frame chunks, session 42: +377 MiB at 1280x704), which the CUDA backend's own scratch shares
 * with this workspace: the TMA conv's split-tail partials (132 slots of 128 x 256 fp32, and 132 counters:
 * src/cuda/conv_sm90_wgmma_tma.cu). The attention's scratch (scores fp32, probabilities bf16, V^T bf16 of one
 * 44 x 78 frame at C = 1024, each rounded to 256 bytes: src/cuda/attention.cu) lies in what stage 0 leaves free
 * past its own slots (since v22), which must hold it. With one latent frame per pass and with two (the default since
 * v24) the workspace must fit the rest, and with two it must not grow against the copy design (rotate_off,
 * psum_off), which is printed beside it.
 *
 * Issue 45's 24 GB cards: at 1280 x 704 (latents 44 x 80; T = 31 or any other: the plan never sees T) the portable
 * path's device memory, this workspace plus the weights in the CUDA backend's layouts (weights_gpu.cu: vectors fp32,
 * convs bf16 direct, the upsamplers' 2D 3x3 convs their phases too) and the largest Winograd conv's components U
 * (winograd.cu makes them at each conv, in the stage's free span where it holds them, else in the backend's own
 * scratch: counted here as if own), at most 6 GiB. The portable path adds no scratch of its own beyond them: no
 * split-tail partials or TMA identities (the Hopper path's), the attention's scratch and Winograd's V and M inside
 * the stages' free spans (above). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "cuda/route.h"
#include "weights/winograd4.h"
#include "plan/plan_internal.h"
#include "cuda/route.h"
#include "common.h"
#include "testutil.h"


static size_t counted;
static w22_status count_alloc(w22_backend *b, size_t bytes, void **ptr) {
    (void)b;
    counted += bytes;
    *ptr = (void *)(uintptr_t)0x1000; /* never dereferenced: prepare only lays out */
    return W22_OK;
}
static void count_free(w22_backend *b, void *p) { (void)b; (void)p; }

static size_t align256(size_t x) { return (x + 255) & ~(size_t)255; }

/* Plans fpp frames per pass at h x w; copies 1: the copy design (rotate_off and psum_off). */
static w22_decoder *plan_at(w22_backend *b, const w22_config *cfg, int fpp, int copies, int h, int w) {
    w22_decoder *d = calloc(1, sizeof *d);
    w22_model_build(cfg, &d->model);
    d->backend = b;
    d->rank = 0;
    d->world = 1;
    d->frames_per_pass = fpp;
    static w22_plan_test copy_design = {.rotate_off = 1, .psum_off = 1};
    d->test = copies ? &copy_design : NULL;
    counted = 0;
    CHECK_OK(w22_plan_prepare(d, h, w));
    CHECK(counted == d->workspace_bytes, "counted %zu, the plan says %zu", counted, d->workspace_bytes);
    return d;
}

/* ... at 44 x 78 (TI2V-5B's standard clip) */
static w22_decoder *plan(w22_backend *b, const w22_config *cfg, int fpp, int copies) {
    return plan_at(b, cfg, fpp, copies, 44, 78);
}

/* The attention's scratch rule (src/cuda/attention.cu): a band of r query rows of w pixels against Pp keys. */
static size_t attn_need(int r, int w, size_t Pp, int C) {
    return align256((size_t)r * w * Pp * 4) + align256((size_t)r * w * Pp * 2) + align256((size_t)C * Pp * 2);
}
static int attn_rows(size_t bytes, int h, int w, size_t Pp, int C) {
    int r = h;
    while (r > 0 && attn_need(r, w, Pp, C) > bytes) r--;
    return r;
}

/* The Wan2.1 VAE at 832x480 and 1280x720 (latents 60 x 104, 90 x 160), as the TI2V-5B part above: the workspace is
 * constant in T (the plan never sees it), and its parts are printed. The attention's scratch (scores and
 * probabilities of a 14400-pixel frame: 1.2 GB at 1280x720) must not add to it: where stage 0's free span does not
 * hold the whole frame's, the queries go in bands of rows (attention.cu), which it must hold at least as many of
 * as the backend's own 256 MiB would. Issue 44's target, the device memory with the weights <= 4 GiB at 1280x720,
 * is printed against the total (not met: the causal caches alone, two frames of every 3x3x3 conv's input, are
 * 3.8 GiB there; diffusers' decode keeps the same frames). */
static void wan21(w22_backend *b) {
    w22_config cfg;
    w22_config_wan21(&cfg);
    const double GiB = 1073741824.0, MiB = 1048576.0;
    size_t weights = 0;
    w22_model m;
    w22_model_build(&cfg, &m);
    for (int i = 0; i < m.nweights; i++) {
        const w22_weight_desc *wd = &m.weights[i];
        weights += (size_t)wd->numel * (wd->ndim == 1 || wd->is_gamma ? 4 : 2); /* vectors fp32 on the GPU */
        if (wd->ndim == 4 && wd->shape[2] == 3) weights += (size_t)wd->numel * 2 * 16 / 9; /* phases: 16 taps */
    }
    const size_t split = (size_t)132 * 128 * 256 * 4 + 132 * sizeof(unsigned), own_max = (size_t)256 << 20;
    static const int sizes[2][2] = {{60, 104}, {90, 160}};
    for (int k = 0; k < 2; k++) {
        const int h = sizes[k][0], w = sizes[k][1];
        const size_t Pp = ((size_t)h * w + 7) & ~(size_t)7, full = attn_need(h, w, Pp, 384);
        size_t prev = 0;
        for (int fpp = 1; fpp <= 2; fpp++) {
            w22_decoder *d = plan_at(b, &cfg, fpp, 0, h, w);
            size_t fb, off[8], size[8], total;
            const char *f = w22_stage_free(d, 0, &fb);
            w22_stage_scratch(d, 0, off, size, &total);
            const char *past = (const char *)d->scratch.ptr + total; /* run_attention's scratch starts here */
            const size_t room = f && f + fb > past ? (size_t)(f + fb - past) : 0;
            const int in_room = attn_rows(room, h, w, Pp, 384), own = attn_rows(own_max, h, w, Pp, 384);
            const size_t apart = room >= full || in_room >= own ? 0 : attn_need(own > 0 ? own : 1, w, Pp, 384);
            const size_t all = d->workspace_bytes + apart + weights + split;
            size_t caches = 0, queues = 0, st_c[4] = {0};
            for (int s2 = 0; s2 < W22_STAGES; s2++)
                for (int l = d->stages[s2].layer0; l < d->stages[s2].layer1; l++)
                    for (int c = 0; c < 3; c++) st_c[s2] += d->cache[l][c].bytes, caches += d->cache[l][c].bytes;
            for (int s2 = 0; s2 <= W22_STAGES; s2++) queues += d->queue[s2].bytes;
            printf("Wan2.1 %dx%d (latents %dx%d), frames per pass %d: workspace %.3f GiB = causal caches %.3f GiB "
                   "(stages %.0f, %.0f, %.0f, %.0f MiB) + queues %.3f GiB + scratch %.3f GiB + ...; the attention: "
                   "%s; with the weights (%.0f MiB) and split partials %.3f GiB (issue 44's target at 1280x720: 4)\n",
                   w * 8, h * 8, h, w, fpp, d->workspace_bytes / GiB, caches / GiB, st_c[0] / MiB, st_c[1] / MiB,
                   st_c[2] / MiB, st_c[3] / MiB, queues / GiB, d->scratch.bytes / GiB,
                   room >= full ? "the whole frame in stage 0's free span" : in_room >= own ? "bands in stage 0's free span"
                                                                                           : "bands of its own",
                   weights / MiB, all / GiB);
            CHECK(apart == 0, "Wan2.1 %dx%d fpp %d: the attention's scratch outside the workspace (%.0f MiB; stage 0 "
                  "leaves %.0f MiB, %d rows of %d)", w * 8, h * 8, fpp, apart / MiB, room / MiB, in_room, h);
            /* plan.c's default_chunk: stage 3's 96-channel convs run direct, so its chunk stays one frame (two
             * where they are Winograd: TI2V-5B's 256, checked below) */
            CHECK(d->stages[3].chunk == 1 && d->stages[2].chunk == 2, "Wan2.1 %dx%d fpp %d: stage chunks 2 and 3 of "
                  "%d and %d frames, expected 2 and 1", w * 8, h * 8, fpp, d->stages[2].chunk, d->stages[3].chunk);
            CHECK(d->workspace_bytes >= prev, "Wan2.1: the workspace shrank with more frames per pass");
            prev = d->workspace_bytes;
            free(d);
        }
    }
    /* issue 44's band decode (w22_decoder_params.bands): at 1280 x 720 the caches and buffers of stages 1-3 are a
     * band's; with the weights and the split partials it must fit the 4 GiB target at 2 bands */
    for (int nb = 2; nb <= 3; nb++) {
        w22_decoder *d = calloc(1, sizeof *d);
        w22_model_build(&cfg, &d->model);
        d->backend = b, d->rank = 0, d->world = 1, d->frames_per_pass = 1;
        d->params.bands = nb;
        counted = 0;
        CHECK_OK(w22_plan_prepare(d, 90, 160));
        size_t caches = 0;
        for (int l = 0; l < W22_MAX_LAYERS; l++)
            for (int c = 0; c < 3; c++) caches += d->cache[l][c].bytes;
        const size_t all = d->workspace_bytes + weights + split;
        printf("Wan2.1 1280x720 in %d bands of %d latent rows (%d kept and the halo): workspace %.3f GiB (causal caches "
               "%.3f GiB), with the weights and split partials %.3f GiB (issue 44's target: 4)\n", d->bands,
               d->band_rows, (90 + nb - 1) / nb, d->workspace_bytes / GiB, caches / GiB, all / GiB);
        if (nb == 2) CHECK(all <= ((size_t)4 << 30), "Wan2.1 1280x720 in 2 bands: %.3f GiB with the weights", all / GiB);
        free(d);
    }
}

/* The weights' device bytes on the CUDA backend (weights_gpu.cu's layouts: the direct taps and the phases; U is made
 * at each conv, counted apart). */
static size_t cuda_weight_bytes(const w22_model *m) {
    size_t n = 0;
    for (int i = 0; i < m->nweights; i++) {
        const w22_weight_desc *w = &m->weights[i];
        if (w->is_gamma || w->ndim == 1) {
            n += (size_t)w->numel * 4;
            continue;
        }
        const int64_t cout = w->shape[0], cin = w->shape[1];
        n += (size_t)w->numel * 2;
        if (w->ndim == 4 && w->shape[2] == 3 && w->shape[3] == 3) n += (size_t)16 * cout * cin * 2; /* phases */
    }
    return n;
}

/* route.h's Winograd bands as the CUDA backend's conv_work answers them at the threshold wino_min_test */
static int wino_min_test;
static size_t wino_work(w22_backend *b, int kt, int ks, int cin, int cout, int frames, int h, int w) {
    (void)b;
    return w22_route_winograd_work(kt, ks, cin, cout, frames, h, w, wino_min_test);
}

/* 1280 x 704 on either path (the comment above: the portable path's 24 GB cards; the Hopper path plans the same at
 * the same threshold): the default two latent frames per pass, and one; the plan keeps the bands of the default
 * Winograd threshold (256 on both paths: the stage 3 convs too) free, as the backend asks */
static void portable_24gb_case(w22_backend *b0, const w22_config *cfg) {
    const double GiB = 1073741824.0;
    w22_backend_ops ops = *b0->ops;
    ops.conv_work = wino_work;
    wino_min_test = w22_route_wino_min_default(0);
    w22_backend pb = *b0, *b = &pb;
    pb.ops = &ops;
    for (int fpp = 2; fpp >= 1; fpp--) {
        w22_decoder *d = calloc(1, sizeof *d);
        w22_model_build(cfg, &d->model);
        d->backend = b, d->rank = 0, d->world = 1, d->frames_per_pass = fpp;
        counted = 0;
        CHECK_OK(w22_plan_prepare(d, 44, 80));
        size_t u = 0; /* the largest Winograd conv's U: 36 x 3 cin x cout fp16 */
        for (int i = 0; i < d->model.nweights; i++) {
            const w22_weight_desc *w = &d->model.weights[i];
            if (w->ndim == 5 && w22_route_wino_weights((int)w->shape[2], (int)w->shape[3], (int)w->shape[4],
                                                       (int)w->shape[1], (int)w->shape[0], wino_min_test)) {
                const size_t b = (size_t)W22_W4_K * 3 * w->shape[0] * w->shape[1] * 2;
                if (b > u) u = b;
            }
        }
        const size_t ws = counted, wt = cuda_weight_bytes(&d->model) + u;
        printf("1280x704, frames per pass %d, either path: workspace %.4f GiB + weights %.4f GiB (the Winograd "
               "components' %.0f MiB in) = %.4f GiB (the target: 6 GiB, %+.1f MiB)\n", fpp, ws / GiB, wt / GiB,
               u / 1048576.0, (ws + wt) / GiB, ((double)(ws + wt) - 6 * GiB) / 1048576.0);
        CHECK(ws + wt <= ((size_t)6 << 30), "1280x704 fpp %d: workspace + weights %.3f GiB, above 6 GiB", fpp,
              (ws + wt) / GiB);
        free(d);
    }
}

/* Issue 46's memory budget: at 1280 x 704 (TI2V-5B latents 44 x 80, the Wan2.1 VAE's 88 x 160) the work memory of
 * each rung of the budget's ladder (the causal caches of no stage, then stage 3's, 2's, 1's, 0's in host memory),
 * counted by w22_plan_work_bytes (the plan's own layout, plus the backend reserve), printed; the plan a 2.5 GiB
 * budget takes must need at most 2.5 GiB and keep the default plan's chunks (the bits: tests/test_plan.c's budget
 * case decodes), and w22_plan_prepare under it must allocate what the count said, less the reserve; the default
 * plan's work at most 6 GiB (the cap). Constant in T: the plan never sees T. */
static void budget_case(w22_backend *b, const w22_config *cfg, const char *name, int h, int w) {
    const double GiB = 1073741824.0;
    const size_t budget = (size_t)5 << 29; /* 2.5 GiB */
    w22_decoder *d = calloc(1, sizeof *d);
    w22_model_build(cfg, &d->model);
    d->backend = b, d->rank = 0, d->world = 1, d->frames_per_pass = 2; /* decoder.c's default */
    size_t rung[5], floor = 0;
    static const unsigned hosts[5] = {0, 8, 12, 14, 15};
    for (int i = 0; i < 5; i++) {
        CHECK_OK(w22_plan_work_bytes(d, h, w, hosts[i], &rung[i]));
        printf("%s %dx%d (latents %dx%d): work with the caches of stages %s in host memory: %.3f GiB\n", name,
               w * 8 * cfg->patch_size, h * 8 * cfg->patch_size, h, w,
               i == 0 ? "none" : i == 1 ? "3" : i == 2 ? "2-3" : i == 3 ? "1-3" : "0-3", rung[i] / GiB);
        if (i) CHECK(rung[i] < rung[i - 1], "%s: hosting more stages did not shrink the work (%zu >= %zu)", name,
                     rung[i], rung[i - 1]);
    }
    /* issue 46: the default plan may grow where it buys time, up to 6 GiB of work at 1280 x 704 */
    CHECK(rung[0] <= ((size_t)6 << 30), "%s: the default plan's work %.3f GiB, above 6 GiB", name, rung[0] / GiB);
    CHECK_OK(w22_plan_budget_floor(d, h, w, &floor));
    CHECK(floor == rung[4], "%s: the floor %zu is not the last rung's %zu", name, floor, rung[4]);
    /* the default plan (no budget) allocates the first rung less the reserve */
    counted = 0;
    CHECK_OK(w22_plan_prepare(d, h, w));
    CHECK(counted + W22_WORK_RESERVE == rung[0] && d->host_stages == 0, "%s: the default plan allocated %zu, the "
          "count says %zu + the reserve %zu", name, counted, rung[0] - W22_WORK_RESERVE, (size_t)W22_WORK_RESERVE);
    int chunk[W22_STAGES];
    for (int s = 0; s < W22_STAGES; s++) chunk[s] = d->stages[s].chunk;
    /* under 2.5 GiB */
    w22_plan_release(d);
    d->params.work_budget_bytes = budget;
    counted = 0;
    const w22_status st = w22_plan_prepare(d, h, w);
    CHECK(st == W22_OK, "%s: a 2.5 GiB budget: %s", name, w22_last_error());
    if (st == W22_OK) {
        size_t need = 0;
        CHECK_OK(w22_plan_work_bytes(d, h, w, d->host_spec, &need));
        printf("%s under a 2.5 GiB budget: %d of %d caches (stages 0x%x) in host memory (%.3f GiB), windows %.1f + %.1f "
               "MiB, work %.3f GiB (allocated %.3f + the reserve)\n", name, d->host_count, d->host_total,
               d->host_stages, d->host_cache_bytes / GiB, d->win_bytes[0] / 1048576.0, d->win_bytes[1] / 1048576.0,
               need / GiB, counted / GiB);
        /* the budget's choice is the fewest caches of the cost order that fit: one fewer does not */
        size_t less = 0;
        CHECK(d->host_spec == W22_HOST_CACHES(d->host_count), "%s: the budget's plan 0x%x is not a prefix of the cost "
              "order (%d caches hosted)", name, d->host_spec, d->host_count);
        CHECK_OK(w22_plan_work_bytes(d, h, w, W22_HOST_CACHES(d->host_count - 1), &less));
        CHECK(d->host_count > 0 && less > budget, "%s: %d caches hosted, but %d need %zu, within the budget", name,
              d->host_count, d->host_count - 1, less);
        CHECK(need <= budget && counted + W22_WORK_RESERVE == need, "%s: under a 2.5 GiB budget the plan needs %zu "
              "bytes, allocated %zu", name, need, counted);
        /* the budget's cost, for docs/PERF.md's prediction: the bytes over PCIe per video frame. A hosted cache's
         * conv copies its two history frames in per chunk and the chunk's last min(m, 2) frames out; stage s runs
         * 2^(s-2) of its frames per video frame at stages 0-1 (their upsamplers double time) and one at 2-3
         * (TI2V-5B; the Wan2.1 VAE's the same: temporal_up [1, 1, 0] both) */
        double in = 0, out = 0, whole = 0;
        for (int s = 0; s < W22_STAGES; s++) {
            const int m = d->stages[s].chunk, o = m < 2 ? m : 2;
            const double per_video = s >= 2 ? 1.0 : s == 1 ? 0.5 : 0.25;
            for (int l = d->stages[s].layer0; l < d->stages[s].layer1; l++)
                for (int k = 0; k < 3; k++)
                    if (d->cache_host[l][k]) {
                        in += per_video / m * 2.0 * (double)(d->cache[l][k].bytes / 2);
                        out += per_video / m * o * (double)(d->cache[l][k].bytes / 2);
                    }
        }
        /* what hosting whole stages 2-3 (the budget's plan before the cost order) moves, for the comparison */
        for (int s = 2; s < W22_STAGES; s++) {
            const int m = d->stages[s].chunk, o = m < 2 ? m : 2;
            for (int l = d->stages[s].layer0; l < d->stages[s].layer1; l++)
                for (int k = 0; k < 3; k++)
                    if (d->cache[l][k].bytes && !(d->model.layers[l].kind == W22_L_HEAD && d->head_psum))
                        whole += 1.0 / m * (2.0 + o) * (double)(d->cache[l][k].bytes / 2);
        }
        printf("%s under a 2.5 GiB budget: %.2f GB into the GPU and %.2f GB out per video frame (two history frames "
               "in, the newest out, per hosted conv; stages 2-3 whole: %.2f GB both ways)\n", name, in / 1e9,
               out / 1e9, whole / 1e9);
        for (int s = 0; s < W22_STAGES; s++)
            CHECK(d->stages[s].chunk == chunk[s], "%s: the budget changed stage %d's chunk %d -> %d", name, s,
                  chunk[s], d->stages[s].chunk);
    }
    /* a budget a byte below the floor fails, naming both */
    w22_plan_release(d);
    d->params.work_budget_bytes = floor - 1;
    const w22_status s2 = w22_plan_prepare(d, h, w);
    CHECK(s2 == W22_ERR_INVALID_ARG && strstr(w22_last_error(), "budget") && !d->scratch.ptr,
          "%s: a budget below the floor: %s (%s)", name, w22_status_string(s2), w22_last_error());
    printf("%s below the floor: %s\n", name, w22_last_error());
    free(d);
}

/* The way out a failure names (plan.c's bands_within, less_memory_note): a budget below the whole frame's floor names
 * the fewest bands within it, and that band count with that budget must then plan; a budget below every band count's
 * floor names none; an allocation that fails names a budget's floor and the band counts' work, and each of those
 * must then fit where the whole frame's default plan did not. The allocation fails past `fail_limit` bytes, as a
 * GPU's memory does. */
static size_t fail_limit;
static w22_status limit_alloc(w22_backend *b, size_t bytes, void **ptr) {
    (void)b;
    if (counted + bytes > fail_limit)
        return w22_fail(W22_ERR_OUT_OF_MEMORY, "test: %zu bytes past the limit %zu", bytes, fail_limit);
    counted += bytes;
    *ptr = (void *)(uintptr_t)0x1000;
    return W22_OK;
}
static void way_out_case(w22_backend *b0, const w22_config *cfg, const char *name, int h, int w) {
    w22_decoder *d = calloc(1, sizeof *d);
    w22_model_build(cfg, &d->model);
    d->backend = b0, d->rank = 0, d->world = 1, d->frames_per_pass = 2;
    size_t floor = 0, whole = 0;
    CHECK_OK(w22_plan_budget_floor(d, h, w, &floor));
    CHECK_OK(w22_plan_work_bytes(d, h, w, 0, &whole));
    /* a budget a byte below the whole frame's floor: some band count fits it, and the message names the fewest */
    d->params.work_budget_bytes = floor - 1;
    w22_status s = w22_plan_prepare(d, h, w);
    const char *m = strstr(w22_last_error(), "band decode within this budget: ");
    int nb = 0;
    CHECK(s == W22_ERR_INVALID_ARG && m && sscanf(m + strlen("band decode within this budget: "), "%d", &nb) == 1 &&
          nb >= 2, "%s %dx%d: a budget below the floor names no band count: %s", name, h, w, w22_last_error());
    printf("%s %dx%d a byte below the floor: %s\n", name, h, w, w22_last_error());
    if (nb >= 2) {
        d->params.bands = nb; /* as named: it plans within the budget; one band fewer does not */
        counted = 0;
        CHECK(w22_plan_prepare(d, h, w) == W22_OK && counted + W22_WORK_RESERVE <= floor - 1, "%s: %d bands under "
              "the budget it was named for: %s", name, nb, w22_last_error());
        w22_plan_release(d);
        if (nb > 2) {
            d->params.bands = nb - 1;
            CHECK(w22_plan_prepare(d, h, w) == W22_ERR_INVALID_ARG, "%s: %d bands, one fewer than named, also fit",
                  name, nb - 1);
            w22_plan_release(d);
        }
        d->params.bands = 0;
    }
    /* a budget no band count reaches (1 MiB): no band decode named */
    d->params.work_budget_bytes = (size_t)1 << 20;
    s = w22_plan_prepare(d, h, w);
    CHECK(s == W22_ERR_INVALID_ARG && !strstr(w22_last_error(), "band decode"), "%s: a 1 MiB budget: %s", name,
          w22_last_error());
    /* the default plan's allocation failing (a GPU with less free memory than the plan takes) */
    w22_backend_ops ops = *b0->ops;
    ops.alloc = limit_alloc;
    w22_backend fb = *b0;
    fb.ops = &ops;
    d->backend = &fb;
    d->params.work_budget_bytes = 0;
    fail_limit = whole / 2;
    counted = 0;
    s = w22_plan_prepare(d, h, w);
    const char *e = w22_last_error();
    CHECK(s == W22_ERR_OUT_OF_MEMORY && strstr(e, "test: ") && strstr(e, "--memory-budget") && strstr(e, "2 bands")
          && !d->scratch.ptr, "%s %dx%d: the default plan out of memory: %s (%s)", name, h, w, w22_status_string(s), e);
    printf("%s %dx%d out of memory: %s\n", name, h, w, e);
    /* the budget it names is the floor (rounded to 0.01 GiB); where the floor is under the limit, a decoder given
     * that budget plans (at 90 x 160 only: its hosted caches are real host memory, 36 GB at 4K) */
    const char *fl = strstr(e, "down to ");
    double gib = 0;
    CHECK(fl && sscanf(fl + strlen("down to "), "%lf", &gib) == 1 && fabs(gib - floor / 1073741824.0) < 0.006,
          "%s: the budget named is not the floor %.3f GiB: %s", name, floor / 1073741824.0, e);
    if (floor <= fail_limit && (size_t)h * w <= 90 * 160) {
        d->params.work_budget_bytes = floor;
        counted = 0;
        CHECK(w22_plan_prepare(d, h, w) == W22_OK, "%s: the budget it named (%.2f GiB) did not plan under the limit: "
              "%s", name, gib, w22_last_error());
        w22_plan_release(d);
        d->params.work_budget_bytes = 0;
    }
    size_t two = 0;
    d->params.bands = 2;
    CHECK_OK(w22_plan_work_bytes(d, h, w, 0, &two));
    counted = 0;
    if (two <= fail_limit)
        CHECK(w22_plan_prepare(d, h, w) == W22_OK, "%s: 2 bands (%zu bytes) under the limit %zu: %s", name, two,
              fail_limit, w22_last_error());
    w22_plan_release(d);
    free(d);
}

/* The budget's cost at several budgets (docs/PERF.md's prediction): for each, the caches the plan hosts and the
 * bytes over the bus per video frame, into the GPU (two history frames per hosted conv) and out (the newest). The
 * plan of each budget must fit it. */
static void budget_table(w22_backend *b, const w22_config *cfg, const char *name, int h, int w) {
    const double GiB = 1073741824.0;
    static const double budgets[] = {2.5, 3.0, 3.5, 3.75};
    w22_decoder *d = calloc(1, sizeof *d);
    w22_model_build(cfg, &d->model);
    d->backend = b, d->rank = 0, d->world = 1, d->frames_per_pass = 2;
    for (size_t i = 0; i < sizeof budgets / sizeof budgets[0]; i++) {
        d->params.work_budget_bytes = (size_t)(budgets[i] * GiB);
        if (w22_plan_prepare(d, h, w) != W22_OK) {
            printf("%s latents %dx%d under %.2f GiB: %s\n", name, h, w, budgets[i], w22_last_error());
            continue;
        }
        size_t need = 0;
        CHECK_OK(w22_plan_work_bytes(d, h, w, d->host_spec, &need));
        CHECK(need <= d->params.work_budget_bytes, "%s under %.2f GiB: the plan needs %zu", name, budgets[i], need);
        double in = 0, out = 0;
        for (int s = 0; s < W22_STAGES; s++) {
            const int m = d->stages[s].chunk, o = m < 2 ? m : 2;
            const double per_video = s >= 2 ? 1.0 : s == 1 ? 0.5 : 0.25;
            for (int l = d->stages[s].layer0; l < d->stages[s].layer1; l++)
                for (int k = 0; k < 3; k++)
                    if (d->cache_host[l][k]) {
                        in += per_video / m * 2.0 * (double)(d->cache[l][k].bytes / 2);
                        out += per_video / m * o * (double)(d->cache[l][k].bytes / 2);
                    }
        }
        printf("%s latents %dx%d under %.2f GiB: %2d of %d caches hosted (stages 0x%x), work %.3f GiB, windows %.0f + "
               "%.0f MiB; per video frame %.2f GB in, %.2f GB out\n", name, h, w, budgets[i], d->host_count,
               d->host_total, d->host_stages, need / GiB, d->win_bytes[0] / 1048576.0, d->win_bytes[1] / 1048576.0,
               in / 1e9, out / 1e9);
        w22_plan_release(d);
    }
    free(d);
}

/* route.h's Winograd bands (backend.h's conv_work, as the CUDA backend answers it) in the plan. At W22_WINOGRAD=512
 * (the Hopper path's default until session 41) no stage of either VAE, at these sizes, is short of its convs' bands:
 * the plan is byte for byte the one without the op. At 256 (both paths' default) every stage leaves each of its
 * convs its band (w22_stage_free's span, which exec.c passes as w22_conv_args.work), enough for route.h's blocker to
 * take it, the scratch grown by what stage 3 lacked: session 37 found that threshold refused there in silence ("the
 * caller's scratch holds no tile row"). */
static void winograd_work_case(w22_backend *b) {
    static const struct { int wan21, h, w; } sz[] = {{0, 44, 80}, {0, 44, 78}, {0, 45, 45}, {0, 80, 44}, {0, 1, 1},
                                                     {0, 8, 8},   {0, 33, 57}, {0, 135, 240}, {1, 90, 160},
                                                     {1, 60, 104}, {1, 45, 45}, {1, 1, 1}};
    w22_backend_ops ops = *b->ops;
    w22_backend wb = *b;
    wb.ops = &ops;
    for (size_t i = 0; i < sizeof sz / sizeof sz[0]; i++) {
        w22_config cfg;
        if (sz[i].wan21) w22_config_wan21(&cfg);
        else w22_config_default(&cfg);
        const char *name = sz[i].wan21 ? "Wan2.1" : "TI2V-5B";
        ops.conv_work = NULL;
        w22_decoder *d0 = plan_at(&wb, &cfg, 2, 0, sz[i].h, sz[i].w);
        const size_t base = d0->workspace_bytes;
        free(d0);
        ops.conv_work = wino_work;
        wino_min_test = 512; /* no stage-3 conv on the path; the default's 256 below */
        w22_decoder *d1 = plan_at(&wb, &cfg, 2, 0, sz[i].h, sz[i].w);
        /* the sizes users decode (bench/sizes.py's, from 30 x 52 latents on): the measured plan, unchanged; the tiny
         * ones (a few MiB of buffers in all) may grow, by no more than their largest band */
        size_t most = 0;
        for (int s = 0; s < W22_STAGES; s++)
            for (int l = d1->stages[s].layer0; l < d1->stages[s].layer1; l++) {
                const w22_layer *L = &d1->model.layers[l];
                const size_t wk = L->kind == W22_L_RESBLOCK || L->kind == W22_L_CONV_IN
                                      ? w22_route_winograd_work(3, 3, L->cin, L->cout, d1->stages[s].chunk,
                                                                d1->rows << d1->stages[s].level,
                                                                d1->w << d1->stages[s].level, wino_min_test)
                                      : 0;
                if (wk > most) most = wk;
            }
        if (sz[i].h >= 30 && sz[i].w >= 30)
            CHECK(d1->workspace_bytes == base, "%s %dx%d: the 512 threshold's bands grew the workspace "
                  "(%zu -> %zu bytes)", name, sz[i].h, sz[i].w, base, d1->workspace_bytes);
        else
            CHECK(d1->workspace_bytes <= base + most + 256, "%s %dx%d: the 512 threshold's bands grew the "
                  "workspace by %zu bytes, more than its largest band (%zu)", name, sz[i].h, sz[i].w,
                  d1->workspace_bytes - base, most);
        if (d1->workspace_bytes != base)
            printf("%s %dx%d: the 512 threshold's bands add %.1f MiB (the stages left less than a band free)\n",
                   name, sz[i].h, sz[i].w, (d1->workspace_bytes - base) / 1048576.0);
        free(d1);
        wino_min_test = 256;
        w22_decoder *d = plan_at(&wb, &cfg, 2, 0, sz[i].h, sz[i].w);
        int banded = 0;
        for (int s = 0; s < W22_STAGES; s++) {
            const w22_stage *st = &d->stages[s];
            const int H = d->rows << st->level, W = d->w << st->level;
            size_t span = 0;
            w22_stage_free(d, s, &span);
            for (int l = st->layer0; l < st->layer1; l++) {
                const w22_layer *L = &d->model.layers[l];
                if (L->kind != W22_L_RESBLOCK && L->kind != W22_L_CONV_IN) continue;
                for (int k = 0; k < (L->kind == W22_L_RESBLOCK ? 2 : 1); k++) {
                    const int ci = k ? L->cout : L->cin, co = L->cout;
                    const size_t want = w22_route_winograd_work(3, 3, ci, co, st->chunk, H, W, 256);
                    if (!want) continue;
                    banded++;
                    CHECK(span >= want, "%s %dx%d at 256: stage %d leaves %zu bytes, its %d -> %d conv wants %zu",
                          name, sz[i].h, sz[i].w, s, span, ci, co, want);
                    /* and route.h's blocker takes the conv with that span as its work */
                    w22_conv_args a;
                    memset(&a, 0, sizeof a);
                    a.kt = 3, a.ks = 3;
                    a.in = (w22_view){.ptr = (void *)1, .f = st->chunk, .h = H, .w = W, .c = ci, .sw = ci};
                    a.out = (w22_view){.ptr = (void *)1, .f = st->chunk, .h = H, .w = W, .c = co, .sw = co};
                    a.work = (void *)1, a.work_bytes = span;
                    const char *why = w22_route_winograd_blocker(&a, ci, co, 1,
                                                                 w22_route_wino_row_bytes(st->chunk, (W + 3) / 4, ci,
                                                                                          co));
                    CHECK(!why, "%s %dx%d at 256: stage %d's %d -> %d conv refused Winograd: %s", name, sz[i].h,
                          sz[i].w, s, ci, co, why);
                }
            }
        }
        if (sz[i].h == 44 && sz[i].w == 80)
            printf("%s %dx%d: W22_WINOGRAD=256's bands add %.1f MiB to the workspace (%d convs banded)\n", name,
                   sz[i].h, sz[i].w, (d->workspace_bytes - base) / 1048576.0, banded);
        free(d);
    }
}

int main(void) {
    w22_backend_ops ops;
    memset(&ops, 0, sizeof ops);
    ops.name = "count";
    ops.elem_size = 2;
    ops.alloc = count_alloc;
    ops.free = count_free;
    w22_backend b = {&ops, 1, NULL, NULL};
    w22_config cfg;
    w22_config_default(&cfg);
    const size_t P = 44 * 78, attention = align256(P * P * 4) + align256(P * P * 2) + align256((size_t)1024 * P * 2);
    const size_t split = (size_t)132 * 128 * 256 * 4 + 132 * sizeof(unsigned);
    const size_t target = ((size_t)6 << 30) - split;
    const double GiB = 1073741824.0, MiB = 1048576.0;
    printf("target: workspace <= 6 GiB - split-tail partials %.1f MiB = %.4f GiB (the attention's %.1f MiB inside)\n",
           split / MiB, target / GiB, attention / MiB);
    size_t prev = 0;
    for (int fpp = 1; fpp <= 4; fpp *= 2) {
        w22_decoder *old = plan(&b, &cfg, fpp, 1);
        const size_t old_bytes = counted;
        w22_decoder *d = plan(&b, &cfg, fpp, 0);
        const size_t bytes = counted;
        size_t caches = 0, queues = 0, spares = 0, head = 0;
        for (int l = 0; l < W22_MAX_LAYERS; l++)
            for (int k = 0; k < 3; k++) caches += d->cache[l][k].bytes;
        for (int l = 0; l < d->model.nlayers; l++)
            if (d->model.layers[l].kind == W22_L_HEAD) head = d->cache[l][0].bytes;
        for (int g = 0; g < d->nspares; g++) spares += d->spare[g].bytes;
        for (int s = 0; s <= W22_STAGES; s++) queues += d->queue[s].bytes;
        printf("frames per pass %d: workspace %.4f GiB = causal caches %.2f (head %s %.1f MiB) + %d spare frames "
               "%.1f MiB + stage queues %.2f + scratch %.2f; %+.1f MiB against the copy design (%.4f GiB), %+.1f MiB "
               "against the target\n",
               fpp, bytes / GiB, caches / GiB, d->head_psum ? "partial sums" : "input frames", head / MiB,
               d->nspares, spares / MiB, queues / GiB, d->scratch.bytes / GiB, ((double)bytes - old_bytes) / MiB,
               old_bytes / GiB, ((double)bytes - target) / MiB);
        for (int g = 0; g < d->nspares; g++) printf("  spare %d: %.1f MiB\n", g, d->spare[g].bytes / MiB);
        /* what each stage leaves free during its convs (the CUDA Winograd path's scratch): after the stage's own
         * activation and conv-input slots, before its input queue (and every earlier stage's), in the block */
        for (int s = 0; s < W22_STAGES && fpp == 1; s++) {
            size_t fb, off[8], size[8], total;
            const char *f = w22_stage_free(d, s, &fb), *t0 = d->transient.ptr, *t1 = t0 + d->transient.bytes;
            w22_stage_scratch(d, s, off, size, &total);
            printf("  stage %d: %.1f MiB free during its convs\n", s, fb / MiB);
            CHECK(f && f >= (const char *)d->scratch.ptr + off[3] + size[3] && f >= t0 && f + fb <= t1, "stage %d: its "
                  "free span overlaps its slots or leaves the block", s);
            for (int q = 1; q <= s; q++)
                CHECK(f + fb <= (const char *)d->queue[q].ptr, "stage %d: its free span overlaps queue %d", s, q);
        }
        /* an interleaving stage's upsample input (ubuf) lives on while the later stages run (plan.h): it must lie
         * outside the scratch, the queues and their free spans */
        for (int p = 0; p < W22_STAGES; p++) {
            const char *u = d->ubuf[p].ptr;
            CHECK(!d->stages[p].interleave == !u, "fpp %d: stage %d interleaves %d with ubuf %p", fpp, p,
                  d->stages[p].interleave, (const void *)u);
            if (!u) continue;
            const char *ue = u + d->ubuf[p].bytes;
            CHECK(u >= (const char *)d->scratch.ptr + d->scratch.bytes, "fpp %d: stage %d's ubuf in the scratch", fpp, p);
            for (int q = 1; q <= W22_STAGES; q++) {
                const char *qa = d->queue[q].ptr, *qe = qa + d->queue[q].bytes;
                CHECK(ue <= qa || u >= qe, "fpp %d: stage %d's ubuf overlaps queue %d", fpp, p, q);
            }
            for (int n = p + 1; n < W22_STAGES; n++) {
                size_t fb;
                const char *f = w22_stage_free(d, n, &fb);
                CHECK(!f || f >= ue || f + fb <= u, "fpp %d: stage %d's free span overlaps stage %d's upsample input",
                      fpp, n, p);
            }
        }
        /* stages 1-3 run chunks of 2; stage 1's temporal upsampler hands stage 2 one chunk at a time (4 frames made
         * of 2); stage 2's spatial one makes stage 3's chunk whole; stage 0 never interleaves (its up block's input,
         * the DupUp's source, lies in its scratch: plan.c), so stage 1's queue holds its whole output, 2 frames per
         * latent frame */
        CHECK(!d->stages[0].interleave && d->stages[1].interleave && !d->stages[2].interleave &&
                  d->stages[1].in_cap == 2 * fpp && d->stages[2].in_cap == 2 && d->stages[3].in_cap == 2 &&
                  d->stages[3].chunk == 2,
              "fpp %d: stages 0-2 interleave %d %d %d, queues of stages 1-3 hold %d %d %d frames (expected 0 1 0; "
              "%d 2 2)", fpp, d->stages[0].interleave, d->stages[1].interleave, d->stages[2].interleave,
              d->stages[1].in_cap, d->stages[2].in_cap, d->stages[3].in_cap, 2 * fpp);
        /* the wide conv inputs that open stages 2 and 3 (1024 and 512 channels) lie over XA, XB and NH, so NH holds
         * the narrower ones only */
        for (int s = 2; s < W22_STAGES && fpp == 1; s++) {
            size_t off[8], size[8], total;
            w22_stage_scratch(d, s, off, size, &total);
            const w22_stage *st = &d->stages[s];
            const size_t wide = (size_t)st->chunk * ((d->rows << s) + 2) * ((78 << s) + 2) * d->model.dims[s] * 2;
            CHECK(off[2] < off[0] && off[0] <= off[1] && off[1] <= off[3] && off[3] + size[3] - off[0] >= wide &&
                      size[3] < wide,
                  "stage %d: XA, XB, NH at %zu %zu %zu (NH %zu bytes) do not hold a wide input of %zu bytes in a row",
                  s, off[0], off[1], off[3], size[3], wide);
        }
        /* the attention's scratch in stage 0's free span past its slots (exec.c's run_attention) */
        {
            size_t fb, off[8], size[8], total;
            const char *f = w22_stage_free(d, 0, &fb);
            w22_stage_scratch(d, 0, off, size, &total);
            const char *past = (const char *)d->scratch.ptr + total;
            CHECK(f && f + fb >= past + attention, "fpp %d: stage 0 leaves %.1f MiB past its slots, the attention "
                  "needs %.1f", fpp, f ? (double)(f + fb - past) / MiB : 0.0, attention / MiB);
        }
        /* one spare per stage of one-frame chunks: stage 0 with one latent frame per pass alone (stages 1-3 run
         * chunks of 2, whose groups only join a one-frame stage's spare: plan.c) */
        if (d->rotate) CHECK(d->nspares == (fpp == 1 ? 1 : 0), "fpp %d: %d spare frames, expected %d", fpp,
                             d->nspares, fpp == 1 ? 1 : 0);
        /* v24-v26: stage 2's five 512-channel caches rotated their two-frame units through stage 3's one-frame spare;
         * with stage 3's two-frame chunks (session 42) both stages' caches copy (measured inside its -8.8%) */
        int units2 = 0, g3 = -1;
        for (int l = d->stages[3].layer0; l < d->stages[3].layer1; l++)
            if (d->cache_spare[l][1]) g3 = d->cache_spare[l][1];
        for (int l = d->stages[2].layer0; l < d->stages[2].layer1; l++)
            for (int k = 0; k < 3; k++) units2 += d->cache_unit[l][k] == 2 && d->cache_spare[l][k] == g3;
        if (d->rotate)
            CHECK(units2 == 0 && g3 < 0, "fpp %d: %d of stage 2's caches rotate (stage 3's spare group %d), expected "
                  "none", fpp, units2, g3);
        /* one latent frame per pass and the default, two */
        if (fpp <= 2) CHECK(bytes <= target, "fpp %d: workspace %zu bytes above the target %zu", fpp, bytes, target);
        if (fpp == 2)
            CHECK(bytes <= old_bytes, "fpp 2: workspace %zu bytes above the copy design's %zu", bytes, old_bytes);
        CHECK(bytes >= prev, "the workspace shrank with more frames per pass");
        prev = bytes;
        free(old);
        free(d);
    }
    wan21(&b);
    winograd_work_case(&b);
    portable_24gb_case(&b, &cfg);
    budget_case(&b, &cfg, "TI2V-5B", 44, 80);
    {
        w22_config c21;
        w22_config_wan21(&c21);
        budget_case(&b, &c21, "Wan2.1", 88, 160);
        budget_table(&b, &c21, "Wan2.1", 90, 160); /* issue 44's 1280x720: 4 GiB with the weights */
        way_out_case(&b, &c21, "Wan2.1", 90, 160);
        way_out_case(&b, &c21, "Wan2.1", 270, 480); /* 4K: 3840x2160 */
    }
    budget_table(&b, &cfg, "TI2V-5B", 44, 80);
    way_out_case(&b, &cfg, "TI2V-5B", 135, 240); /* 4K: 3840x2160 */
    return t_finish("test_workspace");
}
