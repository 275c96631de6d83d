/* The public decoder: opens a backend, uploads the weights in its layout, checks the inputs, runs the plan, and
 * hands the video over (into a host buffer, frame by frame to a callback, or into device memory). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common.h"
#include "plan/plan.h"
#include "io/io.h"
#include "weights/weights.h"

void w22_decoder_params_init(w22_decoder_params *p) {
    memset(p, 0, sizeof *p);
    p->device = W22_DEVICE_CPU;
}

void w22_decoder_set_interrupt(w22_decoder *d, const volatile int *flag) {
    if (!d) return;
    d->interrupt = flag;
    if (d->backend) d->backend->interrupt = flag;
}

void w22_decoder_free(w22_decoder *d) {
    if (!d) return;
    pthread_mutex_lock(&d->lock); /* a decode running in another thread ends first */
    pthread_mutex_unlock(&d->lock);
    pthread_mutex_destroy(&d->lock);
    if (d->backend) {
        w22_plan_release(d);
        for (int i = 0; i < W22_MAX_WEIGHTS; i++)
            if (d->wt[i]) d->backend->ops->weight_free(d->backend, d->wt[i]);
        d->backend->ops->destroy(d->backend);
    }
    free(d->rank_rows);
    free(d->rank_off);
    free(d->rank_bytes);
    free(d);
}

const char *w22_decoder_path(const w22_decoder *d) {
    if (!d || !d->backend) return "none";
    return d->params.device == W22_DEVICE_CUDA ? w22_backend_cuda_path(d->backend) : "cpu";
}

w22_status w22_decoder_release_workspace(w22_decoder *d) {
    if (!d) return w22_fail(W22_ERR_INVALID_ARG, "w22_decoder_release_workspace: the decoder must not be NULL");
    pthread_mutex_lock(&d->lock);
    w22_plan_release(d);
    pthread_mutex_unlock(&d->lock);
    return W22_OK;
}

w22_status w22_decoder_open(const w22_weights *w, const w22_decoder_params *p, w22_decoder **out) {
    if (!w || !out) return w22_fail(W22_ERR_INVALID_ARG, "w22_decoder_open: weights and out must not be NULL");
    *out = NULL;
    w22_decoder_params defaults;
    if (!p) {
        w22_decoder_params_init(&defaults);
        p = &defaults;
    }
    W22_TRY(w22_env_validate()); /* a switch set to a value it does not take is an error, not silently off */
    if (p->frames_per_pass < 0 || p->frames_per_pass > 1024)
        return w22_fail(W22_ERR_INVALID_ARG, "frames_per_pass %d, expected 0 (default) or 1..1024", p->frames_per_pass);
    if (p->exact != 0 && p->exact != 1)
        return w22_fail(W22_ERR_INVALID_ARG, "exact %d, expected 0 (Winograd where it applies) or 1 (every conv exact)",
                        p->exact);
    /* the CLI's --threads range; each is a thread the CPU backend's products may start */
    if (p->threads < 0 || p->threads > 4096)
        return w22_fail(W22_ERR_INVALID_ARG, "threads %d, expected 0 (all cores) or 1..4096", p->threads);
    if (p->kernels != W22_KERNELS_AUTO && p->kernels != W22_KERNELS_PORTABLE)
        return w22_fail(W22_ERR_INVALID_ARG, "kernels %d, expected W22_KERNELS_AUTO (0) or W22_KERNELS_PORTABLE (1)",
                        p->kernels);
    if (p->work_budget_bytes && p->work_budget_bytes < W22_WORK_RESERVE)
        return w22_fail(W22_ERR_INVALID_ARG, "work_budget_bytes %zu, expected 0 (the default plan) or at least %zu "
                        "(the backend's own scratch, plan.h's W22_WORK_RESERVE; a decode needs more)",
                        p->work_budget_bytes, (size_t)W22_WORK_RESERVE);
    /* 64 bounds a typo: each band recomputes its halo rows (plan.c's band_plan), so many bands multiply the work */
    if (p->bands < 0 || p->bands > 64)
        return w22_fail(W22_ERR_INVALID_ARG, "bands %d, expected 0 or 1 (the whole frame) or 2..64", p->bands);
    if (p->device != W22_DEVICE_CPU && p->device != W22_DEVICE_CUDA)
        return w22_fail(W22_ERR_INVALID_ARG, "device %d, expected W22_DEVICE_CPU or W22_DEVICE_CUDA", p->device);
    /* weights mapped from a file are read in place below: a file shrunk in place since the load would fault this
     * process (SIGBUS) on the first read past its new end, one rewritten would hand over unchecked weights */
    W22_TRY(w22_weights_unchanged(w, "before the decoder's open"));
    w22_decoder *d = calloc(1, sizeof *d);
    if (!d) return w22_fail(W22_ERR_OUT_OF_MEMORY, "out of host memory for a decoder");
    pthread_mutex_init(&d->lock, NULL);
    d->model = w->model;
    d->params = *p;
    d->comm = p->comm;
    d->rank = p->comm ? p->comm->rank : 0;
    d->world = p->comm ? p->comm->world : 1;
    d->on_all_ranks = p->video_on_all_ranks;
    d->rank_rows = calloc((size_t)d->world + 1, sizeof *d->rank_rows);
    d->rank_off = calloc((size_t)d->world, sizeof *d->rank_off);
    d->rank_bytes = calloc((size_t)d->world, sizeof *d->rank_bytes);
    if (!d->rank_rows || !d->rank_off || !d->rank_bytes) {
        w22_decoder_free(d);
        return w22_fail(W22_ERR_OUT_OF_MEMORY, "out of host memory for a decoder of %d ranks", d->world);
    }
    d->check = p->check || w22_env_on("W22_CHECK");
    /* two latent frames per pass by default (v24: f121 -0.4% against one: stage 0's Winograd convs transform 4
     * input frames for 2 outputs instead of 3 for 1, on twice the GEMM rows; the workspace at 704x1248 3.96 GiB,
     * within the 4 GiB target) */
    d->frames_per_pass = p->frames_per_pass ? p->frames_per_pass : 2;
    /* W22_PROFILE: where the open's time goes (issue 30: the open is the user's wait before the first frame) */
    const int prof = w22_env_on("W22_PROFILE"); /* as the op table's (cuda/profile.cu): "0" is off */
    double t_create = w22_now(), t_f32 = 0, t_up = 0;
    w22_status s = p->device == W22_DEVICE_CUDA
                       ? w22_backend_cuda_create_kernels(p->cuda_device, p->kernels, &d->backend)
                       : w22_backend_cpu_create(p->threads, &d->backend);
    if (s != W22_OK) {
        free(d);
        return s;
    }
    t_create = w22_now() - t_create;
    if (p->device == W22_DEVICE_CUDA) {
        /* what the CUDA kernels take (feature channels of whole 16-byte vectors, the DupUps their phases fuse), said
         * here, before the weights go up, not at the first decode */
        s = w22_backend_cuda_model_ok(&d->model);
        if (s != W22_OK) {
            w22_decoder_free(d);
            return s;
        }
        w22_backend_cuda_set_exact(d->backend, p->exact);
    }
    /* Weights: the CUDA backend takes each tensor as it is (host or GPU memory, its dtype) and lays it out on the
     * GPU; the CPU backend takes float32 on the host (weights on a GPU copied down first). */
    const int cuda = p->device == W22_DEVICE_CUDA;
    w22_weights *host = NULL;
    if (!cuda && w->on_device) s = w22_weights_to_host(w, &host);
    const w22_weights *src = host ? host : w;
    size_t maxn = 0;
    for (int i = 0; i < d->model.nweights; i++)
        if ((size_t)d->model.weights[i].numel > maxn) maxn = d->model.weights[i].numel;
    float *tmp = s == W22_OK && !cuda ? w22_malloc(maxn * sizeof(float), "a weight in float32") : NULL;
    if (s == W22_OK && !cuda && !tmp) s = W22_ERR_OUT_OF_MEMORY;
    for (int i = 0; i < d->model.nweights && s == W22_OK; i++) {
        const w22_weight_desc *wd = &d->model.weights[i];
        w22_wsrc ws = {src->data[i], src->dtype[i], src->on_device ? src->cuda_device : -1};
        double t0 = w22_now();
        if (!cuda) {
            w22_weights_get_f32(src, i, tmp);
            ws.data = tmp, ws.dtype = W22_DTYPE_F32;
        }
        t_f32 += w22_now() - t0;
        t0 = w22_now();
        w22_weight_kind kind = (wd->is_gamma || wd->ndim == 1) ? W22_WK_VECTOR : W22_WK_CONV;
        /* gammas ([C, 1, 1(, 1)]) go up as plain vectors */
        s = d->backend->ops->weight_upload(d->backend, kind, ws, wd->shape, kind == W22_WK_VECTOR ? 1 : wd->ndim,
                                           &d->wt[i]);
        t_up += w22_now() - t0;
        if (s == W22_OK) d->weight_bytes += d->backend->ops->weight_bytes(d->wt[i]);
        else w22_fail_context(s, "uploading %s: ", wd->name);
    }
    free(tmp);
    w22_weights_free(host);
    if (cuda) w22_backend_cuda_weights_done(d->backend);
    /* and after: a change while the layouts read the file leaves a decoder of weights nobody checked */
    if (s == W22_OK) s = w22_weights_unchanged(w, "during the decoder's open");
    if (s != W22_OK) {
        w22_decoder_free(d);
        return s;
    }
    if (prof) {
        double t[3] = {0, 0, 0};
        if (cuda) w22_backend_cuda_open_times(d->backend, t);
        fprintf(stderr, "wan22vae: open: backend %.3f s, weights to float32 (CPU) %.3f s, backend weights %.3f s "
                        "(copies %.3f, layouts on the GPU %.3f: of it cudaMalloc %.3f), %.0f MB\n",
                t_create, t_f32, t_up, t[1], t[0], t[2], d->weight_bytes / 1e6);
    }
    *out = d;
    return W22_OK;
}

size_t w22_decoder_device_bytes(const w22_decoder *d) {
    if (!d || d->params.device != W22_DEVICE_CUDA) return 0;
    return w22_backend_cuda_bytes(d->backend, NULL);
}

/* ---- inputs ---- */
w22_status w22_check_latent_size(int z_dim, int T, int h, int w) {
    if (T < 1 || h < 1 || w < 1 || T > 100000 || h > 4096 || w > 4096)
        return w22_fail(W22_ERR_BAD_SHAPE, "latents [1, %d, %d, %d, %d]: T, h and w must be positive (T <= 100000, "
                        "h, w <= 4096)", z_dim, T, h, w);
    return W22_OK;
}

static w22_status check_shape(w22_decoder *d, int T, int h, int w) {
    W22_TRY(w22_check_latent_size(d->model.cfg.z_dim, T, h, w));
    if (h < d->world)
        return w22_fail(W22_ERR_BAD_SHAPE, "latent height %d is smaller than the %d ranks (each needs a row)", h,
                        d->world);
    return W22_OK;
}

/* Every rank learns whether every rank is ready; a rank that is not says why on its own. */
static w22_status agree(w22_decoder *d, w22_status mine) {
    if (!d->comm) return mine; /* a group of one still agrees: it exercises the comm */
    int ok = mine == W22_OK;
    w22_status s = d->comm->ops->agree(d->comm, &ok);
    if (s != W22_OK) return s;
    if (mine != W22_OK) return mine;
    return ok ? W22_OK : w22_fail(W22_ERR_COMM, "another rank could not start this decode (see its error)");
}

/* ---- delivery ---- */
typedef struct {
    void *video;         /* host NCDHW, or NULL */
    w22_dtype vt;
    w22_frames_fn fn;
    void *user;
    float *frames;       /* [3][chunk][H][W] for fn */
    void *host_staging[2]; /* deliver_host's double buffer (the backend's host memory) */
    int pending, pend_slot, pend_m, pend_f0; /* a delivery copied or on its way, not yet handed over */
    int pend_y0, pend_rows; /* its video rows (a band decode's kept rows: the band may change before it is handed) */
    void *video_dev;     /* device NCDHW bf16 */
    w22_device_frames_fn dev_fn; /* or frames to this callback, in frames_dev (bf16 [3][chunk][H][W]) */
    void *frames_dev;
    w22_status failed;   /* a copy or sync of deliver_device that failed, and its message */
    char why[1024];
} sink;

/* The video rows a delivery holds: all of them, or a band decode's kept rows (plan.h), which lie in the staging from
 * row *src (the band's first row is its row 0) and go to the video's rows from *dst. */
static int band_video_rows(const w22_decoder *d, int *src, int *dst) {
    if (d->bands <= 1) {
        *src = *dst = 0;
        return d->video_h;
    }
    const int s = d->video_h / d->h;
    *src = (d->band_k0 - d->band_a0) * s;
    *dst = d->band_k0 * s;
    return (d->band_k1 - d->band_k0) * s;
}

/* A delivery's frames on the host: [H][m][3][W] (es bytes each) in host_staging[slot] (the kept rows of a band from
 * its row 0), into the video or the frames callback. */
static int deliver_convert(w22_decoder *d, sink *k, int slot, int m, int f0, int dst, int nrows) {
    const int H = d->video_h, W = d->video_w, F = d->video_frames;
    const size_t es = d->backend->ops->elem_size;
    const void *hs = k->host_staging[slot];
    for (int y = dst; y < dst + nrows; y++)
        for (int f = 0; f < m; f++)
            for (int c = 0; c < 3; c++) {
                size_t src = (((size_t)(y - dst) * m + f) * 3 + c) * W; /* the band's kept rows from row 0 */
                for (int x = 0; x < W; x++) {
                    float v = es == 4 ? ((const float *)hs)[src + x] : w22_bf16_to_f32(((const uint16_t *)hs)[src + x]);
                    if (k->video) {
                        size_t o = (((size_t)c * F + f0 + f) * H + y) * W + x;
                        if (k->vt == W22_DTYPE_F32) ((float *)k->video)[o] = v;
                        else if (k->vt == W22_DTYPE_BF16) ((uint16_t *)k->video)[o] = w22_f32_to_bf16(v);
                        else ((uint16_t *)k->video)[o] = w22_f32_to_f16(v);
                    } else {
                        k->frames[(((size_t)c * m + f) * H + y) * W + x] = v;
                    }
                }
            }
    if (k->fn) return k->fn(k->user, k->frames, f0, m, H, W);
    return 0;
}

/* The delivery before this one, if any: waits for its copy (long landed: a pass of kernels was queued after it),
 * then converts and hands it over while the GPU runs the pass queued since. */
static int deliver_pending(w22_decoder *d, sink *k) {
    if (!k->pending) return 0;
    k->pending = 0;
    w22_backend *b = d->backend;
    const w22_status s = b->ops->to_host_wait ? b->ops->to_host_wait(b, k->pend_slot) : W22_OK;
    if (s != W22_OK) {
        k->failed = s;
        snprintf(k->why, sizeof k->why, "frames %d..%d: %s", k->pend_f0, k->pend_f0 + k->pend_m - 1, w22_last_error());
        return 1;
    }
    return deliver_convert(d, k, k->pend_slot, k->pend_m, k->pend_f0, k->pend_y0, k->pend_rows);
}

/* The staging is [H][m][3][W] in backend memory. Its copy to the host begins now, ordered after the kernels that
 * write it and before the next pass's (which overwrite it); the frames go out at the next delivery or at the end
 * (decode_host), so the host's conversion and the caller's callback run while the GPU decodes (issue 30). Two
 * slots: the copy into one while the other is converted. What must hold: a slot is not written again before it
 * was handed over (deliver_pending runs before the next copy into its slot is begun). */
static int deliver_host(w22_decoder *d, const void *staging, int m) {
    sink *k = d->deliver_user;
    w22_backend *b = d->backend;
    int src, dst;
    const size_t row = (size_t)m * 3 * d->video_w * b->ops->elem_size; /* a video row of the m frames */
    const int nrows = band_video_rows(d, &src, &dst);
    const size_t n = (size_t)nrows * row;
    const void *from = (const char *)staging + (size_t)src * row;
    const int slot = k->pending ? 1 - k->pend_slot : 0;
    const w22_status s = b->ops->to_host_begin ? b->ops->to_host_begin(b, k->host_staging[slot], from, n, slot)
                                               : b->ops->to_host(b, k->host_staging[slot], from, n);
    if (s != W22_OK) {
        k->failed = s;
        snprintf(k->why, sizeof k->why, "frames %d..%d: %s", d->first_out_frame, d->first_out_frame + m - 1,
                 w22_last_error());
        return 1;
    }
    const int stop = deliver_pending(d, k);
    k->pending = 1, k->pend_slot = slot, k->pend_m = m, k->pend_f0 = d->first_out_frame;
    k->pend_y0 = dst, k->pend_rows = nrows;
    return stop;
}

/* Into the whole video (video_dev), or into frames_dev for dev_fn: [3][m][H][W], handed over once the stream has
 * written it. */
static int deliver_device(w22_decoder *d, const void *staging, int m) {
    sink *k = d->deliver_user;
    const int H = d->video_h, W = d->video_w, f0 = d->first_out_frame;
    const int F = k->dev_fn ? m : d->video_frames, at = k->dev_fn ? 0 : f0;
    char *base;
    w22_backend *b = d->backend;
    w22_status s = W22_OK;
    if (k->dev_fn && !k->frames_dev) /* the first delivery: room for the most frames one delivers (the plan's) */
        s = b->ops->alloc(b, (size_t)3 * d->stages[W22_STAGES - 1].chunk * H * W * 2, &k->frames_dev);
    base = k->dev_fn ? k->frames_dev : k->video_dev;
    int r0, y0;
    const int nr = band_video_rows(d, &r0, &y0); /* a band decode's kept rows (all H else) */
    for (int c = 0; c < 3 && s == W22_OK; c++) {
        w22_view src = {(char *)staging + ((size_t)r0 * m * 3 + c) * W * 2, m, nr, W, 1, 3L * W, (long)m * 3 * W, 1, 2};
        w22_view dst = {base + (((size_t)c * F + at) * H + y0) * W * 2, m, nr, W, 1, (long)H * W, W, 1, 2};
        s = b->ops->copy(b, dst, src);
    }
    if (s == W22_OK && k->dev_fn) s = b->ops->sync(b);
    if (s != W22_OK) {
        k->failed = s;
        snprintf(k->why, sizeof k->why, "frames %d..%d: %s", f0, f0 + m - 1, w22_last_error());
        return 1;
    }
    return k->dev_fn ? k->dev_fn(k->user, k->frames_dev, f0, m, H, W) : 0;
}

static w22_status run(w22_decoder *d, const void *z_backend, w22_dtype zt, int T, int h, int w) {
    w22_status s = w22_plan_prepare(d, h, w);
    const sink *k = d->deliver_user;
    if (s == W22_OK && d->bands > 1 && (k->fn || k->dev_fn)) /* a frame is whole only at the last band */
        s = w22_fail(W22_ERR_UNSUPPORTED, "a band decode (%d bands) delivers a band's rows of every frame at a time: "
                     "it decodes into a whole video, not to a frames callback", d->bands);
    s = agree(d, s);
    if (s != W22_OK) return s;
    d->z = z_backend;
    d->zt = zt;
    d->T = T;
    w22_video_shape(&d->model.cfg, T, h, w, &d->video_frames, &d->video_h, &d->video_w);
    s = w22_plan_run(d);
    if (s != W22_OK && d->comm && d->world > 1) d->comm->ops->abort(d->comm, w22_last_error());
    return s;
}

static w22_status decode_host(w22_decoder *d, const void *z, w22_dtype zt, int T, int h, int w, sink *k) {
    if (!d || !z) return w22_fail(W22_ERR_INVALID_ARG, "w22_decode: decoder and latents must not be NULL");
    if (zt != W22_DTYPE_F32 && zt != W22_DTYPE_BF16 && zt != W22_DTYPE_F16)
        return w22_fail(W22_ERR_BAD_DTYPE, "latents dtype %d, expected F32, BF16 or F16", zt);
    w22_status s = check_shape(d, T, h, w);
    const size_t n = (size_t)d->model.cfg.z_dim * T * h * w;
    if (s == W22_OK) {
        const int64_t shape[5] = {1, d->model.cfg.z_dim, T, h, w};
        s = w22_check_finite(z, zt, 5, shape, "latents");
    }
    s = agree(d, s);
    if (s != W22_OK) return s;
    w22_backend *b = d->backend;
    /* The latents in backend memory, as F32 or BF16 (F16 becomes F32 on the way). */
    const void *zb = z;
    void *zconv = NULL;
    if (zt == W22_DTYPE_F16) {
        zconv = w22_malloc(n * 4, "the latents in float32");
        if (!zconv) return W22_ERR_OUT_OF_MEMORY;
        w22_to_f32(z, zt, n, zconv);
        zb = zconv;
        zt = W22_DTYPE_F32;
    }
    void *zdev = NULL;
    if (d->params.device == W22_DEVICE_CUDA) {
        s = b->ops->alloc(b, n * w22_dtype_size(zt), &zdev);
        if (s == W22_OK) s = b->ops->from_host(b, zdev, zb, n * w22_dtype_size(zt));
        zb = zdev;
    }
    int H = h * 8 * d->model.cfg.patch_size, W = w * 8 * d->model.cfg.patch_size;
    if (s == W22_OK) s = w22_plan_prepare(d, h, w); /* the workspace first: it fixes the frames per delivery */
    size_t chunk = (size_t)H * W * 3 * d->stages[W22_STAGES - 1].chunk;
    const size_t stage_bytes = chunk * b->ops->elem_size;
    for (int i = 0; i < 2 && s == W22_OK; i++) {
        if (b->ops->host_alloc) s = b->ops->host_alloc(b, stage_bytes, &k->host_staging[i]);
        else if (!(k->host_staging[i] = w22_malloc(stage_bytes, "the video staging"))) s = W22_ERR_OUT_OF_MEMORY;
    }
    if (s == W22_OK && k->fn && !(k->frames = w22_malloc(chunk * 4, "video frames"))) s = W22_ERR_OUT_OF_MEMORY;
    d->deliver = deliver_host;
    d->deliver_user = k;
    if (s == W22_OK) s = run(d, zb, zt, T, h, w);
    else s = agree(d, s); /* the other ranks wait in run's agreement (a plan over a work budget fails here) */
    if (s == W22_OK && deliver_pending(d, k)) /* the last delivery */
        s = k->failed ? W22_OK : w22_fail(W22_ERR_INVALID_ARG, "the decode was stopped by the caller");
    if (k->failed) s = w22_fail(k->failed, "w22_decode: %s", k->why);
    if (k->pending) (void)b->ops->sync(b); /* a copy still landing in a slot freed below (a failed decode) */
    if (zdev) b->ops->free(b, zdev);
    free(zconv);
    for (int i = 0; i < 2; i++) {
        if (b->ops->host_free) b->ops->host_free(b, k->host_staging[i]);
        else free(k->host_staging[i]);
    }
    free(k->frames);
    return s;
}

static w22_status decode_locked(w22_decoder *d, const void *z, w22_dtype zt, int T, int h, int w, void *video, w22_dtype vt) {
    if (d && !video && (d->rank == 0 || d->on_all_ranks))
        return w22_fail(W22_ERR_INVALID_ARG, "w22_decode: video must not be NULL on rank %d", d->rank);
    if (vt != W22_DTYPE_F32 && vt != W22_DTYPE_BF16 && vt != W22_DTYPE_F16)
        return w22_fail(W22_ERR_BAD_DTYPE, "video dtype %d, expected F32, BF16 or F16", vt);
    sink k = {.video = video, .vt = vt};
    return decode_host(d, z, zt, T, h, w, &k);
}

static w22_status decode_frames_locked(w22_decoder *d, const void *z, w22_dtype zt, int T, int h, int w,
                                       w22_frames_fn fn, void *user) {
    if (!fn) return w22_fail(W22_ERR_INVALID_ARG, "w22_decode_frames: the frames callback must not be NULL");
    sink k = {.fn = fn, .user = user};
    return decode_host(d, z, zt, T, h, w, &k);
}

static w22_status decode_device_locked(w22_decoder *d, const char *name, const void *z_dev, int T, int h, int w,
                                       sink *k, void *cuda_stream) {
    if (!z_dev) return w22_fail(W22_ERR_INVALID_ARG, "%s: decoder and latents must not be NULL", name);
    if (d->params.device != W22_DEVICE_CUDA)
        return w22_fail(W22_ERR_UNSUPPORTED, "%s needs a CUDA decoder (this one runs on the CPU)", name);
    const int delivers = d->rank == 0 || d->on_all_ranks;
    if (delivers && !k->video_dev && !k->dev_fn)
        return w22_fail(W22_ERR_INVALID_ARG, "%s: %s must not be NULL on rank %d", name,
                        !strcmp(name, "w22_decode_device") ? "video" : "the frames callback", d->rank);
    w22_status s = agree(d, check_shape(d, T, h, w));
    if (s != W22_OK) return s;
    /* the caller's stream, NULL the legacy default one: the latents may still be in flight there (issue 27: a
     * decode on the backend's own non-blocking stream read latents that the caller's upload had not finished) */
    w22_backend_cuda_use_callers_stream(d->backend, cuda_stream);
    d->deliver = deliver_device;
    d->deliver_user = k;
    s = run(d, z_dev, W22_DTYPE_BF16, T, h, w);
    if (k->failed) s = w22_fail(k->failed, "%s: %s", name, k->why);
    if (k->frames_dev) { /* after what the callback queued reading it, and the rest of a stopped decode */
        const w22_status sync = d->backend->ops->sync(d->backend);
        if (s == W22_OK) s = sync;
        d->backend->ops->free(d->backend, k->frames_dev);
    }
    w22_backend_cuda_set_stream(d->backend, NULL);
    return s;
}

/* The public decodes: one at a time per decoder (plan.h's lock). */
w22_status w22_decode(w22_decoder *d, const void *z, w22_dtype zt, int T, int h, int w, void *video, w22_dtype vt) {
    if (!d) return w22_fail(W22_ERR_INVALID_ARG, "w22_decode: the decoder must not be NULL");
    pthread_mutex_lock(&d->lock);
    const w22_status s = decode_locked(d, z, zt, T, h, w, video, vt);
    pthread_mutex_unlock(&d->lock);
    return s;
}

w22_status w22_decode_frames(w22_decoder *d, const void *z, w22_dtype zt, int T, int h, int w, w22_frames_fn fn,
                             void *user) {
    if (!d) return w22_fail(W22_ERR_INVALID_ARG, "w22_decode_frames: the decoder must not be NULL");
    pthread_mutex_lock(&d->lock);
    const w22_status s = decode_frames_locked(d, z, zt, T, h, w, fn, user);
    pthread_mutex_unlock(&d->lock);
    return s;
}

w22_status w22_decode_device(w22_decoder *d, const void *z_dev, int T, int h, int w, void *video_dev,
                             void *cuda_stream) {
    if (!d) return w22_fail(W22_ERR_INVALID_ARG, "w22_decode_device: the decoder must not be NULL");
    pthread_mutex_lock(&d->lock);
    sink k = {.video_dev = video_dev};
    const w22_status s = decode_device_locked(d, "w22_decode_device", z_dev, T, h, w, &k, cuda_stream);
    pthread_mutex_unlock(&d->lock);
    return s;
}

w22_status w22_decode_device_frames(w22_decoder *d, const void *z_dev, int T, int h, int w, w22_device_frames_fn fn,
                                    void *user, void *cuda_stream) {
    if (!d) return w22_fail(W22_ERR_INVALID_ARG, "w22_decode_device_frames: the decoder must not be NULL");
    pthread_mutex_lock(&d->lock);
    sink k = {.dev_fn = fn, .user = user};
    const w22_status s = decode_device_locked(d, "w22_decode_device_frames", z_dev, T, h, w, &k, cuda_stream);
    pthread_mutex_unlock(&d->lock);
    return s;
}
