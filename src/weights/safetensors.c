/* The strict safetensors reader and the atomic writer (src/weights/safetensors.h).
 *
 * A file is: an 8-byte little-endian header length N, N bytes of JSON, then the data section. Before any pointer
 * into the data is handed out, every field of the header is checked against the file and against the others:
 * the JSON itself, each dtype, shape and byte range. A hostile or truncated file gives an error that names the
 * file, the tensor and what was expected, never a crash or a read outside the buffer. The JSON parser is small
 * and hand-written because we want every rejection to say where and why (the byte offset in the header); it also
 * reads the JSON files next to the weights (json.h: a diffusers config.json, a sharded index). */
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
#include "weights/json.h"
#include "weights/safetensors.h"

/* A real decoder header is a few tens of KiB; 100 MiB (the limit of the reference implementation) rejects an
 * absurd length before we allocate anything for it. */
#define ST_MAX_HEADER ((uint64_t)100 << 20)
/* Nesting deeper than this is never a safetensors header; the limit keeps the recursion off the stack's edge. */
#define JSON_MAX_DEPTH 64
/* Values in one header: a 100 MiB header of "[0,0,0..." would otherwise cost gigabytes of nodes. */
#define JSON_MAX_NODES (1 << 22)

/* ---------------------------------------------------------------------------------------------------------- */
/* JSON: parsed into a flat node table (children linked by index), strings decoded into one arena.             */

enum { J_OBJ, J_ARR, J_STR, J_INT, J_NUM, J_LIT };
static const char *const jtype_name[] = {"an object", "an array", "a string", "an integer", "a non-integer number",
                                         "a literal (true/false/null)"};

typedef struct {
    int type;
    const char *str; /* J_STR: decoded and NUL-terminated, len bytes (an embedded \u0000 makes strlen < len) */
    size_t len;
    int64_t ival;    /* J_INT */
    int first, next; /* first child, next sibling; -1 at the end */
    int nchild;
    const char *key; /* for a member of an object: its decoded key */
    size_t key_len;
    size_t begin, end; /* the value's bytes in the header text */
} jnode;

typedef struct {
    const char *s;
    size_t n, pos;
    jnode *nodes;
    int nnodes, cap;
    char *arena;
    size_t arena_used;
    const char *file;
    const char *what; /* "header JSON" (the default) or "JSON" for other files, in messages */
    int depth;
} jparser;

static const char *jwhat(const jparser *p) { return p->what ? p->what : "header JSON"; }

static w22_status jerr(jparser *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static w22_status jerr(jparser *p, const char *fmt, ...) {
    char msg[512], found[32];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (p->pos >= p->n) snprintf(found, sizeof found, "the end of the header");
    else if (p->s[p->pos] >= 0x20 && p->s[p->pos] < 0x7f) snprintf(found, sizeof found, "'%c'", p->s[p->pos]);
    else snprintf(found, sizeof found, "byte 0x%02x", (unsigned char)p->s[p->pos]);
    return w22_fail(W22_ERR_FORMAT, "%s: %s at byte %zu: expected %s, found %s", p->file, jwhat(p), p->pos, msg,
                    found);
}

static void skip_ws(jparser *p) {
    while (p->pos < p->n && (p->s[p->pos] == ' ' || p->s[p->pos] == '\t' || p->s[p->pos] == '\n' ||
                             p->s[p->pos] == '\r'))
        p->pos++;
}

static int new_node(jparser *p, int type) {
    if (p->nnodes == p->cap) {
        if (p->cap >= JSON_MAX_NODES) return -1;
        int cap = p->cap ? 2 * p->cap : 64;
        jnode *nn = realloc(p->nodes, (size_t)cap * sizeof *nn);
        if (!nn) return -2;
        p->nodes = nn;
        p->cap = cap;
    }
    jnode *j = &p->nodes[p->nnodes];
    memset(j, 0, sizeof *j);
    j->type = type;
    j->first = j->next = -1;
    j->begin = p->pos;
    return p->nnodes++;
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static int read_hex4(jparser *p, size_t at, unsigned *out) {
    if (at + 4 > p->n) return 0;
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        int h = hexval(p->s[at + i]);
        if (h < 0) return 0;
        v = v * 16 + (unsigned)h;
    }
    *out = v;
    return 1;
}

/* Length of the valid UTF-8 sequence at s[0..avail), or 0 (overlong forms, surrogates and > U+10FFFF are
 * invalid, as RFC 3629 says). */
static int utf8_len(const unsigned char *s, size_t avail) {
    unsigned c = s[0];
    int len;
    unsigned lo = 0x80, hi = 0xbf;
    if (c >= 0xc2 && c <= 0xdf) len = 2;
    else if (c >= 0xe0 && c <= 0xef) {
        len = 3;
        if (c == 0xe0) lo = 0xa0;
        if (c == 0xed) hi = 0x9f;
    } else if (c >= 0xf0 && c <= 0xf4) {
        len = 4;
        if (c == 0xf0) lo = 0x90;
        if (c == 0xf4) hi = 0x8f;
    } else return 0;
    if ((size_t)len > avail) return 0;
    if (s[1] < lo || s[1] > hi) return 0;
    for (int i = 2; i < len; i++)
        if (s[i] < 0x80 || s[i] > 0xbf) return 0;
    return len;
}

static size_t put_utf8(char *d, unsigned cp) {
    if (cp < 0x80) { d[0] = (char)cp; return 1; }
    if (cp < 0x800) { d[0] = (char)(0xc0 | (cp >> 6)); d[1] = (char)(0x80 | (cp & 0x3f)); return 2; }
    if (cp < 0x10000) {
        d[0] = (char)(0xe0 | (cp >> 12)); d[1] = (char)(0x80 | ((cp >> 6) & 0x3f)); d[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    d[0] = (char)(0xf0 | (cp >> 18)); d[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    d[2] = (char)(0x80 | ((cp >> 6) & 0x3f)); d[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

/* A string at p->pos (which is '"'), decoded into the arena. A decoded string is never longer than its source
 * (an escape of 6 or 12 bytes gives at most 3 or 4), and the closing quote pays for the NUL, so the arena of
 * header length + 1 bytes never overflows. */
static w22_status parse_string(jparser *p, const char **out, size_t *out_len) {
    if (p->pos >= p->n || p->s[p->pos] != '"') return jerr(p, "a string");
    p->pos++;
    char *d = p->arena + p->arena_used, *d0 = d;
    for (;;) {
        if (p->pos >= p->n) return jerr(p, "the closing '\"' of a string");
        unsigned char c = (unsigned char)p->s[p->pos];
        if (c == '"') { p->pos++; break; }
        if (c < 0x20) return jerr(p, "a string character (control bytes must be escaped)");
        if (c == '\\') {
            if (p->pos + 1 >= p->n) return jerr(p, "an escape after '\\'");
            char e = p->s[p->pos + 1];
            const char *simple = strchr("\"\\/bfnrt", e);
            if (e && simple) {
                static const char repl[] = "\"\\/\b\f\n\r\t";
                *d++ = repl[simple - "\"\\/bfnrt"];
                p->pos += 2;
                continue;
            }
            if (e != 'u') { p->pos++; return jerr(p, "one of \" \\ / b f n r t u after '\\'"); }
            unsigned cp;
            if (!read_hex4(p, p->pos + 2, &cp)) { p->pos += 2; return jerr(p, "4 hex digits after \\u"); }
            p->pos += 6;
            if (cp >= 0xdc00 && cp <= 0xdfff) { p->pos -= 6; return jerr(p, "a high surrogate before a low one"); }
            if (cp >= 0xd800 && cp <= 0xdbff) {
                unsigned lo;
                if (p->pos + 1 >= p->n || p->s[p->pos] != '\\' || p->s[p->pos + 1] != 'u' ||
                    !read_hex4(p, p->pos + 2, &lo) || lo < 0xdc00 || lo > 0xdfff)
                    return jerr(p, "a \\uDC00-\\uDFFF low surrogate after the high surrogate \\u%04X", cp);
                p->pos += 6;
                cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
            }
            d += put_utf8(d, cp);
            continue;
        }
        if (c < 0x80) { *d++ = (char)c; p->pos++; continue; }
        int l = utf8_len((const unsigned char *)p->s + p->pos, p->n - p->pos);
        if (!l) return jerr(p, "valid UTF-8 in a string");
        memcpy(d, p->s + p->pos, (size_t)l);
        d += l;
        p->pos += (size_t)l;
    }
    *d++ = 0;
    *out = d0;
    *out_len = (size_t)(d - d0 - 1);
    p->arena_used += (size_t)(d - d0);
    return W22_OK;
}

static w22_status parse_number(jparser *p, jnode *j) {
    size_t start = p->pos;
    int neg = 0, integer = 1;
    if (p->s[p->pos] == '-') { neg = 1; p->pos++; }
    if (p->pos >= p->n || p->s[p->pos] < '0' || p->s[p->pos] > '9') return jerr(p, "a digit");
    uint64_t v = 0;
    int overflow = 0;
    if (p->s[p->pos] == '0') {
        p->pos++;
        if (p->pos < p->n && p->s[p->pos] >= '0' && p->s[p->pos] <= '9') return jerr(p, "no leading zeros");
    } else {
        while (p->pos < p->n && p->s[p->pos] >= '0' && p->s[p->pos] <= '9') {
            unsigned dgt = (unsigned)(p->s[p->pos] - '0');
            if (v > (UINT64_MAX - dgt) / 10) overflow = 1;
            else v = v * 10 + dgt;
            p->pos++;
        }
    }
    if (p->pos < p->n && p->s[p->pos] == '.') {
        integer = 0;
        p->pos++;
        if (p->pos >= p->n || p->s[p->pos] < '0' || p->s[p->pos] > '9') return jerr(p, "a digit after '.'");
        while (p->pos < p->n && p->s[p->pos] >= '0' && p->s[p->pos] <= '9') p->pos++;
    }
    if (p->pos < p->n && (p->s[p->pos] == 'e' || p->s[p->pos] == 'E')) {
        integer = 0;
        p->pos++;
        if (p->pos < p->n && (p->s[p->pos] == '+' || p->s[p->pos] == '-')) p->pos++;
        if (p->pos >= p->n || p->s[p->pos] < '0' || p->s[p->pos] > '9') return jerr(p, "a digit in the exponent");
        while (p->pos < p->n && p->s[p->pos] >= '0' && p->s[p->pos] <= '9') p->pos++;
    }
    if (!integer) { j->type = J_NUM; return W22_OK; }
    if (overflow || v > (uint64_t)INT64_MAX + (uint64_t)neg) {
        size_t at = p->pos;
        p->pos = start;
        w22_status s = jerr(p, "an integer within int64 (it has %zu digits)", at - start - (size_t)neg);
        p->pos = at;
        return s;
    }
    j->type = J_INT;
    j->ival = neg ? (int64_t)(0 - v) : (int64_t)v;
    return W22_OK;
}

static int cmp_keys(const void *a, const void *b) {
    const jnode *x = *(const jnode *const *)a, *y = *(const jnode *const *)b;
    size_t n = x->key_len < y->key_len ? x->key_len : y->key_len;
    int c = memcmp(x->key, y->key, n);
    if (c) return c;
    return x->key_len < y->key_len ? -1 : x->key_len > y->key_len;
}

/* Duplicate keys make a header mean two things (which tensor is "x"?), so any object with one is rejected. */
static w22_status check_duplicates(jparser *p, int obj) {
    int n = p->nodes[obj].nchild;
    if (n < 2) return W22_OK;
    const jnode **v = malloc((size_t)n * sizeof *v);
    if (!v) return w22_fail(W22_ERR_OUT_OF_MEMORY, "%s: out of memory checking %d JSON keys", p->file, n);
    int k = 0;
    for (int c = p->nodes[obj].first; c >= 0; c = p->nodes[c].next) v[k++] = &p->nodes[c];
    qsort(v, (size_t)n, sizeof *v, cmp_keys);
    w22_status s = W22_OK;
    for (int i = 1; i < n; i++)
        if (cmp_keys(&v[i - 1], &v[i]) == 0) {
            s = w22_fail(W22_ERR_FORMAT, "%s: %s: the object at byte %zu has the key '%.200s' twice; "
                         "expected unique keys%s", p->file, jwhat(p), p->nodes[obj].begin, v[i]->key,
                         p->what ? "" : " (tensor names)");
            break;
        }
    free(v);
    return s;
}

static w22_status parse_value(jparser *p, int *out);

static w22_status node_fail(jparser *p, int idx) {
    if (idx == -1)
        return w22_fail(W22_ERR_FORMAT, "%s: %s has more than %d values; expected %s", p->file, jwhat(p),
                        JSON_MAX_NODES, p->what ? "a smaller file" : "a safetensors header");
    return w22_fail(W22_ERR_OUT_OF_MEMORY, "%s: out of memory parsing the %s", p->file, jwhat(p));
}

static w22_status parse_container(jparser *p, int idx, char close) {
    p->pos++; /* '{' or '[' */
    skip_ws(p);
    if (p->pos < p->n && p->s[p->pos] == close) { p->pos++; return W22_OK; }
    int last = -1;
    for (;;) {
        const char *key = NULL;
        size_t key_len = 0;
        if (close == '}') {
            skip_ws(p);
            W22_TRY(parse_string(p, &key, &key_len));
            skip_ws(p);
            if (p->pos >= p->n || p->s[p->pos] != ':') return jerr(p, "':' after an object key");
            p->pos++;
        }
        skip_ws(p);
        int child;
        W22_TRY(parse_value(p, &child));
        jnode *c = &p->nodes[child];
        c->key = key;
        c->key_len = key_len;
        if (last < 0) p->nodes[idx].first = child;
        else p->nodes[last].next = child;
        last = child;
        p->nodes[idx].nchild++;
        skip_ws(p);
        if (p->pos < p->n && p->s[p->pos] == ',') { p->pos++; continue; }
        if (p->pos < p->n && p->s[p->pos] == close) { p->pos++; break; }
        return jerr(p, close == '}' ? "',' or '}' in an object" : "',' or ']' in an array");
    }
    return close == '}' ? check_duplicates(p, idx) : W22_OK;
}

static w22_status parse_value(jparser *p, int *out) {
    skip_ws(p);
    if (p->pos >= p->n) return jerr(p, "a value");
    int idx = new_node(p, J_LIT);
    if (idx < 0) return node_fail(p, idx);
    *out = idx;
    char c = p->s[p->pos];
    w22_status s = W22_OK;
    if (c == '{' || c == '[') {
        if (++p->depth > JSON_MAX_DEPTH) return jerr(p, "nesting at most %d deep", JSON_MAX_DEPTH);
        p->nodes[idx].type = c == '{' ? J_OBJ : J_ARR;
        s = parse_container(p, idx, c == '{' ? '}' : ']');
        p->depth--;
    } else if (c == '"') {
        const char *str;
        size_t len;
        s = parse_string(p, &str, &len);
        p->nodes[idx].type = J_STR;
        p->nodes[idx].str = str;
        p->nodes[idx].len = len;
    } else if (c == '-' || (c >= '0' && c <= '9')) {
        s = parse_number(p, &p->nodes[idx]);
    } else {
        static const char *const lits[] = {"true", "false", "null"};
        int ok = 0;
        for (int i = 0; i < 3 && !ok; i++) {
            size_t l = strlen(lits[i]);
            if (p->n - p->pos >= l && memcmp(p->s + p->pos, lits[i], l) == 0) {
                p->pos += l;
                ok = 1;
            }
        }
        if (!ok) return jerr(p, "a JSON value");
    }
    if (s == W22_OK) p->nodes[idx].end = p->pos;
    return s;
}

/* ---------------------------------------------------------------------------------------------------------- */
/* The parser for other JSON files (json.h): a config.json, a sharded index.                                   */

struct w22_json {
    char *text;   /* a copy of the source, NUL-terminated */
    size_t n;
    jnode *nodes;
    int nnodes;
    char *arena;
    int root;
};

w22_status w22_json_parse(const void *text, size_t n, const char *file, w22_json **out) {
    *out = NULL;
    w22_json *j = w22_calloc(1, sizeof *j, "a JSON document");
    if (!j) return W22_ERR_OUT_OF_MEMORY;
    j->text = w22_malloc(n + 1, "a JSON document's text");
    j->arena = w22_malloc(n + 1, "a JSON document's strings");
    if (!j->text || !j->arena) {
        w22_json_free(j);
        return W22_ERR_OUT_OF_MEMORY;
    }
    if (n) memcpy(j->text, text, n);
    j->text[n] = 0;
    j->n = n;
    jparser p = {.s = j->text, .n = n, .file = file, .what = "JSON", .arena = j->arena};
    w22_status s;
    skip_ws(&p);
    s = parse_value(&p, &j->root);
    if (s == W22_OK) {
        skip_ws(&p);
        if (p.pos != p.n) s = jerr(&p, "the end of the file after the JSON value");
    }
    j->nodes = p.nodes;
    j->nnodes = p.nnodes;
    if (s != W22_OK) {
        w22_json_free(j);
        return s;
    }
    *out = j;
    return W22_OK;
}

/* Opens path for reading as a regular file (O_NONBLOCK: a FIFO answers at once instead of blocking the open until
 * a writer comes, and is then refused); *st its stat. The messages name the file and `what` was expected. */
static w22_status open_regular(const char *path, const char *what, int *fd_out, struct stat *st) {
    *fd_out = -1;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0) return w22_fail(W22_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    if (fstat(fd, st) != 0) {
        int e = errno;
        close(fd);
        return w22_fail(W22_ERR_IO, "%s: cannot stat: %s", path, strerror(e));
    }
    if (!S_ISREG(st->st_mode)) {
        close(fd);
        return w22_fail(W22_ERR_IO, "%s: not a regular file; expected %s, found %s", path, what,
                        S_ISDIR(st->st_mode) ? "a directory" : S_ISFIFO(st->st_mode) ? "a FIFO" : "another kind of file");
    }
    *fd_out = fd;
    return W22_OK;
}

w22_status w22_json_read(const char *path, size_t max_bytes, w22_json **out) {
    *out = NULL;
    int fd;
    struct stat st;
    W22_TRY(open_regular(path, "a JSON file", &fd, &st));
    if ((uint64_t)st.st_size > max_bytes) {
        close(fd);
        return w22_fail(W22_ERR_FORMAT, "%s: %lld bytes; expected a JSON file of at most %zu bytes", path,
                        (long long)st.st_size, max_bytes);
    }
    size_t n = (size_t)st.st_size, got = 0;
    char *buf = w22_malloc(n + 1, path);
    if (!buf) return close(fd), W22_ERR_OUT_OF_MEMORY;
    while (got < n) {
        ssize_t k = read(fd, buf + got, n - got);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) {
            int e = errno;
            close(fd);
            free(buf);
            return w22_fail(W22_ERR_IO, "%s: reading: expected %zu bytes, read %zu%s%s", path, n, got,
                            k < 0 ? ": " : " (the file shrank)", k < 0 ? strerror(e) : "");
        }
        got += (size_t)k;
    }
    close(fd);
    w22_status s = w22_json_parse(buf, n, path, out);
    free(buf);
    return s;
}

void w22_json_free(w22_json *j) {
    if (!j) return;
    free(j->text);
    free(j->arena);
    free(j->nodes);
    free(j);
}

static const jnode *jnode_at(const w22_json *j, int node) {
    return j && node >= 0 && node < j->nnodes ? &j->nodes[node] : NULL;
}

int w22_json_root(const w22_json *j) { return j ? j->root : -1; }

w22_json_kind w22_json_kind_of(const w22_json *j, int node) {
    const jnode *x = jnode_at(j, node);
    if (!x) return W22_JSON_NULL;
    switch (x->type) {
    case J_OBJ: return W22_JSON_OBJECT;
    case J_ARR: return W22_JSON_ARRAY;
    case J_STR: return W22_JSON_STRING;
    case J_INT: return W22_JSON_INT;
    case J_NUM: return W22_JSON_NUMBER;
    default: return j->text[x->begin] == 't' ? W22_JSON_TRUE : j->text[x->begin] == 'f' ? W22_JSON_FALSE
                                                                                          : W22_JSON_NULL;
    }
}

const char *w22_json_kind_name(w22_json_kind k) {
    static const char *const names[] = {"an object", "an array", "a string", "an integer", "a number", "true",
                                        "false", "null"};
    return (unsigned)k < sizeof names / sizeof names[0] ? names[k] : "?";
}

int w22_json_get(const w22_json *j, int obj, const char *key) {
    const jnode *o = jnode_at(j, obj);
    if (!o || o->type != J_OBJ) return -1;
    size_t kl = strlen(key);
    for (int c = o->first; c >= 0; c = j->nodes[c].next)
        if (j->nodes[c].key_len == kl && memcmp(j->nodes[c].key, key, kl) == 0) return c;
    return -1;
}

int w22_json_first(const w22_json *j, int node) {
    const jnode *x = jnode_at(j, node);
    return x && (x->type == J_OBJ || x->type == J_ARR) ? x->first : -1;
}

int w22_json_next(const w22_json *j, int node) {
    const jnode *x = jnode_at(j, node);
    return x ? x->next : -1;
}

int w22_json_count(const w22_json *j, int node) {
    const jnode *x = jnode_at(j, node);
    return x && (x->type == J_OBJ || x->type == J_ARR) ? x->nchild : 0;
}

const char *w22_json_key(const w22_json *j, int node, size_t *len) {
    const jnode *x = jnode_at(j, node);
    if (len) *len = x && x->key ? x->key_len : 0;
    return x && x->key ? x->key : NULL;
}

const char *w22_json_str(const w22_json *j, int node, size_t *len) {
    const jnode *x = jnode_at(j, node);
    if (len) *len = x && x->type == J_STR ? x->len : 0;
    return x && x->type == J_STR ? x->str : NULL;
}

int w22_json_number(const w22_json *j, int node, double *v) {
    const jnode *x = jnode_at(j, node);
    if (!x || (x->type != J_INT && x->type != J_NUM)) return 0;
    /* the text is a valid JSON number, which strtod reads whole; it ends at a delimiter or the NUL */
    *v = strtod(j->text + x->begin, NULL);
    return 1;
}

void w22_json_text(const w22_json *j, int node, char *buf, size_t cap) {
    const jnode *x = jnode_at(j, node);
    if (!cap) return;
    buf[0] = 0;
    if (!x) return;
    size_t n = x->end - x->begin;
    if (n >= cap) n = cap - 1;
    memcpy(buf, j->text + x->begin, n);
    buf[n] = 0;
}

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
                        jtype_name[m->type]);
    f->metadata_json = dup_text(p->s + m->begin, m->end - m->begin, "the header's __metadata__");
    f->meta_keys = w22_calloc((size_t)m->nchild, sizeof(char *), "__metadata__ keys");
    f->meta_values = w22_calloc((size_t)m->nchild, sizeof(char *), "__metadata__ values");
    if (!f->metadata_json || !f->meta_keys || !f->meta_values) return W22_ERR_OUT_OF_MEMORY;
    for (int c = m->first; c >= 0; c = p->nodes[c].next) {
        const jnode *v = &p->nodes[c];
        if (v->type != J_STR)
            return w22_fail(W22_ERR_FORMAT, "%s: __metadata__ entry '%.200s' is %s, expected a string", p->file,
                            v->key, jtype_name[v->type]);
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
                        "data_offsets", file, name, jtype_name[e->type]);
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
                        jtype_name[dt->type]);
    if (!parse_dtype(dt->str, &t->dtype))
        return w22_fail(W22_ERR_BAD_DTYPE, "%s: tensor '%.200s' has dtype %.40s; expected F32, BF16 or F16", file,
                        name, dt->str);

    if (sh->type != J_ARR)
        return w22_fail(W22_ERR_FORMAT, "%s: tensor '%.200s': shape is %s, expected an array of integers", file,
                        name, jtype_name[sh->type]);
    if (sh->nchild > W22_ST_MAX_DIMS)
        return w22_fail(W22_ERR_FORMAT, "%s: tensor '%.200s' has %d dimensions, expected at most %d", file, name,
                        sh->nchild, W22_ST_MAX_DIMS);
    t->ndim = 0;
    for (int c = sh->first; c >= 0; c = p->nodes[c].next) {
        const jnode *d = &p->nodes[c];
        if (d->type != J_INT)
            return w22_fail(W22_ERR_FORMAT, "%s: tensor '%.200s': shape dimension %d is %s, expected an integer",
                            file, name, t->ndim, jtype_name[d->type]);
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
                        "[begin, end]", file, name, jtype_name[off->type],
                        off->type == J_ARR || off->type == J_OBJ ? off->nchild : 1);
    const jnode *b = &p->nodes[off->first], *en = &p->nodes[b->next];
    if (b->type != J_INT || en->type != J_INT)
        return w22_fail(W22_ERR_FORMAT, "%s: tensor '%.200s': data_offsets holds %s and %s, expected two integers",
                        file, name, jtype_name[b->type], jtype_name[en->type]);
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
    skip_ws(&p);
    if (p.pos >= p.n || p.s[p.pos] != '{') s = jerr(&p, "'{' (the header is a JSON object)");
    else s = parse_value(&p, &root);
    if (s == W22_OK) {
        skip_ws(&p); /* writers pad the header with spaces */
        if (p.pos != p.n) s = jerr(&p, "only spaces after the header's closing '}'");
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
    W22_TRY(open_regular(path, "a .safetensors file", &fd, &st));
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
