// DFlash2 on the CPU backend: draft logits, selector scores and greedy selector paths against the NeMo Automodel
// reference (two rounds; one drafter has a binding sliding window), speculative greedy output identical to plain
// greedy at block sizes 4/8/16 (also with forced accept counts), T > 0 lossless with the selector's sparse q
// (chi-square), CLI contracts, bad DFlash2 configs, and the refusal of a backend without the DFlash2 ops.
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/dflash2.h"
#include "engine/routes.h"
#include "spec_rig.h"
#include "test.h"

typedef struct {
    const char *name, *target;
    int block, commit, windowed;
} d2_fx;

static const d2_fx k_d2[] = {
    {"qwen35_dense_tied_d2_b8", "qwen35_dense_tied", 8, 3, 0},
    {"qwen35_moe_d2_b16", "qwen35_moe", 16, 5, 1},
};
#define N_D2 (int)(sizeof k_d2 / sizeof k_d2[0])

static fd_backend *cpu(void) {
    static fd_backend *be;
    if (!be) be = fd_backend_cpu_create(0);
    return be;
}

static int rig_open(spec_rig *r, const d2_fx *df, int block) {
    return spec_rig_open(r, cpu(), df->target, df->name, block, 0);
}

TEST(dflash2_draft_logits_and_selector_match_reference) {
    for (int f = 0; f < N_D2; f++) {
        const d2_fx *df = &k_d2[f];
        spec_rig r;
        ASSERT(rig_open(&r, df, 0) == 0, "%s: %s", df->name, fd_error_msg());
        ASSERT(r.d.v2 && r.s.sel, "%s: not loaded as DFlash2", df->name);
        const int B = r.s.B, V = r.m.cfg.vocab_size, K = r.d.v2->top_k, n = B - 1;
        EXPECT(B == df->block);
        json_t *meta = dflash_fixture_meta(df->name);
        float *want1 = dflash_fixture_f32(df->name, "draft_logits.f32", (size_t)n * V);
        float *want2 = dflash_fixture_f32(df->name, "draft_logits2.f32", (size_t)n * V);
        float *want_sc = dflash_fixture_f32(df->name, "selector_scores.f32", (size_t)n * K);
        ASSERT(meta && want1 && want2 && want_sc, "%s: reference files missing", df->name);
        float *got = malloc(sizeof(float) * n * V), *sc = malloc(sizeof(float) * n * K);
        int32_t anchor, draft[FD_SPEC_MAX_BLOCK], path[FD_SPEC_MAX_BLOCK], preds[FD_SPEC_MAX_BLOCK];
        int32_t *cand = malloc(sizeof(int32_t) * n * K);
        ASSERT(dflash_prefill(&r.s, r.fx.ids, r.fx.n_ids, 64, NULL, &anchor) == 0, "%s", fd_error_msg());
        EXPECT(anchor == r.fx.greedy[0]);
        ASSERT(dflash_draft(&r.s, anchor, draft, got) == 0, "%s", fd_error_msg());
        const double e1 = test_rel_l2(got, want1, (size_t)n * V);
        dflash2_walk(r.s.sel, anchor, got, n, NULL, path, NULL);
        EXPECT(dflash_meta_ids_equal(meta, "selector_path", path, n), "%s: round 1 selector path differs", df->name);
        EXPECT(!dflash_meta_ids_equal(meta, "draft_argmax", path, n), "%s: the selector changed nothing", df->name);
        // the selector's scores along the reference's greedy path (pred = anchor, then the path)
        preds[0] = anchor;
        for (int i = 1; i < n; i++) preds[i] = path[i - 1];
        dflash2_scores(r.s.sel, got, preds, n, cand, sc);
        const double es = test_rel_l2(sc, want_sc, (size_t)n * K);
        int cand_same = 1;
        json_t *wc = json_object_get(meta, "candidate_ids");
        for (int i = 0; i < n; i++)
            for (int k = 0; k < K; k++)
                cand_same &= json_integer_value(json_array_get(json_array_get(wc, (size_t)i), (size_t)k)) ==
                             cand[i * K + k];
        EXPECT(cand_same, "%s: candidate ids differ", df->name);
        // T > 0: the first step's q (its predecessor is the anchor whatever is sampled) is softmax(scores / T)
        fd_sampler smp;
        sampler_init(&smp, 0.7f, 0, 1.0f, 5);
        float *q = calloc((size_t)n * V, sizeof(float));
        dflash2_walk(r.s.sel, anchor, got, n, &smp, path, q);
        double mx = want_sc[0], sum = 0, err = 0, rowsum = 0;
        for (int k = 1; k < K; k++) mx = want_sc[k] > mx ? want_sc[k] : mx;
        for (int k = 0; k < K; k++) sum += exp((want_sc[k] - mx) / 0.7);
        for (int k = 0; k < K; k++) err += fabs(q[cand[k]] - exp((want_sc[k] - mx) / 0.7) / sum);
        for (int v = 0; v < V; v++) rowsum += q[v];
        EXPECT(err < 1e-5 && fabs(rowsum - 1) < 1e-5, "%s: q row 0 off by %.3g (sum %.6f)", df->name, err, rowsum);
        for (int i = 0; i < n; i++) EXPECT(q[(int64_t)i * V + path[i]] > 0, "%s: draft %d has q = 0", df->name, i);
        free(q);
        // a binding window: the same draft with the window ignored is far from the reference
        double e_nowin = 0;
        if (df->windowed) {
            const int w = r.d.v2->window[0];
            r.d.v2->window[0] = 0;
            ASSERT(dflash_draft(&r.s, anchor, draft, got) == 0);
            e_nowin = test_rel_l2(got, want1, (size_t)n * V);
            r.d.v2->window[0] = w;
            EXPECT(w > 0 && e_nowin > 1e-3, "%s: the window does not change the draft (%.3g)", df->name, e_nowin);
        }
        // round 2: the target consumes HF's greedy g0..g(k-1), whose taps extend the context; anchor g(k)
        ASSERT(engine_forward(&r.e, r.fx.greedy, df->commit, NULL, 0) == 0, "%s", fd_error_msg());
        dflash_context_append(&r.s, df->commit);
        ASSERT(dflash_draft(&r.s, r.fx.greedy[df->commit], draft, got) == 0, "%s", fd_error_msg());
        const double e2 = test_rel_l2(got, want2, (size_t)n * V);
        dflash2_walk(r.s.sel, r.fx.greedy[df->commit], got, n, NULL, path, NULL);
        EXPECT(dflash_meta_ids_equal(meta, "selector_path2", path, n), "%s: round 2 selector path differs", df->name);
        printf("    %-24s draft logits rel-L2 %.2e / %.2e, selector scores %.2e, paths equal%s\n", df->name, e1, e2, es,
               df->windowed ? " (window binding)" : "");
        EXPECT(e1 <= 1e-4 && e2 <= 1e-4 && es <= 1e-4, "%s: rel-L2 %.3g / %.3g / %.3g", df->name, e1, e2, es);
        free(got);
        free(sc);
        free(cand);
        free(want1);
        free(want2);
        free(want_sc);
        json_decref(meta);
        spec_rig_close(&r);
    }
}

TEST(dflash2_greedy_identical_at_block_sizes) {
    const int blocks[] = {4, 8, 16};
    for (int f = 0; f < N_D2; f++)
        for (int b = 0; b < 3; b++) {
            spec_rig r;
            ASSERT(rig_open(&r, &k_d2[f], blocks[b]) == 0, "%s", fd_error_msg());
            int32_t *out = calloc((size_t)r.fx.n_greedy, sizeof *out);
            ASSERT(dflash_generate(&r.s, r.fx.ids, r.fx.n_ids, 64, r.fx.n_greedy, NULL, out) == 0, "%s",
                   fd_error_msg());
            EXPECT(!memcmp(out, r.fx.greedy, sizeof(int32_t) * (size_t)r.fx.n_greedy), "%s block %d differs",
                   k_d2[f].name, blocks[b]);
            // forced accept counts (every count 0..B-1): the draft context then grows by 1..B per round
            dflash_reset(&r.s);
            engine_reset(&r.e);
            int sched[FD_SPEC_MAX_BLOCK];
            for (int a = 0; a < blocks[b]; a++) sched[a] = (a * 5 + 3) % blocks[b];
            fd_spec_oracle orc = {.ref = r.fx.greedy, .ref_len = r.fx.n_greedy, .accept = sched,
                                  .n_accept = blocks[b]};
            r.s.oracle = &orc;
            memset(out, 0, sizeof(int32_t) * (size_t)r.fx.n_greedy);
            ASSERT(dflash_generate(&r.s, r.fx.ids, r.fx.n_ids, 64, r.fx.n_greedy, NULL, out) == 0, "%s",
                   fd_error_msg());
            EXPECT(!memcmp(out, r.fx.greedy, sizeof(int32_t) * (size_t)r.fx.n_greedy), "%s block %d oracle differs",
                   k_d2[f].name, blocks[b]);
            free(out);
            spec_rig_close(&r);
        }
}


// The rejection sampling with a q supported on a few candidates per position (DFlash2's selector): the first
// emitted token must follow p0, the second (in rounds that accepted the first draft) p1. Parts of p outside the
// candidates can only come from the residual, so both paths matter.
TEST(dflash2_sparse_q_rejection_sampling_is_exact) {
    enum { V = 12, L = 3, K = 4, N = 200000 };
    float tl[L * V], q[(L - 1) * V], p0[V], p1[V], scratch[V];
    uint64_t seed = 2024;
    test_fill_uniform(tl, L * V, -1.5f, 1.5f, &seed);
    fd_sampler smp;
    sampler_init(&smp, 1.0f, 0, 1.0f, 77);
    sampler_probs(&smp, tl, V, p0);
    sampler_probs(&smp, tl + V, V, p1);
    for (int i = 0; i < L - 1; i++) { // q_i: mass on K candidates only (the top of a blurred p), zero elsewhere
        float z[V];
        test_fill_uniform(z, V, -1.0f, 1.0f, &seed);
        for (int v = 0; v < V; v++) z[v] = 0.5f * tl[i * V + v] + z[v];
        fd_sampler topk;
        sampler_init(&topk, 1.0f, K, 1.0f, 1);
        sampler_probs(&topk, z, V, q + i * V);
    }
    int first[V] = {0}, second[V] = {0}, n_second = 0, acc_hist[L] = {0};
    for (int t = 0; t < N; t++) {
        int32_t block[L] = {0}, next;
        for (int i = 0; i < L - 1; i++) block[i + 1] = sampler_draw(&smp, q + i * V, V);
        const int acc = spec_accept_sampled(&smp, block, L, q, tl, V, scratch, &next);
        acc_hist[acc]++;
        first[acc >= 1 ? block[1] : next]++;
        if (acc >= 1) {
            second[acc >= 2 ? block[2] : next]++;
            n_second++;
        }
    }
    int d1, d2;
    const double c1 = test_chi2(first, p0, V, N, &d1), c2 = test_chi2(second, p1, V, n_second, &d2);
    printf("    sparse q (%d of %d): accepted 0/1/2 %d/%d/%d; chi2 first %.1f (dof %d), second %.1f (dof %d)\n", K, V,
           acc_hist[0], acc_hist[1], acc_hist[2], c1, d1, c2, d2);
    EXPECT(c1 < test_chi2_crit(d1) && c2 < test_chi2_crit(d2));
    EXPECT(acc_hist[0] > N / 20 && acc_hist[2] > N / 20, "both paths must be exercised");
}

// End to end: the token after the anchor in a DFlash2 round at T > 0 (drafts sampled by the selector walk, its
// sparse q verified against the target) follows the target's own sampling distribution.
static void check_lossless(const d2_fx *df, float T, int top_k, float top_p, int block, int trials) {
    spec_rig r;
    ASSERT(rig_open(&r, df, block) == 0, "%s", fd_error_msg());
    const int n = 48, V = r.m.cfg.vocab_size;
    fd_engine ref;
    fd_engine_opts o;
    engine_default_opts(&o);
    o.capacity = 64;
    o.max_batch = 64;
    ASSERT(engine_init(&ref, &r.m, cpu(), &o) == 0);
    fd_sampler smp;
    sampler_init(&smp, T, top_k, top_p, 4321);
    int32_t anchor, seq[64];
    ASSERT(dflash_prefill(&r.s, r.fx.ids, n, 64, NULL, &anchor) == 0);
    memcpy(seq, r.fx.ids, sizeof(int32_t) * n);
    seq[n] = anchor;
    float *logits = malloc(sizeof(float) * V), *p = malloc(sizeof(float) * V);
    ASSERT(engine_prefill(&ref, seq, n + 1, 64, logits, 0) == 0);
    sampler_probs(&smp, logits, V, p);
    int *counts = calloc((size_t)V, sizeof(int)), accepted = 0;
    for (int t = 0; t < trials; t++) {
        engine_reset(&r.e);
        dflash_reset(&r.s);
        int32_t a, emitted[FD_SPEC_MAX_BLOCK];
        int got;
        ASSERT(dflash_prefill(&r.s, r.fx.ids, n, 64, NULL, &a) == 0 && a == anchor);
        ASSERT(dflash_round(&r.s, anchor, block, &smp, 1, emitted, &got) == 0, "%s", fd_error_msg());
        counts[emitted[0]]++;
        accepted += got > 1;
    }
    int dof;
    const double stat = test_chi2(counts, p, V, trials, &dof);
    printf("    %s T=%.1f top_k=%d top_p=%.2f block %d: chi2 %.1f (dof %d, 0.1%% crit %.1f), rounds with an accepted "
           "draft %d of %d\n", df->name, (double)T, top_k, (double)top_p, block, stat, dof, test_chi2_crit(dof), accepted,
           trials);
    EXPECT(dof >= 3, "too few bins for a meaningful test");
    EXPECT(stat < test_chi2_crit(dof), "DFlash2 speculative sampling is not distributed like the target: chi2 %.1f", stat);
    free(counts);
    free(logits);
    free(p);
    engine_free(&ref);
    spec_rig_close(&r);
}

TEST(dflash2_sampling_is_lossless) {
    check_lossless(&k_d2[1], 1.5f, 0, 1.0f, 4, 400);
    check_lossless(&k_d2[0], 3.0f, 60, 0.95f, 8, 400);
}

// Writes DIR/config.json = the drafter's config with `edit` applied, and links its weights.
static char *bad_dir(const char *src, void (*edit)(json_t *root)) {
    char tmpl[] = "/tmp/fd_d2badXXXXXX";
    char *dir = mkdtemp(tmpl);
    if (!dir) return NULL;
    char *cfg = fd_sprintf("tests/data/dflash/%s/config.json", src), *out = fd_sprintf("%s/config.json", dir);
    char *st = fd_sprintf("%s/model.safetensors", dir), *abs = realpath("tests/data/dflash", NULL);
    char *st_src = fd_sprintf("%s/%s/model.safetensors", abs, src);
    json_t *root = json_load_file(cfg, 0, NULL);
    edit(root);
    json_dump_file(root, out, 0);
    json_decref(root);
    if (symlink(st_src, st)) dir = NULL;
    char *ret = dir ? fd_strdup(dir) : NULL;
    free(cfg);
    free(out);
    free(st);
    free(abs);
    free(st_src);
    return ret;
}

static void rm_dir(char *dir) {
    char *a = fd_sprintf("%s/config.json", dir), *b = fd_sprintf("%s/model.safetensors", dir);
    unlink(a);
    unlink(b);
    rmdir(dir);
    free(a);
    free(b);
    free(dir);
}

#define DC(root) json_object_get(root, "dflash_config")
static void e_group(json_t *r) { json_object_set_new(DC(r), "conv_group_size", json_integer(7)); }
static void e_group32(json_t *r) { json_object_set_new(DC(r), "conv_group_size", json_integer(32)); }
static void e_topk(json_t *r) { json_object_set_new(DC(r), "selector_top_k", json_integer(0)); }
static void e_rank(json_t *r) { json_object_set_new(DC(r), "selector_rank", json_integer(8)); }
static void e_proj(json_t *r) { json_object_set_new(DC(r), "projector_type", json_string("domino")); }
static void e_causal(json_t *r) { json_object_del(r, "is_causal"); }
static void e_ltype(json_t *r) { json_array_set_new(json_object_get(r, "layer_types"), 1, json_string("chunked")); }
static void e_kernel(json_t *r) { json_object_set_new(DC(r), "conv_kernel_size", json_integer(0)); }

TEST(dflash2_bad_configs) {
    fd_model m;
    ASSERT(model_load("tests/data/fixtures/qwen35_moe", &m) == 0, "%s", fd_error_msg());
    const struct {
        void (*edit)(json_t *);
        const char *want;
    } cases[] = {
        {e_group, "conv_group_size 7 must divide hidden_size 64"},
        {e_group32, "kernel_projection.weight' has the wrong shape"},
        {e_topk, "selector_top_k 0 must be"},
        {e_rank, "hidden_projection.weight' has the wrong shape (expected [8, 64])"},
        {e_proj, "projector_type"},
        {e_causal, "is_causal"},
        {e_ltype, "layer 1 is 'chunked'"},
        {e_kernel, "conv_kernel_size 0"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *dir = bad_dir("qwen35_moe_d2_b16", cases[i].edit);
        ASSERT(dir, "temp dir");
        fd_drafter d;
        EXPECT(drafter_load(dir, &m, &d) != 0, "case %zu loaded", i);
        EXPECT(strstr(fd_error_msg(), cases[i].want) != NULL, "case %zu: %s", i, fd_error_msg());
        rm_dir(dir);
    }
    model_free(&m);
}

// The fields of the published DFlash2 config (z-lab tests/fixtures/dflash2-config.json) on the small geometry:
// every layer sliding_attention (window 2048) with "is_causal": false, block_size only in dflash_config,
// output_multiplier and final_logit_softcapping, rms_norm_eps 1e-5.
static void e_published(json_t *r) {
    json_t *lt = json_array();
    json_array_append_new(lt, json_string("sliding_attention"));
    json_array_append_new(lt, json_string("sliding_attention"));
    json_object_set_new(r, "layer_types", lt);
    json_object_set_new(r, "sliding_window", json_integer(2048));
    json_object_set_new(r, "use_sliding_window", json_true());
    json_object_set_new(r, "rms_norm_eps", json_real(1e-5));
    json_object_set_new(DC(r), "output_multiplier", json_real(0.19611613513818404));
    json_object_set_new(DC(r), "final_logit_softcapping", json_real(20.0));
    json_object_del(r, "block_size");
}

TEST(dflash2_published_config_fields) {
    char *dir = bad_dir("qwen35_moe_d2_b16", e_published);
    ASSERT(dir, "temp dir");
    fixture fx;
    fd_model m;
    ASSERT(fixture_load("qwen35_moe", &fx) == 0 && model_load(fx.dir, &m) == 0, "%s", fd_error_msg());
    model_upload(&m, cpu());
    fd_drafter d;
    ASSERT(drafter_load(dir, &m, &d) == 0, "%s", fd_error_msg());
    EXPECT(d.v2 && d.v2->window[0] == 2048 && d.v2->window[1] == 2048 && d.block_size == 16);
    EXPECT(fabsf(d.output_multiplier - 0.196116f) < 1e-5f && d.final_logit_softcap == 20.0f);
    EXPECT(d.v2->conv_kernel == 2 && d.v2->conv_group == 8 && d.v2->rank == 24 && d.v2->top_k == 8);
    drafter_upload(&d, cpu());
    fd_engine e;
    fd_dflash s;
    fd_engine_opts o;
    engine_default_opts(&o);
    o.capacity = fx.n_ids + 64;
    o.max_batch = 64;
    ASSERT(engine_init(&e, &m, cpu(), &o) == 0 && dflash_init(&s, &e, &d, 8) == 0, "%s", fd_error_msg());
    int32_t *out = calloc((size_t)fx.n_greedy, sizeof *out);
    ASSERT(dflash_generate(&s, fx.ids, fx.n_ids, 64, fx.n_greedy, NULL, out) == 0, "%s", fd_error_msg());
    EXPECT(!memcmp(out, fx.greedy, sizeof(int32_t) * (size_t)fx.n_greedy), "greedy output differs");
    free(out);
    dflash_free(&s);
    engine_free(&e);
    drafter_free(&d);
    model_free(&m);
    fixture_free(&fx);
    rm_dir(dir);
}

// attention_window on both CPU KV layouts: a window wider than the keys is the plain non-causal attention (the
// same arithmetic, so bitwise), and a binding window equals a direct fp64 computation over the dequantised rows.
TEST(dflash2_attention_window_both_kv_layouts) {
    const int n0 = 70, n = 9, H = 4, Hkv = 2, hd = 16, W = 5;
    const int64_t cap = n0 + n + 2, tot = n0 + n;
    const size_t row = (size_t)Hkv * hd;
    uint64_t seed = 99;
    float *k = malloc(sizeof(float) * tot * row), *v = malloc(sizeof(float) * tot * row);
    float *q = malloc(sizeof(float) * n * H * hd), *o1 = malloc(sizeof(float) * n * H * hd);
    float *o2 = malloc(sizeof(float) * n * H * hd), *ref = malloc(sizeof(float) * n * H * hd);
    test_fill_uniform(k, (size_t)tot * row, -2, 2, &seed);
    test_fill_uniform(v, (size_t)tot * row, -1, 1, &seed);
    test_fill_uniform(q, (size_t)n * H * hd, -2, 2, &seed);
    const float scale = 0.25f;
    for (int e4 = 0; e4 < 2; e4++) {
        fd_backend *be = fd_backend_cpu_create(0);
        const char *spec = e4 ? "kv=e4m3" : "kv=f32";
        ASSERT(routes_backend_preset(be, &spec, 1) == 0, "%s", fd_error_msg());
        const size_t tb = be->kv_bytes_per_token(be, Hkv, hd);
        unsigned char *cache = calloc((size_t)cap, tb);
        const fd_kv_view kv = fd_kv_flat(cache, cap);
        be->kv_store(be, &kv, k, v, 0, NULL, (int)tot, Hkv, hd);
        be->attention(be, o1, q, &kv, n0, NULL, n, H, Hkv, hd, scale, 0);
        be->attention_window(be, o2, q, &kv, n0, n, H, Hkv, hd, scale, (int)tot);
        EXPECT(!memcmp(o1, o2, sizeof(float) * n * H * hd), "%s: a wide window differs from attention", spec);
        // the stored rows as the op reads them: f32 as is, e4m3 dequantised
        float *kd = malloc(sizeof(float) * tot * row), *vd = malloc(sizeof(float) * tot * row);
        const int64_t plane = cap * (int64_t)row;
        for (int64_t r = 0; r < tot * Hkv; r++)
            for (int x = 0; x < hd; x++) {
                const int64_t at = r * hd + x;
                if (!e4) {
                    kd[at] = ((float *)cache)[at];
                    vd[at] = ((float *)cache)[plane + at];
                } else {
                    const float *sc = (const float *)(cache + 2 * plane);
                    kd[at] = fd_e4m3_to_f32(cache[at]) * sc[r];
                    vd[at] = fd_e4m3_to_f32(cache[plane + at]) * sc[cap * Hkv + r];
                }
            }
        for (int t = 0; t < n; t++)
            for (int h = 0; h < H; h++) {
                const int64_t p = n0 + t;
                double s[128], mx = -INFINITY, sum = 0;
                for (int64_t j = 0; j < tot; j++) {
                    s[j] = -INFINITY;
                    if (llabs(p - j) >= W) continue;
                    double d = 0;
                    const float *qr = q + ((int64_t)t * H + h) * hd, *kr = kd + (j * Hkv + h / 2) * hd;
                    for (int x = 0; x < hd; x++) d += (double)qr[x] * kr[x];
                    s[j] = d * scale;
                    mx = s[j] > mx ? s[j] : mx;
                }
                for (int64_t j = 0; j < tot; j++) sum += s[j] == -INFINITY ? 0 : exp(s[j] - mx);
                for (int x = 0; x < hd; x++) {
                    double o = 0;
                    for (int64_t j = 0; j < tot; j++)
                        if (s[j] != -INFINITY) o += exp(s[j] - mx) / sum * vd[(j * Hkv + h / 2) * hd + x];
                    ref[((int64_t)t * H + h) * hd + x] = (float)o;
                }
            }
        be->attention_window(be, o2, q, &kv, n0, n, H, Hkv, hd, scale, W);
        const double e = test_rel_l2(o2, ref, (size_t)n * H * hd);
        EXPECT(e <= 1e-5, "%s: window %d rel-L2 vs fp64 %.3g", spec, W, e);
        free(kd), free(vd), free(cache);
        be->destroy(be);
    }
    free(k), free(v), free(q), free(o1), free(o2), free(ref);
}

TEST(dflash2_backend_without_ops_is_refused) {
    fd_backend *be = fd_backend_cpu_create(0);
    be->dyn_conv = NULL; // as on a backend that has not implemented the DFlash2 ops
    fd_model m;
    fd_drafter d;
    fd_engine e;
    fd_dflash s;
    ASSERT(model_load("tests/data/fixtures/qwen35_dense_tied", &m) == 0, "%s", fd_error_msg());
    model_upload(&m, be);
    ASSERT(drafter_load("tests/data/dflash/qwen35_dense_tied_d2_b8", &m, &d) == 0, "%s", fd_error_msg());
    drafter_upload(&d, be);
    fd_engine_opts o;
    engine_default_opts(&o);
    o.capacity = 64;
    o.max_batch = 16;
    ASSERT(engine_init(&e, &m, be, &o) == 0);
    EXPECT(dflash_init(&s, &e, &d, 0) != 0);
    EXPECT(strstr(fd_error_msg(), "does not implement the DFlash2") != NULL, "%s", fd_error_msg());
    engine_free(&e);
    drafter_free(&d);
    model_free(&m);
    be->destroy(be);
}

TEST(dflash2_cli_generate_and_draft_logits) {
    for (int f = 0; f < N_D2; f++) {
        const d2_fx *df = &k_d2[f];
        fixture fx;
        ASSERT(fixture_load(df->target, &fx) == 0, "%s", fd_error_msg());
        char *csv = test_ids_csv(fx.ids, fx.n_ids), *plain = NULL, *cmd;
        cmd = fd_sprintf("%s generate %s --ids %s -n 40 2>/dev/null", test_bin(), fx.dir, csv);
        EXPECT(test_run(cmd, &plain) == 0);
        free(cmd);
        const int blocks[] = {4, 8, 16};
        for (int b = 0; b < 3; b++) {
            char *spec = NULL;
            cmd = fd_sprintf("%s generate %s --ids %s -n 40 --draft tests/data/dflash/%s --block-size %d 2>/dev/null",
                             test_bin(), fx.dir, csv, df->name, blocks[b]);
            EXPECT(test_run(cmd, &spec) == 0);
            EXPECT(plain && spec && !strcmp(plain, spec), "%s block %d: --draft output differs:\n%s%s", df->name,
                   blocks[b], plain, spec);
            free(cmd);
            free(spec);
        }
        char *stats = NULL;
        cmd = fd_sprintf("%s generate %s --ids %s -n 12 --temperature 0.8 --seed 3 --draft tests/data/dflash/%s "
                         "--stats 2>&1 >/dev/null", test_bin(), fx.dir, csv, df->name);
        EXPECT(test_run(cmd, &stats) == 0);
        EXPECT(stats && strstr(stats, "dflash2 drafter") && strstr(stats, "emitted tokens/round"), "%s",
               stats ? stats : "");
        free(cmd);
        free(stats);
        char out[] = "/tmp/fd_d2logitsXXXXXX";
        int fd = mkstemp(out);
        ASSERT(fd >= 0);
        close(fd);
        cmd = fd_sprintf("%s draft-logits %s --draft tests/data/dflash/%s --ids %s --out %s 2>/dev/null", test_bin(),
                         fx.dir, df->name, csv, out);
        EXPECT(test_run(cmd, NULL) == 0);
        size_t len = 0;
        char *got = fd_read_file(out, &len);
        float *want = dflash_fixture_f32(df->name, "draft_logits.f32", (size_t)(df->block - 1) * fx.vocab);
        ASSERT(got && want && len == (size_t)(df->block - 1) * fx.vocab * 4, "%s: draft-logits wrote %zu bytes",
               df->name, len);
        EXPECT(test_rel_l2((float *)got, want, (size_t)(df->block - 1) * fx.vocab) <= 1e-4);
        unlink(out);
        free(got);
        free(want);
        free(cmd);
        free(plain);
        free(csv);
        fixture_free(&fx);
    }
}

// `bench --draft-random` with a DFlash2 config (bench/configs/tiny-dflash2.json: sliding layers, window 32 < the
// 200-token context, so the round runs attention_window): synthetic DFlash2 weights load and the round runs.
TEST(dflash2_bench_random_drafter) {
    char *out = NULL;
    char *cmd = fd_sprintf("%s bench --random-weights bench/configs/tiny.json --draft-random "
                           "bench/configs/tiny-dflash2.json --contexts 64,200 --decode 16 2>/dev/null", test_bin());
    EXPECT(test_run(cmd, &out) == 0);
    int rows = 0;
    for (char *p = out; p && (p = strstr(p, " yes |")); p++) rows++;
    EXPECT(out && strstr(out, "ORACLE") && rows == 2 &&
               strstr(out, "route check: every counted call ran its selected route"),
           "%s", out ? out : "");
    free(out);
    free(cmd);
}
