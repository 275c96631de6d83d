/* The strict safetensors reader and the atomic writer (src/weights/safetensors.h).
 *
 * A file is: an 8-byte little-endian header length N, N bytes of JSON, then the data section. Before any pointer
 * into the data is handed out, every field of the header is checked against the file and against the others:
 * the JSON itself, each dtype, shape and byte range. A hostile or truncated file gives an error that names the
 * file, the tensor and what was expected, never a crash or a read outside the buffer. The header's JSON is
 * parsed by json.c (json_parse.h), whose rejections name the byte offset in the header. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include "common.h"
#include "weights/json_parse.h"
#include "weights/safetensors.h"

/* A real decoder header is a few tens of KiB; 100 MiB (the limit of the reference implementation) rejects an
 * absurd length before we allocate anything for it. */
#define ST_MAX_HEADER ((uint64_t)100 << 20)

/* ---------------------------------------------------------------------------------------------------------- */
/* The header's meaning: tensors and __metadata__.                                                              */

static const jnode *member(const jparser *p, const jnode *obj, const char *key) {
    for (int c = obj->first; c >= 0; c = p->nodes[c].next)
        if (p->nodes[c].key_len == strlen(key) && memcmp(p->nodes[c].key, key, p->nodes[c].key_len) == 0)
            return &p->nodes[c];
    return NULL;
}

static char *dup_text(const char *s, size_t n, const char *what) {
    char *d = w22_malloc(n + 1, what);
    if (d) {
        memcpy(d, s, n);
        d[n] = 0;
    }
    return d;
}

static w22_status read_metadata(const jparser *p, const jnode *m, w22_st_file *f) {
    if (m->type != J_OBJ)
        return w22_fail(W22_ERR_FORMAT, "%s: __metadata__ is %s, expected an object of strings", p->file,
                        w22_jtype_name[m->type]);
    f->metadata_json = dup_text(p->s + m->begin, m->end - m->begin, "the header's __metadata__");
    f->meta_keys = w22_calloc((size_t)m->nchild, sizeof(char *), "__metadata__ keys");
    f->meta_values = w22_calloc((size_t)m->nchild, sizeof(char *), "__metadata__ values");
    if (!f->metadata_json || !f->meta_keys || !f->meta_values) return W22_ERR_OUT_OF_MEMORY;
    for (int c = m->first; c >= 0; c = p->nodes[c].next) {
        const jnode *v = &p->nodes[c];
        if (v->type != J_STR)
            return w22_fail(W22_ERR_FORMAT, "%s: __metadata__ entry '%.200s' is %s, expected a string", p->file,
                            v->key, w22_jtype_name[v->type]);
        if (strlen(v->key) != v->key_len || strlen(v->str) != v->len)
            return w22_fail(W22_ERR_FORMAT, "%s: __metadata__ entry '%.200s' holds a NUL character (\\u0000); "
                            "expected text without NUL", p->file, v->key);
        f->meta_keys[f->nmeta] = dup_text(v->key, v->key_len, "a __metadata__ key");
        f->meta_values[f->nmeta] = dup_text(v->str, v->len, "a __metadata__ value");
        f->nmeta++;
        if (!f->meta_keys[f->nmeta - 1] || !f->meta_values[f->nmeta - 1]) return W22_ERR_OUT_OF_MEMORY;
    }
    return W22_OK;
}

static int parse_dtype(const char *s, w22_dtype *t) {
    if (strcmp(s, "F32") == 0) *t = W22_DTYPE_F32;
    else if (strcmp(s, "BF16") == 0) *t = W22_DTYPE_BF16;
    else if (strcmp(s, "F16") == 0) *t = W22_DTYPE_F16;
    else return 0;
    return 1;
}

/* One tensor entry: {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, checked against the data
 * section [data, data + data_size). */
static w22_status read_tensor(const jparser *p, const jnode *e, const unsigned char *data, size_t data_size,
                              w22_st_tensor *t) {
    const char *file = p->file, *name = e->key;
    if (e->key_len == 0) return w22_fail(W22_ERR_FORMAT, "%s: a tensor has an empty name; expected a name", file);
    if (strlen(name) != e->key_len)
        return w22_fail(W22_ERR_FORMAT, "%s: tensor '%.200s': the name holds a NUL character (\\u0000); expected "
                        "a name without NUL", file, name);
    if (e->type != J_OBJ)
        return w22_fail(W22_ERR_FORMAT, "%s: tensor '%.200s' is %s, expected an object with dtype, shape and "
                        "data_offsets", file, name, w22_jtype_name[e->type]);
    for (int c = e->first; c >= 0; c = p->nodes[c].next) {
        const char *k = p->nodes[c].key;
        if (strcmp(k, "dtype") && strcmp(k, "shape") && strcmp(k, "data_offsets"))
            return w22_fail(W22_ERR_FORMAT, "%s: tensor '%.200s' has the key '%.100s'; expected only dtype, shape "
                            "and data_offsets", file, name, k);
    }
    const jnode *dt = member(p, e, "dtype"), *sh = member(p, e, "shape"), *off = member(p, e, "data_offsets");
    const char *missing = !dt ? "dtype" : !sh ? "shape" : !off ? "data_offsets" : NULL;
    if (missing)
        return w22_fail(W22_ERR_FORMAT, "%s: tensor '%.200s' has no %s; expected dtype, shape and data_offsets",
                        file, name, missing);
    if (dt->type != J_STR)
        return w22_fail(W22_ERR_FORMAT, "%s: tensor '%.200s': dtype is %s, expected a string", file, name,
                        w22_jtype_name[dt->type]);
    if (!parse_dtype(dt->str, &t->dtype))
        return w22_fail(W22_ERR_BAD_DTYPE, "%s: tensor '%.200s' has dtype %.40s; expected F32, BF16 or F16", file,
                        name, dt->str);

    if (sh->type != J_ARR)
        return w22_fail(W22_ERR_FORMAT, "%s: tensor '%.200s': shape is %s, expected an array of integers", file,
                        name, w22_jtype_name[sh->type]);
    if (sh->nchild > W22_ST_MAX_DIMS)
        return w22_fail(W22_ERR_FORMAT, "%s: tensor '%.200s' has %d dimensions, expected at most %d", file, name,
                        sh->nchild, W22_ST_MAX_DIMS);
    t->ndim = 0;
    for (int c = sh->first; c >= 0; c = p->nodes[c].next) {
        const jnode *d = &p->nodes[c];
        if (d->type != J_INT)
            return w22_fail(W22_ERR_FORMAT, "%s: tensor '%.200s': shape dimension %d is %s, expected an integer",
                            file, name, t->ndim, w22_jtype_name[d->type]);
        if (d->ival < 0)
            return w22_fail(W22_ERR_FORMAT, "%s: tensor '%.200s': shape dimension %d is %lld, expected >= 0", file,
                            name, t->ndim, (long long)d->ival);
        t->shape[t->ndim++] = d->ival;
    }
    char st[256];
    w22_shape_text(st, sizeof st, t->ndim, t->shape);
    int64_t numel = 1, nbytes;
    for (int i = 0; i < t->ndim; i++)
        if (__builtin_mul_overflow(numel, t->shape[i], &numel))
            return w22_fail(W22_ERR_FORMAT, "%s: tensor '%.200s': shape %s has more elements than int64 holds; "
                            "expected a size that fits the file", file, name, st);
    if (__builtin_mul_overflow(numel, (int64_t)w22_dtype_size(t->dtype), &nbytes))
        return w22_fail(W22_ERR_FORMAT, "%s: tensor '%.200s': shape %s of %s is more bytes than int64 holds; "
                        "expected a size that fits the file", file, name, st, w22_dtype_name(t->dtype));

    if (off->type != J_ARR || off->nchild != 2)
        return w22_fail(W22_ERR_FORMAT, "%s: tensor '%.200s': data_offsets is %s of %d values, expected an array "
                        "[begin, end]", file, name, w22_jtype_name[off->type],
                        off->type == J_ARR || off->type == J_OBJ ? off->nchild : 1);
    const jnode *b = &p->nodes[off->first], *en = &p->nodes[b->next];
    if (b->type != J_INT || en->type != J_INT)
        return w22_fail(W22_ERR_FORMAT, "%s: tensor '%.200s': data_offsets holds %s and %s, expected two integers",
                        file, name, w22_jtype_name[b->type], w22_jtype_name[en->type]);
    long long ob = (long long)b->ival, oe = (long long)en->ival;
    if (ob < 0 || oe < 0)
        return w22_fail(W22_ERR_FORMAT, "%s: tensor '%.200s': data_offsets [%lld, %lld] is negative, expected "
                        "offsets >= 0", file, name, ob, oe);
    if (ob > oe)
        return w22_fail(W22_ERR_FORMAT, "%s: tensor '%.200s': data_offsets [%lld, %lld] has begin > end, "
                        "expected begin <= end", file, name, ob, oe);
    if ((uint64_t)oe > data_size)
        return w22_fail(W22_ERR_FORMAT, "%s: tensor '%.200s': data_offsets [%lld, %lld] out of range: the data "
                        "section has %zu bytes (the file is truncated or the offsets are wrong)", file, name, ob, oe,
                        data_size);
    if (oe - ob != nbytes)
        return w22_fail(W22_ERR_FORMAT, "%s: tensor '%.200s': shape %s of %s is %lld bytes, but data_offsets "
                        "[%lld, %lld] span %lld bytes", file, name, st, w22_dtype_name(t->dtype),
                        (long long)nbytes, ob, oe, oe - ob);
    t->numel = numel;
    t->nbytes = (size_t)nbytes;
    t->data = data + ob;
    t->name = dup_text(name, e->key_len, "a tensor name");
    return t->name ? W22_OK : W22_ERR_OUT_OF_MEMORY;
}

/* A tensor's byte range [b, e) in the data section, for the layout check. */
typedef struct {
    uint64_t b, e;
    int i;
} span;

static int cmp_span(const void *x, const void *y) {
    const span *a = x, *c = y;
    if (a->b != c->b) return a->b < c->b ? -1 : 1;
    if (a->e != c->e) return a->e < c->e ? -1 : 1;
    return (a->i > c->i) - (a->i < c->i);
}

static w22_status layout_fail(const w22_st_file *f, const char *file, const span *prev, const span *cur) {
    const char *name = f->tensors[cur->i].name;
    unsigned long long b = cur->b, e = cur->e;
    if (!prev)
        return w22_fail(W22_ERR_FORMAT, "%s: tensor '%.200s' data_offsets [%llu, %llu]: bytes [0, %llu) of the data "
                        "section belong to no tensor; expected the first tensor at offset 0 (safetensors: contiguous "
                        "tensors)", file, name, b, e, b);
    const char *pname = f->tensors[prev->i].name;
    unsigned long long pb = prev->b, pe = prev->e;
    if (cur->b < prev->e)
        return w22_fail(W22_ERR_FORMAT, "%s: tensors '%.200s' data_offsets [%llu, %llu] and '%.200s' [%llu, %llu] "
                        "overlap; expected disjoint byte ranges (safetensors: sorted, contiguous, no overlap)", file,
                        pname, pb, pe, name, b, e);
    return w22_fail(W22_ERR_FORMAT, "%s: bytes [%llu, %llu) of the data section, between tensors '%.200s' [%llu, %llu] "
                    "and '%.200s' [%llu, %llu], belong to no tensor; expected contiguous tensors (safetensors)", file,
                    pe, b, pname, pb, pe, name, b, e);
}

/* The reference reader's rule: sorted by data_offsets, each tensor starts where the previous one ends and the
 * last ends at the end of the data section. So no byte is shared by two tensors or belongs to none. */
static w22_status check_layout(const w22_st_file *f, const unsigned char *data, size_t data_size, const char *file) {
    int n = f->ntensors;
    span *v = w22_calloc((size_t)n, sizeof *v, "the tensors' byte ranges");
    if (!v) return W22_ERR_OUT_OF_MEMORY;
    for (int i = 0; i < n; i++) {
        v[i].b = (uint64_t)((const unsigned char *)f->tensors[i].data - data);
        v[i].e = v[i].b + f->tensors[i].nbytes;
        v[i].i = i;
    }
    qsort(v, (size_t)n, sizeof *v, cmp_span);
    uint64_t end = 0;
    w22_status s = W22_OK;
    for (int k = 0; k < n && s == W22_OK; k++) {
        if (v[k].b != end) s = layout_fail(f, file, k ? &v[k - 1] : NULL, &v[k]);
        end = v[k].e;
    }
    if (s == W22_OK && end != data_size)
        s = w22_fail(W22_ERR_FORMAT, "%s: the data section has %zu bytes but the tensors end at byte %llu%s%.200s%s; "
                     "expected the tensors to fill it exactly (safetensors: no trailing bytes)", file, data_size,
                     (unsigned long long)end, n ? " (tensor '" : "", n ? f->tensors[v[n - 1].i].name : "",
                     n ? "')" : "");
    free(v);
    return s;
}

static w22_status parse_file(const unsigned char *buf, size_t size, const char *file, w22_st_file *f) {
    if (size < 8)
        return w22_fail(W22_ERR_FORMAT, "%s: the file has %zu bytes, expected at least 8 (the header length)",
                        file, size);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | buf[i];
    if (hlen > ST_MAX_HEADER)
        return w22_fail(W22_ERR_FORMAT, "%s: header length %llu is absurd; expected at most %llu bytes (100 MiB) "
                        "(not a safetensors file?)", file, (unsigned long long)hlen,
                        (unsigned long long)ST_MAX_HEADER);
    if (hlen > size - 8)
        return w22_fail(W22_ERR_FORMAT, "%s: header length %llu, but only %zu bytes follow the 8-byte length "
                        "(truncated, or not a safetensors file)", file, (unsigned long long)hlen, size - 8);
    if (hlen < 2)
        return w22_fail(W22_ERR_FORMAT, "%s: header length %llu, expected at least 2 (the JSON object \"{}\")",
                        file, (unsigned long long)hlen);

    jparser p = {.s = (const char *)buf + 8, .n = (size_t)hlen, .file = file};
    p.arena = malloc((size_t)hlen + 1);
    if (!p.arena) return w22_fail(W22_ERR_OUT_OF_MEMORY, "%s: out of memory for a %llu-byte header", file,
                                  (unsigned long long)hlen);
    int root = -1;
    w22_status s;
    w22_jp_skip_ws(&p);
    if (p.pos >= p.n || p.s[p.pos] != '{') s = w22_jp_err(&p, "'{' (the header is a JSON object)");
    else s = w22_jp_value(&p, &root);
    if (s == W22_OK) {
        w22_jp_skip_ws(&p); /* writers pad the header with spaces */
        if (p.pos != p.n) s = w22_jp_err(&p, "only spaces after the header's closing '}'");
    }
    const unsigned char *data = buf + 8 + hlen;
    size_t data_size = size - 8 - (size_t)hlen;
    if (s == W22_OK) {
        const jnode *r = &p.nodes[root];
        int nt = r->nchild - (member(&p, r, "__metadata__") ? 1 : 0);
        f->tensors = w22_calloc((size_t)nt, sizeof *f->tensors, "the tensor table");
        if (!f->tensors) s = W22_ERR_OUT_OF_MEMORY;
        for (int c = r->first; c >= 0 && s == W22_OK; c = p.nodes[c].next) {
            const jnode *e = &p.nodes[c];
            if (e->key_len == 12 && memcmp(e->key, "__metadata__", 12) == 0) s = read_metadata(&p, e, f);
            else if ((s = read_tensor(&p, e, data, data_size, &f->tensors[f->ntensors])) == W22_OK) f->ntensors++;
        }
    }
    if (s == W22_OK) s = check_layout(f, data, data_size, file);
    free(p.nodes);
    free(p.arena);
    return s;
}

void w22_st_close(w22_st_file *f) {
    if (!f) return;
    for (int i = 0; i < f->ntensors; i++) free(f->tensors[i].name);
    free(f->tensors);
    for (int i = 0; i < f->nmeta; i++) {
        free(f->meta_keys[i]);
        free(f->meta_values[i]);
    }
    free(f->meta_keys);
    free(f->meta_values);
    free(f->metadata_json);
    if (f->mapped && f->map) munmap(f->map, f->size);
    if (f->mapped) w22_st_unwatch(&f->watch);
    memset(f, 0, sizeof *f);
    f->watch.fd = -1;
}

static int64_t mtime_ns(const struct stat *st) {
#ifdef __linux__
    return (int64_t)st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec;
#else
    return (int64_t)st->st_mtime * 1000000000;
#endif
}

w22_status w22_st_unchanged(const w22_st_watch *watch, const char *path, const char *when) {
    if (!watch || watch->fd < 0) return W22_OK; /* nothing mapped from a file */
    struct stat st;
    if (fstat(watch->fd, &st) != 0)
        return w22_fail(W22_ERR_IO, "%s: cannot stat the mapped file %s: %s", path, when, strerror(errno));
    if ((int64_t)st.st_size == watch->size && mtime_ns(&st) == watch->mtime_ns) return W22_OK;
    return w22_fail(W22_ERR_IO, "%s changed in place after it was mapped (%s: %lld bytes then, %lld now%s); the weights "
                    "read from it can no longer be trusted: load it again (a file replaced by a rename is safe, one "
                    "written over in place is not)", path, when, (long long)watch->size, (long long)st.st_size,
                    (int64_t)st.st_size == watch->size ? ", modified since" : "");
}

void w22_st_unwatch(w22_st_watch *watch) {
    if (watch && watch->fd >= 0) close(watch->fd);
    if (watch) watch->fd = -1;
}

static w22_status parse_into(const void *buf, size_t size, const char *file, w22_st_file *f) {
    w22_status s = parse_file(buf, size, file, f);
    if (s != W22_OK) {
        /* a partly filled table is freed but the buffer is the caller's */
        f->mapped = 0;
        w22_st_close(f);
    }
    return s;
}

w22_status w22_st_parse(const void *buf, size_t size, w22_st_file *f) {
    if (!f) return w22_fail(W22_ERR_INVALID_ARG, "w22_st_parse: f is NULL, expected a file object");
    memset(f, 0, sizeof *f);
    f->watch.fd = -1; /* a buffer, no file */
    if (!buf && size) return w22_fail(W22_ERR_INVALID_ARG, "w22_st_parse: buf is NULL with size %zu", size);
    f->map = (void *)buf;
    f->size = size;
    w22_status s = parse_into(buf ? buf : "", size, "<memory>", f);
    if (s == W22_OK) {
        f->map = (void *)buf;
        f->size = size;
    }
    return s;
}

w22_status w22_st_open(const char *path, w22_st_file *f) {
    if (!f) return w22_fail(W22_ERR_INVALID_ARG, "w22_st_open: f is NULL, expected a file object");
    memset(f, 0, sizeof *f);
    f->watch.fd = -1;
    if (!path) return w22_fail(W22_ERR_INVALID_ARG, "w22_st_open: path is NULL");
    int fd;
    struct stat st;
    W22_TRY(w22_open_regular(path, "a .safetensors file", &fd, &st));
    size_t size = (size_t)st.st_size;
    if (size < 8) {
        close(fd);
        return w22_fail(W22_ERR_FORMAT, "%s: the file has %zu bytes, expected at least 8 (the header length)",
                        path, size);
    }
    /* MAP_PRIVATE + PROT_READ: the weights are read in place, and nobody can write through the mapping. The file
     * stays open (f->watch) so that a later reader can see whether it changed in place (w22_st_unchanged). */
    void *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    if (map == MAP_FAILED) {
        close(fd);
        return w22_fail(W22_ERR_IO, "%s: cannot map %zu bytes: %s", path, size, strerror(e));
    }
    f->map = map;
    f->size = size;
    f->mapped = 1;
    f->watch = (w22_st_watch){fd, (int64_t)st.st_size, mtime_ns(&st)};
    w22_status s = parse_file(map, size, path, f);
    if (s != W22_OK) w22_st_close(f);
    return s;
}

const w22_st_tensor *w22_st_find(const w22_st_file *f, const char *name) {
    if (!f || !name) return NULL;
    for (int i = 0; i < f->ntensors; i++)
        if (strcmp(f->tensors[i].name, name) == 0) return &f->tensors[i];
    return NULL;
}

const char *w22_st_meta(const w22_st_file *f, const char *key) {
    if (!f || !key) return NULL;
    for (int i = 0; i < f->nmeta; i++)
        if (strcmp(f->meta_keys[i], key) == 0) return f->meta_values[i];
    return NULL;
}

/* ---------------------------------------------------------------------------------------------------------- */
/* The writer.                                                                                                  */

typedef struct {
    char *p;
    size_t len, cap;
    int oom;
} sbuf;

static void sb_add(sbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 1024;
        while (cap < b->len + n + 1) cap *= 2;
        char *np = realloc(b->p, cap);
        if (!np) { b->oom = 1; return; }
        b->p = np;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}

static void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf *b, const char *fmt, ...) {
    char tmp[128];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    sb_add(b, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

static void sb_json_string(sbuf *b, const char *s) {
    sb_add(b, "\"", 1);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            char e[2] = {'\\', (char)c};
            sb_add(b, e, 2);
        } else if (c < 0x20) {
            sb_printf(b, "\\u%04x", c);
        } else {
            sb_add(b, (const char *)&c, 1);
        }
    }
    sb_add(b, "\"", 1);
}

static int write_all(int fd, const void *buf, size_t n) {
    const char *p = buf;
    while (n) {
        size_t chunk = n > ((size_t)1 << 30) ? (size_t)1 << 30 : n;
        ssize_t w = write(fd, p, chunk);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static w22_status check_write_args(const char *path, const w22_st_write_tensor *t, int n,
                                   const char *const *meta_kv, int n_meta, size_t *sizes) {
    if (!path || !*path) return w22_fail(W22_ERR_INVALID_ARG, "w22_st_write: path is NULL or empty");
    if (n < 0 || (n > 0 && !t))
        return w22_fail(W22_ERR_INVALID_ARG, "w22_st_write: %d tensors at %p, expected n >= 0 and a table", n,
                        (const void *)t);
    if (n_meta < 0 || (n_meta > 0 && !meta_kv))
        return w22_fail(W22_ERR_INVALID_ARG, "w22_st_write: %d metadata pairs at %p", n_meta, (const void *)meta_kv);
    for (int i = 0; i < 2 * n_meta; i++)
        if (!meta_kv[i]) return w22_fail(W22_ERR_INVALID_ARG, "w22_st_write: metadata string %d is NULL", i);
    for (int i = 0; i < n; i++) {
        if (!t[i].name || !*t[i].name || strcmp(t[i].name, "__metadata__") == 0)
            return w22_fail(W22_ERR_INVALID_ARG, "w22_st_write: tensor %d's name is '%s', expected a tensor name",
                            i, t[i].name ? t[i].name : "(NULL)");
        if (t[i].dtype != W22_DTYPE_F32 && t[i].dtype != W22_DTYPE_BF16 && t[i].dtype != W22_DTYPE_F16)
            return w22_fail(W22_ERR_INVALID_ARG, "w22_st_write: tensor '%s' has dtype %d, expected F32/BF16/F16",
                            t[i].name, (int)t[i].dtype);
        if (t[i].ndim < 0 || t[i].ndim > W22_ST_MAX_DIMS || (t[i].ndim > 0 && !t[i].shape))
            return w22_fail(W22_ERR_INVALID_ARG, "w22_st_write: tensor '%s' has %d dimensions, expected 0..%d",
                            t[i].name, t[i].ndim, W22_ST_MAX_DIMS);
        int64_t numel = 1;
        for (int d = 0; d < t[i].ndim; d++)
            if (t[i].shape[d] < 0 || __builtin_mul_overflow(numel, t[i].shape[d], &numel))
                return w22_fail(W22_ERR_INVALID_ARG, "w22_st_write: tensor '%s': dimension %d is %lld, expected "
                                ">= 0 with a product that fits int64", t[i].name, d, (long long)t[i].shape[d]);
        if (__builtin_mul_overflow((size_t)numel, w22_dtype_size(t[i].dtype), &sizes[i]))
            return w22_fail(W22_ERR_INVALID_ARG, "w22_st_write: tensor '%s' is too large", t[i].name);
        if (sizes[i] && !t[i].data)
            return w22_fail(W22_ERR_INVALID_ARG, "w22_st_write: tensor '%s' has %zu bytes but data is NULL",
                            t[i].name, sizes[i]);
        for (int j = 0; j < i; j++)
            if (strcmp(t[j].name, t[i].name) == 0)
                return w22_fail(W22_ERR_INVALID_ARG, "w22_st_write: tensor name '%s' appears twice (%d and %d), "
                                "expected unique names", t[i].name, j, i);
    }
    return W22_OK;
}

/* The header: {"__metadata__": {...}, "name": {"dtype", "shape", "data_offsets"}, ...}, padded with spaces so
 * that the data section starts at a multiple of 8 bytes (every tensor of an all-F32 file is then 4-aligned). */
static w22_status build_header(const w22_st_write_tensor *t, int n, const char *const *meta_kv, int n_meta,
                               const size_t *sizes, sbuf *h) {
    sb_add(h, "{", 1);
    if (n_meta > 0) {
        sb_add(h, "\"__metadata__\":{", 16);
        for (int i = 0; i < n_meta; i++) {
            if (i) sb_add(h, ",", 1);
            sb_json_string(h, meta_kv[2 * i]);
            sb_add(h, ":", 1);
            sb_json_string(h, meta_kv[2 * i + 1]);
        }
        sb_add(h, "}", 1);
    }
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        if (i || n_meta > 0) sb_add(h, ",", 1);
        sb_json_string(h, t[i].name);
        sb_printf(h, ":{\"dtype\":\"%s\",\"shape\":[", w22_dtype_name(t[i].dtype));
        for (int d = 0; d < t[i].ndim; d++) sb_printf(h, "%s%lld", d ? "," : "", (long long)t[i].shape[d]);
        sb_printf(h, "],\"data_offsets\":[%zu,%zu]}", off, off + sizes[i]);
        off += sizes[i];
    }
    sb_add(h, "}", 1);
    while (h->len % 8) sb_add(h, " ", 1);
    if (h->oom) return w22_fail(W22_ERR_OUT_OF_MEMORY, "w22_st_write: out of memory for the header");
    return W22_OK;
}

static void sync_dir(const char *path) {
    /* best effort: makes the rename itself durable */
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (!slash) snprintf(dir, sizeof dir, ".");
    else if (slash == dir) dir[1] = 0;
    else *slash = 0;
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        if (fsync(fd)) { /* ignored: the data is already synced */ }
        close(fd);
    }
}

/* Moves tmp to path. Without overwrite, link() gives "fail if path exists" atomically (a file that appeared
 * since our first check is not clobbered); file systems without hard links fall back to check + rename. */
static w22_status publish(const char *tmp, const char *path, int overwrite) {
    if (!overwrite) {
        if (link(tmp, path) == 0) {
            unlink(tmp);
            return W22_OK;
        }
        if (errno == EEXIST)
            return w22_fail(W22_ERR_EXISTS, "%s exists already; expected a new file (left unchanged)", path);
        struct stat st;
        if (lstat(path, &st) == 0)
            return w22_fail(W22_ERR_EXISTS, "%s exists already; expected a new file (left unchanged)", path);
    }
    if (rename(tmp, path) != 0)
        return w22_fail(W22_ERR_IO, "%s: cannot rename the temporary file %s to it: %s", path, tmp, strerror(errno));
    return W22_OK;
}

w22_status w22_st_write(const char *path, const w22_st_write_tensor *t, int n, const char *const *meta_kv,
                        int n_meta, int overwrite) {
    size_t *sizes = calloc(n > 0 ? (size_t)n : 1, sizeof *sizes);
    if (!sizes) return w22_fail(W22_ERR_OUT_OF_MEMORY, "w22_st_write: out of memory");
    w22_status s = check_write_args(path, t, n, meta_kv, n_meta, sizes);
    if (s != W22_OK) {
        free(sizes);
        return s;
    }
    struct stat st;
    if (!overwrite && lstat(path, &st) == 0) {
        free(sizes);
        return w22_fail(W22_ERR_EXISTS, "%s exists already; expected a new file (left unchanged)", path);
    }
    sbuf h = {0};
    s = build_header(t, n, meta_kv, n_meta, sizes, &h);
    size_t tlen = strlen(path) + 16;
    char *tmp = malloc(tlen);
    int fd = -1;
    if (s == W22_OK && !tmp) s = w22_fail(W22_ERR_OUT_OF_MEMORY, "w22_st_write: out of memory");
    if (s == W22_OK && tmp) {
        snprintf(tmp, tlen, "%s.tmp-XXXXXX", path);
        fd = mkstemp(tmp);
        if (fd < 0) s = w22_fail(W22_ERR_IO, "%s: cannot create the temporary file %s: %s", path, tmp,
                                 strerror(errno));
    }
    if (s == W22_OK) {
        unsigned char len8[8];
        for (int i = 0; i < 8; i++) len8[i] = (unsigned char)((uint64_t)h.len >> (8 * i));
        int bad = fchmod(fd, 0644) != 0 || write_all(fd, len8, 8) || write_all(fd, h.p, h.len);
        for (int i = 0; i < n && !bad; i++)
            if (sizes[i]) bad = write_all(fd, t[i].data, sizes[i]);
        if (!bad) bad = fsync(fd) != 0;
        if (bad) s = w22_fail(W22_ERR_IO, "%s: writing the temporary file %s failed: %s", path, tmp, strerror(errno));
        if (close(fd) != 0 && s == W22_OK)
            s = w22_fail(W22_ERR_IO, "%s: closing the temporary file %s failed: %s", path, tmp, strerror(errno));
        if (s == W22_OK) s = publish(tmp, path, overwrite);
        if (s == W22_OK) sync_dir(path);
        else unlink(tmp);
    }
    free(tmp);
    free(h.p);
    free(sizes);
    return s;
}
