/* The DiT passes on the GPU (include/wan22vae.h, "DiT"): bf16 activations, float32 arithmetic where diffusers'
 * WanTransformerBlock computes in float32, bf16 roundings where it rounds.
 *
 * Two kernels each, chosen by dit.h's w22_dit_rows_plan (a pure function of dim and the vector width):
 * - registers (dim <= 8192, 4096 one element at a time: every Wan DiT, 1536 / 3072 / 5120): each thread holds one
 *   16-byte chunk of a row, or 4 pairs, or 4 single elements (chunk c at thread c % row_threads: coalesced),
 *   rows_per_block rows a block. Every streamed load of a row (h, y, the per-token temb chunks; qknorm's x and its
 *   token's cos / sin) is issued before any of them is used, as raw 32-bit words, so that the row pays its DRAM
 *   latency once, not once per pass; each statistic is a warp-shuffle sum, then one exchange of the warps' partials
 *   through shared memory (one barrier; the two reductions use separate slots). What the grid's rows share (the
 *   scale_shift_table's rows, the norm weights: L1 hits) is read where it is used, after the reductions: registers
 *   held across them bound the blocks an SM keeps in flight (sm_90: 40 a thread, 4 blocks of 384 at dim 3072).
 * - shared memory (larger dims, which no Wan model has, at any width): one block a row, the row (<= 32768 float32
 *   values) kept in shared memory between the passes.
 * Loads and stores are 16 bytes (8 elements) where every pointer, row stride and dim allow it, else 2 or 1
 * element(s) (w22_dit_*_vector). In both kernels every element of a row is read, and later written, by the same thread
 * (registers: its own chunks; shared memory: each thread reads back only what it wrote, and every global read
 * happens before the reduction's barrier), so the in-place forms the header allows (h_out == h, out == y, qknorm's
 * out == x) are safe. The statistics are two-pass (mean, then the squared deviations from it) in float32 in both.
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
    long long rows;                    /* B x L */
    int row_threads, rows_per_block;   /* the register kernel's layout (w22_dit_rows_plan) */
};

struct qknorm_dev {
    int L, dim, head_dim;
    float eps;
    const bf16 *x;
    long long xs;
    bf16 *out;
    long long os;
    const float *w, *cos, *sin;
    long long rows;
    int row_threads, rows_per_block;
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
    } else if (V == 4) {
        float4 a = *(const float4 *)p;
        v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w;
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

template <int V> __global__ void __launch_bounds__(1024) w22_dit_resnorm_smem(resnorm_dev a) {
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

template <int V> __global__ void __launch_bounds__(1024) w22_dit_qknorm_smem(qknorm_dev a) {
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

/* ---- the register kernels (w22_dit_rows_plan's per_thread > 0) ----
 *
 * A chunk of V elements as raw 32-bit words, loaded without being touched: bf16 rows take (V + 1) / 2 words (element
 * 2k in the low half of word k), float32 ones V. Nothing waits on a load until the row's last one has issued. CS: the
 * streaming hint (ld.global.cs, evict first) for data read once (the token's rows), so that the rows the whole grid
 * shares (tables, weights, per-batch temb) stay in L1 / L2. */
template <int V, bool CS> static __device__ __forceinline__ void ldw_bf16(const bf16 *p, uint32_t *r) {
    if (V == 8) {
        const uint4 u = CS ? __ldcs((const uint4 *)p) : *(const uint4 *)p;
        r[0] = u.x, r[1] = u.y, r[2] = u.z, r[3] = u.w;
    } else if (V == 2) {
        r[0] = CS ? __ldcs((const unsigned int *)p) : *(const unsigned int *)p;
    } else {
        r[0] = CS ? __ldcs((const unsigned short *)p) : *(const unsigned short *)p;
    }
}

template <int V, bool CS> static __device__ __forceinline__ void ldw_f32(const float *p, uint32_t *r) {
    if (V == 8) {
        const uint4 u = CS ? __ldcs((const uint4 *)p) : *(const uint4 *)p;
        const uint4 w = CS ? __ldcs((const uint4 *)(p + 4)) : *(const uint4 *)(p + 4);
        r[0] = u.x, r[1] = u.y, r[2] = u.z, r[3] = u.w, r[4] = w.x, r[5] = w.y, r[6] = w.z, r[7] = w.w;
    } else if (V == 2) {
        const uint2 u = CS ? __ldcs((const uint2 *)p) : *(const uint2 *)p;
        r[0] = u.x, r[1] = u.y;
    } else {
        r[0] = CS ? __ldcs((const unsigned int *)p) : *(const unsigned int *)p;
    }
}

template <int V> static __device__ __forceinline__ void cvw_bf16(const uint32_t *r, float *v) {
#pragma unroll
    for (int k = 0; k < V; k++) v[k] = __uint_as_float(k % 2 ? r[k / 2] & 0xffff0000u : r[k / 2] << 16);
}

template <int V> static __device__ __forceinline__ void cvw_f32(const uint32_t *r, float *v) {
#pragma unroll
    for (int k = 0; k < V; k++) v[k] = __uint_as_float(r[k]);
}

/* temb's chunk c of token (b, row) at elements [i, i + V), raw; TW words: (V + 1) / 2 when every temb is bf16 (the
 * kernel's TB), else V (either dtype, chosen at run time). A per-token temb is read once (streamed); a per-batch one
 * by every token of its batch (cached). */
template <int V, int TW>
static __device__ __forceinline__ void ldw_temb(const dit_mod_dev &m, int row, int b, int c, int dim,
                                                int i, uint32_t *r) {
    const size_t off = ((size_t)(m.per_token ? row : b) * 6 + c) * (size_t)dim + i;
    if (TW == V && !m.temb_bf16) {
        if (m.per_token) ldw_f32<V, true>((const float *)m.temb + off, r);
        else ldw_f32<V, false>((const float *)m.temb + off, r);
    } else {
        if (m.per_token) ldw_bf16<V, true>((const bf16 *)m.temb + off, r);
        else ldw_bf16<V, false>((const bf16 *)m.temb + off, r);
    }
}

/* mod(c) = table[c] + temb in float32 (as ld_mod) at elements [i + h0, i + h0 + S) of a chunk [i, i + V) whose temb
 * is r (raw, from ldw_temb); h0 a multiple of S (4, 2 or 1: the sub-chunks of step 2 and 4) */
template <int V, int TW, int S>
static __device__ __forceinline__ void mod_of(const dit_mod_dev &m, int c, int dim, int i, const uint32_t *r, int h0,
                                              float *v) {
    float t[S], e[S];
    ld_f32<S>(m.table + (size_t)c * dim + i + h0, t);
    if (TW == V && !m.temb_bf16) cvw_f32<S>(r + h0, e);
    else cvw_bf16<S>(r + h0 / 2, e);
#pragma unroll
    for (int k = 0; k < S; k++) v[k] = __fadd_rn(t[k], e[k]);
}

static __device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v; /* the xor butterfly: every lane adds the same pairs (commuted), so every lane holds the same sum */
}

/* The sum of v over the nw warps of this thread's row (nw consecutive warps of the block), in each of them. Every
 * thread of the block calls it (one barrier); red: 32 floats of shared memory this call alone uses. */
static __device__ __forceinline__ float row_sum(float v, float *red, int nw) {
    v = warp_sum(v);
    const int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (lane == 0) red[w] = v;
    __syncthreads();
    v = lane < nw ? red[w / nw * nw + lane] : 0.f;
    return warp_sum(v);
}

/* V floats, exact in bf16, to raw words (as ldw_bf16 lays them) and raw words to memory */
template <int V> static __device__ __forceinline__ void pack_bf16(const float *v, uint32_t *r) {
    if (V == 1) {
        r[0] = __bfloat16_as_ushort(__float2bfloat16_rn(v[0]));
    } else {
#pragma unroll
        for (int k = 0; k < V; k += 2) {
            const __nv_bfloat162 h2 = __floats2bfloat162_rn(v[k], v[k + 1]);
            r[k / 2] = *(const uint32_t *)&h2;
        }
    }
}

template <int V> static __device__ __forceinline__ void stw_bf16(bf16 *p, const uint32_t *r) {
    if (V == 8) *(uint4 *)p = make_uint4(r[0], r[1], r[2], r[3]);
    else if (V == 2) *(unsigned int *)p = r[0];
    else *(unsigned short *)p = (unsigned short)r[0];
}

/* resnorm, a row in registers: V elements a chunk, NCH chunks a thread (w22_dit_rows_plan), TB: every temb bf16.
 * Registers are what bounds the blocks an SM holds (~1-2 KB of loads in flight a warp), so what waits across the
 * reductions is kept small: the new h as bf16 words (it is exact in bf16), shift and scale as temb's raw words; the
 * scale_shift_table's rows and the norm's weights, which every row of the grid reads (L1 / L2 hits), are read after
 * the reductions. */
template <int V, int NCH, int TB> __global__ void __launch_bounds__(1024) w22_dit_resnorm_regs(resnorm_dev a) {
    constexpr int HW = (V + 1) / 2, TW = TB ? HW : V;
    __shared__ float red[2][32];
    const int T = a.row_threads, g = threadIdx.x / T, t = threadIdx.x - g * T;
    const long long row0 = (long long)blockIdx.x * a.rows_per_block + g;
    const bool live = row0 < a.rows;
    const int row = live ? (int)row0 : 0, b = row / a.L; /* B x L <= INT32_MAX (checked) */
    const int dim = a.dim, nch = dim / V;
    const size_t off = (size_t)row * dim;
    const bool norm = a.out != nullptr, mod = norm && a.has_mod;
    bool ok[NCH];
    /* 1. the row's streamed loads, all issued before any is used. ra, rb: the gate's temb, or shift's and scale's
     * (with a gate and a modulation both, which no Wan block has, shift and scale are read after the new h) */
    uint32_t rh[NCH][HW], ry[NCH][HW], ra[NCH][TW], rb[NCH][TW];
    const bool gate = a.y && a.has_gate, mod_early = mod && !gate;
#pragma unroll
    for (int j = 0; j < NCH; j++) {
        const int c = t + j * T, i = c * V;
        ok[j] = live && c < nch;
        if (!ok[j]) continue;
        ldw_bf16<V, true>(a.h + off + i, rh[j]);
        if (a.y) ldw_bf16<V, true>(a.y + off + i, ry[j]);
        if (gate) ldw_temb<V, TW>(a.gate, row, b, a.gate_chunk, dim, i, ra[j]);
        if (mod_early) {
            ldw_temb<V, TW>(a.mod, row, b, a.shift_chunk, dim, i, ra[j]);
            ldw_temb<V, TW>(a.mod, row, b, a.shift_chunk + 1, dim, i, rb[j]);
        }
    }
    /* 2. the new h = bf16(h + y * mod(gate)), kept as bf16 words (rh), S elements at a time as in 4. */
    constexpr int S = V < 4 ? V : 4;
    if (a.y) {
#pragma unroll
        for (int j = 0; j < NCH; j++) {
            const int i = (t + j * T) * V;
            if (!ok[j]) continue;
#pragma unroll
            for (int h0 = 0; h0 < V; h0 += S) {
                float v[S], y[S];
                cvw_bf16<S>(rh[j] + h0 / 2, v);
                cvw_bf16<S>(ry[j] + h0 / 2, y);
                if (gate) {
                    float gm[S];
                    mod_of<V, TW, S>(a.gate, a.gate_chunk, dim, i, ra[j], h0, gm);
#pragma unroll
                    for (int k = 0; k < S; k++) y[k] = __fmul_rn(y[k], gm[k]);
                }
#pragma unroll
                for (int k = 0; k < S; k++) v[k] = __fadd_rn(v[k], y[k]);
                pack_bf16<S>(v, rh[j] + h0 / 2); /* the one rounding to bf16 */
            }
            stw_bf16<V>(a.h_out + off + i, rh[j]);
        }
    }
    if (mod && gate)
#pragma unroll
        for (int j = 0; j < NCH; j++) {
            const int i = (t + j * T) * V;
            if (!ok[j]) continue;
            ldw_temb<V, TW>(a.mod, row, b, a.shift_chunk, dim, i, ra[j]);
            ldw_temb<V, TW>(a.mod, row, b, a.shift_chunk + 1, dim, i, rb[j]);
        }
    if (!norm) return; /* uniform over the grid */
    /* 3. the statistics, two-pass (threads past the row's end add nothing) */
    const int nw = T >> 5;
    float s = 0.f;
#pragma unroll
    for (int j = 0; j < NCH; j++)
        if (ok[j]) {
            float v[V];
            cvw_bf16<V>(rh[j], v);
#pragma unroll
            for (int k = 0; k < V; k++) s += v[k];
        }
    const float mean = row_sum(s, red[0], nw) / dim;
    float q = 0.f;
#pragma unroll
    for (int j = 0; j < NCH; j++)
        if (ok[j]) {
            float v[V];
            cvw_bf16<V>(rh[j], v);
#pragma unroll
            for (int k = 0; k < V; k++) {
                const float d = v[k] - mean;
                q += d * d;
            }
        }
    const float rstd = rsqrtf(row_sum(q, red[1], nw) / dim + a.eps);
    /* 4. the norm, its affine, the modulation, S elements at a time (the tables' loads of a chunk would otherwise
     * all be in flight at once: registers); out may be y (read in 1.) */
#pragma unroll
    for (int j = 0; j < NCH; j++) {
        const int i = (t + j * T) * V;
        if (!ok[j]) continue;
        uint32_t ro[HW];
#pragma unroll
        for (int h0 = 0; h0 < V; h0 += S) {
            float n[S];
            cvw_bf16<S>(rh[j] + h0 / 2, n);
#pragma unroll
            for (int k = 0; k < S; k++) n[k] = (n[k] - mean) * rstd;
            if (a.w) {
                float w[S], bb[S];
                ld_f32<S>(a.w + i + h0, w);
                if (a.b) ld_f32<S>(a.b + i + h0, bb);
#pragma unroll
                for (int k = 0; k < S; k++) n[k] = a.b ? fmaf(n[k], w[k], bb[k]) : n[k] * w[k];
            }
            if (mod) {
                float sh[S], sc[S];
                mod_of<V, TW, S>(a.mod, a.shift_chunk + 1, dim, i, rb[j], h0, sc);
                mod_of<V, TW, S>(a.mod, a.shift_chunk, dim, i, ra[j], h0, sh);
#pragma unroll
                for (int k = 0; k < S; k++) n[k] = __fadd_rn(__fmul_rn(n[k], __fadd_rn(1.f, sc[k])), sh[k]);
            }
            pack_bf16<S>(n, ro + h0 / 2);
        }
        stw_bf16<V>(a.out + off + i, ro);
    }
}

/* qknorm, a row in registers (as resnorm's): x streamed, and the token's cos / sin (a row of each a token, read by
 * every head: DRAM for the first, L1 for the others) loaded with it, before the reduction; the weight (the grid's
 * one row: L1) after it. */
template <int V, int NCH> __global__ void __launch_bounds__(1024) w22_dit_qknorm_regs(qknorm_dev a) {
    constexpr int HW = (V + 1) / 2;
    __shared__ float red[32];
    const int T = a.row_threads, g = threadIdx.x / T, t = threadIdx.x - g * T;
    const long long row0 = (long long)blockIdx.x * a.rows_per_block + g;
    const bool live = row0 < a.rows;
    const int row = live ? (int)row0 : 0; /* B x L <= INT32_MAX (checked) */
    const int l = row % a.L, dim = a.dim, nch = dim / V, hd = a.head_dim;
    const bf16 *x = a.x + (long long)row * a.xs;
    bf16 *o = a.out + (long long)row * a.os;
    bool ok[NCH];
    uint32_t rx[NCH][HW];
    float cs[NCH][V], sn[NCH][V];
#pragma unroll
    for (int j = 0; j < NCH; j++) {
        const int c = t + j * T, i = c * V;
        ok[j] = live && c < nch;
        if (!ok[j]) continue;
        ldw_bf16<V, true>(x + i, rx[j]);
        if constexpr (V >= 2) if (a.cos) { /* the host takes V >= 2 with RoPE: pairs stay in a chunk and a head */
            const int d = i % hd;
            ld_f32<V>(a.cos + (size_t)l * hd + d, cs[j]);
            ld_f32<V>(a.sin + (size_t)l * hd + d, sn[j]);
        }
    }
    float v[NCH][V], s = 0.f;
#pragma unroll
    for (int j = 0; j < NCH; j++) {
        if (ok[j]) cvw_bf16<V>(rx[j], v[j]);
        else
#pragma unroll
            for (int k = 0; k < V; k++) v[j][k] = 0.f;
#pragma unroll
        for (int k = 0; k < V; k++) s += v[j][k] * v[j][k];
    }
    const float rstd = rsqrtf(row_sum(s, red, T >> 5) / dim + a.eps);
#pragma unroll
    for (int j = 0; j < NCH; j++) {
        const int i = (t + j * T) * V;
        if (!ok[j]) continue;
        float n[V];
#pragma unroll
        for (int k = 0; k < V; k++) n[k] = v[j][k] * rstd;
        if (a.w) {
            float w[V];
            ld_f32<V>(a.w + i, w);
#pragma unroll
            for (int k = 0; k < V; k++) n[k] = __fmul_rn(n[k], w[k]);
        }
        if constexpr (V >= 2) if (a.cos) {
#pragma unroll
            for (int k = 0; k < V; k += 2) {
                const float x1 = round_bf16(n[k]), x2 = round_bf16(n[k + 1]);
                n[k] = x1 * cs[j][k] - x2 * sn[j][k + 1];
                n[k + 1] = x1 * sn[j][k + 1] + x2 * cs[j][k];
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

template <int V> static w22_status resnorm_run(const resnorm_dev &d, int temb_bf16, cudaStream_t st) {
    const char *fn = "w22_dit_resnorm_cuda";
    const w22_dit_rows p = w22_dit_rows_plan(d.dim, V);
    if (p.per_thread == 0) {
        const size_t smem = (size_t)d.dim * sizeof(float);
        W22_TRY(smem_attr(w22_dit_resnorm_smem<V>, smem, fn));
        w22_dit_resnorm_smem<V><<<(unsigned)d.rows, p.row_threads, smem, st>>>(d);
        return launch_result(fn, V, d.rows, p.row_threads, smem, st);
    }
    resnorm_dev r = d;
    r.row_threads = p.row_threads, r.rows_per_block = p.rows_per_block;
    const unsigned blocks = (unsigned)((d.rows + p.rows_per_block - 1) / p.rows_per_block);
    const int threads = p.row_threads * p.rows_per_block;
    if (temb_bf16) w22_dit_resnorm_regs<V, V == 8 ? 1 : 4, 1><<<blocks, threads, 0, st>>>(r);
    else w22_dit_resnorm_regs<V, V == 8 ? 1 : 4, 0><<<blocks, threads, 0, st>>>(r);
    return launch_result(fn, V, d.rows, threads, 0, st);
}

template <int V> static w22_status qknorm_run(const qknorm_dev &d, cudaStream_t st) {
    const char *fn = "w22_dit_qknorm_cuda";
    const w22_dit_rows p = w22_dit_rows_plan(d.dim, V);
    if (p.per_thread == 0) {
        const size_t smem = (size_t)d.dim * sizeof(float);
        W22_TRY(smem_attr(w22_dit_qknorm_smem<V>, smem, fn));
        w22_dit_qknorm_smem<V><<<(unsigned)d.rows, p.row_threads, smem, st>>>(d);
        return launch_result(fn, V, d.rows, p.row_threads, smem, st);
    }
    qknorm_dev q = d;
    q.row_threads = p.row_threads, q.rows_per_block = p.rows_per_block;
    const unsigned blocks = (unsigned)((d.rows + p.rows_per_block - 1) / p.rows_per_block);
    const int threads = p.row_threads * p.rows_per_block;
    w22_dit_qknorm_regs<V, V == 8 ? 1 : 4><<<blocks, threads, 0, st>>>(q);
    return launch_result(fn, V, d.rows, threads, 0, st);
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
    d.rows = (long long)a->batch * a->len, d.row_threads = d.rows_per_block = 0;
    /* the register kernel's temb words: half as many where every temb the call reads is bf16 */
    const int tb = (!a->gate || a->gate->temb_dtype == W22_DTYPE_BF16) && (!a->mod || a->mod->temb_dtype == W22_DTYPE_BF16);
    cudaStream_t st = (cudaStream_t)stream;
    switch (w22_dit_resnorm_vector(a)) {
    case 8: return resnorm_run<8>(d, tb, st);
    case 2: return resnorm_run<2>(d, tb, st);
    default: return resnorm_run<1>(d, tb, st);
    }
}

w22_status w22_dit_qknorm_launch(const w22_dit_qknorm *a, void *stream) {
    qknorm_dev d;
    d.L = a->len, d.dim = a->heads * a->head_dim, d.head_dim = a->head_dim, d.eps = a->eps;
    d.x = (const bf16 *)a->x, d.xs = a->x_stride, d.out = (bf16 *)a->out, d.os = a->out_stride;
    d.w = a->weight, d.cos = a->cos, d.sin = a->sin;
    d.rows = (long long)a->batch * a->len, d.row_threads = d.rows_per_block = 0;
    cudaStream_t st = (cudaStream_t)stream;
    switch (w22_dit_qknorm_vector(a)) {
    case 8: return qknorm_run<8>(d, st);
    case 2: return qknorm_run<2>(d, st);
    case 1: return qknorm_run<1>(d, st);
    default:
        return w22_fail(W22_ERR_INVALID_ARG, "w22_dit_qknorm_cuda: with RoPE x, out (4-byte aligned), their strides "
                        "(even) and cos, sin (8-byte aligned) must allow pairs of elements");
    }
}
