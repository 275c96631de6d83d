/* .npy files: a strict header parser (nothing in the file is trusted: the magic, the version, the dict's keys and
 * values, and the data's size against the file's size are all checked), a reader to float32 and a float32 writer.
 * Format: numpy/lib/format.py (magic "\x93NUMPY", version, little-endian header length, a Python dict literal
 * padded with spaces and ended by '\n', then the data in C order). */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common.h"
#include "io/io.h"
#include "io/outfile.h"

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
               "the .npy and .safetensors code assumes a little-endian host");

typedef struct {
    const char *p, *end;
    const char *what;
} cursor;

/* How many bytes of the header are left to show in a message, at most max: the header is not NUL-terminated, so
 * every "%.*s" of it is bounded by what is left before its end. */
static int shown(const cursor *c, int max) {
    ptrdiff_t left = c->end - c->p;
    return left < max ? (int)left : max;
}

/* "'<up to 12 bytes>'" of what follows, or "the end of the header", for "found %s%.*s%s". */
#define FOUND(c) shown(c, 1) ? "'" : "the end of the header", shown(c, 12), (c)->p, shown(c, 1) ? "'" : ""

static void skip_ws(cursor *c) {
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t')) c->p++;
}

static w22_status expect_char(cursor *c, char ch, const char *where) {
    skip_ws(c);
    if (c->p >= c->end || *c->p != ch)
        return w22_fail(W22_ERR_FORMAT, "%s: npy header: expected '%c' %s, found %s%.*s%s", c->what, ch, where,
                        FOUND(c));
    c->p++;
    return W22_OK;
}

/* A Python string literal without escapes: 'abc' or "abc". */
static w22_status parse_str(cursor *c, char *out, size_t cap, const char *where) {
    skip_ws(c);
    if (c->p >= c->end || (*c->p != '\'' && *c->p != '"'))
        return w22_fail(W22_ERR_FORMAT, "%s: npy header: expected a quoted string %s, found %s%.*s%s", c->what,
                        where, FOUND(c));
    char q = *c->p++;
    size_t n = 0;
    while (c->p < c->end && *c->p != q) {
        if (*c->p == '\\' || *c->p == '\n' || n + 1 >= cap)
            return w22_fail(W22_ERR_FORMAT, "%s: npy header: expected a short plain string %s", c->what, where);
        out[n++] = *c->p++;
    }
    if (c->p >= c->end)
        return w22_fail(W22_ERR_FORMAT, "%s: npy header: expected the string %s to end, found the header's end",
                        c->what, where);
    c->p++;
    out[n] = 0;
    return W22_OK;
}

static w22_status parse_bool(cursor *c, int *v) {
    skip_ws(c);
    size_t left = (size_t)(c->end - c->p);
    if (left >= 4 && !memcmp(c->p, "True", 4)) return c->p += 4, *v = 1, W22_OK;
    if (left >= 5 && !memcmp(c->p, "False", 5)) return c->p += 5, *v = 0, W22_OK;
    return w22_fail(W22_ERR_FORMAT, "%s: npy header: 'fortran_order': expected True or False, found %s%.*s%s",
                    c->what, FOUND(c));
}

/* A tuple of non-negative ints: (), (5,), (1, 2, 3) or (1, 2, 3,). Python 2's "3L" is accepted. */
static w22_status parse_shape(cursor *c, int *ndim, int64_t *shape) {
    W22_TRY(expect_char(c, '(', "to start 'shape'"));
    *ndim = 0;
    int trailing_comma = 0;
    for (;;) {
        skip_ws(c);
        if (c->p < c->end && *c->p == ')') break;
        if (c->p >= c->end || *c->p < '0' || *c->p > '9')
            return w22_fail(W22_ERR_FORMAT, "%s: npy header: 'shape': expected a non-negative integer, found "
                            "%s%.*s%s", c->what, FOUND(c));
        int64_t v = 0;
        while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
            if (v > ((int64_t)1 << 50))
                return w22_fail(W22_ERR_FORMAT, "%s: npy header: 'shape': a dimension is too large", c->what);
            v = v * 10 + (*c->p++ - '0');
        }
        if (c->p < c->end && *c->p == 'L') c->p++;
        if (*ndim >= W22_NPY_MAX_DIMS)
            return w22_fail(W22_ERR_FORMAT, "%s: npy header: 'shape': expected at most %d dimensions, found more",
                            c->what, W22_NPY_MAX_DIMS);
        shape[(*ndim)++] = v;
        skip_ws(c);
        trailing_comma = 0;
        if (c->p < c->end && *c->p == ',') {
            c->p++;
            trailing_comma = 1;
            continue;
        }
        if (c->p < c->end && *c->p == ')') break;
        return w22_fail(W22_ERR_FORMAT, "%s: npy header: 'shape': expected ',' or ')', found %s%.*s%s", c->what,
                        FOUND(c));
    }
    c->p++;
    if (*ndim == 1 && !trailing_comma)
        return w22_fail(W22_ERR_FORMAT, "%s: npy header: 'shape': expected a tuple, found '(%lld)' (a one-element "
                        "tuple is written '(%lld,)')", c->what, (long long)shape[0], (long long)shape[0]);
    return W22_OK;
}

static w22_status parse_descr(const char *d, const char *what, w22_npy_type *t) {
    if (!strcmp(d, "<f4")) return *t = W22_NPY_F32, W22_OK;
    if (!strcmp(d, "<f2")) return *t = W22_NPY_F16, W22_OK;
    if (!strcmp(d, "<u2")) return *t = W22_NPY_U2, W22_OK;
    return w22_fail(W22_ERR_BAD_DTYPE, "%s: npy dtype: expected '<f4' (float32), '<f2' (float16) or '<u2' (raw "
                    "bf16), found '%s'%s", what, d, d[0] == '>' ? " (big-endian)" : "");
}

w22_status w22_npy_parse(const void *buf, size_t size, const char *what, w22_npy_info *info) {
    const unsigned char *b = buf;
    memset(info, 0, sizeof *info);
    if (size < 10 || memcmp(b, "\x93NUMPY", 6) != 0)
        return w22_fail(W22_ERR_FORMAT, "%s: expected an .npy file (starting with \\x93NUMPY), found %s", what,
                        size < 10 ? "a file shorter than the magic" : "other bytes");
    if (b[6] < 1 || b[6] > 3 || b[7] != 0)
        return w22_fail(W22_ERR_FORMAT, "%s: npy version: expected 1.0, 2.0 or 3.0, found %d.%d", what, b[6], b[7]);
    info->major = b[6];
    size_t prefix = info->major == 1 ? 10 : 12, hlen;
    if (size < prefix) return w22_fail(W22_ERR_FORMAT, "%s: npy file truncated inside its header length", what);
    if (info->major == 1) hlen = (size_t)b[8] | (size_t)b[9] << 8;
    else hlen = (size_t)b[8] | (size_t)b[9] << 8 | (size_t)b[10] << 16 | (size_t)b[11] << 24;
    if (hlen > size - prefix)
        return w22_fail(W22_ERR_FORMAT, "%s: npy header length %zu: expected at most the %zu bytes left in the file",
                        what, hlen, size - prefix);
    if (hlen == 0 || b[prefix + hlen - 1] != '\n')
        return w22_fail(W22_ERR_FORMAT, "%s: npy header: expected it to end with a newline, found %s", what,
                        hlen ? "another byte" : "an empty header");
    if (memchr(b + prefix, 0, hlen))
        return w22_fail(W22_ERR_FORMAT, "%s: npy header: expected text, found a NUL byte", what);

    cursor c = {(const char *)b + prefix, (const char *)b + prefix + hlen - 1, what};
    int seen_descr = 0, seen_fortran = 0, seen_shape = 0, fortran = 0;
    char key[32], descr[32];
    W22_TRY(expect_char(&c, '{', "to start the header dict"));
    for (;;) {
        skip_ws(&c);
        if (c.p < c.end && *c.p == '}') break;
        W22_TRY(parse_str(&c, key, sizeof key, "as a key of the header dict"));
        W22_TRY(expect_char(&c, ':', "after a key"));
        int *seen;
        if (!strcmp(key, "descr")) {
            seen = &seen_descr;
            W22_TRY(parse_str(&c, descr, sizeof descr, "as 'descr'"));
        } else if (!strcmp(key, "fortran_order")) {
            seen = &seen_fortran;
            W22_TRY(parse_bool(&c, &fortran));
        } else if (!strcmp(key, "shape")) {
            seen = &seen_shape;
            W22_TRY(parse_shape(&c, &info->ndim, info->shape));
        } else {
            return w22_fail(W22_ERR_FORMAT, "%s: npy header: expected the keys 'descr', 'fortran_order', 'shape', "
                            "found '%s'", what, key);
        }
        if (*seen) return w22_fail(W22_ERR_FORMAT, "%s: npy header: key '%s' appears twice", what, key);
        *seen = 1;
        skip_ws(&c);
        if (c.p < c.end && *c.p == ',') {
            c.p++;
            continue;
        }
        if (c.p < c.end && *c.p == '}') break;
        return w22_fail(W22_ERR_FORMAT, "%s: npy header: expected ',' or '}' after '%s', found %s%.*s%s", what, key,
                        FOUND(&c));
    }
    c.p++; /* '}' */
    skip_ws(&c);
    if (c.p != c.end)
        return w22_fail(W22_ERR_FORMAT, "%s: npy header: expected only padding after the dict, found %s%.*s%s", what,
                        FOUND(&c));
    if (!seen_descr || !seen_fortran || !seen_shape)
        return w22_fail(W22_ERR_FORMAT, "%s: npy header: expected the keys 'descr', 'fortran_order', 'shape', "
                        "missing '%s'", what, !seen_descr ? "descr" : !seen_fortran ? "fortran_order" : "shape");
    W22_TRY(parse_descr(descr, what, &info->type));
    if (fortran)
        return w22_fail(W22_ERR_FORMAT, "%s: npy: expected C order (fortran_order False), found fortran_order True",
                        what);

    info->numel = 1;
    for (int i = 0; i < info->ndim; i++) {
        if (info->shape[i] && info->numel > ((int64_t)1 << 60) / info->shape[i])
            return w22_fail(W22_ERR_FORMAT, "%s: npy shape: the element count overflows", what);
        info->numel *= info->shape[i];
    }
    info->data_offset = prefix + hlen;
    info->data_bytes = (size_t)info->numel * (info->type == W22_NPY_F32 ? 4 : 2);
    if (size - info->data_offset != info->data_bytes)
        return w22_fail(W22_ERR_FORMAT, "%s: npy data: expected %zu bytes for %lld elements of '%s', found %zu%s",
                        what, info->data_bytes, (long long)info->numel, descr, size - info->data_offset,
                        size - info->data_offset < info->data_bytes ? " (truncated)" : " (trailing bytes)");
    return W22_OK;
}

w22_status w22_npy_read(const char *path, int u2_is_bf16, float **data, int *ndim, int64_t shape[W22_NPY_MAX_DIMS]) {
    unsigned char *buf = NULL;
    size_t size = 0;
    w22_npy_info info;
    *data = NULL;
    /* the whole file in memory (latents are small; video is never read back) */
    W22_TRY(w22_read_input(path, "npy file", &buf, &size));
    w22_status s = w22_npy_parse(buf, size, path, &info);
    if (s == W22_OK && info.type == W22_NPY_U2 && !u2_is_bf16)
        s = w22_fail(W22_ERR_BAD_DTYPE, "%s: npy dtype: expected '<f4' or '<f2', found '<u2' (uint16; raw bf16 is "
                     "not accepted here)", path);
    float *out = NULL;
    if (s == W22_OK && !(out = w22_malloc((size_t)info.numel * 4, "npy data"))) s = W22_ERR_OUT_OF_MEMORY;
    if (s == W22_OK) {
        w22_dtype t = info.type == W22_NPY_F32 ? W22_DTYPE_F32 : info.type == W22_NPY_F16 ? W22_DTYPE_F16
                                                                                           : W22_DTYPE_BF16;
        w22_to_f32(buf + info.data_offset, t, (size_t)info.numel, out);
        *data = out;
        *ndim = info.ndim;
        memcpy(shape, info.shape, sizeof info.shape);
    }
    free(buf);
    return s;
}

size_t w22_npy_header_f32(int ndim, const int64_t *shape, char *buf, size_t cap) {
    char dict[512], dims[400] = "";
    size_t n = 0;
    if (ndim < 0 || ndim > W22_NPY_MAX_DIMS) return 0;
    for (int i = 0; i < ndim; i++)
        n += (size_t)snprintf(dims + n, sizeof dims - n, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (ndim == 1) snprintf(dims + n, sizeof dims - n, ",");
    int d = snprintf(dict, sizeof dict, "{'descr': '<f4', 'fortran_order': False, 'shape': (%s), }", dims);
    if (d < 0 || (size_t)d >= sizeof dict) return 0;
    /* magic (6) + version (2) + length (2) + dict + spaces + '\n', to a multiple of 64 as numpy pads */
    size_t total = (10 + (size_t)d + 1 + 63) / 64 * 64;
    if (total > cap || total - 10 > 65535) return 0;
    memcpy(buf, "\x93NUMPY\x01\x00", 8);
    buf[8] = (char)((total - 10) & 0xff);
    buf[9] = (char)((total - 10) >> 8);
    memcpy(buf + 10, dict, (size_t)d);
    memset(buf + 10 + d, ' ', total - 10 - (size_t)d - 1);
    buf[total - 1] = '\n';
    return total;
}

w22_status w22_npy_write(const char *path, const float *data, int ndim, const int64_t *shape, int overwrite) {
    char header[1024];
    size_t hlen = w22_npy_header_f32(ndim, shape, header, sizeof header);
    if (!hlen) return w22_fail(W22_ERR_INVALID_ARG, "%s: npy: expected at most %d dimensions, found %d", path,
                               W22_NPY_MAX_DIMS, ndim);
    /* the data's size: every dimension non-negative and the byte count within size_t (and off_t) */
    uint64_t bytes = 4;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0 || (shape[i] && bytes > (UINT64_C(1) << 62) / (uint64_t)shape[i]))
            return w22_fail(W22_ERR_INVALID_ARG, "%s: npy: expected non-negative dimensions of at most 2^62 bytes "
                            "in all, found dimension %d = %lld", path, i, (long long)shape[i]);
        bytes *= (uint64_t)shape[i];
    }
    w22_outfile o;
    w22_status s = w22_outfile_create(&o, path, 0, overwrite);
    if (s != W22_OK) return s;
    s = w22_outfile_pwrite(&o, header, hlen, 0);
    if (s == W22_OK) s = w22_outfile_pwrite(&o, data, (size_t)bytes, hlen);
    if (s == W22_OK) return w22_outfile_commit(&o);
    w22_outfile_discard(&o);
    return s;
}
