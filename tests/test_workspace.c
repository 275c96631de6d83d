/* The plan's device workspace for the standard clip (44 x 78 latents -> 704 x 1248), counted with a backend whose
 * allocations only add up their sizes (bf16 elements, as on CUDA): it must not depend on T (the plan never sees T
 * when it sizes the workspace), must grow with the frames per pass, and its parts are printed for docs/PERF.md.
 *
 * The memory target: the device memory beyond the weights at most 4 GiB, which the CUDA backend's own scratch shares
 * with this workspace: the TMA conv's split-tail partials (132 slots of 128 x 256 fp32, and 132 counters:
 * src/cuda/conv_sm90_wgmma_tma.cu). The attention's scratch (scores fp32, probabilities bf16, V^T bf16 of one
 * 44 x 78 frame at C = 1024, each rounded to 256 bytes: src/cuda/attention.cu) lies in what stage 0 leaves free
 * past its own slots (since v22), which must hold it. With one latent frame per pass and with two (the default since
 * v24) the workspace must fit the rest, and with two it must not grow against the copy design (rotate_off,
 * psum_off), which is printed beside it. */
#include <stdlib.h>
#include <string.h>
#include "plan/plan_internal.h"
#include "testutil.h"


static size_t counted;
static w22_status count_alloc(w22_backend *b, size_t bytes, void **ptr) {
    (void)b;
    counted += bytes;
    *ptr = (void *)(uintptr_t)0x1000; /* never dereferenced: prepare only lays out */
    return W22_OK;
}
static void count_free(w22_backend *b, void *p) { (void)b; (void)p; }

static size_t align256(size_t x) { return (x + 255) & ~(size_t)255; }

/* Plans fpp frames per pass at 44 x 78; flags 1: the copy design (rotate_off and psum_off). */
static w22_decoder *plan(w22_backend *b, const w22_config *cfg, int fpp, int copies) {
    w22_decoder *d = calloc(1, sizeof *d);
    w22_model_build(cfg, &d->model);
    d->backend = b;
    d->rank = 0;
    d->world = 1;
    d->frames_per_pass = fpp;
    static w22_plan_test copy_design = {.rotate_off = 1, .psum_off = 1};
    d->test = copies ? &copy_design : NULL;
    counted = 0;
    CHECK_OK(w22_plan_prepare(d, 44, 78));
    CHECK(counted == d->workspace_bytes, "counted %zu, the plan says %zu", counted, d->workspace_bytes);
    return d;
}

int main(void) {
    w22_backend_ops ops;
    memset(&ops, 0, sizeof ops);
    ops.name = "count";
    ops.elem_size = 2;
    ops.alloc = count_alloc;
    ops.free = count_free;
    w22_backend b = {&ops, 1, NULL, NULL};
    w22_config cfg;
    w22_config_default(&cfg);
    const size_t P = 44 * 78, attention = align256(P * P * 4) + align256(P * P * 2) + align256((size_t)1024 * P * 2);
    const size_t split = (size_t)132 * 128 * 256 * 4 + 132 * sizeof(unsigned);
    const size_t target = ((size_t)4 << 30) - split;
    const double GiB = 1073741824.0, MiB = 1048576.0;
    printf("target: workspace <= 4 GiB - split-tail partials %.1f MiB = %.4f GiB (the attention's %.1f MiB inside)\n",
           split / MiB, target / GiB, attention / MiB);
    size_t prev = 0;
    for (int fpp = 1; fpp <= 4; fpp *= 2) {
        w22_decoder *old = plan(&b, &cfg, fpp, 1);
        const size_t old_bytes = counted;
        w22_decoder *d = plan(&b, &cfg, fpp, 0);
        const size_t bytes = counted;
        size_t caches = 0, queues = 0, spares = 0, head = 0;
        for (int l = 0; l < W22_MAX_LAYERS; l++)
            for (int k = 0; k < 3; k++) caches += d->cache[l][k].bytes;
        for (int l = 0; l < d->model.nlayers; l++)
            if (d->model.layers[l].kind == W22_L_HEAD) head = d->cache[l][0].bytes;
        for (int g = 0; g < d->nspares; g++) spares += d->spare[g].bytes;
        for (int s = 0; s <= W22_STAGES; s++) queues += d->queue[s].bytes;
        printf("frames per pass %d: workspace %.4f GiB = causal caches %.2f (head %s %.1f MiB) + %d spare frames "
               "%.1f MiB + stage queues %.2f + scratch %.2f; %+.1f MiB against the copy design (%.4f GiB), %+.1f MiB "
               "against the target\n",
               fpp, bytes / GiB, caches / GiB, d->head_psum ? "partial sums" : "input frames", head / MiB,
               d->nspares, spares / MiB, queues / GiB, d->scratch.bytes / GiB, ((double)bytes - old_bytes) / MiB,
               old_bytes / GiB, ((double)bytes - target) / MiB);
        for (int g = 0; g < d->nspares; g++) printf("  spare %d: %.1f MiB\n", g, d->spare[g].bytes / MiB);
        /* what each stage leaves free during its convs (the CUDA Winograd path's scratch): after the stage's own
         * activation and conv-input slots, before its input queue (and every earlier stage's), in the block */
        for (int s = 0; s < W22_STAGES && fpp == 1; s++) {
            size_t fb, off[8], size[8], total;
            const char *f = w22_stage_free(d, s, &fb), *t0 = d->transient.ptr, *t1 = t0 + d->transient.bytes;
            w22_stage_scratch(d, s, off, size, &total);
            printf("  stage %d: %.1f MiB free during its convs\n", s, fb / MiB);
            CHECK(f && f >= (const char *)d->scratch.ptr + off[3] + size[3] && f >= t0 && f + fb <= t1, "stage %d: its "
                  "free span overlaps its slots or leaves the block", s);
            for (int q = 1; q <= s; q++)
                CHECK(f + fb <= (const char *)d->queue[q].ptr, "stage %d: its free span overlaps queue %d", s, q);
        }
        /* an interleaving stage's upsample input (ubuf) lives on while the later stages run (plan.h): it must lie
         * outside the scratch, the queues and their free spans */
        for (int p = 0; p < W22_STAGES; p++) {
            const char *u = d->ubuf[p].ptr;
            CHECK(!d->stages[p].interleave == !u, "fpp %d: stage %d interleaves %d with ubuf %p", fpp, p,
                  d->stages[p].interleave, (const void *)u);
            if (!u) continue;
            const char *ue = u + d->ubuf[p].bytes;
            CHECK(u >= (const char *)d->scratch.ptr + d->scratch.bytes, "fpp %d: stage %d's ubuf in the scratch", fpp, p);
            for (int q = 1; q <= W22_STAGES; q++) {
                const char *qa = d->queue[q].ptr, *qe = qa + d->queue[q].bytes;
                CHECK(ue <= qa || u >= qe, "fpp %d: stage %d's ubuf overlaps queue %d", fpp, p, q);
            }
            for (int n = p + 1; n < W22_STAGES; n++) {
                size_t fb;
                const char *f = w22_stage_free(d, n, &fb);
                CHECK(!f || f >= ue || f + fb <= u, "fpp %d: stage %d's free span overlaps stage %d's upsample input",
                      fpp, n, p);
            }
        }
        /* stages 1 and 2 run chunks of 2, each handing the next stage one chunk at a time; stage 0 never (its up
         * block's input, the DupUp's source, lies in its scratch: plan.c), so stage 1's queue holds its whole
         * output, 2 frames per latent frame */
        CHECK(!d->stages[0].interleave && d->stages[1].interleave && d->stages[2].interleave &&
                  d->stages[1].in_cap == 2 * fpp && d->stages[2].in_cap == 2 && d->stages[3].in_cap == 1,
              "fpp %d: stages 0-2 interleave %d %d %d, queues of stages 1-3 hold %d %d %d frames (expected 0 1 1; "
              "%d 2 1)", fpp, d->stages[0].interleave, d->stages[1].interleave, d->stages[2].interleave,
              d->stages[1].in_cap, d->stages[2].in_cap, d->stages[3].in_cap, 2 * fpp);
        /* the wide conv inputs that open stages 2 and 3 (1024 and 512 channels) lie over XA, XB and NH, so NH holds
         * the narrower ones only */
        for (int s = 2; s < W22_STAGES && fpp == 1; s++) {
            size_t off[8], size[8], total;
            w22_stage_scratch(d, s, off, size, &total);
            const w22_stage *st = &d->stages[s];
            const size_t wide = (size_t)st->chunk * ((d->rows << s) + 2) * ((78 << s) + 2) * d->model.dims[s] * 2;
            CHECK(off[2] < off[0] && off[0] <= off[1] && off[1] <= off[3] && off[3] + size[3] - off[0] >= wide &&
                      size[3] < wide,
                  "stage %d: XA, XB, NH at %zu %zu %zu (NH %zu bytes) do not hold a wide input of %zu bytes in a row",
                  s, off[0], off[1], off[3], size[3], wide);
        }
        /* the attention's scratch in stage 0's free span past its slots (exec.c's run_attention) */
        {
            size_t fb, off[8], size[8], total;
            const char *f = w22_stage_free(d, 0, &fb);
            w22_stage_scratch(d, 0, off, size, &total);
            const char *past = (const char *)d->scratch.ptr + total;
            CHECK(f && f + fb >= past + attention, "fpp %d: stage 0 leaves %.1f MiB past its slots, the attention "
                  "needs %.1f", fpp, f ? (double)(f + fb - past) / MiB : 0.0, attention / MiB);
        }
        /* one spare per stage of one-frame chunks (stage 0 with one latent frame per pass, stage 3; stages 1 and 2
         * run chunks of 2) */
        if (d->rotate) CHECK(d->nspares == (fpp == 1 ? 2 : 1), "fpp %d: %d spare frames, expected %d", fpp,
                             d->nspares, fpp == 1 ? 2 : 1);
        /* v24: stage 2's five 512-channel caches rotate their two-frame units (114.4 MB) through stage 3's spare
         * (frames of 113.5 MB), both padded to the larger; the 1024-channel one (a group of one) copies */
        int units2 = 0, g3 = -1;
        for (int l = d->stages[3].layer0; l < d->stages[3].layer1; l++)
            if (d->cache_spare[l][1]) g3 = d->cache_spare[l][1];
        for (int l = d->stages[2].layer0; l < d->stages[2].layer1; l++)
            for (int k = 0; k < 3; k++) units2 += d->cache_unit[l][k] == 2 && d->cache_spare[l][k] == g3;
        if (d->rotate) {
            CHECK(units2 == 5, "fpp %d: %d of stage 2's caches rotate through stage 3's spare, expected 5", fpp,
                  units2);
            CHECK(g3 > 0 && d->spare[g3 - 1].bytes >= w22_frames_bytes(2, 176, 312, 512, 1, 2) &&
                      d->spare[g3 - 1].bytes >= w22_frames_bytes(1, 352, 624, 256, 1, 2),
                  "fpp %d: the shared spare holds %zu bytes, under a unit", fpp, g3 > 0 ? d->spare[g3 - 1].bytes : 0);
        }
        /* one latent frame per pass and the default, two */
        if (fpp <= 2) CHECK(bytes <= target, "fpp %d: workspace %zu bytes above the target %zu", fpp, bytes, target);
        if (fpp == 2)
            CHECK(bytes <= old_bytes, "fpp 2: workspace %zu bytes above the copy design's %zu", bytes, old_bytes);
        CHECK(bytes >= prev, "the workspace shrank with more frames per pass");
        prev = bytes;
        free(old);
        free(d);
    }
    return t_finish("test_workspace");
}
