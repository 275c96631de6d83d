/* `wan22vae info W`: validates weights (a file, a sharded index or a diffusers folder: the library's full check)
 * and prints what they hold: the config and where it came from, the decoder's tensors (count, dtypes, parameters,
 * bytes), the name prefix, the latents' statistics, and the work of a standard clip. */
#define _GNU_SOURCE
#include <getopt.h>
#include <stdio.h>
#include <string.h>
#include "common.h"
#include "io/io.h"
#include "weights/source.h"
#include "weights/weights.h"
#include "cli.h"

static const char usage[] =
    "usage: wan22vae info [--variant V] WEIGHTS\n"
    "\n"
    "Validates the weights (every tensor the decoder needs, with its shape and dtype) and prints which VAE they\n"
    "hold (Wan2.2 TI2V-5B's, or the Wan2.1 VAE of Wan2.1, Wan2.2 A14B and Qwen-Image), the config, its source,\n"
    "the tensors, dtypes, parameters and bytes, the name prefix, the latents' statistics, and the FLOPs of\n"
    "decoding a standard clip (TI2V-5B: T=31 latent frames of 78x44, 121 frames of 1248x704; Wan2.1: T=21 of\n"
    "160x90, 81 frames of 1280x720; width x height). WEIGHTS is a .safetensors\n"
    "file, a sharded index (*.safetensors.index.json), a diffusers VAE folder (config.json +\n"
    "diffusion_pytorch_model.safetensors) or a pipeline folder holding vae/; a config.json next to the weights\n"
    "gives the config, else it is inferred from the tensors.\n"
    "\n"
    "  --variant V   in a folder: diffusion_pytorch_model.V.safetensors (e.g. fp16)\n"
    "  -h, --help    this help\n"
    "\n" CLI_EXIT_CODES;

int cli_info(int argc, char **argv) {
    static const struct option opts[] = {{"help", no_argument, 0, 'h'}, {"variant", required_argument, 0, 'V'},
                                         {0, 0, 0, 0}};
    const char *variant = NULL;
    opterr = 0;
    for (int ch; (ch = getopt_long(argc, argv, ":h", opts, NULL)) != -1;) {
        if (ch == 'h') return fputs(usage, stdout), 0;
        if (ch == 'V') {
            variant = optarg;
            continue;
        }
        return cli_bad_option("info", argv, optopt);
    }
    if (argc - optind != 1)
        return cli_usage_error("info", "expected one weight file or folder, found %d arguments", argc - optind);
    const char *path = argv[optind];

    w22_weights *w;
    w22_weights_info info;
    if (w22_weights_open_path(path, variant, &w, &info) != W22_OK) return cli_fail("%s: invalid weights", path);
    const w22_config *c = w22_weights_config(w);
    w22_config def, wan21;
    w22_config_default(&def);
    w22_config_wan21(&wan21);
    /* the VAE (the structure: is_residual), and whether the config is that VAE's own or a narrow variant of it */
    const int is21 = !c->is_residual;
    const char *vae = is21 ? "the Wan2.1 VAE (Wan2.1, Wan2.2 A14B, Qwen-Image)" : "Wan2.2 TI2V-5B";
    const int real = w22_config_equal(c, is21 ? &wan21 : &def);
    const int sT = is21 ? 21 : 31, sh = is21 ? 90 : 44, sw = is21 ? 160 : 78; /* the standard clip */

    int64_t params = 0, bytes = 0, by_dtype[3] = {0};
    for (int i = 0; i < w->model.nweights; i++) {
        int64_t n = w->model.weights[i].numel;
        params += n;
        bytes += n * (int64_t)w22_dtype_size(w->dtype[i]);
        by_dtype[w->dtype[i]]++;
    }
    char dtypes[128] = "";
    size_t k = 0;
    for (int t = 0; t < 3; t++)
        if (by_dtype[t])
            k += (size_t)snprintf(dtypes + k, sizeof dtypes - k, "%s%s x %lld", k ? ", " : "",
                                  w22_dtype_name((w22_dtype)t), (long long)by_dtype[t]);

    int F, H, W;
    w22_video_shape(c, sT, sh, sw, &F, &H, &W);
    double flops = w22_decode_flops(c, sT, sh, sw);

    if (info.loc.is_index) printf("index:       %s (%d shards)\n", info.loc.found, info.nfiles);
    else printf("file:        %s\n", info.loc.found);
    if (info.has_config)
        printf("config.json: %s (%s)\n", info.loc.config_json,
               info.vae.diffusers ? "diffusers AutoencoderKLWan" : "wan22vae keys");
    printf("model:       %s%s\n", vae, real ? "" : ", a narrow variant of its structure");
    printf("config:      z_dim %d, base_dim %d, dim_mult [%d, %d, %d, %d], num_res_blocks %d, temporal_up [%d, %d, "
           "%d], out_channels %d, patch_size %d, is_residual %d%s\n", c->z_dim, c->base_dim, c->dim_mult[0], c->dim_mult[1],
           c->dim_mult[2], c->dim_mult[3], c->num_res_blocks, c->temporal_up[0], c->temporal_up[1],
           c->temporal_up[2], c->out_channels, c->patch_size, c->is_residual,
           real ? (is21 ? " (the Wan2.1 VAE)" : " (Wan2.2 TI2V-5B)") : " (a narrow variant)");
    printf("tensors:     %d used by the decoder", w->model.nweights);
    if (info.file_tensors >= 0)
        printf(" (of %d in the %s)", info.file_tensors, info.loc.is_index ? "shards" : "file");
    printf("\ndtypes:      %s\n", dtypes);
    printf("parameters:  %lld\n", (long long)params);
    printf("bytes:       %lld (%.3f GB)\n", (long long)bytes, bytes / 1e9);
    printf("prefix:      '%s'\n", w->prefix);
    if (info.has_config && info.vae.nstats > 0)
        printf("latents:     latents_mean/latents_std of %d channels in config.json (for --latents-normalized)\n",
               info.vae.nstats);
    else if (info.has_config && info.vae.nstats < 0)
        printf("latents:     unusable statistics: %s\n", info.vae.stats_problem);
    else if (c->z_dim == W22_WAN22_STATS)
        printf("latents:     no statistics in a config.json (--latents-normalized: Wan2.2 TI2V-5B's built in)\n");
    else if (c->z_dim == W22_WAN21_STATS)
        printf("latents:     no statistics in a config.json (--latents-normalized: the Wan2.1 VAE's built in)\n");
    else
        printf("latents:     no statistics in a config.json (--latents-normalized needs them for z_dim %d)\n",
               c->z_dim);
    printf("FLOPs:       %.4g (%.2f TFLOP) to decode T=%d latent frames of %dx%d into %d frames of %dx%d (width x "
           "height)\n", flops, flops / 1e12, sT, sw, sh, F, W, H);
    w22_weights_free(w);
    w22_weights_info_free(&info);
    return 0;
}
