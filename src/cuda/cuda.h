// CUDA backend entry points beyond backend.h: routes that only this backend has. They are in the backend's route
// table (selected by --route NAME=VALUE or FD_ROUTE_<NAME> through engine/routes.c); this sets them by name.
#ifndef FD_CUDA_H
#define FD_CUDA_H
#ifdef __cplusplus
extern "C" { // also around backend.h: its declarations must keep C linkage whichever header comes first
#endif
#include "backend.h"

// Routes (name = values, default first; env FD_ROUTE_<NAME>, applied by routes_backend_preset, not at creation):
//   gemm_act = auto | bf16 | bf16x2: activations of bf16-weight GEMMs: rounded to bf16, or
//                              split into two bf16 terms (two GEMMs, ~fp32-accurate), or auto: bf16x2 when k <= 256
//                              (toy models), else bf16 (every published geometry); see src/cuda/gemm.cu
//   attn_kernel = mma | simt | splitk | wgmma: attention with > 16 query tokens and >= 64 query rows:
//                              tensor-core flash kernel (head_dim 64/128/256; Q and P rounded to bf16) or the
//                              CUDA-core one (splitk selects it too); calls with fewer rows or another head_dim take
//                              the CUDA-core kernel. wgmma: the Hopper warpgroup-MMA kernel (attention_wgmma.cu) for
//                              head_dim 256 over a bf16 cache, the other calls as mma. Calls with <= 16 tokens
//                              (decode, verify) always take the split-K decode kernel (splitk; attention_decode.cu),
//                              whatever is selected
//   attn_decode = blocked | warp: the split-K decode kernel's chunks: 32-key tiles shared by 8 warps
//                              (attention_decode.cu) or each warp its own keys and online softmax
//                              (attention_decode_warp.cu, the default); both batch invariant, same partials and combine
//   gemm_small = gemv | cublas: bf16-weight GEMMs with <= 16 rows: gemv.cu or cuBLASLt
//   pdl = gemv | off: programmatic dependent launch of the small-n GEMVs: scheduled while the kernel
//                              before them runs, their first weight loads in flight before griddepcontrol.wait
//                              (cuda_common.h); bitwise the results of off
//   gemm_fp8 = gemv | dequant: GEMMs on FP8 block-scaled weights (gemv_fp8.cu, docs/routes.md)
//   gdn_chunk = tf32x3 | bf16: the chunked GDN prefill kernels: 3xTF32 products on fp32 operands (gdn_chunk.cu,
//                              ~fp32), or bf16 operands rounded where FLA rounds, fp32 sums and state
//                              (gdn_chunk_bf16.cu)
// Returns 0, or -1 with fd_error set for an unknown route or value.
int fd_cuda_set_route(fd_backend *be, const char *route, const char *value);
// The active value of a route, NULL for an unknown route.
const char *fd_cuda_route(fd_backend *be, const char *route);

// Small-n GEMM kernel launches so far (route gemm_small=gemv): tests use it to see a matmul_multi group run as
// one launch.
int64_t fd_cuda_gemv_launches(fd_backend *be);
// Tuning knob of the small-n GEMM's k slicing (default 2, no environment name: not a route): slices are
// sized for about this many 64-row blocks per SM. It changes the summation order of every gemv result, so it
// must not change while a model runs (decode and verify would differ): benches and tuning runs only. Returns
// the previous value; values outside 1..64 are refused (returns -1, nothing changed).
int fd_cuda_set_gemv_blocks_per_sm(fd_backend *be, int blocks_per_sm);
// Records a cudaEvent_t (passed as void *) on the backend's stream, so a bench can time queued ops with events.
void fd_cuda_record_event(fd_backend *be, void *event);

// The distribution sample_rows draws from, for tests: probs [rows, V] (device) = sampler_probs of each row under
// params[r] (zero outside the top-k / top-p set; one-hot argmax for greedy rows). src/cuda/sampling.cu.
void fd_cuda_sample_probs(fd_backend *be, float *probs, const float *logits, int rows, int V,
                          const fd_sample_params *params);

#ifdef __cplusplus
}
#endif
#endif
