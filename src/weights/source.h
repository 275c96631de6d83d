/* Where the weights come from, as the Python package reads them (python/wan22vae/decoder.py): a safetensors file,
 * a sharded index (*.safetensors.index.json with a weight_map), a diffusers VAE folder (config.json and
 * diffusion_pytorch_model[.<variant>].safetensors, or its index), or a pipeline folder holding such a folder as
 * vae/. The config comes from the config.json next to the weights when there is one (diffusers' AutoencoderKLWan
 * config, or this library's own keys), else from the file; a diffusers config also carries the latents' statistics
 * (latents_mean, latents_std) that a pipeline's normalized latents need (w22_latents_denormalize). */
#ifndef W22_WEIGHTS_SOURCE_H
#define W22_WEIGHTS_SOURCE_H

#include <limits.h>
#include <stddef.h>
#include "wan22vae.h"

/* The file name diffusers gives a VAE's weights, and its sharded index. */
#define W22_DIFFUSERS_WEIGHTS "diffusion_pytorch_model.safetensors"
#define W22_DIFFUSERS_INDEX "diffusion_pytorch_model.safetensors.index.json"

typedef struct {
    char found[PATH_MAX];       /* the safetensors file, or the sharded index */
    int is_index;
    char config_json[PATH_MAX]; /* the config.json next to found, "" when there is none */
} w22_weights_location;

/* What path names: a file (an index when it ends in ".index.json"), else a folder (its vae/ subfolder when there
 * is one) holding the weights under diffusers' names; variant (NULL: none, or the only one there) picks
 * diffusion_pytorch_model.<variant>.safetensors. W22_ERR_IO names what was looked for. Nothing is opened: a
 * path that exists and is no folder is taken as the file (its reader refuses a FIFO or a device). */
w22_status w22_weights_locate(const char *path, const char *variant, w22_weights_location *loc);

/* A VAE config.json, read. */
typedef struct {
    w22_config cfg;
    int diffusers;            /* the diffusers form (AutoencoderKLWan) */
    int nstats;               /* latents_mean/latents_std: their length; 0 absent; -1 present but unusable */
    float *mean, *std;        /* malloc'd, nstats each (float32, as torch.tensor(list) makes them) */
    char stats_problem[512];  /* why nstats is -1 */
} w22_vae_config;

/* Parses a config.json held in text[0, n) (name: for messages) as the Python package does: the diffusers form
 * (it has temperal_downsample or decoder_base_dim; attn_scales empty; is_residual true: TI2V-5B, false or absent: the
 * Wan2.1 VAE; patch_size None: 1) or this library's keys (z_dim, base_dim, dim_mult, num_res_blocks, temporal_up,
 * out_channels, patch_size, is_residual; nothing else),
 * then w22_config_check. Unusable statistics do not fail the parse (nstats -1 and stats_problem say why). */
w22_status w22_vae_config_parse(const void *text, size_t n, const char *name, w22_vae_config *vc);
w22_status w22_vae_config_read(const char *path, w22_vae_config *vc);
void w22_vae_config_free(w22_vae_config *vc);

/* The weights of a sharded index: every shard path inside the index's folder (an absolute path, or one that
 * resolves outside through '..' or a symlinked folder, is refused), every shard present and well formed, no
 * tensor in two shards, every weight_map entry in the shard it names; the tensors weight_map lists are then
 * checked as one file's (w22_weights_from_st). The shards stay mapped while the weights live. *nshards and
 * *ntensors (may be NULL): the shards and the tensors they hold. */
w22_status w22_weights_load_index(const char *index, const w22_config *cfg, w22_weights **out, int *nshards,
                                  int *ntensors);

typedef struct {
    w22_weights_location loc;
    int has_config;           /* loc.config_json was read into vae */
    w22_vae_config vae;
    int nfiles;               /* 1, or the shards */
    int file_tensors;         /* the tensors in the file(s), the decoder's and any others */
} w22_weights_info;

/* Locates (w22_weights_locate), reads the config.json when there is one, and loads the weights with its config
 * (a file through w22_weights_load, an index through w22_weights_load_index). info (may be NULL) says what was
 * read; free it with w22_weights_info_free. */
w22_status w22_weights_open_path(const char *path, const char *variant, w22_weights **out, w22_weights_info *info);
void w22_weights_info_free(w22_weights_info *info);

/* Wan2.2 TI2V-5B's latent statistics (48 channels): latents_mean and latents_std of the diffusers config of
 * Wan-AI/Wan2.2-TI2V-5B-Diffusers, vae/config.json (the same numbers as the Wan2.2 repository's
 * wan/modules/vae2_2.py, Wan2_2_VAE). */
#define W22_WAN22_STATS 48
extern const float w22_wan22_latents_mean[W22_WAN22_STATS];
extern const float w22_wan22_latents_std[W22_WAN22_STATS];

/* The Wan2.1 VAE's latent statistics (16 channels): diffusers' AutoencoderKLWan defaults, which the Wan2.1 and
 * Wan2.2 A14B diffusers folders' vae/config.json hold (the Wan2.1 repository's wan/modules/vae.py, WanVAE). */
#define W22_WAN21_STATS 16
extern const float w22_wan21_latents_mean[W22_WAN21_STATS];
extern const float w22_wan21_latents_std[W22_WAN21_STATS];

/* De-normalizes a pipeline's latents in place, as diffusers' Wan pipelines do before vae.decode:
 *     latents_std = 1.0 / tensor(latents_std);  latents = latents / latents_std + latents_mean
 * per channel, in float32 (the same operations, so the same bits as a float32 pipeline). z is [C][n]: C channels
 * of n values each (T x h x w). */
void w22_latents_denormalize(float *z, int channels, size_t n, const float *mean, const float *std);

#endif
