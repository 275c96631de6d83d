/* Runs the plan: latents in, the four stages chunk by chunk, video frames out. Every op goes through the backend's
 * op table and every exchange through src/dist, so the same code runs on the CPU, on a GPU, and on each rank.
 * The causal caches: a conv reads its two history frames in place; after it, the newest input frame becomes
 * history either by a pointer swap with its group's spare unit (chunks of one or two frames: the norm wrote them
 * into the spare) or by a copy; the head's conv_out keeps partial sums instead (plan.h). */
#include <stdlib.h>
#include <string.h>
#include "common.h"
#include "dist/exchange.h"
#include "plan/plan_internal.h"

/* A view of f frames (h x w x c) at ptr; with border, each frame has a one-pixel border and the view starts at
 * its interior. */
static w22_view mkview(void *ptr, int f, int h, int w, int c, int border, int es) {
    const long sw = c, sh = (long)(w + 2 * border) * c, sf = (long)(h + 2 * border) * sh;
    w22_view v = {(char *)ptr + (border * sh + border * sw) * es, f, h, w, c, sf, sh, sw, es};
    return v;
}

typedef struct {
    w22_decoder *d;
    int s, H, W, m, first, es;
    size_t off[W22_SLOTS], size[W22_SLOTS];
    char *scratch;
    w22_view x;        /* the stage's input frames of this chunk */
    w22_view cur;      /* the activation now */
    w22_view blockin;  /* the up block's input (DupUp source) */
    int dup_fused;     /* the upsampler's conv added the DupUp: the W22_L_DUPUP layer after it has nothing to do */
    int nout;          /* frames handed to the next stage */
    w22_view zeroed;   /* the fresh view whose border was zeroed last in this chunk (ptr NULL: none) */
    void *work;        /* what this stage leaves free during its convs (w22_stage_free): their scratch */
    size_t work_bytes;
    int after;         /* the hosted cache (l * 3 + k) whose conv runs next after this chunk and the chunks it hands
                        * on to (-1: none, or not known): prefetch_next's target at the chunk's last hosted conv */
} chunk_ctx;

/* The first hosted cache (l * 3 + k) a chunk of stage s reaches: its stage's first in layer order, else, as a chunk
 * hands its frames on before the next one runs, the first of the nearest later stage that has one (-1: none). */
static int first_run(const w22_decoder *d, int s) {
    for (; s < W22_STAGES; s++)
        for (int l = d->stages[s].layer0; l < d->stages[s].layer1; l++)
            for (int c = 0; c < 3; c++)
                if (d->cache_host[l][c]) return l * 3 + c;
    return -1;
}

/* A view of f frames (c channels) in scratch buffer `slot` of this stage (plan.c's w22_stage_scratch), checked
 * against the size the plan gave it: a layout rule that drifted from plan.c fails here instead of overwriting
 * the next buffer. */
static w22_status slot_view(chunk_ctx *k, int slot, int f, int c, int border, w22_view *v) {
    const size_t need = w22_frames_bytes(f, k->H, k->W, c, border, k->es), have = k->size[slot];
    if (need > have)
        return w22_fail(W22_ERR_INTERNAL, "plan: stage %d buffer %d needs %zu bytes (%d frames, %d channels), sized %zu",
                        k->s, slot, need, f, c, have);
    *v = mkview(k->scratch + k->off[slot], f, k->H, k->W, c, border, k->es);
    return W22_OK;
}

/* The fresh input frames of a conv with kt = 3 over this chunk: m frames, bordered when ks = 3 (its two history
 * frames stay in the conv's cache and are read in place: w22_conv_args.hist). A conv wider than NH (`wide`: the
 * first resblock's conv1 reading the stage input, whose output goes to T1) lays them from XA's start over XA, XB
 * and NH, which hold nothing yet (plan.c's stage_conv_inputs sizes NH for it). */
static w22_status fresh_view_of(chunk_ctx *k, int n, int c, int wide, w22_view *v) {
    const size_t need = w22_frames_bytes(n, k->H, k->W, c, 1, k->es);
    if (!wide || need <= k->size[W22_SLOT_NH]) return slot_view(k, W22_SLOT_NH, n, c, 1, v);
    const size_t have = k->off[W22_SLOT_NH] + k->size[W22_SLOT_NH] - k->off[W22_SLOT_XA];
    if (k->cur.ptr != k->x.ptr || k->off[W22_SLOT_XB] < k->off[W22_SLOT_XA] || k->off[W22_SLOT_NH] < k->off[W22_SLOT_XB] ||
        need > have)
        return w22_fail(W22_ERR_INTERNAL, "plan: stage %d's wide conv input (%d frames, %d channels, %zu bytes) needs "
                        "the empty XA, XB and NH in a row (%zu bytes)", k->s, n, c, need, have);
    *v = mkview(k->scratch + k->off[W22_SLOT_XA], n, k->H, k->W, c, 1, k->es);
    return W22_OK;
}
static w22_status fresh_view(chunk_ctx *k, int n, int c, w22_view *v) { return fresh_view_of(k, n, c, 0, v); }

/* The same, with its border zeroed. Within one chunk of one stage nothing but interior writes touches the fresh
 * slot (the other slots are disjoint from it, and the next stage runs after the chunk), so a view laid out as the
 * one zeroed last still has a zero border: the four zero launches are skipped (about 290 launches per latent frame
 * at 704 x 1248). Not with ranks: the halo exchange writes the border rows. */
static w22_status fresh_bordered(chunk_ctx *k, int n, int c, int wide, w22_view *v) {
    W22_TRY(fresh_view_of(k, n, c, wide, v));
    const w22_view *z = &k->zeroed;
    if (k->d->world == 1 && z->ptr == v->ptr && z->f == v->f && z->h == v->h && z->w == v->w &&
        z->c == v->c && z->sf == v->sf && z->sh == v->sh && z->sw == v->sw)
        return w22_check_border(k->d, v, "a fresh conv input whose zeroing was skipped (zeroed earlier in the chunk)");
    W22_TRY(w22_zero_border(k->d->backend, *v));
    k->zeroed = *v;
    return W22_OK;
}

/* The fresh input frames of a conv whose cache rotates, n of them (its unit): its group's spare unit (plan.c), where
 * the norm writes them. Their borders must be zero: every cache and spare is zero at the decode's start, and
 * afterwards only interiors are written (the rotation moves whole units, and no copy lands in a group's memory), so
 * a unit's borders stay zero in the layout of the stage that last wrote it (spare_tag) and are zeroed only when
 * another stage of the group takes it (twice a chunk of stage 2 at 704x1248). With ranks the halo exchange wrote the
 * border rows of the frame this memory held, so they are zeroed every time, as fresh_bordered does. */
static w22_status spare_view(chunk_ctx *k, int g, int c, int n, w22_view *v) {
    w22_decoder *d = k->d;
    const size_t need = w22_frames_bytes(n, k->H, k->W, c, 1, k->es);
    if (need > d->spare[g].bytes)
        return w22_fail(W22_ERR_INTERNAL, "plan: stage %d's conv input of %d frames and %d channels needs %zu bytes, "
                        "its spare unit %d holds %zu", k->s, n, c, need, g, d->spare[g].bytes);
    *v = mkview(d->spare_now[g], n, k->H, k->W, c, 1, k->es);
    if (d->world > 1 || (d->spare_tag[g] >= 0 && d->spare_tag[g] != k->s))
        return w22_zero_border(d->backend, *v);
    return w22_check_border(d, v, "a spare unit whose zeroing was skipped (its borders zero in this stage's layout)");
}

/* ---- the hosted caches' windows (plan.h's host_stages) ----
 * Two device windows: win[0] holds two frames of the largest hosted cache, win[1] of the second largest. A hosted
 * conv reads its history from one window; while it runs, the next hosted conv of its stage's chunk gets its history
 * copied into the other (a prefetch on the backend's copy queue), and after it the newest frames go back to the host
 * through its own window (a device copy on the main queue, then the copy queue's copy out), so the main queue waits
 * on the bus only where no prefetch brought the history (a chunk's first hosted conv; a cache too large for the
 * other window). Ordering: every copy into or out of window w carries tag w, so the copy queue keeps them in order
 * (a prefetch into w after the write-back out of w); the main queue waits for tag w (win_wait) before a conv reads w
 * or an op writes it, and for a cache's last write-back before a prefetch reads its host slots (hist_load). Backends
 * without a copy queue copy on the main queue (copy_bytes), in order. */

/* A copy tagged with window w on the copy queue (or the main queue's copy_bytes where there is none). */
static w22_status win_copy(w22_decoder *d, int w, void *dst, const void *src, size_t n) {
    w22_backend *b = d->backend;
    if (!b->ops->copy_begin || !b->ops->copy_wait) return b->ops->copy_bytes(b, dst, src, n);
    W22_TRY(b->ops->copy_begin(b, dst, src, n, w));
    d->win_issued[w]++;
    return W22_OK;
}

/* The main queue's later work waits for every copy begun with window w's tag. */
static w22_status win_wait(w22_decoder *d, int w) {
    if (d->win_waited[w] == d->win_issued[w]) return W22_OK;
    w22_backend *b = d->backend;
    W22_TRY(b->ops->copy_wait(b, w));
    d->win_waited[w] = d->win_issued[w];
    return W22_OK;
}

/* The history of hosted cache (li, kk), frames of fb bytes, oldest first, into window w: each slot this decode has
 * written copied in (after the cache's last write-back: waited for unless it went through w, whose tag orders it), a
 * slot not yet written a zero fill (the causal zeros; the host block is never zeroed), on the main queue after the
 * window's copies. */
static w22_status hist_load(w22_decoder *d, int li, int kk, int w, size_t fb) {
    w22_backend *b = d->backend;
    const int u = d->cache_wb_win[li][kk] - 1;
    if (u >= 0 && u != w && (int)(d->win_waited[u] - d->cache_wb_seq[li][kk]) < 0) W22_TRY(win_wait(d, u));
    const int old = d->cache_old[li][kk];
    for (int i = 0; i < 2; i++) {
        char *dst = (char *)d->win[w] + i * fb;
        const int p = i == 0 ? old : 1 - old;
        if (d->cache_written[li][kk] >> p & 1) {
            W22_TRY(win_copy(d, w, dst, d->cache_slot[li][kk][p], fb));
        } else {
            W22_TRY(win_wait(d, w));
            W22_TRY(b->ops->fill(b, dst, fb, 0));
        }
    }
    return W22_OK;
}

/* The window of the fewest bytes that holds `need` (-1: none). */
static int win_fit(const w22_decoder *d, size_t need) {
    int best = -1;
    for (int w = 0; w < 2; w++)
        if (d->win[w] && d->win_bytes[w] >= need && (best < 0 || d->win_bytes[w] < d->win_bytes[best])) best = w;
    return best;
}

/* While the hosted conv of cache (li, kk) runs from window 1 - o, the history of the hosted conv that runs next is
 * copied into window o, if it fits: the next hosted cache of this stage's chunk in layer order (their convs' order;
 * none after the upsampler's time_conv, the stage's last), else, at the chunk's last, the next chunk's first: the
 * stages run depth first (a chunk hands its frames on, and the later stages' chunks run, before the next chunk of
 * this stage), so that is the first hosted cache of the later stages (first_run), else the chunk's `after` (a
 * sibling chunk's first, or its parent's after). That cache's slots and their order do not change before its conv:
 * only its own push changes them, and its push in this round is done (the caches of other chunks), or it is later
 * in this chunk (not this cache: a stage's only hosted cache is not prefetched for its next chunk). A prefetch its
 * conv does not take (a decode's first chunk skips the time_conv) is waited for at the next hosted conv. */
static w22_status prefetch_next(chunk_ctx *k, int li, int kk, int o) {
    w22_decoder *d = k->d;
    const w22_stage *st = &d->stages[k->s];
    int target = -1;
    for (int l = li, c = kk + 1; l < st->layer1 && target < 0; c++) {
        if (c == 3) {
            l++, c = -1;
            continue;
        }
        if (d->cache_host[l][c]) target = l * 3 + c;
    }
    if (target < 0) target = k->s + 1 < W22_STAGES ? first_run(d, k->s + 1) : -1;
    if (target < 0) target = k->after;
    if (target < 0 || target == li * 3 + kk) return W22_OK;
    const int l = target / 3, c = target % 3;
    const size_t fb = d->cache_stride[l][c];
    if (!d->win[o] || 2 * fb > d->win_bytes[o]) return W22_OK; /* it loads at its conv */
    W22_TRY(hist_load(d, l, c, o, fb));
    d->pre_l = l, d->pre_k = c, d->pre_win = o;
    return W22_OK;
}

/* The two history frames of cache (li, kk), oldest first, shaped like one frame of `like`. The cache is a ring of
 * two frame slots (cache_slot); cache_old says which slot holds the older frame. A hosted cache (plan.h's
 * host_stages) is read through a device window (above): brought there by the prefetch during the hosted conv before,
 * else loaded now; then the next hosted conv's prefetch begins. */
static w22_status cache_hist(chunk_ctx *k, int li, int kk, w22_view like, int border, w22_view hist[2]) {
    w22_decoder *d = k->d;
    const int old = d->cache_old[li][kk];
    if (d->cache_host[li][kk]) {
        const size_t fb = w22_frames_bytes(1, like.h, like.w, like.c, border, like.es);
        if (fb != d->cache_stride[li][kk] || 2 * fb > d->win_bytes[0])
            return w22_fail(W22_ERR_INTERNAL, "plan: hosted cache %d of layer %d: history frames of %zu bytes, planned "
                            "%zu, windows of %zu and %zu bytes", kk, li, fb, d->cache_stride[li][kk], d->win_bytes[0],
                            d->win_bytes[1]);
        int w;
        if (d->pre_l == li && d->pre_k == kk) {
            w = d->pre_win;
            d->prefetched++;
        } else {
            if (d->pre_l >= 0) W22_TRY(win_wait(d, d->pre_win)); /* not taken: done before its window is reused */
            w = win_fit(d, 2 * fb);
            W22_TRY(hist_load(d, li, kk, w, fb));
            d->loaded++;
        }
        d->pre_l = -1;
        d->cur_win = w;
        W22_TRY(win_wait(d, w));
        for (int i = 0; i < 2; i++)
            hist[i] = mkview((char *)d->win[w] + i * fb, 1, like.h, like.w, like.c, border, like.es);
        return prefetch_next(k, li, kk, 1 - w);
    }
    for (int i = 0; i < 2; i++)
        hist[i] = mkview(d->cache_slot[li][kk][i == 0 ? old : 1 - old], 1, like.h, like.w, like.c, border, like.es);
    return W22_OK;
}

/* A hosted cache's push: the chunk's newest frame (two with two or more) into the window its conv just read (the
 * main queue, after the conv: the fresh frames' buffer is free for the next op at once), then out to the host slots
 * from there on the copy queue (tag cur_win: the window's next prefetch waits for it). */
static w22_status hosted_push(w22_decoder *d, int li, int kk, const char *base, int f, size_t fb) {
    w22_backend *b = d->backend;
    const int w = d->cur_win, n = f == 1 ? 1 : 2;
    if (w < 0 || w > 1 || !d->win[w] || n * fb > d->win_bytes[w])
        return w22_fail(W22_ERR_INTERNAL, "plan: hosted cache %d of layer %d: %d frames of %zu bytes for window %d",
                        kk, li, n, fb, w);
    void **slot = d->cache_slot[li][kk];
    unsigned char *old = &d->cache_old[li][kk];
    char *win = d->win[w];
    W22_TRY(b->ops->copy_bytes(b, win, base + (size_t)(f - n) * fb, n * fb));
    if (n == 1) {
        W22_TRY(win_copy(d, w, slot[*old], win, fb));
        d->cache_written[li][kk] |= (unsigned char)(1 << *old);
        *old ^= 1;
    } else {
        W22_TRY(win_copy(d, w, slot[*old], win, fb));
        W22_TRY(win_copy(d, w, slot[1 - *old], win + fb, fb));
        d->cache_written[li][kk] = 3;
    }
    d->cache_wb_win[li][kk] = (unsigned char)(w + 1);
    d->cache_wb_seq[li][kk] = d->win_issued[w];
    return W22_OK;
}

/* After the conv: the window's last two frames become the history. A chunk of its cache's unit whose frames are its
 * group's spare (spare_view) rotates, nothing copied: one frame becomes the newer slot and the older slot's memory
 * the spare; two frames become both slots and the old unit (the two slots, adjacent) the spare. Else the newest
 * frame is copied over the older slot (two frames when the chunk has two or more); a hosted cache's through its
 * window (hosted_push). */
static w22_status cache_push(chunk_ctx *k, int li, int kk, w22_view fresh, int border) {
    w22_decoder *d = k->d;
    w22_backend *b = d->backend;
    const size_t fb = w22_frames_bytes(1, fresh.h, fresh.w, fresh.c, border, fresh.es);
    if ((size_t)fresh.sf * fresh.es != fb || fb * 2 > d->cache[li][kk].bytes)
        return w22_fail(W22_ERR_INTERNAL, "plan: conv input frames of %zu bytes do not fit a cache of %zu", fb,
                        d->cache[li][kk].bytes);
    char *base = (char *)fresh.ptr - (border * fresh.sh + border * fresh.sw) * fresh.es;
    if (d->cache_host[li][kk]) return hosted_push(d, li, kk, base, fresh.f, fb);
    void **slot = d->cache_slot[li][kk];
    unsigned char *old = &d->cache_old[li][kk];
    const int g = d->cache_spare[li][kk] - 1;
    if (g >= 0 && fresh.f == d->cache_unit[li][kk] && base == d->spare_now[g]) {
        d->spare_tag[g] = k->s; /* the unit it gets back held this stage's frames */
        if (fresh.f == 1) {
            d->spare_now[g] = slot[*old];
            slot[*old] = base;
            *old ^= 1;
            return W22_OK;
        }
        char *u0 = (char *)(slot[0] < slot[1] ? slot[0] : slot[1]);
        char *u1 = (char *)(slot[0] < slot[1] ? slot[1] : slot[0]);
        if (u1 != u0 + fb)
            return w22_fail(W22_ERR_INTERNAL, "plan: a two-frame cache's slots are %td bytes apart, expected %zu",
                            u1 - u0, fb);
        d->spare_now[g] = u0;
        slot[0] = base, slot[1] = base + fb;
        *old = 0;
        return W22_OK;
    }
    if (fresh.f == 1) {
        W22_TRY(b->ops->copy_bytes(b, slot[*old], base, fb));
        *old ^= 1;
        return W22_OK;
    }
    const char *last2 = base + (size_t)(fresh.f - 2) * fb;
    if (*old == 0 && (char *)slot[1] == (char *)slot[0] + fb) return b->ops->copy_bytes(b, slot[0], last2, 2 * fb);
    W22_TRY(b->ops->copy_bytes(b, slot[*old], last2, fb));
    return b->ops->copy_bytes(b, slot[1 - *old], last2 + fb, fb);
}

/* Output rows [y0, y0 + n) of a conv whose spatial kernel is 3 (not upsampling): every view cut to those rows;
 * the input's border rows are then its neighbouring rows. */
typedef struct {
    w22_conv_args a;
    w22_view res, sc, ps;
} conv_rows;
static void cut_rows(const w22_conv_args *a, int y0, int n, conv_rows *r) {
    r->a = *a;
    r->a.in = w22_view_rows(a->in, y0, n);
    r->a.out = w22_view_rows(a->out, y0, n);
    for (int i = 0; i < 2; i++)
        if (a->hist[i].ptr) r->a.hist[i] = w22_view_rows(a->hist[i], y0, n);
    if (a->residual) {
        r->res = w22_view_rows(*a->residual, y0, n);
        r->a.residual = &r->res;
    }
    if (a->sc_in) {
        r->sc = w22_view_rows(*a->sc_in, y0, n);
        r->a.sc_in = &r->sc;
    }
    if (a->psum) { /* the partial sums are per pixel: each row's state and scratch go with its rows */
        r->ps = w22_view_rows(*a->psum, y0, n);
        r->a.psum = &r->ps;
        r->a.psum_tmp = w22_view_rows(a->psum_tmp, y0, n);
    }
}

/* The halo exchange of a 3x3 conv's input (a->in), then the conv. With ranks, and a backend with a side queue,
 * they overlap: the side queue takes the exchange and then output rows 0 and h-1 (the only ones that read halo
 * rows), while the main queue runs rows 1 .. h-2. Each output element is the same sum either way. */
static w22_status conv_with_halo(chunk_ctx *k, const w22_conv_args *a) {
    w22_decoder *d = k->d;
    w22_backend *b = d->backend;
    const int h = a->out.h;
    if (d->world == 1 || !b->ops->side_begin || h < 3 || a->upsample || a->ks != 3) {
        W22_TRY(w22_halo(d->comm, b, a->in));
        return b->ops->conv(b, a);
    }
    conv_rows r;
    W22_TRY(b->ops->side_begin(b));
    w22_status s = w22_halo(d->comm, b, a->in);
    for (int e = 0; e < 2 && s == W22_OK; e++) {
        cut_rows(a, e ? h - 1 : 0, 1, &r);
        r.a.work = NULL, r.a.work_bytes = 0; /* it runs beside the interior's conv, which has the scratch */
        s = b->ops->conv(b, &r.a);
    }
    w22_status s2 = b->ops->side_end(b);
    if (s == W22_OK) s = s2;
    if (s == W22_OK) {
        cut_rows(a, 1, h - 2, &r);
        s = b->ops->conv(b, &r.a);
    }
    s2 = b->ops->side_join(b);
    return s != W22_OK ? s : s2;
}

/* norm (+ SiLU) of src into the fresh frames, then the causal 3x3x3 conv of [cache (li, kk) history, fresh]
 * into out. */
static w22_status norm_conv(chunk_ctx *k, w22_view src, const w22_bweight *gamma, int silu, int li, int kk,
                            const w22_bweight *wt, const w22_bweight *bias, w22_view out, const w22_view *residual,
                            const w22_view *sc_in, const w22_bweight *scw, const w22_bweight *scb) {
    w22_decoder *d = k->d;
    w22_backend *b = d->backend;
    w22_view fresh;
    const int g = d->cache_spare[li][kk] - 1;
    if (g >= 0 && k->m == d->cache_unit[li][kk])
        W22_TRY(spare_view(k, g, src.c, k->m, &fresh)); /* rotation: cache_push swaps it in */
    else W22_TRY(fresh_bordered(k, k->m, src.c, kk == 0 && d->model.layers[li].kind == W22_L_RESBLOCK, &fresh));
    if (gamma) W22_TRY(b->ops->rmsnorm(b, src, fresh, gamma, silu));
    else W22_TRY(b->ops->copy(b, fresh, src));
    w22_conv_args a = {.in = fresh, .out = out, .weight = wt, .bias = bias, .kt = 3, .ks = 3, .residual = residual,
                       .sc_in = sc_in, .sc_weight = scw, .sc_bias = scb, .work = k->work,
                       .work_bytes = k->work_bytes, .hist_zero = k->first ? 2 : 0};
    W22_TRY(cache_hist(k, li, kk, fresh, 1, a.hist));
    W22_TRY(conv_with_halo(k, &a));
    return cache_push(k, li, kk, fresh, 1);
}

/* Picks the buffer a layer writes: in place when allowed, never over the stage input or the block input
 * (plan.c's w22_stage_slots walks the same rule to size the slots). */
static w22_status out_buffer(chunk_ctx *k, int c, int in_place_ok, w22_view *out) {
    if (in_place_ok && k->cur.ptr != k->x.ptr && k->cur.ptr != k->blockin.ptr && k->cur.c == c) {
        *out = k->cur;
        return W22_OK;
    }
    for (int slot = W22_SLOT_XA; slot <= W22_SLOT_XB; slot++) {
        void *p = k->scratch + k->off[slot];
        if (p == k->cur.ptr || p == k->blockin.ptr) continue;
        return slot_view(k, slot, k->m, c, 0, out);
    }
    return w22_fail(W22_ERR_INTERNAL, "plan: no activation slot free in stage %d", k->s);
}

static w22_status run_resblock(chunk_ctx *k, int li) {
    w22_decoder *d = k->d;
    const w22_layer *L = &d->model.layers[li];
    w22_bweight **w = d->wt;
    w22_view t1;
    W22_TRY(slot_view(k, W22_SLOT_T1, k->m, L->cout, 0, &t1));
    W22_TRY(norm_conv(k, k->cur, w[L->w[W22_WS_NORM1]], 1, li, 0, w[L->w[W22_WS_CONV1_W]],
                      w[L->w[W22_WS_CONV1_B]], t1, NULL, NULL, NULL, NULL));
    w22_view out, cur = k->cur;
    W22_TRY(out_buffer(k, L->cout, L->cin == L->cout, &out));
    if (L->cin == L->cout)
        W22_TRY(norm_conv(k, t1, w[L->w[W22_WS_NORM2]], 1, li, 1, w[L->w[W22_WS_CONV2_W]],
                          w[L->w[W22_WS_CONV2_B]], out, &cur, NULL, NULL, NULL));
    else
        W22_TRY(norm_conv(k, t1, w[L->w[W22_WS_NORM2]], 1, li, 1, w[L->w[W22_WS_CONV2_W]],
                          w[L->w[W22_WS_CONV2_B]], out, NULL, &cur, w[L->w[W22_WS_SC_W]], w[L->w[W22_WS_SC_B]]));
    k->cur = out;
    return W22_OK;
}

static w22_status run_attention(chunk_ctx *k, int li) {
    w22_decoder *d = k->d;
    w22_backend *b = d->backend;
    const w22_layer *L = &d->model.layers[li];
    const int C = L->cin;
    w22_view t1, qkv;
    W22_TRY(slot_view(k, W22_SLOT_T1, k->m, C, 0, &t1));
    W22_TRY(slot_view(k, W22_SLOT_QKV, k->m, 3 * C, 0, &qkv));
    W22_TRY(b->ops->rmsnorm(b, k->cur, t1, d->wt[L->w[W22_WS_NORM1]], 0));
    w22_conv_args a = {.in = t1, .out = qkv, .weight = d->wt[L->w[W22_WS_CONV1_W]],
                       .bias = d->wt[L->w[W22_WS_CONV1_B]], .kt = 1, .ks = 1};
    W22_TRY(b->ops->conv(b, &a));
    w22_view full = qkv;
    if (d->world > 1) {
        int *row0 = d->rank_rows; /* world + 1 entries (decoder.c sizes it by the world) */
        for (int r = 0; r <= d->world; r++) {
            int a0, n;
            w22_split_rows(d->h, r < d->world ? r : d->world - 1, d->world, &a0, &n);
            row0[r] = r < d->world ? a0 : d->h;
        }
        full = mkview(d->gathered.ptr, k->m, d->h, k->W, 3 * C, 0, k->es);
        W22_TRY(w22_allgather_rows(d->comm, b, qkv, full, row0));
    }
    /* its scratch: what the stage leaves free past its own slots (the free span less U and QKV, live here) */
    char *wk = k->scratch + k->off[W22_SLOT_END] /* past QKV */, *we = (char *)k->work + k->work_bytes;
    W22_TRY(b->ops->attention(b, w22_view_channels(qkv, 0, C), w22_view_channels(full, C, C),
                              w22_view_channels(full, 2 * C, C), t1, k->work && we > wk ? wk : NULL,
                              k->work && we > wk ? (size_t)(we - wk) : 0));
    w22_view out, cur = k->cur;
    W22_TRY(out_buffer(k, C, 1, &out));
    w22_conv_args p = {.in = t1, .out = out, .weight = d->wt[L->w[W22_WS_CONV2_W]],
                       .bias = d->wt[L->w[W22_WS_CONV2_B]], .kt = 1, .ks = 1, .residual = &cur};
    W22_TRY(b->ops->conv(b, &p));
    k->cur = out;
    return W22_OK;
}

static w22_status run_chunk(w22_decoder *d, int s, int c0, int m, int after);

/* A band decode's later bands take stage 0's work from the first band (issue 44: stage 0 is ~8% of a Wan2.1 decode,
 * run once a band else; docs/PERF.md "Issue 44: a band decode"): band 0 copies to host memory
 * the rows of stage 0's upsampler input (after time_conv, bordered) that the later bands' cut conv reads; a band >= 1
 * runs no stage-0 layer but that conv, on those rows copied back (the same values: the same bits as running stage 0
 * again). Only where stage 0 ends at its upsampler (the Wan2.1 VAE): a DupUp after it (TI2V-5B) would need its block's
 * input kept too, so there every band runs stage 0. */
static int band_replay(const w22_decoder *d) {
    const w22_stage *st = &d->stages[0];
    return d->bands > 1 && d->srows[1] != d->srows[0] && d->model.layers[st->layer1 - 1].kind == W22_L_UPSAMPLE &&
           !(d->test && d->test->band_rerun);
}

/* The store's layout: of every upsampler input frame (2T - 1 of a temporal upsampler, T else), its bordered rows
 * [lo, rows] (lo = band 1's first row less the one above it that the cut conv reads; the later bands start lower),
 * all columns with their border. */
static size_t band_store_frame(const w22_decoder *d, int *lo) {
    const w22_layer *L = &d->model.layers[d->stages[0].layer1 - 1];
    *lo = w22_band_a0(d, 1) - 1;
    return (size_t)(d->rows + 1 - *lo) * (d->w + 2) * L->cin * d->backend->ops->elem_size;
}

static w22_status band_store_alloc(w22_decoder *d) {
    int lo;
    const w22_layer *L = &d->model.layers[d->stages[0].layer1 - 1];
    const size_t need = band_store_frame(d, &lo) * (size_t)(L->temporal ? 2 * d->T - 1 : d->T);
    if (need <= d->band_store_bytes) return W22_OK;
    w22_backend *b = d->backend;
    if (d->band_store) { /* the last decode's copies out of it are done: its decode synced */
        if (d->band_store_pinned) b->ops->host_free(b, d->band_store);
        else free(d->band_store);
        d->band_store = NULL, d->band_store_bytes = 0;
    }
    /* pinned where the backend has it (the copies then overlap nothing but run at the bus's rate); else, or where
     * that much cannot be pinned, pageable memory: the same copies, slower */
    d->band_store_pinned = b->ops->host_alloc && b->ops->host_alloc(b, need, &d->band_store) == W22_OK;
    if (!d->band_store_pinned && !(d->band_store = malloc(need)))
        return w22_fail(W22_ERR_OUT_OF_MEMORY, "out of host memory for a band decode's stage-0 rows (%zu bytes, %d "
                        "latent frames)", need, d->T);
    d->band_store_bytes = need;
    return W22_OK;
}

/* Band 0 (out = 1): u's frames [0, u.f) to the store from frame f0 on; a later band: back. */
static w22_status band_store_copy(w22_decoder *d, w22_view u, int f0, int out) {
    int lo;
    const size_t fb = band_store_frame(d, &lo);
    if ((size_t)(f0 + u.f) * fb > d->band_store_bytes)
        return w22_fail(W22_ERR_INTERNAL, "plan: a band decode's store of %zu bytes holds no frame %d", d->band_store_bytes,
                        f0 + u.f - 1);
    for (int f = 0; f < u.f; f++) {
        char *dev = (char *)w22_view_at(u, f, lo, -1, 0), *host = (char *)d->band_store + (size_t)(f0 + f) * fb;
        W22_TRY(d->backend->ops->copy_bytes(d->backend, out ? host : dev, out ? dev : host, fb));
    }
    return W22_OK;
}

/* [time_conv, two frames per input frame but the decode's first] then nearest 2x + 3x3 conv into the next
 * stage's queue, with the block's DupUp as the conv's residual when the layer after is that DupUp (model.c puts it
 * right after the upsampler; v10's separate pass over the output measured slower). A band decode's band >= 1 of
 * band_replay: u from the store. */
static w22_status run_upsample(chunk_ctx *k, int li) {
    w22_decoder *d = k->d;
    w22_backend *b = d->backend;
    const w22_layer *L = &d->model.layers[li];
    const int C = L->cin, m = k->m;
    int nu = 0, t0 = 0;
    w22_view u;
    const int inter = d->stages[k->s].interleave;
    const int replay = k->s == 0 && band_replay(d);
    /* the store's first frame of this chunk: frames before it made 2 upsampler frames each, the decode's first 1 */
    const int done = d->stages[0].done, f0 = L->temporal ? (done ? 2 * done - 1 : 0) : done;
    if (inter) { /* it lives on while the later stages run: outside the scratch (plan.h) */
        const size_t need = w22_frames_bytes(L->temporal ? 2 * m : m, k->H, k->W, C, 1, k->es);
        if (need > d->ubuf[k->s].bytes)
            return w22_fail(W22_ERR_INTERNAL, "plan: stage %d's upsample input needs %zu bytes, sized %zu", k->s, need,
                            d->ubuf[k->s].bytes);
        u = mkview(d->ubuf[k->s].ptr, L->temporal ? 2 * m : m, k->H, k->W, C, 1, k->es);
    } else {
        W22_TRY(slot_view(k, W22_SLOT_U, L->temporal ? 2 * m : m, C, 1, &u));
    }
    if (replay && d->band > 0) {
        u.f = nu = L->temporal ? 2 * m - k->first : m;
        W22_TRY(band_store_copy(d, u, f0, 0));
    } else if (L->temporal) {
        if (k->first) { /* frame 0 of the decode skips time_conv and stays one frame */
            W22_TRY(b->ops->copy(b, w22_view_frames(u, 0, 1), w22_view_frames(k->cur, 0, 1)));
            nu = t0 = 1;
        }
        int ntc = m - t0;
        if (ntc > 0) { /* time_conv reads the activation in place, its history from the cache */
            w22_view src = w22_view_frames(k->cur, t0, ntc);
            w22_conv_args a = {.in = src, .out = w22_view_frames(u, nu, 2 * ntc),
                               .weight = d->wt[L->w[W22_WS_CONV2_W]], .bias = d->wt[L->w[W22_WS_CONV2_B]],
                               .kt = 3, .ks = 1, .time_split = 1};
            W22_TRY(cache_hist(k, li, 1, src, 0, a.hist));
            W22_TRY(b->ops->conv(b, &a));
            W22_TRY(cache_push(k, li, 1, src, 0));
            nu += 2 * ntc;
        }
    } else {
        W22_TRY(b->ops->copy(b, w22_view_frames(u, 0, m), k->cur));
        nu = m;
    }
    if (!(replay && d->band > 0)) {
        u.f = nu;
        W22_TRY(w22_zero_border(b, u));
        W22_TRY(w22_halo(d->comm, b, u));
        if (replay) W22_TRY(band_store_copy(d, u, f0, 1));
    }
    /* A band decode (plan.h): stage 0 ran on the whole frame, the next stage runs on the band's rows. The conv reads
     * the rows of its cut input's border from the whole frame above and below (exact, no padding at the cut), and
     * the DupUp the block input's same rows. */
    const int cut = d->srows[k->s + 1] != d->srows[k->s];
    if (cut) {
        const int a0 = d->band_a0 << k->s, nr = d->srows[k->s + 1] << k->s;
        u = w22_view_rows(u, a0, nr);
        if (k->blockin.ptr) k->blockin = w22_view_rows(k->blockin, a0, nr);
    }
    const int oh = d->srows[k->s + 1] << (k->s + 1);
    const w22_layer *next = li + 1 < d->model.nlayers ? &d->model.layers[li + 1] : NULL;
    const int dup = next && next->kind == W22_L_DUPUP && k->blockin.ptr;
    /* interleaved (plan.h): the next stage's chunk at a time, each run through that stage before the next is made.
     * Input frames [i, i + si) make output frames [j, j + n) and take the block's input frames [i, i + si) for the
     * DupUp: a spatial upsampler one output frame per input frame, a temporal one two (the decode's first: one) */
    const int tf = L->temporal ? 2 : 1, si = inter ? d->stages[k->s + 1].chunk / tf : m;
    for (int i = 0, j = 0; i < m; i += si) {
        const int ni = m - i < si ? m - i : si, single = L->temporal && k->first && i == 0;
        const int n = inter ? tf * ni - single : nu;
        w22_view out = mkview(d->queue[k->s + 1].ptr, n, oh, 2 * k->W, L->cout, 0, k->es);
        w22_view din = inter ? w22_view_frames(k->blockin, i, ni) : k->blockin;
        w22_conv_args a = {.in = inter ? w22_view_frames(u, j, n) : u, .out = out,
                           .weight = d->wt[L->w[W22_WS_CONV1_W]], .bias = d->wt[L->w[W22_WS_CONV1_B]], .kt = 1,
                           .ks = 3, .upsample = 1};
        if (dup) {
            a.dup_in = &din;
            a.dup_ft = next->temporal ? 2 : 1;
            a.dup_first_single = k->first && i == 0 && next->temporal; /* as the W22_L_DUPUP case in run_chunk */
        }
        W22_TRY(b->ops->conv(b, &a));
        k->dup_fused = a.dup_in != NULL;
        k->cur = out;
        k->nout = n;
        j += n;
        if (inter) { /* the DupUp now if the conv did not add it, then the next stage's chunk */
            if (dup && !k->dup_fused)
                W22_TRY(b->ops->dupup_add(b, out, din, next->temporal ? 2 : 1, k->first && i == 0 && next->temporal));
            k->dup_fused = 1; /* the W22_L_DUPUP layer after has nothing left to do */
            W22_TRY(run_chunk(d, k->s + 1, 0, n, i + si < m ? first_run(d, k->s + 1) : k->after));
            k->nout = 0; /* handed on already */
        }
    }
    return W22_OK;
}

/* norm_out + SiLU into the fresh frames, then conv_out with its history as partial sums (w22_conv_args.psum): the
 * state A, B is the head's cache (two fp32 frames of cout), the Ys' fp32 scratch lies in T1 after the output o
 * (plan.c sizes T1 for both: w22_head_psum_bytes). */
static w22_status head_conv_psum(chunk_ctx *k, int li, w22_view o) {
    w22_decoder *d = k->d;
    w22_backend *b = d->backend;
    const w22_layer *L = &d->model.layers[li];
    w22_view fresh;
    W22_TRY(fresh_bordered(k, k->m, L->cin, 0, &fresh));
    W22_TRY(b->ops->rmsnorm(b, k->cur, fresh, d->wt[L->w[W22_WS_NORM1]], 1));
    size_t tmp_off;
    const size_t need = w22_head_psum_bytes(k->m, k->H, k->W, L->cout, k->es, &tmp_off), have = k->size[W22_SLOT_T1];
    const size_t state = w22_frames_bytes(2, k->H, k->W, L->cout, 0, 4);
    if (need > have || (char *)o.ptr != k->scratch + k->off[W22_SLOT_T1] || state > d->cache[li][0].bytes)
        return w22_fail(W22_ERR_INTERNAL, "plan: the head's partial sums need %zu bytes of T1 (sized %zu) from its "
                        "start and a state of %zu bytes (sized %zu)", need, have, state, d->cache[li][0].bytes);
    w22_view st = mkview(d->cache[li][0].ptr, 2, k->H, k->W, L->cout, 0, 4);
    w22_conv_args a = {.in = fresh, .out = o, .weight = d->wt[L->w[W22_WS_CONV1_W]],
                       .bias = d->wt[L->w[W22_WS_CONV1_B]], .kt = 3, .ks = 3, .psum = &st,
                       .psum_tmp = mkview((char *)o.ptr + tmp_off, k->m, k->H, k->W,
                                          w22_psum_tmp_channels(L->cout), 0, 4)};
    return conv_with_halo(k, &a);
}

/* norm_out, SiLU, conv_out, then unpatchify into the staging and out to the caller. */
static w22_status run_head(chunk_ctx *k, int li) {
    w22_decoder *d = k->d;
    w22_backend *b = d->backend;
    const w22_layer *L = &d->model.layers[li];
    const int p = d->model.cfg.patch_size, m = k->m;
    w22_view o;
    W22_TRY(slot_view(k, W22_SLOT_T1, m, L->cout, 0, &o));
    if (d->head_psum) W22_TRY(head_conv_psum(k, li, o));
    else W22_TRY(norm_conv(k, k->cur, d->wt[L->w[W22_WS_NORM1]], 1, li, 0, d->wt[L->w[W22_WS_CONV1_W]],
                           d->wt[L->w[W22_WS_CONV1_B]], o, NULL, NULL, NULL, NULL));
    /* Staging [rows][frames][3][cols] of the whole video height: this rank's rows at its own offset. */
    const long vw = (long)k->W * p, sy = (long)m * 3 * vw;
    const long my_row0 = (long)d->row0 * (k->H / d->srows[W22_STAGES - 1]) * p;
    w22_video_dst dst = {(char *)d->queue[W22_STAGES].ptr + my_row0 * sy * k->es,
                         k->es == 4 ? W22_DTYPE_F32 : W22_DTYPE_BF16, vw, 3 * vw, sy, 1};
    W22_TRY(b->ops->unpatchify(b, o, p, dst));
    if (d->world > 1) {
        size_t *off = d->rank_off, *bytes = d->rank_bytes; /* world entries each */
        const int scale = (k->H / d->srows[W22_STAGES - 1]) * p;
        for (int r = 0; r < d->world; r++) {
            int r0, n;
            w22_split_rows(d->h, r, d->world, &r0, &n);
            off[r] = (size_t)r0 * scale * sy * k->es;
            bytes[r] = (size_t)n * scale * sy * k->es;
        }
        W22_TRY(w22_gather_blocks(d->comm, b, d->queue[W22_STAGES].ptr, off, bytes, d->on_all_ranks));
    }
    if (d->rank == 0 || d->on_all_ranks) {
        if (d->deliver(d, d->queue[W22_STAGES].ptr, m))
            return w22_fail(W22_ERR_INVALID_ARG, "the decode was stopped by the caller");
    }
    d->first_out_frame += m;
    return W22_OK;
}

static w22_status run_chunk(w22_decoder *d, int s, int c0, int m, int after) {
    w22_stage *st = &d->stages[s];
    chunk_ctx k = {0};
    k.d = d;
    k.s = s;
    k.H = d->srows[s] << st->level;
    k.W = d->w << st->level;
    k.m = m;
    k.first = st->done == 0;
    k.after = after;
    k.es = (int)d->backend->ops->elem_size;
    k.scratch = d->scratch.ptr;
    k.work = w22_stage_free(d, s, &k.work_bytes);
    size_t total;
    w22_stage_scratch(d, s, k.off, k.size, &total);
    k.x = w22_view_frames(mkview(d->queue[s].ptr, st->in_cap, k.H, k.W, st->cin, 0, k.es), c0, m);
    k.cur = k.x;
    k.blockin.ptr = NULL;
    w22_backend *b = d->backend;
    /* a band decode's band >= 1 of band_replay: stage 0 is its upsampler's conv alone (the input from the store) */
    const int replay = s == 0 && d->band > 0 && band_replay(d);
    for (int li = replay ? st->layer1 - 1 : st->layer0; li < st->layer1; li++) {
        const w22_layer *L = &d->model.layers[li];
        if (w22_interrupted(d->interrupt)) return w22_stopped(); /* between ops; the CPU's long ones read it too */
        d->at_stage = s, d->at_layer = li; /* the checking mode's messages (an interleaved next stage changes it) */
        switch (L->kind) {
        case W22_L_POST_QUANT: {
            /* into the history window of conv_in (bordered), where conv_in reads it */
            w22_view fresh;
            W22_TRY(fresh_bordered(&k, m, L->cout, 0, &fresh));
            w22_conv_args a = {.in = k.cur, .out = fresh, .weight = d->wt[L->w[W22_WS_CONV1_W]],
                               .bias = d->wt[L->w[W22_WS_CONV1_B]], .kt = 1, .ks = 1};
            W22_TRY(b->ops->conv(b, &a));
            k.cur = fresh;
            break;
        }
        case W22_L_CONV_IN: {
            /* k.cur is already in the history window: norm_conv's copy would be a no-op, so do it here */
            w22_view fresh;
            W22_TRY(fresh_view(&k, m, L->cin, &fresh));
            w22_view out;
            W22_TRY(slot_view(&k, W22_SLOT_XA, m, L->cout, 0, &out));
            w22_conv_args a = {.in = fresh, .out = out, .weight = d->wt[L->w[W22_WS_CONV1_W]],
                               .bias = d->wt[L->w[W22_WS_CONV1_B]], .kt = 3, .ks = 3, .hist_zero = k.first ? 2 : 0};
            W22_TRY(cache_hist(&k, li, 0, fresh, 1, a.hist));
            W22_TRY(conv_with_halo(&k, &a));
            W22_TRY(cache_push(&k, li, 0, fresh, 1));
            k.cur = out;
            break;
        }
        case W22_L_RESBLOCK: W22_TRY(run_resblock(&k, li)); break;
        case W22_L_ATTN: W22_TRY(run_attention(&k, li)); break;
        case W22_L_BLOCK_BEGIN: k.blockin = k.cur; break;
        case W22_L_UPSAMPLE: W22_TRY(run_upsample(&k, li)); break;
        case W22_L_DUPUP:
            if (!k.dup_fused) /* else run_upsample's conv added it */
                W22_TRY(b->ops->dupup_add(b, k.cur, k.blockin, L->temporal ? 2 : 1, k.first && L->temporal));
            k.dup_fused = 0;
            break;
        case W22_L_HEAD: W22_TRY(run_head(&k, li)); break;
        }
    }
    st->done += m;
    if (s < W22_STAGES - 1) {
        /* the next stage takes this chunk's output frames now, in its own chunks */
        w22_stage *nx = &d->stages[s + 1];
        for (int c = 0; c < k.nout; c += nx->chunk) {
            int n = k.nout - c < nx->chunk ? k.nout - c : nx->chunk;
            W22_TRY(run_chunk(d, s + 1, c, n, c + n < k.nout ? first_run(d, s + 1) : k.after));
        }
    }
    return W22_OK;
}

/* A decode's start (a band decode's: each band's): empty history, no frame made yet. */
static w22_status decode_start(w22_decoder *d) {
    w22_backend *b = d->backend;
    for (int s = 0; s < W22_STAGES; s++) d->stages[s].done = 0;
    d->first_out_frame = 0;
    d->at_stage = 0, d->at_layer = -1;
    /* a failed decode's copies into the windows or the host block may still be in flight: sync waits for the copy
     * queue too (backend.h) */
    if (d->host_cache_block) W22_TRY(b->ops->sync(b));
    /* The checking mode: everything but the caches reads NaN until this decode writes it (check.c). */
    if (d->check) {
        const w22_region *r[] = {&d->transient, &d->queue[0], &d->gathered, &d->hist_win};
        for (int i = 0; i < 4; i++)
            if (r[i]->ptr) W22_TRY(b->ops->fill(b, r[i]->ptr, r[i]->bytes, 0xff));
        if (d->host_cache_block) { /* the hosted caches too: a slot read before this decode wrote it shows */
            W22_TRY(b->ops->sync(b));
            memset(d->host_cache_block, 0xff, d->host_cache_bytes);
        }
    }
    /* A decode starts with empty history: every cache is zero (the causal convs' zero padding; for the head's
     * partial sums too), and so is every spare frame (its border stays zero: spare_view). The slots start as the
     * halves of their caches, whatever the last decode's rotations left. Byte counts in size_t: the largest cache
     * past 4K UHD holds more than 2^31 elements. */
    memset(d->cache_old, 0, sizeof d->cache_old);
    if (d->cache_block.ptr) W22_TRY(b->ops->fill(b, d->cache_block.ptr, d->cache_block.bytes, 0));
    memset(d->cache_written, 0, sizeof d->cache_written); /* the hosted caches: zeros until written (plan.h) */
    /* the hosted caches' windows: no copy begun in this decode (plan.h) */
    memset(d->cache_wb_win, 0, sizeof d->cache_wb_win);
    d->pre_l = d->pre_k = d->pre_win = d->cur_win = -1;
    d->win_issued[0] = d->win_issued[1] = d->win_waited[0] = d->win_waited[1] = 0;
    d->prefetched = d->loaded = 0;
    for (int l = 0; l < W22_MAX_LAYERS; l++)
        for (int c = 0; c < 3; c++)
            if (d->cache[l][c].ptr) {
                d->cache_slot[l][c][0] = d->cache[l][c].ptr;
                d->cache_slot[l][c][1] = (char *)d->cache[l][c].ptr + d->cache_stride[l][c];
            }
    for (int g = 0; g < d->nspares; g++) {
        d->spare_now[g] = d->spare[g].ptr;
        d->spare_tag[g] = -1;
    }
    return W22_OK;
}

/* The passes over the latent frames, once a band (plan.h: one band but in a band decode). */
static w22_status plan_run(w22_decoder *d) {
    w22_backend *b = d->backend;
    const w22_model *m = &d->model;
    const int es = (int)b->ops->elem_size;
    if (band_replay(d)) W22_TRY(band_store_alloc(d));
    for (int band = 0; band < d->bands; band++) {
        w22_band_set(d, band);
        W22_TRY(decode_start(d));
        for (int t0 = 0; t0 < d->T; t0 += d->frames_per_pass) {
            int n = d->T - t0 < d->frames_per_pass ? d->T - t0 : d->frames_per_pass;
            if (w22_interrupted(d->interrupt)) return w22_stopped();
            w22_view zin = mkview(d->queue[0].ptr, n, d->rows, d->w, m->cfg.z_dim, 0, es);
            if (band == 0 || !band_replay(d)) /* a replayed stage 0 reads no latents */
                W22_TRY(b->ops->latents_in(b, d->z, d->zt, m->cfg.z_dim, d->T, d->h, d->w, t0, d->row0, zin));
            W22_TRY(run_chunk(d, 0, 0, n, t0 + n < d->T ? first_run(d, 0) : -1));
            if (d->params.progress &&
                d->params.progress(d->params.progress_user, band * d->T + t0 + n, d->bands * d->T))
                return w22_fail(W22_ERR_INVALID_ARG, "the decode was stopped by the caller");
        }
        for (int w = 0; w < 2; w++) W22_TRY(win_wait(d, w)); /* the last write-backs (and a prefetch not taken) */
    }
    return b->ops->sync(b);
}

w22_status w22_plan_run(w22_decoder *d) {
    W22_TRY(w22_check_begin(d));
    const w22_status s = plan_run(d);
    w22_check_end(d);
    return s;
}

