// FP8 E4M3 KV cache on the GPU (route kv=e4m3) against the CPU backend's e4m3 cache: the quantised caches must be
// identical byte for byte (same rounding, same scales), attention over them must agree like the bf16 path, and
// kv_copy must move positions between caches of different capacities exactly.
#include <stdlib.h>
#include <string.h>

#include "../tests/test.h"
#include "cuda/cuda.h"
#include "cuda_rig.h"
#include "engine/routes.h"

static fd_backend *make(int gpu) {
    fd_backend *be = gpu ? cuda_rig_new_gpu() : fd_backend_cpu_create(0);
    const char *spec = "kv=e4m3";
    FD_CHECK(routes_backend_preset(be, &spec, 1) == 0, "%s", fd_error_msg());
    return be;
}

static void check(fd_backend *c, fd_backend *g, int n0, int n, int H, int Hkv, int hd, const char *kernel, int causal) {
    ASSERT(fd_cuda_set_route(g, "attn_kernel", kernel) == 0, "%s", fd_error_msg());
    const int64_t cap = n0 + n + 3;
    const size_t row = (size_t)Hkv * hd, tb = c->kv_bytes_per_token(c, Hkv, hd);
    ASSERT(tb == g->kv_bytes_per_token(g, Hkv, hd), "e4m3 layouts differ in size");
    uint64_t seed = 77 + (uint64_t)n0 * 31 + (uint64_t)n;
    const int64_t tot = n0 + n;
    float *k = malloc(sizeof(float) * tot * row), *v = malloc(sizeof(float) * tot * row);
    float *q = malloc(sizeof(float) * n * H * hd), *oc = malloc(sizeof(float) * n * H * hd);
    float *og = malloc(sizeof(float) * n * H * hd);
    test_fill_uniform(k, (size_t)tot * row, -3, 3, &seed);
    test_fill_uniform(v, (size_t)tot * row, -1, 1, &seed);
    test_fill_uniform(q, (size_t)n * H * hd, -2, 2, &seed);
    k[5] = 0; // a zero row exercises the amax == 0 scale
    void *cc = c->alloc(c, tb * cap), *cg = g->alloc(g, tb * cap);
    void *dk = cuda_rig_up(g, k, sizeof(float) * tot * row), *dv = cuda_rig_up(g, v, sizeof(float) * tot * row);
    c->kv_store(c, FD_KV_FLAT(cc, cap), k, v, 0, NULL, (int)tot, Hkv, hd);
    g->kv_store(g, FD_KV_FLAT(cg, cap), dk, dv, 0, NULL, (int)tot, Hkv, hd);
    unsigned char *gb = malloc(tb * cap);
    g->to_host(g, gb, cg, tb * cap);
    // bytes of the stored positions: K and V planes, then their scales
    const size_t plane = (size_t)cap * row;
    int same = !memcmp(gb, cc, (size_t)tot * row) && !memcmp(gb + plane, (char *)cc + plane, (size_t)tot * row) &&
               !memcmp(gb + 2 * plane, (char *)cc + 2 * plane, (size_t)tot * Hkv * 4) &&
               !memcmp(gb + 2 * plane + cap * Hkv * 4, (char *)cc + 2 * plane + cap * Hkv * 4, (size_t)tot * Hkv * 4);
    EXPECT(same, "hd=%d: GPU e4m3 cache differs from the CPU one", hd);
    void *dq = cuda_rig_up(g, q, sizeof(float) * n * H * hd), *dout = g->alloc(g, sizeof(float) * n * H * hd);
    memset(og, 0xff, sizeof(float) * n * H * hd); // NaN everywhere: a row the kernel forgets cannot pass
    g->to_device(g, dout, og, sizeof(float) * n * H * hd);
    c->attention(c, oc, q, FD_KV_FLAT(cc, cap), n0, NULL, n, H, Hkv, hd, 1.0f / sqrtf((float)hd), causal);
    g->attention(g, dout, dq, FD_KV_FLAT(cg, cap), n0, NULL, n, H, Hkv, hd, 1.0f / sqrtf((float)hd), causal);
    g->to_host(g, og, dout, sizeof(float) * n * H * hd);
    const double e = test_rel_l2(og, oc, (size_t)n * H * hd);
    printf("    e4m3 %s%s pos0=%d n=%d H=%d Hkv=%d hd=%d: attention rel-L2 vs CPU e4m3 %.2e\n", kernel,
           causal ? "" : " noncausal", n0, n, H, Hkv, hd, e);
    EXPECT(e <= TOL_ATTN, "e4m3 attention rel-L2 %.3g", e);
    // kv_copy through a smaller cache and back gives the same attention
    void *snap = g->alloc(g, tb * (size_t)n), *cg2 = g->alloc(g, tb * cap);
    g->kv_copy(g, FD_KV_FLAT(cg2, cap), 0, FD_KV_FLAT(cg, cap), 0, n0, Hkv, hd);
    g->kv_copy(g, FD_KV_FLAT(snap, n), 0, FD_KV_FLAT(cg, cap), n0, n, Hkv, hd);
    g->kv_copy(g, FD_KV_FLAT(cg2, cap), n0, FD_KV_FLAT(snap, n), 0, n, Hkv, hd);
    g->attention(g, dout, dq, FD_KV_FLAT(cg2, cap), n0, NULL, n, H, Hkv, hd, 1.0f / sqrtf((float)hd), causal);
    float *og2 = malloc(sizeof(float) * n * H * hd);
    g->to_host(g, og2, dout, sizeof(float) * n * H * hd);
    EXPECT(!memcmp(og2, og, sizeof(float) * n * H * hd), "kv_copy changed the attention output");
    free(og2);
    g->free(g, snap), g->free(g, cg2), g->free(g, dq), g->free(g, dout), g->free(g, dk), g->free(g, dv);
    g->free(g, cg), c->free(c, cc);
    free(gb), free(k), free(v), free(q), free(oc), free(og);
}

TEST(cuda_kv_e4m3) {
    fd_backend *c = make(0), *g = make(1);
    check(c, g, 0, 100, 8, 2, 128, "simt", 1);
    check(c, g, 300, 5, 6, 2, 256, "simt", 1);
    check(c, g, 0, 200, 8, 2, 128, "mma", 1);
    check(c, g, 64, 96, 6, 2, 256, "mma", 1);
    check(c, g, 64, 96, 6, 2, 256, "wgmma", 1); // e4m3: the wgmma route runs the mma kernel
    // the tensor-core kernel's e4m3 path: many key tiles, pos0 off the tile grid, rows no multiple of the block
    check(c, g, 2000, 150, 6, 1, 256, "mma", 1);
    check(c, g, 77, 90, 8, 2, 64, "mma", 0);
    check(c, g, 130, 70, 4, 2, 128, "mma", 0);
    const char *back = "kv=bf16";
    EXPECT(routes_backend_preset(g, &back, 1) != 0, "the kv layout must be fixed once caches exist");
    c->destroy(c);
    g->destroy(g);
}
