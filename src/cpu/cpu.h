// CPU reference backend: internal helpers shared by the op files. Activations are fp32.
#ifndef FD_CPU_H
#define FD_CPU_H
#include "backend.h"
#include <math.h>

#include "base/threads.h"

// Weight elements as fp32, any format (base/weight.h).
static inline float cpu_w_at(const fd_weight *w, int64_t i) { return fd_weight_elem(w, i); }
static inline void cpu_w_row(const fd_weight *w, int64_t off, int64_t count, float *out) {
    fd_weight_f32(w, off, count, out);
}
// out[n, d] = rmsnorm(x) * (plus_one ? 1+w : w), fp32 (the rmsnorm op; out may alias x)
void cpu_rmsnorm_f32(float *out, const float *x, const fd_weight *w, int64_t n, int d, float eps, int plus_one);
// out[n, m] = x[n, k] W[m, k]^T, fp32 (W any dtype)
void cpu_matmul_f32(float *out, const float *x, const fd_weight *W, int n);
static inline float cpu_silu(float x) { return x / (1.0f + expf(-x)); }
static inline float cpu_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

// The W8A8 reference of route gemm_fp8 = wgmma (cpu_w8a8.c): applies to FP8 block-scaled weights with
// block_cols 128 and 1..16 rows (the CUDA kernel's shapes; other calls run the fp32 matmul, counted as gemv).
int cpu_w8a8_applies(const fd_weight *W, int n);
void cpu_matmul_w8a8(float *out, const float *x, const fd_weight *W, int n);
// x [k] -> its e4m3 values as fp32 xq [k] and one scale a 128-group xs [ceil(k / 128)] (the route's quantization)
void cpu_w8a8_quantize(const float *x, int64_t k, float *xq, float *xs);

// CPU backend state: its routes.
enum { CPU_KV_F32 = 0, CPU_KV_E4M3 = 1 };
// route gemm_fp8, the CUDA route's values so one --route / FD_ROUTE_GEMM_FP8 serves both backends: gemv and dequant
// keep activations fp32 (x . dequantized W: the reference of both CUDA values), wgmma runs the W8A8 semantics
// (cpu_w8a8.c); under wgmma the shapes the CUDA kernel does not take run (and count as) gemv, as on CUDA.
enum { CPU_GEMM_FP8_GEMV = 0, CPU_GEMM_FP8_DEQUANT = 1, CPU_GEMM_FP8_WGMMA = 2 };
struct cpu_group;
typedef struct {
    int kv;             // route kv: CPU_KV_*
    int gemm_fp8;       // route gemm_fp8: CPU_GEMM_FP8_*
    fd_route routes[2]; // kv, gemm_fp8
    // tensor parallelism (cpu_group.c): the group this backend is rank `rank` of (NULL: none), and its private
    // buffer for the sum
    struct cpu_group *group;
    int rank;
    float *sum;
    int64_t sum_cap;
} cpu_impl;
static inline cpu_impl *cpu_of(fd_backend *be) { return (cpu_impl *)be->impl; }

void cpu_install_dense(fd_backend *be);
void cpu_install_gdn(fd_backend *be);
void cpu_install_attn(fd_backend *be);
// Attention of q [n, H, hd] at positions pos0.. over a cache of either kv layout (cpu_attn.c): causal (keys up to
// the query's position) or all pos0+n keys; window > 0 keeps only keys within window - 1 of the query's position.
void cpu_attention_keys(fd_backend *be, void *out, const void *q, const fd_kv_view *kv, int64_t pos0, int n, int H,
                        int Hkv, int hd, float scale, int causal, int window);
void cpu_install_moe(fd_backend *be);
void cpu_install_dflash2(fd_backend *be);
void cpu_install_sample(fd_backend *be);
void cpu_install_group(fd_backend *be);
void cpu_group_leave(fd_backend *be); // at destroy: the last rank out frees the group
#endif
