/* The weights object from a safetensors file or caller memory, its validation against the model's weight table,
 * saving, and freeing (the w22_weights_* API; synthetic weights are in synth.c).
 *
 * The model (src/model/model.c) says which 110 tensors a config needs and their shapes; a file must hold exactly
 * those under the decoder's names, each with exactly that shape. Anything else under the decoder's names means a
 * different model variant and is refused rather than silently ignored. The file stays mapped and tensors are
 * used in place, except the few whose address is not aligned for their dtype, which are copied. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include "common.h"
#include "backend.h"
#include "weights/safetensors.h"
#include "weights/source.h"
#include "weights/weights.h"

/* The config as one line of text, kept in the file's __metadata__ (key "wan22vae_config") so that a saved file
 * says which model it holds: z_dim,base_dim,dim_mult x4,num_res_blocks,temporal_up x3,out_channels,patch_size,
 * is_residual. Files saved before is_residual existed hold the first 12 (TI2V-5B's structure, is_residual 1). */
#define CONFIG_FIELDS 13

static void config_text(const w22_config *c, char *buf, size_t cap) {
    snprintf(buf, cap, "%d,%d,%d,%d,%d,%d,%d,%d,%d,%d,%d,%d,%d", c->z_dim, c->base_dim, c->dim_mult[0],
             c->dim_mult[1], c->dim_mult[2], c->dim_mult[3], c->num_res_blocks, c->temporal_up[0], c->temporal_up[1],
             c->temporal_up[2], c->out_channels, c->patch_size, c->is_residual);
}

/* One decimal int of the config text at *s (an optional '-', digits): strict, since sscanf's %d is undefined
 * behaviour for out-of-range numbers and the text comes from the file. */
static int parse_field(const char **s, int *v) {
    const char *p = *s;
    int neg = *p == '-';
    if (neg) p++;
    if (*p < '0' || *p > '9') return 0;
    long long x = 0;
    for (; *p >= '0' && *p <= '9'; p++) {
        x = x * 10 + (*p - '0');
        if (x > (long long)INT32_MAX + 1) return 0;
    }
    x = neg ? -x : x;
    if (x > INT32_MAX || x < INT32_MIN) return 0;
    *v = (int)x;
    *s = p;
    return 1;
}

static int config_parse(const char *s, w22_config *c) {
    int v[CONFIG_FIELDS], n = 0;
    v[CONFIG_FIELDS - 1] = 1; /* 12 fields: a file saved before is_residual, TI2V-5B's structure */
    for (; n < CONFIG_FIELDS && (n == 0 || *s == ','); n++) {
        if (n) s++;
        if (!parse_field(&s, &v[n])) return 0;
    }
    if (*s || n < CONFIG_FIELDS - 1) return 0;
    c->z_dim = v[0];
    c->base_dim = v[1];
    for (int i = 0; i < 4; i++) c->dim_mult[i] = v[2 + i];
    c->num_res_blocks = v[6];
    for (int i = 0; i < 3; i++) c->temporal_up[i] = v[7 + i];
    c->out_channels = v[10];
    c->patch_size = v[11];
    c->is_residual = v[12];
    return 1;
}

static int ends_with(const char *s, const char *suffix, size_t *prefix_len) {
    size_t n = strlen(s), m = strlen(suffix);
    if (n < m || strcmp(s + n - m, suffix) != 0) return 0;
    /* the prefix is empty or ends at a component boundary: "vae." yes, "xpost_quant_conv" no */
    if (n > m && s[n - m - 1] != '.') return 0;
    *prefix_len = n - m;
    return 1;
}

/* The prefix before the decoder's names ("", "vae.", "first_stage_model."), found from the anchor tensors. Two
 * different prefixes mean two decoders in one file, and we will not guess which one is meant. */
static w22_status find_prefix(const w22_st_file *f, const char *path, char *prefix, size_t cap) {
    static const char *const anchors[] = {"post_quant_conv.weight", "decoder.conv_in.weight"};
    for (int a = 0; a < 2; a++) {
        const char *first = NULL;
        size_t plen = 0;
        for (int i = 0; i < f->ntensors; i++) {
            size_t l;
            const char *name = f->tensors[i].name;
            if (!ends_with(name, anchors[a], &l)) continue;
            if (!first) {
                first = name;
                plen = l;
            } else if (l != plen || strncmp(name, first, l) != 0) {
                return w22_fail(W22_ERR_FORMAT, "%s: two decoders in one file ('%s' and '%s'); expected one", path,
                                first, name);
            }
        }
        if (first) {
            if (plen + 1 > cap)
                return w22_fail(W22_ERR_FORMAT, "%s: the prefix of '%s' is %zu bytes, expected at most %zu", path,
                                first, plen, cap - 1);
            memcpy(prefix, first, plen);
            prefix[plen] = 0;
            return W22_OK;
        }
    }
    return w22_fail(W22_ERR_MISSING_TENSOR,
                    "%s: no post_quant_conv.weight or decoder.conv_in.weight (with or without a prefix such as "
                    "\"vae.\"); expected a Wan VAE decoder (Wan2.2 TI2V-5B's or the Wan2.1 VAE) in diffusers naming, "
                    "found %d tensors%s%s%s (an original Wan2.2_VAE.pth or Wan2.1_VAE.pth needs tools/convert_pth.py)", path, f->ntensors,
                    f->ntensors ? ", the first '" : "", f->ntensors ? f->tensors[0].name : "",
                    f->ntensors ? "'" : "");
}

static const w22_st_tensor *find_named(const w22_st_file *f, const char *prefix, const char *name) {
    char full[512];
    snprintf(full, sizeof full, "%s%s", prefix, name);
    return w22_st_find(f, full);
}

static int dim_as_int(const w22_st_tensor *t, int d) {
    return d < t->ndim && t->shape[d] > 0 && t->shape[d] <= 1 << 20 ? (int)t->shape[d] : -1;
}

/* Without a config from the caller: the one saved in the file's metadata, else from the tensors: the structure
 * from the upsampler's name (TI2V-5B's up blocks have "upsampler", Wan2.1's "upsamplers.0"), z_dim from
 * post_quant_conv, base_dim from norm_out (dim_mult[0] is 1, so norm_out has base_dim channels), out_channels from
 * conv_out (3 x patch_size^2), the rest the defaults both VAEs share. */
static w22_status infer_config(const w22_st_file *f, const char *path, const char *prefix, w22_config *cfg) {
    w22_config_default(cfg);
    const char *meta = w22_st_meta(f, "wan22vae_config");
    if (meta) {
        if (!config_parse(meta, cfg))
            return w22_fail(W22_ERR_FORMAT, "%s: __metadata__ wan22vae_config is '%.100s', expected %d (or %d) "
                            "comma-separated integers", path, meta, CONFIG_FIELDS, CONFIG_FIELDS - 1);
    } else {
        const w22_st_tensor *pq = find_named(f, prefix, "post_quant_conv.weight");
        const w22_st_tensor *no = find_named(f, prefix, "decoder.norm_out.gamma");
        const w22_st_tensor *co = find_named(f, prefix, "decoder.conv_out.weight");
        if (!pq || !no || !co)
            return w22_fail(W22_ERR_MISSING_TENSOR, "%s: tensor '%s%s' is missing; expected it to infer the "
                            "config (or pass a config)", path, prefix,
                            !pq ? "post_quant_conv.weight" : !no ? "decoder.norm_out.gamma" : "decoder.conv_out.weight");
        if (find_named(f, prefix, "decoder.up_blocks.0.upsamplers.0.resample.1.weight"))
            w22_config_wan21(cfg);
        cfg->z_dim = dim_as_int(pq, 0);
        cfg->base_dim = dim_as_int(no, 0);
        cfg->out_channels = dim_as_int(co, 0);
        cfg->patch_size = cfg->out_channels == 3 ? 1 : 2;
    }
    w22_status s = w22_config_check(cfg);
    if (s != W22_OK) { /* the check's "config: " said once, by this context */
        char why[1024];
        const char *m = w22_last_error();
        snprintf(why, sizeof why, "%s", strncmp(m, "config: ", 8) ? m : m + 8);
        return w22_fail(s, "%s: the config %s: %s", path, meta ? "in __metadata__" : "inferred from the tensors", why);
    }
    return W22_OK;
}

static w22_weights *weights_new(const w22_config *cfg, const char *source) {
    w22_weights *w = w22_calloc(1, sizeof *w, "the weights object");
    if (!w) return NULL;
    w22_model_build(cfg, &w->model);
    snprintf(w->source, sizeof w->source, "%s", source);
    return w;
}

static int aligned_for(const void *p, w22_dtype t) { return ((uintptr_t)p % w22_dtype_size(t)) == 0; }

/* Points w at the file's tensors, validating names and shapes. The data stays in the mapping except tensors that
 * are misaligned for their dtype (a file mixing dtypes can put an F32 tensor at an odd multiple of 2): those are
 * copied into one owned buffer, since the backends read elements with aligned loads. */
static w22_status bind_tensors(w22_weights *w, const w22_st_file *f, const char *path, const char *prefix) {
    const w22_model *m = &w->model;
    const w22_st_tensor *found[W22_MAX_WEIGHTS];
    char got[256], want[256];
    /* the other VAE's decoder (the up blocks' upsampler names tell them apart): say so, not which tensor is missing */
    const int file_wan21 = find_named(f, prefix, "decoder.up_blocks.0.upsamplers.0.resample.1.weight") != NULL;
    const int file_ti2v = find_named(f, prefix, "decoder.up_blocks.0.upsampler.resample.1.weight") != NULL;
    if ((file_wan21 && m->cfg.is_residual) || (file_ti2v && !m->cfg.is_residual))
        return w22_fail(W22_ERR_FORMAT, "%s: the file holds %s decoder (%sdecoder.up_blocks.0.%s.*); the config is "
                        "%s's (is_residual %d); expected a config of the file's model (or none: it is then "
                        "recognised from the tensors)", path, file_wan21 ? "the Wan2.1 VAE's" : "Wan2.2 TI2V-5B's",
                        prefix, file_wan21 ? "upsamplers.0" : "upsampler", w22_model_name(&m->cfg),
                        m->cfg.is_residual);
    for (int i = 0; i < m->nweights; i++) {
        const w22_weight_desc *d = &m->weights[i];
        w22_shape_text(want, sizeof want, d->ndim, d->shape);
        const w22_st_tensor *t = find_named(f, prefix, d->name);
        if (!t)
            return w22_fail(W22_ERR_MISSING_TENSOR, "%s: tensor '%s%s' is missing; expected shape %s (config %s, "
                            "z_dim %d, base_dim %d)", path, prefix, d->name, want, w22_model_name(&m->cfg),
                            m->cfg.z_dim, m->cfg.base_dim);
        int same = t->ndim == d->ndim;
        for (int k = 0; same && k < d->ndim; k++) same = t->shape[k] == d->shape[k];
        if (!same) {
            w22_shape_text(got, sizeof got, t->ndim, t->shape);
            return w22_fail(W22_ERR_BAD_SHAPE, "%s: tensor '%s' has shape %s, expected %s (config %s, z_dim %d, "
                            "base_dim %d)", path, t->name, got, want, w22_model_name(&m->cfg), m->cfg.z_dim,
                            m->cfg.base_dim);
        }
        found[i] = t;
    }
    size_t plen = strlen(prefix);
    for (int i = 0; i < f->ntensors; i++) {
        const char *name = f->tensors[i].name;
        if (strncmp(name, prefix, plen) != 0) continue;
        const char *rest = name + plen;
        if (strncmp(rest, "decoder.", 8) != 0 && strncmp(rest, "post_quant_conv.", 16) != 0) continue;
        if (w22_model_find(m, rest) < 0)
            return w22_fail(W22_ERR_FORMAT, "%s: tensor '%s' is not part of this model (config %s, z_dim %d, "
                            "base_dim %d, num_res_blocks %d, temporal_up [%d, %d, %d]); expected exactly the decoder's "
                            "%d tensors (a different model variant?)", path, name, w22_model_name(&m->cfg),
                            m->cfg.z_dim, m->cfg.base_dim,
                            m->cfg.num_res_blocks, m->cfg.temporal_up[0], m->cfg.temporal_up[1],
                            m->cfg.temporal_up[2], m->nweights);
    }
    size_t copy_bytes = 0;
    for (int i = 0; i < m->nweights; i++)
        if (!aligned_for(found[i]->data, found[i]->dtype)) copy_bytes += (found[i]->nbytes + 63) & ~(size_t)63;
    char *copy = NULL;
    if (copy_bytes) {
        copy = w22_malloc(copy_bytes, "copies of misaligned tensors");
        if (!copy) return W22_ERR_OUT_OF_MEMORY;
        w->owned = copy;
    }
    for (int i = 0; i < m->nweights; i++) {
        w->dtype[i] = found[i]->dtype;
        w->data[i] = found[i]->data;
        if (!aligned_for(found[i]->data, found[i]->dtype)) {
            memcpy(copy, found[i]->data, found[i]->nbytes);
            w->data[i] = copy;
            copy += (found[i]->nbytes + 63) & ~(size_t)63;
        }
    }
    return W22_OK;
}

/* The weights in a parsed safetensors file: the prefix, the config (cfg, else the file's own), every tensor's
 * name and shape, and every value finite (a NaN or Inf would decode to a NaN video). */
static w22_status weights_from_file(const w22_st_file *f, const char *source, const w22_config *cfg,
                                    w22_weights **out) {
    char prefix[sizeof((w22_weights *)0)->prefix];
    w22_config inferred;
    W22_TRY(find_prefix(f, source, prefix, sizeof prefix));
    if (!cfg) {
        W22_TRY(infer_config(f, source, prefix, &inferred));
        cfg = &inferred;
    }
    w22_weights *w = weights_new(cfg, source);
    if (!w) return W22_ERR_OUT_OF_MEMORY;
    snprintf(w->prefix, sizeof w->prefix, "%s", prefix);
    w22_status s = bind_tensors(w, f, source, prefix);
    if (s == W22_OK) s = w22_weights_check_finite(w, source, prefix);
    if (s != W22_OK) {
        w22_weights_free(w);
        return s;
    }
    *out = w;
    return W22_OK;
}

w22_status w22_weights_from_st(const w22_st_file *f, const char *source, const w22_config *cfg, w22_weights **out) {
    *out = NULL;
    if (cfg) W22_TRY(w22_config_check(cfg));
    return weights_from_file(f, source, cfg, out);
}

w22_status w22_weights_load(const char *path, const w22_config *cfg, w22_weights **out) {
    if (!out) return w22_fail(W22_ERR_INVALID_ARG, "w22_weights_load: out is NULL");
    *out = NULL;
    if (!path) return w22_fail(W22_ERR_INVALID_ARG, "w22_weights_load: path is NULL");
    if (cfg) W22_TRY(w22_config_check(cfg));
    /* a sharded index (".index.json", diffusers' variant spelling ".index.fp16.json"): the same checks over its
     * shards. A safetensors file never ends in .json. */
    const size_t n = strlen(path);
    if (n >= 5 && !strcmp(path + n - 5, ".json")) return w22_weights_load_index(path, cfg, out, NULL, NULL);
    w22_st_file f;
    W22_TRY(w22_st_open(path, &f));
    w22_weights *w = NULL;
    w22_status s = weights_from_file(&f, path, cfg, &w);
    /* the mapping moves to the weights object; the tensor table is no longer needed */
    if (s == W22_OK) s = w22_weights_take_files(w, &f, &path, 1);
    /* validation read every tensor: a file changed in place meanwhile would leave checks that no longer hold */
    if (s == W22_OK) s = w22_weights_unchanged(w, "while the weights were loaded and checked");
    if (s == W22_OK) *out = w;
    else w22_weights_free(w);
    w22_st_close(&f);
    return s;
}

w22_status w22_weights_parse(const void *buf, size_t size, const w22_config *cfg, w22_weights **out) {
    if (!out) return w22_fail(W22_ERR_INVALID_ARG, "w22_weights_parse: out is NULL");
    *out = NULL;
    if (cfg) W22_TRY(w22_config_check(cfg));
    w22_st_file f;
    W22_TRY(w22_st_parse(buf, size, &f));
    w22_status s = weights_from_file(&f, "<memory>", cfg, out);
    w22_st_close(&f); /* not mapped: the buffer stays the caller's */
    return s;
}

w22_status w22_weights_from_memory(const w22_config *cfg, const void *const *data, w22_dtype dtype,
                                   w22_weights **out) {
    if (!out) return w22_fail(W22_ERR_INVALID_ARG, "w22_weights_from_memory: out is NULL");
    *out = NULL;
    if (!cfg || !data)
        return w22_fail(W22_ERR_INVALID_ARG, "w22_weights_from_memory: %s is NULL", !cfg ? "cfg" : "data");
    if (dtype != W22_DTYPE_F32 && dtype != W22_DTYPE_BF16 && dtype != W22_DTYPE_F16)
        return w22_fail(W22_ERR_INVALID_ARG, "w22_weights_from_memory: dtype %d, expected F32, BF16 or F16",
                        (int)dtype);
    W22_TRY(w22_config_check(cfg));
    w22_weights *w = weights_new(cfg, "memory");
    if (!w) return W22_ERR_OUT_OF_MEMORY;
    for (int i = 0; i < w->model.nweights; i++) {
        if (!data[i] || !aligned_for(data[i], dtype)) {
            w22_status s = w22_fail(W22_ERR_INVALID_ARG, "w22_weights_from_memory: tensor %d (%s) is %s; expected "
                                    "memory aligned to %zu bytes", i, w->model.weights[i].name,
                                    data[i] ? "misaligned" : "NULL", w22_dtype_size(dtype));
            w22_weights_free(w);
            return s;
        }
        w->data[i] = data[i];
        w->dtype[i] = dtype;
    }
    w22_status s = w22_weights_check_finite(w, "w22_weights_from_memory", "");
    if (s != W22_OK) {
        w22_weights_free(w);
        return s;
    }
    *out = w;
    return W22_OK;
}

w22_status w22_weights_from_device(const w22_config *cfg, const void *const *data, w22_dtype dtype, int cuda_device,
                                   w22_weights **out) {
    if (!out) return w22_fail(W22_ERR_INVALID_ARG, "w22_weights_from_device: out is NULL");
    *out = NULL;
    if (!cfg || !data)
        return w22_fail(W22_ERR_INVALID_ARG, "w22_weights_from_device: %s is NULL", !cfg ? "cfg" : "data");
    if (dtype != W22_DTYPE_F32 && dtype != W22_DTYPE_BF16 && dtype != W22_DTYPE_F16)
        return w22_fail(W22_ERR_INVALID_ARG, "w22_weights_from_device: dtype %d, expected F32, BF16 or F16", (int)dtype);
    if (cuda_device < 0)
        return w22_fail(W22_ERR_INVALID_ARG, "w22_weights_from_device: cuda_device %d, expected a GPU's ordinal",
                        cuda_device);
    W22_TRY(w22_config_check(cfg));
    w22_weights *w = weights_new(cfg, "GPU memory");
    if (!w) return W22_ERR_OUT_OF_MEMORY;
    snprintf(w->source, sizeof w->source, "GPU %d's memory", cuda_device);
    w->on_device = 1, w->cuda_device = cuda_device;
    w22_status s = W22_OK;
    for (int i = 0; i < w->model.nweights && s == W22_OK; i++) {
        const char *name = w->model.weights[i].name;
        if (!data[i] || !aligned_for(data[i], dtype)) {
            s = w22_fail(W22_ERR_INVALID_ARG, "w22_weights_from_device: tensor %d (%s) is %s; expected GPU memory "
                         "aligned to %zu bytes", i, name, data[i] ? "misaligned" : "NULL", w22_dtype_size(dtype));
            break;
        }
        w->data[i] = data[i];
        w->dtype[i] = dtype;
        /* the same refusal as host weights' (finite.c): a NaN or Inf weight decodes to a NaN video */
        size_t first = 0, n = (size_t)w->model.weights[i].numel;
        s = w22_cuda_first_nonfinite(cuda_device, data[i], dtype, n, &first);
        if (s != W22_OK) w22_fail_context(s, "w22_weights_from_device: tensor %d (%s): ", i, name);
        else if (first < n)
            s = w22_fail(W22_ERR_NONFINITE, "w22_weights_from_device: tensor %s has a NaN or Inf at element %zu; "
                         "expected finite weights", name, first);
    }
    if (s != W22_OK) {
        w22_weights_free(w);
        return s;
    }
    *out = w;
    return W22_OK;
}

w22_status w22_weights_to_host(const w22_weights *w, w22_weights **out) {
    *out = NULL;
    w22_weights *h = weights_new(&w->model.cfg, w->source);
    if (!h) return W22_ERR_OUT_OF_MEMORY;
    size_t total = 0;
    for (int i = 0; i < w->model.nweights; i++)
        total += ((size_t)w->model.weights[i].numel * w22_dtype_size(w->dtype[i]) + 3) & ~(size_t)3;
    h->owned = w22_malloc(total ? total : 1, "a host copy of the weights");
    if (!h->owned) {
        w22_weights_free(h);
        return W22_ERR_OUT_OF_MEMORY;
    }
    snprintf(h->prefix, sizeof h->prefix, "%s", w->prefix);
    size_t off = 0;
    for (int i = 0; i < w->model.nweights; i++) {
        const size_t bytes = (size_t)w->model.weights[i].numel * w22_dtype_size(w->dtype[i]);
        h->data[i] = (char *)h->owned + off;
        h->dtype[i] = w->dtype[i];
        w22_status s = w->on_device ? w22_cuda_device_to_host(w->cuda_device, (void *)h->data[i], w->data[i], bytes)
                                    : (memcpy((void *)h->data[i], w->data[i], bytes), W22_OK);
        if (s != W22_OK) {
            w22_weights_free(h);
            return s;
        }
        off += (bytes + 3) & ~(size_t)3; /* every tensor 4-byte aligned, whatever the dtypes before it */
    }
    *out = h;
    return W22_OK;
}

void w22_weights_get_f32(const w22_weights *w, int i, float *dst) {
    w22_to_f32(w->data[i], w->dtype[i], (size_t)w->model.weights[i].numel, dst);
}

/* Tensor i converted into dst in dtype t, through float32 in chunks (bf16 <-> f16 have no direct path). */
static void convert_tensor(const w22_weights *w, int i, w22_dtype t, void *dst, float *tmp, size_t tmp_n) {
    size_t n = (size_t)w->model.weights[i].numel, es = w22_dtype_size(w->dtype[i]), ds = w22_dtype_size(t);
    const char *src = w->data[i];
    for (size_t k = 0; k < n; k += tmp_n) {
        size_t c = n - k < tmp_n ? n - k : tmp_n;
        w22_to_f32(src + k * es, w->dtype[i], c, tmp);
        w22_from_f32(tmp, c, t, (char *)dst + k * ds);
    }
}

w22_status w22_weights_save(const w22_weights *w, const char *path, w22_dtype dtype) {
    if (!w || !path) return w22_fail(W22_ERR_INVALID_ARG, "w22_weights_save: %s is NULL", !w ? "w" : "path");
    if (dtype != W22_DTYPE_F32 && dtype != W22_DTYPE_BF16 && dtype != W22_DTYPE_F16)
        return w22_fail(W22_ERR_INVALID_ARG, "w22_weights_save: dtype %d, expected F32, BF16 or F16", (int)dtype);
    if (w->on_device) { /* weights in GPU memory: through a host copy */
        w22_weights *h = NULL;
        W22_TRY(w22_weights_to_host(w, &h));
        w22_status s = w22_weights_save(h, path, dtype);
        w22_weights_free(h);
        return s;
    }
    W22_TRY(w22_weights_unchanged(w, "before saving the weights")); /* read in place below (w22_decoder_open) */
    const w22_model *m = &w->model;
    size_t conv_bytes = 0;
    for (int i = 0; i < m->nweights; i++)
        if (w->dtype[i] != dtype) conv_bytes += (size_t)m->weights[i].numel * w22_dtype_size(dtype);
    enum { TMP_N = 1 << 16 };
    char *conv = conv_bytes ? w22_malloc(conv_bytes, "converting the weights for saving") : NULL;
    float *tmp = conv_bytes ? w22_malloc(TMP_N * sizeof(float), "a conversion buffer") : NULL;
    if (conv_bytes && (!conv || !tmp)) {
        free(conv);
        free(tmp);
        return W22_ERR_OUT_OF_MEMORY;
    }
    w22_st_write_tensor t[W22_MAX_WEIGHTS];
    char *at = conv;
    for (int i = 0; i < m->nweights; i++) {
        t[i].name = m->weights[i].name;
        t[i].dtype = dtype;
        t[i].ndim = m->weights[i].ndim;
        t[i].shape = m->weights[i].shape;
        t[i].data = w->data[i];
        if (w->dtype[i] != dtype) {
            convert_tensor(w, i, dtype, at, tmp, TMP_N);
            t[i].data = at;
            at += (size_t)m->weights[i].numel * w22_dtype_size(dtype);
        }
    }
    char cfg_text[160];
    config_text(&m->cfg, cfg_text, sizeof cfg_text);
    const char *meta[4] = {"format", "pt", "wan22vae_config", cfg_text};
    /* never overwrite: a weights file is precious, and the caller can remove it first */
    w22_status s = w22_st_write(path, t, m->nweights, meta, 2, 0);
    free(conv);
    free(tmp);
    if (s == W22_OK && (s = w22_weights_unchanged(w, "while the weights were saved")) != W22_OK)
        unlink(path); /* written from a file that changed: not kept (path was new: saving never overwrites) */
    return s;
}

w22_status w22_weights_take_files(w22_weights *w, w22_st_file *files, const char *const *paths, int n) {
    w->files = w22_calloc((size_t)n, sizeof *w->files, "the weights' file list");
    if (!w->files) return W22_ERR_OUT_OF_MEMORY;
    for (int i = 0; i < n; i++) {
        w22_wfile *o = &w->files[i];
        o->map = files[i].map, o->size = files[i].size, o->watch = files[i].watch;
        snprintf(o->path, sizeof o->path, "%s", paths[i]);
        files[i].map = NULL, files[i].mapped = 0, files[i].watch.fd = -1;
    }
    w->nfiles = n;
    return W22_OK;
}

w22_status w22_weights_unchanged(const w22_weights *w, const char *when) {
    for (int i = 0; w && i < w->nfiles; i++) W22_TRY(w22_st_unchanged(&w->files[i].watch, w->files[i].path, when));
    return W22_OK;
}

void w22_weights_free(w22_weights *w) {
    if (!w) return;
    for (int i = 0; i < w->nfiles; i++) {
        if (w->files[i].map) munmap(w->files[i].map, w->files[i].size);
        w22_st_unwatch(&w->files[i].watch);
    }
    free(w->files);
    free(w->owned);
    free(w);
}

const w22_config *w22_weights_config(const w22_weights *w) { return w ? &w->model.cfg : NULL; }
