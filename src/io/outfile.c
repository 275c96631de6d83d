/* Temporary outputs committed by a rename (outfile.h), streams written directly, and the up-front check of an
 * output path. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "common.h"
#include "io/io.h"
#include "io/outfile.h"

/* path without trailing slashes (a directory output may be given as "frames/"). */
static w22_status strip_path(const char *path, char *out, size_t cap) {
    if (!path || !*path) return w22_fail(W22_ERR_INVALID_ARG, "output path: expected a path, found an empty one");
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/') n--;
    if (n >= cap) return w22_fail(W22_ERR_INVALID_ARG, "output path: at most %zu characters, found %zu", cap - 1, n);
    memcpy(out, path, n);
    out[n] = 0;
    if (strcmp(out, "/") == 0 || strcmp(out, ".") == 0 || strcmp(out, "..") == 0)
        return w22_fail(W22_ERR_INVALID_ARG, "output path '%s': expected a new file or directory name", path);
    return W22_OK;
}

static void parent_of(const char *path, char *dir, size_t cap) {
    const char *slash = strrchr(path, '/');
    if (!slash) snprintf(dir, cap, ".");
    else if (slash == path) snprintf(dir, cap, "/");
    else snprintf(dir, cap, "%.*s", (int)(slash - path), path);
}

static w22_status check_parent(const char *path) {
    char dir[PATH_MAX];
    struct stat st;
    parent_of(path, dir, sizeof dir);
    if (stat(dir, &st) != 0)
        return w22_fail(W22_ERR_IO, "%s: the output's directory '%s' does not exist (%s)", path, dir, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return w22_fail(W22_ERR_IO, "%s: expected '%s' to be a directory, found a file", path, dir);
    if (access(dir, W_OK | X_OK) != 0)
        return w22_fail(W22_ERR_IO, "%s: the output's directory '%s' is not writable (%s)", path, dir, strerror(errno));
    return W22_OK;
}

/* The names the writers will make must be valid, checked before any work: the temporary "<name>.tmp-XXXXXX" (and
 * "<name>.old-XXXXXX" when replacing a directory) within the file system's name limit, and the longest path made
 * (a frame inside a temporary directory, or the "./" ffmpeg gets before a relative name) within PATH_MAX. */
static w22_status check_names(const char *path, int is_dir, const char *extra) {
    char suffix[64];
    static const char frame[] = "/frame_00000.png";
    snprintf(suffix, sizeof suffix, ".tmp-XXXXXX%.40s", extra ? extra : "");
    char dir[PATH_MAX];
    parent_of(path, dir, sizeof dir);
    const char *slash = strrchr(path, '/');
    size_t base = strlen(slash ? slash + 1 : path), len = strlen(path);
    long name_max = pathconf(dir, _PC_NAME_MAX);
    if (name_max <= 0) name_max = NAME_MAX;
    size_t sl = strlen(suffix);
    if (base + sl > (size_t)name_max)
        return w22_fail(W22_ERR_INVALID_ARG, "%s: the output's name has %zu characters; expected at most %ld, so "
                        "that its temporary '<name>%s' fits the file system's limit of %ld", path, base,
                        name_max - (long)sl, suffix, name_max);
    size_t longest = 2 + len + sl + (is_dir ? sizeof frame - 1 : 0);
    if (longest >= PATH_MAX)
        return w22_fail(W22_ERR_INVALID_ARG, "%s: the output's path has %zu characters; expected at most %zu, so "
                        "that the paths made under it fit PATH_MAX (%d)", path, len,
                        (size_t)PATH_MAX - 1 - (longest - len), PATH_MAX);
    return W22_OK;
}

int w22_dir_only_frames(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    int ok = 1;
    struct dirent *e;
    while (ok && (e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        unsigned idx;
        char tail[8];
        ok = sscanf(e->d_name, "frame_%u.%7s", &idx, tail) == 2 && !strcmp(tail, "png");
    }
    closedir(d);
    return ok;
}

/* Existing destination, when it may not be replaced: W22_ERR_EXISTS, or a kind mismatch. */
static w22_status check_existing(const char *path, int is_dir, int overwrite) {
    struct stat st;
    if (lstat(path, &st) != 0) return W22_OK;
    if (!overwrite)
        return w22_fail(W22_ERR_EXISTS, "%s: expected a new output, found an existing %s; not replacing it without "
                        "overwrite", path, S_ISDIR(st.st_mode) ? "directory" : "file");
    if (is_dir) {
        if (!S_ISDIR(st.st_mode))
            return w22_fail(W22_ERR_EXISTS, "%s: expected a directory of frame PNGs to replace, found a file", path);
        if (!w22_dir_only_frames(path))
            return w22_fail(W22_ERR_EXISTS, "%s: the existing directory holds files other than frame_NNNNN.png; "
                            "not replacing it", path);
    } else if (S_ISDIR(st.st_mode)) {
        return w22_fail(W22_ERR_EXISTS, "%s: expected a file to replace, found a directory", path);
    }
    return W22_OK;
}

/* The descriptor a path names directly ("-" and /dev/stdout: 1, /dev/stderr: 2, /dev/fd/N and /proc/self/fd/N:
 * N), else -1. Written through a duplicate, so that a regular file behind it (`> file`) is written where the
 * shell opened it rather than reopened from its start. */
static int inherited_fd(const char *path) {
    if (!strcmp(path, "-") || !strcmp(path, "/dev/stdout")) return 1;
    if (!strcmp(path, "/dev/stderr")) return 2;
    const char *n = !strncmp(path, "/dev/fd/", 8) ? path + 8 : !strncmp(path, "/proc/self/fd/", 14) ? path + 14 : NULL;
    if (n && *n >= '0' && *n <= '9') {
        char *end;
        long v = strtol(n, &end, 10);
        if (!*end && v < 1 << 20) return (int)v;
    }
    return -1;
}

int w22_output_is_stream(const char *path) {
    if (!path || !*path) return 0;
    if (inherited_fd(path) >= 0) return 1;
    struct stat st;
    return stat(path, &st) == 0 && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode);
}

const char *w22_output_name(const char *path) { return path && !strcmp(path, "-") ? "standard output" : path; }

static const char *stream_kind(const char *path) {
    struct stat st;
    if (!strcmp(path, "-")) return "standard output";
    if (stat(path, &st) != 0) return "a stream";
    return S_ISFIFO(st.st_mode) ? "a FIFO (named pipe)" : S_ISCHR(st.st_mode) ? "a character device" :
           S_ISSOCK(st.st_mode) ? "a socket" : S_ISBLK(st.st_mode) ? "a block device" :
           S_ISREG(st.st_mode) ? "an open file" : "a stream";
}

static w22_status check_stream(const char *path, int is_dir) {
    if (is_dir)
        return w22_fail(W22_ERR_INVALID_ARG, "%s: PNG frames need a new directory, found %s; expected a folder name "
                        "(or a stream format such as .y4m)", w22_output_name(path), stream_kind(path));
    int fd = inherited_fd(path);
    if (fd >= 0) {
        int fl = fcntl(fd, F_GETFL);
        if (fl < 0)
            return w22_fail(W22_ERR_IO, "%s: descriptor %d is not open; expected somewhere to write the output",
                            w22_output_name(path), fd);
        if ((fl & O_ACCMODE) == O_RDONLY)
            return w22_fail(W22_ERR_IO, "%s: descriptor %d is open for reading only; expected it writable",
                            w22_output_name(path), fd);
        return W22_OK;
    }
    if (access(path, W_OK) != 0)
        return w22_fail(W22_ERR_IO, "%s: %s that is not writable (%s)", path, stream_kind(path), strerror(errno));
    return W22_OK;
}

static w22_status output_check(const char *path, int is_dir, int overwrite, const char *suffix) {
    if (path && w22_output_is_stream(path)) return check_stream(path, is_dir);
    char p[PATH_MAX];
    W22_TRY(strip_path(path, p, sizeof p));
    W22_TRY(check_parent(p));
    W22_TRY(check_names(p, is_dir, suffix));
    return check_existing(p, is_dir, overwrite);
}

w22_status w22_output_check(const char *path, int is_dir, int overwrite) {
    return output_check(path, is_dir, overwrite, NULL);
}

w22_status w22_output_check_suffix(const char *path, int is_dir, int overwrite, const char *suffix) {
    return output_check(path, is_dir, overwrite, suffix);
}

w22_status w22_outfile_create(w22_outfile *o, const char *path, int is_dir, int overwrite) {
    return w22_outfile_create_suffix(o, path, is_dir, overwrite, NULL);
}

w22_status w22_outfile_create_suffix(w22_outfile *o, const char *path, int is_dir, int overwrite,
                                     const char *suffix) {
    memset(o, 0, sizeof *o);
    o->fd = -1;
    o->stream_fd = -1;
    o->is_dir = is_dir;
    o->overwrite = overwrite;
    if (path && w22_output_is_stream(path)) {
        W22_TRY(check_stream(path, is_dir));
        if (strlen(path) >= sizeof o->path)
            return w22_fail(W22_ERR_INVALID_ARG, "output path: at most %zu characters", sizeof o->path - 1);
        snprintf(o->path, sizeof o->path, "%s", path);
        snprintf(o->tmp, sizeof o->tmp, "%s", path);
        o->stream = 1;
        o->stream_fd = inherited_fd(path);
        return W22_OK;
    }
    if (!suffix) suffix = "";
    W22_TRY(strip_path(path, o->path, sizeof o->path));
    W22_TRY(check_parent(o->path));
    W22_TRY(check_names(o->path, is_dir, suffix));
    W22_TRY(check_existing(o->path, is_dir, overwrite));
    if ((size_t)snprintf(o->tmp, sizeof o->tmp, "%s.tmp-XXXXXX%s", o->path, suffix) >= sizeof o->tmp)
        return w22_fail(W22_ERR_INVALID_ARG, "%s: the path is too long for a temporary name", o->path);
    if (is_dir) {
        if (!mkdtemp(o->tmp))
            return w22_fail(W22_ERR_IO, "%s: cannot create the temporary directory %s: %s", o->path, o->tmp,
                            strerror(errno));
        chmod(o->tmp, 0755); /* mkdtemp makes it 0700; the output should read like any new directory */
    } else {
        o->fd = mkostemps(o->tmp, (int)strlen(suffix), O_CLOEXEC);
        if (o->fd < 0)
            return w22_fail(W22_ERR_IO, "%s: cannot create the temporary file %s: %s", o->path, o->tmp,
                            strerror(errno));
        fchmod(o->fd, 0644); /* mkostemp makes it 0600 */
    }
    o->live = 1;
    return W22_OK;
}

/* A stream's descriptor, opened at its first write: a duplicate of the inherited one, or the path opened for
 * writing (which, for a FIFO, waits until a reader opens it). */
static w22_status stream_open(w22_outfile *o) {
    if (o->fd >= 0) return W22_OK;
    if (o->stream_fd >= 0) o->fd = fcntl(o->stream_fd, F_DUPFD_CLOEXEC, 3);
    else o->fd = open(o->path, O_WRONLY | O_CLOEXEC | O_NOCTTY);
    if (o->fd < 0)
        return w22_fail(W22_ERR_IO, "%s: cannot open it for writing: %s", w22_output_name(o->path), strerror(errno));
    return W22_OK;
}

static w22_status stream_write(w22_outfile *o, const void *buf, size_t n, uint64_t off) {
    if (off != o->pos)
        return w22_fail(W22_ERR_INVALID_ARG, "%s: a stream is written in order: expected bytes at offset %llu next, "
                        "found %llu", w22_output_name(o->path), (unsigned long long)o->pos, (unsigned long long)off);
    W22_TRY(stream_open(o));
    const char *p = buf;
    while (n > 0) {
        ssize_t k = write(o->fd, p, n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) {
            int e = errno;
            if (k < 0 && e == EPIPE)
                return w22_fail(W22_ERR_IO, "%s: the reader closed the pipe after %llu bytes (broken pipe)",
                                w22_output_name(o->path), (unsigned long long)o->pos);
            return w22_fail(W22_ERR_IO, "%s: writing %zu bytes at offset %llu failed: %s", w22_output_name(o->path),
                            n, (unsigned long long)o->pos, k < 0 ? strerror(e) : "no progress");
        }
        p += k;
        n -= (size_t)k;
        o->pos += (uint64_t)k;
    }
    return W22_OK;
}

/* The bytes between two starts of a file's write-out. The commit's fsync waits for all of a video's bytes to reach the
 * disk, after the decode; the CLI's overhead over open + decode grew with the bytes written (issue 30, H200 machine:
 * .npy 1.13 for f121's 1.3 GB and 1.22 for f481's 5 GB, the uint8 .y4m 1.02 and 1.05), as that wait would. Started
 * as the writer goes (on its thread, overlapped with the decode), the fsync finds little left (this machine: 2 GB
 * written over 3 s, the fsync after it 0.8 s -> 0.00 s). */
#define W22_WRITEBACK_BYTES ((uint64_t)64 << 20)

w22_status w22_outfile_pwrite(w22_outfile *o, const void *buf, size_t n, uint64_t off) {
    if (o->stream) return stream_write(o, buf, n, off);
    o->unflushed += n;
    const char *p = buf;
    while (n > 0) {
        ssize_t k = pwrite(o->fd, p, n, (off_t)off);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0)
            return w22_fail(W22_ERR_IO, "%s: writing %zu bytes at offset %llu of %s failed: %s", o->path, n,
                            (unsigned long long)off, o->tmp, k < 0 ? strerror(errno) : "no progress");
        p += k;
        n -= (size_t)k;
        off += (uint64_t)k;
    }
#ifdef __linux__
    if (o->unflushed >= W22_WRITEBACK_BYTES) {
        (void)sync_file_range(o->fd, 0, 0, SYNC_FILE_RANGE_WRITE); /* advisory: the commit's fsync is the check */
        o->unflushed = 0;
    }
#endif
    return W22_OK;
}

static void remove_dir_files(const char *dir) {
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *e;
        char f[PATH_MAX + 256];
        while ((e = readdir(d))) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            snprintf(f, sizeof f, "%s/%s", dir, e->d_name);
            unlink(f);
        }
        closedir(d);
    }
    rmdir(dir);
}

void w22_outfile_discard(w22_outfile *o) {
    if (o->fd >= 0) close(o->fd);
    o->fd = -1;
    if (o->stream) return; /* what was written stays written; nothing of ours to remove */
    if (o->live) {
        if (o->is_dir) remove_dir_files(o->tmp);
        else unlink(o->tmp);
    }
    o->live = 0;
}

/* rename without replacing: renameat2(RENAME_NOREPLACE) where the file system has it, else link + unlink for a
 * file (also atomic), else a check then rename (a window, but only on file systems with neither). */
static int rename_noreplace(const char *from, const char *to, int is_dir) {
#ifdef RENAME_NOREPLACE
    if (renameat2(AT_FDCWD, from, AT_FDCWD, to, RENAME_NOREPLACE) == 0) return 0;
    if (errno != EINVAL && errno != ENOSYS && errno != ENOTSUP) return -1;
#endif
    if (!is_dir) {
        if (link(from, to) == 0) return unlink(from), 0;
        if (errno == EEXIST) return -1;
    }
    struct stat st;
    if (lstat(to, &st) == 0) return errno = EEXIST, -1;
    return rename(from, to);
}

/* Replaces an existing directory of frame PNGs: the old one moves aside, the new one in, then the old one goes. */
static w22_status replace_dir(w22_outfile *o) {
    char old[PATH_MAX + 16];
    snprintf(old, sizeof old, "%s.old-XXXXXX", o->path);
    if (!mkdtemp(old)) return w22_fail(W22_ERR_IO, "%s: cannot make room to replace it: %s", o->path, strerror(errno));
    if (rename(o->path, old) != 0) {
        int e = errno;
        rmdir(old);
        return w22_fail(W22_ERR_IO, "%s: cannot move the existing directory aside: %s", o->path, strerror(e));
    }
    if (rename(o->tmp, o->path) != 0) {
        int e = errno;
        rename(old, o->path);
        return w22_fail(W22_ERR_IO, "%s: cannot rename %s to it: %s", o->path, o->tmp, strerror(e));
    }
    remove_dir_files(old);
    return W22_OK;
}

w22_status w22_outfile_commit(w22_outfile *o) {
    w22_status s = W22_OK;
    if (o->stream) {
        if (o->fd >= 0 && close(o->fd) != 0 && errno != EINTR)
            s = w22_fail(W22_ERR_IO, "%s: closing it failed: %s", w22_output_name(o->path), strerror(errno));
        o->fd = -1;
        return s;
    }
    if (o->fd >= 0) {
        if (fsync(o->fd) != 0 && errno != EINVAL)
            s = w22_fail(W22_ERR_IO, "%s: flushing %s failed: %s", o->path, o->tmp, strerror(errno));
        if (close(o->fd) != 0 && s == W22_OK)
            s = w22_fail(W22_ERR_IO, "%s: closing %s failed: %s", o->path, o->tmp, strerror(errno));
        o->fd = -1;
    }
    if (s == W22_OK) {
        struct stat st;
        int exists = lstat(o->path, &st) == 0;
        if (o->overwrite && o->is_dir && exists) {
            s = check_existing(o->path, 1, 1);
            if (s == W22_OK) s = replace_dir(o);
        } else if (o->overwrite && exists) {
            if (S_ISDIR(st.st_mode))
                s = w22_fail(W22_ERR_EXISTS, "%s: expected a file to replace, found a directory", o->path);
            else if (rename(o->tmp, o->path) != 0)
                s = w22_fail(W22_ERR_IO, "%s: renaming %s to it failed: %s", o->path, o->tmp, strerror(errno));
        } else if (rename_noreplace(o->tmp, o->path, o->is_dir) != 0) {
            if (errno == EEXIST || errno == ENOTEMPTY)
                s = w22_fail(W22_ERR_EXISTS, "%s: expected a new output, found one that appeared while writing; "
                             "not replacing it", o->path);
            else
                s = w22_fail(W22_ERR_IO, "%s: renaming %s to it failed: %s", o->path, o->tmp, strerror(errno));
        }
    }
    if (s == W22_OK) o->live = 0;
    else w22_outfile_discard(o);
    return s;
}
