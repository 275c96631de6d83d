/* The small set of ops a backend implements (CPU float32, CUDA bf16). The plan (src/plan) calls only these;
 * tensors are strided views of backend memory in channels-last order [frame][row][col][channel].
 *
 * Views: element (f, y, x, c) is at ptr + f*sf + y*sh + x*sw + c (in elements of the backend's storage type:
 * float on the CPU, bf16 on CUDA). A conv's input view is readable one row and one column beyond its edges
 * (y = -1, y = h, x = -1, x = w): the plan keeps a zeroed (or halo-exchanged) border around every conv input. */
#ifndef W22_BACKEND_H
#define W22_BACKEND_H

#include <stddef.h>
#include "wan22vae.h"

typedef struct {
    void *ptr;
    int f, h, w, c;
    long sf, sh, sw; /* strides in elements; channels are contiguous */
    int es;          /* bytes per element */
} w22_view;

/* A weight prepared by the backend in its own layout. */
typedef struct w22_bweight w22_bweight;

typedef enum {
    W22_WK_CONV,   /* conv weight [cout, cin, kt, kh, kw] (kt or kh/kw may be 1; 2D convs have kt = 1) */
    W22_WK_VECTOR, /* bias or gamma [c] */
} w22_weight_kind;

typedef struct {
    w22_view in;      /* in.f == out frames + kt - 1 (the causal history first); in.c == cin; with hist or psum:
                       * in.f == out frames (time_split: half of them) */
    w22_view out;     /* out.c == cout, or cout / 2 with time_split (out.f then 2 x the conv's frames) */
    const w22_bweight *weight, *bias;
    int kt, ks;       /* temporal kernel (1 or 3), spatial kernel (1 or 3; 3 reads the border) */
    int upsample;     /* 1: the input is read through a nearest-2x upsample (out.h == 2 in.h, out.w == 2 in.w) */
    int time_split;   /* 1: output channel c of conv frame t goes to frame 2t + c / C, channel c % C (C = out.c) */
    const w22_view *residual;   /* added to the result, same shape as out (may be out itself) */
    const w22_view *sc_in;      /* a 1x1 shortcut conv of sc_in (cin = sc_in.c) added to the result */
    const w22_bweight *sc_weight, *sc_bias;
    /* kt = 3 only (NULL ptr: unused): the two history frames before in's first, each a one-frame view with in's
     * h, w, c, sh and sw (and border, when ks = 3), anywhere in backend memory: the plan's causal caches, read in
     * place instead of copied in front of the new frames. */
    w22_view hist[2];
    /* kt = 3 with hist only: how many of the window's first frames (hist[0], then hist[1]) are known to be zero (0, 1
     * or 2): the causal zero padding before a decode's first frame (exec.c: a stage's first chunk, whose caches the
     * decode's start zeroed; the checking mode verifies it, check.c). A backend may skip their temporal taps, which
     * only add exact zeros: the CPU backend does, the CUDA backend lowers a one-frame conv with both zero to the
     * weight's last tap alone (lower.h). A T = 1 decode (an image: Qwen-Image, a first frame) runs each 3x3x3 conv
     * with 9 of its 27 taps so. */
    int hist_zero;
    /* upsample only (NULL: none): + DupUp(dup_in) as dupup_add adds it (below: out (F, 2h, 2w, cout) from dup_in
     * (f, h, w, cin), dup_ft = 1 or 2 time copies, dup_first_single), after the bias, with one rounding where the
     * backend can (the up blocks' avg_shortcut fused into their upsampler's conv: one pass over the high-resolution
     * output instead of two). Not with residual or time_split. */
    const w22_view *dup_in;
    int dup_ft, dup_first_single;
    /* kt = 3 only (NULL: unused): the causal history as fp32 partial sums instead of input frames (the head's
     * conv_out: 2 x cout floats per pixel kept instead of 2 x cin input channels). in.f == out.f; ks 3; no hist,
     * upsample, time_split, residual, shortcut or dup_in. With Y_dt(t) the 3x3 conv of in's frame t by the
     * weight's temporal tap dt alone (no bias), frame by frame in order:
     *     out(t) = Y_2(t) + A + bias;  A = Y_1(t) + B;  B = Y_0(t)     (fp32, summed in this order)
     * so out(t) = bias + Y_2(t) + Y_1(t - 1) + Y_0(t - 2), the causal conv. psum: f 2 (frame 0 is A, frame 1 is B),
     * out's h, w and c, es 4 (fp32 on every backend), updated in place; zero before a decode's first frame is the
     * causal zero padding. psum_tmp: fp32 scratch (es 4) of in.f x h x w x w22_psum_tmp_channels(cout) for the Ys
     * (channel o * 3 + dt; the last channel beyond 3 cout where cout is odd: the Wan2.1 VAE's conv_out, 3 outputs),
     * for a backend that stages them in memory (CUDA); others ignore it. */
    const w22_view *psum;
    w22_view psum_tmp;
    /* Optional (NULL: none): backend memory this call may use as scratch, free for the call's duration (the plan's
     * buffers that hold nothing live during a stage's convs: plan.c's w22_stage_free). The CUDA backend's Winograd
     * path puts its transformed frames there, in bands of rows that fit; without it the backend allocates its own. */
    void *work;
    size_t work_bytes;
} w22_conv_args;

/* Where unpatchified video frames go: element (c, f, y, x) at ptr + c*sc + f*sf + y*sy + x*sx (elements of
 * dtype: F32 or BF16), in backend memory. */
typedef struct {
    void *ptr;
    w22_dtype dtype;
    long sc, sf, sy, sx;
} w22_video_dst;

typedef struct w22_backend w22_backend;

/* A weight's source: dense data of the model's shape in dtype (F32, BF16, F16), in host memory (cuda_device -1) or
 * in the memory of GPU cuda_device (the CUDA backend only; the decoder gives the CPU backend host data). */
typedef struct {
    const void *data;
    w22_dtype dtype;
    int cuda_device;
} w22_wsrc;

typedef struct {
    const char *name;
    size_t elem_size; /* bytes of one activation element */
    void (*destroy)(w22_backend *b);
    w22_status (*alloc)(w22_backend *b, size_t bytes, void **ptr);
    void (*free)(w22_backend *b, void *ptr);
    /* Weights: from a source of the model's shape (desc gives it), into the backend's layout. */
    w22_status (*weight_upload)(w22_backend *b, w22_weight_kind kind, w22_wsrc src, const int64_t *shape, int ndim,
                                w22_bweight **out);
    void (*weight_free)(w22_backend *b, w22_bweight *w);
    size_t (*weight_bytes)(const w22_bweight *w);
    /* Byte copies: backend <-> host, and within backend memory (copy_bytes: also to and from host memory that
     * host_alloc gave, without waiting: the plan's hosted caches). Ordered with the backend's other work; to_host
     * returns when the data is on the host. */
    w22_status (*to_host)(w22_backend *b, void *dst, const void *src, size_t bytes);
    w22_status (*from_host)(w22_backend *b, void *dst, const void *src, size_t bytes);
    w22_status (*copy_bytes)(w22_backend *b, void *dst, const void *src, size_t bytes);
    /* Sets every element of v to zero. */
    w22_status (*zero)(w22_backend *b, w22_view v);
    /* dst = src (same dims). */
    w22_status (*copy)(w22_backend *b, w22_view dst, w22_view src);
    /* Latents in: z frames [t0, t0 + out.f) rows [y0, y0 + out.h) of z (NCDHW [C][T][H][W], dtype zt: F32 or
     * BF16, in backend memory) into out (channels-last, out.c == C, out.w == W). */
    w22_status (*latents_in)(w22_backend *b, const void *z, w22_dtype zt, int C, int T, int H, int W, int t0,
                             int y0, w22_view out);
    w22_status (*conv)(w22_backend *b, const w22_conv_args *a);
    /* out = in / max(||in||_2 over channels, 1e-12) * sqrt(C) * gamma, then SiLU when silu. */
    w22_status (*rmsnorm)(w22_backend *b, w22_view in, w22_view out, const w22_bweight *gamma, int silu);
    /* Per frame f: out[f, p] = softmax(q[f, p] . k[f, :]^T / sqrt(C)) v[f, :], over every pixel of k's frame.
     * q, out: this rank's rows; k, v: the whole frame. work (NULL: none): work_bytes of backend memory free during
     * the call, which a backend may use as scratch (the decode passes what the stage leaves free). */
    w22_status (*attention)(w22_backend *b, w22_view q, w22_view k, w22_view v, w22_view out, void *work,
                            size_t work_bytes);
    /* out += DupUp(in): out (F, 2h, 2w, cout) from in (f, h, w, cin), ft = 1 or 2 time copies (first_single:
     * frame 0 of in gives one frame, the last copy). Output channel o, time copy t, sub-row i, sub-col j takes
     * input channel (o*ft*4 + t*4 + i*2 + j) / (cout*ft*4 / cin). */
    w22_status (*dupup_add)(w22_backend *b, w22_view out, w22_view in, int ft, int first_single);
    /* (w22_dupup_frame and w22_dupup_channel below spell the map out; w22_dupup_check the shapes.) */
    /* Unpatchify (p = patch_size) and clamp to [-1, 1]: in (f, h, w, 3 p^2) to dst frames [0, f), rows
     * [0, p h), cols [0, p w) (dst already offset). Channel c*p*p + p1*p + p2 goes to row p y + p2, col p x + p1. */
    w22_status (*unpatchify)(w22_backend *b, w22_view in, int p, w22_video_dst dst);
    /* Waits for the backend's queued work. */
    w22_status (*sync)(w22_backend *b);
    /* Optional (NULL: none): a second queue for work that may overlap the main one. side_begin: later ops go to
     * the side queue, which starts after everything queued so far; side_end: later ops go to the main queue again,
     * without waiting; side_join: the main queue waits for the side work queued before side_end. The plan uses it
     * to exchange halo rows while the interior of a conv runs. */
    w22_status (*side_begin)(w22_backend *b);
    w22_status (*side_end)(w22_backend *b);
    w22_status (*side_join)(w22_backend *b);
    /* Optional (NULL: four zero calls, w22_zero_border): sets the one-pixel border of every frame of v to zero (rows
     * -1 and h, columns -1 and w, corners included), nothing else. One launch instead of four (CUDA: ~600 launches
     * of f121's ~2460 zero launches, each mostly launch time). */
    w22_status (*zero_border)(w22_backend *b, w22_view v);
    /* Sets `bytes` bytes at ptr to `byte` (0: zeros; 0xff: NaN in both float32 and bf16, the checking mode's poison).
     * Sizes in size_t: a cache past 4K UHD holds more than 2^31 elements. */
    w22_status (*fill)(w22_backend *b, void *ptr, size_t bytes, int byte);
    /* The checking mode (plan.h's check): counts[0] = the elements of v that are not finite, counts[1] = with border,
     * the elements of its one-pixel border (rows -1 and h, columns -1 and w) that are not +-0. Waits for the
     * backend's queued work. Elements of v.es bytes (2: bf16, 4: float32) whatever the backend's own type. */
    w22_status (*inspect)(w22_backend *b, w22_view v, int border, size_t counts[2]);
    /* Optional (NULL: none), the checking mode: verifies that the backend's constant memory (its weights in their
     * layouts, its other read-only tables) still holds what it uploaded; a kernel that writes outside its output can
     * land there, and then every later decode of this decoder is wrong while a fresh decoder's is right. */
    w22_status (*audit)(w22_backend *b);
    /* Optional (NULL: malloc, free and to_host at once), the video's way out (issue 30: a host decode's copies and
     * conversion overlap the next pass): host memory the backend copies into fast (CUDA: pinned), a copy into it that
     * returns before it lands, ordered after the backend's queued work, and the wait for the copy begun into
     * double-buffer slot 0 or 1. */
    w22_status (*host_alloc)(w22_backend *b, size_t bytes, void **ptr);
    void (*host_free)(w22_backend *b, void *ptr);
    w22_status (*to_host_begin)(w22_backend *b, void *dst, const void *src, size_t bytes, int slot);
    w22_status (*to_host_wait)(w22_backend *b, int slot);
    /* Optional (NULL: copy_bytes on the main queue, nothing to wait for), the plan's hosted caches (issue 46): a byte
     * copy (device memory and host_alloc's memory, either way) on a copy queue beside the main one (CUDA: one stream
     * into the device, one out of it, so both directions of the bus run at once). It starts after the work queued
     * on the main queue so far and after every earlier copy begun with the same tag (0 .. W22_COPY_TAGS - 1), and runs
     * beside the main queue's later work; copy_wait(tag): the main queue's later work waits for every copy begun
     * with that tag. Nothing orders a copy with the main queue's work queued after it, nor copies of other tags:
     * the caller waits before it writes a copy's source or reads or writes its destination (exec.c's windows).
     * sync waits for the copies too. */
    w22_status (*copy_begin)(w22_backend *b, void *dst, const void *src, size_t bytes, int tag);
    w22_status (*copy_wait)(w22_backend *b, int tag);
    /* The bytes of w22_conv_args.work that a kt x ks x ks conv, cin -> cout, of frames x h x w output pixels would
     * use as scratch (CUDA: its Winograd bands at the backend's threshold), 0 for none; NULL: none ever. The plan
     * keeps at least the largest of a stage's convs free during that stage (plan.c's stage_conv_work). */
    size_t (*conv_work)(w22_backend *b, int kt, int ks, int cin, int cout, int frames, int h, int w);
} w22_backend_ops;

#define W22_COPY_TAGS 4

struct w22_backend {
    const w22_backend_ops *ops;
    int threads;
    void *impl;
    /* The decoder's stop flag (w22_decoder_set_interrupt), NULL when none: the CPU backend reads it inside its long
     * loops (between a conv's taps and the row blocks of every product) and fails the op with w22_stopped(). */
    const volatile int *interrupt;
};

/* Whether a stop flag is set (NULL: never). */
static inline int w22_interrupted(const volatile int *flag) {
    return flag && __atomic_load_n((const int *)flag, __ATOMIC_RELAXED);
}
/* The failure of a decode stopped by its stop flag. */
w22_status w22_stopped(void);

w22_status w22_backend_cpu_create(int threads, w22_backend **out);
/* The CUDA backend on GPU `device` (sm_80 or later: W22_ERR_UNSUPPORTED otherwise, or without a GPU or in a build
 * without CUDA; the path by the GPU, route.h). It queues work on a stream of its own until
 * w22_backend_cuda_set_stream. */
w22_status w22_backend_cuda_create(int device, w22_backend **out);
/* The same on the kernel path asked for (w22_kernels: W22_KERNELS_AUTO takes W22_KERNELS from the environment, then
 * the GPU's own path; W22_KERNELS_PORTABLE the portable path on any sm_80+ GPU, a Hopper included). */
w22_status w22_backend_cuda_create_kernels(int device, int kernels, w22_backend **out);
/* CUDA: the kernel path the backend took at create: "hopper" or "portable" (a static string). */
const char *w22_backend_cuda_path(const w22_backend *b);
/* CUDA: the stream the backend queues work on (a cudaStream_t; NULL: back to its own). */
void w22_backend_cuda_set_stream(w22_backend *b, void *stream);
/* CUDA: every conv in the direct arithmetic (w22_decoder_params.exact); before the weights are uploaded. */
void w22_backend_cuda_set_exact(w22_backend *b, int exact);
/* Whether the CUDA kernels take m (W22_OK, or W22_ERR_UNSUPPORTED naming the layer and the CPU backend): feature
 * channels multiples of 8 (the norms take 8 channels a thread: route.h), every DupUp of a map the upsample conv's
 * phases fuse (lower.h's w22_lower_dup_fusable). Both Wan VAEs pass; the decoder's open asks before the weights. */
struct w22_model;
w22_status w22_backend_cuda_model_ok(const struct w22_model *m);
/* CUDA: the caller's stream for a device decode: its work queues there, after whatever the caller queued before
 * (the latents' upload, the kernel that made them). NULL is the legacy default stream, as in every CUDA API, not
 * the backend's own stream: that one is non-blocking and would run ahead of the caller's pending work. */
void w22_backend_cuda_use_callers_stream(w22_backend *b, void *stream);
/* CUDA: the stream the backend queues work on now (a cudaStream_t). */
void *w22_backend_cuda_stream(w22_backend *b);
/* CUDA: device memory in use by the backend (allocations it made), and its peak since creation. */
size_t w22_backend_cuda_bytes(const w22_backend *b, size_t *peak);
/* CUDA: the peak restarts from the bytes held now (tests/cuda_budget.c: one decode's peak, not the open's staging). */
void w22_backend_cuda_reset_peak(w22_backend *b);
/* CUDA: the weights are all uploaded; frees the staging their layouts were made in. */
void w22_backend_cuda_weights_done(w22_backend *b);
/* CUDA: a copy of device memory of GPU `device` to the host (complete on return). */
w22_status w22_cuda_device_to_host(int device, void *dst, const void *src, size_t bytes);
/* CUDA: *first = the index of the first NaN/Inf among n elements of dtype t at x in GPU `device`'s memory, n when
 * all are finite; W22_ERR_INVALID_ARG when x is not that GPU's memory. */
w22_status w22_cuda_first_nonfinite(int device, const void *x, w22_dtype t, size_t n, size_t *first);
/* CUDA, for W22_PROFILE: seconds of the open so far: [0] the layouts on the GPU, [1] the source copies, and of [0]
 * [2] cudaMalloc. */
void w22_backend_cuda_open_times(const w22_backend *b, double t[3]);

/* The channels of the head's partial-sum scratch (w22_conv_args.psum_tmp): 3 cout rounded up to even, since the
 * CUDA backend's tensor-core GEMMs take an even N only (the Wan2.1 VAE's conv_out has cout 3: N 9 -> 10, its tenth
 * weight row zero; without it the GEMM would land on the scalar kernel, tests/test_route.c). */
static inline int w22_psum_tmp_channels(int cout) { return (3 * cout + 1) & ~1; }

/* Element (f, y, x, c) of v, as a byte pointer. */
static inline void *w22_view_at(w22_view v, long f, long y, long x, long c) {
    return (char *)v.ptr + (f * v.sf + y * v.sh + x * v.sw + c) * (long)v.es;
}
/* Frames [f0, f0 + nf) of v. */
static inline w22_view w22_view_frames(w22_view v, int f0, int nf) {
    v.ptr = w22_view_at(v, f0, 0, 0, 0);
    v.f = nf;
    return v;
}
/* Rows [y0, y0 + nh) of v (y0 may be -1 to reach the border). */
static inline w22_view w22_view_rows(w22_view v, int y0, int nh) {
    v.ptr = w22_view_at(v, 0, y0, 0, 0);
    v.h = nh;
    return v;
}
/* Channels [c0, c0 + nc) of v. */
static inline w22_view w22_view_channels(w22_view v, int c0, int nc) {
    v.ptr = w22_view_at(v, 0, 0, 0, c0);
    v.c = nc;
    return v;
}

/* DupUp (dupup_add): output frame fo of ft time copies per input frame (first_single: input frame 0 gives one, its
 * last copy) is time copy *t of input frame *s. */
static inline void w22_dupup_frame(int fo, int ft, int first_single, int *s, int *t) {
    const int k = fo + (first_single ? ft - 1 : 0); /* the frames as if frame 0 had all ft copies */
    *s = k / ft;
    *t = k % ft;
}
/* Output frames of a DupUp of f input frames. */
static inline int w22_dupup_frames(int f, int ft, int first_single) {
    return first_single ? (f > 0 ? 1 + (f - 1) * ft : 0) : f * ft;
}
/* The input channel that output channel o of time copy t, sub-row i (Y & 1) and sub-col j (X & 1) reads; r =
 * cout * ft * 4 / cin (DupUp3D's repeat_interleave, then its view/permute). */
static inline int w22_dupup_channel(int o, int t, int i, int j, int ft, int r) {
    return (o * ft * 4 + t * 4 + i * 2 + j) / r;
}
/* W22_OK when out (F, 2h, 2w, cout) can take DupUp(in) with ft time copies: ft 1 or 2, F the DupUp's frames, cout * ft
 * * 4 a multiple of in.c; else W22_ERR_BAD_SHAPE with a message that starts with `who` (src/backend.c). */
/* The border of v zeroed (backend_ops.zero_border, or four zero calls where the backend has none; src/backend.c). */
w22_status w22_zero_border(w22_backend *b, w22_view v);
w22_status w22_dupup_check(const char *who, const w22_view *out, const w22_view *in, int ft, int first_single);

#endif
