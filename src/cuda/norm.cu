/* RMS norm over channels, per pixel, with optional SiLU: out = x / max(||x||, 1e-12) * sqrt(C) * gamma. One warp
 * per pixel, fp32 statistics; 16-byte loads when C % 8 == 0 and the views allow, else one element per lane. The
 * pixel is read twice (sum of squares, then scale); the second read hits L1/L2. In place (out == in) is fine: a
 * lane writes only elements it has read in both passes. */
#include "cuda_internal.h"
#include "cuda_ops.h"

template <int VEC>
__global__ void w22_rmsnorm_kernel(const bf16 *in, long isf, long ish, long isw, bf16 *out, long osf, long osh, long osw,
                               const float *gamma, int F, int H, int W, int C, int silu) {
    const long pix = (long)blockIdx.x * (blockDim.x / 32) + (threadIdx.x >> 5);
    const int lane = threadIdx.x & 31;
    if (pix >= (long)F * H * W) return;
    const int x = (int)(pix % W), y = (int)((pix / W) % H), f = (int)(pix / ((long)W * H));
    const bf16 *ip = in + f * isf + y * ish + x * isw;
    bf16 *op = out + f * osf + y * osh + x * osw;
    float ss = 0.f;
    for (int c = lane * VEC; c < C; c += 32 * VEC) {
        if (VEC == 8) {
            uint4 u = *(const uint4 *)(ip + c);
            const __nv_bfloat162 *h2 = (const __nv_bfloat162 *)&u;
#pragma unroll
            for (int k = 0; k < 4; k++) {
                float2 v = __bfloat1622float2(h2[k]);
                ss += v.x * v.x + v.y * v.y;
            }
        } else {
            float v = __bfloat162float(ip[c]);
            ss += v * v;
        }
    }
#pragma unroll
    for (int o = 16; o; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    const float scale = sqrtf((float)C) / fmaxf(sqrtf(ss), 1e-12f);
    for (int c = lane * VEC; c < C; c += 32 * VEC) {
        if (VEC == 8) {
            uint4 u = *(const uint4 *)(ip + c);
            __nv_bfloat162 *h2 = (__nv_bfloat162 *)&u;
#pragma unroll
            for (int k = 0; k < 4; k++) {
                float2 v = __bfloat1622float2(h2[k]);
                float a = v.x * scale * gamma[c + 2 * k], b = v.y * scale * gamma[c + 2 * k + 1];
                if (silu) a = a / (1.f + __expf(-a)), b = b / (1.f + __expf(-b));
                h2[k] = __floats2bfloat162_rn(a, b);
            }
            *(uint4 *)(op + c) = u;
        } else {
            float a = __bfloat162float(ip[c]) * scale * gamma[c];
            if (silu) a = a / (1.f + __expf(-a));
            op[c] = __float2bfloat16_rn(a);
        }
    }
}

w22_status w22_cuda_rmsnorm(w22_backend *b, w22_view in, w22_view out, const w22_bweight *gw, int silu) {
    w22_cuda *c = cuda_of(b);
    const w22_cuda_weight *g = (const w22_cuda_weight *)gw;
    if (!g || g->kind != W22_WK_VECTOR) return w22_fail(W22_ERR_INVALID_ARG, "cuda rmsnorm: gamma is not a vector");
    if (in.es != 2 || out.es != 2) return w22_fail(W22_ERR_BAD_SHAPE, "cuda rmsnorm: element size %d/%d, expected 2", in.es, out.es);
    if (in.f != out.f || in.h != out.h || in.w != out.w || in.c != out.c)
        return w22_fail(W22_ERR_BAD_SHAPE, "cuda rmsnorm: in (%d,%d,%d,%d) and out (%d,%d,%d,%d) differ", in.f, in.h,
                        in.w, in.c, out.f, out.h, out.w, out.c);
    if (g->n != in.c) return w22_fail(W22_ERR_BAD_SHAPE, "cuda rmsnorm: gamma has %d elements, C is %d", g->n, in.c);
    CU_ENTER(c);
    W22_TRY(w22_cuda_check_view(c, &in, 0, "rmsnorm in"));
    W22_TRY(w22_cuda_check_view(c, &out, 0, "rmsnorm out"));
    const long pixels = (long)in.f * in.h * in.w;
    if (pixels == 0 || in.c == 0) return W22_OK;
    const int warps = 8;
    const long blocks = (pixels + warps - 1) / warps;
    const int vec = in.c % 8 == 0 && (uintptr_t)in.ptr % 16 == 0 && (uintptr_t)out.ptr % 16 == 0 && in.sf % 8 == 0 &&
                    in.sh % 8 == 0 && in.sw % 8 == 0 && out.sf % 8 == 0 && out.sh % 8 == 0 && out.sw % 8 == 0;
    if (vec)
        w22_rmsnorm_kernel<8><<<(unsigned)blocks, warps * 32, 0, c->stream>>>(
            (const bf16 *)in.ptr, in.sf, in.sh, in.sw, (bf16 *)out.ptr, out.sf, out.sh, out.sw,
            (const float *)g->dev, in.f, in.h, in.w, in.c, silu);
    else
        w22_rmsnorm_kernel<1><<<(unsigned)blocks, warps * 32, 0, c->stream>>>(
            (const bf16 *)in.ptr, in.sf, in.sh, in.sw, (bf16 *)out.ptr, out.sf, out.sh, out.sw,
            (const float *)g->dev, in.f, in.h, in.w, in.c, silu);
    CU_LAUNCHED(c, "rmsnorm");
    return W22_OK;
}
