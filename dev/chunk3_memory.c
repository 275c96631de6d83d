/* dev (session 41): what stage 3 in chunks of 2 frames costs in device memory, beside the default's one-frame chunks,
 * at 1280 x 704 (TI2V-5B, latents 44 x 80) and 1280 x 720 (Wan2.1, 90 x 160), with the Winograd bands of the threshold
 * 256 kept free (both paths' default since session 41). The plan counted on a backend that only adds up its
 * allocations (tests/test_workspace.c's way). Built against the CPU library:
 *   cc -O2 -Iinclude -Isrc dev/chunk3_memory.c build-cpu/libwan22vae.a -lm -lpthread -ldl -lpng -lz -lopenblas
 *     -o /tmp/chunk3 && /tmp/chunk3 */
#include <stdio.h>
#include <stdlib.h>
#include "plan/plan_internal.h"
#include "cuda/route.h"

static size_t counted;
static w22_status count_alloc(w22_backend *b, size_t bytes, void **ptr) {
    (void)b;
    counted += bytes;
    *ptr = (void *)(uintptr_t)0x1000;
    return W22_OK;
}
static void count_free(w22_backend *b, void *p) { (void)b, (void)p; }
static size_t wino_work(w22_backend *b, int kt, int ks, int cin, int cout, int frames, int h, int w) {
    (void)b;
    return w22_route_winograd_work(kt, ks, cin, cout, frames, h, w, 256);
}

int main(void) {
    w22_backend_ops ops = {0};
    ops.name = "count", ops.elem_size = 2, ops.alloc = count_alloc, ops.free = count_free, ops.conv_work = wino_work;
    w22_backend b = {&ops, 1, NULL, NULL};
    for (int m = 0; m < 2; m++) {
        w22_config cfg;
        if (m) w22_config_wan21(&cfg);
        else w22_config_default(&cfg);
        const int h = m ? 90 : 44, w = m ? 160 : 80;
        for (int c3 = 1; c3 <= 2; c3++) {
            w22_decoder *d = calloc(1, sizeof *d);
            w22_model_build(&cfg, &d->model);
            static w22_plan_test t;
            t.chunk[3] = c3;
            d->backend = &b, d->rank = 0, d->world = 1, d->frames_per_pass = 2, d->test = &t;
            counted = 0;
            const w22_status s = w22_plan_prepare(d, h, w);
            size_t caches = 0;
            for (int l = 0; l < W22_MAX_LAYERS; l++)
                for (int k = 0; k < 3; k++) caches += d->cache[l][k].bytes;
            printf("%s %dx%d, stage 3 in chunks of %d: %s workspace %.3f GiB (caches %.3f, scratch %.3f, %d spares)\n",
                   m ? "Wan2.1" : "TI2V-5B", w * (m ? 8 : 16), h * (m ? 8 : 16), c3, s == W22_OK ? "ok," : "FAILED",
                   d->workspace_bytes / 1073741824.0, caches / 1073741824.0, d->scratch.bytes / 1073741824.0,
                   d->nspares);
            free(d);
        }
    }
    return 0;
}
