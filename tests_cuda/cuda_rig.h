// Helpers shared by the GPU tests and benches (tests_cuda/): backends made as a session makes them, seeded random
// inputs, device buffers (NaN-poisoned outputs), and the one tolerance table.
#ifndef FD_CUDA_RIG_H
#define FD_CUDA_RIG_H
#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "engine/engine.h"

// ---- tolerances: rel-L2 against the reference (test_rel_l2; INFINITY on any NaN), one per precision of the GPU
// path, set from what that path rounds. Every test in tests_cuda/ takes its bound from here.
#define TOL_EXACT     0.0  // layout-only ops (embed, splits, copies) and the GPU's own op-vs-fused claims: same bits
#define TOL_F32       2e-5 // fp32 arithmetic in another order (norms, elementwise, RoPE, conv): ~1e-6 expected
#define TOL_REORDERED 2e-5 // the same exact bf16 products summed in another order (gemv vs cuBLAS): fp32 order only
#define TOL_GDN       2e-4 // fp32 GDN, both routes, vs the CPU and vs fp64: long decays amplify order differences
#define TOL_GDN_BF16  1e-2 // GDN chunk kernels on bf16 operands (gdn_chunk=bf16), rounded where FLA rounds: q, k, T,
                           // U, W, P, the state and Vnew as mma operands; ~2.5-4.5e-3 expected (host emulation)
#define TOL_BF16X2    1e-4 // GEMMs with activations split into two bf16 terms (~16 mantissa bits): ~1e-5 expected
#define TOL_ATTN      1e-2 // attention over a bf16 or e4m3 KV cache, bf16 Q / P in the mma kernel: ~3e-3 expected
#define TOL_BF16      2e-2 // GEMMs with activations rounded to bf16 (8 bits; ~3e-3 expected), MoE, FP8 dequant
#define TOL_MODEL     2e-2 // a whole model's logits vs HF fp32 (DESIGN.md section 7), drafter logits the same
#define TOL_MODEL_BF16_ACT 5e-2 // the same under gemm_act=bf16 on the toy fixtures (HF's own bf16 is 4.7e-2)
#define TOL_DRAFT_STATE    1e-3 // states and KV rows after DFlash commits vs a fresh prefill of the same tokens:
                                // other GDN routes and GEMM row counts, ~fp32 (bf16x2, simt), KV rounded to bf16

// A bench (a measurement, not a check) runs only with FD_CUDA_BENCH=1: otherwise this prints why it is skipped and
// returns 1.
int cuda_rig_bench_skipped(void);

// ---- backends ----
// A new CUDA backend on device 0 with the routes of the environment (FD_ROUTE_<NAME>) applied, as a CLI or server
// session applies them (engine/routes.c, the one reader of route variables); a retired name (FD_CUDA_GEMM_ACT, ...)
// is a fatal error naming its replacement.
fd_backend *cuda_rig_new_gpu(void);
// The same without FD_CUDA_SYNC / FD_CUDA_PROFILE, which remove the graph entry points (every op must run as it
// is issued); gpu_run.sh runs every test with FD_CUDA_SYNC=1, so graph tests unset them for their process.
fd_backend *cuda_rig_new_gpu_for_graphs(void);
// A CPU and a CUDA backend with the KV layout `kv` ("bf16" is the CUDA default; "e4m3" on both), for the attention
// tests that compare one layout on both sides.
void cuda_rig_pair(const char *kv, fd_backend **cpu, fd_backend **gpu);

// One test file's rig: its own backends, made on first use (so a file's tests see the routes its earlier tests
// left, never another file's), its own random stream (the inputs do not depend on what other files ran), and the
// gemm_act the backend started with (the default route, or the environment's).
typedef struct {
    uint64_t seed;
    fd_backend *cpu, *gpu;
    char gemm_act_at_start[16];
} cuda_rig;
fd_backend *cuda_rig_cpu(cuda_rig *r);
fd_backend *cuda_rig_gpu(cuda_rig *r);
// n uniform floats in [lo, hi) from the rig's stream (fd_malloc'ed, one float of slack for n = 0).
float *cuda_rig_rnd(cuda_rig *r, size_t n, float lo, float hi);

// ---- device buffers on a backend g ----
void *cuda_rig_up(fd_backend *g, const void *h, size_t bytes);  // a copy of h[0..bytes)
void *cuda_rig_up_slack(fd_backend *g, const void *h, size_t bytes, size_t slack); // the same in bytes + slack
void cuda_rig_poison(fd_backend *g, void *d, size_t floats);    // NaN in d[0..floats): unwritten stays NaN
void *cuda_rig_poisoned(fd_backend *g, size_t floats);          // a new buffer of floats (+1 of slack), NaN
float *cuda_rig_down(fd_backend *g, const void *d, size_t floats); // a host copy (fd_malloc'ed, +1 of slack)
int cuda_rig_all_finite(const float *x, size_t n);
// A weight of `dt` (F32, F16, BF16) [rows, cols] from random values in [lo, hi), bound to the CPU (c) and the GPU
// (g) from the same host data (the CPU view keeps pointing at it: free with cuda_rig_weight_free).
typedef struct {
    fd_weight c, g;
    void *owned[3]; // host memory c points at (elements, scales), freed with the weight
} cuda_rig_weight;
cuda_rig_weight cuda_rig_weight_rand(cuda_rig *r, const char *name, int64_t rows, int64_t cols, fd_dtype dt, float lo,
                                     float hi);
// An FP8 block-scaled weight [rows, cols] with blocks of block_rows x block_cols, quantized from random values in
// [-0.1, 0.1) with every 37th row 40x larger (so scales differ by orders of magnitude), bound to both backends.
// bf16_scales: the scales stored as bf16 (rounded), as some published checkpoints do.
cuda_rig_weight cuda_rig_weight_fp8(cuda_rig *r, const char *name, int rows, int cols, int block_rows, int block_cols,
                                    int bf16_scales);
// An fp32 weight [rows, cols] over the caller's data (kept: it stays the caller's), uploaded to `be` (fp32 on the
// GPU too: [rows, < 16] and vectors, the GDN and conv parameters).
fd_weight cuda_rig_f32_weight(fd_backend *be, const char *name, const float *data, int64_t rows, int64_t cols);
// Adds a weight whose host data the caller made (w->c filled in; `owned` what to free with it) and binds it to
// both backends (w->g = w->c, uploaded).
void cuda_rig_weight_bind(cuda_rig *r, cuda_rig_weight *w);
void cuda_rig_weight_free(cuda_rig *r, cuda_rig_weight *w);
// The GPU matmul of host x [n, W->cols] into a NaN-poisoned [n, W->rows]; returns the host copy (fd_malloc'ed).
float *cuda_rig_gpu_matmul(fd_backend *g, const float *x, const fd_weight *W, int n);
// Calls counted so far under value index `value` of backend route `route` (-1: no such route).
int64_t cuda_rig_route_calls(fd_backend *be, const char *route, int value);
// The same by the value's name (-1: no such route or value).
int64_t cuda_rig_route_value_calls(fd_backend *be, const char *route, const char *value);
// Where two greedy generations that agree on prefix[0..s) part at new token s, the GPU's `pick` against `other`:
// accepted only at a near tie, i.e. on the GPU's own logits after prompt + prefix[0..s) (a fresh engine on m with
// options o) the gap logit[pick] - logit[other] is within [0, 2 x tol x the row's rms], a gap that rounding of
// rel-L2 size tol (the bound the caller's comparison admits) can turn. Returns 1 when so (the rest of the two
// sequences is then not compared), 0 when not or when the prefill fails; *gap and *bound for the report.
int cuda_rig_greedy_parts_at_near_tie(fd_backend *g, fd_model *m, const fd_engine_opts *o, const int32_t *prompt,
                                      int n_prompt, const int32_t *prefix, int s, int32_t pick, int32_t other,
                                      double tol, double *gap, double *bound);
// rel-L2 of got vs want, printed as "what rel-L2 e" and EXPECTed <= tol; returns it.
double cuda_rig_cmp(const char *what, const float *got, const float *want, size_t n, double tol);

// CUDA_RIG(seed): declares this file's rig and the short names its tests use over it: cpu(), gpu(), rnd(n, lo,
// hi), up(h, n floats), dalloc(n), poison(d, n), poisoned(n), down(d, n), dfree(d), the weight type tw with
// mkw(name, rows, cols, dtype, lo, hi) / freew(&w), and cmp(what, got, want, n, tol). Each file keeps the seed it
// had, so its random inputs are the ones it always drew.
#define CUDA_RIG(seed_value)                                                                                           \
    static cuda_rig g_rig = {.seed = (seed_value)};                                                                    \
    static inline fd_backend *cpu(void) { return cuda_rig_cpu(&g_rig); }                                               \
    static inline fd_backend *gpu(void) { return cuda_rig_gpu(&g_rig); }                                               \
    static inline float *rnd(size_t n, float lo, float hi) { return cuda_rig_rnd(&g_rig, n, lo, hi); }                 \
    static inline void *up(const float *h, size_t n) { return cuda_rig_up(gpu(), h, n * sizeof(float)); }             \
    static inline void *dalloc(size_t n) { return gpu()->alloc(gpu(), n * sizeof(float) + sizeof(float)); }           \
    static inline void poison(void *d, size_t n) { cuda_rig_poison(gpu(), d, n); }                                     \
    static inline void *poisoned(size_t n) { return cuda_rig_poisoned(gpu(), n); }                                     \
    static inline float *down(const void *d, size_t n) { return cuda_rig_down(gpu(), d, n); }                          \
    static inline void dfree(void *d) { gpu()->free(gpu(), d); }                                                      \
    typedef cuda_rig_weight tw;                                                                                        \
    static inline tw mkw(const char *name, int64_t rows, int64_t cols, fd_dtype dt, float lo, float hi) {              \
        return cuda_rig_weight_rand(&g_rig, name, rows, cols, dt, lo, hi);                                             \
    }                                                                                                                  \
    static inline void freew(tw *w) { cuda_rig_weight_free(&g_rig, w); }                                              \
    static inline double cmp(const char *what, const float *got, const float *want, size_t n, double tol) {            \
        return cuda_rig_cmp(what, got, want, n, tol);                                                                  \
    }
#endif
