/* Exchanges between the ranks of a decode. A comm implementation moves byte ranges between ranks (in-process
 * threads, or NCCL); src/dist/exchange.c builds the plan's collectives (halo rows, K/V gather, video gather) on
 * top of that. Buffers are in the memory of the rank's backend. */
#ifndef W22_COMM_H
#define W22_COMM_H

#include <stddef.h>
#include "backend.h"

typedef struct {
    int peer;        /* the other rank */
    int is_send;     /* 1: send buf to peer; 0: receive from peer into buf */
    void *buf;
    size_t bytes;
} w22_xfer;

typedef struct {
    /* Posts every transfer together and completes them all (a group: no ordering between them is needed for
     * progress). Transfers between one pair of ranks match in the order they are posted. On return the received
     * data is visible to the backend's next op and the sent buffers may be reused. */
    w22_status (*exchange)(w22_comm *c, w22_backend *b, const w22_xfer *x, int n);
    /* Logical AND of *ok over the ranks (every rank calls it); the result replaces *ok. */
    w22_status (*agree)(w22_comm *c, int *ok);
    /* Marks the group failed: every rank's pending and later exchange returns W22_ERR_COMM instead of waiting. */
    void (*abort)(w22_comm *c, const char *why);
    void (*destroy)(w22_comm *c);
} w22_comm_ops;

struct w22_comm {
    const w22_comm_ops *ops;
    int rank, world;
    void *impl;
};

#endif
