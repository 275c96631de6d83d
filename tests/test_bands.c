/* A band decode on the CPU (issue 44: w22_decoder_params.bands, plan.h's band rows): stage 0 on the whole
 * frame, stages 1-3 on bands of latent rows widened by W22_BAND_HALO, the kept rows delivered. Against the whole-frame
 * decode of the same decoder's weights and latents: the kept rows' values are the same sums, whose zero padding at a
 * cut reaches no kept row (dev/band_probe.py), so they agree to the float32 rounding of another GEMM blocking (1e-5,
 * as test_plan's chunkings). Both VAEs' structures (TI2V-5B's DupUp reads the cut block input), odd heights, a band
 * count above what the height gives, the checking mode on (its border check at the cut), outputs poisoned with NaN
 * before each call; the workspace shrinks with the bands; a frames callback is refused, then the same decoder decodes.
 * The Wan2.1 VAE's later bands replay stage 0 from the first band's store (exec.c's band_replay): the same bits as
 * running it again. */
#include <stdlib.h>
#include <string.h>
#include "common.h"
#include "plan/plan.h"
#include "plan/plan_internal.h"
#include "testutil.h"
#include "wan22vae.h"

static w22_config narrow(int wan21) {
    w22_config c;
    if (wan21) w22_config_wan21(&c);
    else w22_config_default(&c);
    c.z_dim = wan21 ? 4 : 8;
    c.base_dim = 8;
    return c;
}

static int no_frames(void *user, const float *frames, int frame0, int nframes, int height, int width) {
    (void)user, (void)frames, (void)frame0, (void)nframes, (void)height, (void)width;
    return 0;
}

/* One decode of z into video (poisoned first) at `bands` (1: the whole frame); *ws: its workspace bytes. */
static w22_status decode_bands(w22_weights *w, const float *z, int T, int h, int wd, int bands, int check, int rerun,
                               unsigned host, float *video, size_t nv, size_t *ws, int *planned) {
    t_fill_nan(video, nv);
    w22_decoder_params prm;
    w22_decoder_params_init(&prm);
    prm.check = check;
    prm.bands = bands;
    w22_decoder *d = NULL;
    w22_status s = w22_decoder_open(w, &prm, &d);
    if (s != W22_OK) return s;
    w22_plan_test t;
    memset(&t, 0, sizeof t);
    t.band_rerun = rerun;
    t.host = host;
    d->test = &t;
    s = w22_decode(d, z, W22_DTYPE_F32, T, h, wd, video, W22_DTYPE_F32);
    *ws = d->workspace_bytes;
    *planned = d->bands;
    /* the store of stage 0's rows (exec.c's band_replay): where stage 0 ends at its upsampler (the Wan2.1 VAE) and
     * the bands are cut (a band of every row, at low heights, runs the whole decode each band) */
    const int replay = s == W22_OK && d->bands > 1 && d->band_rows < d->rows && d->model.cfg.patch_size == 1 && !rerun;
    CHECK(s != W22_OK || (d->band_store_bytes > 0) == replay, "bands %d (%d planned) rerun %d: a store of %zu bytes",
          bands, d->bands, rerun, d->band_store_bytes);
    if (s == W22_OK && bands > 1) {
        /* the geometry: every band of band_rows, kept rows tiling the frame (w22_band_set), halo inside the frame */
        int next = 0;
        for (int b = 0; b < d->bands; b++) {
            w22_band_set(d, b);
            CHECK(d->band_k0 == next && d->band_k1 > d->band_k0 && d->band_a0 <= d->band_k0 &&
                      d->band_a0 + d->band_rows >= d->band_k1 && d->band_a0 >= 0 && d->band_a0 + d->band_rows <= h,
                  "h %d bands %d: band %d keeps [%d, %d) of [%d, %d)", h, bands, b, d->band_k0, d->band_k1,
                  d->band_a0, d->band_a0 + d->band_rows);
            CHECK(d->band_rows == h || ((d->band_k0 == 0 || d->band_k0 - d->band_a0 >= W22_BAND_HALO) &&
                                        (d->band_k1 == h || d->band_a0 + d->band_rows - d->band_k1 >= W22_BAND_HALO)),
                  "h %d bands %d: band %d's halo under %d rows at a cut", h, bands, b, W22_BAND_HALO);
            next = d->band_k1;
        }
        CHECK(next == h, "h %d bands %d: the kept rows end at %d", h, bands, next);
        /* a frames callback: refused, the decoder still good for a decode after */
        w22_status r = w22_decode_frames(d, z, W22_DTYPE_F32, T, h, wd, no_frames, NULL);
        CHECK(r == W22_ERR_UNSUPPORTED && strstr(w22_last_error(), "band"), "bands %d to a frames callback: %s (%s)",
              bands, w22_status_string(r), w22_last_error());
        t_fill_nan(video, nv);
        s = w22_decode(d, z, W22_DTYPE_F32, T, h, wd, video, W22_DTYPE_F32);
    }
    w22_decoder_free(d);
    return s;
}

static void run_model(int wan21) {
    const w22_config cfg = narrow(wan21);
    w22_weights *w = NULL;
    CHECK_OK(w22_weights_synthetic(&cfg, 5, &w));
    if (!w) return;
    static const struct { int T, h, wd, bands; } cases[] = {
        {3, 40, 4, 2}, {2, 29, 3, 3}, {3, 17, 5, 2}, {2, 9, 3, 4}, {1, 30, 2, 5},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const int T = cases[i].T, h = cases[i].h, wd = cases[i].wd;
        int F, H, W;
        w22_video_shape(&cfg, T, h, wd, &F, &H, &W);
        const size_t nz = (size_t)cfg.z_dim * T * h * wd, nv = (size_t)3 * F * H * W;
        float *z = malloc(nz * 4), *ref = malloc(nv * 4), *out = malloc(nv * 4);
        t_fill_uniform(z, nz, 21 + (unsigned)i, -2.0f, 2.0f);
        size_t ws1 = 0, wsb = 0;
        int nb1 = 0, nbb = 0;
        CHECK_OK(decode_bands(w, z, T, h, wd, 1, 0, 0, 0, ref, nv, &ws1, &nb1));
        for (int check = 0; check < 2; check++) {
            const w22_status s = decode_bands(w, z, T, h, wd, cases[i].bands, check, 0, 0, out, nv, &wsb, &nbb);
            CHECK(s == W22_OK, "%s T %d %dx%d bands %d check %d: %s (%s)", wan21 ? "Wan2.1" : "TI2V-5B", T, h, wd,
                  cases[i].bands, check, w22_status_string(s), w22_last_error());
            t_diff df = t_compare(out, ref, nv);
            printf("%s T %d %dx%d, %d bands asked (%d planned)%s: max|d| %.3g rms %.3g (ref rms %.3g); workspace "
                   "%.2f -> %.2f MiB\n", wan21 ? "Wan2.1" : "TI2V-5B", T, h, wd, cases[i].bands, nbb,
                   check ? ", checked" : "", df.max_abs, df.rms, df.ref_rms, ws1 / 1048576.0, wsb / 1048576.0);
            CHECK(df.nonfinite == 0 && df.max_abs <= 1e-5, "%s T %d %dx%d bands %d: %zu not written, max|d| %.3g",
                  wan21 ? "Wan2.1" : "TI2V-5B", T, h, wd, cases[i].bands, df.nonfinite, df.max_abs);
        }
        /* the replay of stage 0 (Wan2.1) against every band running it: the same values, so the same bits */
        if (wan21) {
            float *rerun = malloc(nv * 4);
            CHECK_OK(decode_bands(w, z, T, h, wd, cases[i].bands, 0, 1, 0, rerun, nv, &wsb, &nbb));
            CHECK(memcmp(rerun, out, nv * 4) == 0, "Wan2.1 T %d %dx%d bands %d: the replayed stage 0 is not the "
                  "same bits as stage 0 run again (max|d| %.3g)", T, h, wd, cases[i].bands,
                  t_compare(out, rerun, nv).max_abs);
            free(rerun);
        }
        /* with every cache hosted (a work budget's plan, plan.h's host_spec 0xf), the same bits as in device memory:
         * the hosted windows follow a band's rows, and every band starts from zero history again */
        {
            float *hosted = malloc(nv * 4);
            size_t wsh;
            int nbh;
            CHECK_OK(decode_bands(w, z, T, h, wd, cases[i].bands, 1, 0, 0xf, hosted, nv, &wsh, &nbh));
            CHECK(memcmp(hosted, out, nv * 4) == 0, "%s T %d %dx%d bands %d, caches hosted: not the same bits (max|d| "
                  "%.3g)", wan21 ? "Wan2.1" : "TI2V-5B", T, h, wd, cases[i].bands, t_compare(hosted, out, nv).max_abs);
            free(hosted);
        }
        /* memory: the bands' caches and buffers of stages 1-3 are a band's (rows r + 2 halo, not h) */
        if (h >= 2 * (2 * W22_BAND_HALO + 1) && nbb > 1)
            CHECK(wsb < ws1, "%s %dx%d: the workspace at %d bands %zu, not under the whole frame's %zu",
                  wan21 ? "Wan2.1" : "TI2V-5B", h, wd, nbb, wsb, ws1);
        free(z), free(ref), free(out);
    }
    w22_weights_free(w);
}

int main(void) {
    run_model(1);
    run_model(0);
    return t_finish("test_bands");
}
