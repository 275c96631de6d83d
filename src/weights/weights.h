/* The weights object: one pointer and dtype per tensor of the model's weight table, from a mapped safetensors
 * file, from synthetic data the object owns, or from caller memory. */
#ifndef W22_WEIGHTS_H
#define W22_WEIGHTS_H

#include "model/model.h"
#include "weights/safetensors.h"

/* A file the weights are read from in place: its mapping and what it was when mapped (safetensors.h). */
typedef struct {
    void *map;
    size_t size;
    w22_st_watch watch;
    char path[4096];
} w22_wfile;

struct w22_weights {
    w22_model model;
    const void *data[W22_MAX_WEIGHTS]; /* tensor i of model.weights, dense, in dtype[i] */
    w22_dtype dtype[W22_MAX_WEIGHTS];
    void *owned;        /* memory this object frees (synthetic weights) */
    w22_wfile *files;   /* the mapped files (one, or a sharded index's shards), malloc'd; munmap'd and closed on free */
    int nfiles;
    int on_device;      /* 1: data[] are in the memory of GPU cuda_device (w22_weights_from_device), borrowed */
    int cuda_device;
    char source[512];   /* the file, or "synthetic seed N", or "memory" */
    char prefix[256];   /* the text before the decoder's names in the file ("", "vae.") */
};

/* The weights in a parsed safetensors file (or a table merged from shards): the prefix, the config (cfg, else the
 * file's own or the one inferred from the shapes), every name, shape and value checked. The tensors are used in
 * place (the caller hands the mappings to the weights object), except misaligned ones, which are copied. */
w22_status w22_weights_from_st(const w22_st_file *f, const char *source, const w22_config *cfg, w22_weights **out);
/* w22_weights_load from a safetensors image in memory (borrowed: buf must outlive the weights). For the fuzzer
 * and tests: the same checks as a file, messages name "<memory>". */
w22_status w22_weights_parse(const void *buf, size_t size, const w22_config *cfg, w22_weights **out);
/* W22_ERR_NONFINITE naming the first NaN/Inf (source, prefix + tensor name, element index), else W22_OK. Every
 * path that hands out a validated weights object from outside data calls it (src/weights/finite.c). */
w22_status w22_weights_check_finite(const w22_weights *w, const char *source, const char *prefix);
/* W22_OK when every file the weights are mapped from is as it was when mapped (w22_st_unchanged), else W22_ERR_IO
 * naming the file and `when`. Every reader of the mappings after the load calls it before and after reading. */
w22_status w22_weights_unchanged(const w22_weights *w, const char *when);
/* Moves the mapping and the watch of each of files[0..n) to w (the files keep their tables; closing them no longer
 * unmaps); W22_ERR_OUT_OF_MEMORY leaves them with the files. */
w22_status w22_weights_take_files(w22_weights *w, w22_st_file *files, const char *const *paths, int n);
/* Tensor i as float32 into dst (model.weights[i].numel elements); host weights only (w22_weights_to_host). */
void w22_weights_get_f32(const w22_weights *w, int i, float *dst);
/* A weights object holding a host copy of w's tensors (w on a GPU: a CPU decoder, saving). */
w22_status w22_weights_to_host(const w22_weights *w, w22_weights **out);

#endif
