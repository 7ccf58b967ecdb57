// Helpers shared by the op benches (FD_CUDA_BENCH=1): one CUDA backend, seeded random device buffers and bf16
// weights, wall-clock timing around be->sync (one warm-up, median of 5) and the table line with roofline ratios
// (GEMM: TFLOP/s / 709, the bf16 ceiling measured on the H200; memory-bound ops: GB/s / 4250, copy bandwidth).
#ifndef FD_BENCH_COMMON_H
#define FD_BENCH_COMMON_H
#include <stddef.h>
#include <stdint.h>

#include "backend.h"

fd_backend *B(void);           // the benches' CUDA backend (device 0), created on first use
extern uint64_t g_seed;        // seed of dev_rand / wrand
void *dev_rand(size_t n, float lo, float hi);                           // n f32 uniform in [lo, hi)
fd_weight wrand(int64_t rows, int64_t cols, float lo, float hi);       // uploaded bf16 matrix (cols 1: f32 vector)
int cmp_d(const void *a, const void *b);                                // qsort of doubles
typedef void (*bench_fn)(void *ctx);
extern fd_backend *g_timed;    // the backend time_ms synchronises (NULL: B())
double time_ms(bench_fn fn, void *ctx);                                 // median of 5 runs, ms
// FD_BENCH_SHAPE=TEXT: a bench runs only the shapes whose name contains TEXT (one kernel to profile); unset: all.
int bench_shape_wanted(const char *what);
// FD_BENCH_GEMV_BPS=N (1..64): the GEMVs' k-slicing target on B() from now on (fd_cuda_set_gemv_blocks_per_sm);
// returns the target in force (the default when unset). The quantized benches print it, so a script can sweep it.
int bench_gemv_bps(void);
double time_be_ms(fd_backend *be, bench_fn fn, void *ctx);              // the same, synchronising `be`
// GPU time per call, us, from CUDA events on B()'s stream: a memset of `spacer` (512 MB) first keeps the GPU busy
// while the host queues the start event and `calls` back-to-back fn(ctx) (so the host's launch cost is hidden, as
// in a graph replay or a deep queue) and flushes L2; median of 11 such samples after 3 warm-up calls.
double bench_event_us(bench_fn fn, void *ctx, int calls, void *spacer);
// reps back-to-back matmuls of x [n, k] on B(), cycling through `copies` copies of one weight (enough of them that
// no call finds its weights in L2): the bench_fn of the GEMM benches.
typedef struct {
    fd_weight *Ws;
    int copies, reps, n;
    void *x, *out;
} bench_mm_ctx;
void bench_mm_cycle(void *bench_mm_ctx_ptr);
// The weights of one GEMM bench group on B(): `copies` copies of the bf16 matrices m[0..count) x k, one copy's
// matrices after each other (each rounded up to 256 bytes), with enough copies (>= 384 MB together; one for a larger
// group) that no call finds its weights in the 50 MB L2. Their values tile the random bf16 block `seed`.
typedef struct {
    fd_weight *Ws; // copies x count, copy-major
    int copies, count;
    size_t group_bytes; // one copy, as laid out
    char *pool;
} bench_pool;
bench_pool bench_pool_make(const fd_weight *seed, const char *name, const int *m, int count, int k);
void bench_pool_free(bench_pool *p);
void row(const char *what, double ms, double flop, double bytes);       // one "BENCH | ..." line
#endif
