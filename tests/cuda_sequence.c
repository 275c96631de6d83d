/* Every call right on the GPU, whatever came before it (issue 27): the full TI2V-5B config (synthetic weights; the
 * Wan2.1 VAE's with a fourth argument "wan21"),
 * bf16 latents and video in device memory, outputs poisoned with NaN before every call.
 *  1. A seeded random sequence of calls on ONE decoder: T 1..8, latent h and w 1..96 (odd, multiples of 8 and 16,
 *     portrait and landscape), frames per pass 1..3, a failed call (stopped by its progress callback) now and then.
 *     Each video must equal, bit for bit, the one a reference decoder makes for the same input right after its
 *     workspace and the backend's scratch were freed (the state of a fresh decoder: w22_plan_release). A few calls
 *     are also checked against truly fresh decoders (opening one takes seconds).
 *  2. Half the sequence on two decoders interleaved, the other half on one decoder alternating between two CUDA
 *     streams.
 *  3. A sixth of the sequence in the checking mode (W22_CHECK: every op's operands finite, the borders relied on zero,
 *     unwritten memory NaN), which must pass.
 *  4. Issue 27's own sequence (44x80, 44x78, back and forth; 8x8 twice).
 * `cuda_sequence probe I DIR` looks into one call that differs (probe(), below).
 * The bits must match exactly: the same kernels on the same shapes sum in the same order (the split tail's pieces
 * too: wg_split_sum's fixed order). Usage: cuda_sequence [N calls (default 60)] [max latent size (default 96)]
 * [parts (default 1234): which of the four above run, e.g. 34; the references are made for what they need] [model:
 * ti2v (default) or wan21]. Each part
 * prints its wall time (an H200 at 60 calls, session 31: references and parts 1-2 about 40 s, part 3 about 200 s,
 * 5-28 s a checked call; part 4 a few seconds). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cuda_runtime.h>
#include "common.h"
#include "plan/plan.h"
#include "testutil.h"

typedef struct {
    int T, h, w, fpp, fail;
} call;

static double t_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static int rnd(int n) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (int)(rng % (uint64_t)n);
}

static size_t video_elems(const w22_config *cfg, call c) {
    int F, H, W;
    w22_video_shape(cfg, c.T, c.h, c.w, &F, &H, &W);
    return (size_t)3 * F * H * W;
}

/* the latents of a call on the device (bf16), from a seed of its shape */
static void *latents(const w22_config *cfg, call c) {
    const size_t n = (size_t)cfg->z_dim * c.T * c.h * c.w;
    float *f = malloc(n * 4);
    uint16_t *z = malloc(n * 2);
    t_fill_uniform(f, n, 1000 + c.T * 97 + c.h * 31 + c.w, -2.f, 2.f);
    for (size_t i = 0; i < n; i++) z[i] = w22_f32_to_bf16(f[i]);
    void *zd = NULL;
    cudaMalloc(&zd, n * 2);
    cudaMemcpy(zd, z, n * 2, cudaMemcpyHostToDevice);
    free(f);
    free(z);
    return zd;
}

static int stop_at_first(void *user, int done, int total) {
    (void)user, (void)total;
    return done >= 1;
}

/* One decode into host memory (out: video_elems bf16). fpp 0 keeps the decoder's. */
static w22_status dec(w22_decoder *d, call c, uint16_t *out, cudaStream_t st) {
    const w22_config *cfg = &d->model.cfg;
    const size_t nv = video_elems(cfg, c);
    void *zd = latents(cfg, c), *vd = NULL;
    if (cudaMalloc(&vd, nv * 2) != cudaSuccess) return w22_fail(W22_ERR_OUT_OF_MEMORY, "test: video");
    cudaMemset(vd, 0xff, nv * 2); /* NaN: unwritten elements show */
    /* The latents' upload (pageable: the copy may still be in flight when cudaMemcpy returns) and the poison are on
     * the legacy default stream. A decode given NULL runs there, after them: no sync here, so that a decode that
     * ran ahead of them shows (it did: the backend's own stream, issue 27). On a stream of our own, ordering our
     * inputs is ours to do, as for any caller. */
    if (st) cudaDeviceSynchronize();
    if (c.fpp) d->frames_per_pass = c.fpp;
    d->params.progress = c.fail ? stop_at_first : NULL;
    w22_status s = w22_decode_device(d, zd, c.T, c.h, c.w, vd, st);
    d->params.progress = NULL;
    cudaDeviceSynchronize();
    cudaMemcpy(out, vd, nv * 2, cudaMemcpyDeviceToHost);
    cudaFree(zd);
    cudaFree(vd);
    return s;
}

static w22_decoder *open_dec(w22_weights *w, int check) {
    w22_decoder_params p;
    w22_decoder_params_init(&p);
    p.device = W22_DEVICE_CUDA;
    p.check = check;
    w22_decoder *d = NULL;
    CHECK_OK(w22_decoder_open(w, &p, &d));
    return d;
}

static void compare(const char *who, int i, call c, const uint16_t *v, const uint16_t *ref, size_t n) {
    size_t diff = 0, nan = 0;
    double mx = 0;
    for (size_t k = 0; k < n; k++) {
        nan += (v[k] & 0x7f80) == 0x7f80;
        if (v[k] != ref[k]) {
            diff++;
            const double a = fabs((double)w22_bf16_to_f32(v[k]) - w22_bf16_to_f32(ref[k]));
            if (a > mx) mx = a;
        }
    }
    if (diff || nan)
        printf("  %-12s call %2d T %d %2dx%-2d fpp %d: %zu of %zu differ (max|d| %.4f), %zu not finite\n", who, i, c.T,
               c.h, c.w, c.fpp, diff, n, mx, nan);
    CHECK(diff == 0 && nan == 0, "%s call %d (T %d, %dx%d, fpp %d): %zu of %zu elements differ from the reference, %zu "
          "not finite", who, i, c.T, c.h, c.w, c.fpp, diff, n, nan);
}

static w22_weights *g_weights; /* for the fresh decoders of arbitrate */
static w22_decoder *open_dec(w22_weights *w, int check);

/* After a mismatch: the same call on a fresh decoder, and which of the two it agrees with (the first mismatches
 * of a run only: each costs an open). */
static void arbitrate(const char *who, int i, call c, const uint16_t *ref, const uint16_t *got, size_t n) {
    static int left = 3;
    if (left-- <= 0 || !g_weights) return;
    w22_decoder *f = open_dec(g_weights, 0);
    uint16_t *fv = f ? malloc(n * 2) : NULL;
    if (fv && dec(f, c, fv, NULL) == W22_OK)
        printf("  %-12s call %2d: a fresh decoder agrees with %s\n", who, i,
               !memcmp(fv, ref, n * 2) ? "the reference" : !memcmp(fv, got, n * 2) ? "the tested decoder" : "neither");
    free(fv);
    w22_decoder_free(f);
}

/* a call on d, compared with ref (a failing call must fail) */
static void one(w22_decoder *d, const char *who, int i, call c, const uint16_t *ref, uint16_t *v, cudaStream_t st) {
    const w22_status s = dec(d, c, v, st);
    if (c.fail) {
        CHECK(s != W22_OK, "%s call %d: a stopped decode returned OK", who, i);
        return;
    }
    CHECK(s == W22_OK, "%s call %d (T %d, %dx%d, fpp %d): %s", who, i, c.T, c.h, c.w, c.fpp, w22_last_error());
    if (s != W22_OK) return;
    const size_t n = video_elems(&d->model.cfg, c);
    const int before = t_failures;
    compare(who, i, c, v, ref, n);
    if (t_failures > before) arbitrate(who, i, c, ref, v, n);
}

/* `probe I DIR`: where call I of the sequence parts from a fresh decoder's decode of it. A fresh decoder decodes
 * call I in the checking mode with a trace (DIR/probeI-fresh.txt); another runs calls 0 .. I-1 (failed ones too),
 * then call I checked and traced (DIR/probeI-seq.txt); a third decodes call I twice, unchecked, its plan released
 * between (is the call deterministic?). `diff` of the two traces names the first op whose output differs. */
static void probe(w22_weights *w, const w22_config *cfg, const call *calls, int I, const char *dir) {
    const size_t n = video_elems(cfg, calls[I]);
    uint16_t *vf = malloc(n * 2), *vs = malloc(n * 2), *v1 = malloc(n * 2), *v2 = malloc(n * 2);
    char path[512];
    call c = calls[I];
    c.fail = 0;
    w22_decoder *f = open_dec(w, 1);
    snprintf(path, sizeof path, "%s/probe%d-fresh.txt", dir, I);
    remove(path);
    setenv("W22_CHECK_TRACE", path, 1);
    if (f) CHECK_OK(dec(f, c, vf, NULL));
    unsetenv("W22_CHECK_TRACE");
    w22_decoder_free(f);
    w22_decoder *q = open_dec(w, 0);
    for (int i = 0; q && i < I; i++) {
        uint16_t *t = malloc(video_elems(cfg, calls[i]) * 2);
        dec(q, calls[i], t, NULL);
        free(t);
    }
    snprintf(path, sizeof path, "%s/probe%d-seq.txt", dir, I);
    remove(path);
    setenv("W22_CHECK_TRACE", path, 1);
    if (q) {
        q->check = 1;
        CHECK_OK(dec(q, c, vs, NULL));
    }
    unsetenv("W22_CHECK_TRACE");
    w22_decoder_free(q);
    w22_decoder *r = open_dec(w, 0);
    if (r) {
        CHECK_OK(dec(r, c, v1, NULL));
        w22_plan_release(r);
        CHECK_OK(dec(r, c, v2, NULL));
    }
    w22_decoder_free(r);
    printf("probe call %d (T %d, %dx%d, fpp %d): fresh vs after the sequence %s; unchecked fresh twice %s; checked vs "
           "unchecked fresh %s\n", I, c.T, c.h, c.w, c.fpp, memcmp(vf, vs, n * 2) ? "DIFFER" : "same",
           memcmp(v1, v2, n * 2) ? "DIFFER" : "same", memcmp(vf, v1, n * 2) ? "DIFFER" : "same");
    CHECK(!memcmp(vf, vs, n * 2), "probe %d: the decode after the sequence differs from a fresh decoder's", I);
    CHECK(!memcmp(v1, v2, n * 2), "probe %d: two decodes of one input differ", I);
    free(vf), free(vs), free(v1), free(v2);
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0); /* a run cut short by its time limit keeps what it printed */
    const int probing = argc > 3 && !strcmp(argv[1], "probe");
    const int N = probing ? 60 : argc > 1 ? atoi(argv[1]) : 60, MAXS = probing ? 96 : argc > 2 ? atoi(argv[2]) : 96;
    const char *parts = !probing && argc > 3 ? argv[3] : "1234";
    /* the model: TI2V-5B's (default) or the Wan2.1 VAE's real config (argv[4] "wan21") */
    const int wan21 = !probing && argc > 4 && !strcmp(argv[4], "wan21");
    if (!probing && argc > 4 && !wan21 && strcmp(argv[4], "ti2v")) {
        fprintf(stderr, "usage: %s [N calls] [max latent size] [parts] [model: ti2v or wan21]\n", argv[0]);
        return 2;
    }
    const int p1 = strchr(parts, '1') != NULL, p2 = strchr(parts, '2') != NULL, p3 = strchr(parts, '3') != NULL,
              p4 = strchr(parts, '4') != NULL;
    if (N < 1 || MAXS < 1 || !(p1 || p2 || p3 || p4)) {
        fprintf(stderr, "usage: %s [N calls >= 1] [max latent size >= 1] [parts: digits of 1234]\n", argv[0]);
        return 2;
    }
    double t0 = t_now();
    w22_config cfg;
    if (wan21) w22_config_wan21(&cfg);
    else w22_config_default(&cfg);
    printf("model: %s\n", wan21 ? "the Wan2.1 VAE" : "Wan2.2 TI2V-5B");
    w22_weights *w = NULL;
    CHECK_OK(w22_weights_synthetic(&cfg, 1, &w));
    if (!w) return t_finish("cuda_sequence");
    g_weights = w;
    /* the sequence: sizes from a list that has odd ones, multiples of 8 and 16, and any size below MAXS */
    static const int picks[] = {1, 2, 3, 5, 8, 9, 16, 17, 24, 31, 32, 44, 45, 48, 64, 78, 80, 96};
    call *calls = calloc(N, sizeof *calls);
    size_t cap = 0;
    for (int i = 0; i < N; i++) {
        call c;
        c.T = 1 + rnd(8);
        c.h = rnd(3) ? picks[rnd(18)] : 1 + rnd(MAXS);
        c.w = rnd(3) ? picks[rnd(18)] : 1 + rnd(MAXS);
        if (c.h > MAXS) c.h = MAXS;
        if (c.w > MAXS) c.w = MAXS;
        c.fpp = 1 + rnd(3);
        c.fail = i > 0 && rnd(12) == 0;
        if ((long)c.h * c.w * c.T > 96L * 96 * 3) c.T = 1 + rnd(3); /* the suite's time */
        calls[i] = c;
        const size_t n = video_elems(&cfg, c);
        if (n > cap) cap = n;
    }
    if (probing) { /* cuda_sequence probe I DIR */
        const int I = atoi(argv[2]);
        if (I >= 0 && I < N) probe(w, &cfg, calls, I, argv[3]);
        free(calls);
        w22_weights_free(w);
        return t_finish("cuda_sequence probe");
    }
    uint16_t **refs = calloc(N, sizeof *refs), *v = malloc(cap * 2);
    /* the references: a decoder brought back to a fresh one's state before each call */
    w22_decoder *r = open_dec(w, 0);
    const int nref = p1 || p2 ? N : p3 ? N / 6 : 0; /* part 3 reads the first sixth; part 4 makes its own */
    for (int i = 0; r && i < nref; i++) {
        if (calls[i].fail) continue;
        refs[i] = malloc(video_elems(&cfg, calls[i]) * 2);
        w22_plan_release(r);
        CHECK_OK(dec(r, calls[i], refs[i], NULL));
    }
    w22_decoder_free(r);
    /* a few against truly fresh decoders */
    for (int i = 0, k = 0; p1 && i < N && k < 3; i++) {
        if (calls[i].fail) continue;
        w22_decoder *f = open_dec(w, 0);
        if (f) {
            uint16_t *fv = malloc(video_elems(&cfg, calls[i]) * 2);
            CHECK_OK(dec(f, calls[i], fv, NULL));
            compare("fresh", i, calls[i], fv, refs[i], video_elems(&cfg, calls[i]));
            free(fv);
        }
        w22_decoder_free(f);
        k++, i += N / 3;
    }
    printf("references: %d of %d calls (max %d latent rows/cols); %d failures so far (%.0f s)\n", nref, N, MAXS,
           t_failures, t_now() - t0);
    /* 1. one decoder through the sequence */
    w22_decoder *a = p1 || p2 ? open_dec(w, 0) : NULL, *b = p2 ? open_dec(w, 0) : NULL;
    for (int i = 0; p1 && a && i < N; i++) one(a, "one decoder", i, calls[i], refs[i], v, NULL);
    if (p1) printf("one decoder: %d failures so far (%.0f s)\n", t_failures, t_now() - t0);
    /* 2. two decoders interleaved; one decoder on two streams */
    /* (every other call: the suite's time; the sequence above already ran them all) */
    for (int i = 0; p2 && a && b && i < N; i += 2) one(i % 3 == 1 ? b : a, "interleaved", i, calls[i], refs[i], v, NULL);
    cudaStream_t s2[2];
    cudaStreamCreateWithFlags(&s2[0], cudaStreamNonBlocking);
    cudaStreamCreateWithFlags(&s2[1], cudaStreamNonBlocking);
    for (int i = 1; p2 && b && i < N; i += 2) one(b, "two streams", i, calls[i], refs[i], v, s2[i / 2 % 2]);
    if (p2) printf("interleaved, two streams: %d failures so far (%.0f s)\n", t_failures, t_now() - t0);
    w22_decoder_free(a);
    w22_decoder_free(b);
    /* 3. the checking mode on a sixth of the sequence (it syncs and reads every operand: several times slower) */
    w22_decoder *ck = p3 ? open_dec(w, 1) : NULL;
    for (int i = 0; ck && i < N / 6; i++) { /* a line per call: the checking mode's time grows with the ops */
        const double tc = t_now();
        one(ck, "checked", i, calls[i], refs[i], v, NULL);
        printf("checked call %d (T %d, %dx%d, fpp %d%s): %.1f s\n", i, calls[i].T, calls[i].h, calls[i].w,
               calls[i].fpp, calls[i].fail ? ", stopped" : "", t_now() - tc);
        fflush(stdout);
    }
    w22_decoder_free(ck);
    if (p3) printf("checked: %d failures so far (%.0f s)\n", t_failures, t_now() - t0);
    /* 4. issue 27's sequence: each against the first decode of its input on this decoder after a fresh plan */
    const call seq[] = {{2, 44, 80, 2, 0}, {2, 44, 80, 2, 0}, {2, 44, 78, 2, 0}, {2, 44, 80, 2, 0}, {2, 44, 78, 2, 0},
                        {2, 44, 78, 2, 0}, {5, 44, 78, 2, 0}, {2, 44, 78, 2, 0}, {2, 8, 8, 2, 0},  {2, 8, 8, 2, 0}};
    const int ns = sizeof seq / sizeof seq[0];
    w22_decoder *d = p4 ? open_dec(w, 0) : NULL, *rr = p4 ? open_dec(w, 0) : NULL;
    const size_t big = video_elems(&cfg, seq[6]);
    uint16_t *ref = malloc(big * 2), *got = malloc(big * 2);
    for (int i = 0; d && rr && i < ns; i++) {
        w22_plan_release(rr);
        CHECK_OK(dec(rr, seq[i], ref, NULL));
        one(d, "issue 27", i, seq[i], ref, got, NULL);
    }
    w22_decoder_free(d);
    w22_decoder_free(rr);
    if (p4) printf("issue 27's sequence: %d failures so far (%.0f s)\n", t_failures, t_now() - t0);
    for (int i = 0; i < N; i++) free(refs[i]);
    free(refs), free(calls), free(v), free(ref), free(got);
    w22_weights_free(w);
    return t_finish("cuda_sequence");
}
