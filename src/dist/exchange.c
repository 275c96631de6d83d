/* Halo rows, whole-frame gathers and the video gather, as groups of byte transfers (src/dist/comm.h). */
#include <stdlib.h>
#include "common.h"
#include "dist/exchange.h"

w22_status w22_halo(w22_comm *c, w22_backend *b, w22_view v) {
    if (!c || c->world == 1 || v.f == 0) return W22_OK;
    const size_t row_bytes = (size_t)(v.w + 2) * v.c * v.es; /* a bordered row is contiguous */
    w22_xfer *x = malloc(sizeof *x * 4 * v.f);
    if (!x) return w22_fail(W22_ERR_OUT_OF_MEMORY, "out of host memory for a halo exchange");
    int n = 0;
    for (int f = 0; f < v.f; f++) {
        if (c->rank > 0) {
            x[n++] = (w22_xfer){c->rank - 1, 1, w22_view_at(v, f, 0, -1, 0), row_bytes};
            x[n++] = (w22_xfer){c->rank - 1, 0, w22_view_at(v, f, -1, -1, 0), row_bytes};
        }
        if (c->rank < c->world - 1) {
            x[n++] = (w22_xfer){c->rank + 1, 1, w22_view_at(v, f, v.h - 1, -1, 0), row_bytes};
            x[n++] = (w22_xfer){c->rank + 1, 0, w22_view_at(v, f, v.h, -1, 0), row_bytes};
        }
    }
    w22_status s = c->ops->exchange(c, b, x, n);
    free(x);
    return s;
}

w22_status w22_allgather_rows(w22_comm *c, w22_backend *b, w22_view local, w22_view full, const int *row0) {
    const int world = c ? c->world : 1, rank = c ? c->rank : 0;
    /* Own rows first: one copy, ordered before the transfers on the backend. */
    W22_TRY(b->ops->copy(b, w22_view_rows(full, row0[rank], local.h), local));
    if (world == 1) return W22_OK;
    /* Rows of a frame are contiguous when the view is dense in (w, c); send each frame's band as one block. */
    if (full.sw != full.c || full.sh != (long)full.w * full.c)
        return w22_fail(W22_ERR_INTERNAL, "allgather_rows: the gathered view must be dense per frame");
    w22_xfer *x = malloc(sizeof *x * 2 * world * full.f);
    if (!x) return w22_fail(W22_ERR_OUT_OF_MEMORY, "out of host memory for a gather");
    int n = 0;
    for (int f = 0; f < full.f; f++) {
        void *mine = w22_view_at(full, f, row0[rank], 0, 0);
        size_t my_bytes = (size_t)(row0[rank + 1] - row0[rank]) * full.sh * full.es;
        for (int r = 0; r < world; r++) {
            if (r == rank) continue;
            if (my_bytes) x[n++] = (w22_xfer){r, 1, mine, my_bytes};
            size_t rb = (size_t)(row0[r + 1] - row0[r]) * full.sh * full.es;
            if (rb) x[n++] = (w22_xfer){r, 0, w22_view_at(full, f, row0[r], 0, 0), rb};
        }
    }
    w22_status s = c->ops->exchange(c, b, x, n);
    free(x);
    return s;
}

w22_status w22_gather_blocks(w22_comm *c, w22_backend *b, void *buf, const size_t *offset, const size_t *bytes,
                             int all) {
    if (!c || c->world == 1) return W22_OK;
    const int world = c->world, rank = c->rank;
    w22_xfer *x = malloc(sizeof *x * 2 * world);
    if (!x) return w22_fail(W22_ERR_OUT_OF_MEMORY, "out of host memory for a gather");
    int n = 0;
    for (int r = 0; r < world; r++) {
        if (r == rank) continue;
        /* Rank r receives every other block when all, else only rank 0 receives. */
        if ((all || r == 0) && bytes[rank]) x[n++] = (w22_xfer){r, 1, (char *)buf + offset[rank], bytes[rank]};
        if ((all || rank == 0) && bytes[r]) x[n++] = (w22_xfer){r, 0, (char *)buf + offset[r], bytes[r]};
    }
    w22_status s = c->ops->exchange(c, b, x, n);
    free(x);
    return s;
}
