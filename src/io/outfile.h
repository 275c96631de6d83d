/* A temporary output next to its destination, committed by a rename: the one way every writer in src/io/ makes a
 * file or a directory, so that a failed or stopped write leaves nothing behind and an existing output is never
 * replaced unless asked for. */
#ifndef W22_IO_OUTFILE_H
#define W22_IO_OUTFILE_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include "wan22vae.h"

typedef struct {
    char path[PATH_MAX]; /* the destination */
    char tmp[PATH_MAX];  /* path + ".tmp-XXXXXX" (+ the suffix asked for), in the same directory so that the rename
                          * is atomic; for a stream, the path itself */
    int fd;              /* the temporary file (or the stream once opened), -1 for a directory or once closed */
    int is_dir;
    int overwrite;
    int live;            /* the temporary exists and is ours to remove */
    int stream;          /* a stream (w22_output_is_stream): written directly, in order, never renamed or removed */
    int stream_fd;       /* for a stream of an inherited descriptor ("-" is 1, /dev/fd/N is N), else -1 */
    uint64_t pos;        /* a stream: the bytes written so far */
    uint64_t unflushed;  /* a file: bytes written since its writeback was last started (w22_outfile_pwrite) */
} w22_outfile;

/* Creates the temporary file (is_dir == 0, opened for writing) or directory. Fails at once when path exists and
 * !overwrite (W22_ERR_EXISTS) or its directory does not exist (W22_ERR_IO). A stream (w22_output_is_stream) has
 * no temporary: it is opened at the first write (a FIFO's open waits for its reader), or by whoever writes it by
 * name (ffmpeg). */
w22_status w22_outfile_create(w22_outfile *o, const char *path, int is_dir, int overwrite);
/* The same with the temporary named path + ".tmp-XXXXXX" + suffix (ffmpeg picks the container by the extension). */
w22_status w22_outfile_create_suffix(w22_outfile *o, const char *path, int is_dir, int overwrite,
                                     const char *suffix);
/* Writes all of buf at offset off of the temporary file (pwrite, retried until done), and every W22_WRITEBACK_BYTES
 * starts the page cache's write-out of what it holds of the file (Linux: sync_file_range, which does not wait), so
 * that the commit's fsync finds little left. A stream takes the bytes in order only: off must be where the last
 * write ended. */
w22_status w22_outfile_pwrite(w22_outfile *o, const void *buf, size_t n, uint64_t off);
/* Closes the temporary file (fsync first) and renames it, or the directory, to the destination. On failure the
 * temporary is removed. A stream is closed. */
w22_status w22_outfile_commit(w22_outfile *o);
/* Removes the temporary file or directory (with the files in it) if still there. Safe to call twice. A stream is
 * closed (what was written stays written). */
void w22_outfile_discard(w22_outfile *o);

/* Whether a directory holds nothing but frame PNGs ("frame_NNNNN.png"): the only kind of directory an overwrite
 * may replace. */
int w22_dir_only_frames(const char *dir);

#endif
