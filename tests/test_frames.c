/* Frames handed over as they finish (issue 30, point 3), on a CPU decoder of the narrow config:
 * - w22_decode_frames: the batches, in order and put together, are w22_decode's video bit for bit; a nonzero return
 *   stops the decode ("stopped by the caller") and the decoder decodes whole afterwards;
 * - w22_decode_device_frames: W22_ERR_UNSUPPORTED on a CPU decoder (as w22_decode_device), INVALID_ARG for a NULL
 *   decoder, each message naming the call. Its CUDA path is tested from Python (python/tests/test_gpu.py). */
#include <stdlib.h>
#include <string.h>
#include "wan22vae.h"
#include "testutil.h"

typedef struct {
    float *video; /* [3][F][H][W] */
    int F, next, calls, stop_after;
} collect;

static int on_frames(void *user, const float *frames, int frame0, int n, int H, int W) {
    collect *c = user;
    CHECK(frame0 == c->next, "batch at frame %d, expected %d", frame0, c->next);
    CHECK(n >= 1 && frame0 + n <= c->F, "batch of %d frames at %d of %d", n, frame0, c->F);
    if (frame0 != c->next || n < 1 || frame0 + n > c->F) return 1;
    for (int ch = 0; ch < 3; ch++)
        memcpy(c->video + ((size_t)ch * c->F + frame0) * H * W, frames + (size_t)ch * n * H * W,
               (size_t)n * H * W * sizeof(float));
    c->next += n;
    c->calls++;
    return c->stop_after && c->calls >= c->stop_after;
}

static int never_called(void *user, const void *frames_dev, int frame0, int n, int H, int W) {
    (void)frames_dev; (void)frame0; (void)n; (void)H; (void)W;
    ++*(int *)user;
    return 0;
}

int main(void) {
    w22_config cfg;
    w22_config_default(&cfg);
    cfg.z_dim = 4;
    cfg.base_dim = 8;
    w22_weights *wt = NULL;
    CHECK_OK(w22_weights_synthetic(&cfg, 7, &wt));
    w22_decoder_params p;
    w22_decoder_params_init(&p);
    p.threads = 2;
    p.frames_per_pass = 1; /* several batches from a short clip */
    w22_decoder *d = NULL;
    CHECK_OK(w22_decoder_open(wt, &p, &d));
    if (!d) return t_finish("test_frames");

    const int T = 4, h = 3, w = 4;
    int F, H, W;
    w22_video_shape(&cfg, T, h, w, &F, &H, &W);
    const size_t nz = (size_t)cfg.z_dim * T * h * w, nv = (size_t)3 * F * H * W;
    float *z = malloc(nz * sizeof *z), *ref = malloc(nv * sizeof *ref), *got = malloc(nv * sizeof *got);
    CHECK_OK(w22_latents_synthetic(&cfg, 3, T, h, w, z));
    CHECK_OK(w22_decode(d, z, W22_DTYPE_F32, T, h, w, ref, W22_DTYPE_F32));

    /* the batches put together are the video */
    t_fill_nan(got, nv);
    collect c = {got, F, 0, 0, 0};
    CHECK_OK(w22_decode_frames(d, z, W22_DTYPE_F32, T, h, w, on_frames, &c));
    CHECK(c.next == F && c.calls > 1, "%d frames in %d batches, expected %d in more than one", c.next, c.calls, F);
    CHECK(memcmp(got, ref, nv * sizeof *got) == 0, "the frames differ from w22_decode's video");

    /* stopped by the callback after its first batch; the next decode is whole */
    collect s = {got, F, 0, 0, 1};
    w22_status st = w22_decode_frames(d, z, W22_DTYPE_F32, T, h, w, on_frames, &s);
    CHECK(st == W22_ERR_INVALID_ARG && strstr(w22_last_error(), "stopped by the caller"), "%s: %s",
          w22_status_string(st), w22_last_error());
    CHECK(s.calls == 1, "the callback ran %d times after asking to stop", s.calls);
    t_fill_nan(got, nv);
    c = (collect){got, F, 0, 0, 0};
    CHECK_OK(w22_decode_frames(d, z, W22_DTYPE_F32, T, h, w, on_frames, &c));
    CHECK(memcmp(got, ref, nv * sizeof *got) == 0, "the decode after a stopped one differs");

    /* w22_decode_device_frames needs a CUDA decoder */
    int calls = 0;
    st = w22_decode_device_frames(d, z, T, h, w, never_called, &calls, NULL);
    CHECK(st == W22_ERR_UNSUPPORTED, "%s: %s", w22_status_string(st), w22_last_error());
    CHECK(strstr(w22_last_error(), "w22_decode_device_frames") && strstr(w22_last_error(), "CUDA decoder"), "%s",
          w22_last_error());
    CHECK(calls == 0, "the callback ran %d times", calls);
    st = w22_decode_device_frames(NULL, z, T, h, w, never_called, &calls, NULL);
    CHECK(st == W22_ERR_INVALID_ARG && strstr(w22_last_error(), "w22_decode_device_frames"), "%s: %s",
          w22_status_string(st), w22_last_error());
    /* the decoder is as before */
    CHECK_OK(w22_decode(d, z, W22_DTYPE_F32, T, h, w, got, W22_DTYPE_F32));
    CHECK(memcmp(got, ref, nv * sizeof *got) == 0, "the decode after the refused calls differs");

    free(z);
    free(ref);
    free(got);
    w22_decoder_free(d);
    w22_weights_free(wt);
    return t_finish("test_frames");
}
