/* The conv GEMMs' epilogue, shared by the mma.sync and wgmma kernels: where an output pixel's row starts, and the
 * store of two adjacent output channels (n, n + 1) of it: + bias (+ shortcut bias), the time-split column,
 * + residual (which may be the output itself: read then written by the same thread; or a DupUp source, r_tsh ..
 * r_coff in cuda_internal.h), bf16 pair (fp16 for w22_mm.f16) or fp32 store. */
#ifndef W22_CONV_EPILOGUE_CUH
#define W22_CONV_EPILOGUE_CUH

#include "cuda_internal.h"
#include <cuda_fp16.h>

/* Output and residual offsets of GEMM row m (pixel (t, y, x) of the F x H x W grid; HW = H * W). A DupUp residual's
 * frame is (T + r_toff) >> r_tsh (0 and 0 otherwise: T). */
static __device__ __forceinline__ void w22_epilogue_row(const w22_mm &g, int m, int HW, long *orow, long *rrow) {
    const int t = m / HW, rem = m - t * HW, y = rem / g.W, x = rem - y * g.W;
    const int tf = g.split_c ? 2 * t : t;
    *orow = tf * g.o_sf + y * g.o_sh + x * g.o_sw;
    *rrow = ((tf + g.r_toff) >> g.r_tsh) * g.r_sf + y * g.r_sh + x * g.r_sw;
}

/* Output and residual column offsets of channel n: with a time split, channels [q split_c, (q + 1) split_c) go to
 * output frame 2t + q. A DupUp residual's channel is (n << r_csh) + r_coff (0 and 0 otherwise: n). */
static __device__ __forceinline__ void w22_epilogue_cols(const w22_mm &g, int n, long *ocol, long *rcol) {
    *ocol = n;
    *rcol = ((long)n << g.r_csh) + g.r_coff;
    if (g.split_c) {
        const int q = n / g.split_c, nn = n - q * g.split_c;
        *ocol = q * g.o_sf + nn;
        *rcol = q * g.r_sf + nn;
    }
}

/* F16: the output is fp16 (w22_mm.f16, a batch's: route.h's blockers refuse a residual there, so none is read). */
template <bool F16 = false>
static __device__ __forceinline__ void w22_epilogue_pair(const w22_mm &g, long orow, long rrow, int n, float v0,
                                                         float v1) {
    if (g.bias) v0 += g.bias[n], v1 += g.bias[n + 1];
    if (g.sc_bias) v0 += g.sc_bias[n], v1 += g.sc_bias[n + 1];
    long ocol, rcol;
    w22_epilogue_cols(g, n, &ocol, &rcol);
    if (F16) {
        if (g.out_f32)
            *(float2 *)((float *)g.out + orow + ocol) = make_float2(v0, v1);
        else
            *(__half2 *)((__half *)g.out + orow + ocol) = __floats2half2_rn(v0, v1);
        return;
    }
    if (g.res && g.r_csh) { /* DupUp, two residual channels per output channel: n + 1 reads rcol + 2 */
        v0 += __bfloat162float(g.res[rrow + rcol]);
        v1 += __bfloat162float(g.res[rrow + rcol + 2]);
    } else if (g.res) {
        const float2 r = __bfloat1622float2(*(const __nv_bfloat162 *)(g.res + rrow + rcol));
        v0 += r.x;
        v1 += r.y;
    }
    if (g.out_f32)
        *(float2 *)((float *)g.out + orow + ocol) = make_float2(v0, v1);
    else
        *(__nv_bfloat162 *)((bf16 *)g.out + orow + ocol) = __floats2bfloat162_rn(v0, v1);
}

/* v[0..7] += eight bf16 values packed in r */
static __device__ __forceinline__ void w22_add_bf16x8(float v[8], const uint4 r) {
    const uint32_t w[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const float2 f = __bfloat1622float2(*(const __nv_bfloat162 *)&w[i]);
        v[2 * i] += f.x;
        v[2 * i + 1] += f.y;
    }
}

/* v[0..7] += the residual of eight adjacent output channels n .. n + 7 (n % 8 == 0), whose first is at res + off
 * (off = rrow + rcol). One 16-byte load; a DupUp residual with r_csh = 1 reads channels 2n + r_coff, 2n + 2 + r_coff,
 * ..: the two aligned 16-byte vectors from 2n on, and each pair's low (r_coff 0) or high (1) half. The r_coff is
 * taken from off, whose other terms are multiples of 8 (route.h's w22_route_epilogue_vec_ok): the phases of one launch (w22_mm
 * .phases) carry theirs in the row offset. */
static __device__ __forceinline__ void w22_add_res8(const w22_mm &g, long off, float v[8]) {
    if (!g.r_csh) {
        w22_add_bf16x8(v, *(const uint4 *)(g.res + off));
        return;
    }
    const int coff = (int)(off & 7);
    const uint4 *p = (const uint4 *)(g.res + off - coff);
    const uint4 a = p[0], b = p[1];
    const uint32_t w[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
    for (int k = 0; k < 8; k++) v[k] += __uint_as_float(coff ? w[k] & 0xffff0000u : w[k] << 16); /* bf16 bits */
}

static __device__ __forceinline__ void w22_add8(float v[8], const float *p) {
    const float4 a = *(const float4 *)p, b = *(const float4 *)(p + 4);
    v[0] += a.x, v[1] += a.y, v[2] += a.z, v[3] += a.w, v[4] += b.x, v[5] += b.y, v[6] += b.z, v[7] += b.w;
}

/* The same for eight adjacent output channels n .. n + 7 (n % 8 == 0) in v[0..7], with 16-byte accesses: the caller
 * checked that bias, residual and output rows are 16-byte aligned and that split_c % 8 == 0 (route.h's w22_route_epilogue_vec_ok),
 * so the eight channels share one split column and one aligned vector of each operand. Same arithmetic and one
 * rounding, as the pair store. */
static __device__ __forceinline__ void w22_epilogue_vec8(const w22_mm &g, long orow, long rrow, int n, float v[8]) {
    if (g.bias) w22_add8(v, g.bias + n);
    if (g.sc_bias) w22_add8(v, g.sc_bias + n);
    long ocol, rcol;
    w22_epilogue_cols(g, n, &ocol, &rcol);
    if (g.res) w22_add_res8(g, rrow + rcol, v);
    if (g.out_f32) {
        float *o = (float *)g.out + orow + ocol;
        *(float4 *)o = make_float4(v[0], v[1], v[2], v[3]);
        *(float4 *)(o + 4) = make_float4(v[4], v[5], v[6], v[7]);
    } else {
        uint32_t w[4];
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const __nv_bfloat162 b = __floats2bfloat162_rn(v[2 * i], v[2 * i + 1]);
            w[i] = *(const uint32_t *)&b;
        }
        *(uint4 *)((bf16 *)g.out + orow + ocol) = make_uint4(w[0], w[1], w[2], w[3]);
    }
}

#endif
