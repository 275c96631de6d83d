/* The decoder as data: its layers and its weights, derived from a w22_config. Loading, validation, the plan and
 * the work count all read this one description (docs/design.md). */
#ifndef W22_MODEL_H
#define W22_MODEL_H

#include "wan22vae.h"

/* The table sizes follow from w22_config_check's bound on num_res_blocks (R), so that every config it accepts fits.
 * Layers: post_quant, conv_in, mid (resnet, attention, resnet), 3 up blocks of (begin, R + 1 resnets, upsample,
 * dupup), the last block's R + 1 resnets, the head (the Wan2.1 decoder, is_residual 0, has no begin and dupup). Weights at most: 2 + 2 (post_quant, conv_in), 5 (attention),
 * 12 (mid resnets), 4 blocks x (R + 1) resnets x 6, 3 shortcuts x 2, 3 upsamplers x (2 + 2 time_conv), 3 (head). */
#define W22_MAX_RES_BLOCKS 8
#define W22_LAYERS_FOR(R) (19 + 4 * (R))
#define W22_WEIGHTS_MAX_FOR(R) (66 + 24 * (R))
#define W22_MAX_LAYERS W22_LAYERS_FOR(W22_MAX_RES_BLOCKS)       /* 51 */
#define W22_MAX_WEIGHTS W22_WEIGHTS_MAX_FOR(W22_MAX_RES_BLOCKS) /* 258 */
#define W22_NAME_MAX 96

typedef enum {
    W22_L_POST_QUANT,  /* 1x1x1 conv z_dim -> z_dim, over the latents */
    W22_L_CONV_IN,     /* causal 3x3x3 conv z_dim -> C */
    W22_L_RESBLOCK,    /* x + conv2(silu(rms2(conv1(silu(rms1(x)))))), shortcut 1x1x1 when cin != cout */
    W22_L_ATTN,        /* per-frame single-head attention over the frame's pixels, plus x */
    W22_L_BLOCK_BEGIN, /* an up block with a DupUp shortcut starts: its input is kept for W22_L_DUPUP */
    W22_L_UPSAMPLE,    /* [time_conv (3,1,1) C -> 2C, frames interleaved] then nearest 2x + 3x3 conv2d C -> cout
                        * (TI2V-5B: cout = C; Wan2.1: C / 2) */
    W22_L_DUPUP,       /* x += DupUp(block input): repeat channels, to frames ft x and space 2x */
    W22_L_HEAD,        /* norm_out -> SiLU -> causal 3x3x3 conv_out C -> out_channels */
} w22_layer_kind;

/* Weight slots of a layer (index into the model's weight table, -1 where absent). */
enum {
    W22_WS_NORM1 = 0, W22_WS_CONV1_W, W22_WS_CONV1_B, W22_WS_NORM2, W22_WS_CONV2_W, W22_WS_CONV2_B,
    W22_WS_SC_W, W22_WS_SC_B, W22_WS_COUNT
};
/* Other layers reuse the slots: conv (post_quant, conv_in): CONV1_W/B; attention: NORM1, CONV1 = to_qkv,
 * CONV2 = proj; upsample: CONV1 = resample.1 (3x3 conv2d), CONV2 = time_conv; head: NORM1, CONV1 = conv_out. */

typedef struct {
    w22_layer_kind kind;
    int cin, cout;
    int level;     /* spatial scale of the layer's input: size (h << level, w << level) */
    int tscale;    /* frames per latent frame (after the first) at the layer's input: 1, 2 or 4 */
    int temporal;  /* upsample, dupup: 1 when time doubles */
    int block;     /* up block index, -1 outside */
    int stage_end; /* the last layer of a plan stage (one per spatial level): TI2V-5B's DupUps, Wan2.1's upsamplers,
                    * and the head */
    int w[W22_WS_COUNT];
    char prefix[W22_NAME_MAX]; /* "decoder.up_blocks.0.resnets.1" */
} w22_layer;

typedef struct {
    char name[W22_NAME_MAX];
    int ndim;
    int64_t shape[5];
    int64_t numel;
    int fan_in;    /* for conv weights: cin * kernel volume; 0 for gammas and biases of no conv */
    int is_gamma;  /* RMS norm gamma */
} w22_weight_desc;

typedef struct w22_model {
    w22_config cfg;
    int nweights;
    w22_weight_desc weights[W22_MAX_WEIGHTS];
    int nlayers;
    w22_layer layers[W22_MAX_LAYERS];
    int dims[5];      /* channels: conv_in/mid, then each up block's resnets' output (diffusers' dims) */
    int stage_cin[4]; /* channels of each stage's input: z_dim, then each upsampler's output */
} w22_model;

/* The layer and weight counts of cfg's model (what w22_model_build makes), without building it. */
void w22_model_counts(const w22_config *cfg, int *nlayers, int *nweights);
/* Fills m from cfg (which must pass w22_config_check). */
void w22_model_build(const w22_config *cfg, w22_model *m);
/* The weight index of a diffusers name (without prefix), or -1. */
int w22_model_find(const w22_model *m, const char *name);
/* Frames at each stage for T latent frames: frames[level] for level 0..3 (level 3 == the video's frames). */
void w22_model_stage_frames(const w22_model *m, int T, int frames[4]);
/* Which VAE's structure cfg has: "Wan2.2 TI2V-5B" (is_residual 1) or "Wan2.1" (is_residual 0; the Wan2.1 VAE that
 * Wan2.1, Wan2.2 A14B and Qwen-Image decode with). */
const char *w22_model_name(const w22_config *cfg);
/* The channel count of the first norm or DupUp of m whose C is not a multiple of mult (the CUDA backend's norm and DupUp
 * kernels take 8 channels a thread: cuda/route.h), its layer's name in *where; 0 when every one is (both Wan VAEs:
 * 96 .. 1024 channels). */
int w22_model_feature_channels_off(const w22_model *m, int mult, const char **where);
/* Whether two configs describe the same model. */
int w22_config_equal(const w22_config *a, const w22_config *b);

#endif
