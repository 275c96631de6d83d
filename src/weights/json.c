/* The strict JSON parser (json.h; json_parse.h for its node table): a safetensors header (safetensors.c), a
 * diffusers config.json, a sharded index. It is small and hand-written because every rejection must say where and
 * why (the byte offset in the text): UTF-8 checked, no duplicate keys, bounded depth and node count. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "common.h"
#include "weights/json.h"
#include "weights/json_parse.h"

/* Nesting deeper than this is never a safetensors header; the limit keeps the recursion off the stack's edge. */
#define JSON_MAX_DEPTH 64
/* Values in one header: a 100 MiB header of "[0,0,0..." would otherwise cost gigabytes of nodes. */
#define JSON_MAX_NODES (1 << 22)

/* ---------------------------------------------------------------------------------------------------------- */
/* JSON: parsed into a flat node table (children linked by index), strings decoded into one arena.             */

const char *const w22_jtype_name[] = {"an object", "an array", "a string", "an integer", "a non-integer number",
                                         "a literal (true/false/null)"};

static const char *jwhat(const jparser *p) { return p->what ? p->what : "header JSON"; }

w22_status w22_jp_err(jparser *p, const char *fmt, ...) {
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

void w22_jp_skip_ws(jparser *p) {
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
    if (p->pos >= p->n || p->s[p->pos] != '"') return w22_jp_err(p, "a string");
    p->pos++;
    char *d = p->arena + p->arena_used, *d0 = d;
    for (;;) {
        if (p->pos >= p->n) return w22_jp_err(p, "the closing '\"' of a string");
        unsigned char c = (unsigned char)p->s[p->pos];
        if (c == '"') { p->pos++; break; }
        if (c < 0x20) return w22_jp_err(p, "a string character (control bytes must be escaped)");
        if (c == '\\') {
            if (p->pos + 1 >= p->n) return w22_jp_err(p, "an escape after '\\'");
            char e = p->s[p->pos + 1];
            const char *simple = strchr("\"\\/bfnrt", e);
            if (e && simple) {
                static const char repl[] = "\"\\/\b\f\n\r\t";
                *d++ = repl[simple - "\"\\/bfnrt"];
                p->pos += 2;
                continue;
            }
            if (e != 'u') { p->pos++; return w22_jp_err(p, "one of \" \\ / b f n r t u after '\\'"); }
            unsigned cp;
            if (!read_hex4(p, p->pos + 2, &cp)) { p->pos += 2; return w22_jp_err(p, "4 hex digits after \\u"); }
            p->pos += 6;
            if (cp >= 0xdc00 && cp <= 0xdfff) { p->pos -= 6; return w22_jp_err(p, "a high surrogate before a low one"); }
            if (cp >= 0xd800 && cp <= 0xdbff) {
                unsigned lo;
                if (p->pos + 1 >= p->n || p->s[p->pos] != '\\' || p->s[p->pos + 1] != 'u' ||
                    !read_hex4(p, p->pos + 2, &lo) || lo < 0xdc00 || lo > 0xdfff)
                    return w22_jp_err(p, "a \\uDC00-\\uDFFF low surrogate after the high surrogate \\u%04X", cp);
                p->pos += 6;
                cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
            }
            d += put_utf8(d, cp);
            continue;
        }
        if (c < 0x80) { *d++ = (char)c; p->pos++; continue; }
        int l = utf8_len((const unsigned char *)p->s + p->pos, p->n - p->pos);
        if (!l) return w22_jp_err(p, "valid UTF-8 in a string");
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
    if (p->pos >= p->n || p->s[p->pos] < '0' || p->s[p->pos] > '9') return w22_jp_err(p, "a digit");
    uint64_t v = 0;
    int overflow = 0;
    if (p->s[p->pos] == '0') {
        p->pos++;
        if (p->pos < p->n && p->s[p->pos] >= '0' && p->s[p->pos] <= '9') return w22_jp_err(p, "no leading zeros");
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
        if (p->pos >= p->n || p->s[p->pos] < '0' || p->s[p->pos] > '9') return w22_jp_err(p, "a digit after '.'");
        while (p->pos < p->n && p->s[p->pos] >= '0' && p->s[p->pos] <= '9') p->pos++;
    }
    if (p->pos < p->n && (p->s[p->pos] == 'e' || p->s[p->pos] == 'E')) {
        integer = 0;
        p->pos++;
        if (p->pos < p->n && (p->s[p->pos] == '+' || p->s[p->pos] == '-')) p->pos++;
        if (p->pos >= p->n || p->s[p->pos] < '0' || p->s[p->pos] > '9') return w22_jp_err(p, "a digit in the exponent");
        while (p->pos < p->n && p->s[p->pos] >= '0' && p->s[p->pos] <= '9') p->pos++;
    }
    if (!integer) { j->type = J_NUM; return W22_OK; }
    if (overflow || v > (uint64_t)INT64_MAX + (uint64_t)neg) {
        size_t at = p->pos;
        p->pos = start;
        w22_status s = w22_jp_err(p, "an integer within int64 (it has %zu digits)", at - start - (size_t)neg);
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


static w22_status node_fail(jparser *p, int idx) {
    if (idx == -1)
        return w22_fail(W22_ERR_FORMAT, "%s: %s has more than %d values; expected %s", p->file, jwhat(p),
                        JSON_MAX_NODES, p->what ? "a smaller file" : "a safetensors header");
    return w22_fail(W22_ERR_OUT_OF_MEMORY, "%s: out of memory parsing the %s", p->file, jwhat(p));
}

static w22_status parse_container(jparser *p, int idx, char close) {
    p->pos++; /* '{' or '[' */
    w22_jp_skip_ws(p);
    if (p->pos < p->n && p->s[p->pos] == close) { p->pos++; return W22_OK; }
    int last = -1;
    for (;;) {
        const char *key = NULL;
        size_t key_len = 0;
        if (close == '}') {
            w22_jp_skip_ws(p);
            W22_TRY(parse_string(p, &key, &key_len));
            w22_jp_skip_ws(p);
            if (p->pos >= p->n || p->s[p->pos] != ':') return w22_jp_err(p, "':' after an object key");
            p->pos++;
        }
        w22_jp_skip_ws(p);
        int child;
        W22_TRY(w22_jp_value(p, &child));
        jnode *c = &p->nodes[child];
        c->key = key;
        c->key_len = key_len;
        if (last < 0) p->nodes[idx].first = child;
        else p->nodes[last].next = child;
        last = child;
        p->nodes[idx].nchild++;
        w22_jp_skip_ws(p);
        if (p->pos < p->n && p->s[p->pos] == ',') { p->pos++; continue; }
        if (p->pos < p->n && p->s[p->pos] == close) { p->pos++; break; }
        return w22_jp_err(p, close == '}' ? "',' or '}' in an object" : "',' or ']' in an array");
    }
    return close == '}' ? check_duplicates(p, idx) : W22_OK;
}

w22_status w22_jp_value(jparser *p, int *out) {
    w22_jp_skip_ws(p);
    if (p->pos >= p->n) return w22_jp_err(p, "a value");
    int idx = new_node(p, J_LIT);
    if (idx < 0) return node_fail(p, idx);
    *out = idx;
    char c = p->s[p->pos];
    w22_status s = W22_OK;
    if (c == '{' || c == '[') {
        if (++p->depth > JSON_MAX_DEPTH) return w22_jp_err(p, "nesting at most %d deep", JSON_MAX_DEPTH);
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
        if (!ok) return w22_jp_err(p, "a JSON value");
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
    w22_jp_skip_ws(&p);
    s = w22_jp_value(&p, &j->root);
    if (s == W22_OK) {
        w22_jp_skip_ws(&p);
        if (p.pos != p.n) s = w22_jp_err(&p, "the end of the file after the JSON value");
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

/* json_parse.h says what it does */
w22_status w22_open_regular(const char *path, const char *what, int *fd_out, struct stat *st) {
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
    W22_TRY(w22_open_regular(path, "a JSON file", &fd, &st));
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
