/* .mp4 video through an installed ffmpeg: raw rgb24 frames (w22_pixel_u8) go to ffmpeg's stdin, ffmpeg encodes
 * H.264 (libx264, yuv420p, CRF 18, BT.601 limited range by its default conversion) into the temporary file; the
 * MPEG-4 part 2 encoder stands in when this ffmpeg has no libx264. $W22_FFMPEG names another ffmpeg.
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
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "common.h"
#include "io/video_impl.h"

extern char **environ;

typedef struct {
    pid_t pid;      /* ffmpeg, 0 when none runs */
    int sock;       /* our end of ffmpeg's stdin */
    int errfd;      /* ffmpeg's stderr, an unlinked temporary file */
    char exe[4096];
    char url[PATH_MAX + 8]; /* the temporary file as ffmpeg's output URL */
} mp4_state;

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

static w22_status no_ffmpeg(const char *path) {
    return w22_fail(W22_ERR_UNSUPPORTED, "%s: writing .mp4 needs ffmpeg: expected an executable 'ffmpeg' on PATH "
                    "(or $W22_FFMPEG), found none; install ffmpeg, or write .y4m or PNG frames instead", path);
}

w22_status w22_mp4_check(const char *path) {
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

/* Runs argv with stdin from in_fd (or /dev/null when -1), stdout to out_fd (or /dev/null), stderr to err_fd. */
static int spawn(const char *exe, char *const argv[], int in_fd, int out_fd, int err_fd, pid_t *pid) {
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    if (in_fd >= 0) posix_spawn_file_actions_adddup2(&fa, in_fd, 0);
    else posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    if (out_fd >= 0) posix_spawn_file_actions_adddup2(&fa, out_fd, 1);
    else posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, err_fd, 2);
    int rc = posix_spawn(pid, exe, &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    return rc;
}

static int wait_child(pid_t pid) {
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR) return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
}

/* Whether `ffmpeg -encoders` lists libx264. */
static int has_libx264(const char *exe) {
    FILE *out = tmpfile(), *err = tmpfile();
    int found = 0;
    pid_t pid;
    char *argv[] = {(char *)exe, "-hide_banner", "-encoders", NULL};
    if (out && err && spawn(exe, argv, -1, fileno(out), fileno(err), &pid) == 0 && wait_child(pid) == 0) {
        char line[512];
        rewind(out);
        while (!found && fgets(line, sizeof line, out)) found = strstr(line, " libx264 ") != NULL;
    }
    if (out) fclose(out);
    if (err) fclose(err);
    return found;
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

static w22_status mp4_open(w22_video_writer *vw) {
    mp4_state *st = w22_calloc(1, sizeof *st, "mp4 writer");
    if (!st) return W22_ERR_OUT_OF_MEMORY;
    st->sock = st->errfd = -1;
    vw->impl = st;
    if (!find_ffmpeg(st->exe, sizeof st->exe)) return no_ffmpeg(vw->out.path);
    W22_TRY(file_url(vw->out.tmp, st->url, sizeof st->url));
    int x264 = has_libx264(st->exe);
    /* ffmpeg writes the temporary file itself, by name; our descriptor of it is not needed. */
    close(vw->out.fd);
    vw->out.fd = -1;

    char size[32], rate[32];
    snprintf(size, sizeof size, "%dx%d", vw->width, vw->height);
    snprintf(rate, sizeof rate, "%d/%d", vw->fps_num, vw->fps_den);
    /* yuv420p needs even sizes; an odd one is padded by a row or column (the decoder's sizes are all even). */
    const char *pad = (vw->width | vw->height) & 1 ? "pad=ceil(iw/2)*2:ceil(ih/2)*2" : "null";
    char *argv[] = {st->exe, "-hide_banner", "-loglevel", "error", "-y", "-f", "rawvideo", "-pix_fmt", "rgb24",
                    "-video_size", size, "-framerate", rate, "-i", "pipe:0", "-vf", (char *)pad,
                    "-c:v", x264 ? "libx264" : "mpeg4", x264 ? "-crf" : "-q:v", x264 ? "18" : "2",
                    "-pix_fmt", "yuv420p", "-movflags", "+faststart", "-f", "mp4", st->url, NULL};
    int sv[2];
    FILE *err = tmpfile();
    if (!err) return w22_fail(W22_ERR_IO, "%s: cannot make a temporary file for ffmpeg's messages: %s",
                              vw->out.path, strerror(errno));
    st->errfd = dup(fileno(err));
    fclose(err);
    if (st->errfd < 0 || socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
        return w22_fail(W22_ERR_IO, "%s: cannot make a pipe to ffmpeg: %s", vw->out.path, strerror(errno));
    int rc = spawn(st->exe, argv, sv[1], -1, st->errfd, &st->pid);
    close(sv[1]);
    st->sock = sv[0];
    if (rc != 0) {
        st->pid = 0;
        return w22_fail(W22_ERR_IO, "%s: cannot start %s: %s", vw->out.path, st->exe, strerror(rc));
    }
    return W22_OK;
}

/* ffmpeg's outcome once it has stopped: its exit status and the end of what it said. */
static w22_status ffmpeg_failed(w22_video_writer *vw, mp4_state *st, const char *when) {
    close(st->sock);
    st->sock = -1;
    int code = wait_child(st->pid);
    st->pid = 0;
    char tail[600];
    stderr_tail(st->errfd, tail, sizeof tail);
    return w22_fail(W22_ERR_IO, "%s: ffmpeg %s: expected exit status 0, found %d%s%s", vw->out.path, when, code,
                    tail[0] ? ": " : "", tail);
}

static w22_status mp4_write(w22_video_writer *vw, const float *chunk, int frame0, int n) {
    mp4_state *st = vw->impl;
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

static w22_status mp4_finish(w22_video_writer *vw) {
    mp4_state *st = vw->impl;
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
    return W22_OK;
}

static void mp4_close(w22_video_writer *vw) {
    mp4_state *st = vw->impl;
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

const w22_video_ops w22_video_mp4_ops = {0, 1, mp4_open, mp4_write, mp4_finish, mp4_close};
