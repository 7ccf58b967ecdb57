// Tensor binding shared by the target model and the drafters: a tensor is found by name and must have exactly
// the expected shape and an F32/F16/BF16 dtype, or loading fails with a one-line message naming the file and the
// tensor. For synthetic models (bench --random-weights) the binder makes the tensor instead (synth.h) and owns it.
// Linear weights (bind_linear) may also be stored quantized as the checkpoint's quantization_config says (FP8
// block-scaled: the weight in F8_E4M3 plus its `_scale_inv` tensor), and are quantized at load when asked.
#ifndef FD_BIND_H
#define FD_BIND_H
#include "backend.h"
#include "io/safetensors.h"
#include "model/config.h"

typedef struct {
    const st_set *st;  // the checkpoint's tensors (unused when synthetic)
    int synthetic;     // make tensors instead of reading them
    uint64_t seed;     // for synthetic tensors
    char **names;      // synthetic tensors: names and data, freed by binder_free
    void **data;
    int64_t n;
    int64_t n_params;  // elements bound so far
    const fd_quant_config *quant; // the checkpoint's quantization_config (NULL: none)
    int quantize_fp8;             // quantize dense linear weights to FP8 128x128 blocks at load (--quantize fp8)
    int quantize_int4;            // 0, or FD_WFMT_GPTQ_INT4 / AWQ_INT4: dense linear weights to int4 at load
                                  // (groups of 128; GPTQ keeps Qwen's exclusions dense: attention, shared experts)
    void **owned;                 // buffers made at load (quantized weights and scales), freed by binder_free
    int64_t n_owned;
} fd_binder;

// Binds `name` with shape dims[0..ndim) into w (rows = dims[0], cols = product of the rest).
int bind_tensor(fd_binder *b, fd_weight *w, const char *name, int ndim, const int64_t *dims);
// The same for a linear layer's weight [out, in] (or [E, out, in] for fused experts): dense, or FP8 block-scaled
// as published (validated against quantization_config), or quantized here when b->quantize_fp8.
int bind_linear(fd_binder *b, fd_weight *w, const char *name, int ndim, const int64_t *dims);
void binder_free(fd_binder *b);
#endif
