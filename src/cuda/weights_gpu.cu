/* The CUDA backend's weights, laid out on the GPU (issue 30: a decoder opens in about a second). A weight arrives in
 * its source dtype (F32, BF16, F16) from host memory or from a GPU's memory (w22_weights_from_device: a pipeline's
 * VAE already there never goes through the host); it is copied to the device once as it is, widened to float32
 * there, and the kernels below make the layouts that src/weights/layout.c defines on the host:
 *   conv:     [cout][cin][tap] -> [cout][tap][cin] bf16 (the GEMM's B, K-major);
 *   phases:   a 2D 3x3 conv's four upsample phases, taps summed per phase (cuda_internal.h);
 * What must hold: every byte equals the host function's (tests/cuda_ops.c compares them with layout.c for each
 * source dtype; bench/bits' hashes of whole decodes did not move). So the arithmetic is the host's in its order:
 * products and sums rounded one by one (__fmul_rn, __fadd_rn: no contraction into an FMA, which gcc does not do
 * on x86-64 either), and the same float -> bf16 rounding. The audit's sums of the uploaded buffers are taken here
 * too (exact: integer sums of 32-bit words). */
#include <stdlib.h>
#include "cuda_internal.h"
#include "weights/layout.h"

/* w22_f32_to_bf16 (common.h), bit for bit */
static __device__ __forceinline__ uint16_t f2bf(float f) {
    const uint32_t u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

__global__ void w22_wt_to_f32(const void *src, int dtype, size_t n, float *dst) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        if (dtype == W22_DTYPE_F32) dst[i] = ((const float *)src)[i];
        else if (dtype == W22_DTYPE_BF16) dst[i] = __uint_as_float((uint32_t)((const uint16_t *)src)[i] << 16);
        else dst[i] = __half2float(((const __half *)src)[i]);
    }
}

/* out[(o vol + t) cin + ci] = data[(o cin + ci) vol + t] */
__global__ void w22_wt_conv(const float *data, int cout, int cin, int vol, uint16_t *out) {
    const size_t n = (size_t)cout * cin * vol;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const int ci = (int)(i % cin);
        const size_t r = i / cin;
        const int t = (int)(r % vol), o = (int)(r / vol);
        out[i] = f2bf(data[((size_t)o * cin + ci) * vol + t]);
    }
}

/* layout.c's phase_part: out[((p cout + o) 4 + d) cin + ci], the taps [lo, hi] of phase p and offset d summed from
 * 0 in ky-major order */
__global__ void w22_wt_phases(const float *data, int cout, int cin, uint16_t *out) {
    const size_t n = (size_t)4 * cout * 4 * cin;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const int ci = (int)(i % cin);
        size_t r = i / cin;
        const int d = (int)(r % 4);
        r /= 4;
        const int o = (int)(r % cout), p = (int)(r / cout);
        const int py = p >> 1, px = p & 1, dy = d >> 1, dx = d & 1;
        const int ly = py ? (dy ? 2 : 0) : (dy ? 1 : 0), hy = py ? (dy ? 2 : 1) : (dy ? 2 : 0);
        const int lx = px ? (dx ? 2 : 0) : (dx ? 1 : 0), hx = px ? (dx ? 2 : 1) : (dx ? 2 : 0);
        const float *g = data + ((size_t)o * cin + ci) * 9;
        float sum = 0;
        for (int ky = ly; ky <= hy; ky++)
            for (int kx = lx; kx <= hx; kx++) sum = __fadd_rn(sum, g[ky * 3 + kx]);
        out[i] = f2bf(sum);
    }
}

/* w22_word_sum on the device: the 32-bit words' sum, the tail's bytes zero-padded (little-endian, as the host's
 * memcpy reads them) */
__global__ void w22_wt_word_sum(const unsigned char *p, size_t bytes, unsigned long long *sum) {
    unsigned long long s = 0;
    const size_t words = bytes / 4;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < words; i += (size_t)gridDim.x * blockDim.x)
        s += ((const uint32_t *)p)[i];
    if (blockIdx.x == 0 && threadIdx.x == 0)
        for (size_t k = words * 4; k < bytes; k++) s += (unsigned long long)p[k] << (8 * (k - words * 4));
    atomicAdd(sum, s);
}

/* The first NaN or Inf of x (n elements of dtype): atomicMin of its index into *first (n when none) */
__global__ void w22_wt_first_nonfinite(const void *x, int dtype, size_t n, unsigned long long *first) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        int bad;
        if (dtype == W22_DTYPE_F32) bad = (((const uint32_t *)x)[i] & 0x7fffffffu) >= 0x7f800000u;
        else if (dtype == W22_DTYPE_BF16) bad = (((const uint16_t *)x)[i] & 0x7fffu) >= 0x7f80u;
        else bad = (((const uint16_t *)x)[i] & 0x7fffu) >= 0x7c00u;
        if (bad) atomicMin(first, (unsigned long long)i);
    }
}

static unsigned grid_for(size_t n) {
    const size_t b = (n + 255) / 256;
    return (unsigned)(b < 4096 ? (b ? b : 1) : 4096);
}

/* A constant buffer made on the device: its sum for the audit (w22_cuda_upload does this for host data). */
static w22_status mark_constant(w22_cuda *c, void *dev, size_t bytes, unsigned long long *sum_dev) {
    CU_TRY(cudaMemsetAsync(sum_dev, 0, sizeof *sum_dev, c->stream));
    w22_wt_word_sum<<<grid_for(bytes / 4), 256, 0, c->stream>>>((const unsigned char *)dev, bytes, sum_dev);
    CU_LAUNCHED(c, "w22_wt_word_sum");
    unsigned long long sum = 0;
    CU_TRY(cudaMemcpyAsync(&sum, sum_dev, sizeof sum, cudaMemcpyDeviceToHost, c->stream));
    CU_TRY(cudaStreamSynchronize(c->stream));
    for (int i = c->nallocs - 1; i >= 0; i--)
        if (c->allocs[i].ptr == dev) {
            c->allocs[i].constant = 1, c->allocs[i].sum = sum;
            break;
        }
    return W22_OK;
}

/* The open's scratch: the source's bytes, the float32 copy, the audit's counter (one allocation, grown) */
static w22_status stage(w22_cuda *c, size_t n, size_t es, void **raw, float **f32, unsigned long long **sum) {
    const size_t raw_b = (n * es + 255) & ~(size_t)255, f_b = (n * 4 + 255) & ~(size_t)255;
    W22_TRY(w22_cuda_scratch(c, &c->wt_stage, &c->wt_stage_bytes, raw_b + f_b + 256, "the weights' staging"));
    *raw = c->wt_stage;
    *f32 = (float *)((char *)c->wt_stage + raw_b);
    *sum = (unsigned long long *)((char *)c->wt_stage + raw_b + f_b);
    return W22_OK;
}

extern "C" void w22_backend_cuda_weights_done(w22_backend *b) {
    w22_cuda *c = cuda_of(b);
    if (c->wt_stage) {
        cudaStreamSynchronize(c->stream);
        w22_cuda_free_ptr(c, c->wt_stage);
    }
    c->wt_stage = NULL;
    c->wt_stage_bytes = 0;
}

static w22_status made(w22_cuda *c, void **dev, size_t bytes, const char *what) {
    const double t0 = w22_now();
    const w22_status s = w22_cuda_malloc(c, bytes, dev, what);
    c->open_alloc_s += w22_now() - t0;
    return s;
}

w22_status w22_cuda_weight_make(w22_cuda *c, w22_cuda_weight *w, const w22_wsrc *src, size_t n, int phases) {
    const size_t es = w22_dtype_size(src->dtype);
    void *raw;
    float *f;
    unsigned long long *sum;
    W22_TRY(stage(c, n, es, &raw, &f, &sum));
    double t0 = w22_now();
    if (src->cuda_device < 0)
        CU_TRY(cudaMemcpyAsync(raw, src->data, n * es, cudaMemcpyHostToDevice, c->stream));
    else if (src->cuda_device == c->device)
        CU_TRY(cudaMemcpyAsync(raw, src->data, n * es, cudaMemcpyDeviceToDevice, c->stream));
    else
        CU_TRY(cudaMemcpyPeerAsync(raw, c->device, src->data, src->cuda_device, n * es, c->stream));
    /* the caller may free or change src once we return (pageable host memory is staged anyway) */
    CU_TRY(cudaStreamSynchronize(c->stream));
    c->open_copy_s += w22_now() - t0;
    t0 = w22_now();
    w22_wt_to_f32<<<grid_for(n), 256, 0, c->stream>>>(raw, (int)src->dtype, n, f);
    CU_LAUNCHED(c, "w22_wt_to_f32");
    if (w->kind == W22_WK_VECTOR) {
        w->bytes = n * sizeof(float);
        W22_TRY(made(c, &w->dev, w->bytes, "a weight vector"));
        CU_TRY(cudaMemcpyAsync(w->dev, f, w->bytes, cudaMemcpyDeviceToDevice, c->stream));
        W22_TRY(mark_constant(c, w->dev, w->bytes, sum));
        c->open_layout_s += w22_now() - t0;
        return W22_OK;
    }
    const int vol = w->kt * w->kh * w->kw;
    const size_t direct = n * 2;
    /* every conv in the direct layout, the Winograd convs' too: their components are made from it at each conv
     * (winograd.cu), so a conv's weights are one copy on the device whatever path takes it. A 3x3x3 conv of odd cout
     * (the Wan2.1 VAE's conv_out) gets one zero row of 9 cin after its weights: the head's partial-sums GEMM reads
     * its taps as 3 cout rows and runs one more for an even N (conv_psum.cu) */
    const size_t pad = vol == 27 && (w->cout & 1) ? (size_t)9 * w->cin * 2 : 0;
    W22_TRY(made(c, &w->dev, direct + pad, "a conv weight"));
    if (pad) CU_TRY(cudaMemsetAsync((char *)w->dev + direct, 0, pad, c->stream));
    w22_wt_conv<<<grid_for(n), 256, 0, c->stream>>>(f, w->cout, w->cin, vol, (uint16_t *)w->dev);
    CU_LAUNCHED(c, "w22_wt_conv");
    w->bytes = direct + pad;
    W22_TRY(mark_constant(c, w->dev, direct + pad, sum));
    if (phases) { /* a 2D 3x3 conv: its upsample phases */
        const size_t pn = (size_t)4 * w->cout * 4 * w->cin;
        W22_TRY(made(c, &w->dev_phase, pn * 2, "phase weights"));
        w22_wt_phases<<<grid_for(pn), 256, 0, c->stream>>>(f, w->cout, w->cin, (uint16_t *)w->dev_phase);
        CU_LAUNCHED(c, "w22_wt_phases");
        W22_TRY(mark_constant(c, w->dev_phase, pn * 2, sum));
        w->bytes += pn * 2;
    }
    c->open_layout_s += w22_now() - t0;
    return W22_OK;
}

/* ---- weights in GPU memory (w22_weights_from_device) ---- */

extern "C" w22_status w22_cuda_device_to_host(int device, void *dst, const void *src, size_t bytes) {
    CU_TRY(cudaSetDevice(device));
    CU_TRY(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
    return W22_OK;
}

extern "C" w22_status w22_cuda_first_nonfinite(int device, const void *x, w22_dtype t, size_t n, size_t *first) {
    CU_TRY(cudaSetDevice(device));
    cudaPointerAttributes at;
    CU_TRY(cudaPointerGetAttributes(&at, x));
    if (at.type != cudaMemoryTypeDevice && at.type != cudaMemoryTypeManaged)
        return w22_fail(W22_ERR_INVALID_ARG, "the tensor at %p is not in GPU memory", x);
    if (at.device != device)
        return w22_fail(W22_ERR_INVALID_ARG, "the tensor at %p is in the memory of GPU %d, expected GPU %d", x,
                        at.device, device);
    unsigned long long *d = NULL, h = n;
    CU_TRY(cudaMalloc(&d, sizeof *d));
    cudaError_t e = cudaMemcpy(d, &h, sizeof h, cudaMemcpyHostToDevice);
    if (e == cudaSuccess) {
        w22_wt_first_nonfinite<<<grid_for(n), 256>>>(x, (int)t, n, d);
        e = cudaGetLastError();
    }
    if (e == cudaSuccess) e = cudaMemcpy(&h, d, sizeof h, cudaMemcpyDeviceToHost);
    cudaFree(d);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return w22_fail(W22_ERR_CUDA, "scanning a weight on GPU %d: %s", device, cudaGetErrorString(e));
    }
    *first = (size_t)h;
    return W22_OK;
}
