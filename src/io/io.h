/* Files in and out of the decoder: latents in (.safetensors, .npy), video out (.y4m, any container ffmpeg writes,
 * PNG frames, raw .npy / .safetensors tensors), and the NaN/Inf check the decoder shares. Library-internal (the CLI
 * and the tests use it); every output file goes through a temporary file in the destination's directory and a
 * rename, so a failed or stopped write never leaves a half-written output, and an existing output is refused
 * unless overwrite. Streams (standard output, a FIFO, a device) are written directly instead. */
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
/* Whether an input path names a stream: "-" (standard input), a path under /dev/ or /proc/self/fd/ (/dev/stdin,
 * /dev/fd/N, a shell's <(...)), or a FIFO, socket or character device. Such an input is read to its end. */
int w22_input_is_stream(const char *path);
/* Reads fd to its end into a malloc'd buffer, at most max bytes (more is W22_ERR_IO). A terminal is refused.
 * first_bytes_ok, when given, sees the first 16 bytes (all of them if fewer came) and returns NULL when they can
 * start the input, else what was expected (W22_ERR_FORMAT): a wrong stream stops before it fills memory. name and
 * what are for messages. fd is not closed. */
w22_status w22_read_stream(int fd, const char *name, const char *what, size_t max,
                           const char *(*first_bytes_ok)(const unsigned char *b, size_t n), unsigned char **buf,
                           size_t *size);

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

/* Loads latents [1, C, T, h, w] or [C, T, h, w] from .safetensors or ComfyUI's .latent (the tensor "latents", else
 * ComfyUI's "latent_tensor", scaled as ComfyUI's LoadLatent does (latents.c), else the file's only tensor; F32, BF16
 * or F16) or .npy ('<f4', '<f2'), as malloc'd float32. Non-finite values are W22_ERR_NONFINITE. The caller compares
 * zdim with its config. path "-" reads standard input; a stream (w22_input_is_stream) is read to its end, its format
 * from its extension or else its first bytes. */
w22_status w22_io_load_latents(const char *path, float **z, int *T, int *h, int *w, int *zdim);
/* The same, key (not NULL) naming the safetensors tensor to read; a refusal lists the names the file holds. */
w22_status w22_io_load_latents_key(const char *path, const char *key, float **z, int *T, int *h, int *w, int *zdim);
/* The same from a file's bytes in memory (buf[0, size), not kept); name's extension picks the format and names
 * the file in messages. The whole path from bytes to checked latents, which w22_io_load_latents takes too. */
w22_status w22_io_parse_latents(const void *buf, size_t size, const char *name, float **z, int *T, int *h, int *w,
                                int *zdim);
w22_status w22_io_parse_latents_key(const void *buf, size_t size, const char *name, const char *key, float **z,
                                    int *T, int *h, int *w, int *zdim);
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
/* n values as 8 bits (w22_pixel_u8 of each), into dst. */
void w22_plane_u8(const float *src, size_t n, uint8_t *dst);

/* ---- output files ---- */

/* Whether path may be written: its directory exists and is writable, and path is absent (or overwrite and path
 * is a file, not a directory; or, for a PNG directory, overwrite and it holds only frame PNGs). Checked before
 * the expensive work so that a bad --out fails at once; the writers check again when they commit. A stream
 * (w22_output_is_stream) must be writable (and is no directory); it needs no overwrite. */
w22_status w22_output_check(const char *path, int is_dir, int overwrite);

/* w22_output_check for a writer whose temporary ends in suffix ("<name>.tmp-XXXXXX.mkv"). */
w22_status w22_output_check_suffix(const char *path, int is_dir, int overwrite, const char *suffix);

/* Whether an output path is a stream, written directly in order rather than through a temporary file and a
 * rename: "-" (standard output), /dev/stdout, /dev/stderr, /dev/fd/N, /proc/self/fd/N, anything else under /dev/,
 * and any existing path that is not a regular file or a directory (a FIFO, a character device, a socket). */
int w22_output_is_stream(const char *path);
/* The name of an output for messages: "standard output" for "-", else the path. */
const char *w22_output_name(const char *path);

/* ---- video writers ---- */

/* Frames per second of .y4m and ffmpeg's formats: within [W22_FPS_MIN, W22_FPS_MAX], so that the header's rational
 * is nonzero. */
#define W22_FPS_MIN 0.01
#define W22_FPS_MAX 1000.0
/* fps as the rational the headers carry: an integer as N/1, else to 1/1000 (23.976 -> 23976/1000).
 * W22_ERR_INVALID_ARG outside [W22_FPS_MIN, W22_FPS_MAX] (NaN included). */
w22_status w22_fps_rational(double fps, int *num, int *den);

typedef enum {
    W22_VIDEO_Y4M,
    W22_VIDEO_FFMPEG,       /* any container ffmpeg writes, by the extension: .mp4, .mkv, .webm, .mov, .gif, ... */
    W22_VIDEO_PNG_DIR,
    W22_VIDEO_NPY,
    W22_VIDEO_SAFETENSORS,
} w22_video_format;

/* The format an output path asks for: .y4m, .npy, .safetensors; "-" (standard output) and a stream without an
 * extension (/dev/stdout, a FIFO named so) are .y4m; a path ending in '/' or whose last part has no extension is a
 * directory of PNG frames; any other extension goes to ffmpeg (w22_ffmpeg_check says whether ffmpeg writes it).
 * W22_ERR_INVALID_ARG for a still-image extension (.png, .jpg, ...: PNG frames are a folder). */
w22_status w22_video_format_from_path(const char *path, w22_video_format *fmt);
const char *w22_video_format_name(w22_video_format fmt);

/* What ffmpeg is asked for (W22_VIDEO_FFMPEG); NULL strings and a negative crf leave the container's default. */
typedef struct {
    const char *codec;       /* -c:v (libx264, libx265, libvpx-vp9, ...) */
    int crf;                 /* the codec's constant-quality level (-crf), -1: the default */
    const char *pix_fmt;     /* -pix_fmt (yuv420p, yuv444p, yuv420p10le, ...) */
    const char *ffmpeg_args; /* more output options, split as a shell splits them, after ours (so they win) */
} w22_video_options;

/* --ffmpeg-args split into words as a shell would (spaces; '...' and "..." quoting; backslash escapes).
 * W22_ERR_INVALID_ARG for an unclosed quote. Free with w22_free_args. */
w22_status w22_split_args(const char *s, int *argc, char ***argv);
void w22_free_args(int argc, char **argv);

/* For an ffmpeg output: an ffmpeg to run (W22_ERR_UNSUPPORTED naming ffmpeg when there is none), and one test
 * frame encoded with the whole command into a temporary file with the output's extension: W22_ERR_INVALID_ARG
 * when ffmpeg writes no format for the extension, or refuses the caller's codec, pixel format, CRF or options (its
 * message then); W22_ERR_UNSUPPORTED when it cannot write the container's defaults. Checks before the expensive
 * work (a fraction of a second). */
w22_status w22_ffmpeg_check(const char *path, const w22_video_options *opts);

typedef struct w22_video_writer w22_video_writer;

/* Everything about a video output that can be checked before the expensive work: w22_output_check, the length of
 * the temporary names next to it, a stream's fitness for the format (.npy, .safetensors and PNG frames are written
 * at offsets: a regular file), and for ffmpeg's formats an ffmpeg to run (w22_ffmpeg_check does the rest). */
w22_status w22_video_check(const char *path, w22_video_format fmt, int overwrite);

/* Starts writing a video of `frames` frames of height x width at fps into a temporary file (or directory) next to
 * path. Nothing appears at path until w22_video_finish succeeds. A stream (w22_output_is_stream) is written
 * directly, frames in order. opts: ffmpeg's settings (NULL: the defaults; copied). */
w22_status w22_video_open(const char *path, w22_video_format fmt, int frames, int height, int width, double fps,
                          int overwrite, w22_video_writer **out);
w22_status w22_video_open_opts(const char *path, w22_video_format fmt, int frames, int height, int width,
                               double fps, int overwrite, const w22_video_options *opts, w22_video_writer **out);
/* PNG frames (W22_VIDEO_PNG_DIR): zlib's compression level 0..9 (-1: W22_PNG_LEVEL_DEFAULT, png_encode.h) and the
 * encoder threads (0: every core), before the first write. W22_ERR_INVALID_ARG for a level outside 0..9 or a call
 * after a write; the other formats ignore it. */
w22_status w22_video_set_png(w22_video_writer *vw, int level, int threads);
/* The ffmpeg command line a writer runs (shell-quoted), NULL for the other formats. */
const char *w22_video_command(const w22_video_writer *vw);
/* Writes frames [frame0, frame0 + n) given as float32 [3][n][H][W] (what w22_frames_fn receives). Streamed
 * formats (ffmpeg's, and any stream) need the frames in order; the others take any order. */
w22_status w22_video_write(w22_video_writer *vw, const float *chunk, int frame0, int n);
/* Checks that every frame was written, completes the file and renames it to its path. Frees vw, also on failure
 * (the temporary output is then removed). */
w22_status w22_video_finish(w22_video_writer *vw);
/* Removes the temporary output and frees vw (NULL is fine). */
void w22_video_abort(w22_video_writer *vw);
/* For a signal handler that must clean up without the writer (the CLI's second Ctrl-C): the temporary output's path
 * (NULL for a stream or none) and whether it is a directory; and the process id of the writer's ffmpeg (0: none). */
const char *w22_video_temporary(const w22_video_writer *vw, int *is_dir);
int w22_video_child(const w22_video_writer *vw);
/* A stopped decode's output is not wanted: ends the writer's ffmpeg (SIGKILL) and shuts its input down, so that a
 * write blocked on an ffmpeg that no longer reads (another thread's w22_video_write) fails at once. Safe to call
 * from another thread than the writing one; w22_video_abort then cleans up as usual. */
void w22_video_cancel(w22_video_writer *vw);

#endif
