/* A probe, not a product path: what the non-fused Winograd F(2x2, 3x3) would give the decoder's 3x3x3 convs on
 * our kernels (docs/PERF.md, v17). Per output frame: an input transform of the input frames into 16 components
 * V = B^T d B (bf16, 4x the bytes), 16 GEMMs on the backend's conv op as 3x1x1 convs over the components with
 * U = G g G^T per temporal tap (12 / 27 of the direct conv's MACs), and an output transform Y = A^T M A + bias (the
 * transforms are src/cuda/winograd.cu's launches; the probe's first run, 17E, had copies of the same kernels).
 * It times each part against the direct conv in the same process and measures both against a float64 reference
 * at sampled output pixels (all channels), from the same bf16 input and the float32 weights.
 *
 *   build/dev/winograd_probe [--iters N] [--frames F] [C H W ...]   (default: the three heavy shapes)
 *
 * The input transform is timed twice: over the F + 2 input frames a call reads (no cache of transformed frames),
 * and over F frames (the plan's caches holding transformed frames, 4x their memory). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include "cuda/cuda_internal.h" /* the library's transform launches (src/cuda/winograd.cu) */

#define CK(x)                                                                                   \
    do {                                                                                        \
        cudaError_t e_ = (x);                                                                   \
        if (e_ != cudaSuccess) {                                                                \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
            exit(1);                                                                            \
        }                                                                                       \
    } while (0)
#define WT(x)                                                                                   \
    do {                                                                                        \
        if ((x) != W22_OK) {                                                                    \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, w22_last_error());       \
            exit(1);                                                                            \
        }                                                                                       \
    } while (0)

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static float urand(void) { /* uniform [-1, 1) */
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return ((float)(rng >> 40) / 16777216.0f - 0.5f) * 2.0f;
}

/* A [f][h + 2][w + 2][c] buffer's view of its interior (border 1). */
static w22_view bview(void *base, int f, int h, int w, int c) {
    const long W2 = w + 2, H2 = h + 2;
    w22_view v = {(char *)base + (size_t)((W2 + 1) * c) * 2, f, h, w, c, H2 * W2 * c, W2 * c, c, 2};
    return v;
}

static void probe(w22_backend *gb, int C, int H, int W, int F, int iters) {
    const int h2 = H / 2, w2 = W / 2, FI = F + 2;
    const size_t nx = (size_t)FI * (H + 2) * (W + 2) * C, ny = (size_t)F * (H + 2) * (W + 2) * C;
    const size_t vcomp = (size_t)FI * (h2 + 2) * (w2 + 2) * C, mcomp = (size_t)F * (h2 + 2) * (w2 + 2) * C;
    printf("probe C %d, %dx%d, %d output frame(s) (%d input), %d iterations\n", C, H, W, F, FI, iters);
    /* input: bf16 random in [-1, 1), zero border (the conv's padding), two buffers (each beyond the L2 at the
     * large shapes) */
    uint16_t *xh = (uint16_t *)calloc(nx, 2);
    for (int f = 0; f < FI; f++)
        for (int y = 0; y < H; y++)
            for (int x = 0; x < W; x++)
                for (int c = 0; c < C; c++)
                    xh[(((size_t)f * (H + 2) + y + 1) * (W + 2) + x + 1) * C + c] = w22_f32_to_bf16(urand());
    void *xd[2], *yd, *yw, *vd, *md;
    WT(gb->ops->alloc(gb, nx * 2, &xd[0]));
    WT(gb->ops->alloc(gb, nx * 2, &xd[1]));
    WT(gb->ops->alloc(gb, ny * 2, &yd));
    WT(gb->ops->alloc(gb, ny * 2, &yw));
    WT(gb->ops->alloc(gb, 16 * vcomp * 2, &vd));
    WT(gb->ops->alloc(gb, 16 * mcomp * 2, &md));
    WT(gb->ops->from_host(gb, xd[0], xh, nx * 2));
    WT(gb->ops->from_host(gb, xd[1], xh, nx * 2)); /* same data: the error check reads either */
    CK(cudaMemset(vd, 0, 16 * vcomp * 2));
    /* weights: uniform, scaled to keep outputs O(1); U per component from G g G^T, G = [1 0 0; .5 .5 .5; .5 -.5 .5;
     * 0 0 1] */
    const size_t wn = (size_t)C * C * 27;
    float *wh = (float *)malloc(wn * 4), *bh = (float *)malloc(C * 4), *uh = (float *)malloc((size_t)C * C * 3 * 16 * 4);
    const float ws = 1.7f / sqrtf(27.0f * C);
    for (size_t i = 0; i < wn; i++) wh[i] = ws * urand();
    for (int i = 0; i < C; i++) bh[i] = 0.1f * urand();
    const float G[4][3] = {{1, 0, 0}, {.5f, .5f, .5f}, {.5f, -.5f, .5f}, {0, 0, 1}};
    for (size_t oc = 0; oc < (size_t)C * C; oc++)
        for (int kt = 0; kt < 3; kt++) {
            const float *g = wh + (oc * 3 + kt) * 9;
            for (int i = 0; i < 4; i++)
                for (int j = 0; j < 4; j++) {
                    double u = 0;
                    for (int a = 0; a < 3; a++)
                        for (int b = 0; b < 3; b++) u += G[i][a] * g[a * 3 + b] * G[j][b];
                    uh[((size_t)(4 * i + j) * C * C + oc) * 3 + kt] = (float)u;
                }
        }
    w22_bweight *wd, *bd, *ud[16];
    int64_t s5[5] = {C, C, 3, 3, 3}, s1[1] = {C}, su[5] = {C, C, 3, 1, 1};
    WT(gb->ops->weight_upload(gb, W22_WK_CONV, wh, s5, 5, &wd));
    WT(gb->ops->weight_upload(gb, W22_WK_VECTOR, bh, s1, 1, &bd));
    for (int xi = 0; xi < 16; xi++)
        WT(gb->ops->weight_upload(gb, W22_WK_CONV, uh + (size_t)xi * C * C * 3, su, 5, &ud[xi]));
    cudaStream_t st = (cudaStream_t)w22_backend_cuda_stream(gb);
    const long vsf = (long)(h2 + 2) * (w2 + 2) * C, vsh = (long)(w2 + 2) * C, voff = vsh + C;
    const long msf = vsf, msh = vsh, moff = voff;

    float *biasd;
    CK(cudaMalloc(&biasd, C * 4));
    CK(cudaMemcpy(biasd, bh, C * 4, cudaMemcpyHostToDevice));

    /* the Winograd path on x buffer k: the input transform of `tf` frames (the last tf of the FI), the GEMMs, the
     * output transform; ev (NULL: none): 4 events around the parts */
    auto wino = [&](int k, int tf, cudaEvent_t *ev) {
        const w22_view xv = bview(xd[k], FI, H, W, C);
        if (ev) CK(cudaEventRecord(ev[0], st));
        const bf16 *xf[W22_WINO_FRAMES];
        for (int j = FI - tf; j < FI; j++) xf[j - (FI - tf)] = (const bf16 *)xv.ptr + j * xv.sf;
        WT(w22_cuda_wino_in(st, xf, tf, xv.sh, xv.sw, (bf16 *)vd + voff + (FI - tf) * vsf, (long)vcomp, vsf, vsh, C,
                            h2, w2, C));
        if (ev) CK(cudaEventRecord(ev[1], st));
        for (int xi = 0; xi < 16; xi++) {
            w22_conv_args g = {};
            g.in = {(bf16 *)vd + xi * vcomp + voff, FI, h2, w2, C, vsf, vsh, C, 2};
            g.out = {(bf16 *)md + xi * mcomp + moff, F, h2, w2, C, msf, msh, C, 2};
            g.weight = ud[xi], g.kt = 3, g.ks = 1;
            WT(gb->ops->conv(gb, &g));
        }
        if (ev) CK(cudaEventRecord(ev[2], st));
        const w22_view yv = bview(yw, F, H, W, C);
        WT(w22_cuda_wino_out(st, (const bf16 *)md + moff, (long)mcomp, msf, msh, C, (bf16 *)yv.ptr, yv.sf, yv.sh, yv.sw,
                             NULL, 0, 0, 0, biasd, F, h2, w2, C));
        if (ev) CK(cudaEventRecord(ev[3], st));
    };
    auto direct = [&](int k) {
        w22_conv_args a = {};
        a.in = bview(xd[k], FI, H, W, C), a.out = bview(yd, F, H, W, C), a.weight = wd, a.bias = bd, a.kt = 3, a.ks = 3;
        WT(gb->ops->conv(gb, &a));
    };

    /* timing: warm-up, then the direct conv's iterations, then the Winograd path's (its parts between events) */
    cudaEvent_t e0, e1, *ev = (cudaEvent_t *)malloc(sizeof(cudaEvent_t) * 4 * iters);
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    for (int i = 0; i < 4 * iters; i++) CK(cudaEventCreate(&ev[i]));
    for (int i = 0; i < 3; i++) direct(i & 1), wino(i & 1, FI, NULL);
    CK(cudaEventRecord(e0, st));
    for (int i = 0; i < iters; i++) direct(i & 1);
    CK(cudaEventRecord(e1, st));
    CK(cudaEventSynchronize(e1));
    float t_dir = 0, t[3][2] = {{0}}, ms;
    CK(cudaEventElapsedTime(&t_dir, e0, e1));
    for (int pass = 0; pass < 2; pass++) { /* pass 0: all FI input frames transformed; 1: F (cached); no syncs
                                            * between iterations, as the direct conv's */
        for (int i = 0; i < iters; i++) wino(i & 1, pass ? F : FI, ev + 4 * i);
        CK(cudaEventSynchronize(ev[4 * iters - 1]));
        for (int i = 0; i < iters; i++)
            for (int p = 0; p < 3; p++) {
                CK(cudaEventElapsedTime(&ms, ev[4 * i + p], ev[4 * i + p + 1]));
                t[p][pass] += ms;
            }
    }
    const double flops = 2.0 * F * H * W * (double)C * C * 27;
    const double d = t_dir / iters, in3 = t[0][0] / iters, in1 = t[0][1] / iters;
    const double gm = (t[1][0] + t[1][1]) / (2 * iters), out = (t[2][0] + t[2][1]) / (2 * iters);
    const double vbytes = 16.0 * h2 * w2 * C * 2, xbytes = (double)H * W * C * 2;
    printf("  direct conv:          %.3f ms per call, %.0f TFLOP/s\n", d, flops / d / 1e9);
    printf("  input transform:      %.3f ms (%d frames, %.2f TB/s) | %.3f ms (%d frames, cached)\n", in3, FI,
           FI * (xbytes + vbytes) / in3 / 1e9, in1, F);
    printf("  16 GEMMs (3x1x1):     %.3f ms, %.0f TFLOP/s of their own MACs (4/9 of the direct's), %.0f as the "
           "direct's\n", gm, flops * 4 / 9 / gm / 1e9, flops / gm / 1e9);
    printf("  output transform:     %.3f ms (%.2f TB/s)\n", out, F * (4 * xbytes + xbytes) / out / 1e9);
    printf("  winograd total:       %.3f ms (x%.2f of direct) | %.3f ms cached (x%.2f)\n", in3 + gm + out,
           (in3 + gm + out) / d, in1 + gm + out, (in1 + gm + out) / d);

    /* accuracy: both outputs against float64 at sampled pixels (all channels); border rows and columns included */
    direct(0);
    wino(0, FI, NULL);
    WT(gb->ops->sync(gb));
    uint16_t *ydh = (uint16_t *)malloc(ny * 2), *ywh = (uint16_t *)malloc(ny * 2);
    WT(gb->ops->to_host(gb, ydh, yd, ny * 2));
    WT(gb->ops->to_host(gb, ywh, yw, ny * 2));
    const int pts = C <= 256 ? 96 : 32;
    double se_d = 0, se_w = 0, sr = 0, md_d = 0, md_w = 0;
    double *ref = (double *)malloc(C * sizeof(double));
    long nan_d = 0, nan_w = 0;
    for (int pi = 0; pi < pts; pi++) {
        const int f = (int)((urand() + 1) / 2 * F) % F;
        int y = (int)((urand() + 1) / 2 * H) % H, x = (int)((urand() + 1) / 2 * W) % W;
        if (pi % 8 == 0) y = pi % 16 ? H - 1 : 0; /* edges: the padding */
        if (pi % 8 == 1) x = pi % 16 == 1 ? W - 1 : 0;
        for (int o = 0; o < C; o++) ref[o] = bh[o];
        for (int kt = 0; kt < 3; kt++)
            for (int ky = 0; ky < 3; ky++)
                for (int kx = 0; kx < 3; kx++) {
                    const uint16_t *xp = xh + (((size_t)(f + kt) * (H + 2) + y + ky) * (W + 2) + x + kx) * C;
                    for (int ci = 0; ci < C; ci++) {
                        const double xv = w22_bf16_to_f32(xp[ci]);
                        if (xv == 0) continue;
                        const float *wp = wh + (size_t)ci * 27 + kt * 9 + ky * 3 + kx;
                        for (int o = 0; o < C; o++) ref[o] += xv * wp[(size_t)o * C * 27];
                    }
                }
        const size_t yo = (((size_t)f * (H + 2) + y + 1) * (W + 2) + x + 1) * C;
        for (int o = 0; o < C; o++) {
            const double a = w22_bf16_to_f32(ydh[yo + o]), b = w22_bf16_to_f32(ywh[yo + o]);
            if (a != a) nan_d++;
            if (b != b) nan_w++;
            se_d += (a - ref[o]) * (a - ref[o]), se_w += (b - ref[o]) * (b - ref[o]), sr += ref[o] * ref[o];
            md_d = fmax(md_d, fabs(a - ref[o])), md_w = fmax(md_w, fabs(b - ref[o]));
        }
    }
    printf("  error vs float64 (%d pixels x %d channels): direct rel rms %.3e (max %.3e), winograd %.3e (max %.3e): "
           "x%.2f%s\n", pts, C, sqrt(se_d / sr), md_d, sqrt(se_w / sr), md_w, sqrt(se_w / se_d),
           nan_d || nan_w ? " NaN!" : "");
    free(ref), free(ydh), free(ywh), free(xh), free(wh), free(bh), free(uh);
    cudaFree(biasd);
    for (int i = 0; i < 2; i++) gb->ops->free(gb, xd[i]);
    gb->ops->free(gb, yd), gb->ops->free(gb, yw), gb->ops->free(gb, vd), gb->ops->free(gb, md);
    gb->ops->weight_free(gb, wd), gb->ops->weight_free(gb, bd);
    for (int xi = 0; xi < 16; xi++) gb->ops->weight_free(gb, ud[xi]);
    cudaEventDestroy(e0), cudaEventDestroy(e1);
    for (int i = 0; i < 4 * iters; i++) cudaEventDestroy(ev[i]);
    free(ev);
}

int main(int argc, char **argv) {
    int iters = 50, F = 1, shapes[16][3], ns = 0;
    setenv("W22_WINOGRAD", "0", 1); /* the backend's conv stays the direct one: the probe builds its own pieces */
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--iters") && i + 1 < argc) iters = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--frames") && i + 1 < argc) F = atoi(argv[++i]);
        else if (i + 2 < argc && ns < 16) {
            shapes[ns][0] = atoi(argv[i]), shapes[ns][1] = atoi(argv[i + 1]), shapes[ns][2] = atoi(argv[i + 2]);
            ns++, i += 2;
        } else {
            fprintf(stderr, "usage: %s [--iters N] [--frames F] [C H W ...]\n", argv[0]);
            return 2;
        }
    }
    if (!ns) {
        const int def[3][3] = {{256, 352, 624}, {512, 176, 312}, {1024, 88, 156}};
        memcpy(shapes, def, sizeof def), ns = 3;
    }
    for (int i = 0; i < ns; i++)
        if (shapes[i][0] % 64 || shapes[i][1] % 2 || shapes[i][2] % 2 || iters < 1 || F < 1) {
            fprintf(stderr, "winograd_probe: C a multiple of 64, H and W even, iters and frames >= 1\n");
            return 2;
        }
    w22_backend *gb;
    WT(w22_backend_cuda_create(0, &gb));
    for (int i = 0; i < ns; i++) probe(gb, shapes[i][0], shapes[i][1], shapes[i][2], F, iters);
    gb->ops->destroy(gb);
    return 0;
}
