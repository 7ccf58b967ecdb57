// The shipped trained models (models/tiny-qwen35 + models/tiny-qwen35-dflash, made by tools/train_tiny.py) against
// the values that script computed with HF transformers on CPU in float32 from the saved bf16 files
// (tests/data/trained/): logits of a held-out prompt, HF's greedy continuation, the drafter's first-round logits,
// the tokenizer on held-out text; and DFlash greedy output identical to plain greedy with the trained drafter.
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "engine/dflash.h"
#include "engine/dflash_tree.h"
#include "fixture.h"
#include "io/tokenizer.h"
#include "test.h"

#define TARGET_DIR "models/tiny-qwen35"
#define DRAFT_DIR "models/tiny-qwen35-dflash"
#define DATA_DIR "tests/data/trained"

static fd_backend *cpu(void) {
    static fd_backend *be;
    if (!be) be = fd_backend_cpu_create(0);
    return be;
}

// ids of a JSON list into a malloc'ed array
static int32_t *json_ids(json_t *list, int *n) {
    *n = (int)json_array_size(list);
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)(*n > 0 ? *n : 1));
    for (int i = 0; i < *n; i++) ids[i] = (int32_t)json_integer_value(json_array_get(list, (size_t)i));
    return ids;
}

static float *read_f32(const char *file, size_t n) {
    char *p = fd_sprintf(DATA_DIR "/%s", file);
    float *f = test_read_f32(p, n);
    free(p);
    return f;
}

typedef struct {
    json_t *prompts, *expected;
    int32_t *ids, *greedy;
    int n_ids, n_greedy;
} trained_ref;

static int ref_load(trained_ref *r) {
    json_error_t err;
    memset(r, 0, sizeof *r);
    r->prompts = json_load_file(DATA_DIR "/val_prompts.json", 0, &err);
    r->expected = json_load_file(DATA_DIR "/expected.json", 0, &err);
    if (!json_is_array(r->prompts) || !json_is_object(r->expected)) return -1;
    r->ids = json_ids(json_object_get(json_array_get(r->prompts, 0), "ids"), &r->n_ids);
    r->greedy = json_ids(json_object_get(r->expected, "greedy"), &r->n_greedy);
    return r->n_ids > 0 && r->n_greedy > 0 ? 0 : -1;
}

static void ref_free(trained_ref *r) {
    json_decref(r->prompts);
    json_decref(r->expected);
    free(r->ids);
    free(r->greedy);
}

TEST(trained_target_logits_match_hf) {
    trained_ref ref;
    ASSERT(ref_load(&ref) == 0, "reference data missing under " DATA_DIR);
    fd_model m;
    ASSERT(model_load(TARGET_DIR, &m) == 0, "%s", fd_error_msg());
    model_upload(&m, cpu());
    const int V = m.cfg.vocab_size, n = ref.n_ids;
    const int rows = (int)json_integer_value(json_object_get(ref.expected, "logits_tail_rows"));
    float *want = read_f32("logits_tail.f32", (size_t)rows * V);
    ASSERT(want && rows > 0 && rows <= n, "logits_tail.f32 missing or of the wrong size");
    fd_engine e;
    fd_engine_opts o;
    engine_default_opts(&o);
    o.capacity = n + ref.n_greedy + 8;
    o.max_batch = n;
    ASSERT(engine_init(&e, &m, cpu(), &o) == 0, "%s", fd_error_msg());
    float *got = malloc(sizeof(float) * (size_t)n * V);
    ASSERT(engine_forward(&e, ref.ids, n, got, 1) == 0, "%s", fd_error_msg());
    double err = test_rel_l2(got + (size_t)(n - rows) * V, want, (size_t)rows * V);
    printf("    trained target: logits rel-L2 vs HF %.2e over the last %d positions\n", err, rows);
    EXPECT(err <= 1e-4, "logits rel-L2 %.3g", err);
    json_t *am = json_object_get(ref.expected, "argmax");
    int same = 0;
    for (int i = 0; i < n; i++) same += engine_argmax(got + (size_t)i * V, V) == json_integer_value(json_array_get(am, (size_t)i));
    EXPECT(same == n, "argmax equals HF's at %d of %d positions", same, n);
    // greedy continuation == HF's
    engine_reset(&e);
    int32_t *out = calloc((size_t)ref.n_greedy, sizeof *out);
    ASSERT(engine_generate_greedy(&e, ref.ids, n, 0, ref.n_greedy, out) == 0, "%s", fd_error_msg());
    int k = 0;
    while (k < ref.n_greedy && out[k] == ref.greedy[k]) k++;
    EXPECT(k == ref.n_greedy, "greedy differs from HF at token %d", k);
    free(out);
    free(got);
    free(want);
    engine_free(&e);
    model_free(&m);
    ref_free(&ref);
}

TEST(trained_dflash_draft_logits_and_greedy_identical) {
    trained_ref ref;
    ASSERT(ref_load(&ref) == 0, "reference data missing under " DATA_DIR);
    fd_model m;
    fd_drafter d;
    fd_engine e;
    fd_dflash s;
    ASSERT(model_load(TARGET_DIR, &m) == 0, "%s", fd_error_msg());
    model_upload(&m, cpu());
    ASSERT(drafter_load(DRAFT_DIR, &m, &d) == 0, "%s", fd_error_msg());
    drafter_upload(&d, cpu());
    fd_engine_opts o;
    engine_default_opts(&o);
    const int n_new = 64;
    o.capacity = ref.n_ids + n_new + 16;
    o.max_batch = 64;
    ASSERT(engine_init(&e, &m, cpu(), &o) == 0, "%s", fd_error_msg());
    ASSERT(dflash_init(&s, &e, &d, 0) == 0, "%s", fd_error_msg());
    const int B = s.B, V = m.cfg.vocab_size;
    EXPECT(B == 8);
    // round-1 draft logits against the z-lab reference module run by tools/train_tiny.py
    float *want = read_f32("draft_logits.f32", (size_t)(B - 1) * V);
    ASSERT(want, "draft_logits.f32 missing or of the wrong size");
    float *got = malloc(sizeof(float) * (size_t)(B - 1) * V);
    int32_t anchor, draft[FD_SPEC_MAX_BLOCK];
    ASSERT(dflash_prefill(&s, ref.ids, ref.n_ids, 64, NULL, &anchor) == 0, "%s", fd_error_msg());
    EXPECT(anchor == ref.greedy[0]);
    ASSERT(dflash_draft(&s, anchor, draft, got) == 0, "%s", fd_error_msg());
    double err = test_rel_l2(got, want, (size_t)(B - 1) * V);
    EXPECT(err <= 1e-4, "draft logits rel-L2 %.3g", err);
    dflash_free(&s);
    // speculative greedy == plain greedy (64 tokens; the first n_greedy are HF's)
    engine_reset(&e);
    int32_t *plain = calloc(n_new, sizeof *plain), *spec = calloc(n_new, sizeof *spec);
    ASSERT(engine_generate_greedy(&e, ref.ids, ref.n_ids, 0, n_new, plain) == 0, "%s", fd_error_msg());
    engine_reset(&e);
    ASSERT(dflash_init(&s, &e, &d, 0) == 0, "%s", fd_error_msg());
    ASSERT(dflash_generate(&s, ref.ids, ref.n_ids, 64, n_new, NULL, spec) == 0, "%s", fd_error_msg());
    int k = 0;
    while (k < n_new && spec[k] == plain[k]) k++;
    EXPECT(k == n_new, "speculative output differs from greedy at token %d", k);
    k = 0;
    while (k < ref.n_greedy && plain[k] == ref.greedy[k]) k++;
    EXPECT(k == ref.n_greedy, "greedy differs from HF at token %d", k);
    double tau = s.st.rounds ? (double)s.st.emitted / (double)s.st.rounds : 0;
    printf("    trained drafter: draft logits rel-L2 %.2e; %lld rounds, %.3f emitted tokens/round at block %d\n", err,
           (long long)s.st.rounds, tau, B);
    // a trained drafter must beat drafting nothing (1 token/round); this prompt measured 4.85 with the shipped drafter (3.32 and 1.85 with earlier ones)
    EXPECT(tau > 1.4, "emitted tokens/round %.3f", tau);
    free(plain);
    free(spec);
    free(got);
    free(want);
    dflash_free(&s);
    engine_free(&e);
    drafter_free(&d);
    model_free(&m);
    ref_free(&ref);
}

TEST(trained_tokenizer_matches_hf_on_held_out_code) {
    trained_ref ref;
    ASSERT(ref_load(&ref) == 0, "reference data missing under " DATA_DIR);
    tok_tokenizer *t = tok_load(TARGET_DIR "/tokenizer.json");
    ASSERT(t, "%s", fd_error_msg());
    EXPECT(tok_n_vocab(t) == 8192);
    EXPECT(tok_token_id(t, "<|mask|>") == 8191 && tok_token_id(t, "<|im_end|>") == 8190);
    size_t np = json_array_size(ref.prompts);
    EXPECT(np >= 4);
    for (size_t i = 0; i < np; i++) {
        json_t *p = json_array_get(ref.prompts, i);
        const char *text = json_string_value(json_object_get(p, "text"));
        int n_want;
        int32_t *want = json_ids(json_object_get(p, "hf_encode_of_text"), &n_want);
        tok_ids got = {0};
        ASSERT(text && tok_encode(t, text, strlen(text), &got) == 0, "%s", fd_error_msg());
        int same = got.n == (size_t)n_want;
        for (int j = 0; same && j < n_want; j++) same = got.ids[j] == want[j];
        EXPECT(same, "prompt %zu: our ids differ from HF's (%zu vs %d ids)", i, got.n, n_want);
        // decoding HF's ids gives the text back
        char *dec = NULL;
        size_t dlen = 0;
        ASSERT(tok_decode(t, want, (size_t)n_want, 0, &dec, &dlen) == 0, "%s", fd_error_msg());
        EXPECT(dlen == strlen(text) && !memcmp(dec, text, dlen), "prompt %zu: decode differs", i);
        free(dec);
        tok_ids_free(&got);
        free(want);
    }
    tok_free(t);
    ref_free(&ref);
}

// Tree verify (spec_verify=tree) on the trained pair: greedy output identical to plain greedy on every held-out
// prompt at several budgets, and emitted tokens/round against the chain's at block 8 (issue 22 asks >= 1.3x).
TEST(trained_tree_greedy_identical_and_tokens_per_round) {
    trained_ref ref;
    ASSERT(ref_load(&ref) == 0, "reference data missing under " DATA_DIR);
    fd_model m;
    fd_drafter d;
    ASSERT(model_load(TARGET_DIR, &m) == 0, "%s", fd_error_msg());
    model_upload(&m, cpu());
    ASSERT(drafter_load(DRAFT_DIR, &m, &d) == 0, "%s", fd_error_msg());
    drafter_upload(&d, cpu());
    const int n_new = 48, budgets[] = {0, 4, 16, 32}; // 0: the chain
    enum { N_B = 4 };
    const int np = (int)json_array_size(ref.prompts);
    int64_t rounds[N_B] = {0}, emitted[N_B] = {0}, nodes[N_B] = {0};
    double secs[N_B] = {0};
    int mismatches = 0;
    for (int i = 0; i < np; i++) {
        int n;
        int32_t *ids = json_ids(json_object_get(json_array_get(ref.prompts, (size_t)i), "ids"), &n);
        fd_engine e;
        fd_engine_opts o;
        engine_default_opts(&o);
        o.capacity = n + n_new + 64;
        o.max_batch = 64;
        ASSERT(engine_init(&e, &m, cpu(), &o) == 0, "%s", fd_error_msg());
        int32_t *plain = calloc(n_new, sizeof *plain), *spec = calloc(n_new, sizeof *spec);
        ASSERT(engine_generate_greedy(&e, ids, n, 0, n_new, plain) == 0, "%s", fd_error_msg());
        for (int b = 0; b < N_B; b++) {
            fd_dflash s;
            engine_reset(&e);
            ASSERT(dflash_init(&s, &e, &d, 8) == 0, "%s", fd_error_msg());
            e.spec_verify_sel = budgets[b] > 0;
            s.tree_budget = budgets[b];
            const double t0 = fd_time_s();
            ASSERT(dflash_generate(&s, ids, n, 64, n_new, NULL, spec) == 0, "%s", fd_error_msg());
            secs[b] += fd_time_s() - t0;
            const int same = !memcmp(spec, plain, sizeof(int32_t) * n_new);
            EXPECT(same, "prompt %d budget %d: speculative output differs from greedy", i, budgets[b]);
            mismatches += !same;
            rounds[b] += s.st.rounds;
            emitted[b] += s.st.emitted;
            nodes[b] += s.st.draft_tokens;
            dflash_free(&s);
        }
        free(plain);
        free(spec);
        free(ids);
        engine_free(&e);
    }
    const double chain = (double)emitted[0] / (double)rounds[0];
    for (int b = 0; b < N_B; b++) {
        const double tau = (double)emitted[b] / (double)rounds[b];
        char what[32];
        snprintf(what, sizeof what, budgets[b] ? "budget %d" : "chain", budgets[b]);
        printf("    %d prompts, block 8, %-9s: %.3f emitted tokens/round (%.2fx chain), %.1f draft nodes/round, "
               "%.1f ms/round (cpu)\n",
               np, what, tau, tau / chain,
               (double)nodes[b] / (double)rounds[b], 1e3 * secs[b] / (double)rounds[b]);
    }
    EXPECT(mismatches == 0);
    // the default budget must reach the bar on these prompts
    const double tau_default = (double)emitted[3] / (double)rounds[3];
    EXPECT(budgets[3] == FD_TREE_BUDGET_DEFAULT && tau_default >= 1.3 * chain,
           "tree (budget %d) %.3f vs chain %.3f emitted tokens/round", budgets[3], tau_default, chain);
    drafter_free(&d);
    model_free(&m);
    ref_free(&ref);
}
