// Decode / verify attention (calls with <= 16 query tokens; src/cuda/attention_decode.cu) on both kv layouts and
// both values of route attn_decode (blocked: attention_decode.cu; warp: attention_decode_warp.cu), each check run
// for each kernel:
//  - against the CPU reference (same layout: f32 vs bf16, e4m3 vs e4m3) for n in {1, 2, 5, 8, 16} and positions
//    around the 512-key chunk boundaries, head_dim 64/128/256 (and 96: the CUDA-core fallback on the same chunks),
//    GQA groups 1 and 6, causal and not; GPU outputs poisoned with NaN, rel-L2 <= 1e-2 (bf16 K/V/Q/P: ~3e-3);
//  - bitwise batch invariance: row j of an n-token causal call == the 1-token call at pos0 + j with the same
//    history, and pos_dev with a larger capacity (and a wrong host pos0) == pos_dev NULL;
//  - pos_dev on the > 16-token kernels (mma: bitwise; simt: vs CPU);
//  - the two decode kernels against each other (same bf16 roundings of Q, K/V and P: close, not bitwise).
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../tests/test.h"
#include "cuda/cuda.h"
#include "cuda_rig.h"
#include "engine/routes.h"

typedef struct {
    fd_backend *c, *g;
    const char *kv; // layout name of the GPU side
} pair;

static pair mkpair(int e4m3) {
    pair p = {NULL, NULL, e4m3 ? "e4m3" : "bf16"};
    cuda_rig_pair(p.kv, &p.c, &p.g);
    return p;
}
static void freepair(pair *p) {
    p->c->destroy(p->c);
    p->g->destroy(p->g);
}

// `tokens` random K/V positions stored on both backends in caches of capacity cap.
typedef struct {
    void *cc, *cg;
    int64_t cap;
    int Hkv, hd;
} rig;
static rig mkrig(pair *p, int64_t tokens, int64_t cap, int Hkv, int hd, uint64_t *seed) {
    rig r = {p->c->alloc(p->c, p->c->kv_bytes_per_token(p->c, Hkv, hd) * cap),
             p->g->alloc(p->g, p->g->kv_bytes_per_token(p->g, Hkv, hd) * cap), cap, Hkv, hd};
    const size_t count = (size_t)tokens * Hkv * hd;
    float *k = malloc(count * sizeof(float)), *v = malloc(count * sizeof(float));
    test_fill_uniform(k, count, -2, 2, seed);
    test_fill_uniform(v, count, -1, 1, seed);
    void *dk = cuda_rig_up(p->g, k, count * sizeof(float)), *dv = cuda_rig_up(p->g, v, count * sizeof(float));
    p->c->kv_store(p->c, FD_KV_FLAT(r.cc, cap), k, v, 0, NULL, (int)tokens, Hkv, hd);
    p->g->kv_store(p->g, FD_KV_FLAT(r.cg, cap), dk, dv, 0, NULL, (int)tokens, Hkv, hd);
    p->g->free(p->g, dk), p->g->free(p->g, dv);
    free(k), free(v);
    return r;
}
static void freerig(pair *p, rig *r) {
    p->c->free(p->c, r->cc);
    p->g->free(p->g, r->cg);
}

static int64_t splitk_calls(fd_backend *g) { // attn_kernel's value 2: the split-K decode kernel
    return cuda_rig_route_calls(g, "attn_kernel", 2);
}

// Route attn_decode: the kernel that computes the split-K chunks (both values run every check below).
static const char *const decoders[] = {"blocked", "warp"};
static void set_decoder(fd_backend *g, const char *value) {
    ASSERT(fd_cuda_set_route(g, "attn_decode", value) == 0, "%s", fd_error_msg());
}

// One call on both backends; returns the rel-L2 (INFINITY on any NaN).
static double vs_cpu(pair *p, rig *r, int64_t pos0, int n, int G, int causal, uint64_t *seed) {
    const int H = G * r->Hkv, hd = r->hd;
    const size_t qn = (size_t)n * H * hd;
    const float scale = 1.0f / sqrtf((float)hd);
    float *q = malloc(qn * sizeof(float)), *oc = malloc(qn * sizeof(float)), *og = malloc(qn * sizeof(float));
    test_fill_uniform(q, qn, -2, 2, seed);
    void *dq = cuda_rig_up(p->g, q, qn * sizeof(float)), *dout = p->g->alloc(p->g, qn * sizeof(float));
    cuda_rig_poison(p->g, dout, qn);
    const char *decoder = fd_cuda_route(p->g, "attn_decode");
    const int64_t before = splitk_calls(p->g), before_dec = cuda_rig_route_value_calls(p->g, "attn_decode", decoder);
    p->g->attention(p->g, dout, dq, FD_KV_FLAT(r->cg, r->cap), pos0, NULL, n, H, r->Hkv, hd, scale, causal);
    p->c->attention(p->c, oc, q, FD_KV_FLAT(r->cc, r->cap), pos0, NULL, n, H, r->Hkv, hd, scale, causal);
    p->g->to_host(p->g, og, dout, qn * sizeof(float));
    const int fast = hd == 64 || hd == 128 || hd == 256;
    EXPECT(splitk_calls(p->g) == before + fast, "hd=%d n=%d: the split-K route count did not move as expected", hd, n);
    EXPECT(cuda_rig_route_value_calls(p->g, "attn_decode", decoder) == before_dec + fast,
           "hd=%d n=%d: attn_decode=%s was not counted as expected", hd, n, decoder);
    const double e = test_rel_l2(og, oc, qn);
    p->g->free(p->g, dq), p->g->free(p->g, dout);
    free(q), free(oc), free(og);
    return e;
}

TEST(cuda_decode_attn_vs_cpu) {
    const int hds[] = {64, 128, 256, 96}, groups[] = {1, 6}, ns[] = {1, 2, 5, 8, 16};
    const int64_t pos0s[] = {0, 1, 511, 512, 513, 5000};
    uint64_t seed = 2024;
    for (int e4 = 0; e4 < 2; e4++) {
        pair p = mkpair(e4);
        for (int dk = 0; dk < 2; dk++)
            for (int h = 0; h < 4; h++)
                for (int gi = 0; gi < 2; gi++) {
                    set_decoder(p.g, decoders[dk]);
                    double worst = 0;
                    for (int pi = 0; pi < 6; pi++) {
                        const int64_t pos0 = pos0s[pi];
                        rig r = mkrig(&p, pos0 + 16, pos0 + 16 + 3, 2, hds[h], &seed);
                        for (int ni = 0; ni < 5; ni++)
                            for (int causal = 1; causal >= 0; causal--) {
                                const double e = vs_cpu(&p, &r, pos0, ns[ni], groups[gi], causal, &seed);
                                EXPECT(e <= TOL_ATTN, "[%s] kv=%s hd=%d G=%d pos0=%lld n=%d causal=%d: rel-L2 %.3g",
                                       decoders[dk], p.kv, hds[h], groups[gi], (long long)pos0, ns[ni], causal, e);
                                if (!(e <= worst)) worst = e; // NaN-safe: a NaN becomes the worst
                            }
                        freerig(&p, &r);
                    }
                    printf("    decode attention [%s] kv=%s hd=%d G=%d Hkv=2, n 1..16, pos0 0..5000, (non)causal: "
                           "worst rel-L2 %.3g\n",
                           decoders[dk], p.kv, hds[h], groups[gi], worst);
                }
        freepair(&p);
    }
}

// Bitwise: an n-token causal call vs n one-token calls, and pos_dev + a larger capacity vs pos_dev NULL.
static void check_invariance(pair *pp, int hd, int G, int Hkv, int64_t pos0, int n, uint64_t *seed) {
    pair p = *pp;
    fd_backend *g = p.g;
    const int H = G * Hkv;
    const size_t qn = (size_t)n * H * hd, row = (size_t)H * hd;
    const float scale = 1.0f / sqrtf((float)hd);
    rig r = mkrig(&p, pos0 + n, pos0 + n, Hkv, hd, seed);
    float *q = malloc(qn * sizeof(float)), *on = malloc(qn * sizeof(float)), *o1 = malloc(qn * sizeof(float));
    test_fill_uniform(q, qn, -3, 3, seed);
    void *dq = cuda_rig_up(g, q, qn * sizeof(float)), *dout = g->alloc(g, qn * sizeof(float));
    cuda_rig_poison(g, dout, qn);
    g->attention(g, dout, dq, FD_KV_FLAT(r.cg, r.cap), pos0, NULL, n, H, Hkv, hd, scale, 1);
    g->to_host(g, on, dout, qn * sizeof(float));
    int same = 1;
    for (int j = 0; j < n; j++) { // token j alone, at its own position, over the same history
        cuda_rig_poison(g, dout, row);
        g->attention(g, dout, (const float *)dq + j * row, FD_KV_FLAT(r.cg, r.cap), pos0 + j, NULL, 1, H, Hkv, hd,
                     scale, 1);
        g->to_host(g, o1 + j * row, dout, row * sizeof(float));
        same &= !memcmp(o1 + j * row, on + j * row, row * sizeof(float));
    }
    const char *dec = fd_cuda_route(g, "attn_decode");
    EXPECT(same, "[%s] kv=%s hd=%d G=%d pos0=%lld n=%d: a row of the %d-token call differs from its 1-token call", dec,
           p.kv, hd, G, (long long)pos0, n, n);
    // the same history in a cache with ~3000 more slots, position from device memory, host pos0 deliberately 0
    const int64_t cap2 = pos0 + n + 3000;
    void *cg2 = g->alloc(g, g->kv_bytes_per_token(g, Hkv, hd) * cap2);
    g->kv_copy(g, FD_KV_FLAT(cg2, cap2), 0, FD_KV_FLAT(r.cg, r.cap), 0, pos0 + n, Hkv, hd);
    void *pd = cuda_rig_up(g, &pos0, sizeof pos0);
    int same_dev = 1;
    for (int causal = 1; causal >= 0; causal--) {
        if (!causal) { // the reference of the drafter-block form
            g->attention(g, dout, dq, FD_KV_FLAT(r.cg, r.cap), pos0, NULL, n, H, Hkv, hd, scale, 0);
            g->to_host(g, on, dout, qn * sizeof(float));
        }
        cuda_rig_poison(g, dout, qn);
        g->attention(g, dout, dq, FD_KV_FLAT(cg2, cap2), 0, (const int64_t *)pd, n, H, Hkv, hd, scale, causal);
        g->to_host(g, o1, dout, qn * sizeof(float));
        same_dev &= !memcmp(o1, on, qn * sizeof(float));
    }
    EXPECT(same_dev, "[%s] kv=%s hd=%d G=%d pos0=%lld n=%d: pos_dev with capacity %lld differs from pos0", dec, p.kv,
           hd, G, (long long)pos0, n, (long long)cap2);
    printf("    [%s] kv=%s hd=%d G=%d Hkv=%d pos0=%lld n=%d: rows == 1-token calls: %s, pos_dev == pos0: %s\n", dec,
           p.kv, hd, G, Hkv, (long long)pos0, n, same ? "bitwise" : "NO", same_dev ? "bitwise" : "NO");
    g->free(g, pd), g->free(g, cg2), g->free(g, dq), g->free(g, dout);
    freerig(&p, &r);
    free(q), free(on), free(o1);
}

TEST(cuda_decode_attn_batch_invariant) {
    const int cfg[][4] = {
        // kv e4m3, hd, G, Hkv
        {0, 256, 6, 4}, {1, 256, 6, 4}, {0, 128, 1, 2}, {0, 64, 8, 1}, {1, 128, 6, 2}, {0, 96, 6, 2}, {1, 64, 1, 2},
    };
    const int64_t pos0s[] = {0, 511, 512, 1000, 5000};
    const int ns[] = {2, 5, 16};
    uint64_t seed = 7;
    pair pairs[2] = {mkpair(0), mkpair(1)};
    for (int dk = 0; dk < 2; dk++) {
        set_decoder(pairs[0].g, decoders[dk]), set_decoder(pairs[1].g, decoders[dk]);
        for (size_t c = 0; c < sizeof cfg / sizeof cfg[0]; c++)
            for (int pi = 0; pi < 5; pi++)
                for (int ni = 0; ni < 3; ni++)
                    check_invariance(&pairs[cfg[c][0]], cfg[c][1], cfg[c][2], cfg[c][3], pos0s[pi], ns[ni], &seed);
    }
    freepair(&pairs[0]), freepair(&pairs[1]);
}

// Calls with more than 16 tokens honour pos_dev too: the mma kernel bitwise (its grid depends on n only), the
// CUDA-core kernel by value (its splits are sized from capacity then).
TEST(cuda_attention_pos_dev_prefill) {
    pair p = mkpair(0);
    fd_backend *g = p.g;
    const int n = 40, G = 2, Hkv = 2, H = G * Hkv, hd = 128;
    const int64_t pos0 = 700, cap2 = 4000;
    const size_t qn = (size_t)n * H * hd;
    const float scale = 1.0f / sqrtf((float)hd);
    uint64_t seed = 99;
    rig r = mkrig(&p, pos0 + n, cap2, Hkv, hd, &seed);
    float *q = malloc(qn * sizeof(float)), *oc = malloc(qn * sizeof(float)), *o0 = malloc(qn * sizeof(float));
    float *o1 = malloc(qn * sizeof(float));
    test_fill_uniform(q, qn, -2, 2, &seed);
    void *dq = cuda_rig_up(g, q, qn * sizeof(float)), *dout = g->alloc(g, qn * sizeof(float)),
         *pd = cuda_rig_up(g, &pos0, sizeof pos0);
    p.c->attention(p.c, oc, q, FD_KV_FLAT(r.cc, cap2), pos0, NULL, n, H, Hkv, hd, scale, 1);
    const char *kernels[] = {"mma", "simt"};
    for (int k = 0; k < 2; k++) {
        ASSERT(fd_cuda_set_route(g, "attn_kernel", kernels[k]) == 0, "%s", fd_error_msg());
        cuda_rig_poison(g, dout, qn);
        g->attention(g, dout, dq, FD_KV_FLAT(r.cg, cap2), pos0, NULL, n, H, Hkv, hd, scale, 1);
        g->to_host(g, o0, dout, qn * sizeof(float));
        cuda_rig_poison(g, dout, qn);
        g->attention(g, dout, dq, FD_KV_FLAT(r.cg, cap2), 3, (const int64_t *)pd, n, H, Hkv, hd, scale, 1);
        g->to_host(g, o1, dout, qn * sizeof(float));
        const double e0 = test_rel_l2(o0, oc, qn), e1 = test_rel_l2(o1, oc, qn);
        printf("    %s n=%d pos0=%lld cap=%lld: rel-L2 vs CPU %.3g (pos0), %.3g (pos_dev)\n", kernels[k], n,
               (long long)pos0, (long long)cap2, e0, e1);
        EXPECT(e0 <= TOL_ATTN && e1 <= TOL_ATTN, "%s: rel-L2 %.3g / %.3g", kernels[k], e0, e1);
        if (k == 0) EXPECT(!memcmp(o0, o1, qn * sizeof(float)), "mma: pos_dev result differs from pos0");
    }
    g->free(g, pd), g->free(g, dq), g->free(g, dout);
    freerig(&p, &r);
    free(q), free(oc), free(o0), free(o1);
    freepair(&p);
}

// A handful of calls (both layouts, n = 1 and 16, two chunks) for the sanitizers, whose tools are too slow for
// the sweeps above: compute-sanitizer --tool racecheck / synccheck / memcheck fd_cuda_tests cuda_decode_attn_smoke
TEST(cuda_decode_attn_smoke) {
    uint64_t seed = 5;
    for (int e4 = 0; e4 < 2; e4++) {
        pair p = mkpair(e4);
        const int hds[] = {256, 64};
        for (int h = 0; h < 2; h++) {
            rig r = mkrig(&p, 600 + 16, 600 + 16, 2, hds[h], &seed);
            const int ns[] = {1, 16};
            for (int dk = 0; dk < 2; dk++)
                for (int ni = 0; ni < 2; ni++) {
                    set_decoder(p.g, decoders[dk]);
                    const double e = vs_cpu(&p, &r, 600, ns[ni], 6, 1, &seed);
                    printf("    smoke [%s] kv=%s hd=%d n=%d pos0=600: rel-L2 %.3g\n", decoders[dk], p.kv, hds[h],
                           ns[ni], e);
                    EXPECT(e <= TOL_ATTN, "[%s] kv=%s hd=%d n=%d: rel-L2 %.3g", decoders[dk], p.kv, hds[h], ns[ni], e);
                }
            freerig(&p, &r);
        }
        freepair(&p);
    }
}

// The two decode kernels on the same call at the 27B geometry (24 q / 4 kv heads x 256), both layouts, decode and
// verify row counts, a context of 3000 keys (6 chunks, the last partial): they round Q, K/V (e4m3: value * scale)
// and P to bf16 alike and differ only in where P is rounded (per 32-key tile vs per 16-key step of a warp's
// stream) and in their summation orders, so they agree far inside TOL_ATTN. Both outputs are NaN-poisoned first.
TEST(cuda_decode_attn_kernels_agree) {
    const int Hkv = 4, G = 6, H = G * Hkv, hd = 256, ns[] = {1, 8, 16};
    const int64_t pos0 = 3000 - 16;
    uint64_t seed = 11;
    for (int e4 = 0; e4 < 2; e4++) {
        pair p = mkpair(e4);
        fd_backend *g = p.g;
        rig r = mkrig(&p, pos0 + 16, pos0 + 16, Hkv, hd, &seed);
        for (int ni = 0; ni < 3; ni++) {
            const int n = ns[ni];
            const size_t qn = (size_t)n * H * hd;
            float *q = malloc(qn * sizeof(float)), *o[2] = {malloc(qn * sizeof(float)), malloc(qn * sizeof(float))};
            test_fill_uniform(q, qn, -2, 2, &seed);
            void *dq = cuda_rig_up(g, q, qn * sizeof(float)), *dout = g->alloc(g, qn * sizeof(float));
            for (int dk = 0; dk < 2; dk++) {
                set_decoder(g, decoders[dk]);
                cuda_rig_poison(g, dout, qn);
                g->attention(g, dout, dq, FD_KV_FLAT(r.cg, r.cap), pos0, NULL, n, H, Hkv, hd, 0.0625f, 1);
                g->to_host(g, o[dk], dout, qn * sizeof(float));
            }
            const double e = test_rel_l2(o[1], o[0], qn);
            printf("    kv=%s n=%d at 3000 keys: warp vs blocked rel-L2 %.3g\n", p.kv, n, e);
            EXPECT(e <= TOL_ATTN / 2, "kv=%s n=%d: warp vs blocked rel-L2 %.3g", p.kv, n, e);
            g->free(g, dq), g->free(g, dout);
            free(q), free(o[0]), free(o[1]);
        }
        freerig(&p, &r);
        freepair(&p);
    }
}
