// GPTQ / AWQ int4 weights on the CUDA backend, everything but the GEMV (gemv_int4.cu): the upload into the layout
// of int4.h, the dequant kernel, and route gemm_int4's dispatch:
//   gemv (default), n <= 16 rows, a g_idx of k / group_size: the int4 GEMV (fused over the int4 weights of one
//     matmul_multi call when they share k and grouping);
//   dequant (n > 16, an act-order g_idx, or selected): the weight expanded into scratch slot W, to bf16 (rounded:
//     the bf16-weight contract) under a bf16 gemm_act, to f32 (exact) where gemm_act keeps activations ~fp32, then
//     the dense path (cuBLASLt for prefill), which counts gemm_act and gemm_small itself. m k (2 or 4) bytes of
//     extra traffic, small next to the 2 n m k FLOPs of a prefill chunk.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/cuda_common.h"
#include "cuda/int4.h"

// Nibble position of column n % 8 inside an AWQ word: the inverse of AutoAWQ's pack order {0, 2, 4, 6, 1, 3, 5, 7}.
__constant__ int c_awq_nibble[8] = {0, 4, 1, 5, 2, 6, 3, 7};

// dst [N_pad / 32 tiles, nchunks, 32, 16] (int4.h's layout) from the published qweight: GPTQ [K/8, N] (8 k per
// word, plain order), AWQ [K, N/8] (8 columns per word, interleaved); rows >= N and k >= K zero.
__global__ void k_int4_repack(uint32_t *dst, const uint32_t *src, int64_t N, int K, int64_t kwords, int awq) {
    CU_PDL_ENTER();
    const int64_t nchunks = kwords / 16, total = i4_rows_pad(N) * kwords;
    for (int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total;
         idx += (int64_t)gridDim.x * blockDim.x) {
        const int64_t tc = idx / I4_TILE_CHUNK, within = idx % I4_TILE_CHUNK; // (tile, chunk), (row, word)
        const int64_t n = tc / nchunks * I4_TILE_ROWS + within / 16, d = tc % nchunks * 16 + within % 16;
        const int k0 = i4_word_k0(d);
        uint32_t word = 0;
        if (k0 < K && n < N) {
            if (!awq) {
                word = src[(int64_t)(k0 / 8) * N + n];
            } else {
                const int pos = c_awq_nibble[n & 7];
                for (int p = 0; p < 8; p++)
                    word |= ((src[(int64_t)(k0 + p) * (N / 8) + n / 8] >> (4 * pos)) & 15u) << (4 * p);
            }
        }
        dst[idx] = word;
    }
}

static int nib(uint32_t word, int pos) {
    return (int)(word >> (4 * pos)) & 15;
}

// The dtype every scale of w is exact in, for the meta words' 16-bit halves: the stored one (F16, BF16), or for
// F32 scales F16 when all are exact in it, else BF16 when all are, else 0 (neither: refused).
static fd_dtype i4_meta_dtype(const fd_weight *w) {
    if (w->scale_dtype != FD_F32) return w->scale_dtype;
    const float *s = (const float *)w->scale;
    const int64_t ns = w->n_groups * w->rows;
    int f16 = 1, bf16 = 1;
    for (int64_t i = 0; i < ns && (f16 || bf16); i++) {
        f16 &= fd_f16_to_f32(fd_f32_to_f16(s[i])) == s[i];
        bf16 &= fd_bf16_to_f32(fd_f32_to_bf16(s[i])) == s[i];
    }
    return f16 ? FD_F16 : bf16 ? FD_BF16 : (fd_dtype)0;
}

// Scale i of w as `dt` bits (i4_meta_dtype: exact).
static uint32_t i4_scale_bits(const fd_weight *w, int64_t i, fd_dtype dt) {
    if (w->scale_dtype != FD_F32) return ((const uint16_t *)w->scale)[i];
    const float v = ((const float *)w->scale)[i];
    return dt == FD_F16 ? fd_f32_to_f16(v) : fd_f32_to_bf16(v);
}

// Ends the run as a user error (upload_weight has no error return; the input is unsupported, nothing is broken).
static void i4_refuse(const fd_weight *w, const char *why) {
    fprintf(stderr, "flashdelta: error: tensor '%s' (%s): %s on the cuda backend (use --backend cpu)\n",
            w->name ? w->name : "?", fd_wfmt_name(w->fmt), why);
    exit(2);
}

void cu_upload_int4(fd_backend *be, fd_weight *w) {
    cu_impl *c = cu_of(be);
    const int64_t N = w->rows, K = w->cols, G = w->n_groups, kwords = i4_kwords(K);
    FD_CHECK(N % 8 == 0 && K % 8 == 0 && G >= 1 && w->group_size >= 1 && w->qzeros && w->scale,
             "int4 weight %s: bad descriptor", w->name ? w->name : "?");
    if (w->scale_dtype != FD_F16 && w->scale_dtype != FD_BF16 && w->scale_dtype != FD_F32)
        i4_refuse(w, "scales must be F16, BF16 or F32");
    if (K > INT32_MAX / 2) i4_refuse(w, "more than 2^30 inputs");
    if (w->group_size % 8) i4_refuse(w, "a group size that is not a multiple of 8"); // the loader allows none
    // g_idx k / group_size is the plain grouping: drop it so the GEMV takes the weight (the CPU reads the same).
    int trivial = 1;
    for (int64_t k = 0; w->g_idx && k < K && trivial; k++) trivial = w->g_idx[k] == k / w->group_size;
    if (trivial) w->g_idx = NULL;

    const fd_dtype sdt = i4_meta_dtype(w);
    if (!sdt) i4_refuse(w, "f32 scales exact in neither f16 nor bf16 (the GPU kernels keep 16-bit scales)");
    // meta [G, N_pad] (padded rows 0), then g_idx [K] when kept
    const int64_t Np = i4_rows_pad(N);
    const size_t meta_words = (size_t)(G * Np) + (w->g_idx ? (size_t)K : 0);
    uint32_t *meta = (uint32_t *)fd_calloc(meta_words, 4);
    const uint32_t *qz = (const uint32_t *)w->qzeros;
    const int awq = w->fmt == FD_WFMT_AWQ_INT4;
    static const int awq_nibble[8] = {0, 4, 1, 5, 2, 6, 3, 7};
    for (int64_t g = 0; g < G; g++)
        for (int64_t n = 0; n < N; n++) {
            const uint32_t zw = qz[g * (N / 8) + n / 8];
            const int z = awq ? nib(zw, awq_nibble[n % 8]) : nib(zw, (int)(n % 8)) + w->zero_add;
            const uint32_t zbits = 0x4300u | (uint32_t)z; // bf16 of 128 + z (z <= 16)
            meta[g * Np + n] = i4_scale_bits(w, g * N + n, sdt) | (zbits << 16);
        }
    if (w->g_idx) memcpy(meta + G * Np, w->g_idx, (size_t)K * 4);
    FD_CUDA_CHECK(cudaMalloc(&w->dev_scale, meta_words * 4));
    FD_CUDA_CHECK(cudaMemcpyAsync(w->dev_scale, meta, meta_words * 4, cudaMemcpyHostToDevice, c->stream));

    const size_t raw = (size_t)(N * K / 2);
    void *tmp = cu_scratch(be, CU_SCR_H, raw);
    FD_CUDA_CHECK(cudaMemcpyAsync(tmp, w->data, raw, cudaMemcpyHostToDevice, c->stream));
    const int64_t total = Np * kwords;
    FD_CUDA_CHECK(cudaMalloc(&w->dev, (size_t)total * 4));
    const unsigned grid = cu_blocks(total, 256) < 65535u ? cu_blocks(total, 256) : 65535u;
    cu_launch(be, k_int4_repack, grid, 256, 0, (uint32_t *)w->dev, (const uint32_t *)tmp, N, (int)K, kwords, awq);
    // The host copies may be an mmap the caller unmaps later, and meta is freed now: finish the transfers.
    FD_CUDA_CHECK(cudaStreamSynchronize(c->stream));
    free(meta);
    w->dev_dtype = FD_I32; // packed words: no dense path reads them (cu_gemv_supported wants BF16)
    w->dev_scale_dtype = sdt;
}

// dst [m, k] = s * (q - z), f32 (exact) or rounded to bf16; one thread per repacked word (8 consecutive k of a
// row), in row order. gidx (NULL: k / gs) the group of each input; sbf16: the meta scale halves are bf16.
template <int F32>
__global__ void k_int4_dequant(void *dst, const uint32_t *W, const uint32_t *meta, const int32_t *gidx, int64_t m,
                               int k, int64_t kwords, int gs, int sbf16) {
    CU_PDL_ENTER();
    const int64_t total = m * kwords, mp = i4_rows_pad(m), nchunks = kwords / 16;
    for (int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total;
         idx += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = idx / kwords, d = idx % kwords;
        const int k0 = i4_word_k0(d);
        if (k0 >= k) continue;
        const uint32_t word = W[i4_word_index(r, d, nchunks)];
        uint32_t mt = gidx ? 0u : meta[(int64_t)(k0 / gs) * mp + r]; // gs % 8 == 0: the 8 inputs share a group
        float f[8];
#pragma unroll
        for (int p = 0; p < 8; p++) {
            if (gidx) mt = meta[(int64_t)gidx[k0 + p] * mp + r];
            const int z = (int)__uint_as_float(mt & 0xffff0000u) - 128;
            f[p] = i4_scale(mt, sbf16) * (float)((int)((word >> (4 * p)) & 15u) - z);
        }
        if (F32) {
            float4 *o = (float4 *)((float *)dst + r * k + k0);
            o[0] = make_float4(f[0], f[1], f[2], f[3]);
            o[1] = make_float4(f[4], f[5], f[6], f[7]);
        } else {
            uint32_t o[4];
#pragma unroll
            for (int j = 0; j < 4; j++) {
                __nv_bfloat162 b = __floats2bfloat162_rn(f[2 * j], f[2 * j + 1]);
                o[j] = *(uint32_t *)&b;
            }
            *(uint4 *)((__nv_bfloat16 *)dst + r * k + k0) = make_uint4(o[0], o[1], o[2], o[3]);
        }
    }
}

void cu_int4_dequant(fd_backend *be, void *dst, const fd_weight *W, int f32) {
    const int64_t m = W->rows, kwords = i4_kwords(W->cols), total = m * kwords;
    const unsigned grid = cu_blocks(total, 256) < 65535u ? cu_blocks(total, 256) : 65535u;
    const uint32_t *meta = (const uint32_t *)W->dev_scale;
    const int32_t *gidx = W->g_idx ? (const int32_t *)(meta + W->n_groups * i4_rows_pad(m)) : NULL;
    const int k = (int)W->cols, gs = W->group_size, sbf16 = W->dev_scale_dtype == FD_BF16;
    if (f32)
        cu_launch(be, k_int4_dequant<1>, grid, 256, 0, dst, (const uint32_t *)W->dev, meta, gidx, m, k, kwords, gs,
                  sbf16);
    else
        cu_launch(be, k_int4_dequant<0>, grid, 256, 0, dst, (const uint32_t *)W->dev, meta, gidx, m, k, kwords, gs,
                  sbf16);
}

// Route gemm_int4: the int4 GEMV for small n, else the dequant route (gemm.cu: cu_gemm_quant).
void cu_gemm_int4(fd_backend *be, float *out, const float *x, const fd_weight *W, int n) {
    const int gemv = cu_of(be)->gemm_int4 == CU_GEMM_INT4_GEMV && cu_gemv_int4_supported(x, W, n);
    cu_gemm_quant(be, out, x, W, n, CU_ROUTE_GEMM_INT4, gemv, cu_gemv_int4, cu_int4_dequant);
}

// matmul_multi's int4 members (gemm.cu): with route gemm_int4=gemv and every int4 weight GEMV-eligible with one k
// and one grouping, one fused launch; otherwise each through cu_gemm_int4. The other weights go back through
// cu_matmul_multi (the bf16 fused path). Returns 0 (nothing run) when no weight is int4.
int cu_matmul_multi_int4(fd_backend *be, void *const outs[], const fd_weight *const Ws[], int count, const void *x,
                         int n) {
    cu_impl *c = cu_of(be);
    void *i4_out[CU_GEMV_MAX_SEGS], *rest_out[CU_GEMV_MAX_SEGS];
    const fd_weight *i4_w[CU_GEMV_MAX_SEGS], *rest_w[CU_GEMV_MAX_SEGS];
    int ni = 0, nr = 0;
    for (int i = 0; i < count; i++) {
        if (!fd_wfmt_is_int4(Ws[i]->fmt)) continue;
        if (ni == CU_GEMV_MAX_SEGS) return 0; // more than a launch takes: not worth a case of its own
        i4_out[ni] = outs[i], i4_w[ni++] = Ws[i];
    }
    if (!ni || count - ni > CU_GEMV_MAX_SEGS) return 0;
    for (int i = 0; i < count; i++)
        if (!fd_wfmt_is_int4(Ws[i]->fmt)) rest_out[nr] = outs[i], rest_w[nr++] = Ws[i];
    if (ni > 1 && c->gemm_int4 == CU_GEMM_INT4_GEMV && cu_gemv_int4_multi_supported(x, i4_w, ni, n)) {
        const int split = cu_gemm_split(c->gemm_act, i4_w[0]->cols);
        c->routes[CU_ROUTE_GEMM_INT4].calls[CU_GEMM_INT4_GEMV] += ni;
        c->routes[CU_ROUTE_GEMM_INT4].tokens[CU_GEMM_INT4_GEMV] += (int64_t)n * ni;
        c->routes[CU_ROUTE_GEMM_ACT].calls[split] += ni;
        c->routes[CU_ROUTE_GEMM_ACT].tokens[split] += (int64_t)n * ni;
        cu_gemv_int4_multi(be, (float *const *)i4_out, i4_w, ni, (const float *)x, n);
        if (cu_debug_sync) FD_CUDA_CHECK(cudaStreamSynchronize(c->stream));
    } else {
        for (int i = 0; i < ni; i++) cu_gemm_int4(be, (float *)i4_out[i], (const float *)x, i4_w[i], n);
    }
    if (nr) cu_matmul_multi(be, rest_out, rest_w, nr, x, n);
    return 1;
}
