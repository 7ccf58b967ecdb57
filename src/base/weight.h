// The weight-format descriptor: what a bound weight's bytes mean. Every reader of weight elements goes through
// this header (the CPU reference, the drafters' host-side math, the backends' upload), so a new format is added
// here, in the binder (model/bind.c) and in each backend's matmul dispatch — nowhere else.
#ifndef FD_WEIGHT_H
#define FD_WEIGHT_H
#include <stddef.h>
#include <stdint.h>

#include "base/base.h"

typedef enum {
    FD_WFMT_DENSE = 0, // rows x cols elements of `dtype` (F32, F16 or BF16 as published)
    // FP8 block-scaled (HF fine-grained FP8, Qwen's *-FP8 checkpoints): rows x cols e4m3 bytes; element (r, c)
    // is e4m3(data[r cols + c]) * scale[(r / block_rows) scale_cols + c / block_cols] ("weight_scale_inv": the
    // name is historical, it multiplies). Partial blocks at the edges share their block's scale.
    FD_WFMT_FP8_BLOCK = 1,
    // GPTQ int4 (AutoGPTQ / GPTQModel layout, Qwen's *-GPTQ-Int4): `data` is qweight int32 [K/8, N], nibble j
    // (bits 4j..4j+3) of word [k/8, n] holding q(n, k = 8 (k/8) + j); qzeros int32 [G, N/8], nibble j of word
    // [g, n/8] the zero of column n = 8 (n/8) + j; scales [G, N]; g_idx int32 [K] the group of input k (NULL:
    // k / group_size). Element (n, k) = s[g, n] * (q - (zstored + zero_add)), g = g_idx[k]: zero_add is 1 for
    // checkpoint_format "gptq" (v1 stores z - 1) and 0 for "gptq_v2".
    FD_WFMT_GPTQ_INT4 = 2,
    // AWQ int4, GEMM version (AutoAWQ): `data` is qweight int32 [K, N/8] packed along N in AWQ's interleaved order
    // (nibble i of word [k, c] holds column 8 c + {0, 2, 4, 6, 1, 3, 5, 7}[i]); qzeros int32 [G, N/8] packed the
    // same way; scales [G, N]. Element (n, k) = (q - z) * s[k / group_size, n].
    FD_WFMT_AWQ_INT4 = 3,
    FD_WFMT_COUNT
} fd_wfmt;

// A weight matrix or vector as bound from the checkpoint. `data` (and `scale`) are host memory (mmap) until
// upload_weight() gives the backend its own copy in `dev` (and `dev_scale`).
typedef struct {
    const char *name;
    fd_wfmt fmt;
    fd_dtype dtype; // element dtype of `data`: F32/F16/BF16 (dense) or F8E4M3 (fp8 block)
    int64_t rows;   // output features (or length for vectors)
    int64_t cols;   // input features (1 for vectors)
    const void *data;
    // FD_WFMT_FP8_BLOCK only: the scale tensor from the block row of this weight's first row on, in its stored
    // dtype (F32, BF16 or F16), scale_cols = ceil(cols / block_cols) per block row.
    const void *scale;
    fd_dtype scale_dtype;
    int block_rows, block_cols;
    int64_t scale_cols;
    // int4 formats (GPTQ / AWQ): `scale` and scale_dtype are the scales [n_groups, rows]; qzeros the packed zeros
    // [n_groups, rows / 8] int32; g_idx (GPTQ only, may be NULL) int32 [cols].
    const void *qzeros;
    const int32_t *g_idx;
    int group_size;
    int zero_add;
    int64_t n_groups;
    void *dev;         // backend copy (cpu: == data)
    fd_dtype dev_dtype;
    void *dev_scale;   // backend copy of the scales (fp8 block; cuda: f32)
    fd_dtype dev_scale_dtype; // cuda int4: the dtype (F16 / BF16) of the scale halves of its meta words
} fd_weight;

const char *fd_wfmt_name(fd_wfmt f);
// Element i (row-major flat index) of w as fp32, whatever its format.
float fd_weight_elem(const fd_weight *w, int64_t i);
// Elements [off, off + count) of w as fp32.
void fd_weight_f32(const fd_weight *w, int64_t off, int64_t count, float *out);
// Whether w is one of the group-quantized int4 formats (GPTQ, AWQ).
static inline int fd_wfmt_is_int4(fd_wfmt f) { return f == FD_WFMT_GPTQ_INT4 || f == FD_WFMT_AWQ_INT4; }
// Scale of element (r, c) of a block-scaled weight.
float fd_weight_block_scale(const fd_weight *w, int64_t r, int64_t c);
// Block rows of the scale tensor: ceil(rows / block_rows) (0 for dense weights).
int64_t fd_weight_scale_rows(const fd_weight *w);
// Bytes the weight occupies as stored (data and scales).
size_t fd_weight_bytes(const fd_weight *w);
// A view of rows [row0, row0 + rows) of a 2-D weight (a fused expert tensor's slice). For block-scaled weights
// row0 must start a block row, or the view would need scales it does not own: returns -1 with fd_error set.
// int4 weights have no row views (their rows are qweight's columns; published int4 stores experts one by one).
int fd_weight_view_rows(const fd_weight *w, int64_t row0, int64_t rows, fd_weight *out);
// Quantizes a dense weight to FP8 blocks of block_rows x block_cols (scale = block amax / 448, f32; a block of
// zeros gets scale 1). *q and *scale are malloc'ed; w_out describes them (name and shape of src).
void fd_weight_quantize_fp8(const fd_weight *src, int block_rows, int block_cols, uint8_t **q, float **scale,
                            fd_weight *w_out);
// Quantizes a dense [N, K] weight (N, K multiples of 8) to int4 by rounding to nearest, in groups of `group`
// inputs (K need not be a multiple of it: the last group is short), in the published layouts of `fmt`:
// FD_WFMT_GPTQ_INT4 symmetric (z = 8, scale = 2 amax / 15), checkpoint_format gptq (v1: stored zero z - 1), no
// g_idx; FD_WFMT_AWQ_INT4 asymmetric (scale = (max - min) / 15, z = round(-min / scale)). Scales F16. The three
// buffers are malloc'ed (qweight, qzeros, scales); w_out describes them (name and shape of src).
void fd_weight_quantize_int4(const fd_weight *src, fd_wfmt fmt, int group, uint32_t **qweight, uint32_t **qzeros,
                             uint16_t **scales, fd_weight *w_out);
#endif
