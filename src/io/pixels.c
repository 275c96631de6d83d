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

void w22_frame_rgb24(const float *chunk, int n, int f, int height, int width, uint8_t *rgb) {
    size_t plane = (size_t)height * width;
    for (int c = 0; c < 3; c++) {
        const float *src = chunk + ((size_t)c * n + f) * plane; /* [3][n][H][W] */
        for (size_t i = 0; i < plane; i++) rgb[i * 3 + c] = w22_pixel_u8(src[i]);
    }
}
