/* Shared test helpers: checks that count failures, random data from a seed, NaN poisoning, comparisons. */
#ifndef W22_TESTUTIL_H
#define W22_TESTUTIL_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stddef.h>

/* Counted atomically: tests check from several threads (test_sequence, test_plan), and a lost count could hide a
 * failure. */
extern int t_failures, t_checks;

#define CHECK(cond, ...)                                                              \
    do {                                                                              \
        __atomic_add_fetch(&t_checks, 1, __ATOMIC_RELAXED);                           \
        if (!(cond)) {                                                                \
            __atomic_add_fetch(&t_failures, 1, __ATOMIC_RELAXED);                     \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);          \
            fprintf(stderr, __VA_ARGS__);                                             \
            fprintf(stderr, "\n");                                                    \
        }                                                                             \
    } while (0)

/* A w22 call that must succeed; on failure prints the library's message. */
#define CHECK_OK(call)                                                                \
    do {                                                                              \
        w22_status s_ = (call);                                                       \
        CHECK(s_ == W22_OK, "%s -> %s: %s", #call, w22_status_string(s_), w22_last_error()); \
    } while (0)

/* Ends a test program: prints "N passed, N failed" for its checks and returns the exit code. */
int t_finish(const char *name);

/* Deterministic uniform floats in [lo, hi) from a seed (a test's own generator, not the synthetic spec). */
void t_fill_uniform(float *x, size_t n, uint64_t seed, float lo, float hi);
void t_fill_nan(float *x, size_t n);

typedef struct {
    double max_abs, rms, ref_rms;
    size_t nonfinite; /* elements of a that are NaN or Inf */
    size_t worst;     /* index of max_abs */
} t_diff;
t_diff t_compare(const float *a, const float *ref, size_t n);

/* A fresh temporary directory for the test's files (removed by t_finish's caller at exit). */
const char *t_tmpdir(void);
/* name inside t_tmpdir() (one of 4 rotating buffers: up to 4 paths alive at once) */
const char *t_path(const char *name);
/* The repository's root (where tests/ is), from the environment or the working directory. */
const char *t_root(void);
int t_file_exists(const char *path);

#endif
