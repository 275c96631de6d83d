/* The video writer front: picks the format from the path, owns the temporary output and the frame bookkeeping
 * (range, order, every frame written exactly once), and calls the format's operations (video_impl.h). */
#define _GNU_SOURCE
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include "common.h"
#include "io/video_impl.h"

w22_status w22_video_format_from_path(const char *path, w22_video_format *fmt) {
    if (!path || !*path) return w22_fail(W22_ERR_INVALID_ARG, "output: expected a path, found an empty one");
    size_t n = strlen(path);
    if (path[n - 1] == '/') return *fmt = W22_VIDEO_PNG_DIR, W22_OK;
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    const char *dot = strrchr(base, '.');
    if (!dot || dot == base) return *fmt = W22_VIDEO_PNG_DIR, W22_OK;
    static const struct { const char *ext; w22_video_format f; } table[] = {
        {".y4m", W22_VIDEO_Y4M}, {".mp4", W22_VIDEO_MP4}, {".npy", W22_VIDEO_NPY},
        {".safetensors", W22_VIDEO_SAFETENSORS},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (!strcasecmp(dot, table[i].ext)) return *fmt = table[i].f, W22_OK;
    return w22_fail(W22_ERR_INVALID_ARG, "%s: expected an output ending in .y4m, .mp4, .npy, .safetensors, or a "
                    "directory for PNG frames (ending in '/' or without an extension), found '%s'", path, dot);
}

const char *w22_video_format_name(w22_video_format fmt) {
    switch (fmt) {
    case W22_VIDEO_Y4M: return "y4m";
    case W22_VIDEO_MP4: return "mp4";
    case W22_VIDEO_PNG_DIR: return "png frames";
    case W22_VIDEO_NPY: return "npy";
    case W22_VIDEO_SAFETENSORS: return "safetensors";
    }
    return "?";
}

static const w22_video_ops *ops_of(w22_video_format fmt) {
    switch (fmt) {
    case W22_VIDEO_Y4M: return &w22_video_y4m_ops;
    case W22_VIDEO_MP4: return &w22_video_mp4_ops;
    case W22_VIDEO_PNG_DIR: return &w22_video_png_ops;
    case W22_VIDEO_NPY: return &w22_video_npy_ops;
    case W22_VIDEO_SAFETENSORS: return &w22_video_safetensors_ops;
    }
    return NULL;
}

static void release(w22_video_writer *vw) {
    if (vw->ops && vw->ops->close) vw->ops->close(vw);
    free(vw->written);
    free(vw->rgb);
    free(vw);
}

w22_status w22_video_open(const char *path, w22_video_format fmt, int frames, int height, int width, double fps,
                          int overwrite, w22_video_writer **out) {
    *out = NULL;
    const w22_video_ops *ops = ops_of(fmt);
    if (!ops) return w22_fail(W22_ERR_INVALID_ARG, "video output: unknown format %d", (int)fmt);
    if (frames < 1 || height < 1 || width < 1 || (size_t)height * width > ((size_t)1 << 31))
        return w22_fail(W22_ERR_INVALID_ARG, "%s: expected a video of at least 1 frame of 1x1 (and under 2^31 "
                        "pixels a frame), found %d frames of %dx%d", path, frames, width, height);
    if (!(fps > 0 && fps <= 1000))
        return w22_fail(W22_ERR_INVALID_ARG, "%s: expected fps in (0, 1000], found %g", path, fps);
    w22_video_writer *vw = w22_calloc(1, sizeof *vw, "video writer");
    if (!vw) return W22_ERR_OUT_OF_MEMORY;
    vw->fmt = fmt;
    vw->frames = frames;
    vw->height = height;
    vw->width = width;
    vw->fps = fps;
    if (fabs(fps - rint(fps)) < 1e-9) vw->fps_num = (int)rint(fps), vw->fps_den = 1;
    else vw->fps_num = (int)rint(fps * 1000), vw->fps_den = 1000;
    vw->out.fd = -1;
    vw->written = w22_calloc((size_t)frames, 1, "frame bookkeeping");
    vw->rgb = w22_malloc((size_t)height * width * 3, "one RGB frame");
    if (!vw->written || !vw->rgb) {
        release(vw);
        return W22_ERR_OUT_OF_MEMORY;
    }
    w22_status s = w22_outfile_create(&vw->out, path, ops->is_dir, overwrite);
    if (s == W22_OK) {
        vw->ops = ops;
        s = ops->open(vw);
    }
    if (s != W22_OK) {
        w22_outfile_discard(&vw->out);
        release(vw);
        return s;
    }
    *out = vw;
    return W22_OK;
}

w22_status w22_video_write(w22_video_writer *vw, const float *chunk, int frame0, int n) {
    if (!vw || !chunk) return w22_fail(W22_ERR_INVALID_ARG, "video write: expected a writer and frames, found NULL");
    if (n < 1 || frame0 < 0 || frame0 > vw->frames - n)
        return w22_fail(W22_ERR_INVALID_ARG, "%s: expected frames within [0, %d), found [%d, %d)", vw->out.path,
                        vw->frames, frame0, frame0 + n);
    if (vw->ops->streamed && frame0 != vw->next)
        return w22_fail(W22_ERR_INVALID_ARG, "%s: a %s is written in order: expected frame %d next, found %d",
                        vw->out.path, w22_video_format_name(vw->fmt), vw->next, frame0);
    for (int f = frame0; f < frame0 + n; f++)
        if (vw->written[f])
            return w22_fail(W22_ERR_INVALID_ARG, "%s: frame %d was written already", vw->out.path, f);
    W22_TRY(vw->ops->write(vw, chunk, frame0, n));
    memset(vw->written + frame0, 1, (size_t)n);
    vw->nwritten += n;
    vw->next = frame0 + n;
    return W22_OK;
}

w22_status w22_video_finish(w22_video_writer *vw) {
    if (!vw) return w22_fail(W22_ERR_INVALID_ARG, "video finish: expected a writer, found NULL");
    w22_status s = W22_OK;
    if (vw->nwritten != vw->frames) {
        int missing = 0;
        while (vw->written[missing]) missing++;
        s = w22_fail(W22_ERR_INVALID_ARG, "%s: expected %d frames, %d were written (frame %d is missing)",
                     vw->out.path, vw->frames, vw->nwritten, missing);
    }
    if (s == W22_OK) s = vw->ops->finish(vw);
    if (vw->ops->close) vw->ops->close(vw);
    vw->ops = NULL;
    if (s == W22_OK) s = w22_outfile_commit(&vw->out); /* removes the temporary itself when it fails */
    else w22_outfile_discard(&vw->out);
    release(vw);
    return s;
}

void w22_video_abort(w22_video_writer *vw) {
    if (!vw) return;
    if (vw->ops && vw->ops->close) vw->ops->close(vw);
    vw->ops = NULL;
    w22_outfile_discard(&vw->out);
    release(vw);
}
