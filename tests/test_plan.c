/* The plan's invariances on the CPU: the chunk sizes (frames per pass, and the stages' own chunks) do not change
 * the output, and simulated ranks (threads with an in-memory exchange, worlds 2, 3 and 4, uneven splits) give the
 * single-rank output. Narrow synthetic models, random latents, outputs poisoned with NaN before each call.
 *
 * The causal caches' two designs, each on and off (plan.h): the spare rotation (pointer swaps at one- and two-frame
 * chunks; with SHARE every stage's groups through one spare) against the copies must give the same bits, since every
 * conv reads the same values and sums them in the same order; the head's partial sums against its input-frame cache agree to float32 rounding (the 27 taps' sum
 * regrouped by temporal tap: within 1e-5 like the chunkings, whose GEMM blocking differs too). Chunkings mix the two
 * push paths: stage 0 rotates with one latent frame per pass and copies with more, and stage chunk overrides of 2
 * or 3 frames copy where the other stages rotate. The default (stages 1 and 2 in chunks of 2, their upsample convs
 * handing the next stage one chunk at a time: plan.h's interleave; stage 1's temporal one two frames per input frame,
 * the decode's first one) makes the reference, at T frames per pass; runs whose next stage's chunk is as large as
 * the upsampler's output, or odd after a temporal one, hand on the whole chunk at once.
 *
 * The work-memory budget (budget_cases): the plan under a budget keeps the default's chunks and hosts caches, so its
 * video must be the default's bit for bit (memcmp), not to the chunkings' rounding. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include "common.h"
#include "plan/plan.h"
#include "testutil.h"
#include "wan22vae.h"

static w22_config narrow(void) {
    w22_config c;
    w22_config_default(&c);
    c.z_dim = 8;
    c.base_dim = 8;
    return c;
}

/* decoder flags: the copy design (rotate_off), the head's input frames (psum_off); SHARE: every stage's rotation group shares one spare unit
 * (plan.h's w22_plan_test.share_any), so that two-frame units (stages 1 and 2 here) rotate with one-frame ones (stage 3, and
 * stage 0 at one latent frame per pass) through the same memory, as stage 2's and 3's do at 704x1248 */
enum { ROT_OFF = 1, PSUM_OFF = 2, SHARE = 4 };

/* The flags into t, the decoder's test choices (t must outlive the decoder's decodes). */
static void set_flags(w22_decoder *d, int flags, w22_plan_test *t) {
    t->rotate_off = (flags & ROT_OFF) != 0;
    t->psum_off = (flags & PSUM_OFF) != 0;
    t->share_any = (flags & SHARE) != 0;
    d->test = t;
}

typedef struct {
    w22_weights *w;
    w22_comm *comm;
    const float *z;
    int T, h, wd, fpp, flags;
    float *video;
    w22_status s;
    char err[512];
    size_t budget;  /* work_budget_bytes (0: none) */
    unsigned host;  /* out: the stages whose caches this rank's plan hosted */
} rank_job;

static void *rank_main(void *p) {
    rank_job *j = p;
    w22_decoder_params prm;
    w22_decoder_params_init(&prm);
    prm.comm = j->comm;
    prm.frames_per_pass = j->fpp;
    prm.threads = 1;
    prm.work_budget_bytes = j->budget;
    w22_decoder *d = NULL;
    j->s = w22_decoder_open(j->w, &prm, &d);
    w22_plan_test t;
    memset(&t, 0, sizeof t);
    if (d) set_flags(d, j->flags, &t);
    if (j->s == W22_OK) j->s = w22_decode(d, j->z, W22_DTYPE_F32, j->T, j->h, j->wd, j->video, W22_DTYPE_F32);
    if (j->s != W22_OK) snprintf(j->err, sizeof j->err, "%s", w22_last_error());
    if (d) j->host = d->host_stages;
    w22_decoder_free(d);
    return NULL;
}

static void decode_one(w22_weights *w, const float *z, int T, int h, int wd, int fpp, const int chunks[4], int flags,
                       float *video, size_t n) {
    t_fill_nan(video, n);
    w22_decoder_params prm;
    w22_decoder_params_init(&prm);
    prm.frames_per_pass = fpp;
    w22_decoder *d = NULL;
    CHECK_OK(w22_decoder_open(w, &prm, &d));
    if (!d) return;
    w22_plan_test t;
    memset(&t, 0, sizeof t);
    if (chunks)
        for (int s = 1; s < 4; s++) t.chunk[s] = chunks[s];
    set_flags(d, flags, &t);
    CHECK_OK(w22_decode(d, z, W22_DTYPE_F32, T, h, wd, video, W22_DTYPE_F32));
    /* the plan took the flags: spares exactly where a stage of one-frame chunks has a group of two caches (stage 3
     * of this model has one when its chunk is one frame: its resblocks 1 and 2), none without such a stage */
    CHECK(d->rotate == !(flags & ROT_OFF) && d->head_psum == !(flags & PSUM_OFF),
          "flags %d: planned rotate %d, head_psum %d", flags, d->rotate, d->head_psum);
    int one_frame = 0;
    for (int s = 0; s < 4; s++) one_frame += d->stages[s].chunk == 1;
    CHECK((flags & ROT_OFF) || !one_frame ? d->nspares == 0 : d->nspares >= 1 && d->nspares <= one_frame * 2,
          "flags %d: %d spare frames for %d stages of one-frame chunks", flags, d->nspares, one_frame);
    /* shared: a stage of two-frame chunks rotates its groups' units through a one-frame stage's spare */
    int two_frame = 0, units2 = 0;
    for (int s = 0; s < 4; s++) two_frame += d->stages[s].chunk == 2;
    for (int l = 0; l < W22_MAX_LAYERS; l++)
        for (int k = 0; k < 3; k++) units2 += d->cache_unit[l][k] == 2;
    if ((flags & SHARE) && !(flags & ROT_OFF) && one_frame && two_frame)
        CHECK(units2 > 0, "flags %d fpp %d chunks %d %d %d %d: no cache rotates two-frame units", flags, fpp,
              d->stages[0].chunk, d->stages[1].chunk, d->stages[2].chunk, d->stages[3].chunk);
    if (!(flags & SHARE)) CHECK(units2 == 0, "flags %d: %d caches rotate two-frame units unshared", flags, units2);
    w22_decoder_free(d);
}

static void check_same(const char *what, const float *a, const float *ref, size_t n, double tol) {
    t_diff df = t_compare(a, ref, n);
    printf("  %-40s max|d| %.3g rms %.3g (ref rms %.3g)\n", what, df.max_abs, df.rms, df.ref_rms);
    CHECK(df.nonfinite == 0, "%s: %zu elements not written or not finite", what, df.nonfinite);
    CHECK(df.max_abs <= tol, "%s: max|d| %.3g > %.3g", what, df.max_abs, tol);
}

/* The Wan2.1 VAE's structure, narrow (no DupUp: its stages 1 and 2 interleave with any block input; upsample convs
 * that halve the channels). */
static w22_config narrow21(void) {
    w22_config c;
    w22_config_wan21(&c);
    c.z_dim = 4;
    c.base_dim = 8;
    return c;
}

/* The copy queue at its latest (backend.h's copy_begin; the CPU backend's copies are done when they return, its
 * earliest): a copy runs only when the main queue waits for its tag, or at a sync, in order within its tag, reading
 * its source then. A plan that reads a window before it waits, or writes a copy's source or destination before the
 * copy ran, then gets other bits (or NaN where the checking mode poisoned the windows). One decoder at a time (the
 * queue is the test's own). */
typedef struct {
    void *dst;
    const void *src;
    size_t n;
    int tag;
} lazy_copy;
static lazy_copy lazy_q[64];
static int lazy_n;
static long lazy_begun, lazy_waits;
static long lazy_stop_at;        /* nonzero: the lazy_stop_at-th copy begun sets lazy_stop (a decoder's interrupt) */
static volatile int lazy_stop;
static int lazy_n_at_stop;       /* the copies in flight then */
static const w22_backend_ops *lazy_inner;
static w22_backend_ops lazy_ops;

static void lazy_run(int tag) {
    int j = 0;
    for (int i = 0; i < lazy_n; i++) {
        if (tag < 0 || lazy_q[i].tag == tag) memcpy(lazy_q[i].dst, lazy_q[i].src, lazy_q[i].n);
        else lazy_q[j++] = lazy_q[i];
    }
    lazy_n = j;
}
static w22_status lazy_begin(w22_backend *b, void *dst, const void *src, size_t n, int tag) {
    (void)b;
    if (tag < 0 || tag >= W22_COPY_TAGS || lazy_n == (int)(sizeof lazy_q / sizeof lazy_q[0]))
        return w22_fail(W22_ERR_INTERNAL, "test copy_begin: tag %d, %d copies in flight", tag, lazy_n);
    lazy_q[lazy_n++] = (lazy_copy){dst, src, n, tag};
    if (++lazy_begun == lazy_stop_at) lazy_stop = 1, lazy_n_at_stop = lazy_n;
    return W22_OK;
}
static w22_status lazy_wait(w22_backend *b, int tag) {
    (void)b;
    lazy_waits++;
    lazy_run(tag);
    return W22_OK;
}
static w22_status lazy_sync(w22_backend *b) {
    lazy_run(-1);
    return lazy_inner->sync(b);
}

/* One decode under a work-memory budget (0: none) on a fresh decoder, hosting the caches `force` names (a host_spec;
 * 0: the budget's choice), with the checking mode when check and the latest copy queue (above) when lazy; *host: the stages whose caches the plan put in host memory; *pre (NULL: not
 * wanted): the hosted convs whose history a prefetch brought. Returns the decode's status (the open's must be OK). */
static int hosted_fpp;     /* hosted_decode's frames per pass (0: the decoder's default) */
static unsigned last_spec; /* the host_spec of hosted_decode's last plan */
static int last_total;     /* and the caches that plan could have hosted */
static unsigned long last_loaded; /* and its hosted convs that loaded their history themselves (no prefetch) */
static w22_status hosted_decode(w22_weights *w, const float *z, int T, int h, int wd, size_t budget, unsigned force,
                                int check, int lazy, float *video, size_t n, unsigned *host, unsigned long *pre) {
    t_fill_nan(video, n);
    w22_decoder_params prm;
    w22_decoder_params_init(&prm);
    prm.work_budget_bytes = budget;
    prm.check = check;
    if (hosted_fpp) prm.frames_per_pass = hosted_fpp;
    w22_decoder *d = NULL;
    CHECK_OK(w22_decoder_open(w, &prm, &d));
    if (!d) return W22_ERR_INTERNAL;
    w22_plan_test t;
    memset(&t, 0, sizeof t);
    t.host = force;
    if (force) d->test = &t;
    if (lazy) {
        lazy_inner = d->backend->ops;
        lazy_ops = *lazy_inner;
        lazy_ops.copy_begin = lazy_begin;
        lazy_ops.copy_wait = lazy_wait;
        lazy_ops.sync = lazy_sync;
        d->backend->ops = &lazy_ops;
        lazy_n = 0;
    }
    const w22_status s = w22_decode(d, z, W22_DTYPE_F32, T, h, wd, video, W22_DTYPE_F32);
    if (lazy) CHECK(lazy_n == 0, "the decode ended with %d copies never waited for", lazy_n);
    *host = d->host_stages;
    last_spec = d->host_spec, last_total = d->host_total, last_loaded = d->loaded;
    if (pre) *pre = d->prefetched;
    if (d->host_stages && s == W22_OK)
        CHECK(d->prefetched + d->loaded > 0, "stages 0x%x hosted: no hosted conv read a window", d->host_stages);
    w22_decoder_free(d);
    return s;
}
static w22_status budget_decode_q(w22_weights *w, const float *z, int T, int h, int wd, size_t budget, int check,
                                  int lazy, float *video, size_t n, unsigned *host, unsigned long *pre) {
    return hosted_decode(w, z, T, h, wd, budget, 0, check, lazy, video, n, host, pre);
}
static w22_status budget_decode(w22_weights *w, const float *z, int T, int h, int wd, size_t budget, int check,
                                float *video, size_t n, unsigned *host) {
    return budget_decode_q(w, z, T, h, wd, budget, check, 0, video, n, host, NULL);
}

/* Every hosting level (plan.h's host_spec, forced through the test's choices): each prefix of the cost order, one
 * cache more each time, and each stage's caches alone and the stages from 3 down, each decoded with the copy queue
 * at its earliest (the CPU's), at its latest (copies run when waited for), and at its latest in the checking mode:
 * the default plan's bits every time (memcmp). */
static void hosting_levels(w22_weights *w, const float *z, int T, int h, int wd, size_t nv, const float *ref) {
    float *out = malloc(nv * 4);
    unsigned host = 0;
    CHECK_OK(hosted_decode(w, z, T, h, wd, 0, 0xf, 0, 0, out, nv, &host, NULL));
    const int total = last_total;
    CHECK(host == 0xf && total > 8 && memcmp(out, ref, nv * 4) == 0, "every cache hosted: stages 0x%x of %d caches",
          host, total);
    int levels = 0, bad = 0;
    long prefetched = 0;
    static const unsigned masks[] = {0x1, 0x2, 0x4, 0x8, 0xc, 0xe};
    for (int i = 1; i <= total + 6; i++) {
        const unsigned spec = i <= total ? W22_HOST_CACHES(i) : masks[i - total - 1];
        for (int mode = 0; mode < 3; mode++) {
            unsigned long pre = 0;
            const w22_status s = hosted_decode(w, z, T, h, wd, 0, spec, mode == 2, mode > 0, out, nv, &host, &pre);
            const int same = s == W22_OK && memcmp(out, ref, nv * 4) == 0;
            CHECK(same, "hosting 0x%x (stages 0x%x), copies %s%s: %s", spec, host, mode ? "when waited for" : "at once",
                  mode == 2 ? ", checking mode" : "", s == W22_OK ? "not the default's bits" : w22_last_error());
            bad += !same;
            prefetched += (long)pre;
        }
        levels++;
    }
    printf("  every hosting level (%d: the cost order's %d prefixes, 6 of whole stages), three copy queues each: %s "
           "(%ld histories prefetched)\n", levels, total, bad ? "DIFFERENT" : "the default's bits", prefetched);
    CHECK(prefetched > 0, "no hosted history was prefetched at any level");
    /* other frames per pass (each against its own default plan: chunkings agree to rounding only): at 1 the decode's
     * first chunk skips stage 0's time_conv, whose prefetch is then never taken (waited for at the next hosted conv);
     * at 3 stage 0 pushes two of three frames */
    float *ref_f = malloc(nv * 4);
    for (int fpp = 1; fpp <= 3; fpp += 2) {
        hosted_fpp = fpp;
        CHECK_OK(hosted_decode(w, z, T, h, wd, 0, 0, 0, 0, ref_f, nv, &host, NULL));
        for (int mode = 0; mode < 3; mode++) {
            const w22_status s = hosted_decode(w, z, T, h, wd, 0, 0xf, mode == 2, mode > 0, out, nv, &host, NULL);
            CHECK(s == W22_OK && memcmp(out, ref_f, nv * 4) == 0, "frames per pass %d, every cache hosted, copies "
                  "%s%s: %s", fpp, mode ? "when waited for" : "at once", mode == 2 ? ", checking mode" : "",
                  s == W22_OK ? "not the default's bits" : w22_last_error());
        }
    }
    hosted_fpp = 0;
    free(ref_f);
    /* a decode interrupted in its second pass, right after a copy began (the latest queue keeps it and those before
     * it not yet waited for), then a retry on the same decoder: the default plan's bits (the next decode syncs the
     * copies before it starts) */
    {
        w22_decoder_params prm;
        w22_decoder_params_init(&prm);
        w22_decoder *d = NULL;
        CHECK_OK(w22_decoder_open(w, &prm, &d));
        w22_plan_test t;
        memset(&t, 0, sizeof t);
        t.host = 0xf;
        if (d) {
            d->test = &t;
            lazy_inner = d->backend->ops;
            lazy_ops = *lazy_inner;
            lazy_ops.copy_begin = lazy_begin;
            lazy_ops.copy_wait = lazy_wait;
            lazy_ops.sync = lazy_sync;
            d->backend->ops = &lazy_ops;
            lazy_n = 0;
            t_fill_nan(out, nv);
            lazy_begun = 0, lazy_stop = 0, lazy_stop_at = 60;
            w22_decoder_set_interrupt(d, &lazy_stop);
            const w22_status s1 = w22_decode(d, z, W22_DTYPE_F32, T, h, wd, out, W22_DTYPE_F32);
            const int left = lazy_n_at_stop;
            CHECK(s1 != W22_OK && strstr(w22_last_error(), "stopped") && left > 0, "the interrupted decode: %s (%s), "
                  "%d copies in flight", w22_status_string(s1), w22_last_error(), left);
            lazy_stop = 0, lazy_stop_at = 0;
            t_fill_nan(out, nv);
            const w22_status s2 = w22_decode(d, z, W22_DTYPE_F32, T, h, wd, out, W22_DTYPE_F32);
            CHECK(s2 == W22_OK && memcmp(out, ref, nv * 4) == 0, "the retry after a stopped decode (%d copies left "
                  "in flight): %s", left, s2 == W22_OK ? "not the default's bits" : w22_last_error());
            printf("  a decode interrupted after its %ldth copy (%d in flight), then a retry: %s\n", 60L, left,
                   s2 == W22_OK && !memcmp(out, ref, nv * 4) ? "the default's bits" : "DIFFERENT");
        }
        w22_decoder_free(d);
    }
    free(out);
}

/* The work-memory budget (w22_decoder_params.work_budget_bytes; plan.h's host_spec): at the needs of hosting whole
 * stages (3, 2-3, 1-3, 0-3: counts of w22_plan_work_bytes) the plan takes the fewest caches of the cost order that fit
 * (one fewer does not), and the video has the default plan's bits (memcmp: the same convs on the same values, the
 * history read through the windows), also with the copies deferred to their wait, with and without the checking
 * mode; every hosting level (hosting_levels); twice on one decoder (the hosted caches zeroed at each start); over 2
 * ranks. A budget a byte below the floor fails naming the need and the budget, the decoder then decodes a smaller
 * size under the same budget, and a decoder with the floor as its budget decodes the first size. */
static void budget_cases(w22_weights *w, const float *z, int T, int h, int wd, size_t nv) {
    float *ref = malloc(nv * 4), *out = malloc(nv * 4);
    unsigned host = 99;
    CHECK_OK(budget_decode(w, z, T, h, wd, 0, 0, ref, nv, &host));
    CHECK(host == 0, "no budget: caches of stages 0x%x in host memory", host);
    hosting_levels(w, z, T, h, wd, nv, ref);
    w22_decoder_params prm;
    w22_decoder_params_init(&prm);
    w22_decoder *d = NULL;
    CHECK_OK(w22_decoder_open(w, &prm, &d));
    if (!d) return;
    static const unsigned rungs[] = {0x8, 0xc, 0xe, 0xf};
    size_t need[4] = {0}, floor = 0, dflt = 0;
    CHECK_OK(w22_plan_work_bytes(d, h, wd, 0, &dflt));
    for (int i = 0; i < 4; i++) CHECK_OK(w22_plan_work_bytes(d, h, wd, rungs[i], &need[i]));
    CHECK_OK(w22_plan_budget_floor(d, h, wd, &floor));
    CHECK(floor == need[3], "the floor %zu is not the last rung's need %zu", floor, need[3]);
    for (int i = 0; i < 4; i++) {
        const w22_status s = budget_decode(w, z, T, h, wd, need[i], 0, out, nv, &host);
        CHECK(s == W22_OK, "budget %zu (rung 0x%x): %s", need[i], rungs[i], w22_last_error());
        const int n = (int)(last_spec >> 8);
        size_t got = 0, less = 0;
        CHECK_OK(w22_plan_work_bytes(d, h, wd, last_spec, &got));
        if (n > 0) CHECK_OK(w22_plan_work_bytes(d, h, wd, W22_HOST_CACHES(n - 1), &less));
        printf("  budget %zu bytes (default %zu; stages 0x%x whole): %d caches hosted (stages 0x%x), work %zu: %s\n",
               need[i], dflt, rungs[i], n, host, got,
               s == W22_OK && !memcmp(out, ref, nv * 4) ? "the default's bits" : "DIFFERENT");
        CHECK(last_spec == W22_HOST_CACHES(n) && n > 0 && got <= need[i] && less > need[i],
              "budget %zu: the plan hosts 0x%x (work %zu; one cache fewer: %zu)", need[i], last_spec, got, less);
        CHECK(s == W22_OK && memcmp(out, ref, nv * 4) == 0, "budget %zu (%d caches hosted): not the default's bits",
              need[i], n);
        /* the copy queue at its latest (copies run when waited for), with and without the checking mode */
        for (int check = 0; check < 2; check++) {
            unsigned long pre = 0;
            lazy_begun = lazy_waits = 0;
            const w22_status sl = budget_decode_q(w, z, T, h, wd, need[i], check, 1, out, nv, &host, &pre);
            printf("    copies run when waited for%s: %ld begun, %ld waits, %lu histories prefetched, %lu loaded at "
                   "their conv: %s\n", check ? ", checking mode" : "", lazy_begun, lazy_waits, pre, last_loaded,
                   sl == W22_OK && !memcmp(out, ref, nv * 4) ? "the default's bits" : "DIFFERENT");
            CHECK(sl == W22_OK, "budget %zu, deferred copies%s: %s", need[i], check ? ", check" : "", w22_last_error());
            CHECK(sl == W22_OK && memcmp(out, ref, nv * 4) == 0, "budget %zu (%d caches hosted), copies run when "
                  "waited for%s: not the default's bits", need[i], n, check ? ", checking mode" : "");
            CHECK(pre > 0 && lazy_begun > 0 && lazy_waits > 0, "budget %zu: %lu prefetches, %ld copies begun, %ld "
                  "waits: the copy queue was not used", need[i], pre, lazy_begun, lazy_waits);
        }
    }
    w22_decoder_free(d);
    /* the checking mode (the window's views checked like the caches'), and two calls on one decoder */
    CHECK_OK(budget_decode(w, z, T, h, wd, floor, 1, out, nv, &host));
    CHECK(memcmp(out, ref, nv * 4) == 0, "the floor's budget in the checking mode: not the default's bits");
    prm.work_budget_bytes = floor;
    CHECK_OK(w22_decoder_open(w, &prm, &d));
    for (int call = 0; call < 2 && d; call++) {
        t_fill_nan(out, nv);
        CHECK_OK(w22_decode(d, z, W22_DTYPE_F32, T, h, wd, out, W22_DTYPE_F32));
        CHECK(memcmp(out, ref, nv * 4) == 0, "the floor's budget, call %d of one decoder: not the default's bits", call);
    }
    w22_decoder_free(d);
    /* a nonzero budget under the backend's reserve fails the open */
    prm.work_budget_bytes = W22_WORK_RESERVE - 1;
    d = NULL;
    const w22_status so = w22_decoder_open(w, &prm, &d);
    CHECK(so == W22_ERR_INVALID_ARG && !d && strstr(w22_last_error(), "work_budget_bytes"),
          "a budget under the reserve: open says %s (%s)", w22_status_string(so), w22_last_error());
    w22_decoder_free(d);
    /* below the floor: a clear failure, no crash; the same decoder then decodes a smaller size */
    prm.work_budget_bytes = floor - 1;
    d = NULL;
    CHECK_OK(w22_decoder_open(w, &prm, &d));
    if (d) {
        t_fill_nan(out, nv);
        const w22_status s = w22_decode(d, z, W22_DTYPE_F32, T, h, wd, out, W22_DTYPE_F32);
        const char *msg = w22_last_error();
        char want[64];
        snprintf(want, sizeof want, "(%zu bytes)", floor - 1);
        CHECK(s == W22_ERR_INVALID_ARG && strstr(msg, "budget") && strstr(msg, want),
              "a budget below the floor: %s (%s)", w22_status_string(s), msg);
        snprintf(want, sizeof want, "(%zu bytes;", floor);
        CHECK(strstr(msg, want) != NULL, "the failure does not name the need %zu: %s", floor, msg);
        printf("  below the floor: %s\n", msg);
        const int h2 = 2, w2 = 2;
        size_t floor2 = 0;
        CHECK_OK(w22_plan_budget_floor(d, h2, w2, &floor2));
        if (floor2 < floor) {
            const w22_config *cfg = w22_weights_config(w);
            int F2, H2, W2;
            w22_video_shape(cfg, T, h2, w2, &F2, &H2, &W2);
            const size_t nz2 = (size_t)cfg->z_dim * T * h2 * w2, nv2 = (size_t)3 * F2 * H2 * W2;
            float *z2 = malloc(nz2 * 4), *a = malloc(nv2 * 4), *b = malloc(nv2 * 4);
            t_fill_uniform(z2, nz2, 12, -2.0f, 2.0f);
            t_fill_nan(a, nv2);
            CHECK_OK(w22_decode(d, z2, W22_DTYPE_F32, T, h2, w2, a, W22_DTYPE_F32));
            CHECK(budget_decode(w, z2, T, h2, w2, 0, 0, b, nv2, &host) == W22_OK && memcmp(a, b, nv2 * 4) == 0,
                  "after the failure, a smaller size under the same budget: not the default's bits");
            free(z2), free(a), free(b);
        } else {
            CHECK(0, "the floor at %dx%d (%zu) is not below the floor at %dx%d (%zu)", h2, w2, floor2, h, wd, floor);
        }
        w22_decoder_free(d);
    }
    /* and a decoder with a good budget decodes the size that failed */
    CHECK_OK(budget_decode(w, z, T, h, wd, floor, 0, out, nv, &host));
    CHECK(memcmp(out, ref, nv * 4) == 0, "retried with the floor's budget: not the default's bits");
    /* over 2 ranks (rows 2 and 3), the budget the larger rank's floor: that rank hosts every stage's caches, and the
     * video is the 2-rank default's bits */
    {
        w22_decoder_params p2;
        w22_decoder_params_init(&p2);
        w22_decoder *dd = NULL;
        CHECK_OK(w22_decoder_open(w, &p2, &dd));
        size_t top = 0;
        for (int r = 0; r < 2 && dd; r++) {
            size_t f = 0;
            dd->rank = r, dd->world = 2;
            CHECK_OK(w22_plan_budget_floor(dd, h, wd, &f));
            if (f > top) top = f;
        }
        if (dd) dd->rank = 0, dd->world = 1;
        w22_decoder_free(dd);
        float *v2[2] = {ref, out};
        unsigned hosted = 0;
        for (int k = 0; k < 2; k++) {
            w22_comm *comms[2];
            CHECK_OK(w22_comm_local_group(2, comms));
            rank_job jobs[2];
            pthread_t th[2];
            for (int r = 0; r < 2; r++) {
                jobs[r] = (rank_job){w, comms[r], z, T, h, wd, 0, 0, r == 0 ? v2[k] : NULL, W22_OK, "", 0, 0};
                jobs[r].budget = k ? top : 0;
            }
            t_fill_nan(v2[k], nv);
            for (int r = 0; r < 2; r++) pthread_create(&th[r], NULL, rank_main, &jobs[r]);
            for (int r = 0; r < 2; r++) pthread_join(th[r], NULL);
            for (int r = 0; r < 2; r++) {
                CHECK(jobs[r].s == W22_OK, "budget over 2 ranks (%d): rank %d: %s", k, r, jobs[r].err);
                if (k) hosted |= jobs[r].host == 0xf;
                w22_comm_free(comms[r]);
            }
        }
        CHECK(hosted, "budget over 2 ranks: no rank hosted every stage's caches");
        /* one rank's budget below its floor: it fails naming the budget, the other fails too (no hang) */
        w22_comm *comms[2];
        CHECK_OK(w22_comm_local_group(2, comms));
        rank_job jobs[2];
        pthread_t th[2];
        for (int r = 0; r < 2; r++)
            jobs[r] = (rank_job){w, comms[r], z, T, h, wd, 0, 0, r == 0 ? out : NULL, W22_OK, "", r ? W22_WORK_RESERVE : 0, 0};
        for (int r = 0; r < 2; r++) pthread_create(&th[r], NULL, rank_main, &jobs[r]);
        for (int r = 0; r < 2; r++) pthread_join(th[r], NULL);
        CHECK(jobs[1].s == W22_ERR_INVALID_ARG && strstr(jobs[1].err, "budget"), "rank 1 below its floor: %s (%s)",
              w22_status_string(jobs[1].s), jobs[1].err);
        CHECK(jobs[0].s == W22_ERR_COMM, "rank 0 when rank 1's budget fails: %s (%s)", w22_status_string(jobs[0].s),
              jobs[0].err);
        for (int r = 0; r < 2; r++) w22_comm_free(comms[r]);
        CHECK(memcmp(out, ref, nv * 4) == 0, "budget over 2 ranks: not the 2-rank default's bits");
        printf("  budget over 2 ranks (%zu bytes): %s\n", top, memcmp(out, ref, nv * 4) ? "DIFFERENT" : "the default's bits");
    }
    free(ref);
    free(out);
}

static void run_model(w22_config cfg, int wan21) {
    w22_weights *w = NULL;
    CHECK_OK(w22_weights_synthetic(&cfg, 7, &w));
    if (!w) return;
    printf("%s\n", wan21 ? "the Wan2.1 structure (narrow):" : "the TI2V-5B structure (narrow):");
    const int T = 5, h = 5, wd = 3;
    int F, H, W;
    w22_video_shape(&cfg, T, h, wd, &F, &H, &W);
    size_t nz = (size_t)cfg.z_dim * T * h * wd, nv = (size_t)3 * F * H * W;
    float *z = malloc(nz * 4), *ref = malloc(nv * 4), *out = malloc(nv * 4);
    t_fill_uniform(z, nz, 11, -2.0f, 2.0f);

    /* Chunking: the same function for any frames per pass and stage chunks. Same arithmetic per element, so the
     * results agree to float32 rounding of a different GEMM blocking at most. Each chunking under the four flag
     * sets; rotation on and off must agree bit for bit (same values, same sums), the partial sums to 1e-5. */
    decode_one(w, z, T, h, wd, T, NULL, 0, ref, nv);
    {
        t_diff df = t_compare(ref, ref, nv);
        CHECK(df.nonfinite == 0, "reference decode left %zu elements unwritten", df.nonfinite);
    }
    static const struct {
        int fpp, chunks[4];
        const char *what;
    } runs[] = {
        {1, {0}, "frames_per_pass 1"},                         /* every stage rotates */
        {2, {0}, "frames_per_pass 2"},                         /* stage 0 copies (2 frames), 1-3 rotate */
        {3, {0}, "frames_per_pass 3"},
        {T, {0}, "frames_per_pass T"},
        {2, {0, 1, 3, 1}, "fpp 2, stage chunks 1, 3, 1"},      /* stage 2 copies */
        {1, {0, 2, 1, 2}, "fpp 1, stage chunks 2, 1, 2"},      /* stages 0 and 2 rotate, 1 and 3 copy */
        {1, {0, 1, 1, 1}, "fpp 1, stage chunks 1, 1, 1"},      /* v21's default: stage 2 hands on its chunk */
        {1, {0, 1, 2, 2}, "fpp 1, stage chunks 1, 2, 2"},      /* the same, of 2 frames */
        {2, {0, 1, 4, 1}, "fpp 2, stage chunks 1, 4, 1"},      /* stage 2 interleaved, 4 upsample convs a chunk */
        {1, {0, 1, 2, 1}, "fpp 1, stage chunks 1, 2, 1"},      /* v22's default: stage 1 hands on its 2 frames */
        {3, {0, 4, 2, 1}, "fpp 3, stage chunks 4, 2, 1"},      /* stage 1: chunks 4 then 2, 4 and 2 handings */
        {1, {0, 2, 4, 1}, "fpp 1, stage chunks 2, 4, 1"},      /* stage 1 hands on its whole 4 (first: 3) frames */
        {2, {0, 2, 2, 2}, "fpp 2, stage chunks 2, 2, 2"},      /* stage 2 hands on its whole chunk */
    };
    float *byflag[4];
    for (int f = 0; f < 4; f++) byflag[f] = malloc(nv * 4);
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
        for (int f = 0; f < 4; f++) {
            char what[96];
            snprintf(what, sizeof what, "%s%s%s", runs[i].what, f & ROT_OFF ? ", copies" : "",
                     f & PSUM_OFF ? ", head cache" : "");
            decode_one(w, z, T, h, wd, runs[i].fpp, runs[i].chunks, f, byflag[f], nv);
            check_same(what, byflag[f], ref, nv, 1e-5);
        }
        CHECK(memcmp(byflag[0], byflag[ROT_OFF], nv * 4) == 0, "%s: rotation and copies differ", runs[i].what);
        decode_one(w, z, T, h, wd, runs[i].fpp, runs[i].chunks, SHARE, out, nv);
        CHECK(memcmp(byflag[0], out, nv * 4) == 0, "%s: rotation through one shared spare differs", runs[i].what);
        CHECK(memcmp(byflag[PSUM_OFF], byflag[ROT_OFF | PSUM_OFF], nv * 4) == 0,
              "%s: rotation and copies differ with the head's input cache", runs[i].what);
    }
    for (int f = 0; f < 4; f++) free(byflag[f]);

    /* Two calls, the same video: the second starts from zeroed caches and the slots as planned, whatever the
     * first one's rotations left. */
    for (int i = 0; i < 4; i++) {
        const int fpp = 1 + i / 2, share = i % 2 ? SHARE : 0;
        decode_one(w, z, T, h, wd, fpp, NULL, 0, out, nv);
        float *again = malloc(nv * 4);
        w22_decoder_params prm;
        w22_decoder_params_init(&prm);
        prm.frames_per_pass = fpp;
        w22_decoder *d = NULL;
        CHECK_OK(w22_decoder_open(w, &prm, &d));
        w22_plan_test t;
        memset(&t, 0, sizeof t);
        if (d) set_flags(d, share, &t);
        for (int call = 0; call < 2 && d; call++) {
            t_fill_nan(again, nv);
            CHECK_OK(w22_decode(d, z, W22_DTYPE_F32, T, h, wd, again, W22_DTYPE_F32));
            CHECK(memcmp(out, again, nv * 4) == 0, "fpp %d%s: call %d of one decoder differs from a fresh decode",
                  fpp, share ? " shared" : "", call);
        }
        w22_decoder_free(d);
        free(again);
    }

    /* Simulated ranks: rows split over threads (5 rows: uneven for 2, 3 and 4); the spares' borders are zeroed and
     * their halo rows exchanged each time. */
    static const struct {
        int fpp, flags;
    } rank_runs[] = {{2, 0}, {1, 0}, {1, ROT_OFF | PSUM_OFF}, {1, SHARE}};
    for (size_t i = 0; i < sizeof rank_runs / sizeof rank_runs[0]; i++)
        for (int world = 2; world <= 4; world++) {
            w22_comm *comms[4];
            CHECK_OK(w22_comm_local_group(world, comms));
            rank_job jobs[4];
            pthread_t th[4];
            float *videos[4];
            for (int r = 0; r < world; r++) {
                videos[r] = r == 0 ? out : NULL;
                jobs[r] = (rank_job){w, comms[r], z, T, h, wd, rank_runs[i].fpp, rank_runs[i].flags, videos[r],
                                     W22_OK, "", 0, 0};
            }
            t_fill_nan(out, nv);
            for (int r = 0; r < world; r++) pthread_create(&th[r], NULL, rank_main, &jobs[r]);
            for (int r = 0; r < world; r++) pthread_join(th[r], NULL);
            for (int r = 0; r < world; r++) {
                CHECK(jobs[r].s == W22_OK, "world %d rank %d: %s", world, r, jobs[r].err);
                w22_comm_free(comms[r]);
            }
            char what[64];
            snprintf(what, sizeof what, "world %d, fpp %d%s", world, rank_runs[i].fpp,
                     rank_runs[i].flags == SHARE ? ", one shared spare"
                     : rank_runs[i].flags        ? ", copies + head cache"
                                                 : "");
            check_same(what, out, ref, nv, 1e-5);
        }

    printf("  the work-memory budget:\n");
    budget_cases(w, z, T, h, wd, nv);

    /* A rank that fails makes the others fail, not hang: rank 1 gets NaN latents. */
    if (!wan21) {
        w22_comm *comms[2];
        CHECK_OK(w22_comm_local_group(2, comms));
        float *bad = malloc(nz * 4);
        memcpy(bad, z, nz * 4);
        bad[3] = NAN;
        rank_job jobs[2] = {{w, comms[0], z, T, h, wd, 2, 0, out, W22_OK, "", 0, 0},
                            {w, comms[1], bad, T, h, wd, 2, 0, NULL, W22_OK, "", 0, 0}};
        pthread_t th[2];
        for (int r = 0; r < 2; r++) pthread_create(&th[r], NULL, rank_main, &jobs[r]);
        for (int r = 0; r < 2; r++) pthread_join(th[r], NULL);
        CHECK(jobs[1].s == W22_ERR_NONFINITE, "rank 1 with NaN latents: %s (%s)", w22_status_string(jobs[1].s), jobs[1].err);
        CHECK(jobs[0].s == W22_ERR_COMM, "rank 0 when rank 1 fails: %s (%s)", w22_status_string(jobs[0].s), jobs[0].err);
        printf("  failing rank: rank 0 says \"%s\"\n", jobs[0].err);
        for (int r = 0; r < 2; r++) w22_comm_free(comms[r]);
        free(bad);
    }
    free(z);
    free(ref);
    free(out);
    w22_weights_free(w);
}

int main(void) {
    run_model(narrow(), 0);
    run_model(narrow21(), 1);
    return t_finish("test_plan");
}
