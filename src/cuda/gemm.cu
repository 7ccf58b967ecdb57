// GEMM through cuBLASLt: out[n, m] = x[n, k] W[m, k]^T, fp32 accumulation, fp32 output.
// bf16 weights, route gemm_act:
//   bf16   (default) the fp32 activations are rounded to bf16 in a scratch pass (n*k*6 bytes, small next to the
//          m*k*2 weight read) and one bf16 GEMM runs: the numerics contract's bf16 activations.
//   bf16x2 x = hi + lo with hi = bf16(x), lo = bf16(x - hi); two GEMMs (the second accumulates, beta = 1), so the
//          activation keeps ~16 mantissa bits: error ~1e-5 instead of ~1e-3 per GEMM, at twice the GEMM cost
//          (H200, 27B: prefill -27 %; the small-n GEMV +13 % time at n = 1, decode 60.6 -> 53.6 tok/s; perf-notes).
//   auto   (default) bf16x2 when k <= CU_GEMM_AUTO_SPLIT_MAX_K (256), else bf16. No published geometry has a
//          GEMM that shallow (hidden >= 1024, expert width >= 512), so real models run bf16 exactly; the toy and
//          test models, whose 64-wide residual streams bf16 rounding moves the most, run ~fp32-exact (their GEMMs
//          are a few microseconds either way). k is shared by every weight of a fused launch: fused == separate and
//          batch invariance hold.
// fp32 weights (small tensors; fp16/fp32 checkpoints) run as a true fp32 GEMM (CUBLAS_COMPUTE_32F: no TF32).
// Route gemm_small=gemv (default): bf16-weight calls with n <= 16 rows take the tensor-core GEMV of gemv.cu
// instead (same gemm_act numerics, no conversion pass, results independent of n).
#include <stdint.h>

#include "cuda/cuda_common.h"

// Scalar on purpose: x may be any float offset into an activation buffer, and coalesced 4-byte loads already
// run this pass at memory speed. lo (optional) receives the rounding remainder, rounded to bf16.
__global__ void k_f32_to_bf16(__nv_bfloat16 *dst, __nv_bfloat16 *lo, const float *src, int64_t count) {
    CU_PDL_ENTER();
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += (int64_t)gridDim.x * blockDim.x) {
        float v = src[i];
        __nv_bfloat16 h = __float2bfloat16_rn(v);
        dst[i] = h;
        if (lo) lo[i] = __float2bfloat16_rn(v - __bfloat162float(h));
    }
}

static int ptr_align(const void *p) {
    uintptr_t a = (uintptr_t)p;
    int al = 256;
    while (al > 1 && (a % (uintptr_t)al) != 0) al >>= 1;
    return al;
}

// Heuristic results cached per problem (shape, operand type, output alignment): the query costs tens of
// microseconds, more than a decode-sized GEMM.
typedef struct {
    int m, n, k, bf16, align_c, align_b, valid;
    cublasLtMatmulAlgo_t algo;
} algo_entry;
#define ALGO_CACHE 128
static algo_entry g_algo_cache[ALGO_CACHE];
static int g_algo_next;

static void gemm_run(fd_backend *be, float *out, const void *xin, const void *W, int bf16, int m, int n, int k,
                     float beta) {
    cu_impl *c = cu_of(be);
    cudaDataType_t ab = bf16 ? CUDA_R_16BF : CUDA_R_32F;
    cublasLtMatmulDesc_t op;
    FD_CUBLAS_CHECK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    FD_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    FD_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    // Column-major view: C[m, n] = op(A)[m, k] B[k, n] with A = W stored [k, m] (ld k), B = x stored [k, n].
    cublasLtMatrixLayout_t la, lb, lc;
    FD_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&la, ab, k, m, k));
    FD_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&lb, ab, k, n, k));
    FD_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, m, n, m));

    int align_c = ptr_align(out), align_b = ptr_align(xin);
    algo_entry *hit = NULL;
    for (int i = 0; i < ALGO_CACHE; i++) {
        algo_entry *e = &g_algo_cache[i];
        if (e->valid && e->m == m && e->n == n && e->k == k && e->bf16 == bf16 && e->align_c == align_c &&
            e->align_b == align_b) {
            hit = e;
            break;
        }
    }
    if (!hit) {
        cublasLtMatmulPreference_t pref;
        FD_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
        FD_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                             &c->lt_workspace_bytes, sizeof c->lt_workspace_bytes));
        uint32_t aa = 256, abb = (uint32_t)align_b, ac = (uint32_t)align_c;
        FD_CUBLAS_CHECK(
            cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &aa, sizeof aa));
        FD_CUBLAS_CHECK(
            cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &abb, sizeof abb));
        FD_CUBLAS_CHECK(
            cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &ac, sizeof ac));
        FD_CUBLAS_CHECK(
            cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &ac, sizeof ac));
        cublasLtMatmulHeuristicResult_t res;
        int got = 0;
        FD_CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(c->lt, op, la, lb, lc, lc, pref, 1, &res, &got));
        FD_CHECK(got > 0, "cuBLASLt found no algorithm for m=%d n=%d k=%d", m, n, k);
        FD_CUBLAS_CHECK(cublasLtMatmulPreferenceDestroy(pref));
        hit = &g_algo_cache[g_algo_next];
        g_algo_next = (g_algo_next + 1) % ALGO_CACHE;
        hit->m = m, hit->n = n, hit->k = k, hit->bf16 = bf16, hit->align_c = align_c, hit->align_b = align_b;
        hit->algo = res.algo;
        hit->valid = 1;
    }
    float alpha = 1.f;
    FD_CUBLAS_CHECK(cublasLtMatmul(c->lt, op, &alpha, W, la, xin, lb, &beta, out, lc, out, lc, &hit->algo,
                                   c->lt_workspace, c->lt_workspace_bytes, c->stream));
    FD_CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(la));
    FD_CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(lb));
    FD_CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(lc));
    FD_CUBLAS_CHECK(cublasLtMatmulDescDestroy(op));
    if (cu_debug_sync) FD_CUDA_CHECK(cudaStreamSynchronize(c->stream));
}

// The quantized-weight routes (gemm_fp8, gemm_int4; value 0 = gemv, 1 = dequant for both): the format's GEMV for
// small n (use_gemv), else the weight dequantized in scratch slot W (its own: an op calling matmul keeps its
// buffers in the others, e.g. moe.cu) to bf16, or to f32 under a bf16x2 gemm_act, and the dense path (which
// counts gemm_act and gemm_small itself).
void cu_gemm_quant(fd_backend *be, float *out, const float *x, const fd_weight *W, int n, int route, int use_gemv,
                   void (*gemv)(fd_backend *, float *, const float *, const fd_weight *, int),
                   void (*dequant)(fd_backend *, void *, const fd_weight *, int)) {
    cu_impl *c = cu_of(be);
    c->routes[route].calls[use_gemv ? 0 : 1]++;
    c->routes[route].tokens[use_gemv ? 0 : 1] += n;
    const int split = cu_gemm_split(c->gemm_act, W->cols);
    if (use_gemv) {
        c->routes[CU_ROUTE_GEMM_ACT].calls[split]++;
        c->routes[CU_ROUTE_GEMM_ACT].tokens[split] += n;
        gemv(be, out, x, W, n);
        if (cu_debug_sync) FD_CUDA_CHECK(cudaStreamSynchronize(c->stream));
        return;
    }
    // f32 where gemm_act keeps activations ~fp32 (bf16x2), so the dequantized weight is not rounded either
    fd_weight tmp = *W;
    tmp.fmt = FD_WFMT_DENSE;
    tmp.dev = cu_scratch(be, CU_SCR_W, (size_t)(W->rows * W->cols) * (split ? 4 : 2));
    tmp.dev_dtype = split ? FD_F32 : FD_BF16;
    tmp.dev_scale = NULL;
    tmp.g_idx = NULL;
    dequant(be, tmp.dev, W, split);
    if (split) { // the fp32 GEMM counts under no gemm_act value of its own: count the split the route chose
        c->routes[CU_ROUTE_GEMM_ACT].calls[1]++;
        c->routes[CU_ROUTE_GEMM_ACT].tokens[1] += n;
    }
    cu_gemm_f32out(be, out, x, &tmp, n);
}

// FP8 block-scaled weights (route gemm_fp8): the GEMV of gemv.cu, or the dequant route.
// Under wgmma the W8A8 kernel (gemv_fp8wg.cu) runs what it supports, counted as wgmma (it reads x in fp32 and
// quantizes it itself, so no gemm_act value applies); other shapes take the gemv / dequant rule below.
static void gemm_fp8(fd_backend *be, float *out, const float *x, const fd_weight *W, int n) {
    cu_impl *c = cu_of(be);
    if (c->gemm_fp8 == CU_GEMM_FP8_WGMMA && cu_gemv_fp8wg_supported(x, W, n)) {
        c->routes[CU_ROUTE_GEMM_FP8].calls[CU_GEMM_FP8_WGMMA]++;
        c->routes[CU_ROUTE_GEMM_FP8].tokens[CU_GEMM_FP8_WGMMA] += n;
        cu_gemv_fp8wg(be, out, x, W, n);
        if (cu_debug_sync) FD_CUDA_CHECK(cudaStreamSynchronize(c->stream));
        return;
    }
    const int gemv = c->gemm_fp8 != CU_GEMM_FP8_DEQUANT && cu_gemv_fp8_supported(x, W, n);
    cu_gemm_quant(be, out, x, W, n, CU_ROUTE_GEMM_FP8, gemv, cu_gemv, cu_fp8_dequant);
}

void cu_gemm_f32out(fd_backend *be, float *out, const float *x, const fd_weight *W, int n) {
    if (n <= 0) return;
    FD_CHECK(W->dev, "weight %s not uploaded", W->name ? W->name : "?");
    if (W->fmt == FD_WFMT_FP8_BLOCK) {
        gemm_fp8(be, out, x, W, n);
        return;
    }
    if (fd_wfmt_is_int4(W->fmt)) { // route gemm_int4 (gemv_int4.cu)
        cu_gemm_int4(be, out, x, W, n);
        return;
    }
    int m = (int)W->rows, k = (int)W->cols;
    if (W->dev_dtype == FD_BF16) {
        cu_impl *c = cu_of(be);
        int64_t cnt = (int64_t)n * k;
        int split = cu_gemm_split(c->gemm_act, k);
        c->routes[CU_ROUTE_GEMM_ACT].calls[split]++;
        c->routes[CU_ROUTE_GEMM_ACT].tokens[split] += n;
        // Small n: the tensor-core GEMV reads x in fp32 itself (no conversion pass) and is batch invariant.
        // n > 16 rows, or a shape/alignment it does not take (k % 8, unaligned x), run cuBLASLt (by shape).
        int small = c->gemm_small == CU_GEMM_SMALL_GEMV && cu_gemv_supported(x, W, n);
        c->routes[CU_ROUTE_GEMM_SMALL].calls[small ? CU_GEMM_SMALL_GEMV : CU_GEMM_SMALL_CUBLAS]++;
        c->routes[CU_ROUTE_GEMM_SMALL].tokens[small ? CU_GEMM_SMALL_GEMV : CU_GEMM_SMALL_CUBLAS] += n;
        if (small) {
            cu_gemv(be, out, x, W, n);
            if (cu_debug_sync) FD_CUDA_CHECK(cudaStreamSynchronize(c->stream));
            return;
        }
        int64_t lo_off = (cnt + 127) / 128 * 128; // keep the second operand 256-byte aligned like the first
        __nv_bfloat16 *xb = (__nv_bfloat16 *)cu_scratch(be, CU_SCR_A, (size_t)(split ? lo_off + cnt : cnt) * 2);
        __nv_bfloat16 *lo = split ? xb + lo_off : NULL;
        unsigned grid = cu_blocks(cnt, 256) < 65535u ? cu_blocks(cnt, 256) : 65535u;
        cu_launch(be, k_f32_to_bf16, grid, 256, 0, xb, lo, x, cnt);
        gemm_run(be, out, xb, W->dev, 1, m, n, k, 0.f);
        if (split) gemm_run(be, out, lo, W->dev, 1, m, n, k, 1.f);
    } else {
        FD_CHECK(W->dev_dtype == FD_F32);
        gemm_run(be, out, x, W->dev, 0, m, n, k, 0.f);
    }
}

void cu_matmul(fd_backend *be, void *out, const void *x, const fd_weight *W, int n, int out_f32) {
    (void)out_f32; // activations are fp32, so both outputs are fp32
    cu_gemm_f32out(be, (float *)out, (const float *)x, W, n);
}

// `count` GEMMs of the same x. Route gemm_small=gemv with every weight gemv-eligible and the same k: one fused
// launch (cu_gemv_multi; each result bitwise the separate call's). Otherwise one call per weight as above.
// Every weight is counted as one call under the route value that ran it.
void cu_matmul_multi(fd_backend *be, void *const outs[], const fd_weight *const Ws[], int count, const void *x, int n) {
    cu_impl *c = cu_of(be);
    if (n <= 0 || count <= 0) return;
    if (cu_matmul_multi_int4(be, outs, Ws, count, x, n)) return; // int4 members fused (gemv_int4.cu), the rest here
    // bf16 groups under gemm_small=gemv, FP8 groups under gemm_fp8=gemv (cu_gemv_multi_supported: one format)
    const int fp8 = Ws[0]->fmt == FD_WFMT_FP8_BLOCK;
    if (fp8 && count > 1 && c->gemm_fp8 == CU_GEMM_FP8_WGMMA && cu_gemv_fp8wg_multi_supported(x, Ws, count, n)) {
        c->routes[CU_ROUTE_GEMM_FP8].calls[CU_GEMM_FP8_WGMMA] += count;
        c->routes[CU_ROUTE_GEMM_FP8].tokens[CU_GEMM_FP8_WGMMA] += (int64_t)n * count;
        cu_gemv_fp8wg_multi(be, (float *const *)outs, Ws, count, (const float *)x, n);
        if (cu_debug_sync) FD_CUDA_CHECK(cudaStreamSynchronize(c->stream));
        return;
    }
    const int route_ok = fp8 ? c->gemm_fp8 == CU_GEMM_FP8_GEMV : c->gemm_small == CU_GEMM_SMALL_GEMV;
    if (count > 1 && route_ok && cu_gemv_multi_supported(x, Ws, count, n)) {
        const int split = cu_gemm_split(c->gemm_act, Ws[0]->cols); // one k for the whole group
        c->routes[CU_ROUTE_GEMM_ACT].calls[split] += count;
        c->routes[CU_ROUTE_GEMM_ACT].tokens[split] += (int64_t)n * count;
        const int route = fp8 ? CU_ROUTE_GEMM_FP8 : CU_ROUTE_GEMM_SMALL;
        const int value = fp8 ? (int)CU_GEMM_FP8_GEMV : (int)CU_GEMM_SMALL_GEMV;
        c->routes[route].calls[value] += count;
        c->routes[route].tokens[value] += (int64_t)n * count;
        cu_gemv_multi(be, (float *const *)outs, Ws, count, (const float *)x, n);
        if (cu_debug_sync) FD_CUDA_CHECK(cudaStreamSynchronize(c->stream));
        return;
    }
    for (int i = 0; i < count; i++) cu_gemm_f32out(be, (float *)outs[i], (const float *)x, Ws[i], n);
}
