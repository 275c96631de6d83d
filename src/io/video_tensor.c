/* Raw video tensors: .npy and .safetensors holding float32 [1, 3, F, H, W] (the decoder's output as is). The
 * shape is known when the writer opens, so the header goes first and frames are written where they belong: the
 * layout is channel-major (NCDHW), so a chunk [3][n][H][W] lands as 3 runs, one per channel plane, each at
 * (c * F + frame0) * H * W floats past the header (pwrite; frames may come in any order). */
#define _GNU_SOURCE
#include <stdlib.h>
#include <unistd.h>
#include "common.h"
#include "io/video_impl.h"

typedef struct {
    size_t header_len;
} tensor_state;

static w22_status tensor_open(w22_video_writer *vw) {
    int64_t shape[5] = {1, 3, vw->frames, vw->height, vw->width};
    char header[1024];
    size_t n = vw->fmt == W22_VIDEO_NPY ? w22_npy_header_f32(5, shape, header, sizeof header)
                                        : w22_st_header_f32("video", 5, shape, header, sizeof header);
    if (!n) return w22_fail(W22_ERR_INTERNAL, "%s: the tensor header did not fit in %zu bytes", vw->out.path,
                            sizeof header);
    tensor_state *st = w22_calloc(1, sizeof *st, "tensor writer");
    if (!st) return W22_ERR_OUT_OF_MEMORY;
    st->header_len = n;
    vw->impl = st;
    W22_TRY(w22_outfile_pwrite(&vw->out, header, n, 0));
    /* The file has its final size from the start: frames written out of order leave no short file behind. */
    uint64_t total = n + (uint64_t)3 * vw->frames * vw->height * vw->width * 4;
    if (ftruncate(vw->out.fd, (off_t)total) != 0)
        return w22_fail(W22_ERR_IO, "%s: cannot size %s to %llu bytes", vw->out.path, vw->out.tmp,
                        (unsigned long long)total);
    return W22_OK;
}

static w22_status tensor_write(w22_video_writer *vw, const float *chunk, int frame0, int n) {
    tensor_state *st = vw->impl;
    size_t plane = (size_t)vw->height * vw->width;
    for (int c = 0; c < 3; c++) {
        uint64_t off = st->header_len + ((uint64_t)c * vw->frames + (uint64_t)frame0) * plane * 4;
        W22_TRY(w22_outfile_pwrite(&vw->out, chunk + (size_t)c * n * plane, (size_t)n * plane * 4, off));
    }
    return W22_OK;
}

static w22_status tensor_finish(w22_video_writer *vw) { return W22_OK; }

static void tensor_close(w22_video_writer *vw) {
    free(vw->impl);
    vw->impl = NULL;
}

const w22_video_ops w22_video_npy_ops = {0, 0, tensor_open, tensor_write, tensor_finish, tensor_close};
const w22_video_ops w22_video_safetensors_ops = {0, 0, tensor_open, tensor_write, tensor_finish, tensor_close};
