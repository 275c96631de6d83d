/* A directory of PNG frames, frame_00000.png, frame_00001.png, ... (0-based, as ffmpeg's image2 pattern
 * frame_%05d.png reads them). The frames go into a temporary directory that is renamed at the end. */
#define _GNU_SOURCE
#include <stdio.h>
#include "common.h"
#include "io/png_encode.h"
#include "io/video_impl.h"

static w22_status pngdir_open(w22_video_writer *vw) {
    if (vw->frames > 99999)
        return w22_fail(W22_ERR_INVALID_ARG, "%s: PNG frames are numbered with 5 digits: expected at most 99999 "
                        "frames, found %d", vw->out.path, vw->frames);
    return W22_OK;
}

static w22_status pngdir_write(w22_video_writer *vw, const float *chunk, int frame0, int n) {
    char path[sizeof vw->out.tmp + 32];
    for (int f = 0; f < n; f++) {
        w22_frame_rgb24(chunk, n, f, vw->height, vw->width, vw->rgb);
        snprintf(path, sizeof path, "%s/frame_%05d.png", vw->out.tmp, frame0 + f);
        W22_TRY(w22_png_write(path, vw->rgb, vw->width, vw->height));
    }
    return W22_OK;
}

static w22_status pngdir_finish(w22_video_writer *vw) { return W22_OK; }

const w22_video_ops w22_video_png_ops = {1, 0, pngdir_open, pngdir_write, pngdir_finish, NULL};
