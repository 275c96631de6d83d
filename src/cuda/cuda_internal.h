/* Internals shared by the CUDA backend's files: the backend's state, error macros that turn CUDA failures into
 * w22 statuses, the prepared-weight struct, and the GEMM description every matrix op is lowered to. */
#ifndef W22_CUDA_INTERNAL_H
#define W22_CUDA_INTERNAL_H

#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <string.h>

extern "C" {
#include "common.h"
#include "backend.h"
}

#include "mm.h" /* w22_mm: the matrix product every conv and attention GEMM is lowered to */
#include "route.h" /* which kernel a GEMM runs on: one place, pure, CPU-tested (tests/test_route.c) */


typedef struct {
    void *ptr;
    size_t bytes;
    unsigned long long sum; /* constant buffers (w22_cuda_upload's): the sum of its 32-bit words, for audit */
    int constant;
} w22_cuda_alloc_rec;

typedef struct w22_cuda_prof w22_cuda_prof; /* profile.cu */

typedef struct {
    int device;
    cudaStream_t own_stream, stream; /* stream: where work goes (own_stream or the caller's) */
    /* side_begin/end/join (backend.h): a second stream, and the main stream while the side one is current */
    cudaStream_t side, main_stream;
    cudaEvent_t ev_fork, ev_side_done;
    int on_side;
    int smem_optin;                  /* max dynamic shared memory per block */
    int sms;                         /* streaming multiprocessors (a persistent grid's size) */
    int tma_clusters;                /* clusters of 2 of the TMA conv that fit at once (0: none) */
    int debug;                       /* W22_CUDA_DEBUG=1: sync after each op, check views against allocations */
    size_t bytes, peak;
    w22_cuda_alloc_rec *allocs;      /* live allocations (pointer -> size), for the byte count and debug checks */
    int nallocs, cap_allocs;
    /* attention scratch: scores (fp32), probabilities (bf16), V transposed (bf16) */
    void *attn_scratch;
    size_t attn_bytes;
    size_t attn_max; /* the most scratch the attention allocates of its own (0: W22_ATTN_OWN_MAX, attention.cu) */
    const char *last_path; /* the kernel the last GEMM ran on (static string) */
    w22_route route;       /* the last conv's decision (route.h) and launches: w22_backend_cuda_last_route */
    /* The TMA conv's split tail (conv_sm90_wgmma_tma.cu): partial accumulators of the split tiles' pieces and,
     * after them, the tiles' arrival counts. Allocated at the first split launch. */
    void *split_part;
    /* 1 after w22_cuda_wgmma_init: qualifying GEMMs run on the wgmma conv (conv_sm90_wgmma.cu), whose tensor maps
     * are made by the driver's cuTensorMapEncodeTiled (entry point fetched through cudart). */
    int use_wgmma;
    /* The kernel path (route.h, w22_route_path), taken at create: 1 the Hopper path (sm_90: the sm_90a kernels), 0 the
     * portable one (any sm_80+ GPU, or a Hopper asked for it: w22_decoder_params.kernels, W22_KERNELS=portable).
     * Only the Hopper path sets up or launches a Hopper-only kernel (they have no image for another GPU). */
    int hopper;
    int cc_major, cc_minor; /* the GPU's compute capability */
    int rows2d_blocks;      /* the 2D tiles' persistent blocks per SM (conv_rows2d.cu): 1, or on the portable path as
                             * many of its 2-stage blocks as fit (2 where an SM holds 2 x 95 KB) */
    char path_words[160];   /* the path in words, for W22_PROFILE's table (w22_cuda_path_words) */
    int wino_min; /* the 3x3x3 convs with cin and cout >= wino_min run as Winograd (winograd.cu, read at each conv);
                   * 0: none (exact). From W22_WINOGRAD at create; w22_backend_cuda_set_exact */
    void *tmap_encode;
    w22_cuda_prof *prof; /* W22_PROFILE=1: per-op timing (profile.cu); NULL: off */
    void *tmap_im2col; /* cuTensorMapEncodeIm2col, for the TMA conv's pixel loads (conv_sm90_wgmma_tma.cu) */
    void *wino_scratch; /* W22_WINOGRAD's V and M (winograd.cu), grown to the largest conv; NULL: none yet */
    size_t wino_bytes;
    void *wino_u; /* a Winograd conv's 36 fp16 components U, made from its direct weights at each conv (winograd.cu),
                   * grown to the largest conv's; NULL: none yet */
    size_t wino_u_bytes;
    void *ident[4]; /* bf16 identities [ident_n][ident_n], one per n: a residual's weights as extra K */
    int ident_n[4]; /* (conv_sm90_wgmma_tma.cu's identity_weights; W22_IDENT_MAX of them) */
    unsigned long long *inspect_count; /* the checking mode's two counters (move.cu's inspect); NULL: none yet */
    void *audit_buf;                   /* the audit's table of constant buffers and their sums (move.cu) */
    size_t audit_bytes;
    /* W22_PROFILE: the open's seconds in the source copies and in the layouts (weights_gpu.cu); of the layouts',
     * those in cudaMalloc and those taking the Winograd convs' direct weights to the host */
    double open_layout_s, open_copy_s, open_alloc_s;
    cudaEvent_t ev_host[2]; /* to_host_begin's copies, per slot (made at the first) */
    /* copy_begin / copy_wait (backend.h): streams into and out of the device, the main stream's fork point, and per
     * tag the event after its last copy (made at the first copy) */
    cudaStream_t copy_in, copy_out;
    cudaEvent_t ev_copy_fork, ev_copy[W22_COPY_TAGS];
    void *wt_stage; /* the open's staging (weights_gpu.cu): a weight's source bytes and float32 copy; freed by */
    size_t wt_stage_bytes; /* w22_backend_cuda_weights_done */
} w22_cuda;

/* A weight in this backend's layout. Conv: [cout][kt][kh][kw][cin] bf16 (the GEMM's B operand, K-major);
 * vector: fp32 [n]. */
typedef struct {
    w22_weight_kind kind;
    void *dev;
    size_t bytes;
    int cout, cin, kt, kh, kw; /* conv */
    int n;                     /* vector */
    /* 2D 3x3 convs (the upsamplers'): the four output phases of nearest-2x + 3x3 as 2x2 convs on the low-resolution
     * input, weights summed per phase: [phase py*2+px][cout][2][2][cin] bf16. 16 taps instead of 36 per 2x2 block
     * of outputs: the same function with 4/9 of the work. */
    void *dev_phase;
} w22_cuda_weight;

static inline w22_cuda *cuda_of(w22_backend *b) { return (w22_cuda *)b->impl; }

/* A failed CUDA call: clears the (non-sticky) error and records which call failed and why. */
#define CU_TRY(call)                                                                                       \
    do {                                                                                                   \
        cudaError_t cu_e_ = (call);                                                                        \
        if (cu_e_ != cudaSuccess) {                                                                        \
            (void)cudaGetLastError();                                                                      \
            return w22_fail(W22_ERR_CUDA, "%s failed: %s (%s) at %s:%d", #call, cudaGetErrorString(cu_e_), \
                            cudaGetErrorName(cu_e_), __FILE__, __LINE__);                                  \
        }                                                                                                  \
    } while (0)

/* After a kernel launch: launch errors now, execution errors at once in debug mode. */
#define CU_LAUNCHED(c, what)                                                                                \
    do {                                                                                                    \
        w22_status cu_s_ = w22_cuda_after_launch((c), (what), __FILE__, __LINE__);                          \
        if (cu_s_ != W22_OK) return cu_s_;                                                                  \
    } while (0)

w22_status w22_cuda_after_launch(w22_cuda *c, const char *what, const char *file, int line);
/* Device memory with tracking; OOM is W22_ERR_OUT_OF_MEMORY with the free bytes. */
w22_status w22_cuda_malloc(w22_cuda *c, size_t bytes, void **ptr, const char *what);
/* w22_cuda_malloc, then a copy of `bytes` from host, in the order of the backend's stream and complete on return
 * (kernels queued after it see it, whatever stream the caller's copies go on); on a failed copy nothing stays
 * allocated (*dev NULL) */
w22_status w22_cuda_upload(w22_cuda *c, void **dev, const void *host, size_t bytes, const char *what);
/* weights_gpu.cu: weight w (kind and conv dims set) from n elements of src, laid out on the GPU: a vector as fp32,
 * a conv's direct layout, and with phases a 2D 3x3 conv's upsample phases too. Each buffer's audit sum recorded. */
w22_status w22_cuda_weight_make(w22_cuda *c, w22_cuda_weight *w, const w22_wsrc *src, size_t n, int phases);
void w22_cuda_free_ptr(w22_cuda *c, void *ptr);
/* A grow-only scratch (*ptr of *bytes): at least `need` bytes, the old one freed after the stream's queued work */
w22_status w22_cuda_scratch(w22_cuda *c, void **ptr, size_t *bytes, size_t need, const char *what);
/* Debug mode: a view (plus `border` rows/cols around it) must lie inside the allocation that holds its first
 * element, when that allocation is this backend's. */
w22_status w22_cuda_check_view(w22_cuda *c, const w22_view *v, int border, const char *what);
/* The sum of a buffer's 32-bit words (the tail's bytes zero-padded): what audit compares a constant buffer with. */
unsigned long long w22_word_sum(const void *p, size_t bytes);

#define W22_IDENT_MAX 4

/* Input frame j of a GEMM's window (see a_hist). */
static __host__ __device__ __forceinline__ const bf16 *w22_gemm_frame(const w22_mm &g, int j) {
    /* no dynamic index into the param array: that could make the kernel copy its parameters to local memory */
    return j < g.hist_n ? (j == 0 ? g.a_hist[0] : g.a_hist[1]) : g.a + (long)(j - g.hist_n) * g.a_sf;
}

/* Runs the GEMM on the tensor cores when its shape allows (conv_sm90_mma.cu), else the scalar kernel. */
w22_status w22_cuda_gemm(w22_cuda *c, const w22_mm *g, const char *what);
/* An upsample conv's four phase GEMMs q[py 2 + px] (each phases 0): one launch of the TMA wgmma kernel where it takes
 * them (route.h's w22_route_phases_blocker), else four w22_cuda_gemm calls. */
w22_status w22_cuda_gemm_phases(w22_cuda *c, const w22_mm q[4], const char *what);
w22_status w22_cuda_gemm_scalar(w22_cuda *c, const w22_mm *g, const char *what);
/* conv_rows2d.cu: the centred 3x3(x3) convs of N <= 48 (N <= 16 on the portable path) from 6 rows on (conv_out's
 * partial sums): its init and launch (for the path's tiles) */
w22_status w22_cuda_rows2d_init(w22_cuda *c);
w22_status w22_cuda_gemm_rows2d(w22_cuda *c, const w22_mm *g, const char *what);
/* conv_psum.cu: the conv op with w22_conv_args.psum (the causal history as partial sums): a GEMM of the three
 * temporal taps into psum_tmp, then the combine with the state. */
w22_status w22_cuda_conv_psum(w22_backend *b, const w22_conv_args *a);
/* W22_WINOGRAD=N (winograd.cu): the default threshold, 3x3x3 convs with cin and cout >= N as Winograd F(4x4, 3x3)
 * (when unset route.h's w22_route_wino_min_default for the path; 0: off). A backend takes it at create
 * (w22_cuda.wino_min). */
int w22_cuda_winograd_min_cin(int hopper);
const char *w22_cuda_winograd_blocker(const w22_cuda *c, const w22_conv_args *a, const w22_cuda_weight *w);
w22_status w22_cuda_conv_winograd(w22_cuda *c, const w22_conv_args *a, const w22_cuda_weight *w, const w22_mm *g);
/* The batch GEMM (w22_mm.batch) as one launch of the mma.sync kernel (route.h's w22_route_mma_batch_blocker passed;
 * conv_sm90_mma.cu) */
w22_status w22_cuda_gemm_mma_batch(w22_cuda *c, const w22_mm *g, const char *what);
/* The batch GEMM (w22_mm.batch) on the TMA wgmma kernel (route.h's w22_route_batch: W22_BATCH_TMA) */
w22_status w22_cuda_gemm_wgmma_batch(w22_cuda *c, const w22_mm *g, const char *what);
#define W22_WINO_FRAMES 8 /* input frames per launch of the Winograd input transform */
w22_status w22_cuda_wino_in(cudaStream_t st, const bf16 *const *x, int nf, long xsh, long xsw, __half *v, long vcs,
                            long vsf, long vsh, long vsw, int h4, int w4, int hv, int wv, int C);
w22_status w22_cuda_wino_out(cudaStream_t st, const __half *m, long mcs, long msf, long msh, long msw, bf16 *y,
                             long ysf, long ysh, long ysw, const bf16 *res, long rsf, long rsh, long rsw,
                             const float *bias, int F, int h4, int w4, int ho, int wo, int C);
/* Dynamic shared memory attributes of the tensor-core kernels (once, at create). */
w22_status w22_cuda_gemm_init(w22_cuda *c);
/* The op table (cuda_backend.cu), and W22_PROFILE=1's timed one that wraps it (profile.cu). */
extern const w22_backend_ops w22_cuda_ops_plain;
w22_status w22_cuda_prof_init(w22_backend *b);
const char *w22_cuda_path_words(const w22_cuda *c);
/* W22_PROFILE=2's parts of an op: begin returns a handle (0 when parts are off: end then does nothing), end records
 * the part under its key (printf-style) with its FLOPs and bytes */
int w22_cuda_prof_part_begin(w22_cuda *c);
void w22_cuda_prof_part_end(w22_cuda *c, int part, double flops, double bytes, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* The wgmma kernel (conv_sm90_wgmma.cu): its init (attributes, driver entry point; sets use_wgmma) and the launch
 * of a GEMM route.h gives it (w22_route_gemm: W22_GEMM_TMA). */
w22_status w22_cuda_wgmma_init(w22_cuda *c);
int w22_cuda_wgmma_tma_on(const w22_cuda *c); /* the TMA's im2col encoder is there (conv_sm90_wgmma_tma.cu) */
w22_status w22_cuda_gemm_wgmma(w22_cuda *c, const w22_mm *g, const char *what);
/* The four phase GEMMs q[0..3] as one launch, where route.h's w22_route_phases_blocker takes them
 * (conv_sm90_wgmma_tma.cu). */
w22_status w22_cuda_gemm_wgmma_phases(w22_cuda *c, const w22_mm q[4], const char *what);

/* Every op starts here: the calling thread may not have the backend's GPU current (one thread per rank). */
#define CU_ENTER(c) CU_TRY(cudaSetDevice((c)->device))

#endif
