/* PNG encoding of one 8-bit RGB frame: libpng where the build has it (W22_HAVE_PNG), else a self-contained
 * encoder with stored (uncompressed) deflate blocks, which needs no zlib. */
#ifndef W22_IO_PNG_ENCODE_H
#define W22_IO_PNG_ENCODE_H

#include <stddef.h>
#include <stdint.h>
#include "wan22vae.h"

/* Writes rgb (height rows of width * 3 bytes) as a PNG file at path. */
w22_status w22_png_write(const char *path, const uint8_t *rgb, int width, int height);
/* The stored-deflate encoder into a malloc'd buffer: the fallback of w22_png_write, always built so that the tests
 * cover it. */
w22_status w22_png_encode_stored(const uint8_t *rgb, int width, int height, uint8_t **out, size_t *len);
uint32_t w22_crc32(const uint8_t *p, size_t n, uint32_t crc); /* crc: 0 to start */

#endif
