/* The checking mode (W22_CHECK=1, or w22_decoder_params.check): every op of a decode goes through the wrappers
 * below, which verify what the decode relies on without computing it again.
 *  - Memory that no op of this decode has written reads as NaN: the scratch, the queues, the upsample inputs and
 *    the gathered frame are filled with NaN bytes before the decode (exec.c), so a read of stale memory shows as a
 *    non-finite input wherever it happens, not only where stale values would have changed the picture.
 *  - Every op's inputs are finite before it runs, and its output after.
 *  - The borders that the plan keeps instead of re-zeroing (backend.h: a conv input is readable one pixel beyond
 *    its edges and reads zeros there) are zero when a 3x3 conv reads them, for its fresh frames and for the two
 *    history frames in the caches; exec.c also checks at each place that skips a zeroing (w22_check_border).
 *  - The history frames a conv is told are zero (w22_conv_args.hist_zero: a stage's first chunk) are zero.
 * A failure names the stage, the layer, the op and the buffer (w22_check_where). Costs a device sync and a pass over
 * every operand per op: for tests and for debugging, off by default.
 * W22_CHECK_TRACE=FILE (with the checking mode) appends a line per op output to FILE: the op's number in the decode,
 * where it is, the output's shape and a hash of its values. Two decodes that should give the same bits but do not
 * are compared with `diff`: the first differing line is the op where they part. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common.h"
#include "plan/plan_internal.h"

static _Thread_local w22_decoder *cur; /* the decoder whose decode this thread runs in checking mode */

/* The buffer that holds byte `p` of the workspace, named for messages. */
void w22_check_where(const w22_decoder *d, const void *p, char *buf, size_t n) {
    const char *c = (const char *)p;
#define IN(r) ((r).ptr && c >= (const char *)(r).ptr && c < (const char *)(r).ptr + (r).bytes)
    for (int l = 0; l < W22_MAX_LAYERS; l++)
        for (int k = 0; k < 3; k++)
            if (IN(d->cache[l][k])) {
                snprintf(buf, n, "the cache %d of layer %d (%s)", k, l, d->model.layers[l].prefix);
                return;
            }
    if (IN(d->hist_win)) {
        snprintf(buf, n, "the hosted caches' history window");
        return;
    }
    for (int g = 0; g < d->nspares; g++)
        if (IN(d->spare[g])) {
            snprintf(buf, n, "spare unit %d", g);
            return;
        }
    for (int s = 0; s <= W22_STAGES; s++)
        if (IN(d->queue[s])) {
            snprintf(buf, n, s < W22_STAGES ? "stage %d's input queue" : "the video staging", s);
            return;
        }
    for (int s = 0; s < W22_STAGES; s++)
        if (IN(d->ubuf[s])) {
            snprintf(buf, n, "stage %d's upsample input (ubuf)", s);
            return;
        }
    if (IN(d->scratch)) {
        static const char *const names[W22_SLOTS] = {"XA", "XB", "T1", "NH", "unused", "U", "QKV", "end"};
        size_t off[W22_SLOTS], size[W22_SLOTS], total;
        const int s = d->at_stage;
        w22_stage_scratch(d, s, off, size, &total);
        const size_t o = (size_t)(c - (const char *)d->scratch.ptr);
        for (int k = 0; k < W22_SLOTS; k++)
            if (size[k] && o >= off[k] && o < off[k] + size[k]) {
                snprintf(buf, n, "stage %d's scratch slot %s (byte %zu of %zu)", s, names[k], o - off[k], size[k]);
                return;
            }
        snprintf(buf, n, "stage %d's scratch, byte %zu (past its slots)", s, o);
        return;
    }
    if (IN(d->transient)) {
        snprintf(buf, n, "the transient block, byte %zu", (size_t)(c - (const char *)d->transient.ptr));
        return;
    }
    if (IN(d->gathered)) {
        snprintf(buf, n, "the attention's gathered frame");
        return;
    }
#undef IN
    snprintf(buf, n, "memory outside the workspace");
}

/* A view's counts, failing with a message that names where the decode is. */
static w22_status verify(const w22_decoder *d, const char *op, const char *what, const w22_view *v, int border) {
    if (!v || !v->ptr || v->f <= 0 || v->h <= 0 || v->w <= 0 || v->c <= 0) return W22_OK;
    size_t cnt[2];
    W22_TRY(d->ops_inner->inspect(d->backend, *v, border, cnt));
    if (!cnt[0] && !cnt[1]) return W22_OK;
    char where[160];
    w22_check_where(d, v->ptr, where, sizeof where);
    const int l = d->at_layer;
    const char *name = l >= 0 && l < d->model.nlayers ? d->model.layers[l].prefix : "(none)";
    const int out = !strcmp(what, "its output") || !strcmp(what, "its destination") || !strcmp(what, "the stage-0 input");
    if (cnt[0])
        return w22_fail(W22_ERR_INTERNAL, "check: stage %d, layer %d (%s), %s: %zu of %ld elements of %s (%d x %d x %d x "
                        "%d) in %s are not finite: %s", d->at_stage, l, name, op, cnt[0],
                        (long)v->f * v->h * v->w * v->c, what, v->f, v->h, v->w, v->c, where,
                        out ? "the op left them unwritten (or made them non-finite)"
                            : "it reads memory that this decode did not write");
    return w22_fail(W22_ERR_INTERNAL, "check: stage %d, layer %d (%s), %s: %zu border elements of %s (%d x %d x %d x %d) "
                    "in %s are not zero: the zero-border invariant is broken", d->at_stage, l, name, op, cnt[1], what,
                    v->f, v->h, v->w, v->c, where);
}

/* A view's span (its first element to its last) read to the host after a sync: *h to free. */
static w22_status view_to_host(const w22_decoder *d, const w22_view *v, unsigned char **h) {
    const long last = ((long)(v->f - 1) * v->sf + (long)(v->h - 1) * v->sh + (long)(v->w - 1) * v->sw + v->c) * v->es;
    if (!(*h = malloc((size_t)last))) return w22_fail(W22_ERR_OUT_OF_MEMORY, "check: %ld bytes of host memory", last);
    const w22_status s = d->ops_inner->sync(d->backend);
    return s != W22_OK ? s : d->ops_inner->to_host(d->backend, *h, v->ptr, (size_t)last);
}

/* The trace's hash of a view's elements (FNV-1a over each element's bytes, in f, h, w, c order), read to the host. */
static w22_status trace_hash(const w22_decoder *d, const w22_view *v, uint64_t *hash) {
    const long es = v->es;
    unsigned char *h = NULL;
    w22_status s = view_to_host(d, v, &h);
    uint64_t x = 1469598103934665603ull;
    for (int f = 0; f < v->f && s == W22_OK; f++)
        for (int y = 0; y < v->h; y++)
            for (int w = 0; w < v->w; w++) {
                const unsigned char *e = h + ((long)f * v->sf + (long)y * v->sh + (long)w * v->sw) * es;
                for (long k = 0; k < v->c * es; k++) x = (x ^ e[k]) * 1099511628211ull;
            }
    free(h);
    *hash = x;
    return s;
}

static w22_status trace(w22_decoder *d, const char *op, const w22_view *v) {
    const char *path = getenv("W22_CHECK_TRACE");
    if (!path || !*path || !v || !v->ptr || v->f <= 0 || v->h <= 0 || v->w <= 0 || v->c <= 0) return W22_OK;
    uint64_t hash = 0;
    W22_TRY(trace_hash(d, v, &hash));
    FILE *f = fopen(path, "a");
    if (!f) return w22_fail(W22_ERR_IO, "check trace: cannot open %s", path);
    const int l = d->at_layer;
    fprintf(f, "%5d stage %d layer %2d %-28s %-14s %3d x %4d x %4d x %4d  %016llx\n", d->trace_op++, d->at_stage, l,
            l >= 0 && l < d->model.nlayers ? d->model.layers[l].prefix : "(none)", op, v->f, v->h, v->w, v->c,
            (unsigned long long)hash);
    fclose(f);
    return W22_OK;
}

/* After an op: the backend's constant memory unchanged (backend.h's audit), failing with where the decode is. */
static w22_status audit(const w22_decoder *d, const char *op) {
    if (!d->ops_inner->audit) return W22_OK;
    const w22_status s = d->ops_inner->audit(d->backend);
    if (s == W22_OK) return s;
    const int l = d->at_layer;
    return w22_fail_context(s, "check: stage %d, layer %d (%s), after the %s: ", d->at_stage, l,
                            l >= 0 && l < d->model.nlayers ? d->model.layers[l].prefix : "(none)", op);
}

/* A 3x3 conv input's border must be zero (one rank; with ranks the halo exchange fills the top and bottom rows, so
 * only finiteness is checked there). */
static w22_status verify_input(const w22_decoder *d, const char *op, const char *what, const w22_view *v, int ks) {
    if (ks != 3 || d->world > 1) return verify(d, op, what, v, 0);
    return verify(d, op, what, v, 1);
}

w22_status w22_check_border(const w22_decoder *d, const w22_view *v, const char *what) {
    if (!d->check) return W22_OK;
    return verify(d, "a skipped border zeroing", what, v, d->world > 1 ? 0 : 1);
}

/* A history frame the conv was told is zero (backend.h's hist_zero: the backend may skip its taps) holds only +-0,
 * read to the host. */
static w22_status verify_zero(const w22_decoder *d, const char *op, const char *what, const w22_view *v) {
    const long es = v->es;
    unsigned char *h = NULL;
    w22_status s = view_to_host(d, v, &h);
    long bad = 0;
    for (int f = 0; f < v->f && s == W22_OK; f++)
        for (int y = 0; y < v->h; y++)
            for (int x = 0; x < v->w; x++)
                for (int c = 0; c < v->c; c++) {
                    const unsigned char *e = h + ((long)f * v->sf + (long)y * v->sh + (long)x * v->sw + c) * es;
                    uint32_t u = 0;
                    memcpy(&u, e, es == 4 ? 4 : 2);
                    bad += es == 4 ? (u & 0x7fffffffu) != 0 : (u & 0x7fffu) != 0;
                }
    free(h);
    if (s != W22_OK || !bad) return s;
    char where[160];
    w22_check_where(d, v->ptr, where, sizeof where);
    const int l = d->at_layer;
    return w22_fail(W22_ERR_INTERNAL, "check: stage %d, layer %d (%s), %s: %ld elements of %s in %s are not zero, where "
                    "the conv was told they are (hist_zero: its taps may be skipped)", d->at_stage, l,
                    l >= 0 && l < d->model.nlayers ? d->model.layers[l].prefix : "(none)", op, bad, what, where);
}

static w22_status c_conv(w22_backend *b, const w22_conv_args *a) {
    const w22_decoder *d = cur;
    const char *op = a->upsample ? "upsample conv" : a->psum ? "conv (partial sums)" : "conv";
    /* a band decode's cut (exec.c's run_upsample): the upsample conv's input rows above and below are the frame's */
    const int cut = d->bands > 1 && a->upsample && d->at_stage == 0;
    W22_TRY(verify_input(d, op, "its input", &a->in, cut ? 1 : a->ks));
    for (int i = 0; i < a->hist_zero && i < 2; i++) /* first: a stronger claim than the border's below */
        if (a->hist[i].ptr) W22_TRY(verify_zero(d, op, i ? "its newer history frame" : "its older history frame",
                                                &a->hist[i]));
    for (int i = 0; i < 2; i++)
        if (a->hist[i].ptr) W22_TRY(verify_input(d, op, i ? "its newer history frame" : "its older history frame",
                                                 &a->hist[i], a->ks));
    W22_TRY(verify(d, op, "its residual", a->residual, 0));
    W22_TRY(verify(d, op, "its shortcut input", a->sc_in, 0));
    W22_TRY(verify(d, op, "its DupUp input", a->dup_in, 0));
    W22_TRY(verify(d, op, "its partial sums", a->psum, 0));
    W22_TRY(d->ops_inner->conv(b, a));
    W22_TRY(verify(d, op, "its output", &a->out, 0));
    W22_TRY(trace(cur, op, &a->out));
    return audit(d, op);
}

static w22_status c_rmsnorm(w22_backend *b, w22_view in, w22_view out, const w22_bweight *g, int silu) {
    const w22_decoder *d = cur;
    W22_TRY(verify(d, "norm", "its input", &in, 0));
    W22_TRY(d->ops_inner->rmsnorm(b, in, out, g, silu));
    W22_TRY(verify(d, "norm", "its output", &out, 0));
    W22_TRY(trace(cur, "norm", &out));
    return audit(d, "norm");
}

static w22_status c_attention(w22_backend *b, w22_view q, w22_view k, w22_view v, w22_view out, void *work,
                              size_t work_bytes) {
    const w22_decoder *d = cur;
    W22_TRY(verify(d, "attention", "q", &q, 0));
    W22_TRY(verify(d, "attention", "k", &k, 0));
    W22_TRY(verify(d, "attention", "v", &v, 0));
    W22_TRY(d->ops_inner->attention(b, q, k, v, out, work, work_bytes));
    W22_TRY(verify(d, "attention", "its output", &out, 0));
    W22_TRY(trace(cur, "attention", &out));
    return audit(d, "attention");
}

static w22_status c_dupup_add(w22_backend *b, w22_view out, w22_view in, int ft, int first_single) {
    const w22_decoder *d = cur;
    W22_TRY(verify(d, "dupup_add", "its input", &in, 0));
    W22_TRY(verify(d, "dupup_add", "the output it adds to", &out, 0));
    W22_TRY(d->ops_inner->dupup_add(b, out, in, ft, first_single));
    W22_TRY(verify(d, "dupup_add", "its output", &out, 0));
    W22_TRY(trace(cur, "dupup_add", &out));
    return audit(d, "dupup_add");
}

static w22_status c_copy(w22_backend *b, w22_view dst, w22_view src) {
    const w22_decoder *d = cur;
    W22_TRY(verify(d, "copy", "its source", &src, 0));
    W22_TRY(d->ops_inner->copy(b, dst, src));
    W22_TRY(verify(d, "copy", "its destination", &dst, 0));
    W22_TRY(trace(cur, "copy", &dst));
    return audit(d, "copy");
}

static w22_status c_latents_in(w22_backend *b, const void *z, w22_dtype zt, int C, int T, int H, int W, int t0, int y0,
                               w22_view out) {
    const w22_decoder *d = cur;
    W22_TRY(d->ops_inner->latents_in(b, z, zt, C, T, H, W, t0, y0, out));
    W22_TRY(verify(d, "latents in", "the stage-0 input", &out, 0));
    return trace(cur, "latents in", &out);
}

static w22_status c_unpatchify(w22_backend *b, w22_view in, int p, w22_video_dst dst) {
    const w22_decoder *d = cur;
    W22_TRY(verify(d, "unpatchify", "its input", &in, 0));
    W22_TRY(trace(cur, "unpatchify in", &in));
    W22_TRY(d->ops_inner->unpatchify(b, in, p, dst));
    return audit(d, "unpatchify");
}

static w22_status c_copy_bytes(w22_backend *b, void *dst, const void *src, size_t n) {
    W22_TRY(cur->ops_inner->copy_bytes(b, dst, src, n));
    return audit(cur, "copy_bytes");
}

static w22_status c_zero_border(w22_backend *b, w22_view v) {
    W22_TRY(cur->ops_inner->zero_border(b, v));
    return audit(cur, "zero_border");
}

w22_status w22_check_begin(w22_decoder *d) {
    if (!d->check) return W22_OK;
    if (!d->backend->ops->inspect || !d->backend->ops->fill)
        return w22_fail(W22_ERR_UNSUPPORTED, "the checking mode needs the backend's inspect and fill ops (%s has none)",
                        d->backend->ops->name);
    d->ops_inner = d->backend->ops;
    d->ops_checked = *d->ops_inner;
    d->ops_checked.conv = c_conv;
    d->ops_checked.rmsnorm = c_rmsnorm;
    d->ops_checked.attention = c_attention;
    d->ops_checked.dupup_add = c_dupup_add;
    d->ops_checked.copy = c_copy;
    d->ops_checked.latents_in = c_latents_in;
    d->ops_checked.unpatchify = c_unpatchify;
    d->ops_checked.copy_bytes = c_copy_bytes;
    if (d->ops_inner->zero_border) d->ops_checked.zero_border = c_zero_border;
    d->backend->ops = &d->ops_checked;
    cur = d;
    d->at_stage = 0, d->at_layer = -1, d->trace_op = 0;
    return audit(d, "previous decode (before this one started)");
}

void w22_check_end(w22_decoder *d) {
    if (!d->check || !d->ops_inner) return;
    d->backend->ops = d->ops_inner;
    d->ops_inner = NULL;
    cur = NULL;
}
