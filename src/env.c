/* The W22_* environment variables, in one table: which the library reads, which the package, the CLI's tests and the
 * bench read, and a warning for any other (a misspelt switch would otherwise be ignored in silence: a user who sets
 * W22_CHEK=1 believes the decode was checked). The table is the one place a new variable is added.
 * The library's own switches are few (README's list): the checking mode, the profile, the CUDA debug mode, exact vs
 * Winograd arithmetic, and where NCCL and ffmpeg are. Experiments take no switch here (they live in dev/): any
 * other W22_* name set is named in the warning. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
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

/* The library's switches take these values and no others (issue 47: W22_CHECK=yes was silently off, W22_WINOGRAD=abc
 * read as 0): a value that is not one of them fails the decoder's open, naming the variable and what it takes. An
 * empty value is the variable unset. */
w22_status w22_env_validate(void) {
    static const struct { const char *name, *values; } flags[] = {
        {"W22_CHECK", "0 (off) or 1 (the checking mode)"},
        {"W22_PROFILE", "0 (off), 1 (per-op GPU timing) or 2 (with the parts of ops)"},
        {"W22_CUDA_DEBUG", "0 (off) or 1 (a sync and a view check after every CUDA op)"},
    };
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++) {
        const char *v = getenv(flags[i].name);
        if (!v || !v[0]) continue;
        const int two = !strcmp(flags[i].name, "W22_PROFILE");
        if (strcmp(v, "0") && strcmp(v, "1") && !(two && !strcmp(v, "2")))
            return w22_fail(W22_ERR_INVALID_ARG, "%s='%.40s'%s: expected %s", flags[i].name, v,
                            strlen(v) > 40 ? "..." : "", flags[i].values);
    }
    const char *v = getenv("W22_WINOGRAD");
    if (v && v[0]) {
        size_t n = strspn(v, "0123456789");
        if (v[n] || n > 6)
            return w22_fail(W22_ERR_INVALID_ARG, "W22_WINOGRAD='%.40s'%s: expected a channel count 0..999999 (the "
                            "3x3x3 convs of that many channels and up in Winograd arithmetic; 0: every conv exact)",
                            v, strlen(v) > 40 ? "..." : "");
    }
    return W22_OK;
}

/* Whether a switch is on: set, not empty and not "0" (after w22_env_validate). */
int w22_env_on(const char *name) {
    const char *v = getenv(name);
    return v && v[0] && strcmp(v, "0") != 0;
}

/* Once per process, at the first decoder's open. */
void w22_env_check(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, warn_unknown);
}
