/* Data movement ops: zero, strided copy, latents in (NCDHW -> channels-last bf16), and unpatchify to the video
 * (clamped, bf16 or fp32, any strides). All memory-bound; 16-byte accesses where channels allow. */
#include "cuda_internal.h"
#include "cuda_ops.h"

/* dst = src (or 0 when src is NULL), VEC channels per thread. */
template <int VEC>
__global__ void w22_copy_kernel(bf16 *dst, long dsf, long dsh, long dsw, const bf16 *src, long ssf, long ssh, long ssw,
                            int F, int H, int W, int C) {
    const int cv = C / VEC;
    const long total = (long)F * H * W * cv;
    for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (long)gridDim.x * blockDim.x) {
        const int c = (int)(i % cv) * VEC;
        long p = i / cv;
        const int x = (int)(p % W);
        p /= W;
        const int y = (int)(p % H), f = (int)(p / H);
        bf16 *d = dst + f * dsf + y * dsh + x * dsw + c;
        if (VEC == 8) {
            uint4 v = make_uint4(0, 0, 0, 0);
            if (src) v = *(const uint4 *)(src + f * ssf + y * ssh + x * ssw + c);
            *(uint4 *)d = v;
        } else {
            *d = src ? src[f * ssf + y * ssh + x * ssw + c] : __float2bfloat16_rn(0.f);
        }
    }
}


static unsigned grid_for(long total, int threads) {
    long b = (total + threads - 1) / threads;
    return (unsigned)(b < 1 ? 1 : b > 65536L * 16 ? 65536L * 16 : b); /* grid-stride loops cover the rest */
}

static w22_status copy_or_zero(w22_cuda *c, w22_view dst, const w22_view *src) {
    if (dst.es != 2 || (src && src->es != 2))
        return w22_fail(W22_ERR_BAD_SHAPE, "cuda %s: element size %d, expected 2", src ? "copy" : "zero", dst.es);
    if (src && (src->f != dst.f || src->h != dst.h || src->w != dst.w || src->c != dst.c))
        return w22_fail(W22_ERR_BAD_SHAPE, "cuda copy: dst (%d,%d,%d,%d) and src (%d,%d,%d,%d) differ", dst.f, dst.h,
                        dst.w, dst.c, src->f, src->h, src->w, src->c);
    CU_ENTER(c);
    W22_TRY(w22_cuda_check_view(c, &dst, 0, src ? "copy dst" : "zero"));
    if (src) W22_TRY(w22_cuda_check_view(c, src, 0, "copy src"));
    const long elems = (long)dst.f * dst.h * dst.w * dst.c;
    if (elems <= 0) return W22_OK;
    w22_view sv = src ? *src : dst; /* route.h folds both views into rows of W channels where both fold */
    const int vec = w22_route_copy(&dst, src ? &sv : NULL);
    if (src) src = &sv;
    const bf16 *sp = src ? (const bf16 *)src->ptr : NULL;
    const long ssf = src ? src->sf : 0, ssh = src ? src->sh : 0, ssw = src ? src->sw : 0;
    if (vec)
        w22_copy_kernel<8><<<grid_for(elems / 8, 256), 256, 0, c->stream>>>((bf16 *)dst.ptr, dst.sf, dst.sh, dst.sw, sp,
                                                                        ssf, ssh, ssw, dst.f, dst.h, dst.w, dst.c);
    else
        w22_copy_kernel<1><<<grid_for(elems, 256), 256, 0, c->stream>>>((bf16 *)dst.ptr, dst.sf, dst.sh, dst.sw, sp, ssf,
                                                                    ssh, ssw, dst.f, dst.h, dst.w, dst.c);
    CU_LAUNCHED(c, src ? "copy" : "zero");
    return W22_OK;
}

w22_status w22_cuda_zero(w22_backend *b, w22_view v) { return copy_or_zero(cuda_of(b), v, NULL); }

/* The one-pixel border of every frame: per frame 2 (w + 2) + 2 h border pixels, numbered top row (x = -1 .. w),
 * bottom row, then left and right of each row; VEC channels per thread. */
template <int VEC>
__global__ void w22_zero_border_kernel(bf16 *p, long sf, long sh, long sw, int F, int H, int W, int C) {
    const int cv = C / VEC, per = 2 * (W + 2) + 2 * H;
    const long total = (long)F * per * cv;
    for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (long)gridDim.x * blockDim.x) {
        const int c = (int)(i % cv) * VEC;
        const long q = i / cv;
        const int f = (int)(q / per), j = (int)(q - (long)f * per);
        int y, x;
        if (j < W + 2) y = -1, x = j - 1;
        else if (j < 2 * (W + 2)) y = H, x = j - (W + 2) - 1;
        else y = (j - 2 * (W + 2)) >> 1, x = (j & 1) ? W : -1;
        bf16 *d = p + f * sf + y * sh + x * sw + c;
        if (VEC == 8)
            *(uint4 *)d = make_uint4(0, 0, 0, 0);
        else
            *d = __float2bfloat16_rn(0.f);
    }
}

w22_status w22_cuda_zero_border(w22_backend *b, w22_view v) {
    w22_cuda *c = cuda_of(b);
    if (v.es != 2) return w22_fail(W22_ERR_BAD_SHAPE, "cuda zero_border: element size %d, expected 2", v.es);
    CU_ENTER(c);
    W22_TRY(w22_cuda_check_view(c, &v, 1, "zero_border"));
    const long total = (long)v.f * (2 * (v.w + 2) + 2 * v.h) * v.c;
    if (total <= 0) return W22_OK;
    if (w22_route_vec8(&v)) /* route.h; strides of whole vectors: the border's pixels are as aligned as the interior's */
        w22_zero_border_kernel<8><<<grid_for(total / 8, 256), 256, 0, c->stream>>>((bf16 *)v.ptr, v.sf, v.sh, v.sw, v.f,
                                                                               v.h, v.w, v.c);
    else
        w22_zero_border_kernel<1><<<grid_for(total, 256), 256, 0, c->stream>>>((bf16 *)v.ptr, v.sf, v.sh, v.sw, v.f,
                                                                            v.h, v.w, v.c);
    CU_LAUNCHED(c, "zero_border");
    return W22_OK;
}
w22_status w22_cuda_copy(w22_backend *b, w22_view dst, w22_view src) { return copy_or_zero(cuda_of(b), dst, &src); }

/* out(f, y, x, c) = z[c][t0 + f][y0 + y][x]; one thread per output element, channels fastest (writes coalesce;
 * the latents are small). */
template <typename T>
__global__ void w22_latents_kernel(const T *z, int C, int Tz, int Hz, int Wz, int t0, int y0, bf16 *out, long osf,
                               long osh, long osw, int F, int H, int W) {
    const long total = (long)F * H * W * C;
    for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (long)gridDim.x * blockDim.x) {
        const int c = (int)(i % C);
        long p = i / C;
        const int x = (int)(p % W);
        p /= W;
        const int y = (int)(p % H), f = (int)(p / H);
        const T v = z[(((long)c * Tz + t0 + f) * Hz + y0 + y) * Wz + x];
        out[f * osf + y * osh + x * osw + c] = __float2bfloat16_rn((float)v);
    }
}

w22_status w22_cuda_latents_in(w22_backend *b, const void *z, w22_dtype zt, int C, int T, int H, int W, int t0,
                               int y0, w22_view out) {
    w22_cuda *c = cuda_of(b);
    if (zt != W22_DTYPE_F32 && zt != W22_DTYPE_BF16)
        return w22_fail(W22_ERR_BAD_DTYPE, "cuda latents_in: dtype %s, expected F32 or BF16", w22_dtype_name(zt));
    if (out.es != 2 || out.c != C || out.w != W || t0 < 0 || y0 < 0 || t0 + out.f > T || y0 + out.h > H)
        return w22_fail(W22_ERR_BAD_SHAPE,
                        "cuda latents_in: out (%d,%d,%d,%d) at t0 %d y0 %d does not fit z [%d][%d][%d][%d]", out.f,
                        out.h, out.w, out.c, t0, y0, C, T, H, W);
    CU_ENTER(c);
    W22_TRY(w22_cuda_check_view(c, &out, 0, "latents_in out"));
    const long total = (long)out.f * out.h * out.w * C;
    if (total <= 0) return W22_OK;
    if (zt == W22_DTYPE_F32)
        w22_latents_kernel<float><<<grid_for(total, 256), 256, 0, c->stream>>>(
            (const float *)z, C, T, H, W, t0, y0, (bf16 *)out.ptr, out.sf, out.sh, out.sw, out.f, out.h, out.w);
    else
        w22_latents_kernel<bf16><<<grid_for(total, 256), 256, 0, c->stream>>>(
            (const bf16 *)z, C, T, H, W, t0, y0, (bf16 *)out.ptr, out.sf, out.sh, out.sw, out.f, out.h, out.w);
    CU_LAUNCHED(c, "latents_in");
    return W22_OK;
}

/* dst(c, f, p*y + p2, p*x + p1) = clamp(in(f, y, x, c*p*p + p1*p + p2)); one thread per video element, columns
 * fastest (video writes coalesce). The clamp keeps NaN (as torch.clamp does). */
template <typename T>
__global__ void w22_unpatchify_kernel(const bf16 *in, long isf, long ish, long isw, int F, int h, int w, int nc, int p,
                                  T *dst, long dsc, long dsf, long dsy, long dsx) {
    const int Hv = p * h, Wv = p * w;
    const long total = (long)nc * F * Hv * Wv;
    for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (long)gridDim.x * blockDim.x) {
        const int X = (int)(i % Wv);
        long q = i / Wv;
        const int Y = (int)(q % Hv);
        q /= Hv;
        const int f = (int)(q % F), c = (int)(q / F);
        const int y = Y / p, p2 = Y - y * p, x = X / p, p1 = X - x * p;
        float v = __bfloat162float(in[f * isf + y * ish + x * isw + (c * p + p1) * p + p2]);
        v = v < -1.f ? -1.f : (v > 1.f ? 1.f : v);
        T *d = dst + c * dsc + f * dsf + Y * dsy + X * dsx;
        if (sizeof(T) == 4)
            *(float *)d = v;
        else
            *(bf16 *)d = __float2bfloat16_rn(v);
    }
}

w22_status w22_cuda_unpatchify(w22_backend *b, w22_view in, int p, w22_video_dst dst) {
    w22_cuda *c = cuda_of(b);
    if (p < 1 || in.es != 2 || in.c % (p * p))
        return w22_fail(W22_ERR_BAD_SHAPE, "cuda unpatchify: %d channels, p %d: channels must be a multiple of p*p", in.c, p);
    if (dst.dtype != W22_DTYPE_F32 && dst.dtype != W22_DTYPE_BF16)
        return w22_fail(W22_ERR_BAD_DTYPE, "cuda unpatchify: dtype %s, expected F32 or BF16", w22_dtype_name(dst.dtype));
    CU_ENTER(c);
    W22_TRY(w22_cuda_check_view(c, &in, 0, "unpatchify in"));
    const int nc = in.c / (p * p);
    const long total = (long)nc * in.f * p * in.h * p * in.w;
    if (total <= 0) return W22_OK;
    if (dst.dtype == W22_DTYPE_F32)
        w22_unpatchify_kernel<float><<<grid_for(total, 256), 256, 0, c->stream>>>(
            (const bf16 *)in.ptr, in.sf, in.sh, in.sw, in.f, in.h, in.w, nc, p, (float *)dst.ptr, dst.sc, dst.sf,
            dst.sy, dst.sx);
    else
        w22_unpatchify_kernel<bf16><<<grid_for(total, 256), 256, 0, c->stream>>>(
            (const bf16 *)in.ptr, in.sf, in.sh, in.sw, in.f, in.h, in.w, nc, p, (bf16 *)dst.ptr, dst.sc, dst.sf,
            dst.sy, dst.sx);
    CU_LAUNCHED(c, "unpatchify");
    return W22_OK;
}

w22_status w22_cuda_fill(w22_backend *b, void *ptr, size_t bytes, int byte) {
    w22_cuda *c = cuda_of(b);
    CU_ENTER(c);
    if (bytes) CU_TRY(cudaMemsetAsync(ptr, byte, bytes, c->stream));
    return W22_OK;
}

/* The checking mode's counts (backend.h's inspect): one thread per element of the view and its border ring,
 * ES-byte elements; cnt[0] the interior's non-finite ones, cnt[1] the border's nonzero ones. */
template <int ES>
__global__ void w22_inspect_kernel(const char *p, long sf, long sh, long sw, int F, int H, int W, int C, int border,
                                   unsigned long long *cnt) {
    const long Hb = H + 2L * border, Wb = W + 2L * border, total = (long)F * Hb * Wb * C;
    unsigned long long nf = 0, nz = 0;
    for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (long)gridDim.x * blockDim.x) {
        const long c = i % C, q = i / C, x = q % Wb - border, r = q / Wb, y = r % Hb - border, f = r / Hb;
        const char *e = p + (f * sf + y * sh + x * sw + c) * ES;
        unsigned exp_all, bits;
        if (ES == 4) {
            const unsigned u = *(const unsigned *)e;
            exp_all = (u & 0x7f800000u) == 0x7f800000u, bits = (u & 0x7fffffffu) != 0;
        } else {
            const unsigned short u = *(const unsigned short *)e;
            exp_all = (u & 0x7f80u) == 0x7f80u, bits = (u & 0x7fffu) != 0;
        }
        if (y < 0 || y >= H || x < 0 || x >= W) nz += bits;
        else nf += exp_all;
    }
    if (nf) atomicAdd(&cnt[0], nf);
    if (nz) atomicAdd(&cnt[1], nz);
}

w22_status w22_cuda_inspect(w22_backend *b, w22_view v, int border, size_t counts[2]) {
    w22_cuda *c = cuda_of(b);
    counts[0] = counts[1] = 0;
    CU_ENTER(c);
    if (v.es != 2 && v.es != 4) return w22_fail(W22_ERR_BAD_SHAPE, "cuda inspect: element size %d, expected 2 or 4", v.es);
    if (v.f <= 0 || v.h <= 0 || v.w <= 0 || v.c <= 0) return W22_OK;
    if (!c->inspect_count)
        W22_TRY(w22_cuda_malloc(c, 2 * sizeof(unsigned long long), (void **)&c->inspect_count, "the inspect counters"));
    CU_TRY(cudaMemsetAsync(c->inspect_count, 0, 2 * sizeof(unsigned long long), c->stream));
    const long total = (long)v.f * (v.h + 2L * border) * (v.w + 2L * border) * v.c;
    if (v.es == 4)
        w22_inspect_kernel<4><<<grid_for(total, 256), 256, 0, c->stream>>>((const char *)v.ptr, v.sf, v.sh, v.sw, v.f,
                                                                           v.h, v.w, v.c, border, c->inspect_count);
    else
        w22_inspect_kernel<2><<<grid_for(total, 256), 256, 0, c->stream>>>((const char *)v.ptr, v.sf, v.sh, v.sw, v.f,
                                                                           v.h, v.w, v.c, border, c->inspect_count);
    CU_LAUNCHED(c, "inspect");
    unsigned long long h[2];
    CU_TRY(cudaMemcpyAsync(h, c->inspect_count, sizeof h, cudaMemcpyDeviceToHost, c->stream));
    CU_TRY(cudaStreamSynchronize(c->stream));
    counts[0] = (size_t)h[0], counts[1] = (size_t)h[1];
    return W22_OK;
}

/* The audit (backend.h): one block per constant buffer sums its 32-bit words (the tail zero-padded). */
struct w22_audit_item {
    const unsigned char *p;
    unsigned long long bytes, sum;
};
__global__ void w22_audit_kernel(w22_audit_item *it) {
    w22_audit_item *a = &it[blockIdx.x];
    const unsigned long long words = a->bytes / 4;
    unsigned long long s = 0;
    for (unsigned long long i = threadIdx.x; i < words; i += blockDim.x) s += ((const unsigned *)a->p)[i];
    if (threadIdx.x == 0 && (a->bytes & 3)) {
        unsigned t = 0;
        for (unsigned k = 0; k < (a->bytes & 3); k++) t |= (unsigned)a->p[words * 4 + k] << (8 * k);
        s += t;
    }
    atomicAdd(&a->sum, s);
}

w22_status w22_cuda_audit(w22_backend *b) {
    w22_cuda *c = cuda_of(b);
    CU_ENTER(c);
    int n = 0;
    for (int i = 0; i < c->nallocs; i++) n += c->allocs[i].constant;
    if (!n) return W22_OK;
    const size_t need = (size_t)n * sizeof(w22_audit_item);
    if (need > c->audit_bytes) {
        CU_TRY(cudaStreamSynchronize(c->stream));
        void *old = c->audit_buf;
        c->audit_buf = NULL, c->audit_bytes = 0;
        w22_cuda_free_ptr(c, old);
        W22_TRY(w22_cuda_malloc(c, 2 * need, &c->audit_buf, "the audit's table"));
        c->audit_bytes = 2 * need;
    }
    w22_audit_item *h = (w22_audit_item *)malloc(need);
    int *ix = (int *)malloc(n * sizeof(int));
    if (!h || !ix) {
        free(h), free(ix);
        return w22_fail(W22_ERR_OUT_OF_MEMORY, "out of host memory for the audit");
    }
    for (int i = 0, k = 0; i < c->nallocs; i++)
        if (c->allocs[i].constant) {
            h[k].p = (const unsigned char *)c->allocs[i].ptr, h[k].bytes = c->allocs[i].bytes, h[k].sum = 0;
            ix[k++] = i;
        }
    cudaError_t e = cudaMemcpyAsync(c->audit_buf, h, need, cudaMemcpyHostToDevice, c->stream);
    if (e == cudaSuccess) {
        w22_audit_kernel<<<n, 512, 0, c->stream>>>((w22_audit_item *)c->audit_buf);
        e = cudaGetLastError();
    }
    if (e == cudaSuccess) e = cudaMemcpyAsync(h, c->audit_buf, need, cudaMemcpyDeviceToHost, c->stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(c->stream);
    w22_status s = W22_OK;
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        s = w22_fail(W22_ERR_CUDA, "cuda audit: %s", cudaGetErrorString(e));
    }
    for (int k = 0; k < n && s == W22_OK; k++) {
        const w22_cuda_alloc_rec *r = &c->allocs[ix[k]];
        if (h[k].sum != r->sum)
            s = w22_fail(W22_ERR_INTERNAL, "cuda audit: a constant buffer (weights or a table: %zu bytes at %p) changed "
                         "since its upload: a kernel wrote outside its output", r->bytes, r->ptr);
    }
    free(h), free(ix);
    return s;
}
