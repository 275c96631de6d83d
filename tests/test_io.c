/* src/io/: .npy reading and writing (round trips and hostile headers), latents loading, the NaN/Inf check, the
 * 8-bit conversion at its rounding edges, and the video writers: exact .y4m bytes of a tiny known video, raw
 * .npy / .safetensors video read back, PNG frames (the stored-deflate encoder checked byte by byte), .mp4 through
 * ffmpeg when installed (names with a colon too); an existing output is refused and left unchanged, and a failed
 * or stopped write leaves nothing behind. Hostile inputs: truncated .npy headers (no read past the end), f16/bf16 at
 * odd addresses, FIFOs as inputs, fps out of range, names too long for their temporaries, sizes that overflow.
 * Streams (standard output, a FIFO, /dev/fd/N): written directly and in order, never renamed; ffmpeg's containers
 * with their defaults, options and BT.709 conversion and tags (checked with ffprobe and the decoded pixels).
 * Weights as Python reads them (src/weights/source.c): diffusers folders, config.json, sharded indexes and their
 * refusals; the latents' statistics and their de-normalization. */
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <signal.h>
#include <unistd.h>
#include "common.h"
#include "io/io.h"
#include "io/outfile.h"
#include "io/png_encode.h"
#include "weights/json.h"
#include "weights/safetensors.h"
#include "weights/source.h"
#include "weights/weights.h"
#include "testutil.h"
#ifdef W22_HAVE_PNG
#include <png.h>
#endif

static char dir[512];

static const char *tpath(const char *name) { return t_path(name); }

/* Entries of the test directory whose name starts with prefix (temporary outputs are "<name>.tmp-XXXXXX"). */
static int count_entries(const char *prefix) {
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (!strncmp(e->d_name, prefix, strlen(prefix))) n++;
    if (d) closedir(d);
    return n;
}

static void write_bytes(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    fwrite(p, 1, n, f);
    fclose(f);
}

static unsigned char *read_all(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return *n = 0, NULL;
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    rewind(f);
    unsigned char *b = malloc(*n + 1);
    if (fread(b, 1, *n, f) != *n) *n = 0;
    fclose(f);
    return b;
}

static int has(const char *needle) { return strstr(w22_last_error(), needle) != NULL; }

/* An .npy file from a header dict and version, with `data` bytes of data (zeros). */
static size_t make_npy(unsigned char *buf, int major, const char *dict, size_t data) {
    size_t prefix = major == 1 ? 10 : 12, d = strlen(dict);
    memcpy(buf, "\x93NUMPY", 6);
    buf[6] = (unsigned char)major;
    buf[7] = 0;
    size_t hlen = d + 1;
    buf[8] = (unsigned char)hlen, buf[9] = (unsigned char)(hlen >> 8);
    if (major != 1) buf[10] = buf[11] = 0;
    memcpy(buf + prefix, dict, d);
    buf[prefix + d] = '\n';
    memset(buf + prefix + hlen, 0, data);
    return prefix + hlen + data;
}

static void test_npy_roundtrip(void) {
    float x[24], *y = NULL;
    t_fill_uniform(x, 24, 1, -3, 3);
    int64_t shape[3] = {2, 3, 4}, got[W22_NPY_MAX_DIMS];
    int nd = 0;
    CHECK_OK(w22_npy_write(tpath("a.npy"), x, 3, shape, 0));
    CHECK_OK(w22_npy_read(tpath("a.npy"), 0, &y, &nd, got));
    CHECK(nd == 3 && got[0] == 2 && got[1] == 3 && got[2] == 4, "shape back: %d dims", nd);
    CHECK(y && !memcmp(x, y, sizeof x), "data back differs");
    free(y);
    size_t n;
    unsigned char *b = read_all(tpath("a.npy"), &n);
    CHECK(n == 128 + 96, "header padded to 64: file of %zu bytes", n);
    CHECK(b && strstr((char *)b + 10, "'shape': (2, 3, 4)"), "header text: %.60s", b ? (char *)b + 10 : "");
    free(b);
    /* 1-D: "(5,)"; 0-D: "()" */
    char h[256];
    int64_t five = 5;
    size_t hl = w22_npy_header_f32(1, &five, h, sizeof h - 1);
    h[hl] = 0;
    CHECK(hl % 64 == 0 && strstr(h + 10, "'shape': (5,)"), "1-D header");
    hl = w22_npy_header_f32(0, NULL, h, sizeof h - 1);
    h[hl] = 0;
    CHECK(hl % 64 == 0 && strstr(h + 10, "'shape': ()"), "0-D header");
    w22_npy_info info;
    unsigned char buf[256];
    memcpy(buf, h, hl);
    memset(buf + hl, 0, 4);
    CHECK_OK(w22_npy_parse(buf, hl + 4, "scalar", &info));
    CHECK(info.ndim == 0 && info.numel == 1, "scalar: %d dims, %lld elements", info.ndim, (long long)info.numel);
    /* no overwrite by default; overwrite replaces */
    CHECK(w22_npy_write(tpath("a.npy"), x, 3, shape, 0) == W22_ERR_EXISTS, "existing .npy refused");
    CHECK_OK(w22_npy_write(tpath("a.npy"), x, 1, shape + 1, 1));
    CHECK(count_entries("a.npy.tmp") == 0, "no temporary left");
}

typedef struct {
    int major;
    const char *dict;
    long data; /* bytes of data; -1: the right amount for <f4 (2, 3) */
    w22_status want;
    const char *msg;
} npy_case;

static void test_npy_hostile(void) {
    static const npy_case cases[] = {
        {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", -1, W22_OK, ""},
        {2, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", -1, W22_OK, ""},
        {3, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", -1, W22_OK, ""},
        {1, "{\"descr\": \"<f4\", \"shape\": (2,3), \"fortran_order\": False}", -1, W22_OK, ""},
        {1, "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }", -1, W22_ERR_FORMAT, "fortran_order True"},
        {1, "{'descr': '>f4', 'fortran_order': False, 'shape': (2, 3), }", -1, W22_ERR_BAD_DTYPE, "big-endian"},
        {1, "{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), }", 48, W22_ERR_BAD_DTYPE, "found '<f8'"},
        {1, "{'descr': '|u1', 'fortran_order': False, 'shape': (2, 3), }", 6, W22_ERR_BAD_DTYPE, "found '|u1'"},
        {1, "{'descr': '<f4', 'shape': (2, 3), }", -1, W22_ERR_FORMAT, "missing 'fortran_order'"},
        {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), 'x': 1}", -1, W22_ERR_FORMAT, "found 'x'"},
        {1, "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2, 3)}", -1, W22_ERR_FORMAT,
         "appears twice"},
        {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (6), }", -1, W22_ERR_FORMAT, "'(6,)'"},
        {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, -3), }", -1, W22_ERR_FORMAT, "non-negative"},
        {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1,1,1,1,1,1,1,1,6), }", -1, W22_ERR_FORMAT,
         "at most 8"},
        {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999, 99999999999), }", 8, W22_ERR_FORMAT,
         "overflow"},
        {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 20, W22_ERR_FORMAT, "(truncated)"},
        {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 28, W22_ERR_FORMAT, "(trailing bytes)"},
        {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), } junk", -1, W22_ERR_FORMAT, "only padding"},
        {1, "{'descr': '<f4', 'fortran_order': Fals, 'shape': (2, 3), }", -1, W22_ERR_FORMAT, "True or False"},
        {1, "{'descr': '<f4\\', 'fortran_order': False, 'shape': (2, 3), }", -1, W22_ERR_FORMAT, "plain string"},
        {1, "['descr', '<f4']", -1, W22_ERR_FORMAT, "expected '{'"},
        {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3, }", -1, W22_ERR_FORMAT, "non-negative integer"},
    };
    unsigned char buf[512];
    w22_npy_info info;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const npy_case *c = &cases[i];
        size_t n = make_npy(buf, c->major, c->dict, c->data < 0 ? 24 : (size_t)c->data);
        w22_status s = w22_npy_parse(buf, n, "case.npy", &info);
        CHECK(s == c->want && has(c->msg), "case %zu (%s): %s: %s", i, c->dict, w22_status_string(s),
              w22_last_error());
        CHECK(s != W22_OK || (info.ndim == 2 && info.shape[0] == 2 && info.shape[1] == 3 && info.numel == 6),
              "case %zu parsed shape", i);
        CHECK(s == W22_OK || has("case.npy"), "case %zu: the message names the file: %s", i, w22_last_error());
    }
    /* byte-level damage: magic, version, header length, missing newline, NUL */
    size_t n = make_npy(buf, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 24);
    unsigned char bad[512];
    memcpy(bad, buf, n);
    bad[1] = 'X';
    CHECK(w22_npy_parse(bad, n, "m", &info) == W22_ERR_FORMAT && has("\\x93NUMPY"), "%s", w22_last_error());
    memcpy(bad, buf, n);
    bad[6] = 4;
    CHECK(w22_npy_parse(bad, n, "m", &info) == W22_ERR_FORMAT && has("found 4.0"), "%s", w22_last_error());
    memcpy(bad, buf, n);
    bad[7] = 1;
    CHECK(w22_npy_parse(bad, n, "m", &info) == W22_ERR_FORMAT && has("found 1.1"), "%s", w22_last_error());
    memcpy(bad, buf, n);
    bad[9] = 0x7f;
    CHECK(w22_npy_parse(bad, n, "m", &info) == W22_ERR_FORMAT && has("header length"), "%s", w22_last_error());
    memcpy(bad, buf, n);
    bad[8]--; /* the header now ends on the space before '\n' */
    CHECK(w22_npy_parse(bad, n, "m", &info) == W22_ERR_FORMAT, "header without newline: %s", w22_last_error());
    memcpy(bad, buf, n);
    bad[20] = 0;
    CHECK(w22_npy_parse(bad, n, "m", &info) == W22_ERR_FORMAT && has("NUL"), "%s", w22_last_error());
    for (size_t k = 0; k < 12; k++)
        CHECK(w22_npy_parse(buf, k, "m", &info) == W22_ERR_FORMAT, "file cut to %zu bytes", k);

    /* '<u2' is raw bf16 only on request; '<f2' is float16 */
    n = make_npy(buf, 1, "{'descr': '<u2', 'fortran_order': False, 'shape': (2,), }", 4);
    buf[n - 4] = 0x80, buf[n - 3] = 0x3f; /* bf16 1.0 */
    buf[n - 2] = 0x00, buf[n - 1] = 0xc0; /* bf16 -2.0 */
    write_bytes(tpath("u2.npy"), buf, n);
    float *y = NULL;
    int nd;
    int64_t shp[W22_NPY_MAX_DIMS];
    CHECK(w22_npy_read(tpath("u2.npy"), 0, &y, &nd, shp) == W22_ERR_BAD_DTYPE && has("'<u2'"), "%s",
          w22_last_error());
    CHECK_OK(w22_npy_read(tpath("u2.npy"), 1, &y, &nd, shp));
    CHECK(y && y[0] == 1.0f && y[1] == -2.0f, "bf16 values");
    free(y);
    n = make_npy(buf, 1, "{'descr': '<f2', 'fortran_order': False, 'shape': (1,), }", 2);
    buf[n - 2] = 0x00, buf[n - 1] = 0x3c; /* f16 1.0 */
    write_bytes(tpath("f2.npy"), buf, n);
    y = NULL;
    CHECK_OK(w22_npy_read(tpath("f2.npy"), 0, &y, &nd, shp));
    CHECK(y && y[0] == 1.0f, "f16 value");
    free(y);
    CHECK(w22_npy_read(tpath("absent.npy"), 0, &y, &nd, shp) == W22_ERR_IO && has("absent.npy"), "%s",
          w22_last_error());
}

static void test_latents(void) {
    enum { C = 4, T = 2, H = 3, W = 5 };
    float z[C * T * H * W], *y = NULL;
    t_fill_uniform(z, C * T * H * W, 7, -2, 2);
    int t, h, w, c;
    CHECK_OK(w22_io_save_latents(tpath("z.npy"), z, C, T, H, W, 0));
    CHECK_OK(w22_io_load_latents(tpath("z.npy"), &y, &t, &h, &w, &c));
    CHECK(c == C && t == T && h == H && w == W && y && !memcmp(y, z, sizeof z), "npy latents back");
    free(y);
    CHECK_OK(w22_io_save_latents(tpath("z.safetensors"), z, C, T, H, W, 0));
    CHECK_OK(w22_io_load_latents(tpath("z.safetensors"), &y, &t, &h, &w, &c));
    CHECK(c == C && t == T && h == H && w == W && y && !memcmp(y, z, sizeof z), "safetensors latents back");
    free(y);
    CHECK(w22_io_save_latents(tpath("z.npy"), z, C, T, H, W, 0) == W22_ERR_EXISTS, "existing latents refused");

    /* [C, T, h, w] without the batch; bf16 under another name as the only tensor */
    int64_t s4[4] = {C, T, H, W};
    CHECK_OK(w22_npy_write(tpath("z4.npy"), z, 4, s4, 0));
    CHECK_OK(w22_io_load_latents(tpath("z4.npy"), &y, &t, &h, &w, &c));
    CHECK(c == C && t == T && h == H && w == W, "4-D latents");
    free(y);
    uint16_t zb[C * T * H * W];
    for (int i = 0; i < C * T * H * W; i++) zb[i] = w22_f32_to_bf16(z[i]);
    int64_t s5[5] = {1, C, T, H, W};
    w22_st_write_tensor wt = {"z", W22_DTYPE_BF16, 5, s5, zb};
    CHECK_OK(w22_st_write(tpath("zb.safetensors"), &wt, 1, NULL, 0, 0));
    CHECK_OK(w22_io_load_latents(tpath("zb.safetensors"), &y, &t, &h, &w, &c));
    CHECK(c == C && y && y[5] == w22_bf16_to_f32(zb[5]), "bf16 latents");
    free(y);

    /* wrong rank, a batch of 2, two tensors none named latents, an unknown extension */
    int64_t s3[3] = {C, T, H * W};
    CHECK_OK(w22_npy_write(tpath("z3.npy"), z, 3, s3, 0));
    CHECK(w22_io_load_latents(tpath("z3.npy"), &y, &t, &h, &w, &c) == W22_ERR_BAD_SHAPE &&
              has("expected latents of shape [1, C, T, h, w] or [C, T, h, w], found [4, 2, 15]") && has("z3.npy"),
          "%s", w22_last_error());
    CHECK(y == NULL, "no latents on failure");
    int64_t sb[5] = {2, C / 2, T, H, W};
    CHECK_OK(w22_npy_write(tpath("zb2.npy"), z, 5, sb, 0));
    CHECK(w22_io_load_latents(tpath("zb2.npy"), &y, &t, &h, &w, &c) == W22_ERR_BAD_SHAPE && has("found [2, 2"),
          "%s", w22_last_error());
    w22_st_write_tensor two[2] = {{"a", W22_DTYPE_F32, 5, s5, z}, {"b", W22_DTYPE_F32, 5, s5, z}};
    CHECK_OK(w22_st_write(tpath("two.safetensors"), two, 2, NULL, 0, 0));
    CHECK(w22_io_load_latents(tpath("two.safetensors"), &y, &t, &h, &w, &c) == W22_ERR_MISSING_TENSOR &&
              has("'latents'") && has("'a'"), "%s", w22_last_error());
    CHECK(w22_io_load_latents(tpath("z.bin"), &y, &t, &h, &w, &c) == W22_ERR_INVALID_ARG, "%s", w22_last_error());

    /* NaN and Inf: counted, the first located */
    z[1 * T * H * W + 1 * H * W + 2 * W + 3] = NAN; /* [0, 1, 1, 2, 3] */
    z[3 * T * H * W] = -INFINITY;
    CHECK_OK(w22_io_save_latents(tpath("znan.npy"), z, C, T, H, W, 0));
    CHECK(w22_io_load_latents(tpath("znan.npy"), &y, &t, &h, &w, &c) == W22_ERR_NONFINITE &&
              has("found 2 NaN/Inf of 120") && has("NaN at index 58 [0, 1, 1, 2, 3]") && has("znan.npy"),
          "%s", w22_last_error());
    CHECK(y == NULL, "no latents on failure");
    CHECK_OK(w22_io_save_latents(tpath("znan.safetensors"), z, C, T, H, W, 0));
    CHECK(w22_io_load_latents(tpath("znan.safetensors"), &y, &t, &h, &w, &c) == W22_ERR_NONFINITE, "%s",
          w22_last_error());
}

static void test_check_finite(void) {
    int64_t shape[2] = {2, 3};
    float f[6] = {0, 1, 2, 3, 4, 5};
    CHECK_OK(w22_check_finite(f, W22_DTYPE_F32, 2, shape, "x"));
    f[4] = INFINITY;
    CHECK(w22_check_finite(f, W22_DTYPE_F32, 2, shape, "x") == W22_ERR_NONFINITE && has("+Inf at index 4 [1, 1]"),
          "%s", w22_last_error());
    uint16_t b[6] = {0x3f80, 0x3f80, 0x7fc0, 0x3f80, 0xff80, 0};
    CHECK(w22_check_finite(b, W22_DTYPE_BF16, 2, shape, "x") == W22_ERR_NONFINITE &&
              has("found 2 NaN/Inf of 6; the first is NaN at index 2 [0, 2]"), "%s", w22_last_error());
    uint16_t h[6] = {0x3c00, 0x7bff, 0, 0, 0, 0xfc00};
    CHECK(w22_check_finite(h, W22_DTYPE_F16, 2, shape, "x") == W22_ERR_NONFINITE && has("-Inf at index 5"), "%s",
          w22_last_error());
    h[5] = 0;
    CHECK_OK(w22_check_finite(h, W22_DTYPE_F16, 2, shape, "x"));
}

static void test_pixels(void) {
    /* round(clamp(x * 0.5 + 0.5, 0, 1) * 255) in float32, half to even (numpy's round) */
    static const struct { float x; int want; } cases[] = {
        {-1.0f, 0}, {1.0f, 255}, {0.0f, 128}, {-0.0f, 128}, {-2.0f, 0}, {2.0f, 255}, {0.99f, 254}, {-0.99f, 1},
        {-0x1.f9f9f6p-2f, 64},  /* 64.5 exactly: even, down */
        {-0x1.f1f1eep-2f, 66},  /* 65.5 exactly: even, up */
        {0x1.f5f5f4p-1f, 252},  /* 252.5 exactly */
        {0x1.fdfdfcp-1f, 254},  /* 254.5 exactly: not 255 */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        CHECK(w22_pixel_u8(cases[i].x) == cases[i].want, "x = %a: %d, expected %d", cases[i].x,
              w22_pixel_u8(cases[i].x), cases[i].want);
    CHECK(w22_pixel_u8(NAN) == 0, "NaN -> 0");
    /* every 8-bit level survives the trip from its own normalized value */
    int ok = 1;
    for (int v = 0; v < 256; v++) ok &= w22_pixel_u8((float)v / 127.5f - 1.0f) == v;
    CHECK(ok, "levels v / 127.5 - 1 map back to v");
}

/* The writers' vectorized conversion (w22_plane_u8, which w22_frame_rgb24 and the y4m writer use) against the
 * reference, w22_pixel_u8: on every float of magnitude 2^-30 up to 4 (both signs: every rounding edge of the 256
 * levels and the clamps lie there), every 4099th bit pattern elsewhere (the tiny values, the large ones, infinities
 * and NaNs), and the specials; then a frame of w22_frame_rgb24 at an odd size against the reference value by value. */
static void test_pixels_vectorized(void) {
    enum { N = 1 << 16 };
    static float x[N];
    static uint8_t got[N];
    size_t checked = 0, bad = 0;
    uint32_t first_bad = 0;
    for (int sign = 0; sign < 2; sign++) {
        const uint32_t lo = 0x30800000u, hi = 0x40800000u; /* 2^-30 .. 4 */
        for (uint64_t u0 = 0; u0 < 0x80000000u;) {
            size_t n = 0;
            while (n < N && u0 < 0x80000000u) {
                const uint32_t u = (uint32_t)u0 | (sign ? 0x80000000u : 0);
                memcpy(&x[n++], &u, 4);
                u0 += (u0 >= lo && u0 < hi) ? 1 : 4099;
            }
            w22_plane_u8(x, n, got);
            for (size_t i = 0; i < n; i++)
                if (got[i] != w22_pixel_u8(x[i]) && bad++ == 0) memcpy(&first_bad, &x[i], 4);
            checked += n;
        }
    }
    const float special[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, -NAN, 0x1p-149f, -0x1p-149f, 0x1p-126f, 1.0f,
                             -1.0f, 0x1.fffffep127f, -0x1.fffffep127f};
    const size_t ns = sizeof special / sizeof special[0];
    w22_plane_u8(special, ns, got);
    for (size_t i = 0; i < ns; i++)
        if (got[i] != w22_pixel_u8(special[i]) && bad++ == 0) memcpy(&first_bad, &special[i], 4);
    CHECK(bad == 0, "w22_plane_u8: %zu of %zu floats differ from w22_pixel_u8, the first 0x%08x", bad, checked + ns,
          first_bad);
    /* a frame at an odd size (not a multiple of the conversion's blocks), frame 1 of a chunk of 2 */
    const int H = 37, W = 61, n = 2;
    const size_t plane = (size_t)H * W;
    float *chunk = malloc(plane * 3 * n * sizeof(float));
    uint8_t *rgb = malloc(plane * 3);
    uint64_t st = 0x9e3779b97f4a7c15ull;
    for (size_t i = 0; i < plane * 3 * n; i++) {
        st = st * 6364136223846793005ull + 1442695040888963407ull;
        chunk[i] = (float)((int64_t)(st >> 33) - (1ll << 30)) / (float)(1 << 29); /* -2 .. 2 */
    }
    w22_frame_rgb24(chunk, n, 1, H, W, rgb);
    size_t fbad = 0;
    for (size_t i = 0; i < plane; i++)
        for (int c = 0; c < 3; c++) fbad += rgb[3 * i + c] != w22_pixel_u8(chunk[((size_t)c * n + 1) * plane + i]);
    CHECK(fbad == 0, "w22_frame_rgb24 37x61: %zu of %zu values differ from w22_pixel_u8", fbad, plane * 3);
    free(chunk);
    free(rgb);
}

/* The tiny known video: 2 frames of 2x2, pixels black, white, red, green in frame 0 and mid-gray x4 in frame 1. */
static void tiny_video(float chunk[3][2][2][2]) {
    static const float rgb[2][4][3] = {
        {{-1, -1, -1}, {1, 1, 1}, {1, -1, -1}, {-1, 1, -1}},
        {{0, 0, 0}, {0, 0, 0}, {0, 0, 0}, {0, 0, 0}},
    };
    for (int c = 0; c < 3; c++)
        for (int f = 0; f < 2; f++)
            for (int p = 0; p < 4; p++) chunk[c][f][p / 2][p % 2] = rgb[f][p][c];
}

static void test_y4m(void) {
    float v[3][2][2][2];
    tiny_video(v);
    w22_video_writer *vw;
    CHECK_OK(w22_video_open(tpath("t.y4m"), W22_VIDEO_Y4M, 2, 2, 2, 24, 0, &vw));
    CHECK(!t_file_exists(tpath("t.y4m")), "nothing at the path before finish");
    CHECK_OK(w22_video_write(vw, &v[0][0][0][0], 0, 2));
    CHECK_OK(w22_video_finish(vw));
    static const char header[] = "YUV4MPEG2 W2 H2 F24:1 Ip A1:1 C444 XCOLORRANGE=LIMITED\n";
    /* BT.601 limited: black 16/128/128, white 235/128/128, red 82/90/240, green 144/54/34; gray 128 -> 126 */
    static const unsigned char frame0[] = {16, 235, 82, 144, 128, 128, 90, 54, 128, 128, 240, 34};
    static const unsigned char frame1[] = {126, 126, 126, 126, 128, 128, 128, 128, 128, 128, 128, 128};
    unsigned char want[256];
    size_t k = 0;
    memcpy(want + k, header, sizeof header - 1), k += sizeof header - 1;
    memcpy(want + k, "FRAME\n", 6), k += 6;
    memcpy(want + k, frame0, 12), k += 12;
    memcpy(want + k, "FRAME\n", 6), k += 6;
    memcpy(want + k, frame1, 12), k += 12;
    size_t n;
    unsigned char *got = read_all(tpath("t.y4m"), &n);
    CHECK(n == k && got && !memcmp(got, want, k), "y4m bytes (%zu of %zu)", n, k);
    for (size_t i = 0; got && i < k && i < n; i++)
        if (got[i] != want[i]) {
            CHECK(0, "first difference at byte %zu: %d, expected %d", i, got[i], want[i]);
            break;
        }
    free(got);

    /* frames in two chunks, the second first: the same bytes (frames sit at fixed offsets) */
    float f0[3][1][2][2], f1[3][1][2][2];
    for (int c = 0; c < 3; c++) memcpy(f0[c], v[c][0], sizeof f0[c]), memcpy(f1[c], v[c][1], sizeof f1[c]);
    CHECK_OK(w22_video_open(tpath("t2.y4m"), W22_VIDEO_Y4M, 2, 2, 2, 23.976, 0, &vw));
    CHECK_OK(w22_video_write(vw, &f1[0][0][0][0], 1, 1));
    CHECK_OK(w22_video_write(vw, &f0[0][0][0][0], 0, 1));
    CHECK(w22_video_write(vw, &f0[0][0][0][0], 0, 1) == W22_ERR_INVALID_ARG && has("written already"), "%s",
          w22_last_error());
    CHECK(w22_video_write(vw, &f0[0][0][0][0], 2, 1) == W22_ERR_INVALID_ARG && has("within [0, 2)"), "%s",
          w22_last_error());
    CHECK_OK(w22_video_finish(vw));
    got = read_all(tpath("t2.y4m"), &n);
    static const char header2[] = "YUV4MPEG2 W2 H2 F23976:1000 Ip A1:1 C444 XCOLORRANGE=LIMITED\n";
    size_t h2 = sizeof header2 - 1, h1 = sizeof header - 1;
    CHECK(got && n == k - h1 + h2 && !memcmp(got, header2, h2) && !memcmp(got + h2, want + h1, k - h1),
          "out-of-order y4m at 23.976 fps");
    free(got);
}

static void test_existing_and_failures(void) {
    float v[3][2][2][2];
    tiny_video(v);
    w22_video_writer *vw = NULL;
    /* an existing output: refused at open, left unchanged, no temporary */
    write_bytes(tpath("keep.y4m"), "keep", 4);
    CHECK(w22_video_open(tpath("keep.y4m"), W22_VIDEO_Y4M, 2, 2, 2, 24, 0, &vw) == W22_ERR_EXISTS &&
              has("keep.y4m") && has("existing file"), "%s", w22_last_error());
    CHECK(vw == NULL, "no writer");
    size_t n;
    unsigned char *b = read_all(tpath("keep.y4m"), &n);
    CHECK(n == 4 && !memcmp(b, "keep", 4), "existing output unchanged");
    free(b);
    CHECK(w22_output_check(tpath("keep.y4m"), 0, 0) == W22_ERR_EXISTS, "output_check refuses it");
    CHECK_OK(w22_output_check(tpath("keep.y4m"), 0, 1));
    CHECK(count_entries("keep.y4m.") == 0, "no temporary left");
    /* ... and with overwrite, replaced only at finish */
    CHECK_OK(w22_video_open(tpath("keep.y4m"), W22_VIDEO_Y4M, 2, 2, 2, 24, 1, &vw));
    CHECK_OK(w22_video_write(vw, &v[0][0][0][0], 0, 2));
    b = read_all(tpath("keep.y4m"), &n);
    CHECK(n == 4, "still the old file before finish");
    free(b);
    CHECK_OK(w22_video_finish(vw));
    b = read_all(tpath("keep.y4m"), &n);
    CHECK(n > 4 && !memcmp(b, "YUV4MPEG2", 9), "replaced at finish");
    free(b);

    /* an incomplete video: finish fails and leaves nothing; abort leaves nothing */
    for (int fmt = W22_VIDEO_Y4M; fmt <= W22_VIDEO_SAFETENSORS; fmt++) {
        if (fmt == W22_VIDEO_FFMPEG) continue; /* covered in test_mp4, needs ffmpeg */
        static const char *names[] = {"inc.y4m", "", "inc", "inc.npy", "inc.safetensors"};
        const char *p = tpath(names[fmt]);
        CHECK_OK(w22_video_open(p, (w22_video_format)fmt, 3, 2, 2, 24, 0, &vw));
        CHECK_OK(w22_video_write(vw, &v[0][0][0][0], 0, 2));
        CHECK(w22_video_finish(vw) == W22_ERR_INVALID_ARG && has("expected 3 frames, 2 were written"), "%s: %s",
              names[fmt], w22_last_error());
        CHECK(!t_file_exists(p) && count_entries("inc") == 0, "%s: nothing left after a failed finish", names[fmt]);
        CHECK_OK(w22_video_open(p, (w22_video_format)fmt, 3, 2, 2, 24, 0, &vw));
        CHECK_OK(w22_video_write(vw, &v[0][0][0][0], 0, 2));
        w22_video_abort(vw);
        CHECK(!t_file_exists(p) && count_entries("inc") == 0, "%s: nothing left after abort", names[fmt]);
    }
    /* an output directory that does not exist */
    CHECK(w22_video_open(tpath("nodir/x.y4m"), W22_VIDEO_Y4M, 1, 2, 2, 24, 0, &vw) == W22_ERR_IO &&
              has("does not exist"), "%s", w22_last_error());
    CHECK(w22_output_check(tpath("nodir/frames/"), 1, 0) == W22_ERR_IO && has("nodir"), "%s", w22_last_error());
    CHECK(!t_file_exists(tpath("nodir")), "nothing created");
    /* a file where the output's directory should be */
    CHECK(w22_output_check(tpath("keep.y4m/x.npy"), 0, 0) == W22_ERR_IO, "%s", w22_last_error());
    w22_video_abort(NULL);
}

static void test_formats(void) {
    static const struct { const char *p; int fmt; } ok[] = {
        {"a.y4m", W22_VIDEO_Y4M}, {"d/a.MP4", W22_VIDEO_FFMPEG}, {"a.npy", W22_VIDEO_NPY},
        {"a.safetensors", W22_VIDEO_SAFETENSORS}, {"frames/", W22_VIDEO_PNG_DIR}, {"x.d/frames", W22_VIDEO_PNG_DIR},
        {"out.y4m/", W22_VIDEO_PNG_DIR}, {".hidden", W22_VIDEO_PNG_DIR},
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        w22_video_format f = (w22_video_format)-1;
        CHECK(w22_video_format_from_path(ok[i].p, &f) == W22_OK && (int)f == ok[i].fmt, "%s", ok[i].p);
    }
    w22_video_format f;
    /* any other extension is ffmpeg's to judge (w22_ffmpeg_check); a still image is refused here */
    CHECK(w22_video_format_from_path("a.avi", &f) == W22_OK && f == W22_VIDEO_FFMPEG, "a.avi goes to ffmpeg");
    CHECK(w22_video_format_from_path("a.webm", &f) == W22_OK && f == W22_VIDEO_FFMPEG, "a.webm goes to ffmpeg");
    CHECK(w22_video_format_from_path("a.png", &f) == W22_ERR_INVALID_ARG && has("still-image extension '.png'"),
          "%s", w22_last_error());
    /* standard output and a stream without extension: y4m, never a folder */
    CHECK(w22_video_format_from_path("-", &f) == W22_OK && f == W22_VIDEO_Y4M, "'-' is y4m");
    CHECK(w22_video_format_from_path("/dev/stdout", &f) == W22_OK && f == W22_VIDEO_Y4M, "/dev/stdout is y4m");
    CHECK(w22_video_format_from_path("/dev/null", &f) == W22_OK && f == W22_VIDEO_Y4M, "/dev/null is y4m");
}

static void test_tensor_video(void) {
    enum { F = 3, H = 2, W = 3 };
    float v[3 * F * H * W];
    t_fill_uniform(v, 3 * F * H * W, 3, -1, 1);
    /* chunks: frames [2, 3) then [0, 2), each [3][n][H][W] */
    float c2[3][1][H][W], c01[3][2][H][W];
    for (int c = 0; c < 3; c++) {
        memcpy(c2[c], v + (c * F + 2) * H * W, sizeof c2[c]);
        memcpy(c01[c], v + (c * F + 0) * H * W, sizeof c01[c]);
    }
    for (int st = 0; st < 2; st++) {
        const char *p = tpath(st ? "v.safetensors" : "v.npy");
        w22_video_writer *vw;
        CHECK_OK(w22_video_open(p, st ? W22_VIDEO_SAFETENSORS : W22_VIDEO_NPY, F, H, W, 24, 0, &vw));
        CHECK_OK(w22_video_write(vw, &c2[0][0][0][0], 2, 1));
        CHECK_OK(w22_video_write(vw, &c01[0][0][0][0], 0, 2));
        CHECK_OK(w22_video_finish(vw));
        if (!st) {
            float *y = NULL;
            int nd;
            int64_t s[W22_NPY_MAX_DIMS];
            CHECK_OK(w22_npy_read(p, 0, &y, &nd, s));
            CHECK(nd == 5 && s[0] == 1 && s[1] == 3 && s[2] == F && s[3] == H && s[4] == W, "npy video shape");
            CHECK(y && !memcmp(y, v, sizeof v), "npy video data in NCDHW order");
            free(y);
        } else {
            w22_st_file sf;
            CHECK_OK(w22_st_open(p, &sf));
            const w22_st_tensor *t = w22_st_find(&sf, "video");
            CHECK(t && t->dtype == W22_DTYPE_F32 && t->ndim == 5 && t->shape[2] == F && t->shape[4] == W,
                  "safetensors video tensor");
            CHECK(t && t->nbytes == sizeof v && !memcmp(t->data, v, sizeof v), "safetensors video data");
            w22_st_close(&sf);
        }
    }
}

static uint32_t be32(const uint8_t *p) { return (uint32_t)p[0] << 24 | p[1] << 16 | p[2] << 8 | p[3]; }

static void test_png(void) {
    /* the stored-deflate encoder: chunks, CRCs, stored blocks, adler32, against the raw rows */
    enum { W = 200, H = 120 }; /* 72120 bytes of rows: two stored blocks */
    uint8_t *rgb = malloc(W * H * 3);
    for (int i = 0; i < W * H * 3; i++) rgb[i] = (uint8_t)(i * 7 + i / 600);
    uint8_t *png = NULL;
    size_t len = 0;
    CHECK_OK(w22_png_encode_stored(rgb, W, H, &png, &len));
    CHECK(png && !memcmp(png, "\x89PNG\r\n\x1a\n", 8), "PNG signature");
    size_t pos = 8, raw_len = (size_t)(W * 3 + 1) * H, got = 0;
    uint8_t *raw = malloc(raw_len);
    int chunks = 0, ok_crc = 1, ok_blocks = 1;
    while (png && pos + 12 <= len) {
        uint32_t n = be32(png + pos);
        const uint8_t *type = png + pos + 4, *data = png + pos + 8;
        ok_crc &= be32(data + n) == w22_crc32(type, n + 4, 0);
        if (!memcmp(type, "IHDR", 4))
            CHECK(be32(data) == W && be32(data + 4) == H && data[8] == 8 && data[9] == 2, "IHDR");
        if (!memcmp(type, "IDAT", 4)) {
            CHECK(data[0] == 0x78 && (data[0] * 256 + data[1]) % 31 == 0, "zlib header");
            size_t q = 2;
            for (int last = 0; !last && q + 5 <= n;) {
                last = data[q] & 1;
                ok_blocks &= (data[q] & 6) == 0;
                size_t bl = data[q + 1] | data[q + 2] << 8, nl = data[q + 3] | data[q + 4] << 8;
                ok_blocks &= (bl ^ nl) == 0xffff && got + bl <= raw_len;
                if (!ok_blocks) break;
                memcpy(raw + got, data + q + 5, bl);
                got += bl;
                q += 5 + bl;
            }
            uint32_t a = 1, b2 = 0;
            for (size_t i = 0; i < got; i++) a = (a + raw[i]) % 65521, b2 = (b2 + a) % 65521;
            CHECK(q + 4 == n && be32(data + q) == (b2 << 16 | a), "adler32 after the last block");
        }
        chunks++;
        pos += 12 + n;
    }
    CHECK(pos == len && chunks == 3 && ok_crc && ok_blocks, "3 chunks with good CRCs: %d, crc %d", chunks, ok_crc);
    CHECK(got == raw_len, "stored bytes %zu, expected %zu", got, raw_len);
    int rows_ok = 1;
    for (int y = 0; y < H && got == raw_len; y++)
        rows_ok &= raw[y * (W * 3 + 1)] == 0 && !memcmp(raw + y * (W * 3 + 1) + 1, rgb + y * W * 3, W * 3);
    CHECK(rows_ok, "rows: filter 0 then the pixels");
#ifdef W22_HAVE_PNG
    /* libpng reads the stored encoder's file, and the libpng writer's */
    write_bytes(tpath("stored.png"), png, len);
    CHECK_OK(w22_png_write(tpath("lib.png"), rgb, W, H));
    const char *files[2] = {tpath("stored.png"), tpath("lib.png")};
    for (int i = 0; i < 2; i++) {
        png_image im;
        memset(&im, 0, sizeof im);
        im.version = PNG_IMAGE_VERSION;
        uint8_t *back = malloc(W * H * 3);
        int ok = png_image_begin_read_from_file(&im, files[i]);
        im.format = PNG_FORMAT_RGB;
        ok = ok && im.width == W && im.height == H && png_image_finish_read(&im, NULL, back, 0, NULL);
        CHECK(ok && !memcmp(back, rgb, W * H * 3), "libpng reads %s back: %s", files[i], im.message);
        png_image_free(&im);
        free(back);
    }
#endif
    free(raw);
    free(png);
    free(rgb);

    /* the directory writer: frame_00000.png ..., renamed into place at finish */
    float v[3][2][2][2];
    tiny_video(v);
    w22_video_writer *vw;
    CHECK_OK(w22_video_open(tpath("frames/"), W22_VIDEO_PNG_DIR, 2, 2, 2, 24, 0, &vw));
    CHECK(!t_file_exists(tpath("frames")), "no directory before finish");
    CHECK_OK(w22_video_write(vw, &v[0][0][0][0], 0, 2));
    CHECK_OK(w22_video_finish(vw));
    CHECK(t_file_exists(tpath("frames/frame_00000.png")) && t_file_exists(tpath("frames/frame_00001.png")) &&
              !t_file_exists(tpath("frames/frame_00002.png")), "two frame files");
    CHECK(count_entries("frames") == 1, "no temporary directory left");
    /* an existing directory of frames: refused, or replaced with overwrite; one with other files is never replaced */
    CHECK(w22_video_open(tpath("frames"), W22_VIDEO_PNG_DIR, 1, 2, 2, 24, 0, &vw) == W22_ERR_EXISTS, "%s",
          w22_last_error());
    CHECK_OK(w22_video_open(tpath("frames"), W22_VIDEO_PNG_DIR, 1, 2, 2, 24, 1, &vw));
    CHECK_OK(w22_video_write(vw, &v[0][0][0][0], 0, 1)); /* frame 0 of a 2-frame chunk is not what we pass... */
    CHECK_OK(w22_video_finish(vw));
    CHECK(t_file_exists(tpath("frames/frame_00000.png")) && !t_file_exists(tpath("frames/frame_00001.png")),
          "replaced: one frame now");
    CHECK(count_entries("frames") == 1, "no old or temporary directory left");
    write_bytes(tpath("frames/notes.txt"), "mine", 4);
    CHECK(w22_video_open(tpath("frames"), W22_VIDEO_PNG_DIR, 1, 2, 2, 24, 1, &vw) == W22_ERR_EXISTS &&
              has("other than frame"), "%s", w22_last_error());
    CHECK(t_file_exists(tpath("frames/notes.txt")), "the user's file is still there");
}

/* Headers that end inside a token: each message shows at most what is left of the header. The bytes after the
 * file are 'X' (a message with them read past the end), and each case is parsed again from a buffer that ends at
 * an unreadable page, where any read past the end faults (ASan's printf check misses an over-read that stops at a
 * NUL in the redzone). */
static void test_npy_truncated(void) {
    long pg = sysconf(_SC_PAGESIZE);
    unsigned char *pages = mmap(NULL, (size_t)pg * 2, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(pages != MAP_FAILED && mprotect(pages + pg, (size_t)pg, PROT_NONE) == 0, "guard page");
    if (pages == MAP_FAILED) return;
    static const struct { const char *dict, *msg, *shown; } cases[] = {
        {"[1", "expected '{'", "'[1'"},
        {"{'descr' '<f4'", "expected ':'", "''<f4''"},
        {"{'descr': '<f4', 'fortran_order': False, shape", "expected a quoted string", "'shape'"},
        {"{'descr': '<f4', 'fortran_order': Fals", "True or False", "'Fals'"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (2, x", "non-negative integer", "'x'"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (2 3", "expected ',' or ')'", "'3'"},
        {"{'descr': '<f4' 'fortran_order'", "expected ',' or '}'", "''fortran_ord'"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), } ju", "only padding", "'ju'"},
        {"{'descr': '<f4', 'fortran_order': ", "True or False", "the end of the header"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (2,", "non-negative integer", "the end of the header"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        unsigned char back[512];
        size_t n = make_npy(back, 1, cases[i].dict, 0);
        memset(back + n, 'X', sizeof back - n);
        w22_npy_info info;
        CHECK(w22_npy_parse(back, n, "t.npy", &info) == W22_ERR_FORMAT && has(cases[i].msg) && has(cases[i].shown) &&
                  !has("X") && !strchr(w22_last_error(), '\n'), "case %zu: %s", i, w22_last_error());
        unsigned char *exact = pages + pg - n;
        memcpy(exact, back, n);
        CHECK(w22_npy_parse(exact, n, "t.npy", &info) == W22_ERR_FORMAT, "case %zu at a page's end: %s", i,
              w22_last_error());
    }
    munmap(pages, (size_t)pg * 2);
}

/* f16 / bf16 at odd addresses, as in a data section at an odd file offset: every 16-bit read is a memcpy (UBSan's
 * alignment check fails the misaligned loads this replaced). */
static void test_odd_offsets(void) {
    static const uint16_t bf[4] = {0x3f80, 0xc000, 0x0000, 0x7f80}, hf[4] = {0x3c00, 0xc000, 0x0000, 0x7c00};
    unsigned char *raw = malloc(2 * 4 + 1), *odd = raw + 1;
    float out[4];
    memcpy(odd, bf, sizeof bf);
    w22_to_f32(odd, W22_DTYPE_BF16, 4, out);
    CHECK(out[0] == 1.0f && out[1] == -2.0f && out[2] == 0.0f && isinf(out[3]), "bf16 at an odd address");
    memcpy(odd, hf, sizeof hf);
    w22_to_f32(odd, W22_DTYPE_F16, 4, out);
    CHECK(out[0] == 1.0f && out[1] == -2.0f && out[2] == 0.0f && isinf(out[3]), "f16 at an odd address");
    int64_t shape[1] = {4};
    CHECK(w22_check_finite(odd, W22_DTYPE_F16, 1, shape, "odd") == W22_ERR_NONFINITE && has("+Inf at index 3"),
          "%s", w22_last_error());
    memcpy(odd, bf, sizeof bf);
    CHECK(w22_check_finite(odd, W22_DTYPE_BF16, 1, shape, "odd") == W22_ERR_NONFINITE, "%s", w22_last_error());
    out[3] = 0.5f;
    w22_from_f32(out, 4, W22_DTYPE_BF16, odd);
    uint16_t back;
    memcpy(&back, odd + 6, 2);
    CHECK(back == 0x3f00, "bf16 written at an odd address: %#x", back);
    free(raw);

    /* whole latents files from memory, their data at an odd offset: .npy '<f2' and .safetensors BF16 */
    float *z = NULL;
    int T, h, w, c;
    const char *dict = "{'descr': '<f2', 'fortran_order': False, 'shape': (1, 2, 1, 1, 1), }";
    unsigned char *buf = malloc(256);
    size_t n = make_npy(buf, 1, dict, 4);
    CHECK(n % 2 == 1, "npy data offset %zu is odd", n - 4);
    memcpy(buf + n - 4, hf, 4);
    CHECK_OK(w22_io_parse_latents(buf, n, "odd.npy", &z, &T, &h, &w, &c));
    CHECK(z && c == 2 && T == 1 && z[0] == 1.0f && z[1] == -2.0f, "odd .npy latents");
    free(z);
    static const char json[] = "{\"latents\":{\"dtype\":\"BF16\",\"shape\":[1,2,1,1,1],\"data_offsets\":[0,4]}}";
    size_t j = sizeof json - 1 + ((sizeof json - 1) % 2 == 0); /* odd: the data starts at 8 + j */
    memset(buf, 0, 8);
    buf[0] = (unsigned char)j;
    memset(buf + 8, ' ', j);
    memcpy(buf + 8, json, sizeof json - 1);
    memcpy(buf + 8 + j, bf, 4);
    z = NULL;
    CHECK_OK(w22_io_parse_latents(buf, 8 + j + 4, "odd.safetensors", &z, &T, &h, &w, &c));
    CHECK(z && c == 2 && z[0] == 1.0f && z[1] == -2.0f, "odd .safetensors latents");
    free(z);
    /* a parse error names the file, not "<memory>" */
    buf[0] = 0xff;
    CHECK(w22_io_parse_latents(buf, 8 + j + 4, "bad.safetensors", &z, &T, &h, &w, &c) == W22_ERR_FORMAT &&
              has("bad.safetensors: ") && !has("<memory>"), "%s", w22_last_error());
    free(buf);
}

/* Writes n bytes of b into path (a FIFO: the open waits for the reader) from a child process; its pid. */
static pid_t feed_path(const char *path, const void *b, size_t n) {
    pid_t pid = fork();
    if (pid == 0) {
        alarm(20); /* a reader that never comes must not leave this child blocked in open() */
        int fd = open(path, O_WRONLY);
        size_t off = 0;
        while (fd >= 0 && off < n) {
            ssize_t k = write(fd, (const char *)b + off, n - off);
            if (k <= 0) break;
            off += (size_t)k;
        }
        _exit(off == n ? 0 : 1);
    }
    return pid;
}

/* Standard input replaced by a pipe that a child fills with n bytes of b; the saved standard input (for
 * restore_stdin) or -1. */
static int feed_stdin(const void *b, size_t n, pid_t *pid) {
    int p[2], saved = dup(0);
    if (saved < 0 || pipe(p) != 0) return -1;
    if ((*pid = fork()) == 0) {
        alarm(20);
        close(p[0]);
        size_t off = 0;
        while (off < n) {
            ssize_t k = write(p[1], (const char *)b + off, n - off);
            if (k <= 0) break;
            off += (size_t)k;
        }
        _exit(off == n ? 0 : 1);
    }
    close(p[1]);
    dup2(p[0], 0);
    close(p[0]);
    return saved;
}

static void restore_stdin(int saved, pid_t pid) {
    dup2(saved, 0);
    close(saved);
    waitpid(pid, NULL, 0);
}

/* Inputs that are not regular files. The weights must be one (they are read at known offsets): a FIFO or a
 * directory is refused at once, without blocking (the alarm fails this test if an open blocks). Latents may be a
 * stream: standard input ("-"), a FIFO (its open waits for the writer, as cat's does), /dev/fd/N; read to the end,
 * the format from the name's extension or else the first bytes, the result the same as from the regular file. */
static void test_fifo_inputs(void) {
    char fifo_npy[700], fifo_st[700], fifo[700], npy[700], st[700]; /* tpath's buffers are reused */
    snprintf(fifo_npy, sizeof fifo_npy, "%s", tpath("fifo.npy"));
    snprintf(fifo_st, sizeof fifo_st, "%s", tpath("fifo.safetensors"));
    snprintf(fifo, sizeof fifo, "%s", tpath("fifo"));
    snprintf(npy, sizeof npy, "%s", tpath("stream.npy"));
    snprintf(st, sizeof st, "%s", tpath("stream.safetensors"));
    CHECK(mkfifo(fifo_npy, 0600) == 0 && mkfifo(fifo_st, 0600) == 0 && mkfifo(fifo, 0600) == 0, "mkfifo");
    alarm(20);
    float *z = NULL, *y = NULL;
    int T, h, w, c, nd;
    int64_t shp[W22_NPY_MAX_DIMS];
    CHECK(w22_npy_read(fifo_npy, 0, &y, &nd, shp) == W22_ERR_IO && has("FIFO"), "%s", w22_last_error());
    CHECK(w22_input_check(fifo_st, "weights") == W22_ERR_IO && has("expected the weights to be a regular file") &&
              has("FIFO"), "%s", w22_last_error());
    CHECK(w22_input_is_stream(fifo) && w22_input_is_stream("-") && w22_input_is_stream("/dev/stdin") &&
              !w22_input_is_stream(tpath("absent.npy")), "which inputs are streams");
    CHECK(y == NULL, "nothing loaded");
    CHECK(w22_input_check(dir, "weights") == W22_ERR_IO && has("a directory"), "%s", w22_last_error());
    CHECK(w22_input_check(tpath("absent.safetensors"), "weights") == W22_ERR_IO && has("cannot open the weights"),
          "%s", w22_last_error());
    CHECK_OK(w22_io_save_latents(tpath("reg.npy"), (float[1]){0}, 1, 1, 1, 1, 0));
    CHECK_OK(w22_input_check(tpath("reg.npy"), "latents"));

    /* random latents [1, 5, 2, 3, 7] saved both ways, then streamed in every way */
    enum { C = 5, TT = 2, H = 3, W = 7, N = C * TT * H * W };
    float ref[N];
    uint64_t s = 12345;
    for (int i = 0; i < N; i++) ref[i] = (float)((s = s * 6364136223846793005ULL + 1) >> 40) / (1 << 24) * 4 - 2;
    CHECK_OK(w22_io_save_latents(npy, ref, C, TT, H, W, 1));
    CHECK_OK(w22_io_save_latents(st, ref, C, TT, H, W, 1));
    unsigned char *bn = NULL, *bs = NULL;
    size_t nn = 0, ns = 0;
    CHECK_OK(w22_read_input(npy, "latents", &bn, &nn));
    CHECK_OK(w22_read_input(st, "latents", &bs, &ns));
    struct { const char *path; const unsigned char *b; size_t n; } fifos[] = {
        {fifo_npy, bn, nn}, {fifo_st, bs, ns}, {fifo, bn, nn}, {fifo, bs, ns},
    };
    for (int k = 0; k < 4 && bn && bs; k++) {
        pid_t pid = feed_path(fifos[k].path, fifos[k].b, fifos[k].n);
        z = NULL;
        w22_status r = w22_io_load_latents(fifos[k].path, &z, &T, &h, &w, &c);
        int st_ = -1;
        waitpid(pid, &st_, 0);
        CHECK(r == W22_OK && c == C && T == TT && h == H && w == W && z && !memcmp(z, ref, sizeof ref) && st_ == 0,
              "FIFO %d (%s): %s", k, fifos[k].path, r ? w22_last_error() : "the latents differ");
        free(z);
    }
    for (int k = 0; k < 2 && bn && bs; k++) { /* standard input, then /dev/stdin */
        pid_t pid;
        int saved = feed_stdin(k ? bs : bn, k ? ns : nn, &pid);
        z = NULL;
        w22_status r = w22_io_load_latents(k ? "/dev/stdin" : "-", &z, &T, &h, &w, &c);
        restore_stdin(saved, pid);
        CHECK(saved >= 0 && r == W22_OK && c == C && T == TT && z && !memcmp(z, ref, sizeof ref), "stdin %d: %s", k,
              r ? w22_last_error() : "the latents differ");
        free(z);
    }
    /* nothing, a cut file, bytes of another kind: refused, with what was expected */
    static const unsigned char zeros[4096];
    struct { const void *b; size_t n; w22_status want; const char *says; } bad[] = {
        {"", 0, W22_ERR_IO, "empty stream"},
        {bn, nn ? nn - 9 : 0, W22_ERR_FORMAT, "standard input"},
        {zeros, sizeof zeros, W22_ERR_FORMAT, "expected the latents as a .npy stream"},
        {"{\"a\":1}", 7, W22_ERR_FORMAT, "expected the latents as a .npy stream"},
    };
    for (int k = 0; k < 4 && bn; k++) {
        pid_t pid;
        int saved = feed_stdin(bad[k].b, bad[k].n, &pid);
        z = NULL;
        w22_status r = w22_io_load_latents("-", &z, &T, &h, &w, &c);
        restore_stdin(saved, pid);
        CHECK(r == bad[k].want && z == NULL && has(bad[k].says), "bad stream %d: %d %s", k, r, w22_last_error());
    }
    /* the bound: a stream longer than max is refused, not read on */
    {
        pid_t pid;
        int saved = feed_stdin(zeros, sizeof zeros, &pid);
        unsigned char *b = NULL;
        size_t n = 0;
        w22_status r = w22_read_stream(0, "zeros", "latents", 1 << 20, NULL, &b, &n);
        CHECK(r == W22_OK && n == sizeof zeros && b && !memcmp(b, zeros, n), "a stream within the bound: %s",
              w22_last_error());
        restore_stdin(saved, pid);
        free(b);
        unsigned char *big = calloc(3 << 20, 1);
        saved = feed_stdin(big, 3 << 20, &pid);
        b = NULL;
        r = w22_read_stream(0, "zeros", "latents", 2 << 20, NULL, &b, &n);
        CHECK(r == W22_ERR_IO && b == NULL && has("within 2097152 bytes"), "past the bound: %s", w22_last_error());
        close(0); /* the writer sees EPIPE rather than wait for a reader */
        restore_stdin(saved, pid);
        free(big);
    }
    alarm(0);
    free(bn);
    free(bs);
}

static void test_fps(void) {
    static const struct { double fps; int num, den; } ok[] = {
        {24, 24, 1}, {23.976, 23976, 1000}, {0.01, 10, 1000}, {1000, 1000, 1}, {0.5, 500, 1000},
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        int num = 0, den = 0;
        CHECK(w22_fps_rational(ok[i].fps, &num, &den) == W22_OK && num == ok[i].num && den == ok[i].den,
              "fps %g: %d/%d", ok[i].fps, num, den);
    }
    static const double bad[] = {0.0001, 0.0049, 0, -1, 1000.5, INFINITY, NAN};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int num, den;
        CHECK(w22_fps_rational(bad[i], &num, &den) == W22_ERR_INVALID_ARG && has("fps"), "fps %g accepted", bad[i]);
    }
    /* the writer refuses a rate its header would write as 0 */
    w22_video_writer *vw = NULL;
    CHECK(w22_video_open(tpath("slow.y4m"), W22_VIDEO_Y4M, 1, 2, 2, 0.0001, 0, &vw) == W22_ERR_INVALID_ARG &&
              has("slow.y4m") && has("fps"), "%s", w22_last_error());
    CHECK(vw == NULL && count_entries("slow.y4m") == 0, "nothing left");
}

/* What can be checked before the weights load: the temporary names' length, and ffmpeg for .mp4. */
static void test_output_precheck(void) {
    char name[300];
    memset(name, 'a', 250);
    strcpy(name + 250, ".y4m"); /* 254 characters: "<name>.tmp-XXXXXX" would be 265, over NAME_MAX */
    const char *p = tpath(name);
    CHECK(w22_output_check(p, 0, 0) == W22_ERR_INVALID_ARG && has("temporary"), "long name: %s", w22_last_error());
    CHECK(w22_video_check(p, W22_VIDEO_Y4M, 0) == W22_ERR_INVALID_ARG, "long name: %s", w22_last_error());
    w22_video_writer *vw = NULL;
    CHECK(w22_video_open(p, W22_VIDEO_Y4M, 1, 2, 2, 24, 0, &vw) == W22_ERR_INVALID_ARG && has("temporary"), "%s",
          w22_last_error());
    CHECK(count_entries("aaaa") == 0, "nothing created");
    strcpy(name + 240, ".y4m"); /* 244 + 11 = 255: fits */
    CHECK_OK(w22_output_check(tpath(name), 0, 0));
    CHECK_OK(w22_video_check(tpath(name), W22_VIDEO_PNG_DIR, 0));

    setenv("W22_FFMPEG", "/nonexistent/ffmpeg", 1);
    CHECK(w22_video_check(tpath("pre.mp4"), W22_VIDEO_FFMPEG, 0) == W22_ERR_UNSUPPORTED && has("needs ffmpeg"), "%s",
          w22_last_error());
    CHECK_OK(w22_video_check(tpath("pre.y4m"), W22_VIDEO_Y4M, 0)); /* only .mp4 needs it */
    setenv("W22_FFMPEG", dir, 1); /* a directory is not an ffmpeg */
    CHECK(w22_video_check(tpath("pre.mp4"), W22_VIDEO_FFMPEG, 0) == W22_ERR_UNSUPPORTED, "%s", w22_last_error());
    unsetenv("W22_FFMPEG");
    CHECK(count_entries("pre.") == 0, "nothing created");
}

/* Sizes whose byte counts overflow 64 bits are refused, never wrapped into a short write or read. */
static void test_size_overflow(void) {
    float x[4] = {0};
    int64_t huge[2] = {(int64_t)1 << 62, 4};
    CHECK(w22_npy_write(tpath("huge.npy"), x, 2, huge, 0) == W22_ERR_INVALID_ARG && has("2^62"), "%s",
          w22_last_error());
    CHECK(count_entries("huge.npy") == 0, "nothing written");
    int64_t neg[2] = {2, -2};
    CHECK(w22_npy_write(tpath("neg.npy"), x, 2, neg, 0) == W22_ERR_INVALID_ARG, "%s", w22_last_error());
    int64_t big[3] = {(int64_t)1 << 30, (int64_t)1 << 30, (int64_t)1 << 30};
    CHECK(w22_check_finite(x, W22_DTYPE_F32, 3, big, "big") == W22_ERR_INVALID_ARG, "%s", w22_last_error());
    char h[1024];
    CHECK(w22_st_header_f32("v", 2, huge, h, sizeof h) == 0, "safetensors header of 2^64 bytes");
    CHECK(w22_io_save_latents(tpath("huge.safetensors"), x, 1 << 16, 1 << 16, 1 << 16, 1 << 16, 0) ==
              W22_ERR_INVALID_ARG, "%s", w22_last_error());
    CHECK(w22_io_save_latents(tpath("huge2.npy"), x, 1 << 16, 1 << 16, 1 << 16, 1 << 16, 0) == W22_ERR_INVALID_ARG,
          "%s", w22_last_error());
    /* a video whose float32 tensor would pass 2^62 bytes (its offsets and file size would wrap) */
    w22_video_writer *vw = NULL;
    CHECK(w22_video_open(tpath("huge_v.npy"), W22_VIDEO_NPY, 1 << 30, 1 << 15, 1 << 15, 24, 0, &vw) ==
              W22_ERR_INVALID_ARG && has("2^62"), "%s", w22_last_error());
    w22_video_abort(vw);
    CHECK(count_entries("huge") == 0, "nothing written");
}

static int have_tool(const char *name) {
    char cmd[256];
    snprintf(cmd, sizeof cmd, "command -v %s >/dev/null 2>&1", name);
    return system(cmd) == 0;
}

static void test_mp4(void) {
    enum { F = 3, H = 16, W = 32 };
    float *v = malloc(sizeof(float) * 3 * F * H * W);
    t_fill_uniform(v, 3 * F * H * W, 5, -1, 1);
    w22_video_writer *vw;
    /* no ffmpeg: a clear error, nothing left */
    setenv("W22_FFMPEG", "/nonexistent/ffmpeg", 1);
    CHECK(w22_video_open(tpath("n.mp4"), W22_VIDEO_FFMPEG, F, H, W, 24, 0, &vw) == W22_ERR_UNSUPPORTED &&
              has("needs ffmpeg"), "%s", w22_last_error());
    CHECK(count_entries("n.mp4") == 0, "nothing left without ffmpeg");
    unsetenv("W22_FFMPEG");
    if (!have_tool("ffmpeg")) {
        printf("mp4: ffmpeg not installed, skipping the encode\n");
        free(v);
        return;
    }
    CHECK_OK(w22_video_open(tpath("m.mp4"), W22_VIDEO_FFMPEG, F, H, W, 24, 0, &vw));
    CHECK(w22_video_write(vw, v, 1, 1) == W22_ERR_INVALID_ARG && has("in order"), "%s", w22_last_error());
    CHECK_OK(w22_video_write(vw, v, 0, F));
    CHECK_OK(w22_video_finish(vw));
    CHECK(t_file_exists(tpath("m.mp4")) && count_entries("m.mp4") == 1, "mp4 written, no temporary");
    if (have_tool("ffprobe")) {
        char cmd[1024], out[256] = "";
        snprintf(cmd, sizeof cmd, "ffprobe -v error -count_frames -select_streams v:0 -show_entries "
                 "stream=width,height,nb_read_frames -of csv=p=0 '%s'", tpath("m.mp4"));
        FILE *p = popen(cmd, "r");
        if (p && fgets(out, sizeof out, p)) out[strcspn(out, "\n")] = 0;
        if (p) pclose(p);
        CHECK(!strcmp(out, "32,16,3"), "ffprobe: '%s', expected '32,16,3'", out);
    }
    /* names with a colon, relative: ffmpeg must write them as files, never read "file:", "pipe:" or "clip:" as a
     * protocol (the video went to a stray "c.mp4.tmp-*" and the output was empty, or ffmpeg failed) */
    char cwd[1024];
    CHECK(getcwd(cwd, sizeof cwd) && chdir(dir) == 0, "chdir");
    static const char *colon[] = {"file:c.mp4", "pipe:1.mp4", "clip:v2.mp4"};
    for (int i = 0; i < 3; i++) {
        vw = NULL;
        CHECK_OK(w22_video_open(colon[i], W22_VIDEO_FFMPEG, F, H, W, 24, 0, &vw));
        if (!vw) continue;
        CHECK_OK(w22_video_write(vw, v, 0, F));
        CHECK_OK(w22_video_finish(vw));
        size_t n = 0;
        unsigned char *b = read_all(colon[i], &n);
        CHECK(n > 12 && !memcmp(b + 4, "ftyp", 4), "%s: an mp4 of %zu bytes", colon[i], n);
        free(b);
    }
    CHECK(count_entries("c.mp4") == 0 && count_entries("1.mp4") == 0 && count_entries("v2.mp4") == 0 &&
              count_entries("file:c.mp4.tmp") == 0 && count_entries("clip:v2.mp4.tmp") == 0, "no stray temporary");
    CHECK(chdir(cwd) == 0, "chdir back");
    /* stopped half way: ffmpeg is killed and nothing is left */
    CHECK_OK(w22_video_open(tpath("s.mp4"), W22_VIDEO_FFMPEG, F, H, W, 24, 0, &vw));
    CHECK_OK(w22_video_write(vw, v, 0, 1));
    w22_video_abort(vw);
    CHECK(count_entries("s.mp4") == 0, "nothing left after abort");
    free(v);
}


/* ---- streams ---- */

static void test_streams(void) {
    CHECK(w22_output_is_stream("-") && w22_output_is_stream("/dev/stdout") && w22_output_is_stream("/dev/null") &&
              w22_output_is_stream("/dev/fd/1") && !w22_output_is_stream(tpath("absent.y4m")) &&
              !w22_output_is_stream(dir), "which paths are streams");
    CHECK_OK(w22_io_save_latents(tpath("plain.npy"), (float[1]){0}, 1, 1, 1, 1, 0));
    CHECK(!w22_output_is_stream(tpath("plain.npy")), "a regular file is no stream");
    char fifo[700];
    snprintf(fifo, sizeof fifo, "%s", tpath("out.fifo"));
    CHECK(mkfifo(fifo, 0600) == 0 && w22_output_is_stream(fifo), "a FIFO is a stream");
    CHECK_OK(w22_output_check(fifo, 0, 0)); /* no overwrite needed: a FIFO is written into, not replaced */
    CHECK(w22_output_check(fifo, 1, 0) == W22_ERR_INVALID_ARG && has("PNG frames"), "%s", w22_last_error());
    CHECK(w22_video_check(fifo, W22_VIDEO_NPY, 0) == W22_ERR_INVALID_ARG && has("written at offsets"), "%s",
          w22_last_error());

    /* a y4m through /dev/fd/N: the same bytes as the file, written where the descriptor stands, no temporary */
    float v[3][2][2][2];
    tiny_video(v);
    w22_video_writer *vw;
    CHECK_OK(w22_video_open(tpath("ref.y4m"), W22_VIDEO_Y4M, 2, 2, 2, 24, 0, &vw));
    CHECK_OK(w22_video_write(vw, &v[0][0][0][0], 0, 2));
    CHECK_OK(w22_video_finish(vw));
    int fd = open(tpath("viafd.y4m"), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0 && write(fd, "JUNK", 4) == 4, "a file open before");
    char fdpath[64];
    snprintf(fdpath, sizeof fdpath, "/dev/fd/%d", fd);
    CHECK(w22_output_is_stream(fdpath), "%s is a stream", fdpath);
    CHECK_OK(w22_video_open(fdpath, W22_VIDEO_Y4M, 2, 2, 2, 24, 0, &vw));
    /* in order only: frame 1 before frame 0 is refused on a stream (a file takes any order) */
    CHECK(w22_video_write(vw, &v[0][1][0][0], 1, 1) == W22_ERR_INVALID_ARG && has("in order"), "%s",
          w22_last_error());
    CHECK_OK(w22_video_write(vw, &v[0][0][0][0], 0, 2));
    CHECK_OK(w22_video_finish(vw));
    close(fd);
    size_t na, nb;
    unsigned char *a = read_all(tpath("ref.y4m"), &na), *b = read_all(tpath("viafd.y4m"), &nb);
    CHECK(a && b && nb == na + 4 && !memcmp(b, "JUNK", 4) && !memcmp(b + 4, a, na),
          "/dev/fd/N: the video after what the descriptor had written (%zu vs %zu bytes)", nb, na);
    free(a);
    free(b);
    CHECK(count_entries("viafd.y4m") == 1, "no temporary next to it");
    CHECK(access("/dev/fd", F_OK) != 0 || count_entries(".tmp-") == 0, "no temporary");

    /* a FIFO: a reader gets the video, and the FIFO stays a FIFO */
    pid_t pid = fork();
    if (pid == 0) {
        alarm(20); /* never outlive a failed test */
        int in = open(fifo, O_RDONLY), out = open(tpath("fromfifo.y4m"), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        char buf[4096];
        ssize_t n;
        while ((n = read(in, buf, sizeof buf)) > 0)
            if (write(out, buf, (size_t)n) != n) _exit(1);
        _exit(0);
    }
    alarm(20);
    w22_status so = w22_video_open(fifo, W22_VIDEO_Y4M, 2, 2, 2, 24, 0, &vw);
    CHECK(so == W22_OK, "a FIFO opens as a stream: %s", w22_last_error());
    if (so == W22_OK) {
        CHECK_OK(w22_video_write(vw, &v[0][0][0][0], 0, 2));
        CHECK_OK(w22_video_finish(vw));
    } else {
        kill(pid, SIGKILL); /* its reader waits for a writer that will not come */
    }
    int st = -1;
    waitpid(pid, &st, 0);
    alarm(0);
    a = read_all(tpath("ref.y4m"), &na);
    b = read_all(tpath("fromfifo.y4m"), &nb);
    CHECK(st == 0 && a && b && na == nb && !memcmp(a, b, na), "the FIFO's reader got the video (%zu bytes)", nb);
    free(a);
    free(b);
    struct stat sb;
    CHECK(stat(fifo, &sb) == 0 && S_ISFIFO(sb.st_mode), "the FIFO is still a FIFO");
    CHECK(count_entries("out.fifo") == 1, "no temporary next to the FIFO");
}

/* ---- ffmpeg's containers ---- */

static void ffprobe_line(const char *entries, const char *path, char *buf, size_t cap) {
    char cmd[1400];
    snprintf(cmd, sizeof cmd, "ffprobe -v error -select_streams v:0 -show_entries %s -of csv=p=0 '%s'", entries,
             path);
    FILE *f = popen(cmd, "r");
    buf[0] = 0;
    if (f && fgets(buf, (int)cap, f)) buf[strcspn(buf, "\r\n")] = 0;
    if (f) pclose(f);
}

static void test_ffmpeg_formats(void) {
    char line[512];
    CHECK(w22_ffmpeg_check(tpath("x.nosuchcontainer"), NULL) == W22_ERR_INVALID_ARG || !have_tool("ffmpeg"),
          "unknown extension: %s", w22_last_error());
    if (!have_tool("ffmpeg") || !have_tool("ffprobe")) {
        printf("ffmpeg formats: ffmpeg/ffprobe not installed, skipping\n");
        return;
    }
    CHECK(has("no format for the extension '.nosuchcontainer'"), "%s", w22_last_error());
    CHECK(count_entries("x.nosuch") == 0, "the trial leaves nothing next to the output");
    w22_video_options bad = {"no-such-encoder", -1, NULL, NULL};
    /* the caller's option is what ffmpeg refused: W22_ERR_INVALID_ARG (the CLI's usage error, issue 47) */
    CHECK(w22_ffmpeg_check(tpath("x.mp4"), &bad) == W22_ERR_INVALID_ARG && has("no-such-encoder"), "%s",
          w22_last_error());
    w22_video_options badq = {NULL, -1, NULL, "-metadata 'unclosed"};
    CHECK(w22_ffmpeg_check(tpath("x.mp4"), &badq) == W22_ERR_INVALID_ARG && has("not closed"), "%s",
          w22_last_error());
    int argc;
    char **argv;
    CHECK_OK(w22_split_args(" -a 'b c' \"d \\\"e\\\"\" f\\ g ", &argc, &argv));
    CHECK(argc == 4 && !strcmp(argv[0], "-a") && !strcmp(argv[1], "b c") && !strcmp(argv[2], "d \"e\"") &&
              !strcmp(argv[3], "f g"), "split like a shell: %d words", argc);
    w22_free_args(argc, argv);

    /* a red video (255, 0, 0) losslessly (ffv1, yuv444p): the pixels say which matrix converted it (BT.709 limited:
     * Y 63, Cb 102, Cr 240; BT.601 would give Y 81, Cb 90), and the stream is tagged bt709 / tv */
    enum { F = 2, H = 16, W = 16 };
    static float red[3][F][H][W];
    for (int c = 0; c < 3; c++)
        for (int i = 0; i < F * H * W; i++) (&red[c][0][0][0])[i] = c == 0 ? 1.0f : -1.0f;
    w22_video_options lossless = {"ffv1", -1, "yuv444p", NULL};
    CHECK_OK(w22_ffmpeg_check(tpath("red.mkv"), &lossless));
    w22_video_writer *vw;
    CHECK_OK(w22_video_open_opts(tpath("red.mkv"), W22_VIDEO_FFMPEG, F, H, W, 24, 0, &lossless, &vw));
    CHECK(vw && w22_video_command(vw) && strstr(w22_video_command(vw), "out_color_matrix=bt709"),
          "the command converts with BT.709: %s", vw ? w22_video_command(vw) : "");
    CHECK_OK(w22_video_write(vw, &red[0][0][0][0], 0, F));
    CHECK_OK(w22_video_finish(vw));
    ffprobe_line("stream=codec_name,pix_fmt,color_space,color_transfer,color_primaries,color_range", tpath("red.mkv"),
                 line, sizeof line);
    CHECK(!strcmp(line, "ffv1,yuv444p,tv,bt709,bt709,bt709"), "red.mkv: %s", line);
    char cmd[1400];
    snprintf(cmd, sizeof cmd, "ffmpeg -v error -i '%s' -frames:v 1 -f rawvideo -pix_fmt yuv444p -", tpath("red.mkv"));
    FILE *f = popen(cmd, "r");
    unsigned char px[3 * H * W];
    size_t got = f ? fread(px, 1, sizeof px, f) : 0;
    if (f) pclose(f);
    CHECK(got == sizeof px && abs(px[0] - 63) <= 1 && abs(px[H * W] - 102) <= 1 && abs(px[2 * H * W] - 240) <= 1,
          "red in BT.709 limited range: Y %d Cb %d Cr %d (BT.601 would be 81, 90, 240)", px[0], px[H * W],
          px[2 * H * W]);
    CHECK(count_entries("red.mkv") == 1, "no temporary left");

    /* the defaults per container, where this ffmpeg has the encoder: codec, pixel format, tags */
    static const struct { const char *name, *encoder, *probe; } cases[] = {
        {"d.mp4", "libx264", "h264,yuv420p,tv,bt709,bt709,bt709"},
        {"d.mkv", "libx264", "h264,yuv420p,tv,bt709,bt709,bt709"},
        {"d.mov", "libx264", "h264,yuv420p,tv,bt709,bt709,bt709"},
        {"d.webm", "libvpx-vp9", "vp9,yuv420p,tv,bt709,bt709,bt709"},
        {"d.gif", "gif", "gif"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(cmd, sizeof cmd, "ffmpeg -hide_banner -encoders 2>/dev/null | grep -q ' %s '", cases[i].encoder);
        if (system(cmd) != 0) {
            printf("%s: this ffmpeg has no %s, skipping\n", cases[i].name, cases[i].encoder);
            continue;
        }
        CHECK_OK(w22_ffmpeg_check(tpath(cases[i].name), NULL));
        CHECK_OK(w22_video_open_opts(tpath(cases[i].name), W22_VIDEO_FFMPEG, F, H, W, 24, 0, NULL, &vw));
        CHECK_OK(w22_video_write(vw, &red[0][0][0][0], 0, F));
        CHECK_OK(w22_video_finish(vw));
        ffprobe_line(strcmp(cases[i].encoder, "gif") ? "stream=codec_name,pix_fmt,color_range,color_space,"
                     "color_transfer,color_primaries" : "stream=codec_name", tpath(cases[i].name), line, sizeof line);
        CHECK(!strcmp(line, cases[i].probe), "%s: %s, expected %s", cases[i].name, line, cases[i].probe);
    }
}

/* ---- weights as Python reads them ---- */

static void write_text(const char *path, const char *text) { write_bytes(path, text, strlen(text)); }

static const char narrow_config[] =
    "{\"_class_name\": \"AutoencoderKLWan\", \"attn_scales\": [], \"base_dim\": 160, \"decoder_base_dim\": 8, "
    "\"dim_mult\": [1, 2, 4, 4], \"is_residual\": true, \"latents_mean\": [0.5, -0.25, 1.0, 0.125], "
    "\"latents_std\": [2.0, 0.5, 4.0, 1.0], \"num_res_blocks\": 2, \"out_channels\": 12, \"patch_size\": 2, "
    "\"temperal_downsample\": [false, true, true], \"z_dim\": 4}";

static void test_vae_config(void) {
    w22_vae_config vc;
    CHECK_OK(w22_vae_config_parse(narrow_config, strlen(narrow_config), "c.json", &vc));
    CHECK(vc.diffusers && vc.cfg.z_dim == 4 && vc.cfg.base_dim == 8 && vc.cfg.temporal_up[0] == 1 &&
              vc.cfg.temporal_up[1] == 1 && vc.cfg.temporal_up[2] == 0 && vc.cfg.out_channels == 12 &&
              vc.cfg.patch_size == 2, "the diffusers config: z_dim %d base_dim %d", vc.cfg.z_dim, vc.cfg.base_dim);
    CHECK(vc.nstats == 4 && vc.mean[1] == -0.25f && vc.std[2] == 4.0f, "the statistics: %d", vc.nstats);
    w22_vae_config_free(&vc);
    /* the real model's config (its statistics trimmed): the default config */
    static const char real[] = "{\"attn_scales\": [], \"base_dim\": 160, \"decoder_base_dim\": 256, \"dim_mult\": "
        "[1, 2, 4, 4], \"is_residual\": true, \"num_res_blocks\": 2, \"out_channels\": 12, \"patch_size\": 2, "
        "\"temperal_downsample\": [false, true, true], \"z_dim\": 48}";
    CHECK_OK(w22_vae_config_parse(real, strlen(real), "real.json", &vc));
    w22_config def;
    w22_config_default(&def);
    CHECK(!memcmp(&vc.cfg, &def, sizeof def) && vc.nstats == 0, "Wan2.2 TI2V-5B's config");
    w22_vae_config_free(&vc);
    /* this library's own keys */
    static const char own[] = "{\"z_dim\": 4, \"base_dim\": 8}";
    CHECK_OK(w22_vae_config_parse(own, strlen(own), "own.json", &vc));
    CHECK(!vc.diffusers && vc.cfg.z_dim == 4 && vc.cfg.base_dim == 8 && vc.cfg.patch_size == 2, "own keys");
    w22_vae_config_free(&vc);
    /* the Wan2.1 VAE's (issue 44): diffusers' defaults, is_residual false, patch_size null */
    static const char wan21[] = "{\"attn_scales\": [], \"base_dim\": 96, \"decoder_base_dim\": null, \"dim_mult\": "
        "[1, 2, 4, 4], \"is_residual\": false, \"num_res_blocks\": 2, \"out_channels\": 3, \"patch_size\": null, "
        "\"temperal_downsample\": [false, true, true], \"z_dim\": 16}";
    CHECK_OK(w22_vae_config_parse(wan21, strlen(wan21), "wan21.json", &vc));
    w22_config c21;
    w22_config_wan21(&c21);
    CHECK(vc.diffusers && !memcmp(&vc.cfg, &c21, sizeof c21), "the Wan2.1 VAE's config: is_residual %d, patch_size %d",
          vc.cfg.is_residual, vc.cfg.patch_size);
    w22_vae_config_free(&vc);
    /* is_residual absent (diffusers' default, False) is the Wan2.1 structure; patch_size absent is 1 */
    static const char bare[] = "{\"temperal_downsample\": [false, true, true]}";
    CHECK_OK(w22_vae_config_parse(bare, strlen(bare), "bare.json", &vc));
    CHECK(!memcmp(&vc.cfg, &c21, sizeof c21), "diffusers' defaults: the Wan2.1 VAE");
    w22_vae_config_free(&vc);
    static const struct { const char *text, *msg; } bad[] = {
        {"{\"temperal_downsample\": [false, true, true], \"is_residual\": false, \"patch_size\": 2}",
         "out_channels 3, expected 3 x patch_size^2 = 12"},
        {"{\"temperal_downsample\": [false, true, true], \"attn_scales\": [0.5]}", "attn_scales [0.5], expected []"},
        {"{\"temperal_downsample\": [false, true], \"is_residual\": true, \"patch_size\": 2}", "3 booleans"},
        {"{\"z_dim\": 4, \"frobnicate\": 1}", "unknown key 'frobnicate'"},
        {"{\"z_dim\": 4.5}", "expected an integer"},
        {"[1, 2]", "expected a diffusers AutoencoderKLWan config"},
        {"{\"z_dim\": 4,}", "JSON at byte"},
        {"{\"z_dim\": 4, \"z_dim\": 5}", "twice"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK(w22_vae_config_parse(bad[i].text, strlen(bad[i].text), "bad.json", &vc) != W22_OK &&
                  has(bad[i].msg) && has("bad.json"), "%s: %s", bad[i].text, w22_last_error());
    /* statistics that cannot be used do not fail the config; they say why */
    static const char short_stats[] = "{\"temperal_downsample\": [false, true, true], \"is_residual\": true, "
        "\"patch_size\": 2, \"out_channels\": 12, \"z_dim\": 4, \"decoder_base_dim\": 8, \"latents_mean\": [1, 2], "
        "\"latents_std\": [1, 2]}";
    CHECK_OK(w22_vae_config_parse(short_stats, strlen(short_stats), "s.json", &vc));
    CHECK(vc.nstats == -1 && strstr(vc.stats_problem, "z_dim = 4"), "%s", vc.stats_problem);
    w22_vae_config_free(&vc);
    static const char zero_std[] = "{\"temperal_downsample\": [false, true, true], \"is_residual\": true, "
        "\"patch_size\": 2, \"out_channels\": 12, \"z_dim\": 1, \"decoder_base_dim\": 8, \"latents_mean\": [1], "
        "\"latents_std\": [0]}";
    CHECK(w22_vae_config_parse(zero_std, strlen(zero_std), "s.json", &vc) == W22_OK && vc.nstats == -1 &&
              strstr(vc.stats_problem, "latents_std[0] is 0"), "%s", vc.stats_problem);
    w22_vae_config_free(&vc);
}

static void test_latent_stats(void) {
    /* the built-in Wan2.2 TI2V-5B table against sums of the diffusers config's numbers */
    double sm = 0, ss = 0, wm = 0, ws = 0;
    for (int i = 0; i < W22_WAN22_STATS; i++) {
        sm += w22_wan22_latents_mean[i];
        ss += w22_wan22_latents_std[i];
        wm += i * (double)w22_wan22_latents_mean[i];
        ws += i * (double)w22_wan22_latents_std[i];
    }
    CHECK(fabs(sm - -0.5589) < 1e-5 && fabs(ss - 32.536) < 1e-5 && fabs(wm - -7.0659) < 1e-4 &&
              fabs(ws - 758.3531) < 1e-4, "the table's sums: %.6f %.6f %.6f %.6f", sm, ss, wm, ws);
    CHECK(w22_wan22_latents_mean[0] == -0.2289f && w22_wan22_latents_mean[47] == -0.0667f &&
              w22_wan22_latents_std[0] == 0.4765f && w22_wan22_latents_std[47] == 0.7744f, "the ends of the table");
    /* de-normalizing: z / (1 / std) + mean per channel, in float32 (synthetic statistics) */
    enum { C = 3, N = 5 };
    const float mean[C] = {0.3f, -1.7f, 0.01f}, std[C] = {0.4765f, 3.0f, 0.1f};
    float z[C * N], ref[C * N];
    t_fill_uniform(z, C * N, 7, -3, 3);
    for (int c = 0; c < C; c++) {
        volatile float inv = 1.0f / std[c];
        for (int i = 0; i < N; i++) {
            volatile float q = z[c * N + i] / inv;
            ref[c * N + i] = q + mean[c];
        }
    }
    float orig[C * N];
    memcpy(orig, z, sizeof z);
    w22_latents_denormalize(z, C, N, mean, std);
    CHECK(!memcmp(z, ref, sizeof z), "z / (1 / std) + mean, bit for bit");
    int near = 1;
    for (int i = 0; i < C * N; i++) near &= fabsf(z[i] - (orig[i] * std[i / N] + mean[i / N])) < 1e-5f;
    CHECK(near, "= z * std + mean");
    CHECK(fabsf(z[0] - orig[0]) > 1e-3f, "the values changed");
}

/* synthetic weights (z_dim 4, base_dim 8, seed 3) saved to path */
static void make_weights(const char *path) {
    w22_config cfg;
    w22_config_default(&cfg);
    cfg.z_dim = 4;
    cfg.base_dim = 8;
    w22_weights *w;
    CHECK_OK(w22_weights_synthetic(&cfg, 3, &w));
    CHECK_OK(w22_weights_save(w, path, W22_DTYPE_BF16));
    w22_weights_free(w);
}

/* Shards of the file at src: tensors [0, split) in a, the rest in b (and tensor `dup` in both when >= 0). */
static void make_shards(const char *src, const char *a, const char *b, int split, int dup) {
    w22_st_file f;
    CHECK_OK(w22_st_open(src, &f));
    w22_st_write_tensor *t = calloc((size_t)f.ntensors + 1, sizeof *t);
    for (int i = 0; i < f.ntensors; i++)
        t[i] = (w22_st_write_tensor){f.tensors[i].name, f.tensors[i].dtype, f.tensors[i].ndim, f.tensors[i].shape,
                                     f.tensors[i].data};
    CHECK_OK(w22_st_write(a, t, split, NULL, 0, 1));
    w22_st_write_tensor *rest = t + split;
    int nrest = f.ntensors - split;
    if (dup >= 0) rest[nrest++] = t[dup];
    CHECK_OK(w22_st_write(b, rest, nrest, NULL, 0, 1));
    free(t);
    w22_st_close(&f);
}

/* An index of the file at src: tensors [0, split) in shard_a, the rest in shard_b. */
static void make_index(const char *src, const char *index, const char *shard_a, const char *shard_b, int split) {
    w22_st_file f;
    CHECK_OK(w22_st_open(src, &f));
    FILE *o = fopen(index, "w");
    fprintf(o, "{\"metadata\": {\"total_size\": 0}, \"weight_map\": {");
    for (int i = 0; i < f.ntensors; i++)
        fprintf(o, "%s\"%s\": \"%s\"", i ? ", " : "", f.tensors[i].name, i < split ? shard_a : shard_b);
    fprintf(o, "}}\n");
    fclose(o);
    w22_st_close(&f);
}

/* dir/sub holding file's tensors in diffusers' two shards (50 + the rest) and their index. */
static void make_sharded_folder(const char *file, const char *sub) {
    static const char *const shard[2] = {"diffusion_pytorch_model-00001-of-00002.safetensors",
                                         "diffusion_pytorch_model-00002-of-00002.safetensors"};
    char d[700], a[800], b[800], index[800];
    snprintf(d, sizeof d, "%s/%s", dir, sub);
    mkdir(d, 0755);
    snprintf(a, sizeof a, "%s/%s", d, shard[0]);
    snprintf(b, sizeof b, "%s/%s", d, shard[1]);
    snprintf(index, sizeof index, "%s/" W22_DIFFUSERS_INDEX, d);
    make_shards(file, a, b, 50, -1);
    make_index(file, index, shard[0], shard[1], 50);
}

/* Every tensor of two weights objects equal (as float32). */
static int same_weights(const w22_weights *x, const w22_weights *y) {
    if (x->model.nweights != y->model.nweights) return 0;
    for (int i = 0; i < x->model.nweights; i++) {
        size_t n = (size_t)x->model.weights[i].numel;
        float *a = malloc(n * 4), *b = malloc(n * 4);
        w22_weights_get_f32(x, i, a);
        w22_weights_get_f32(y, i, b);
        int eq = !memcmp(a, b, n * 4);
        free(a);
        free(b);
        if (!eq) return 0;
    }
    return 1;
}

static void test_weight_sources(void) {
    char d[700];
    snprintf(d, sizeof d, "%s/pipe", dir);
    mkdir(d, 0755);
    snprintf(d, sizeof d, "%s/pipe/vae", dir);
    mkdir(d, 0755);
    char file[700]; /* tpath's buffers are reused */
    snprintf(file, sizeof file, "%s", tpath("pipe/vae/diffusion_pytorch_model.safetensors"));
    make_weights(file);
    w22_weights *ref, *w;
    CHECK_OK(w22_weights_load(file, NULL, &ref));

    /* a pipeline folder (vae/), the VAE folder, the file itself: the same weights, the config from config.json */
    w22_weights_location loc;
    CHECK_OK(w22_weights_locate(tpath("pipe"), NULL, &loc));
    CHECK(!strcmp(loc.found, file) && !loc.is_index && !loc.config_json[0], "pipe/ -> %s", loc.found);
    write_text(tpath("pipe/vae/config.json"), narrow_config);
    w22_weights_info info;
    static const char *const paths[] = {"pipe", "pipe/vae", "pipe/vae/", "pipe/vae/diffusion_pytorch_model.safetensors"};
    for (int i = 0; i < 4; i++) {
        CHECK_OK(w22_weights_open_path(tpath(paths[i]), NULL, &w, &info));
        CHECK(w && info.has_config && info.vae.nstats == 4 && info.nfiles == 1 && !info.loc.is_index &&
                  same_weights(w, ref), "%s", paths[i]);
        w22_weights_free(w);
        w22_weights_info_free(&info);
    }
    /* a config.json that disagrees with the tensors is an error naming it */
    write_text(tpath("pipe/vae/config.json"), "{\"z_dim\": 8, \"base_dim\": 8}");
    CHECK(w22_weights_open_path(tpath("pipe"), NULL, &w, &info) == W22_ERR_BAD_SHAPE && has("config.json"), "%s",
          w22_last_error());
    unlink(tpath("pipe/vae/config.json"));
    CHECK(w22_weights_locate(tpath("nothere"), NULL, &loc) == W22_ERR_IO && has("no such file or folder"), "%s",
          w22_last_error());
    CHECK(w22_weights_locate(dir, NULL, &loc) == W22_ERR_IO && has("no diffusion_pytorch_model.safetensors"), "%s",
          w22_last_error());
    write_text(tpath("config.json"), "{}");
    CHECK(w22_weights_locate(tpath("config.json"), NULL, &loc) == W22_ERR_INVALID_ARG && has("a config, not weights"),
          "%s", w22_last_error());
    CHECK(mkfifo(tpath("w.fifo"), 0600) == 0, "mkfifo");
    CHECK(w22_weights_locate(tpath("w.fifo"), NULL, &loc) == W22_ERR_IO && has("FIFO"), "%s", w22_last_error());

    /* variants: the only one is taken; two need a choice */
    snprintf(d, sizeof d, "%s/var", dir);
    mkdir(d, 0755);
    make_weights(tpath("var/diffusion_pytorch_model.fp16.safetensors"));
    CHECK_OK(w22_weights_locate(tpath("var"), NULL, &loc));
    CHECK(strstr(loc.found, "diffusion_pytorch_model.fp16.safetensors") != NULL, "the only variant: %s", loc.found);
    make_weights(tpath("var/diffusion_pytorch_model.bf16.safetensors"));
    CHECK(w22_weights_locate(tpath("var"), NULL, &loc) == W22_ERR_IO && has("several variants") && has("bf16, fp16"),
          "%s", w22_last_error());
    CHECK_OK(w22_weights_locate(tpath("var"), "bf16", &loc));
    CHECK(strstr(loc.found, ".bf16.") != NULL, "--variant bf16: %s", loc.found);

    /* a sharded index: the same weights from two shards, found first in a folder */
    make_sharded_folder(file, "sh");
    CHECK_OK(w22_weights_open_path(tpath("sh"), NULL, &w, &info));
    CHECK(w && info.loc.is_index && info.nfiles == 2 && info.file_tensors == 110 && same_weights(w, ref),
          "sharded: %d shards, %d tensors", info.nfiles, info.file_tensors);
    w22_weights_free(w);
    w22_weights_info_free(&info);
    CHECK_OK(w22_weights_open_path(tpath("sh/" W22_DIFFUSERS_INDEX), NULL, &w, &info));
    CHECK(w && same_weights(w, ref), "the index by name");
    w22_weights_free(w);
    w22_weights_info_free(&info);
    /* a shard shrunk in place after the load: the decoder's open refuses, naming that shard (test_weights: a file) */
    make_sharded_folder(file, "shc");
    CHECK_OK(w22_weights_open_path(tpath("shc"), NULL, &w, &info));
    CHECK(truncate(tpath("shc/diffusion_pytorch_model-00002-of-00002.safetensors"), 64) == 0, "truncate a shard");
    {
        w22_decoder_params p;
        w22_decoder_params_init(&p);
        p.threads = 1;
        w22_decoder *dec = NULL;
        CHECK(w && w22_decoder_open(w, &p, &dec) == W22_ERR_IO && !dec && has("changed in place") &&
                  has("shc/diffusion_pytorch_model-00002-of-00002.safetensors"), "a shard shrunk in place: %s",
              w22_last_error());
    }
    w22_weights_free(w);
    w22_weights_info_free(&info);
    /* shards without an index */
    snprintf(d, sizeof d, "%s/noidx", dir);
    mkdir(d, 0755);
    make_shards(file, tpath("noidx/diffusion_pytorch_model-00001-of-00002.safetensors"),
                tpath("noidx/diffusion_pytorch_model-00002-of-00002.safetensors"), 50, -1);
    CHECK(w22_weights_locate(tpath("noidx"), NULL, &loc) == W22_ERR_IO && has("no " W22_DIFFUSERS_INDEX), "%s",
          w22_last_error());

    /* refused: a shard outside the index's folder (through '..', an absolute path, a symlinked folder), a tensor in
     * two shards, a missing shard, an entry its shard does not hold */
    make_shards(file, tpath("outside-a.safetensors"), tpath("outside-b.safetensors"), 50, -1);
    make_index(file, tpath("sh/up.index.json"), "../outside-a.safetensors", "diffusion_pytorch_model-00002-of-00002.safetensors", 50);
    CHECK(w22_weights_load_index(tpath("sh/up.index.json"), NULL, &w, NULL, NULL) == W22_ERR_FORMAT &&
              has("refused") && has("outside the index's folder"), "'..': %s", w22_last_error());
    make_index(file, tpath("sh/abs.index.json"), tpath("outside-a.safetensors"), "diffusion_pytorch_model-00002-of-00002.safetensors", 50);
    CHECK(w22_weights_load_index(tpath("sh/abs.index.json"), NULL, &w, NULL, NULL) == W22_ERR_FORMAT &&
              has("refused") && has("relative path"), "absolute: %s", w22_last_error());
    CHECK(symlink(dir, tpath("sh/link")) == 0, "symlink");
    make_index(file, tpath("sh/link.index.json"), "link/outside-a.safetensors", "diffusion_pytorch_model-00002-of-00002.safetensors", 50);
    CHECK(w22_weights_load_index(tpath("sh/link.index.json"), NULL, &w, NULL, NULL) == W22_ERR_FORMAT &&
              has("outside the index's folder"), "a symlinked folder: %s", w22_last_error());
    make_shards(file, tpath("sh/dup-a.safetensors"), tpath("sh/dup-b.safetensors"), 50, 3);
    make_index(file, tpath("sh/dup.index.json"), "dup-a.safetensors", "dup-b.safetensors", 50);
    CHECK(w22_weights_load_index(tpath("sh/dup.index.json"), NULL, &w, NULL, NULL) == W22_ERR_FORMAT &&
              has("is in two shards"), "%s", w22_last_error());
    make_index(file, tpath("sh/gone.index.json"), "gone.safetensors", "dup-b.safetensors", 50);
    CHECK(w22_weights_load_index(tpath("sh/gone.index.json"), NULL, &w, NULL, NULL) == W22_ERR_IO &&
              has("gone.safetensors: no such file") && has("names it as the shard of tensor"), "%s",
          w22_last_error());
    make_index(file, tpath("sh/wrong.index.json"), "diffusion_pytorch_model-00002-of-00002.safetensors",
               "diffusion_pytorch_model-00001-of-00002.safetensors", 50);
    CHECK(w22_weights_load_index(tpath("sh/wrong.index.json"), NULL, &w, NULL, NULL) == W22_ERR_MISSING_TENSOR &&
              has("does not hold it"), "%s", w22_last_error());
    write_text(tpath("sh/empty.index.json"), "{\"weight_map\": {}}");
    CHECK(w22_weights_load_index(tpath("sh/empty.index.json"), NULL, &w, NULL, NULL) == W22_ERR_FORMAT &&
              has("weight_map is empty"), "%s", w22_last_error());
    write_text(tpath("sh/nomap.index.json"), "{\"metadata\": {}}");
    CHECK(w22_weights_load_index(tpath("sh/nomap.index.json"), NULL, &w, NULL, NULL) == W22_ERR_FORMAT &&
              has("without weight_map"), "%s", w22_last_error());
    CHECK(w == NULL, "nothing loaded");
    w22_weights_free(ref);
}

/* A file of more than W22_WRITEBACK_BYTES (64 MB) written in chunks out of order: its write-out is started as it
 * goes (sync_file_range on Linux), which must leave every byte where it was written; the commit renames it. */
static void test_large_outfile(void) {
    char path[600];
    snprintf(path, sizeof path, "%s/large.bin", dir);
    const size_t chunk = 5u << 20, n = 30; /* 150 MB: two starts of the write-out, an odd chunk size */
    uint32_t *buf = malloc(chunk);
    w22_outfile o;
    CHECK_OK(w22_outfile_create(&o, path, 0, 1));
    w22_status s = W22_OK;
    for (size_t k = 0; k < n && s == W22_OK && buf; k++) {
        const size_t c = (k * 7) % n; /* every chunk once, out of order */
        for (size_t i = 0; i < chunk / 4; i++) buf[i] = (uint32_t)(c * (chunk / 4) + i) * 2654435761u;
        s = w22_outfile_pwrite(&o, buf, chunk, (uint64_t)c * chunk);
    }
    CHECK(s == W22_OK && buf, "large outfile: writes: %s", w22_last_error());
#ifdef __linux__
    CHECK(o.unflushed < ((uint64_t)64 << 20), "large outfile: its write-out started (%llu bytes since)",
          (unsigned long long)o.unflushed);
#endif
    CHECK_OK(w22_outfile_commit(&o));
    FILE *f = fopen(path, "rb");
    long bad = f ? 0 : 1;
    for (size_t c = 0; f && c < n; c++) {
        if (fread(buf, 1, chunk, f) != chunk) {
            bad++;
            break;
        }
        for (size_t i = 0; i < chunk / 4; i++) bad += buf[i] != (uint32_t)(c * (chunk / 4) + i) * 2654435761u;
    }
    if (f) fclose(f);
    CHECK(bad == 0, "large outfile: %ld words differ after the commit", bad);
    unlink(path);
    free(buf);
}

int main(void) {
    snprintf(dir, sizeof dir, "%s", t_tmpdir());
    test_large_outfile();
    test_npy_roundtrip();
    test_npy_hostile();
    test_latents();
    test_check_finite();
    test_pixels();
    test_pixels_vectorized();
    test_y4m();
    test_existing_and_failures();
    test_formats();
    test_tensor_video();
    test_png();
    test_mp4();
    test_npy_truncated();
    test_odd_offsets();
    test_fifo_inputs();
    test_fps();
    test_output_precheck();
    test_size_overflow();
    test_streams();
    test_ffmpeg_formats();
    test_vae_config();
    test_latent_stats();
    test_weight_sources();
    return t_finish("test_io");
}
