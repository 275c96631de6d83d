/* The weight layouts on the host, on every core: the CPU backend's taps, and the definition of the CUDA backend's
 * bf16 layouts (conv, phases, Winograd), which src/cuda/weights_gpu.cu makes on the GPU at the open and
 * tests/cuda_ops.c compares with these byte for byte. Each output element is computed exactly as the serial loops
 * did (tests/test_layout.c compares them bit for bit); the work is split over output channels. */
#include <pthread.h>
#include <stdlib.h>
#include "common.h"
#include "weights/layout.h"

typedef struct {
    void (*fn)(void *ctx, int o0, int o1);
    void *ctx;
    int n, parts, next;
    pthread_mutex_t mu;
} pfor;

static void *pfor_main(void *p) {
    pfor *f = p;
    for (;;) {
        pthread_mutex_lock(&f->mu);
        const int k = f->next++;
        pthread_mutex_unlock(&f->mu);
        if (k >= f->parts) return NULL;
        const int o0 = (int)((long)f->n * k / f->parts), o1 = (int)((long)f->n * (k + 1) / f->parts);
        f->fn(f->ctx, o0, o1);
    }
}

/* fn over [0, n) in parts, on up to the machine's cores; serial where threads cannot be made. */
static void parallel_for(int n, void (*fn)(void *, int, int), void *ctx) {
    enum { MAXT = 64 };
    int t = w22_num_cores();
    if (t > MAXT) t = MAXT;
    if (t > n) t = n;
    if (t <= 1) {
        fn(ctx, 0, n);
        return;
    }
    pfor f = {fn, ctx, n, 4 * t, 0, PTHREAD_MUTEX_INITIALIZER};
    pthread_t th[MAXT];
    int made = 0;
    for (; made < t - 1; made++)
        if (pthread_create(&th[made], NULL, pfor_main, &f)) break;
    pfor_main(&f);
    for (int i = 0; i < made; i++) pthread_join(th[i], NULL);
}

typedef struct {
    const float *data;
    uint16_t *out;
    int cout, cin, vol;
} job;

static void conv_part(void *p, int o0, int o1) {
    const job *j = p;
    const int cin = j->cin, vol = j->vol;
    for (int o = o0; o < o1; o++)
        for (int t = 0; t < vol; t++) {
            uint16_t *dst = j->out + ((size_t)o * vol + t) * cin;
            const float *src = j->data + (size_t)o * cin * vol + t;
            for (int ci = 0; ci < cin; ci++) dst[ci] = w22_f32_to_bf16(src[(size_t)ci * vol]);
        }
}

void w22_layout_conv_bf16(const float *data, int cout, int cin, int vol, uint16_t *out) {
    job j = {data, out, cout, cin, vol};
    parallel_for(cout, conv_part, &j);
}

static void phase_part(void *p, int o0, int o1) {
    static const int lo[2][2] = {{0, 1}, {0, 2}}, hi[2][2] = {{0, 2}, {1, 2}}; /* taps [first, last] per (p, d') */
    const job *j = p;
    const int cout = j->cout, cin = j->cin;
    for (int py = 0; py < 2; py++)
        for (int px = 0; px < 2; px++)
            for (int o = o0; o < o1; o++)
                for (int d = 0; d < 4; d++) {
                    const int dy = d >> 1, dx = d & 1;
                    for (int ci = 0; ci < cin; ci++) {
                        float sum = 0;
                        for (int ky = lo[py][dy]; ky <= hi[py][dy]; ky++)
                            for (int kx = lo[px][dx]; kx <= hi[px][dx]; kx++)
                                sum += j->data[(((size_t)o * cin + ci) * 3 + ky) * 3 + kx];
                        j->out[((((size_t)(py * 2 + px) * cout + o) * 4) + d) * cin + ci] = w22_f32_to_bf16(sum);
                    }
                }
}

void w22_layout_phases_bf16(const float *data, int cout, int cin, uint16_t *out) {
    job j = {data, out, cout, cin, 9};
    parallel_for(cout, phase_part, &j);
}

typedef struct {
    const float *data;
    float *out;
    int cout, cin, taps;
} tjob;

/* Blocks of TI input channels, every tap and output channel: the source read in runs of TI x taps floats per output
 * channel, the output written in runs of TO output channels per (tap, input channel), both within the caches. (Row
 * by row of the output, each element was a read cin x taps floats from the last: 3.5 of the CPU open's 4 s here.) */
enum { TAPS_TI = 8, TAPS_TO = 64 }; /* of 16x64, 16x16, 8x16, 32x32, 8x64, 4x64: 8x64 and 4x64 the fastest, 3.4x the row loop */
static void taps_part(void *p, int b0, int b1) {
    const tjob *j = p;
    const int cout = j->cout, cin = j->cin, taps = j->taps;
    for (int b = b0; b < b1; b++) {
        const int i0 = b * TAPS_TI, i1 = i0 + TAPS_TI < cin ? i0 + TAPS_TI : cin;
        for (int o0 = 0; o0 < cout; o0 += TAPS_TO) {
            const int o1 = o0 + TAPS_TO < cout ? o0 + TAPS_TO : cout;
            for (int o = o0; o < o1; o++) {
                const float *src = j->data + ((size_t)o * cin + i0) * taps;
                for (int i = i0; i < i1; i++, src += taps)
                    for (int t = 0; t < taps; t++) j->out[((size_t)t * cin + i) * cout + o] = src[t];
            }
        }
    }
}

void w22_layout_taps_f32(const float *data, int cout, int cin, int taps, float *out) {
    tjob j = {data, out, cout, cin, taps};
    parallel_for((cin + TAPS_TI - 1) / TAPS_TI, taps_part, &j);
}
