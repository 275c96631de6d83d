/* The NCCL path on one GPU: a group of world 1 made from a unique id decodes the same video, bitwise, as a decoder
 * without a group (the exchanges are empty, the agreement is a real all-reduce). Bad arguments are refused with a
 * message. Several GPUs (the real split) are the multi-GPU issue's bench runs. libnccl is found through
 * W22_NCCL_LIB, the loader path, or torch's copy; without any, the test says so and is skipped. */
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <cuda_runtime.h>
#include "common.h"
#include "testutil.h"

static const char *find_nccl(void) {
    static const char *paths[] = {"libnccl.so.2",
                                  "/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib/libnccl.so.2",
                                  "/usr/local/cuda/lib/libnccl.so.2", "/usr/local/cuda/lib64/libnccl.so.2"};
    if (getenv("W22_NCCL_LIB")) return getenv("W22_NCCL_LIB");
    for (size_t i = 0; i < sizeof paths / sizeof *paths; i++) {
        void *h = dlopen(paths[i], RTLD_NOW | RTLD_GLOBAL);
        if (h) return paths[i];
    }
    return NULL;
}

static w22_status decode(w22_weights *w, w22_comm *comm, const uint16_t *z, int T, int h, int wd, uint16_t *out,
                         size_t nv) {
    w22_decoder_params p;
    w22_decoder_params_init(&p);
    p.device = W22_DEVICE_CUDA;
    p.comm = comm;
    w22_decoder *d = NULL;
    w22_status s = w22_decoder_open(w, &p, &d);
    if (s != W22_OK) return s;
    size_t nz = (size_t)w22_weights_config(w)->z_dim * T * h * wd;
    void *zd = NULL, *vd = NULL;
    cudaMalloc(&zd, nz * 2);
    cudaMalloc(&vd, nv * 2);
    cudaMemcpy(zd, z, nz * 2, cudaMemcpyHostToDevice);
    cudaMemset(vd, 0xff, nv * 2);
    s = w22_decode_device(d, zd, T, h, wd, vd, NULL);
    cudaMemcpy(out, vd, nv * 2, cudaMemcpyDeviceToHost);
    cudaFree(zd);
    cudaFree(vd);
    w22_decoder_free(d);
    return s;
}

int main(void) {
    if (!w22_cuda_available()) {
        printf("cuda_nccl: no usable GPU\n0 passed, 1 failed\n");
        return 1;
    }
    const char *lib = find_nccl();
    if (!lib) {
        printf("cuda_nccl: skipped: no libnccl.so.2 here (set W22_NCCL_LIB)\n");
        return 0;
    }
    setenv("W22_NCCL_LIB", lib, 0);
    printf("NCCL from %s\n", lib);
    w22_comm *c = NULL;
    unsigned char id[128];
    CHECK(w22_comm_nccl(id, 1, 1, 0, &c) == W22_ERR_INVALID_ARG && strstr(w22_last_error(), "rank 1 of world 1"),
          "rank 1 of world 1 must be refused: %s", w22_last_error());
    CHECK_OK(w22_nccl_unique_id(id));
    CHECK_OK(w22_comm_nccl(id, 0, 1, 0, &c));
    w22_config cfg;
    w22_config_default(&cfg);
    cfg.z_dim = 16;
    cfg.base_dim = 32;
    w22_weights *w = NULL;
    CHECK_OK(w22_weights_synthetic(&cfg, 3, &w));
    const int T = 3, h = 4, wd = 6;
    int F, H, W;
    w22_video_shape(&cfg, T, h, wd, &F, &H, &W);
    size_t nz = (size_t)cfg.z_dim * T * h * wd, nv = (size_t)3 * F * H * W;
    float *zf = malloc(nz * 4);
    uint16_t *z = malloc(nz * 2), *a = malloc(nv * 2), *b = malloc(nv * 2);
    CHECK_OK(w22_latents_synthetic(&cfg, 4, T, h, wd, zf));
    for (size_t i = 0; i < nz; i++) z[i] = w22_f32_to_bf16(zf[i]);
    CHECK_OK(decode(w, NULL, z, T, h, wd, a, nv));
    CHECK_OK(decode(w, c, z, T, h, wd, b, nv));
    CHECK(memcmp(a, b, nv * 2) == 0, "an NCCL group of one gives another video");
    size_t nan = 0;
    for (size_t i = 0; i < nv; i++) nan += (b[i] & 0x7fff) > 0x7f80;
    CHECK(nan == 0, "%zu elements unwritten", nan);
    w22_comm_free(c);
    w22_weights_free(w);
    free(zf); free(z); free(a); free(b);
    return t_finish("cuda_nccl");
}
