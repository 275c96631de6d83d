/* The plan's layout: the four stages cut from the model's layer list, their chunk sizes, and the workspace they
 * need for latents of h x w on this rank: input queues, one scratch region the stages share (one stage works at a
 * time), the causal caches with their rotation groups' spare frames, and the video staging. Sizes depend on the
 * chunk sizes, never on T. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common.h"
#include "plan/plan_internal.h"

void w22_split_rows(int n, int rank, int world, int *r0, int *rows) {
    int a = (int)((long)n * rank / world), b = (int)((long)n * (rank + 1) / world);
    *r0 = a;
    *rows = b - a;
}

static size_t align_up(size_t x) { return (x + 255) & ~(size_t)255; }

/* Bytes of f frames of h x w x c, with a one-pixel border when border. */
size_t w22_frames_bytes(int f, int h, int w, int c, int border, size_t es) {
    return (size_t)f * (h + 2 * border) * (w + 2 * border) * c * es;
}

/* The caches' pushes rotate (plan.h) and the head keeps its history as partial sums, unless a test plans the designs
 * before (w22_plan_test's rotate_off, psum_off: the copy design, for test_workspace's comparison); measured in docs/PERF.md v23-v24. */
static int want_rotate(const w22_decoder *d) { return !(d->test && d->test->rotate_off); }
static int want_psum(const w22_decoder *d) { return !(d->test && d->test->psum_off); }

/* Bytes of the head's conv_out buffers in T1 with partial sums: its output (cout channels, elements of es), then
 * from the next 256-byte boundary the fp32 Ys of its three temporal taps (3 cout channels, rounded up to even:
 * w22_psum_tmp_channels): exec.c's head_conv_psum. */
size_t w22_head_psum_bytes(int f, int h, int w, int cout, size_t es, size_t *tmp_off) {
    *tmp_off = align_up(w22_frames_bytes(f, h, w, cout, 0, es));
    return *tmp_off + w22_frames_bytes(f, h, w, w22_psum_tmp_channels(cout), 0, 4);
}

/* The channels of the fresh input of cache k of layer L when that input goes through norm_conv (exec.c: a norm
 * writes it, the conv reads it and pushes it), else 0: the caches a spare frame can serve. */
static int norm_conv_input(const w22_layer *L, int k, int psum) {
    if (L->kind == W22_L_RESBLOCK) return k == 0 ? L->cin : k == 1 ? L->cout : 0;
    if (L->kind == W22_L_HEAD) return k == 0 && !psum ? L->cin : 0;
    return 0;
}

/* Which of the activation slots XA (0) and XB (1) a stage writes: exec.c's out_buffer rule walked over the stage's
 * layers (in place when the channels allow and the activation is neither the stage input nor the block input,
 * else the first slot that is neither). The last stage of TI2V-5B never needs XB. */
void w22_stage_slots(const w22_model *m, int layer0, int layer1, int used[2]) {
    enum { X = -1 }; /* the stage input (its queue) */
    int cur = X, blockin = -2, c = -1;
    used[0] = used[1] = 0;
    for (int l = layer0; l < layer1; l++) {
        const w22_layer *L = &m->layers[l];
        switch (L->kind) {
        case W22_L_CONV_IN: cur = 0, used[0] = 1, c = L->cout; break;
        case W22_L_BLOCK_BEGIN: blockin = cur; break;
        case W22_L_RESBLOCK:
        case W22_L_ATTN: {
            const int cout = L->kind == W22_L_ATTN ? L->cin : L->cout;
            const int in_place = (L->kind == W22_L_ATTN || L->cin == L->cout) && cur >= 0 && cur != blockin &&
                                 c == cout;
            if (!in_place) {
                cur = (cur == 0 || blockin == 0) ? 1 : 0;
                used[cur] = 1;
            }
            c = cout;
            break;
        }
        case W22_L_UPSAMPLE: cur = -3, c = L->cout; break; /* the next stage's queue */
        default: break;
        }
    }
}

/* The channels of a stage's conv inputs (NH, slot 3): *nh for all but the first resblock's conv1 when it reads the
 * stage input before any activation slot is written, whose channels are *big (0 when there is none). That conv
 * (the 1024 -> 512 and 512 -> 256 resblocks that open stages 2 and 3) may lay its fresh frames over the empty
 * activation slots XA and XB and on into NH (exec.c's fresh_view), so NH is sized for the narrower inputs. */
static void stage_conv_inputs(const w22_model *m, const w22_stage *st, int *nh, int *big) {
    int written = 0;
    *nh = *big = 0;
    for (int l = st->layer0; l < st->layer1; l++) {
        const w22_layer *L = &m->layers[l];
        int a = 0, b = 0; /* the layer's conv inputs that go through NH */
        switch (L->kind) {
        case W22_L_POST_QUANT: a = L->cout; break; /* conv_in's window */
        case W22_L_CONV_IN: a = L->cin; break;
        case W22_L_HEAD: a = L->cin; break;
        case W22_L_RESBLOCK:
            if (!written && L->cin > L->cout) *big = L->cin;
            else a = L->cin;
            b = L->cout;
            break;
        default: break;
        }
        if (a > *nh) *nh = a;
        if (b > *nh) *nh = b;
        if (L->kind == W22_L_CONV_IN || L->kind == W22_L_RESBLOCK || L->kind == W22_L_ATTN) written = 1;
    }
}

/* The scratch offsets and sizes of a stage's private buffers (exec.c uses the same function), in the order T1, XA,
 * XB, NH, U, QKV: XA, XB and NH adjacent, for the first conv's wide input (stage_conv_inputs). */
void w22_stage_scratch(const w22_decoder *d, int s, size_t off[W22_SLOTS], size_t size[W22_SLOTS], size_t *total) {
    const w22_stage *st = &d->stages[s];
    const w22_model *m = &d->model;
    const size_t es = d->backend->ops->elem_size;
    const int H = d->srows[st->level] << st->level, W = d->w << st->level, q = st->chunk;
    /* Channels of the activations and conv outputs (cact) */
    int cact = 0, nh_c, big_c;
    for (int l = st->layer0; l < st->layer1; l++) {
        const w22_layer *L = &m->layers[l];
        if (L->kind == W22_L_RESBLOCK || L->kind == W22_L_ATTN || L->kind == W22_L_CONV_IN ||
            L->kind == W22_L_HEAD) { /* the head's output (3 p^2 channels) lands in T1 too */
            if (L->cout > cact) cact = L->cout;
        }
    }
    if (cact == 0) cact = st->cin;
    stage_conv_inputs(m, st, &nh_c, &big_c);
    const int cout = m->dims[s < 3 ? s + 1 : 4];
    int used[2];
    w22_stage_slots(m, st->layer0, st->layer1, used);
    size_t t1 = w22_frames_bytes(q, H, W, cact, 0, es), tmp_off;
    for (int l = st->layer0; l < st->layer1 && d->head_psum; l++)
        if (m->layers[l].kind == W22_L_HEAD) { /* the head's output and its partial sums' fp32 scratch */
            const size_t need = w22_head_psum_bytes(q, H, W, m->layers[l].cout, es, &tmp_off);
            if (need > t1) t1 = need;
        }
    size_t sizes[8] = {
        used[0] ? w22_frames_bytes(q, H, W, cact, 0, es) : 0, /* 0: XA */
        used[1] ? w22_frames_bytes(q, H, W, cact, 0, es) : 0, /* 1: XB */
        t1,                                             /* 2: T1 (conv1 out, attention in/out, head out) */
        w22_frames_bytes(q, H, W, nh_c, 1, es),         /* 3: NH (conv inputs with border; history: the caches) */
        0,                                              /* 4: unused (time_conv reads its input in place) */
        s < 3 && !st->interleave ? w22_frames_bytes(st->temporal ? 2 * q : q, H, W, cout, 1, es) : 0, /* 5: U (upsample
                                                         * conv input; an interleaving stage's: ubuf) */
        s == 0 ? w22_frames_bytes(q, H, W, 3 * m->dims[0], 0, es) : 0, /* 6: QKV */
        0,
    };
    /* the wide input over XA, XB and NH (each 256-aligned): NH takes what XA and XB leave of it */
    const size_t big = big_c ? w22_frames_bytes(q, H, W, big_c, 1, es) : 0, xab = align_up(sizes[0]) + align_up(sizes[1]);
    if (big > xab + sizes[3]) sizes[3] = big - xab;
    static const int order[8] = {2, 0, 1, 3, 4, 5, 6, 7};
    size_t o = 0;
    for (int i = 0; i < 8; i++) {
        const int k = order[i];
        off[k] = o;
        size[k] = sizes[k];
        o += align_up(sizes[k]);
    }
    *total = o;
}

/* Bytes of an interleaving stage's upsample input (ubuf): 2q frames of a temporal upsampler, q of a spatial one. */
static size_t ubuf_bytes(const w22_decoder *d, int s) {
    const w22_stage *st = &d->stages[s];
    return w22_frames_bytes(st->temporal ? 2 * st->chunk : st->chunk, d->srows[st->level] << st->level, d->w << st->level,
                            d->model.dims[s + 1], 1, d->backend->ops->elem_size);
}

void *w22_stage_free(const w22_decoder *d, int s, size_t *bytes) {
    *bytes = 0;
    if (!d->transient.ptr) return NULL;
    size_t off[8], size[8], total;
    w22_stage_scratch(d, s, off, size, &total);
    char *a = (char *)d->scratch.ptr + off[5]; /* the upsample's input and the attention's qkv: not during a conv */
    char *e = s > 0 ? (char *)d->queue[s].ptr : (char *)d->transient.ptr + d->transient.bytes;
    if (e <= a) return NULL;
    *bytes = (size_t)(e - a);
    return a;
}

/* Forgets a plan's layout (sizes, views, groups) without freeing anything: what w22_plan_release leaves, and where
 * w22_plan_work_bytes' counting copy starts. */
static void plan_forget(w22_decoder *d) {
    w22_region *all[] = {&d->transient, &d->queue[0], &d->gathered, &d->zdev, &d->cache_block, &d->hist_win};
    for (int i = 0; i < 6; i++) all[i]->ptr = NULL, all[i]->bytes = 0;
    for (int i = 0; i <= W22_STAGES; i++) { /* views into transient (queue[0] above) */
        d->queue[i].ptr = NULL;
        d->queue[i].bytes = 0;
        if (i < W22_STAGES) d->ubuf[i].ptr = NULL, d->ubuf[i].bytes = 0;
    }
    d->scratch.ptr = NULL;
    d->scratch.bytes = 0;
    for (int l = 0; l < W22_MAX_LAYERS; l++)
        for (int k = 0; k < 3; k++) { /* views into cache_block or host_cache_block */
            d->cache[l][k].ptr = NULL;
            d->cache[l][k].bytes = 0;
            d->cache_slot[l][k][0] = d->cache_slot[l][k][1] = NULL;
            d->cache_spare[l][k] = d->cache_unit[l][k] = d->cache_host[l][k] = 0;
            d->cache_stride[l][k] = 0;
        }
    for (int g = 0; g < W22_MAX_SPARES; g++) {
        d->spare[g].ptr = d->spare_now[g] = NULL;
        d->spare[g].bytes = 0;
        d->spare_tag[g] = -1;
    }
    d->nspares = 0;
    d->win[0] = d->win[1] = NULL;
    d->win_bytes[0] = d->win_bytes[1] = 0;
    d->host_stages = d->host_spec = 0;
    d->host_count = d->host_total = 0;
    d->host_cache_block = NULL;
    d->host_cache_bytes = 0;
    d->band_store = NULL;
    d->band_store_bytes = 0;
    d->band_store_pinned = 0;
    d->h = d->w = 0;
    d->workspace_bytes = 0;
}

void w22_plan_release(w22_decoder *d) {
    w22_backend *b = d->backend;
    w22_region *all[] = {&d->transient, &d->queue[0], &d->gathered, &d->zdev, &d->cache_block, &d->hist_win};
    for (int i = 0; i < 6; i++)
        if (all[i]->ptr) b->ops->free(b, all[i]->ptr);
    void *host[2] = {d->host_cache_block, d->band_store};
    const int pinned[2] = {b->ops->host_free != NULL, d->band_store_pinned};
    if ((host[0] || host[1]) && b->ops->sync) (void)b->ops->sync(b); /* a failed decode's copies may be queued */
    for (int i = 0; i < 2; i++)
        if (host[i]) {
            if (pinned[i]) b->ops->host_free(b, host[i]);
            else free(host[i]);
        }
    plan_forget(d);
}

static w22_status region_alloc(w22_decoder *d, w22_region *r, size_t bytes, const char *what) {
    if (bytes == 0) return W22_OK;
    if (d->dry) { /* w22_plan_work_bytes: laid out at a fake address, never dereferenced */
        r->ptr = (void *)(uintptr_t)4096;
        r->bytes = bytes;
        d->workspace_bytes += bytes;
        return W22_OK;
    }
    w22_status s = d->backend->ops->alloc(d->backend, bytes, &r->ptr);
    if (s != W22_OK) return w22_fail_context(s, "workspace (%s): ", what);
    r->bytes = bytes;
    d->workspace_bytes += bytes;
    return W22_OK;
}

static int default_chunk(const w22_decoder *d, int s) {
    if (d->test && d->test->chunk[s] > 0) return d->test->chunk[s];
    /* Two frames per chunk at stages 1-3 (v22: stage 2, f121 -2.5% against one; v23: stage 1 too; session 42: stage 3,
     * f121 -8.8% on the Hopper path and -5.3% on the portable one, measured with the Winograd threshold at 256). Their
     * Winograd convs transform 4 input frames for 2 outputs instead of 6 (stage 3's 256-channel convs: 3 per output
     * frame at one-frame chunks), make U half as often, and their GEMMs run twice the rows. The memory stays within
     * the target because the upsample convs hand the next stage one chunk at a time (interleave: stage 2's queue holds
     * 2 frames, not 4, stage 3's 2, not 4), and the 1024 -> 512 and 512 -> 256 convs that open stages 2 and 3 lay
     * their wide inputs over the empty activation slots (stage_conv_inputs). Stage 3's two-frame chunks cost +377 MiB
     * at 1280 x 704 (dev/chunk3_memory.c; 4.20 -> 4.58 GiB of work). That gain is Winograd's: where stage 3's convs
     * run direct (channels below 256, the Winograd threshold on both paths, route.h's w22_route_wino_min_default: the
     * Wan2.1 VAE's 96) a frame is already 921k GEMM rows at 1280 x 720, and one-frame chunks keep its caches rotating
     * and 330 MiB less (test_workspace), so it stays at one frame (its measured plan since session 37). */
    if (s == 3 && d->model.dims[W22_STAGES] < 256) return 1;
    return 2;
}

/* The largest scratch that stage s's 3x3x3 convs ask of the backend for their w22_conv_args.work (backend.h's
 * conv_work; exec.c passes w22_stage_free's span): conv_in and the resblocks' two convs, at the stage's chunk and
 * size. The head's conv_out runs on its partial sums (no Winograd), an upsampler's conv on its phases. */
static size_t stage_conv_work(const w22_decoder *d, int s) {
    w22_backend *b = d->backend;
    if (!b->ops->conv_work) return 0;
    const w22_stage *st = &d->stages[s];
    const int H = d->srows[st->level] << st->level, W = d->w << st->level;
    size_t most = 0;
    for (int l = st->layer0; l < st->layer1; l++) {
        const w22_layer *L = &d->model.layers[l];
        size_t a = 0, c = 0;
        if (L->kind == W22_L_CONV_IN) a = b->ops->conv_work(b, 3, 3, L->cin, L->cout, st->chunk, H, W);
        if (L->kind == W22_L_RESBLOCK) {
            a = b->ops->conv_work(b, 3, 3, L->cin, L->cout, st->chunk, H, W);
            c = b->ops->conv_work(b, 3, 3, L->cout, L->cout, st->chunk, H, W);
        }
        if (a > most) most = a;
        if (c > most) most = c;
    }
    return most;
}

/* The plan and its allocations for latents of h x w (plan_make), all or nothing: a failure (out of memory, say)
 * leaves no workspace and no size recorded, so that the next call plans again instead of trusting half a plan. host:
 * the caches that live in host memory (plan.h's host_spec). */
static w22_status plan_make(w22_decoder *d, int h, int w, int rotate, int psum, unsigned host);

/* w22_plan_work_bytes, and the number of caches that could be hosted (*total); bands >= 0: as if the decoder had been
 * opened with that many (w22_decoder_params.bands), else its own. */
static w22_status plan_count_bands(const w22_decoder *d, int h, int w, unsigned host, int bands, size_t *bytes,
                                   int *total) {
    *bytes = 0;
    if (h < 1 || w < 1) return w22_fail(W22_ERR_BAD_SHAPE, "plan: latents %dx%d, expected positive sizes", h, w);
    w22_decoder *t = malloc(sizeof *t);
    if (!t) return w22_fail(W22_ERR_OUT_OF_MEMORY, "out of host memory for a plan's count");
    memcpy(t, d, sizeof *t);
    plan_forget(t);
    t->dry = 1;
    if (bands >= 0) t->params.bands = bands;
    const w22_status s = plan_make(t, h, w, want_rotate(d), want_psum(d), host);
    if (s == W22_OK) *bytes = t->workspace_bytes + W22_WORK_RESERVE;
    if (total) *total = t->host_total;
    free(t);
    return s;
}

static w22_status plan_count(const w22_decoder *d, int h, int w, unsigned host, size_t *bytes, int *total) {
    return plan_count_bands(d, h, w, host, -1, bytes, total);
}

w22_status w22_plan_work_bytes(const w22_decoder *d, int h, int w, unsigned host, size_t *bytes) {
    return plan_count(d, h, w, host, bytes, NULL);
}

w22_status w22_plan_budget_floor(const w22_decoder *d, int h, int w, size_t *bytes) {
    return w22_plan_work_bytes(d, h, w, 0xf, bytes);
}

/* A decode's work at h x w in `bands` bands with the caches `host` names in host memory (plan.h's host_spec); 0 where
 * no such plan can be made. For the messages below, which name what would need less: a failed count overwrites the
 * last error, so they save the message they extend first. */
static size_t work_in_bands(const w22_decoder *d, int h, int w, int bands, unsigned host) {
    size_t n = 0;
    return plan_count_bands(d, h, w, host, bands, &n, NULL) == W22_OK ? n : 0;
}

/* The fewest bands, more than the decoder's own and at most 64 (decoder.c's bound), whose smallest plan (every cache
 * hosted) fits `budget`, and that plan's work; 0 where none does or the decoder runs on several ranks (a band decode
 * is one rank's: band_plan). */
static int bands_within(const w22_decoder *d, int h, int w, size_t budget, size_t *need) {
    if (d->world > 1) return 0;
    for (int n = d->params.bands > 1 ? d->params.bands + 1 : 2; n <= 64; n++) {
        const size_t b = work_in_bands(d, h, w, n, 0xf);
        if (b && b <= budget) {
            *need = b;
            return n;
        }
        if (n >= h) break; /* no more bands than latent rows: band_plan makes no more */
    }
    return 0;
}

/* After a failed allocation of the default plan (W22_ERR_OUT_OF_MEMORY, no budget: the backend's memory, since only a
 * budget hosts caches), what would need less, appended to its message: the smallest plan of a work-memory budget
 * (every causal cache in host memory) and a band decode's plans in 2, 4 and 8 bands (more than the decoder's own; one
 * rank), each with its work. A user who meets this at 4K on a 24 GB card is told both ways out, in figures. */
static w22_status less_memory_note(const w22_decoder *d, int h, int w, w22_status s) {
    const double GiB = 1073741824.0;
    char was[1200], note[600] = "";
    snprintf(was, sizeof was, "%s", w22_last_error());
    size_t len = 0;
    size_t floor = 0;
    if (w22_plan_budget_floor(d, h, w, &floor) == W22_OK)
        len += (size_t)snprintf(note + len, sizeof note - len, "a work-memory budget (w22_decoder_params."
                                "work_budget_bytes; the CLI's --memory-budget, Python's memory_budget=) down to %.2f "
                                "GiB (every causal cache in host memory)", floor / GiB);
    int listed = 0;
    for (int n = 2; d->world == 1 && n <= 8 && n <= h && len < sizeof note - 80; n *= 2) {
        if (n <= d->params.bands) continue;
        const size_t b = work_in_bands(d, h, w, n, 0);
        if (!b) continue;
        len += (size_t)snprintf(note + len, sizeof note - len, "%s%d bands %.2f GiB", listed ? ", " : len ?
                                "; or a band decode (w22_decoder_params.bands; --bands, bands=): " : "a band decode "
                                "(w22_decoder_params.bands; --bands, bands=): ", n, b / GiB);
        listed++;
    }
    if (!len) return w22_fail(s, "%s", was);
    return w22_fail(s, "%s (less work memory at latents %dx%d: %s)", was, h, w, note);
}

/* The hosting for the decoder's budget at h x w (plan.h's host_spec): the fewest caches of the cost order
 * (plan_make's host_rank: the cheapest bytes over the bus first) whose plan's work fits, else a failure that names
 * the need (every cache hosted) and the budget. One count per hosted cache tried (a layout on a copy, no
 * allocation: microseconds each). */
static w22_status budget_choice(const w22_decoder *d, int h, int w, unsigned *host) {
    const size_t budget = d->params.work_budget_bytes;
    const double GiB = 1073741824.0;
    size_t need = 0;
    *host = 0;
    int total = 0;
    for (int n = 0; n <= total; n++) {
        W22_TRY(plan_count(d, h, w, W22_HOST_CACHES(n), &need, &total));
        if (need <= budget) {
            *host = W22_HOST_CACHES(n);
            return W22_OK;
        }
    }
    W22_TRY(w22_plan_budget_floor(d, h, w, &need));
    char rank[48] = "", more[240] = "";
    if (d->world > 1) snprintf(rank, sizeof rank, " on rank %d of %d", d->rank, d->world);
    size_t band_need = 0;
    const int nb = bands_within(d, h, w, budget, &band_need);
    if (nb)
        snprintf(more, sizeof more, "; or a band decode within this budget: %d bands (w22_decoder_params.bands; "
                 "the CLI's --bands, Python's bands=), whose smallest plan needs %.3f GiB", nb, band_need / GiB);
    return w22_fail(W22_ERR_INVALID_ARG, "work memory budget %.3f GiB (%zu bytes) is below what the smallest plan "
                    "needs for latents %dx%d%s: %.3f GiB (%zu bytes; every causal cache in host memory, %.0f MiB of "
                    "it the backend's own scratch); give a budget of at least that, or 0 for the default plan%s",
                    budget / GiB, budget, h, w, rank, need / GiB, need, W22_WORK_RESERVE / 1048576.0, more);
}

w22_status w22_plan_prepare(w22_decoder *d, int h, int w) {
    const int rotate = want_rotate(d), psum = want_psum(d);
    unsigned host = 0;
    if (d->test && d->test->host) host = d->test->host;
    else if (d->params.work_budget_bytes) W22_TRY(budget_choice(d, h, w, &host));
    /* Skipped re-planning: everything a plan depends on is in this test (the size, the frames per pass, the
     * switches, the hosted stages, the tests' chunk overrides and flags); the workspace's contents are not:
     * w22_plan_run starts every decode from zeroed caches and re-zeroes every border it reads (plan.h). */
    w22_plan_test choices;
    memset(&choices, 0, sizeof choices);
    if (d->test) choices = *d->test;
    if (d->h == h && d->w == w && d->scratch.ptr && d->rotate == rotate && d->head_psum == psum &&
        d->host_spec == host && d->planned_fpp == d->frames_per_pass &&
        !memcmp(&d->planned_test, &choices, sizeof choices))
        return W22_OK;
    w22_plan_release(d);
    const w22_status s = plan_make(d, h, w, rotate, psum, host);
    if (s != W22_OK) {
        w22_plan_release(d);
        return s == W22_ERR_OUT_OF_MEMORY && !d->params.work_budget_bytes ? less_memory_note(d, h, w, s) : s;
    }
    d->planned_fpp = d->frames_per_pass;
    d->planned_test = choices;
    return W22_OK;
}

/* A band decode's geometry (plan.h): bands of r = ceil(h / bands) kept rows, each computed on band_rows = r + 2
 * W22_BAND_HALO rows (r + W22_BAND_HALO with two bands, both at an edge; all h where fewer), the same for every band
 * so that one workspace serves them; a band at the frame's edge moves its rows inward instead of shrinking. Without
 * bands, one band of the rank's rows. */
static w22_status band_plan(w22_decoder *d, int h) {
    const int want = d->params.bands > 1 ? d->params.bands : 1;
    if (want > 1 && d->world > 1)
        return w22_fail(W22_ERR_UNSUPPORTED, "a band decode (%d bands) runs on one rank, not %d", want, d->world);
    const int r = (h + want - 1) / want;
    d->bands = (h + r - 1) / r; /* no band of no kept rows */
    /* two bands are both at an edge: one halo each (the other side is the frame's own edge) */
    const int br = r + (d->bands > 2 ? 2 : 1) * W22_BAND_HALO;
    d->band_rows = d->bands > 1 ? (br < h ? br : h) : d->rows;
    d->srows[0] = d->rows;
    for (int s = 1; s < W22_STAGES; s++) d->srows[s] = d->band_rows;
    w22_band_set(d, 0);
    return W22_OK;
}

int w22_band_a0(const w22_decoder *d, int band) {
    if (d->bands <= 1) return 0;
    const int r = (d->h + d->bands - 1) / d->bands;
    int a0 = band * r - W22_BAND_HALO;
    if (a0 > d->h - d->band_rows) a0 = d->h - d->band_rows;
    return a0 < 0 ? 0 : a0;
}

void w22_band_set(w22_decoder *d, int band) {
    d->band = band;
    if (d->bands <= 1) {
        d->band_a0 = d->band_k0 = 0;
        d->band_k1 = d->rows;
        return;
    }
    const int r = (d->h + d->bands - 1) / d->bands;
    d->band_k0 = band * r;
    d->band_k1 = d->band_k0 + r < d->h ? d->band_k0 + r : d->h;
    d->band_a0 = w22_band_a0(d, band);
}

static w22_status plan_make(w22_decoder *d, int h, int w, int rotate, int psum, unsigned host) {
    d->rotate = rotate;
    d->head_psum = psum;
    d->host_spec = host;
    d->host_stages = 0;
    d->host_count = 0;
    const w22_model *m = &d->model;
    const size_t es = d->backend->ops->elem_size;
    w22_split_rows(h, d->rank, d->world, &d->row0, &d->rows);
    if (d->rows < 1)
        return w22_fail(W22_ERR_INVALID_ARG, "latent height %d is too small for %d ranks (each needs a row)", h,
                        d->world);
    d->h = h;
    d->w = w;
    W22_TRY(band_plan(d, h));

    /* Stages: cut the layer list after each stage end (model.h: TI2V-5B's DupUps, Wan2.1's upsamplers). */
    int s = 0, start = 0;
    for (int l = 0; l < m->nlayers && s < W22_STAGES; l++) {
        if (m->layers[l].stage_end) {
            w22_stage *st = &d->stages[s];
            memset(st, 0, sizeof *st);
            st->layer0 = start;
            st->layer1 = l + 1;
            st->level = s;
            st->cin = m->stage_cin[s];
            st->temporal = m->layers[l].kind != W22_L_HEAD && m->layers[l].temporal;
            start = l + 1;
            s++;
        }
    }
    if (s != W22_STAGES || start != m->nlayers)
        return w22_fail(W22_ERR_INTERNAL, "plan: %d stages from %d layers, expected 4", s, m->nlayers);
    d->stages[0].chunk = d->stages[0].in_cap = d->frames_per_pass;
    for (s = 1; s < W22_STAGES; s++) {
        w22_stage *p = &d->stages[s - 1], *st = &d->stages[s];
        const int made = p->chunk * (p->temporal ? 2 : 1), c = default_chunk(d, s);
        /* An upsampler making more frames than this stage's chunk hands them on chunk by chunk (exec.c's
         * run_upsample): the queue holds one chunk, not the previous stage's whole output. A temporal one hands on
         * the two frames of c / 2 input frames at a time (c even; the decode's first input frame makes one). Only
         * where the up block's input (the DupUp's source, read by every handed-on chunk) is the stage's input, in
         * its queue: stage 0's block starts after the mid block, its input in a scratch slot that the later
         * stages' chunks overwrite, so stage 0 (more than one latent frame per pass) hands on its whole output. */
        const int block_in_queue = m->layers[p->layer0].kind == W22_L_BLOCK_BEGIN;
        /* Wan2.1 (no DupUp): nothing of the stage is read after its upsample input is made; stage 0 still hands on
         * its whole output, as TI2V-5B's (its frames are the smallest; one rule for both models there) */
        p->interleave = c < made && (!p->temporal || c % 2 == 0) && (block_in_queue || (!m->cfg.is_residual && s > 1));
        st->in_cap = p->interleave ? c : made;
        st->chunk = c < st->in_cap ? c : st->in_cap;
    }
    d->stages[W22_STAGES - 1].interleave = 0;

    /* Queues: stage inputs (no border), and the video staging [rows][frames][3][cols] (full rows: rank 0 gathers).
     * queue[0] apart; the stages' scratch and queues 4, 3, 2, 1 in that order in one block (transient). */
    for (s = 0; s < W22_STAGES; s++) {
        const w22_stage *st = &d->stages[s];
        d->queue[s].bytes = w22_frames_bytes(st->in_cap, d->srows[s] << s, w << s, st->cin, 0, es);
    }
    int vf, vh, vw;
    w22_video_shape(&m->cfg, 1, h, w, &vf, &vh, &vw);
    d->queue[W22_STAGES].bytes = (size_t)vh * d->stages[3].chunk * 3 * vw * es;
    W22_TRY(region_alloc(d, &d->queue[0], d->queue[0].bytes, "stage 0 input"));
    size_t scratch = 0;
    for (s = 0; s < W22_STAGES; s++) {
        size_t off[8], size[8], total;
        w22_stage_scratch(d, s, off, size, &total);
        if (total > scratch) scratch = total;
    }
    /* the queues from the last stage's on, each followed by the interleaving upsample input that fills it (plan.h) */
    size_t qoff[W22_STAGES + 1], uoff[W22_STAGES], tb = 0;
    for (int pass = 0; pass < 2; pass++) {
        tb = align_up(scratch);
        for (s = W22_STAGES; s >= 1; s--) {
            qoff[s] = tb;
            tb += align_up(d->queue[s].bytes);
            d->ubuf[s - 1].bytes = d->stages[s - 1].interleave ? ubuf_bytes(d, s - 1) : 0;
            uoff[s - 1] = tb;
            tb += align_up(d->ubuf[s - 1].bytes);
        }
        /* What each stage leaves free during its convs (w22_stage_free: from its slot 5 to its queue, the block's
         * end for stage 0) must hold what its convs ask of the backend (conv_work: CUDA's Winograd bands); where it
         * does not, the scratch grows by the largest shortfall, which every span gains (all of them end past it).
         * Nothing grows where no backend asks more than the stages leave, as at the Hopper path's Winograd threshold
         * (512) for the sizes users decode; the portable path's 256 grows stage 3's (150 MiB at 1280 x 704). */
        size_t short_by = 0;
        for (s = 0; s < W22_STAGES && pass == 0; s++) {
            size_t off[8], size[8], total;
            w22_stage_scratch(d, s, off, size, &total);
            const size_t want = stage_conv_work(d, s), end = s > 0 ? qoff[s] : tb;
            const size_t span = end > off[5] ? end - off[5] : 0;
            if (want > span && want - span > short_by) short_by = want - span;
        }
        if (!short_by) break;
        scratch += short_by;
    }
    W22_TRY(region_alloc(d, &d->transient, tb, "stage scratch and queues"));
    d->scratch.ptr = d->transient.ptr;
    d->scratch.bytes = scratch;
    for (s = 1; s <= W22_STAGES; s++) d->queue[s].ptr = (char *)d->transient.ptr + qoff[s];
    for (s = 0; s < W22_STAGES; s++) d->ubuf[s].ptr = d->ubuf[s].bytes ? (char *)d->transient.ptr + uoff[s] : NULL;
    if (d->world > 1)
        W22_TRY(region_alloc(d, &d->gathered, w22_frames_bytes(d->stages[0].chunk, h, w, 3 * m->dims[0], 0, es),
                             "attention gather"));
    /* Causal caches: two frames of each kt=3 conv's input, kept between chunks (the head's: two fp32 frames of its
     * partial sums with psum); one allocation carved into them and the spares (dozens of separate ones would each
     * round up to the allocator's granularity: tens of MiB at 704x1248). */
    for (s = 0; s < W22_STAGES; s++) {
        const w22_stage *st = &d->stages[s];
        const int H = d->srows[st->level] << st->level, W = w << st->level;
        for (int l = st->layer0; l < st->layer1; l++) {
            const w22_layer *L = &m->layers[l];
            w22_region *c = d->cache[l];
            switch (L->kind) {
            case W22_L_CONV_IN: c[0].bytes = w22_frames_bytes(2, H, W, L->cin, 1, es); break;
            case W22_L_HEAD:
                c[0].bytes = psum ? w22_frames_bytes(2, H, W, L->cout, 0, 4) : w22_frames_bytes(2, H, W, L->cin, 1, es);
                break;
            case W22_L_RESBLOCK:
                c[0].bytes = w22_frames_bytes(2, H, W, L->cin, 1, es);
                c[1].bytes = w22_frames_bytes(2, H, W, L->cout, 1, es);
                break;
            case W22_L_UPSAMPLE:
                if (L->temporal) c[1].bytes = w22_frames_bytes(2, H, W, L->cin, 0, es); /* time_conv */
                break;
            default: break;
            }
        }
    }
    /* The hosted caches (plan.h's host_spec): every cache of the stages in its mask, and the first n of the cost order
     * (W22_HOST_CACHES(n)), never the head's partial sums, which the conv updates in place (20 MiB at 704x1280). The
     * cost order: a cache's bytes over the bus per decode over the bytes it frees on the device are its stage's convs
     * per decode, frames / chunk (each conv copies its two history frames in), so the caches of the stages with the
     * fewest convs come first (at 704x1280: stage 0's frames 1/8 of stage 3's per video frame, stage 1's 1/4, stage
     * 2's 1/2), within a stage the largest first, then layer order. Decided before the rotation groups below, which
     * leave hosted caches out (their pushes copy through a window). */
    {
        int nh = 0, hl[W22_MAX_LAYERS * 3], hk[W22_MAX_LAYERS * 3];
        long tf = 1, num[W22_STAGES];
        for (s = 0; s < W22_STAGES; s++) {
            num[s] = tf; /* the stage's convs per decode ~ frames (tf per latent frame) / chunk */
            if (d->stages[s].temporal) tf *= 2;
        }
        for (int l = 0; l < m->nlayers; l++)
            for (int k = 0; k < 3; k++)
                if (d->cache[l][k].bytes && !(m->layers[l].kind == W22_L_HEAD && psum)) hl[nh] = l, hk[nh] = k, nh++;
        int stage_of[W22_MAX_LAYERS];
        for (s = 0; s < W22_STAGES; s++)
            for (int l = d->stages[s].layer0; l < d->stages[s].layer1; l++) stage_of[l] = s;
        for (int i = 1; i < nh; i++) /* insertion sort by (num / chunk, -bytes), stable: layer order last */
            for (int j = i; j > 0; j--) {
                const int a = stage_of[hl[j - 1]], b = stage_of[hl[j]];
                const long ca = num[a] * d->stages[b].chunk, cb = num[b] * d->stages[a].chunk;
                const size_t ba = d->cache[hl[j - 1]][hk[j - 1]].bytes, bb = d->cache[hl[j]][hk[j]].bytes;
                if (ca < cb || (ca == cb && ba <= bb)) break;
                const int tl = hl[j], tk = hk[j];
                hl[j] = hl[j - 1], hk[j] = hk[j - 1], hl[j - 1] = tl, hk[j - 1] = tk;
            }
        const int n = (int)(host >> 8);
        for (int i = 0; i < nh; i++)
            if (i < n || (host >> stage_of[hl[i]] & 1)) {
                d->cache_host[hl[i]][hk[i]] = 1;
                d->host_stages |= 1u << stage_of[hl[i]];
                d->host_count++;
            }
        d->host_total = nh;
    }
    /* Spare units (rotation): at a stage of one- or two-frame chunks, the caches whose new frames a norm writes
     * (norm_conv) and that have one frame size form a group; a group of two or more gets one spare unit (a chunk's
     * frames), so that each push is a pointer swap (exec.c's cache_push) instead of a copy. A group of one would
     * need a third unit for one cache (stage 2's 1024-channel and stage 3's 512-channel conv1 of the first
     * resblock: 229 and 227 MB at 704x1248): those keep copying. Two stages' groups whose units differ by under 2%
     * share one spare, every member's slots padded to the larger unit: at 704x1248 stage 2's two-frame unit of 512
     * channels (114.4 MB) and stage 3's one frame of 256 (113.5 MB) rotate through one spare. A group of two-frame
     * units only joins another stage's spare: one of its own would cost two frames (stage 1's 58 MB, stage 2's 114:
     * not within the 4 GiB target), so the stages of one-frame chunks are walked first. Where stage 3's chunk is two
     * frames (default_chunk: TI2V-5B), a decode has no one-frame stage at stages 1-3 and those caches copy (measured
     * in the -8.8% of session 42); the Wan2.1 VAE's one-frame stage 3 still rotates, and stage 0 at one latent frame
     * per pass. */
    int spare_stage[W22_MAX_SPARES];
    for (int pass = 0; pass < 2 && rotate; pass++)
        for (s = W22_STAGES - 1; s >= 0; s--) {
            const w22_stage *st = &d->stages[s];
            const int u = st->chunk;
            if (u != pass + 1) continue; /* longer chunks push through the fresh slot (copies) */
            for (int l = st->layer0; l < st->layer1; l++)
                for (int k = 0; k < 2; k++) {
                    const int c = norm_conv_input(&m->layers[l], k, psum);
                    if (!c || d->cache_spare[l][k] || d->cache_host[l][k]) continue; /* hosted caches copy */
                    int members = 0;
                    for (int l2 = l; l2 < st->layer1; l2++)
                        for (int k2 = 0; k2 < 2; k2++)
                            members += norm_conv_input(&m->layers[l2], k2, psum) == c && !d->cache_host[l2][k2];
                    if (members < 2) continue;
                    const size_t unit = w22_frames_bytes(u, d->srows[st->level] << st->level, w << st->level, c, 1, es);
                    int g = -1;
                    for (int j = 0; j < d->nspares && g < 0; j++) {
                        const size_t a = d->spare[j].bytes, lo = a < unit ? a : unit, hi = a < unit ? unit : a;
                        if (spare_stage[j] != s && ((hi - lo) * 50 < hi || (d->test && d->test->share_any))) g = j;
                    }
                    if (g < 0 && u == 2) continue;
                    if (g < 0) {
                        if (d->nspares == W22_MAX_SPARES)
                            return w22_fail(W22_ERR_INTERNAL, "plan: more than %d cache rotation groups",
                                            W22_MAX_SPARES);
                        g = d->nspares++;
                        d->spare[g].bytes = 0;
                        spare_stage[g] = s;
                    }
                    if (unit > d->spare[g].bytes) d->spare[g].bytes = unit;
                    for (int l2 = l; l2 < st->layer1; l2++)
                        for (int k2 = 0; k2 < 2; k2++)
                            if (norm_conv_input(&m->layers[l2], k2, psum) == c && !d->cache_host[l2][k2])
                                d->cache_spare[l2][k2] = (unsigned char)(g + 1),
                                d->cache_unit[l2][k2] = (unsigned char)u;
                }
        }
    /* the slots: a one-frame unit's cache is two units (slot 1 a unit on), a two-frame one's one unit (its frames
     * adjacent); a cache that copies, its two frames */
    size_t cache_total = 0, host_total = 0, win = 0, win2 = 0; /* the two largest hosted caches */
    for (int l = 0; l < W22_MAX_LAYERS; l++)
        for (int k = 0; k < 3; k++) {
            w22_region *c = &d->cache[l][k];
            if (!c->bytes) continue;
            const int g = d->cache_spare[l][k] - 1;
            d->cache_stride[l][k] = c->bytes / 2;
            if (g >= 0) {
                if (d->cache_unit[l][k] == 1) d->cache_stride[l][k] = d->spare[g].bytes;
                c->bytes = d->spare[g].bytes * (d->cache_unit[l][k] == 1 ? 2 : 1); /* two: the frames adjacent */
            }
            if (d->cache_host[l][k]) {
                host_total += align_up(c->bytes);
                if (c->bytes > win) win2 = win, win = c->bytes;
                else if (c->bytes > win2) win2 = c->bytes;
            } else {
                cache_total += align_up(c->bytes);
            }
        }
    for (int g = 0; g < d->nspares; g++) cache_total += align_up(d->spare[g].bytes);
    W22_TRY(region_alloc(d, &d->cache_block, cache_total, "causal caches"));
    /* two windows (exec.c): the second, of the second largest hosted cache, takes the prefetches that fit it */
    W22_TRY(region_alloc(d, &d->hist_win, win ? align_up(win) + win2 : 0, "the hosted caches' history windows"));
    d->win[0] = win ? d->hist_win.ptr : NULL;
    d->win[1] = win2 ? (char *)d->hist_win.ptr + align_up(win) : NULL;
    d->win_bytes[0] = win, d->win_bytes[1] = win2;
    if (host_total) {
        w22_backend *b = d->backend;
        if (d->dry) d->host_cache_block = (void *)(uintptr_t)4096;
        else if (b->ops->host_alloc) {
            const w22_status e = b->ops->host_alloc(b, host_total, &d->host_cache_block);
            if (e != W22_OK) return w22_fail_context(e, "causal caches in host memory: ");
        } else if (!(d->host_cache_block = w22_malloc(host_total, "causal caches in host memory")))
            return W22_ERR_OUT_OF_MEMORY;
        d->host_cache_bytes = host_total;
    }
    size_t off = 0, hoff = 0;
    for (int l = 0; l < W22_MAX_LAYERS; l++)
        for (int k = 0; k < 3; k++)
            if (d->cache[l][k].bytes && d->cache_host[l][k]) {
                d->cache[l][k].ptr = (char *)d->host_cache_block + hoff;
                hoff += align_up(d->cache[l][k].bytes);
            } else if (d->cache[l][k].bytes) {
                d->cache[l][k].ptr = (char *)d->cache_block.ptr + off;
                off += align_up(d->cache[l][k].bytes);
            }
    for (int g = 0; g < d->nspares; g++) {
        d->spare[g].ptr = (char *)d->cache_block.ptr + off;
        off += align_up(d->spare[g].bytes);
    }
    return W22_OK;
}
