// Gated attention's cache and core: KV cache (route kv), causal flash-style attention (online softmax, no n x n
// matrix), GQA, head_dim up to 256.
//
// Cache layout per layer (C = the view's token slots; position p sits in slot cu_kv_slot(p): a page table lookup,
// once per key tile in the attention kernels), route kv:
//   bf16: K [C, Hkv, hd] bf16, then V [C, Hkv, hd] bf16.
//   e4m3: K [C, Hkv, hd] e4m3, V [C, Hkv, hd] e4m3, Kscale [C, Hkv] f32, Vscale [C, Hkv] f32; each (token, head)
//         row is divided by amax/448 before rounding (the same arithmetic as the CPU backend, bit for bit).
//         Tiles are dequantised to bf16 as they enter shared memory, so the math after that is the bf16 path's.
//
// Attention kernel (CUDA cores, fp32 math). The query rows of one KV head's group, (token t, head g of G = H/Hkv)
// flattened as r = t*G + g, are tiled 16 per block (4 warps x 4 rows), so one K/V tile read from memory serves
// every head of the group. Keys stream through shared memory in tiles of 32; lane j scores key j of the tile
// for the warp's 4 rows, the running max/sum are warp-uniform, and lane l accumulates output dims
// {2l, 2l+1} + 64m. grid = (row tiles, Hkv, splits): when row tiles x Hkv cannot fill the GPU the key axis is
// split; each split writes its unnormalised partial (acc, max, sum) and cu_attn_combine merges them (split-K /
// flash-decoding). Calls with <= CU_DECODE_MAX_N tokens go to attention_decode.cu (head_dim 64/128/256) or, for
// other head dims, run this kernel on that file's absolute 512-key chunks, always through the combine, so a row's
// result does not depend on n either.
// Tree verify (attention_tree, cu_attention_tree at the end): the decode kernel with the tree mask for head dims
// 64/128/256, this kernel with it (TREE) for the others, on the same absolute chunks and through the combine.
#include <math.h>

#include "cuda/cuda_common.h"
#include "cuda/tree.cuh"

#define ATT_BQ   16 // queries per block
#define ATT_QW   4  // queries per warp
#define ATT_BK   32 // keys per tile
#define ATT_MAXP 4  // bf16 pairs per lane per query: hd <= 256

size_t cu_kv_bytes_per_token(fd_backend *be, int Hkv, int hd) {
    cu_impl *c = cu_of(be);
    c->routes[CU_ROUTE_KV].locked = 1; // a cache is being sized: its layout is fixed from here on
    return c->kv == CU_KV_E4M3 ? (size_t)2 * Hkv * hd + (size_t)2 * Hkv * sizeof(float)
                               : (size_t)2 * Hkv * hd * sizeof(__nv_bfloat16);
}

// The page size is a power of two (backend.h); the kernels shift instead of dividing.
static int page_shift_of(const fd_kv_view *view) {
    if (!view->pages) return 0;
    int sh = 0;
    while ((1 << sh) < view->page_tokens) sh++;
    FD_CHECK((1 << sh) == view->page_tokens && view->page_tokens % 64 == 0,
             "kv view: page size %d must be a power of two and a multiple of 64 (the largest key tile)",
             view->page_tokens);
    return sh;
}

cu_kv cu_kv_view(fd_backend *be, const fd_kv_view *view, int Hkv, int hd) {
    cu_kv v = {};
    const int64_t slots = view->slots, plane = slots * Hkv * hd;
    if (cu_of(be)->kv == CU_KV_E4M3) {
        v.k8 = (const uint8_t *)view->base;
        v.v8 = v.k8 + plane;
        v.ks = (const float *)(v.k8 + 2 * plane);
        v.vs = v.ks + slots * Hkv;
    } else {
        v.k = (const __nv_bfloat16 *)view->base;
        v.v = v.k + plane;
    }
    v.pages = view->pages;
    v.page_shift = page_shift_of(view);
    return v;
}

// Both store kernels take the first position: pos_dev (when not NULL) is read when the kernel runs, so a replayed
// CUDA graph stores at the step's position. Rows at or beyond capacity are dropped. One page lookup per token
// row (the store is a few rows per call; the kernels that stream the cache look up once per key tile).
static __device__ __forceinline__ int64_t kv_first_pos(int64_t pos0, const int64_t *pos_dev) {
    return pos_dev ? *pos_dev : pos0;
}

// One block-stride pass per token: row = Hkv * hd elements of k and v for each of the n tokens.
__global__ void k_kv_store(__nv_bfloat16 *kc, __nv_bfloat16 *vc, cu_kv kv, const float *k, const float *v, int64_t pos0,
                           const int64_t *pos_dev, int n, int64_t row, int64_t capacity) {
    CU_PDL_ENTER();
    const int64_t p0 = kv_first_pos(pos0, pos_dev);
    for (int t = blockIdx.x; t < n; t += gridDim.x) {
        const int64_t p = p0 + t;
        if (p < 0 || p >= capacity) continue;
        const int64_t at = cu_kv_slot(kv, p) * row;
        for (int64_t i = threadIdx.x; i < row; i += blockDim.x) {
            kc[at + i] = __float2bfloat16_rn(k[t * row + i]);
            vc[at + i] = __float2bfloat16_rn(v[t * row + i]);
        }
    }
}

// One warp per (token, head) row of K or V: amax, scale = amax / 448, e4m3(x / scale) with saturation.
__global__ void k_kv_store_e4m3(uint8_t *dst, float *scales, cu_kv kv, const float *src, int64_t pos0,
                                const int64_t *pos_dev, int64_t rows, int Hkv, int hd, int64_t capacity) {
    CU_PDL_ENTER();
    const int lane = threadIdx.x & 31;
    const int64_t p0 = kv_first_pos(pos0, pos_dev);
    for (int64_t r = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32; r < rows;
         r += (int64_t)gridDim.x * blockDim.x / 32) {
        const int64_t p = p0 + r / Hkv; // warp-uniform
        if (p < 0 || p >= capacity) continue;
        const int64_t at = cu_kv_slot(kv, p) * Hkv + r % Hkv;
        const float *x = src + r * hd;
        float amax = 0.f;
        for (int i = lane; i < hd; i += 32) amax = fmaxf(amax, fabsf(x[i]));
        amax = cu_warp_max(amax);
        const float s = amax > 0.f ? amax / 448.0f : 1.0f;
        for (int i = lane; i < hd; i += 32)
            dst[at * hd + i] = __nv_cvt_float_to_fp8(x[i] / s, __NV_SATFINITE, __NV_E4M3);
        if (lane == 0) scales[at] = s;
    }
}

void cu_kv_store(fd_backend *be, const fd_kv_view *view, const void *k, const void *v, int64_t pos0,
                 const int64_t *pos_dev, int n, int Hkv, int hd) {
    if (n <= 0) return;
    const int64_t capacity = view->capacity;
    // With pos_dev the host's pos0 is the position at recording time; the engine checks capacity before a replay.
    FD_CHECK(pos0 >= 0 && pos0 + n <= capacity, "kv_store: positions %lld..%lld exceed capacity %lld", (long long)pos0,
             (long long)(pos0 + n), (long long)capacity);
    cu_impl *c = cu_of(be);
    c->routes[CU_ROUTE_KV].calls[c->kv]++;
    c->routes[CU_ROUTE_KV].tokens[c->kv] += n;
    const cu_kv kv = cu_kv_view(be, view, Hkv, hd);
    if (c->kv == CU_KV_E4M3) {
        const int64_t rows = (int64_t)n * Hkv;
        uint8_t *k8 = (uint8_t *)kv.k8, *v8 = (uint8_t *)kv.v8;
        float *ks = (float *)kv.ks, *vs = (float *)kv.vs;
        unsigned grid = (unsigned)((rows * 32 + 255) / 256 < 8192 ? (rows * 32 + 255) / 256 : 8192);
        cu_launch(be, k_kv_store_e4m3, grid, 256, 0, k8, ks, kv, (const float *)k, pos0, pos_dev, rows, Hkv, hd,
                  capacity);
        cu_launch(be, k_kv_store_e4m3, grid, 256, 0, v8, vs, kv, (const float *)v, pos0, pos_dev, rows, Hkv, hd,
                  capacity);
        return;
    }
    const int64_t row = (int64_t)Hkv * hd;
    const unsigned grid = n > 8192 ? 8192 : (unsigned)n;
    cu_launch(be, k_kv_store, grid, 256, 0, (__nv_bfloat16 *)kv.k, (__nv_bfloat16 *)kv.v, kv, (const float *)k,
              (const float *)v, pos0, pos_dev, n, row, capacity);
}

// Paged copy: one block per token; its K and V rows (and, for e4m3, its K and V scale rows) move between the two
// slots in units of U bytes (the largest of 16, 8, 4, 1 that divides both row sizes; cudaMalloc bases are 256-byte
// aligned and every offset is a multiple of a row, so every access is U-aligned). row, srow in units of U.
template <typename U>
__global__ void k_kv_copy(U *d, const U *s, cu_kv dk, int64_t dst_slots, int64_t dst_pos, cu_kv sk, int64_t src_slots,
                          int64_t src_pos, int64_t n, int64_t row, int64_t srow) {
    CU_PDL_ENTER();
    for (int64_t t = blockIdx.x; t < n; t += gridDim.x) {
        const int64_t ds = cu_kv_slot(dk, dst_pos + t), ss = cu_kv_slot(sk, src_pos + t);
        for (int plane = 0; plane < 2; plane++) // K then V rows
            for (int64_t i = threadIdx.x; i < row; i += blockDim.x)
                d[(plane * dst_slots + ds) * row + i] = s[(plane * src_slots + ss) * row + i];
        if (!srow) continue;
        U *dsc = d + 2 * dst_slots * row;
        const U *ssc = s + 2 * src_slots * row;
        for (int plane = 0; plane < 2; plane++) // Kscale then Vscale rows
            for (int64_t i = threadIdx.x; i < srow; i += blockDim.x)
                dsc[(plane * dst_slots + ds) * srow + i] = ssc[(plane * src_slots + ss) * srow + i];
    }
}

template <typename U>
static void launch_kv_copy(fd_backend *be, void *d, const void *s, cu_kv dk, int64_t dst_slots, int64_t dst_pos,
                           cu_kv sk, int64_t src_slots, int64_t src_pos, int64_t n, size_t row, size_t srow) {
    const unsigned grid = n > 8192 ? 8192 : (unsigned)n;
    cu_launch(be, (k_kv_copy<U>), grid, 128, 0, (U *)d, (const U *)s, dk, dst_slots, dst_pos, sk, src_slots, src_pos, n,
              (int64_t)(row / sizeof(U)), (int64_t)(srow / sizeof(U)));
}

// Positions between two caches: contiguous on both sides, each plane is one copy; else the paged copy kernel.
void cu_kv_copy(fd_backend *be, const fd_kv_view *dst, int64_t dst_pos, const fd_kv_view *src, int64_t src_pos,
                int64_t n, int Hkv, int hd) {
    if (n <= 0) return;
    FD_CHECK(dst_pos >= 0 && src_pos >= 0 && dst_pos + n <= dst->capacity && src_pos + n <= src->capacity,
             "kv_copy: [%lld, +%lld) -> [%lld, +%lld) beyond capacity", (long long)src_pos, (long long)n,
             (long long)dst_pos, (long long)n);
    cudaStream_t st = cu_of(be)->stream;
    const int e4 = cu_of(be)->kv == CU_KV_E4M3;
    const size_t el = e4 ? 1 : sizeof(__nv_bfloat16), row = (size_t)Hkv * hd * el;
    const size_t srow = e4 ? (size_t)Hkv * sizeof(float) : 0;
    char *d = (char *)dst->base;
    const char *s = (const char *)src->base;
    const int64_t dst_cap = dst->slots, src_cap = src->slots;
    if (dst->pages || src->pages) {
        const cu_kv dk = cu_kv_view(be, dst, Hkv, hd), sk = cu_kv_view(be, src, Hkv, hd);
        const size_t both = row | srow; // srow 0 (bf16) constrains nothing
        if (both % 16 == 0)
            launch_kv_copy<uint4>(be, d, s, dk, dst_cap, dst_pos, sk, src_cap, src_pos, n, row, srow);
        else if (both % 8 == 0)
            launch_kv_copy<uint2>(be, d, s, dk, dst_cap, dst_pos, sk, src_cap, src_pos, n, row, srow);
        else if (both % 4 == 0)
            launch_kv_copy<uint32_t>(be, d, s, dk, dst_cap, dst_pos, sk, src_cap, src_pos, n, row, srow);
        else
            launch_kv_copy<unsigned char>(be, d, s, dk, dst_cap, dst_pos, sk, src_cap, src_pos, n, row, srow);
        return;
    }
    for (int plane = 0; plane < 2; plane++) // K then V
        FD_CUDA_CHECK(cudaMemcpyAsync(d + ((size_t)plane * dst_cap + dst_pos) * row,
                                      s + ((size_t)plane * src_cap + src_pos) * row, (size_t)n * row,
                                      cudaMemcpyDeviceToDevice, st));
    if (!e4) return;
    char *ds = d + 2 * dst_cap * row;
    const char *ss = s + 2 * src_cap * row;
    for (int plane = 0; plane < 2; plane++) // Kscale then Vscale
        FD_CUDA_CHECK(cudaMemcpyAsync(ds + ((size_t)plane * dst_cap + dst_pos) * srow,
                                      ss + ((size_t)plane * src_cap + src_pos) * srow, (size_t)n * srow,
                                      cudaMemcpyDeviceToDevice, st));
}

// q [n, H, hd] f32 at positions pos0.. (*pos_dev when given); causal: row of token t sees keys 0..pos0+t, else all
// pos0+n keys (the DFlash drafter's block); out [n, H*hd] f32 (or, with splits, partials opart [n*H][zslots][hd]
// and ml [n*H][zslots][2] = (max, sum); split z covers keys [z*chunk, (z+1)*chunk)). Shared: Qs [16][hd] f32,
// Kt [32][hd/2 + 1] bf16x2 (one pad word per row: lanes read 32 different rows of one column), Vt [32][hd/2] bf16x2.
// TREE: causal, and tree_parent [n] (backend memory) masks the keys at pos0.. to the row's ancestors (tree.cuh).
template <bool TREE>
__global__ void __launch_bounds__(128)
    k_attention(float *out, float *opart, float *ml, const float *q, cu_kv kv, int64_t pos0, const int64_t *pos_dev,
                int n, int H, int Hkv, int hd, float scale, int64_t chunk, int64_t zslots, int causal,
                const int32_t *tree_parent) {
    CU_PDL_ENTER();
    extern __shared__ float sm[];
    int hd2 = hd / 2, ldk = hd2 + 1, G = H / Hkv, R = n * G;
    float *Qs = sm;
    __nv_bfloat162 *Kt = (__nv_bfloat162 *)(Qs + ATT_BQ * hd);
    __nv_bfloat162 *Vt = Kt + ATT_BK * ldk;
    int kvh = blockIdx.y, z = blockIdx.z;
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    int r0 = blockIdx.x * ATT_BQ;
    if (pos_dev) pos0 = *pos_dev;
    int tl = min(n - 1, (r0 + ATT_BQ - 1) / G);
    int64_t kbeg = (int64_t)z * chunk;                 // chunk is a multiple of ATT_BK
    int64_t klast = causal ? pos0 + tl : pos0 + n - 1; // last key any row of this block sees
    if (kbeg > klast) return; // a split past the live keys (grid sized from capacity): the combine skips it
    int64_t kend = min(klast + 1, kbeg + chunk); // keys past kbeg + chunk belong to the next split
    __shared__ unsigned long long anc_s[TREE ? CU_TREE_MAX_NODES : 1];
    __shared__ int par_s[TREE ? CU_TREE_MAX_NODES : 1];
    if (TREE) cu_tree_ancestors(anc_s, par_s, tree_parent, n);
    for (int e = threadIdx.x; e < ATT_BQ * hd; e += blockDim.x) {
        int i = e / hd, d = e - i * hd, r = r0 + i;
        Qs[e] = r < R ? q[((int64_t)(r / G) * H + kvh * G + r % G) * hd + d] : 0.f;
    }
    float m[ATT_QW], l[ATT_QW], acc[ATT_QW][2 * ATT_MAXP];
    int64_t qpos[ATT_QW];
    unsigned long long anc[ATT_QW]; // TREE: the row's ancestor mask
#pragma unroll
    for (int a = 0; a < ATT_QW; a++) {
        int r = r0 + w * ATT_QW + a;
        qpos[a] = r < R ? (causal ? pos0 + r / G : pos0 + n - 1) : -1; // -1: padding row, every key masked
        anc[a] = TREE && r < R ? anc_s[r / G] : 0ull;
        m[a] = -INFINITY, l[a] = 0.f;
#pragma unroll
        for (int p = 0; p < 2 * ATT_MAXP; p++) acc[a][p] = 0.f;
    }
    for (int64_t kt0 = kbeg; kt0 < kend; kt0 += ATT_BK) {
        __syncthreads(); // previous tile fully consumed (and Qs written, on the first pass)
        const cu_kv_tile pt = cu_kv_tile_at(kv, kt0, min(kend, kt0 + ATT_BK)); // 32-aligned: one page
        for (int e = threadIdx.x; e < ATT_BK * hd2; e += blockDim.x) {
            int j = e / hd2, d2 = e - j * hd2;
            int64_t kp = kt0 + j;
            __nv_bfloat162 z2 = __floats2bfloat162_rn(0.f, 0.f);
            bool ok = kp < kend;
            int64_t row = cu_kv_tile_slot(pt, kt0, kp) * Hkv + kvh;
            Kt[j * ldk + d2] = ok ? cu_kv_pair(kv.k, kv.k8, kv.ks, row, hd, 2 * d2) : z2;
            Vt[j * hd2 + d2] = ok ? cu_kv_pair(kv.v, kv.v8, kv.vs, row, hd, 2 * d2) : z2;
        }
        __syncthreads();
        // scores of key (kt0 + lane) for this warp's rows
        float s[ATT_QW];
#pragma unroll
        for (int a = 0; a < ATT_QW; a++) s[a] = 0.f;
        const float *qw = Qs + (w * ATT_QW) * hd;
        for (int d2 = 0; d2 < hd2; d2++) {
            float2 kf = __bfloat1622float2(Kt[lane * ldk + d2]);
#pragma unroll
            for (int a = 0; a < ATT_QW; a++) s[a] += qw[a * hd + 2 * d2] * kf.x + qw[a * hd + 2 * d2 + 1] * kf.y;
        }
        float p[ATT_QW];
        int64_t kp = kt0 + lane;
#pragma unroll
        for (int a = 0; a < ATT_QW; a++) {
            bool vis = kp <= qpos[a] && kp < kend;
            if (TREE) vis = vis && cu_tree_sees(anc[a], pos0, qpos[a], kp);
            float sa = vis ? s[a] * scale : -INFINITY;
            float mn = fmaxf(m[a], cu_warp_max(sa));
            if (mn == -INFINITY) { // no visible key yet for this row
                p[a] = 0.f;
                continue;
            }
            float alpha = expf(m[a] - mn); // m = -inf -> 0
            p[a] = vis ? expf(sa - mn) : 0.f;
            l[a] = l[a] * alpha + cu_warp_sum(p[a]);
            m[a] = mn;
#pragma unroll
            for (int e = 0; e < 2 * ATT_MAXP; e++) acc[a][e] *= alpha;
        }
        for (int j = 0; j < ATT_BK; j++) {
            float pj[ATT_QW];
#pragma unroll
            for (int a = 0; a < ATT_QW; a++) pj[a] = __shfl_sync(0xffffffffu, p[a], j);
#pragma unroll
            for (int mm = 0; mm < ATT_MAXP; mm++) {
                int d2 = lane + 32 * mm;
                if (d2 < hd2) {
                    float2 vf = __bfloat1622float2(Vt[j * hd2 + d2]);
#pragma unroll
                    for (int a = 0; a < ATT_QW; a++) {
                        acc[a][2 * mm] += pj[a] * vf.x;
                        acc[a][2 * mm + 1] += pj[a] * vf.y;
                    }
                }
            }
        }
    }
#pragma unroll
    for (int a = 0; a < ATT_QW; a++) {
        if (qpos[a] < 0) continue;
        int r = r0 + w * ATT_QW + a;
        int64_t th = (int64_t)(r / G) * H + kvh * G + r % G; // token * H + head
        float sc = opart ? 1.f : (l[a] > 0.f ? 1.f / l[a] : 0.f);
        float *orow = opart ? opart + (th * zslots + z) * hd : out + th * hd;
#pragma unroll
        for (int mm = 0; mm < ATT_MAXP; mm++) {
            int d2 = lane + 32 * mm;
            if (d2 < hd2) {
                orow[2 * d2] = acc[a][2 * mm] * sc;
                orow[2 * d2 + 1] = acc[a][2 * mm + 1] * sc;
            }
        }
        if (opart && lane == 0) {
            ml[(th * zslots + z) * 2] = m[a];
            ml[(th * zslots + z) * 2 + 1] = l[a];
        }
    }
}

void cu_attention(fd_backend *be, void *out, const void *q, const fd_kv_view *view, int64_t pos0,
                  const int64_t *pos_dev, int n, int H, int Hkv, int hd, float scale, int causal) {
    const int64_t capacity = view->capacity;
    if (n <= 0) return;
    if ((hd & 1) || hd > 2 * 32 * ATT_MAXP) FD_PANIC("attention head_dim %d unsupported (even, <= 256)", hd);
    if (Hkv <= 0 || H % Hkv) FD_PANIC("attention: %d heads not a multiple of %d kv heads", H, Hkv);
    FD_CHECK(pos0 >= 0 && pos0 + n <= capacity, "attention beyond cache capacity");
    cu_impl *c = cu_of(be);
    const cu_kv kv = cu_kv_view(be, view, Hkv, hd);
    fd_route *route = &c->routes[CU_ROUTE_ATTN_KERNEL];
    const int decode = n <= CU_DECODE_MAX_N;
    if (decode && cu_attention_decode(be, (float *)out, (const float *)q, kv, pos0, pos_dev, n, H, Hkv, hd, capacity,
                                      scale, causal)) {
        route->calls[CU_ATTN_SPLITK]++;
        route->tokens[CU_ATTN_SPLITK] += n;
        return;
    }
    if (!decode && c->attn_kernel == CU_ATTN_WGMMA &&
        cu_attention_wgmma(be, (float *)out, (const float *)q, kv, pos0, pos_dev, n, H, Hkv, hd, scale, causal)) {
        route->calls[CU_ATTN_WGMMA]++;
        route->tokens[CU_ATTN_WGMMA] += n;
        return;
    }
    if (!decode && (c->attn_kernel == CU_ATTN_MMA || c->attn_kernel == CU_ATTN_WGMMA) &&
        cu_attention_mma(be, (float *)out, (const float *)q, kv, pos0, pos_dev, n, H, Hkv, hd, scale, causal)) {
        route->calls[CU_ATTN_MMA]++;
        route->tokens[CU_ATTN_MMA] += n;
        return;
    }
    route->calls[CU_ATTN_SIMT]++;
    route->tokens[CU_ATTN_SIMT] += n;
    size_t smem = (size_t)ATT_BQ * hd * 4 + (size_t)ATT_BK * (hd / 2 + 1) * 4 + (size_t)ATT_BK * (hd / 2) * 4;
    FD_CUDA_CHECK(cudaFuncSetAttribute(k_attention<false>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    int64_t rows = (int64_t)n * (H / Hkv), tiles = (rows + ATT_BQ - 1) / ATT_BQ, blocks = tiles * Hkv;
    FD_CHECK(tiles < (1ll << 31));
    // Keys the grid must cover: the live ones, or all of the cache when the position is read on the device.
    int64_t keys = pos_dev ? capacity : pos0 + n, S = 1, chunk;
    if (decode) {
        chunk = CU_DECODE_CHUNK; // absolute chunks: the same splits for a row whatever n, pos0 or capacity
    } else {
        // Split the key axis when the row tiles leave most SMs idle; each split keeps >= 256 keys (8 tiles).
        if (blocks < 2 * c->num_sms) {
            S = (2 * c->num_sms + blocks - 1) / blocks;
            int64_t maxS = (keys + 255) / 256;
            if (S > maxS) S = maxS;
            if (S > 1024) S = 1024;
            if (S < 1) S = 1;
        }
        chunk = (keys + S - 1) / S;
        chunk = (chunk + ATT_BK - 1) / ATT_BK * ATT_BK;
    }
    S = (keys + chunk - 1) / chunk;
    FD_CHECK(S <= 65535, "attention: %lld key splits exceed the grid", (long long)S);
    const int split = decode || S > 1; // decode calls always merge through the combine (one code path per row)
    float *opart = NULL, *ml = NULL;
    if (split) {
        opart = (float *)cu_scratch(be, CU_SCR_B, (size_t)S * n * H * hd * 4);
        ml = (float *)cu_scratch(be, CU_SCR_C, (size_t)S * n * H * 2 * 4);
    }
    cu_prof pr;
    cu_prof_begin(be, &pr, "attention_simt", n);
    dim3 grid((unsigned)tiles, (unsigned)Hkv, (unsigned)S);
    cu_launch(be, k_attention<false>, grid, 128, smem, (float *)out, opart, ml, (const float *)q, kv, pos0, pos_dev, n,
              H, Hkv, hd, scale, chunk, S, causal, (const int32_t *)NULL);
    cu_prof_mark(be, &pr, split ? "splits" : "main");
    if (split) {
        cu_attn_combine(be, (float *)out, opart, ml, S, chunk, pos0, pos_dev, n, H, hd, causal, 0);
        cu_prof_mark(be, &pr, "combine");
    }
    cu_prof_end(be, &pr);
}

void cu_attention_tree(fd_backend *be, void *out, const void *q, const fd_kv_view *view, int64_t pos0, int n, int H,
                       int Hkv, int hd, float scale, const int32_t *parent_dev) {
    if (n <= 0) return;
    FD_CHECK(parent_dev, "attention_tree: parents required");
    FD_CHECK(n <= CU_TREE_MAX_NODES, "attention_tree of %d nodes: at most %d", n, CU_TREE_MAX_NODES);
    if ((hd & 1) || hd > 2 * 32 * ATT_MAXP) FD_PANIC("attention head_dim %d unsupported (even, <= 256)", hd);
    if (Hkv <= 0 || H % Hkv) FD_PANIC("attention: %d heads not a multiple of %d kv heads", H, Hkv);
    FD_CHECK(pos0 >= 0 && pos0 + n <= view->capacity, "attention_tree: keys [0, %lld) beyond capacity %lld",
             (long long)(pos0 + n), (long long)view->capacity);
    cu_impl *c = cu_of(be);
    const cu_kv kv = cu_kv_view(be, view, Hkv, hd);
    fd_route *route = &c->routes[CU_ROUTE_ATTN_KERNEL];
    if (cu_attention_decode_tree(be, (float *)out, (const float *)q, kv, pos0, n, H, Hkv, hd, scale, parent_dev)) {
        route->calls[CU_ATTN_SPLITK]++;
        route->tokens[CU_ATTN_SPLITK] += n;
        return;
    }
    // other head dims: this file's kernel on the decode chunks, always through the combine (as a decode call)
    route->calls[CU_ATTN_SIMT]++;
    route->tokens[CU_ATTN_SIMT] += n;
    const size_t smem = (size_t)ATT_BQ * hd * 4 + (size_t)ATT_BK * (hd / 2 + 1) * 4 + (size_t)ATT_BK * (hd / 2) * 4;
    FD_CUDA_CHECK(cudaFuncSetAttribute(k_attention<true>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    const int64_t rows = (int64_t)n * (H / Hkv), tiles = (rows + ATT_BQ - 1) / ATT_BQ, keys = pos0 + n;
    const int64_t chunk = CU_DECODE_CHUNK, S = (keys + chunk - 1) / chunk;
    FD_CHECK(S <= 65535, "attention_tree: %lld key chunks exceed the grid", (long long)S);
    float *opart = (float *)cu_scratch(be, CU_SCR_B, (size_t)S * n * H * hd * 4);
    float *ml = (float *)cu_scratch(be, CU_SCR_C, (size_t)S * n * H * 2 * 4);
    cu_prof pr;
    cu_prof_begin(be, &pr, "attention_simt_tree", n);
    dim3 grid((unsigned)tiles, (unsigned)Hkv, (unsigned)S);
    cu_launch(be, k_attention<true>, grid, 128, smem, (float *)out, opart, ml, (const float *)q, kv, pos0,
              (const int64_t *)NULL, n, H, Hkv, hd, scale, chunk, S, 1, parent_dev);
    cu_prof_mark(be, &pr, "splits");
    cu_attn_combine(be, (float *)out, opart, ml, S, chunk, pos0, NULL, n, H, hd, 1, 0);
    cu_prof_mark(be, &pr, "combine");
    cu_prof_end(be, &pr);
}
