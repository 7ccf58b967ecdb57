// Shared by every src/cuda/*.cu file: the one CUDA/cuBLAS error-check family, the backend's private state
// (stream, cuBLASLt handle, growable scratch buffers) and the entry points each op-family file provides.
//
// Numeric choices of this first version (see docs/perf-notes.md, CUDA section):
//  - activations are fp32 (act_bytes = 4); GEMM operands are rounded to bf16 right before cuBLASLt and
//    accumulated in fp32; everything else (norms, gates, conv, GDN, softmax) is computed in fp32.
//  - weights: matrices are stored bf16 on the device, small tensors (vectors, conv kernels, [1, d] gates) fp32.
//  - KV cache: bf16.
#ifndef FD_CUDA_COMMON_H
#define FD_CUDA_COMMON_H

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

extern "C" {
#include "backend.h"
}
#include "cuda/reduce.cuh"

#define FD_CUDA_CHECK(call)                                                                                            \
    do {                                                                                                               \
        cudaError_t fd_e_ = (call);                                                                                    \
        if (fd_e_ != cudaSuccess)                                                                                      \
            fd_panic(__FILE__, __LINE__, "CUDA error %s (%s) in %s", cudaGetErrorName(fd_e_),                          \
                     cudaGetErrorString(fd_e_), #call);                                                                \
    } while (0)

#define FD_CUBLAS_CHECK(call)                                                                                          \
    do {                                                                                                               \
        cublasStatus_t fd_s_ = (call);                                                                                 \
        if (fd_s_ != CUBLAS_STATUS_SUCCESS)                                                                            \
            fd_panic(__FILE__, __LINE__, "cuBLAS error %d (%s) in %s", (int)fd_s_, cublasLtGetStatusString(fd_s_),     \
                     #call);                                                                                           \
    } while (0)

// Kernel launches are checked in cu_launch (below). Asynchronous faults surface at the next synchronising call;
// set FD_CUDA_SYNC=1 to synchronise after every launch while debugging.

// Scratch buffers: grown on demand, never shrunk, owned by the backend. Ops run in stream order on one stream,
// so an op may reuse any slot freely; a slot is only valid inside one op call.
enum {
    CU_SCR_A = 0, // GEMM activation copy in bf16 / attention / misc
    CU_SCR_B,
    CU_SCR_C,
    CU_SCR_D,
    CU_SCR_E,
    CU_SCR_F,
    CU_SCR_G,
    CU_SCR_H,
    CU_SCR_W, // an FP8 or int4 weight dequantized to bf16 (gemm.cu): only the GEMM that made it reads it
    CU_SCR_COUNT
};

// Route gemm_act (see gemm.cu): how fp32 activations enter a bf16-weight GEMM. auto: bf16x2 when the reduction
// depth k is at most CU_GEMM_AUTO_SPLIT_MAX_K, else bf16 (cu_gemm_split). Decided by k alone, which every weight of
// a fused launch shares, so a fused result stays bitwise the separate call's and decode stays batch invariant.
enum { CU_GEMM_BF16 = 0, CU_GEMM_BF16X2 = 1, CU_GEMM_AUTO = 2 };
#define CU_GEMM_AUTO_SPLIT_MAX_K 256
// Route attn_kernel: CUDA-core flash kernel (attention.cu) or tensor-core mma.sync kernel (attention_mma.cu) for
// calls with >= 64 query rows and head_dim 64/128/256 (others take the CUDA-core kernel). Calls with at most
// CU_DECODE_MAX_N query tokens always take the split-K decode kernel (attention_decode.cu; head_dim 64/128/256,
// else the CUDA-core kernel on the same absolute chunks), counted as CU_ATTN_SPLITK.
// CU_ATTN_WGMMA: the Hopper warpgroup-MMA kernel (attention_wgmma.cu) for head_dim 256 over a bf16 cache; the
// other calls of a wgmma selection run the mma kernel (or simt), counted under the value that ran.
enum { CU_ATTN_SIMT = 0, CU_ATTN_MMA = 1, CU_ATTN_SPLITK = 2, CU_ATTN_WGMMA = 3 };
// Decode/verify attention: at most this many query tokens, key chunks [z * CU_DECODE_CHUNK, (z+1) * CU_DECODE_CHUNK)
// on absolute boundaries (a row's result must not depend on n, pos0 or the grid; attention_decode.cu).
#define CU_DECODE_MAX_N 16
#define CU_DECODE_CHUNK 512
// Route attn_decode: the kernel that computes a decode call's per-chunk partials (both feed k_attn_combine).
// blocked: 32-key tiles through shared memory shared by the block's 8 warps, three block barriers per tile
// (attention_decode.cu). warp: each of 4 warps streams its own 128 keys of the chunk through its own shared-memory
// ring with its own online softmax, one block barrier per chunk to merge them (attention_decode_warp.cu).
enum { CU_ATTN_DECODE_BLOCKED = 0, CU_ATTN_DECODE_WARP = 1 };
// Tree verify (spec_verify=tree): at most this many nodes per tree, so a node's ancestors fit one 64-bit mask
// (cuda/tree.cuh) and a warp holds every parent in two registers per lane (k_gdn_rec). A tree's nodes span at
// most two of the decode chunks above (64 < 512), which the tree attention's combine relies on.
#define CU_TREE_MAX_NODES 64
// Route gemm_small: bf16-weight GEMMs with n <= CU_GEMV_MAX_N rows run the tensor-core GEMV (gemv.cu; batch
// invariant) or cuBLASLt. Larger n always run cuBLASLt.
enum { CU_GEMM_SMALL_GEMV = 0, CU_GEMM_SMALL_CUBLAS = 1 };
#define CU_GEMV_MAX_N    16
#define CU_GEMV_COUNTERS 4096 // gemv split-k arrival counters allocated with the backend
#define CU_GEMV_MAX_SEGS 4    // weights one fused gemv launch takes (matmul_multi; GDN qkv|z|b|a)
// Default k slicing: ~2 64-row blocks per SM (gemv_tile.cuh cu_gemv_plan); swept on the H200: 14.58 ms per 27B
// step at 2 vs 15.7 at 6.
#define CU_GEMV_BLOCKS_PER_SM 2
#define CU_DEFERRED_MAX       64 // scratch buffers a failed recording may have replaced before graph_end frees them
#define CU_ROPE_TABLES        8  // distinct (theta, rot_dim) pairs a backend keeps (target and drafter need 1-2)

typedef struct {
    int device;
    int gemm_act;    // CU_GEMM_*
    int attn_kernel; // CU_ATTN_*
    int gemm_small;  // CU_GEMM_SMALL_*
    cudaStream_t stream;
    cublasLtHandle_t lt;
    void *lt_workspace;
    size_t lt_workspace_bytes;
    void *scratch[CU_SCR_COUNT];
    size_t scratch_bytes[CU_SCR_COUNT];
    int sync_every_op; // FD_CUDA_SYNC=1
    int num_sms;
    int kv;             // CU_KV_*
    fd_route routes[9]; // gemm_act, attn_kernel, kv, gemm_small, pdl, gemm_fp8, gemm_int4, gdn_chunk,
                        // attn_decode (be->routes); counted at dispatch
    int attn_decode;    // CU_ATTN_DECODE_*
    int gemm_fp8;       // CU_GEMM_FP8_*
    int gemm_int4;      // CU_GEMM_INT4_*
    int gdn_chunk;      // CU_GDN_CHUNK_*
    int pdl;            // CU_PDL_*: GEMVs launched with programmatic stream serialization (cu_launch_early)
    int *gemv_counters; // gemv.cu: per-row-tile arrival counters of the split-k reduction (kept zero between calls)
    int gemv_counters_len;
    int fp8wg_smem_set;     // gemv_fp8wg.cu: its kernel's dynamic shared memory limit raised on this device
    int64_t gemv_launches;  // gemv kernel launches (a fused matmul_multi group is one), fd_cuda_gemv_launches
    int gemv_blocks_per_sm; // cu_gemv_plan's k-slicing target (CU_GEMV_BLOCKS_PER_SM; benches: the setter)
    // RoPE inverse frequencies per (theta, rot_dim), computed on the host once and kept on the device, so a rope
    // call copies nothing (a copy from host memory could not sit in a CUDA graph).
    struct {
        float theta;
        int rot_dim;
        float *inv;
    } rope_tab[CU_ROPE_TABLES];
    int n_rope_tab;
    // CUDA graphs (cuda_graph.cu)
    int capturing;                        // the stream is recording (graph_begin .. graph_end)
    const char *capture_fail;             // why the current recording cannot be used (it is then discarded and re-run)
    uint64_t graph_gen;                   // bumped when memory a graph may reference is reallocated
    void *deferred_free[CU_DEFERRED_MAX]; // buffers replaced during a recording, freed once it has ended
    int n_deferred;
    int32_t *argmax_host; // pinned staging for argmax_rows' ids
    int argmax_host_len;
    void *topk_host; // pinned staging for topk_rows' pairs
    size_t topk_host_bytes;
    // Tensor parallelism (cuda_group.cu): the group this backend is rank `rank` of, and its NCCL communicator.
    struct cu_group *group;
    int rank;
    void *nccl_comm; // ncclComm_t
} cu_impl;
enum {
    CU_ROUTE_GEMM_ACT = 0,
    CU_ROUTE_ATTN_KERNEL = 1,
    CU_ROUTE_KV = 2,
    CU_ROUTE_GEMM_SMALL = 3,
    CU_ROUTE_PDL = 4,
    CU_ROUTE_GEMM_FP8 = 5,
    CU_ROUTE_GEMM_INT4 = 6,
    CU_ROUTE_GDN_CHUNK = 7,
    CU_ROUTE_ATTN_DECODE = 8,
    CU_N_ROUTES
};
// Route gemm_fp8 (gemv_fp8.cu): FP8 block-scaled weights with <= 16 rows run the FP8 GEMV, or every call
// dequantizes the weight to bf16 and runs the bf16 path (always so for n > 16 and shapes the GEMV does not take).
enum { CU_GEMM_FP8_GEMV = 0, CU_GEMM_FP8_DEQUANT = 1, CU_GEMM_FP8_WGMMA = 2 };
// Route gemm_int4 (gemv_int4.cu): GPTQ / AWQ int4 weights with <= 16 rows run the int4 GEMV, or every call
// dequantizes the weight and runs the dense path (always so for n > 16 and act-order g_idx).
enum { CU_GEMM_INT4_GEMV = 0, CU_GEMM_INT4_DEQUANT = 1 };
// Route pdl: programmatic dependent launch (cu_launch_early). gemv: a small-n GEMV is scheduled as soon as the
// kernel before it signals (right after that kernel's own wait) and streams its first weights while that kernel
// runs; it waits in CU_PDL_ENTER (griddepcontrol.wait: the previous grid has completed and its memory is visible)
// before it touches anything that grid may write, so results are bitwise those of off (test_cuda_graphs). Every
// other kernel launches after its predecessor has completed.
enum { CU_PDL_OFF = 0, CU_PDL_GEMV = 1 };
// Route gdn_chunk: the kernels of gdn_core's chunked form: 3xTF32 products on fp32 operands (gdn_chunk.cu,
// ~fp32 accuracy) or bf16 operands rounded where FLA rounds, fp32 sums and state (gdn_chunk_bf16.cu).
enum { CU_GDN_CHUNK_TF32X3 = 0, CU_GDN_CHUNK_BF16 = 1 };
// Route kv: the cache layout (attention.cu).
enum { CU_KV_BF16 = 0, CU_KV_E4M3 = 1 };

// A layer's KV cache as the attention kernels read it: bf16 planes, or e4m3 planes with one fp32 scale per
// (slot, kv head) row. Row r = slot * Hkv + head; position p is in slot cu_kv_slot(kv, p) (backend.h fd_kv_view).
typedef struct {
    const __nv_bfloat16 *k, *v; // bf16 layout (NULL for e4m3)
    const uint8_t *k8, *v8;     // e4m3 layout
    const float *ks, *vs;
    const int32_t *pages; // device page table, NULL: contiguous (slot = position)
    int page_shift;       // log2 of the page size in tokens
} cu_kv;

static __device__ __forceinline__ int64_t cu_kv_slot(const cu_kv &kv, int64_t p) {
    if (!kv.pages) return p;
    return ((int64_t)__ldg(kv.pages + (p >> kv.page_shift)) << kv.page_shift) | (p & ((1ll << kv.page_shift) - 1));
}

// The slots of the live keys [kt0, kend) of a key tile (kend - kt0 <= the page size): keys before `split` are in
// slot s0 + (key - kt0), the others in s1 + (key - split). One page-table read for a tile inside one page (every
// tile that starts on a multiple of its size), two for one that straddles pages; never one for a key >= kend
// (the sequence may not own that page).
typedef struct {
    int64_t s0, s1, split;
} cu_kv_tile;

static __device__ __forceinline__ cu_kv_tile cu_kv_tile_at(const cu_kv &kv, int64_t kt0, int64_t kend) {
    cu_kv_tile t;
    if (!kv.pages) {
        t.s0 = kt0, t.split = INT64_MAX, t.s1 = 0;
        return t;
    }
    t.s0 = cu_kv_slot(kv, kt0);
    t.split = (kt0 | ((1ll << kv.page_shift) - 1)) + 1; // the next page's first position
    t.s1 = t.split < kend ? cu_kv_slot(kv, t.split) : 0;
    return t;
}

static __device__ __forceinline__ int64_t cu_kv_tile_slot(const cu_kv_tile &t, int64_t kt0, int64_t kp) {
    return kp < t.split ? t.s0 + (kp - kt0) : t.s1 + (kp - t.split);
}

// Elements [c, c+2) of row r as bf16x2 (dequantised for e4m3).
static __device__ __forceinline__ __nv_bfloat162 cu_kv_pair(const __nv_bfloat16 *b, const uint8_t *b8, const float *sc,
                                                            int64_t r, int hd, int c) {
    if (b) return *(const __nv_bfloat162 *)(b + r * hd + c);
    __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(*(const __nv_fp8x2_storage_t *)(b8 + r * hd + c), __NV_E4M3);
    float2 f = __half22float2(*(const __half2 *)&h);
    const float s = sc[r];
    return __floats2bfloat162_rn(f.x * s, f.y * s);
}

// Elements [c, c+8) of row r as 8 bf16 in a uint4.
static __device__ __forceinline__ uint4 cu_kv_oct(const __nv_bfloat16 *b, const uint8_t *b8, const float *sc, int64_t r,
                                                  int hd, int c) {
    if (b) return *(const uint4 *)(b + r * hd + c);
    uint4 out;
    __nv_bfloat162 *o2 = (__nv_bfloat162 *)&out;
#pragma unroll
    for (int i = 0; i < 4; i++) o2[i] = cu_kv_pair(NULL, b8, sc, r, hd, c + 2 * i);
    return out;
}
cu_kv cu_kv_view(fd_backend *be, const fd_kv_view *view, int Hkv, int hd);

// The device the calling host thread last made current through cu_bind_device (-1: none yet). Rank r of a
// tensor-parallel group runs on device r, driven by a host thread of its own (engine_tp.c), and the main thread
// calls into every rank too (uploads, resets, reads): every entry point reaches its state through cu_of, which makes
// the backend's device current first: one compare per call when a process uses one device.
extern thread_local int cu_thread_device;
void cu_bind_device(int device);
static inline cu_impl *cu_of(fd_backend *be) {
    cu_impl *c = (cu_impl *)be->impl;
    if (c->device != cu_thread_device) cu_bind_device(c->device);
    return c;
}

// cuda_group.cu: group_join / all_reduce / lib_versions on a new backend; leaving the group at destroy.
void cu_group_install(fd_backend *be);
void cu_group_leave(fd_backend *be);

// Programmatic dependent launch. Every kernel starts with CU_PDL_ENTER (tests/test_cuda_sources.c checks it): wait
// until the grid before it in the stream has completed and its memory is visible (a no-op when this grid was
// launched without the attribute), then signal that the next grid may be scheduled (a no-op unless that grid was
// launched with the attribute). A kernel may do work that reads only constant data (weights) before the wait:
// k_gemv issues its first weight loads there.
// Only GEMV launches may carry the attribute (cu_launch_early, route pdl=gemv), and an early-launched kernel reads
// what its predecessor wrote only with coherent loads, never ld.global.nc (__ldg, or plain loads of a
// `const __restrict__` pointer, which the compiler may turn into .nc): .nc promises the data is read-only for the
// kernel's whole lifetime, so the load may legally be scheduled above the wait, and under PDL the predecessor is
// still writing it then. H200, session 4: every kernel launched early, decode non-deterministic; session 5: only
// GEMVs early but x read by __ldg, bench "NOT deterministic"; x read by ld.global.ca: see docs/perf-notes.md.
// tests/test_cuda_sources.c keeps __ldg out of the files that launch early.
static __device__ __forceinline__ void cu_pdl_enter() {
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" :::);
}
#define CU_PDL_ENTER() cu_pdl_enter()

void cu_after_launch(const char *file, int line);
// The one way kernels are launched: on the backend's stream; `early` (GEMV launches, cu_launch_early) carries the
// programmatic-serialization attribute under route pdl=gemv and is counted per route value. Launch-configuration
// errors are reported here (cu_after_launch), so call sites need no check of their own.
// A kernel template instance goes in parentheses (the macro would split its argument list at the commas).
template <typename... Params, typename... Args>
static inline void cu_launch_at(const char *file, int line, int early, fd_backend *be, void (*kernel)(Params...),
                                dim3 grid, dim3 block, size_t smem, Args... args) {
    cu_impl *c = cu_of(be);
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = early && c->pdl == CU_PDL_GEMV;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = c->stream;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    if (early) c->routes[CU_ROUTE_PDL].calls[c->pdl]++;
    cudaError_t e = cudaLaunchKernelEx(&cfg, kernel, ((Params)args)...);
    if (e != cudaSuccess)
        fd_panic(file, line, "CUDA kernel launch failed: %s (%s)", cudaGetErrorName(e), cudaGetErrorString(e));
    cu_after_launch(file, line);
}
#define cu_launch(be, kernel, grid, block, smem, ...)                                                                  \
    cu_launch_at(__FILE__, __LINE__, 0, be, kernel, grid, block, smem, __VA_ARGS__)
#define cu_launch_early(be, kernel, grid, block, smem, ...)                                                            \
    cu_launch_at(__FILE__, __LINE__, 1, be, kernel, grid, block, smem, __VA_ARGS__)

// Returns a device buffer of at least `bytes` for slot `slot` (contents undefined). Growth bumps graph_gen; during a
// recording it also marks the recording unusable (cu_capture_fail).
void *cu_scratch(fd_backend *be, int slot, size_t bytes);
// Marks the recording in progress unusable (no-op when not recording); graph_end then discards it.
void cu_capture_fail(fd_backend *be, const char *why);
// ---- cuda_graph.cu ----
void cu_install_graphs(fd_backend *be);
void cu_argmax_rows(fd_backend *be, int32_t *out_host, const float *logits_dev, int rows, int V);
void cu_topk_rows(fd_backend *be, int32_t *ids_host, float *vals_host, const float *logits_dev, int rows, int V, int K);
void cu_after_launch(const char *file, int line);
extern int cu_debug_sync;

// Stage timing of one op (FD_CUDA_PROFILE=1): CUDA events between the stages, printed at info level as
// "cuda prof OP: STAGE ms | ...". It synchronises at the end of the op, so never use it for headline timings.
#define CU_PROF_MAX 8
typedef struct {
    cudaEvent_t ev[CU_PROF_MAX + 1];
    const char *stage[CU_PROF_MAX];
    const char *op;
    int64_t size; // printed with the op (tokens)
    int n, on;
} cu_prof;
extern int cu_profile;
void cu_prof_begin(fd_backend *be, cu_prof *p, const char *op, int64_t size);
void cu_prof_mark(fd_backend *be, cu_prof *p, const char *stage); // ends the stage named `stage`
void cu_prof_end(fd_backend *be, cu_prof *p);

static inline unsigned cu_blocks(int64_t count, int threads) {
    return (unsigned)((count + threads - 1) / threads);
}

// Reads the fp32 device copy of a small weight (vectors are always uploaded as fp32).
const float *cu_wf32(const fd_weight *w);

// ---- gemm.cu ----
// 1 when a bf16-weight GEMM with reduction depth k splits its activations into two bf16 terms (route gemm_act).
static inline int cu_gemm_split(int gemm_act, int64_t k) {
    return gemm_act == CU_GEMM_BF16X2 || (gemm_act == CU_GEMM_AUTO && k <= CU_GEMM_AUTO_SPLIT_MAX_K);
}
void cu_matmul(fd_backend *be, void *out, const void *x, const fd_weight *W, int n, int out_f32);
void cu_matmul_multi(fd_backend *be, void *const outs[], const fd_weight *const Ws[], int count, const void *x, int n);
// Row-major out[n, m] (fp32) = x[n, k] (fp32) W[m, k]^T with W bf16 or fp32 on the device.
void cu_gemm_f32out(fd_backend *be, float *out, const float *x, const fd_weight *W, int n);
// A quantized-weight route's dispatch (gemm_fp8, gemm_int4: value 0 = gemv, 1 = dequant): gemv when use_gemv, else
// dequant into scratch slot W (bf16, or f32 under a bf16x2 gemm_act) and the dense path; counted per value.
void cu_gemm_quant(fd_backend *be, float *out, const float *x, const fd_weight *W, int n, int route, int use_gemv,
                   void (*gemv)(fd_backend *, float *, const float *, const fd_weight *, int),
                   void (*dequant)(fd_backend *, void *, const fd_weight *, int));

// ---- gemv.cu ----
// 1 when the tensor-core GEMV can run this call: bf16 W on the device, 1 <= n <= CU_GEMV_MAX_N, k % 8 == 0,
// W and x 16-byte aligned. Otherwise the caller takes cuBLASLt.
int cu_gemv_supported(const void *x, const fd_weight *W, int n);
// 1 when the GEMV can run an FP8 block-scaled W: on the device, 1 <= n <= 16, k a multiple of 16, block_cols of
// 64, block_rows of 32, W and x 16-byte aligned.
int cu_gemv_fp8_supported(const void *x, const fd_weight *W, int n);
// out[n, m] f32 = x[n, k] f32 . W[m, k]^T (bf16, or FP8 block-scaled), activations rounded per route gemm_act;
// row results are bitwise independent of n.
void cu_gemv(fd_backend *be, float *out, const float *x, const fd_weight *W, int n);
// 1 when cu_gemv_multi can run these `count` weights in one launch: each one GEMV-eligible, all of one format
// (bf16 or FP8), all the same k, count <= CU_GEMV_MAX_SEGS.
int cu_gemv_multi_supported(const void *x, const fd_weight *const Ws[], int count, int n);
// outs[i][n, Ws[i]->rows] = x . Ws[i]^T for every i, in one launch; each result is bitwise cu_gemv's.
void cu_gemv_multi(fd_backend *be, float *const outs[], const fd_weight *const Ws[], int count, const float *x, int n);
// Route gemm_fp8 = wgmma (gemv_fp8wg.cu, sm_90a): the W8A8 GEMV (x quantized to e4m3 per token and 128-group in the
// kernel, e4m3 wgmma, fp32 promotion every 128 k; the CPU reference is cpu_w8a8.c). Supported: FP8 weights with
// block_cols 128, block_rows % 64 == 0, k % 128 == 0, 1 <= n <= 16, 16-byte aligned bases; other calls run gemv
// by shape. The multi form fuses up to CU_GEMV_MAX_SEGS such weights of one k into one stream-K cut of their stacked
// tiles (batch invariant, within rounding of the single calls: not bitwise them).
int cu_gemv_fp8wg_supported(const void *x, const fd_weight *W, int n);
int cu_gemv_fp8wg_multi_supported(const void *x, const fd_weight *const Ws[], int count, int n);
void cu_gemv_fp8wg(fd_backend *be, float *out, const float *x, const fd_weight *W, int n);
void cu_gemv_fp8wg_multi(fd_backend *be, float *const outs[], const fd_weight *const Ws[], int count, const float *x,
                         int n);

// ---- gemv_fp8.cu ----
// dst [rows, cols] = the dequantized weight (fp8 x block scale): f32 (exact) or rounded to bf16.
void cu_fp8_dequant(fd_backend *be, void *dst, const fd_weight *W, int f32);

// ---- gemv_int4.cu ----
// Uploads a GPTQ / AWQ int4 weight: nibbles repacked for the GEMV, scales and zeros as one word per (group, row),
// a g_idx other than k / group_size kept behind them (a plain one is dropped: w->g_idx = NULL).
void cu_upload_int4(fd_backend *be, fd_weight *w);
// 1 when the int4 GEMV can run this call: 1 <= n <= 16, no act-order g_idx, group size 32, 64, a multiple of 128
// or one group, x 16-byte aligned.
int cu_gemv_int4_supported(const void *x, const fd_weight *W, int n);
void cu_gemv_int4(fd_backend *be, float *out, const float *x, const fd_weight *W, int n);
// The same for up to CU_GEMV_MAX_SEGS weights sharing x, k and grouping, in one launch (each result bitwise the
// separate call's).
int cu_gemv_int4_multi_supported(const void *x, const fd_weight *const Ws[], int count, int n);
void cu_gemv_int4_multi(fd_backend *be, float *const outs[], const fd_weight *const Ws[], int count, const float *x,
                        int n);
// matmul_multi's int4 members (fused when the GEMV takes them all), the rest through cu_matmul_multi; 0 (nothing
// run) when no weight is int4.
int cu_matmul_multi_int4(fd_backend *be, void *const outs[], const fd_weight *const Ws[], int count, const void *x,
                         int n);
// dst [rows, cols] = the dequantized weight s * (q - z): f32 (exact) or rounded to bf16.
void cu_int4_dequant(fd_backend *be, void *dst, const fd_weight *W, int f32);
// Route gemm_int4's dispatch (cu_gemm_f32out sends int4 weights here).
void cu_gemm_int4(fd_backend *be, float *out, const float *x, const fd_weight *W, int n);

// ---- norm_rope.cu ----
void cu_rmsnorm(fd_backend *be, void *out, const void *x, const fd_weight *w, int64_t n, int d, float eps,
                int plus_one);
void cu_add(fd_backend *be, void *x, const void *y, int64_t count);
void cu_silu_mul(fd_backend *be, void *out, const void *g, const void *u, int64_t count);
void cu_sigmoid_mul(fd_backend *be, void *x, const void *gate, int64_t count);
void cu_gated_rmsnorm(fd_backend *be, void *out, const void *x, const void *z, const fd_weight *w, int64_t rows, int dv,
                      float eps);
void cu_split_q_gate(fd_backend *be, void *q, void *gate, const void *qg, int n, int H, int hd);
void cu_rope(fd_backend *be, void *x, int n, int H, int hd, int rot_dim, float theta, int64_t pos0,
             const int64_t *pos_dev);
void cu_add_rmsnorm(fd_backend *be, void *out, void *x, const void *y, const fd_weight *w, int64_t n, int d, float eps,
                    int plus_one);
void cu_qk_norm_rope(fd_backend *be, void *q, void *gate, void *k, const void *qg, const fd_weight *q_norm,
                     const fd_weight *k_norm, int n, int H, int Hkv, int hd, int rot_dim, float theta, float eps,
                     int64_t pos0, const int64_t *pos_dev);
void cu_qk_norm_rope_tree(fd_backend *be, void *q, void *gate, void *k, const void *qg, const fd_weight *q_norm,
                          const fd_weight *k_norm, int n, int H, int Hkv, int hd, int rot_dim, float theta, float eps,
                          int64_t pos0, const int32_t *depth_dev);

// ---- conv.cu ----
void cu_conv1d_silu(fd_backend *be, void *out, const void *x, const fd_weight *w, float *conv_state, int n, int C,
                    int K, float *state_slots);
void cu_conv1d_silu_tree(fd_backend *be, void *out, const void *x, const fd_weight *w, const float *conv_state, int n,
                         int C, int K, float *state_slots, const int32_t *parent_dev);

// ---- gdn.cu ----
void cu_gdn_split_qkvz(fd_backend *be, void *qkv, void *z, void *b, void *a, const void *qkvz, const void *ba, int n,
                       int Hk, int Hv, int dk, int dv);
void cu_gdn_core(fd_backend *be, fd_gdn_route route, void *o, const void *qkv, const void *b, const void *a,
                 const fd_weight *A_log, const fd_weight *dt_bias, float *state, int n, int Hk, int Hv, int dk, int dv,
                 float *state_slots);
void cu_gdn_core_readonly(fd_backend *be, void *o, const void *qkv, const void *b, const void *a,
                          const fd_weight *A_log, const fd_weight *dt_bias, const float *state, int n, int Hk, int Hv,
                          int dk, int dv);
void cu_gdn_core_tree(fd_backend *be, void *o, const void *qkv, const void *b, const void *a, const fd_weight *A_log,
                      const fd_weight *dt_bias, const float *state, int n, int Hk, int Hv, int dk, int dv,
                      float *state_slots, const int32_t *parent_dev);

// ---- gdn_chunk.cu ----
// The chunked route of gdn_core (fp32 in/out, dk, dv <= 256); state [Hv, dk, dv] fp32 updated.
void cu_gdn_chunked(fd_backend *be, float *o, const float *qkv, const float *b, const float *a, const float *A_log,
                    const float *dt_bias, float *state, int n, int Hk, int Hv, int dk, int dv);
// ---- gdn_chunk_bf16.cu ----
// The same op with bf16 tensor-core operands (route gdn_chunk=bf16): same arguments, same state layout.
void cu_gdn_chunked_bf16(fd_backend *be, float *o, const float *qkv, const float *b, const float *a, const float *A_log,
                         const float *dt_bias, float *state, int n, int Hk, int Hv, int dk, int dv);

// ---- attention.cu ----
size_t cu_kv_bytes_per_token(fd_backend *be, int Hkv, int hd);
void cu_kv_store(fd_backend *be, const fd_kv_view *kv, const void *k, const void *v, int64_t pos0,
                 const int64_t *pos_dev, int n, int Hkv, int hd);
void cu_kv_copy(fd_backend *be, const fd_kv_view *dst, int64_t dst_pos, const fd_kv_view *src, int64_t src_pos,
                int64_t n, int Hkv, int hd);
void cu_attention(fd_backend *be, void *out, const void *q, const fd_kv_view *kv, int64_t pos0, const int64_t *pos_dev,
                  int n, int H, int Hkv, int hd, float scale, int causal);
void cu_attention_tree(fd_backend *be, void *out, const void *q, const fd_kv_view *kv, int64_t pos0, int n, int H,
                       int Hkv, int hd, float scale, const int32_t *parent_dev);

// ---- attention_mma.cu ----
// Runs the tensor-core kernel and returns 1, or returns 0 (nothing launched) when the shape is not covered.
int cu_attention_mma(fd_backend *be, float *out, const float *q, cu_kv kv, int64_t pos0, const int64_t *pos_dev, int n,
                     int H, int Hkv, int hd, float scale, int causal);

// ---- attention_wgmma.cu ----
// The same contract on wgmma (route attn_kernel=wgmma): returns 0 (nothing launched) unless head_dim is 256, the
// cache bf16 and the call has >= 64 query rows.
int cu_attention_wgmma(fd_backend *be, float *out, const float *q, cu_kv kv, int64_t pos0, const int64_t *pos_dev,
                       int n, int H, int Hkv, int hd, float scale, int causal);

// ---- attention_decode.cu ----
// n <= CU_DECODE_MAX_N and head_dim 64/128/256: runs the split-K decode kernel + combine and returns 1; else 0.
int cu_attention_decode(fd_backend *be, float *out, const float *q, cu_kv kv, int64_t pos0, const int64_t *pos_dev,
                        int n, int H, int Hkv, int hd, int64_t capacity, float scale, int causal);
// The same kernel with the tree mask (backend.h: attention_tree; n <= CU_TREE_MAX_NODES): node t's key sits at
// pos0 + t, and query t sees the keys before pos0 and those of its ancestors and itself. Returns 0 (nothing
// launched) for head dims other than 64/128/256.
int cu_attention_decode_tree(fd_backend *be, float *out, const float *q, cu_kv kv, int64_t pos0, int n, int H, int Hkv,
                             int hd, float scale, const int32_t *parent_dev);
// ---- attention_decode_warp.cu ----
// Route attn_decode=warp: the per-chunk partials of a decode / verify / tree call (the arguments of the blocked
// kernel: opart [n*H][zslots][hd], ml [n*H][zslots][2], max in log2 units; head_dim 64/128/256, n <= 64 for a
// tree); the caller runs cu_attn_combine after it.
void cu_decode_warp_chunks(fd_backend *be, float *opart, float *ml, const float *q, cu_kv kv, int64_t pos0,
                           const int64_t *pos_dev, int n, int H, int Hkv, int hd, int64_t capacity, int64_t zslots,
                           float scale, int causal, const int32_t *tree_parent);
// Merges split-K partials opart [n*H][zslots][hd], ml [n*H][zslots][2] (max, sum) over each row's live chunks
// z = 0 .. qpos / chunk (chunks on absolute boundaries), in increasing z; max in log2 units when log2_domain.
void cu_attn_combine(fd_backend *be, float *out, const float *opart, const float *ml, int64_t zslots, int64_t chunk,
                     int64_t pos0, const int64_t *pos_dev, int n, int H, int hd, int causal, int log2_domain);

// ---- lse.cu ----
void cu_logsumexp_rows(fd_backend *be, float *out_host, const float *logits_dev, int rows, int V);

// ---- tp_scan.cu ----
void cu_softmax_scan_rows(fd_backend *be, double *acc_host, int32_t *pick_host, const float *logits_dev, int rows,
                          int V, const float *mx, const float *temp, const double *div, const double *target);

// ---- moe.cu ----
void cu_moe(fd_backend *be, void *out, const void *x, const fd_moe_weights *mw, int n, int d);

// ---- dflash2.cu ----
// Sets be->dyn_conv and be->attention_window (the optional DFlash2 drafter ops).
void cu_install_dflash2(fd_backend *be);

// ---- sampling.cu ----
void cu_sample_rows(fd_backend *be, int32_t *out_host, const float *logits, int rows, int V,
                    const fd_sample_params *params, const double *uniforms);

#endif
