/* `wan22vae gpu-check`: exit 0 iff this build has the CUDA backend and a usable GPU (sm_80+) answers; `make test`
 * runs the GPU suite on that answer. cli_cuda_usable says why not, plainly, for `decode --device cuda` too. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "wan22vae.h"
#include "cli.h"
#ifdef W22_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

int cli_cuda_usable(int device, char *why, size_t cap) {
#ifndef W22_HAVE_CUDA
    (void)device;
    snprintf(why, cap, "this build of wan22vae has no CUDA backend (it was built without nvcc)");
    return 0;
#else
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        const char *msg = cudaGetErrorString(e);
        (void)cudaGetLastError();
        if (e == cudaErrorInsufficientDriver || e == cudaErrorNoDevice)
            snprintf(why, cap, "no NVIDIA driver or GPU is usable here (CUDA says: %s)", msg);
        else
            snprintf(why, cap, "CUDA cannot list the GPUs (%s)", msg);
        return 0;
    }
    if (n == 0) {
        snprintf(why, cap, "no NVIDIA GPU found");
        return 0;
    }
    if (device < 0 || device >= n) {
        if (n == 1) snprintf(why, cap, "GPU %d does not exist (1 GPU here: cuda:0)", device);
        else snprintf(why, cap, "GPU %d does not exist (%d GPUs here: cuda:0 .. cuda:%d)", device, n, n - 1);
        return 0;
    }
    struct cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, device) != cudaSuccess) {
        (void)cudaGetLastError();
        snprintf(why, cap, "GPU %d does not answer", device);
        return 0;
    }
    if (prop.major < 8) {
        snprintf(why, cap, "GPU %d (%s) is sm_%d%d; the CUDA backend needs sm_80 or later (Ampere, Ada, Hopper, "
                 "Blackwell): the CPU backend (--device cpu) decodes on any machine", device, prop.name, prop.major,
                 prop.minor);
        return 0;
    }
    const char *kern = getenv("W22_KERNELS");
    const int portable = prop.major != 9 || (kern && !strcmp(kern, "portable"));
    snprintf(why, cap, "GPU %d (%s, sm_%d%d): %s", device, prop.name, prop.major, prop.minor,
             portable ? "the portable kernels (mma.sync)" : "the Hopper kernels (sm_90a: wgmma, TMA)");
    return 1;
#endif
}

int cli_gpu_check(int argc, char **argv) {
    if (argc > 1 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        puts("usage: wan22vae gpu-check\n\nSays whether this build has the CUDA backend and a usable GPU (sm_80 or "
             "later) is present, and why not, and which kernels it runs: a Hopper (sm_90) its sm_90a kernels, any "
             "other GPU the portable ones (W22_KERNELS=portable: those on a Hopper too).\n\nexit status: 0 a usable "
             "GPU; 1 none (or no CUDA backend); 2 a usage error.");
        return 0;
    }
    if (argc > 1) return cli_usage_error("gpu-check", "expected no arguments, found '%s'", argv[1]);
#ifdef W22_HAVE_CUDA
    const int built = 1;
#else
    const int built = 0;
#endif
    int ok = w22_cuda_available();
    char why[512];
    int usable = cli_cuda_usable(0, why, sizeof why);
    printf("CUDA backend in this build: %s\n", built ? "yes" : "no");
    if (ok && usable) printf("usable GPU (sm_80+): yes, %s\n", why);
    else if (ok) printf("usable GPU (sm_80+): yes (GPU 0: %s)\n", why);
    else printf("usable GPU (sm_80+): no (%s)\n", usable ? "none is sm_80 or later" : why);
    return ok ? 0 : 1;
}
