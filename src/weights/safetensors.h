/* A strict safetensors reader (mmap) and writer. The reader trusts nothing in the file: the header length, the JSON,
 * every dtype, shape and offset are checked against the file's size and each other; any mismatch is an error with
 * a message, never a crash or a silent wrong load. */
#ifndef W22_SAFETENSORS_H
#define W22_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>
#include "wan22vae.h"

#define W22_ST_MAX_DIMS 8

typedef struct {
    char *name;              /* NUL-terminated, owned by the file object */
    w22_dtype dtype;
    int ndim;
    int64_t shape[W22_ST_MAX_DIMS];
    int64_t numel;
    const void *data;        /* into the mapped file */
    size_t nbytes;
} w22_st_tensor;

/* A mapped file as it was when mapped. A mapping is read in place for as long as it lives, so a file changed in place
 * afterwards breaks its readers: shrunk (truncated, rewritten by `cp`), a read beyond its new end faults the process
 * (SIGBUS); rewritten, weights that were validated change under the decoder. Renaming a new file over the name is
 * safe (the mapping keeps the old file). A reader that comes back to a mapping calls w22_st_unchanged first, and
 * after it read, so that either change is an error with a message instead. What it cannot see: a change during the
 * read itself, and one that keeps the size on a file system with coarse modification times. */
typedef struct {
    int fd;                  /* kept open while mapped: fstat sees the file mapped, whatever the path names now */
    int64_t size, mtime_ns;  /* at the mapping */
} w22_st_watch;

typedef struct {
    void *map;               /* the mapping (or the caller's buffer for w22_st_parse) */
    size_t size;
    int mapped;              /* 1: map is this object's mapping and watch.fd its file (both closed by w22_st_close) */
    w22_st_watch watch;
    int ntensors;
    w22_st_tensor *tensors;
    char *metadata_json;     /* the "__metadata__" object as JSON text, or NULL */
    /* __metadata__ entries (string values), owned */
    int nmeta;
    char **meta_keys, **meta_values;
} w22_st_file;

/* Maps and parses path. On failure f is left empty (w22_st_close is still safe). */
w22_status w22_st_open(const char *path, w22_st_file *f);
/* Parses a buffer in memory (not copied; must outlive f). For tests and the fuzzer. */
w22_status w22_st_parse(const void *buf, size_t size, w22_st_file *f);
void w22_st_close(w22_st_file *f);
/* W22_OK when the watched file still has the size and modification time it had when mapped, else W22_ERR_IO naming
 * path, what changed, and when (e.g. "before the decoder's open"). */
w22_status w22_st_unchanged(const w22_st_watch *watch, const char *path, const char *when);
/* Closes the watched file's descriptor (the mapping is the caller's). */
void w22_st_unwatch(w22_st_watch *watch);
const w22_st_tensor *w22_st_find(const w22_st_file *f, const char *name);
const char *w22_st_meta(const w22_st_file *f, const char *key); /* NULL if absent */

typedef struct {
    const char *name;
    w22_dtype dtype;         /* of data */
    int ndim;
    const int64_t *shape;
    const void *data;
} w22_st_write_tensor;

/* Writes tensors (in the given order) to path through path + ".tmp-XXXXXX" and a rename. meta: n_meta key/value
 * string pairs for __metadata__ (may be 0). overwrite == 0: an existing path is W22_ERR_EXISTS. */
w22_status w22_st_write(const char *path, const w22_st_write_tensor *t, int n, const char *const *meta_kv,
                        int n_meta, int overwrite);

#endif
