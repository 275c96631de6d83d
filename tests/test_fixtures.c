/* The CPU decode against diffusers: for every .safetensors file in tests/fixtures (tools/make_fixtures.py,
 * docs/fixtures.md) makes the fixture's synthetic weights, decodes its latents with the public API on the CPU and
 * compares with diffusers' float32 video. Also decodes at several frames_per_pass, which must not change the
 * output, and checks that the fixture's latents are this library's synthetic latents bit for bit.
 * W22_FIXTURES=name,name limits the run to those fixtures (names without .safetensors). */
#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include "testutil.h"
#include "common.h"
#include "weights/safetensors.h"

/* Against diffusers: both sides are float32 through about 40 layers (convolutions of up to 27648 terms, norms, a
 * softmax), summing in different orders (OpenBLAS vs ATen/oneDNN). Measured (make_fixtures.py --f64-check):
 * diffusers' own float32 decode differs from its float64 decode by at most 1.7e-6 and 1e-7..3.2e-7 rms on
 * videos of rms 0.17..0.32, so two correct float32 implementations should differ by about twice that; this
 * library's CPU decode measured 2.1e-6 max abs and 4.3e-7 rms at worst over the fixtures (2026-12-02). The bounds
 * leave some 25x room above it and are still far below any real error (a wrong tap, channel, frame, or a bias
 * dropped moves the output by 1e-3 or more). */
#define MAX_ABS_TOL 1e-4
#define RMS_TOL 1e-5
/* Between chunkings of our own decode: the same ops on the same data; only a GEMM's blocking may change with the
 * number of frames in a pass, so allow float32 rounding noise, no more. */
#define CHUNK_TOL 1e-6

static int meta_int(const w22_st_file *f, const char *key, long long *v) {
    const char *s = w22_st_meta(f, key);
    char *end;
    if (!s) return 0;
    *v = strtoll(s, &end, 10);
    return end != s && *end == 0;
}

/* NaN-poisoned video, decoded at frames_per_pass fpp; NULL on failure (reported). */
static float *decode(const w22_weights *w, const float *z, int T, int h, int wd, int fpp, size_t nvideo,
                     double *seconds) {
    w22_decoder_params p;
    w22_decoder_params_init(&p);
    p.device = W22_DEVICE_CPU;
    p.frames_per_pass = fpp;
    w22_decoder *d = NULL;
    float *video = malloc(nvideo * sizeof *video);
    if (!video) return NULL;
    t_fill_nan(video, nvideo);
    double t0 = w22_now();
    w22_status s = w22_decoder_open(w, &p, &d);
    CHECK(s == W22_OK, "w22_decoder_open: %s: %s", w22_status_string(s), w22_last_error());
    if (s == W22_OK) {
        s = w22_decode(d, z, W22_DTYPE_F32, T, h, wd, video, W22_DTYPE_F32);
        CHECK(s == W22_OK, "w22_decode (frames_per_pass %d): %s: %s", fpp, w22_status_string(s), w22_last_error());
    }
    *seconds = w22_now() - t0;
    w22_decoder_free(d);
    if (s != W22_OK) {
        free(video);
        return NULL;
    }
    return video;
}

static void run_fixture(const char *dir, const char *file) {
    char path[1400], name[256];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    snprintf(name, sizeof name, "%.*s", (int)(strlen(file) - strlen(".safetensors")), file);
    w22_st_file f;
    w22_status s = w22_st_open(path, &f);
    CHECK(s == W22_OK, "%s: %s: %s", path, w22_status_string(s), w22_last_error());
    if (s != W22_OK) return;

    long long zdim, base, wseed, zseed, T, h, w;
    int meta_ok = meta_int(&f, "z_dim", &zdim) && meta_int(&f, "base_dim", &base) &&
                  meta_int(&f, "weights_seed", &wseed) && meta_int(&f, "latents_seed", &zseed) &&
                  meta_int(&f, "T", &T) && meta_int(&f, "h", &h) && meta_int(&f, "w", &w);
    CHECK(meta_ok, "%s: __metadata__ needs integer z_dim, base_dim, weights_seed, latents_seed, T, h, w", name);
    if (!meta_ok) goto done;
    /* is_residual 0: the Wan2.1 VAE's structure (absent: a TI2V-5B fixture, made before the key existed) */
    long long residual = 1;
    if (w22_st_meta(&f, "is_residual")) {
        meta_ok = meta_int(&f, "is_residual", &residual) && (residual == 0 || residual == 1);
        CHECK(meta_ok, "%s: __metadata__ is_residual is '%s', expected 0 or 1", name, w22_st_meta(&f, "is_residual"));
        if (!meta_ok) goto done;
    }
    w22_config cfg;
    if (residual) w22_config_default(&cfg);
    else w22_config_wan21(&cfg);
    cfg.z_dim = (int)zdim;
    cfg.base_dim = (int)base;
    int F, H, W;
    w22_video_shape(&cfg, (int)T, (int)h, (int)w, &F, &H, &W);

    const w22_st_tensor *zt = w22_st_find(&f, "latents"), *vt = w22_st_find(&f, "video");
    const int64_t zshape[5] = {1, zdim, T, h, w}, vshape[5] = {1, 3, F, H, W};
    int shapes_ok = zt && vt && zt->dtype == W22_DTYPE_F32 && vt->dtype == W22_DTYPE_F32 && zt->ndim == 5 &&
                    vt->ndim == 5 && !memcmp(zt->shape, zshape, sizeof zshape) &&
                    !memcmp(vt->shape, vshape, sizeof vshape);
    CHECK(shapes_ok, "%s: expected F32 latents [1,%lld,%lld,%lld,%lld] and video [1,3,%d,%d,%d]", name, zdim, T,
          h, w, F, H, W);
    if (!shapes_ok) goto done;
    const size_t nz = (size_t)zt->numel, nv = (size_t)vt->numel;
    /* The tensors sit at any byte offset of the mapping: copy them out rather than cast a pointer. */
    float *z = malloc(nz * sizeof *z), *ref = malloc(nv * sizeof *ref), *mine = malloc(nz * sizeof *mine);
    memcpy(z, zt->data, nz * sizeof *z);
    memcpy(ref, vt->data, nv * sizeof *ref);

    /* The fixture's latents came from tools/synth.py: this library's generator must give the same bits. */
    CHECK_OK(w22_latents_synthetic(&cfg, (uint64_t)zseed, (int)T, (int)h, (int)w, mine));
    CHECK(memcmp(mine, z, nz * sizeof *z) == 0, "%s: w22_latents_synthetic(seed %lld) differs from the fixture's "
          "latents (docs/synthetic.md)", name, zseed);

    w22_weights *wt = NULL;
    double t0 = w22_now();
    CHECK_OK(w22_weights_synthetic(&cfg, (uint64_t)wseed, &wt));
    double t_weights = w22_now() - t0;
    if (wt) {
        /* frames_per_pass T first (the whole clip in one pass), then 1 and 2, which must agree with it. */
        int fpps[3] = {(int)T, 1, 2}, nf = T > 2 ? 3 : T == 2 ? 2 : 1;
        double secs[3] = {0};
        float *video = decode(wt, z, (int)T, (int)h, (int)w, fpps[0], nv, &secs[0]);
        if (video) {
            t_diff d = t_compare(video, ref, nv);
            CHECK(d.nonfinite == 0, "%s: %zu non-finite elements", name, d.nonfinite);
            CHECK(d.max_abs <= MAX_ABS_TOL, "%s: max abs diff %.3g at %zu (ours %.7g, diffusers %.7g), bound %.0e",
                  name, d.max_abs, d.worst, video[d.worst], ref[d.worst], MAX_ABS_TOL);
            CHECK(d.rms <= RMS_TOL, "%s: rms diff %.3g, bound %.0e", name, d.rms, RMS_TOL);
            double chunk_max = 0;
            for (int k = 1; k < nf; k++) {
                float *v2 = decode(wt, z, (int)T, (int)h, (int)w, fpps[k], nv, &secs[k]);
                if (!v2) continue;
                t_diff c = t_compare(v2, video, nv);
                CHECK(c.nonfinite == 0, "%s: frames_per_pass %d: %zu non-finite elements", name, fpps[k],
                      c.nonfinite);
                CHECK(c.max_abs <= CHUNK_TOL, "%s: frames_per_pass %d vs %d: max abs diff %.3g at %zu", name,
                      fpps[k], fpps[0], c.max_abs, c.worst);
                if (c.max_abs > chunk_max) chunk_max = c.max_abs;
                free(v2);
            }
            printf("%-16s %-6s z%-3d base%-4d T%lld %lldx%lld -> %dx%dx%d: max abs %.2e  rms %.2e  (video rms %.3f)  "
                   "chunkings max %.1e  weights %.1f s, decode %.2f s (fpp %d)", name, residual ? "ti2v" : "wan2.1", cfg.z_dim, cfg.base_dim,
                   T, h, w, F, H, W, d.max_abs, d.rms, d.ref_rms, chunk_max, t_weights, secs[0], fpps[0]);
            for (int k = 1; k < nf; k++) printf(", %.2f s (fpp %d)", secs[k], fpps[k]);
            printf("\n");
            free(video);
        }
        w22_weights_free(wt);
    }
    free(z);
    free(ref);
    free(mine);
done:
    w22_st_close(&f);
}

static int by_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Whether name (without .safetensors) is in the comma-separated list, or the list is empty. */
static int selected(const char *file, const char *list) {
    if (!list || !*list) return 1;
    size_t n = strlen(file) - strlen(".safetensors");
    for (const char *p = list; *p;) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == n && strncmp(p, file, n) == 0) return 1;
        p += len + (e != NULL);
    }
    return 0;
}

int main(void) {
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/tests/fixtures", t_root());
    DIR *dp = opendir(dir);
    CHECK(dp != NULL, "cannot open %s (run from the repository root, or set W22_ROOT)", dir);
    if (!dp) return t_finish("test_fixtures");
    char *files[256];
    int n = 0;
    const char *only = getenv("W22_FIXTURES");
    for (struct dirent *e; (e = readdir(dp)) != NULL && n < 256;) {
        size_t len = strlen(e->d_name), ext = strlen(".safetensors");
        if (len > ext && strcmp(e->d_name + len - ext, ".safetensors") == 0 && selected(e->d_name, only))
            files[n++] = strdup(e->d_name);
    }
    closedir(dp);
    qsort(files, (size_t)n, sizeof files[0], by_name);
    CHECK(n > 0, "no fixtures in %s%s", dir, only ? " match W22_FIXTURES" : "");
    for (int i = 0; i < n; i++) {
        run_fixture(dir, files[i]);
        fflush(stdout);
        free(files[i]);
    }
    return t_finish("test_fixtures");
}
