/* The decoder's description built from its config: the weight table in diffusers' named_parameters() order and
 * the layer list in execution order. Mirrors diffusers' WanDecoder3d and AutoencoderKLWan, both structures:
 * is_residual=True (Wan2.2 TI2V-5B: WanResidualUpBlock, its DupUp3D avg_shortcut, upsamplers that keep the
 * channels) and is_residual=False (the Wan2.1 VAE: WanUpBlock, no shortcut around the block, upsamplers.0 whose
 * conv halves the channels, so each later block starts at half the previous block's width). */
#include <stdio.h>
#include <string.h>
#include "model/model.h"
#include "common.h"

void w22_config_default(w22_config *c) {
    memset(c, 0, sizeof *c);
    c->z_dim = 48;
    c->base_dim = 256;
    c->dim_mult[0] = 1; c->dim_mult[1] = 2; c->dim_mult[2] = 4; c->dim_mult[3] = 4;
    c->num_res_blocks = 2;
    c->temporal_up[0] = 1; c->temporal_up[1] = 1; c->temporal_up[2] = 0;
    c->out_channels = 12;
    c->patch_size = 2;
    c->is_residual = 1;
}

void w22_config_wan21(w22_config *c) {
    memset(c, 0, sizeof *c);
    c->z_dim = 16;
    c->base_dim = 96;
    c->dim_mult[0] = 1; c->dim_mult[1] = 2; c->dim_mult[2] = 4; c->dim_mult[3] = 4;
    c->num_res_blocks = 2;
    c->temporal_up[0] = 1; c->temporal_up[1] = 1; c->temporal_up[2] = 0;
    c->out_channels = 3;
    c->patch_size = 1;
    c->is_residual = 0;
}

const char *w22_model_name(const w22_config *c) { return c->is_residual ? "Wan2.2 TI2V-5B" : "Wan2.1"; }

int w22_model_feature_channels_off(const w22_model *m, int mult, const char **where) {
    for (int i = 0; i < m->nlayers; i++) {
        const w22_layer *L = &m->layers[i];
        int c = 0; /* a norm's input (the resblock's norm2 runs on cout), or the DupUp's output */
        if (L->kind == W22_L_RESBLOCK) c = L->cin % mult ? L->cin : L->cout % mult ? L->cout : 0;
        else if (L->kind == W22_L_ATTN || L->kind == W22_L_HEAD) c = L->cin % mult ? L->cin : 0;
        else if (L->kind == W22_L_DUPUP) c = L->cout % mult ? L->cout : 0;
        if (c) {
            *where = L->prefix;
            return c;
        }
    }
    *where = "";
    return 0;
}

int w22_config_equal(const w22_config *a, const w22_config *b) {
    if (a->z_dim != b->z_dim || a->base_dim != b->base_dim || a->num_res_blocks != b->num_res_blocks ||
        a->out_channels != b->out_channels || a->patch_size != b->patch_size || a->is_residual != b->is_residual)
        return 0;
    for (int i = 0; i < 4; i++) if (a->dim_mult[i] != b->dim_mult[i]) return 0;
    for (int i = 0; i < 3; i++) if (a->temporal_up[i] != b->temporal_up[i]) return 0;
    return 1;
}

/* diffusers: dims = [dim * u for u in [dim_mult[-1]] + dim_mult[::-1]]: conv_in/mid, then after each up block. */
static void config_dims(const w22_config *c, int dims[5]) {
    dims[0] = c->base_dim * c->dim_mult[3];
    for (int i = 0; i < 4; i++) dims[i + 1] = c->base_dim * c->dim_mult[3 - i];
}

/* The channels of up block b's input: the previous block's upsampler output (diffusers: in_dim // 2 for i > 0 when
 * not is_residual). */
static int block_in(const w22_config *c, const int dims[5], int b) {
    return b > 0 && !c->is_residual ? dims[b] / 2 : dims[b];
}

/* cfg must be within w22_config_check's bounds (the counts are then far from int's range). */
void w22_model_counts(const w22_config *c, int *nlayers, int *nweights) {
    int dims[5], r = c->num_res_blocks;
    config_dims(c, dims);
    int w = 4 + 5 + 12 + 4 * (r + 1) * 6 + 3;
    for (int b = 0; b < 4; b++)
        if (block_in(c, dims, b) != dims[b + 1]) w += 2; /* the block's first resnet has a conv_shortcut */
    for (int b = 0; b < 3; b++) w += c->temporal_up[b] ? 4 : 2;
    *nlayers = W22_LAYERS_FOR(r) - (c->is_residual ? 0 : 6); /* Wan2.1: no block begin, no DupUp */
    *nweights = w;
}

w22_status w22_config_check(const w22_config *c) {
    if (!c) return w22_fail(W22_ERR_INVALID_ARG, "config: NULL");
    if (c->z_dim < 1 || c->z_dim > 4096)
        return w22_fail(W22_ERR_INVALID_ARG, "config: z_dim %d, expected 1..4096", c->z_dim);
    if (c->base_dim < 1 || c->base_dim > 4096)
        return w22_fail(W22_ERR_INVALID_ARG, "config: base_dim %d, expected 1..4096", c->base_dim);
    for (int i = 0; i < 4; i++)
        if (c->dim_mult[i] < 1 || c->dim_mult[i] > 16)
            return w22_fail(W22_ERR_INVALID_ARG, "config: dim_mult[%d] = %d, expected 1..16", i, c->dim_mult[i]);
    if (c->num_res_blocks < 0 || c->num_res_blocks > W22_MAX_RES_BLOCKS)
        return w22_fail(W22_ERR_INVALID_ARG, "config: num_res_blocks %d, expected 0..%d", c->num_res_blocks,
                        W22_MAX_RES_BLOCKS);
    for (int i = 0; i < 3; i++)
        if (c->temporal_up[i] != 0 && c->temporal_up[i] != 1)
            return w22_fail(W22_ERR_INVALID_ARG, "config: temporal_up[%d] = %d, expected 0 or 1", i,
                            c->temporal_up[i]);
    if (c->is_residual != 0 && c->is_residual != 1)
        return w22_fail(W22_ERR_INVALID_ARG, "config: is_residual %d, expected 1 (Wan2.2 TI2V-5B) or 0 (Wan2.1)",
                        c->is_residual);
    if (c->patch_size != 1 && c->patch_size != 2)
        return w22_fail(W22_ERR_INVALID_ARG, "config: patch_size %d, expected 1 or 2", c->patch_size);
    if (c->out_channels != 3 * c->patch_size * c->patch_size)
        return w22_fail(W22_ERR_INVALID_ARG, "config: out_channels %d, expected 3 x patch_size^2 = %d",
                        c->out_channels, 3 * c->patch_size * c->patch_size);
    /* DupUp3D needs out * ft * 4 to be a multiple of in for every up block with an upsampler; Wan2.1's upsample
     * convs halve the channels, which must leave one. */
    int dims[5];
    config_dims(c, dims);
    for (int i = 0; i < 3 && !c->is_residual; i++)
        if (dims[i + 1] < 2)
            return w22_fail(W22_ERR_INVALID_ARG, "config: up block %d has %d channels; its upsampler halves them, "
                            "expected at least 2", i, dims[i + 1]);
    for (int i = 0; i < 3 && c->is_residual; i++) {
        int ft = c->temporal_up[i] ? 2 : 1;
        if ((dims[i + 1] * ft * 4) % dims[i] != 0)
            return w22_fail(W22_ERR_INVALID_ARG,
                            "config: up block %d: DupUp needs out (%d) x %d a multiple of in (%d)", i, dims[i + 1],
                            ft * 4, dims[i]);
    }
    /* w22_model_build writes into fixed tables: what passes here must fit them (model.h sizes them so). */
    int nl, nw;
    w22_model_counts(c, &nl, &nw);
    if (nl > W22_MAX_LAYERS || nw > W22_MAX_WEIGHTS)
        return w22_fail(W22_ERR_INVALID_ARG, "config: num_res_blocks %d makes %d layers and %d weights, expected "
                        "at most W22_MAX_LAYERS %d and W22_MAX_WEIGHTS %d", c->num_res_blocks, nl, nw,
                        W22_MAX_LAYERS, W22_MAX_WEIGHTS);
    return W22_OK;
}

static int add_weight(w22_model *m, const char *name, int ndim, int64_t s0, int64_t s1, int64_t s2, int64_t s3,
                      int64_t s4) {
    w22_weight_desc *d = &m->weights[m->nweights];
    memset(d, 0, sizeof *d);
    snprintf(d->name, sizeof d->name, "%s", name);
    int64_t s[5] = {s0, s1, s2, s3, s4};
    d->ndim = ndim;
    d->numel = 1;
    for (int i = 0; i < ndim; i++) {
        d->shape[i] = s[i];
        d->numel *= s[i];
    }
    return m->nweights++;
}

/* A conv's weight and bias; returns the weight's index (bias = index + 1). fan_in set on both. */
static int add_conv(w22_model *m, const char *prefix, int cout, int cin, int kt, int ks, int is2d) {
    char name[W22_NAME_MAX];
    snprintf(name, sizeof name, "%s.weight", prefix);
    int wi = is2d ? add_weight(m, name, 4, cout, cin, ks, ks, 0) : add_weight(m, name, 5, cout, cin, kt, ks, ks);
    snprintf(name, sizeof name, "%s.bias", prefix);
    int bi = add_weight(m, name, 1, cout, 0, 0, 0, 0);
    int fan = cin * kt * ks * ks;
    m->weights[wi].fan_in = fan;
    m->weights[bi].fan_in = fan;
    return wi;
}

static int add_gamma(w22_model *m, const char *prefix, int c, int images) {
    char name[W22_NAME_MAX];
    snprintf(name, sizeof name, "%s.gamma", prefix);
    int i = images ? add_weight(m, name, 3, c, 1, 1, 0, 0) : add_weight(m, name, 4, c, 1, 1, 1, 0);
    m->weights[i].is_gamma = 1;
    return i;
}

static w22_layer *new_layer(w22_model *m, w22_layer_kind kind, int cin, int cout, int level, int tscale,
                            const char *prefix) {
    w22_layer *l = &m->layers[m->nlayers++];
    memset(l, 0, sizeof *l);
    l->kind = kind;
    l->cin = cin;
    l->cout = cout;
    l->level = level;
    l->tscale = tscale;
    l->block = -1;
    for (int i = 0; i < W22_WS_COUNT; i++) l->w[i] = -1;
    snprintf(l->prefix, sizeof l->prefix, "%s", prefix);
    return l;
}

static void add_resblock(w22_model *m, const char *prefix, int cin, int cout, int level, int tscale, int block) {
    char p[W22_NAME_MAX];
    w22_layer *l = new_layer(m, W22_L_RESBLOCK, cin, cout, level, tscale, prefix);
    l->block = block;
    snprintf(p, sizeof p, "%s.norm1", prefix);
    l->w[W22_WS_NORM1] = add_gamma(m, p, cin, 0);
    snprintf(p, sizeof p, "%s.conv1", prefix);
    l->w[W22_WS_CONV1_W] = add_conv(m, p, cout, cin, 3, 3, 0);
    l->w[W22_WS_CONV1_B] = l->w[W22_WS_CONV1_W] + 1;
    snprintf(p, sizeof p, "%s.norm2", prefix);
    l->w[W22_WS_NORM2] = add_gamma(m, p, cout, 0);
    snprintf(p, sizeof p, "%s.conv2", prefix);
    l->w[W22_WS_CONV2_W] = add_conv(m, p, cout, cout, 3, 3, 0);
    l->w[W22_WS_CONV2_B] = l->w[W22_WS_CONV2_W] + 1;
    if (cin != cout) {
        snprintf(p, sizeof p, "%s.conv_shortcut", prefix);
        l->w[W22_WS_SC_W] = add_conv(m, p, cout, cin, 1, 1, 0);
        l->w[W22_WS_SC_B] = l->w[W22_WS_SC_W] + 1;
    }
}

void w22_model_build(const w22_config *cfg, w22_model *m) {
    memset(m, 0, sizeof *m);
    m->cfg = *cfg;
    config_dims(cfg, m->dims);
    const int z = cfg->z_dim, c0 = m->dims[0];
    char p[W22_NAME_MAX];

    w22_layer *l = new_layer(m, W22_L_POST_QUANT, z, z, 0, 1, "post_quant_conv");
    l->w[W22_WS_CONV1_W] = add_conv(m, "post_quant_conv", z, z, 1, 1, 0);
    l->w[W22_WS_CONV1_B] = l->w[W22_WS_CONV1_W] + 1;

    l = new_layer(m, W22_L_CONV_IN, z, c0, 0, 1, "decoder.conv_in");
    l->w[W22_WS_CONV1_W] = add_conv(m, "decoder.conv_in", c0, z, 3, 3, 0);
    l->w[W22_WS_CONV1_B] = l->w[W22_WS_CONV1_W] + 1;

    /* mid block: diffusers registers attentions before resnets, so their weights come first. */
    l = NULL;
    {
        const char *ap = "decoder.mid_block.attentions.0";
        snprintf(p, sizeof p, "%s.norm", ap);
        int norm = add_gamma(m, p, c0, 1);
        snprintf(p, sizeof p, "%s.to_qkv", ap);
        int qkv = add_conv(m, p, 3 * c0, c0, 1, 1, 1);
        snprintf(p, sizeof p, "%s.proj", ap);
        int proj = add_conv(m, p, c0, c0, 1, 1, 1);
        add_resblock(m, "decoder.mid_block.resnets.0", c0, c0, 0, 1, -1);
        w22_layer *a = new_layer(m, W22_L_ATTN, c0, c0, 0, 1, ap);
        a->w[W22_WS_NORM1] = norm;
        a->w[W22_WS_CONV1_W] = qkv;
        a->w[W22_WS_CONV1_B] = qkv + 1;
        a->w[W22_WS_CONV2_W] = proj;
        a->w[W22_WS_CONV2_B] = proj + 1;
        add_resblock(m, "decoder.mid_block.resnets.1", c0, c0, 0, 1, -1);
    }

    int level = 0, tscale = 1;
    const int res = cfg->is_residual;
    m->stage_cin[0] = z;
    for (int b = 0; b < 4; b++) {
        int cin = block_in(cfg, m->dims, b), cout = m->dims[b + 1];
        int up = b != 3, temporal = up && cfg->temporal_up[b];
        if (up && res) {
            snprintf(p, sizeof p, "decoder.up_blocks.%d", b);
            w22_layer *bb = new_layer(m, W22_L_BLOCK_BEGIN, cin, cin, level, tscale, p);
            bb->block = b;
            bb->temporal = temporal;
        }
        int c = cin;
        for (int r = 0; r < cfg->num_res_blocks + 1; r++) {
            snprintf(p, sizeof p, "decoder.up_blocks.%d.resnets.%d", b, r);
            add_resblock(m, p, c, cout, level, tscale, b);
            c = cout;
        }
        if (up) {
            /* TI2V-5B: "upsampler", its conv cout -> cout; Wan2.1: "upsamplers.0", its conv cout -> cout / 2 */
            const char *up_name = res ? "upsampler" : "upsamplers.0";
            const int uout = res ? cout : cout / 2;
            snprintf(p, sizeof p, "decoder.up_blocks.%d.%s", b, up_name);
            w22_layer *u = new_layer(m, W22_L_UPSAMPLE, cout, uout, level, tscale, p);
            u->block = b;
            u->temporal = temporal;
            u->stage_end = !res;
            m->stage_cin[b + 1] = uout;
            snprintf(p, sizeof p, "decoder.up_blocks.%d.%s.resample.1", b, up_name);
            u->w[W22_WS_CONV1_W] = add_conv(m, p, uout, cout, 1, 3, 1);
            u->w[W22_WS_CONV1_B] = u->w[W22_WS_CONV1_W] + 1;
            if (temporal) {
                snprintf(p, sizeof p, "decoder.up_blocks.%d.%s.time_conv", b, up_name);
                /* time_conv is (3,1,1): shape [2C, C, 3, 1, 1] */
                char name[W22_NAME_MAX];
                snprintf(name, sizeof name, "%s.weight", p);
                int wi = add_weight(m, name, 5, 2 * cout, cout, 3, 1, 1);
                snprintf(name, sizeof name, "%s.bias", p);
                add_weight(m, name, 1, 2 * cout, 0, 0, 0, 0);
                m->weights[wi].fan_in = m->weights[wi + 1].fan_in = cout * 3;
                u->w[W22_WS_CONV2_W] = wi;
                u->w[W22_WS_CONV2_B] = wi + 1;
            }
            level++;
            if (temporal) tscale *= 2;
            if (res) {
                snprintf(p, sizeof p, "decoder.up_blocks.%d.avg_shortcut", b);
                w22_layer *d = new_layer(m, W22_L_DUPUP, cin, cout, level, tscale, p);
                d->block = b;
                d->temporal = temporal;
                d->stage_end = 1;
            }
        }
    }
    int cl = m->dims[4];
    l = new_layer(m, W22_L_HEAD, cl, cfg->out_channels, level, tscale, "decoder.norm_out");
    l->w[W22_WS_NORM1] = add_gamma(m, "decoder.norm_out", cl, 0);
    l->w[W22_WS_CONV1_W] = add_conv(m, "decoder.conv_out", cfg->out_channels, cl, 3, 3, 0);
    l->w[W22_WS_CONV1_B] = l->w[W22_WS_CONV1_W] + 1;
    l->stage_end = 1;
}

int w22_model_find(const w22_model *m, const char *name) {
    for (int i = 0; i < m->nweights; i++)
        if (strcmp(m->weights[i].name, name) == 0) return i;
    return -1;
}

void w22_model_stage_frames(const w22_model *m, int T, int frames[4]) {
    int f = T;
    frames[0] = f;
    for (int b = 0; b < 3; b++) {
        if (m->cfg.temporal_up[b]) f = 2 * f - 1;
        frames[b + 1] = f;
    }
}

void w22_video_shape(const w22_config *cfg, int T, int h, int w, int *frames, int *height, int *width) {
    if (!cfg) { /* as w22_decode_flops: no config, no video (a void call cannot fail otherwise) */
        if (frames) *frames = 0;
        if (height) *height = 0;
        if (width) *width = 0;
        return;
    }
    int f = T;
    for (int b = 0; b < 3; b++)
        if (cfg->temporal_up[b]) f = 2 * f - 1;
    if (frames) *frames = f;
    if (height) *height = h * 8 * cfg->patch_size; /* 3 upsamplers (8x), then the unpatchify */
    if (width) *width = w * 8 * cfg->patch_size;
}

/* ---- public weight-table accessors ---- */
static _Thread_local w22_model table_model;
static _Thread_local int table_valid;

static const w22_model *table_for(const w22_config *cfg) {
    if (!table_valid || !w22_config_equal(&table_model.cfg, cfg)) {
        w22_model_build(cfg, &table_model);
        table_valid = 1;
    }
    return &table_model;
}

int w22_weight_count(const w22_config *cfg) {
    if (w22_config_check(cfg) != W22_OK) return 0;
    return table_for(cfg)->nweights;
}

const char *w22_weight_name(const w22_config *cfg, int i) {
    if (w22_config_check(cfg) != W22_OK) return NULL;
    const w22_model *m = table_for(cfg);
    return i >= 0 && i < m->nweights ? m->weights[i].name : NULL;
}

int w22_weight_shape(const w22_config *cfg, int i, int64_t shape[5]) {
    if (w22_config_check(cfg) != W22_OK) return 0;
    const w22_model *m = table_for(cfg);
    if (i < 0 || i >= m->nweights) return 0;
    for (int k = 0; k < 5; k++) shape[k] = m->weights[i].shape[k];
    return m->weights[i].ndim;
}
