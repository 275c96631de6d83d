/* The conv GEMMs' epilogue, shared by the mma.sync and wgmma kernels: where an output pixel's row starts, and the
 * store of two adjacent output channels (n, n + 1) of it: + bias (+ shortcut bias), the time-split column,
 * + residual (which may be the output itself: read then written by the same thread), bf16 pair or fp32 store. */
#ifndef W22_CONV_EPILOGUE_CUH
#define W22_CONV_EPILOGUE_CUH

#include "cuda_internal.h"

/* Output and residual offsets of GEMM row m (pixel (t, y, x) of the F x H x W grid; HW = H * W). */
static __device__ __forceinline__ void w22_epilogue_row(const w22_gemm &g, int m, int HW, long *orow, long *rrow) {
    const int t = m / HW, rem = m - t * HW, y = rem / g.W, x = rem - y * g.W;
    const int tf = g.split_c ? 2 * t : t;
    *orow = tf * g.o_sf + y * g.o_sh + x * g.o_sw;
    *rrow = tf * g.r_sf + y * g.r_sh + x * g.r_sw;
}

static __device__ __forceinline__ void w22_epilogue_pair(const w22_gemm &g, long orow, long rrow, int n, float v0,
                                                         float v1) {
    if (g.bias) v0 += g.bias[n], v1 += g.bias[n + 1];
    if (g.sc_bias) v0 += g.sc_bias[n], v1 += g.sc_bias[n + 1];
    long ocol = n, rcol = n;
    if (g.split_c) {
        const int q = n / g.split_c, nn = n - q * g.split_c;
        ocol = q * g.o_sf + nn;
        rcol = q * g.r_sf + nn;
    }
    if (g.res) {
        const float2 r = __bfloat1622float2(*(const __nv_bfloat162 *)(g.res + rrow + rcol));
        v0 += r.x;
        v1 += r.y;
    }
    if (g.out_f32)
        *(float2 *)((float *)g.out + orow + ocol) = make_float2(v0, v1);
    else
        *(__nv_bfloat162 *)((bf16 *)g.out + orow + ocol) = __floats2bfloat162_rn(v0, v1);
}

#endif
