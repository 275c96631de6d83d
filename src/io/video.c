/* The video writer front: picks the format from the path, owns the temporary output and the frame bookkeeping
 * (range, order, every frame written exactly once), and calls the format's operations (video_impl.h). */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include "common.h"
#include "io/png_encode.h"
#include "io/video_impl.h"

w22_status w22_video_format_from_path(const char *path, w22_video_format *fmt) {
    if (!path || !*path) return w22_fail(W22_ERR_INVALID_ARG, "output: expected a path, found an empty one");
    if (!strcmp(path, "-")) return *fmt = W22_VIDEO_Y4M, W22_OK; /* standard output: the format made for pipes */
    size_t n = strlen(path);
    if (path[n - 1] == '/') return *fmt = W22_VIDEO_PNG_DIR, W22_OK;
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    const char *dot = strrchr(base, '.');
    if (!dot || dot == base) /* a stream cannot hold a folder: /dev/stdout or a FIFO without extension gets y4m */
        return *fmt = w22_output_is_stream(path) ? W22_VIDEO_Y4M : W22_VIDEO_PNG_DIR, W22_OK;
    static const struct { const char *ext; w22_video_format f; } table[] = {
        {".y4m", W22_VIDEO_Y4M}, {".npy", W22_VIDEO_NPY}, {".safetensors", W22_VIDEO_SAFETENSORS},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (!strcasecmp(dot, table[i].ext)) return *fmt = table[i].f, W22_OK;
    static const char *const images[] = {".png", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff", ".exr", ".ppm"};
    for (size_t i = 0; i < sizeof images / sizeof images[0]; i++)
        if (!strcasecmp(dot, images[i]))
            return w22_fail(W22_ERR_INVALID_ARG, "%s: expected a video (.y4m, .mp4, .mkv, .webm, .mov, .gif, any "
                            "extension ffmpeg writes, .npy, .safetensors) or a directory for PNG frames (ending in "
                            "'/' or without an extension), found the still-image extension '%s'", path, dot);
    return *fmt = W22_VIDEO_FFMPEG, W22_OK;
}

const char *w22_video_format_name(w22_video_format fmt) {
    switch (fmt) {
    case W22_VIDEO_Y4M: return "y4m";
    case W22_VIDEO_FFMPEG: return "ffmpeg";
    case W22_VIDEO_PNG_DIR: return "png frames";
    case W22_VIDEO_NPY: return "npy";
    case W22_VIDEO_SAFETENSORS: return "safetensors";
    }
    return "?";
}

w22_status w22_fps_rational(double fps, int *num, int *den) {
    if (!(fps >= W22_FPS_MIN && fps <= W22_FPS_MAX))
        return w22_fail(W22_ERR_INVALID_ARG, "fps: expected a number in [%g, %g], found %g", W22_FPS_MIN,
                        W22_FPS_MAX, fps);
    if (fabs(fps - rint(fps)) < 1e-9) *num = (int)rint(fps), *den = 1;
    else *num = (int)rint(fps * 1000), *den = 1000;
    if (*num < 1) /* unreachable within the range; the headers must never say 0 frames a second */
        return w22_fail(W22_ERR_INVALID_ARG, "fps %g: expected a nonzero rate, found %d/%d", fps, *num, *den);
    return W22_OK;
}

static const w22_video_ops *ops_of(w22_video_format fmt) {
    switch (fmt) {
    case W22_VIDEO_Y4M: return &w22_video_y4m_ops;
    case W22_VIDEO_FFMPEG: return &w22_video_ffmpeg_ops;
    case W22_VIDEO_PNG_DIR: return &w22_video_png_ops;
    case W22_VIDEO_NPY: return &w22_video_npy_ops;
    case W22_VIDEO_SAFETENSORS: return &w22_video_safetensors_ops;
    }
    return NULL;
}

static void release(w22_video_writer *vw) {
    if (vw->ops && vw->ops->close) vw->ops->close(vw);
    free(vw->opts_text);
    free(vw->written);
    free(vw->rgb);
    free(vw);
}

/* ".mkv" for an ffmpeg output (its temporary keeps the extension), else "". */
static void temp_suffix(const char *path, w22_video_format fmt, char *buf, size_t cap) {
    buf[0] = 0;
    if (fmt != W22_VIDEO_FFMPEG) return;
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    const char *dot = strrchr(base, '.');
    if (dot && dot != base) snprintf(buf, cap, "%.40s", dot);
}

/* .npy, .safetensors and PNG frames are written at offsets: a stream cannot take them. */
static w22_status check_stream_format(const char *path, w22_video_format fmt) {
    if ((fmt == W22_VIDEO_NPY || fmt == W22_VIDEO_SAFETENSORS || fmt == W22_VIDEO_PNG_DIR) &&
        w22_output_is_stream(path))
        return w22_fail(W22_ERR_INVALID_ARG, "%s: %s output is written at offsets (channel by channel, or one file "
                        "a frame); expected a regular file, found a stream (standard output, a FIFO or a device); "
                        "write .y4m to a stream", w22_output_name(path), fmt == W22_VIDEO_PNG_DIR ? "a PNG frames" :
                        fmt == W22_VIDEO_NPY ? "an .npy" : "a .safetensors");
    return W22_OK;
}

w22_status w22_video_check(const char *path, w22_video_format fmt, int overwrite) {
    if (!ops_of(fmt)) return w22_fail(W22_ERR_INVALID_ARG, "video output: unknown format %d", (int)fmt);
    char suffix[48];
    temp_suffix(path, fmt, suffix, sizeof suffix);
    W22_TRY(check_stream_format(path, fmt));
    W22_TRY(w22_output_check_suffix(path, fmt == W22_VIDEO_PNG_DIR, overwrite, suffix));
    if (fmt == W22_VIDEO_FFMPEG) W22_TRY(w22_ffmpeg_present(path));
    return W22_OK;
}

w22_status w22_video_open(const char *path, w22_video_format fmt, int frames, int height, int width, double fps,
                          int overwrite, w22_video_writer **out) {
    return w22_video_open_opts(path, fmt, frames, height, width, fps, overwrite, NULL, out);
}

/* A copy of the options, their strings in one buffer. */
static w22_status copy_options(w22_video_writer *vw, const w22_video_options *o) {
    vw->opts.crf = -1;
    if (!o) return W22_OK;
    const char *src[3] = {o->codec, o->pix_fmt, o->ffmpeg_args};
    size_t total = 0;
    for (int i = 0; i < 3; i++) total += src[i] ? strlen(src[i]) + 1 : 0;
    char *p = vw->opts_text = w22_malloc(total + 1, "the ffmpeg options");
    if (!p) return W22_ERR_OUT_OF_MEMORY;
    const char **dst[3] = {&vw->opts.codec, &vw->opts.pix_fmt, &vw->opts.ffmpeg_args};
    for (int i = 0; i < 3; i++) {
        if (!src[i]) continue;
        size_t n = strlen(src[i]) + 1;
        memcpy(p, src[i], n);
        *dst[i] = p;
        p += n;
    }
    vw->opts.crf = o->crf;
    return W22_OK;
}

w22_status w22_video_open_opts(const char *path, w22_video_format fmt, int frames, int height, int width,
                               double fps, int overwrite, const w22_video_options *opts, w22_video_writer **out) {
    *out = NULL;
    const w22_video_ops *ops = ops_of(fmt);
    if (!ops) return w22_fail(W22_ERR_INVALID_ARG, "video output: unknown format %d", (int)fmt);
    if (frames < 1 || height < 1 || width < 1 || (size_t)height * width > ((size_t)1 << 31))
        return w22_fail(W22_ERR_INVALID_ARG, "%s: expected a video of at least 1 frame of 1x1 (and under 2^31 "
                        "pixels a frame), found %d frames of %dx%d", path, frames, width, height);
    /* the largest file (a float32 tensor, 12 bytes a pixel) must have a size that off_t holds */
    if ((uint64_t)height * (uint64_t)width * 12 > (UINT64_C(1) << 62) / (uint64_t)frames)
        return w22_fail(W22_ERR_INVALID_ARG, "%s: expected a video of at most 2^62 bytes as float32, found %d frames "
                        "of %dx%d", path, frames, width, height);
    W22_TRY(check_stream_format(path, fmt));
    int num, den;
    if (w22_fps_rational(fps, &num, &den) != W22_OK) return w22_fail_context(W22_ERR_INVALID_ARG, "%s: ", path);
    w22_video_writer *vw = w22_calloc(1, sizeof *vw, "video writer");
    if (!vw) return W22_ERR_OUT_OF_MEMORY;
    vw->fmt = fmt;
    vw->frames = frames;
    vw->height = height;
    vw->width = width;
    vw->fps = fps;
    vw->fps_num = num;
    vw->fps_den = den;
    vw->out.fd = -1;
    vw->png_level = -1;
    vw->written = w22_calloc((size_t)frames, 1, "frame bookkeeping");
    vw->rgb = w22_malloc((size_t)height * width * 3, "one RGB frame");
    if (!vw->written || !vw->rgb || copy_options(vw, opts) != W22_OK) {
        release(vw);
        return W22_ERR_OUT_OF_MEMORY;
    }
    char suffix[48];
    temp_suffix(path, fmt, suffix, sizeof suffix);
    w22_status s = w22_outfile_create_suffix(&vw->out, path, ops->is_dir, overwrite, suffix);
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

w22_status w22_video_set_png(w22_video_writer *vw, int level, int threads) {
    if (!vw) return w22_fail(W22_ERR_INVALID_ARG, "video: expected a writer, found NULL");
    if (level < -1 || level > W22_PNG_LEVEL_MAX || threads < 0)
        return w22_fail(W22_ERR_INVALID_ARG, "%s: expected a PNG compression level 0..%d (-1: the default) and "
                        "threads >= 0 (0: every core), found level %d, %d threads", vw->out.path, W22_PNG_LEVEL_MAX,
                        level, threads);
    if (vw->nwritten > 0) /* the PNG encoders start at the first write */
        return w22_fail(W22_ERR_INVALID_ARG, "%s: PNG settings: expected before the first frame, found %d written",
                        vw->out.path, vw->nwritten);
    vw->png_level = level;
    vw->threads = threads;
    return W22_OK;
}

w22_status w22_video_write(w22_video_writer *vw, const float *chunk, int frame0, int n) {
    if (!vw || !chunk) return w22_fail(W22_ERR_INVALID_ARG, "video write: expected a writer and frames, found NULL");
    if (n < 1 || frame0 < 0 || frame0 > vw->frames - n)
        return w22_fail(W22_ERR_INVALID_ARG, "%s: expected frames within [0, %d), found [%d, %d)", vw->out.path,
                        vw->frames, frame0, frame0 + n);
    if ((vw->ops->streamed || vw->out.stream) && frame0 != vw->next)
        return w22_fail(W22_ERR_INVALID_ARG, "%s: %s is written in order: expected frame %d next, found %d",
                        w22_output_name(vw->out.path), vw->out.stream ? "a stream" : "an ffmpeg video", vw->next,
                        frame0);
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

const char *w22_video_temporary(const w22_video_writer *vw, int *is_dir) {
    if (is_dir) *is_dir = 0;
    if (!vw || vw->out.stream || !vw->out.live) return NULL;
    if (is_dir) *is_dir = vw->out.is_dir;
    return vw->out.tmp;
}

void w22_video_abort(w22_video_writer *vw) {
    if (!vw) return;
    if (vw->ops && vw->ops->close) vw->ops->close(vw);
    vw->ops = NULL;
    w22_outfile_discard(&vw->out);
    release(vw);
}
