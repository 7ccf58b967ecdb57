// The CLI contract (info / logits / generate / run) and bad input: every bad model directory or argument
// gives exit status 1 or 2 (never a signal) and one line "flashdelta: error: ..." naming what is wrong.
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fixture.h"
#include "test.h"

TEST(cli_logits_writes_all_positions) {
    fixture fx;
    ASSERT(fixture_load("qwen3_next_moe", &fx) == 0, "%s", fd_error_msg());
    char *csv = test_ids_csv(fx.ids, fx.n_ids);
    char out[] = "/tmp/fd_logitsXXXXXX";
    int fd = mkstemp(out);
    ASSERT(fd >= 0);
    close(fd);
    char *cmd = fd_sprintf("%s logits %s --ids %s --out %s --prefill-chunk 64 2>/dev/null", test_bin(), fx.dir, csv,
                           out);
    EXPECT(test_run(cmd, NULL) == 0);
    size_t len = 0;
    char *raw = fd_read_file(out, &len);
    ASSERT(raw, "%s", fd_error_msg());
    EXPECT(len == (size_t)fx.n_ids * fx.vocab * 4, "logits file has %zu bytes, expected %d x %d floats", len,
           fx.n_ids, fx.vocab);
    if (len == (size_t)fx.n_ids * fx.vocab * 4) {
        double e = test_rel_l2((const float *)raw, fx.logits, (size_t)fx.n_ids * fx.vocab);
        EXPECT(e <= 1e-4, "CLI logits rel-L2 vs HF %.3g", e);
    }
    unlink(out);
    free(raw);
    free(cmd);
    free(csv);
    fixture_free(&fx);
}

TEST(cli_generate_prints_greedy_ids) {
    for (int f = 0; k_fixture_names[f]; f++) {
        fixture fx;
        ASSERT(fixture_load(k_fixture_names[f], &fx) == 0, "%s", fd_error_msg());
        char *csv = test_ids_csv(fx.ids, fx.n_ids);
        char *want = malloc((size_t)fx.n_greedy * 12 + 2);
        size_t used = 0;
        for (int i = 0; i < fx.n_greedy; i++) used += (size_t)sprintf(want + used, "%s%d", i ? " " : "", fx.greedy[i]);
        strcpy(want + used, "\n");
        const char *chunks[] = {"", "--prefill-chunk 7"};
        for (int c = 0; c < 2; c++) {
            char *cmd = fd_sprintf("%s generate %s --ids %s -n %d %s 2>/dev/null", test_bin(), fx.dir, csv,
                                   fx.n_greedy, chunks[c]);
            char *got = NULL;
            EXPECT(test_run(cmd, &got) == 0);
            EXPECT(got && !strcmp(got, want), "%s %s:\n got  %s want %s", k_fixture_names[f], chunks[c],
                   got ? got : "(null)", want);
            free(got);
            free(cmd);
        }
        free(want);
        free(csv);
        fixture_free(&fx);
    }
}

TEST(cli_info_and_run) {
    for (int f = 0; k_fixture_names[f]; f++) {
        char *cmd = fd_sprintf("%s info tests/data/fixtures/%s 2>&1", test_bin(), k_fixture_names[f]);
        char *out = NULL;
        EXPECT(test_run(cmd, &out) == 0);
        EXPECT(out && strstr(out, "architecture: ") && strstr(out, "parameters: ") && strstr(out, "layer plan: "),
               "%s", out ? out : "");
        free(out);
        free(cmd);
    }
    // without models/ (FD_DEMO_MODELS names an empty place) run falls back to the random-weight fixture
    char *cmd = fd_sprintf("FD_DEMO_MODELS=/nonexistent %s run 2>/dev/null", test_bin()), *out = NULL;
    EXPECT(test_run(cmd, &out) == 0);
    EXPECT(out && strstr(out, "RANDOM weights") && strstr(out, "greedy output: yes"), "%s", out ? out : "");
    free(out);
    free(cmd);
    // with the trained models: HF's greedy ids, and DFlash with the trained drafter gives the same ids
    cmd = fd_sprintf("%s run 2>/dev/null", test_bin());
    out = NULL;
    EXPECT(test_run(cmd, &out) == 0);
    EXPECT(out && strstr(out, "TRAINED") && strstr(out, "greedy output: yes") &&
               strstr(out, "same ids as plain decoding: yes") && strstr(out, "emitted tokens/round"),
           "%s", out ? out : "");
    free(out);
    free(cmd);
}

// `COMMAND --help` prints that command's usage and the common options on stdout and exits 0 (it used to be taken
// for an option missing its value).
TEST(cli_command_help) {
    const char *cmds[] = {"run", "info", "logits", "generate", "bench", "draft-logits", "serve", "tokenize", "chat"};
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        char *cmd = fd_sprintf("%s %s --help 2>&1", test_bin(), cmds[i]), *out = NULL;
        EXPECT(test_run(cmd, &out) == 0, "%s --help failed: %s", cmds[i], out ? out : "");
        char *want = fd_sprintf("usage: flashdelta %s", cmds[i]);
        EXPECT(out && strstr(out, want) && !strstr(out, "error"), "%s --help printed: %s", cmds[i], out ? out : "");
        free(want);
        free(out);
        free(cmd);
    }
}

// ---- bad input ----

// Copies a fixture to a fresh temp dir; returns the malloc'ed path.
static char *copy_fixture(const char *name) {
    char tmpl[] = "/tmp/fd_badXXXXXX";
    ASSERT(mkdtemp(tmpl));
    char *cmd = fd_sprintf("cp -r tests/data/fixtures/%s/. %s/", name, tmpl);
    ASSERT(test_run(cmd, NULL) == 0);
    free(cmd);
    return fd_strdup(tmpl);
}

static void remove_dir(char *dir) {
    char *cmd = fd_sprintf("rm -rf %s", dir);
    test_run(cmd, NULL);
    free(cmd);
    free(dir);
}

// Replaces the first `from` in DIR/FILE with `to`.
static void edit_file(const char *dir, const char *file, const char *from, const char *to) {
    char *p = fd_path_join(dir, file);
    size_t len;
    char *s = fd_read_file(p, &len);
    ASSERT(s, "%s", fd_error_msg());
    char *at = memmem(s, len, from, strlen(from));
    ASSERT(at, "'%s' not found in %s", from, p);
    FILE *f = fopen(p, "wb");
    ASSERT(f);
    fwrite(s, 1, (size_t)(at - s), f);
    fwrite(to, 1, strlen(to), f);
    fwrite(at + strlen(from), 1, len - (size_t)(at - s) - strlen(from), f);
    fclose(f);
    free(s);
    free(p);
}

// Runs `flashdelta ARGS`, expects exit 1/2 and a single stderr line with every needle.
static void expect_error(const char *args, const char *needle1, const char *needle2) {
    char *cmd = fd_sprintf("%s %s 2>&1 >/dev/null", test_bin(), args), *out = NULL;
    int rc = test_run(cmd, &out);
    EXPECT(rc == 1 || rc == 2, "'%s' exited with %d", args, rc);
    int lines = 0;
    for (char *p = out; p && *p; p++) lines += *p == '\n';
    EXPECT(out && !strncmp(out, "flashdelta: error: ", 19) && lines == 1, "'%s' printed: %s", args, out ? out : "");
    EXPECT(out && strstr(out, needle1), "'%s': message lacks '%s': %s", args, needle1, out ? out : "");
    if (needle2) EXPECT(out && strstr(out, needle2), "'%s': message lacks '%s': %s", args, needle2, out ? out : "");
    free(out);
    free(cmd);
}

TEST(cli_bad_model_dirs) {
    expect_error("info /nonexistent/model", "/nonexistent/model", "config.json");
    char *d = copy_fixture("qwen35_dense_tied"), *a;
    edit_file(d, "config.json", "\"intermediate_size\": 128", "\"intermediate_size\": 100");
    a = fd_sprintf("info %s", d);
    expect_error(a, "mlp.gate_proj.weight", "expected [100, 64]");
    free(a);
    remove_dir(d);

    d = copy_fixture("qwen35_dense_tied"); // tied checkpoint declared untied: lm_head missing
    edit_file(d, "config.json", "\"tie_word_embeddings\": true", "\"tie_word_embeddings\": false");
    a = fd_sprintf("info %s", d);
    expect_error(a, "lm_head.weight", NULL);
    free(a);
    remove_dir(d);

    d = copy_fixture("qwen35_dense_tied");
    edit_file(d, "config.json", "\"qwen3_5_text\"", "\"llama\"");
    a = fd_sprintf("info %s", d);
    expect_error(a, "unknown architecture", "llama");
    free(a);
    remove_dir(d);

    d = copy_fixture("qwen35_dense_tied");
    edit_file(d, "config.json", "\"vocab_size\": 512", "\"vocab_size\": [512");
    a = fd_sprintf("info %s", d);
    expect_error(a, "config.json", NULL);
    free(a);
    remove_dir(d);

    d = copy_fixture("qwen35_dense_tied"); // a tensor renamed in the safetensors header: missing tensor
    edit_file(d, "model.safetensors", "model.norm.weight", "model.norX.weight");
    a = fd_sprintf("info %s", d);
    expect_error(a, "model.norm.weight", "missing");
    free(a);
    remove_dir(d);

    d = copy_fixture("qwen35_vl_sharded"); // a shard missing
    char *p = fd_path_join(d, "model-00002-of-00003.safetensors");
    unlink(p);
    free(p);
    a = fd_sprintf("info %s", d);
    expect_error(a, "model-00002-of-00003.safetensors", NULL);
    free(a);
    remove_dir(d);

    d = copy_fixture("qwen35_vl_sharded"); // dtype that no weight may have
    edit_file(d, "model-00001-of-00003.safetensors", "\"F32\"", "\"I32\"");
    a = fd_sprintf("info %s", d);
    expect_error(a, "I32", "model-00001-of-00003.safetensors");
    free(a);
    remove_dir(d);

    d = copy_fixture("qwen3_next_moe"); // truncated weights
    p = fd_path_join(d, "model.safetensors");
    ASSERT(truncate(p, 300000) == 0);
    free(p);
    a = fd_sprintf("info %s", d);
    expect_error(a, "model.safetensors", NULL);
    free(a);
    remove_dir(d);

    d = copy_fixture("qwen3_next_moe"); // no weights at all
    p = fd_path_join(d, "model.safetensors");
    unlink(p);
    free(p);
    a = fd_sprintf("info %s", d);
    expect_error(a, "model.safetensors", NULL);
    free(a);
    remove_dir(d);
}

TEST(cli_bad_arguments) {
    const char *m = "tests/data/fixtures/qwen35_moe";
    char *a;
    a = fd_sprintf("generate %s --ids 1,2,x -n 3", m);
    expect_error(a, "--ids", NULL);
    free(a);
    a = fd_sprintf("generate %s --ids 1,2,999999 -n 3", m);
    expect_error(a, "999999", "vocabulary");
    free(a);
    a = fd_sprintf("generate %s --ids 1,2 -n -4", m);
    expect_error(a, "-n", NULL);
    free(a);
    a = fd_sprintf("generate %s --ids 1,2 --bogus 1", m);
    expect_error(a, "unknown option", "--bogus");
    free(a);
    a = fd_sprintf("generate %s --ids 1,2,3,4 -n 8 --ctx 6", m);
    expect_error(a, "capacity", NULL);
    free(a);
    a = fd_sprintf("logits %s --ids 1,2", m);
    expect_error(a, "--out", NULL);
    free(a);
    a = fd_sprintf("generate %s --ids 1 --gdn-prefill fast", m);
    expect_error(a, "--gdn-prefill", "chunked | serial");
    free(a);
    expect_error("frobnicate", "unknown command", NULL);
}

TEST(cli_bench_random_weights) {
    char js[] = "/tmp/fd_benchXXXXXX";
    int fd = mkstemp(js);
    ASSERT(fd >= 0);
    close(fd);
    char *cmd = fd_sprintf("%s bench --random-weights bench/configs/tiny.json --draft-random "
                           "bench/configs/tiny-dflash.json --contexts 64,200 --decode 24 --json %s 2>/dev/null",
                           test_bin(), js),
         *out = NULL;
    EXPECT(test_run(cmd, &out) == 0);
    EXPECT(out && strstr(out, "ORACLE") && strstr(out, "emit/rnd") && strstr(out, "route check: every counted call ran its selected route"), "%s",
           out ? out : "");
    int rows = 0;
    for (char *p = out; p && (p = strstr(p, " yes |")); p++) rows++; // deterministic in every row
    EXPECT(rows == 2, "%s", out ? out : "");
    size_t len;
    char *j = fd_read_file(js, &len);
    EXPECT(j && strstr(j, "\"computed_prefill_tokens\": 200") && strstr(j, "\"emitted_tokens_per_round\""), "%s",
           j ? j : "");
    free(j);
    // the round's phases: printed as a table, in the JSON per row; each phase >= 0, draft and verify > 0, and
    // together no more than the round (the rest is host work between the phases)
    EXPECT(out && strstr(out, "draft    verify    accept    commit     other"), "%s", out ? out : "");
    json_error_t je;
    json_t *root = json_load_file(js, 0, &je), *jrows = json_object_get(root, "rows");
    EXPECT(json_array_size(jrows) == 2, "%s", je.text);
    for (size_t i = 0; i < json_array_size(jrows); i++) {
        json_t *row = json_array_get(jrows, i), *ph = json_object_get(row, "round_phases_ms");
        const double round = json_real_value(json_object_get(row, "round_ms"));
        const double d = json_real_value(json_object_get(ph, "draft")), v = json_real_value(json_object_get(ph, "verify"));
        const double a = json_real_value(json_object_get(ph, "accept")), c = json_real_value(json_object_get(ph, "commit"));
        EXPECT(ph && d > 0 && v > 0 && a >= 0 && c >= 0, "row %zu: phases %g %g %g %g", i, d, v, a, c);
        EXPECT(d + v + a + c <= round * 1.001 + 1e-3, "row %zu: phases sum to %g ms > round %g ms", i, d + v + a + c,
               round);
    }
    json_decref(root);
    free(out);
    free(cmd);
    unlink(js);
    // a context that does not fit is refused up front
    cmd = fd_sprintf("%s bench --random-weights bench/configs/tiny.json --contexts 64 --ctx 32 2>&1", test_bin());
    EXPECT(test_run(cmd, &out) == 1 && out && strstr(out, "capacity"), "%s", out ? out : "");
    free(out);
    free(cmd);
}

TEST(cli_trace_writes_chrome_json) {
    fixture fx;
    ASSERT(fixture_load("qwen35_moe", &fx) == 0, "%s", fd_error_msg());
    char *csv = test_ids_csv(fx.ids, 20), *plain = NULL, *traced = NULL, *err = NULL;
    char js[] = "/tmp/fd_traceXXXXXX";
    int fd = mkstemp(js);
    ASSERT(fd >= 0);
    close(fd);
    char *cmd = fd_sprintf("%s generate %s --ids %s -n 6 2>/dev/null", test_bin(), fx.dir, csv);
    EXPECT(test_run(cmd, &plain) == 0);
    free(cmd);
    cmd = fd_sprintf("%s generate %s --ids %s -n 6 --trace %s 2>/dev/null", test_bin(), fx.dir, csv, js);
    EXPECT(test_run(cmd, &traced) == 0);
    EXPECT(plain && traced && !strcmp(plain, traced), "tracing changed the output");
    free(cmd);
    json_error_t je;
    json_t *root = json_load_file(js, 0, &je);
    ASSERT(root, "trace is not JSON: %s", je.text);
    json_t *ev = json_object_get(root, "traceEvents");
    EXPECT(json_is_array(ev) && json_array_size(ev) > 100, "trace has %zu events", json_array_size(ev));
    int have_gdn = 0, have_attn = 0;
    for (size_t i = 0; i < json_array_size(ev); i++) {
        const char *name = json_string_value(json_object_get(json_array_get(ev, i), "name"));
        have_gdn |= name && !strncmp(name, "gdn_core[", 9);
        have_attn |= name && !strcmp(name, "attention");
    }
    EXPECT(have_gdn && have_attn);
    json_decref(root);
    unlink(js);
    cmd = fd_sprintf("%s bench --random-weights bench/configs/tiny.json --contexts 32 --trace %s 2>&1", test_bin(), js);
    EXPECT(test_run(cmd, &err) == 2 && err && strstr(err, "traced"), "%s", err ? err : "");
    free(cmd);
    free(err);
    free(plain);
    free(traced);
    free(csv);
    fixture_free(&fx);
}

TEST(cli_routes_select_print_and_refuse) {
    const char *m = "tests/data/fixtures/qwen35_moe";
    char *out = NULL, *cmd;
    cmd = fd_sprintf("%s generate %s --ids 1,2,3,4,5,6,7,8,9 -n 4 --route gdn_prefill=serial --stats 2>&1", test_bin(), m);
    EXPECT(test_run(cmd, &out) == 0);
    EXPECT(out && strstr(out, "routes: gdn_prefill=serial [chunked | serial]") &&
               strstr(out, "gdn_prefill    selected serial    chunked 0 / 0  serial 1 / 9"),
           "%s", out ? out : "");
    free(out);
    free(cmd);
    cmd = fd_sprintf("FD_ROUTE_GDN_PREFILL=serial %s generate %s --ids 1,2,3 -n 2 2>&1", test_bin(), m);
    EXPECT(test_run(cmd, &out) == 0 && out && strstr(out, "gdn_prefill=serial"), "%s", out ? out : "");
    free(out);
    free(cmd);
    expect_error("generate tests/data/fixtures/qwen35_moe --ids 1,2 --route bogus=1", "no route 'bogus'",
                 "gdn_prefill");
    expect_error("generate tests/data/fixtures/qwen35_moe --ids 1,2 --route gdn_prefill=fast", "no value 'fast'",
                 "chunked | serial");
    expect_error("generate tests/data/fixtures/qwen35_moe --ids 1,2 --route gdn_prefill", "NAME=VALUE", NULL);
    cmd = fd_sprintf("FD_ROUTE_GDN_DECODE=chunked %s generate %s --ids 1,2 -n 1 2>&1", test_bin(), m);
    EXPECT(test_run(cmd, &out) == 2 && out && strstr(out, "FD_ROUTE_GDN_DECODE"), "%s", out ? out : "");
    free(out);
    free(cmd);
    // the bench proves its routes: every counted call ran the selected value
    cmd = fd_sprintf("%s bench --random-weights bench/configs/tiny.json --contexts 80 --decode 4 --route "
                     "gdn_prefill=serial 2>/dev/null",
                     test_bin());
    EXPECT(test_run(cmd, &out) == 0 && out && strstr(out, "route check: every counted call ran its selected route") &&
               strstr(out, "selected serial"),
           "%s", out ? out : "");
    free(out);
    free(cmd);
}

// The CUDA routes were also read as FD_CUDA_<NAME> before one environment name per route (FD_ROUTE_<NAME>) was
// kept: an old name still set is refused naming its replacement (on any backend: the run would otherwise measure
// the default while its environment says otherwise), and so are the knobs of the removed kernel variants.
TEST(cli_retired_route_env_refused) {
    static const char *const cases[][3] = {
        {"FD_CUDA_GEMM_ACT=bf16", "FD_CUDA_GEMM_ACT", "FD_ROUTE_GEMM_ACT"},
        {"FD_CUDA_ATTN=simt", "FD_CUDA_ATTN", "FD_ROUTE_ATTN_KERNEL"},
        {"FD_CUDA_GEMM_SMALL=cublas", "FD_CUDA_GEMM_SMALL", "FD_ROUTE_GEMM_SMALL"},
        {"FD_CUDA_PDL=off", "FD_CUDA_PDL", "FD_ROUTE_PDL"},
        {"FD_CUDA_GEMM_FP8=dequant", "FD_CUDA_GEMM_FP8", "FD_ROUTE_GEMM_FP8"},
        {"FD_CUDA_GEMV_VARIANT=ring", "FD_CUDA_GEMV_VARIANT", "removed"},
        {"FD_CUDA_GDN_SERIAL=v1", "FD_CUDA_GDN_SERIAL", "removed"},
        {"FD_CUDA_GEMV_BLOCKS_PER_SM=6", "FD_CUDA_GEMV_BLOCKS_PER_SM", "removed"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *out = NULL;
        char *cmd = fd_sprintf("%s %s generate tests/data/fixtures/qwen35_moe --ids 1,2 -n 1 2>&1 >/dev/null",
                               cases[i][0], test_bin());
        EXPECT(test_run(cmd, &out) == 2, "%s", cmd);
        EXPECT(out && !strncmp(out, "flashdelta: error: ", 19) && strstr(out, cases[i][1]) && strstr(out, cases[i][2]),
               "%s: %s", cases[i][0], out ? out : "");
        free(out);
        free(cmd);
    }
    // a debug knob that is not a route is still read (FD_CUDA_SYNC: the CPU backend ignores it)
    char *out = NULL;
    char *cmd = fd_sprintf("FD_CUDA_SYNC=1 %s generate tests/data/fixtures/qwen35_moe --ids 1,2 -n 1 2>&1", test_bin());
    EXPECT(test_run(cmd, &out) == 0, "%s", out ? out : "");
    free(out);
    free(cmd);
}

// flashdelta check: every screen within its bound on the CPU (built-in shapes, a fixture's shapes, an e4m3 KV
// cache), exit 1 naming the screen when one is made wrong on purpose (FD_CHECK_INJECT), exit 2 on a bad config.
TEST(cli_check_screens_and_an_injected_fault) {
    char *out = NULL, *cmd = fd_sprintf("%s check 2>&1", test_bin());
    EXPECT(test_run(cmd, &out) == 0 && out && strstr(out, "13 screens, 0 failed") && strstr(out, "gdn chunked: state") &&
               strstr(out, "attention decode") && strstr(out, "determinism"),
           "%s", out ? out : "");
    free(out), free(cmd);
    cmd = fd_sprintf("%s check tests/data/fixtures/qwen3_next_moe --route kv=e4m3 2>&1", test_bin());
    EXPECT(test_run(cmd, &out) == 0 && out && strstr(out, "0 failed") && strstr(out, "kv e4m3"), "%s", out ? out : "");
    free(out), free(cmd);
    static const char *const screens[] = {"gemm down", "gdn serial", "attention prefill"};
    for (int i = 0; i < 3; i++) {
        cmd = fd_sprintf("FD_CHECK_INJECT='%s' %s check 2>&1", screens[i], test_bin());
        EXPECT(test_run(cmd, &out) == 1 && out, "%s: exit status not 1", screens[i]);
        int named = 0;
        for (char *l = out; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
            if (!strncmp(l, screens[i], strlen(screens[i])) && strstr(l, "FAIL") && strstr(l, "FAIL") < strchr(l, '\n'))
                named = 1;
        EXPECT(named, "%s: no FAIL line names it:\n%s", screens[i], out ? out : "");
        free(out), free(cmd);
    }
    cmd = fd_sprintf("%s check --random-weights /nonexistent.json 2>&1", test_bin());
    EXPECT(test_run(cmd, &out) == 2 && out && strstr(out, "/nonexistent.json"), "%s", out ? out : "");
    free(out), free(cmd);
}
