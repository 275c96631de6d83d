/* `wan22vae synth weights|latents`: synthetic weights (w22_weights_synthetic, saved as safetensors) and latents
 * (w22_latents_synthetic, saved as .safetensors or .npy), deterministic from a seed; narrow variants for tests
 * with --z-dim / --base-dim. */
#define _GNU_SOURCE
#include <getopt.h>
#include <limits.h>
#include <strings.h>
#include <stdio.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include "common.h"
#include "io/io.h"
#include "cli.h"

static const char usage[] =
    "usage: wan22vae synth weights -o|--out W.safetensors [--model M] [--seed S] [--dtype bf16|f32|f16]\n"
    "                              [--z-dim N] [--base-dim N] [-f|--force]\n"
    "       wan22vae synth latents -o|--out Z.safetensors|Z.npy --frames T --height h --width w [--model M]\n"
    "                              [--seed S] [--z-dim N] [-f|--force]\n"
    "\n"
    "Deterministic from the seed (default 0). The config is --model's: ti2v-5b (the default: Wan2.2 TI2V-5B,\n"
    "z_dim 48, base_dim 256) or wan2.1 (the Wan2.1 VAE of Wan2.1, Wan2.2 A14B and Qwen-Image: z_dim 16,\n"
    "base_dim 96), with --z-dim / --base-dim overriding; latents are float32 [1, z_dim, T, h, w].\n"
    "\n" CLI_EXIT_CODES;

/* --model's value: ti2v-5b (and its spellings) or wan2.1; 0 on success, else a usage error (2). */
static int cli_model(const char *cmd, const char *s, int *wan21) {
    static const char *const ti2v[] = {"ti2v-5b", "ti2v5b", "wan2.2-ti2v-5b", "ti2v"}, *const w21[] = {"wan2.1",
                                                                                                      "wan21"};
    for (size_t i = 0; i < sizeof ti2v / sizeof ti2v[0]; i++)
        if (!strcasecmp(s, ti2v[i])) return *wan21 = 0, 0;
    for (size_t i = 0; i < sizeof w21 / sizeof w21[0]; i++)
        if (!strcasecmp(s, w21[i])) return *wan21 = 1, 0;
    return cli_usage_error(cmd, "--model: expected ti2v-5b (Wan2.2 TI2V-5B) or wan2.1 (the Wan2.1 VAE), found '%s'",
                           s);
}

int cli_synth(int argc, char **argv) {
    if (argc < 2) return cli_usage_error("synth", "expected 'weights' or 'latents'");
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) return fputs(usage, stdout), 0;
    const char *what = argv[1];
    int is_weights = !strcmp(what, "weights");
    if (!is_weights && strcmp(what, "latents"))
        return cli_usage_error("synth", "expected 'weights' or 'latents', found '%s'", what);

    const char *out = NULL, *dtype_s = NULL;
    long long seed = 0, zdim = -1, base = -1, T = -1, h = -1, w = -1;
    int force = 0, wan21 = 0;
    static const struct option opts[] = {
        {"out", required_argument, 0, 'o'},    {"seed", required_argument, 0, 's'},
        {"dtype", required_argument, 0, 'd'},  {"z-dim", required_argument, 0, 'z'},
        {"base-dim", required_argument, 0, 'b'}, {"frames", required_argument, 0, 'T'},
        {"height", required_argument, 0, 'H'}, {"width", required_argument, 0, 'W'},
        {"force", no_argument, 0, 'f'},        {"help", no_argument, 0, 'h'},
        {"model", required_argument, 0, 'm'},  {0, 0, 0, 0},
    };
    const char *cmd = is_weights ? "synth weights" : "synth latents";
    opterr = 0;
    for (int ch; (ch = getopt_long(argc - 1, argv + 1, ":ho:f", opts, NULL)) != -1;) {
        switch (ch) {
        case 'o': out = optarg; break;
        case 's': if (cli_int(cmd, "--seed", optarg, 0, INT64_MAX, &seed)) return 2; break;
        case 'd': dtype_s = optarg; break;
        case 'z': if (cli_int(cmd, "--z-dim", optarg, 1, 4096, &zdim)) return 2; break; /* the library's ranges */
        case 'b': if (cli_int(cmd, "--base-dim", optarg, 1, 4096, &base)) return 2; break;
        case 'T': if (cli_int(cmd, "--frames", optarg, 1, 100000, &T)) return 2; break;
        case 'H': if (cli_int(cmd, "--height", optarg, 1, 65536, &h)) return 2; break;
        case 'W': if (cli_int(cmd, "--width", optarg, 1, 65536, &w)) return 2; break;
        case 'f': force = 1; break;
        case 'm':
            if (cli_model(cmd, optarg, &wan21)) return 2;
            break;
        case 'h': return fputs(usage, stdout), 0;
        default: return cli_bad_option(cmd, argv + 1, optopt);
        }
    }
    if (optind < argc - 1) return cli_usage_error(cmd, "unexpected argument '%s'", argv[optind + 1]);
    if (!out) return cli_usage_error(cmd, "expected --out");
    /* the output's kind up front, before any work: weights are safetensors, latents .safetensors or .npy */
    const size_t olen = strlen(out);
    const int st = olen >= 12 && !strcasecmp(out + olen - 12, ".safetensors");
    const int npy = olen >= 4 && !strcasecmp(out + olen - 4, ".npy");
    if (is_weights && !st) return cli_usage_error(cmd, "--out: expected a .safetensors path (weights are written as "
                                                   "safetensors), found '%s'", out);
    if (!is_weights && !st && !npy)
        return cli_usage_error(cmd, "--out: expected a .safetensors or .npy path, found '%s'", out);
    if (!is_weights && dtype_s)
        return cli_usage_error(cmd, "--dtype is for weights; latents are written as float32");

    w22_config cfg;
    if (wan21) w22_config_wan21(&cfg);
    else w22_config_default(&cfg);
    if (zdim > 0) cfg.z_dim = (int)zdim;
    if (base > 0) cfg.base_dim = (int)base;
    if (w22_config_check(&cfg) != W22_OK) return cli_usage_error(cmd, "%s", w22_last_error()); /* "config: ..." */

    if (is_weights) {
        w22_dtype dt;
        if (!dtype_s) dtype_s = "bf16";
        if (!strcmp(dtype_s, "bf16")) dt = W22_DTYPE_BF16;
        else if (!strcmp(dtype_s, "f32")) dt = W22_DTYPE_F32;
        else if (!strcmp(dtype_s, "f16")) dt = W22_DTYPE_F16;
        else return cli_usage_error(cmd, "--dtype: expected bf16, f32 or f16, found '%s'", dtype_s);
        if (T > 0 || h > 0 || w > 0) return cli_usage_error(cmd, "--frames/--height/--width are for latents");
        w22_status os = w22_output_check(out, 0, force);
        if (os != W22_OK) {
            cli_fail("output");
            if (os == W22_ERR_EXISTS && !force) fprintf(stderr, "(--force replaces it)\n");
            return 1;
        }
        w22_weights *wt;
        if (w22_weights_synthetic(&cfg, (uint64_t)seed, &wt) != W22_OK) return cli_fail("making synthetic weights");
        /* w22_weights_save makes new files only: --force saves beside the output, then renames over it */
        char tmp[PATH_MAX];
        const int replace = force && access(out, F_OK) == 0;
        if (replace && snprintf(tmp, sizeof tmp, "%s.synth-%d.safetensors", out, (int)getpid()) >= (int)sizeof tmp) {
            w22_weights_free(wt);
            fprintf(stderr, "wan22vae: %s: the path is too long\n", out);
            return 1;
        }
        w22_status s = w22_weights_save(wt, replace ? tmp : out, dt);
        w22_weights_free(wt);
        if (s == W22_OK && replace && rename(tmp, out) != 0) {
            perror("wan22vae: replacing the output");
            unlink(tmp);
            return 1;
        }
        if (s != W22_OK) return cli_fail("writing %s", out);
        fprintf(stderr, "wan22vae: wrote %s: synthetic weights (%s), seed %lld, z_dim %d, base_dim %d, %s\n", out,
                wan21 ? "the Wan2.1 VAE" : "Wan2.2 TI2V-5B", seed, cfg.z_dim, cfg.base_dim, w22_dtype_name(dt));
        return 0;
    }
    if (T < 0 || h < 0 || w < 0)
        return cli_usage_error(cmd, "expected --frames, --height and --width; missing %s",
                               T < 0 ? "--frames" : h < 0 ? "--height" : "--width");
    if (base > 0) return cli_usage_error(cmd, "--base-dim is for weights");
    size_t n = (size_t)cfg.z_dim * (size_t)T * (size_t)h * (size_t)w;
    float *z = w22_malloc(n * 4, "synthetic latents");
    if (!z) return cli_fail("making synthetic latents");
    w22_status s = w22_latents_synthetic(&cfg, (uint64_t)seed, (int)T, (int)h, (int)w, z);
    if (s == W22_OK) {
        s = w22_io_save_latents(out, z, cfg.z_dim, (int)T, (int)h, (int)w, force);
        if (s != W22_OK) cli_fail("writing %s", out);
        if (s == W22_ERR_EXISTS && !force) fprintf(stderr, "(--force replaces it)\n");
    } else {
        cli_fail("making synthetic latents");
    }
    free(z);
    if (s != W22_OK) return 1;
    fprintf(stderr, "wan22vae: wrote %s: synthetic latents [1, %d, %lld, %lld, %lld], seed %lld\n", out, cfg.z_dim, T,
            h, w, seed);
    return 0;
}
