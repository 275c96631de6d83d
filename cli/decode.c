/* `wan22vae decode`: weights + latents -> video. The output is checked first (a bad --out, an extension or codec
 * ffmpeg refuses, or no ffmpeg, fails before any work), then the device, then the inputs; the latents and the
 * weights load (a file, a sharded index or a diffusers folder, with its config.json), a pipeline's normalized
 * latents are de-normalized, the decoder streams finished frames into the writer chosen by the output's
 * extension (with --bands, a band decode, into a whole video in host memory first: a frame is whole only after the
 * last band), and only a complete video is renamed into place: on any failure, or Ctrl-C, SIGTERM, SIGHUP or
 * SIGQUIT, the temporary output is removed and nothing is left at --out. A stream (standard output, a FIFO, a
 * device) is written directly, frames in order. Progress goes to stderr: a line saying what will run, then one per
 * pass and a heartbeat while a pass runs (a CPU pass takes minutes at full size). */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "common.h"
#include "io/io.h"
#include "plan/plan.h"
#include "weights/source.h"
#include "cli.h"

/* The library's latent frames per pass when frames_per_pass is 0 (src/decoder.c), for the first progress line. */
#define DEFAULT_FRAMES_PER_PASS 2

static const char usage[] =
    "usage: wan22vae decode -w WEIGHTS -l LATENTS -o OUT [options]\n"
    "\n"
    "  -w, --weights W        the VAE's weights, Wan2.2 TI2V-5B's or the Wan2.1 VAE's (Wan2.1, Wan2.2 A14B,\n"
    "                         Qwen-Image), told apart by their tensors: a .safetensors file (diffusers names; a\n"
    "                         whole-VAE file too), a\n"
    "                         sharded index (*.safetensors.index.json), a diffusers VAE folder (config.json +\n"
    "                         diffusion_pytorch_model.safetensors), or a pipeline folder holding vae/ (such as a\n"
    "                         download of Wan-AI/Wan2.2-TI2V-5B-Diffusers); a config.json next to the weights\n"
    "                         gives the config, else it is inferred from the tensors\n"
    "      --variant V        in a folder: diffusion_pytorch_model.V.safetensors (e.g. fp16)\n"
    "  -l, --latents Z        latents [1, C, T, h, w] or [C, T, h, w]: .safetensors (tensor 'latents' or the only\n"
    "                         one; F32/BF16/F16), ComfyUI's .latent (Save Latent's 'latent_tensor', read as its\n"
    "                         Load Latent does) or .npy (<f4, <f2); '-' reads them from standard input (a pipe:\n"
    "                         python make_latents.py | wan22vae decode -l - ...), as a FIFO or /dev/fd/N is read,\n"
    "                         the format from the first bytes\n"
    "      --latents-key NAME the safetensors tensor to read (for a file of several tensors)\n"
    "      --latents-normalized\n"
    "                         the latents are a diffusers pipeline's output (pipe(..., output_type=\"latent\")):\n"
    "                         de-normalize them first as the Wan pipeline does before vae.decode, per channel\n"
    "                         z / (1 / latents_std) + latents_mean (= z * std + mean), with latents_mean and\n"
    "                         latents_std from the weights' config.json, else the built-in ones of the weights'\n"
    "                         VAE (Wan2.2 TI2V-5B's 48 channels, the Wan2.1 VAE's 16); without it the latents go\n"
    "                         to the decoder as they are (vae.decode's input)\n"
    "  -o, --out OUT          the video, by its extension:\n"
    "                           .y4m         YUV4MPEG2, 4:4:4 BT.601 limited range; '-' writes it to standard\n"
    "                                        output (for pipes: wan22vae decode ... -o - | ffplay -)\n"
    "                           .mp4 .mkv .webm .mov .gif ...  any container ffmpeg writes (needs ffmpeg):\n"
    "                                        libx264 CRF 18 yuv420p for .mp4/.mkv/.mov/.m4v, libvpx-vp9 CRF 24 for\n"
    "                                        .webm (VP8 without it), a palette of the clip for .gif, ffmpeg's own\n"
    "                                        default elsewhere; YUV converted with BT.709 and tagged so (colorspace,\n"
    "                                        primaries and transfer bt709, range tv)\n"
    "                           .npy .safetensors  float32 [1, 3, F, H, W], the decoder's output as is\n"
    "                           DIR/ or DIR  PNG frames frame_00000.png ... (a path ending in '/' or without an\n"
    "                                        extension), encoded on every core (--threads)\n"
    "                         An existing FIFO or device (and /dev/stdout, /dev/fd/N) is written as a stream, in\n"
    "                         order, with no temporary file; a FIFO or /dev/stdout without extension gets .y4m.\n"
    "      --codec C          ffmpeg's video encoder instead of the container's default (libx264, libx265,\n"
    "                         libvpx-vp9, libaom-av1, ffv1, prores_ks, ...)\n"
    "      --crf N            constant quality 0..63 for encoders that have it (lower is better; the default:\n"
    "                         18 for libx264, 20 libx265, 24 libvpx-vp9)\n"
    "      --pix-fmt F        the encoded pixel format (default yuv420p; yuv444p, yuv420p10le, gbrp, ...)\n"
    "      --ffmpeg-args \"A\"  more ffmpeg output options, split as a shell does, after ours (so they win; a\n"
    "                         -vf of yours replaces the BT.709 conversion)\n"
    "      --png-level N      PNG frames' compression, zlib's level 0..9: 0 stores the rows (the fastest, the\n"
    "                         largest), 1 the default (fast), 9 the smallest and slowest; every level gives the\n"
    "                         same pixels (a build without libpng stores them whatever the level)\n"
    "      --fps F            frames per second of .y4m and ffmpeg's formats, 0.01..1000 (default 24)\n"
    "      --device D         cpu (the default), cuda (GPU 0) or cuda:N\n"
    "      --cuda-device N    which GPU for --device cuda (the same as cuda:N)\n"
    "      --frames-per-pass N  latent frames per pass (default 2; the output does not change)\n"
    "      --memory-budget SIZE  the decoder's work memory at most SIZE (on a GPU its memory beyond the weights),\n"
    "                         e.g. 2.5G or 2560M (K, M, G, T: powers of 1024), at least 64M; the same video,\n"
    "                         slower: the causal caches of the later stages go to host memory until the plan\n"
    "                         fits (704x1280 TI2V-5B: 4.6G by default; 2.5G fits, 2.26G the least); a budget\n"
    "                         below what the size needs fails, naming the need and the --bands that fit it.\n"
    "                         Default: none (the fastest plan; out of GPU memory it names both ways out)\n"
    "      --bands N          a band decode: stages 1-3 in N horizontal bands of latent rows, one after another\n"
    "                         (2..64; fewer where the latents have fewer rows; 0 or 1, the default: the whole\n"
    "                         frame): less GPU memory (the Wan2.1 VAE at 1280x720: 3.2G with the weights in 2\n"
    "                         bands, 5.4G whole) at about 1.15-1.2x the time, within bf16 rounding of the whole\n"
    "                         frame; the video is decoded whole into host memory (float32, 12 bytes a pixel of\n"
    "                         every frame), then written\n"
    "      --exact            CUDA: every conv in the direct arithmetic (default: the 3x3x3 convs of 256 channels and\n"
    "                         up as Winograd F(4x4, 3x3) in fp16, ~1.3x their error;\n"
    "                         the CPU is exact)\n"
    "      --kernels K        CUDA: auto (the default: a Hopper's sm_90a kernels, the portable ones on any other\n"
    "                         GPU from sm_80 on) or portable (those on a Hopper too); -v says which ran\n"
    "      --threads N        CPU threads of the decode and of the PNG encoders (default: all cores)\n"
    "  -f, --force            replace an existing output\n"
    "  -v, --verbose          say more on stderr: the weights and config read, the statistics used, the ffmpeg\n"
    "                         command line, and at the end where the time went (open, decode, writing)\n"
    "  -q, --quiet            nothing on stderr but errors\n"
    "      --progress         show progress even when stderr is not a terminal\n"
    "      --progress-interval S  seconds between heartbeat lines while a pass runs (default 1 on a terminal,\n"
    "                         10 otherwise)\n"
    "  -h, --help             this help\n"
    "\n"
    "Progress and messages go to stderr, never to standard output.\n"
    "\n" CLI_EXIT_CODES;

static volatile sig_atomic_t interrupted; /* also the decoder's stop flag (w22_decoder_set_interrupt) */
_Static_assert(sizeof(sig_atomic_t) == sizeof(int), "the stop flag is read by the library as an int");
static struct timespec interrupted_at; /* written by the handler only, with the handled signals blocked in it */
/* What a later signal removes before the process dies, set once the output is open (the handler reads them only
 * when tmp_set): the temporary output (a file, or a PNG folder) and the ffmpeg child. */
static char sig_tmp[PATH_MAX];
static volatile sig_atomic_t sig_tmp_set, sig_tmp_dir, sig_child, sig_tty;
/* Shared between the handler (on whichever thread the signal lands) and the decode's threads: lock-free atomics,
 * async-signal-safe, and no data race for ThreadSanitizer. */
#define LOAD(v) __atomic_load_n((int *)&(v), __ATOMIC_ACQUIRE)
#define STORE(v, x) __atomic_store_n((int *)&(v), (x), __ATOMIC_RELEASE)

static void say(const char *s) { (void)!write(2, s, strlen(s)); } /* write and strlen: async-signal-safe */

static const char *signal_name(int sig) {
    return sig == SIGINT ? "SIGINT (Ctrl-C)" : sig == SIGTERM ? "SIGTERM" : sig == SIGHUP ? "SIGHUP"
           : sig == SIGQUIT ? "SIGQUIT" : "a signal";
}

/* The temporary output and ffmpeg, from the handler: only async-signal-safe calls (a folder's files through
 * getdents64 and unlinkat, then rmdir). */
static void remove_now(void) {
    if (LOAD(sig_child) > 0) kill((pid_t)LOAD(sig_child), SIGKILL);
    if (!LOAD(sig_tmp_set)) return;
    if (!LOAD(sig_tmp_dir)) {
        unlink(sig_tmp);
        return;
    }
    int fd = open(sig_tmp, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    for (int pass = 0; fd >= 0 && pass < 4; pass++) { /* entries removed while read can hide others: read again */
        char buf[8192];
        long n;
        int removed = 0;
        lseek(fd, 0, SEEK_SET);
        while ((n = (long)getdents64(fd, buf, sizeof buf)) > 0)
            for (long off = 0; off < n;) {
                struct dirent64 *e = (struct dirent64 *)(buf + off);
                if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") && unlinkat(fd, e->d_name, 0) == 0) removed++;
                off += e->d_reclen;
            }
        if (!removed) break;
    }
    if (fd >= 0) close(fd);
    rmdir(sig_tmp);
}

/* The first signal asks the decode to stop: said on stderr at once, acted on within a second (the decoder reads
 * the flag between ops and inside its long loops). The same stop often comes twice at once: GNU timeout signals the
 * process and then its process group, a terminal's Ctrl-C reaches every process of a pipeline, and the CLI's ffmpeg
 * child shares the group. A repeat within REPEAT_S of the first is that one stop and is let go; a later one (a user
 * pressing Ctrl-C again) removes the temporary output and ffmpeg, and kills at once. */
#define REPEAT_S 1.0
static void on_signal(int sig) {
    const int saved = errno;
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now); /* async-signal-safe (POSIX) */
    if (!LOAD(interrupted)) {
        interrupted_at = now;
        STORE(interrupted, sig);
        say(LOAD(sig_tty) ? "\r\033[K" : "");
        say("wan22vae: ");
        say(signal_name(sig));
        say(": stopping the decode (within a second); the temporary output will be removed\n");
        errno = saved;
        return;
    }
    if ((double)(now.tv_sec - interrupted_at.tv_sec) + 1e-9 * (double)(now.tv_nsec - interrupted_at.tv_nsec) < REPEAT_S) {
        errno = saved;
        return;
    }
    say("wan22vae: ");
    say(signal_name(sig));
    say(" again: quitting now, the temporary output removed\n");
    remove_now();
    signal(sig, SIG_DFL);
    raise(sig);
}

/* The signals that stop a decode: each sets `interrupted`, the decode stops within a second, and the
 * temporary output is removed. A signal ignored when we started (SIGHUP under nohup; SIGINT and SIGQUIT in a
 * non-interactive shell's background job) stays ignored, as the one who started us asked; SIGTERM is always
 * handled. SIGPIPE is ignored: a reader that goes away is a write error with a message. */
static void catch_signals(void) {
    static const int sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};
    struct sigaction sa, old;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) sigaddset(&sa.sa_mask, sigs[i]); /* one handler at a time */
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) {
        if (sigs[i] != SIGTERM && sigaction(sigs[i], NULL, &old) == 0 && old.sa_handler == SIG_IGN) continue;
        sigaction(sigs[i], &sa, NULL);
    }
    signal(SIGPIPE, SIG_IGN);
}

typedef struct {
    w22_video_writer *vw;
    w22_status write_status;
    char write_msg[2048];
    int frames_done, frames_total, latent_total, latent_done, passes, fpp;
    /* A band decode counts every band's latent frames (exec.c: band x T + t of bands x T): T is one band's, bands
     * what the library's count says it runs (--bands' own count until the first pass) */
    int T, bands;
    int whole; /* into a whole video first (--bands): no frame comes out before the decode's end */
    int show, tty;
    double t0, interval;
    /* the heartbeat thread */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int stop;
    /* The writer thread (issue 30): the decode hands each chunk of frames over (a copy into a ring of RING
     * buffers) and goes on decoding while the writer converts, encodes and writes the chunks, in order. The bytes
     * written are the same as writing in the callback (--write-sync, for tests). Guarded by wmu: */
    int sync_write, writer_on, wstop;
    pthread_t writer;
    pthread_mutex_t wmu;
    pthread_cond_t wcv;
    float *ring[4];
    size_t ring_cap;
    int ring_f0[4], ring_n[4], head, count;
    /* where the time goes (-v): the decode's callbacks copying chunks over and waiting for a free slot, and the
     * writer's time in w22_video_write (issue 30: the writing must hide under the decode) */
    double copy_s, wait_s, write_s;
} decode_ctx;
#define RING 4

static void write_failed(decode_ctx *c, w22_status s) {
    c->write_status = s;
    snprintf(c->write_msg, sizeof c->write_msg, "%s", w22_last_error());
}

static void *writer_main(void *p) {
    decode_ctx *c = p;
    pthread_mutex_lock(&c->wmu);
    for (;;) {
        while (!c->count && !c->wstop) pthread_cond_wait(&c->wcv, &c->wmu);
        if (!c->count) break; /* stopped and drained */
        const int k = c->head;
        pthread_mutex_unlock(&c->wmu);
        const double t0 = w22_now();
        const w22_status s = c->write_status == W22_OK && !LOAD(interrupted) /* stopping: the frames are not wanted */
                                 ? w22_video_write(c->vw, c->ring[k], c->ring_f0[k], c->ring_n[k]) : W22_OK;
        pthread_mutex_lock(&c->wmu);
        c->write_s += w22_now() - t0;
        if (s != W22_OK && c->write_status == W22_OK) write_failed(c, s);
        if (s == W22_OK) {
            pthread_mutex_lock(&c->mu);
            c->frames_done += c->ring_n[k];
            pthread_mutex_unlock(&c->mu);
        }
        c->head = (c->head + 1) % RING;
        c->count--;
        pthread_cond_broadcast(&c->wcv);
    }
    pthread_mutex_unlock(&c->wmu);
    return NULL;
}

/* Waits until the writer has written every chunk handed over, then ends it. */
static void writer_stop(decode_ctx *c) {
    if (!c->writer_on) return;
    if (LOAD(interrupted)) w22_video_cancel(c->vw); /* an ffmpeg that no longer reads must not hold the stop up */
    pthread_mutex_lock(&c->wmu);
    c->wstop = 1;
    pthread_cond_broadcast(&c->wcv);
    pthread_mutex_unlock(&c->wmu);
    pthread_join(c->writer, NULL);
    c->writer_on = 0;
}

static int on_frames(void *user, const float *frames, int frame0, int nframes, int height, int width) {
    decode_ctx *c = user;
    if (LOAD(interrupted)) return 1;
    const size_t n = (size_t)3 * nframes * height * width;
    if (c->sync_write || !c->writer_on || n > c->ring_cap) { /* in the callback (a chunk larger than planned too) */
        if (c->writer_on) writer_stop(c); /* the chunks before it first */
        if (c->write_status != W22_OK) return 1;
        const double t0 = w22_now();
        const w22_status s = w22_video_write(c->vw, frames, frame0, nframes);
        c->write_s += w22_now() - t0;
        if (s != W22_OK) {
            write_failed(c, s);
            return 1;
        }
        pthread_mutex_lock(&c->mu);
        c->frames_done += nframes;
        pthread_mutex_unlock(&c->mu);
        return 0;
    }
    double t0 = w22_now();
    pthread_mutex_lock(&c->wmu);
    while (c->count == RING && c->write_status == W22_OK) pthread_cond_wait(&c->wcv, &c->wmu);
    const int failed = c->write_status != W22_OK;
    int k = -1;
    if (!failed) k = (c->head + c->count) % RING;
    pthread_mutex_unlock(&c->wmu);
    if (failed) return 1;
    const double t1 = w22_now();
    memcpy(c->ring[k], frames, n * sizeof(float)); /* the slot is the decode's until counted in */
    c->wait_s += t1 - t0, c->copy_s += w22_now() - t1; /* only the callbacks, one at a time, write these */
    pthread_mutex_lock(&c->wmu);
    c->ring_f0[k] = frame0, c->ring_n[k] = nframes;
    c->count++;
    pthread_cond_broadcast(&c->wcv);
    pthread_mutex_unlock(&c->wmu);
    return 0;
}

/* Ends the heartbeat thread, if it runs. */
static void heartbeat_stop(decode_ctx *c, pthread_t hb, int *started) {
    if (!*started) return;
    pthread_mutex_lock(&c->mu);
    c->stop = 1;
    pthread_cond_signal(&c->cv);
    pthread_mutex_unlock(&c->mu);
    pthread_join(hb, NULL);
    *started = 0;
}

/* The ring for chunks of up to `frames` video frames of H x W, and the writer thread; without memory or a thread
 * the frames are written in the callback. */
static void writer_start(decode_ctx *c, int frames, int H, int W) {
    if (c->sync_write) return;
    c->ring_cap = (size_t)3 * frames * H * W;
    for (int i = 0; i < RING; i++)
        if (!(c->ring[i] = malloc(c->ring_cap * sizeof(float)))) return;
    c->writer_on = pthread_create(&c->writer, NULL, writer_main, c) == 0;
}

static void clock_text(double s, char *buf, size_t cap) {
    int t = (int)(s + 0.5);
    if (t >= 3600) snprintf(buf, cap, "%d:%02d:%02d", t / 3600, t / 60 % 60, t % 60);
    else snprintf(buf, cap, "%d:%02d", t / 60, t % 60);
}

/* One progress line; the caller holds c->mu. final: the closing line; beat: from the heartbeat (a pass running). */
static void print_progress(decode_ctx *c, int final, int beat) {
    if (LOAD(interrupted)) return; /* the stop was said; a "running" line now would say otherwise */
    double dt = w22_now() - c->t0;
    double fps = dt > 0 ? c->frames_done / dt : 0;
    char tail[64], el[32], eta[32];
    clock_text(dt, el, sizeof el);
    if (final) {
        snprintf(tail, sizeof tail, "took %.1f s", dt);
    } else if (c->frames_done > 0 && c->frames_done < c->frames_total) { /* frames come out within a pass too */
        clock_text(dt / c->frames_done * (c->frames_total - c->frames_done), eta, sizeof eta);
        snprintf(tail, sizeof tail, "elapsed %s, ETA %s", el, eta);
    } else if (c->whole && c->latent_done > 0 && c->latent_done < c->latent_total) {
        /* a band decode's frames come out only after its last band: its ETA from the latent frames */
        clock_text(dt / c->latent_done * (c->latent_total - c->latent_done), eta, sizeof eta);
        snprintf(tail, sizeof tail, "elapsed %s, ETA %s", el, eta);
    } else {
        snprintf(tail, sizeof tail, "elapsed %s, ETA %s", el, c->frames_done ? "0:00" : "--:--");
    }
    /* passes done: a band's passes again for every band before this one */
    const int per_band = (c->T + c->fpp - 1) / c->fpp, band = c->latent_done / c->T;
    const int pass = band * per_band + (c->latent_done % c->T + c->fpp - 1) / c->fpp;
    const int running = !final && pass < c->passes && (beat || c->tty);
    char what[64], of_band[32] = "";
    if (c->bands > 1) /* the band running, or that of the last pass done */
        snprintf(of_band, sizeof of_band, "band %d/%d, ", (running || !c->latent_done ? band : (c->latent_done - 1) /
                 c->T) + 1, c->bands);
    if (running)
        snprintf(what, sizeof what, "%spass %d/%d running", of_band, pass + 1, c->passes);
    else
        snprintf(what, sizeof what, "%spass %d/%d done", of_band, pass, c->passes);
    fprintf(stderr, "%s%s, latent frames %d/%d, video frames %d/%d, %.2f frames/s, %s%s", c->tty ? "\r" : "", what,
            c->latent_done, c->latent_total, c->frames_done, c->frames_total, fps, tail,
            c->tty && !final ? "\033[K" : "\n");
    fflush(stderr);
}

static int on_progress(void *user, int latent_done, int latent_total) {
    decode_ctx *c = user;
    pthread_mutex_lock(&c->mu);
    c->latent_done = latent_done;
    c->latent_total = latent_total;
    if (latent_total != c->bands * c->T && latent_total % c->T == 0) { /* the bands the library runs */
        c->bands = latent_total / c->T;
        c->passes = c->bands * ((c->T + c->fpp - 1) / c->fpp);
    }
    if (c->show) print_progress(c, 0, 0);
    pthread_mutex_unlock(&c->mu);
    return LOAD(interrupted) ? 1 : 0;
}

/* The heartbeat: every interval, the progress line again with the time elapsed, so that a long pass (minutes on
 * the CPU at full size) shows that it runs. */
static void *heartbeat(void *user) {
    decode_ctx *c = user;
    pthread_mutex_lock(&c->mu);
    while (!c->stop) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        double t = ts.tv_sec + ts.tv_nsec * 1e-9 + c->interval;
        ts.tv_sec = (time_t)t;
        ts.tv_nsec = (long)((t - (double)ts.tv_sec) * 1e9);
        int rc = 0;
        while (!c->stop && rc != ETIMEDOUT) rc = pthread_cond_timedwait(&c->cv, &c->mu, &ts);
        if (!c->stop && c->latent_done < c->latent_total) print_progress(c, 0, 1);
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

/* --device: cpu, cuda, cuda:N. */
static int parse_device(const char *s, w22_device *dev, long long *index) {
    if (!strcmp(s, "cpu")) return *dev = W22_DEVICE_CPU, 0;
    if (!strcmp(s, "cuda")) return *dev = W22_DEVICE_CUDA, *index = -1, 0;
    if (!strncmp(s, "cuda:", 5)) {
        char *end;
        errno = 0;
        long long n = strtoll(s + 5, &end, 10);
        if (s[5] >= '0' && s[5] <= '9' && !*end && !errno && n <= 1023) return *dev = W22_DEVICE_CUDA, *index = n, 0;
    }
    return cli_usage_error("decode", "--device: expected cpu, cuda or cuda:N (N a GPU number), found '%s'", s);
}

/* The latents' statistics for --latents-normalized: the config.json's, else the built-in ones of the weights' VAE
 * (TI2V-5B's 48, the Wan2.1 VAE's 16). */
static int pick_stats(const w22_weights_info *info, int zdim, const char *weights_path, const float **mean,
                      const float **std, char *from, size_t cap) {
    if (info->has_config && info->vae.nstats > 0) {
        *mean = info->vae.mean;
        *std = info->vae.std;
        snprintf(from, cap, "latents_mean/latents_std of %s", info->loc.config_json);
        return 0;
    }
    if (info->has_config && info->vae.nstats < 0) {
        fprintf(stderr, "wan22vae: --latents-normalized: %s\n", info->vae.stats_problem);
        return 1;
    }
    if (zdim == W22_WAN21_STATS) {
        *mean = w22_wan21_latents_mean;
        *std = w22_wan21_latents_std;
        snprintf(from, cap, "the Wan2.1 VAE's built-in latents_mean/latents_std (diffusers' AutoencoderKLWan "
                 "defaults, as Wan-AI/Wan2.1-T2V-14B-Diffusers' vae/config.json)");
        return 0;
    }
    if (zdim != W22_WAN22_STATS) {
        fprintf(stderr, "wan22vae: --latents-normalized: the weights %s have z_dim %d, and %s; the built-in "
                "statistics are Wan2.2 TI2V-5B's (%d channels) and the Wan2.1 VAE's (16): expected a config.json next to the weights with "
                "latents_mean and latents_std of %d numbers each\n", weights_path, zdim, info->has_config ?
                "their config.json has no latents_mean/latents_std" : "no config.json is next to them",
                W22_WAN22_STATS, zdim);
        return 1;
    }
    *mean = w22_wan22_latents_mean;
    *std = w22_wan22_latents_std;
    snprintf(from, cap, "Wan2.2 TI2V-5B's built-in latents_mean/latents_std (Wan-AI/Wan2.2-TI2V-5B-Diffusers, "
             "vae/config.json)");
    return 0;
}

/* The bands a band decode of latents of h rows runs for --bands n (plan.c's band_plan: bands of ceil(h / n) rows,
 * no band without rows); 1 for the whole frame. For the first progress line: the library's count corrects it. */
static int band_count(int h, int n) {
    if (n <= 1) return 1;
    const int r = (h + n - 1) / n;
    return (h + r - 1) / r;
}

/* A band decode's video, float32 [1, 3, F, H, W]: the library fills a frame's rows band by band, so no frame is
 * whole before the last band and the decode cannot stream (w22_decode_frames refuses it). NULL after the message. */
static float *whole_video(int F, int H, int W, int bands) {
    const size_t n = (size_t)3 * F * H * W;
    float *v = malloc(n * sizeof *v);
    if (!v)
        fprintf(stderr, "wan22vae: --bands %d: out of host memory for the whole video (%.2f GiB of float32, %d frames "
                "of %dx%d) that a band decode fills before writing it; expected that much free, or --bands 0 (the "
                "whole frame, streamed to the output)\n", bands, n * 4.0 / 1073741824.0, F, W, H);
    return v;
}

/* A band decode's finished video to the writer, frame by frame in order, through the frames callback (the ring and
 * the writer thread, the progress count, a write failure or a signal stopping it). */
static void hand_over(decode_ctx *c, const float *video, int F, int H, int W) {
    const size_t plane = (size_t)H * W;
    float *frame = malloc(3 * plane * sizeof *frame); /* [3][1][H][W]: the callback's NCDHW of one frame */
    if (!frame) {
        c->write_status = W22_ERR_OUT_OF_MEMORY;
        snprintf(c->write_msg, sizeof c->write_msg, "out of host memory for a frame of %dx%d", W, H);
        return;
    }
    for (int f = 0; f < F; f++) {
        for (int ch = 0; ch < 3; ch++)
            memcpy(frame + ch * plane, video + ((size_t)ch * F + f) * plane, plane * sizeof *frame);
        if (on_frames(c, frame, f, 1, H, W)) break; /* a write failed (recorded) or a signal came */
    }
    free(frame);
}

int cli_decode(int argc, char **argv) {
    const double t_start = w22_now(); /* -v's time line: the phases of the process from here */
    const char *weights_path = NULL, *latents_path = NULL, *out = NULL, *device = "cpu", *variant = NULL;
    const char *latents_key = NULL;
    w22_video_options vopt = {NULL, -1, NULL, NULL};
    long long fpp = 0, threads = 0, cuda_device = -1, crf = -1, dev_index = -1, png_level = -1, bands = 0;
    size_t budget = 0;
    double fps = 24, interval = 0;
    int force = 0, progress = 0, verbose = 0, quiet = 0, normalized = 0, sync_write = 0, exact = 0;
    int kernels = W22_KERNELS_AUTO;
    enum { O_CUDA = 256, O_FPP, O_THREADS, O_FPS, O_PROGRESS, O_VARIANT, O_NORM, O_CODEC, O_CRF, O_PIX, O_FFARGS,
           O_INTERVAL, O_DEVICE, O_WRITE_SYNC, O_PNG_LEVEL, O_EXACT, O_KERNELS, O_LKEY, O_BUDGET, O_BANDS };
    static const struct option opts[] = {
        {"weights", required_argument, 0, 'w'},      {"latents", required_argument, 0, 'l'},
        {"out", required_argument, 0, 'o'},          {"device", required_argument, 0, O_DEVICE},
        {"cuda-device", required_argument, 0, O_CUDA}, {"frames-per-pass", required_argument, 0, O_FPP},
        {"threads", required_argument, 0, O_THREADS}, {"fps", required_argument, 0, O_FPS},
        {"force", no_argument, 0, 'f'},              {"progress", no_argument, 0, O_PROGRESS},
        {"verbose", no_argument, 0, 'v'},            {"quiet", no_argument, 0, 'q'},
        {"variant", required_argument, 0, O_VARIANT}, {"latents-normalized", no_argument, 0, O_NORM},
        {"codec", required_argument, 0, O_CODEC},    {"crf", required_argument, 0, O_CRF},
        {"pix-fmt", required_argument, 0, O_PIX},    {"ffmpeg-args", required_argument, 0, O_FFARGS},
        {"progress-interval", required_argument, 0, O_INTERVAL}, {"png-level", required_argument, 0, O_PNG_LEVEL},
        {"exact", no_argument, 0, O_EXACT},          {"kernels", required_argument, 0, O_KERNELS},
        {"latents-key", required_argument, 0, O_LKEY}, {"memory-budget", required_argument, 0, O_BUDGET},
        {"bands", required_argument, 0, O_BANDS},
        {"write-sync", no_argument, 0, O_WRITE_SYNC}, /* hidden: write in the decode's callback (tests' A/B) */
        {"help", no_argument, 0, 'h'},               {0, 0, 0, 0},
    };
    opterr = 0;
    for (int ch; (ch = getopt_long(argc, argv, ":hw:l:o:fvq", opts, NULL)) != -1;) {
        char *end;
        switch (ch) {
        case 'w': weights_path = optarg; break;
        case 'l': latents_path = optarg; break;
        case 'o': out = optarg; break;
        case O_DEVICE: device = optarg; break;
        case O_CUDA: if (cli_int("decode", "--cuda-device", optarg, 0, 1023, &cuda_device)) return 2; break;
        case O_FPP: if (cli_int("decode", "--frames-per-pass", optarg, 1, 1024, &fpp)) return 2; break;
        case O_BUDGET:
            if (cli_size("decode", "--memory-budget", optarg, W22_WORK_RESERVE, &budget)) return 2;
            break;
        case O_THREADS: if (cli_int("decode", "--threads", optarg, 1, 4096, &threads)) return 2; break;
        case O_BANDS: if (cli_int("decode", "--bands", optarg, 0, 64, &bands)) return 2; break; /* the library's */
        case O_CRF: if (cli_int("decode", "--crf", optarg, 0, 63, &crf)) return 2; break;
        case O_PNG_LEVEL: if (cli_int("decode", "--png-level", optarg, 0, 9, &png_level)) return 2; break;
        case O_FPS: {
            int num, den;
            fps = strtod(optarg, &end);
            if (end == optarg || *end || w22_fps_rational(fps, &num, &den) != W22_OK)
                return cli_usage_error("decode", "--fps: expected a number in %g..%g, found '%s'", W22_FPS_MIN,
                                       W22_FPS_MAX, optarg);
            break;
        }
        case O_INTERVAL:
            interval = strtod(optarg, &end);
            if (end == optarg || *end || !(interval >= 0.05 && interval <= 3600))
                return cli_usage_error("decode", "--progress-interval: expected seconds in 0.05..3600, found '%s'",
                                       optarg);
            break;
        case 'f': force = 1; break;
        case O_EXACT: exact = 1; break;
        case O_KERNELS:
            if (!strcmp(optarg, "auto")) kernels = W22_KERNELS_AUTO;
            else if (!strcmp(optarg, "portable")) kernels = W22_KERNELS_PORTABLE;
            else return cli_usage_error("decode", "--kernels: expected auto or portable, found '%s'", optarg);
            break;
        case 'v': verbose = 1; break;
        case 'q': quiet = 1; break;
        case O_PROGRESS: progress = 1; break;
        case O_VARIANT: variant = optarg; break;
        case O_NORM: normalized = 1; break;
        case O_LKEY: latents_key = optarg; break;
        case O_WRITE_SYNC: sync_write = 1; break;
        case O_CODEC: vopt.codec = optarg; break;
        case O_PIX: vopt.pix_fmt = optarg; break;
        case O_FFARGS: vopt.ffmpeg_args = optarg; break;
        case 'h': return fputs(usage, stdout), 0;
        default: return cli_bad_option("decode", argv, optopt);
        }
    }
    vopt.crf = (int)crf;
    if (optind < argc) return cli_usage_error("decode", "unexpected argument '%s'", argv[optind]);
    if (!weights_path || !latents_path || !out)
        return cli_usage_error("decode", "expected --weights, --latents and --out; missing %s",
                               !weights_path ? "--weights" : !latents_path ? "--latents" : "--out");
    if (verbose && quiet) return cli_usage_error("decode", "-v/--verbose and -q/--quiet: expected one of them");
    w22_device dev = W22_DEVICE_CPU;
    if (parse_device(device, &dev, &dev_index)) return 2;
    if (dev == W22_DEVICE_CPU && cuda_device >= 0)
        return cli_usage_error("decode", "--cuda-device %lld: expected --device cuda (the device is cpu)", cuda_device);
    if (dev_index >= 0 && cuda_device >= 0 && dev_index != cuda_device)
        return cli_usage_error("decode", "--device %s and --cuda-device %lld disagree; expected one GPU", device,
                               cuda_device);
    int gpu = (int)(dev_index >= 0 ? dev_index : cuda_device >= 0 ? cuda_device : 0);
    w22_video_format fmt;
    if (w22_video_format_from_path(out, &fmt) != W22_OK)
        return cli_usage_error("decode", "--out %s", w22_last_error());
    if (fmt != W22_VIDEO_FFMPEG && (vopt.codec || vopt.crf >= 0 || vopt.pix_fmt || vopt.ffmpeg_args))
        return cli_usage_error("decode", "%s is for outputs written through ffmpeg (.mp4, .mkv, .webm, .mov, .gif, "
                               "...); --out %s is %s", vopt.codec ? "--codec" : vopt.crf >= 0 ? "--crf" :
                               vopt.pix_fmt ? "--pix-fmt" : "--ffmpeg-args", out, w22_video_format_name(fmt));
    if (fmt != W22_VIDEO_PNG_DIR && png_level >= 0)
        return cli_usage_error("decode", "--png-level is for PNG frames (a folder: a path ending in '/' or without "
                               "an extension); --out %s is %s", out, w22_video_format_name(fmt));
    if (vopt.ffmpeg_args) {
        int n;
        char **words;
        if (w22_split_args(vopt.ffmpeg_args, &n, &words) != W22_OK)
            return cli_usage_error("decode", "--ffmpeg-args %s", w22_last_error());
        w22_free_args(n, words);
    }
    const char *out_name = w22_output_name(out);

    /* The output first: a typo in --out, or no ffmpeg, should not cost a weight load. */
    if (!strcmp(out, "-") && isatty(1)) {
        fprintf(stderr, "wan22vae: --out -: standard output is a terminal; expected a pipe or a file (wan22vae "
                "decode ... -o - | ffplay -, or -o - > clip.y4m)\n");
        return 1;
    }
    w22_status os = w22_video_check(out, fmt, force);
    if (os != W22_OK) {
        cli_fail("output");
        if (os == W22_ERR_EXISTS && !force) fprintf(stderr, "(--force replaces it)\n");
        return 1;
    }
    if (fmt == W22_VIDEO_FFMPEG) { /* the extension, the codec and the options, on one test frame */
        os = w22_ffmpeg_check(out, &vopt);
        if (os == W22_ERR_INVALID_ARG) return cli_usage_error("decode", "--out %s", w22_last_error());
        if (os != W22_OK) return cli_fail("output");
    }
    if (dev == W22_DEVICE_CUDA) {
        char why[512];
        if (!cli_cuda_usable(gpu, why, sizeof why)) {
            fprintf(stderr, "wan22vae: --device %s: no usable CUDA GPU: %s; --device cpu decodes on the CPU\n",
                    device, why);
            return 1;
        }
        if (verbose) fprintf(stderr, "wan22vae: device: %s\n", why);
    }
    /* Where the weights are (a file, an index, a folder), and inputs that are not regular files (a FIFO would hang
     * the load), before either loads. */
    const double t_checked = w22_now();
    w22_weights_location loc;
    if (w22_weights_locate(weights_path, variant, &loc) != W22_OK) return cli_fail("loading weights %s", weights_path);
    if (!w22_input_is_stream(latents_path) && w22_input_check(latents_path, "latents") != W22_OK)
        return cli_fail("loading latents %s", latents_path);

    int rc = 1, info_loaded = 0, hb_started = 0;
    w22_weights *weights = NULL;
    w22_weights_info info;
    w22_decoder *dec = NULL;
    float *z = NULL, *video = NULL; /* video: a band decode's, whole */
    decode_ctx c;
    memset(&c, 0, sizeof c);
    pthread_mutex_init(&c.mu, NULL);
    pthread_cond_init(&c.cv, NULL);
    pthread_mutex_init(&c.wmu, NULL);
    pthread_cond_init(&c.wcv, NULL);
    c.sync_write = sync_write;
    pthread_t hb = (pthread_t)0; /* read only once started (hb_started) */
    int T, h, w, zdim;
    /* the latents first: small, and a bad file should not wait for the weights */
    if (w22_io_load_latents_key(latents_path, latents_key, &z, &T, &h, &w, &zdim) != W22_OK) {
        cli_fail("loading latents %s", latents_path);
        goto done;
    }
    if (w22_check_latent_size(zdim, T, h, w) != W22_OK) { /* before the weights' load, not after (issue 47) */
        cli_fail("latents %s", latents_path);
        goto done;
    }
    const double t_latents = w22_now();
    if (w22_weights_open_path(weights_path, variant, &weights, &info) != W22_OK) {
        cli_fail("loading weights %s", weights_path);
        goto done;
    }
    info_loaded = 1;
    const double t_weights = w22_now();
    const w22_config *cfg = w22_weights_config(weights);
    if (verbose) {
        fprintf(stderr, "wan22vae: weights: %s (%s; %d tensors), config from %s: %s, z_dim %d, base_dim %d\n",
                info.loc.found, info.loc.is_index ? "a sharded index" : "a safetensors file", info.file_tensors,
                info.has_config ? info.loc.config_json : "the file",
                cfg->is_residual ? "Wan2.2 TI2V-5B" : "the Wan2.1 VAE", cfg->z_dim, cfg->base_dim);
        fprintf(stderr, "wan22vae: latents: %s [1, %d, %d, %d, %d]\n", latents_path, zdim, T, h, w);
    }
    if (zdim != cfg->z_dim) {
        fprintf(stderr, "wan22vae: latents %s: expected %d channels (the z_dim of the weights %s), found %d "
                "(shape [1, %d, %d, %d, %d])\n", latents_path, cfg->z_dim, weights_path, zdim, zdim, T, h, w);
        goto done;
    }
    if (normalized) {
        const float *mean, *std;
        char from[PATH_MAX + 64];
        if (pick_stats(&info, zdim, weights_path, &mean, &std, from, sizeof from)) goto done;
        w22_latents_denormalize(z, zdim, (size_t)T * h * w, mean, std);
        if (verbose) fprintf(stderr, "wan22vae: latents de-normalized (z * std + mean) with %s\n", from);
    }
    int F, H, W;
    w22_video_shape(cfg, T, h, w, &F, &H, &W);

    w22_decoder_params p;
    w22_decoder_params_init(&p);
    p.device = dev;
    p.cuda_device = gpu;
    p.frames_per_pass = (int)fpp;
    p.work_budget_bytes = budget;
    p.bands = (int)bands;
    p.exact = exact;
    p.kernels = kernels;
    p.threads = (int)threads;
    p.progress = on_progress;
    p.progress_user = &c;
    if (w22_decoder_open(weights, &p, &dec) != W22_OK) {
        cli_fail("opening the %s decoder", device);
        goto done;
    }
    w22_decoder_set_interrupt(dec, (const volatile int *)&interrupted); /* a signal stops it within a second */
    w22_weights_free(weights); /* the decoder holds its own copy in its layout */
    weights = NULL;
    const double t_open = w22_now();
    if (verbose && dev == W22_DEVICE_CUDA) fprintf(stderr, "wan22vae: kernels: %s\n", w22_decoder_path(dec));
    if (bands > 1 && !(video = whole_video(F, H, W, (int)bands))) goto done; /* before the output exists */

    catch_signals(); /* before the temporary output exists, so that no signal can leave it behind */
    if (w22_video_open_opts(out, fmt, F, H, W, fps, force, &vopt, &c.vw) != W22_OK) {
        cli_fail("opening the output");
        goto done;
    }
    { /* for a later signal's handler: what to remove before the process dies */
        int is_dir;
        const char *t = w22_video_temporary(c.vw, &is_dir);
        if (t && strlen(t) < sizeof sig_tmp) {
            memcpy(sig_tmp, t, strlen(t) + 1);
            STORE(sig_tmp_dir, is_dir);
            STORE(sig_tmp_set, 1); /* after the path: the handler reads it only once this is set */
        }
        STORE(sig_child, w22_video_child(c.vw));
    }
    /* the PNG encoders: as many threads as the decode's (every core by default) */
    if (w22_video_set_png(c.vw, (int)png_level, (int)threads) != W22_OK) {
        cli_fail("opening the output");
        goto done;
    }
    if (verbose && w22_video_command(c.vw)) fprintf(stderr, "wan22vae: ffmpeg: %s\n", w22_video_command(c.vw));
    c.frames_total = F;
    c.latent_total = T;
    c.fpp = fpp ? (int)fpp : DEFAULT_FRAMES_PER_PASS;
    c.T = T;
    c.whole = video != NULL;
    c.bands = band_count(h, (int)bands);
    c.passes = c.bands * ((T + c.fpp - 1) / c.fpp);
    c.tty = isatty(2);
    STORE(sig_tty, c.tty);
    c.show = !quiet && (progress || c.tty);
    c.interval = interval > 0 ? interval : c.tty ? 1 : 10;
    c.t0 = w22_now();
    if (c.show) {
        int nthreads = threads ? (int)threads : w22_num_cores();
        char where[64];
        if (dev == W22_DEVICE_CPU) snprintf(where, sizeof where, "the CPU (%d thread%s)", nthreads, nthreads == 1 ? "" : "s");
        else snprintf(where, sizeof where, "cuda:%d", gpu);
        /* sizes as width x height everywhere the CLI prints them, as video tools do */
        char in_bands[96] = "";
        if (c.bands > 1)
            snprintf(in_bands, sizeof in_bands, " in %d bands of latent rows (the video written after the last)",
                     c.bands);
        fprintf(stderr, "wan22vae: decoding %d latent frame%s of %dx%d into %d frame%s of %dx%d (width x height) on "
                "%s%s: %d pass%s of %d latent frame%s\n", T, T == 1 ? "" : "s", w, h, F, F == 1 ? "" : "s", W, H,
                where, in_bands, c.passes, c.passes == 1 ? "" : "es", c.fpp, c.fpp == 1 ? "" : "s");
        hb_started = pthread_create(&hb, NULL, heartbeat, &c) == 0;
    }

    writer_start(&c, 1, H, W); /* one video frame a delivery: the last stage's chunk */
    const double t_decode = w22_now();
    w22_status s = W22_OK; /* a signal before the decode: none */
    if (!LOAD(interrupted))
        s = video ? w22_decode(dec, z, W22_DTYPE_F32, T, h, w, video, W22_DTYPE_F32)
                  : w22_decode_frames(dec, z, W22_DTYPE_F32, T, h, w, on_frames, &c);
    const double t_decoded = w22_now();
    if (video && s == W22_OK) hand_over(&c, video, F, H, W); /* to the writer, as the frames callback would */
    writer_stop(&c); /* every chunk handed over is written (or the first failure recorded) */
    const double t_written = w22_now();
    heartbeat_stop(&c, hb, &hb_started);
    if (c.show && c.tty && s != W22_OK && !LOAD(interrupted)) fputc('\n', stderr); /* end the progress line before a message */
    int stream = w22_output_is_stream(out);
    if (LOAD(interrupted)) {
        fprintf(stderr, "wan22vae: decoding: interrupted by signal %d; %s\n", LOAD(interrupted),
                stream ? "the stream ends short" : "no output written");
        goto done;
    }
    if (c.write_status != W22_OK) {
        fprintf(stderr, "wan22vae: writing the video: %s\n", c.write_msg);
        goto done;
    }
    if (s != W22_OK) {
        cli_fail("decoding %d latent frame%s of %dx%d (width x height) on %s", T, T == 1 ? "" : "s", w, h, device);
        goto done;
    }
    w22_video_writer *vw = c.vw;
    c.vw = NULL; /* finish frees it, also on failure */
    const w22_status fs = w22_video_finish(vw);
    STORE(sig_tmp_set, 0), STORE(sig_child, 0); /* renamed or removed, and ffmpeg reaped: nothing for a handler to remove */
    if (fs != W22_OK) {
        cli_fail("finishing %s", out_name);
        goto done;
    }
    if (verbose) /* where the time went: the writing should hide under the decode (issue 30) */
        fprintf(stderr, "wan22vae: time: checks %.2f s, latents %.2f s, weights %.2f s, open %.2f s, output and "
                "threads %.2f s, decode %.2f s (of it: frames copied to the writer %.2f s, waiting for its buffers "
                "%.2f s), the writer's last frames %.2f s, finishing the output %.2f s; the writer busy %.2f s\n",
                t_checked - t_start, t_latents - t_checked, t_weights - t_latents, t_open - t_weights,
                t_decode - t_open, t_decoded - t_decode, c.copy_s, c.wait_s, t_written - t_decoded,
                w22_now() - t_written, c.write_s);
    if (verbose && budget) { /* what the budget made the plan do (plan.h's host_spec) */
        size_t need = 0;
        (void)w22_plan_work_bytes(dec, h, w, dec->host_spec, &need);
        fprintf(stderr, "wan22vae: memory budget %.3f GiB: work %.3f GiB, %d of %d causal caches (of stages%s%s%s%s%s) "
                "in host memory (%.3f GiB)\n", budget / 1073741824.0, need / 1073741824.0, dec->host_count,
                dec->host_total,
                dec->host_stages & 1 ? " 0" : "", dec->host_stages & 2 ? " 1" : "", dec->host_stages & 4 ? " 2" : "",
                dec->host_stages & 8 ? " 3" : "", dec->host_stages ? "" : " none", dec->host_cache_bytes / 1073741824.0);
    }
    if (c.show) print_progress(&c, 1, 0);
    if (!quiet)
        fprintf(stderr, "wan22vae: wrote %s: %d frame%s of %dx%d (%s)\n", out_name, F, F == 1 ? "" : "s", W, H,
                fmt == W22_VIDEO_FFMPEG ? strrchr(out, '.') + 1 : w22_video_format_name(fmt));
    rc = 0;
done:
    heartbeat_stop(&c, hb, &hb_started);
    w22_video_abort(c.vw); /* removes the temporary output; NULL when finished or never opened */
    STORE(sig_tmp_set, 0), STORE(sig_child, 0);
    w22_decoder_free(dec);
    w22_weights_free(weights);
    if (info_loaded) w22_weights_info_free(&info);
    free(z);
    free(video);
    writer_stop(&c);
    for (int i = 0; i < RING; i++) free(c.ring[i]);
    pthread_cond_destroy(&c.wcv);
    pthread_mutex_destroy(&c.wmu);
    pthread_cond_destroy(&c.cv);
    pthread_mutex_destroy(&c.mu);
    return rc;
}
