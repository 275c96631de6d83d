/* PNG encoding of one 8-bit RGB frame: libpng where the build has it (W22_HAVE_PNG), else a self-contained
 * encoder with stored (uncompressed) deflate blocks, which needs no zlib. */
#ifndef W22_IO_PNG_ENCODE_H
#define W22_IO_PNG_ENCODE_H

#include <stddef.h>
#include <stdint.h>
#include "wan22vae.h"

/* zlib's compression levels: 0 stores the rows (fastest, the raw size), 1 the fastest that compresses, 9 the
 * smallest and slowest; every level gives the same pixels. The default is 1: on a 704 x 1248 photo frame it takes
 * 0.73x the time of level 3 (the former fixed level; 51 against 69 ms on one core of the 2-core CI machine) for a
 * file 3% larger; on the synthetic weights' noise-like frames every level takes about the same time and size. */
#define W22_PNG_LEVEL_MAX 9
#define W22_PNG_LEVEL_DEFAULT 1

/* Writes rgb (height rows of width * 3 bytes) as a PNG file at path, at W22_PNG_LEVEL_DEFAULT. */
w22_status w22_png_write(const char *path, const uint8_t *rgb, int width, int height);
/* The same at zlib's level 0..W22_PNG_LEVEL_MAX (W22_ERR_INVALID_ARG outside). Without libpng the frame is stored
 * whatever the level. Safe to call from several threads at once (each call has its own libpng state). */
w22_status w22_png_write_level(const char *path, const uint8_t *rgb, int width, int height, int level);
/* The PNG folder writer's pool (video_png.c): for a video of `frames` frames of frame_bytes of RGB and `threads`
 * asked for (0: every core), how many encoder threads and how many frame slots (0 when one thread encodes in the
 * caller, as before the pool). Threads are capped by the frames and by the slots; the slots (two a thread) by
 * W22_PNG_POOL_BYTES, so that many cores and large frames (4K: 25 MB a frame) still take bounded memory. */
#define W22_PNG_POOL_BYTES ((size_t)512 << 20)
void w22_png_pool_plan(int frames, size_t frame_bytes, int threads, int *nthreads, int *nslots);
/* The stored-deflate encoder into a malloc'd buffer: the fallback of w22_png_write, always built so that the tests
 * cover it. */
w22_status w22_png_encode_stored(const uint8_t *rgb, int width, int height, uint8_t **out, size_t *len);
uint32_t w22_crc32(const uint8_t *p, size_t n, uint32_t crc); /* crc: 0 to start */

#endif
