/* The plan's collectives, built on a comm's byte transfers: halo rows before a 3x3 conv, the attention's
 * gather of whole frames, and the video's rows to rank 0. With one rank (comm NULL) they do nothing. */
#ifndef W22_EXCHANGE_H
#define W22_EXCHANGE_H

#include "backend.h"
#include "dist/comm.h"

/* v: frames of a bordered buffer (rows -1 and v.h exist). Sends row 0 to rank - 1 (its row h) and row h - 1 to
 * rank + 1 (its row -1), border columns included; receives likewise. */
w22_status w22_halo(w22_comm *c, w22_backend *b, w22_view v);
/* local: this rank's rows; full: every rank's rows of the same frames (row0[r] = rank r's first row, row0[world] =
 * full.h). Every rank gets the whole of full; local is copied into full's own rows too. */
w22_status w22_allgather_rows(w22_comm *c, w22_backend *b, w22_view local, w22_view full, const int *row0);
/* Byte blocks: rank r's block (bytes[r]) lands at offset[r] of buf on the root (or on every rank when all).
 * Each rank's own block must already be at its offset in its buf. */
w22_status w22_gather_blocks(w22_comm *c, w22_backend *b, void *buf, const size_t *offset, const size_t *bytes,
                             int all);

#endif
