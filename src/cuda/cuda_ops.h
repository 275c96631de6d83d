/* The ops of the CUDA backend's table (backend.h), one declaration per op, implemented in the file named. */
#ifndef W22_CUDA_OPS_H
#define W22_CUDA_OPS_H

#include "cuda_internal.h"

/* conv.cu */
w22_status w22_cuda_conv(w22_backend *b, const w22_conv_args *a);
/* attention.cu */
w22_status w22_cuda_attention(w22_backend *b, w22_view q, w22_view k, w22_view v, w22_view out, void *work,
                              size_t work_bytes);
/* norm.cu */
w22_status w22_cuda_rmsnorm(w22_backend *b, w22_view in, w22_view out, const w22_bweight *gamma, int silu);
/* move.cu: zero, copy, latents in, video out */
w22_status w22_cuda_zero(w22_backend *b, w22_view v);
w22_status w22_cuda_zero_border(w22_backend *b, w22_view v);
w22_status w22_cuda_copy(w22_backend *b, w22_view dst, w22_view src);
w22_status w22_cuda_fill(w22_backend *b, void *ptr, size_t bytes, int byte);
w22_status w22_cuda_inspect(w22_backend *b, w22_view v, int border, size_t counts[2]);
w22_status w22_cuda_audit(w22_backend *b);
w22_status w22_cuda_latents_in(w22_backend *b, const void *z, w22_dtype zt, int C, int T, int H, int W, int t0,
                               int y0, w22_view out);
w22_status w22_cuda_unpatchify(w22_backend *b, w22_view in, int p, w22_video_dst dst);
/* conv.cu: refuses (the DupUp is added only in the upsample conv's phases) */
w22_status w22_cuda_dupup_add(w22_backend *b, w22_view out, w22_view in, int ft, int first_single);

#endif
