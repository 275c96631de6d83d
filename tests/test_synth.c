/* Pins the synthetic generator (docs/synthetic.md) to values printed by tools/synth.py --pin: single elements of
 * weights (conv weights, biases, gammas; first, middle and last) and latents, and order-sensitive checksums of
 * whole models and latents, so that the C and numpy generators stay bit for bit the same. tools/test_synth.py
 * recomputes this file's constants from the Python side. Also checks the weights object and the error paths. */
#include <stdlib.h>
#include <string.h>
#include "testutil.h"
#include "common.h"
#include "weights/weights.h"

typedef struct {
    const char *config;
    uint64_t seed;
    const char *what;   /* a tensor name, or "latents TxHxW" */
    int64_t index;      /* flat index */
    uint32_t bits;      /* the float32's bits */
} pin_value;

typedef struct {
    const char *config;
    uint64_t seed;
    const char *what;   /* "weights": sum over tensors t of (t + 1) x the tensor's checksum; or latents */
    uint64_t sum;       /* sum of (i + 1) x bits(x[i]) mod 2^64 */
} pin_sum;

/* BEGIN PINS (tools/synth.py --pin) */
static const pin_value pins[] = {
    {"narrow", 0, "post_quant_conv.weight", 0, 0xbe82cd1au}, /* -0.255471051 */
    {"narrow", 0, "post_quant_conv.weight", 32, 0xbe944606u}, /* -0.289596736 */
    {"narrow", 0, "post_quant_conv.weight", 63, 0x3e7a6615u}, /* 0.244530037 */
    {"narrow", 0, "post_quant_conv.bias", 0, 0xbcb723bcu}, /* -0.0223559067 */
    {"narrow", 0, "post_quant_conv.bias", 4, 0xbc33be7fu}, /* -0.0109707108 */
    {"narrow", 0, "post_quant_conv.bias", 7, 0x3bdd0408u}, /* 0.00674486533 */
    {"narrow", 0, "decoder.conv_in.weight", 0, 0xbd7d8282u}, /* -0.0618920401 */
    {"narrow", 0, "decoder.conv_in.weight", 6912, 0x3cd94531u}, /* 0.0265222508 */
    {"narrow", 0, "decoder.conv_in.weight", 13823, 0xbd4bb609u}, /* -0.0497341491 */
    {"narrow", 0, "decoder.mid_block.attentions.0.norm.gamma", 0, 0x3f8804b5u}, /* 1.06264365 */
    {"narrow", 0, "decoder.mid_block.attentions.0.norm.gamma", 32, 0x3f8998b0u}, /* 1.07497215 */
    {"narrow", 0, "decoder.mid_block.attentions.0.norm.gamma", 63, 0x3f84fad4u}, /* 1.03890467 */
    {"narrow", 0, "decoder.mid_block.attentions.0.to_qkv.bias", 0, 0xbb9701d0u}, /* -0.00460837036 */
    {"narrow", 0, "decoder.mid_block.attentions.0.to_qkv.bias", 96, 0x3babac80u}, /* 0.00523906946 */
    {"narrow", 0, "decoder.mid_block.attentions.0.to_qkv.bias", 191, 0xbac4be33u}, /* -0.00150102971 */
    {"narrow", 0, "decoder.up_blocks.0.upsampler.time_conv.weight", 0, 0xbd0329d6u}, /* -0.0320223197 */
    {"narrow", 0, "decoder.up_blocks.0.upsampler.time_conv.weight", 12288, 0x3c805b2bu}, /* 0.0156684723 */
    {"narrow", 0, "decoder.up_blocks.0.upsampler.time_conv.weight", 24575, 0x3d05c97cu}, /* 0.0326628536 */
    {"narrow", 0, "decoder.up_blocks.2.resnets.0.conv_shortcut.weight", 0, 0xbc98dc58u}, /* -0.0186597556 */
    {"narrow", 0, "decoder.up_blocks.2.resnets.0.conv_shortcut.weight", 1024, 0x3d9505aau}, /* 0.0727647096 */
    {"narrow", 0, "decoder.up_blocks.2.resnets.0.conv_shortcut.weight", 2047, 0x3d61af3cu}, /* 0.0550987571 */
    {"narrow", 0, "decoder.up_blocks.3.resnets.2.norm2.gamma", 0, 0x3f6ab23eu}, /* 0.91678226 */
    {"narrow", 0, "decoder.up_blocks.3.resnets.2.norm2.gamma", 8, 0x3f833a67u}, /* 1.0252198 */
    {"narrow", 0, "decoder.up_blocks.3.resnets.2.norm2.gamma", 15, 0x3f6bfe14u}, /* 0.921845675 */
    {"narrow", 0, "decoder.conv_out.bias", 0, 0x3b5be6f1u}, /* 0.00335543999 */
    {"narrow", 0, "decoder.conv_out.bias", 6, 0x3b902e1du}, /* 0.00440002838 */
    {"narrow", 0, "decoder.conv_out.bias", 11, 0xbb145adfu}, /* -0.00226371712 */
    {"narrow", 12345, "post_quant_conv.weight", 0, 0x3ded7d2cu}, /* 0.115961403 */
    {"narrow", 12345, "post_quant_conv.weight", 32, 0x3e2df8dbu}, /* 0.169894621 */
    {"narrow", 12345, "post_quant_conv.weight", 63, 0xbe05adfbu}, /* -0.130546495 */
    {"narrow", 12345, "post_quant_conv.bias", 0, 0xbc209c7eu}, /* -0.00980293564 */
    {"narrow", 12345, "post_quant_conv.bias", 4, 0xbb8c2803u}, /* -0.00427723071 */
    {"narrow", 12345, "post_quant_conv.bias", 7, 0x3b9b30d4u}, /* 0.00473604538 */
    {"narrow", 12345, "decoder.conv_in.weight", 0, 0x3d5c3ac4u}, /* 0.0537669808 */
    {"narrow", 12345, "decoder.conv_in.weight", 6912, 0x3cd62906u}, /* 0.0261426084 */
    {"narrow", 12345, "decoder.conv_in.weight", 13823, 0xbb0f1e61u}, /* -0.00218381756 */
    {"narrow", 12345, "decoder.mid_block.attentions.0.norm.gamma", 0, 0x3f8a3d8eu}, /* 1.0800035 */
    {"narrow", 12345, "decoder.mid_block.attentions.0.norm.gamma", 32, 0x3f78e020u}, /* 0.972169876 */
    {"narrow", 12345, "decoder.mid_block.attentions.0.norm.gamma", 63, 0x3f6f1ce3u}, /* 0.934034526 */
    {"narrow", 12345, "decoder.mid_block.attentions.0.to_qkv.bias", 0, 0xbba1f2adu}, /* -0.00494225929 */
    {"narrow", 12345, "decoder.mid_block.attentions.0.to_qkv.bias", 96, 0x3b176173u}, /* 0.00230988557 */
    {"narrow", 12345, "decoder.mid_block.attentions.0.to_qkv.bias", 191, 0xbbe0b053u}, /* -0.00685695698 */
    {"narrow", 12345, "decoder.up_blocks.0.upsampler.time_conv.weight", 0, 0x3d8dbaf7u}, /* 0.0692042634 */
    {"narrow", 12345, "decoder.up_blocks.0.upsampler.time_conv.weight", 12288, 0xbcb837b4u}, /* -0.0224874988 */
    {"narrow", 12345, "decoder.up_blocks.0.upsampler.time_conv.weight", 24575, 0x3d579c84u}, /* 0.0526394993 */
    {"narrow", 12345, "decoder.up_blocks.2.resnets.0.conv_shortcut.weight", 0, 0xbcffa348u}, /* -0.0312057883 */
    {"narrow", 12345, "decoder.up_blocks.2.resnets.0.conv_shortcut.weight", 1024, 0xbddb90e4u}, /* -0.107209951 */
    {"narrow", 12345, "decoder.up_blocks.2.resnets.0.conv_shortcut.weight", 2047, 0x3c0257e0u}, /* 0.00795552135 */
    {"narrow", 12345, "decoder.up_blocks.3.resnets.2.norm2.gamma", 0, 0x3f8a90e1u}, /* 1.08254635 */
    {"narrow", 12345, "decoder.up_blocks.3.resnets.2.norm2.gamma", 8, 0x3f866d67u}, /* 1.05021369 */
    {"narrow", 12345, "decoder.up_blocks.3.resnets.2.norm2.gamma", 15, 0x3f805879u}, /* 1.00269997 */
    {"narrow", 12345, "decoder.conv_out.bias", 0, 0x3b998ccdu}, /* 0.00468597421 */
    {"narrow", 12345, "decoder.conv_out.bias", 6, 0xbb95f90fu}, /* -0.00457680924 */
    {"narrow", 12345, "decoder.conv_out.bias", 11, 0xba9ae49cu}, /* -0.00118173985 */
    {"ti2v5b", 0, "post_quant_conv.weight", 0, 0xbdd598f1u}, /* -0.104295619 */
    {"ti2v5b", 0, "post_quant_conv.weight", 1152, 0xbdcbe37du}, /* -0.0995549932 */
    {"ti2v5b", 0, "post_quant_conv.weight", 2303, 0x3d202d26u}, /* 0.0391055569 */
    {"ti2v5b", 0, "post_quant_conv.bias", 0, 0xbc158869u}, /* -0.009126761 */
    {"ti2v5b", 0, "post_quant_conv.bias", 24, 0x3c00cfa6u}, /* 0.00786200725 */
    {"ti2v5b", 0, "post_quant_conv.bias", 47, 0xbc012a6cu}, /* -0.00788364932 */
    {"ti2v5b", 0, "decoder.conv_in.weight", 0, 0xbccefd69u}, /* -0.0252673198 */
    {"ti2v5b", 0, "decoder.conv_in.weight", 663552, 0xbcbd294eu}, /* -0.0230909847 */
    {"ti2v5b", 0, "decoder.conv_in.weight", 1327103, 0xbc19a3ceu}, /* -0.00937743299 */
    {"ti2v5b", 0, "decoder.mid_block.attentions.0.norm.gamma", 0, 0x3f8804b5u}, /* 1.06264365 */
    {"ti2v5b", 0, "decoder.mid_block.attentions.0.norm.gamma", 512, 0x3f826830u}, /* 1.01880455 */
    {"ti2v5b", 0, "decoder.mid_block.attentions.0.norm.gamma", 1023, 0x3f73157du}, /* 0.949546635 */
    {"ti2v5b", 0, "decoder.mid_block.attentions.0.to_qkv.bias", 0, 0xba9701d0u}, /* -0.00115209259 */
    {"ti2v5b", 0, "decoder.mid_block.attentions.0.to_qkv.bias", 1536, 0xbb4484f0u}, /* -0.00299864635 */
    {"ti2v5b", 0, "decoder.mid_block.attentions.0.to_qkv.bias", 3071, 0x3ac15c3au}, /* 0.00147522171 */
    {"ti2v5b", 0, "decoder.up_blocks.0.upsampler.time_conv.weight", 0, 0xbc0329d6u}, /* -0.00800557993 */
    {"ti2v5b", 0, "decoder.up_blocks.0.upsampler.time_conv.weight", 3145728, 0xbb139792u}, /* -0.00225207629 */
    {"ti2v5b", 0, "decoder.up_blocks.0.upsampler.time_conv.weight", 6291455, 0xbc46ba18u}, /* -0.0121293291 */
    {"ti2v5b", 0, "decoder.up_blocks.2.resnets.0.conv_shortcut.weight", 0, 0xbb98dc58u}, /* -0.0046649389 */
    {"ti2v5b", 0, "decoder.up_blocks.2.resnets.0.conv_shortcut.weight", 262144, 0xbc990216u}, /* -0.0186777525 */
    {"ti2v5b", 0, "decoder.up_blocks.2.resnets.0.conv_shortcut.weight", 524287, 0xbc470ad4u}, /* -0.0121485777 */
    {"ti2v5b", 0, "decoder.up_blocks.3.resnets.2.norm2.gamma", 0, 0x3f6ab23eu}, /* 0.91678226 */
    {"ti2v5b", 0, "decoder.up_blocks.3.resnets.2.norm2.gamma", 128, 0x3f8a08b6u}, /* 1.07839084 */
    {"ti2v5b", 0, "decoder.up_blocks.3.resnets.2.norm2.gamma", 255, 0x3f7e64d8u}, /* 0.993726254 */
    {"ti2v5b", 0, "decoder.conv_out.bias", 0, 0x3a5be6f1u}, /* 0.000838859996 */
    {"ti2v5b", 0, "decoder.conv_out.bias", 6, 0x3a902e1du}, /* 0.0011000071 */
    {"ti2v5b", 0, "decoder.conv_out.bias", 11, 0xba145adfu}, /* -0.00056592928 */
    {"narrow", 7, "latents 3x5x7", 0, 0x3fda1f09u}, /* 1.70407212 */
    {"narrow", 7, "latents 3x5x7", 1, 0x3f8dbfbdu}, /* 1.10741389 */
    {"narrow", 7, "latents 3x5x7", 420, 0x3f736810u}, /* 0.950806618 */
    {"narrow", 7, "latents 3x5x7", 839, 0xbea2db5du}, /* -0.318079859 */
    {"ti2v5b", 7, "latents 2x3x4", 0, 0x3fda1f09u}, /* 1.70407212 */
    {"ti2v5b", 7, "latents 2x3x4", 1, 0x3f8dbfbdu}, /* 1.10741389 */
    {"ti2v5b", 7, "latents 2x3x4", 576, 0x3ecc3a5du}, /* 0.398882776 */
    {"ti2v5b", 7, "latents 2x3x4", 1151, 0x3ff64b89u}, /* 1.92418015 */
};
static const pin_sum sums[] = {
    {"narrow", 0, "weights", 0x4261236250ca5b82ull},
    {"narrow", 12345, "weights", 0x7e95c5339e1d1fcbull},
    {"narrow", 7, "latents 3x5x7", 0x000279f84a53377aull},
    {"ti2v5b", 7, "latents 2x3x4", 0x000521258c9815ceull},
};
/* END PINS */

static void config_of(const char *name, w22_config *c) {
    w22_config_default(c);
    if (strcmp(name, "narrow") == 0) {
        c->z_dim = 8;
        c->base_dim = 16;
    }
}

static uint32_t bits_of(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static uint64_t checksum(const float *x, int64_t n) {
    uint64_t s = 0;
    for (int64_t i = 0; i < n; i++) s += (uint64_t)(i + 1) * bits_of(x[i]);
    return s;
}

/* Checks every pinned value and sum of weights of (config, seed). */
static void check_weights(const char *cname, uint64_t seed) {
    w22_config cfg;
    config_of(cname, &cfg);
    w22_weights *w = NULL;
    double t0 = w22_now();
    CHECK_OK(w22_weights_synthetic(&cfg, seed, &w));
    double dt = w22_now() - t0;
    if (!w) return;
    const w22_model *m = &w->model;
    int64_t total = 0;
    for (int t = 0; t < m->nweights; t++) total += m->weights[t].numel;
    printf("weights %s seed %llu: %d tensors, %lld parameters in %.2f s\n", cname, (unsigned long long)seed,
           m->nweights, (long long)total, dt);
    if (strcmp(cname, "ti2v5b") == 0) {
        CHECK(total == 555051580LL, "TI2V-5B has %lld parameters, expected 555051580", (long long)total);
        /* The spec asks for < 10 s on 2 cores; a sanitizer build is slower, hence the margin here. */
        CHECK(dt < 30.0, "synthetic TI2V-5B weights took %.1f s", dt);
    }
    CHECK(m->nweights == 110, "%d tensors, expected 110", m->nweights);
    char src[64];
    snprintf(src, sizeof src, "synthetic seed %llu", (unsigned long long)seed);
    CHECK(strcmp(w->source, src) == 0, "source \"%s\", expected \"%s\"", w->source, src);
    CHECK(w->owned == w->data[0], "owned %p, expected the first tensor %p", w->owned, w->data[0]);
    const float *expect = w->data[0];
    for (int t = 0; t < m->nweights; t++) {
        CHECK(w->dtype[t] == W22_DTYPE_F32, "%s: dtype %s", m->weights[t].name, w22_dtype_name(w->dtype[t]));
        CHECK(w->data[t] == expect, "%s: not contiguous with the previous tensor", m->weights[t].name);
        expect = (const float *)w->data[t] + m->weights[t].numel;
    }
    for (size_t k = 0; k < sizeof pins / sizeof pins[0]; k++) {
        const pin_value *p = &pins[k];
        if (strcmp(p->config, cname) != 0 || p->seed != seed || strncmp(p->what, "latents", 7) == 0) continue;
        int t = w22_model_find(m, p->what);
        CHECK(t >= 0, "no tensor %s", p->what);
        if (t < 0) continue;
        float got = ((const float *)w->data[t])[p->index];
        CHECK(bits_of(got) == p->bits, "%s seed %llu %s[%lld]: %.9g (0x%08x), expected 0x%08x", cname,
              (unsigned long long)seed, p->what, (long long)p->index, got, bits_of(got), p->bits);
    }
    for (size_t k = 0; k < sizeof sums / sizeof sums[0]; k++) {
        const pin_sum *p = &sums[k];
        if (strcmp(p->config, cname) != 0 || p->seed != seed || strcmp(p->what, "weights") != 0) continue;
        uint64_t s = 0;
        for (int t = 0; t < m->nweights; t++)
            s += (uint64_t)(t + 1) * checksum(w->data[t], m->weights[t].numel);
        CHECK(s == p->sum, "%s seed %llu weights checksum 0x%016llx, expected 0x%016llx", cname,
              (unsigned long long)seed, (unsigned long long)s, (unsigned long long)p->sum);
    }
    w22_weights_free(w);
}

static void check_latents(const char *cname, uint64_t seed, int T, int h, int w) {
    w22_config cfg;
    config_of(cname, &cfg);
    char what[64];
    snprintf(what, sizeof what, "latents %dx%dx%d", T, h, w);
    int64_t n = (int64_t)cfg.z_dim * T * h * w;
    float *x = malloc((size_t)n * sizeof *x);
    t_fill_nan(x, (size_t)n);
    CHECK_OK(w22_latents_synthetic(&cfg, seed, T, h, w, x));
    for (size_t k = 0; k < sizeof pins / sizeof pins[0]; k++) {
        const pin_value *p = &pins[k];
        if (strcmp(p->config, cname) != 0 || p->seed != seed || strcmp(p->what, what) != 0) continue;
        CHECK(bits_of(x[p->index]) == p->bits, "%s seed %llu %s[%lld]: %.9g (0x%08x), expected 0x%08x", cname,
              (unsigned long long)seed, what, (long long)p->index, x[p->index], bits_of(x[p->index]), p->bits);
    }
    for (size_t k = 0; k < sizeof sums / sizeof sums[0]; k++) {
        const pin_sum *p = &sums[k];
        if (strcmp(p->config, cname) != 0 || p->seed != seed || strcmp(p->what, what) != 0) continue;
        uint64_t s = checksum(x, n);
        CHECK(s == p->sum, "%s seed %llu %s checksum 0x%016llx, expected 0x%016llx", cname,
              (unsigned long long)seed, what, (unsigned long long)s, (unsigned long long)p->sum);
    }
    /* Each channel: uniform with mean m_c in [-1, 1) and std s_c in [0.5, 2): every value within m_c +- sqrt(3) s_c,
     * so within (-1 - 2 sqrt 3, 1 + 2 sqrt 3). */
    for (int64_t i = 0; i < n; i++) CHECK(fabsf(x[i]) < 4.47f, "%s[%lld] = %g out of range", what, (long long)i, x[i]);
    free(x);
}

static void check_errors(void) {
    w22_config cfg;
    w22_config_default(&cfg);
    w22_weights *w = (w22_weights *)&cfg; /* must be reset to NULL on failure */
    w22_config bad = cfg;
    bad.patch_size = 3;
    CHECK(w22_weights_synthetic(&bad, 1, &w) == W22_ERR_INVALID_ARG, "a bad config must fail");
    CHECK(w == NULL, "out not reset on failure");
    CHECK(strstr(w22_last_error(), "patch_size") != NULL, "message \"%s\" should name patch_size", w22_last_error());
    CHECK(w22_weights_synthetic(&cfg, 1, NULL) == W22_ERR_INVALID_ARG, "NULL out must fail");
    float x[8];
    CHECK(w22_latents_synthetic(&cfg, 1, 0, 1, 1, x) == W22_ERR_INVALID_ARG, "T = 0 must fail");
    CHECK(strstr(w22_last_error(), "T=0") != NULL, "message \"%s\" should name T=0", w22_last_error());
    CHECK(w22_latents_synthetic(&cfg, 1, 1, 1, -2, x) == W22_ERR_INVALID_ARG, "w < 0 must fail");
    CHECK(w22_latents_synthetic(&cfg, 1, 1, 1, 1, NULL) == W22_ERR_INVALID_ARG, "NULL out must fail");
}

int main(void) {
    check_errors();
    check_weights("narrow", 0);
    check_weights("narrow", 12345);
    check_weights("ti2v5b", 0);
    check_latents("narrow", 7, 3, 5, 7);
    check_latents("ti2v5b", 7, 2, 3, 4);
    return t_finish("test_synth");
}
