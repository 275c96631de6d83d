/* The GEMM of conv_sm90_mma.cu computed one output element per thread with fp32 FMAs: the fallback for shapes the
 * tensor-core kernel does not take (channel counts not multiples of 8, odd N, unaligned views, offsets beyond
 * int). Slow but simple; same w22_mm semantics, 64-bit offsets everywhere. */
#include "cuda_internal.h"

__global__ void w22_conv_scalar_kernel(const w22_mm g) {
    const long idx = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (long)g.M * g.N) return;
    const int n = (int)(idx % g.N), m = (int)(idx / g.N);
    const int HW = g.H * g.W, t = m / HW, rem = m - t * HW, y = rem / g.W, x = rem - y * g.W;
    const bf16 *brow = g.b + (n / g.b_w) * g.b_sh + (n % g.b_w) * g.b_sw;
    float acc = 0.f;
    for (int dt = 0; dt < g.kt; dt++)
        for (int dy = 0; dy < g.ks; dy++)
            for (int dx = 0; dx < g.ks; dx++) {
                int iy = y + dy - g.pad_y, ix = x + dx - g.pad_x;
                if (g.upsample) iy >>= 1, ix >>= 1; /* floor: -1 stays -1 (the border) */
                const bf16 *ap = w22_gemm_frame(g, t + dt) + iy * g.a_sh + ix * g.a_sw;
                const bf16 *bp = brow + ((dt * g.ks + dy) * g.ks + dx) * (long)g.cin;
                for (int ci = 0; ci < g.cin; ci++) acc = fmaf(__bfloat162float(ap[ci]), __bfloat162float(bp[ci]), acc);
            }
    if (g.sc) {
        const bf16 *ap = g.sc + t * g.sc_sf + y * g.sc_sh + x * g.sc_sw;
        const bf16 *bp = g.scb + (long)n * g.sc_cin;
        for (int ci = 0; ci < g.sc_cin; ci++) acc = fmaf(__bfloat162float(ap[ci]), __bfloat162float(bp[ci]), acc);
    }
    if (g.bias) acc += g.bias[n];
    if (g.sc_bias) acc += g.sc_bias[n];
    long tf = t, nn = n;
    if (g.split_c) tf = 2L * t + n / g.split_c, nn = n % g.split_c;
    if (g.res) /* a DupUp residual: frame (T + r_toff) >> r_tsh, channel (n << r_csh) + r_coff (cuda_internal.h) */
        acc += __bfloat162float(g.res[((tf + g.r_toff) >> g.r_tsh) * g.r_sf + y * g.r_sh + x * g.r_sw +
                                      (nn << g.r_csh) + g.r_coff]);
    const long o = tf * g.o_sf + y * g.o_sh + x * g.o_sw + nn;
    if (g.out_f32)
        ((float *)g.out)[o] = acc;
    else
        ((bf16 *)g.out)[o] = __float2bfloat16_rn(acc);
}

w22_status w22_cuda_gemm_scalar(w22_cuda *c, const w22_mm *g, const char *what) {
    const long total = (long)g->M * g->N;
    const long blocks = (total + 255) / 256;
    if (blocks > 0x7fffffffL) return w22_fail(W22_ERR_INVALID_ARG, "%s: %ld outputs is too many", what, total);
    w22_conv_scalar_kernel<<<(unsigned)blocks, 256, 0, c->stream>>>(*g);
    CU_LAUNCHED(c, what);
    return W22_OK;
}
