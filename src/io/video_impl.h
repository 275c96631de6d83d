/* The inside of a video writer: the state every format shares (video.c keeps the frame bookkeeping and the
 * temporary output) and the table of operations each format (video_*.c) implements. */
#ifndef W22_IO_VIDEO_IMPL_H
#define W22_IO_VIDEO_IMPL_H

#include "io/io.h"
#include "io/outfile.h"

typedef struct {
    int is_dir;     /* the output is a directory (PNG frames) */
    int streamed;   /* frames must come in order (ffmpeg's formats; any format written to a stream) */
    /* Called once the temporary output exists. */
    w22_status (*open)(w22_video_writer *vw);
    /* Frames [frame0, frame0 + n) of a chunk [3][n][H][W]; video.c has checked the range and the order. */
    w22_status (*write)(w22_video_writer *vw, const float *chunk, int frame0, int n);
    /* All frames are in: complete the temporary output (before the rename). */
    w22_status (*finish)(w22_video_writer *vw);
    /* Release what open made (a child process, buffers); called after finish or on abort. */
    void (*close)(w22_video_writer *vw);
} w22_video_ops;

struct w22_video_writer {
    const w22_video_ops *ops;
    w22_video_format fmt;
    int frames, height, width;
    double fps;
    int fps_num, fps_den;   /* fps as a fraction (24 -> 24/1, 23.976 -> 23976/1000) */
    w22_outfile out;
    unsigned char *written; /* per frame: written already */
    int nwritten;
    int next;               /* the next frame a streamed format expects */
    uint8_t *rgb;           /* one frame of packed RGB, for the formats that need it */
    w22_video_options opts; /* ffmpeg's settings (the strings copied into opts_text) */
    char *opts_text;
    int png_level, threads; /* PNG frames (w22_video_set_png): -1 and 0 until set */
    void *impl;             /* the format's own state */
};

extern const w22_video_ops w22_video_y4m_ops, w22_video_ffmpeg_ops, w22_video_png_ops, w22_video_npy_ops,
    w22_video_safetensors_ops;

/* W22_ERR_UNSUPPORTED, naming ffmpeg, when no ffmpeg can be run for an ffmpeg output (video_ffmpeg.c). */
w22_status w22_ffmpeg_present(const char *path);

#endif
