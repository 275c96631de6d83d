/* The decoder's video values ([-1, 1] float) as 8-bit pixels, exactly as diffusers turns them into images:
 * VaeImageProcessor.denormalize does (x * 0.5 + 0.5).clamp(0, 1) in float32 (torch), then numpy_to_pil does
 * (images * 255).round().astype("uint8") in float32 (numpy; round is half to even). (diffusers' export_to_video
 * truncates instead of rounding for numpy frames; we follow postprocess_video, the documented path.) */
#include <math.h>
#include "io/io.h"

uint8_t w22_pixel_u8(float x) {
    /* Each float32 step is done exactly in double and rounded to float once, which is what the float32 operation
     * gives, so no compiler contraction (fma) or excess precision can move a value across a rounding edge. */
    float a = (float)((double)x * 0.5 + 0.5); /* x * 0.5 is exact in float; the add rounds once */
    if (!(a > 0.0f)) a = 0.0f; /* NaN -> 0, as torch's clamp gives NaN and uint8 of NaN is 0 in practice */
    if (a > 1.0f) a = 1.0f;
    float b = (float)((double)a * 255.0); /* a product of 24-bit and 8-bit mantissas: exact in double */
    return (uint8_t)rintf(b);             /* round half to even, the default rounding mode */
}

/* w22_pixel_u8 in float steps that a compiler can vectorize, equal to it for every float. x * 0.5f is exact (for |x|
 * below 2^-125 it is not, but then the sum rounds to 0.5 either way), so the float add and the float multiply each
 * round once, as the double forms do; then rint by adding and taking away 2^23 (round half to even, for
 * 0 <= b <= 255). What must hold: no contraction, which would fuse a * 255 + 2^23 into one rounding where the
 * reference has two: this file is compiled with -ffp-contract=off (Makefile). test_io compares the two on every
 * float from 2^-30 to 4 in magnitude, and the specials. */
static inline uint8_t pixel_u8(float x) {
    float a = x * 0.5f + 0.5f;
    a = a > 0.0f ? a : 0.0f; /* NaN -> 0 */
    a = a < 1.0f ? a : 1.0f;
    const float b = a * 255.0f;
    return (uint8_t)(int)((b + 8388608.0f) - 8388608.0f);
}

void w22_plane_u8(const float *src, size_t n, uint8_t *dst) {
    for (size_t i = 0; i < n; i++) dst[i] = pixel_u8(src[i]);
}

/* By blocks of pixels: each plane's block converted (vectorized), then the three interleaved. */
void w22_frame_rgb24(const float *chunk, int n, int f, int height, int width, uint8_t *rgb) {
    enum { BLOCK = 2048 };
    const size_t plane = (size_t)height * width;
    const float *r = chunk + (size_t)f * plane, *g = r + (size_t)n * plane, *b = g + (size_t)n * plane; /* [3][n][H][W] */
    uint8_t u[3][BLOCK];
    for (size_t i0 = 0; i0 < plane; i0 += BLOCK) {
        const size_t m = plane - i0 < BLOCK ? plane - i0 : BLOCK;
        w22_plane_u8(r + i0, m, u[0]);
        w22_plane_u8(g + i0, m, u[1]);
        w22_plane_u8(b + i0, m, u[2]);
        uint8_t *o = rgb + 3 * i0;
        for (size_t i = 0; i < m; i++) o[3 * i] = u[0][i], o[3 * i + 1] = u[1][i], o[3 * i + 2] = u[2][i];
    }
}
