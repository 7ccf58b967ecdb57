// Test-side GPTQ / AWQ int4 packing, written from the published layouts (AutoGPTQ / GPTQModel `pack`, AutoAWQ
// gemm `pack` with its order 0,2,4,6,1,3,5,7) independently of the loader (src/base/weight.c): it takes a bf16
// fixture, quantizes its projection weights, and writes two checkpoints side by side:
//   DIR/int4: qweight / qzeros / scales (/ g_idx) in the published dtypes and shapes + quantization_config,
//   DIR/deq:  the same model with every quantized weight replaced by its dequantized value in F32,
// computed here from the integers before packing. Loading both and comparing weights and logits checks the
// loader's unpacking (nibble order, zero convention, groups, g_idx) against this independent one.
#ifndef FD_TEST_INT4_PACK_H
#define FD_TEST_INT4_PACK_H
#include <stdint.h>

typedef struct {
    int awq;              // 0: GPTQ, 1: AWQ gemm
    int group;            // inputs per group; 0: one group over K (group_size -1)
    int v2;               // GPTQ checkpoint_format gptq_v2 (stored zero = z) instead of v1 (stored z - 1)
    int sym;              // GPTQ: z = 8 for every group (else asymmetric min/max zeros)
    int desc_act;         // GPTQ: g_idx a permutation's groups (act-order), written and honoured
    const char *qc_json;  // quantization_config as written to config.json
    // which modules (tensor name without .weight) are quantized; NULL: every projection
    int (*quantize)(const char *module);
    uint64_t seed;
    const char *also_dense; // this module's dense X.weight is written next to its int4 tensors (a bad input)
} int4_spec;

// Writes DIR/int4 and DIR/deq from tests/data/fixtures/FIXTURE (experts one by one). Returns the number of
// modules quantized, or -1 with fd_error set.
int int4_make(const char *fixture, const int4_spec *s, const char *dir);
// Removes DIR/int4, DIR/deq and DIR.
void int4_rm(const char *dir);
// In DIR/int4/model.safetensors' header: the first `from` replaced by `to` (same length). 0 or -1.
int int4_patch_header(const char *dir, const char *from, const char *to);
// Overwrites 4 bytes at element `index` of int32 tensor `name` in DIR/int4/model.safetensors. 0 or -1.
int int4_patch_i32(const char *dir, const char *name, int64_t index, int32_t value);
#endif
