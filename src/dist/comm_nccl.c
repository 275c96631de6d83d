/* NCCL across processes, one GPU each. libnccl is opened at run time (dlopen: the one torch already loaded, or
 * W22_NCCL_LIB, or libnccl.so.2 on the library path), so the library neither links nor pins an NCCL version.
 * Transfers are queued on the backend's stream as one NCCL group; agree() is a MIN all-reduce that polls with a
 * deadline, so a rank that died or failed turns into W22_ERR_COMM on the others instead of a hang. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "common.h"
#include "dist/comm.h"

#ifdef W22_HAVE_CUDA
#include <cuda_runtime.h>

typedef struct { char internal[128]; } nccl_id;
typedef void *nccl_comm;
enum { NCCL_OK = 0, NCCL_IN_PROGRESS = 7, NCCL_UINT8 = 1, NCCL_INT32 = 2, NCCL_MIN = 3 };

static struct {
    int loaded;
    int (*get_unique_id)(nccl_id *);
    int (*comm_init_rank)(nccl_comm *, int, nccl_id, int);
    int (*send)(const void *, size_t, int, int, nccl_comm, cudaStream_t);
    int (*recv)(void *, size_t, int, int, nccl_comm, cudaStream_t);
    int (*group_start)(void);
    int (*group_end)(void);
    int (*all_reduce)(const void *, void *, size_t, int, int, nccl_comm, cudaStream_t);
    int (*async_error)(nccl_comm, int *);
    int (*abort)(nccl_comm);
    int (*destroy)(nccl_comm);
    const char *(*error_string)(int);
} nccl;

/* Fills nccl once per process; under nccl_lock, since each rank's thread may open its comm at once (a process that
 * drives several GPUs). */
static pthread_mutex_t nccl_lock = PTHREAD_MUTEX_INITIALIZER;

static w22_status load_nccl_locked(void) {
    if (nccl.loaded == 1) return W22_OK;
    const char *names[] = {getenv("W22_NCCL_LIB"), "libnccl.so.2", "libnccl.so"};
    void *h = NULL;
    for (int i = 0; i < 3 && !h; i++)
        if (names[i]) h = dlopen(names[i], RTLD_NOW | RTLD_GLOBAL);
    if (!h)
        return w22_fail(W22_ERR_UNSUPPORTED, "NCCL could not be loaded (libnccl.so.2 not found; set W22_NCCL_LIB "
                        "to its path, or import torch first): %s", dlerror());
#define SYM(field, name)                                                                         \
    if (!(*(void **)&nccl.field = dlsym(h, name)))                                              \
        return w22_fail(W22_ERR_UNSUPPORTED, "NCCL has no %s (a version older than 2.7?)", name);
    SYM(get_unique_id, "ncclGetUniqueId");
    SYM(comm_init_rank, "ncclCommInitRank");
    SYM(send, "ncclSend");
    SYM(recv, "ncclRecv");
    SYM(group_start, "ncclGroupStart");
    SYM(group_end, "ncclGroupEnd");
    SYM(all_reduce, "ncclAllReduce");
    SYM(async_error, "ncclCommGetAsyncError");
    SYM(abort, "ncclCommAbort");
    SYM(destroy, "ncclCommDestroy");
    SYM(error_string, "ncclGetErrorString");
#undef SYM
    nccl.loaded = 1;
    return W22_OK;
}

static w22_status load_nccl(void) {
    pthread_mutex_lock(&nccl_lock);
    const w22_status s = load_nccl_locked();
    pthread_mutex_unlock(&nccl_lock);
    return s;
}

typedef struct {
    nccl_comm comm;
    int device;
    int failed;
    cudaStream_t stream; /* for agree() */
    int *flag;           /* device int for agree() */
} nccl_impl;

#define WAIT_SECONDS 600

static w22_status nccl_check(int r, const char *what) {
    if (r == NCCL_OK || r == NCCL_IN_PROGRESS) return W22_OK;
    return w22_fail(W22_ERR_COMM, "%s failed: %s", what, nccl.error_string(r));
}

/* Waits for the stream with a deadline, watching NCCL's asynchronous errors. */
static w22_status wait_stream(w22_comm *c, cudaStream_t s, const char *what) {
    nccl_impl *n = c->impl;
    double end = w22_now() + WAIT_SECONDS;
    for (;;) {
        cudaError_t e = cudaStreamQuery(s);
        if (e == cudaSuccess) return W22_OK;
        if (e != cudaErrorNotReady) return w22_fail(W22_ERR_CUDA, "%s: cudaStreamQuery: %s", what, cudaGetErrorString(e));
        int ae = NCCL_OK;
        nccl.async_error(n->comm, &ae);
        if (ae != NCCL_OK && ae != NCCL_IN_PROGRESS) {
            nccl.abort(n->comm);
            n->failed = 1;
            return w22_fail(W22_ERR_COMM, "%s: NCCL failed: %s (another rank may have died)", what,
                            nccl.error_string(ae));
        }
        if (w22_now() > end) {
            nccl.abort(n->comm);
            n->failed = 1;
            return w22_fail(W22_ERR_COMM, "%s: no answer from the other ranks in %d s (one failed or died)", what,
                            WAIT_SECONDS);
        }
        struct timespec ts = {0, 200000};
        nanosleep(&ts, NULL);
    }
}

static w22_status nccl_exchange(w22_comm *c, w22_backend *b, const w22_xfer *x, int n) {
    nccl_impl *im = c->impl;
    if (im->failed) return w22_fail(W22_ERR_COMM, "the NCCL group failed earlier");
    cudaStream_t s = (cudaStream_t)w22_backend_cuda_stream(b);
    W22_TRY(nccl_check(nccl.group_start(), "ncclGroupStart"));
    for (int i = 0; i < n; i++) {
        int r = x[i].is_send ? nccl.send(x[i].buf, x[i].bytes, NCCL_UINT8, x[i].peer, im->comm, s)
                             : nccl.recv(x[i].buf, x[i].bytes, NCCL_UINT8, x[i].peer, im->comm, s);
        if (r != NCCL_OK) {
            nccl.group_end();
            return nccl_check(r, x[i].is_send ? "ncclSend" : "ncclRecv");
        }
    }
    return nccl_check(nccl.group_end(), "ncclGroupEnd");
}

static w22_status nccl_agree(w22_comm *c, int *ok) {
    nccl_impl *im = c->impl;
    if (im->failed) return w22_fail(W22_ERR_COMM, "the NCCL group failed earlier");
    int v = *ok ? 1 : 0;
    cudaError_t e = cudaMemcpyAsync(im->flag, &v, sizeof v, cudaMemcpyHostToDevice, im->stream);
    if (e != cudaSuccess) return w22_fail(W22_ERR_CUDA, "agree: cudaMemcpyAsync: %s", cudaGetErrorString(e));
    W22_TRY(nccl_check(nccl.all_reduce(im->flag, im->flag, 1, NCCL_INT32, NCCL_MIN, im->comm, im->stream),
                       "ncclAllReduce"));
    e = cudaMemcpyAsync(&v, im->flag, sizeof v, cudaMemcpyDeviceToHost, im->stream);
    if (e != cudaSuccess) return w22_fail(W22_ERR_CUDA, "agree: cudaMemcpyAsync: %s", cudaGetErrorString(e));
    W22_TRY(wait_stream(c, im->stream, "agree"));
    *ok = v;
    return W22_OK;
}

static void nccl_abort_group(w22_comm *c, const char *why) {
    nccl_impl *im = c->impl;
    (void)why;
    if (!im->failed) nccl.abort(im->comm);
    im->failed = 1;
}

static void nccl_destroy(w22_comm *c) {
    nccl_impl *im = c->impl;
    if (!im->failed) nccl.destroy(im->comm);
    if (im->flag) cudaFree(im->flag);
    if (im->stream) cudaStreamDestroy(im->stream);
    free(im);
    free(c);
}

static const w22_comm_ops nccl_ops = {nccl_exchange, nccl_agree, nccl_abort_group, nccl_destroy};

w22_status w22_nccl_unique_id(unsigned char id[128]) {
    if (!id) return w22_fail(W22_ERR_INVALID_ARG, "w22_nccl_unique_id: id must not be NULL");
    W22_TRY(load_nccl());
    nccl_id u;
    W22_TRY(nccl_check(nccl.get_unique_id(&u), "ncclGetUniqueId"));
    memcpy(id, u.internal, 128);
    return W22_OK;
}

w22_status w22_comm_nccl(const unsigned char id[128], int rank, int world, int cuda_device, w22_comm **out) {
    if (!id || !out)
        return w22_fail(W22_ERR_INVALID_ARG, "w22_comm_nccl: %s is NULL", !id ? "id" : "out");
    if (world < 1 || rank < 0 || rank >= world)
        return w22_fail(W22_ERR_INVALID_ARG, "w22_comm_nccl: rank %d of world %d, expected 0 <= rank < world", rank,
                        world);
    *out = NULL;
    W22_TRY(load_nccl());
    cudaError_t e = cudaSetDevice(cuda_device);
    if (e != cudaSuccess) return w22_fail(W22_ERR_CUDA, "cudaSetDevice(%d): %s", cuda_device, cudaGetErrorString(e));
    nccl_impl *im = calloc(1, sizeof *im);
    w22_comm *c = calloc(1, sizeof *c);
    if (!im || !c) {
        free(im);
        free(c);
        return w22_fail(W22_ERR_OUT_OF_MEMORY, "out of host memory for an NCCL group");
    }
    im->device = cuda_device;
    nccl_id u;
    memcpy(u.internal, id, 128);
    w22_status s = nccl_check(nccl.comm_init_rank(&im->comm, world, u, rank), "ncclCommInitRank");
    if (s == W22_OK && (e = cudaStreamCreateWithFlags(&im->stream, cudaStreamNonBlocking)) != cudaSuccess)
        s = w22_fail(W22_ERR_CUDA, "cudaStreamCreate: %s", cudaGetErrorString(e));
    if (s == W22_OK && (e = cudaMalloc((void **)&im->flag, sizeof(int))) != cudaSuccess)
        s = w22_fail(W22_ERR_OUT_OF_MEMORY, "cudaMalloc(4 bytes) for the NCCL group: %s", cudaGetErrorString(e));
    if (s != W22_OK) {
        if (im->comm) nccl.destroy(im->comm);
        if (im->stream) cudaStreamDestroy(im->stream);
        free(im);
        free(c);
        return s;
    }
    c->ops = &nccl_ops;
    c->rank = rank;
    c->world = world;
    c->impl = im;
    *out = c;
    return W22_OK;
}

#else /* no CUDA in this build */

w22_status w22_nccl_unique_id(unsigned char id[128]) {
    (void)id;
    return w22_fail(W22_ERR_UNSUPPORTED, "NCCL groups need the CUDA backend, and this build has none");
}

w22_status w22_comm_nccl(const unsigned char id[128], int rank, int world, int cuda_device, w22_comm **out) {
    (void)id; (void)rank; (void)world; (void)cuda_device;
    if (out) *out = NULL;
    return w22_fail(W22_ERR_UNSUPPORTED, "NCCL groups need the CUDA backend, and this build has none");
}
#endif
