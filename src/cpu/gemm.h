/* C[M][N] (ldc) = alpha * A[M][K] (lda) * B (beta * C added): B is [K][N] (ldb) when !bt, [N][K] when bt.
 * Row-major float32. OpenBLAS's sgemm where the build has it, else a blocked loop. */
#ifndef W22_CPU_GEMM_H
#define W22_CPU_GEMM_H

void w22_sgemm(int M, int N, int K, float alpha, const float *A, long lda, const float *B, long ldb, int bt,
               float beta, float *C, long ldc);
/* Threads the GEMM may use (OpenBLAS's pool; the fallback uses its own threads). */
void w22_sgemm_set_threads(int n);

#endif
