/* The plan's invariances on the CPU: the chunk sizes (frames per pass, and the stages' own chunks) do not change
 * the output, and simulated ranks (threads with an in-memory exchange, worlds 2, 3 and 4, uneven splits) give the
 * single-rank output. Narrow synthetic models, random latents, outputs poisoned with NaN before each call. */
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

typedef struct {
    w22_weights *w;
    w22_comm *comm;
    const float *z;
    int T, h, wd, fpp;
    float *video;
    w22_status s;
    char err[512];
} rank_job;

static void *rank_main(void *p) {
    rank_job *j = p;
    w22_decoder_params prm;
    w22_decoder_params_init(&prm);
    prm.comm = j->comm;
    prm.frames_per_pass = j->fpp;
    prm.threads = 1;
    w22_decoder *d = NULL;
    j->s = w22_decoder_open(j->w, &prm, &d);
    if (j->s == W22_OK) j->s = w22_decode(d, j->z, W22_DTYPE_F32, j->T, j->h, j->wd, j->video, W22_DTYPE_F32);
    if (j->s != W22_OK) snprintf(j->err, sizeof j->err, "%s", w22_last_error());
    w22_decoder_free(d);
    return NULL;
}

static void decode_one(w22_weights *w, const float *z, int T, int h, int wd, int fpp, const int chunks[4],
                       float *video, size_t n) {
    t_fill_nan(video, n);
    w22_decoder_params prm;
    w22_decoder_params_init(&prm);
    prm.frames_per_pass = fpp;
    w22_decoder *d = NULL;
    CHECK_OK(w22_decoder_open(w, &prm, &d));
    if (!d) return;
    if (chunks)
        for (int s = 1; s < 4; s++) d->chunk_override[s] = chunks[s];
    CHECK_OK(w22_decode(d, z, W22_DTYPE_F32, T, h, wd, video, W22_DTYPE_F32));
    w22_decoder_free(d);
}

static void check_same(const char *what, const float *a, const float *ref, size_t n, double tol) {
    t_diff df = t_compare(a, ref, n);
    printf("  %-40s max|d| %.3g rms %.3g (ref rms %.3g)\n", what, df.max_abs, df.rms, df.ref_rms);
    CHECK(df.nonfinite == 0, "%s: %zu elements not written or not finite", what, df.nonfinite);
    CHECK(df.max_abs <= tol, "%s: max|d| %.3g > %.3g", what, df.max_abs, tol);
}

int main(void) {
    w22_config cfg = narrow();
    w22_weights *w = NULL;
    CHECK_OK(w22_weights_synthetic(&cfg, 7, &w));
    if (!w) return t_finish("test_plan");
    const int T = 5, h = 5, wd = 3;
    int F, H, W;
    w22_video_shape(&cfg, T, h, wd, &F, &H, &W);
    size_t nz = (size_t)cfg.z_dim * T * h * wd, nv = (size_t)3 * F * H * W;
    float *z = malloc(nz * 4), *ref = malloc(nv * 4), *out = malloc(nv * 4);
    t_fill_uniform(z, nz, 11, -2.0f, 2.0f);

    /* Chunking: the same function for any frames per pass and stage chunks. Same arithmetic per element, so the
     * results agree to float32 rounding of a different GEMM blocking at most. */
    decode_one(w, z, T, h, wd, T, NULL, ref, nv);
    {
        t_diff df = t_compare(ref, ref, nv);
        CHECK(df.nonfinite == 0, "reference decode left %zu elements unwritten", df.nonfinite);
    }
    int fpps[] = {1, 2, 3};
    for (int i = 0; i < 3; i++) {
        char what[64];
        snprintf(what, sizeof what, "frames_per_pass %d", fpps[i]);
        decode_one(w, z, T, h, wd, fpps[i], NULL, out, nv);
        check_same(what, out, ref, nv, 1e-5);
    }
    int chunks[4] = {0, 1, 3, 1};
    decode_one(w, z, T, h, wd, 2, chunks, out, nv);
    check_same("stage chunks 1, 3, 1", out, ref, nv, 1e-5);

    /* Two calls, the same video. */
    decode_one(w, z, T, h, wd, 2, NULL, out, nv);
    float *again = malloc(nv * 4);
    decode_one(w, z, T, h, wd, 2, NULL, again, nv);
    CHECK(memcmp(out, again, nv * 4) == 0, "two decodes of the same latents differ");
    free(again);

    /* Simulated ranks: rows split over threads (5 rows: uneven for 2, 3 and 4). */
    for (int world = 2; world <= 4; world++) {
        w22_comm *comms[4];
        CHECK_OK(w22_comm_local_group(world, comms));
        rank_job jobs[4];
        pthread_t th[4];
        float *videos[4];
        for (int r = 0; r < world; r++) {
            videos[r] = r == 0 ? out : NULL;
            jobs[r] = (rank_job){w, comms[r], z, T, h, wd, 2, videos[r], W22_OK, ""};
        }
        t_fill_nan(out, nv);
        for (int r = 0; r < world; r++) pthread_create(&th[r], NULL, rank_main, &jobs[r]);
        for (int r = 0; r < world; r++) pthread_join(th[r], NULL);
        for (int r = 0; r < world; r++) {
            CHECK(jobs[r].s == W22_OK, "world %d rank %d: %s", world, r, jobs[r].err);
            w22_comm_free(comms[r]);
        }
        char what[64];
        snprintf(what, sizeof what, "world %d", world);
        check_same(what, out, ref, nv, 1e-5);
    }

    /* A rank that fails makes the others fail, not hang: rank 1 gets NaN latents. */
    {
        w22_comm *comms[2];
        CHECK_OK(w22_comm_local_group(2, comms));
        float *bad = malloc(nz * 4);
        memcpy(bad, z, nz * 4);
        bad[3] = NAN;
        rank_job jobs[2] = {{w, comms[0], z, T, h, wd, 2, out, W22_OK, ""}, {w, comms[1], bad, T, h, wd, 2, NULL, W22_OK, ""}};
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
    return t_finish("test_plan");
}
