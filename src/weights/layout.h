/* The backends' weight layouts on the host (layout.c): the CPU backend's, and the definition of the CUDA backend's,
 * which it makes on the GPU (src/cuda/weights_gpu.cu, the same bytes). */
#ifndef W22_LAYOUT_H
#define W22_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif
/* [cout][cin][tap] float -> [cout][tap][cin] bf16 (tap over vol = kt kh kw): the GEMM's B, K-major. */
void w22_layout_conv_bf16(const float *data, int cout, int cin, int vol, uint16_t *out);
/* A 2D 3x3 conv's four upsample phases as 2x2 convs on the low-resolution grid: [phase][cout][2][2][cin]. */
void w22_layout_phases_bf16(const float *data, int cout, int cin, uint16_t *out);
/* The CPU backend's: [cout][cin][tap] float -> [tap][cin][cout] float, each tap a GEMM's B (a copy). */
void w22_layout_taps_f32(const float *data, int cout, int cin, int taps, float *out);
#ifdef __cplusplus
}
#endif

#endif
