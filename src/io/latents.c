/* Latents in and out: loading from .safetensors or .npy with their shape and dtype checked, saving (for `wan22vae
 * synth latents` and the tests), and the NaN/Inf check that the decoder shares. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "common.h"
#include "io/io.h"
#include "io/outfile.h"
#include "weights/safetensors.h"

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcasecmp(s + n - k, suffix) == 0;
}

static void shape_str(int ndim, const int64_t *shape, char *buf, size_t cap) {
    size_t n = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < ndim && n < cap; i++) n += (size_t)snprintf(buf + n, cap - n, "%s%lld", i ? ", " : "",
                                                                     (long long)shape[i]);
    if (n < cap) snprintf(buf + n, cap - n, "]");
}

w22_status w22_check_finite(const void *x, w22_dtype t, int ndim, const int64_t *shape, const char *what) {
    size_t n = 1, count = 0, first = 0;
    if (ndim < 0 || ndim > W22_NPY_MAX_DIMS)
        return w22_fail(W22_ERR_INVALID_ARG, "%s: expected 0..%d dimensions, found %d", what, W22_NPY_MAX_DIMS, ndim);
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0 || (shape[i] && n > SIZE_MAX / 4 / (uint64_t)shape[i]))
            return w22_fail(W22_ERR_INVALID_ARG, "%s: expected non-negative sizes of at most 2^62 bytes in all, "
                            "found dimension %d = %lld", what, i, (long long)shape[i]);
        n *= (size_t)shape[i];
    }
    int first_kind = 0; /* 1 NaN, 2 +Inf, 3 -Inf */
    for (size_t i = 0; i < n; i++) {
        int kind = 0;
        if (t == W22_DTYPE_F32) {
            uint32_t u;
            memcpy(&u, (const char *)x + 4 * i, 4);
            if ((u & 0x7f800000u) == 0x7f800000u) kind = (u & 0x7fffffu) ? 1 : (u >> 31) ? 3 : 2;
        } else {
            uint16_t h; /* x may sit at an odd offset of a file: memcpy, not a misaligned uint16_t load */
            memcpy(&h, (const char *)x + 2 * i, 2);
            uint16_t em = t == W22_DTYPE_BF16 ? 0x7f80 : 0x7c00, mm = t == W22_DTYPE_BF16 ? 0x7f : 0x3ff;
            if ((h & em) == em) kind = (h & mm) ? 1 : (h >> 15) ? 3 : 2;
        }
        if (kind) {
            if (!count++) first = i, first_kind = kind;
        }
    }
    if (!count) return W22_OK;
    char idx[256], shp[256];
    int64_t coord[W22_NPY_MAX_DIMS];
    size_t rest = first;
    for (int i = ndim - 1; i >= 0; i--) {
        coord[i] = shape[i] ? (int64_t)(rest % (size_t)shape[i]) : 0;
        rest = shape[i] ? rest / (size_t)shape[i] : 0;
    }
    shape_str(ndim, coord, idx, sizeof idx);
    shape_str(ndim, shape, shp, sizeof shp);
    return w22_fail(W22_ERR_NONFINITE, "%s: expected finite values, found %zu NaN/Inf of %zu; the first is %s at "
                    "index %zu %s of shape %s", what, count, n,
                    first_kind == 1 ? "NaN" : first_kind == 2 ? "+Inf" : "-Inf", first, idx, shp);
}

/* [1, C, T, h, w] or [C, T, h, w] -> C, T, h, w, with every size positive and in int range. */
static w22_status latent_dims(const char *path, const char *src, int ndim, const int64_t *shape, int *zdim, int *T,
                              int *h, int *w) {
    char s[256];
    shape_str(ndim, shape, s, sizeof s);
    int off = ndim == 5 ? 1 : 0;
    if ((ndim != 5 && ndim != 4) || (ndim == 5 && shape[0] != 1))
        return w22_fail(W22_ERR_BAD_SHAPE, "%s: %s: expected latents of shape [1, C, T, h, w] or [C, T, h, w], "
                        "found %s", path, src, s);
    for (int i = off; i < ndim; i++)
        if (shape[i] < 1 || shape[i] > (1 << 24))
            return w22_fail(W22_ERR_BAD_SHAPE, "%s: %s: expected every size of [1, C, T, h, w] in 1..%d, found %s",
                            path, src, 1 << 24, s);
    *zdim = (int)shape[off];
    *T = (int)shape[off + 1];
    *h = (int)shape[off + 2];
    *w = (int)shape[off + 3];
    return W22_OK;
}

/* w22_st_parse names its buffer "<memory>" in messages: name the file instead. */
static w22_status st_renamed(w22_status s, const char *name) {
    static const char tag[] = "<memory>";
    const char *m = w22_last_error();
    if (strncmp(m, tag, sizeof tag - 1) != 0) return s;
    char rest[2048];
    snprintf(rest, sizeof rest, "%s", m + sizeof tag - 1);
    return w22_fail(s, "%s%s", name, rest);
}

/* The tensor names of a file, quoted and comma-separated, for a refusal: "'a', 'b'" (long names and long lists are
 * cut, said with "..."). */
static void key_list(const w22_st_file *f, char *buf, size_t cap) {
    size_t n = 0;
    buf[0] = 0;
    for (int i = 0; i < f->ntensors && n + 80 < cap; i++)
        n += (size_t)snprintf(buf + n, cap - n, "%s'%.64s%s'", i ? ", " : "", f->tensors[i].name,
                              strlen(f->tensors[i].name) > 64 ? "..." : "");
    if (n + 80 >= cap && n < cap) snprintf(buf + n, cap - n, ", ...");
}

/* ComfyUI's .latent files (nodes.py, SaveLatent / LoadLatent): safetensors holding "latent_tensor", the LATENT's
 * samples as ComfyUI keeps them (after the model's process_latent_out: the VAE's own latent space, what VAEDecode
 * hands the VAE, [B, C, T, h, w] for Wan, float32), and an empty marker tensor "latent_format_version_0". A file
 * without the marker is from before it, whose samples LoadLatent multiplies by 1 / 0.18215 (SD1's scale factor);
 * the same is done here, so that a .latent decodes to the video ComfyUI's LoadLatent + VAEDecode give. */
#define COMFY_KEY "latent_tensor"
#define COMFY_MARKER "latent_format_version_0"
#define COMFY_OLD_SCALE ((float)(1.0 / 0.18215)) /* torch: a float32 tensor times the double, cast to float32 */

static w22_status parse_safetensors(const void *buf, size_t size, const char *path, const char *key, float **z,
                                    int *T, int *h, int *w, int *zdim) {
    w22_st_file f;
    w22_status s = w22_st_parse(buf, size, &f);
    if (s != W22_OK) return st_renamed(s, path);
    const w22_st_tensor *t = NULL;
    char names[1024];
    key_list(&f, names, sizeof names);
    if (key) {
        if (!(t = w22_st_find(&f, key)))
            s = w22_fail(W22_ERR_MISSING_TENSOR, "%s: --latents-key '%.200s': expected a tensor of that name, found "
                         "%d tensor%s (%s)", path, key, f.ntensors, f.ntensors == 1 ? "" : "s", names);
    } else {
        t = w22_st_find(&f, "latents");
        if (!t) t = w22_st_find(&f, COMFY_KEY);
        if (!t && f.ntensors == 1) t = &f.tensors[0];
        if (!t)
            s = w22_fail(W22_ERR_MISSING_TENSOR, "%s: expected a tensor named 'latents' (or ComfyUI's '" COMFY_KEY
                         "', or a single tensor), found %d tensors (%s); --latents-key NAME picks one", path,
                         f.ntensors, names);
    }
    char what[300];
    if (s == W22_OK) {
        snprintf(what, sizeof what, "tensor '%.200s'", t->name);
        s = latent_dims(path, what, t->ndim, t->shape, zdim, T, h, w);
    }
    if (s == W22_OK) {
        int64_t shape[5] = {1, *zdim, *T, *h, *w};
        snprintf(what, sizeof what, "%s: latents", path);
        s = w22_check_finite(t->data, t->dtype, 5, shape, what);
    }
    if (s == W22_OK && !(*z = w22_malloc((size_t)t->numel * 4, "latents"))) s = W22_ERR_OUT_OF_MEMORY;
    if (s == W22_OK) w22_to_f32(t->data, t->dtype, (size_t)t->numel, *z);
    if (s == W22_OK && !strcmp(t->name, COMFY_KEY) && !w22_st_find(&f, COMFY_MARKER))
        for (int64_t i = 0; i < t->numel; i++) (*z)[i] *= COMFY_OLD_SCALE;
    w22_st_close(&f);
    return s;
}

static w22_status parse_npy(const void *buf, size_t size, const char *path, float **z, int *T, int *h, int *w,
                            int *zdim) {
    w22_npy_info info;
    w22_status ps = w22_npy_parse(buf, size, path, &info);
    if (ps == W22_ERR_BAD_DTYPE) { /* the parser's list has '<u2' (raw bf16, for other readers): latents refuse it */
        const char *found = strstr(w22_last_error(), "found ");
        char rest[256];
        snprintf(rest, sizeof rest, "%s", found ? found : "another dtype");
        return w22_fail(W22_ERR_BAD_DTYPE, "%s: npy dtype: expected '<f4' (float32) or '<f2' (float16) latents, %s",
                        path, rest);
    }
    if (ps != W22_OK) return ps;
    if (info.type == W22_NPY_U2)
        return w22_fail(W22_ERR_BAD_DTYPE, "%s: npy dtype: expected '<f4' or '<f2', found '<u2' (uint16; raw bf16 "
                        "is not accepted for latents)", path);
    W22_TRY(latent_dims(path, "array", info.ndim, info.shape, zdim, T, h, w));
    int64_t s5[5] = {1, *zdim, *T, *h, *w};
    char what[300];
    snprintf(what, sizeof what, "%s: latents", path);
    w22_dtype t = info.type == W22_NPY_F32 ? W22_DTYPE_F32 : W22_DTYPE_F16;
    const unsigned char *data = (const unsigned char *)buf + info.data_offset;
    W22_TRY(w22_check_finite(data, t, 5, s5, what));
    if (!(*z = w22_malloc((size_t)info.numel * 4, "latents"))) return W22_ERR_OUT_OF_MEMORY;
    w22_to_f32(data, t, (size_t)info.numel, *z);
    return W22_OK;
}

/* buf as the latents of one format: .npy (npy) or .safetensors. */
static w22_status parse_as(int npy, const void *buf, size_t size, const char *name, const char *key, float **z,
                           int *T, int *h, int *w, int *zdim) {
    if (npy && key)
        return w22_fail(W22_ERR_INVALID_ARG, "%s: --latents-key '%.200s' is for safetensors files (a .npy holds one "
                        "array)", name, key);
    if (npy) return parse_npy(buf ? buf : "", size, name, z, T, h, w, zdim);
    return parse_safetensors(buf, size, name, key, z, T, h, w, zdim);
}

/* The extensions latents are read from: .npy, and safetensors as .safetensors or ComfyUI's .latent. */
static int is_st_name(const char *name) { return ends_with(name, ".safetensors") || ends_with(name, ".latent"); }

/* The refusal of another extension; a PyTorch pickle gets the way to convert it (pickles are not read: loading one
 * runs code from the file). */
static w22_status bad_extension(const char *name) {
    if (ends_with(name, ".pt") || ends_with(name, ".pth") || ends_with(name, ".ckpt") || ends_with(name, ".bin"))
        return w22_fail(W22_ERR_INVALID_ARG, "%s: a PyTorch pickle is not read (unpickling runs code from the file); "
                        "expected .safetensors, .latent or .npy. Convert it with: python -c \"import torch, "
                        "safetensors.torch as st; z = torch.load('%s', map_location='cpu'); st.save_file({'latents': "
                        "(z['samples'] if isinstance(z, dict) else z).contiguous()}, 'latents.safetensors')\"", name,
                        name);
    return w22_fail(W22_ERR_INVALID_ARG, "%s: expected latents in a .safetensors, .latent (ComfyUI) or .npy file, "
                    "found another extension", name);
}

w22_status w22_io_parse_latents_key(const void *buf, size_t size, const char *name, const char *key, float **z,
                                    int *T, int *h, int *w, int *zdim) {
    *z = NULL;
    if (!name) name = "latents";
    if (!buf && size) return w22_fail(W22_ERR_INVALID_ARG, "%s: expected the file's bytes, found NULL", name);
    if (is_st_name(name) || ends_with(name, ".npy"))
        return parse_as(ends_with(name, ".npy"), buf, size, name, key, z, T, h, w, zdim);
    return bad_extension(name);
}

w22_status w22_io_parse_latents(const void *buf, size_t size, const char *name, float **z, int *T, int *h, int *w,
                                int *zdim) {
    return w22_io_parse_latents_key(buf, size, name, NULL, z, T, h, w, zdim);
}

/* The most a latents stream may bring: float32 latents of a 4K clip of 121 frames [48, 121, 135, 240] are 0.75 GB. */
#define W22_LATENTS_STREAM_MAX ((size_t)4 << 30)

/* A stream's first bytes can start latents: .npy's magic, or a safetensors header (its 8-byte length, then '{'). */
static const char *latents_first_bytes(const unsigned char *b, size_t n) {
    if (n >= 6 && memcmp(b, "\x93NUMPY", 6) == 0) return NULL;
    if (n >= 9 && b[8] == '{') return NULL;
    return "a .npy stream (\"\\x93NUMPY\" first) or a .safetensors one (a header length, then '{')";
}

/* Latents from a stream (w22_input_is_stream): standard input, a pipe, a FIFO, /dev/fd/N. Read to the end, then
 * parsed as a file's bytes; the format from the name's extension where it has one, else from the first bytes. A
 * FIFO's open blocks until its writer opens it, as cat's does: a FIFO is read only where it is named as the latents. */
static w22_status load_stream(const char *path, const char *key, float **z, int *T, int *h, int *w, int *zdim) {
    const int std_in = strcmp(path, "-") == 0;
    const char *name = std_in ? "standard input" : path;
    int fd = STDIN_FILENO;
    if (!std_in && (fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY)) < 0)
        return w22_fail(W22_ERR_IO, "%s: cannot open the latents: %s", path, strerror(errno));
    unsigned char *buf;
    size_t size;
    w22_status s = w22_read_stream(fd, name, "latents", W22_LATENTS_STREAM_MAX, latents_first_bytes, &buf, &size);
    if (!std_in) close(fd);
    if (s != W22_OK) return s;
    /* the first bytes passed latents_first_bytes, so buf holds at least 6 */
    int npy = ends_with(name, ".npy") ? 1 : is_st_name(name) ? 0 : buf[0] == 0x93;
    s = parse_as(npy, buf, size, name, key, z, T, h, w, zdim);
    free(buf);
    return s;
}

w22_status w22_io_load_latents_key(const char *path, const char *key, float **z, int *T, int *h, int *w, int *zdim) {
    *z = NULL;
    if (!path) return w22_fail(W22_ERR_INVALID_ARG, "latents: expected a path, found NULL");
    if (w22_input_is_stream(path)) return load_stream(path, key, z, T, h, w, zdim);
    if (!is_st_name(path) && !ends_with(path, ".npy")) return bad_extension(path);
    unsigned char *buf;
    size_t size;
    W22_TRY(w22_read_input(path, "latents", &buf, &size));
    w22_status s = w22_io_parse_latents_key(buf, size, path, key, z, T, h, w, zdim);
    free(buf);
    return s;
}

w22_status w22_io_load_latents(const char *path, float **z, int *T, int *h, int *w, int *zdim) {
    return w22_io_load_latents_key(path, NULL, z, T, h, w, zdim);
}

size_t w22_st_header_f32(const char *name, int ndim, const int64_t *shape, char *buf, size_t cap) {
    char json[1024], dims[400] = "";
    size_t n = 0;
    uint64_t bytes = 4;
    if (ndim < 0 || ndim > 8) return 0;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0 || (shape[i] && bytes > (UINT64_C(1) << 62) / (uint64_t)shape[i])) return 0;
        n += (size_t)snprintf(dims + n, sizeof dims - n, "%s%lld", i ? "," : "", (long long)shape[i]);
        bytes *= (uint64_t)shape[i];
    }
    int j = snprintf(json, sizeof json, "{\"%s\":{\"dtype\":\"F32\",\"shape\":[%s],\"data_offsets\":[0,%llu]}}",
                     name, dims, (unsigned long long)bytes);
    if (j < 0 || (size_t)j >= sizeof json) return 0;
    size_t jlen = ((size_t)j + 7) / 8 * 8; /* the data starts 8-aligned, as the safetensors writer does */
    if (8 + jlen > cap) return 0;
    for (int i = 0; i < 8; i++) buf[i] = (char)((jlen >> (8 * i)) & 0xff);
    memcpy(buf + 8, json, (size_t)j);
    memset(buf + 8 + j, ' ', jlen - (size_t)j);
    return 8 + jlen;
}

w22_status w22_io_save_latents(const char *path, const float *z, int zdim, int T, int h, int w, int overwrite) {
    int64_t shape[5] = {1, zdim, T, h, w};
    if (!path || !z || zdim < 1 || T < 1 || h < 1 || w < 1)
        return w22_fail(W22_ERR_INVALID_ARG, "saving latents: expected a path, data and positive sizes, found "
                        "zdim %d, T %d, h %d, w %d", zdim, T, h, w);
    if (ends_with(path, ".npy")) return w22_npy_write(path, z, 5, shape, overwrite);
    if (!ends_with(path, ".safetensors"))
        return w22_fail(W22_ERR_INVALID_ARG, "%s: expected a .safetensors or .npy path for latents", path);
    char header[1024];
    size_t hlen = w22_st_header_f32("latents", 5, shape, header, sizeof header);
    if (!hlen)
        return w22_fail(W22_ERR_INVALID_ARG, "%s: latents [1, %d, %d, %d, %d]: expected at most 2^62 bytes", path,
                        zdim, T, h, w);
    w22_outfile o;
    W22_TRY(w22_outfile_create(&o, path, 0, overwrite));
    w22_status s = w22_outfile_pwrite(&o, header, hlen, 0);
    if (s == W22_OK) s = w22_outfile_pwrite(&o, z, (size_t)zdim * (size_t)T * (size_t)h * (size_t)w * 4, hlen);
    if (s == W22_OK) return w22_outfile_commit(&o);
    w22_outfile_discard(&o);
    return s;
}
