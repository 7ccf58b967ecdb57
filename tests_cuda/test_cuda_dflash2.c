// DFlash2 on the CUDA backend: the two drafter ops (dyn_conv, attention_window) against the CPU reference on random
// inputs, the draft logits against the NeMo reference fixtures (the GPU bound, 2e-2), and speculative greedy
// output identical to plain greedy at block sizes 4/8/16 with both gemm_act routes, also with forced accept counts.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../tests/spec_rig.h"
#include "../tests/test.h"
#include "cuda/cuda.h"
#include "engine/dflash2.h"
#include "engine/routes.h"

static fd_backend *gpu(void) {
    static fd_backend *be;
    if (!be) be = fd_backend_cuda_create(0);
    return be;
}
static fd_backend *cpu(void) {
    static fd_backend *be;
    if (!be) be = fd_backend_cpu_create(0);
    return be;
}

static uint64_t g_seed = 777;

static float *rnd(size_t n, float lo, float hi) {
    float *h = fd_malloc(n * sizeof(float));
    test_fill_uniform(h, n, lo, hi, &g_seed);
    return h;
}
static void *up(const float *h, size_t n) {
    void *d = gpu()->alloc(gpu(), n * sizeof(float));
    gpu()->to_device(gpu(), d, h, n * sizeof(float));
    return d;
}
// A GPU buffer of n floats filled with NaN: anything the kernel forgets to write fails the comparison.
static void *poisoned(size_t n) {
    float *h = fd_malloc(n * sizeof(float));
    memset(h, 0xff, n * sizeof(float));
    void *d = up(h, n);
    free(h);
    return d;
}
static float *down(const void *d, size_t n) {
    float *h = fd_malloc(n * sizeof(float));
    gpu()->to_host(gpu(), h, d, n * sizeof(float));
    return h;
}

TEST(cuda_dflash2_dyn_conv_vs_cpu) {
    const struct {
        int n, d, group, K, bf16;
    } cases[] = {{1, 64, 8, 2, 0}, {5, 96, 1, 3, 1}, {16, 256, 32, 2, 1}, {16, 5120 / 8, 8, 4, 0}, {8, 40, 40, 2, 1}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int n = cases[c].n, d = cases[c].d, K = cases[c].K, G = d / cases[c].group, stride = 2 * K * G;
        float *x = rnd((size_t)n * d, -1, 1), *dyn = rnd((size_t)n * stride, -0.5f, 0.5f);
        float *bw = rnd((size_t)2 * K * d, -1, 1);
        uint16_t *bb = fd_malloc(sizeof(uint16_t) * 2 * K * d);
        for (int i = 0; i < 2 * K * d; i++) bb[i] = fd_f32_to_bf16(bw[i]), bw[i] = fd_bf16_to_f32(bb[i]);
        // rows 2K x cols d: a published [2, K, d] base kernel; bf16 when cols >= 16 keeps bf16 on the GPU
        fd_weight wc = {.name = "base", .dtype = cases[c].bf16 ? FD_BF16 : FD_F32, .rows = 2 * K, .cols = d,
                        .data = cases[c].bf16 ? (const void *)bb : (const void *)bw};
        fd_weight wg = wc;
        cpu()->upload_weight(cpu(), &wc);
        gpu()->upload_weight(gpu(), &wg);
        void *dx = up(x, (size_t)n * d), *ddyn = up(dyn, (size_t)n * stride);
        float *oc = fd_malloc(sizeof(float) * n * d);
        for (int half = 0; half < 2; half++) {
            void *dout = poisoned((size_t)n * d);
            cpu()->dyn_conv(cpu(), oc, x, dyn + half * K * G, stride, &wc, half, n, d, cases[c].group, K);
            gpu()->dyn_conv(gpu(), dout, dx, (const float *)ddyn + half * K * G, stride, &wg, half, n, d,
                            cases[c].group, K);
            float *og = down(dout, (size_t)n * d);
            const double e = test_rel_l2(og, oc, (size_t)n * d);
            printf("    dyn_conv n=%-2d d=%-4d group=%-2d K=%d half=%d %s: rel-L2 %.2e\n", n, d, cases[c].group, K, half,
                   cases[c].bf16 ? "bf16" : "f32 ", e);
            EXPECT(e <= 1e-6, "dyn_conv case %zu half %d: rel-L2 %.3g", c, half, e);
            free(og);
            gpu()->free(gpu(), dout);
        }
        gpu()->release_weight(gpu(), &wg);
        gpu()->free(gpu(), dx), gpu()->free(gpu(), ddyn);
        free(x), free(dyn), free(bw), free(bb), free(oc);
    }
}

// The CPU window kernel reads the f32 cache; the GPU caches are bf16 (or e4m3) copies of the same K/V, so the
// bound is the cache rounding's (the decode kernels' 1e-2).
TEST(cuda_dflash2_attention_window_vs_cpu) {
    const struct {
        int n, pos0, H, Hkv, hd, window;
    } cases[] = {{1, 0, 4, 1, 64, 1},      {8, 37, 8, 2, 128, 5},   {16, 600, 8, 2, 256, 64},
                 {16, 600, 4, 4, 128, 4096}, {7, 1000, 32, 8, 128, 2048}, {3, 5, 6, 2, 96, 3}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int n = cases[c].n, H = cases[c].H, Hkv = cases[c].Hkv, hd = cases[c].hd;
        const int64_t tot = cases[c].pos0 + n, cap = tot + 3;
        const size_t kvn = (size_t)tot * Hkv * hd, qn = (size_t)n * H * hd;
        float *k = rnd(kvn, -1, 1), *v = rnd(kvn, -1, 1), *q = rnd(qn, -1, 1);
        for (int kvmode = 0; kvmode < 2; kvmode++) {
            fd_backend *g = kvmode ? fd_backend_cuda_create(0) : gpu();
            if (kvmode) {
                const char *spec = "kv=e4m3";
                ASSERT(routes_backend_preset(g, &spec, 1) == 0, "%s", fd_error_msg());
            }
            void *cc = cpu()->alloc(cpu(), cpu()->kv_bytes_per_token(cpu(), Hkv, hd) * (size_t)cap);
            void *cg = g->alloc(g, g->kv_bytes_per_token(g, Hkv, hd) * (size_t)cap);
            cpu()->kv_store(cpu(), cc, k, v, 0, (int)tot, Hkv, hd, cap);
            void *dk = g->alloc(g, kvn * 4), *dv = g->alloc(g, kvn * 4), *dq = g->alloc(g, qn * 4);
            g->to_device(g, dk, k, kvn * 4), g->to_device(g, dv, v, kvn * 4), g->to_device(g, dq, q, qn * 4);
            g->kv_store(g, cg, dk, dv, 0, (int)tot, Hkv, hd, cap);
            float *oc = fd_malloc(qn * 4), *og = fd_malloc(qn * 4);
            memset(og, 0xff, qn * 4);
            void *dout = g->alloc(g, qn * 4);
            g->to_device(g, dout, og, qn * 4);
            const float scale = 1.0f / sqrtf((float)hd);
            cpu()->attention_window(cpu(), oc, q, cc, cases[c].pos0, n, H, Hkv, hd, cap, scale, cases[c].window);
            g->attention_window(g, dout, dq, cg, cases[c].pos0, n, H, Hkv, hd, cap, scale, cases[c].window);
            g->to_host(g, og, dout, qn * 4);
            const double e = test_rel_l2(og, oc, qn);
            printf("    attention_window n=%-2d pos0=%-4d H=%-2d Hkv=%d hd=%-3d window=%-4d kv=%s: rel-L2 %.2e\n", n,
                   cases[c].pos0, H, Hkv, hd, cases[c].window, kvmode ? "e4m3" : "bf16", e);
            EXPECT(e <= (kvmode ? 4e-2 : 1e-2), "attention_window case %zu kv %d: rel-L2 %.3g", c, kvmode, e);
            free(oc), free(og);
            g->free(g, dk), g->free(g, dv), g->free(g, dq), g->free(g, dout), g->free(g, cg);
            cpu()->free(cpu(), cc);
            if (kvmode) g->destroy(g);
        }
        free(k), free(v), free(q);
    }
}

static const struct {
    const char *name, *target;
    int block;
} k_d2[] = {{"qwen35_dense_tied_d2_b8", "qwen35_dense_tied", 8}, {"qwen35_moe_d2_b16", "qwen35_moe", 16}};

TEST(cuda_dflash2_draft_logits_match_reference) {
    ASSERT(fd_cuda_set_route(gpu(), "gemm_act", "bf16x2") == 0, "%s", fd_error_msg());
    for (size_t f = 0; f < sizeof k_d2 / sizeof k_d2[0]; f++) {
        spec_rig r;
        ASSERT(spec_rig_open(&r, gpu(), k_d2[f].target, k_d2[f].name, 0, 0) == 0, "%s: %s", k_d2[f].name,
               fd_error_msg());
        ASSERT(r.d.v2 && r.s.v2, "%s: not loaded as DFlash2", k_d2[f].name);
        const int B = r.s.B, V = r.m.cfg.vocab_size, n = B - 1;
        float *want1 = dflash_fixture_f32(k_d2[f].name, "draft_logits.f32", (size_t)n * V);
        float *want2 = dflash_fixture_f32(k_d2[f].name, "draft_logits2.f32", (size_t)n * V);
        ASSERT(want1 && want2, "%s: reference files missing", k_d2[f].name);
        float *got = malloc(sizeof(float) * n * V);
        int32_t anchor, draft[FD_SPEC_MAX_BLOCK];
        ASSERT(dflash_prefill(&r.s, r.fx.ids, r.fx.n_ids, 64, NULL, &anchor) == 0, "%s", fd_error_msg());
        EXPECT(anchor == r.fx.greedy[0], "%s: anchor %d, HF greedy %d", k_d2[f].name, anchor, r.fx.greedy[0]);
        ASSERT(dflash_draft(&r.s, anchor, draft, got) == 0, "%s", fd_error_msg());
        const double e1 = test_rel_l2(got, want1, (size_t)n * V);
        printf("    %-24s round 1: draft logits rel-L2 vs the NeMo reference %.2e\n", k_d2[f].name, e1);
        EXPECT(e1 <= 2e-2, "%s round 1: rel-L2 %.3g", k_d2[f].name, e1);
        (void)want2; // round 2 depends on the CPU test's commit schedule; round 1 already covers every op
        free(got), free(want1), free(want2);
        spec_rig_close(&r);
    }
}

// Greedy DFlash2 output == plain greedy (HF's), every block size, both GEMM routes, and with forced accept counts.
TEST(cuda_dflash2_greedy_identical_at_block_sizes) {
    const char *routes[] = {"bf16x2", "bf16"};
    const int blocks[] = {4, 8, 16};
    for (int ro = 0; ro < 2; ro++) {
        ASSERT(fd_cuda_set_route(gpu(), "gemm_act", routes[ro]) == 0, "%s", fd_error_msg());
        for (size_t f = 0; f < sizeof k_d2 / sizeof k_d2[0]; f++)
            for (int b = 0; b < 3; b++) {
                spec_rig r;
                ASSERT(spec_rig_open(&r, gpu(), k_d2[f].target, k_d2[f].name, blocks[b], 0) == 0, "%s",
                       fd_error_msg());
                int32_t *out = calloc((size_t)r.fx.n_greedy, sizeof *out), *plain = calloc((size_t)r.fx.n_greedy, 4);
                ASSERT(engine_generate_greedy(&r.e, r.fx.ids, r.fx.n_ids, 64, r.fx.n_greedy, plain) == 0, "%s",
                       fd_error_msg());
                engine_reset(&r.e);
                ASSERT(dflash_generate(&r.s, r.fx.ids, r.fx.n_ids, 64, r.fx.n_greedy, NULL, out) == 0, "%s",
                       fd_error_msg());
                int same = 0, same_hf = 0;
                while (same < r.fx.n_greedy && out[same] == plain[same]) same++;
                while (same_hf < r.fx.n_greedy && plain[same_hf] == r.fx.greedy[same_hf]) same_hf++;
                // forced accept counts 0..B-1
                dflash_reset(&r.s);
                engine_reset(&r.e);
                int sched[FD_SPEC_MAX_BLOCK];
                for (int a = 0; a < blocks[b]; a++) sched[a] = (a * 5 + 3) % blocks[b];
                fd_spec_oracle orc = {.ref = plain, .ref_len = r.fx.n_greedy, .accept = sched, .n_accept = blocks[b]};
                r.s.oracle = &orc;
                int32_t *forced = calloc((size_t)r.fx.n_greedy, sizeof *forced);
                ASSERT(dflash_generate(&r.s, r.fx.ids, r.fx.n_ids, 64, r.fx.n_greedy, NULL, forced) == 0, "%s",
                       fd_error_msg());
                int same_forced = 0;
                while (same_forced < r.fx.n_greedy && forced[same_forced] == plain[same_forced]) same_forced++;
                printf("    %-24s gemm_act=%-6s block %2d: DFlash2 == plain greedy for %d/%d tokens, forced accepts "
                       "%d/%d (plain == HF for %d)\n",
                       k_d2[f].name, routes[ro], blocks[b], same, r.fx.n_greedy, same_forced, r.fx.n_greedy, same_hf);
                EXPECT(same == r.fx.n_greedy && same_forced == r.fx.n_greedy,
                       "%s %s block %d: DFlash2 differs from plain greedy at token %d (forced: %d)", k_d2[f].name,
                       routes[ro], blocks[b], same, same_forced);
                free(out), free(plain), free(forced);
                spec_rig_close(&r);
            }
    }
    ASSERT(fd_cuda_set_route(gpu(), "gemm_act", "bf16") == 0, "%s", fd_error_msg());
}
