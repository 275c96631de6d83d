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
 * 255 and the like, as in ITU-R BT.601 and libyuv); the 32768 offset keeps the shifted values non-negative. Planes
 * in, planes out, none overlapping (restrict: the loop vectorizes). */
static void rgb_to_ycbcr(const uint8_t *restrict r, const uint8_t *restrict g, const uint8_t *restrict b, size_t n,
                         uint8_t *restrict y, uint8_t *restrict cb, uint8_t *restrict cr) {
    for (size_t i = 0; i < n; i++) {
        const int R = r[i], G = g[i], B = b[i];
        y[i] = (uint8_t)(((66 * R + 129 * G + 25 * B + 128) >> 8) + 16);
        cb[i] = (uint8_t)((-38 * R - 74 * G + 112 * B + 128 + 32768) >> 8);
        cr[i] = (uint8_t)((112 * R - 94 * G - 18 * B + 128 + 32768) >> 8);
    }
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
    uint8_t *R = vw->rgb, *G = R + plane, *B = G + plane; /* the writer's RGB frame, as three planes here */
    for (int f = 0; f < n; f++) {
        w22_plane_u8(chunk + (size_t)f * plane, plane, R); /* chunk [3][n][H][W] */
        w22_plane_u8(chunk + ((size_t)n + f) * plane, plane, G);
        w22_plane_u8(chunk + ((size_t)2 * n + f) * plane, plane, B);
        rgb_to_ycbcr(R, G, B, plane, Y, Cb, Cr);
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
