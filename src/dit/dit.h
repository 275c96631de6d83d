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

/* The elements each thread of the CUDA kernels loads and stores at once, the widest every operand allows: 8 (16-byte
 * accesses: dim, strides and head_dim (with RoPE) multiples of 8, bf16 pointers 16-byte and float32 ones 16-byte
 * aligned), 2 (pairs: multiples of 2, 4- and 8-byte alignment), else 1; qknorm with RoPE needs pairs (0: none
 * fits). Pure functions of the arguments: the launchers take them, tests ask them which path a case covers. */
int w22_dit_resnorm_vector(const w22_dit_resnorm *a);
int w22_dit_qknorm_vector(const w22_dit_qknorm *a);

/* How the CUDA kernels lay a row (dim elements, vec of them a chunk: w22_dit_*_vector) over threads. The fast path
 * keeps the row in registers: each thread holds per_thread chunks (1 of 8 elements; 4 pairs; 4 single elements),
 * chunk c of a row at thread c % row_threads (coalesced), row_threads a multiple of 32 (<= 1024), rows_per_block rows
 * a block (small dims: ~256 threads a block). It covers every row that 1024 threads hold so (dim <= 8192 at vec 8 or
 * 2: every Wan DiT; <= 4096 at vec 1); beyond, per_thread is 0: the shared-memory kernel, one row a block
 * (row_threads = its threads). A pure function: the launchers take it, tests ask it which path a case covers. */
typedef struct {
    int per_thread, row_threads, rows_per_block;
} w22_dit_rows;
w22_dit_rows w22_dit_rows_plan(int dim, int vec);

/* Queue the kernels on stream (checked arguments); W22_ERR_CUDA names a failed launch. */
w22_status w22_dit_resnorm_launch(const w22_dit_resnorm *a, void *stream);
w22_status w22_dit_qknorm_launch(const w22_dit_qknorm *a, void *stream);

#ifdef __cplusplus
}
#endif
#endif
