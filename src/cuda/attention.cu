/* Single-head attention per frame, the simplest way that runs on the tensor cores: for each frame,
 *   Vt = V^T (bf16 [C][Pp], zero columns past P)                      transpose kernel
 *   Kp = K (bf16 [Pp][C], dense, zero rows past P)                     pack kernel
 *   S  = Q Kp^T (fp32 [nq][Pp])                                        the conv GEMM, fp32 output, N = Pp
 *   Pm = softmax(S / sqrt(C)) per row (fp32 math, bf16 [nq][Pp], zeros past P)
 *   O  = Pm Vt^T (bf16, into out)                                      the conv GEMM
 * nq = this rank's query pixels, P = the frame's pixels (3432 in the real model: 47 MB of fp32 scores), Pp = P
 * rounded up to 8 (the GEMM's K granularity). The scores' GEMM has N = Pp, even whatever the frame's size: with
 * N = P an odd x odd latent frame (45 x 45: 720 x 720 video) sent Q K^T to the scalar kernel (route.h: N odd), 52 ms
 * a frame against 0.6 ms (issue 46); the score columns past P are zeros' products, never read (softmax stops at P,
 * the probabilities past P are written 0). The scratch: the caller's free memory where it is given and large
 * enough (a decode passes stage 0's, so that the workspace holds it: v22), else our own, kept and grown on demand.
 * Its size grows with P^2: the Wan2.1 VAE's 8x latents at 1280x720 are 90 x 160 (P = 14400: 1.2 GB of scores and
 * probabilities), at 1920x1080 6.3 GB. Where a frame's scratch exceeds both the caller's memory and W22_ATTN_OWN_MAX,
 * the queries go in bands of whole rows, as many as fit the larger of the two (every output element is the same
 * sum either way: a query row's softmax and products never span two bands). */
#include "cuda_internal.h"
#include "lower.h"
#include "cuda_ops.h"

/* Vt[c][p] = v(p / vw, p % vw, c) for p < P, 0 for P <= p < Pp. 32x32 tiles through shared memory so that both
 * the read (channels) and the write (pixels) coalesce. */
__global__ void w22_transpose_v_kernel(const bf16 *v, long vsh, long vsw, int vw, int P, int C, bf16 *vt, int Pp) {
    __shared__ bf16 tile[32][33];
    const int p0 = blockIdx.x * 32, c0 = blockIdx.y * 32;
    for (int k = threadIdx.y; k < 32; k += blockDim.y) {
        const int p = p0 + k, c = c0 + threadIdx.x;
        tile[k][threadIdx.x] =
            (p < P && c < C) ? v[(long)(p / vw) * vsh + (long)(p % vw) * vsw + c] : __float2bfloat16_rn(0.f);
    }
    __syncthreads();
    for (int k = threadIdx.y; k < 32; k += blockDim.y) {
        const int c = c0 + k, p = p0 + threadIdx.x;
        if (c < C && p < Pp) vt[(long)c * Pp + p] = tile[threadIdx.x][k];
    }
}

/* Kp[p][c] = k(p / kw, p % kw, c) for p < P, 0 for P <= p < Pp: the keys as one dense [Pp][C] block, so that the
 * scores' GEMM has an even N (Pp) and reads B rows of one stride. */
__global__ void w22_pack_k_kernel(const bf16 *k, long ksh, long ksw, int kw, int P, int C, bf16 *kp, int Pp) {
    const long n = (long)Pp * C;
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x) {
        const int p = (int)(i / C), c = (int)(i % C);
        kp[i] = p < P ? k[(long)(p / kw) * ksh + (long)(p % kw) * ksw + c] : __float2bfloat16_rn(0.f);
    }
}

/* One block per query row: max, sum of exp, then normalized bf16 probabilities. */
__global__ void w22_softmax_rows_kernel(const float *s, bf16 *pm, int P, int Pp, float scale_log2e) {
    const float *row = s + (long)blockIdx.x * Pp;
    bf16 *out = pm + (long)blockIdx.x * Pp;
    __shared__ float red[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    float mx = -INFINITY;
    for (int p = threadIdx.x; p < P; p += blockDim.x) mx = fmaxf(mx, row[p]);
    for (int o = 16; o; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    if (lane == 0) red[warp] = mx;
    __syncthreads();
    mx = red[0];
    for (int w = 1; w < nw; w++) mx = fmaxf(mx, red[w]);
    __syncthreads();
    float sum = 0.f;
    for (int p = threadIdx.x; p < P; p += blockDim.x) sum += exp2f((row[p] - mx) * scale_log2e);
    for (int o = 16; o; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    if (lane == 0) red[warp] = sum;
    __syncthreads();
    sum = 0.f;
    for (int w = 0; w < nw; w++) sum += red[w];
    const float inv = 1.f / sum;
    for (int p = threadIdx.x; p < Pp; p += blockDim.x)
        out[p] = __float2bfloat16_rn(p < P ? exp2f((row[p] - mx) * scale_log2e) * inv : 0.f);
}

static size_t align256(size_t x) { return (x + 255) & ~(size_t)255; }

/* The most scratch the attention allocates of its own before it bands the queries: what a whole TI2V-5B frame
 * needs (70 MB) and more, not the gigabytes of a large Wan2.1 frame. */
#define W22_ATTN_OWN_MAX ((size_t)256 << 20)

/* The scratch of a band of r query rows of w pixels against Pp keys, V^T and the packed keys of C channels. */
static size_t attn_need(int r, int w, int Pp, int C) {
    return align256((size_t)r * w * Pp * 4) + align256((size_t)r * w * Pp * 2) + 2 * align256((size_t)C * Pp * 2);
}

/* The most query rows (<= h) whose scratch fits `bytes`, 0 when not one. */
static int attn_rows(size_t bytes, int h, int w, int Pp, int C) {
    int lo = 0, hi = h;
    while (lo < hi) { /* the largest r in [0, h] with attn_need(r) <= bytes (attn_need grows with r) */
        const int mid = lo + (hi - lo + 1) / 2;
        if (attn_need(mid, w, Pp, C) <= bytes) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

w22_status w22_cuda_attention(w22_backend *b, w22_view q, w22_view k, w22_view v, w22_view out, void *work,
                              size_t work_bytes) {
    w22_cuda *c = cuda_of(b);
    const int C = q.c;
    if (q.es != 2 || k.es != 2 || v.es != 2 || out.es != 2 || k.c != C || v.c != C || out.c != C || k.f != q.f ||
        v.f != q.f || out.f != q.f || v.h != k.h || v.w != k.w || out.h != q.h || out.w != q.w)
        return w22_fail(W22_ERR_BAD_SHAPE,
                        "cuda attention: q (%d,%d,%d,%d) k (%d,%d,%d,%d) v (%d,%d,%d,%d) out (%d,%d,%d,%d): expected "
                        "one C, one frame count, k and v of one size, out of q's size",
                        q.f, q.h, q.w, q.c, k.f, k.h, k.w, k.c, v.f, v.h, v.w, v.c, out.f, out.h, out.w, out.c);
    CU_ENTER(c);
    W22_TRY(w22_cuda_check_view(c, &q, 0, "attention q"));
    W22_TRY(w22_cuda_check_view(c, &k, 0, "attention k"));
    W22_TRY(w22_cuda_check_view(c, &v, 0, "attention v"));
    W22_TRY(w22_cuda_check_view(c, &out, 0, "attention out"));
    const int nq = q.h * q.w, P = k.h * k.w, Pp = (P + 7) & ~7;
    if (nq == 0 || q.f == 0 || C == 0) return W22_OK;
    if (P == 0) return w22_fail(W22_ERR_BAD_SHAPE, "cuda attention: k and v have no pixels");
    /* the scratch: the caller's free memory where it holds the whole frame's (a decode's), else our own up to
     * W22_ATTN_OWN_MAX; beyond both, bands of query rows in the larger */
    const size_t cap = c->attn_max ? c->attn_max : W22_ATTN_OWN_MAX, need = attn_need(q.h, q.w, Pp, C);
    const size_t avail = work && (uintptr_t)work % 256 == 0 ? work_bytes : 0;
    int rows = q.h;
    char *base = (char *)work;
    if (avail < need) {
        const int in_work = attn_rows(avail, q.h, q.w, Pp, C), own = need <= cap ? q.h : attn_rows(cap, q.h, q.w, Pp, C);
        rows = in_work > own ? in_work : own > 0 ? own : 1;
        if (in_work < rows) {
            W22_TRY(w22_cuda_scratch(c, &c->attn_scratch, &c->attn_bytes, attn_need(rows, q.w, Pp, C),
                                     "the attention scratch (scores, probabilities, V^T, K)"));
            base = (char *)c->attn_scratch;
        }
    }
    const size_t s_bytes = align256((size_t)rows * q.w * Pp * 4), p_bytes = align256((size_t)rows * q.w * Pp * 2);
    float *S = (float *)base;
    bf16 *Pm = (bf16 *)(base + s_bytes);
    bf16 *Vt = (bf16 *)(base + s_bytes + p_bytes);
    bf16 *Kp = (bf16 *)(base + s_bytes + p_bytes + align256((size_t)C * Pp * 2));
    const float scale_log2e = 1.4426950408889634f / sqrtf((float)C);

    for (int f = 0; f < q.f; f++) {
        const bf16 *qf = (const bf16 *)q.ptr + f * q.sf, *kf = (const bf16 *)k.ptr + f * k.sf,
                   *vf = (const bf16 *)v.ptr + f * v.sf;
        bf16 *of = (bf16 *)out.ptr + f * out.sf;

        dim3 tb(32, 8), tg((Pp + 31) / 32, (C + 31) / 32);
        w22_transpose_v_kernel<<<tg, tb, 0, c->stream>>>(vf, v.sh, v.sw, v.w, P, C, Vt, Pp);
        CU_LAUNCHED(c, "attention transpose V");
        const long kn = (long)Pp * C;
        const int kblocks = (int)(kn / 256 + 1 < 4096 ? kn / 256 + 1 : 4096);
        w22_pack_k_kernel<<<kblocks, 256, 0, c->stream>>>(kf, k.sh, k.sw, k.w, P, C, Kp, Pp);
        CU_LAUNCHED(c, "attention pack K");

        for (int y0 = 0; y0 < q.h; y0 += rows) { /* one band: every query row when the scratch holds them */
            const int nr = q.h - y0 < rows ? q.h - y0 : rows, nb = nr * q.w;
            w22_mm g; /* lower.h */
            w22_lower_attn_scores(qf + (long)y0 * q.sh, q.sh, q.sw, nr, q.w, C, Pp, Kp, S, &g);
            W22_TRY(w22_cuda_gemm(c, &g, "attention Q K^T"));

            w22_softmax_rows_kernel<<<nb, 256, 0, c->stream>>>(S, Pm, P, Pp, scale_log2e);
            CU_LAUNCHED(c, "attention softmax");

            w22_lower_attn_values(Pm, nr, q.w, C, Pp, Vt, of + (long)y0 * out.sh, out.sh, out.sw, &g);
            W22_TRY(w22_cuda_gemm(c, &g, "attention P V"));
        }
    }
    return W22_OK;
}
