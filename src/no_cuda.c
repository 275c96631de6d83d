/* Stand-ins for the CUDA backend in a build without CUDA (no nvcc): they say so instead of failing to link. */
#ifndef W22_HAVE_CUDA
#include "backend.h"
#include "common.h"

int w22_cuda_available(void) { return 0; }

w22_status w22_backend_cuda_create(int device, w22_backend **out) {
    (void)device;
    *out = NULL;
    return w22_fail(W22_ERR_UNSUPPORTED, "this build of wan22vae has no CUDA backend (built without nvcc)");
}

w22_status w22_backend_cuda_create_kernels(int device, int kernels, w22_backend **out) {
    (void)kernels;
    return w22_backend_cuda_create(device, out);
}
const char *w22_backend_cuda_path(const w22_backend *b) { (void)b; return "none"; }

void w22_backend_cuda_set_stream(w22_backend *b, void *stream) { (void)b; (void)stream; }
void w22_backend_cuda_use_callers_stream(w22_backend *b, void *stream) { (void)b; (void)stream; }
void w22_backend_cuda_set_exact(w22_backend *b, int exact) { (void)b; (void)exact; }
w22_status w22_backend_cuda_model_ok(const struct w22_model *m) { (void)m; return W22_OK; }
void *w22_backend_cuda_stream(w22_backend *b) { (void)b; return NULL; }
void w22_backend_cuda_weights_done(w22_backend *b) { (void)b; }
w22_status w22_cuda_device_to_host(int device, void *dst, const void *src, size_t bytes) {
    (void)device, (void)dst, (void)src, (void)bytes;
    return w22_fail(W22_ERR_UNSUPPORTED, "weights in GPU memory: this build has no CUDA");
}
w22_status w22_cuda_first_nonfinite(int device, const void *x, w22_dtype t, size_t n, size_t *first) {
    (void)device, (void)x, (void)t, (void)n, (void)first;
    return w22_fail(W22_ERR_UNSUPPORTED, "weights in GPU memory: this build has no CUDA");
}
void w22_backend_cuda_open_times(const w22_backend *b, double t[3]) {
    (void)b;
    t[0] = t[1] = t[2] = 0;
}
size_t w22_backend_cuda_bytes(const w22_backend *b, size_t *peak) {
    (void)b;
    if (peak) *peak = 0;
    return 0;
}
void w22_backend_cuda_reset_peak(w22_backend *b) { (void)b; }
#endif
