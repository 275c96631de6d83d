/* The CPU backend's one matrix product. With OpenBLAS (Debian's libopenblas) it is cblas_sgemm; without it, or
 * where OpenBLAS cannot have its buffers, a cache-blocked loop split over threads by rows of C, slow but exact
 * enough to serve as the oracle. Either way a product runs in row blocks of at most STOP_FLOPS, with the caller's
 * stop flag read between them (a Ctrl-C acts within a fraction of a second, not after a product of minutes). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include "cpu/gemm.h"
#ifdef W22_HAVE_CBLAS
#include <cblas.h>
#endif

/* The most floating-point operations between two reads of the stop flag: ~0.05-0.2 s on one core. Row blocks do not
 * change a product's values: each element of C is the same sum over K, whichever rows are computed with it. */
#define STOP_FLOPS 4e9

static int stopped(const volatile int *stop) { return stop && __atomic_load_n((const int *)stop, __ATOMIC_RELAXED); }

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

/* The built-in product of C's rows [m0, m1), split over threads by rows. */
static void loop_gemm(int threads, int m0, int m1, int N, int K, float alpha, const float *A, long lda,
                      const float *B, long ldb, int bt, float beta, float *C, long ldc) {
    const int M = m1 - m0;
    int nt = threads > 0 ? threads : 1;
    if ((double)M * N * K < 1e6 || nt > M) nt = 1;
    if (nt > 64) nt = 64;
    pthread_t th[64];
    int created[64] = {0};
    gemm_job jobs[64];
    for (int t = 0; t < nt; t++) {
        gemm_job j = {m0 + M * t / nt, m0 + M * (t + 1) / nt, N, K, alpha, beta, A, B, lda, ldb, ldc, bt, C};
        jobs[t] = j;
    }
    for (int t = 1; t < nt; t++) created[t] = pthread_create(&th[t], NULL, gemm_thread, &jobs[t]) == 0;
    gemm_rows(&jobs[0]);
    for (int t = 1; t < nt; t++) {
        if (created[t]) pthread_join(th[t], NULL);
        else gemm_rows(&jobs[t]); /* no thread to be had: do its rows here */
    }
}

#ifdef W22_HAVE_CBLAS
void openblas_set_num_threads(int);

/* OpenBLAS's pool is one per process, and its size can change the product's bits (a 300 x 300 x 3000 product
 * differs between 1 and 2 threads with Debian's 0.3.21). So each GEMM runs under this lock with the pool at its
 * caller's count: a decoder's bits never depend on what another decoder set, and concurrent CPU decoders take turns
 * per GEMM (each of which uses the whole pool anyway). */
static pthread_mutex_t blas_lock = PTHREAD_MUTEX_INITIALIZER;
static int blas_threads; /* the size last given to the pool (0: none yet); read and written under blas_lock */

/* OpenBLAS's buffers: each thread of a product takes one of BLAS_BUFFER bytes (Debian's 0.3.21 on x86-64: 32 << 22,
 * malloc'd with alignment slack) at its first product and keeps it; and when the malloc fails, blas_memory_alloc
 * retries forever (issue 47: a decode under `ulimit -v 300000` hung, and at 100000 hung in exit()). So before
 * OpenBLAS first runs at a count, that many buffers are malloc'd and freed here: where they cannot be had, the
 * product runs on the built-in loop instead (slower, an answer rather than a hang). blas_room: the most threads
 * known to have their buffers (under blas_lock). */
#define BLAS_BUFFER ((size_t)(32 << 22) + ((size_t)1 << 20))
static int blas_room;
static int blas_room_said;

static int blas_buffers_fit(int threads) {
    void *p[64];
    int n = 0, ok = 1;
    for (; n < threads && n < 64; n++)
        if (!(p[n] = malloc(BLAS_BUFFER))) {
            ok = 0;
            break;
        }
    for (int i = 0; i < n; i++) free(p[i]);
    return ok;
}

void w22_sgemm(int threads, int M, int N, int K, float alpha, const float *A, long lda, const float *B, long ldb,
               int bt, float beta, float *C, long ldc) {
    (void)w22_sgemm_stop(threads, NULL, M, N, K, alpha, A, lda, B, ldb, bt, beta, C, ldc);
}

int w22_sgemm_stop(int threads, const volatile int *stop, int M, int N, int K, float alpha, const float *A, long lda,
                   const float *B, long ldb, int bt, float beta, float *C, long ldc) {
    if (M <= 0 || N <= 0) return 0;
    if (threads < 1) threads = 1;
    if (threads > 64) threads = 64;
    const double row_flops = 2.0 * N * (K > 0 ? K : 1);
    const int block = row_flops * M <= STOP_FLOPS ? M : (int)(STOP_FLOPS / row_flops) + 1;
    pthread_mutex_lock(&blas_lock);
    int use_blas = threads <= blas_room;
    if (!use_blas && blas_buffers_fit(threads)) blas_room = threads, use_blas = 1;
    if (!use_blas && !blas_room_said) {
        blas_room_said = 1;
        fprintf(stderr, "wan22vae: OpenBLAS's buffers (%d x %zu MB) cannot be had under this memory limit; the CPU "
                "products run on the built-in loop (slower)\n", threads, BLAS_BUFFER >> 20);
    }
    if (use_blas && blas_threads != threads) openblas_set_num_threads(blas_threads = threads);
    int m0 = 0;
    for (; m0 < M && !stopped(stop); m0 += block) {
        const int m = M - m0 < block ? M - m0 : block;
        if (use_blas)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, bt ? CblasTrans : CblasNoTrans, m, N, K, alpha,
                        A + (size_t)m0 * lda, (int)lda, B, (int)ldb, beta, C + (size_t)m0 * ldc, (int)ldc);
        else
            loop_gemm(threads, m0, m0 + m, N, K, alpha, A, lda, B, ldb, bt, beta, C, ldc);
    }
    pthread_mutex_unlock(&blas_lock);
    return m0 < M;
}
#else

void w22_sgemm(int threads, int M, int N, int K, float alpha, const float *A, long lda, const float *B, long ldb,
               int bt, float beta, float *C, long ldc) {
    (void)w22_sgemm_stop(threads, NULL, M, N, K, alpha, A, lda, B, ldb, bt, beta, C, ldc);
}

int w22_sgemm_stop(int threads, const volatile int *stop, int M, int N, int K, float alpha, const float *A, long lda,
                   const float *B, long ldb, int bt, float beta, float *C, long ldc) {
    if (M <= 0 || N <= 0) return 0;
    const double row_flops = 2.0 * N * (K > 0 ? K : 1);
    const int block = row_flops * M <= STOP_FLOPS ? M : (int)(STOP_FLOPS / row_flops) + 1;
    int m0 = 0;
    for (; m0 < M && !stopped(stop); m0 += block)
        loop_gemm(threads, m0, M - m0 < block ? M : m0 + block, N, K, alpha, A, lda, B, ldb, bt, beta, C, ldc);
    return m0 < M;
}
#endif
