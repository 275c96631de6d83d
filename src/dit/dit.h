/* The DiT passes' internals: argument checks shared by the CPU and CUDA versions, and the CUDA launchers
 * (src/dit/dit_cuda.cu; stand-ins saying "no CUDA" in a build without it). */
#ifndef W22_DIT_H
#define W22_DIT_H

#include "wan22vae.h"

#ifdef __cplusplus
extern "C" {
#endif

#define W22_DIT_MAX_DIM 32768

/* Checks a's sizes, pointers, chunks and overlaps; device: temb may be bf16 (else float32 only). The message
 * names the call (fn) and the field. */
w22_status w22_dit_resnorm_check(const w22_dit_resnorm *a, int device, const char *fn);
w22_status w22_dit_qknorm_check(const w22_dit_qknorm *a, int device, const char *fn);

/* Queue the kernels on stream (checked arguments); W22_ERR_CUDA names a failed launch. */
w22_status w22_dit_resnorm_launch(const w22_dit_resnorm *a, void *stream);
w22_status w22_dit_qknorm_launch(const w22_dit_qknorm *a, void *stream);

#ifdef __cplusplus
}
#endif
#endif
