/* PNG frames (issue 30): the folder writer encodes on a pool of threads at zlib's level 0..9. Every level and
 * thread count gives the pixels of w22_frame_rgb24 (the conversion the writer used before the pool, unchanged), read
 * back with libpng (or, in a build without it, by parsing the stored blocks); the level asked for is the one in the
 * zlib header; a bad level or thread count is refused; the pool's size stays within its memory budget; a failure
 * in an encoder thread comes back with its message, and an abort leaves nothing behind. */
#define _GNU_SOURCE
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "common.h"
#include "io/io.h"
#include "io/png_encode.h"
#include "io/video_impl.h"
#include "testutil.h"
#ifdef W22_HAVE_PNG
#include <png.h>
#endif

static char dir[512];

static const char *tpath(const char *name) { return t_path(name); }

static uint32_t be32(const uint8_t *p) { return (uint32_t)p[0] << 24 | p[1] << 16 | p[2] << 8 | p[3]; }

static uint8_t *read_all(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = n > 0 ? malloc((size_t)n) : NULL;
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) free(b), b = NULL;
    fclose(f);
    *len = b ? (size_t)n : 0;
    return b;
}

/* The zlib stream of a PNG file (its IDAT chunks joined), malloc'd; NULL when the file is not a PNG of W x H. */
static uint8_t *zlib_stream(const uint8_t *png, size_t len, int W, int H, size_t *zlen) {
    if (len < 8 || memcmp(png, "\x89PNG\r\n\x1a\n", 8)) return NULL;
    uint8_t *z = malloc(len);
    size_t pos = 8, n = 0;
    int ihdr = 0;
    while (z && pos + 12 <= len) {
        uint32_t cl = be32(png + pos);
        if (cl > len - pos - 12) break;
        const uint8_t *type = png + pos + 4, *data = png + pos + 8;
        if (!memcmp(type, "IHDR", 4)) ihdr = cl == 13 && be32(data) == (uint32_t)W && be32(data + 4) == (uint32_t)H;
        if (!memcmp(type, "IDAT", 4)) memcpy(z + n, data, cl), n += cl;
        pos += 12 + cl;
    }
    if (!ihdr || n < 2) free(z), z = NULL;
    *zlen = n;
    return z;
}

#ifdef W22_HAVE_PNG
/* libpng decodes the file into rgb (W * H * 3). */
static int read_pixels(const char *path, int W, int H, uint8_t *rgb) {
    png_image im;
    memset(&im, 0, sizeof im);
    im.version = PNG_IMAGE_VERSION;
    int ok = png_image_begin_read_from_file(&im, path);
    im.format = PNG_FORMAT_RGB;
    ok = ok && im.width == (png_uint_32)W && im.height == (png_uint_32)H &&
         png_image_finish_read(&im, NULL, rgb, 0, NULL);
    png_image_free(&im);
    return ok;
}
#else
/* Without libpng the writer stores: stored deflate blocks of rows with filter 0, read here by hand. */
static int read_pixels(const char *path, int W, int H, uint8_t *rgb) {
    size_t len, zlen, q = 2, got = 0, row = (size_t)W * 3 + 1;
    uint8_t *png = read_all(path, &len), *z = png ? zlib_stream(png, len, W, H, &zlen) : NULL;
    uint8_t *raw = malloc(row * H);
    int ok = z && raw;
    for (int last = 0; ok && !last;) {
        ok = q + 5 <= zlen && (z[q] & 6) == 0; /* BTYPE 00: stored */
        if (!ok) break;
        last = z[q] & 1;
        size_t bl = z[q + 1] | z[q + 2] << 8;
        ok = got + bl <= row * H && q + 5 + bl <= zlen;
        if (ok) memcpy(raw + got, z + q + 5, bl), got += bl, q += 5 + bl;
    }
    ok = ok && got == row * H;
    for (int y = 0; ok && y < H; y++) {
        ok = raw[y * row] == 0;
        memcpy(rgb + (size_t)y * W * 3, raw + y * row + 1, (size_t)W * 3);
    }
    free(raw);
    free(z);
    free(png);
    return ok;
}
#endif

/* zlib's FLEVEL (the header's 2 bits) for a compression level: 0 for 0-1, 1 for 2-5, 2 for 6, 3 for 7-9; without
 * libpng the frames are stored (0) whatever the level. */
static int want_flevel(int level) {
#ifdef W22_HAVE_PNG
    return level <= 1 ? 0 : level <= 5 ? 1 : level == 6 ? 2 : 3;
#else
    return 0;
#endif
}

static int file_flevel(const char *path, int W, int H) {
    size_t len, zlen;
    uint8_t *png = read_all(path, &len), *z = png ? zlib_stream(png, len, W, H, &zlen) : NULL;
    int fl = z ? z[1] >> 6 : -1;
    free(z);
    free(png);
    return fl;
}

enum { F = 7, H = 23, W = 37 };

/* The test video [3][F][H][W]: uniform values past both ends of [-1, 1], a smooth ramp (so that levels differ in
 * size), NaN and the infinities, and the values at rounding edges. */
static float *test_video(void) {
    size_t plane = (size_t)H * W, n = 3 * F * plane;
    float *v = malloc(n * sizeof *v);
    t_fill_uniform(v, n, 30, -1.3f, 1.3f);
    for (int c = 0; c < 3; c++)
        for (int y = 0; y < H; y++)
            for (int x = 0; x < W; x++) v[((size_t)c * F + 1) * plane + y * W + x] = (x + y) / 30.0f - 1; /* frame 1 */
    static const float edges[] = {NAN, INFINITY, -INFINITY, -1, 1, 0, 1.0f / 255, -1.0f / 255, 0.5f / 255 * 2 - 1};
    for (size_t i = 0; i < sizeof edges / sizeof edges[0]; i++) v[2 * plane + i * 5] = edges[i]; /* frame 2, red */
    return v;
}

/* Frame f of the video as the writer must store it: w22_frame_rgb24 of a one-frame copy. */
static void want_frame(const float *v, int f, uint8_t *rgb) {
    size_t plane = (size_t)H * W;
    float *one = malloc(3 * plane * sizeof *one);
    for (int c = 0; c < 3; c++) memcpy(one + c * plane, v + ((size_t)c * F + f) * plane, plane * sizeof *one);
    w22_frame_rgb24(one, 1, 0, H, W, rgb);
    free(one);
}

/* Frames [f0, f0 + n) of v as a chunk [3][n][H][W]. */
static float *chunk_of(const float *v, int f0, int n) {
    size_t plane = (size_t)H * W;
    float *ch = malloc(3 * (size_t)n * plane * sizeof *ch);
    for (int c = 0; c < 3; c++)
        memcpy(ch + (size_t)c * n * plane, v + ((size_t)c * F + f0) * plane, n * plane * sizeof *ch);
    return ch;
}

/* Writes the test video out of order in chunks of 2, 3 and 2 frames at `level` with `threads` encoders. */
static w22_status write_video(const char *path, const float *v, int level, int threads) {
    static const int order[3][2] = {{3, 2}, {0, 3}, {5, 2}}; /* frame0, n */
    w22_video_writer *vw;
    W22_TRY(w22_video_open(path, W22_VIDEO_PNG_DIR, F, H, W, 24, 1, &vw));
    w22_status s = w22_video_set_png(vw, level, threads);
    for (int i = 0; i < 3 && s == W22_OK; i++) {
        float *ch = chunk_of(v, order[i][0], order[i][1]);
        s = w22_video_write(vw, ch, order[i][0], order[i][1]);
        free(ch);
    }
    if (s != W22_OK) {
        w22_video_abort(vw);
        return s;
    }
    return w22_video_finish(vw);
}

static long dir_bytes(const char *path) {
    long total = 0;
    char p[800];
    for (int f = 0; f < F; f++) {
        snprintf(p, sizeof p, "%s/frame_%05d.png", path, f);
        size_t len;
        uint8_t *b = read_all(p, &len);
        total += b ? (long)len : 0;
        free(b);
    }
    return total;
}

static void test_levels_and_threads(void) {
    float *v = test_video();
    uint8_t want[F][H * W * 3], got[H * W * 3];
    for (int f = 0; f < F; f++) want_frame(v, f, want[f]);
    long size0 = 0, size9 = 0;
    static const int threads[] = {1, 2, 3, 0};
    for (int level = -1; level <= W22_PNG_LEVEL_MAX; level++)
        for (size_t t = 0; t < sizeof threads / sizeof threads[0]; t++) {
            char name[64];
            snprintf(name, sizeof name, "l%d_t%d", level, threads[t]);
            const char *path = tpath(name);
            CHECK_OK(write_video(path, v, level, threads[t]));
            int bad = 0, bad_level = 0;
            for (int f = 0; f < F; f++) {
                char p[800];
                snprintf(p, sizeof p, "%s/frame_%05d.png", path, f);
                memset(got, 0xa5, sizeof got);
                bad += !read_pixels(p, W, H, got) || memcmp(got, want[f], sizeof got);
                bad_level += file_flevel(p, W, H) != want_flevel(level < 0 ? W22_PNG_LEVEL_DEFAULT : level);
            }
            CHECK(bad == 0, "level %d, %d threads: %d of %d frames differ from w22_frame_rgb24", level, threads[t],
                  bad, F);
            CHECK(bad_level == 0, "level %d, %d threads: %d frames with another zlib level", level, threads[t],
                  bad_level);
            if (level == 0 && t == 0) size0 = dir_bytes(path);
            if (level == 9 && t == 0) size9 = dir_bytes(path);
        }
    long raw = (long)F * (H * (W * 3 + 1));
    CHECK(size0 > raw, "level 0 stores: %ld bytes for %ld of rows", size0, raw);
#ifdef W22_HAVE_PNG
    CHECK(size9 < size0 * 9 / 10, "level 9 compresses: %ld bytes against level 0's %ld", size9, size0);
#else
    CHECK(size9 == size0, "without libpng every level stores: %ld bytes, level 0's %ld", size9, size0);
#endif
    free(v);
}

static void test_bad_settings(void) {
    uint8_t rgb[2 * 2 * 3] = {0};
    CHECK(w22_png_write_level(tpath("bad.png"), rgb, 2, 2, 10) == W22_ERR_INVALID_ARG &&
              strstr(w22_last_error(), "0..9"), "level 10: %s", w22_last_error());
    CHECK(w22_png_write_level(tpath("bad.png"), rgb, 2, 2, -1) == W22_ERR_INVALID_ARG, "level -1 is not a level");
    CHECK(!t_file_exists(tpath("bad.png")), "no file for a bad level");
    w22_video_writer *vw;
    CHECK_OK(w22_video_open(tpath("bad/"), W22_VIDEO_PNG_DIR, 2, 2, 2, 24, 0, &vw));
    CHECK(w22_video_set_png(vw, 10, 0) == W22_ERR_INVALID_ARG && strstr(w22_last_error(), "found level 10"), "%s",
          w22_last_error());
    CHECK(w22_video_set_png(vw, -2, 0) == W22_ERR_INVALID_ARG, "level -2");
    CHECK(w22_video_set_png(vw, 1, -1) == W22_ERR_INVALID_ARG, "threads -1");
    CHECK_OK(w22_video_set_png(vw, 9, 2));
    float frame[3 * 2 * 2] = {0};
    CHECK_OK(w22_video_write(vw, frame, 0, 1));
    CHECK(w22_video_set_png(vw, 1, 2) == W22_ERR_INVALID_ARG && strstr(w22_last_error(), "before the first frame"),
          "settings after a write: %s", w22_last_error());
    w22_video_abort(vw);
    CHECK(!t_file_exists(tpath("bad")), "nothing left after an abort");
    CHECK(w22_video_set_png(NULL, 1, 0) == W22_ERR_INVALID_ARG, "NULL writer");
}

static void test_pool_plan(void) {
    int t, s;
    const size_t hd = (size_t)704 * 1248 * 3, uhd = (size_t)2160 * 3840 * 3;
    w22_png_pool_plan(121, hd, 16, &t, &s);
    CHECK(t == 16 && s == 32, "121 frames of 704x1248 on 16 threads: %d threads, %d slots", t, s);
    w22_png_pool_plan(3, hd, 16, &t, &s);
    CHECK(t == 3 && s == 6, "3 frames: %d threads, %d slots", t, s);
    w22_png_pool_plan(121, hd, 1, &t, &s);
    CHECK(t == 1 && s == 0, "one thread encodes in the caller: %d threads, %d slots", t, s);
    w22_png_pool_plan(1, hd, 0, &t, &s);
    CHECK(t == 1 && s == 0, "one frame: %d threads, %d slots", t, s);
    w22_png_pool_plan(1000, hd, 0, &t, &s);
    int cores = w22_num_cores();
    CHECK(t == cores && s == (cores == 1 ? 0 : 2 * cores), "0 threads: every core (%d): %d threads, %d slots", cores,
          t, s);
    w22_png_pool_plan(481, uhd, 128, &t, &s);
    CHECK(t > 1 && s > t && (size_t)s * uhd <= W22_PNG_POOL_BYTES,
          "4K frames on 128 threads: %d threads, %d slots of %zu bytes within %zu", t, s, uhd, W22_PNG_POOL_BYTES);
    w22_png_pool_plan(10, W22_PNG_POOL_BYTES * 2, 8, &t, &s);
    CHECK(t == 1 && s == 0, "a frame over the budget: encoded in the caller (%d threads, %d slots)", t, s);
}

static int entries_with_prefix(const char *prefix) {
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (!strncmp(e->d_name, prefix, strlen(prefix))) n++;
    if (d) closedir(d);
    return n;
}

/* An encoder thread that cannot create its file: the failure and its message come back to the caller (from a
 * later write or from finish), and nothing is left. Then an abort with frames still queued. */
static void test_failures(void) {
    float *v = test_video();
    w22_video_writer *vw;
    CHECK_OK(w22_video_open(tpath("gone/"), W22_VIDEO_PNG_DIR, F, H, W, 24, 0, &vw));
    CHECK_OK(w22_video_set_png(vw, 1, 3));
    CHECK(rmdir(vw->out.tmp) == 0, "the temporary directory removed under the writer");
    w22_status s = W22_OK;
    for (int f = 0; f < F && s == W22_OK; f++) {
        float *ch = chunk_of(v, f, 1);
        s = w22_video_write(vw, ch, f, 1);
        free(ch);
    }
    if (s == W22_OK) s = w22_video_finish(vw);
    else w22_video_abort(vw);
    CHECK(s == W22_ERR_IO && strstr(w22_last_error(), "cannot create") && strstr(w22_last_error(), "frame_"),
          "a failed encoder: %s: %s", w22_status_string(s), w22_last_error());
    CHECK(entries_with_prefix("gone") == 0, "nothing left after the failure");

    CHECK_OK(w22_video_open(tpath("aborted/"), W22_VIDEO_PNG_DIR, F, H, W, 24, 0, &vw));
    CHECK_OK(w22_video_set_png(vw, 9, 2));
    float *ch = chunk_of(v, 0, F);
    CHECK_OK(w22_video_write(vw, ch, 0, F));
    free(ch);
    w22_video_abort(vw); /* frames still queued or encoding */
    CHECK(entries_with_prefix("aborted") == 0, "nothing left after an abort");
    free(v);
}

int main(void) {
    snprintf(dir, sizeof dir, "%s", t_tmpdir());
    test_levels_and_threads();
    test_bad_settings();
    test_pool_plan();
    test_failures();
    return t_finish("test_png");
}
