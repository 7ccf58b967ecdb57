// The CUDA backend object: memory entry points, weight upload (dtype conversion on the device), embedding
// lookup, scratch buffers, and the table of function pointers that wires in the op-family files.
#include <stdlib.h>
#include <string.h>

#include "cuda/cuda.h"
#include "cuda/cuda_common.h" // first: wraps backend.h in extern "C"

int cu_debug_sync = 0;
int cu_profile = 0;
thread_local int cu_thread_device = -1;

void cu_bind_device(int device) {
    FD_CUDA_CHECK(cudaSetDevice(device));
    cu_thread_device = device;
}

extern "C" int fd_cuda_device_count(void) {
    int count = 0;
    return cudaGetDeviceCount(&count) == cudaSuccess ? count : 0; // no driver / no device: 0, not a panic
}

void cu_prof_begin(fd_backend *be, cu_prof *p, const char *op, int64_t size) {
    p->on = cu_profile, p->n = 0, p->op = op, p->size = size;
    if (!p->on) return;
    FD_CUDA_CHECK(cudaEventCreate(&p->ev[0]));
    FD_CUDA_CHECK(cudaEventRecord(p->ev[0], cu_of(be)->stream));
}
void cu_prof_mark(fd_backend *be, cu_prof *p, const char *stage) {
    if (!p->on || p->n >= CU_PROF_MAX) return;
    p->stage[p->n] = stage;
    FD_CUDA_CHECK(cudaEventCreate(&p->ev[p->n + 1]));
    FD_CUDA_CHECK(cudaEventRecord(p->ev[p->n + 1], cu_of(be)->stream));
    p->n++;
}
void cu_prof_end(fd_backend *be, cu_prof *p) {
    (void)be;
    if (!p->on) return;
    FD_CUDA_CHECK(cudaEventSynchronize(p->ev[p->n]));
    char line[512];
    int len = snprintf(line, sizeof line, "cuda prof %s n=%lld:", p->op, (long long)p->size);
    for (int i = 0; i < p->n && len < (int)sizeof line; i++) {
        float ms = 0;
        FD_CUDA_CHECK(cudaEventElapsedTime(&ms, p->ev[i], p->ev[i + 1]));
        len += snprintf(line + len, sizeof line - (size_t)len, " %s %.3f ms |", p->stage[i], ms);
    }
    FD_INFO("%s", line);
    for (int i = 0; i <= p->n; i++) FD_CUDA_CHECK(cudaEventDestroy(p->ev[i]));
}

void cu_after_launch(const char *file, int line) {
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess && cu_debug_sync) e = cudaDeviceSynchronize();
    if (e != cudaSuccess)
        fd_panic(file, line, "CUDA kernel launch failed: %s (%s)", cudaGetErrorName(e), cudaGetErrorString(e));
}

void *cu_scratch(fd_backend *be, int slot, size_t bytes) {
    cu_impl *c = cu_of(be);
    FD_CHECK(slot >= 0 && slot < CU_SCR_COUNT);
    if (bytes == 0) bytes = 256;
    if (c->scratch_bytes[slot] < bytes) {
        if (c->capturing) {
            // A recording may not synchronise or free: keep the old buffer until graph_end (which discards this
            // recording; the caller re-runs the ops eagerly).
            cu_capture_fail(be, "a scratch buffer grew");
            FD_CHECK(c->n_deferred < CU_DEFERRED_MAX, "scratch grew %d times in one recording", c->n_deferred);
            if (c->scratch[slot]) c->deferred_free[c->n_deferred++] = c->scratch[slot];
        } else if (c->scratch[slot]) {
            // An earlier op may still be reading the old buffer: drain the stream before freeing it.
            FD_CUDA_CHECK(cudaStreamSynchronize(c->stream));
            FD_CUDA_CHECK(cudaFree(c->scratch[slot]));
        }
        if (c->scratch[slot]) c->graph_gen++; // graphs recorded earlier point at the old buffer
        size_t want = bytes + bytes / 4;      // grow geometrically-ish to avoid re-allocating on every new shape
        FD_CUDA_CHECK(cudaMalloc(&c->scratch[slot], want));
        c->scratch_bytes[slot] = want;
    }
    return c->scratch[slot];
}

const float *cu_wf32(const fd_weight *w) {
    FD_CHECK(w && w->dev, "weight %s not uploaded", w && w->name ? w->name : "?");
    FD_CHECK(w->dev_dtype == FD_F32, "weight %s: expected an fp32 device copy, have %s", w->name ? w->name : "?",
             fd_dtype_name(w->dev_dtype));
    return (const float *)w->dev;
}

// ---- memory ----
static void *cu_alloc(fd_backend *be, size_t bytes) {
    void *p = NULL;
    FD_CUDA_CHECK(cudaMalloc(&p, bytes ? bytes : 1));
    FD_CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, cu_of(be)->stream));
    return p;
}
static void cu_free(fd_backend *be, void *p) {
    if (!p) return;
    FD_CUDA_CHECK(cudaStreamSynchronize(cu_of(be)->stream)); // queued ops may still use p
    FD_CUDA_CHECK(cudaFree(p));
}
static void cu_zero(fd_backend *be, void *p, size_t bytes) {
    FD_CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, cu_of(be)->stream));
}
static void cu_to_device(fd_backend *be, void *dst, const void *src, size_t bytes) {
    // From pageable memory the copy is staged before the call returns, so `src` may be reused at once.
    FD_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, cu_of(be)->stream));
}
static void cu_to_host(fd_backend *be, void *dst, const void *src, size_t bytes) {
    cu_impl *c = cu_of(be);
    FD_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, c->stream));
    FD_CUDA_CHECK(cudaStreamSynchronize(c->stream));
}
static void cu_copy(fd_backend *be, void *dst, const void *src, size_t bytes) {
    FD_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, cu_of(be)->stream));
}
// Up to CU_COPY_BATCH copies in one launch (the speculative commit's ~100 state copies were as many
// cudaMemcpyAsync calls, ~4 us each). Block row y copies entry y with gridDim.x blocks striding over it, 16 bytes
// a thread where the entry's pointers and size allow, else byte by byte.
#define CU_COPY_BATCH 64
struct cu_copy_list {
    void *dst[CU_COPY_BATCH];
    const void *src[CU_COPY_BATCH];
    size_t bytes[CU_COPY_BATCH];
};
__global__ void k_copy_batch(const __grid_constant__ cu_copy_list l) {
    CU_PDL_ENTER();
    const int e = blockIdx.y;
    const size_t n = l.bytes[e], tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x,
                 stride = (size_t)gridDim.x * blockDim.x;
    if ((((uintptr_t)l.dst[e] | (uintptr_t)l.src[e] | n) & 15) == 0) {
        uint4 *d = (uint4 *)l.dst[e];
        const uint4 *s = (const uint4 *)l.src[e];
        for (size_t i = tid; i < n / 16; i += stride) d[i] = s[i];
    } else {
        char *d = (char *)l.dst[e];
        const char *s = (const char *)l.src[e];
        for (size_t i = tid; i < n; i += stride) d[i] = s[i];
    }
}
static void cu_copy_batch(fd_backend *be, void *const *dst, const void *const *src, const size_t *bytes, int count) {
    for (int i0 = 0; i0 < count; i0 += CU_COPY_BATCH) {
        cu_copy_list l;
        const int m = count - i0 < CU_COPY_BATCH ? count - i0 : CU_COPY_BATCH;
        size_t most = 0;
        for (int i = 0; i < m; i++) {
            l.dst[i] = dst[i0 + i], l.src[i] = src[i0 + i], l.bytes[i] = bytes[i0 + i];
            most = bytes[i0 + i] > most ? bytes[i0 + i] : most;
        }
        if (!most) continue;
        // enough blocks for the largest entry at 16 bytes a thread, at most 2 waves of the GPU over all rows
        const unsigned per = (unsigned)((most / 16 + 255) / 256);
        const unsigned cap = (unsigned)(2 * cu_of(be)->num_sms * 8 / m + 1);
        cu_launch(be, k_copy_batch, dim3(per < cap ? per : cap, (unsigned)m), 256, 0, l);
    }
}
static void cu_copy_rows(fd_backend *be, void *dst, size_t dst_stride, const void *src, size_t src_stride, int64_t rows,
                         size_t row_bytes) {
    if (rows <= 0 || row_bytes == 0) return;
    FD_CUDA_CHECK(cudaMemcpy2DAsync(dst, dst_stride, src, src_stride, row_bytes, (size_t)rows, cudaMemcpyDeviceToDevice,
                                    cu_of(be)->stream));
}
static void cu_sync(fd_backend *be) {
    FD_CUDA_CHECK(cudaStreamSynchronize(cu_of(be)->stream));
}

// ---- weights ----
// src dtype -> fp32 or bf16, elementwise.
__global__ void k_convert(void *dst, int dst_bf16, const void *src, int src_dtype, int64_t count) {
    CU_PDL_ENTER();
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= count) return;
    float v;
    if (src_dtype == FD_F32)
        v = ((const float *)src)[i];
    else if (src_dtype == FD_BF16)
        v = __bfloat162float(((const __nv_bfloat16 *)src)[i]);
    else
        v = __half2float(((const __half *)src)[i]);
    if (dst_bf16)
        ((__nv_bfloat16 *)dst)[i] = __float2bfloat16_rn(v);
    else
        ((float *)dst)[i] = v;
}

// Device dtype of a weight:
//  - vectors, conv kernels ([C, K] with small K) and single-row gates: fp32 (our own fp32 kernels read them);
//  - bf16 matrices: bf16, for cuBLASLt (every published checkpoint);
//  - fp16/fp32 matrices: fp32, so the values stay exact (bf16 would drop 3 or 16 mantissa bits and change the
//    model); they run through the fp32 GEMM, which is slow, so this is logged once. Only test fixtures do this.
// FP8 block-scaled weights: the e4m3 bytes as they are, the scales as f32 (converted on the device).
static void cu_upload_fp8(fd_backend *be, fd_weight *w) {
    cu_impl *c = cu_of(be);
    const size_t bytes = (size_t)(w->rows * w->cols);
    const int64_t ns = fd_weight_scale_rows(w) * w->scale_cols;
    FD_CUDA_CHECK(cudaMalloc(&w->dev, bytes));
    FD_CUDA_CHECK(cudaMemcpyAsync(w->dev, w->data, bytes, cudaMemcpyHostToDevice, c->stream));
    FD_CUDA_CHECK(cudaMalloc(&w->dev_scale, (size_t)ns * sizeof(float)));
    if (w->scale_dtype == FD_F32) {
        FD_CUDA_CHECK(cudaMemcpyAsync(w->dev_scale, w->scale, (size_t)ns * 4, cudaMemcpyHostToDevice, c->stream));
    } else {
        FD_CHECK(w->scale_dtype == FD_BF16 || w->scale_dtype == FD_F16, "weight %s: scale dtype %s",
                 w->name ? w->name : "?", fd_dtype_name(w->scale_dtype));
        const size_t sb = (size_t)ns * 2;
        void *tmp = cu_scratch(be, CU_SCR_H, sb);
        FD_CUDA_CHECK(cudaMemcpyAsync(tmp, w->scale, sb, cudaMemcpyHostToDevice, c->stream));
        cu_launch(be, k_convert, cu_blocks(ns, 256), 256, 0, w->dev_scale, 0, (const void *)tmp, (int)w->scale_dtype,
                  ns);
    }
    FD_CUDA_CHECK(cudaStreamSynchronize(c->stream));
    w->dev_dtype = FD_F8E4M3;
}

static void cu_upload_weight(fd_backend *be, fd_weight *w) {
    cu_impl *c = cu_of(be);
    static int warned;
    FD_CHECK(w->data, "weight %s has no data", w->name ? w->name : "?");
    if (w->fmt == FD_WFMT_FP8_BLOCK) {
        cu_upload_fp8(be, w);
        return;
    }
    if (fd_wfmt_is_int4(w->fmt)) { // GPTQ / AWQ: repacked at 4 bits (gemv_int4.cu)
        cu_upload_int4(be, w);
        return;
    }
    FD_CHECK(w->fmt == FD_WFMT_DENSE, "weight %s: format %s unsupported", w->name ? w->name : "?",
             fd_wfmt_name(w->fmt));
    FD_CHECK(w->dtype == FD_F32 || w->dtype == FD_BF16 || w->dtype == FD_F16, "weight %s: dtype %s unsupported",
             w->name ? w->name : "?", fd_dtype_name(w->dtype));
    int64_t count = w->rows * (w->cols > 0 ? w->cols : 1);
    int small = w->cols < 16 || w->rows == 1;
    fd_dtype want = small || w->dtype != FD_BF16 ? FD_F32 : FD_BF16;
    if (!small && want == FD_F32 && !warned) {
        warned = 1;
        FD_WARN("cuda: %s matrices (first: %s) kept in fp32 on the GPU: exact, but the GEMMs run in fp32",
                fd_dtype_name(w->dtype), w->name ? w->name : "?");
    }
    size_t src_bytes = (size_t)count * fd_dtype_size(w->dtype);
    void *dst = NULL;
    FD_CUDA_CHECK(cudaMalloc(&dst, (size_t)count * fd_dtype_size(want)));
    if (w->dtype == want) {
        FD_CUDA_CHECK(cudaMemcpyAsync(dst, w->data, src_bytes, cudaMemcpyHostToDevice, c->stream));
    } else {
        void *tmp = cu_scratch(be, CU_SCR_H, src_bytes);
        FD_CUDA_CHECK(cudaMemcpyAsync(tmp, w->data, src_bytes, cudaMemcpyHostToDevice, c->stream));
        cu_launch(be, k_convert, cu_blocks(count, 256), 256, 0, dst, want == FD_BF16, tmp, (int)w->dtype, count);
    }
    // The host copy may be an mmap that the caller unmaps later; finish the transfer now.
    FD_CUDA_CHECK(cudaStreamSynchronize(c->stream));
    w->dev = dst;
    w->dev_dtype = want;
}

static void cu_release_weight(fd_backend *be, fd_weight *w) {
    cu_impl *c = cu_of(be);
    FD_CUDA_CHECK(cudaStreamSynchronize(c->stream)); // no kernel may still read it
    FD_CUDA_CHECK(cudaFree(w->dev));
    w->dev = NULL;
    if (w->dev_scale) FD_CUDA_CHECK(cudaFree(w->dev_scale));
    w->dev_scale = NULL;
    c->graph_gen++; // a recorded graph may read this weight's old address
}

// ---- embedding: out[n, d] f32 = table[ids[i]] ----
// ids are device memory, read when the kernel runs (a replayed CUDA graph embeds the current step's ids); the
// engine checks their range on the host before copying them in. An id outside the table still never reads out of
// bounds: its row is written as zeros.
__global__ void k_embed(float *out, const void *table, int bf16, const int32_t *ids, int n, int d, int64_t rows) {
    CU_PDL_ENTER();
    for (int i = blockIdx.y; i < n; i += gridDim.y) { // grid.y is capped at 65535
        int64_t row = ids[i];
        const int ok = row >= 0 && row < rows;
        for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < d; j += gridDim.x * blockDim.x) {
            float v = !ok    ? 0.f
                      : bf16 ? __bfloat162float(((const __nv_bfloat16 *)table)[row * d + j])
                             : ((const float *)table)[row * d + j];
            out[(int64_t)i * d + j] = v;
        }
    }
}

static void cu_embed(fd_backend *be, void *out, const fd_weight *table, const int32_t *ids_dev, int n) {
    cu_impl *c = cu_of(be);
    if (n <= 0) return;
    int d = (int)table->cols;
    dim3 grid(cu_blocks(d, 256) < 8 ? cu_blocks(d, 256) : 8, n < 65535 ? (unsigned)n : 65535u);
    cu_launch(be, k_embed, grid, 256, 0, (float *)out, table->dev, table->dev_dtype == FD_BF16, ids_dev, n, d,
              table->rows);
}

static void cu_to_f32(fd_backend *be, float *out, const void *x, int64_t count) {
    cu_to_host(be, out, x, (size_t)count * sizeof(float)); // activations are fp32 already
}

static void cu_destroy(fd_backend *be) {
    cu_impl *c = cu_of(be);
    FD_CUDA_CHECK(cudaStreamSynchronize(c->stream));
    cu_group_leave(be); // its communicator uses the stream's device: before the stream goes
    for (int i = 0; i < CU_SCR_COUNT; i++)
        if (c->scratch[i]) FD_CUDA_CHECK(cudaFree(c->scratch[i]));
    for (int i = 0; i < c->n_rope_tab; i++) FD_CUDA_CHECK(cudaFree(c->rope_tab[i].inv));
    if (c->argmax_host) FD_CUDA_CHECK(cudaFreeHost(c->argmax_host));
    if (c->topk_host) FD_CUDA_CHECK(cudaFreeHost(c->topk_host));
    if (c->lt_workspace) FD_CUDA_CHECK(cudaFree(c->lt_workspace));
    if (c->gemv_counters) FD_CUDA_CHECK(cudaFree(c->gemv_counters));
    FD_CUBLAS_CHECK(cublasLtDestroy(c->lt));
    FD_CUDA_CHECK(cudaStreamDestroy(c->stream));
    free(c);
    free(be);
}

// ---- routes ----
// By name over the route table built in fd_backend_cuda_create (the same values `--route` selects from).
static fd_route *route_find(fd_backend *be, const char *route) {
    for (int i = 0; i < be->n_routes; i++)
        if (!strcmp(be->routes[i].name, route)) return &be->routes[i];
    return NULL;
}

extern "C" int fd_cuda_set_route(fd_backend *be, const char *route, const char *value) {
    fd_route *r = route_find(be, route);
    if (!r)
        return fd_error_set("unknown cuda route '%s' (known: gemm_act, attn_kernel, kv, gemm_small, pdl, gemm_fp8, "
                            "gemm_int4, gdn_chunk, attn_decode)",
                            route);
    char known[64] = "";
    for (int i = 0; r->values[i]; i++) {
        if (!strcmp(value, r->values[i])) {
            if (r->locked && i != *r->sel)
                return fd_error_set("cuda route %s is fixed at '%s' once caches exist", route, r->values[*r->sel]);
            *r->sel = i;
            return 0;
        }
        snprintf(known + strlen(known), sizeof known - strlen(known), "%s%s", i ? ", " : "", r->values[i]);
    }
    return fd_error_set("cuda route %s: '%s' is not one of %s", route, value, known);
}

extern "C" const char *fd_cuda_route(fd_backend *be, const char *route) {
    const fd_route *r = route_find(be, route);
    return r ? r->values[*r->sel] : NULL;
}

extern "C" fd_backend *fd_backend_cuda_create(int device) {
    int count = 0;
    FD_CUDA_CHECK(cudaGetDeviceCount(&count));
    FD_CHECK(device >= 0 && device < count, "CUDA device %d requested, %d present", device, count);
    cu_bind_device(device);
    const char *dbg = getenv("FD_CUDA_SYNC");
    cu_debug_sync = dbg && dbg[0] == '1';
    const char *prof = getenv("FD_CUDA_PROFILE");
    cu_profile = prof && prof[0] == '1';

    cu_impl *c = (cu_impl *)fd_calloc(1, sizeof *c);
    c->device = device;
    // Default routes. attn_kernel=wgmma: the whole GPU suite passes under it and it is 1.30x mma at 60-64K on the
    // H200 (session 14 call 1, docs/perf-notes.md); its calls outside head_dim 256 run mma. gemm_act=auto: bf16 activations (the numerics contract, DESIGN.md
    // §5) on every real geometry, ~fp32 ones on GEMMs with k <= 256 (toy models; gemm.cu).
    c->attn_kernel = CU_ATTN_WGMMA;
    c->gemm_act = CU_GEMM_AUTO;
    // gemm_small=gemv: batch invariant (decode and verify give the same logits) and no activation cast pass.
    c->gemm_small = CU_GEMM_SMALL_GEMV;
    // attn_decode=warp: measured on the H200 (session 12 call 3) against blocked: 27B layer at 128K 0.182 vs 0.219
    // ms (bf16, n = 1), 0.151 vs 0.248 (e4m3), n = 8 0.398 vs 0.441; e2e decode and round faster at 1K and 32K.
    // n = 16 is ~10 % slower at 128K, but a per-n choice would break the batch invariance between verify and
    // decode that lossless speculation rests on (attention_decode.cu), so one kernel serves every n.
    c->attn_decode = CU_ATTN_DECODE_WARP;
    // pdl=gemv: the GEMVs' first weight loads overlap the kernel before them; 27B decode +2 % on the H200 and bitwise
    // the results of pdl=off (docs/perf-notes.md, session 5).
    c->pdl = CU_PDL_GEMV;
    FD_CUDA_CHECK(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking));
    FD_CUBLAS_CHECK(cublasLtCreate(&c->lt));
    c->lt_workspace_bytes = (size_t)32 << 20; // cuBLASLt's recommendation for Hopper
    FD_CUDA_CHECK(cudaMalloc(&c->lt_workspace, c->lt_workspace_bytes));
    FD_CUDA_CHECK(cudaDeviceGetAttribute(&c->num_sms, cudaDevAttrMultiProcessorCount, device));
    FD_CUDA_CHECK(cudaMalloc(&c->gemv_counters, CU_GEMV_COUNTERS * sizeof(int)));
    FD_CUDA_CHECK(cudaMemsetAsync(c->gemv_counters, 0, CU_GEMV_COUNTERS * sizeof(int), c->stream));
    c->gemv_counters_len = CU_GEMV_COUNTERS;
    c->gemv_blocks_per_sm = CU_GEMV_BLOCKS_PER_SM; // benches change it with fd_cuda_set_gemv_blocks_per_sm only

    fd_backend *be = (fd_backend *)fd_calloc(1, sizeof *be);
    be->name = "cuda";
    be->act_bytes = 4;
    be->impl = c;
    be->alloc = cu_alloc;
    be->free = cu_free;
    be->zero = cu_zero;
    be->to_device = cu_to_device;
    be->to_host = cu_to_host;
    be->copy = cu_copy;
    be->copy_batch = cu_copy_batch;
    be->upload_weight = cu_upload_weight;
    be->release_weight = cu_release_weight;
    be->sync = cu_sync;
    be->destroy = cu_destroy;
    cu_group_install(be);
    be->embed = cu_embed;
    be->rmsnorm = cu_rmsnorm;
    be->matmul = cu_matmul;
    be->matmul_multi = cu_matmul_multi;
    be->add = cu_add;
    be->add_rmsnorm = cu_add_rmsnorm;
    be->silu_mul = cu_silu_mul;
    be->sigmoid_mul = cu_sigmoid_mul;
    be->to_f32 = cu_to_f32;
    be->copy_rows = cu_copy_rows;
    be->gdn_split_qkvz = cu_gdn_split_qkvz;
    be->conv1d_silu = cu_conv1d_silu;
    be->gdn_core = cu_gdn_core;
    be->gdn_core_readonly = cu_gdn_core_readonly;
    be->gated_rmsnorm = cu_gated_rmsnorm;
    be->split_q_gate = cu_split_q_gate;
    be->rope = cu_rope;
    be->qk_norm_rope = cu_qk_norm_rope;
    be->kv_bytes_per_token = cu_kv_bytes_per_token;
    be->kv_store = cu_kv_store;
    be->kv_copy = cu_kv_copy;
    be->attention = cu_attention;
    // tree verify (spec_verify=tree): the chain kernels with the tree's parents (conv.cu, gdn.cu, attention*.cu)
    be->conv1d_silu_tree = cu_conv1d_silu_tree;
    be->gdn_core_tree = cu_gdn_core_tree;
    be->attention_tree = cu_attention_tree;
    be->qk_norm_rope_tree = cu_qk_norm_rope_tree;
    be->moe = cu_moe;
    cu_install_dflash2(be);
    cu_install_graphs(be); // argmax_rows, and the graph entry points unless FD_CUDA_SYNC / FD_CUDA_PROFILE
    be->sample_rows = cu_sample_rows;
    be->logsumexp_rows = cu_logsumexp_rows;       // with topk_rows: a DFlash tree's ranked draft rows (lse.cu)
    be->softmax_scan_rows = cu_softmax_scan_rows; // with topk_rows: sampling under --tp without a gather (tp_scan.cu)

    // The route table (engine/routes.h selects, prints and verifies these by name).
    fd_route *rg = &c->routes[CU_ROUTE_GEMM_ACT], *ra = &c->routes[CU_ROUTE_ATTN_KERNEL];
    rg->name = "gemm_act";
    rg->values[0] = "bf16";
    rg->values[1] = "bf16x2";
    rg->values[2] = "auto"; // chooses per GEMM; its calls are counted under the value that ran
    rg->sel = &c->gemm_act;
    rg->help = "fp32 activations into bf16-weight GEMMs: rounded to bf16, split into two bf16 terms, or auto "
               "(bf16x2 when k <= 256, else bf16)";
    ra->name = "attn_kernel";
    ra->values[0] = "simt";
    ra->values[1] = "mma";
    ra->values[2] = "splitk"; // selectable, but only counts: calls with <= 16 tokens run it whatever is selected
    ra->values[3] = "wgmma";  // Hopper warpgroup MMA, head_dim 256 (bf16 or e4m3 cache); its other calls run mma
    ra->sel = &c->attn_kernel;
    ra->by_shape = "calls with <= 16 query tokens always run splitk (head_dim 64/128/256, else simt); larger "
                   "calls run mma only with >= 64 query rows and head_dim 64/128/256, else simt; wgmma only "
                   "with head_dim 256, else as mma";
    ra->help = "attention: CUDA-core flash kernel, tensor-core mma kernel or Hopper wgmma kernel";
    fd_route *rk = &c->routes[CU_ROUTE_KV];
    rk->name = "kv";
    rk->values[0] = "bf16";
    rk->values[1] = "e4m3";
    rk->sel = &c->kv;
    rk->help = "attention KV cache: bf16, or FP8 E4M3 with one fp32 scale per token and head";
    fd_route *rs = &c->routes[CU_ROUTE_GEMM_SMALL];
    rs->name = "gemm_small";
    rs->values[0] = "gemv";
    rs->values[1] = "cublas";
    rs->sel = &c->gemm_small;
    rs->by_shape = "n > 16 rows always cublas; so are k % 8 != 0 and unaligned x";
    rs->help = "bf16-weight GEMMs with <= 16 rows: tensor-core GEMV (batch invariant) or cuBLASLt";
    fd_route *rp = &c->routes[CU_ROUTE_PDL];
    rp->name = "pdl";
    rp->values[0] = "off";
    rp->values[1] = "gemv";
    rp->sel = &c->pdl;
    rp->help = "programmatic dependent launch: a small-n GEMV is scheduled while the kernel before it runs and "
               "streams its first weights (calls = GEMV launches)";
    fd_route *rf = &c->routes[CU_ROUTE_GEMM_FP8];
    rf->name = "gemm_fp8";
    rf->values[0] = "gemv";
    rf->values[1] = "dequant";
    rf->values[2] = "wgmma";
    rf->sel = &c->gemm_fp8;
    rf->by_shape = "n > 16 rows, k or block_cols not a multiple of 64, block_rows not of 32: always dequant; "
                   "wgmma: block_cols != 128, block_rows not of 64 or k not of 128: gemv";
    rf->help = "FP8 block-scaled weights: the FP8 GEMV for <= 16 rows, or dequantize to bf16 and run the bf16 "
               "GEMM, or W8A8 on wgmma for <= 16 rows (x quantized to e4m3 per token and 128-group, sm_90a)";
    fd_route *ri = &c->routes[CU_ROUTE_GEMM_INT4];
    ri->name = "gemm_int4";
    ri->values[0] = "gemv";
    ri->values[1] = "dequant";
    ri->sel = &c->gemm_int4;
    ri->by_shape = "n > 16 rows, an act-order g_idx (not k / group_size) and unaligned x: always dequant";
    ri->help = "GPTQ / AWQ int4 weights: the int4 GEMV for <= 16 rows, or dequantize to bf16 and run the bf16 GEMM";
    fd_route *rd = &c->routes[CU_ROUTE_GDN_CHUNK];
    rd->name = "gdn_chunk";
    rd->values[0] = "tf32x3";
    rd->values[1] = "bf16";
    rd->sel = &c->gdn_chunk;
    rd->help = "chunked GDN prefill kernels: 3xTF32 products on fp32 operands (~fp32), or bf16 operands rounded "
               "where FLA's chunk kernel rounds (fp32 sums and state)";
    fd_route *rdec = &c->routes[CU_ROUTE_ATTN_DECODE];
    rdec->name = "attn_decode";
    rdec->values[0] = "blocked";
    rdec->values[1] = "warp";
    rdec->sel = &c->attn_decode; // warp by default (see above)
    // every counted call runs the selected value (other head dims run attn_kernel simt and count nothing here)
    rdec->help = "decode / verify attention (<= 16 tokens, tree verify; head_dim 64/128/256): 32-key tiles shared "
                 "by the block with three barriers per tile, or each warp its own keys and online softmax, merged "
                 "once per chunk";
    static_assert(CU_N_ROUTES <= sizeof c->routes / sizeof c->routes[0], "cu_impl.routes holds every route");
    be->routes = c->routes;
    be->n_routes = CU_N_ROUTES;
    // The environment (FD_ROUTE_<NAME>) and --route are applied by engine/routes.c (routes_backend_preset), the
    // one reader of route variables; a backend made here starts at the defaults above.
    cudaDeviceProp prop;
    FD_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
    // No routes here: --route and FD_ROUTE_* are applied after creation, and the engine prints the routes in force.
    FD_INFO("cuda: device %d %s (%d SMs, %.0f GiB)", device, prop.name, c->num_sms,
            (double)prop.totalGlobalMem / (1 << 30));
    return be;
}
