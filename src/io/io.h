/* Files in and out of the decoder: latents in (.safetensors, .npy), video out (.y4m, .mp4, PNG frames, raw
 * .npy / .safetensors tensors), and the NaN/Inf check the decoder shares. Library-internal (the CLI and the tests
 * use it); every output goes through a temporary file in the destination's directory and a rename, so a failed
 * or stopped write never leaves a half-written output, and an existing output is refused unless overwrite. */
#ifndef W22_IO_H
#define W22_IO_H

#include <stddef.h>
#include <stdint.h>
#include "wan22vae.h"

#define W22_NPY_MAX_DIMS 8

/* ---- inputs ---- */

/* Whether path can be read as an input (what: "weights", "latents" in messages): it opens, and it is a regular
 * file. A FIFO, a device or a directory is W22_ERR_IO, found without blocking (a FIFO with no writer would hang
 * a plain open()). For checking inputs before the expensive work. */
w22_status w22_input_check(const char *path, const char *what);
/* Reads a whole regular file (checked as w22_input_check does) into a malloc'd buffer. */
w22_status w22_read_input(const char *path, const char *what, unsigned char **buf, size_t *size);

/* ---- npy ---- */

typedef enum {
    W22_NPY_F32,  /* '<f4' */
    W22_NPY_F16,  /* '<f2' */
    W22_NPY_U2,   /* '<u2': numpy has no bf16, so raw bf16 bits are stored as uint16 (read only on request) */
} w22_npy_type;

typedef struct {
    int major;                       /* format version 1, 2 or 3 (minor is always 0) */
    w22_npy_type type;
    int ndim;
    int64_t shape[W22_NPY_MAX_DIMS];
    int64_t numel;
    size_t data_offset;              /* bytes before the data: magic, version, length, header dict */
    size_t data_bytes;
} w22_npy_info;

/* Parses the header of an .npy file held in buf[0, size) (size: the whole file's size, which the data must fill
 * exactly). Strict: the magic, a version 1.0/2.0/3.0, a dict with exactly 'descr', 'fortran_order' and 'shape';
 * fortran_order True, other dtypes and byte orders, and sizes that disagree with the file are errors. 'what' names
 * the file in messages. */
w22_status w22_npy_parse(const void *buf, size_t size, const char *what, w22_npy_info *info);
/* Reads a whole .npy file as float32 (malloc'd into *data). '<u2' is taken as raw bf16 when u2_is_bf16, else
 * refused. */
w22_status w22_npy_read(const char *path, int u2_is_bf16, float **data, int *ndim, int64_t shape[W22_NPY_MAX_DIMS]);
/* The header (version 1.0, '<f4', C order) for a float32 array of this shape, padded so that the data starts at a
 * multiple of 64 bytes. Returns its length, or 0 when cap is too small. */
size_t w22_npy_header_f32(int ndim, const int64_t *shape, char *buf, size_t cap);
/* Writes a float32 .npy file through a temporary file and a rename. */
w22_status w22_npy_write(const char *path, const float *data, int ndim, const int64_t *shape, int overwrite);

/* The header of a safetensors file holding one float32 tensor `name` of this shape (8-byte length + JSON padded
 * with spaces so that the data starts at a multiple of 8). Returns its length, or 0 when cap is too small. */
size_t w22_st_header_f32(const char *name, int ndim, const int64_t *shape, char *buf, size_t cap);

/* ---- latents ---- */

/* Loads latents [1, C, T, h, w] or [C, T, h, w] from .safetensors (the tensor "latents", or the file's only
 * tensor; F32, BF16 or F16) or .npy ('<f4', '<f2'), as malloc'd float32. Non-finite values are
 * W22_ERR_NONFINITE. The caller compares zdim with its config. */
w22_status w22_io_load_latents(const char *path, float **z, int *T, int *h, int *w, int *zdim);
/* The same from a file's bytes in memory (buf[0, size), not kept); name's extension picks the format and names
 * the file in messages. The whole path from bytes to checked latents, which w22_io_load_latents takes too. */
w22_status w22_io_parse_latents(const void *buf, size_t size, const char *name, float **z, int *T, int *h, int *w,
                                int *zdim);
/* Writes latents [1, zdim, T, h, w] float32 as .safetensors (tensor "latents") or .npy, by path's extension. */
w22_status w22_io_save_latents(const char *path, const float *z, int zdim, int T, int h, int w, int overwrite);

/* W22_ERR_NONFINITE when x (n = product of shape, dtype t) holds NaN or Inf; the message gives the count, the
 * first one's value kind and its index in shape's coordinates. 'what' names the tensor ("latents"). */
w22_status w22_check_finite(const void *x, w22_dtype t, int ndim, const int64_t *shape, const char *what);

/* ---- pixels ---- */

/* One value of the decoder's video ([-1, 1]) as 8 bits, as diffusers' VideoProcessor.postprocess_video does. */
uint8_t w22_pixel_u8(float x);
/* Frame f of a chunk [3][n][H][W] (float32, NCDHW) as packed RGB rows, rgb[(y * W + x) * 3 + c]. */
void w22_frame_rgb24(const float *chunk, int n, int f, int height, int width, uint8_t *rgb);

/* ---- output files ---- */

/* Whether path may be written: its directory exists and is writable, and path is absent (or overwrite and path
 * is a file, not a directory; or, for a PNG directory, overwrite and it holds only frame PNGs). Checked before
 * the expensive work so that a bad --out fails at once; the writers check again when they commit. */
w22_status w22_output_check(const char *path, int is_dir, int overwrite);

/* ---- video writers ---- */

/* Frames per second of .y4m / .mp4: within [W22_FPS_MIN, W22_FPS_MAX], so that the header's rational is nonzero. */
#define W22_FPS_MIN 0.01
#define W22_FPS_MAX 1000.0
/* fps as the rational the headers carry: an integer as N/1, else to 1/1000 (23.976 -> 23976/1000).
 * W22_ERR_INVALID_ARG outside [W22_FPS_MIN, W22_FPS_MAX] (NaN included). */
w22_status w22_fps_rational(double fps, int *num, int *den);

typedef enum {
    W22_VIDEO_Y4M,
    W22_VIDEO_MP4,
    W22_VIDEO_PNG_DIR,
    W22_VIDEO_NPY,
    W22_VIDEO_SAFETENSORS,
} w22_video_format;

/* The format an output path asks for: .y4m, .mp4, .npy, .safetensors; a path ending in '/' or whose last part
 * has no extension is a directory of PNG frames. W22_ERR_INVALID_ARG for other extensions. */
w22_status w22_video_format_from_path(const char *path, w22_video_format *fmt);
const char *w22_video_format_name(w22_video_format fmt);

typedef struct w22_video_writer w22_video_writer;

/* Everything about a video output that can be checked before the expensive work: w22_output_check, the length of
 * the temporary names next to it, and for .mp4 an ffmpeg to run. */
w22_status w22_video_check(const char *path, w22_video_format fmt, int overwrite);

/* Starts writing a video of `frames` frames of height x width at fps into a temporary file (or directory) next to
 * path. Nothing appears at path until w22_video_finish succeeds. */
w22_status w22_video_open(const char *path, w22_video_format fmt, int frames, int height, int width, double fps,
                          int overwrite, w22_video_writer **out);
/* Writes frames [frame0, frame0 + n) given as float32 [3][n][H][W] (what w22_frames_fn receives). Streamed
 * formats (.y4m, .mp4) need the frames in order; the others take any order. */
w22_status w22_video_write(w22_video_writer *vw, const float *chunk, int frame0, int n);
/* Checks that every frame was written, completes the file and renames it to its path. Frees vw, also on failure
 * (the temporary output is then removed). */
w22_status w22_video_finish(w22_video_writer *vw);
/* Removes the temporary output and frees vw (NULL is fine). */
void w22_video_abort(w22_video_writer *vw);

#endif
