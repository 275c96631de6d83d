/* Every call right, whatever came before it (CPU backend, narrow synthetic model): a seeded random sequence of
 * calls on ONE decoder (T 1..8, latent sizes odd, multiples of 8 and 16, portrait and landscape, frames per pass
 * 1..3, a failed call now and then) gives bitwise the video of a fresh decoder for each input; so do two decoders
 * interleaved, two threads sharing one decoder (its lock), and decoders of different thread counts side by side (a
 * decoder's bits must not depend on another's count: OpenBLAS's pool is the process's). The checking mode (check.c)
 * passes on the same
 * decodes, and catches a broken invariant planted through the backend's op table: a border the plan relies on
 * left unzeroed, and an op that leaves its output unwritten. Outputs are poisoned with NaN before every call. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
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

/* The Wan2.1 VAE's structure, narrow: 32, 32, 32, 16, 8 channels, upsample convs that halve them, 3 outputs. */
static w22_config narrow21(void) {
    w22_config c;
    w22_config_wan21(&c);
    c.z_dim = 4;
    c.base_dim = 8;
    return c;
}

typedef struct {
    int T, h, w, fpp, fail;
} call;

/* latent sizes: odd, multiples of 8 and 16, h > w and h < w, 1 */
static const int sizes[] = {1, 2, 3, 5, 7, 8, 9, 13, 16, 17, 24};

static uint64_t rng = 88172645463325252ull;
static int rnd(int n) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (int)(rng % (uint64_t)n);
}

static size_t video_elems(const w22_config *cfg, call c) {
    int F, H, W;
    w22_video_shape(cfg, c.T, c.h, c.w, &F, &H, &W);
    return (size_t)3 * F * H * W;
}

static float *latents(const w22_config *cfg, call c) {
    const size_t n = (size_t)cfg->z_dim * c.T * c.h * c.w;
    float *z = malloc(n * 4);
    t_fill_uniform(z, n, 500 + c.T * 1009 + c.h * 101 + c.w, -2.f, 2.f);
    return z;
}

static int stop_at_first(void *user, int done, int total) {
    (void)user, (void)total;
    return done >= 1; /* a failed call: stopped after its first pass */
}

static w22_status decode_on(w22_decoder *d, const w22_config *cfg, call c, float *v) {
    float *z = latents(cfg, c);
    t_fill_nan(v, video_elems(cfg, c));
    if (c.fpp) d->frames_per_pass = c.fpp; /* the next prepare re-plans (plan.c's planned_fpp); 0: the decoder's */
    w22_status s = w22_decode(d, z, W22_DTYPE_F32, c.T, c.h, c.w, v, W22_DTYPE_F32);
    free(z);
    return s;
}

static void fresh(w22_weights *w, const w22_config *cfg, call c, float *v) {
    w22_decoder_params p;
    w22_decoder_params_init(&p);
    p.frames_per_pass = c.fpp;
    p.threads = 1;
    w22_decoder *d = NULL;
    CHECK_OK(w22_decoder_open(w, &p, &d));
    c.fpp = 0;
    if (d) CHECK_OK(decode_on(d, cfg, c, v));
    w22_decoder_free(d);
}

static w22_decoder *open_threads(w22_weights *w, int check, int threads) {
    w22_decoder_params p;
    w22_decoder_params_init(&p);
    p.frames_per_pass = 2;
    p.threads = threads;
    p.check = check;
    w22_decoder *d = NULL;
    CHECK_OK(w22_decoder_open(w, &p, &d));
    return d;
}

static w22_decoder *open_dec(w22_weights *w, int check) { return open_threads(w, check, 1); }

/* One call on d: a failing one (stopped by its progress callback) must fail; a good one must equal the fresh
 * decoder's video bit for bit. */
static void one(w22_decoder *d, const w22_config *cfg, call c, const float *ref, float *v, const char *who, int i) {
    if (c.fail) {
        d->params.progress = stop_at_first;
        const w22_status s = decode_on(d, cfg, c, v);
        d->params.progress = NULL;
        CHECK(s != W22_OK, "%s call %d: a stopped decode returned OK", who, i);
        return;
    }
    const w22_status s = decode_on(d, cfg, c, v);
    CHECK(s == W22_OK, "%s call %d (T %d, %dx%d, fpp %d): %s", who, i, c.T, c.h, c.w, c.fpp, w22_last_error());
    const size_t n = video_elems(cfg, c);
    CHECK(memcmp(v, ref, n * 4) == 0, "%s call %d (T %d, %dx%d, fpp %d) differs from a fresh decoder's video", who,
          i, c.T, c.h, c.w, c.fpp);
}

typedef struct {
    w22_decoder *d;
    const w22_config *cfg;
    const call *calls;
    float **refs;
    int n, start, step;
    size_t cap;
} thread_job;

static void *thread_main(void *p) {
    thread_job *j = p;
    float *v = malloc(j->cap * 4);
    for (int i = j->start; i < j->n; i += j->step) one(j->d, j->cfg, j->calls[i], j->refs[i], v, "thread", i);
    free(v);
    return NULL;
}

/* Planted faults for the checking mode: the backend's table with one op broken. */
static const w22_backend_ops *real_ops;
static w22_status no_zero_border(w22_backend *b, w22_view v) {
    (void)b, (void)v;
    return W22_OK;
}
static w22_status no_norm(w22_backend *b, w22_view in, w22_view out, const w22_bweight *g, int silu) {
    (void)b, (void)in, (void)out, (void)g, (void)silu;
    return W22_OK;
}
/* a fill of zeros that leaves a small nonzero value instead (the decode's start then leaves the causal caches
 * nonzero: the first chunk's convs are told their history is zero, hist_zero, and skip it) */
static w22_status bad_zero_fill(w22_backend *b, void *p, size_t n, int byte) {
    return real_ops->fill(b, p, n, byte == 0 ? 0x3c : byte);
}

static void planted(w22_weights *w, const w22_config *cfg, int which, const char *expect) {
    w22_decoder *d = open_dec(w, 1);
    if (!d) return;
    real_ops = d->backend->ops;
    w22_backend_ops broken = *real_ops;
    if (which == 0) broken.zero_border = no_zero_border;
    else if (which == 1) broken.rmsnorm = no_norm;
    else broken.fill = bad_zero_fill;
    d->backend->ops = &broken;
    const call c = {3, 5, 3, 1, 0};
    float *v = malloc(video_elems(cfg, c) * 4);
    const w22_status s = decode_on(d, cfg, c, v);
    const char *e = w22_last_error();
    printf("  planted %-14s -> %s\n", which == 0 ? "border" : which == 1 ? "unwritten" : "nonzero caches",
           s == W22_OK ? "OK (missed)" : e);
    CHECK(s == W22_ERR_INTERNAL && strstr(e, expect) && strstr(e, "stage") && strstr(e, "layer"),
          "the checking mode missed a planted fault (%s): %s", expect, s == W22_OK ? "decode OK" : e);
    d->backend->ops = real_ops;
    free(v);
    w22_decoder_free(d);
}

/* Two threads on one decoder (frames per pass 2, no failed calls: nothing of the decoder is changed between calls):
 * the lock serializes the decodes; every result still right. */
static void two_threads_one_decoder(w22_weights *w, const w22_config *cfg, const call *calls, int nt, size_t cap) {
    call *tc = malloc(sizeof *tc * nt);
    float **trefs = malloc(sizeof *trefs * nt);
    for (int i = 0; i < nt; i++) {
        tc[i] = calls[i];
        tc[i].fpp = 2, tc[i].fail = 0;
        trefs[i] = malloc(video_elems(cfg, tc[i]) * 4);
        fresh(w, cfg, tc[i], trefs[i]);
        tc[i].fpp = 0;
    }
    w22_decoder *d = open_dec(w, 0);
    if (d) {
        thread_job j[2] = {{d, cfg, tc, trefs, nt, 0, 2, cap}, {d, cfg, tc, trefs, nt, 1, 2, cap}};
        pthread_t t[2];
        for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, thread_main, &j[i]);
        for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
        w22_decoder_free(d);
    }
    for (int i = 0; i < nt; i++) free(trefs[i]);
    free(trefs);
    free(tc);
}

/* Decoders of 1 and 3 threads: each one's video the same whatever the other did, in turn and at once; the second is
 * opened on another thread while the first decodes. The full run's call has 25 x 36 latent positions, so the
 * attention's second product sums over K = 900 keys: with OpenBLAS, such a product changes bits with the pool's
 * size (gemm.c; with 0.3.21, K = M = 900-1100 but for a few), which every decoder's open once set for all. */
typedef struct {
    w22_weights *w;
    const w22_config *cfg;
    call c;
    float *video;
    w22_decoder *d;
} open_job;

static void *open_and_decode(void *p) {
    open_job *j = p;
    j->d = open_threads(j->w, 0, 3);
    if (j->d) CHECK_OK(decode_on(j->d, j->cfg, j->c, j->video));
    return NULL;
}

static void thread_counts(w22_weights *w, const w22_config *cfg, call c) {
    const size_t n = video_elems(cfg, c);
    float *ref1 = malloc(n * 4), *ref3 = malloc(n * 4), *v = malloc(n * 4);
    w22_decoder *d1 = open_threads(w, 0, 1);
    if (d1) CHECK_OK(decode_on(d1, cfg, c, ref1));
    open_job oj = {w, cfg, c, ref3, NULL};
    pthread_t ot;
    pthread_create(&ot, NULL, open_and_decode, &oj); /* 3 threads: opened and decoding while d1 decodes */
    if (d1) one(d1, cfg, c, ref1, v, "1 thread while a 3-thread decoder opens", 0);
    pthread_join(ot, NULL);
    w22_decoder *d3 = oj.d;
    printf("  1 and 3 threads: %s videos\n", memcmp(ref1, ref3, n * 4) ? "different" : "the same");
    call cs[1] = {c};
    float *r1[1] = {ref1}, *r3[1] = {ref3};
    if (d1) one(d1, cfg, c, ref1, v, "1 thread after a 3-thread decoder opened", 0);
    if (d1 && d3) {
        thread_job j[2] = {{d1, cfg, cs, r1, 1, 0, 1, n}, {d3, cfg, cs, r3, 1, 0, 1, n}};
        for (int k = 0; k < 3; k++) { /* the two decoders at once, three times */
            pthread_t t[2];
            for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, thread_main, &j[i]);
            for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
        }
    }
    if (d3) one(d3, cfg, c, ref3, v, "3 threads after", 0);
    w22_decoder_free(d1);
    w22_decoder_free(d3);
    free(ref1), free(ref3), free(v);
}

/* `test_sequence threads`: only the parts with threads, on a few small calls (ThreadSanitizer's build, `make
 * test-tsan`, runs 10-20x slower: it looks for races, which need no size). */
static const call small_calls[] = {{2, 3, 5, 0, 0}, {1, 5, 3, 0, 0}, {3, 2, 2, 0, 0}, {1, 1, 1, 0, 0}, {2, 4, 3, 0, 0},
                                   {1, 3, 3, 0, 0}};
/* The whole sequence on one model; wan21: the Wan2.1 structure (its own calls; the thread-count part once, on
 * TI2V-5B's, since it tests OpenBLAS's pool, not the model). */
static void run_model(const w22_config *cfg_in, int threads_only, int wan21) {
    w22_config cfg = *cfg_in;
    w22_weights *w = NULL;
    CHECK_OK(w22_weights_synthetic(&cfg, 3, &w));
    if (!w) return;
    printf("%s:\n", wan21 ? "the Wan2.1 structure (narrow)" : "the TI2V-5B structure (narrow)");
    enum { NMAX = 64, NT = 24 };
    const int N = wan21 ? 32 : NMAX; /* the second model: half the sequence (make test's time) */
    call calls[NMAX];
    size_t cap = 0;
    for (int i = 0; i < N; i++) {
        call c = {1 + rnd(8), sizes[rnd(11)], sizes[rnd(11)], 1 + rnd(3), i > 0 && rnd(10) == 0};
        if (c.h * c.w * c.T > 900) c.T = 1 + rnd(2); /* keeps the CPU run short */
        calls[i] = c;
        const size_t n = video_elems(&cfg, c);
        if (n > cap) cap = n;
    }
    if (threads_only) {
        two_threads_one_decoder(w, &cfg, small_calls, sizeof small_calls / sizeof small_calls[0], cap);
        if (!wan21) thread_counts(w, &cfg, small_calls[0]);
        w22_weights_free(w);
        return;
    }
    /* the reference: a fresh decoder per call */
    float *refs[NMAX] = {0}, *v = malloc(cap * 4);
    for (int i = 0; i < N; i++) {
        if (calls[i].fail) continue;
        refs[i] = malloc(video_elems(&cfg, calls[i]) * 4);
        fresh(w, &cfg, calls[i], refs[i]);
    }
    /* one decoder through the whole sequence, in checking mode, then without it */
    for (int check = 1; check >= 0; check--) {
        w22_decoder *d = open_dec(w, check);
        for (int i = 0; d && i < N; i++) one(d, &cfg, calls[i], refs[i], v, check ? "checked" : "one decoder", i);
        w22_decoder_free(d);
    }
    printf("  %d calls on one decoder, checked and not: %d failures so far\n", N, t_failures);
    /* the workspace released between calls (w22_decoder_release_workspace): the memory goes, the results stay */
    w22_decoder *r = open_dec(w, 0);
    for (int i = 0; r && i < N; i += 3) {
        one(r, &cfg, calls[i], refs[i], v, "released", i);
        const size_t held = w22_decoder_device_bytes(r);
        CHECK_OK(w22_decoder_release_workspace(r));
        CHECK(w22_decoder_device_bytes(r) <= held, "release_workspace: %zu bytes held after, %zu before",
              w22_decoder_device_bytes(r), held);
    }
    w22_decoder_free(r);
    CHECK(w22_decoder_release_workspace(NULL) == W22_ERR_INVALID_ARG, "release_workspace(NULL) must fail");
    /* two decoders interleaved */
    w22_decoder *a = open_dec(w, 0), *b = open_dec(w, 0);
    for (int i = 0; a && b && i < N; i++) one(i % 3 == 1 ? b : a, &cfg, calls[i], refs[i], v, "interleaved", i);
    w22_decoder_free(a);
    w22_decoder_free(b);
    two_threads_one_decoder(w, &cfg, calls, NT, cap);
    printf("  interleaved decoders and two threads: %d failures so far\n", t_failures);
    if (!wan21) {
        thread_counts(w, &cfg, (call){1, 25, 36, 0, 0});
        printf("  decoders of 1 and 3 threads: %d failures so far\n", t_failures);
    }
    /* the checking mode catches planted faults */
    planted(w, &cfg, 0, "zero-border invariant");
    planted(w, &cfg, 1, "not finite");
    planted(w, &cfg, 2, "told they are");
    for (int i = 0; i < N; i++) free(refs[i]);
    free(v);
    w22_weights_free(w);
}

int main(int argc, char **argv) {
    const int threads_only = argc > 1 && !strcmp(argv[1], "threads");
    const w22_config a = narrow(), b = narrow21();
    run_model(&a, threads_only, 0);
    run_model(&b, threads_only, 1);
    return t_finish("test_sequence");
}
