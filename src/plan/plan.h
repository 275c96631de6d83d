/* The decode plan and its executor. A decode runs four stages, one per spatial level (stage 0 also holds
 * post_quant_conv, conv_in and the mid block; stage 3 the head and the unpatchify). Each stage takes its input
 * frames in chunks; a chunk runs every layer of the stage and hands its output frames to the next stage at
 * once, so work memory is bounded by the chunk sizes, never by T. Causal convs keep their last two input frames
 * between chunks, so the chunk sizes do not change the output (docs/design.md). At a stage of one- or two-frame
 * chunks the caches of one frame size share a spare unit (a chunk's frames): the norm writes the new frames there
 * and the push after the conv swaps pointers instead of copying them (rotation); two stages whose units
 * differ by under 2% share one spare. The head's conv_out keeps its history as fp32
 * partial sums of its 12 outputs instead of two 256-channel input frames (head_psum). */
#ifndef W22_PLAN_H
#define W22_PLAN_H

#include <pthread.h>
#include "backend.h"
#include "dist/comm.h"
#include "model/model.h"

#define W22_STAGES 4
#define W22_MAX_SPARES 8 /* rotation groups: at most two unit sizes per stage */

/* A byte region of backend memory, viewed with any shape that fits. */
typedef struct {
    void *ptr;
    size_t bytes;
} w22_region;

typedef struct {
    int layer0, layer1;  /* the stage's layers: [layer0, layer1) of the model's list */
    int level;           /* spatial level of the stage's input */
    int cin;             /* channels of the stage's input */
    int chunk;           /* input frames per chunk */
    int in_cap;          /* frames its input queue holds */
    int temporal;        /* the stage's upsampler doubles time */
    int interleave;      /* its upsample conv runs in the next stage's chunks, each handed on before the next is made
                          * (an upsampler whose chunk outgrows the next stage's: that stage's queue holds one chunk of
                          * its own, and this stage's upsample input, live while the later stages run, lies outside
                          * the scratch: ubuf; plan.c) */
    int done;            /* input frames of this decode consumed so far */
} w22_stage;

/* Plan choices that only tests make (tests/test_plan.c, test_workspace.c: other designs to compare with and sizes
 * the decoder does not pick). Held by pointer so that a production decoder carries none of them. */
typedef struct w22_plan_test {
    int chunk[W22_STAGES]; /* chunk sizes of stages 1..3 (0: the default) */
    int rotate_off;        /* 1: the design before rotation (a cache's pushes as copies) */
    int psum_off;          /* 1: the head's input frames instead of its partial sums */
    int share_any;         /* 1: the stages' rotation groups share a spare whatever their units' sizes (at test sizes
                            * the borders make stage 2's and 3's units differ by more than plan.c's 2%) */
    unsigned host;         /* nonzero: the caches to host (a host_spec), whatever the budget (every hosting level) */
    int band_rerun;        /* 1: every band of a band decode runs stage 0 (TI2V-5B's way), not exec.c's band_replay */
} w22_plan_test;

struct w22_decoder {
    /* One decode at a time: the entry points of decoder.c hold it for the whole call, and w22_decoder_free takes it
     * before it frees (a free from another thread waits for the decode). The workspace, the caches and the backend's
     * scratch are the decoder's own and are not safe to share between two decodes. */
    pthread_mutex_t lock;
    w22_model model;
    w22_backend *backend;
    w22_comm *comm;      /* NULL for one rank */
    int rank, world;
    int *rank_rows;            /* world + 1: each rank's first latent row (the attention's gather), sized at open */
    size_t *rank_off, *rank_bytes; /* world: each rank's share of the video staging (the head's gather) */
    int on_all_ranks;
    w22_decoder_params params;
    const volatile int *interrupt; /* w22_decoder_set_interrupt's flag (NULL: none); also the backend's */
    w22_bweight *wt[W22_MAX_WEIGHTS]; /* the weights in the backend's layout */
    size_t weight_bytes;
    /* The workspace, for latents of h x w (re-made when the size changes). */
    int h, w;
    int row0, rows;      /* this rank's latent rows */
    /* A band decode (w22_decoder_params.bands > 1; one rank): stage 0 runs on the whole frame (its mid block's attention
     * sees all of it), stages 1-3 on a band of band_rows latent rows, [band_a0, band_a0 + band_rows), whose kept rows
     * are [band_k0, band_k1): the others are the halo (W22_BAND_HALO rows each side but at the frame's edges), whose
     * zero padding at the cut reaches no kept row (dev/band_probe.py). The whole decode runs once a band, the caches
     * zeroed between: the causal caches of stages 1-3 are a band's (docs/PERF.md "Issue 44: a band decode"). */
    int bands, band, band_rows, band_a0, band_k0, band_k1;
    int srows[4];        /* the latent rows stage s runs on: rows at stage 0, band_rows at stages 1-3 of a band decode */
    /* Where stage 0 ends at its upsampler (the Wan2.1 VAE), the first band keeps the rows of that upsampler's input
     * which the later bands' cut conv reads, in host memory (exec.c's band_replay): they run no other stage-0 layer.
     * Grown to a decode's T (exec.c's band_store_alloc), kept until the plan is released. */
    void *band_store;
    size_t band_store_bytes;
    int band_store_pinned; /* from the backend's host_alloc (else malloc) */
    int frames_per_pass;
    w22_stage stages[W22_STAGES];
    w22_region queue[W22_STAGES + 1]; /* queue[s]: stage s's input; queue[4]: video staging */
    w22_region scratch;  /* the stages' private buffers (one stage at a time) */
    w22_region ubuf[W22_STAGES]; /* an interleaving stage's upsample input (plan.h's interleave), else empty */
    /* One allocation holding scratch, then queue[4], [3], ubuf[2], queue[2], ubuf[1], queue[1], ubuf[0] (views into
     * it; queue[0] apart; the ubufs only of interleaving stages): during stage s's convs everything from the end of
     * its activation and conv-input slots to the start of queue[s] holds nothing live, one span that the convs may
     * use as scratch (w22_stage_free); an interleaving stage's ubuf lies past the later stages' queues, outside
     * their spans */
    w22_region transient;
    w22_region gathered; /* attention: the frame's q|k|v from every rank */
    w22_region cache_block; /* every causal cache and spare frame, one allocation */
    w22_region cache[W22_MAX_LAYERS][3]; /* per layer (views into cache_block): causal history of conv1, conv2
                                          * (or time_conv), head (with head_psum: its partial sums A and B, two
                                          * fp32 frames of cout) */
    void *cache_slot[W22_MAX_LAYERS][3][2]; /* a cache's two frame slots now: the halves of cache[l][k] at a
                                             * decode's start; rotation moves them through the group's memory */
    unsigned char cache_old[W22_MAX_LAYERS][3]; /* which of a cache's two frame slots holds the older frame */
    unsigned char cache_spare[W22_MAX_LAYERS][3]; /* 0: the cache's pushes copy; g + 1: it rotates with spare g */
    unsigned char cache_unit[W22_MAX_LAYERS][3];  /* a rotating cache's unit: the frames a push moves (its stage's
                                                   * chunk, 1 or 2); a chunk of other length copies */
    size_t cache_stride[W22_MAX_LAYERS][3]; /* bytes from a cache's first slot to its second at a decode's start */
    w22_region spare[W22_MAX_SPARES]; /* one unit per rotation group (views into cache_block) */
    void *spare_now[W22_MAX_SPARES];  /* where group g's free unit is now */
    int spare_tag[W22_MAX_SPARES];    /* the stage whose frame layout that unit's borders are zero in (-1: all of it
                                       * is zero); a group may serve two stages (plan.c) */
    int nspares;
    int rotate, head_psum;  /* how this workspace was planned (both on unless a test's choices say otherwise) */
    const w22_plan_test *test; /* tests only (plan_internal.h's choices); NULL in every decoder the library opens */
    int planned_fpp;           /* what the workspace was planned for, with planned_test (all zero: no test's) */
    w22_plan_test planned_test;
    /* The work-memory budget (w22_decoder_params.work_budget_bytes; 0: none) and what it made the plan do. The chunks
     * stay the default plan's (other chunkings agree only to rounding: tests/test_plan.c, tests/cuda_decode.c), so a
     * budget moves memory instead: the hosted causal caches (cache_host; never the head's partial sums) live in host
     * memory (host_cache_block: pinned on CUDA), and before each of their convs the two history
     * frames are copied into a device window (hist_win: two of them, so that the next hosted conv's history comes in
     * while this one runs), and the newest frames go back after through the window (exec.c's cache_hist, cache_push;
     * the backend's copy queue, copy_begin). The same ops on the same values in the same order: the same bits, and
     * copies over PCIe on a GPU (time, overlapped with the convs where the bus keeps up). w22_plan_work_bytes counts
     * a plan's work memory; w22_plan_prepare takes the fewest caches of plan.c's cost order (the fewest bytes over the
     * bus per byte freed first: the stages with the fewest convs per decode) whose count fits the budget. */
    unsigned host_spec;   /* what the plan was asked to host: bit s (s < 4), every cache of stage s; W22_HOST_CACHES(n),
                           * the first n of plan.c's cost order (the budget's choice: the fewest that fit) */
    unsigned host_stages; /* bit s: stage s has a hosted cache */
    int host_count, host_total; /* the hosted caches, of those that could be */
    unsigned char cache_host[W22_MAX_LAYERS][3]; /* 1: the cache lives in host_cache_block */
    unsigned char cache_written[W22_MAX_LAYERS][3]; /* a hosted cache's slots this decode wrote (bit p: slot p); an
                                                     * unwritten slot holds the causal zeros and is read as a zero
                                                     * fill of the window, so the host block is never zeroed */
    w22_region hist_win;       /* device memory: the hosted caches' two history windows, one allocation */
    void *win[2];              /* window 0: two frames of the largest hosted cache; window 1 (after it): two frames
                                * of the second largest (0 bytes with one hosted cache: nothing to prefetch) */
    size_t win_bytes[2];
    /* The hosted caches' copies in a decode (exec.c's windows): the hosted cache whose history a prefetch is bringing
     * into window pre_win (pre_l < 0: none), the window the current hosted conv reads (cur_win), per window the
     * copies begun with its tag and those the main queue has waited for, per hosted cache the window of its last
     * write-back and that copy's count (cache_wb_win 0: none this decode); for tests, the hosted convs whose
     * history a prefetch brought and those that loaded it themselves. */
    int pre_l, pre_k, pre_win, cur_win;
    unsigned win_issued[2], win_waited[2];
    unsigned char cache_wb_win[W22_MAX_LAYERS][3];
    unsigned cache_wb_seq[W22_MAX_LAYERS][3];
    unsigned long prefetched, loaded;
    void *host_cache_block;    /* host memory (the backend's host_alloc, else malloc): every hosted cache */
    size_t host_cache_bytes;
    int dry;                   /* w22_plan_work_bytes' layout: sizes counted, nothing allocated */
    w22_region zdev;     /* latents copied to the backend (host decodes) */
    size_t workspace_bytes;
    /* The current decode. */
    const void *z;
    w22_dtype zt;
    int T;
    int first_out_frame; /* video frames delivered so far */
    int video_frames, video_h, video_w;
    /* where finished frames go */
    int (*deliver)(w22_decoder *d, const void *staging, int nframes);
    void *deliver_user;
    /* The checking mode (check.c; W22_CHECK=1 or the params' check): the backend's own ops while a decode runs
     * through the checking wrappers, and where the decode is (for its messages). */
    int check;
    int at_stage, at_layer;
    int trace_op;            /* W22_CHECK_TRACE: ops traced in this decode (check.c) */
    const w22_backend_ops *ops_inner;
    w22_backend_ops ops_checked;
};

/* Plans and allocates the workspace for latents of h x w (no-op when it is already made for them). */
w22_status w22_plan_prepare(w22_decoder *d, int h, int w);
void w22_plan_release(w22_decoder *d);
/* Runs a decode of d->z (in backend memory) through the stages; frames go to d->deliver. */
w22_status w22_plan_run(w22_decoder *d);

/* The work memory a plan for latents of h x w needs on this decoder's backend and rank: its workspace (the bytes
 * w22_plan_prepare allocates with the backend, d->workspace_bytes after it) plus W22_WORK_RESERVE, with the causal
 * caches host_spec names (bit s: every cache of stage s; W22_HOST_CACHES(n): the first n of the cost order) in host
 * memory and the windows they need. The same layout code as the plan itself
 * (plan_make on a copy that only counts), so a budget, its tests and the bench's report cannot drift from it. */
w22_status w22_plan_work_bytes(const w22_decoder *d, int h, int w, unsigned host_spec, size_t *bytes);
/* A host_spec of the first n hostable caches of plan.c's cost order (the cheapest bytes over the bus first). */
#define W22_HOST_CACHES(n) ((unsigned)(n) << 8)
/* The backends' own work memory beside the plan's workspace, which a budget leaves room for: the CUDA backend's
 * split-tail partials (16.5 MiB, conv_sm90_wgmma_tma.cu), its frames_dev batch of a w22_decode_device_frames and
 * allocator rounding. Not in it: the latents (the caller's input; a host decode copies them to the device,
 * 4 z_dim T h w bytes) and the weights. tests/cuda_budget.c measures the peak against the budget. */
#define W22_WORK_RESERVE ((size_t)64 << 20)
/* The smallest budget a decode at h x w can take here (every stage's caches hosted), for messages and tests. */
w22_status w22_plan_budget_floor(const w22_decoder *d, int h, int w, size_t *bytes);

/* The span of the transient block that holds nothing live while stage s runs its convs (see transient), or NULL
 * and 0 before a workspace is made. */
void *w22_stage_free(const w22_decoder *d, int s, size_t *bytes);

/* This rank's share of n rows: [*r0, *r0 + *rows). */
void w22_split_rows(int n, int rank, int world, int *r0, int *rows);

#endif
