/* The W22_* environment variables, in one table: which the library reads, which the package, the CLI's tests and the
 * bench read, and a warning for any other (a misspelt switch would otherwise be ignored in silence: a user who sets
 * W22_CHEK=1 believes the decode was checked). The table is the one place a new variable is added.
 * The library's own switches are few (README's list): the checking mode, the profile, the CUDA debug mode, exact vs
 * Winograd arithmetic, and where NCCL and ffmpeg are. The measurement switches of variants that lost their A/B runs
 * went with their variants at issue 29 (git has them at 7c0ed73): set now, they are named in the warning. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include "common.h"

extern char **environ;

static const char *const known[] = {
    /* the library's switches */
    "W22_CHECK", "W22_CHECK_TRACE", "W22_PROFILE", "W22_CUDA_DEBUG", "W22_WINOGRAD", "W22_NCCL_LIB", "W22_FFMPEG",
    "W22_KERNELS", /* the CUDA kernel path: auto or portable (issue 45) */
    /* read by the Python package, its build, the tests and the bench, not by the library */
    "W22_LIB", "W22_ALLOW_FP32", "W22_BUILD", "W22_MAKE", "W22_SKIP_MAKE", "W22_BENCH_CACHE", "W22_ROOT", "W22_BIN",
    "W22_FIXTURES", "W22_KEEP_TMP", "W22_TEST_PROGRESS", "W22_TEST_TIMEOUT",
};

int w22_env_known(const char *name) {
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (!strcmp(name, known[i])) return 1;
    return 0;
}

static void warn_unknown(void) {
    for (char **e = environ; e && *e; e++) {
        if (strncmp(*e, "W22_", 4)) continue;
        const char *eq = strchr(*e, '=');
        char name[64];
        const size_t n = eq ? (size_t)(eq - *e) : strlen(*e);
        if (n >= sizeof name) continue;
        memcpy(name, *e, n);
        name[n] = 0;
        if (!w22_env_known(name))
            fprintf(stderr, "wan22vae: warning: %s is not a variable of this library, its package or its tools; it "
                            "is ignored (README.md, \"Environment\", lists them)\n", name);
    }
}

/* Once per process, at the first decoder's open. */
void w22_env_check(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, warn_unknown);
}
