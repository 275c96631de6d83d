/* `wan22vae info W`: validates a weight file (the library's full check) and prints what it holds: the config
 * inferred from the shapes, the decoder's tensors (count, dtypes, parameters, bytes), the name prefix, and the
 * work of a standard clip. */
#define _GNU_SOURCE
#include <getopt.h>
#include <stdio.h>
#include <string.h>
#include "common.h"
#include "io/io.h"
#include "weights/safetensors.h"
#include "weights/weights.h"
#include "cli.h"

static const char usage[] =
    "usage: wan22vae info W.safetensors\n"
    "\n"
    "Validates the weight file (every tensor the decoder needs, with its shape and dtype) and prints the config\n"
    "inferred from it, its tensors, dtypes, parameters and bytes, the name prefix, and the FLOPs of decoding the\n"
    "standard clip (T=31 latent frames of 44x78: 121 frames of 704x1248). Exit 1 with the reason when invalid.\n";

/* The text before the decoder's names ("", "vae."), from the anchor tensor post_quant_conv.weight. */
static void find_prefix(const w22_st_file *f, char *prefix, size_t cap) {
    static const char anchor[] = "post_quant_conv.weight";
    snprintf(prefix, cap, "?");
    for (int i = 0; i < f->ntensors; i++) {
        const char *n = f->tensors[i].name;
        size_t len = strlen(n), k = sizeof anchor - 1;
        if (len >= k && !strcmp(n + len - k, anchor) && (len == k || n[len - k - 1] == '.')) {
            snprintf(prefix, cap, "%.*s", (int)(len - k), n);
            return;
        }
    }
}

int cli_info(int argc, char **argv) {
    static const struct option opts[] = {{"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    opterr = 0;
    for (int ch; (ch = getopt_long(argc, argv, ":h", opts, NULL)) != -1;) {
        if (ch == 'h') return fputs(usage, stdout), 0;
        return cli_bad_option("info", argv, optopt);
    }
    if (argc - optind != 1)
        return cli_usage_error("info", "expected one weight file, found %d arguments", argc - optind);
    const char *path = argv[optind];

    w22_weights *w;
    /* a FIFO would hang the load's open(): refused first */
    if (w22_input_check(path, "weights") != W22_OK) return cli_fail("%s: invalid weights", path);
    if (w22_weights_load(path, NULL, &w) != W22_OK) return cli_fail("%s: invalid weights", path);
    const w22_config *c = w22_weights_config(w);
    w22_config def;
    w22_config_default(&def);

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

    /* The file's own view (all tensors, the prefix); it was just validated, so this open succeeds. */
    w22_st_file f;
    char prefix[128] = "?";
    int file_tensors = -1;
    if (w22_st_open(path, &f) == W22_OK) {
        file_tensors = f.ntensors;
        find_prefix(&f, prefix, sizeof prefix);
    }
    w22_st_close(&f);

    int F, H, W;
    w22_video_shape(c, 31, 44, 78, &F, &H, &W);
    double flops = w22_decode_flops(c, 31, 44, 78);

    printf("file:        %s\n", path);
    printf("config:      z_dim %d, base_dim %d, dim_mult [%d, %d, %d, %d], num_res_blocks %d, temporal_up [%d, %d, "
           "%d], out_channels %d, patch_size %d%s\n", c->z_dim, c->base_dim, c->dim_mult[0], c->dim_mult[1],
           c->dim_mult[2], c->dim_mult[3], c->num_res_blocks, c->temporal_up[0], c->temporal_up[1],
           c->temporal_up[2], c->out_channels, c->patch_size,
           w22_config_equal(c, &def) ? " (Wan2.2 TI2V-5B)" : " (a narrow variant)");
    printf("tensors:     %d used by the decoder", w->model.nweights);
    if (file_tensors >= 0) printf(" (of %d in the file)", file_tensors);
    printf("\ndtypes:      %s\n", dtypes);
    printf("parameters:  %lld\n", (long long)params);
    printf("bytes:       %lld (%.3f GB)\n", (long long)bytes, bytes / 1e9);
    printf("prefix:      '%s'\n", prefix);
    printf("FLOPs:       %.4g (%.2f TFLOP) to decode T=31 latent frames of 44x78 into %d frames of %dx%d\n", flops,
           flops / 1e12, F, W, H);
    w22_weights_free(w);
    return 0;
}
