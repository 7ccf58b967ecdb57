// The table-driven op harness (issue 14): one row per backend.h op x shape x dtype / route, run on the CUDA
// backend and on the CPU reference on the same fresh random inputs.
//
// Test mode (TESTs cuda_op_table_dense, cuda_op_table_seq): every output is compared with the CPU's under the row's
// bound from the tolerance table (cuda_rig.h: rel-L2, INFINITY on any NaN; integer outputs exactly). Outputs start as
// NaN, so an element the op does not write fails; every buffer of both sides sits between two guard regions of canary
// bytes that must be intact after the op (an overrun or a write before the buffer fails, naming the buffer and the
// side). A row may also name a second GPU call whose outputs must be bitwise the first's (a fused op vs its parts, a
// position read on the device vs the host's). Perf mode (bench_cuda_op_table_dense / _seq, FD_CUDA_BENCH=1): each GPU
// call timed with CUDA events on the backend's stream: one warm-up pass, then the median of 11 samples, each a pass
// over enough copies of the row's inputs, outputs and weights (up to 64) that a pass touches more than the 50 MB L2;
// one BENCH line per row with GB/s (and TFLOP/s where the row counts its FLOP). Rows: op_table_dense.c (embed, norms,
// GEMMs, elementwise, copies, splits, RoPE), op_table_seq.c (GDN, KV cache, attention, MoE, the DFlash2 ops, argmax). A
// row whose op the CUDA backend lacks (NULL entry point) is skipped with a line saying so, so a new op appears in the
// table before its kernel does.
#ifndef FD_OP_HARNESS_H
#define FD_OP_HARNESS_H
#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "cuda_rig.h"

#define OH_MAX_BUFS    10
#define OH_MAX_WEIGHTS 200 // a MoE row's experts (3 per expert) and its router / shared expert
#define OH_CPU         0
#define OH_GPU         1

typedef enum {
    OH_IN,       // random (or given) contents, read by the op; guarded, not compared
    OH_OUT,      // NaN before the op; compared
    OH_INOUT,    // random contents, updated by the op (state, x += y); compared
    OH_SCRATCH,  // zero-filled, in the backend's own layout (a KV cache): sizes per side, guarded, not compared
    OH_HOST_OUT, // host memory the op writes (to_f32, argmax ids): NaN-poisoned, guarded, compared
} oh_kind;

typedef struct {
    const char *name;
    oh_kind kind;
    int is_i32;      // int32 elements (ids, parents): compared exactly
    double tol;      // bound of a compared float buffer (TOL_* of cuda_rig.h)
    size_t bytes[2]; // per side; equal except for OH_SCRATCH
    void *host;      // initial contents of IN / INOUT (the same bytes for both sides)
    void *p[2];      // the side's buffer, inside its guards
    void *base[2];   // what was allocated (guard, buffer, guard)
} oh_buf;

// One row instantiated: its buffers and weights on both sides, the shape arguments its run function reads, and
// what a call moves and computes (for the BENCH line).
typedef struct oh_case {
    char what[160];
    cuda_rig *rig;
    oh_buf buf[OH_MAX_BUFS];
    int nbuf;
    cuda_rig_weight w[OH_MAX_WEIGHTS];
    int nw;
    int i[12]; // shape arguments, as the row's build function sets them
    int64_t pos0;
    double bytes; // bytes a GPU call moves (0: the harness sums the GPU sides of buffers and weights)
    double flop;  // FLOP of a call (0: none printed)
} oh_case;

// A row of the table. build declares the buffers and weights for shape s and sets c->what; run calls the op on
// one side (OH_CPU / OH_GPU) over c's buffers; prepare (optional) runs once per side and copy before the op
// (filling a KV cache); twin (optional) is a second GPU call that must give the same bits as run.
typedef struct {
    const char *op; // the backend.h entry point (skip message; FD_OP_TABLE=substring of op or route)
    size_t entry;   // offsetof(fd_backend, op): the row is skipped when the GPU's is NULL
    void (*build)(oh_case *c, const int *s);
    void (*run)(fd_backend *be, oh_case *c, int side);
    void (*prepare)(fd_backend *be, oh_case *c, int side);
    void (*twin)(fd_backend *be, oh_case *c);
    int s[10];         // shape
    const char *route; // "name=value" set on the GPU for this row (restored after), or NULL
    int perf;          // OH_TEST_ONLY, OH_BOTH or OH_PERF_ONLY (too large for the CPU reference in test mode)
} oh_row;
enum { OH_TEST_ONLY = 0, OH_BOTH = 1, OH_PERF_ONLY = 2 };
// A row of op `opname` (a backend.h member) with build and run functions; the rest as designated initializers.
#define OH_ROW(opname, b, r, ...)                                                                                      \
    { .op = #opname, .entry = offsetof(fd_backend, opname), .build = b, .run = r, __VA_ARGS__ }

// ---- for build functions ----
// A buffer of `count` floats (or int32 with oh_buf_i32) of `kind`; IN / INOUT filled uniformly in [lo, hi) from
// the rig's stream. Returns its index.
int oh_buf_f32(oh_case *c, const char *name, oh_kind kind, size_t count, float lo, float hi, double tol);
// An int32 buffer with the given contents (IN) or poisoned (OUT / HOST_OUT, compared exactly).
int oh_buf_i32(oh_case *c, const char *name, oh_kind kind, size_t count, const int32_t *values);
// A zero-filled scratch buffer of bytes_cpu / bytes_gpu (the backends' layouts differ).
int oh_scratch(oh_case *c, const char *name, size_t bytes_cpu, size_t bytes_gpu);
// A random dense weight [rows, cols] of dtype (cuda_rig_weight_rand), bound on both sides. Returns its index.
int oh_weight(oh_case *c, const char *name, int64_t rows, int64_t cols, fd_dtype dt, float lo, float hi);
// An FP8 block-scaled weight [rows, cols] (cuda_rig_weight_fp8). Returns its index.
int oh_weight_fp8(oh_case *c, const char *name, int rows, int cols, int block_rows, int block_cols);

// ---- for run functions ----
static inline void *oh_p(oh_case *c, int buf, int side) {
    return c->buf[buf].p[side];
}
static inline const fd_weight *oh_w(oh_case *c, int w, int side) {
    return side ? &c->w[w].g : &c->w[w].c;
}
static inline fd_backend *oh_be(oh_case *c, int side) {
    return side ? cuda_rig_gpu(c->rig) : cuda_rig_cpu(c->rig);
}

// The two halves of the table and their lengths.
extern const oh_row oh_rows_dense[];
extern const size_t oh_n_rows_dense;
extern const oh_row oh_rows_seq[];
extern const size_t oh_n_rows_seq;
#endif
