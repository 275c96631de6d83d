/* out += DupUp(in): the up blocks' avg_shortcut (diffusers DupUp3D). Output channel o, time copy t, sub-row i,
 * sub-col j of input pixel (s, y, x) reads input channel (o*ft*4 + t*4 + i*2 + j) / r, r = cout*ft*4 / cin
 * (repeat_interleave, then the view/permute of DupUp3D). With first_single, input frame 0 gives only its last
 * copy (t = ft - 1). One thread per output pixel and 8 output channels: 16-byte read-modify-write of out, input
 * channels gathered (neighbouring threads read neighbouring channels, so the gathers coalesce). The conv fuses the
 * DupUp of both Wan VAEs' ratios into its upsample phases (lower.h's w22_lower_dup_phase); this kernel runs the others
 * (configs of other dim_mult), and tests/test_census.c counts it in no decode of either VAE. */
#include "cuda_internal.h"
#include "cuda_ops.h"

__global__ void w22_dupup_kernel(bf16 *out, long osf, long osh, long osw, const bf16 *in, long isf, long ish, long isw,
                             int F, int H, int W, int cout, int ft, int first_single, int r) {
    const int cv = cout / 8;
    const long total = (long)F * H * W * cv;
    for (long idx = (long)blockIdx.x * blockDim.x + threadIdx.x; idx < total; idx += (long)gridDim.x * blockDim.x) {
        const int o0 = (int)(idx % cv) * 8;
        long p = idx / cv;
        const int X = (int)(p % W);
        p /= W;
        const int Y = (int)(p % H), Fo = (int)(p / H);
        int s, t;
        if (first_single) {
            s = Fo == 0 ? 0 : 1 + (Fo - 1) / ft;
            t = Fo == 0 ? ft - 1 : (Fo - 1) % ft;
        } else {
            s = Fo / ft;
            t = Fo % ft;
        }
        const int i = Y & 1, j = X & 1;
        const bf16 *ip = in + s * isf + (Y >> 1) * ish + (X >> 1) * isw;
        bf16 *op = out + Fo * osf + Y * osh + X * osw + o0;
        const int sub = t * 4 + i * 2 + j;
        uint4 u = *(uint4 *)op;
        __nv_bfloat162 *h2 = (__nv_bfloat162 *)&u;
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const int oa = o0 + 2 * k;
            float2 v = __bfloat1622float2(h2[k]);
            v.x += __bfloat162float(ip[(oa * ft * 4 + sub) / r]);
            v.y += __bfloat162float(ip[((oa + 1) * ft * 4 + sub) / r]);
            h2[k] = __floats2bfloat162_rn(v.x, v.y);
        }
        *(uint4 *)op = u;
    }
}

w22_status w22_cuda_dupup_add(w22_backend *b, w22_view out, w22_view in, int ft, int first_single) {
    w22_cuda *c = cuda_of(b);
    if (out.es != 2 || in.es != 2)
        return w22_fail(W22_ERR_BAD_SHAPE, "cuda dupup_add: element sizes out %d, in %d, expected 2 (bf16)", out.es,
                        in.es);
    W22_TRY(w22_dupup_check("cuda dupup_add", &out, &in, ft, first_single));
    CU_ENTER(c);
    W22_TRY(w22_cuda_check_view(c, &out, 0, "dupup out"));
    W22_TRY(w22_cuda_check_view(c, &in, 0, "dupup in"));
    const int r = out.c * ft * 4 / in.c;
    const long total = (long)out.f * out.h * out.w * out.c;
    if (total <= 0) return W22_OK;
    if (!w22_route_vec8(&out)) /* route.h; the input is gathered, any alignment */
        return w22_fail(W22_ERR_UNSUPPORTED, "cuda dupup_add: out C %d with strides %ld %ld %ld: the kernel takes views "
                        "of whole 16-byte vectors (C a multiple of 8, 16-byte aligned start and strides)", out.c, out.sf,
                        out.sh, out.sw);
    long blocks = (total / 8 + 255) / 256;
    if (blocks > 65536L * 16) blocks = 65536L * 16;
    w22_dupup_kernel<<<(unsigned)blocks, 256, 0, c->stream>>>((bf16 *)out.ptr, out.sf, out.sh, out.sw,
                                                              (const bf16 *)in.ptr, in.sf, in.sh, in.sw, out.f, out.h,
                                                              out.w, out.c, ft, first_single, r);
    CU_LAUNCHED(c, "dupup_add");
    return W22_OK;
}
