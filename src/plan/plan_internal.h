/* What plan.c, exec.c and check.c share and nothing else includes: the scratch slots of a stage, the byte counts
 * of frames, and the checking mode's entry points. */
#ifndef W22_PLAN_INTERNAL_H
#define W22_PLAN_INTERNAL_H

#include "plan/plan.h"

/* A stage's private buffers in the scratch (w22_stage_scratch gives their offsets and sizes). */
enum {
    W22_SLOT_XA,     /* activation */
    W22_SLOT_XB,     /* activation (the other one) */
    W22_SLOT_T1,     /* conv1's output, the attention's in/out, the head's output and partial-sum scratch */
    W22_SLOT_NH,     /* a conv's fresh input frames, with a border */
    W22_SLOT_UNUSED, /* (time_conv reads its input in place) */
    W22_SLOT_U,      /* the upsample conv's input, with a border (an interleaving stage's lives in ubuf) */
    W22_SLOT_QKV,    /* stage 0's attention q|k|v */
    W22_SLOT_END,    /* empty: where the stage's own buffers end */
    W22_SLOTS
};

/* A band decode's halo: the latent rows each side of a band's kept rows that stages 1-3 compute and drop. After
 * stage 0 (up block 0 included) the zero padding at a cut reaches 5 latent rows inward at most (dev/band_probe.py on
 * diffusers' modules in float64: 4e-16 at 5 rows, exactly 0 at 6, both VAEs' structures); 6 so that none does. */
#define W22_BAND_HALO 6
/* Band b's rows (plan.h's band_a0, band_k0, band_k1) for the decode's band loop (exec.c). */
void w22_band_set(w22_decoder *d, int band);
/* Band b's first computed latent row (its band_a0). */
int w22_band_a0(const w22_decoder *d, int band);

/* Bytes of f frames of h x w x c, with a one-pixel border when border. */
size_t w22_frames_bytes(int f, int h, int w, int c, int border, size_t es);
/* The scratch offsets and sizes of stage s's slots, and their total. */
void w22_stage_scratch(const w22_decoder *d, int s, size_t off[W22_SLOTS], size_t size[W22_SLOTS], size_t *total);
/* Bytes of the head's output and its partial sums' fp32 scratch in T1; *tmp_off: where the scratch starts. */
size_t w22_head_psum_bytes(int f, int h, int w, int cout, size_t es, size_t *tmp_off);
/* Which of XA and XB a stage's layers [layer0, layer1) write. */
void w22_stage_slots(const w22_model *m, int layer0, int layer1, int used[2]);

/* The checking mode (check.c): begin swaps the backend's ops for checking wrappers for one decode, end puts them
 * back; w22_check_border verifies, where a zeroing is skipped, that the border it relies on is zero. */
w22_status w22_check_begin(w22_decoder *d);
void w22_check_end(w22_decoder *d);
w22_status w22_check_border(const w22_decoder *d, const w22_view *v, const char *what);
void w22_check_where(const w22_decoder *d, const void *p, char *buf, size_t n);

#endif
