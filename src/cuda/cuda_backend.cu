/* The CUDA backend (bf16 activations, sm_80 and up: the Hopper path on sm_90, the portable path elsewhere, route.h):
 * creation, the op table, device memory with byte accounting,
 * weight upload into the kernels' layouts, byte copies, and the CUDA error plumbing. The ops themselves live in
 * conv.cu, attention.cu, norm.cu, move.cu. */
#include "cuda_internal.h"
#include "cuda_ops.h"
#include "lower.h"
extern "C" {
#include "model/model.h"
}
#include <stdio.h>
#include <stdlib.h>

w22_status w22_cuda_after_launch(w22_cuda *c, const char *what, const char *file, int line) {
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess && c->debug) e = cudaStreamSynchronize(c->stream);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return w22_fail(W22_ERR_CUDA, "%s kernel %s: %s (%s) at %s:%d", c->debug ? "running" : "launching", what,
                        cudaGetErrorString(e), cudaGetErrorName(e), file, line);
    }
    return W22_OK;
}

/* ---- memory ---- */

w22_status w22_cuda_malloc(w22_cuda *c, size_t bytes, void **ptr, const char *what) {
    *ptr = NULL;
    CU_TRY(cudaSetDevice(c->device));
    if (c->nallocs == c->cap_allocs) {
        int cap = c->cap_allocs ? 2 * c->cap_allocs : 64;
        w22_cuda_alloc_rec *n = (w22_cuda_alloc_rec *)realloc(c->allocs, cap * sizeof *n);
        if (!n) return w22_fail(W22_ERR_OUT_OF_MEMORY, "out of host memory for the CUDA allocation table");
        c->allocs = n;
        c->cap_allocs = cap;
    }
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, bytes ? bytes : 1);
    if (e != cudaSuccess) {
        (void)cudaGetLastError(); /* an OOM is not sticky: clear it so that the process stays usable */
        size_t fr = 0, tot = 0;
        if (cudaMemGetInfo(&fr, &tot) != cudaSuccess) (void)cudaGetLastError();
        if (e == cudaErrorMemoryAllocation)
            return w22_fail(W22_ERR_OUT_OF_MEMORY,
                            "cudaMalloc of %zu bytes (%.1f MiB) for %s failed: %zu bytes (%.1f MiB) free of %zu on "
                            "GPU %d; this backend holds %zu",
                            bytes, bytes / 1048576.0, what, fr, fr / 1048576.0, tot, c->device, c->bytes);
        return w22_fail(W22_ERR_CUDA, "cudaMalloc of %zu bytes for %s: %s", bytes, what, cudaGetErrorString(e));
    }
    c->allocs[c->nallocs].ptr = p;
    c->allocs[c->nallocs].bytes = bytes;
    c->allocs[c->nallocs].constant = 0;
    c->allocs[c->nallocs].sum = 0;
    c->nallocs++;
    c->bytes += bytes;
    if (c->bytes > c->peak) c->peak = c->bytes;
    *ptr = p;
    return W22_OK;
}

void w22_cuda_free_ptr(w22_cuda *c, void *ptr) {
    if (!ptr) return;
    for (int i = 0; i < c->nallocs; i++)
        if (c->allocs[i].ptr == ptr) {
            c->bytes -= c->allocs[i].bytes;
            c->allocs[i] = c->allocs[--c->nallocs];
            break;
        }
    cudaSetDevice(c->device);
    if (cudaFree(ptr) != cudaSuccess) (void)cudaGetLastError(); /* free cannot report; keep the process usable */
}

unsigned long long w22_word_sum(const void *p, size_t bytes) {
    const unsigned char *b = (const unsigned char *)p;
    unsigned long long s = 0;
    size_t i = 0;
    for (; i + 4 <= bytes; i += 4) {
        uint32_t u;
        memcpy(&u, b + i, 4);
        s += u;
    }
    uint32_t t = 0;
    if (i < bytes) memcpy(&t, b + i, bytes - i);
    return s + t;
}

/* An upload is constant memory (weights, tables): recorded with its sum for the checking mode's audit. */
w22_status w22_cuda_upload(w22_cuda *c, void **dev, const void *host, size_t bytes, const char *what) {
    W22_TRY(w22_cuda_malloc(c, bytes, dev, what));
    /* On the backend's stream, then waited for: a plain cudaMemcpy goes on the legacy default stream, which does not
     * order the backend's own stream (non-blocking) or a caller's, and from pageable memory it may return before the
     * data has reached the device. An upload during a decode (an identity, a direct conv's weights at first use) then
     * raced the kernels that read it: the wrong video of issue 27. */
    cudaError_t e = cudaMemcpyAsync(*dev, host, bytes, cudaMemcpyHostToDevice, c->stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(c->stream);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        w22_cuda_free_ptr(c, *dev);
        *dev = NULL;
        return w22_fail(W22_ERR_CUDA, "cudaMemcpy of %s (%zu bytes): %s", what, bytes, cudaGetErrorString(e));
    }
    w22_cuda_alloc_rec *r = &c->allocs[c->nallocs - 1]; /* w22_cuda_malloc appended it */
    if (r->ptr == *dev) r->constant = 1, r->sum = w22_word_sum(host, bytes);
    return W22_OK;
}

w22_status w22_cuda_scratch(w22_cuda *c, void **ptr, size_t *bytes, size_t need, const char *what) {
    if (need <= *bytes) return W22_OK;
    CU_TRY(cudaStreamSynchronize(c->stream)); /* the old scratch may still be in use by queued work */
    w22_cuda_free_ptr(c, *ptr);
    *ptr = NULL;
    *bytes = 0;
    W22_TRY(w22_cuda_malloc(c, need, ptr, what));
    *bytes = need;
    return W22_OK;
}

w22_status w22_cuda_check_view(w22_cuda *c, const w22_view *v, int border, const char *what) {
    if (!c->debug || v->f <= 0 || v->h <= 0 || v->w <= 0 || v->c <= 0) return W22_OK;
    const char *p = (const char *)v->ptr;
    long lo = -(long)border * (v->sh + v->sw);
    long hi = (long)(v->f - 1) * v->sf + (long)(v->h - 1 + border) * v->sh + (long)(v->w - 1 + border) * v->sw + v->c;
    for (int i = 0; i < c->nallocs; i++) {
        const char *a = (const char *)c->allocs[i].ptr;
        if (p < a || p >= a + c->allocs[i].bytes) continue;
        if (p + lo * v->es < a || p + hi * v->es > a + c->allocs[i].bytes)
            return w22_fail(W22_ERR_INTERNAL,
                            "cuda %s: view (f %d, h %d, w %d, c %d, strides %ld %ld %ld, border %d) spans bytes "
                            "[%ld, %ld) of an allocation of %zu at offset %ld",
                            what, v->f, v->h, v->w, v->c, v->sf, v->sh, v->sw, border,
                            (long)(p - a) + lo * v->es, (long)(p - a) + hi * v->es, c->allocs[i].bytes,
                            (long)(p - a));
        return W22_OK;
    }
    return W22_OK; /* memory not from this backend (the caller's): nothing to check against */
}

static w22_status op_alloc(w22_backend *b, size_t bytes, void **ptr) {
    return w22_cuda_malloc(cuda_of(b), bytes, ptr, "an activation buffer");
}
static void op_free(w22_backend *b, void *ptr) { w22_cuda_free_ptr(cuda_of(b), ptr); }

/* ---- weights ---- */

static w22_status op_weight_upload(w22_backend *b, w22_weight_kind kind, w22_wsrc src, const int64_t *shape, int ndim,
                                   w22_bweight **out) {
    w22_cuda *c = cuda_of(b);
    *out = NULL;
    if (!src.data || !shape || ndim < 1 || ndim > 5)
        return w22_fail(W22_ERR_INVALID_ARG, "cuda weight_upload: data %p, ndim %d", src.data, ndim);
    if (src.dtype != W22_DTYPE_F32 && src.dtype != W22_DTYPE_BF16 && src.dtype != W22_DTYPE_F16)
        return w22_fail(W22_ERR_INVALID_ARG, "cuda weight_upload: dtype %d, expected F32, BF16 or F16", (int)src.dtype);
    CU_ENTER(c);
    w22_cuda_weight *w = (w22_cuda_weight *)calloc(1, sizeof *w);
    if (!w) return w22_fail(W22_ERR_OUT_OF_MEMORY, "out of host memory for a weight");
    w->kind = kind;
    size_t n = 1;
    for (int i = 0; i < ndim; i++) n *= (size_t)shape[i];
    w22_status s = W22_OK;
    if (kind == W22_WK_VECTOR) {
        w->n = (int)n; /* bias, gamma: fp32, any shape ([c], [c,1,1], ...) taken as its n elements */
    } else if (kind == W22_WK_CONV && ndim >= 2) {
        /* [cout, cin, kt, kh, kw] with missing trailing kernel dims right-aligned: 4D = [cout, cin, kh, kw] */
        int k[3] = {1, 1, 1};
        for (int i = 2; i < ndim; i++) k[3 - (ndim - i)] = (int)shape[i];
        w->cout = (int)shape[0], w->cin = (int)shape[1], w->kt = k[0], w->kh = k[1], w->kw = k[2];
    } else {
        s = w22_fail(kind == W22_WK_CONV ? W22_ERR_BAD_SHAPE : W22_ERR_INVALID_ARG,
                     "cuda weight_upload: kind %d with ndim %d, expected a vector or a conv [cout, cin, ...]", (int)kind,
                     ndim);
    }
    /* the layouts are made on the GPU (weights_gpu.cu); a 2D 3x3 conv (the upsamplers') gets its phases too */
    if (s == W22_OK) s = w22_cuda_weight_make(c, w, &src, n, kind == W22_WK_CONV && ndim == 4 && w->kh == 3 && w->kw == 3);
    if (s != W22_OK) {
        w22_cuda_free_ptr(c, w->dev);
        if (w->dev_phase) w22_cuda_free_ptr(c, w->dev_phase);
        free(w);
        return s;
    }
    *out = (w22_bweight *)w;
    return W22_OK;
}

static void op_weight_free(w22_backend *b, w22_bweight *bw) {
    w22_cuda_weight *w = (w22_cuda_weight *)bw;
    if (!w) return;
    w22_cuda_free_ptr(cuda_of(b), w->dev);
    if (w->dev_phase) w22_cuda_free_ptr(cuda_of(b), w->dev_phase);
    free(w);
}

static size_t op_weight_bytes(const w22_bweight *bw) { return bw ? ((const w22_cuda_weight *)bw)->bytes : 0; }

/* ---- copies, sync ---- */

static w22_status op_to_host(w22_backend *b, void *dst, const void *src, size_t bytes) {
    w22_cuda *c = cuda_of(b);
    CU_TRY(cudaSetDevice(c->device));
    CU_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, c->stream));
    CU_TRY(cudaStreamSynchronize(c->stream));
    return W22_OK;
}
static w22_status op_host_alloc(w22_backend *b, size_t bytes, void **ptr) {
    w22_cuda *c = cuda_of(b);
    *ptr = NULL;
    CU_ENTER(c);
    const cudaError_t e = cudaHostAlloc(ptr, bytes ? bytes : 1, cudaHostAllocDefault);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        *ptr = NULL;
        return w22_fail(W22_ERR_OUT_OF_MEMORY, "cudaHostAlloc of %zu bytes (pinned memory for the video): %s", bytes,
                        cudaGetErrorString(e));
    }
    return W22_OK;
}
static void op_host_free(w22_backend *b, void *ptr) {
    if (!ptr) return;
    cudaSetDevice(cuda_of(b)->device);
    if (cudaFreeHost(ptr) != cudaSuccess) (void)cudaGetLastError();
}
static w22_status op_to_host_begin(w22_backend *b, void *dst, const void *src, size_t bytes, int slot) {
    w22_cuda *c = cuda_of(b);
    CU_ENTER(c);
    if (slot < 0 || slot > 1) return w22_fail(W22_ERR_INTERNAL, "cuda to_host_begin: slot %d, expected 0 or 1", slot);
    if (!c->ev_host[slot]) CU_TRY(cudaEventCreateWithFlags(&c->ev_host[slot], cudaEventDisableTiming));
    CU_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, c->stream));
    CU_TRY(cudaEventRecord(c->ev_host[slot], c->stream));
    return W22_OK;
}
static w22_status op_to_host_wait(w22_backend *b, int slot) {
    w22_cuda *c = cuda_of(b);
    CU_ENTER(c);
    if (slot < 0 || slot > 1 || !c->ev_host[slot])
        return w22_fail(W22_ERR_INTERNAL, "cuda to_host_wait: slot %d has no copy begun", slot);
    CU_TRY(cudaEventSynchronize(c->ev_host[slot]));
    return W22_OK;
}
static w22_status op_from_host(w22_backend *b, void *dst, const void *src, size_t bytes) {
    w22_cuda *c = cuda_of(b);
    CU_TRY(cudaSetDevice(c->device));
    CU_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, c->stream));
    /* pageable host memory: the caller may reuse src once we return, so wait (the copy is staged anyway) */
    CU_TRY(cudaStreamSynchronize(c->stream));
    return W22_OK;
}
/* Device memory, or pinned host memory from op_host_alloc on either side (the plan's hosted caches under a work
 * budget: plan.h's host_stages): cudaMemcpyDefault takes the direction from the pointers (unified addressing), and
 * the copy stays asynchronous and ordered on the stream either way. */
static w22_status op_copy_bytes(w22_backend *b, void *dst, const void *src, size_t bytes) {
    w22_cuda *c = cuda_of(b);
    CU_ENTER(c);
    CU_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, c->stream));
    return W22_OK;
}
static w22_status op_sync(w22_backend *b) {
    w22_cuda *c = cuda_of(b);
    CU_TRY(cudaSetDevice(c->device));
    CU_TRY(cudaStreamSynchronize(c->stream));
    if (c->copy_in) CU_TRY(cudaStreamSynchronize(c->copy_in)); /* copy_begin's: a failed decode's may be in flight */
    if (c->copy_out) CU_TRY(cudaStreamSynchronize(c->copy_out));
    return W22_OK;
}

/* The copy queue (backend.h's copy_begin): a copy into host memory goes on copy_out, any other on copy_in, so that
 * the hosted caches' write-backs and prefetches use both directions of the bus at once. Each starts after the main
 * stream's queued work (ev_copy_fork) and after the last copy of its tag (ev_copy[tag], on either stream). */
static w22_status op_copy_begin(w22_backend *b, void *dst, const void *src, size_t bytes, int tag) {
    w22_cuda *c = cuda_of(b);
    if (tag < 0 || tag >= W22_COPY_TAGS)
        return w22_fail(W22_ERR_INTERNAL, "cuda copy_begin: tag %d, expected 0 .. %d", tag, W22_COPY_TAGS - 1);
    CU_ENTER(c);
    if (!c->ev_copy_fork) CU_TRY(cudaEventCreateWithFlags(&c->ev_copy_fork, cudaEventDisableTiming));
    if (!c->copy_out) CU_TRY(cudaStreamCreateWithFlags(&c->copy_out, cudaStreamNonBlocking));
    if (!c->copy_in) CU_TRY(cudaStreamCreateWithFlags(&c->copy_in, cudaStreamNonBlocking));
    cudaPointerAttributes at;
    if (cudaPointerGetAttributes(&at, dst) != cudaSuccess) {
        (void)cudaGetLastError();
        at.type = cudaMemoryTypeUnregistered;
    }
    const int to_host = at.type != cudaMemoryTypeDevice && at.type != cudaMemoryTypeManaged;
    cudaStream_t st = to_host ? c->copy_out : c->copy_in;
    CU_TRY(cudaEventRecord(c->ev_copy_fork, c->stream));
    CU_TRY(cudaStreamWaitEvent(st, c->ev_copy_fork, 0));
    if (c->ev_copy[tag]) CU_TRY(cudaStreamWaitEvent(st, c->ev_copy[tag], 0));
    else CU_TRY(cudaEventCreateWithFlags(&c->ev_copy[tag], cudaEventDisableTiming));
    CU_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, st));
    CU_TRY(cudaEventRecord(c->ev_copy[tag], st));
    return W22_OK;
}
/* What a conv's Winograd bands want of the plan's free memory, at this backend's threshold (route.h) */
static size_t op_conv_work(w22_backend *b, int kt, int ks, int cin, int cout, int frames, int h, int w) {
    return w22_route_winograd_work(kt, ks, cin, cout, frames, h, w, cuda_of(b)->wino_min);
}

static w22_status op_copy_wait(w22_backend *b, int tag) {
    w22_cuda *c = cuda_of(b);
    if (tag < 0 || tag >= W22_COPY_TAGS)
        return w22_fail(W22_ERR_INTERNAL, "cuda copy_wait: tag %d, expected 0 .. %d", tag, W22_COPY_TAGS - 1);
    if (!c->ev_copy[tag]) return W22_OK; /* nothing begun with it */
    CU_ENTER(c);
    CU_TRY(cudaStreamWaitEvent(c->stream, c->ev_copy[tag], 0));
    return W22_OK;
}

/* The side queue (backend.h): made at first use; events without timing. */
static w22_status op_side_begin(w22_backend *b) {
    w22_cuda *c = cuda_of(b);
    CU_ENTER(c);
    if (c->on_side) return w22_fail(W22_ERR_INTERNAL, "cuda: side_begin while the side stream is current");
    if (!c->side) {
        CU_TRY(cudaStreamCreateWithFlags(&c->side, cudaStreamNonBlocking));
        CU_TRY(cudaEventCreateWithFlags(&c->ev_fork, cudaEventDisableTiming));
        CU_TRY(cudaEventCreateWithFlags(&c->ev_side_done, cudaEventDisableTiming));
    }
    CU_TRY(cudaEventRecord(c->ev_fork, c->stream));
    CU_TRY(cudaStreamWaitEvent(c->side, c->ev_fork, 0));
    c->main_stream = c->stream;
    c->stream = c->side;
    c->on_side = 1;
    return W22_OK;
}
static w22_status op_side_end(w22_backend *b) {
    w22_cuda *c = cuda_of(b);
    if (!c->on_side) return W22_OK;
    c->stream = c->main_stream; /* first, so that an error below still leaves the main stream current */
    c->on_side = 0;
    CU_ENTER(c);
    CU_TRY(cudaEventRecord(c->ev_side_done, c->side));
    return W22_OK;
}
static w22_status op_side_join(w22_backend *b) {
    w22_cuda *c = cuda_of(b);
    W22_TRY(op_side_end(b));
    if (!c->side) return W22_OK;
    CU_ENTER(c);
    CU_TRY(cudaStreamWaitEvent(c->stream, c->ev_side_done, 0));
    return W22_OK;
}

static void op_destroy(w22_backend *b) {
    if (!b) return;
    w22_cuda *c = cuda_of(b);
    if (c) {
        cudaSetDevice(c->device);
        cudaStreamSynchronize(c->stream);
        w22_cuda_free_ptr(c, c->attn_scratch);
        w22_cuda_free_ptr(c, c->split_part);
        w22_cuda_free_ptr(c, c->wino_scratch);
        w22_cuda_free_ptr(c, c->wino_u);
        for (int k = 0; k < W22_IDENT_MAX; k++) w22_cuda_free_ptr(c, c->ident[k]);
        w22_cuda_free_ptr(c, c->inspect_count);
        w22_cuda_free_ptr(c, c->audit_buf);
        w22_cuda_free_ptr(c, c->wt_stage);
        for (int k = 0; k < 2; k++)
            if (c->ev_host[k]) cudaEventDestroy(c->ev_host[k]);
        for (int k = 0; k < 2; k++) {
            cudaStream_t st = k ? c->copy_out : c->copy_in;
            if (st) {
                cudaStreamSynchronize(st);
                cudaStreamDestroy(st);
            }
        }
        if (c->ev_copy_fork) cudaEventDestroy(c->ev_copy_fork);
        for (int k = 0; k < W22_COPY_TAGS; k++)
            if (c->ev_copy[k]) cudaEventDestroy(c->ev_copy[k]);
        if (c->side) {
            cudaStreamSynchronize(c->side);
            cudaStreamDestroy(c->side);
            cudaEventDestroy(c->ev_fork);
            cudaEventDestroy(c->ev_side_done);
        }
        if (c->own_stream) cudaStreamDestroy(c->own_stream);
        (void)cudaGetLastError();
        free(c->allocs);
        free(c);
    }
    free(b);
}

const w22_backend_ops w22_cuda_ops_plain = {
    "cuda",
    2,
    op_destroy,
    op_alloc,
    op_free,
    op_weight_upload,
    op_weight_free,
    op_weight_bytes,
    op_to_host,
    op_from_host,
    op_copy_bytes,
    w22_cuda_zero,
    w22_cuda_copy,
    w22_cuda_latents_in,
    w22_cuda_conv,
    w22_cuda_rmsnorm,
    w22_cuda_attention,
    w22_cuda_dupup_add,
    w22_cuda_unpatchify,
    op_sync,
    op_side_begin,
    op_side_end,
    op_side_join,
    w22_cuda_zero_border,
    w22_cuda_fill,
    w22_cuda_inspect,
    w22_cuda_audit,
    op_host_alloc,
    op_host_free,
    op_to_host_begin,
    op_to_host_wait,
    op_copy_begin,
    op_copy_wait,
    op_conv_work,
};

/* ---- public entry points ---- */

extern "C" int w22_cuda_available(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    for (int d = 0; d < n; d++) {
        int major = 0;
        if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, d) != cudaSuccess) {
            (void)cudaGetLastError();
            continue;
        }
        if (w22_route_path(major, 0, 0) >= 0) return 1; /* sm_80 and up: a path of this build runs there */
    }
    return 0;
}

/* Whether the portable path is asked for: `kernels` (w22_decoder_params.kernels) or, left at W22_KERNELS_AUTO, the
 * environment's W22_KERNELS (auto or portable; read at each create, as W22_WINOGRAD is). */
static w22_status kernels_asked(int kernels, int *portable) {
    *portable = 0;
    if (kernels == W22_KERNELS_PORTABLE) {
        *portable = 1;
        return W22_OK;
    }
    if (kernels != W22_KERNELS_AUTO)
        return w22_fail(W22_ERR_INVALID_ARG, "kernels %d, expected W22_KERNELS_AUTO (0) or W22_KERNELS_PORTABLE (1)",
                        kernels);
    const char *e = getenv("W22_KERNELS");
    if (!e || !e[0] || !strcmp(e, "auto")) return W22_OK;
    if (!strcmp(e, "portable")) {
        *portable = 1;
        return W22_OK;
    }
    return w22_fail(W22_ERR_INVALID_ARG, "W22_KERNELS=%s, expected auto or portable", e);
}

const char *w22_cuda_path_words(const w22_cuda *c) { return c->path_words; }

extern "C" w22_status w22_backend_cuda_create(int device, w22_backend **out) {
    return w22_backend_cuda_create_kernels(device, W22_KERNELS_AUTO, out);
}

extern "C" w22_status w22_backend_cuda_create_kernels(int device, int kernels, w22_backend **out) {
    w22_env_check();
    *out = NULL;
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        (void)cudaGetLastError();
        return w22_fail(W22_ERR_UNSUPPORTED, "no CUDA GPU: %s", e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    }
    if (device < 0 || device >= n)
        return w22_fail(W22_ERR_INVALID_ARG, "CUDA device %d does not exist (%d present)", device, n);
    int portable = 0;
    W22_TRY(kernels_asked(kernels, &portable));
    cudaDeviceProp prop;
    CU_TRY(cudaGetDeviceProperties(&prop, device));
    const int path = w22_route_path(prop.major, prop.minor, portable); /* route.h */
    if (path < 0)
        return w22_fail(W22_ERR_UNSUPPORTED, "GPU %d (%s) is sm_%d%d; the CUDA backend needs sm_80 or later (Ampere, "
                        "Ada, Hopper, Blackwell): the CPU backend (device cpu) decodes on any machine", device,
                        prop.name, prop.major, prop.minor);
    CU_TRY(cudaSetDevice(device));
    w22_backend *b = (w22_backend *)calloc(1, sizeof *b);
    w22_cuda *c = (w22_cuda *)calloc(1, sizeof *c);
    if (!b || !c) {
        free(b);
        free(c);
        return w22_fail(W22_ERR_OUT_OF_MEMORY, "out of host memory for the CUDA backend");
    }
    b->ops = &w22_cuda_ops_plain;
    b->threads = 1;
    b->impl = c;
    c->device = device;
    c->hopper = path == 1;
    c->wino_min = w22_cuda_winograd_min_cin(c->hopper); /* W22_WINOGRAD, else the path's default; a decoder may set exact */
    c->cc_major = prop.major, c->cc_minor = prop.minor;
    /* the portable path within the smallest of its GPUs' shared memory, on a Hopper too (route.h) */
    c->smem_optin = (int)prop.sharedMemPerBlockOptin;
    if (!c->hopper && c->smem_optin > W22_PORTABLE_SMEM) c->smem_optin = W22_PORTABLE_SMEM;
    snprintf(c->path_words, sizeof c->path_words, "%s (GPU %d: %s, sm_%d%d%s)",
             c->hopper ? "the Hopper path (sm_90a: wgmma, TMA)" : "the portable path (mma.sync)", device, prop.name,
             prop.major, prop.minor, !c->hopper && prop.major == 9 ? ", portable path asked for" : "");
    c->sms = prop.multiProcessorCount;
    const char *dbg = getenv("W22_CUDA_DEBUG");
    c->debug = dbg && dbg[0] && dbg[0] != '0';
    c->last_path = "";
    e = cudaStreamCreateWithFlags(&c->own_stream, cudaStreamNonBlocking);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        free(c);
        free(b);
        return w22_fail(W22_ERR_CUDA, "cudaStreamCreateWithFlags: %s", cudaGetErrorString(e));
    }
    c->stream = c->own_stream;
    w22_status s = w22_cuda_gemm_init(c);
    if (s == W22_OK) s = w22_cuda_prof_init(b);
    if (s != W22_OK) {
        op_destroy(b);
        return s;
    }
    *out = b;
    return W22_OK;
}

extern "C" void w22_backend_cuda_set_stream(w22_backend *b, void *stream) {
    w22_cuda *c = cuda_of(b);
    c->stream = stream ? (cudaStream_t)stream : c->own_stream;
}

extern "C" w22_status w22_backend_cuda_model_ok(const struct w22_model *m) {
    const char *at;
    const int c = w22_model_feature_channels_off(m, 8, &at);
    if (c)
        return w22_fail(W22_ERR_UNSUPPORTED, "the CUDA backend decodes configs whose feature channels are multiples of 8 "
                        "(both Wan VAEs' are); %s has %d (base_dim %d): decode this config on the CPU backend", at, c,
                        m->cfg.base_dim);
    for (int i = 0; i < m->nlayers; i++) {
        const w22_layer *L = &m->layers[i];
        if (L->kind == W22_L_DUPUP && !w22_lower_dup_fusable(L->cout, L->cin, L->temporal ? 2 : 1))
            return w22_fail(W22_ERR_UNSUPPORTED, "the CUDA backend adds each up block's DupUp shortcut in its upsample "
                            "conv, which takes the channel maps of both Wan VAEs (cin = cout in time, cin = 2 cout in "
                            "space); %s maps %d to %d channels%s: decode this config on the CPU backend", L->prefix,
                            L->cin, L->cout, L->temporal ? " and doubles time" : "");
    }
    return W22_OK;
}

extern "C" void w22_backend_cuda_set_exact(w22_backend *b, int exact) {
    if (exact) cuda_of(b)->wino_min = 0;
}

extern "C" void w22_backend_cuda_use_callers_stream(w22_backend *b, void *stream) {
    w22_cuda *c = cuda_of(b);
    c->stream = stream ? (cudaStream_t)stream : cudaStreamLegacy;
}

extern "C" size_t w22_backend_cuda_bytes(const w22_backend *b, size_t *peak) {
    const w22_cuda *c = (const w22_cuda *)b->impl;
    if (peak) *peak = c->peak;
    return c->bytes;
}

extern "C" void w22_backend_cuda_reset_peak(w22_backend *b) {
    w22_cuda *c = (w22_cuda *)b->impl;
    c->peak = c->bytes;
}

extern "C" void w22_backend_cuda_open_times(const w22_backend *b, double t[3]) {
    const w22_cuda *c = (const w22_cuda *)b->impl;
    t[0] = c->open_layout_s, t[1] = c->open_copy_s, t[2] = c->open_alloc_s;
}

/* Not in backend.h (tests only): the channels from which a 3x3x3 conv runs as Winograd (0: none); returns the old
 * value. cuda_ops runs with W22_WINOGRAD=0 and lowers it for its Winograd cases. */
extern "C" int w22_backend_cuda_swap_winograd_min(w22_backend *b, int n) {
    const int old = cuda_of(b)->wino_min;
    cuda_of(b)->wino_min = n;
    return old;
}

/* Not in backend.h (tests only): the most scratch the attention allocates of its own before it bands the queries
 * (0: W22_ATTN_OWN_MAX, attention.cu); returns the old value. cuda_ops sets a small one to test the bands. */
extern "C" size_t w22_backend_cuda_swap_attention_max(w22_backend *b, size_t bytes) {
    const size_t old = cuda_of(b)->attn_max;
    cuda_of(b)->attn_max = bytes;
    return old;
}

/* Not in backend.h (tests only): a weight's buffers, for cuda_ops' comparison with layout.c: [0] the direct layout,
 * [1] the phases (NULL: none), and their bytes. */
extern "C" void w22_backend_cuda_weight_bufs(const w22_bweight *bw, const void *dev[2], size_t bytes[2]) {
    const w22_cuda_weight *w = (const w22_cuda_weight *)bw;
    const size_t n = (size_t)w->cout * w->cin * w->kt * w->kh * w->kw;
    dev[0] = w->dev, dev[1] = w->dev_phase;
    bytes[0] = w->kind == W22_WK_VECTOR ? (size_t)w->n * 4 : n * 2;
    bytes[1] = (size_t)16 * w->cout * w->cin * 2;
}

extern "C" const char *w22_backend_cuda_path(const w22_backend *b) {
    return ((const w22_cuda *)b->impl)->hopper ? "hopper" : "portable";
}

/* Not in backend.h (tests and logs only): the kernel the last GEMM ran on ("mma 128x128", "scalar: ..."). */
extern "C" const char *w22_backend_cuda_last_path(const w22_backend *b) {
    return ((const w22_cuda *)b->impl)->last_path;
}

/* Not in backend.h (tests only): the last conv's decision (route.h) and its launches as they ran. */
extern "C" void w22_backend_cuda_last_route(const w22_backend *b, w22_route *out) {
    *out = ((const w22_cuda *)b->impl)->route;
}

/* Not in backend.h (tests only): a batch GEMM (w22_mm.batch; fp16 with w22_mm.f16) as the backend launches one, on
 * its stream: one launch of the TMA conv or of the mma.sync kernel where route.h's w22_route_batch gives it (*how),
 * else its GEMMs apart through w22_cuda_gemm (which refuses fp16). cuda_ops checks the fp16 kernels with it. */
extern "C" w22_status w22_backend_cuda_batch_gemm(w22_backend *b, const w22_mm *g, int *how) {
    w22_cuda *c = cuda_of(b);
    const w22_batch_launch k = w22_route_batch(g, c->hopper);
    *how = (int)k;
    if (k == W22_BATCH_TMA) return w22_cuda_gemm_wgmma_batch(c, g, "a batch GEMM (tests)");
    if (k == W22_BATCH_MMA) return w22_cuda_gemm_mma_batch(c, g, "a batch GEMM (tests)");
    for (int p = 0; p < (g->batch ? g->batch : 1); p++) {
        w22_mm r = *g;
        r.batch = 0, r.a_frames = 0;
        memset(r.ph_o, 0, sizeof r.ph_o);
        r.a = g->a + (long)p * g->a_frames * g->a_sf, r.b = g->b + (long)p * g->N * g->b_sw;
        r.out = g->out_f32 ? (void *)((float *)g->out + g->ph_o[p]) : (void *)((bf16 *)g->out + g->ph_o[p]);
        W22_TRY(w22_cuda_gemm(c, &r, "a batch GEMM's component (tests)"));
    }
    return W22_OK;
}

/* Not in backend.h (tests only): the clusters of 2 the TMA conv's persistent grid runs (0: no clusters). */
extern "C" int w22_backend_cuda_tma_clusters(const w22_backend *b) {
    return ((const w22_cuda *)b->impl)->tma_clusters;
}

extern "C" void *w22_backend_cuda_stream(w22_backend *b) { return (void *)cuda_of(b)->stream; }
