/* The CPU backend's one matrix product. With OpenBLAS (Debian's libopenblas, loaded at run time) it is cblas_sgemm;
 * without it, or where OpenBLAS cannot have its buffers, a cache-blocked loop split over threads by rows of C, slow but exact
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
/* OpenBLAS is loaded with dlopen at the first product, not linked: its constructor starts a pool of worker threads
 * (one per core, or OPENBLAS_NUM_THREADS), and each worker at its start, like each thread of a product, takes a
 * buffer of BLAS_BUFFER bytes (Debian's 0.3.21 on x86-64: 32 << 22, malloc'd with alignment slack) which
 * blas_memory_alloc retries forever when the malloc fails. Under an address-space limit (`ulimit -v`) a linked
 * OpenBLAS therefore hung the process (issue 47: a decode under `ulimit -v 300000` hung in the product; at 100000 a
 * worker spun from the start and exit() waited for it). So the buffers of the pool are malloc'd and freed here
 * first: where they cannot be had, OpenBLAS is not loaded and the products run on the built-in loop (slower: an
 * answer rather than a hang), said once on stderr. The same check runs before a product asks for more threads than
 * are known to fit (OpenBLAS grows its pool to the count asked). */
#include <dlfcn.h>
#include <unistd.h>

typedef void (*sgemm_fn)(const enum CBLAS_ORDER, const enum CBLAS_TRANSPOSE, const enum CBLAS_TRANSPOSE,
                         const blasint, const blasint, const blasint, const float, const float *, const blasint,
                         const float *, const blasint, const float, float *, const blasint);
typedef void (*set_threads_fn)(int);

/* OpenBLAS's pool is one per process, and its size can change the product's bits (a 300 x 300 x 3000 product
 * differs between 1 and 2 threads with Debian's 0.3.21). So each GEMM runs under this lock with the pool at its
 * caller's count: a decoder's bits never depend on what another decoder set, and concurrent CPU decoders take turns
 * per GEMM (each of which uses the whole pool anyway). Everything below is read and written under blas_lock. */
static pthread_mutex_t blas_lock = PTHREAD_MUTEX_INITIALIZER;
static int blas_threads; /* the size last given to the pool (0: none yet) */
#define BLAS_BUFFER ((size_t)(32 << 22) + ((size_t)1 << 20))
#define BLAS_STACK ((size_t)8 << 20) /* a worker's stack (the default RLIMIT_STACK) */
static int blas_state;   /* 0: not tried; 1: loaded; -1: not to be used (absent, or no room) */
static int blas_room;    /* the most threads known to have their buffers */
static int blas_said;
static sgemm_fn blas_sgemm;
static set_threads_fn blas_set_threads;

/* Whether n buffers (and n worker stacks), and BLAS_SLACK more for what else the pool and the decode take (the
 * library's own mappings, malloc's arenas), can be had now: malloc'd and freed. */
#define BLAS_SLACK ((size_t)96 << 20)
static int blas_buffers_fit(int n) {
    void *p[130];
    int k = 0, ok = 1;
    if (!(p[k] = malloc(BLAS_SLACK))) return 0;
    k++;
    for (int i = 0; i < n && i < 64; i++) {
        if (!(p[k] = malloc(BLAS_BUFFER))) { ok = 0; break; }
        k++;
        if (!(p[k] = malloc(BLAS_STACK))) { ok = 0; break; }
        k++;
    }
    for (int i = 0; i < k; i++) free(p[i]);
    return ok;
}

static void blas_note(int n) {
    if (blas_said++) return;
    fprintf(stderr, "wan22vae: OpenBLAS's buffers (%d x %zu MB) cannot be had under this memory limit; the CPU "
            "products run on the built-in loop (slower)\n", n, BLAS_BUFFER >> 20);
}

/* The pool OpenBLAS's constructor will start: OPENBLAS_NUM_THREADS (or GOTO_, OMP_), else the cores. */
static int blas_pool(void) {
    static const char *const vars[] = {"OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS"};
    for (int i = 0; i < 3; i++) {
        const char *v = getenv(vars[i]);
        if (v && atoi(v) > 0) return atoi(v) < 64 ? atoi(v) : 64;
    }
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > 64 ? 64 : (int)n;
}

static void blas_load(void) {
    const int pool = blas_pool();
    blas_state = -1;
    if (!blas_buffers_fit(pool)) {
        blas_note(pool);
        return;
    }
    void *h = dlopen("libopenblas.so.0", RTLD_NOW | RTLD_LOCAL);
    if (!h) h = dlopen("libopenblas.so", RTLD_NOW | RTLD_LOCAL);
    if (!h) return; /* absent at run time: the built-in loop, as a build without it */
    blas_sgemm = (sgemm_fn)dlsym(h, "cblas_sgemm");
    blas_set_threads = (set_threads_fn)dlsym(h, "openblas_set_num_threads");
    if (!blas_sgemm || !blas_set_threads) return; /* not OpenBLAS: kept loaded, unused */
    /* the pool's workers have taken their buffers by now, or are taking them: the caller's own must still fit */
    if (!blas_buffers_fit(1)) {
        blas_note(pool);
        return;
    }
    blas_state = 1;
    blas_room = pool;
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
    if (!blas_state) blas_load();
    int use_blas = blas_state == 1 && threads <= blas_room;
    if (blas_state == 1 && !use_blas) {
        if (blas_buffers_fit(threads)) blas_room = threads, use_blas = 1;
        else blas_note(threads);
    }
    if (use_blas && blas_threads != threads) blas_set_threads(blas_threads = threads);
    int m0 = 0;
    for (; m0 < M && !stopped(stop); m0 += block) {
        const int m = M - m0 < block ? M - m0 : block;
        if (use_blas)
            blas_sgemm(CblasRowMajor, CblasNoTrans, bt ? CblasTrans : CblasNoTrans, m, N, K, alpha,
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
