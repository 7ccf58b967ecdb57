// Flags that tell the truth (issue 19): every command refuses what it cannot honour, names options exactly as its
// --help lists them, takes the vLLM / llama.cpp spellings, and reports an unknown option as unknown.
#include <stdlib.h>
#include <string.h>

#include "fixture.h"
#include "test.h"

static const char *k_m = "tests/data/fixtures/qwen35_moe";

// Runs `flashdelta ARGS`, expects exit 2 and one "flashdelta: error:" line containing needle.
static void expect_usage_error(const char *args, const char *needle) {
    char *cmd = fd_sprintf("%s %s 2>&1 >/dev/null </dev/null", test_bin(), args), *out = NULL;
    int rc = test_run(cmd, &out);
    int lines = 0;
    for (char *p = out; p && *p; p++) lines += *p == '\n';
    EXPECT(rc == 2 && out && !strncmp(out, "flashdelta: error: ", 19) && lines == 1 && strstr(out, needle),
           "'%s' (exit %d) printed: %s (wanted '%s')", args, rc, out ? out : "", needle);
    free(out);
    free(cmd);
}

static char *run_out(const char *args, int *rc) {
    char *cmd = fd_sprintf("%s %s 2>/dev/null </dev/null", test_bin(), args), *out = NULL;
    *rc = test_run(cmd, &out);
    free(cmd);
    return out;
}

// --top-p used to be told from --temperature by its third letter: `--top-p X` set the temperature. With top-p tiny
// only the most likely token is left, so sampling at temperature 1 must give the greedy ids.
TEST(cli_top_p_is_top_p) {
    int rc;
    char *a = fd_sprintf("generate %s --ids 1,2,3,4 -n 12", k_m);
    char *greedy = run_out(a, &rc);
    EXPECT(rc == 0 && greedy);
    char *b = fd_sprintf("generate %s --ids 1,2,3,4 -n 12 --top-p 0.000001 --temperature 1 --seed 3", k_m);
    char *nucleus = run_out(b, &rc);
    EXPECT(rc == 0 && greedy && nucleus && !strcmp(greedy, nucleus), "top-p 1e-6 gave '%s', greedy '%s'",
           nucleus ? nucleus : "", greedy ? greedy : "");
    free(a);
    free(b);
    free(greedy);
    free(nucleus);
    a = fd_sprintf("generate %s --ids 1 --temperature 1 --top-p 101", k_m);
    expect_usage_error(a, "--top-p: '101' is not in 0..1");
    free(a);
    a = fd_sprintf("generate %s --ids 1 --top-p 0.5", k_m); // alone it would be ignored: greedy
    expect_usage_error(a, "--temperature");
    free(a);
}

// An unknown option at the end of the line is unknown, not "needs a value".
TEST(cli_unknown_trailing_option) {
    char *a = fd_sprintf("generate %s --ids 1,2 --bogus", k_m);
    expect_usage_error(a, "unknown option '--bogus'");
    free(a);
    a = fd_sprintf("generate %s --ids", k_m);
    expect_usage_error(a, "--ids needs a value");
    free(a);
}

// Options a command cannot honour are refused, naming the command; they used to be ignored silently.
TEST(cli_inapplicable_options_refused) {
    const char *cases[][2] = {
        {"run --temperature 0.7 --seed 3", "run does not take --temperature"},
        {"run --seed 3", "run does not take --seed"},
        {"run tests/data/fixtures/qwen35_moe --ids 1,2 --draft tests/data/dflash/qwen35_moe_b16",
         "run does not take --draft"},
        {"info tests/data/fixtures/qwen35_moe --draft x", "info does not take --draft"},
        {"info tests/data/fixtures/qwen35_moe --ctx 5", "info does not take --ctx"},
        {"logits tests/data/fixtures/qwen35_moe --ids 1 --out /dev/null -n 3", "logits does not take -n"},
        {"bench --random-weights bench/configs/tiny.json --ids 1,2", "bench does not take --ids"},
        {"serve tests/data/fixtures/qwen35_moe --temperature 1", "serve does not take --temperature"},
        {"serve tests/data/fixtures/qwen35_moe -n 4", "serve does not take -n"},
        {"tokenize tests/data/server/tokenizer.json --ctx 4", "tokenize does not take --ctx"},
        {"chat tests/data/fixtures/qwen35_moe --ids 1,2", "chat does not take --ids"},
        {"generate tests/data/fixtures/qwen35_moe --ids 1 --block-size 4", "--draft"},
        {"generate tests/data/fixtures/qwen35_moe --ids 1 --json x", "generate does not take --json"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) expect_usage_error(cases[i][0], cases[i][1]);
}

// Every option `COMMAND --help` lists is taken (not refused as unknown or inapplicable), and every option of the
// table that it does not list is refused: the usage is exact.
TEST(cli_usage_lists_exactly_what_is_taken) {
    const char *cmds[] = {"run", "chat", "generate", "serve", "info", "logits", "draft-logits", "bench", "tokenize"};
    const char *all[] = {"--ids",
                         "-p",
                         "--out",
                         "-n",
                         "--system",
                         "--temperature",
                         "--top-k",
                         "--top-p",
                         "--seed",
                         "--draft",
                         "--block-size",
                         "--stats",
                         "--random-weights",
                         "--draft-random",
                         "--contexts",
                         "--oracle-tau",
                         "--json",
                         "--backend",
                         "--threads",
                         "--route",
                         "--gdn-prefill",
                         "--ctx",
                         "--kv-tokens",
                         "--prefill-chunk",
                         "--trace",
                         "--tokenizer",
                         "--model-name",
                         "--host",
                         "--port",
                         "--slots",
                         "--no-prefix-cache",
                         "--prefix-block",
                         "--skip-special",
                         "--repeat",
                         "-m"};
    for (size_t c = 0; c < sizeof cmds / sizeof cmds[0]; c++) {
        char *help = NULL, *cmd = fd_sprintf("%s %s --help", test_bin(), cmds[c]);
        EXPECT(test_run(cmd, &help) == 0 && help, "%s --help", cmds[c]);
        free(cmd);
        for (size_t o = 0; help && o < sizeof all / sizeof all[0]; o++) {
            // listed: the option appears in the help as "  NAME " or "  NAME," or ",NAME "
            char *l1 = fd_sprintf("\n  %s ", all[o]), *l2 = fd_sprintf("\n  %s,", all[o]),
                 *l3 = fd_sprintf(",%s ", all[o]);
            const int listed = strstr(help, l1) || strstr(help, l2) || strstr(help, l3);
            char *args = fd_sprintf("%s %s 1", cmds[c], all[o]), *out = NULL;
            cmd = fd_sprintf("%s %s 2>&1 >/dev/null </dev/null | head -n 1", test_bin(), args);
            test_run(cmd, &out);
            const int refused = out && (strstr(out, "does not take") || strstr(out, "unknown option"));
            EXPECT(listed != refused, "%s: %s listed %d refused %d (%s)", cmds[c], all[o], listed, refused,
                   out ? out : "");
            free(out);
            free(cmd);
            free(args);
            free(l1);
            free(l2);
            free(l3);
        }
        char *want = fd_sprintf("usage: flashdelta %s", cmds[c]);
        EXPECT(help && strstr(help, want), "%s", help ? help : "");
        free(want);
        free(help);
    }
}

// The names vLLM and llama.cpp users type: -m/--model, -c/--max-model-len, --served-model-name, --max-num-seqs/-np.
TEST(cli_vllm_llamacpp_aliases) {
    fixture fx;
    ASSERT(fixture_load("qwen35_moe", &fx) == 0, "%s", fd_error_msg());
    char *csv = test_ids_csv(fx.ids, 6);
    int rc;
    char *a = fd_sprintf("generate %s --ids %s -n 4 --ctx 64", fx.dir, csv);
    char *b = fd_sprintf("generate -m %s --ids %s -n 4 -c 64", fx.dir, csv);
    char *c = fd_sprintf("generate --model=%s --ids %s -n 4 --max-model-len 64", fx.dir, csv);
    char *oa = run_out(a, &rc), *ob = run_out(b, &rc), *oc = run_out(c, &rc);
    EXPECT(oa && ob && oc && !strcmp(oa, ob) && !strcmp(oa, oc), "'%s' '%s' '%s'", oa ? oa : "", ob ? ob : "",
           oc ? oc : "");
    free(oa), free(ob), free(oc), free(a), free(b), free(c);
    a = fd_sprintf("generate -m %s --ids %s -n 8 -c 6", fx.dir, csv); // -c is the context: 6 + 8 do not fit
    char *cmd = fd_sprintf("%s %s 2>&1", test_bin(), a), *out = NULL;
    EXPECT(test_run(cmd, &out) == 1 && out && strstr(out, "--ctx 6"), "%s", out ? out : "");
    free(out), free(cmd), free(a);
    // serve's aliases parse (a bad value names the alias as typed)
    expect_usage_error("serve -m tests/data/fixtures/qwen35_moe --max-num-seqs 0", "--max-num-seqs: '0'");
    expect_usage_error("serve -m tests/data/fixtures/qwen35_moe -np x", "-np: 'x'");
    expect_usage_error("serve -m a -m b", "once");
    free(csv);
    fixture_free(&fx);
}

TEST(cli_version) {
    char *cmd = fd_sprintf("%s --version", test_bin()), *out = NULL;
    EXPECT(test_run(cmd, &out) == 0 && out && !strncmp(out, "flashdelta ", 11) && strstr(out, "backends: cpu"), "%s",
           out ? out : "");
    free(out);
    free(cmd);
}
