/* Weights from a file, a sharded index or a diffusers folder, with the folder's config.json (source.h). The rules
 * are the Python package's (python/wan22vae/decoder.py: _find_weight_files, _shard_path, _load_sharded,
 * make_config), so that the CLI and Python read the same folders the same way. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include "common.h"
#include "weights/json.h"
#include "weights/safetensors.h"
#include "weights/source.h"
#include "weights/weights.h"

/* config.json and an index are a few KiB; a bound keeps a wrong path (a weight file named .json) cheap. */
#define JSON_FILE_MAX ((size_t)64 << 20)

/* Wan2.2 TI2V-5B's latents_mean and latents_std, channel by channel: the diffusers config of
 * Wan-AI/Wan2.2-TI2V-5B-Diffusers, vae/config.json (equal to Wan2_2_VAE's mean/std in the Wan2.2 repository's
 * wan/modules/vae2_2.py). */
const float w22_wan22_latents_mean[W22_WAN22_STATS] = {
    -0.2289f, -0.0052f, -0.1323f, -0.2339f, -0.2799f, 0.0174f,  0.1838f,  0.1557f,
    -0.1382f, 0.0542f,  0.2813f,  0.0891f,  0.1570f,  -0.0098f, 0.0375f,  -0.1825f,
    -0.2246f, -0.1207f, -0.0698f, 0.5109f,  0.2665f,  -0.2108f, -0.2158f, 0.2502f,
    -0.2055f, -0.0322f, 0.1109f,  0.1567f,  -0.0729f, 0.0899f,  -0.2799f, -0.1230f,
    -0.0313f, -0.1649f, 0.0117f,  0.0723f,  -0.2839f, -0.2083f, -0.0520f, 0.3748f,
    0.0152f,  0.1957f,  0.1433f,  -0.2944f, 0.3573f,  -0.0548f, -0.1681f, -0.0667f,
};
const float w22_wan22_latents_std[W22_WAN22_STATS] = {
    0.4765f, 1.0364f, 0.4514f, 1.1677f, 0.5313f, 0.4990f, 0.4818f, 0.5013f,
    0.8158f, 1.0344f, 0.5894f, 1.0901f, 0.6885f, 0.6165f, 0.8454f, 0.4978f,
    0.5759f, 0.3523f, 0.7135f, 0.6804f, 0.5833f, 1.4146f, 0.8986f, 0.5659f,
    0.7069f, 0.5338f, 0.4889f, 0.4917f, 0.4069f, 0.4999f, 0.6866f, 0.4093f,
    0.5709f, 0.6065f, 0.6415f, 0.4944f, 0.5726f, 1.2042f, 0.5458f, 1.6887f,
    0.3971f, 1.0600f, 0.3943f, 0.5537f, 0.5444f, 0.4089f, 0.7468f, 0.7744f,
};

/* The Wan2.1 VAE's: diffusers 0.42.1's AutoencoderKLWan defaults (latents_mean, latents_std). */
const float w22_wan21_latents_mean[W22_WAN21_STATS] = {
    -0.7571f, -0.7089f, -0.9113f, 0.1075f, -0.1745f, 0.9653f, -0.1517f, 1.5508f,
    0.4134f,  -0.0715f, 0.5517f,  -0.3632f, -0.1922f, -0.9497f, 0.2503f, -0.2921f,
};
const float w22_wan21_latents_std[W22_WAN21_STATS] = {
    2.8184f, 1.4541f, 2.3275f, 2.6558f, 1.2196f, 1.7708f, 2.6052f, 2.0743f,
    3.2687f, 2.1526f, 2.8652f, 1.5579f, 1.6382f, 1.1253f, 2.8251f, 1.9160f,
};

void w22_latents_denormalize(float *z, int channels, size_t n, const float *mean, const float *std) {
    for (int c = 0; c < channels; c++) {
        /* torch: 1.0 / tensor(std) in float32, then latents / that + mean, each rounded to float32 */
        volatile float inv = 1.0f / std[c];
        const float s = inv, m = mean[c];
        float *p = z + (size_t)c * n;
        for (size_t i = 0; i < n; i++) p[i] = p[i] / s + m;
    }
}

/* ---------------------------------------------------------------------------------------------------------- */
/* Locating the weights                                                                                         */

static int is_dir(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static int is_file(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && !strcmp(s + n - m, suffix);
}

static w22_status join(char *dst, size_t cap, const char *dir, const char *name) {
    if ((size_t)snprintf(dst, cap, "%s%s%s", dir, ends_with(dir, "/") ? "" : "/", name) >= cap)
        return w22_fail(W22_ERR_INVALID_ARG, "%s/%s: the path is longer than %zu characters", dir, name, cap - 1);
    return W22_OK;
}

static void set_config_json(w22_weights_location *loc) {
    char dir[PATH_MAX], cj[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", loc->found);
    char *slash = strrchr(dir, '/');
    if (!slash) snprintf(dir, sizeof dir, ".");
    else if (slash == dir) dir[1] = 0;
    else *slash = 0;
    loc->config_json[0] = 0;
    if (join(cj, sizeof cj, dir, "config.json") == W22_OK && is_file(cj))
        snprintf(loc->config_json, sizeof loc->config_json, "%s", cj);
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* The variants among diffusion_pytorch_model.<v>.safetensors in folder, sorted, and every
 * diffusion_pytorch_model*.safetensors name (for the message when there is none), comma-separated. */
static void scan_variants(const char *folder, char *variants, size_t vcap, int *nvariants, char *files,
                          size_t fcap, int *nfiles) {
    static const char stem[] = "diffusion_pytorch_model", ext[] = ".safetensors";
    *nvariants = *nfiles = 0;
    variants[0] = files[0] = 0;
    DIR *d = opendir(folder);
    if (!d) return;
    char *names[256];
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < 256) {
        const char *nm = e->d_name;
        if (strncmp(nm, stem, sizeof stem - 1) || !ends_with(nm, ext) || strlen(nm) < sizeof stem + sizeof ext - 2)
            continue;
        names[n] = strdup(nm);
        if (names[n]) n++;
    }
    closedir(d);
    qsort(names, (size_t)n, sizeof *names, cmp_str);
    size_t vk = 0, fk = 0;
    for (int i = 0; i < n; i++) {
        fk += (size_t)snprintf(files + fk, fk < fcap ? fcap - fk : 0, "%s%s", i ? ", " : "", names[i]);
        if (fk >= fcap) fk = fcap - 1;
        (*nfiles)++;
        /* "stem.<v>.safetensors": three parts split at '.' */
        const char *mid = names[i] + sizeof stem - 1;
        size_t vlen = strlen(mid) - (sizeof ext - 1);
        if (*mid != '.' || vlen < 2 || memchr(mid + 1, '.', vlen - 1)) continue;
        char v[256];
        snprintf(v, sizeof v, "%.*s", (int)(vlen - 1), mid + 1);
        int dup = 0;
        for (const char *p = variants; *p && !dup;) { /* variants so far: "a, b" */
            size_t l = strcspn(p, ",");
            dup = l == strlen(v) && !strncmp(p, v, l);
            p += l;
            while (*p == ',' || *p == ' ') p++;
        }
        if (dup) continue;
        vk += (size_t)snprintf(variants + vk, vk < vcap ? vcap - vk : 0, "%s%s", *nvariants ? ", " : "", v);
        if (vk >= vcap) vk = vcap - 1;
        (*nvariants)++;
    }
    for (int i = 0; i < n; i++) free(names[i]);
}

static w22_status locate_in(const char *folder, const char *variant, w22_weights_location *loc, int depth) {
    char stem[512], name[700];
    snprintf(stem, sizeof stem, "diffusion_pytorch_model%s%s", variant ? "." : "", variant ? variant : "");
    snprintf(name, sizeof name, "%s.safetensors.index.json", stem);
    W22_TRY(join(loc->found, sizeof loc->found, folder, name));
    if (is_file(loc->found)) return loc->is_index = 1, W22_OK;
    if (variant) { /* diffusers' own spelling of a variant's index */
        snprintf(name, sizeof name, "diffusion_pytorch_model.safetensors.index.%s.json", variant);
        W22_TRY(join(loc->found, sizeof loc->found, folder, name));
        if (is_file(loc->found)) return loc->is_index = 1, W22_OK;
    }
    snprintf(name, sizeof name, "%s.safetensors", stem);
    W22_TRY(join(loc->found, sizeof loc->found, folder, name));
    if (is_file(loc->found)) return loc->is_index = 0, W22_OK;
    loc->found[0] = 0;
    char variants[1024], files[2048];
    int nv, nf;
    scan_variants(folder, variants, sizeof variants, &nv, files, sizeof files, &nf);
    if (!variant && nf && depth == 0) {
        if (nv == 1) return locate_in(folder, variants, loc, 1);
        if (nv > 1)
            return w22_fail(W22_ERR_IO, "%s: several variants of the weights (%s); expected one, or a variant chosen "
                            "(--variant)", folder, variants);
        return w22_fail(W22_ERR_IO, "%s: safetensors files (%s) but no %s saying which tensor is where; expected "
                        "the index next to them", folder, files, W22_DIFFUSERS_INDEX);
    }
    return w22_fail(W22_ERR_IO, "%s: no %s.safetensors (nor a sharded index) there; expected a diffusers VAE folder "
                    "(config.json and %s) or a pipeline folder with vae/", folder, stem, W22_DIFFUSERS_WEIGHTS);
}

w22_status w22_weights_locate(const char *path, const char *variant, w22_weights_location *loc) {
    memset(loc, 0, sizeof *loc);
    if (!path || !*path) return w22_fail(W22_ERR_INVALID_ARG, "weights: expected a file or folder path, found an "
                                         "empty one");
    if (variant && (!*variant || strchr(variant, '/') || strchr(variant, '.')))
        return w22_fail(W22_ERR_INVALID_ARG, "variant '%s': expected a name such as fp16 (no '/' or '.')", variant);
    struct stat st;
    if (stat(path, &st) != 0) {
        if (errno == ENOENT)
            return w22_fail(W22_ERR_IO, "%s: no such file or folder; expected a safetensors file, a sharded index, "
                            "a diffusers VAE folder or a pipeline folder with vae/", path);
        return w22_fail(W22_ERR_IO, "%s: cannot stat: %s", path, strerror(errno));
    }
    if (!S_ISDIR(st.st_mode)) {
        if (!S_ISREG(st.st_mode)) /* a FIFO would hang the loader's open() */
            return w22_fail(W22_ERR_IO, "%s: expected the weights to be a regular file (it is read at known offsets) "
                            "or a folder, found %s", path, S_ISFIFO(st.st_mode) ? "a FIFO (named pipe)" :
                            S_ISCHR(st.st_mode) ? "a character device" : S_ISBLK(st.st_mode) ? "a block device" :
                            S_ISSOCK(st.st_mode) ? "a socket" : "not a regular file");
        if (strlen(path) >= sizeof loc->found)
            return w22_fail(W22_ERR_INVALID_ARG, "%s: the path is longer than %zu characters", path,
                            sizeof loc->found - 1);
        const char *base = strrchr(path, '/');
        base = base ? base + 1 : path;
        if (!strcmp(base, "config.json"))
            return w22_fail(W22_ERR_INVALID_ARG, "%s: a config, not weights; expected the weights (a .safetensors "
                            "file, an index) or the folder that holds both", path);
        snprintf(loc->found, sizeof loc->found, "%s", path);
        loc->is_index = ends_with(path, ".json"); /* as w22_weights_load: "x.safetensors.index.json", ".index.fp16.json" */
    } else {
        char folder[PATH_MAX];
        W22_TRY(join(folder, sizeof folder, path, "vae"));
        if (!is_dir(folder)) snprintf(folder, sizeof folder, "%s", path);
        W22_TRY(locate_in(folder, variant, loc, 0));
    }
    set_config_json(loc);
    return W22_OK;
}

/* ---------------------------------------------------------------------------------------------------------- */
/* config.json                                                                                                  */

typedef struct {
    const w22_json *j;
    const char *name;
} cfgctx;

static w22_status cfg_int(const cfgctx *c, int node, const char *key, int *v) {
    double d;
    if (w22_json_kind_of(c->j, node) == W22_JSON_TRUE) return *v = 1, W22_OK;  /* Python: True is 1 */
    if (w22_json_kind_of(c->j, node) == W22_JSON_FALSE) return *v = 0, W22_OK;
    if (!w22_json_number(c->j, node, &d) || d != floor(d) || d < INT32_MIN || d > INT32_MAX) {
        char t[64];
        w22_json_text(c->j, node, t, sizeof t);
        return w22_fail(W22_ERR_INVALID_ARG, "%s: %s is %s, expected an integer", c->name, key, t);
    }
    *v = (int)d;
    return W22_OK;
}

static w22_status cfg_ints(const cfgctx *c, int node, const char *key, int n, int *v, int reverse, int as_bool) {
    if (w22_json_kind_of(c->j, node) != W22_JSON_ARRAY || w22_json_count(c->j, node) != n) {
        char t[64];
        w22_json_text(c->j, node, t, sizeof t);
        return w22_fail(W22_ERR_INVALID_ARG, "%s: %s is %s, expected a list of %d %s", c->name, key, t, n,
                        as_bool ? "booleans" : "integers");
    }
    int i = 0;
    for (int e = w22_json_first(c->j, node); e >= 0; e = w22_json_next(c->j, e), i++) {
        int x;
        W22_TRY(cfg_int(c, e, key, &x));
        v[reverse ? n - 1 - i : i] = as_bool ? x != 0 : x;
    }
    return W22_OK;
}

/* truthiness of a JSON value, as Python's bool(): false, null, 0, "", [] and {} are false */
static int truthy(const w22_json *j, int node) {
    double d;
    switch (w22_json_kind_of(j, node)) {
    case W22_JSON_FALSE: case W22_JSON_NULL: return 0;
    case W22_JSON_TRUE: return 1;
    case W22_JSON_STRING: { size_t l; w22_json_str(j, node, &l); return l > 0; }
    case W22_JSON_ARRAY: case W22_JSON_OBJECT: return w22_json_count(j, node) > 0;
    default: return w22_json_number(j, node, &d) && d != 0;
    }
}

static void read_stats(const cfgctx *c, int root, w22_vae_config *vc) {
    int m = w22_json_get(c->j, root, "latents_mean"), s = w22_json_get(c->j, root, "latents_std");
    if (m < 0 && s < 0) return;
    vc->nstats = -1;
    if (m < 0 || s < 0) {
        snprintf(vc->stats_problem, sizeof vc->stats_problem, "%s: %s without %s; expected both", c->name,
                 m < 0 ? "latents_std" : "latents_mean", m < 0 ? "latents_mean" : "latents_std");
        return;
    }
    int nm = w22_json_count(c->j, m), ns = w22_json_count(c->j, s);
    if (w22_json_kind_of(c->j, m) != W22_JSON_ARRAY || w22_json_kind_of(c->j, s) != W22_JSON_ARRAY || nm != ns ||
        nm != vc->cfg.z_dim) {
        snprintf(vc->stats_problem, sizeof vc->stats_problem, "%s: latents_mean (%s of %d) and latents_std (%s of "
                 "%d): expected two lists of z_dim = %d numbers", c->name,
                 w22_json_kind_name(w22_json_kind_of(c->j, m)), nm, w22_json_kind_name(w22_json_kind_of(c->j, s)),
                 ns, vc->cfg.z_dim);
        return;
    }
    vc->mean = malloc((size_t)nm * sizeof(float));
    vc->std = malloc((size_t)nm * sizeof(float));
    if (!vc->mean || !vc->std) {
        snprintf(vc->stats_problem, sizeof vc->stats_problem, "%s: out of memory for the latents' statistics",
                 c->name);
        return;
    }
    for (int k = 0; k < 2; k++) {
        int i = 0;
        for (int e = w22_json_first(c->j, k ? s : m); e >= 0; e = w22_json_next(c->j, e), i++) {
            double d;
            if (!w22_json_number(c->j, e, &d) || !isfinite((float)d) || (k && !((float)d > 0))) {
                char t[64];
                w22_json_text(c->j, e, t, sizeof t);
                snprintf(vc->stats_problem, sizeof vc->stats_problem, "%s: %s[%d] is %s; expected a finite number%s",
                         c->name, k ? "latents_std" : "latents_mean", i, t, k ? " above 0" : "");
                return;
            }
            (k ? vc->std : vc->mean)[i] = (float)d; /* torch.tensor(list): float32, rounded to nearest */
        }
    }
    vc->nstats = nm;
}

static w22_status parse_diffusers(const cfgctx *c, int root, w22_config *cfg) {
    const w22_json *j = c->j;
    char problems[600] = "";
    size_t k = 0;
    int isr = w22_json_get(j, root, "is_residual"), attn = w22_json_get(j, root, "attn_scales"),
        ps = w22_json_get(j, root, "patch_size");
    if (attn >= 0 && truthy(j, attn)) {
        char t[64];
        w22_json_text(j, attn, t, sizeof t);
        k += (size_t)snprintf(problems + k, k < sizeof problems ? sizeof problems - k : 0, "%sattn_scales %s, "
                              "expected []", k ? "; " : "", t);
    }
    if (k) return w22_fail(W22_ERR_INVALID_ARG, "%s: diffusers config: %s", c->name, problems);
    /* is_residual chooses the decoder's structure: True Wan2.2 TI2V-5B's, False (diffusers' default) the Wan2.1
     * VAE's; patch_size None (the default) is no patchify, 1 here */
    cfg->is_residual = isr >= 0 && truthy(j, isr);
    /* diffusers' defaults for absent fields (AutoencoderKLWan.__init__) */
    cfg->z_dim = 16;
    cfg->base_dim = 96;
    static const int mult[4] = {1, 2, 4, 4};
    memcpy(cfg->dim_mult, mult, sizeof mult);
    cfg->num_res_blocks = 2;
    cfg->temporal_up[0] = 1, cfg->temporal_up[1] = 1, cfg->temporal_up[2] = 0; /* [False, True, True] reversed */
    cfg->out_channels = 3;
    int n;
    if ((n = w22_json_get(j, root, "temperal_downsample")) >= 0)
        W22_TRY(cfg_ints(c, n, "temperal_downsample", 3, cfg->temporal_up, 1, 1));
    if ((n = w22_json_get(j, root, "z_dim")) >= 0) W22_TRY(cfg_int(c, n, "z_dim", &cfg->z_dim));
    int dbd = w22_json_get(j, root, "decoder_base_dim");
    if (dbd >= 0 && truthy(j, dbd)) W22_TRY(cfg_int(c, dbd, "decoder_base_dim", &cfg->base_dim));
    else if ((n = w22_json_get(j, root, "base_dim")) >= 0) W22_TRY(cfg_int(c, n, "base_dim", &cfg->base_dim));
    if ((n = w22_json_get(j, root, "dim_mult")) >= 0) W22_TRY(cfg_ints(c, n, "dim_mult", 4, cfg->dim_mult, 0, 0));
    if ((n = w22_json_get(j, root, "num_res_blocks")) >= 0)
        W22_TRY(cfg_int(c, n, "num_res_blocks", &cfg->num_res_blocks));
    if ((n = w22_json_get(j, root, "out_channels")) >= 0) W22_TRY(cfg_int(c, n, "out_channels", &cfg->out_channels));
    cfg->patch_size = 1;
    if (ps >= 0 && w22_json_kind_of(j, ps) != W22_JSON_NULL) W22_TRY(cfg_int(c, ps, "patch_size", &cfg->patch_size));
    return W22_OK;
}

static w22_status parse_own(const cfgctx *c, int root, w22_config *cfg) {
    static const char *const keys[] = {"z_dim", "base_dim", "dim_mult", "num_res_blocks", "temporal_up",
                                       "out_channels", "patch_size", "is_residual"};
    w22_config_default(cfg);
    for (int e = w22_json_first(c->j, root); e >= 0; e = w22_json_next(c->j, e)) {
        const char *key = w22_json_key(c->j, e, NULL);
        int i = 0;
        while (i < 8 && strcmp(key, keys[i])) i++;
        switch (i) {
        case 0: W22_TRY(cfg_int(c, e, key, &cfg->z_dim)); break;
        case 1: W22_TRY(cfg_int(c, e, key, &cfg->base_dim)); break;
        case 2: W22_TRY(cfg_ints(c, e, key, 4, cfg->dim_mult, 0, 0)); break;
        case 3: W22_TRY(cfg_int(c, e, key, &cfg->num_res_blocks)); break;
        case 4: W22_TRY(cfg_ints(c, e, key, 3, cfg->temporal_up, 0, 0)); break;
        case 5: W22_TRY(cfg_int(c, e, key, &cfg->out_channels)); break;
        case 6: W22_TRY(cfg_int(c, e, key, &cfg->patch_size)); break;
        case 7: W22_TRY(cfg_int(c, e, key, &cfg->is_residual)); break;
        default:
            return w22_fail(W22_ERR_INVALID_ARG, "%s: config: unknown key '%.100s'; expected a diffusers "
                            "AutoencoderKLWan config (with temperal_downsample) or some of z_dim, base_dim, dim_mult, "
                            "num_res_blocks, temporal_up, out_channels, patch_size, is_residual", c->name, key);
        }
    }
    return W22_OK;
}

static w22_status vae_config_from_json(w22_json *j, const char *name, w22_vae_config *vc) {
    cfgctx c = {j, name};
    int root = w22_json_root(j);
    w22_status s = W22_OK;
    if (w22_json_kind_of(j, root) != W22_JSON_OBJECT)
        s = w22_fail(W22_ERR_FORMAT, "%s: %s; expected a diffusers AutoencoderKLWan config (an object)", name,
                     w22_json_kind_name(w22_json_kind_of(j, root)));
    if (s == W22_OK) {
        vc->diffusers = w22_json_get(j, root, "temperal_downsample") >= 0 ||
                        w22_json_get(j, root, "decoder_base_dim") >= 0;
        s = vc->diffusers ? parse_diffusers(&c, root, &vc->cfg) : parse_own(&c, root, &vc->cfg);
    }
    if (s == W22_OK && (s = w22_config_check(&vc->cfg)) != W22_OK) { /* its "config: " said once */
        char why[1024];
        const char *m = w22_last_error();
        snprintf(why, sizeof why, "%s", strncmp(m, "config: ", 8) ? m : m + 8);
        w22_fail(s, "%s: the config: %s", name, why);
    }
    if (s == W22_OK && vc->diffusers) read_stats(&c, root, vc);
    w22_json_free(j);
    if (s != W22_OK) w22_vae_config_free(vc);
    return s;
}

w22_status w22_vae_config_parse(const void *text, size_t n, const char *name, w22_vae_config *vc) {
    memset(vc, 0, sizeof *vc);
    w22_json *j;
    W22_TRY(w22_json_parse(text, n, name, &j));
    return vae_config_from_json(j, name, vc);
}

w22_status w22_vae_config_read(const char *path, w22_vae_config *vc) {
    memset(vc, 0, sizeof *vc);
    w22_json *j;
    W22_TRY(w22_json_read(path, JSON_FILE_MAX, &j));
    return vae_config_from_json(j, path, vc);
}

void w22_vae_config_free(w22_vae_config *vc) {
    if (!vc) return;
    free(vc->mean);
    free(vc->std);
    vc->mean = vc->std = NULL;
    if (vc->nstats > 0) vc->nstats = 0;
}

/* ---------------------------------------------------------------------------------------------------------- */
/* A sharded index                                                                                              */

static void dir_of(const char *path, char *dir, size_t cap) {
    const char *slash = strrchr(path, '/');
    if (!slash) snprintf(dir, cap, ".");
    else if (slash == path) snprintf(dir, cap, "/");
    else snprintf(dir, cap, "%.*s", (int)(slash - path), path);
}

/* path with "." and ".." resolved lexically (for a folder that does not exist, where realpath cannot help);
 * 0 when ".." climbs above the start. */
static int lexical_inside(const char *rel) {
    int depth = 0;
    const char *p = rel;
    while (*p) {
        size_t l = strcspn(p, "/");
        if (l == 2 && !strncmp(p, "..", 2)) {
            if (--depth < 0) return 0;
        } else if (l && !(l == 1 && *p == '.')) {
            depth++;
        }
        p += l;
        while (*p == '/') p++;
    }
    return 1;
}

/* The shard path of one weight_map entry (Python's _shard_path): a relative path whose folder, symlinks and '..'
 * resolved, is the index's folder or inside it. The shard file itself may be a symlink (the Hugging Face cache
 * links snapshots/<rev>/vae/ files to blobs). */
static w22_status shard_path(const char *index, const char *folder, const char *folder_real, const w22_json *j,
                             int node, const char *tensor, char *out, size_t cap) {
    size_t len;
    const char *shard = w22_json_str(j, node, &len);
    if (!shard || !len || strlen(shard) != len) {
        char t[80];
        w22_json_text(j, node, t, sizeof t);
        return w22_fail(W22_ERR_FORMAT, "%s: weight_map['%.200s'] is %s; expected the file name of a shard next to "
                        "the index", index, tensor, t);
    }
    char norm[PATH_MAX];
    if (len >= sizeof norm) return w22_fail(W22_ERR_FORMAT, "%s: weight_map['%.200s']: a shard path of %zu bytes",
                                            index, tensor, len);
    memcpy(norm, shard, len + 1);
    for (char *q = norm; *q; q++)
        if (*q == '\\') *q = '/';
    const char *last = strrchr(norm, '/');
    last = last ? last + 1 : norm;
    if (norm[0] == '/' || !*last || !strcmp(last, ".") || !strcmp(last, ".."))
        return w22_fail(W22_ERR_FORMAT, "%s: weight_map['%.200s'] is the shard path '%.300s', refused: expected the "
                        "relative path of a file inside the index's folder %s", index, tensor, shard, folder);
    W22_TRY(join(out, cap, folder, shard));
    char parent[PATH_MAX], parent_real[PATH_MAX];
    dir_of(out, parent, sizeof parent);
    int inside;
    if (realpath(parent, parent_real)) {
        size_t fl = strlen(folder_real);
        inside = !strcmp(parent_real, folder_real) ||
                 (!strncmp(parent_real, folder_real, fl) && (parent_real[fl] == '/' || !strcmp(folder_real, "/")));
    } else {
        inside = lexical_inside(norm);
        snprintf(parent_real, sizeof parent_real, "%s (which does not exist)", parent);
    }
    if (!inside)
        return w22_fail(W22_ERR_FORMAT, "%s: weight_map['%.200s'] is the shard path '%.300s', refused: it resolves to "
                        "%s, outside the index's folder %s", index, tensor, shard, parent_real, folder_real);
    return W22_OK;
}

typedef struct {
    const char *name;
    int shard;
    const w22_st_tensor *t;
} owned_tensor;

static int cmp_owned(const void *a, const void *b) {
    const owned_tensor *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    return c ? c : (x->shard > y->shard) - (x->shard < y->shard);
}

w22_status w22_weights_load_index(const char *index, const w22_config *cfg, w22_weights **out, int *nshards_out,
                                  int *ntensors_out) {
    static const char what[] = "a sharded safetensors index, JSON {\"weight_map\": {tensor name: shard file}}";
    *out = NULL;
    w22_json *j;
    w22_status s = w22_json_read(index, JSON_FILE_MAX, &j);
    if (s != W22_OK) { /* the reader's words ("<index>: JSON at byte 1: ..."), then what was expected */
        char why[1024];
        snprintf(why, sizeof why, "%s", w22_last_error());
        return w22_fail(s, "%s; expected %s", why, what);
    }
    int root = w22_json_root(j), wm = w22_json_get(j, root, "weight_map");
    if (w22_json_kind_of(j, root) != W22_JSON_OBJECT || wm < 0) {
        s = w22_fail(W22_ERR_FORMAT, "%s: %s; expected %s", index, w22_json_kind_of(j, root) == W22_JSON_OBJECT ?
                     "a JSON object without weight_map" : w22_json_kind_name(w22_json_kind_of(j, root)), what);
        w22_json_free(j);
        return s;
    }
    if (w22_json_kind_of(j, wm) != W22_JSON_OBJECT || w22_json_count(j, wm) == 0) {
        s = w22_fail(W22_ERR_FORMAT, "%s: weight_map is %s; expected %s", index,
                     w22_json_kind_of(j, wm) == W22_JSON_OBJECT ? "empty" : w22_json_kind_name(w22_json_kind_of(j, wm)),
                     what);
        w22_json_free(j);
        return s;
    }
    char folder[PATH_MAX], folder_real[PATH_MAX];
    dir_of(index, folder, sizeof folder);
    if (!realpath(folder, folder_real)) {
        s = w22_fail(W22_ERR_IO, "%s: cannot resolve the index's folder %s: %s", index, folder, strerror(errno));
        w22_json_free(j);
        return s;
    }
    int nent = w22_json_count(j, wm), nshards = 0;
    /* per entry: its tensor name and the index of its shard in `shards` */
    const char **ent_name = calloc((size_t)nent, sizeof *ent_name);
    int *ent_shard = calloc((size_t)nent, sizeof *ent_shard);
    char (*shards)[PATH_MAX] = calloc((size_t)nent, PATH_MAX);
    w22_st_file *files = calloc((size_t)nent, sizeof *files);
    owned_tensor *all = NULL;
    w22_st_file merged;
    memset(&merged, 0, sizeof merged);
    if (!ent_name || !ent_shard || !shards || !files) {
        s = w22_fail(W22_ERR_OUT_OF_MEMORY, "%s: out of memory for %d weight_map entries", index, nent);
        goto done;
    }
    int k = 0;
    for (int e = w22_json_first(j, wm); e >= 0 && s == W22_OK; e = w22_json_next(j, e), k++) {
        size_t kl;
        const char *tensor = w22_json_key(j, e, &kl);
        if (strlen(tensor) != kl) {
            s = w22_fail(W22_ERR_FORMAT, "%s: a weight_map key holds a NUL character; expected tensor names", index);
            break;
        }
        char path[PATH_MAX];
        s = shard_path(index, folder, folder_real, j, e, tensor, path, sizeof path);
        if (s != W22_OK) break;
        int i = 0;
        while (i < nshards && strcmp(shards[i], path)) i++;
        if (i == nshards) snprintf(shards[nshards++], PATH_MAX, "%s", path);
        ent_name[k] = tensor;
        ent_shard[k] = i;
    }
    int total = 0;
    for (int i = 0; i < nshards && s == W22_OK; i++) {
        struct stat st;
        int exists = stat(shards[i], &st) == 0;
        if (!exists || !S_ISREG(st.st_mode)) {
            int e = 0;
            while (ent_shard[e] != i) e++;
            s = w22_fail(W22_ERR_IO, "%s: %s; the index %s names it as the shard of tensor '%.200s'", shards[i],
                         !exists ? "no such file" : "not a regular file", index, ent_name[e]);
            break;
        }
        s = w22_st_open(shards[i], &files[i]);
        if (s == W22_OK) total += files[i].ntensors;
    }
    if (s != W22_OK) goto done;
    /* every tensor of every shard, sorted by name: a name twice is a tensor in two shards */
    all = calloc((size_t)total + 1, sizeof *all);
    if (!all) {
        s = w22_fail(W22_ERR_OUT_OF_MEMORY, "%s: out of memory for %d tensors", index, total);
        goto done;
    }
    int na = 0;
    for (int i = 0; i < nshards; i++)
        for (int t = 0; t < files[i].ntensors; t++) all[na++] = (owned_tensor){files[i].tensors[t].name, i,
                                                                              &files[i].tensors[t]};
    qsort(all, (size_t)na, sizeof *all, cmp_owned);
    for (int i = 1; i < na; i++)
        if (!strcmp(all[i - 1].name, all[i].name)) {
            s = w22_fail(W22_ERR_FORMAT, "%s: tensor '%.200s' is in two shards, %s and %s; expected each tensor in one "
                         "shard", index, all[i].name, shards[all[i - 1].shard], shards[all[i].shard]);
            goto done;
        }
    merged.tensors = calloc((size_t)nent, sizeof *merged.tensors);
    if (!merged.tensors) {
        s = w22_fail(W22_ERR_OUT_OF_MEMORY, "%s: out of memory for %d tensors", index, nent);
        goto done;
    }
    for (int e = 0; e < nent; e++) {
        owned_tensor key = {ent_name[e], -1, NULL};
        /* the first entry with this name (shard -1 sorts before any) */
        size_t lo = 0, hi = (size_t)na;
        while (lo < hi) {
            size_t mid = (lo + hi) / 2;
            if (cmp_owned(&all[mid], &key) < 0) lo = mid + 1;
            else hi = mid;
        }
        const owned_tensor *o = lo < (size_t)na && !strcmp(all[lo].name, ent_name[e]) ? &all[lo] : NULL;
        if (!o || o->shard != ent_shard[e]) {
            char elsewhere[PATH_MAX + 16] = "";
            if (o) snprintf(elsewhere, sizeof elsewhere, " (it is in %s)", shards[o->shard]);
            s = w22_fail(W22_ERR_MISSING_TENSOR, "%s: weight_map puts tensor '%.200s' in %s, but that shard does not "
                         "hold it%s; expected every weight_map entry in its shard", index, ent_name[e],
                         shards[ent_shard[e]], elsewhere);
            goto done;
        }
        merged.tensors[merged.ntensors++] = *o->t;
    }
    w22_weights *w = NULL;
    s = w22_weights_from_st(&merged, folder, cfg, &w);
    if (s != W22_OK) goto done;
    {
        const char **names = calloc((size_t)nshards, sizeof *names);
        for (int i = 0; names && i < nshards; i++) names[i] = shards[i];
        /* the mappings move to the weights object */
        s = names ? w22_weights_take_files(w, files, names, nshards)
                  : w22_fail(W22_ERR_OUT_OF_MEMORY, "%s: out of memory", index);
        free(names);
    }
    /* validation read every tensor: a shard changed in place meanwhile would leave checks that no longer hold */
    if (s == W22_OK) s = w22_weights_unchanged(w, "while the weights were loaded and checked");
    if (s != W22_OK) {
        w22_weights_free(w);
        goto done;
    }
    *out = w;
    if (nshards_out) *nshards_out = nshards;
    if (ntensors_out) *ntensors_out = total;
done:
    free(merged.tensors); /* the names belong to the shards' tables */
    free(all);
    for (int i = 0; files && i < nshards; i++) w22_st_close(&files[i]);
    free(files);
    free(shards);
    free(ent_name);
    free(ent_shard);
    w22_json_free(j);
    return s;
}

/* ---------------------------------------------------------------------------------------------------------- */

w22_status w22_weights_open_path(const char *path, const char *variant, w22_weights **out, w22_weights_info *info) {
    w22_weights_info local;
    if (!info) info = &local;
    memset(info, 0, sizeof *info);
    *out = NULL;
    W22_TRY(w22_weights_locate(path, variant, &info->loc));
    const w22_config *cfg = NULL;
    if (info->loc.config_json[0]) {
        W22_TRY(w22_vae_config_read(info->loc.config_json, &info->vae));
        info->has_config = 1;
        cfg = &info->vae.cfg;
    }
    w22_status s;
    if (info->loc.is_index) {
        s = w22_weights_load_index(info->loc.found, cfg, out, &info->nfiles, &info->file_tensors);
    } else {
        s = w22_weights_load(info->loc.found, cfg, out);
        if (s == W22_OK) {
            w22_st_file f; /* the file's own tensor count, for `info` (a header parse of a mapped file: cheap) */
            info->nfiles = 1;
            info->file_tensors = w22_st_open(info->loc.found, &f) == W22_OK ? f.ntensors : -1;
            w22_st_close(&f);
        }
    }
    if (s != W22_OK && info->has_config)
        w22_fail_context(s, "with the config of %s: ", info->loc.config_json);
    if (s != W22_OK || info == &local) w22_weights_info_free(info);
    return s;
}

void w22_weights_info_free(w22_weights_info *info) {
    if (info && info->has_config) w22_vae_config_free(&info->vae);
    if (info) info->has_config = 0;
}
