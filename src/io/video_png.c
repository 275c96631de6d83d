/* A directory of PNG frames, frame_00000.png, frame_00001.png, ... (0-based, as ffmpeg's image2 pattern
 * frame_%05d.png reads them). The frames go into a temporary directory that is renamed at the end.
 *
 * Encoding is most of a PNG folder's cost (tens of ms a 704 x 1248 frame, against ~20 ms to decode one on an H200),
 * so frames are encoded on every core (issue 30): write converts each frame to 8-bit RGB (a few ms) into a free slot
 * and returns; a pool of threads encodes the filled slots, each frame into its own file, so their order does not
 * matter. The slots bound the memory (w22_png_pool_plan). A failure is kept with its message and returned by the
 * next write or by finish, which waits for every slot. The pool starts at the first write (w22_video_set_png comes
 * after open); with one thread it has no slots and write encodes each frame itself, as before the pool. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common.h"
#include "io/png_encode.h"
#include "io/video_impl.h"

enum { SLOT_FREE, SLOT_FILLING, SLOT_FILLED, SLOT_ENCODING };

typedef struct {
    uint8_t *rgb; /* one frame of packed RGB */
    int frame;
    int state;
} png_slot;

typedef struct {
    w22_video_writer *vw;
    int level;
    int nthreads, nslots, started;
    png_slot *slots;
    pthread_t *threads;
    pthread_mutex_t mu;
    pthread_cond_t filled; /* a slot filled, or stop */
    pthread_cond_t freed;  /* a slot freed */
    int stop;
    w22_status status;     /* the first failure, its message in msg (the workers' own last error is theirs) */
    char msg[2048];
} png_pool;

void w22_png_pool_plan(int frames, size_t frame_bytes, int threads, int *nthreads, int *nslots) {
    int t = threads > 0 ? threads : w22_num_cores();
    if (t > frames) t = frames; /* no thread without a frame to encode */
    size_t cap = W22_PNG_POOL_BYTES / (frame_bytes ? frame_bytes : 1);
    if (cap < 2) cap = 2; /* a frame over the budget: one slot encoding, one filling */
    if ((size_t)t > cap - 1) t = (int)(cap - 1);
    if (t < 1) t = 1;
    /* two slots a thread, so that a worker finds the next frame converted when it is done with one */
    size_t s = (size_t)t * 2 < cap ? (size_t)t * 2 : cap;
    *nthreads = t;
    *nslots = t == 1 ? 0 : (int)s;
}

static void frame_path(const w22_video_writer *vw, int frame, char *buf, size_t cap) {
    snprintf(buf, cap, "%s/frame_%05d.png", vw->out.tmp, frame);
}

/* The filled slot of the lowest frame (frames come out roughly in order); -1 when none. Under mu. */
static int next_filled(const png_pool *p) {
    int best = -1;
    for (int i = 0; i < p->nslots; i++)
        if (p->slots[i].state == SLOT_FILLED && (best < 0 || p->slots[i].frame < p->slots[best].frame)) best = i;
    return best;
}

static void *worker(void *arg) {
    png_pool *p = arg;
    char path[sizeof p->vw->out.tmp + 32];
    pthread_mutex_lock(&p->mu);
    for (;;) {
        int k;
        while ((k = next_filled(p)) < 0 && !p->stop) pthread_cond_wait(&p->filled, &p->mu);
        if (k < 0) break; /* stopped, nothing left */
        png_slot *sl = &p->slots[k];
        sl->state = SLOT_ENCODING;
        const int skip = p->status != W22_OK; /* after a failure the output is lost anyway */
        pthread_mutex_unlock(&p->mu);
        w22_status s = W22_OK;
        if (!skip) {
            frame_path(p->vw, sl->frame, path, sizeof path);
            s = w22_png_write_level(path, sl->rgb, p->vw->width, p->vw->height, p->level);
        }
        pthread_mutex_lock(&p->mu);
        if (s != W22_OK && p->status == W22_OK) {
            p->status = s;
            snprintf(p->msg, sizeof p->msg, "%s", w22_last_error());
        }
        sl->state = SLOT_FREE;
        pthread_cond_broadcast(&p->freed);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

/* The pool's failure as this thread's status and message. Under mu. */
static w22_status pool_failure(const png_pool *p) { return w22_fail(p->status, "%s", p->msg); }

static void pool_free(png_pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->stop = 1;
    for (int i = 0; i < p->nslots; i++) /* on abort: queued frames are not encoded */
        if (p->slots[i].state == SLOT_FILLED) p->slots[i].state = SLOT_FREE;
    pthread_cond_broadcast(&p->filled);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->started; i++) pthread_join(p->threads[i], NULL);
    for (int i = 0; i < p->nslots; i++) free(p->slots[i].rgb);
    free(p->slots);
    free(p->threads);
    pthread_cond_destroy(&p->freed);
    pthread_cond_destroy(&p->filled);
    pthread_mutex_destroy(&p->mu);
    free(p);
}

/* The pool for vw's settings: its threads and slots, or none for one thread. */
static w22_status pool_start(w22_video_writer *vw, png_pool **out) {
    int nthreads, nslots;
    w22_png_pool_plan(vw->frames, (size_t)vw->height * vw->width * 3, vw->threads, &nthreads, &nslots);
    png_pool *p = w22_calloc(1, sizeof *p, "the PNG encoder pool");
    if (!p) return W22_ERR_OUT_OF_MEMORY;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->filled, NULL);
    pthread_cond_init(&p->freed, NULL);
    p->vw = vw;
    p->level = vw->png_level < 0 ? W22_PNG_LEVEL_DEFAULT : vw->png_level;
    *out = p;
    if (nslots == 0) return W22_OK; /* one thread: write encodes */
    p->slots = w22_calloc((size_t)nslots, sizeof *p->slots, "the PNG encoder slots");
    p->threads = w22_calloc((size_t)nthreads, sizeof *p->threads, "the PNG encoder threads");
    int ok = p->slots && p->threads;
    if (ok) p->nslots = nslots;
    for (int i = 0; ok && i < nslots; i++)
        ok = (p->slots[i].rgb = w22_malloc((size_t)vw->height * vw->width * 3, "a PNG frame slot")) != NULL;
    if (!ok) {
        pool_free(p);
        *out = NULL;
        return W22_ERR_OUT_OF_MEMORY;
    }
    for (int i = 0; i < nthreads; i++, p->started++)
        if (pthread_create(&p->threads[i], NULL, worker, p) != 0) break;
    if (p->started == 0) { /* no thread would ever encode the slots: write encodes, as with one thread */
        for (int i = 0; i < p->nslots; i++) free(p->slots[i].rgb);
        p->nslots = 0;
    }
    return W22_OK;
}

static w22_status pngdir_open(w22_video_writer *vw) {
    if (vw->frames > 99999)
        return w22_fail(W22_ERR_INVALID_ARG, "%s: PNG frames are numbered with 5 digits: expected at most 99999 "
                        "frames, found %d", vw->out.path, vw->frames);
    return W22_OK;
}

/* A free slot marked for filling, or the pool's failure. */
static w22_status take_slot(png_pool *p, int *slot) {
    pthread_mutex_lock(&p->mu);
    int k = -1;
    for (;;) {
        if (p->status != W22_OK) break;
        for (int i = 0; i < p->nslots && k < 0; i++)
            if (p->slots[i].state == SLOT_FREE) k = i;
        if (k >= 0) break;
        pthread_cond_wait(&p->freed, &p->mu);
    }
    w22_status s = k < 0 ? pool_failure(p) : W22_OK;
    if (k >= 0) p->slots[k].state = SLOT_FILLING;
    pthread_mutex_unlock(&p->mu);
    *slot = k;
    return s;
}

static w22_status pngdir_write(w22_video_writer *vw, const float *chunk, int frame0, int n) {
    png_pool *p = vw->impl;
    if (!p) {
        W22_TRY(pool_start(vw, &p));
        vw->impl = p;
    }
    for (int f = 0; f < n; f++) {
        if (!p->nslots) { /* one thread */
            char path[sizeof vw->out.tmp + 32];
            w22_frame_rgb24(chunk, n, f, vw->height, vw->width, vw->rgb);
            frame_path(vw, frame0 + f, path, sizeof path);
            W22_TRY(w22_png_write_level(path, vw->rgb, vw->width, vw->height, p->level));
            continue;
        }
        int k;
        W22_TRY(take_slot(p, &k));
        w22_frame_rgb24(chunk, n, f, vw->height, vw->width, p->slots[k].rgb); /* the slot is ours while FILLING */
        pthread_mutex_lock(&p->mu);
        p->slots[k].frame = frame0 + f;
        p->slots[k].state = SLOT_FILLED;
        pthread_cond_signal(&p->filled);
        pthread_mutex_unlock(&p->mu);
    }
    return W22_OK;
}

/* Every frame handed over is encoded (or the first failure returned). */
static w22_status pngdir_finish(w22_video_writer *vw) {
    png_pool *p = vw->impl;
    if (!p || !p->nslots) return W22_OK;
    pthread_mutex_lock(&p->mu);
    for (int i = 0; i < p->nslots; i++)
        while (p->slots[i].state != SLOT_FREE) pthread_cond_wait(&p->freed, &p->mu);
    w22_status s = p->status != W22_OK ? pool_failure(p) : W22_OK;
    pthread_mutex_unlock(&p->mu);
    return s;
}

static void pngdir_close(w22_video_writer *vw) {
    pool_free(vw->impl);
    vw->impl = NULL;
}

const w22_video_ops w22_video_png_ops = {1, 0, pngdir_open, pngdir_write, pngdir_finish, pngdir_close};
