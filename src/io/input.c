/* Input files that must be regular files: weights and latents are read at known offsets and sizes, so a FIFO, a
 * device or a directory is refused with a message. The open is O_NONBLOCK so that a FIFO with no writer cannot
 * hang open() before fstat() says what it is. */
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
