/* PNG files of 8-bit RGB frames (png_encode.h). The stored encoder follows the PNG spec (RFC 2083) and zlib's
 * format (RFC 1950/1951): every row is filter 0 and the zlib stream is a run of stored blocks of at most 65535
 * bytes, so the file is about the raw size; it is the fallback for builds without libpng. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common.h"
#include "io/png_encode.h"
#ifdef W22_HAVE_PNG
#include <png.h>
#include <setjmp.h>
#endif

static uint32_t crc_table[256];

static void crc_table_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = c & 1 ? 0xedb88320u ^ (c >> 1) : c >> 1;
        crc_table[i] = c;
    }
}

uint32_t w22_crc32(const uint8_t *p, size_t n, uint32_t crc) {
    static pthread_once_t once = PTHREAD_ONCE_INIT; /* the PNG writer's threads encode frames at once */
    pthread_once(&once, crc_table_init);
    const uint32_t *table = crc_table;
    crc = ~crc;
    for (size_t i = 0; i < n; i++) crc = table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
    return ~crc;
}

static uint8_t *put32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)(v >> 24), p[1] = (uint8_t)(v >> 16), p[2] = (uint8_t)(v >> 8), p[3] = (uint8_t)v;
    return p + 4;
}

/* A chunk whose data is already at p + 8: writes length, type and CRC around it; returns the end. */
static uint8_t *close_chunk(uint8_t *p, const char type[4], size_t len) {
    put32(p, (uint32_t)len);
    memcpy(p + 4, type, 4);
    uint32_t crc = w22_crc32(p + 4, len + 4, 0);
    return put32(p + 8 + len, crc);
}

w22_status w22_png_encode_stored(const uint8_t *rgb, int width, int height, uint8_t **out, size_t *len) {
    size_t row = (size_t)width * 3 + 1, raw = row * (size_t)height;
    size_t blocks = (raw + 65534) / 65535, zlen = 2 + blocks * 5 + raw + 4;
    if (width < 1 || height < 1 || zlen > 0x7fffffffu)
        return w22_fail(W22_ERR_INVALID_ARG, "png: expected a frame of 1x1 up to 2^31 bytes, found %dx%d", width,
                        height);
    size_t total = 8 + (12 + 13) + (12 + zlen) + 12;
    uint8_t *buf = w22_malloc(total, "a PNG frame"), *p = buf;
    if (!buf) return W22_ERR_OUT_OF_MEMORY;
    memcpy(p, "\x89PNG\r\n\x1a\n", 8);
    p += 8;
    uint8_t *d = p + 8; /* IHDR: size, bit depth 8, color type 2 (RGB), deflate, filter 0, no interlace */
    d = put32(d, (uint32_t)width);
    d = put32(d, (uint32_t)height);
    memcpy(d, "\x08\x02\x00\x00\x00", 5);
    p = close_chunk(p, "IHDR", 13);

    d = p + 8;
    *d++ = 0x78, *d++ = 0x01; /* zlib: deflate, 32K window, no dictionary, check bits for 0x7801 */
    uint32_t a = 1, b = 0;    /* adler32 of the raw (filtered) rows */
    size_t left = raw, y = 0, x = 0; /* x: position within the current row, including its filter byte */
    while (left > 0) {
        size_t n = left < 65535 ? left : 65535;
        *d++ = left == n ? 1 : 0; /* BFINAL on the last block, BTYPE 00 (stored) */
        *d++ = (uint8_t)n, *d++ = (uint8_t)(n >> 8), *d++ = (uint8_t)~n, *d++ = (uint8_t)(~n >> 8);
        for (size_t i = 0; i < n; i++) {
            uint8_t v = x == 0 ? 0 : rgb[y * (row - 1) + x - 1];
            *d++ = v;
            a = (a + v) % 65521u;
            b = (b + a) % 65521u;
            if (++x == row) x = 0, y++;
        }
        left -= n;
    }
    d = put32(d, b << 16 | a);
    p = close_chunk(p, "IDAT", zlen);
    p = close_chunk(p, "IEND", 0);
    *out = buf;
    *len = (size_t)(p - buf);
    return W22_OK;
}

#ifdef W22_HAVE_PNG
typedef struct {
    jmp_buf jmp;
    char msg[256];
} png_err;

static void on_png_error(png_structp png, png_const_charp msg) {
    png_err *e = png_get_error_ptr(png);
    snprintf(e->msg, sizeof e->msg, "%s", msg);
    longjmp(e->jmp, 1);
}
static void on_png_warning(png_structp png, png_const_charp msg) {}

static w22_status write_libpng(FILE *f, const char *path, const uint8_t *rgb, int width, int height, int level) {
    png_err err = {.msg = "unknown libpng error"};
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, &err, on_png_error, on_png_warning);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    if (!png || !info) {
        png_destroy_write_struct(&png, NULL);
        return w22_fail(W22_ERR_OUT_OF_MEMORY, "%s: libpng could not start", path);
    }
    if (setjmp(err.jmp)) {
        png_destroy_write_struct(&png, &info);
        return w22_fail(W22_ERR_IO, "%s: libpng: %s", path, err.msg);
    }
    png_init_io(png, f);
    png_set_compression_level(png, level);
    /* Stored rows gain nothing from filtering, which would be most of level 0's time; the levels that compress keep
     * libpng's adaptive row filters. */
    if (level == 0) png_set_filter(png, PNG_FILTER_TYPE_BASE, PNG_FILTER_NONE);
    png_set_IHDR(png, info, (png_uint_32)width, (png_uint_32)height, 8, PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE,
                 PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    png_write_info(png, info);
    for (int y = 0; y < height; y++) png_write_row(png, rgb + (size_t)y * width * 3);
    png_write_end(png, NULL);
    png_destroy_write_struct(&png, &info);
    return W22_OK;
}
#endif

w22_status w22_png_write(const char *path, const uint8_t *rgb, int width, int height) {
    return w22_png_write_level(path, rgb, width, height, W22_PNG_LEVEL_DEFAULT);
}

w22_status w22_png_write_level(const char *path, const uint8_t *rgb, int width, int height, int level) {
    if (level < 0 || level > W22_PNG_LEVEL_MAX)
        return w22_fail(W22_ERR_INVALID_ARG, "%s: expected a PNG compression level 0..%d, found %d", path,
                        W22_PNG_LEVEL_MAX, level);
    FILE *f = fopen(path, "wb");
    if (!f) return w22_fail(W22_ERR_IO, "%s: cannot create: %s", path, strerror(errno));
    w22_status s;
#ifdef W22_HAVE_PNG
    s = write_libpng(f, path, rgb, width, height, level);
#else
    uint8_t *buf = NULL;
    size_t len = 0;
    s = w22_png_encode_stored(rgb, width, height, &buf, &len);
    if (s == W22_OK && fwrite(buf, 1, len, f) != len)
        s = w22_fail(W22_ERR_IO, "%s: writing %zu bytes failed: %s", path, len, strerror(errno));
    free(buf);
#endif
    if (fclose(f) != 0 && s == W22_OK) s = w22_fail(W22_ERR_IO, "%s: closing failed: %s", path, strerror(errno));
    return s;
}
