/* wan22vae: the Wan video VAE decoders (Wan2.2 TI2V-5B's and the Wan2.1 VAE), on the CPU (float32) and on Hopper
 * GPUs (bf16).
 *
 * Decodes latents z [1, z_dim, T, h, w] into video [1, 3, 4T-3, 16h, 16w] (TI2V-5B; the Wan2.1 VAE: 8h, 8w), clamped to [-1, 1], computing what
 * diffusers' AutoencoderKLWan(...).decode(z).sample computes. Tensors are dense, row-major, in diffusers' NCDHW
 * order. Every call returns a status; on failure w22_last_error() says what failed and what was expected. */
#ifndef WAN22VAE_H
#define WAN22VAE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define W22_VERSION "0.1.0"

/* W22_API marks the public functions: the only symbols libwan22vae.so exports (the library is built with
 * -fvisibility=hidden; static linking ignores visibility). Define W22_API before including this header to
 * override it. */
#ifndef W22_API
#if defined(__GNUC__) && __GNUC__ >= 4
#define W22_API __attribute__((visibility("default")))
#else
#define W22_API
#endif
#endif

typedef enum {
    W22_OK = 0,
    W22_ERR_INVALID_ARG,    /* a bad argument: NULL, a size out of range, an unknown option */
    W22_ERR_IO,             /* a file could not be opened, read, written or renamed */
    W22_ERR_FORMAT,         /* a file is not what it says: bad header, offsets, truncated */
    W22_ERR_MISSING_TENSOR, /* a weight the model needs is not in the file */
    W22_ERR_BAD_SHAPE,      /* a tensor has the wrong shape */
    W22_ERR_BAD_DTYPE,      /* a tensor has a dtype that is not accepted */
    W22_ERR_NONFINITE,      /* NaN or Inf in the latents or the weights (refused at load) */
    W22_ERR_OUT_OF_MEMORY,  /* host or device memory could not be had */
    W22_ERR_UNSUPPORTED,    /* not available here: no GPU, a backend not built in */
    W22_ERR_CUDA,           /* a CUDA call failed; the message names the call */
    W22_ERR_COMM,           /* a collective between ranks failed, or another rank failed */
    W22_ERR_EXISTS,         /* the output file exists already */
    W22_ERR_INTERNAL,       /* a bug: please report it with the message */
} w22_status;

/* The library's version at run time (W22_VERSION is the header's, at build time): "0.1.0". */
W22_API const char *w22_version(void);
/* The name of a status ("W22_ERR_BAD_SHAPE"). */
W22_API const char *w22_status_string(w22_status s);
/* The message of the last failed call on this thread ("" if none). Valid until the next failing call. */
W22_API const char *w22_last_error(void);

typedef enum { W22_DTYPE_F32 = 0, W22_DTYPE_BF16 = 1, W22_DTYPE_F16 = 2 } w22_dtype;
W22_API size_t w22_dtype_size(w22_dtype t);      /* 4 or 2; 0 for a value that is not a w22_dtype */
W22_API const char *w22_dtype_name(w22_dtype t); /* "F32", "BF16", "F16"; "?" for any other value */

/* The decoder's structure (diffusers' AutoencoderKLWan config). Narrow variants (a smaller decoder_base_dim,
 * z_dim) keep the structure and are what the tests use; the default is Wan2.2 TI2V-5B, w22_config_wan21 the
 * Wan2.1 VAE. */
typedef struct {
    int z_dim;           /* latent channels: 48 */
    int base_dim;        /* decoder_base_dim: 256 */
    int dim_mult[4];     /* [1, 2, 4, 4] */
    int num_res_blocks;  /* 2 (each up block has num_res_blocks + 1 resnets) */
    int temporal_up[3];  /* temperal_downsample reversed: [1, 1, 0] */
    int out_channels;    /* 12 (3 x patch_size^2) */
    int patch_size;      /* 2 */
    int is_residual;     /* 1: Wan2.2 TI2V-5B's decoder (residual up blocks with DupUp shortcuts, upsamplers that keep
                          * the channels); 0: the Wan2.1 VAE's (diffusers' WanUpBlock: no DupUp, upsample convs that
                          * halve the channels), which Wan2.1, Wan2.2 A14B, Qwen-Image and their kin decode with */
} w22_config;

/* Wan2.2 TI2V-5B: z_dim 48, base_dim 256, patch_size 2, is_residual 1 (latents [1, 48, T, h, w] -> video 16x). */
W22_API void w22_config_default(w22_config *cfg);
/* The Wan2.1 VAE (diffusers' AutoencoderKLWan defaults): z_dim 16, base_dim 96, out_channels 3, patch_size 1,
 * is_residual 0 (latents [1, 16, T, h, w] -> video [1, 3, 4T-3, 8h, 8w]). */
W22_API void w22_config_wan21(w22_config *cfg);
/* Checks a config for the structure this library implements; W22_ERR_INVALID_ARG says which field is off. */
W22_API w22_status w22_config_check(const w22_config *cfg);
/* Frames and size of the video for latents of T frames at h x w (all 0 for a NULL cfg). */
W22_API void w22_video_shape(const w22_config *cfg, int T, int h, int w, int *frames, int *height, int *width);
/* Floating-point operations (2 per multiply-add) of one decode of T latent frames at h x w. */
W22_API double w22_decode_flops(const w22_config *cfg, int T, int h, int w);

/* ---- weights ---- */
typedef struct w22_weights w22_weights;

/* Loads and validates the decoder's weights from a safetensors file with diffusers' names: the decoder's own
 * (post_quant_conv.*, decoder.*), with or without a prefix ("vae."), or a whole-VAE file (encoder tensors are
 * ignored); or from a sharded index (a path ending in ".json": {"weight_map": {tensor: shard file}}, each
 * shard inside the index's folder, each tensor in the shard the index names). fp32, bf16 and fp16 are accepted.
 * The file(s) stay mapped while the weights live: replace a weight file by renaming a new one over it, not by
 * writing over it in place. A file changed in place since the load is refused, W22_ERR_IO, by w22_decoder_open and
 * w22_weights_save (a change during their own reads is not seen; it can kill the process with SIGBUS if the file
 * shrinks, as with every reader of mapped files). */
W22_API w22_status w22_weights_load(const char *path, const w22_config *cfg, w22_weights **out);
/* Synthetic weights, deterministic from a seed (docs/synthetic.md specifies the generator). */
W22_API w22_status w22_weights_synthetic(const w22_config *cfg, uint64_t seed, w22_weights **out);
/* Weights from caller memory, in the model's weight order (w22_weight_count, w22_weight_name); the data is
 * borrowed, not copied, and must outlive the weights object and any decoder opened from it. */
W22_API w22_status w22_weights_from_memory(const w22_config *cfg, const void *const *data, w22_dtype dtype,
                                           w22_weights **out);
/* Weights in GPU memory: data[i] points to tensor i in the memory of GPU cuda_device (e.g. a torch tensor's
 * data_ptr()), dense, of dtype, in the model's weight order. Borrowed, not copied: it must stay unchanged while the
 * weights object lives, and be complete before this call (synchronize the stream that wrote it). A CUDA decoder
 * lays them out on the GPU without a host copy (issue 30: a pipeline's VAE already there); a CPU decoder and
 * w22_weights_save copy them to the host. Checked finite on the GPU; a pointer outside that GPU's memory is
 * W22_ERR_INVALID_ARG, a build or machine without CUDA W22_ERR_UNSUPPORTED or W22_ERR_CUDA. */
W22_API w22_status w22_weights_from_device(const w22_config *cfg, const void *const *data, w22_dtype dtype,
                                           int cuda_device, w22_weights **out);
/* Writes the weights as a safetensors file (diffusers names), through a temporary file and a rename. */
W22_API w22_status w22_weights_save(const w22_weights *w, const char *path, w22_dtype dtype);
/* Frees the weights. Not while another thread's call reads them (w22_decoder_open, w22_weights_save: the caller
 * orders these; the Python package's free() waits for them). Decoders opened from them do not need them. */
W22_API void w22_weights_free(w22_weights *w);
W22_API const w22_config *w22_weights_config(const w22_weights *w);

/* The model's weight table, in diffusers' named_parameters() order (110 tensors for TI2V-5B's structure, 108 for
 * the Wan2.1 VAE's, whatever the channel counts). */
W22_API int w22_weight_count(const w22_config *cfg);
W22_API const char *w22_weight_name(const w22_config *cfg, int i); /* a pointer into a static table per call */
W22_API int w22_weight_shape(const w22_config *cfg, int i, int64_t shape[5]); /* returns ndim */

/* Synthetic latents [1, z_dim, T, h, w] as float32, deterministic from a seed (docs/synthetic.md). */
W22_API w22_status w22_latents_synthetic(const w22_config *cfg, uint64_t seed, int T, int h, int w, float *out);

/* ---- distributed ---- */
/* A group of ranks that decode one video together: each rank takes a band of rows of every stage. */
typedef struct w22_comm w22_comm;

/* `world` ranks inside this process (one thread per rank, CPU or one GPU each), exchanging through memory:
 * comms[r] is rank r's handle. Each rank's decoder runs on its own thread. */
W22_API w22_status w22_comm_local_group(int world, w22_comm **comms);
/* NCCL across processes: rank 0 makes the id (128 bytes), every rank gets it (e.g. over torch.distributed), then
 * each makes its handle on its own GPU. */
W22_API w22_status w22_nccl_unique_id(unsigned char id[128]);
W22_API w22_status w22_comm_nccl(const unsigned char id[128], int rank, int world, int cuda_device, w22_comm **out);
W22_API void w22_comm_free(w22_comm *c);

/* ---- decoding ---- */
typedef enum { W22_DEVICE_CPU = 0, W22_DEVICE_CUDA = 1 } w22_device;

/* Called after each pass (frames_per_pass latent frames; on a GPU when its work is queued) on the decoding thread:
 * latent_done of latent_total latent frames decoded. Return nonzero to stop the decode (it then returns
 * W22_ERR_INVALID_ARG, "stopped by the caller"). The finished frames themselves go to w22_frames_fn. */
typedef int (*w22_progress_fn)(void *user, int latent_done, int latent_total);

/* CUDA: the kernel path (w22_decoder_params.kernels). AUTO takes W22_KERNELS from the environment (auto or portable),
 * then the GPU's own: Hopper (sm_90) its sm_90a kernels (wgmma, TMA), every other GPU from sm_80 on (Ampere, Ada,
 * Blackwell) the portable kernels (mma.sync); PORTABLE the portable kernels on any of them, a Hopper included. */
typedef enum { W22_KERNELS_AUTO = 0, W22_KERNELS_PORTABLE = 1 } w22_kernels;

typedef struct {
    w22_device device;    /* CUDA takes configs whose feature channels (base_dim x dim_mult, halved where Wan2.1's
                           * upsamplers halve them) are multiples of 8 and whose DupUp shortcuts map channels as
                           * TI2V-5B's do (other dim_mult may not), as both Wan VAEs do; the open refuses others
                           * (W22_ERR_UNSUPPORTED), which the CPU backend decodes */
    int cuda_device;      /* the GPU's ordinal (CUDA) */
    int frames_per_pass;  /* latent frames decoded per pass; 0 picks a default. Does not change the output. */
    int threads;          /* CPU threads, 1..4096; 0 = all cores. Each decoder keeps its own count. With OpenBLAS
                           * the video's bits can depend on it (its products split their sums by thread); never
                           * on another decoder's count (tests/test_sequence.c) */
    w22_comm *comm;       /* NULL: one rank; else this rank's handle of a group */
    int video_on_all_ranks; /* 0: the video ends on rank 0 only; 1: on every rank */
    w22_progress_fn progress;
    void *progress_user;
    int check;            /* 1: the checking mode (also W22_CHECK=1): every op's operands are verified finite, the
                           * borders the decode relies on zero, and memory it has not written reads as NaN; a
                           * failure names the stage, layer and buffer. For tests: a sync and a pass per operand. */
    int exact;            /* CUDA: 1 runs every conv in the direct arithmetic (bf16 products, fp32 sums); 0, the
                           * default, the 3x3x3 convs of 256 channels and up as Winograd
                           * F(4x4, 3x3) in fp16: 6.75 of 27 MACs, about 1.3x the direct conv's error (docs/PERF.md,
                           * sessions 39-40). W22_WINOGRAD
                           * =N sets the threshold for decoders left at 0 (0: exact). The CPU backend is exact. */
    int kernels;          /* CUDA: a w22_kernels, W22_KERNELS_AUTO by default (w22_decoder_path says which ran) */
    size_t work_budget_bytes; /* the decoder's work memory at most this many bytes (on CUDA its device memory beyond
                           * the weights, the backend's own scratch included; not the latents, which a host decode
                           * copies to the device); 0: the default plan. Under a budget the plan keeps its chunks and
                           * moves the fewest causal caches that fit to host memory, pinned on CUDA, those of the
                           * stages with the fewest convs first, copying each conv's two history frames to the device
                           * while the conv before runs: the same bits as the default plan, slower where the bus does
                           * not keep up. At 704x1280 TI2V-5B's default plan takes 4.6 GiB; a 2.5 GiB budget fits,
                           * and the smallest plan takes 2.26 (tests/test_workspace.c prints them). A nonzero budget
                           * under 64 MiB fails the open; one below what the smallest plan needs at a decode's size
                           * fails that decode, W22_ERR_INVALID_ARG naming both and the fewest bands (below) whose
                           * smallest plan fits it. A default plan that runs out of memory (W22_ERR_OUT_OF_MEMORY)
                           * names the smallest budget's need and the work of 2, 4 and 8 bands. */
    int bands;            /* 0 or 1: the whole frame (the default). N >= 2 (up to 64): a band decode in N horizontal
                           * bands of latent rows (fewer where the latents have fewer rows than N), one after another:
                           * the GPU memory of one band's causal caches (Wan2.1 at 1280x720x81 on an H100: 3.24 GiB
                           * with the weights in 2 bands at ~1.15-1.2x the whole frame's time, 2.59x diffusers' bf16; 5.4
                           * GiB whole). The Wan2.1 VAE's later bands reuse the first band's stage 0 from host memory
                           * (pinned where it can be: 6.6 MB a video frame at 720p). Within bf16 rounding of the whole
                           * frame, not the same bits. One rank only (W22_ERR_UNSUPPORTED with a comm of several) and
                           * a whole video only: a decode to a frames callback fails with W22_ERR_UNSUPPORTED (a
                           * frame is whole only after the last band). */
} w22_decoder_params;

W22_API void w22_decoder_params_init(w22_decoder_params *p);

typedef struct w22_decoder w22_decoder;

/* Makes a decoder: uploads the weights to the backend in its own layout. The weights may be freed after. (CUDA: every
 * conv keeps its direct weights on the GPU, nothing in host memory; a Winograd conv makes its transformed weights
 * from them at each conv, in scratch.) With a comm it makes no collective call (ranks may open, fail and agree afterwards); the first decode is where the ranks
 * first meet, in an agreement that every rank is ready. */
W22_API w22_status w22_decoder_open(const w22_weights *w, const w22_decoder_params *p, w22_decoder **out);
W22_API void w22_decoder_free(w22_decoder *d);
/* The kernels a decoder runs on (a static string): "hopper" (CUDA, sm_90a kernels), "portable" (CUDA, the portable
 * kernels) or "cpu". */
W22_API const char *w22_decoder_path(const w22_decoder *d);
/* A stop flag for the decoder's decodes (NULL: none), owned by the caller: once *flag is nonzero a running decode
 * stops soon, between ops and, on the CPU, inside its long loops (within about 0.2 s of CPU time), and returns
 * W22_ERR_INVALID_ARG ("stopped by the caller"); a decode begun while it is set stops at once. Setting *flag is
 * async-signal-safe (a signal handler may do it: a volatile sig_atomic_t cast to int). Set it before a decode, not
 * while one runs; the caller resets *flag to 0 for the next decode. */
W22_API void w22_decoder_set_interrupt(w22_decoder *d, const volatile int *flag);
/* Frees the decoder's workspace (its device memory beyond the weights: tens of GiB after a 4K decode); the next
 * decode makes it again for its size, the same as a fresh decoder's. Waits for a decode running in another thread. */
W22_API w22_status w22_decoder_release_workspace(w22_decoder *d);

/* Receives finished video frames [1, 3, nframes, H, W] (float32, NCDHW of these frames) on rank 0. Return
 * nonzero to stop the decode. */
typedef int (*w22_frames_fn)(void *user, const float *frames, int frame0, int nframes, int height, int width);

/* Decodes host latents z [1, z_dim, T, h, w] (dtype zt) into host video [1, 3, 4T-3, H, W] (dtype vt;
 * w22_video_shape gives them).
 * On ranks other than 0 video may be NULL unless video_on_all_ranks. */
W22_API w22_status w22_decode(w22_decoder *d, const void *z, w22_dtype zt, int T, int h, int w, void *video,
                              w22_dtype vt);
/* Same, handing the video over frame by frame as it completes instead of into one buffer (memory stays bounded
 * in T). */
W22_API w22_status w22_decode_frames(w22_decoder *d, const void *z, w22_dtype zt, int T, int h, int w, w22_frames_fn fn,
                                     void *user);
/* CUDA decoders: latents and video in device memory (bf16), on the caller's stream (a cudaStream_t; NULL for the
 * legacy default stream): the decode runs after the work queued there before the call (the latents' upload, say).
 * Returns when the video is written and the stream is synchronized. */
W22_API w22_status w22_decode_device(w22_decoder *d, const void *z_dev, int T, int h, int w, void *video_dev,
                                     void *cuda_stream);

/* Receives finished video frames in device memory on rank 0: frames_dev is bf16 [3, nframes, height, width] (the
 * video's NCDHW of frames [frame0, frame0 + nframes), without the batch), valid only during the call; the stream is
 * synchronized up to it. Work the callback queues on the decode's stream reading frames_dev runs before the
 * decode's next writes there. Return nonzero to stop the decode. */
typedef int (*w22_device_frames_fn)(void *user, const void *frames_dev, int frame0, int nframes, int height,
                                    int width);
/* w22_decode_device handing the video over in batches of finished frames as they complete instead of into one
 * buffer (device memory for the video stays one batch, bounded in T). A nonzero return from fn stops the decode
 * (W22_ERR_INVALID_ARG, "stopped by the caller"). Returns when the last batch was handed over and the stream is
 * synchronized. CPU decoders: W22_ERR_UNSUPPORTED. */
W22_API w22_status w22_decode_device_frames(w22_decoder *d, const void *z_dev, int T, int h, int w,
                                            w22_device_frames_fn fn, void *user, void *cuda_stream);

/* Device memory the decoder holds now: weights and workspace, in bytes (0 on the CPU). */
W22_API size_t w22_decoder_device_bytes(const w22_decoder *d);
/* Whether this build has the CUDA backend, and a usable GPU (sm_80 or later: a kernel path of the build runs there)
 * is present. */
W22_API int w22_cuda_available(void);

/* ---- DiT: fused passes of Wan's transformer blocks (diffusers' WanTransformerBlock, transformer_wan.py) ----
 *
 * The passes around a block's GEMMs and attention, each one read and one write of the activations (the GEMMs and
 * the attention stay the caller's: cuBLAS, SDPA). A block of hidden states h [B, L, dim] is, in diffusers 0.42.1
 * (mod(c) = scale_shift_table[c] + temb[.., c, :], float32; LN a LayerNorm in float32, eps 1e-6):
 *
 *   n1 = LN(h) * (1 + mod(1)) + mod(0)             resnorm: y NULL, mod, shift_chunk 0
 *   q, k = RMSNorm(to_q(n1)), RMSNorm(to_k(n1))     qknorm with RoPE (cos, sin)
 *   a = attn1(q, k, v)
 *   h = h + a * mod(2); n2 = norm2(h)               resnorm: y a, gate chunk 2, the affine norm (norm_weight/bias)
 *   q, k = RMSNorm(to_q(n2)), RMSNorm(to_k(text))   qknorm without RoPE
 *   h = h + attn2(..); n3 = LN(h)*(1+mod(4))+mod(3) resnorm: y the attention's output, no gate, mod, shift_chunk 3
 *   h = h + ffn(n3) * mod(5)                        resnorm: y ffn's output, gate chunk 5, out NULL
 *
 * Two versions of each: *_cpu on host float32 memory (the reference, what diffusers' float32 block computes), and
 * *_cuda on device memory, activations bf16 with float32 arithmetic where diffusers computes in float32 and bf16
 * roundings where it rounds (the new h is rounded to bf16 before its norm; RMSNorm rounds once, RoPE once), queued
 * on a cudaStream_t (NULL: the legacy default stream); the call returns after the launch. Small float32 operands
 * (tables, norm weights, RoPE tables) are float32 in device memory. Every pointer of a *_cuda call is device memory. */

/* The modulation of one block: chunk c (0..5) of token (b, l) is table[c, :] + temb[b, l, c, :] (per_token: TI2V-5B's
 * temb [B, L, 6, dim]) or table[c, :] + temb[b, c, :] (Wan2.1 / Wan2.2 A14B: temb [B, 6, dim]), summed in float32. */
typedef struct {
    const float *table;    /* the block's scale_shift_table [6, dim], float32 */
    const void *temb;      /* the transformer's timestep_proj, dense, [B, L, 6, dim] or [B, 6, dim] */
    int per_token;         /* 1: temb [B, L, 6, dim]; 0: [B, 6, dim] */
    w22_dtype temb_dtype;  /* W22_DTYPE_F32 or (_cuda only) W22_DTYPE_BF16 */
} w22_dit_mod;

/* A residual update followed by a LayerNorm (the block's norm1, norm2, norm3), dense [B, L, dim] rows:
 *   with y:    h_out = h + y * mod(gate_chunk) (gate non-NULL) or h + y (gate NULL)   [the new h]
 *   with out:  out = LN(new h, eps) [* norm_weight [+ norm_bias]] [* (1 + mod(shift_chunk + 1)) + mod(shift_chunk)]
 * Without y the new h is h (h_out must be NULL). h_out may be h (in place); out may be y, never h or h_out. */
typedef struct {
    int batch, len, dim;            /* B >= 1, L >= 1, 1 <= dim <= 32768 */
    float eps;                      /* the LayerNorm's eps (1e-6 in Wan), finite and >= 0 */
    const void *h;                  /* [B, L, dim] */
    void *h_out;                    /* [B, L, dim] with y; NULL without */
    const void *y;                  /* [B, L, dim] or NULL */
    const w22_dit_mod *gate;        /* NULL: h + y */
    int gate_chunk;                 /* 0..5 (2: gate_msa, 5: c_gate_msa) */
    void *out;                      /* [B, L, dim] or NULL: no norm */
    const float *norm_weight;       /* [dim] float32 or NULL (norm2's affine weight) */
    const float *norm_bias;         /* [dim] float32 or NULL; only with norm_weight */
    const w22_dit_mod *mod;         /* NULL: no modulation */
    int shift_chunk;                /* 0..4: shift = mod(shift_chunk), scale = mod(shift_chunk + 1) */
} w22_dit_resnorm;

W22_API w22_status w22_dit_resnorm_cpu(const w22_dit_resnorm *a);
W22_API w22_status w22_dit_resnorm_cuda(const w22_dit_resnorm *a, void *cuda_stream);

/* RMSNorm across all heads (torch.nn.RMSNorm(heads * head_dim, eps) of norm_q / norm_k / norm_added_k), then, with
 * cos and sin, RoPE within each head as diffusers' WanAttnProcessor applies WanRotaryPosEmbed's tables: for the
 * pair (x1, x2) = (n[2i], n[2i + 1]) of a head at token l, out[2i] = x1 cos[l, 2i] - x2 sin[l, 2i + 1] and
 * out[2i + 1] = x1 sin[l, 2i + 1] + x2 cos[l, 2i]. Rows (tokens) of x and out are `stride` elements apart (a view of
 * a fused QKV projection: 3 * dim); out may be x with the same stride (in place), else the two must not overlap. */
typedef struct {
    int batch, len, heads, head_dim;   /* x [B, L, heads * head_dim]; head_dim even with RoPE */
    float eps;                         /* RMSNorm's eps (1e-6 in Wan), finite and >= 0 */
    const void *x;
    long long x_stride;                /* elements from one token to the next, >= heads * head_dim */
    void *out;
    long long out_stride;
    const float *weight;               /* [heads * head_dim] float32, or NULL (no affine) */
    const float *cos, *sin;            /* [L, head_dim] float32 each, or both NULL: no RoPE */
} w22_dit_qknorm;

W22_API w22_status w22_dit_qknorm_cpu(const w22_dit_qknorm *a);
W22_API w22_status w22_dit_qknorm_cuda(const w22_dit_qknorm *a, void *cuda_stream);

#ifdef __cplusplus
}
#endif
#endif
