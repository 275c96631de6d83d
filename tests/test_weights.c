/* Loading, validating and saving weights on a narrow model (z_dim 4, base_dim 8): exact round trips, bf16/f16
 * rounding, the accepted file layouts (plain, prefixed, whole VAE, mixed dtypes), the rejected ones (a missing
 * tensor, a wrong shape, a tensor of another model variant), the config inferred from a file, and a file changed
 * in place after its load (refused by the open and the save instead of a SIGBUS or unchecked weights). */
#include <dirent.h>
#include <fcntl.h>
#include <math.h>
#include <sys/stat.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common.h"
#include "testutil.h"
#include "weights/safetensors.h"
#include "weights/weights.h"

static w22_config cfg;
static int nw;
static float *ref[W22_MAX_WEIGHTS]; /* the random weights, float32 */
static int64_t numel[W22_MAX_WEIGHTS];

static void make_reference(void) {
    w22_config_default(&cfg);
    cfg.z_dim = 4;
    cfg.base_dim = 8;
    nw = w22_weight_count(&cfg);
    CHECK(nw == 110, "weight count %d, expected 110", nw);
    for (int i = 0; i < nw; i++) {
        int64_t s[5];
        int nd = w22_weight_shape(&cfg, i, s);
        numel[i] = 1;
        for (int d = 0; d < nd; d++) numel[i] *= s[d];
        ref[i] = malloc((size_t)numel[i] * sizeof(float));
        t_fill_uniform(ref[i], (size_t)numel[i], 1000 + (uint64_t)i, -2.0f, 2.0f);
    }
}

static const char *tmp_path(const char *name) {
    static char buf[8][512];
    static int k;
    char *p = buf[k++ % 8];
    snprintf(p, 512, "%s/%s", t_tmpdir(), name);
    return p;
}

/* Every tensor of w equals expect(ref) exactly. */
static void check_values(const w22_weights *w, w22_dtype rounding, const char *what) {
    int bad = 0;
    for (int i = 0; i < nw && !bad; i++) {
        float *got = malloc((size_t)numel[i] * sizeof(float));
        w22_weights_get_f32(w, i, got);
        for (int64_t k = 0; k < numel[i]; k++) {
            float want = ref[i][k];
            if (rounding == W22_DTYPE_BF16) want = w22_bf16_to_f32(w22_f32_to_bf16(want));
            if (rounding == W22_DTYPE_F16) want = w22_f16_to_f32(w22_f32_to_f16(want));
            if (memcmp(&got[k], &want, 4) != 0) {
                CHECK(0, "%s: %s[%lld] = %.9g, expected %.9g", what, w->model.weights[i].name, (long long)k, got[k],
                      want);
                bad = 1;
                break;
            }
        }
        free(got);
    }
    CHECK(!bad, "%s: values", what);
}

/* A file of the reference weights under `prefix`, in dtype dt (bf16/f16: rounded), plus extra tensors first, and
 * with one tensor left out (skip) or given another shape (reshape: its last dimension set to 1). */
typedef struct {
    const char *prefix;
    w22_dtype dt;
    int mixed;       /* odd tensors in BF16, even in F32 */
    int skip, reshape;
    const char *extra[4];
    w22_dtype extra_dt;
    const char *meta_config;
} file_spec;

static w22_status write_file(const char *path, const file_spec *fs) {
    w22_st_write_tensor t[W22_MAX_WEIGHTS + 4];
    char names[W22_MAX_WEIGHTS][160];
    int64_t shapes[W22_MAX_WEIGHTS][5], one[1] = {1}, qshape[5] = {4, 4, 1, 1, 1};
    static float extra_data[64];
    void *conv[W22_MAX_WEIGHTS] = {0};
    int n = 0;
    for (int e = 0; e < 4 && fs->extra[e]; e++) {
        int q = strstr(fs->extra[e], "quant_conv.weight") != NULL;
        t[n++] = (w22_st_write_tensor){fs->extra[e], fs->extra_dt, q ? 5 : 1, q ? qshape : one, extra_data};
    }
    for (int i = 0; i < nw; i++) {
        if (i == fs->skip) continue;
        int nd = w22_weight_shape(&cfg, i, shapes[i]);
        if (i == fs->reshape) shapes[i][nd - 1] = 1;
        snprintf(names[i], sizeof names[i], "%s%s", fs->prefix, w22_weight_name(&cfg, i));
        w22_dtype dt = fs->mixed ? (i % 2 ? W22_DTYPE_BF16 : W22_DTYPE_F32) : fs->dt;
        int64_t ne = 1;
        for (int d = 0; d < nd; d++) ne *= shapes[i][d];
        conv[i] = malloc((size_t)numel[i] * 4);
        w22_from_f32(ref[i], (size_t)(ne < numel[i] ? ne : numel[i]), dt, conv[i]);
        t[n++] = (w22_st_write_tensor){names[i], dt, nd, shapes[i], conv[i]};
    }
    const char *meta[2] = {"wan22vae_config", fs->meta_config};
    w22_status s = w22_st_write(path, t, n, meta, fs->meta_config ? 1 : 0, 1);
    for (int i = 0; i < nw; i++) free(conv[i]);
    return s;
}

static file_spec plain(void) {
    file_spec fs = {.prefix = "", .dt = W22_DTYPE_F32, .skip = -1, .reshape = -1, .extra_dt = W22_DTYPE_F32};
    return fs;
}

static void test_memory_and_save(void) {
    const void *data[W22_MAX_WEIGHTS];
    for (int i = 0; i < nw; i++) data[i] = ref[i];
    w22_weights *w = NULL, *r = NULL;
    CHECK_OK(w22_weights_from_memory(&cfg, data, W22_DTYPE_F32, &w));
    if (!w) return;
    CHECK(w22_config_equal(w22_weights_config(w), &cfg), "config of weights from memory");
    check_values(w, W22_DTYPE_F32, "from memory");

    static const w22_dtype dts[3] = {W22_DTYPE_F32, W22_DTYPE_BF16, W22_DTYPE_F16};
    static const char *files[3] = {"f32.safetensors", "bf16.safetensors", "f16.safetensors"};
    for (int k = 0; k < 3; k++) {
        const char *p = tmp_path(files[k]);
        CHECK_OK(w22_weights_save(w, p, dts[k]));
        CHECK_OK(w22_weights_load(p, &cfg, &r));
        if (!r) continue;
        CHECK(r->dtype[0] == dts[k] && r->dtype[nw - 1] == dts[k], "%s: dtype %d", files[k], r->dtype[0]);
        check_values(r, dts[k], files[k]);
        CHECK(strcmp(r->source, p) == 0, "source '%s'", r->source);
        w22_weights_free(r);
        /* without a config: the one saved in the metadata */
        CHECK_OK(w22_weights_load(p, NULL, &r));
        if (r) CHECK(w22_config_equal(w22_weights_config(r), &cfg), "%s: config from the metadata", files[k]);
        w22_weights_free(r);
        r = NULL;
    }
    /* bf16 -> f32 -> bf16 keeps the values; f16 file saved as bf16 converts through f32 */
    CHECK_OK(w22_weights_load(tmp_path("bf16.safetensors"), &cfg, &r));
    if (r) {
        CHECK_OK(w22_weights_save(r, tmp_path("bf16-f32.safetensors"), W22_DTYPE_F32));
        w22_weights *r2 = NULL;
        CHECK_OK(w22_weights_load(tmp_path("bf16-f32.safetensors"), &cfg, &r2));
        if (r2) check_values(r2, W22_DTYPE_BF16, "bf16 saved as f32");
        w22_weights_free(r2);
    }
    w22_status s = w22_weights_save(w, tmp_path("f32.safetensors"), W22_DTYPE_F32);
    CHECK(s == W22_ERR_EXISTS, "saving over an existing file: %s", w22_status_string(s));
    w22_weights_free(r);
    w22_weights_free(w);

    /* from memory refuses misaligned or missing data */
    char *odd = malloc(4 * 1024 + 2);
    const void *bad[W22_MAX_WEIGHTS];
    for (int i = 0; i < nw; i++) bad[i] = ref[i];
    bad[3] = odd + 2;
    s = w22_weights_from_memory(&cfg, bad, W22_DTYPE_F32, &w);
    CHECK(s == W22_ERR_INVALID_ARG && strstr(w22_last_error(), "misaligned") && w == NULL, "misaligned: %s",
          w22_last_error());
    bad[3] = NULL;
    s = w22_weights_from_memory(&cfg, bad, W22_DTYPE_F32, &w);
    CHECK(s == W22_ERR_INVALID_ARG && strstr(w22_last_error(), "NULL"), "NULL tensor: %s", w22_last_error());
    free(odd);
    s = w22_weights_from_memory(NULL, data, W22_DTYPE_F32, &w);
    CHECK(s == W22_ERR_INVALID_ARG, "NULL config: %s", w22_status_string(s));
}

/* Loads path (cfg or NULL) and checks the result against the reference. */
static void expect_load(const char *path, const w22_config *c, w22_dtype rounding, const char *what) {
    w22_weights *w = NULL;
    w22_status s = w22_weights_load(path, c, &w);
    CHECK(s == W22_OK, "%s: %s: %s", what, w22_status_string(s), w22_last_error());
    if (!w) return;
    CHECK(w22_config_equal(w22_weights_config(w), &cfg), "%s: config z_dim %d base_dim %d", what,
          w22_weights_config(w)->z_dim, w22_weights_config(w)->base_dim);
    check_values(w, rounding, what);
    w22_weights_free(w);
}

static void expect_fail(const char *path, w22_status want, const char *s1, const char *s2, const char *s3,
                        const char *what) {
    w22_weights *w = (w22_weights *)1;
    w22_status s = w22_weights_load(path, &cfg, &w);
    CHECK(s == want, "%s: %s, expected %s (%s)", what, w22_status_string(s), w22_status_string(want), w22_last_error());
    CHECK(w == NULL, "%s: out not cleared", what);
    const char *subs[3] = {s1, s2, s3};
    for (int i = 0; i < 3; i++)
        if (subs[i]) CHECK(strstr(w22_last_error(), subs[i]), "%s: message '%s' lacks '%s'", what, w22_last_error(),
                           subs[i]);
    if (s == W22_OK) w22_weights_free(w);
}

static void test_layouts(void) {
    file_spec fs = plain();
    const char *p = tmp_path("plain.safetensors");
    CHECK_OK(write_file(p, &fs));
    expect_load(p, &cfg, W22_DTYPE_F32, "plain");
    expect_load(p, NULL, W22_DTYPE_F32, "plain, config inferred");

    fs.prefix = "vae.";
    p = tmp_path("prefixed.safetensors");
    CHECK_OK(write_file(p, &fs));
    expect_load(p, &cfg, W22_DTYPE_F32, "prefixed");
    expect_load(p, NULL, W22_DTYPE_F32, "prefixed, config inferred");

    fs = plain();
    fs.extra[0] = "encoder.x";
    fs.extra[1] = "quant_conv.weight";
    fs.extra[2] = "text_encoder.y";
    p = tmp_path("whole.safetensors");
    CHECK_OK(write_file(p, &fs));
    expect_load(p, &cfg, W22_DTYPE_F32, "whole VAE");

    /* An odd-sized BF16 tensor first puts every F32 tensor after it off 4-byte alignment: they get copied. */
    fs = plain();
    fs.mixed = 1;
    fs.extra[0] = "encoder.odd";
    fs.extra_dt = W22_DTYPE_BF16;
    p = tmp_path("mixed.safetensors");
    CHECK_OK(write_file(p, &fs));
    w22_weights *w = NULL;
    CHECK_OK(w22_weights_load(p, &cfg, &w));
    if (w) {
        CHECK(w->owned != NULL, "misaligned F32 tensors were not copied");
        for (int i = 0; i < nw; i++) {
            CHECK(((uintptr_t)w->data[i] % w22_dtype_size(w->dtype[i])) == 0, "tensor %d misaligned", i);
            CHECK(w->dtype[i] == (i % 2 ? W22_DTYPE_BF16 : W22_DTYPE_F32), "tensor %d dtype %d", i, w->dtype[i]);
        }
        for (int i = 0; i < nw; i++) {
            float *got = malloc((size_t)numel[i] * 4);
            w22_weights_get_f32(w, i, got);
            int ok = 1;
            for (int64_t k = 0; k < numel[i] && ok; k++) {
                float want = i % 2 ? w22_bf16_to_f32(w22_f32_to_bf16(ref[i][k])) : ref[i][k];
                ok = got[k] == want;
            }
            CHECK(ok, "mixed: tensor %d values", i);
            free(got);
        }
        w22_weights_free(w);
    }
}

static void test_rejections(void) {
    char name[128];
    file_spec fs = plain();
    int miss = -1, conv_in = -1, z = 0;
    for (int i = 0; i < nw; i++) {
        if (strcmp(w22_weight_name(&cfg, i), "decoder.up_blocks.1.resnets.2.conv1.bias") == 0) miss = i;
        if (strcmp(w22_weight_name(&cfg, i), "decoder.conv_in.weight") == 0) conv_in = i;
    }
    CHECK(miss >= 0 && conv_in >= 0, "weight names");
    (void)z;

    fs.skip = miss;
    const char *p = tmp_path("missing.safetensors");
    CHECK_OK(write_file(p, &fs));
    expect_fail(p, W22_ERR_MISSING_TENSOR, "'decoder.up_blocks.1.resnets.2.conv1.bias' is missing", "[32]", p,
                "missing tensor");
    fs.prefix = "vae.";
    CHECK_OK(write_file(p, &fs));
    expect_fail(p, W22_ERR_MISSING_TENSOR, "'vae.decoder.up_blocks.1.resnets.2.conv1.bias'", NULL, NULL,
                "missing prefixed tensor");

    fs = plain();
    fs.reshape = conv_in;
    p = tmp_path("shape.safetensors");
    CHECK_OK(write_file(p, &fs));
    expect_fail(p, W22_ERR_BAD_SHAPE, "'decoder.conv_in.weight' has shape [32, 4, 3, 3, 1]", "expected [32, 4, 3, 3, 3]",
                NULL, "wrong shape");

    fs = plain();
    fs.extra[0] = "decoder.up_blocks.0.resnets.3.conv1.bias";
    p = tmp_path("variant.safetensors");
    CHECK_OK(write_file(p, &fs));
    expect_fail(p, W22_ERR_FORMAT, "'decoder.up_blocks.0.resnets.3.conv1.bias' is not part of this model",
                "variant", NULL, "unknown decoder tensor");
    fs.extra[0] = "post_quant_conv.extra";
    CHECK_OK(write_file(p, &fs));
    expect_fail(p, W22_ERR_FORMAT, "'post_quant_conv.extra'", NULL, NULL, "unknown post_quant_conv tensor");

    /* a config that does not match the file: every shape differs */
    w22_config other = cfg;
    other.base_dim = 16;
    fs = plain();
    p = tmp_path("plain2.safetensors");
    CHECK_OK(write_file(p, &fs));
    w22_weights *w = NULL;
    w22_status s = w22_weights_load(p, &other, &w);
    CHECK(s == W22_ERR_BAD_SHAPE && strstr(w22_last_error(), "expected [64, 4, 3, 3, 3]"), "other config: %s",
          w22_last_error());
    other = cfg;
    other.temporal_up[1] = 0; /* no time_conv in up block 1: the file's is a stranger */
    s = w22_weights_load(p, &other, &w);
    CHECK(s == W22_ERR_FORMAT && strstr(w22_last_error(), "decoder.up_blocks.1.upsampler.time_conv.weight"),
          "temporal_up off: %s", w22_last_error());

    /* two decoders in one file */
    fs = plain();
    fs.extra[0] = "other.post_quant_conv.weight";
    p = tmp_path("two.safetensors");
    CHECK_OK(write_file(p, &fs));
    expect_fail(p, W22_ERR_FORMAT, "two decoders", NULL, NULL, "two decoders");

    /* no decoder at all */
    float x[4] = {0};
    int64_t shape[1] = {4};
    w22_st_write_tensor t = {"encoder.conv_in.weight", W22_DTYPE_F32, 1, shape, x};
    p = tmp_path("encoder-only.safetensors");
    CHECK_OK(w22_st_write(p, &t, 1, NULL, 0, 0));
    expect_fail(p, W22_ERR_MISSING_TENSOR, "no post_quant_conv.weight", "encoder.conv_in.weight", "convert_pth", "no decoder");

    /* bad metadata config, and a file that is not safetensors */
    fs = plain();
    fs.meta_config = "4,8,1,2";
    p = tmp_path("badmeta.safetensors");
    CHECK_OK(write_file(p, &fs));
    s = w22_weights_load(p, NULL, &w);
    CHECK(s == W22_ERR_FORMAT && strstr(w22_last_error(), "wan22vae_config is '4,8,1,2'"), "bad metadata: %s",
          w22_last_error());
    fs.meta_config = "4,8,1,2,4,4,2,1,1,0,13,2";
    CHECK_OK(write_file(p, &fs));
    s = w22_weights_load(p, NULL, &w);
    CHECK(s == W22_ERR_INVALID_ARG && strstr(w22_last_error(), "out_channels 13"), "bad metadata config: %s",
          w22_last_error());
    snprintf(name, sizeof name, "%s", tmp_path("missing-file.safetensors"));
    s = w22_weights_load(name, &cfg, &w);
    CHECK(s == W22_ERR_IO && strstr(w22_last_error(), name), "missing file: %s", w22_last_error());
    s = w22_weights_load(NULL, &cfg, &w);
    CHECK(s == W22_ERR_INVALID_ARG, "NULL path");
}

/* One config at the edge of what w22_config_check accepts: its model built into a heap block of exactly its size
 * (ASan sees a write past the layer table, UBSan an index past the weight table), its counts within the limits
 * and equal to w22_model_counts, every weight name whole and unique, its work countable. */
static void check_build(const w22_config *c, const char *what) {
    int nl = -1, nw = -1;
    w22_model_counts(c, &nl, &nw);
    CHECK(nl <= W22_MAX_LAYERS && nw <= W22_MAX_WEIGHTS, "%s: %d layers, %d weights, limits %d, %d", what, nl, nw,
          W22_MAX_LAYERS, W22_MAX_WEIGHTS);
    if (nl > W22_MAX_LAYERS || nw > W22_MAX_WEIGHTS) return; /* building would write past the tables */
    w22_model *m = malloc(sizeof *m);
    w22_model_build(c, m);
    CHECK(m->nlayers == nl && m->nweights == nw, "%s: built %d layers, %d weights; counted %d, %d", what,
          m->nlayers, m->nweights, nl, nw);
    CHECK(w22_weight_count(c) == nw, "%s: w22_weight_count %d, expected %d", what, w22_weight_count(c), nw);
    for (int i = 0; i < m->nweights; i++) {
        const w22_weight_desc *d = &m->weights[i];
        CHECK(d->numel > 0 && strlen(d->name) + 1 < sizeof d->name && w22_model_find(m, d->name) == i,
              "%s: weight %d '%s' (numel %lld)", what, i, d->name, (long long)d->numel);
    }
    double f = w22_decode_flops(c, 31, 44, 78);
    CHECK(f > 0 && f < 1e300, "%s: flops %g", what, f);
    /* twice the rows, at least twice the work: the pixel counts (h << 3 at 2^28 rows) must not wrap in int */
    double g1 = w22_decode_flops(c, 1, 1 << 27, 1), g2 = w22_decode_flops(c, 1, 1 << 28, 1);
    CHECK(g1 > 0 && g2 >= 2 * g1, "%s: flops %g at 2^27 rows, %g at 2^28", what, g1, g2);
    free(m);
}

/* Every num_res_blocks the config check accepts, at the largest dims and the smallest, builds without writing
 * past the model's tables (they held 128 weights: num_res_blocks 3 overflowed them); one more is refused. */
static void test_extreme_configs(void) {
    static const int mults[3][4] = {{16, 16, 16, 16}, {1, 2, 4, 8}, {1, 1, 1, 1}};
    char what[160];
    for (int r = 0; r <= W22_MAX_RES_BLOCKS + 1; r++)
        for (int k = 0; k < 3; k++)
            for (int tu = 0; tu < 4; tu++) { /* tu 2, 3: the Wan2.1 structure (is_residual 0) */
                w22_config c;
                w22_config_default(&c);
                c.is_residual = tu < 2;
                c.z_dim = k == 2 ? 1 : 4096;
                c.base_dim = k == 2 ? 1 : 4096;
                memcpy(c.dim_mult, mults[k], sizeof c.dim_mult);
                c.num_res_blocks = r;
                for (int b = 0; b < 3; b++) c.temporal_up[b] = tu & 1;
                c.patch_size = 1 + (tu & 1);
                c.out_channels = 3 * c.patch_size * c.patch_size;
                snprintf(what, sizeof what, "num_res_blocks %d, dims %d, temporal_up %d, is_residual %d", r, k, tu & 1,
                         c.is_residual);
                w22_status s = w22_config_check(&c);
                if (!c.is_residual && k == 2 && r <= W22_MAX_RES_BLOCKS) { /* 1 channel: no upsampler can halve it */
                    CHECK(s == W22_ERR_INVALID_ARG && strstr(w22_last_error(), "halves them, expected at least 2"),
                          "%s: %s", what, w22_last_error());
                    continue;
                }
                if (r > W22_MAX_RES_BLOCKS) {
                    CHECK(s == W22_ERR_INVALID_ARG && strstr(w22_last_error(), "num_res_blocks 9, expected 0..8"),
                          "%s: %s", what, w22_last_error());
                    continue;
                }
                CHECK(s == W22_OK, "%s: %s", what, w22_last_error());
                if (s == W22_OK) check_build(&c, what);
            }
}

/* Synthetic weights with more res blocks than Wan2.2's 2, saved and loaded back with the config from the file's
 * metadata (the path of `wan22vae info`, which crashed for num_res_blocks 3). */
static void test_more_res_blocks(void) {
    static const int rs[3] = {0, 3, W22_MAX_RES_BLOCKS};
    for (int k = 0; k < 3; k++) {
        w22_config c = cfg;
        c.num_res_blocks = rs[k];
        w22_weights *w = NULL, *r = NULL;
        CHECK_OK(w22_weights_synthetic(&c, 5, &w));
        if (!w) continue;
        char name[64];
        snprintf(name, sizeof name, "res%d.safetensors", rs[k]);
        const char *p = tmp_path(name);
        CHECK_OK(w22_weights_save(w, p, W22_DTYPE_BF16));
        CHECK_OK(w22_weights_load(p, NULL, &r));
        if (r) {
            CHECK(w22_config_equal(w22_weights_config(r), &c) && r->model.nweights == w->model.nweights,
                  "num_res_blocks %d: loaded %d of %d tensors", rs[k], r->model.nweights, w->model.nweights);
            w22_weights_free(r);
        }
        w22_weights_free(w);
    }
}

static int weight_index(const char *name) {
    for (int i = 0; i < nw; i++)
        if (strcmp(w22_weight_name(&cfg, i), name) == 0) return i;
    return -1;
}

/* NaN or Inf anywhere in the weights would decode to a NaN video: refused at load, naming the tensor and the
 * first bad element, from memory and from files in every dtype. */
static void test_nonfinite(void) {
    const char *tname = "decoder.up_blocks.0.resnets.1.conv2.weight";
    int ti = weight_index(tname);
    CHECK(ti >= 0 && numel[ti] > 9000, "tensor %s", tname);
    if (ti < 0 || numel[ti] <= 9000) return;
    const void *data[W22_MAX_WEIGHTS];
    for (int i = 0; i < nw; i++) data[i] = ref[i];
    float *bad = malloc((size_t)numel[ti] * sizeof(float));
    memcpy(bad, ref[ti], (size_t)numel[ti] * sizeof(float));
    bad[9000] = INFINITY;
    bad[5001] = NAN; /* the first: reported, past the first scan block */
    data[ti] = bad;
    w22_weights *w = (w22_weights *)1;
    w22_status s = w22_weights_from_memory(&cfg, data, W22_DTYPE_F32, &w);
    CHECK(s == W22_ERR_NONFINITE && w == NULL && strstr(w22_last_error(), tname) &&
              strstr(w22_last_error(), "NaN at index 5001 ["),
          "NaN from memory: %s: %s", w22_status_string(s), w22_last_error());
    free(bad);

    static const w22_dtype dts[3] = {W22_DTYPE_F32, W22_DTYPE_BF16, W22_DTYPE_F16};
    static const float vals[3] = {INFINITY, NAN, -INFINITY};
    static const char *words[3] = {"+Inf at index 7 [", "NaN at index 7 [", "-Inf at index 7 ["};
    const char *p = tmp_path("nonfinite.safetensors");
    for (int k = 0; k < 3; k++) {
        file_spec fs = plain();
        fs.dt = dts[k];
        fs.prefix = k == 1 ? "vae." : "";
        float keep = ref[ti][7];
        ref[ti][7] = vals[k];
        CHECK_OK(write_file(p, &fs));
        ref[ti][7] = keep;
        char full[128];
        snprintf(full, sizeof full, "'%s%s'", fs.prefix, tname);
        expect_fail(p, W22_ERR_NONFINITE, full, words[k], w22_dtype_name(dts[k]), "non-finite weight");
    }
    /* a finite float32 beyond float16's range is +Inf in an F16 file */
    file_spec fs = plain();
    fs.dt = W22_DTYPE_F16;
    int bi = weight_index("decoder.conv_out.bias");
    float keep = ref[bi][0];
    ref[bi][0] = 1e6f;
    CHECK_OK(write_file(p, &fs));
    ref[bi][0] = keep;
    expect_fail(p, W22_ERR_NONFINITE, "'decoder.conv_out.bias'", "+Inf at index 0 [0]", NULL, "f16 overflow");
}

/* A model big enough for the scan to be split over threads (8M elements): the first bad element wins whichever
 * part of the tensor holds it. */
static void test_nonfinite_threads(void) {
    w22_config c = cfg;
    c.z_dim = 16;
    c.base_dim = 32;
    w22_weights *syn = NULL, *w = NULL;
    CHECK_OK(w22_weights_synthetic(&c, 3, &syn));
    if (!syn) return;
    int ti = w22_model_find(&syn->model, "decoder.mid_block.resnets.1.conv1.weight");
    size_t n = ti >= 0 ? (size_t)syn->model.weights[ti].numel : 0;
    size_t total = 0;
    for (int i = 0; i < syn->model.nweights; i++) total += (size_t)syn->model.weights[i].numel;
    CHECK(n > 400000 && total >= (size_t)1 << 22, "tensor size %zu of %zu (finite.c splits from 4M)", n, total);
    const void *data[W22_MAX_WEIGHTS];
    for (int i = 0; i < syn->model.nweights; i++) data[i] = syn->data[i];
    float *bad = malloc(n * sizeof(float));
    memcpy(bad, syn->data[ti], n * sizeof(float));
    data[ti] = bad;
    CHECK_OK(w22_weights_from_memory(&c, data, W22_DTYPE_F32, &w));
    w22_weights_free(w);
    size_t late = n - 3, early = n / 5;
    char want[64];
    for (int k = 0; k < 2; k++) {
        bad[late] = -INFINITY;
        if (k) bad[early] = NAN;
        w = NULL;
        w22_status s = w22_weights_from_memory(&c, data, W22_DTYPE_F32, &w);
        snprintf(want, sizeof want, "%s at index %zu [", k ? "NaN" : "-Inf", k ? early : late);
        CHECK(s == W22_ERR_NONFINITE && w == NULL && strstr(w22_last_error(), want), "threaded scan: %s",
              w22_last_error());
    }
    free(bad);
    w22_weights_free(syn);
}

/* The config text in __metadata__ is parsed strictly: a number beyond int is refused, not wrapped (sscanf's %d
 * made 4294967304 into 8 and loaded the file as base_dim 8). */
static void test_config_text(void) {
    static const char *bad[] = {"4,4294967304,1,2,4,4,2,1,1,0,12,2", "4,8,1,2,4,4,2,1,1,0,12,99999999999999999999",
                                "4, 8,1,2,4,4,2,1,1,0,12,2", "4,8,1,2,4,4,2,1,1,0,12,2,", "4,8,1,2,4,4,2,1,1,0,12,-",
                                "4,8,1,2,4,4,2,1,1,0,12,2x"};
    const char *p = tmp_path("cfgtext.safetensors");
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        file_spec fs = plain();
        fs.meta_config = bad[k];
        CHECK_OK(write_file(p, &fs));
        w22_weights *w = NULL;
        w22_status s = w22_weights_load(p, NULL, &w);
        CHECK(s == W22_ERR_FORMAT && strstr(w22_last_error(), "wan22vae_config is '") && w == NULL,
              "config text '%s': %s: %s", bad[k], w22_status_string(s), w22_last_error());
        w22_weights_free(w);
    }
    file_spec fs = plain();
    fs.meta_config = "4,8,1,2,4,4,2,1,1,0,12,2";
    CHECK_OK(write_file(p, &fs));
    expect_load(p, NULL, W22_DTYPE_F32, "config text");
}

/* The in-memory entry point (the fuzzer's) gives what the file gives. */
static void test_parse_memory(void) {
    file_spec fs = plain();
    fs.dt = W22_DTYPE_BF16;
    const char *p = tmp_path("parse.safetensors");
    CHECK_OK(write_file(p, &fs));
    FILE *fp = fopen(p, "rb");
    CHECK(fp != NULL, "open %s", p);
    if (!fp) return;
    fseek(fp, 0, SEEK_END);
    long n = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    char *buf = malloc((size_t)n);
    CHECK(fread(buf, 1, (size_t)n, fp) == (size_t)n, "read %s", p);
    fclose(fp);
    w22_weights *w = NULL;
    CHECK_OK(w22_weights_parse(buf, (size_t)n, NULL, &w));
    if (w) {
        check_values(w, W22_DTYPE_BF16, "parsed from memory");
        w22_weights_free(w);
    }
    w22_status s = w22_weights_parse(buf, (size_t)n - 2, NULL, &w);
    CHECK(s == W22_ERR_FORMAT && w == NULL && strstr(w22_last_error(), "<memory>"), "truncated: %s",
          w22_last_error());
    free(buf);
}

/* w22_weights_from_device without a GPU (CI's machine): its argument checks, then a clean refusal of host memory
 * (no crash, no object); tests/cuda_ops and python/tests/test_gpu.py test it on a GPU. The host copy it makes for
 * a CPU decoder and for saving, w22_weights_to_host, tested on host weights (the same code but the copy). */
static void test_from_device_without_gpu(void) {
    const void *data[W22_MAX_WEIGHTS];
    for (int i = 0; i < nw; i++) data[i] = ref[i];
    w22_weights *w = (w22_weights *)1;
    CHECK(w22_weights_from_device(&cfg, data, W22_DTYPE_F32, 0, NULL) == W22_ERR_INVALID_ARG, "from_device: out NULL");
    CHECK(w22_weights_from_device(NULL, data, W22_DTYPE_F32, 0, &w) == W22_ERR_INVALID_ARG && !w, "from_device: cfg NULL");
    CHECK(w22_weights_from_device(&cfg, data, W22_DTYPE_F32, -1, &w) == W22_ERR_INVALID_ARG && !w &&
              strstr(w22_last_error(), "cuda_device -1"), "from_device: device -1: %s", w22_last_error());
    CHECK(w22_weights_from_device(&cfg, data, (w22_dtype)9, 0, &w) == W22_ERR_INVALID_ARG && !w, "from_device: dtype");
    w22_status s = w22_weights_from_device(&cfg, data, W22_DTYPE_F32, 0, &w);
    CHECK(s != W22_OK && !w, "from_device with host memory refused (%s: %s)", w22_status_string(s), w22_last_error());
    w22_weights *m = NULL, *h = NULL;
    CHECK_OK(w22_weights_from_memory(&cfg, data, W22_DTYPE_F32, &m));
    if (!m) return;
    CHECK_OK(w22_weights_to_host(m, &h));
    if (h) {
        check_values(h, W22_DTYPE_F32, "a host copy");
        w22_weights_free(h);
    }
    w22_weights_free(m);
}

static int open_fds(void) {
    int n = 0;
    DIR *d = opendir("/proc/self/fd");
    if (!d) return -1;
    for (struct dirent *e; (e = readdir(d));) n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

/* A copy of src at dst (the bytes; a fresh file). */
static void copy_file(const char *src, const char *dst) {
    FILE *i = fopen(src, "rb"), *o = fopen(dst, "wb");
    char buf[1 << 16];
    size_t n;
    while (i && o && (n = fread(buf, 1, sizeof buf, i)) > 0) fwrite(buf, 1, n, o);
    if (i) fclose(i);
    if (o) fclose(o);
}

static w22_status open_cpu(const w22_weights *w, w22_decoder **d) {
    w22_decoder_params p;
    w22_decoder_params_init(&p);
    p.device = W22_DEVICE_CPU;
    p.threads = 1;
    return w22_decoder_open(w, &p, d);
}

/* The weights stay mapped while they live and are read again by the decoder's open and by saving. A file changed
 * in place in between: shrunk, a read past its new end would kill the process (SIGBUS, before this check: the test
 * then dies); rewritten with the same size, the decoder would get weights nobody checked (a video of NaN with the
 * bytes below). Both must be W22_ERR_IO naming the file; a file replaced by a rename is the old file to the mapping,
 * so the open goes on; no descriptor outlives its weights. */
static void test_changed_in_place(void) {
    const void *data[W22_MAX_WEIGHTS];
    for (int i = 0; i < nw; i++) data[i] = ref[i];
    w22_weights *m = NULL, *w = NULL;
    w22_decoder *d = NULL;
    CHECK_OK(w22_weights_from_memory(&cfg, data, W22_DTYPE_F32, &m));
    const char *orig = tmp_path("cip.safetensors"), *p = tmp_path("cip-live.safetensors");
    const char *next = tmp_path("cip-next.safetensors"), *saved = tmp_path("cip-saved.safetensors");
    CHECK_OK(w22_weights_save(m, orig, W22_DTYPE_BF16));
    w22_weights_free(m);
    struct stat st;
    CHECK(stat(orig, &st) == 0 && st.st_size > 4096, "the saved file");
    const int fds0 = open_fds();

    /* shrunk in place (ftruncate, as `cp` over it or a crashed writer would) */
    copy_file(orig, p);
    CHECK_OK(w22_weights_load(p, &cfg, &w));
    CHECK(truncate(p, st.st_size / 3) == 0, "truncate");
    w22_status s = open_cpu(w, &d);
    CHECK(s == W22_ERR_IO && d == NULL && strstr(w22_last_error(), p) && strstr(w22_last_error(), "changed in place") &&
              strstr(w22_last_error(), "before the decoder's open"),
          "a shrunk file: %s: %s", w22_status_string(s), w22_last_error());
    s = w22_weights_save(w, saved, W22_DTYPE_F32);
    CHECK(s == W22_ERR_IO && access(saved, F_OK) != 0, "saving from a shrunk file: %s: %s", w22_status_string(s),
          w22_last_error());
    w22_weights_free(w);
    w = NULL;

    /* rewritten in place, the same size: half the data turned to 0xff (NaN in bf16), a later modification time */
    copy_file(orig, p);
    CHECK_OK(w22_weights_load(p, &cfg, &w));
    int fd = open(p, O_WRONLY);
    char *junk = malloc((size_t)st.st_size / 2);
    memset(junk, 0xff, (size_t)st.st_size / 2);
    CHECK(fd >= 0 && pwrite(fd, junk, (size_t)st.st_size / 2, st.st_size / 2) == st.st_size / 2, "rewrite");
    /* a modification time surely unlike the load's (the kernel's file clock moves in ticks of a few ms) */
    struct timespec later[2] = {{0, UTIME_OMIT}, {st.st_mtim.tv_sec + 5, 0}};
    CHECK(fd >= 0 && futimens(fd, later) == 0, "futimens");
    if (fd >= 0) close(fd);
    free(junk);
    s = open_cpu(w, &d);
    CHECK(s == W22_ERR_IO && d == NULL && strstr(w22_last_error(), "modified since"), "a rewritten file: %s: %s",
          w22_status_string(s), w22_last_error());
    w22_weights_free(w);
    w = NULL;

    /* replaced by a rename: the mapping keeps the old file, which is unchanged; the open and a save go on */
    copy_file(orig, p);
    CHECK_OK(w22_weights_load(p, &cfg, &w));
    copy_file(orig, next);
    CHECK(rename(next, p) == 0, "rename");
    CHECK(truncate(p, 100) == 0, "truncate the new file"); /* not the mapped one */
    s = open_cpu(w, &d);
    CHECK(s == W22_OK && d, "a file replaced by a rename: %s: %s", w22_status_string(s), w22_last_error());
    w22_decoder_free(d);
    d = NULL;
    unlink(saved);
    CHECK_OK(w22_weights_save(w, saved, W22_DTYPE_BF16));
    w22_weights_free(w);
    w = NULL;
    if (w22_weights_load(saved, &cfg, &w) == W22_OK) check_values(w, W22_DTYPE_BF16, "saved after a rename");
    w22_weights_free(w);
    w = NULL;

    /* every load and free above closed what it opened */
    const int fds1 = open_fds();
    CHECK(fds0 >= 0 && fds1 == fds0, "open descriptors: %d before the loads, %d after", fds0, fds1);
    unlink(p);
    unlink(saved);
    unlink(orig);
}

/* w22_decoder_params out of range: W22_ERR_INVALID_ARG naming the field and its range, no decoder. */
static void test_open_params(void) {
    w22_weights *w = NULL;
    CHECK_OK(w22_weights_synthetic(&cfg, 3, &w));
    static const struct { int fpp, exact, device, threads, kernels; const char *words; } bad[] = {
        {1025, 0, W22_DEVICE_CPU, 1, 0, "frames_per_pass 1025"}, {-1, 0, W22_DEVICE_CPU, 1, 0, "frames_per_pass -1"},
        {0, 2, W22_DEVICE_CPU, 1, 0, "exact 2"},                 {0, 0, 7, 1, 0, "device 7"},
        {0, 0, W22_DEVICE_CPU, -1, 0, "threads -1, expected 0 (all cores) or 1..4096"},
        {0, 0, W22_DEVICE_CPU, 4097, 0, "threads 4097"},
        {0, 0, W22_DEVICE_CPU, 1, 2, "kernels 2, expected W22_KERNELS_AUTO (0) or W22_KERNELS_PORTABLE (1)"},
        {0, 0, W22_DEVICE_CUDA, 1, -1, "kernels -1"},
    };
    for (size_t i = 0; w && i < sizeof bad / sizeof bad[0]; i++) {
        w22_decoder_params p;
        w22_decoder_params_init(&p);
        p.frames_per_pass = bad[i].fpp, p.exact = bad[i].exact, p.device = bad[i].device, p.threads = bad[i].threads;
        p.kernels = bad[i].kernels;
        w22_decoder *d = NULL;
        w22_status s = w22_decoder_open(w, &p, &d);
        CHECK(s == W22_ERR_INVALID_ARG && !d && strstr(w22_last_error(), bad[i].words), "%s: %s: %s", bad[i].words,
              w22_status_string(s), w22_last_error());
        w22_decoder_free(d);
    }
    /* bands (a band decode): 0..64 open, the rest fail naming the field and its range */
    static const int bad_bands[] = {-1, 65, -2147483647 - 1};
    for (size_t i = 0; w && i < sizeof bad_bands / sizeof bad_bands[0]; i++) {
        w22_decoder_params p;
        w22_decoder_params_init(&p);
        p.bands = bad_bands[i], p.threads = 1;
        w22_decoder *d = NULL;
        w22_status s = w22_decoder_open(w, &p, &d);
        CHECK(s == W22_ERR_INVALID_ARG && !d && strstr(w22_last_error(), "bands ") &&
                  strstr(w22_last_error(), "expected 0 or 1 (the whole frame) or 2..64"),
              "bands %d: %s: %s", bad_bands[i], w22_status_string(s), w22_last_error());
        w22_decoder_free(d);
    }
    for (int bands = 0; w && bands <= 64; bands += 32) { /* 0, 32, 64 */
        w22_decoder_params p;
        w22_decoder_params_init(&p);
        CHECK(p.bands == 0, "w22_decoder_params_init: bands %d, expected 0 (the whole frame)", p.bands);
        p.bands = bands, p.threads = 1;
        w22_decoder *d = NULL;
        CHECK(w22_decoder_open(w, &p, &d) == W22_OK && d, "bands %d: %s", bands, w22_last_error());
        w22_decoder_free(d);
    }
    /* kernels is CUDA's: a CPU decoder takes W22_KERNELS_PORTABLE and runs the CPU backend, and says so */
    {
        w22_decoder_params p;
        w22_decoder_params_init(&p);
        p.kernels = W22_KERNELS_PORTABLE, p.threads = 1;
        w22_decoder *d = NULL;
        CHECK_OK(w && w22_decoder_open(w, &p, &d) == W22_OK ? W22_OK : W22_ERR_INTERNAL);
        CHECK(d && !strcmp(w22_decoder_path(d), "cpu"), "a CPU decoder's path: %s", d ? w22_decoder_path(d) : "-");
        CHECK(!strcmp(w22_decoder_path(NULL), "none"), "w22_decoder_path(NULL): %s", w22_decoder_path(NULL));
        w22_decoder_free(d);
    }
    /* the void and value-returning calls take NULL too (w22_video_shape read through it) */
    int F = -1, H = -1, W = -1;
    w22_video_shape(NULL, 2, 3, 4, &F, &H, &W);
    CHECK(F == 0 && H == 0 && W == 0, "w22_video_shape(NULL): %d %d %d", F, H, W);
    w22_video_shape(&cfg, 2, 3, 4, &F, &H, &W);
    CHECK(F == 5 && H == 48 && W == 64, "w22_video_shape: %d %d %d", F, H, W);
    w22_video_shape(&cfg, 2, 3, 4, NULL, NULL, NULL);
    CHECK(w22_decode_flops(NULL, 2, 3, 4) == 0 && w22_weight_count(NULL) == 0 && !w22_weight_name(NULL, 0) &&
              w22_config_check(NULL) == W22_ERR_INVALID_ARG, "NULL configs");
    CHECK(w22_dtype_size(W22_DTYPE_F32) == 4 && w22_dtype_size(W22_DTYPE_BF16) == 2 &&
              w22_dtype_size(W22_DTYPE_F16) == 2 && w22_dtype_size((w22_dtype)9) == 0 &&
              !strcmp(w22_dtype_name((w22_dtype)9), "?"), "dtype size and name of an unknown dtype");
    /* each bad argument named as itself (a NULL array was reported as "world 2, expected 1..64") */
    CHECK(w22_comm_local_group(2, NULL) == W22_ERR_INVALID_ARG && strstr(w22_last_error(), "comms is NULL"), "%s",
          w22_last_error());
    CHECK(w22_comm_nccl(NULL, 0, 1, 0, NULL) != W22_OK && !strstr(w22_last_error(), "expected 0 <= rank"), "%s",
          w22_last_error());
    w22_decoder *d = NULL;
    CHECK(w && open_cpu(w, &d) == W22_OK && d, "threads 1: %s", w22_last_error());
    w22_decoder_free(d);
    w22_weights_free(w);
}

/* A copy of the safetensors file src without its __metadata__, renaming tensor `from` to `to` when given (NULL: none):
 * the config must then come from the tensors. */
static void strip_copy(const char *src, const char *dst, const char *from, const char *to) {
    w22_st_file f;
    CHECK_OK(w22_st_open(src, &f));
    w22_st_write_tensor *t = calloc((size_t)f.ntensors, sizeof *t);
    for (int i = 0; i < f.ntensors; i++) {
        const w22_st_tensor *x = &f.tensors[i];
        t[i] = (w22_st_write_tensor){x->name, x->dtype, x->ndim, x->shape, x->data};
        if (from && !strcmp(x->name, from)) t[i].name = to;
    }
    CHECK_OK(w22_st_write(dst, t, f.ntensors, NULL, 0, 1));
    free(t);
    w22_st_close(&f);
}

/* Issue 44: files of the Wan2.1 VAE (is_residual 0) are recognised from their tensors (no metadata) and from their
 * metadata, and a file of one VAE loaded with the other's config is refused naming both. */
static void test_wan21_files(void) {
    w22_config c21;
    w22_config_wan21(&c21);
    c21.z_dim = 4;
    c21.base_dim = 8;
    CHECK(w22_weight_count(&c21) == 108, "Wan2.1 weight count %d, expected 108", w22_weight_count(&c21));
    w22_weights *w = NULL, *r = NULL;
    CHECK_OK(w22_weights_synthetic(&c21, 5, &w));
    if (!w) return;
    const char *p = tmp_path("wan21.safetensors"), *q = tmp_path("wan21_bare.safetensors");
    CHECK_OK(w22_weights_save(w, p, W22_DTYPE_F32));
    strip_copy(p, q, NULL, NULL);
    const char *files[2] = {p, q};
    for (int k = 0; k < 2; k++) {
        r = NULL;
        CHECK_OK(w22_weights_load(files[k], NULL, &r));
        if (r) CHECK(w22_config_equal(w22_weights_config(r), &c21), "%s: the Wan2.1 config %s", files[k],
                     k ? "from the tensors" : "from the metadata");
        w22_weights_free(r);
    }
    /* the other VAE's config: refused, saying which VAE the file holds and which the config is */
    r = (w22_weights *)1;
    w22_status s = w22_weights_load(q, &cfg, &r);
    CHECK(s == W22_ERR_FORMAT && r == NULL && strstr(w22_last_error(), "holds the Wan2.1 VAE's decoder") &&
          strstr(w22_last_error(), "Wan2.2 TI2V-5B"), "a Wan2.1 file with TI2V-5B's config: %s: %s",
          w22_status_string(s), w22_last_error());
    s = w22_weights_load(tmp_path("plain.safetensors"), &c21, &r);
    CHECK(s == W22_ERR_FORMAT && strstr(w22_last_error(), "holds Wan2.2 TI2V-5B's decoder") &&
          strstr(w22_last_error(), "Wan2.1"), "a TI2V-5B file with Wan2.1's config: %s: %s", w22_status_string(s),
          w22_last_error());
    /* a missing tensor of the Wan2.1 table names it and the model */
    strip_copy(p, q, "decoder.up_blocks.1.resnets.0.conv_shortcut.weight", "decoder.unrelated");
    s = w22_weights_load(q, NULL, &r);
    CHECK(s == W22_ERR_MISSING_TENSOR && strstr(w22_last_error(), "conv_shortcut.weight") &&
          strstr(w22_last_error(), "Wan2.1"), "a Wan2.1 file without a shortcut: %s: %s", w22_status_string(s),
          w22_last_error());
    w22_weights_free(w);
    printf("  Wan2.1 files: recognised from tensors and metadata; mismatches named\n");
}

int main(void) {
    make_reference();
    test_from_device_without_gpu();
    test_memory_and_save();
    test_layouts();
    test_rejections();
    test_extreme_configs();
    test_more_res_blocks();
    test_nonfinite();
    test_nonfinite_threads();
    test_config_text();
    test_parse_memory();
    test_changed_in_place();
    test_open_params();
    test_wan21_files();
    for (int i = 0; i < nw; i++) free(ref[i]);
    return t_finish("test_weights");
}
