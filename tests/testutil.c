#include "testutil.h"
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

int t_failures, t_checks;

int t_finish(const char *name) {
    printf("%s: %d passed, %d failed\n", name, t_checks - t_failures, t_failures);
    return t_failures ? 1 : 0;
}

static uint64_t splitmix(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

void t_fill_uniform(float *x, size_t n, uint64_t seed, float lo, float hi) {
    uint64_t s = seed * 0x2545F4914F6CDD1Dull + 1;
    for (size_t i = 0; i < n; i++) x[i] = lo + (hi - lo) * (float)((splitmix(&s) >> 40) * (1.0 / 16777216.0));
}

void t_fill_nan(float *x, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = NAN;
}

t_diff t_compare(const float *a, const float *ref, size_t n) {
    t_diff d = {0};
    double sq = 0, rsq = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(a[i])) {
            d.nonfinite++;
            continue;
        }
        double e = fabs((double)a[i] - ref[i]);
        if (e > d.max_abs) {
            d.max_abs = e;
            d.worst = i;
        }
        sq += e * e;
        rsq += (double)ref[i] * ref[i];
    }
    d.rms = n ? sqrt(sq / n) : 0;
    d.ref_rms = n ? sqrt(rsq / n) : 0;
    return d;
}

static char tmpdir[256];
static void rm_tmpdir(void) {
    char cmd[300];
    if (tmpdir[0] && !getenv("W22_KEEP_TMP")) {
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
        if (system(cmd)) { /* best effort */ }
    }
}

const char *t_path(const char *name) {
    static char buf[4][700];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", t_tmpdir(), name);
    return buf[k];
}

const char *t_tmpdir(void) {
    if (!tmpdir[0]) {
        const char *base = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
        snprintf(tmpdir, sizeof tmpdir, "%s/w22test-XXXXXX", base);
        if (!mkdtemp(tmpdir)) {
            perror("mkdtemp");
            exit(2);
        }
        atexit(rm_tmpdir);
    }
    return tmpdir;
}

const char *t_root(void) {
    const char *r = getenv("W22_ROOT");
    return r ? r : ".";
}

int t_file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}
