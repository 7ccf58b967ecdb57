// Tensor binding shared by the target model and the drafters: a tensor is found by name and must have exactly
// the expected shape and an F32/F16/BF16 dtype, or loading fails with a one-line message naming the file and the
// tensor. For synthetic models (bench --random-weights) the binder makes the tensor instead (synth.h) and owns it.
#ifndef FD_BIND_H
#define FD_BIND_H
#include "backend.h"
#include "io/safetensors.h"

typedef struct {
    const st_set *st;  // the checkpoint's tensors (unused when synthetic)
    int synthetic;     // make tensors instead of reading them
    uint64_t seed;     // for synthetic tensors
    char **names;      // synthetic tensors: names and data, freed by binder_free
    void **data;
    int64_t n;
    int64_t n_params;  // elements bound so far
} fd_binder;

// Binds `name` with shape dims[0..ndim) into w (rows = dims[0], cols = product of the rest).
int bind_tensor(fd_binder *b, fd_weight *w, const char *name, int ndim, const int64_t *dims);
void binder_free(fd_binder *b);
#endif
