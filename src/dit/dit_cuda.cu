/* The DiT passes on the GPU (include/wan22vae.h, "DiT"): bf16 activations, float32 arithmetic where diffusers'
 * WanTransformerBlock computes in float32, bf16 roundings where it rounds.
 *
 * One block of threads per token row: the row (dim <= 32768 float32 values) is kept in shared memory between the
 * passes, so the activations are read once from DRAM and written once; the statistics are block reductions in
 * float32, two passes (mean, then the squared deviations) over the shared copy. Loads and stores are 16 bytes
 * (8 elements) where every pointer, row stride and dim allow it, else 2 or 1 element(s). Each thread reads back only
 * the shared elements it wrote, and every global read of a row happens before the reduction's barrier, so the
 * in-place forms the header allows (h_out == h, out == y, qknorm's out == x) are safe.
 *
 * Rounding points, as diffusers 0.42.1 has them (dtype flow of WanTransformerBlock.forward, bf16 module):
 *   mod(c)      = table[c] + float(temb[c])                      float32 (scale_shift_table + temb.float())
 *   residual    = bf16(h + y * mod(gate))                        (h.float() + y * gate).type_as(h)
 *               = bf16(h + y)                                    bf16 + bf16 (cross-attention's residual)
 *   norm        = LN(float(new h)), then * w + b, or * (1 + scale) + shift, each step rounded to float32, then
 *                 one rounding to bf16                           (norm(h.float()) * (1 + s) + shift).type_as(h)
 *   qknorm      = bf16(x * rstd * w)                             torch's fused RMSNorm: one rounding
 *   rope        = bf16(x1 cos - x2 sin), bf16(x1 sin + x2 cos)   on the normalized bf16 values (diffusers computes
 *                                                                in the tables' float64/32; float32 here)
 * __fadd_rn / __fmul_rn keep the modulation's steps separately rounded (no contraction into FMA), as torch's
 * separate elementwise kernels round them. */
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
extern "C" {
#include "common.h"
}
#include "dit/dit.h"

typedef __nv_bfloat16 bf16;

struct dit_mod_dev {
    const float *table;
    const void *temb;
    int per_token, temb_bf16;
};

struct resnorm_dev {
    int L, dim;
    float eps;
    const bf16 *h;
    bf16 *h_out;
    const bf16 *y;
    int has_gate, gate_chunk;
    dit_mod_dev gate;
    bf16 *out;
    const float *w, *b;
    int has_mod, shift_chunk;
    dit_mod_dev mod;
};

struct qknorm_dev {
    int L, dim, head_dim;
    float eps;
    const bf16 *x;
    long long xs;
    bf16 *out;
    long long os;
    const float *w, *cos, *sin;
};

template <int V> static __device__ __forceinline__ void ld_bf16(const bf16 *p, float *v) {
    if (V == 8) {
        uint4 u = *(const uint4 *)p;
        const __nv_bfloat162 *h2 = (const __nv_bfloat162 *)&u;
#pragma unroll
        for (int k = 0; k < 4; k++) {
            float2 f = __bfloat1622float2(h2[k]);
            v[2 * k] = f.x, v[2 * k + 1] = f.y;
        }
    } else if (V == 2) {
        float2 f = __bfloat1622float2(*(const __nv_bfloat162 *)p);
        v[0] = f.x, v[1] = f.y;
    } else {
        v[0] = __bfloat162float(*p);
    }
}

template <int V> static __device__ __forceinline__ void st_bf16(bf16 *p, const float *v) {
    if (V == 8) {
        uint4 u;
        __nv_bfloat162 *h2 = (__nv_bfloat162 *)&u;
#pragma unroll
        for (int k = 0; k < 4; k++) h2[k] = __floats2bfloat162_rn(v[2 * k], v[2 * k + 1]);
        *(uint4 *)p = u;
    } else if (V == 2) {
        *(__nv_bfloat162 *)p = __floats2bfloat162_rn(v[0], v[1]);
    } else {
        *p = __float2bfloat16_rn(v[0]);
    }
}

template <int V> static __device__ __forceinline__ void ld_f32(const float *p, float *v) {
    if (V == 8) {
        float4 a = *(const float4 *)p, b = *(const float4 *)(p + 4);
        v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
    } else if (V == 2) {
        float2 a = *(const float2 *)p;
        v[0] = a.x, v[1] = a.y;
    } else {
        v[0] = *p;
    }
}

static __device__ __forceinline__ float round_bf16(float v) { return __bfloat162float(__float2bfloat16_rn(v)); }

/* mod(c) of token (b, row) at elements [i, i + V): table[c] + temb, in float32 */
template <int V>
static __device__ __forceinline__ void ld_mod(const dit_mod_dev &m, long long row, int b, int c, int dim, int i,
                                              float *v) {
    float t[V], e[V];
    ld_f32<V>(m.table + (size_t)c * dim + i, t);
    size_t off = ((m.per_token ? (size_t)row * 6 : (size_t)b * 6) + c) * (size_t)dim + i;
    if (m.temb_bf16)
        ld_bf16<V>((const bf16 *)m.temb + off, e);
    else
        ld_f32<V>((const float *)m.temb + off, e);
#pragma unroll
    for (int k = 0; k < V; k++) v[k] = __fadd_rn(t[k], e[k]);
}

/* The sum of v over the block (blockDim.x a multiple of 32), in every thread. red: 32 floats of shared memory. */
static __device__ __forceinline__ float block_sum(float v, float *red) {
#pragma unroll
    for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    const int w = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
    __syncthreads(); /* red's previous readers are done */
    if (lane == 0) red[w] = v;
    __syncthreads();
    v = lane < nw ? red[lane] : 0.f;
#pragma unroll
    for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

template <int V> __global__ void __launch_bounds__(1024) w22_dit_resnorm_kernel(resnorm_dev a) {
    extern __shared__ float sv[];
    __shared__ float red[32];
    const long long row = blockIdx.x;
    const int b = (int)(row / a.L), dim = a.dim, nch = dim / V;
    const size_t off = (size_t)row * dim;
    float s = 0.f;
    for (int c = threadIdx.x; c < nch; c += blockDim.x) {
        const int i = c * V;
        float v[V];
        ld_bf16<V>(a.h + off + i, v);
        if (a.y) {
            float y[V];
            ld_bf16<V>(a.y + off + i, y);
            if (a.has_gate) {
                float g[V];
                ld_mod<V>(a.gate, row, b, a.gate_chunk, dim, i, g);
#pragma unroll
                for (int k = 0; k < V; k++) y[k] = __fmul_rn(y[k], g[k]);
            }
#pragma unroll
            for (int k = 0; k < V; k++) v[k] = round_bf16(__fadd_rn(v[k], y[k]));
            st_bf16<V>(a.h_out + off + i, v);
        }
#pragma unroll
        for (int k = 0; k < V; k++) sv[i + k] = v[k], s += v[k];
    }
    if (!a.out) return; /* uniform over the block */
    const float mean = block_sum(s, red) / dim;
    float q = 0.f;
    for (int c = threadIdx.x; c < nch; c += blockDim.x)
#pragma unroll
        for (int k = 0; k < V; k++) {
            float d = sv[c * V + k] - mean;
            q += d * d;
        }
    const float rstd = rsqrtf(block_sum(q, red) / dim + a.eps);
    for (int c = threadIdx.x; c < nch; c += blockDim.x) {
        const int i = c * V;
        float n[V];
#pragma unroll
        for (int k = 0; k < V; k++) n[k] = (sv[i + k] - mean) * rstd;
        if (a.w) {
            float w[V], bb[V];
            ld_f32<V>(a.w + i, w);
            if (a.b) ld_f32<V>(a.b + i, bb);
#pragma unroll
            for (int k = 0; k < V; k++) n[k] = a.b ? fmaf(n[k], w[k], bb[k]) : n[k] * w[k];
        }
        if (a.has_mod) {
            float sh[V], sc[V];
            ld_mod<V>(a.mod, row, b, a.shift_chunk, dim, i, sh);
            ld_mod<V>(a.mod, row, b, a.shift_chunk + 1, dim, i, sc);
#pragma unroll
            for (int k = 0; k < V; k++) n[k] = __fadd_rn(__fmul_rn(n[k], __fadd_rn(1.f, sc[k])), sh[k]);
        }
        st_bf16<V>(a.out + off + i, n);
    }
}

template <int V> __global__ void __launch_bounds__(1024) w22_dit_qknorm_kernel(qknorm_dev a) {
    extern __shared__ float sv[];
    __shared__ float red[32];
    const long long row = blockIdx.x;
    const int l = (int)(row % a.L), dim = a.dim, nch = dim / V, hd = a.head_dim;
    const bf16 *x = a.x + row * a.xs;
    bf16 *o = a.out + row * a.os;
    float s = 0.f;
    for (int c = threadIdx.x; c < nch; c += blockDim.x) {
        float v[V];
        ld_bf16<V>(x + c * V, v);
#pragma unroll
        for (int k = 0; k < V; k++) sv[c * V + k] = v[k], s += v[k] * v[k];
    }
    const float rstd = rsqrtf(block_sum(s, red) / dim + a.eps);
    for (int c = threadIdx.x; c < nch; c += blockDim.x) {
        const int i = c * V;
        float n[V];
#pragma unroll
        for (int k = 0; k < V; k++) n[k] = sv[i + k] * rstd;
        if (a.w) {
            float w[V];
            ld_f32<V>(a.w + i, w);
#pragma unroll
            for (int k = 0; k < V; k++) n[k] = __fmul_rn(n[k], w[k]);
        }
        if constexpr (V >= 2) if (a.cos) { /* the host takes V >= 2 with RoPE: pairs stay in a chunk and a head */
            float cs[V], sn[V];
            const int d = i % hd;
            ld_f32<V>(a.cos + (size_t)l * hd + d, cs);
            ld_f32<V>(a.sin + (size_t)l * hd + d, sn);
#pragma unroll
            for (int k = 0; k < V; k += 2) {
                const float x1 = round_bf16(n[k]), x2 = round_bf16(n[k + 1]);
                n[k] = x1 * cs[k] - x2 * sn[k + 1];
                n[k + 1] = x1 * sn[k + 1] + x2 * cs[k];
            }
        }
        st_bf16<V>(o + i, n);
    }
}

/* W22_CUDA_DEBUG=1 (as for the decoder): the stream synchronized after each pass, so that a fault names the pass. */
static int cuda_debug(void) {
    static int v = -1; /* a benign race: every thread computes the same value */
    if (v < 0) {
        const char *e = getenv("W22_CUDA_DEBUG");
        v = e && *e && strcmp(e, "0") != 0;
    }
    return v;
}

static w22_status launch_result(const char *fn, int V, long long rows, int threads, size_t smem, cudaStream_t st) {
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess && cuda_debug()) e = cudaStreamSynchronize(st);
    if (e != cudaSuccess)
        return w22_fail(W22_ERR_CUDA, "%s: kernel (%lld rows, %d threads, vector %d, %zu B shared): %s", fn, rows,
                        threads, V, smem, cudaGetErrorString(e));
    return W22_OK;
}

template <typename K> static w22_status smem_attr(K kernel, size_t smem, const char *fn) {
    if (smem <= 48 * 1024) return W22_OK;
    cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return w22_fail(W22_ERR_CUDA, "%s: %zu B of shared memory for a row: %s", fn, smem, cudaGetErrorString(e));
    }
    return W22_OK;
}

static int threads_for(int nch) {
    int t = (nch + 31) / 32 * 32;
    return t < 32 ? 32 : t > 1024 ? 1024 : t;
}

template <int V> static w22_status resnorm_run(const resnorm_dev &d, long long rows, cudaStream_t st) {
    const char *fn = "w22_dit_resnorm_cuda";
    const int threads = threads_for(d.dim / V);
    const size_t smem = (size_t)d.dim * sizeof(float);
    W22_TRY(smem_attr(w22_dit_resnorm_kernel<V>, smem, fn));
    w22_dit_resnorm_kernel<V><<<(unsigned)rows, threads, smem, st>>>(d);
    return launch_result(fn, V, rows, threads, smem, st);
}

template <int V> static w22_status qknorm_run(const qknorm_dev &d, long long rows, cudaStream_t st) {
    const char *fn = "w22_dit_qknorm_cuda";
    const int threads = threads_for(d.dim / V);
    const size_t smem = (size_t)d.dim * sizeof(float);
    W22_TRY(smem_attr(w22_dit_qknorm_kernel<V>, smem, fn));
    w22_dit_qknorm_kernel<V><<<(unsigned)rows, threads, smem, st>>>(d);
    return launch_result(fn, V, rows, threads, smem, st);
}

static dit_mod_dev mod_dev(const w22_dit_mod *m) {
    dit_mod_dev d = {NULL, NULL, 0, 0};
    if (m) d.table = m->table, d.temb = m->temb, d.per_token = m->per_token, d.temb_bf16 = m->temb_dtype == W22_DTYPE_BF16;
    return d;
}

w22_status w22_dit_resnorm_launch(const w22_dit_resnorm *a, void *stream) {
    resnorm_dev d;
    d.L = a->len, d.dim = a->dim, d.eps = a->eps;
    d.h = (const bf16 *)a->h, d.h_out = (bf16 *)a->h_out, d.y = (const bf16 *)a->y;
    d.has_gate = a->gate != NULL, d.gate_chunk = a->gate_chunk, d.gate = mod_dev(a->gate);
    d.out = (bf16 *)a->out, d.w = a->norm_weight, d.b = a->norm_bias;
    d.has_mod = a->mod != NULL, d.shift_chunk = a->shift_chunk, d.mod = mod_dev(a->mod);
    const long long rows = (long long)a->batch * a->len;
    cudaStream_t st = (cudaStream_t)stream;
    switch (w22_dit_resnorm_vector(a)) {
    case 8: return resnorm_run<8>(d, rows, st);
    case 2: return resnorm_run<2>(d, rows, st);
    default: return resnorm_run<1>(d, rows, st);
    }
}

w22_status w22_dit_qknorm_launch(const w22_dit_qknorm *a, void *stream) {
    qknorm_dev d;
    d.L = a->len, d.dim = a->heads * a->head_dim, d.head_dim = a->head_dim, d.eps = a->eps;
    d.x = (const bf16 *)a->x, d.xs = a->x_stride, d.out = (bf16 *)a->out, d.os = a->out_stride;
    d.w = a->weight, d.cos = a->cos, d.sin = a->sin;
    const long long rows = (long long)a->batch * a->len;
    cudaStream_t st = (cudaStream_t)stream;
    switch (w22_dit_qknorm_vector(a)) {
    case 8: return qknorm_run<8>(d, rows, st);
    case 2: return qknorm_run<2>(d, rows, st);
    case 1: return qknorm_run<1>(d, rows, st);
    default:
        return w22_fail(W22_ERR_INVALID_ARG, "w22_dit_qknorm_cuda: with RoPE x, out (4-byte aligned), their strides "
                        "(even) and cos, sin (8-byte aligned) must allow pairs of elements");
    }
}
