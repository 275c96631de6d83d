/* YUV4MPEG2 (.y4m) video: 8-bit 4:4:4 (C444, no chroma subsampling, so no chroma filter to choose) in BT.601
 * limited range ("studio swing", Y 16..235, Cb/Cr 16..240; tagged XCOLORRANGE=LIMITED, which ffmpeg reads), from
 * the 8-bit RGB that diffusers makes (w22_pixel_u8). Every frame has a fixed size, so frames are written with
 * pwrite at their offsets and may come in any order. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common.h"
#include "io/video_impl.h"

typedef struct {
    size_t header_len;
    uint8_t *frame; /* "FRAME\n" + Y plane + Cb plane + Cr plane */
} y4m_state;

static size_t frame_bytes(const w22_video_writer *vw) { return 6 + (size_t)3 * vw->height * vw->width; }

/* BT.601 limited range in 8-bit fixed point (the integer form of Y = 16 + 219 * (0.299 R + 0.587 G + 0.114 B) /
 * 255 and the like, as in ITU-R BT.601 and libyuv); the 32768 offset keeps the shifted values non-negative. */
static void rgb_to_ycbcr(int r, int g, int b, uint8_t *y, uint8_t *cb, uint8_t *cr) {
    *y = (uint8_t)(((66 * r + 129 * g + 25 * b + 128) >> 8) + 16);
    *cb = (uint8_t)((-38 * r - 74 * g + 112 * b + 128 + 32768) >> 8);
    *cr = (uint8_t)((112 * r - 94 * g - 18 * b + 128 + 32768) >> 8);
}

static w22_status y4m_open(w22_video_writer *vw) {
    y4m_state *st = w22_calloc(1, sizeof *st, "y4m writer");
    if (!st) return W22_ERR_OUT_OF_MEMORY;
    vw->impl = st;
    if (!(st->frame = w22_malloc(frame_bytes(vw), "a y4m frame"))) return W22_ERR_OUT_OF_MEMORY;
    memcpy(st->frame, "FRAME\n", 6);
    char header[256];
    int n = snprintf(header, sizeof header, "YUV4MPEG2 W%d H%d F%d:%d Ip A1:1 C444 XCOLORRANGE=LIMITED\n",
                     vw->width, vw->height, vw->fps_num, vw->fps_den);
    st->header_len = (size_t)n;
    return w22_outfile_pwrite(&vw->out, header, (size_t)n, 0);
}

static w22_status y4m_write(w22_video_writer *vw, const float *chunk, int frame0, int n) {
    y4m_state *st = vw->impl;
    size_t plane = (size_t)vw->height * vw->width;
    uint8_t *Y = st->frame + 6, *Cb = Y + plane, *Cr = Cb + plane;
    for (int f = 0; f < n; f++) {
        w22_frame_rgb24(chunk, n, f, vw->height, vw->width, vw->rgb);
        for (size_t i = 0; i < plane; i++)
            rgb_to_ycbcr(vw->rgb[3 * i], vw->rgb[3 * i + 1], vw->rgb[3 * i + 2], Y + i, Cb + i, Cr + i);
        uint64_t off = st->header_len + (uint64_t)(frame0 + f) * frame_bytes(vw);
        W22_TRY(w22_outfile_pwrite(&vw->out, st->frame, frame_bytes(vw), off));
    }
    return W22_OK;
}

static w22_status y4m_finish(w22_video_writer *vw) { return W22_OK; }

static void y4m_close(w22_video_writer *vw) {
    y4m_state *st = vw->impl;
    if (st) free(st->frame);
    free(st);
    vw->impl = NULL;
}

const w22_video_ops w22_video_y4m_ops = {0, 0, y4m_open, y4m_write, y4m_finish, y4m_close};
