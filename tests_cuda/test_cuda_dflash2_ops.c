// The DFlash2 drafter ops on the GPU (src/cuda/dflash2.cu) against the CPU reference (src/cpu/cpu_dflash2.c) on
// fresh random inputs, outputs poisoned with NaN before each GPU call (test_rel_l2 fails on any NaN):
//   dyn_conv          bitwise equal (same fp32 operations in the same order; bf16 and fp32 base kernels), and
//                     rel-L2 <= 2e-5 as a fallback report
//   attention_window  rel-L2 <= 1e-2 on both KV layouts: bf16 (GPU) vs f32 (CPU) cache, and e4m3 on both sides
//                     (the two backends quantise to the same bytes; the GPU reads them through bf16)
#include <stdlib.h>
#include <string.h>

#include "../tests/test.h"
#include "backend.h"
#include "cuda/cuda.h"
#include "cuda_rig.h"
#include "engine/routes.h"

static cuda_rig g_rig = {.seed = 0x5eed0d2full}; // random inputs only: backends are made per layout

// A backend with route kv set (the layout is fixed once a cache is sized, so each layout gets its own backend).
static fd_backend *make(int gpu, const char *kv) {
    fd_backend *be = gpu ? cuda_rig_new_gpu() : fd_backend_cpu_create(0);
    FD_CHECK(routes_backend_preset(be, &kv, 1) == 0, "%s", fd_error_msg());
    return be;
}

// One dyn_conv call of the engine's shape: dyn [n, 2 K G] holds the pre and the post taps; `half` picks one.
static void check_dyn_conv(fd_backend *c, fd_backend *g, int n, int d, int group, int K, fd_dtype base_dt, int half) {
    const int G = d / group, stride = 2 * K * G;
    float *x = cuda_rig_rnd(&g_rig, (size_t)n * d, -2, 2), *dyn = cuda_rig_rnd(&g_rig, (size_t)n * stride, -1, 1),
          *bf = cuda_rig_rnd(&g_rig, (size_t)2 * K * d, -1, 1);
    void *bdata = bf;
    if (base_dt == FD_BF16) { // the published drafters ship bf16 base kernels
        uint16_t *b16 = fd_malloc((size_t)2 * K * d * 2);
        for (int i = 0; i < 2 * K * d; i++) b16[i] = fd_f32_to_bf16(bf[i]);
        bdata = b16;
    }
    fd_weight wc = {.name = "base_kernel", .dtype = base_dt, .rows = 2, .cols = (int64_t)K * d, .data = bdata};
    fd_weight wg = wc;
    c->upload_weight(c, &wc);
    g->upload_weight(g, &wg);
    float *oc = fd_malloc((size_t)n * d * 4), *og = fd_malloc((size_t)n * d * 4);
    void *dx = cuda_rig_up(g, x, (size_t)n * d * 4), *ddyn = cuda_rig_up(g, dyn, (size_t)n * stride * 4);
    void *dout = g->alloc(g, (size_t)n * d * 4);
    cuda_rig_poison(g, dout, (size_t)n * d);
    const size_t off = (size_t)half * K * G;
    g->dyn_conv(g, dout, dx, (const float *)ddyn + off, stride, &wg, half, n, d, group, K);
    c->dyn_conv(c, oc, x, dyn + off, stride, &wc, half, n, d, group, K);
    g->to_host(g, og, dout, (size_t)n * d * 4);
    const double e = test_rel_l2(og, oc, (size_t)n * d);
    const int same = !memcmp(og, oc, (size_t)n * d * 4);
    printf("    dyn_conv n=%-2d d=%-4d group=%-2d K=%d base %s half %d%s: rel-L2 %.3g\n", n, d, group, K,
           fd_dtype_name(base_dt), half, same ? " (bitwise)" : " (NOT bitwise)", e);
    EXPECT(e <= TOL_F32, "dyn_conv n=%d d=%d: rel-L2 %.3g", n, d, e);
    EXPECT(same, "dyn_conv n=%d d=%d group=%d K=%d: not bitwise equal to the CPU", n, d, group, K);
    g->free(g, dx), g->free(g, ddyn), g->free(g, dout), g->release_weight(g, &wg);
    free(x), free(dyn), free(bf), free(oc), free(og);
    if (bdata != bf) free(bdata);
}

TEST(cuda_dflash2_dyn_conv) {
    fd_backend *c = fd_backend_cpu_create(0), *g = cuda_rig_new_gpu();
    // n, d, group, K: the fixtures' (16, 64, 8, 2), the 27B drafter's (16, 5120, 16, 2), a single row, odd shapes
    const int shapes[][4] = {{16, 64, 8, 2}, {8, 64, 8, 2},    {16, 5120, 16, 2}, {1, 96, 32, 1},
                             {4, 96, 32, 3}, {16, 2048, 1, 4}, {7, 1000, 8, 7}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int half = 0; half < 2; half++)
            check_dyn_conv(c, g, shapes[s][0], shapes[s][1], shapes[s][2], shapes[s][3], s % 2 ? FD_F32 : FD_BF16,
                           half);
    c->destroy(c);
    g->destroy(g);
}

// Stores n0 + n random K/V rows (in two calls, like context + block), then the windowed attention of the n block
// queries at positions n0.. on both backends.
static void check_window(fd_backend *c, fd_backend *g, const char *kv, int n0, int n, int H, int Hkv, int hd,
                         int window) {
    const int64_t tot = n0 + n, cap = tot + 5;
    const size_t row = (size_t)Hkv * hd, qn = (size_t)n * H * hd;
    const size_t tc = c->kv_bytes_per_token(c, Hkv, hd), tg = g->kv_bytes_per_token(g, Hkv, hd);
    float *k = cuda_rig_rnd(&g_rig, (size_t)tot * row, -2, 2), *v = cuda_rig_rnd(&g_rig, (size_t)tot * row, -1, 1),
          *q = cuda_rig_rnd(&g_rig, qn, -2, 2);
    void *cc = c->alloc(c, tc * (size_t)cap), *cg = g->alloc(g, tg * (size_t)cap);
    void *dk = cuda_rig_up(g, k, (size_t)tot * row * 4), *dv = cuda_rig_up(g, v, (size_t)tot * row * 4),
         *dq = cuda_rig_up(g, q, qn * 4);
    const int64_t starts[2] = {0, n0}, counts[2] = {n0, n};
    for (int i = 0; i < 2; i++) {
        if (!counts[i]) continue;
        const size_t o = (size_t)starts[i] * row;
        c->kv_store(c, FD_KV_FLAT(cc, cap), k + o, v + o, starts[i], NULL, (int)counts[i], Hkv, hd);
        g->kv_store(g, FD_KV_FLAT(cg, cap), (const float *)dk + o, (const float *)dv + o, starts[i], NULL,
                    (int)counts[i], Hkv, hd);
    }
    const float scale = 1.0f / sqrtf((float)hd);
    float *oc = fd_malloc(qn * 4), *og = fd_malloc(qn * 4);
    void *dout = g->alloc(g, qn * 4);
    cuda_rig_poison(g, dout, qn);
    g->attention_window(g, dout, dq, FD_KV_FLAT(cg, cap), n0, n, H, Hkv, hd, scale, window);
    c->attention_window(c, oc, q, FD_KV_FLAT(cc, cap), n0, n, H, Hkv, hd, scale, window);
    g->to_host(g, og, dout, qn * 4);
    const double e = test_rel_l2(og, oc, qn);
    printf("    attention_window kv=%-4s pos0=%-4d n=%-2d H=%-2d Hkv=%d hd=%-3d window=%-4d rel-L2 %.3g\n", kv, n0, n,
           H, Hkv, hd, window, e);
    EXPECT(e <= TOL_ATTN, "attention_window kv=%s pos0=%d n=%d hd=%d window=%d: rel-L2 %.3g", kv, n0, n, hd, window, e);
    g->free(g, cg), g->free(g, dk), g->free(g, dv), g->free(g, dq), g->free(g, dout), c->free(c, cc);
    free(k), free(v), free(q), free(oc), free(og);
}

TEST(cuda_dflash2_attention_window) {
    // pos0 (context), n (block), H, Hkv, hd, window
    const int shapes[][6] = {
        {100, 16, 4, 2, 16, 64},      // the windowed fixture's geometry, window binding
        {3000, 16, 32, 8, 128, 2048}, // a 27B-class drafter: long context, window 2048 (split-K on)
        {50, 8, 4, 2, 16, 5},         // window shorter than the block: rows see different key ranges
        {0, 16, 4, 4, 64, 3},         // no context at all
        {500, 4, 6, 2, 256, 20},      // hd 256
        {40, 16, 8, 1, 64, 100},      // window wider than every key (masks nothing)
        {300, 16, 8, 2, 128, 1},      // window 1: each query sees only its own key
        {20000, 8, 16, 4, 128, 4096}, // far context, many splits
    };
    const char *layouts[2][2] = {{"kv=f32", "kv=bf16"}, {"kv=e4m3", "kv=e4m3"}}; // cpu, gpu
    for (int l = 0; l < 2; l++) {
        fd_backend *c = make(0, layouts[l][0]), *g = make(1, layouts[l][1]);
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
            check_window(c, g, l ? "e4m3" : "bf16", shapes[s][0], shapes[s][1], shapes[s][2], shapes[s][3],
                         shapes[s][4], shapes[s][5]);
        c->destroy(c);
        g->destroy(g);
    }
}
