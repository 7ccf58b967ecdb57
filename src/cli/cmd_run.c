// `flashdelta run`: the demo (the bundled trained pair in models/, else the random-weight fixture), or one
// model directory with a text prompt (-p TEXT or stdin) streamed as text, or --ids printed as ids and text.
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/gen.h"
#include "io/chat_template.h"
#include "io/tokenizer.h"

#ifndef FD_SOURCE_DIR
#define FD_SOURCE_DIR "."
#endif

// The bundled demo: the tiny random-weight qwen3_5 fixture, whose prompt and HF greedy continuation ship
// with it, so the demo can say whether the engine reproduced Hugging Face transformers exactly.
static const char *demo_dir(void) {
    return FD_SOURCE_DIR "/tests/data/fixtures/qwen35_dense_tied";
}

static int load_demo_prompt(const char *dir, int32_t **ids, int64_t *n, int32_t **ref, int *n_ref) {
    char *p = fd_path_join(dir, "prompt.json");
    json_error_t err;
    json_t *root = json_load_file(p, 0, &err);
    free(p);
    if (!root) return fd_error_set("%s/prompt.json: %s", dir, err.text);
    json_t *a = json_object_get(root, "ids"), *g = json_object_get(root, "greedy");
    *n = (int64_t)json_array_size(a);
    *n_ref = (int)json_array_size(g);
    *ids = fd_malloc(sizeof(int32_t) * (size_t)(*n + 1));
    *ref = fd_malloc(sizeof(int32_t) * (size_t)(*n_ref + 1));
    for (int64_t i = 0; i < *n; i++) (*ids)[i] = (int32_t)json_integer_value(json_array_get(a, (size_t)i));
    for (int i = 0; i < *n_ref; i++) (*ref)[i] = (int32_t)json_integer_value(json_array_get(g, (size_t)i));
    json_decref(root);
    return *n > 0 ? 0 : fd_error_set("%s/prompt.json: no prompt ids", dir);
}

// The demo's second half: the same prompt through DFlash with the bundled (random-weight) drafter. The ids
// must not change; with random weights the drafts are almost never accepted, which the stats show plainly.
static int demo_dflash(const cli_opts *plain, const int32_t *want, double plain_s) {
    cli_opts o = *plain;
    o.draft_dir = FD_SOURCE_DIR "/tests/data/dflash/qwen35_dense_tied_b8";
    session s;
    int rc = session_open(&s, &o, o.n_ids + o.n_new);
    int32_t *out = fd_malloc(sizeof(int32_t) * (size_t)(o.n_new + 1));
    double t0 = fd_time_s();
    if (!rc) rc = dflash_generate(&s.spec, o.ids, o.n_ids, o.prefill_chunk, o.n_new, NULL, out);
    double dt = fd_time_s() - t0;
    if (!rc) {
        const int same = !memcmp(out, want, sizeof(int32_t) * (size_t)o.n_new);
        printf(
            "\nDFlash with the bundled drafter (tests/data/dflash/qwen35_dense_tied_b8, RANDOM weights, block %d):\n"
            "  same ids as plain decoding: %s; %.3f s vs %.3f s plain; emitted tokens/round %.2f (random drafts are\n"
            "  almost never accepted; `flashdelta bench` measures rounds at a set acceptance with the oracle "
            "drafter)\n",
            s.spec.B, same ? "yes" : "NO", dt, plain_s,
            s.spec.st.rounds ? (double)s.spec.st.emitted / (double)s.spec.st.rounds : 0.0);
        if (!same) rc = 1;
    } else {
        fprintf(stderr, "flashdelta: error: %s\n", fd_error_msg());
    }
    free(out);
    session_close(&s);
    return rc;
}

// The trained demo (models/, made by tools/train_tiny.py; env FD_DEMO_MODELS names another folder): a held-out
// code prompt (tests/data/trained/val_prompts.json) through our tokenizer, greedy text streamed, then the same
// prompt through DFlash with the trained drafter: ids must not change; tokens/s of both and emitted tokens/round.
static char *trained_root(void) {
    const char *env = getenv("FD_DEMO_MODELS");
    char *root = fd_strdup(env ? env : FD_SOURCE_DIR "/models");
    char *cfg = fd_sprintf("%s/tiny-qwen35/config.json", root),
         *dcfg = fd_sprintf("%s/tiny-qwen35-dflash/config.json", root);
    FILE *f1 = fopen(cfg, "r"), *f2 = fopen(dcfg, "r");
    const int ok = f1 && f2;
    if (f1) fclose(f1);
    if (f2) fclose(f2);
    free(cfg);
    free(dcfg);
    if (!ok) {
        free(root);
        return NULL;
    }
    return root;
}

// Prompt text and, where shipped, the ids and HF greedy continuation tools/train_tiny.py computed for it.
static const char *k_trained_default_prompt = "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n";
static char *trained_prompt(json_t **ref_ids, json_t **ref_greedy, json_t **roots) {
    json_error_t err;
    roots[0] = json_load_file(FD_SOURCE_DIR "/tests/data/trained/val_prompts.json", 0, &err);
    roots[1] = json_load_file(FD_SOURCE_DIR "/tests/data/trained/expected.json", 0, &err);
    json_t *p0 = json_array_get(roots[0], 0);
    const char *text = json_string_value(json_object_get(p0, "text"));
    *ref_ids = json_object_get(p0, "ids");
    *ref_greedy = json_object_get(roots[1], "greedy");
    return fd_strdup(text ? text : k_trained_default_prompt);
}

static int demo_trained(const cli_opts *po, const char *root, int n_given) {
    cli_opts o = *po;
    char *tdir = fd_sprintf("%s/tiny-qwen35", root), *ddir = fd_sprintf("%s/tiny-qwen35-dflash", root);
    char *tpath = fd_sprintf("%s/tokenizer.json", tdir);
    json_t *roots[2] = {NULL, NULL}, *ref_ids = NULL, *ref_greedy = NULL;
    char *text = trained_prompt(&ref_ids, &ref_greedy, roots);
    tok_tokenizer *tok = tok_load(tpath);
    tok_ids ids = {0};
    int rc = !tok || tok_encode(tok, text, strlen(text), &ids) || !ids.n;
    if (rc) fprintf(stderr, "flashdelta: error: %s\n", fd_error_msg());
    o.model_dir = tdir;
    o.ids = ids.ids;
    o.n_ids = (int64_t)ids.n;
    if (!n_given) o.n_new = 64;
    // HF's greedy ids apply when our tokenizer gave the ids they were computed for
    int n_ref = 0;
    if (!rc && json_array_size(ref_ids) == ids.n) {
        n_ref = (int)json_array_size(ref_greedy);
        for (size_t i = 0; i < ids.n; i++)
            if (json_integer_value(json_array_get(ref_ids, i)) != ids.ids[i]) n_ref = 0;
    }
    session s;
    memset(&s, 0, sizeof s);
    int32_t *out = fd_malloc(sizeof(int32_t) * (size_t)(o.n_new + 1)), *spec = NULL;
    double t0 = 0, t1 = 0, t2 = 0;
    if (!rc && !(rc = session_open(&s, &o, o.n_ids + o.n_new))) {
        printf("flashdelta demo: a small TRAINED qwen3_5 model (models/tiny-qwen35: %.1f M parameters, %d layers, "
               "trained\non Python source by tools/train_tiny.py; see models/README.md) and its DFlash drafter "
               "(models/tiny-qwen35-dflash).\n\nprompt (held-out code, %lld tokens):\n%s\n---- greedy continuation "
               "(%d tokens, streamed):\n",
               (double)s.model.n_params / 1e6, s.model.cfg.num_layers, (long long)o.n_ids, text, o.n_new);
        fflush(stdout);
        const int V = s.model.cfg.vocab_size;
        float *logits = fd_malloc((size_t)V * sizeof(float));
        tok_stream *ts = tok_stream_new(tok, 1);
        size_t len = 0;
        const char *piece;
        t0 = fd_time_s();
        rc = engine_prefill(&s.eng, o.ids, o.n_ids, o.prefill_chunk, logits, 0);
        t1 = fd_time_s();
        if (!rc && o.n_new > 0) out[0] = engine_argmax(logits, V);
        for (int i = 0; !rc && i < o.n_new; i++) {
            if ((piece = tok_stream_push(ts, out[i], &len)) && len) fwrite(piece, 1, len, stdout), fflush(stdout);
            if (i + 1 < o.n_new) rc = engine_forward_greedy(&s.eng, &out[i], 1, &out[i + 1]);
        }
        t2 = fd_time_s();
        if ((piece = tok_stream_flush(ts, &len)) && len) fwrite(piece, 1, len, stdout);
        tok_stream_free(ts);
        free(logits);
        if (rc) fprintf(stderr, "flashdelta: error: %s\n", fd_error_msg());
    }
    session_close(&s);
    if (!rc) {
        printf("\n----\n\nplain decoding: prefill %lld tokens in %.3f s (%.0f tok/s); decode %d tokens in %.3f s "
               "(%.1f tok/s); backend %s\n",
               (long long)o.n_ids, t1 - t0, (double)o.n_ids / (t1 - t0), o.n_new, t2 - t1,
               o.n_new > 1 ? (o.n_new - 1) / (t2 - t1) : 0.0, o.backend);
        int same = 0, n_cmp = n_ref < o.n_new ? n_ref : o.n_new;
        while (same < n_cmp && out[same] == (int32_t)json_integer_value(json_array_get(ref_greedy, (size_t)same)))
            same++;
        if (n_cmp) {
            printf("matches Hugging Face transformers' greedy output: %s (%d of %d reference tokens identical)\n",
                   same == n_cmp ? "yes" : "NO", same, n_cmp);
            if (same != n_cmp) rc = 1;
        }
    }
    if (!rc) {
        o.draft_dir = ddir;
        spec = fd_malloc(sizeof(int32_t) * (size_t)(o.n_new + 1));
        if (!(rc = session_open(&s, &o, o.n_ids + o.n_new))) {
            rc = dflash_generate(&s.spec, o.ids, o.n_ids, o.prefill_chunk, o.n_new, NULL, spec);
            if (rc) fprintf(stderr, "flashdelta: error: %s\n", fd_error_msg());
        }
        if (!rc) {
            const fd_spec_stats *st = &s.spec.st;
            const int same = !memcmp(out, spec, sizeof(int32_t) * (size_t)o.n_new);
            const double plain_tps = o.n_new > 1 ? (o.n_new - 1) / (t2 - t1) : 0.0;
            const double spec_tps = st->round_s > 0 ? (double)st->emitted / st->round_s : 0.0;
            printf("DFlash with the trained drafter (block %d): same ids as plain decoding: %s; decode %.1f tok/s vs "
                   "%.1f tok/s plain (%.2fx); %lld rounds, emitted tokens/round %.2f\n",
                   s.spec.B, same ? "yes" : "NO", spec_tps, plain_tps, plain_tps > 0 ? spec_tps / plain_tps : 0.0,
                   (long long)st->rounds, st->rounds ? (double)st->emitted / (double)st->rounds : 0.0);
            if (!same) rc = 1;
        }
        session_close(&s);
    }
    free(spec);
    free(out);
    tok_ids_free(&ids);
    tok_free(tok);
    json_decref(roots[0]);
    json_decref(roots[1]);
    free(text);
    free(tpath);
    free(tdir);
    free(ddir);
    return rc ? 1 : 0;
}

static const char *run_why_not(opt_id id) {
    switch (id) {
    case O_TEMPERATURE:
    case O_TOP_K:
    case O_TOP_P:
    case O_SEED:
        return "run decodes greedily; generate samples";
    case O_DRAFT:
    case O_BLOCK_SIZE:
        return "run's DFlash half is the demo's own drafter; generate --draft DIR decodes with yours";
    default:
        return NULL;
    }
}
static const opt_id k_run_opts[] = {O_MODEL, O_IDS, O_PROMPT, O_N_NEW, O_TP, CLI_ENGINE_OPTS, O_COUNT};
const cmd_spec cmd_run_spec = {
    "run", "[MODEL_DIR [-p TEXT | --ids 1,2,3]]",
    "the demo (models/ when present); with MODEL_DIR: greedy continuation of -p TEXT (or stdin) streamed as text",
    k_run_opts, run_why_not};

// run MODEL_DIR: the prompt (text, or --ids) greedily continued; text streamed when the folder has a tokenizer.
static int run_model(cli_opts *o) {
    tok_tokenizer *tok = NULL;
    const int ids_given = o->ids != NULL;
    char *tpath = fd_path_join(o->model_dir, "tokenizer.json");
    if (!o->ids || fd_file_exists(tpath)) tok = cli_tokenizer(o->model_dir);
    free(tpath);
    if (!o->ids && !tok) return 1;
    if (!o->ids) {
        if (!o->prompt) o->prompt = "-";
        if (isatty(0) && !strcmp(o->prompt, "-"))
            fprintf(stderr, "flashdelta: prompt text on stdin, end with Ctrl-D:\n");
        if (cli_prompt_ids(o, tok)) {
            tok_free(tok);
            return 1;
        }
    }
    session s;
    int rc = session_open(&s, o, o->n_ids + o->n_new);
    if (rc) {
        tok_free(tok);
        return rc;
    }
    fd_sampler greedy;
    sampler_init(&greedy, 0, 0, 1, 0);
    int32_t *out = fd_malloc(sizeof(int32_t) * (size_t)(o->n_new + 1));
    int32_t eos[16];
    int n_eos = tok ? chat_eos_ids(o->model_dir, tok, eos, 16) : 0;
    text_out txt;
    if (tok) text_out_init(&txt, tok);
    gen_sink k = {eos, n_eos > 0 ? n_eos : 0, NULL, tok ? text_out_token : NULL, &txt};
    gen_result r;
    cli_progress pr;
    progress_attach(&pr, &s.eng, "prefill");
    rc = gen_run(&s, o->ids, o->n_ids, o->prefill_chunk, o->n_new, &greedy, &k, out, &r);
    if (tok) {
        text_out_finish(&txt);
        if (!txt.wrote_newline_last) putchar('\n');
    }
    if (rc) {
        fprintf(stderr, "flashdelta: error: %s\n", fd_error_msg());
    } else {
        if (ids_given) {
            printf("generated ids:");
            for (int i = 0; i < r.n_out; i++) printf(" %d", out[i]);
            printf("\n");
        }
        printf(
            "\nprefill: %lld tokens in %.3f s (%.0f tok/s); decode: %d tokens in %.3f s (%.1f tok/s); backend %s%s\n",
            (long long)o->n_ids, r.prefill_s, (double)o->n_ids / r.prefill_s, r.n_out, r.decode_s,
            r.n_out > 1 ? (r.n_out - 1) / r.decode_s : 0.0, s.be->name, r.hit_eos ? "; ended at eos" : "");
    }
    free(out);
    tok_free(tok);
    session_close(&s);
    return rc ? 1 : 0;
}

int cmd_run(int argc, char **argv) {
    cli_opts o;
    int done, rc = cli_parse(&cmd_run_spec, argc, argv, &o, 0, &done);
    if (rc || done) return rc;
    if (o.model_dir) {
        rc = run_model(&o);
        free(o.ids);
        return rc;
    }
    if (o.prompt) return cli_error("run -p TEXT needs MODEL_DIR");
    int32_t *ref = NULL;
    int n_ref = 0;
    if (!o.ids) { // the trained models when models/ has them, else the random-weight fixture below
        char *root = trained_root();
        if (root) {
            rc = demo_trained(&o, root, o.n_given);
            free(root);
            return rc;
        }
    }
    o.model_dir = demo_dir();
    if (!o.ids && load_demo_prompt(o.model_dir, &o.ids, &o.n_ids, &ref, &n_ref)) {
        fprintf(stderr, "flashdelta: error: demo model not found: %s\n", fd_error_msg());
        return 1;
    }
    if (ref) o.n_new = n_ref;
    printf("flashdelta demo: a tiny qwen3_5 model with RANDOM weights (tests/data/fixtures/qwen35_dense_tied,\n"
           "made with Hugging Face transformers). Its tokens mean nothing; the demo shows the engine loading a\n"
           "checkpoint, prefilling %lld prompt ids and decoding greedily, and checks the result against the\n"
           "continuation HF transformers produced for the same prompt.\n\n",
           (long long)o.n_ids);
    session s;
    if ((rc = session_open(&s, &o, o.n_ids + o.n_new))) {
        free(o.ids);
        free(ref);
        return rc;
    }
    const int V = s.model.cfg.vocab_size;
    float *logits = fd_malloc((size_t)V * sizeof(float));
    int32_t *out = fd_malloc(sizeof(int32_t) * (size_t)(o.n_new + 1));
    double t0 = fd_time_s();
    rc = engine_prefill(&s.eng, o.ids, o.n_ids, o.prefill_chunk, logits, 0);
    double t1 = fd_time_s();
    if (!rc && o.n_new > 0) out[0] = engine_argmax(logits, V);
    for (int i = 0; !rc && i + 1 < o.n_new; i++) rc = engine_forward_greedy(&s.eng, &out[i], 1, &out[i + 1]);
    double t2 = fd_time_s();
    if (rc) {
        fprintf(stderr, "flashdelta: error: %s\n", fd_error_msg());
    } else {
        printf("generated ids:");
        for (int i = 0; i < o.n_new; i++) printf(" %d", out[i]);
        printf(
            "\n\nprefill: %lld tokens in %.3f s (%.0f tok/s); decode: %d tokens in %.3f s (%.0f tok/s); backend %s\n",
            (long long)o.n_ids, t1 - t0, (double)o.n_ids / (t1 - t0), o.n_new, t2 - t1,
            o.n_new > 1 ? (o.n_new - 1) / (t2 - t1) : 0.0, s.be->name);
        if (ref) {
            int same = 0;
            while (same < o.n_new && out[same] == ref[same]) same++;
            printf("matches Hugging Face transformers' greedy output: %s (%d of %d tokens identical)\n",
                   same == o.n_new ? "yes" : "NO", same, o.n_new);
            if (same != o.n_new) rc = 1;
        }
    }
    if (!rc) rc = demo_dflash(&o, out, t2 - t0);
    free(logits);
    free(out);
    free(o.ids);
    free(ref);
    session_close(&s);
    return rc ? 1 : 0;
}
