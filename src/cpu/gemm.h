/* C[M][N] (ldc) = alpha * A[M][K] (lda) * B (beta * C added): B is [K][N] (ldb) when !bt, [N][K] when bt.
 * Row-major float32. OpenBLAS's sgemm where the build has it (and its buffers can be had: gemm.c), else a blocked
 * loop. threads: the calling decoder's count (w22_decoder_params.threads), passed with each call so that no state
 * is shared between decoders: the built-in loop splits C's rows over that many threads; OpenBLAS's pool, one per
 * process, runs each GEMM at the caller's count under a lock (gemm.c says why). */
#ifndef W22_CPU_GEMM_H
#define W22_CPU_GEMM_H

void w22_sgemm(int threads, int M, int N, int K, float alpha, const float *A, long lda, const float *B, long ldb,
               int bt, float beta, float *C, long ldc);
/* The same, reading *stop (when not NULL) between row blocks of a few GFLOP: returns 1, C partly written, when it
 * was set before the product ended, else 0. */
int w22_sgemm_stop(int threads, const volatile int *stop, int M, int N, int K, float alpha, const float *A, long lda,
                   const float *B, long ldb, int bt, float beta, float *C, long ldc);

#endif
