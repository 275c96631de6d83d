/* The plan's device workspace for the standard clip (44 x 78 latents -> 704 x 1248), counted with a backend whose
 * allocations only add up their sizes (bf16 elements, as on CUDA): it must not depend on T (the plan never sees T
 * when it sizes the workspace), must grow with the frames per pass, and its parts are printed for docs/PERF.md. */
#include <stdlib.h>
#include <string.h>
#include "plan/plan.h"
#include "testutil.h"

static size_t counted;
static w22_status count_alloc(w22_backend *b, size_t bytes, void **ptr) {
    (void)b;
    counted += bytes;
    *ptr = (void *)(uintptr_t)0x1000; /* never dereferenced: prepare only lays out */
    return W22_OK;
}
static void count_free(w22_backend *b, void *p) { (void)b; (void)p; }

int main(void) {
    w22_backend_ops ops;
    memset(&ops, 0, sizeof ops);
    ops.name = "count";
    ops.elem_size = 2;
    ops.alloc = count_alloc;
    ops.free = count_free;
    w22_backend b = {&ops, 1, NULL};
    w22_config cfg;
    w22_config_default(&cfg);
    size_t prev = 0;
    for (int fpp = 1; fpp <= 4; fpp *= 2) {
        w22_decoder *d = calloc(1, sizeof *d);
        w22_model_build(&cfg, &d->model);
        d->backend = &b;
        d->rank = 0;
        d->world = 1;
        d->frames_per_pass = fpp;
        counted = 0;
        CHECK_OK(w22_plan_prepare(d, 44, 78));
        size_t caches = 0, queues = 0;
        for (int l = 0; l < W22_MAX_LAYERS; l++)
            for (int k = 0; k < 3; k++) caches += d->cache[l][k].bytes;
        for (int s = 0; s <= W22_STAGES; s++) queues += d->queue[s].bytes;
        printf("frames per pass %d: workspace %.2f GiB = causal caches %.2f + stage queues %.2f + scratch %.2f\n", fpp,
               counted / 1073741824.0, caches / 1073741824.0, queues / 1073741824.0, d->scratch.bytes / 1073741824.0);
        CHECK(counted == d->workspace_bytes, "counted %zu, the plan says %zu", counted, d->workspace_bytes);
        CHECK(counted >= prev, "the workspace shrank with more frames per pass");
        prev = counted;
        free(d);
    }
    return t_finish("test_workspace");
}
