/* The strict JSON parser (json.c, which also parses the safetensors headers) for the JSON files next to the weights:
 * a diffusers config.json and a sharded index (*.safetensors.index.json). The same rules as a header: UTF-8, no
 * duplicate keys, bounded depth and size; every rejection names the file and the byte. A document is a table of
 * nodes addressed by index; -1 is "none". */
#ifndef W22_WEIGHTS_JSON_H
#define W22_WEIGHTS_JSON_H

#include <stddef.h>
#include "wan22vae.h"

typedef struct w22_json w22_json;

typedef enum { W22_JSON_OBJECT, W22_JSON_ARRAY, W22_JSON_STRING, W22_JSON_INT, W22_JSON_NUMBER, W22_JSON_TRUE,
               W22_JSON_FALSE, W22_JSON_NULL } w22_json_kind;

/* Parses text[0, n) (copied) as one JSON value; file names it in messages. */
w22_status w22_json_parse(const void *text, size_t n, const char *file, w22_json **out);
/* Reads a whole regular file of at most max_bytes and parses it. */
w22_status w22_json_read(const char *path, size_t max_bytes, w22_json **out);
void w22_json_free(w22_json *j);

int w22_json_root(const w22_json *j);
w22_json_kind w22_json_kind_of(const w22_json *j, int node);
/* "an object", "a string", ... for messages. */
const char *w22_json_kind_name(w22_json_kind k);
/* The member key of an object, -1 when absent (or obj is not an object). */
int w22_json_get(const w22_json *j, int obj, const char *key);
/* Children of an object or array: first, then next until -1; count. */
int w22_json_first(const w22_json *j, int node);
int w22_json_next(const w22_json *j, int node);
int w22_json_count(const w22_json *j, int node);
/* The key of an object's member (NUL-terminated; *len its length, which is shorter than strlen when it holds
 * \u0000). */
const char *w22_json_key(const w22_json *j, int node, size_t *len);
/* A string's text, NULL when the node is not a string. */
const char *w22_json_str(const w22_json *j, int node, size_t *len);
/* An integer or number as a double (strtod of its text: the nearest double); 0 when not a number. */
int w22_json_number(const w22_json *j, int node, double *v);
/* The value's source text (for messages): at most cap - 1 bytes of it. */
void w22_json_text(const w22_json *j, int node, char *buf, size_t cap);

#endif
