/* The safetensors reader and writer: a round trip in every dtype, and hostile files, each of which must give the
 * right status and a message that says what was wrong (never a crash, never a silent load). */
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include "common.h"
#include "testutil.h"
#include "weights/safetensors.h"

/* A file image: the 8-byte length of `json`, then json, then `data_len` bytes of data (0, 1, 2, ...). */
static unsigned char *image(const char *json, size_t data_len, size_t *size) {
    size_t h = strlen(json);
    *size = 8 + h + data_len;
    unsigned char *b = malloc(*size);
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)((uint64_t)h >> (8 * i));
    memcpy(b + 8, json, h);
    for (size_t i = 0; i < data_len; i++) b[8 + h + i] = (unsigned char)i;
    return b;
}

/* Parses json + data from memory and checks the status and that the message holds `want`. */
static void expect(const char *what, const char *json, size_t data_len, w22_status status, const char *want) {
    size_t size;
    unsigned char *b = image(json, data_len, &size);
    w22_st_file f;
    w22_status s = w22_st_parse(b, size, &f);
    CHECK(s == status, "%s: status %s, expected %s (%s)", what, w22_status_string(s), w22_status_string(status),
          w22_last_error());
    if (want) CHECK(strstr(w22_last_error(), want) != NULL, "%s: message '%s' lacks '%s'", what, w22_last_error(), want);
    if (s == W22_OK) w22_st_close(&f);
    CHECK(f.ntensors == 0 || s == W22_OK, "%s: a failed parse leaves tensors", what);
    free(b);
}

static void write_bytes(const char *path, const void *b, size_t n) {
    FILE *fp = fopen(path, "wb");
    CHECK(fp != NULL, "cannot create %s", path);
    if (!fp) return;
    fwrite(b, 1, n, fp);
    fclose(fp);
}

static int count_tmp_files(const char *dir) {
    DIR *d = opendir(dir);
    int n = 0;
    if (!d) return -1;
    struct dirent *e;
    while ((e = readdir(d)))
        if (strstr(e->d_name, ".tmp-")) n++;
    closedir(d);
    return n;
}

static void test_round_trip(void) {
    char path[512];
    snprintf(path, sizeof path, "%s/rt.safetensors", t_tmpdir());
    float a[6] = {1.5f, -2.0f, 3.25f, 0.0f, -0.0f, 1e-30f};
    uint16_t bf[5] = {0x3f80, 0xbf80, 0x7f80, 0x0001, 0x4049}; /* odd count: the next tensor is misaligned */
    uint16_t hf[4] = {0x3c00, 0xc000, 0x7bff, 0x0001};
    float one = 7.0f;
    int64_t sa[2] = {2, 3}, sb[1] = {5}, sh[3] = {2, 2, 1}, s0[2] = {0, 4};
    const char *weird = "a\"b\\c\n\xc3\xa9"; /* quote, backslash, newline, e-acute */
    w22_st_write_tensor t[] = {
        {"f32", W22_DTYPE_F32, 2, sa, a}, {"bf16", W22_DTYPE_BF16, 1, sb, bf}, {"f16", W22_DTYPE_F16, 3, sh, hf},
        {"scalar", W22_DTYPE_F32, 0, NULL, &one}, {"empty", W22_DTYPE_F32, 2, s0, NULL}, {weird, W22_DTYPE_F32, 1, sb + 0, NULL},
    };
    /* the last has 5 F32 elements: give it data */
    float five[5] = {1, 2, 3, 4, 5};
    t[5].data = five;
    const char *meta[] = {"format", "pt", "note", "say \"hi\"\t\\"};
    CHECK_OK(w22_st_write(path, t, 6, meta, 2, 0));

    w22_st_file f;
    CHECK_OK(w22_st_open(path, &f));
    CHECK(f.ntensors == 6, "ntensors %d, expected 6", f.ntensors);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | ((unsigned char *)f.map)[i];
    CHECK(hlen % 8 == 0, "header length %llu, expected a multiple of 8", (unsigned long long)hlen);
    for (int i = 0; i < 6; i++) {
        const w22_st_tensor *r = w22_st_find(&f, t[i].name);
        CHECK(r != NULL, "tensor '%s' not found after the round trip", t[i].name);
        if (!r) continue;
        CHECK(r->dtype == t[i].dtype, "%s: dtype %d, expected %d", t[i].name, r->dtype, t[i].dtype);
        CHECK(r->ndim == t[i].ndim, "%s: ndim %d, expected %d", t[i].name, r->ndim, t[i].ndim);
        int64_t numel = 1;
        for (int d = 0; d < t[i].ndim; d++) {
            CHECK(r->shape[d] == t[i].shape[d], "%s: dim %d", t[i].name, d);
            numel *= t[i].shape[d];
        }
        CHECK(r->numel == numel, "%s: numel %lld, expected %lld", t[i].name, (long long)r->numel, (long long)numel);
        size_t nb = (size_t)numel * w22_dtype_size(t[i].dtype);
        CHECK(r->nbytes == nb, "%s: nbytes %zu, expected %zu", t[i].name, r->nbytes, nb);
        if (nb) CHECK(memcmp(r->data, t[i].data, nb) == 0, "%s: data differs after the round trip", t[i].name);
    }
    CHECK(w22_st_meta(&f, "format") && strcmp(w22_st_meta(&f, "format"), "pt") == 0, "metadata format");
    CHECK(w22_st_meta(&f, "note") && strcmp(w22_st_meta(&f, "note"), meta[3]) == 0, "metadata note: '%s'",
          w22_st_meta(&f, "note") ? w22_st_meta(&f, "note") : "(null)");
    CHECK(w22_st_meta(&f, "nope") == NULL, "absent metadata");
    CHECK(f.metadata_json && strstr(f.metadata_json, "\"format\""), "metadata_json '%s'",
          f.metadata_json ? f.metadata_json : "(null)");
    CHECK(w22_st_find(&f, "nope") == NULL, "absent tensor");
    w22_st_close(&f);
    w22_st_close(&f); /* twice is safe */

    /* An existing file is refused and left as it was; overwrite replaces it. */
    FILE *fp = fopen(path, "rb");
    fseek(fp, 0, SEEK_END);
    long before = ftell(fp);
    fclose(fp);
    w22_status s = w22_st_write(path, t, 1, NULL, 0, 0);
    CHECK(s == W22_ERR_EXISTS, "existing file: %s, expected W22_ERR_EXISTS", w22_status_string(s));
    CHECK(strstr(w22_last_error(), "exists") && strstr(w22_last_error(), path), "message '%s'", w22_last_error());
    CHECK_OK(w22_st_open(path, &f));
    CHECK(f.ntensors == 6 && (long)f.size == before, "the existing file changed: %d tensors, %zu bytes", f.ntensors,
          f.size);
    w22_st_close(&f);
    CHECK_OK(w22_st_write(path, t, 1, NULL, 0, 1));
    CHECK_OK(w22_st_open(path, &f));
    CHECK(f.ntensors == 1 && f.nmeta == 0 && f.metadata_json == NULL, "overwrite: %d tensors", f.ntensors);
    w22_st_close(&f);
    CHECK(count_tmp_files(t_tmpdir()) == 0, "temporary files left in %s", t_tmpdir());
}

static void test_json_features(void) {
    /* \u escapes: e-acute and a surrogate pair (U+1F600), whitespace everywhere, spaces after the object */
    size_t size;
    unsigned char *b = image(" { \"x\\u00e9\\ud83d\\ude00\" : { \"shape\" : [ 2 ] , \"dtype\" : \"F16\" ,"
                             " \"data_offsets\" : [ 0 , 4 ] } , \"__metadata__\" : { } }   ", 4, &size);
    w22_st_file f;
    CHECK_OK(w22_st_parse(b, size, &f));
    CHECK(f.ntensors == 1 && strcmp(f.tensors[0].name, "x\xc3\xa9\xf0\x9f\x98\x80") == 0, "decoded name '%s'",
          f.ntensors ? f.tensors[0].name : "");
    CHECK(f.ntensors == 1 && f.tensors[0].data == b + size - 4, "data pointer");
    w22_st_close(&f);
    free(b);
    expect("empty header object", "{}", 0, W22_OK, NULL);
}

/* The reference reader's layout rule: sorted by data_offsets, the tensors follow each other without overlap or
 * gap and fill the data section exactly. */
static void test_layout(void) {
#define T(dt, shape, off) "{\"dtype\":\"" dt "\",\"shape\":" shape ",\"data_offsets\":" off "}"
    expect("out of order but contiguous", "{\"b\":" T("F32", "[1]", "[4,8]") ",\"a\":" T("F32", "[1]", "[0,4]") "}", 8,
           W22_OK, NULL);
    expect("empty tensors at the boundaries", "{\"e\":" T("F32", "[0]", "[0,0]") ",\"a\":" T("F32", "[1]", "[0,4]")
           ",\"z\":" T("F16", "[2,0]", "[4,4]") "}", 4, W22_OK, NULL);
    expect("overlap", "{\"a\":" T("F32", "[2]", "[0,8]") ",\"b\":" T("F32", "[2]", "[4,12]") "}", 12, W22_ERR_FORMAT,
           "tensors 'a' data_offsets [0, 8] and 'b' [4, 12] overlap");
    expect("overlap listed backwards", "{\"b\":" T("F32", "[2]", "[4,12]") ",\"a\":" T("F32", "[2]", "[0,8]") "}", 12,
           W22_ERR_FORMAT, "tensors 'a' data_offsets [0, 8] and 'b' [4, 12] overlap");
    expect("the same bytes twice", "{\"a\":" T("F32", "[1]", "[0,4]") ",\"b\":" T("F32", "[1]", "[0,4]") "}", 4,
           W22_ERR_FORMAT, "tensors 'a' data_offsets [0, 4] and 'b' [0, 4] overlap");
    expect("an empty tensor inside another", "{\"a\":" T("F32", "[2]", "[0,8]") ",\"e\":" T("F32", "[0]", "[4,4]") "}",
           8, W22_ERR_FORMAT, "'a' data_offsets [0, 8] and 'e' [4, 4] overlap");
    expect("a gap", "{\"a\":" T("F32", "[1]", "[0,4]") ",\"b\":" T("F32", "[1]", "[8,12]") "}", 12, W22_ERR_FORMAT,
           "bytes [4, 8) of the data section, between tensors 'a' [0, 4] and 'b' [8, 12], belong to no tensor");
    expect("not starting at 0", "{\"a\":" T("F32", "[1]", "[4,8]") "}", 8, W22_ERR_FORMAT,
           "'a' data_offsets [4, 8]: bytes [0, 4) of the data section belong to no tensor");
    expect("data section longer than needed", "{\"a\":" T("F32", "[1]", "[0,4]") "}", 16, W22_ERR_FORMAT,
           "the data section has 16 bytes but the tensors end at byte 4 (tensor 'a')");
    expect("data without tensors", "{}", 4, W22_ERR_FORMAT, "the data section has 4 bytes but the tensors end at byte 0");
#undef T
}

static void test_hostile(void) {
    char path[512];
    snprintf(path, sizeof path, "%s/short.safetensors", t_tmpdir());
    write_bytes(path, "\x02\0\0\0\0", 5);
    w22_st_file f;
    w22_status s = w22_st_open(path, &f);
    CHECK(s == W22_ERR_FORMAT && strstr(w22_last_error(), "at least 8") && strstr(w22_last_error(), path),
          "short file: %s: %s", w22_status_string(s), w22_last_error());
    w22_st_close(&f);
    s = w22_st_open("/nonexistent/x.safetensors", &f);
    CHECK(s == W22_ERR_IO && strstr(w22_last_error(), "/nonexistent/x.safetensors"), "missing file: %s: %s",
          w22_status_string(s), w22_last_error());
    s = w22_st_open(t_tmpdir(), &f);
    CHECK(s == W22_ERR_IO && strstr(w22_last_error(), "regular file"), "a directory: %s", w22_last_error());
    /* a FIFO with no writer: refused at once (a blocking open would wait for a writer forever; the alarm fails it) */
    char fifo[512];
    snprintf(fifo, sizeof fifo, "%s/fifo.safetensors", t_tmpdir());
    if (mkfifo(fifo, 0600) == 0) {
        alarm(20);
        s = w22_st_open(fifo, &f);
        alarm(0);
        CHECK(s == W22_ERR_IO && strstr(w22_last_error(), "a FIFO"), "a FIFO: %s", w22_last_error());
        unlink(fifo);
    }

    unsigned char buf[64] = {0};
    buf[0] = 100; /* header length 100, but 10 bytes follow */
    memcpy(buf + 8, "{}        ", 10);
    s = w22_st_parse(buf, 18, &f);
    CHECK(s == W22_ERR_FORMAT && strstr(w22_last_error(), "header length 100") && strstr(w22_last_error(), "10 bytes"),
          "length beyond size: %s", w22_last_error());
    memset(buf, 0, 8);
    buf[5] = 1; /* 2^40 */
    s = w22_st_parse(buf, 18, &f);
    CHECK(s == W22_ERR_FORMAT && strstr(w22_last_error(), "absurd"), "absurd length: %s", w22_last_error());
    memset(buf, 0xff, 8);
    s = w22_st_parse(buf, 18, &f);
    CHECK(s == W22_ERR_FORMAT && strstr(w22_last_error(), "absurd"), "2^64-1 length: %s", w22_last_error());
    s = w22_st_parse(buf, 3, &f);
    CHECK(s == W22_ERR_FORMAT && strstr(w22_last_error(), "at least 8"), "3-byte buffer: %s", w22_last_error());

#define T(dt, shape, off) "{\"dtype\":\"" dt "\",\"shape\":" shape ",\"data_offsets\":" off "}"
    expect("invalid JSON", "{\"a\":}", 0, W22_ERR_FORMAT, "header JSON at byte 5: expected a JSON value, found '}'");
    expect("truncated JSON", "{\"a\":{\"dtype\":\"F32\",\"sha", 0, W22_ERR_FORMAT, "the end of the header");
    expect("truncated string", "{\"a", 0, W22_ERR_FORMAT, "closing '\"'");
    expect("not an object", "[1, 2]", 0, W22_ERR_FORMAT, "expected '{'");
    expect("trailing garbage", "{} x", 0, W22_ERR_FORMAT, "only spaces after");
    expect("two objects", "{}{}", 0, W22_ERR_FORMAT, "only spaces after");
    expect("trailing comma", "{\"a\":1,}", 0, W22_ERR_FORMAT, "a string");
    expect("missing data_offsets", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4, W22_ERR_FORMAT,
           "'w' has no data_offsets");
    expect("missing dtype", "{\"w\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4, W22_ERR_FORMAT, "'w' has no dtype");
    expect("unknown key", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"x\":1}}", 4,
           W22_ERR_FORMAT, "'x'");
    expect("offsets out of range", "{\"w\":" T("F32", "[2]", "[0,8]") "}", 4, W22_ERR_FORMAT,
           "data_offsets [0, 8] out of range: the data section has 4 bytes");
    expect("offsets begin > end", "{\"w\":" T("F32", "[1]", "[8,4]") "}", 8, W22_ERR_FORMAT, "begin > end");
    expect("negative offset", "{\"w\":" T("F32", "[1]", "[-4,0]") "}", 8, W22_ERR_FORMAT, "negative");
    expect("offsets not a pair", "{\"w\":" T("F32", "[1]", "[0,4,8]") "}", 8, W22_ERR_FORMAT, "[begin, end]");
    expect("offsets not integers", "{\"w\":" T("F32", "[1]", "[0,\"4\"]") "}", 8, W22_ERR_FORMAT, "two integers");
    expect("shape product mismatch", "{\"w\":" T("F32", "[3]", "[0,8]") "}", 8, W22_ERR_FORMAT,
           "shape [3] of F32 is 12 bytes, but data_offsets [0, 8] span 8 bytes");
    expect("dtype I64", "{\"w\":" T("I64", "[1]", "[0,8]") "}", 8, W22_ERR_BAD_DTYPE,
           "'w' has dtype I64; expected F32, BF16 or F16");
    expect("dtype unknown", "{\"w\":" T("Q7", "[1]", "[0,8]") "}", 8, W22_ERR_BAD_DTYPE, "dtype Q7");
    expect("dtype not a string", "{\"w\":" T("1", "[1]", "[0,8]") "}", 8, W22_ERR_BAD_DTYPE, "dtype 1");
    expect("dtype number", "{\"w\":{\"dtype\":4,\"shape\":[1],\"data_offsets\":[0,4]}}", 8, W22_ERR_FORMAT,
           "dtype is an integer, expected a string");
    expect("negative dim", "{\"w\":" T("F32", "[2,-1]", "[0,8]") "}", 8, W22_ERR_FORMAT,
           "dimension 1 is -1, expected >= 0");
    expect("fractional dim", "{\"w\":" T("F32", "[2.5]", "[0,8]") "}", 8, W22_ERR_FORMAT, "non-integer");
    expect("dims overflow int64", "{\"w\":" T("F32", "[4294967296,4294967296,4]", "[0,8]") "}", 8, W22_ERR_FORMAT,
           "more elements than int64");
    expect("bytes overflow int64", "{\"w\":" T("F32", "[4611686018427387904]", "[0,8]") "}", 8, W22_ERR_FORMAT,
           "more bytes than int64");
    expect("integer beyond int64", "{\"w\":" T("F32", "[1]", "[0,99999999999999999999]") "}", 8, W22_ERR_FORMAT,
           "an integer within int64");
    expect("too many dims", "{\"w\":" T("F32", "[1,1,1,1,1,1,1,1,1]", "[0,4]") "}", 8, W22_ERR_FORMAT,
           "9 dimensions, expected at most 8");
    expect("duplicate names", "{\"w\":" T("F32", "[1]", "[0,4]") ",\"w\":" T("F32", "[1]", "[4,8]") "}", 8,
           W22_ERR_FORMAT, "the key 'w' twice");
    expect("duplicate dtype key", "{\"w\":{\"dtype\":\"F32\",\"dtype\":\"F16\",\"shape\":[1],\"data_offsets\":[0,4]}}",
           8, W22_ERR_FORMAT, "'dtype' twice");
    expect("name not a string", "{1:" T("F32", "[1]", "[0,4]") "}", 8, W22_ERR_FORMAT, "expected a string, found '1'");
    expect("tensor not an object", "{\"w\":[1]}", 8, W22_ERR_FORMAT, "'w' is an array, expected an object");
    expect("empty name", "{\"\":" T("F32", "[1]", "[0,4]") "}", 8, W22_ERR_FORMAT, "empty name");
    expect("NUL in a name", "{\"a\\u0000b\":" T("F32", "[1]", "[0,4]") "}", 8, W22_ERR_FORMAT, "NUL");
    expect("lone low surrogate", "{\"\\udc00\":1}", 0, W22_ERR_FORMAT, "surrogate");
    expect("high surrogate alone", "{\"\\ud800x\":1}", 0, W22_ERR_FORMAT, "low surrogate");
    expect("bad hex", "{\"\\u12g4\":1}", 0, W22_ERR_FORMAT, "4 hex digits");
    expect("bad escape", "{\"\\x\":1}", 0, W22_ERR_FORMAT, "after '\\'");
    expect("control byte in a string", "{\"a\tb\":1}", 0, W22_ERR_FORMAT, "control bytes");
    expect("invalid UTF-8", "{\"\xff\":1}", 0, W22_ERR_FORMAT, "valid UTF-8");
    expect("overlong UTF-8", "{\"\xc0\xaf\":1}", 0, W22_ERR_FORMAT, "valid UTF-8");
    expect("leading zero", "{\"w\":" T("F32", "[01]", "[0,4]") "}", 8, W22_ERR_FORMAT, "no leading zeros");
    expect("bad literal", "{\"w\":nul}", 0, W22_ERR_FORMAT, "a JSON value");
    expect("metadata not an object", "{\"__metadata__\":\"x\"}", 0, W22_ERR_FORMAT, "__metadata__ is a string");
    expect("metadata value not a string", "{\"__metadata__\":{\"k\":3}}", 0, W22_ERR_FORMAT,
           "entry 'k' is an integer, expected a string");
    expect("metadata twice", "{\"__metadata__\":{},\"__metadata__\":{}}", 0, W22_ERR_FORMAT, "twice");
    char deep[400] = "{\"__metadata__\":";
    for (int i = 0; i < 100; i++) strcat(deep, "[");
    expect("deep nesting", deep, 0, W22_ERR_FORMAT, "nesting at most 64 deep");
#undef T
}

static void test_write_failures(void) {
    char path[1024], dir[512];
    float x[256] = {0};
    int64_t shape[1] = {256};
    w22_st_write_tensor t = {"x", W22_DTYPE_F32, 1, shape, x};

    snprintf(path, sizeof path, "%s/no-such-dir/x.safetensors", t_tmpdir());
    w22_status s = w22_st_write(path, &t, 1, NULL, 0, 0);
    CHECK(s == W22_ERR_IO && strstr(w22_last_error(), "no-such-dir"), "missing directory: %s: %s",
          w22_status_string(s), w22_last_error());

    /* A write that fails half way (the file-size limit) must remove its temporary file. */
    snprintf(dir, sizeof dir, "%s/limited", t_tmpdir());
    CHECK(mkdir(dir, 0755) == 0, "mkdir %s", dir);
    snprintf(path, sizeof path, "%s/x.safetensors", dir);
    struct rlimit old, lim;
    getrlimit(RLIMIT_FSIZE, &old);
    lim = old;
    lim.rlim_cur = 200;
    signal(SIGXFSZ, SIG_IGN);
    CHECK(setrlimit(RLIMIT_FSIZE, &lim) == 0, "setrlimit");
    s = w22_st_write(path, &t, 1, NULL, 0, 0);
    setrlimit(RLIMIT_FSIZE, &old);
    CHECK(s == W22_ERR_IO && strstr(w22_last_error(), "writing the temporary file"), "short write: %s: %s",
          w22_status_string(s), w22_last_error());
    CHECK(count_tmp_files(dir) == 0, "a temporary file is left in %s", dir);
    CHECK(!t_file_exists(path), "%s exists after a failed write", path);

    /* bad arguments */
    w22_st_write_tensor two[2] = {t, t};
    s = w22_st_write(path, two, 2, NULL, 0, 0);
    CHECK(s == W22_ERR_INVALID_ARG && strstr(w22_last_error(), "twice"), "duplicate names: %s", w22_last_error());
    int64_t neg[1] = {-1};
    w22_st_write_tensor bad = {"x", W22_DTYPE_F32, 1, neg, x};
    s = w22_st_write(path, &bad, 1, NULL, 0, 0);
    CHECK(s == W22_ERR_INVALID_ARG && strstr(w22_last_error(), "-1"), "negative dim: %s", w22_last_error());
    CHECK(count_tmp_files(dir) == 0 && !t_file_exists(path), "files left after refused writes");
}

int main(void) {
    test_round_trip();
    test_json_features();
    test_layout();
    test_hostile();
    test_write_failures();
    return t_finish("test_safetensors");
}
