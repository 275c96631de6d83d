/* The CPU backend's one matrix product. With OpenBLAS (Debian's libopenblas) it is cblas_sgemm; without it, a
 * cache-blocked loop split over threads by rows of C, slow but exact enough to serve as the oracle. */
#include <pthread.h>
#include <stdlib.h>
#include "cpu/gemm.h"
#ifdef W22_HAVE_CBLAS
#include <cblas.h>
#endif

#ifdef W22_HAVE_CBLAS
void openblas_set_num_threads(int);

/* OpenBLAS's pool is one per process, and its size can change the product's bits (a 300 x 300 x 3000 product
 * differs between 1 and 2 threads with Debian's 0.3.21). So each GEMM runs under this lock with the pool at its
 * caller's count: a decoder's bits never depend on what another decoder set, and concurrent CPU decoders take turns
 * per GEMM (each of which uses the whole pool anyway). */
static pthread_mutex_t blas_lock = PTHREAD_MUTEX_INITIALIZER;
static int blas_threads; /* the size last given to the pool (0: none yet); read and written under blas_lock */

void w22_sgemm(int threads, int M, int N, int K, float alpha, const float *A, long lda, const float *B, long ldb,
               int bt, float beta, float *C, long ldc) {
    if (M <= 0 || N <= 0) return;
    if (threads < 1) threads = 1;
    pthread_mutex_lock(&blas_lock);
    if (blas_threads != threads) openblas_set_num_threads(blas_threads = threads);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, bt ? CblasTrans : CblasNoTrans, M, N, K, alpha, A, (int)lda, B,
                (int)ldb, beta, C, (int)ldc);
    pthread_mutex_unlock(&blas_lock);
}
#else

typedef struct {
    int m0, m1, N, K;
    float alpha, beta;
    const float *A, *B;
    long lda, ldb, ldc;
    int bt;
    float *C;
} gemm_job;

static void gemm_rows(const gemm_job *j) {
    enum { KB = 256 };
    for (int m = j->m0; m < j->m1; m++) {
        float *c = j->C + m * j->ldc;
        for (int n = 0; n < j->N; n++) c[n] = j->beta == 0 ? 0 : c[n] * j->beta;
    }
    for (int k0 = 0; k0 < j->K; k0 += KB) {
        int k1 = k0 + KB < j->K ? k0 + KB : j->K;
        for (int m = j->m0; m < j->m1; m++) {
            const float *a = j->A + m * j->lda;
            float *c = j->C + m * j->ldc;
            if (!j->bt) {
                for (int k = k0; k < k1; k++) {
                    float av = j->alpha * a[k];
                    const float *b = j->B + k * j->ldb;
                    for (int n = 0; n < j->N; n++) c[n] += av * b[n];
                }
            } else {
                for (int n = 0; n < j->N; n++) {
                    const float *b = j->B + n * j->ldb;
                    float s = 0;
                    for (int k = k0; k < k1; k++) s += a[k] * b[k];
                    c[n] += j->alpha * s;
                }
            }
        }
    }
}

static void *gemm_thread(void *p) {
    gemm_rows(p);
    return NULL;
}

void w22_sgemm(int threads, int M, int N, int K, float alpha, const float *A, long lda, const float *B, long ldb,
               int bt, float beta, float *C, long ldc) {
    if (M <= 0 || N <= 0) return;
    int nt = threads > 0 ? threads : 1;
    if ((double)M * N * K < 1e6 || nt > M) nt = 1;
    if (nt > 64) nt = 64;
    pthread_t th[64];
    int created[64] = {0};
    gemm_job jobs[64];
    for (int t = 0; t < nt; t++) {
        gemm_job j = {M * t / nt, M * (t + 1) / nt, N, K, alpha, beta, A, B, lda, ldb, ldc, bt, C};
        jobs[t] = j;
    }
    for (int t = 1; t < nt; t++) created[t] = pthread_create(&th[t], NULL, gemm_thread, &jobs[t]) == 0;
    gemm_rows(&jobs[0]);
    for (int t = 1; t < nt; t++) {
        if (created[t]) pthread_join(th[t], NULL);
        else gemm_rows(&jobs[t]); /* no thread to be had: do its rows here */
    }
}
#endif
