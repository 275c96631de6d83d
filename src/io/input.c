/* Inputs. The weights are read at known offsets (mapped), so they must be a regular file: a FIFO, a device or a
 * directory is refused with a message. The open is O_NONBLOCK so that a FIFO with no writer cannot hang open()
 * before fstat() says what it is. Latents may also come as a stream (standard input, a pipe, a FIFO): read to its
 * end into memory, within a bound. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "common.h"
#include "io/io.h"

static const char *kind_of(mode_t m) {
    if (S_ISFIFO(m)) return "a FIFO (named pipe)";
    if (S_ISDIR(m)) return "a directory";
    if (S_ISCHR(m)) return "a character device";
    if (S_ISBLK(m)) return "a block device";
    if (S_ISSOCK(m)) return "a socket";
    return "not a regular file";
}

/* fd of path opened read-only (blocking mode restored), after fstat said it is a regular file; *size its size. */
static w22_status open_regular(const char *path, const char *what, int *fd_out, size_t *size) {
    *fd_out = -1;
    if (!path || !*path) return w22_fail(W22_ERR_INVALID_ARG, "%s: expected a file path, found an empty one", what);
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0) return w22_fail(W22_ERR_IO, "%s: cannot open the %s: %s", path, what, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return w22_fail(W22_ERR_IO, "%s: cannot stat the %s: %s", path, what, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return w22_fail(W22_ERR_IO, "%s: expected the %s to be a regular file (it is read at known offsets), "
                        "found %s", path, what, kind_of(st.st_mode));
    }
    if (st.st_size < 0 || (uint64_t)st.st_size > (uint64_t)SIZE_MAX / 2) {
        close(fd);
        return w22_fail(W22_ERR_IO, "%s: expected the %s to fit in memory, found %lld bytes", path, what,
                        (long long)st.st_size);
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0) fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    *fd_out = fd;
    *size = (size_t)st.st_size;
    return W22_OK;
}

w22_status w22_input_check(const char *path, const char *what) {
    int fd;
    size_t size;
    W22_TRY(open_regular(path, what, &fd, &size));
    close(fd);
    return W22_OK;
}

w22_status w22_read_input(const char *path, const char *what, unsigned char **buf, size_t *size) {
    int fd;
    *buf = NULL;
    *size = 0;
    size_t n;
    W22_TRY(open_regular(path, what, &fd, &n));
    unsigned char *b = w22_malloc(n, path);
    if (!b) return close(fd), W22_ERR_OUT_OF_MEMORY;
    size_t got = 0;
    while (got < n) {
        ssize_t k = read(fd, b + got, n - got);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) {
            int e = errno;
            close(fd);
            free(b);
            return w22_fail(W22_ERR_IO, "%s: reading the %s: expected %zu bytes, read %zu%s%s", path, what, n, got,
                            k < 0 ? ": " : " (the file shrank)", k < 0 ? strerror(e) : "");
        }
        got += (size_t)k;
    }
    close(fd);
    *buf = b;
    *size = n;
    return W22_OK;
}

/* A stream's first bytes are checked as soon as this many have come (or at its end, if shorter): a stream of the
 * wrong kind (/dev/zero, a terminal's typing) is refused before it fills memory up to the bound. */
#define W22_STREAM_SNIFF 16

w22_status w22_read_stream(int fd, const char *name, const char *what, size_t max,
                           const char *(*first_bytes_ok)(const unsigned char *b, size_t n), unsigned char **buf,
                           size_t *size) {
    *buf = NULL;
    *size = 0;
    if (isatty(fd))
        return w22_fail(W22_ERR_IO, "%s: expected the %s piped in (a .npy or .safetensors stream), found a terminal",
                        name, what);
    size_t cap = 1 << 20, got = 0;
    int sniffed = 0;
    unsigned char *b = w22_malloc(cap, name);
    if (!b) return W22_ERR_OUT_OF_MEMORY;
    for (;;) {
        if (got == cap) {
            if (cap >= max) {
                free(b);
                return w22_fail(W22_ERR_IO, "%s: expected the %s within %zu bytes, found more (a stream without "
                                "end?)", name, what, max);
            }
            size_t ncap = cap > max / 2 ? max : cap * 2;
            unsigned char *nb = realloc(b, ncap);
            if (!nb) {
                free(b);
                return w22_fail(W22_ERR_OUT_OF_MEMORY, "%s: out of memory: %zu bytes for the %s", name, ncap, what);
            }
            b = nb;
            cap = ncap;
        }
        ssize_t k = read(fd, b + got, cap - got);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) {
            int e = errno;
            free(b);
            return w22_fail(W22_ERR_IO, "%s: reading the %s: %s (after %zu bytes)", name, what, strerror(e), got);
        }
        got += (size_t)k;
        if (k == 0 && got == 0) {
            free(b);
            return w22_fail(W22_ERR_IO, "%s: expected the %s, found an empty stream (its writer wrote nothing)", name,
                            what);
        }
        if (!sniffed && first_bytes_ok && (got >= W22_STREAM_SNIFF || k == 0)) {
            sniffed = 1;
            const char *why = first_bytes_ok(b, got);
            if (why) {
                free(b);
                return w22_fail(W22_ERR_FORMAT, "%s: expected the %s as %s", name, what, why);
            }
        }
        if (k == 0) break;
    }
    *buf = b;
    *size = got;
    return W22_OK;
}

int w22_input_is_stream(const char *path) {
    if (!path) return 0;
    /* /dev/stdin and /dev/fd/N are streams even where they lead to a regular file (a shell's "< file") */
    if (strcmp(path, "-") == 0 || strncmp(path, "/dev/", 5) == 0 || strncmp(path, "/proc/self/fd/", 14) == 0)
        return 1;
    struct stat st;
    return stat(path, &st) == 0 && (S_ISFIFO(st.st_mode) || S_ISCHR(st.st_mode) || S_ISSOCK(st.st_mode));
}
