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
    // the wgmma kernel's e4m3 path (head_dim 256): one block, and many key tiles with pos0 off the tile grid
    const int64_t wg0 = cuda_rig_route_value_calls(g, "attn_kernel", "wgmma");
    check(c, g, 64, 96, 6, 2, 256, "wgmma", 1);
    check(c, g, 2000, 150, 6, 1, 256, "wgmma", 1);
    check(c, g, 700, 300, 6, 2, 256, "wgmma", 0);
    EXPECT(cuda_rig_route_value_calls(g, "attn_kernel", "wgmma") - wg0 == 6, "the e4m3 wgmma kernel ran %lld times",
           (long long)(cuda_rig_route_value_calls(g, "attn_kernel", "wgmma") - wg0));
    // the tensor-core kernel's e4m3 path: many key tiles, pos0 off the tile grid, rows no multiple of the block
    check(c, g, 2000, 150, 6, 1, 256, "mma", 1);
    check(c, g, 77, 90, 8, 2, 64, "mma", 0);
    check(c, g, 130, 70, 4, 2, 128, "mma", 0);
    const char *back = "kv=bf16";
    EXPECT(routes_backend_preset(g, &back, 1) != 0, "the kv layout must be fixed once caches exist");
    c->destroy(c);
    g->destroy(g);
}

// copy_batch (the speculative commit's state copies in one launch) against the same copies made on the host:
// 100 entries (two launches of at most 64), sizes from 0 to ~3 MB, 16-byte aligned and not, each destination
// padded with poison on both sides so a byte written outside its range shows.
static uint64_t xorshift(uint64_t *s) {
    *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
    return *s;
}

TEST(cuda_copy_batch_matches_host) {
    fd_backend *g = cuda_rig_new_gpu();
    enum { N = 100, PAD = 48 };
    uint64_t seed = 4242;
    void *dst[N];
    const void *src[N];
    size_t bytes[N], off[N];
    unsigned char *want[N];
    void *dbase[N], *sbase[N];
    for (int i = 0; i < N; i++) {
        const uint64_t r = xorshift(&seed);
        bytes[i] = i == 3 ? 0 : i % 7 == 0 ? (size_t)(3u << 20) + 16 * (r % 5) : (size_t)(r % 200000) + (i % 2 ? 0 : 5);
        off[i] = i % 3 == 0 ? 16 : (size_t)(r >> 40) % 15 + 1; // aligned and unaligned starts
        unsigned char *h = malloc(bytes[i] + 2 * PAD), *p = malloc(bytes[i] + 2 * PAD);
        for (size_t j = 0; j < bytes[i] + 2 * PAD; j++) h[j] = (unsigned char)xorshift(&seed), p[j] = 0xA5;
        sbase[i] = cuda_rig_up(g, h, bytes[i] + 2 * PAD);
        dbase[i] = cuda_rig_up(g, p, bytes[i] + 2 * PAD);
        src[i] = (char *)sbase[i] + off[i], dst[i] = (char *)dbase[i] + (i % 5 == 0 ? off[i] : 16);
        memcpy(p + ((char *)dst[i] - (char *)dbase[i]), h + off[i], bytes[i]);
        want[i] = p;
        free(h);
    }
    ASSERT(g->copy_batch != NULL, "the cuda backend has copy_batch");
    g->copy_batch(g, dst, src, bytes, N);
    int bad = 0;
    for (int i = 0; i < N; i++) {
        unsigned char *got = malloc(bytes[i] + 2 * PAD);
        g->to_host(g, got, dbase[i], bytes[i] + 2 * PAD);
        if (memcmp(got, want[i], bytes[i] + 2 * PAD) && bad++ < 5)
            EXPECT(0, "entry %d (%zu bytes, src +%zu): differs from the host copy or wrote outside", i, bytes[i], off[i]);
        free(got), free(want[i]);
        g->free(g, dbase[i]), g->free(g, sbase[i]);
    }
    EXPECT(bad == 0, "%d of %d entries wrong", bad, N);
    g->destroy(g);
}
