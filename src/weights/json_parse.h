/* The JSON parser's node table and state, shared by its two readers: json.c (config.json, a sharded index: json.h's
 * API) and safetensors.c, which walks a header's nodes in place (one pass, no copy of its text). Not part of any
 * public API: only these two files include it. A node is addressed by index; -1 is "none". */
#ifndef W22_WEIGHTS_JSON_PARSE_H
#define W22_WEIGHTS_JSON_PARSE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include "wan22vae.h"

enum { J_OBJ, J_ARR, J_STR, J_INT, J_NUM, J_LIT };

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

/* "an object", ... indexed by J_*, for messages. */
extern const char *const w22_jtype_name[];
void w22_jp_skip_ws(jparser *p);
/* Fails with "<file>: <what> at byte <pos>: expected <fmt...>, found <the byte there>". */
w22_status w22_jp_err(jparser *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* One value at p->pos (p->arena holds at least p->n + 1 bytes); *out its node. */
w22_status w22_jp_value(jparser *p, int *out);
/* Opens path for reading as a regular file (O_NONBLOCK: a FIFO answers at once instead of blocking the open until
 * a writer comes, and is then refused); *st its stat. The messages name the file and `what` was expected. */
w22_status w22_open_regular(const char *path, const char *what, int *fd_out, struct stat *st);

#endif
