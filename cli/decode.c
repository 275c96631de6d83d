/* `wan22vae decode`: weights + latents -> video. The output is checked first (a bad --out, or no ffmpeg for .mp4,
 * fails before any work), then the inputs (regular files), then the latents and the weights load, the decoder
 * streams finished frames into the writer chosen by the output's extension, and only a complete video is renamed
 * into place: on any failure, or Ctrl-C, SIGTERM, SIGHUP or SIGQUIT, the temporary output is removed and nothing
 * is left at --out. */
#define _GNU_SOURCE
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "common.h"
#include "io/io.h"
#include "cli.h"

static const char usage[] =
    "usage: wan22vae decode --weights W.safetensors --latents Z --out OUT [options]\n"
    "\n"
    "  --weights W          the VAE's weights (diffusers names; the decoder's config is inferred)\n"
    "  --latents Z          latents [1, C, T, h, w] or [C, T, h, w]: .safetensors (tensor 'latents' or the only\n"
    "                       one; F32/BF16/F16) or .npy (<f4, <f2)\n"
    "  --out OUT            .y4m (4:4:4, BT.601), .mp4 (needs ffmpeg), .npy or .safetensors (float32\n"
    "                       [1, 3, F, H, W]), or a directory of PNG frames (ending in '/' or without extension)\n"
    "  --device cpu|cuda    where to decode (default cpu)\n"
    "  --cuda-device N      which GPU (default 0)\n"
    "  --frames-per-pass N  latent frames per pass (default: the library's; the output does not change)\n"
    "  --threads N          CPU threads (default: all cores)\n"
    "  --fps F              frames per second of .y4m/.mp4, 0.01..1000 (default 24)\n"
    "  --force              replace an existing output\n"
    "  --progress           show progress even when stderr is not a terminal\n";

static volatile sig_atomic_t interrupted;
static void on_signal(int sig) { interrupted = sig; }

/* The signals that stop a decode: each sets `interrupted`, the decode stops at its next callback, and the
 * temporary output is removed. A signal ignored when we started (SIGHUP under nohup; SIGINT and SIGQUIT in a
 * non-interactive shell's background job) stays ignored, as the one who started us asked; SIGTERM is always
 * handled. */
static void catch_signals(void) {
    static const int sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};
    struct sigaction sa, old;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sa.sa_flags = (int)SA_RESETHAND; /* a second one kills at once */
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) {
        if (sigs[i] != SIGTERM && sigaction(sigs[i], NULL, &old) == 0 && old.sa_handler == SIG_IGN) continue;
        sigaction(sigs[i], &sa, NULL);
    }
}

typedef struct {
    w22_video_writer *vw;
    w22_status write_status;
    char write_msg[2048];
    int frames_done, frames_total, latent_total, latent_done;
    int show, tty;
    double t0;
} decode_ctx;

static int on_frames(void *user, const float *frames, int frame0, int nframes, int height, int width) {
    decode_ctx *c = user;
    if (interrupted) return 1;
    w22_status s = w22_video_write(c->vw, frames, frame0, nframes);
    if (s != W22_OK) {
        c->write_status = s;
        snprintf(c->write_msg, sizeof c->write_msg, "%s", w22_last_error());
        return 1;
    }
    c->frames_done += nframes;
    return 0;
}

static void print_progress(decode_ctx *c, int final) {
    double dt = w22_now() - c->t0;
    double fps = dt > 0 ? c->frames_done / dt : 0;
    char tail[48];
    if (final) {
        snprintf(tail, sizeof tail, "took %.1f s", dt);
    } else if (c->latent_done > 0 && c->latent_done < c->latent_total) {
        int s = (int)(dt / c->latent_done * (c->latent_total - c->latent_done) + 0.5);
        snprintf(tail, sizeof tail, "ETA %d:%02d", s / 60, s % 60);
    } else {
        snprintf(tail, sizeof tail, "ETA %s", c->latent_done ? "0:00" : "--:--");
    }
    fprintf(stderr, "%slatent frames %d/%d, video frames %d/%d, %.2f frames/s, %s%s", c->tty ? "\r" : "",
            c->latent_done, c->latent_total, c->frames_done, c->frames_total, fps, tail,
            c->tty && !final ? "\033[K" : "\n");
    fflush(stderr);
}

static int on_progress(void *user, int latent_done, int latent_total) {
    decode_ctx *c = user;
    c->latent_done = latent_done;
    c->latent_total = latent_total;
    if (c->show) print_progress(c, 0);
    return interrupted ? 1 : 0;
}

int cli_decode(int argc, char **argv) {
    const char *weights_path = NULL, *latents_path = NULL, *out = NULL, *device = "cpu";
    long long fpp = 0, threads = 0, cuda_device = 0;
    double fps = 24;
    int force = 0, progress = 0;
    static const struct option opts[] = {
        {"weights", required_argument, 0, 'w'}, {"latents", required_argument, 0, 'l'},
        {"out", required_argument, 0, 'o'},     {"device", required_argument, 0, 'd'},
        {"cuda-device", required_argument, 0, 'g'}, {"frames-per-pass", required_argument, 0, 'n'},
        {"threads", required_argument, 0, 't'}, {"fps", required_argument, 0, 'r'},
        {"force", no_argument, 0, 'f'},         {"progress", no_argument, 0, 'p'},
        {"help", no_argument, 0, 'h'},          {0, 0, 0, 0},
    };
    opterr = 0;
    for (int ch; (ch = getopt_long(argc, argv, ":h", opts, NULL)) != -1;) {
        char *end;
        switch (ch) {
        case 'w': weights_path = optarg; break;
        case 'l': latents_path = optarg; break;
        case 'o': out = optarg; break;
        case 'd': device = optarg; break;
        case 'g': if (cli_int("decode", "--cuda-device", optarg, 0, 1023, &cuda_device)) return 2; break;
        case 'n': if (cli_int("decode", "--frames-per-pass", optarg, 1, 1 << 20, &fpp)) return 2; break;
        case 't': if (cli_int("decode", "--threads", optarg, 1, 4096, &threads)) return 2; break;
        case 'r': {
            int num, den;
            fps = strtod(optarg, &end);
            if (end == optarg || *end || w22_fps_rational(fps, &num, &den) != W22_OK)
                return cli_usage_error("decode", "--fps: expected a number in %g..%g, found '%s'", W22_FPS_MIN,
                                       W22_FPS_MAX, optarg);
            break;
        }
        case 'f': force = 1; break;
        case 'p': progress = 1; break;
        case 'h': return fputs(usage, stdout), 0;
        default: return cli_bad_option("decode", argv, optopt);
        }
    }
    if (optind < argc) return cli_usage_error("decode", "unexpected argument '%s'", argv[optind]);
    if (!weights_path || !latents_path || !out)
        return cli_usage_error("decode", "expected --weights, --latents and --out; missing %s",
                               !weights_path ? "--weights" : !latents_path ? "--latents" : "--out");
    w22_device dev;
    if (!strcmp(device, "cpu")) dev = W22_DEVICE_CPU;
    else if (!strcmp(device, "cuda")) dev = W22_DEVICE_CUDA;
    else return cli_usage_error("decode", "--device: expected cpu or cuda, found '%s'", device);
    w22_video_format fmt;
    if (w22_video_format_from_path(out, &fmt) != W22_OK)
        return cli_usage_error("decode", "--out %s", w22_last_error());

    /* The output first: a typo in --out, or no ffmpeg for .mp4, should not cost a weight load. */
    w22_status os = w22_video_check(out, fmt, force);
    if (os != W22_OK) {
        cli_fail("output");
        if (os == W22_ERR_EXISTS && !force) fprintf(stderr, "(--force replaces it)\n");
        return 1;
    }
    /* Inputs that are not regular files (a FIFO would hang the load) are refused before either loads. */
    if (w22_input_check(weights_path, "weights") != W22_OK) return cli_fail("loading weights %s", weights_path);
    if (w22_input_check(latents_path, "latents") != W22_OK) return cli_fail("loading latents %s", latents_path);

    int rc = 1;
    w22_weights *weights = NULL;
    w22_decoder *dec = NULL;
    float *z = NULL;
    decode_ctx c = {0};
    int T, h, w, zdim;
    /* the latents first: small, and a bad file should not wait for the weights */
    if (w22_io_load_latents(latents_path, &z, &T, &h, &w, &zdim) != W22_OK) {
        cli_fail("loading latents %s", latents_path);
        goto done;
    }
    if (w22_weights_load(weights_path, NULL, &weights) != W22_OK) {
        cli_fail("loading weights %s", weights_path);
        goto done;
    }
    const w22_config *cfg = w22_weights_config(weights);
    if (zdim != cfg->z_dim) {
        fprintf(stderr, "wan22vae: latents %s: expected %d channels (the z_dim of the weights %s), found %d "
                "(shape [1, %d, %d, %d, %d])\n", latents_path, cfg->z_dim, weights_path, zdim, zdim, T, h, w);
        goto done;
    }
    int F, H, W;
    w22_video_shape(cfg, T, h, w, &F, &H, &W);

    w22_decoder_params p;
    w22_decoder_params_init(&p);
    p.device = dev;
    p.cuda_device = (int)cuda_device;
    p.frames_per_pass = (int)fpp;
    p.threads = (int)threads;
    p.progress = on_progress;
    p.progress_user = &c;
    if (w22_decoder_open(weights, &p, &dec) != W22_OK) {
        cli_fail("opening the %s decoder", device);
        goto done;
    }
    w22_weights_free(weights); /* the decoder holds its own copy in its layout */
    weights = NULL;

    catch_signals(); /* before the temporary output exists, so that no signal can leave it behind */
    if (w22_video_open(out, fmt, F, H, W, fps, force, &c.vw) != W22_OK) {
        cli_fail("opening the output");
        goto done;
    }
    c.frames_total = F;
    c.latent_total = T;
    c.tty = isatty(2);
    c.show = progress || c.tty;
    c.t0 = w22_now();

    w22_status s = interrupted ? W22_OK : w22_decode_frames(dec, z, W22_DTYPE_F32, T, h, w, on_frames, &c);
    if (c.show && c.tty && s != W22_OK) fputc('\n', stderr); /* end the progress line before a message */
    if (c.write_status != W22_OK) {
        fprintf(stderr, "wan22vae: writing %s: %s\n", out, c.write_msg);
        goto done;
    }
    if (interrupted) {
        fprintf(stderr, "wan22vae: decoding: interrupted by signal %d; no output written\n", (int)interrupted);
        goto done;
    }
    if (s != W22_OK) {
        cli_fail("decoding %d latent frames of %dx%d on %s", T, h, w, device);
        goto done;
    }
    w22_video_writer *vw = c.vw;
    c.vw = NULL; /* finish frees it, also on failure */
    if (w22_video_finish(vw) != W22_OK) {
        cli_fail("finishing %s", out);
        goto done;
    }
    if (c.show) print_progress(&c, 1);
    fprintf(stderr, "wan22vae: wrote %s: %d frames of %dx%d (%s)\n", out, F, W, H, w22_video_format_name(fmt));
    rc = 0;
done:
    w22_video_abort(c.vw); /* removes the temporary output; NULL when finished or never opened */
    w22_decoder_free(dec);
    w22_weights_free(weights);
    free(z);
    return rc;
}
