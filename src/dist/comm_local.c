/* Ranks inside one process, one thread each, exchanging through memory: the simulated group that tests the rank
 * split on the CPU (and on one GPU). A send is posted to a mailbox per (sender, receiver) pair; the receiver copies
 * from the sender's buffer with its backend's copy and marks it taken; the sender waits until all its sends are
 * taken. abort() wakes every waiter with W22_ERR_COMM, so one failing rank never leaves the others hanging. */
#include <errno.h>
#include <stdio.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "common.h"
#include "dist/comm.h"

#define MAX_POSTED 4096
#define WAIT_SECONDS 600 /* a rank that never answers becomes an error, not a hang */

typedef struct {
    int from, to;
    const void *buf;
    size_t bytes;
    int taken;
    long seq;
} post;

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int world, refs;
    int failed;
    char why[512];
    post posts[MAX_POSTED];
    int nposts;
    int copying; /* receivers copying out of a post right now */
    long next_seq;
    /* agree(): a reusable barrier that ANDs the ranks' flags */
    int agree_count, agree_value, agree_result;
    long agree_round;
} group;

static w22_status wait_locked(group *g, struct timespec *deadline) {
    if (g->failed) return w22_fail(W22_ERR_COMM, "another rank failed: %s", g->why);
    if (pthread_cond_timedwait(&g->cv, &g->mu, deadline) == ETIMEDOUT) {
        g->failed = 1;
        snprintf(g->why, sizeof g->why, "a rank waited %d s for another", WAIT_SECONDS);
        pthread_cond_broadcast(&g->cv);
        return w22_fail(W22_ERR_COMM, "timed out after %d s waiting for another rank", WAIT_SECONDS);
    }
    return g->failed ? w22_fail(W22_ERR_COMM, "another rank failed: %s", g->why) : W22_OK;
}

static void deadline_in(struct timespec *t, int s) {
    clock_gettime(CLOCK_REALTIME, t);
    t->tv_sec += s;
}

static w22_status local_exchange(w22_comm *c, w22_backend *b, const w22_xfer *x, int n) {
    group *g = c->impl;
    struct timespec dl;
    deadline_in(&dl, WAIT_SECONDS);
    /* Sends are posted only once the backend's queued work (which wrote them) is done. */
    W22_TRY(b->ops->sync(b));
    pthread_mutex_lock(&g->mu);
    long mine[1024];
    int nmine = 0;
    w22_status s = W22_OK;
    for (int i = 0; i < n && s == W22_OK; i++) {
        if (!x[i].is_send) continue;
        while (g->nposts == MAX_POSTED && s == W22_OK) s = wait_locked(g, &dl);
        if (s != W22_OK) break;
        post *p = &g->posts[g->nposts++];
        *p = (post){c->rank, x[i].peer, x[i].buf, x[i].bytes, 0, g->next_seq++};
        if (nmine < 1024) mine[nmine++] = p->seq;
    }
    pthread_cond_broadcast(&g->cv);
    /* Receives, in posting order per pair: the oldest untaken post from that peer to us. */
    for (int i = 0; i < n && s == W22_OK; i++) {
        if (x[i].is_send) continue;
        for (;;) {
            post *best = NULL;
            for (int k = 0; k < g->nposts; k++) {
                post *p = &g->posts[k];
                if (!p->taken && p->from == x[i].peer && p->to == c->rank && (!best || p->seq < best->seq)) best = p;
            }
            if (best) {
                if (best->bytes != x[i].bytes) {
                    s = w22_fail(W22_ERR_INTERNAL, "rank %d: a transfer from rank %d has %zu bytes, expected %zu",
                                 c->rank, x[i].peer, best->bytes, x[i].bytes);
                    break;
                }
                /* Copy outside the lock; the table may be compacted meanwhile, so find the post again by seq. */
                long seq = best->seq;
                const void *src = best->buf;
                g->copying++;
                pthread_mutex_unlock(&g->mu);
                s = b->ops->copy_bytes(b, x[i].buf, src, x[i].bytes);
                if (s == W22_OK) s = b->ops->sync(b);
                pthread_mutex_lock(&g->mu);
                g->copying--;
                for (int k = 0; k < g->nposts; k++)
                    if (g->posts[k].seq == seq) g->posts[k].taken = 1;
                pthread_cond_broadcast(&g->cv);
                break;
            }
            if ((s = wait_locked(g, &dl)) != W22_OK) break;
        }
    }
    /* Our sends' buffers are free once every one of them was taken. */
    while (s == W22_OK) {
        int pending = 0;
        for (int k = 0; k < g->nposts; k++)
            for (int j = 0; j < nmine; j++)
                if (g->posts[k].seq == mine[j] && !g->posts[k].taken) pending = 1;
        if (!pending) break;
        s = wait_locked(g, &dl);
    }
    /* Drop taken posts (keep the table small), unless another rank is between finding a post and marking it. */
    if (g->copying == 0) {
        int w = 0;
        for (int k = 0; k < g->nposts; k++)
            if (!g->posts[k].taken) g->posts[w++] = g->posts[k];
        g->nposts = w;
    }
    if (s != W22_OK && !g->failed) {
        g->failed = 1;
        snprintf(g->why, sizeof g->why, "rank %d: %s", c->rank, w22_last_error());
        pthread_cond_broadcast(&g->cv);
    }
    pthread_mutex_unlock(&g->mu);
    return s;
}

static w22_status local_agree(w22_comm *c, int *ok) {
    group *g = c->impl;
    struct timespec dl;
    deadline_in(&dl, WAIT_SECONDS);
    pthread_mutex_lock(&g->mu);
    long round = g->agree_round;
    if (g->agree_count == 0) g->agree_value = 1;
    g->agree_value &= *ok != 0;
    w22_status s = W22_OK;
    if (++g->agree_count == g->world) {
        g->agree_result = g->agree_value;
        g->agree_count = 0;
        g->agree_round++;
        pthread_cond_broadcast(&g->cv);
    } else {
        while (g->agree_round == round && s == W22_OK) s = wait_locked(g, &dl);
    }
    *ok = g->agree_result;
    pthread_mutex_unlock(&g->mu);
    return s;
}

static void local_abort(w22_comm *c, const char *why) {
    group *g = c->impl;
    pthread_mutex_lock(&g->mu);
    if (!g->failed) {
        g->failed = 1;
        snprintf(g->why, sizeof g->why, "rank %d: %s", c->rank, why ? why : "aborted");
    }
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

static void local_destroy(w22_comm *c) {
    group *g = c->impl;
    pthread_mutex_lock(&g->mu);
    int last = --g->refs == 0;
    pthread_mutex_unlock(&g->mu);
    if (last) {
        pthread_mutex_destroy(&g->mu);
        pthread_cond_destroy(&g->cv);
        free(g);
    }
    free(c);
}

static const w22_comm_ops local_ops = {local_exchange, local_agree, local_abort, local_destroy};

w22_status w22_comm_local_group(int world, w22_comm **comms) {
    if (!comms) return w22_fail(W22_ERR_INVALID_ARG, "w22_comm_local_group: comms is NULL, expected an array of world");
    if (world < 1 || world > 64)
        return w22_fail(W22_ERR_INVALID_ARG, "w22_comm_local_group: world %d, expected 1..64", world);
    group *g = calloc(1, sizeof *g);
    if (!g) return w22_fail(W22_ERR_OUT_OF_MEMORY, "out of host memory for a rank group");
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    g->world = world;
    for (int r = 0; r < world; r++) {
        comms[r] = calloc(1, sizeof **comms);
        if (!comms[r]) {
            for (int k = 0; k < r; k++) free(comms[k]);
            free(g);
            return w22_fail(W22_ERR_OUT_OF_MEMORY, "out of host memory for a rank group");
        }
        comms[r]->ops = &local_ops;
        comms[r]->rank = r;
        comms[r]->world = world;
        comms[r]->impl = g;
        g->refs++;
    }
    return W22_OK;
}

void w22_comm_free(w22_comm *c) {
    if (c) c->ops->destroy(c);
}
