// The DFlash2 drafter's windowed attention on the GPU (src/cuda/dflash2.cu) against the CPU reference
// (src/cpu/cpu_dflash2.c) on fresh random inputs, outputs poisoned with NaN before each GPU call (test_rel_l2 fails
// on any NaN): rel-L2 <= TOL_ATTN on both KV layouts: bf16 (GPU) vs f32 (CPU) cache, and e4m3 on both sides (the
// two backends quantise to the same bytes; the GPU reads them through bf16). dyn_conv (exact vs the CPU) and the
// bf16-layout shapes of attention_window are rows of the op table (op_table_seq.c).
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
