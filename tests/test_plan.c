// Tests of src/model/plan: the per-rank plan. Expected local shapes are the fixtures' config.json numbers divided
// by hand (vLLM's rule in qwen3_next.py: local heads = total / tp, a KV head count below tp replicated), not our
// code's output; every refusal names the config field that does not split.
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "fixture.h"
#include "model/plan.h"
#include "test.h"

static int load_cfg(const char *name, fd_config *c) {
    char *dir = fd_sprintf("tests/data/fixtures/%s", name);
    const int rc = cfg_load_dir(dir, c);
    free(dir);
    return rc;
}

// One fixture's local shapes at one tp: q / kv / GDN k / GDN v heads, conv channels, dense FFN, expert, shared
// expert widths, and the vocabulary slice of the given rank.
typedef struct {
    const char *fixture;
    int tp, rank;
    int q, kv, gk, gv, conv, ffn, expert, shared, vb, ve;
} split_case;

TEST(plan_local_shapes_of_fixtures) {
    static const split_case k[] = {
        // qwen35_dense_tied: H 4, Hkv 2, Hk 2, Hv 6, dk = dv = 16, I 128, V 512
        {"qwen35_dense_tied", 1, 0, 4, 2, 2, 6, 2 * 2 * 16 + 6 * 16, 128, 0, 0, 0, 512},
        {"qwen35_dense_tied", 2, 1, 2, 1, 1, 3, 2 * 1 * 16 + 3 * 16, 64, 0, 0, 256, 512},
        // qwen35_moe_kv1: H 4, Hkv 1 (replicated at tp 2), Hk 2, Hv 4, dk 24, dv 16, experts 32, shared 32
        {"qwen35_moe_kv1", 2, 0, 2, 1, 1, 2, 2 * 1 * 24 + 2 * 16, 0, 16, 16, 0, 256},
        // qwen3_next_moe: H 4, Hkv 2, Hk 2, Hv 4, dk = dv = 16, I 96, experts 32, shared 48
        {"qwen3_next_moe", 2, 1, 2, 1, 1, 2, 2 * 1 * 16 + 2 * 16, 48, 16, 24, 256, 512},
        // qwen35_vl_sharded (fields in text_config): H 4, Hkv 1, Hk 2, Hv 4, dk = dv = 24, I 160
        {"qwen35_vl_sharded", 2, 0, 2, 1, 1, 2, 2 * 1 * 24 + 2 * 24, 80, 0, 0, 0, 256},
    };
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
        const split_case *s = &k[i];
        fd_config c;
        ASSERT(load_cfg(s->fixture, &c) == 0, "%s", fd_error_msg());
        fd_rank_plan p;
        ASSERT(plan_init(&p, &c, s->rank, s->tp) == 0, "%s tp %d: %s", s->fixture, s->tp, fd_error_msg());
        EXPECT(p.q_heads == s->q && p.kv_heads == s->kv && p.gdn_k_heads == s->gk && p.gdn_v_heads == s->gv,
               "%s tp %d: heads q %d kv %d gdn %d/%d", s->fixture, s->tp, p.q_heads, p.kv_heads, p.gdn_k_heads,
               p.gdn_v_heads);
        EXPECT(p.conv_channels == s->conv && p.ffn_width == s->ffn && p.expert_width == s->expert &&
                   p.shared_expert_width == s->shared,
               "%s tp %d: conv %d ffn %d expert %d shared %d", s->fixture, s->tp, p.conv_channels, p.ffn_width,
               p.expert_width, p.shared_expert_width);
        EXPECT(p.vocab_begin == s->vb && p.vocab_end == s->ve, "%s tp %d rank %d: vocab [%d, %d)", s->fixture, s->tp,
               s->rank, p.vocab_begin, p.vocab_end);
        EXPECT(p.hidden == c.hidden_size && p.head_dim == c.head_dim, "%s: replicated shapes", s->fixture);
    }
}

// qwen35_dense_tied at tp 1: the widest use of each scratch intermediate, by hand from its config (H 4, hd 32,
// Hkv 2, Hk 2, Hv 6, dk = dv = 16, I 128): t0 = max(conv 160, q|gate 256, I 128), t1 = max(160, H hd 128, I),
// t2 = max(Hv dv 96, H hd 128), t3 = max(Hv 6, 128), t4 = max(Hv, Hkv hd 64), t5 = max(96, 64); its layer_types
// list 4 linear_attention (GDN) layers of 6.
TEST(plan_scratch_widths_by_layer_kind) {
    fd_config c;
    ASSERT(load_cfg("qwen35_dense_tied", &c) == 0, "%s", fd_error_msg());
    fd_rank_plan p;
    ASSERT(plan_init(&p, &c, 0, 1) == 0, "%s", fd_error_msg());
    const int64_t want[FD_SCRATCH_TMPS] = {256, 160, 128, 128, 64, 96};
    for (int k = 0; k < FD_SCRATCH_TMPS; k++) EXPECT(p.tmp_width[k] == want[k], "t%d: %lld", k, (long long)p.tmp_width[k]);
    EXPECT(p.n_gdn_layers == 4 && p.first_gdn_layer == 0 && !p.has_moe, "%d GDN layers, first %d", p.n_gdn_layers,
           p.first_gdn_layer);
    // qwen3_next_moe: the grouped qkvz (2 Hk dk + 2 Hv dv = 192) lands in t0, ba (2 Hv = 8) in t5
    ASSERT(load_cfg("qwen3_next_moe", &c) == 0, "%s", fd_error_msg());
    ASSERT(plan_init(&p, &c, 0, 1) == 0, "%s", fd_error_msg());
    EXPECT(p.tmp_width[0] == 256 && p.tmp_width[5] == 64, "t0 %lld t5 %lld", (long long)p.tmp_width[0],
           (long long)p.tmp_width[5]);
}

#define EXPECT_PLAN_ERR(c, rank, tp, ...)                                                                              \
    do {                                                                                                               \
        fd_rank_plan p_;                                                                                               \
        EXPECT(plan_init(&p_, (c), (rank), (tp)) == -1, "tp %d accepted", (tp));                                       \
        const char *subs_[] = {__VA_ARGS__};                                                                           \
        for (size_t k_ = 0; k_ < sizeof subs_ / sizeof subs_[0]; k_++)                                                 \
            EXPECT(strstr(fd_error_msg(), subs_[k_]) != NULL, "message '%s' lacks '%s'", fd_error_msg(), subs_[k_]);   \
    } while (0)

TEST(plan_refuses_splits_the_fixtures_cannot_take) {
    // The float fixtures: 4 query heads, 1 or 2 KV heads (split or replicated at 2 and 4), 2 GDN key heads, which 4
    // ranks cannot split. The FP8 ones: 2 query heads (not at 4) and 1 GDN key head (not even at 2).
    fd_rank_plan p;
    for (int f = 0; k_all_fixture_names[f]; f++) {
        fd_config c;
        ASSERT(load_cfg(k_all_fixture_names[f], &c) == 0, "%s", fd_error_msg());
        if (!strncmp(k_all_fixture_names[f], "fp8_", 4)) {
            EXPECT_PLAN_ERR(&c, 3, 4, "4 ranks", "num_attention_heads = 2");
            EXPECT_PLAN_ERR(&c, 0, 2, "2 ranks", "linear_num_key_heads = 1");
        } else {
            EXPECT_PLAN_ERR(&c, 3, 4, "4 ranks", "linear_num_key_heads = 2");
            EXPECT(plan_init(&p, &c, 1, 2) == 0, "%s tp 2: %s", k_all_fixture_names[f], fd_error_msg());
        }
    }
    // Each field on its own, on qwen35_dense_tied's config (which splits at tp 2).
    fd_config c;
    ASSERT(load_cfg("qwen35_dense_tied", &c) == 0, "%s", fd_error_msg());
    fd_config bad = c;
    bad.num_heads = 6, bad.num_kv_heads = 2; // 6 query heads over 4 ranks
    EXPECT_PLAN_ERR(&bad, 0, 4, "num_attention_heads = 6", "multiple of 4");
    bad = c;
    bad.num_heads = 6, bad.num_kv_heads = 3; // 3 KV heads over 2 ranks: neither split nor replicated
    EXPECT_PLAN_ERR(&bad, 0, 2, "num_key_value_heads = 3");
    bad = c;
    bad.num_heads = 12, bad.num_kv_heads = 3; // fewer KV heads than 4 ranks, and 4 is not a multiple of 3
    EXPECT_PLAN_ERR(&bad, 0, 4, "num_key_value_heads = 3", "replicated");
    bad = c;
    bad.gdn_num_v_heads = 2, bad.gdn_num_k_heads = 1;
    EXPECT_PLAN_ERR(&bad, 0, 2, "linear_num_key_heads = 1");
    bad = c;
    bad.gdn_num_k_heads = 4, bad.gdn_num_v_heads = 6; // k heads split, v heads 6 over 4 do not
    EXPECT_PLAN_ERR(&bad, 0, 4, "linear_num_value_heads = 6");
    bad = c;
    bad.intermediate_size = 129;
    EXPECT_PLAN_ERR(&bad, 0, 2, "intermediate_size = 129");
    EXPECT_PLAN_ERR(&c, 2, 2, "rank 2 of 2");
    EXPECT_PLAN_ERR(&c, 0, 0, "rank 0 of 0");
    ASSERT(load_cfg("qwen35_moe", &c) == 0, "%s", fd_error_msg());
    bad = c;
    bad.moe_intermediate_size = 30; // 30 over 4 ranks
    bad.gdn_num_k_heads = 4, bad.gdn_num_v_heads = 8;
    EXPECT_PLAN_ERR(&bad, 0, 4, "moe_intermediate_size = 30");
    bad.moe_intermediate_size = 32, bad.shared_expert_intermediate_size = 30;
    EXPECT_PLAN_ERR(&bad, 0, 4, "shared_expert_intermediate_size = 30");
}

// The forward takes its shapes from the plan: with every head count and width in fd_config overwritten after
// load, qwen35_dense_tied still gives HF's logits (a forward that read the config would read garbage shapes).
TEST(plan_forward_reads_the_plan_not_the_config) {
    fixture fx;
    ASSERT(fixture_load("qwen35_dense_tied", &fx) == 0, "%s", fd_error_msg());
    fd_model m;
    ASSERT(model_load(fx.dir, &m) == 0, "%s", fd_error_msg());
    fd_backend *be = fd_backend_cpu_create(0);
    model_upload(&m, be);
    m.cfg.num_heads = m.cfg.num_kv_heads = m.cfg.head_dim = 7;
    m.cfg.gdn_num_k_heads = m.cfg.gdn_num_v_heads = m.cfg.gdn_k_dim = m.cfg.gdn_v_dim = 5;
    m.cfg.intermediate_size = m.cfg.rotary_dim = 3;
    m.cfg.gdn_conv_kernel = 9;
    fd_engine_opts o;
    engine_default_opts(&o);
    o.max_batch = 64;
    o.capacity = 512;
    fd_engine e;
    ASSERT(engine_init(&e, &m, be, &o) == 0, "%s", fd_error_msg());
    float *logits = malloc(sizeof(float) * (size_t)fx.n_ids * fx.vocab);
    ASSERT(engine_prefill(&e, fx.ids, fx.n_ids, 0, logits, 1) == 0, "%s", fd_error_msg());
    const double err = test_rel_l2(logits, fx.logits, (size_t)fx.n_ids * fx.vocab);
    EXPECT(err <= 1e-4, "logits rel-L2 %.3g vs HF", err);
    free(logits);
    engine_free(&e);
    model_release(&m, be);
    model_free(&m);
    be->destroy(be);
    fixture_free(&fx);
}
