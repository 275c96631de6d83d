/* Video in any container ffmpeg writes (.mp4, .mkv, .webm, .mov, .gif, .avi, ...), through an installed ffmpeg:
 * raw rgb24 frames (w22_pixel_u8) go to ffmpeg's stdin, ffmpeg encodes them into the temporary file, whose name
 * keeps the output's extension so that ffmpeg picks the container by it (or into the output itself when it is a
 * stream: a FIFO, a device). Each container gets a sensible default (container_of): H.264 (libx264, CRF 18,
 * yuv420p; MPEG-4 part 2 where this ffmpeg has no libx264) for .mp4/.m4v/.mov/.mkv, VP9 (libvpx-vp9, CRF 24; VP8
 * without it) for .webm, a palette of the whole clip for .gif, ffmpeg's own choice elsewhere; the codec, its CRF,
 * the pixel format and raw output options (w22_video_options) override them. YUV output is converted from RGB with
 * the BT.709 matrix in limited range and tagged so (colorspace, primaries, transfer, range: bt709, tv).
 * $W22_FFMPEG names another ffmpeg.
 * The pipe is a Unix socket pair so that writing after ffmpeg died is an EPIPE error (send MSG_NOSIGNAL), not a
 * SIGPIPE that kills the caller; ffmpeg runs through posix_spawn, safe in a threaded process. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "common.h"
#include "io/video_impl.h"

extern char **environ;

/* ---- an argument vector of owned strings ---- */

typedef struct {
    char **v;
    int n, cap;
    int oom;
} argvec;

static void av_push(argvec *a, const char *s) {
    if (a->oom) return;
    if (a->n + 2 > a->cap) {
        int cap = a->cap ? 2 * a->cap : 64;
        char **v = realloc(a->v, (size_t)cap * sizeof *v);
        if (!v) { a->oom = 1; return; }
        a->v = v;
        a->cap = cap;
    }
    if (!(a->v[a->n] = strdup(s))) { a->oom = 1; return; }
    a->v[++a->n] = NULL;
}

static void av_free(argvec *a) {
    for (int i = 0; i < a->n; i++) free(a->v[i]);
    free(a->v);
    memset(a, 0, sizeof *a);
}

/* ---- splitting --ffmpeg-args like a shell ---- */

w22_status w22_split_args(const char *s, int *argc, char ***argv) {
    *argc = 0;
    *argv = NULL;
    argvec a = {0};
    size_t n = s ? strlen(s) : 0;
    char *word = malloc(n + 1);
    if (!word) return w22_fail(W22_ERR_OUT_OF_MEMORY, "out of memory splitting '%.100s'", s);
    size_t i = 0;
    while (s && i < n) {
        while (i < n && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n')) i++;
        if (i >= n) break;
        size_t k = 0;
        char quote = 0;
        for (; i < n; i++) {
            char c = s[i];
            if (quote == '\'') {
                if (c == '\'') quote = 0;
                else word[k++] = c;
            } else if (quote == '"') {
                if (c == '"') quote = 0;
                else if (c == '\\' && i + 1 < n && (s[i + 1] == '"' || s[i + 1] == '\\')) word[k++] = s[++i];
                else word[k++] = c;
            } else if (c == '\'' || c == '"') {
                quote = c;
            } else if (c == '\\' && i + 1 < n) {
                word[k++] = s[++i];
            } else if (c == ' ' || c == '\t' || c == '\n') {
                break;
            } else {
                word[k++] = c;
            }
        }
        if (quote) {
            free(word);
            av_free(&a);
            return w22_fail(W22_ERR_INVALID_ARG, "'%.200s': a %s quote is not closed; expected options as a shell "
                            "splits them", s, quote == '"' ? "double" : "single");
        }
        word[k] = 0;
        av_push(&a, word);
    }
    free(word);
    if (a.oom) {
        av_free(&a);
        return w22_fail(W22_ERR_OUT_OF_MEMORY, "out of memory splitting '%.100s'", s);
    }
    *argc = a.n;
    *argv = a.v;
    return W22_OK;
}

void w22_free_args(int argc, char **argv) {
    for (int i = 0; i < argc; i++) free(argv[i]);
    free(argv);
}

/* ---- finding and running ffmpeg ---- */

/* An executable regular file (a directory named ffmpeg on PATH passes access(X_OK) but cannot run). */
static int is_exe(const char *exe) {
    struct stat st;
    return access(exe, X_OK) == 0 && stat(exe, &st) == 0 && S_ISREG(st.st_mode);
}

static int find_ffmpeg(char *exe, size_t cap) {
    const char *env = getenv("W22_FFMPEG");
    if (env && *env) {
        snprintf(exe, cap, "%s", env);
        return is_exe(exe);
    }
    const char *path = getenv("PATH");
    if (!path) path = "/usr/local/bin:/usr/bin:/bin";
    while (*path) {
        const char *end = strchr(path, ':');
        size_t n = end ? (size_t)(end - path) : strlen(path);
        snprintf(exe, cap, "%.*s/ffmpeg", (int)(n ? n : 1), n ? path : ".");
        if (is_exe(exe)) return 1;
        path += n + (end ? 1 : 0);
    }
    return 0;
}

/* The output's extension without the dot ("mp4"), or "" when it has none. */
static const char *extension(const char *path) {
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    const char *dot = strrchr(base, '.');
    return dot && dot != base ? dot + 1 : "";
}

static w22_status no_ffmpeg(const char *path) {
    return w22_fail(W22_ERR_UNSUPPORTED, "%s: writing .%s needs ffmpeg: expected an executable 'ffmpeg' on PATH "
                    "(or $W22_FFMPEG), found none; install ffmpeg, or write .y4m or PNG frames instead", path,
                    extension(path));
}

w22_status w22_ffmpeg_present(const char *path) {
    char exe[4096];
    return find_ffmpeg(exe, sizeof exe) ? W22_OK : no_ffmpeg(path);
}

/* A file name as ffmpeg must get it: ffmpeg reads "proto:rest" as a protocol (file:, pipe:, ...), so any name with
 * a colon would go elsewhere; "file:" + a path that starts with '/' or "./" is always that file. */
static w22_status file_url(const char *path, char *url, size_t cap) {
    if ((size_t)snprintf(url, cap, "file:%s%s", path[0] == '/' ? "" : "./", path) >= cap)
        return w22_fail(W22_ERR_INVALID_ARG, "%s: expected a path of at most %zu characters for ffmpeg", path,
                        cap - 8);
    return W22_OK;
}

/* Runs argv with stdin from in_fd (or /dev/null when -1), stdout to out_fd (or /dev/null), stderr to err_fd; with
 * SIGPIPE at its default, whatever the caller did with it. */
static int spawn(const char *exe, char *const argv[], int in_fd, int out_fd, int err_fd, pid_t *pid) {
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    if (in_fd >= 0) posix_spawn_file_actions_adddup2(&fa, in_fd, 0);
    else posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    if (out_fd >= 0) posix_spawn_file_actions_adddup2(&fa, out_fd, 1);
    else posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, err_fd, 2);
    posix_spawnattr_t at;
    posix_spawnattr_init(&at);
    sigset_t def;
    sigemptyset(&def);
    sigaddset(&def, SIGPIPE);
    posix_spawnattr_setsigdefault(&at, &def);
    posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGDEF);
    int rc = posix_spawn(pid, exe, &fa, &at, argv, environ);
    posix_spawnattr_destroy(&at);
    posix_spawn_file_actions_destroy(&fa);
    return rc;
}

static int wait_child(pid_t pid) {
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR) return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
}

/* `ffmpeg -encoders`, whole (malloc'd; "" when it could not run). */
static char *list_encoders(const char *exe) {
    FILE *out = tmpfile(), *err = tmpfile();
    char *text = NULL;
    pid_t pid;
    char *argv[] = {(char *)exe, "-hide_banner", "-encoders", NULL};
    if (out && err && spawn(exe, argv, -1, fileno(out), fileno(err), &pid) == 0 && wait_child(pid) == 0) {
        long n = fseek(out, 0, SEEK_END) == 0 ? ftell(out) : 0;
        rewind(out);
        if (n > 0 && (text = malloc((size_t)n + 1))) {
            size_t got = fread(text, 1, (size_t)n, out);
            text[got] = 0;
        }
    }
    if (out) fclose(out);
    if (err) fclose(err);
    return text ? text : strdup("");
}

/* Whether the encoder list has `name` (lines " V....D libx264   description"). */
static int has_encoder(const char *list, const char *name) {
    size_t n = strlen(name);
    for (const char *p = list; p && *p;) {
        const char *line = p, *nl = strchr(p, '\n');
        p = nl ? nl + 1 : NULL;
        while (*line == ' ') line++;
        const char *sp = strchr(line, ' ');
        if (!sp || (nl && sp > nl)) continue;
        while (*sp == ' ') sp++;
        if (!strncmp(sp, name, n) && (sp[n] == ' ' || sp[n] == '\n' || sp[n] == 0)) return 1;
    }
    return 0;
}

/* The end of ffmpeg's stderr, for an error message. */
static void stderr_tail(int fd, char *buf, size_t cap) {
    buf[0] = 0;
    off_t end = lseek(fd, 0, SEEK_END);
    if (end <= 0) return;
    off_t start = end > (off_t)cap - 1 ? end - (off_t)cap + 1 : 0;
    ssize_t n = pread(fd, buf, cap - 1, start);
    if (n < 0) n = 0;
    buf[n] = 0;
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r')) buf[--n] = 0;
    for (ssize_t i = 0; i < n; i++)
        if (buf[i] == '\n') buf[i] = ' ';
}

/* ffmpeg can exit 0 having failed to write its output: on a full disk it says "Error writing trailer of X: No space
 * left on device" and "Error closing file X: ..." and exits 0, leaving a truncated file (ffmpeg 5.1, .mkv, .webm and
 * .mp4 alike). So its status is not trusted alone: the first line of its stderr (it runs at -loglevel error) naming
 * a write failure, copied into line, says the file is not whole. Returns 1 when one is found. */
static int stderr_write_error(int fd, char *line, size_t cap) {
    static const char *const marks[] = {"No space left on device", "Disk quota exceeded", "File too large",
                                        "Input/output error", "Error writing trailer", "Error closing file",
                                        "Error submitting a packet to the muxer", "av_interleaved_write_frame",
                                        "Error muxing", "Broken pipe"};
    char buf[65536];
    off_t end = lseek(fd, 0, SEEK_END);
    if (end <= 0) return 0;
    off_t start = end > (off_t)sizeof buf - 1 ? end - (off_t)sizeof buf + 1 : 0; /* the last 64 KB: where the end is */
    ssize_t n = pread(fd, buf, sizeof buf - 1, start);
    if (n <= 0) return 0;
    buf[n] = 0;
    for (size_t i = 0; i < sizeof marks / sizeof marks[0]; i++) {
        const char *m = strstr(buf, marks[i]);
        if (!m) continue;
        const char *b = m, *e = m;
        while (b > buf && b[-1] != '\n' && b[-1] != '\r') b--;
        while (*e && *e != '\n' && *e != '\r') e++;
        snprintf(line, cap, "%.*s", (int)(e - b), b);
        return 1;
    }
    return 0;
}

/* ---- the command line ---- */

typedef struct {
    const char *ext;
    const char *codecs[3]; /* the default: the first one this ffmpeg has */
    int rgb;               /* an RGB/palette format: no YUV conversion, no colour tags */
    int isobmff;           /* .mp4/.mov: moov first (+faststart), or fragments when streamed */
} container;

static const container containers[] = {
    {"mp4", {"libx264", "mpeg4", NULL}, 0, 1},  {"m4v", {"libx264", "mpeg4", NULL}, 0, 1},
    {"mov", {"libx264", "mpeg4", NULL}, 0, 1},  {"mkv", {"libx264", "mpeg4", NULL}, 0, 0},
    {"webm", {"libvpx-vp9", "libvpx", NULL}, 0, 0}, {"gif", {"gif", NULL, NULL}, 1, 0},
    {"apng", {"apng", NULL, NULL}, 1, 0},
};

static const container *container_of(const char *ext) {
    for (size_t i = 0; i < sizeof containers / sizeof containers[0]; i++)
        if (!strcasecmp(ext, containers[i].ext)) return &containers[i];
    return NULL;
}

/* A pixel format without a YUV matrix (RGB, GBR planar, a palette). */
static int rgb_pix_fmt(const char *f) {
    static const char *const pre[] = {"rgb", "bgr", "gbr", "argb", "abgr", "0rgb", "0bgr", "pal8", "x2rgb",
                                      "x2bgr"};
    for (size_t i = 0; i < sizeof pre / sizeof pre[0]; i++)
        if (!strncmp(f, pre[i], strlen(pre[i]))) return 1;
    return 0;
}

/* The codec's constant-quality options: -crf (CRF 18 for H.264, 20 for HEVC, 24 for VP9, 10 for VP8, 28/30 for AV1
 * by default) with the bitrate limits the VPx/AV1 encoders need for it; MPEG-4 part 2 at quantizer 2. */
static void quality_args(argvec *a, const char *codec, int crf) {
    static const struct { const char *codec; int crf; const char *extra[2]; } table[] = {
        {"libx264", 18, {NULL, NULL}},     {"libx264rgb", 18, {NULL, NULL}}, {"libx265", 20, {NULL, NULL}},
        {"libvpx-vp9", 24, {"-b:v", "0"}}, {"libvpx", 10, {"-b:v", "8M"}},   {"libaom-av1", 28, {"-b:v", "0"}},
        {"libsvtav1", 30, {NULL, NULL}},
    };
    char num[16];
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (codec && !strcmp(codec, table[i].codec)) {
            snprintf(num, sizeof num, "%d", crf >= 0 ? crf : table[i].crf);
            av_push(a, "-crf");
            av_push(a, num);
            if (table[i].extra[0]) av_push(a, table[i].extra[0]), av_push(a, table[i].extra[1]);
            return;
        }
    if (crf >= 0) {
        snprintf(num, sizeof num, "%d", crf);
        av_push(a, "-crf");
        av_push(a, num);
    } else if (codec && !strcmp(codec, "mpeg4")) {
        av_push(a, "-q:v");
        av_push(a, "2");
    }
}

/* The whole ffmpeg command: rgb24 frames of width x height at num/den per second on stdin, into url. */
static w22_status build_command(const char *exe, const char *path, int width, int height, int num, int den,
                                int stream, const w22_video_options *o, const char *encoders, const char *url,
                                argvec *a) {
    static const w22_video_options none = {NULL, -1, NULL, NULL};
    if (!o) o = &none;
    const char *ext = extension(path);
    const container *c = container_of(ext);
    const char *codec = o->codec && *o->codec ? o->codec : NULL;
    for (int i = 0; !codec && c && i < 3 && c->codecs[i]; i++)
        if (has_encoder(encoders, c->codecs[i])) codec = c->codecs[i];
    /* gif/apng pass RGB on (a palette, or RGB itself) unless a pixel format is asked for */
    const char *pix = o->pix_fmt && *o->pix_fmt ? o->pix_fmt : c && c->rgb ? NULL : "yuv420p";
    int yuv = pix && !rgb_pix_fmt(pix), full = pix && !strncmp(pix, "yuvj", 4);
    char size[32], rate[32], vf[512] = "";
    snprintf(size, sizeof size, "%dx%d", width, height);
    snprintf(rate, sizeof rate, "%d/%d", num, den);
    size_t k = 0;
    /* 4:2:0 and 4:2:2 need even sizes; an odd one is padded by a row or column (the decoder's sizes are even) */
    if (yuv && ((width | height) & 1))
        k += (size_t)snprintf(vf + k, sizeof vf - k, "pad=ceil(iw/2)*2:ceil(ih/2)*2,");
    if (yuv) /* the conversion itself in BT.709 (swscale's default matrix is BT.601), then the format */
        k += (size_t)snprintf(vf + k, sizeof vf - k, "scale=out_color_matrix=bt709:out_range=%s,format=%s",
                              full ? "pc" : "tv", pix);
    else if (pix)
        k += (size_t)snprintf(vf + k, sizeof vf - k, "format=%s", pix);
    else if (c && !strcmp(c->ext, "gif")) /* one palette for the clip, made from all its frames */
        k += (size_t)snprintf(vf + k, sizeof vf - k, "split[a][b];[a]palettegen[p];[b][p]paletteuse");
    if (k >= sizeof vf) return w22_fail(W22_ERR_INVALID_ARG, "%s: --pix-fmt '%.100s' is too long", path, pix);

    const char *head[] = {exe, "-hide_banner", "-loglevel", "error", "-y", "-f", "rawvideo", "-pix_fmt",
                          "rgb24", "-video_size", size, "-framerate", rate, "-i", "pipe:0"};
    for (size_t i = 0; i < sizeof head / sizeof head[0]; i++) av_push(a, head[i]);
    if (vf[0]) av_push(a, "-vf"), av_push(a, vf);
    if (codec) av_push(a, "-c:v"), av_push(a, codec);
    quality_args(a, codec, o->crf);
    if (pix) av_push(a, "-pix_fmt"), av_push(a, pix);
    if (yuv || pix) { /* BT.709 tags: the matrix (none for RGB), the primaries, the transfer, the range */
        const char *tags[] = {"-colorspace", yuv ? "bt709" : "rgb", "-color_primaries", "bt709", "-color_trc",
                              "bt709", "-color_range", yuv && !full ? "tv" : "pc"};
        for (size_t i = 0; i < 8; i++) av_push(a, tags[i]);
    }
    if (c && c->isobmff) av_push(a, "-movflags"), av_push(a, stream ? "+frag_keyframe+empty_moov" : "+faststart");
    if (o->ffmpeg_args && *o->ffmpeg_args) {
        int n;
        char **extra;
        W22_TRY(w22_split_args(o->ffmpeg_args, &n, &extra));
        for (int i = 0; i < n; i++) av_push(a, extra[i]);
        w22_free_args(n, extra);
    }
    av_push(a, url);
    if (a->oom) return w22_fail(W22_ERR_OUT_OF_MEMORY, "%s: out of memory for ffmpeg's command line", path);
    return W22_OK;
}

/* argv as one line a shell would split back into it. */
static void command_text(char *const *argv, char *buf, size_t cap) {
    size_t k = 0;
    buf[0] = 0;
    for (int i = 0; argv[i] && k + 1 < cap; i++) {
        const char *s = argv[i];
        int plain = *s != 0;
        for (const char *p = s; *p && plain; p++)
            plain = strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-+=./:,@%^", *p) != NULL;
        k += (size_t)snprintf(buf + k, cap - k, "%s%s", i ? " " : "", plain ? s : "'");
        if (!plain) {
            for (const char *p = s; *p && k + 5 < cap; p++) {
                if (*p == '\'') k += (size_t)snprintf(buf + k, cap - k, "'\\''");
                else buf[k++] = *p;
            }
            if (k + 1 < cap) buf[k++] = '\'';
            buf[k < cap ? k : cap - 1] = 0;
        }
        if (k >= cap) k = cap - 1;
    }
}

/* ---- the check before the expensive work: one test frame through the whole command ---- */

w22_status w22_ffmpeg_check(const char *path, const w22_video_options *opts) {
    char exe[4096];
    if (!find_ffmpeg(exe, sizeof exe)) return no_ffmpeg(path);
    const char *ext = extension(path);
    const char *tmpdir = getenv("TMPDIR");
    char dir[PATH_MAX], in[PATH_MAX + 16], out[PATH_MAX + 80], url[PATH_MAX + 96];
    snprintf(dir, sizeof dir, "%s/w22-ffmpeg-XXXXXX", tmpdir && *tmpdir ? tmpdir : "/tmp");
    if (!mkdtemp(dir)) return w22_fail(W22_ERR_IO, "%s: cannot make a folder to try ffmpeg in (%s): %s", path, dir,
                                       strerror(errno));
    snprintf(in, sizeof in, "%s/in.rgb", dir);
    snprintf(out, sizeof out, "%s/trial.%.40s", dir, ext);
    snprintf(url, sizeof url, "file:%s", out);
    enum { S = 64 };
    static unsigned char frame[S * S * 3];
    memset(frame, 0x80, sizeof frame);
    w22_status s = W22_OK;
    int fd = open(in, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0 || write(fd, frame, sizeof frame) != (ssize_t)sizeof frame || lseek(fd, 0, SEEK_SET) != 0)
        s = w22_fail(W22_ERR_IO, "%s: cannot write a test frame for ffmpeg in %s: %s", path, dir, strerror(errno));
    FILE *err = s == W22_OK ? tmpfile() : NULL;
    if (s == W22_OK && !err) s = w22_fail(W22_ERR_IO, "%s: cannot make a temporary file: %s", path, strerror(errno));
    char *encoders = s == W22_OK ? list_encoders(exe) : NULL;
    argvec a = {0};
    if (s == W22_OK) s = build_command(exe, path, S, S, 24, 1, w22_output_is_stream(path), opts, encoders, url, &a);
    if (s == W22_OK) {
        pid_t pid;
        int rc = spawn(exe, a.v, fd, -1, fileno(err), &pid);
        int code = rc == 0 ? wait_child(pid) : -1;
        if (code != 0) {
            char tail[600], cmd[2048];
            stderr_tail(fileno(err), tail, sizeof tail);
            command_text(a.v, cmd, sizeof cmd);
            if (strstr(tail, "Unable to find a suitable output format") ||
                strstr(tail, "Unable to choose an output format"))
                s = w22_fail(W22_ERR_INVALID_ARG, "%s: ffmpeg writes no format for the extension '.%s'; expected "
                             "an output ending in .y4m, .npy, .safetensors, an extension ffmpeg writes (.mp4, .mkv, "
                             ".webm, .mov, .gif, ...), or a folder of PNG frames", path, ext);
            else if (rc != 0)
                s = w22_fail(W22_ERR_IO, "%s: cannot start %s: %s", path, exe, strerror(rc));
            else /* with the caller's options (--codec, --pix-fmt, --crf, --ffmpeg-args) those are what is refused */
                s = w22_fail(opts && (opts->codec || opts->pix_fmt || opts->ffmpeg_args || opts->crf >= 0)
                                 ? W22_ERR_INVALID_ARG : W22_ERR_UNSUPPORTED,
                             "%s: ffmpeg cannot write a test frame with these settings (exit status %d%s%s; the "
                             "command: %s)", path, code, tail[0] ? ": " : "", tail, cmd);
        }
    }
    av_free(&a);
    free(encoders);
    if (err) fclose(err);
    if (fd >= 0) close(fd);
    unlink(in);
    unlink(out);
    rmdir(dir);
    return s;
}

/* ---- the writer ---- */

typedef struct {
    pid_t pid;      /* ffmpeg, 0 when none runs */
    int sock;       /* our end of ffmpeg's stdin */
    int errfd;      /* ffmpeg's stderr, an unlinked temporary file */
    char exe[4096];
    char url[PATH_MAX + 8]; /* the temporary file (or the stream) as ffmpeg's output URL */
    char command[8192];
} ffmpeg_state;

static w22_status ffmpeg_open(w22_video_writer *vw) {
    ffmpeg_state *st = w22_calloc(1, sizeof *st, "ffmpeg writer");
    if (!st) return W22_ERR_OUT_OF_MEMORY;
    st->sock = st->errfd = -1;
    vw->impl = st;
    if (!find_ffmpeg(st->exe, sizeof st->exe)) return no_ffmpeg(vw->out.path);
    /* the temporary file, or the stream itself (a FIFO or a device, which ffmpeg opens by name) */
    W22_TRY(file_url(vw->out.stream ? vw->out.path : vw->out.tmp, st->url, sizeof st->url));
    /* ffmpeg writes the file itself, by name; our descriptor of it is not needed. */
    if (vw->out.fd >= 0) close(vw->out.fd);
    vw->out.fd = -1;
    char *encoders = list_encoders(st->exe);
    argvec a = {0};
    w22_status s = build_command(st->exe, vw->out.path, vw->width, vw->height, vw->fps_num, vw->fps_den,
                                 vw->out.stream, &vw->opts, encoders, st->url, &a);
    free(encoders);
    if (s != W22_OK) return av_free(&a), s;
    command_text(a.v, st->command, sizeof st->command);
    int sv[2];
    FILE *err = tmpfile();
    if (!err) {
        av_free(&a);
        return w22_fail(W22_ERR_IO, "%s: cannot make a temporary file for ffmpeg's messages: %s", vw->out.path,
                        strerror(errno));
    }
    st->errfd = dup(fileno(err));
    fclose(err);
    if (st->errfd < 0 || socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
        av_free(&a);
        return w22_fail(W22_ERR_IO, "%s: cannot make a pipe to ffmpeg: %s", vw->out.path, strerror(errno));
    }
    int rc = spawn(st->exe, a.v, sv[1], -1, st->errfd, &st->pid);
    av_free(&a);
    close(sv[1]);
    st->sock = sv[0];
    if (rc != 0) {
        st->pid = 0;
        return w22_fail(W22_ERR_IO, "%s: cannot start %s: %s", vw->out.path, st->exe, strerror(rc));
    }
    return W22_OK;
}

void w22_video_cancel(w22_video_writer *vw) {
    if (!vw || vw->fmt != W22_VIDEO_FFMPEG || !vw->impl) return;
    ffmpeg_state *st = vw->impl;
    if (st->pid > 0) kill(st->pid, SIGKILL); /* reaped by ffmpeg_close, as before */
    if (st->sock >= 0) shutdown(st->sock, SHUT_RDWR);
}

int w22_video_child(const w22_video_writer *vw) {
    if (!vw || vw->fmt != W22_VIDEO_FFMPEG || !vw->impl) return 0;
    return (int)((const ffmpeg_state *)vw->impl)->pid;
}

const char *w22_video_command(const w22_video_writer *vw) {
    if (!vw || vw->fmt != W22_VIDEO_FFMPEG || !vw->impl) return NULL;
    return ((const ffmpeg_state *)vw->impl)->command;
}

/* ffmpeg's outcome once it has stopped: its exit status and the end of what it said. */
static w22_status ffmpeg_failed(w22_video_writer *vw, ffmpeg_state *st, const char *when) {
    close(st->sock);
    st->sock = -1;
    int code = wait_child(st->pid);
    st->pid = 0;
    char tail[600];
    stderr_tail(st->errfd, tail, sizeof tail);
    if (code == 0) /* it ended on its own before the last frame: an option of --ffmpeg-args (-t, -frames:v) */
        return w22_fail(W22_ERR_IO, "%s: ffmpeg %s: it exited (status 0) with %d of %d frames sent; expected it to take "
                        "every frame (does --ffmpeg-args end the video early, with -t, -to or -frames?)%s%s",
                        vw->out.path, when, vw->next, vw->frames, tail[0] ? "; it said: " : "", tail);
    return w22_fail(W22_ERR_IO, "%s: ffmpeg %s: it exited with status %d, expected it to take every frame and exit "
                    "with 0%s%s", vw->out.path, when, code, tail[0] ? ": " : "", tail);
}

static w22_status ffmpeg_write(w22_video_writer *vw, const float *chunk, int frame0, int n) {
    ffmpeg_state *st = vw->impl;
    size_t bytes = (size_t)vw->height * vw->width * 3;
    for (int f = 0; f < n; f++) {
        w22_frame_rgb24(chunk, n, f, vw->height, vw->width, vw->rgb);
        for (size_t done = 0; done < bytes;) {
            ssize_t k = send(st->sock, vw->rgb + done, bytes - done, MSG_NOSIGNAL);
            if (k < 0 && errno == EINTR) continue;
            if (k <= 0) return ffmpeg_failed(vw, st, "stopped taking frames");
            done += (size_t)k;
        }
    }
    return W22_OK;
}

static w22_status ffmpeg_finish(w22_video_writer *vw) {
    ffmpeg_state *st = vw->impl;
    close(st->sock); /* end of input: ffmpeg writes the rest and exits */
    st->sock = -1;
    int code = wait_child(st->pid);
    st->pid = 0;
    if (code != 0) {
        char tail[600];
        stderr_tail(st->errfd, tail, sizeof tail);
        return w22_fail(W22_ERR_IO, "%s: ffmpeg finishing the file: expected exit status 0, found %d%s%s",
                        vw->out.path, code, tail[0] ? ": " : "", tail);
    }
    char line[600];
    if (stderr_write_error(st->errfd, line, sizeof line))
        return w22_fail(W22_ERR_IO, "%s: ffmpeg could not write the whole file (it exited with status 0, but said: "
                        "%s); no output written", vw->out.path, line);
    if (!vw->out.stream) { /* the file's bytes on the disk: a write-back failure shows here, not in ffmpeg's status */
        int fd = open(vw->out.tmp, O_RDONLY | O_CLOEXEC), e = 0;
        struct stat sb;
        if (fd < 0 || fsync(fd) != 0 || fstat(fd, &sb) != 0) e = errno;
        else if (sb.st_size == 0) e = -1;
        if (e) {
            if (fd >= 0) close(fd);
            return w22_fail(W22_ERR_IO, "%s: ffmpeg exited with status 0, but its file %s%s; no output written",
                            vw->out.path, e > 0 ? "cannot be synced to the disk: " : "is empty",
                            e > 0 ? strerror(e) : "");
        }
        close(fd);
    }
    return W22_OK;
}

static void ffmpeg_close(w22_video_writer *vw) {
    ffmpeg_state *st = vw->impl;
    if (!st) return;
    if (st->sock >= 0) close(st->sock);
    if (st->pid > 0) { /* aborted mid-video: nothing it writes is wanted */
        kill(st->pid, SIGKILL);
        wait_child(st->pid);
    }
    if (st->errfd >= 0) close(st->errfd);
    free(st);
    vw->impl = NULL;
}

const w22_video_ops w22_video_ffmpeg_ops = {0, 1, ffmpeg_open, ffmpeg_write, ffmpeg_finish, ffmpeg_close};
