/* A conv's GEMMs as the CUDA backend runs it (conv.cu): route.h's step (the head's partial sums, an upsample's phases
 * where its weights have them, Winograd where the path's default threshold (hopper: 1 the Hopper path, 0 the portable
 * one; route.h's w22_route_wino_min_default) made its weights and the blocker takes the conv
 * with the whole frame as its band, as the backend's own scratch gives, else direct), then lower.h's GEMMs. Shared
 * by the two censuses: tests/test_route.c's (its own arguments per layer) and tests/test_census.c's (exec.c's).
 * kt, kh, kw: the weight's; phases: the backend made its phase weights. Nothing is read through any pointer (the
 * Winograd scratch is a fake address). Returns the GEMMs (at most 5), each with what it is; conv_dup_apart says
 * whether the conv's DupUp residual is one the phases do not fuse (conv.cu refuses it: the census pins none). */
#ifndef W22_TEST_CONV_GEMMS_H
#define W22_TEST_CONV_GEMMS_H

#include <stdint.h>
#include "cuda/lower.h"
#include "cuda/route.h"

typedef struct {
    const char *what;
    w22_mm g;
} lowered;
static int conv_dup_apart; /* the last conv_gemms call's */

static int conv_gemms(const w22_conv_args *a, const w22_conv_operands *o, int kt, int kh, int kw, int phases,
                      int hopper, const char *what, lowered out[5]) {
    const int wino = w22_route_wino_weights(kt, kh, kw, o->cin, o->cout, w22_route_wino_min_default(hopper));
    const char *wb = w22_route_winograd_blocker(a, o->cin, o->cout, wino,
                                                w22_route_wino_row_bytes(w22_lower_frames(a), (a->out.w + 3) / 4,
                                                                         o->cin, o->cout));
    int n = 0;
    w22_mm g;
    conv_dup_apart = a->dup_in != NULL; /* until the phases fuse it */
    switch (w22_route_conv_step(a, phases, a->psum ? "psum" : wb)) {
    case W22_CONV_PSUM:
        w22_lower_psum(a, o, &g);
        out[n++] = (lowered){"the head's partial sums", g};
        break;
    case W22_CONV_PHASES: {
        w22_mm q[4];
        w22_lower_direct(a, o, &g);
        if (w22_lower_phases(a, o, &g, q)) conv_dup_apart = 0;
        for (int p = 0; p < 4; p++) out[n++] = (lowered){"an upsample phase", q[p]};
        break;
    }
    case W22_CONV_WINOGRAD: {
        w22_mm q;
        w22_lower_direct(a, o, &g);
        if (g.sc) {
            w22_lower_wino_shortcut(&g, &q);
            out[n++] = (lowered){"a Winograd conv's shortcut", q};
        }
        const int h4 = (a->out.h + 3) / 4, w4 = (a->out.w + 3) / 4;
        const size_t whole = (size_t)h4 * w22_route_wino_row_bytes(g.F, w4, o->cin, o->cout);
        w22_lower_wino_batch(g.F, g.kt, w22_route_wino_band(g.F, h4, w4, o->cin, o->cout, whole), w4, o->cin, o->cout,
                             (const void *)(uintptr_t)0x7a0000000000ull, (const void *)(uintptr_t)0x790000000000ull,
                             (void *)(uintptr_t)0x780000000000ull, &q);
        out[n++] = (lowered){"Winograd's batch", q};
        break;
    }
    default:
        w22_lower_direct(a, o, &g);
        out[n++] = (lowered){what, g};
        break;
    }
    return n;
}

#endif
