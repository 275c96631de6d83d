/* What every backend shares of the op contract in backend.h beyond the inline view helpers: the DupUp shape check
 * (dupup_add, and the conv's fused DupUp residual), so that both backends refuse the same shapes with the same
 * words; and the border zeroing for backends without an op of their own. */
#include "backend.h"
#include "common.h"

w22_status w22_dupup_check(const char *who, const w22_view *out, const w22_view *in, int ft, int first_single) {
    if (ft != 1 && ft != 2) return w22_fail(W22_ERR_INVALID_ARG, "%s: DupUp ft %d, expected 1 or 2", who, ft);
    const int want_f = w22_dupup_frames(in->f, ft, first_single);
    if (out->f != want_f || out->h != 2 * in->h || out->w != 2 * in->w || in->c <= 0 || out->c <= 0 ||
        ((long)out->c * ft * 4) % in->c != 0)
        return w22_fail(W22_ERR_BAD_SHAPE,
                        "%s: DupUp out (%d,%d,%d,%d) from in (%d,%d,%d,%d), ft %d, first_single %d: expected out "
                        "(%d,%d,%d,c) with c*ft*4 a multiple of %d",
                        who, out->f, out->h, out->w, out->c, in->f, in->h, in->w, in->c, ft, first_single, want_f,
                        2 * in->h, 2 * in->w, in->c);
    return W22_OK;
}

w22_status w22_stopped(void) {
    return w22_fail(W22_ERR_INVALID_ARG, "the decode was stopped by the caller (its interrupt flag was set)");
}

w22_status w22_zero_border(w22_backend *b, w22_view v) {
    if (b->ops->zero_border) return b->ops->zero_border(b, v);
    w22_view top = w22_view_rows(v, -1, 1), bottom = w22_view_rows(v, v.h, 1);
    top.ptr = w22_view_at(top, 0, 0, -1, 0);
    top.w += 2;
    bottom.ptr = w22_view_at(bottom, 0, 0, -1, 0);
    bottom.w += 2;
    w22_view left = v, right = v;
    left.ptr = w22_view_at(v, 0, 0, -1, 0);
    left.w = 1;
    right.ptr = w22_view_at(v, 0, 0, v.w, 0);
    right.w = 1;
    W22_TRY(b->ops->zero(b, top));
    W22_TRY(b->ops->zero(b, bottom));
    W22_TRY(b->ops->zero(b, left));
    return b->ops->zero(b, right);
}
