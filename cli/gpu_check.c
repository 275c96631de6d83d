/* `wan22vae gpu-check`: exit 0 iff this build has the CUDA backend and a usable GPU (sm_90) answers; `make test`
 * runs the GPU suite on that answer. */
#include <stdio.h>
#include <string.h>
#include "wan22vae.h"
#include "cli.h"

int cli_gpu_check(int argc, char **argv) {
    if (argc > 1 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        puts("usage: wan22vae gpu-check\n\nExit 0 if this build has the CUDA backend and a usable GPU (sm_90) is "
             "present, 1 if not; says which.");
        return 0;
    }
    if (argc > 1) return cli_usage_error("gpu-check", "expected no arguments, found '%s'", argv[1]);
#ifdef W22_HAVE_CUDA
    const int built = 1;
#else
    const int built = 0;
#endif
    int ok = w22_cuda_available();
    printf("CUDA backend in this build: %s\n", built ? "yes" : "no");
    printf("usable GPU (sm_90): %s\n", ok ? "yes" : built ? "no (none found, or not sm_90)" : "no (not built in)");
    return ok ? 0 : 1;
}
