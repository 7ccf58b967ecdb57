// Text in and out (issue 19): generate -p, run MODEL_DIR, info on a drafter, `chat` driven through a
// pseudo-terminal, progress on a terminal only, warnings, log lines that never share a line with text, and a
// build that records its settings.
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fixture.h"
#include "test.h"

static const char *k_tiny = "models/tiny-qwen35";

// ---- a pseudo-terminal rig ----

typedef struct {
    const char *expect; // wait until the output after the previous step's match contains this (NULL: no wait)
    const char *send;   // then write this (NULL: nothing)
    double delay;       // seconds to wait before sending
} pty_step;

typedef struct {
    char *buf;
    size_t len, cap;
} obuf;

// Appends without the '\r's of the terminal's line discipline.
static void obuf_add(obuf *o, const char *p, size_t n) {
    if (o->len + n + 1 > o->cap) o->buf = fd_realloc(o->buf, o->cap = 2 * (o->len + n + 1));
    for (size_t i = 0; i < n; i++)
        if (p[i] != '\r') o->buf[o->len++] = p[i];
    o->buf[o->len] = 0;
}

// Reads what is there within `timeout` seconds; 0 at end of output.
static int pump(int fd, obuf *o, double timeout) {
    struct pollfd pf = {fd, POLLIN, 0};
    if (poll(&pf, 1, (int)(timeout * 1000)) <= 0) return 1;
    char tmp[4096];
    ssize_t r = read(fd, tmp, sizeof tmp);
    if (r <= 0) return 0; // EIO: the child closed the terminal
    obuf_add(o, tmp, (size_t)r);
    return 1;
}

// Runs `flashdelta args` (a shell line) on a pseudo-terminal, plays the steps, reads to the end (bounded at 120 s)
// and returns the exit status; *out is everything the terminal showed (without '\r's).
static int pty_run(const char *args, const pty_step *steps, int n_steps, char **out) {
    int master;
    struct winsize ws = {24, 200, 0, 0};
    pid_t pid = forkpty(&master, NULL, NULL, &ws);
    ASSERT(pid >= 0, "forkpty: %s", strerror(errno));
    if (pid == 0) {
        char *cmd = fd_sprintf("exec %s %s", test_bin(), args);
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    obuf o = {0};
    obuf_add(&o, "", 0);
    size_t from = 0;
    const double t0 = fd_time_s();
    int open = 1;
    for (int s = 0; s < n_steps && open; s++) {
        if (steps[s].expect) {
            while (open && !strstr(o.buf + from, steps[s].expect) && fd_time_s() - t0 < 120)
                open = pump(master, &o, 0.2);
            char *at = strstr(o.buf + from, steps[s].expect);
            EXPECT(at, "step %d: '%s' never appeared; output:\n%s", s, steps[s].expect, o.buf);
            if (!at) {
                kill(pid, SIGKILL); // no point waiting for the rest
                break;
            }
            from = (size_t)(at - o.buf) + strlen(steps[s].expect);
        }
        const double until = fd_time_s() + steps[s].delay;
        while (open && fd_time_s() < until) open = pump(master, &o, until - fd_time_s());
        if (steps[s].send && write(master, steps[s].send, strlen(steps[s].send)) < 0) break;
    }
    while (open && fd_time_s() - t0 < 120) open = pump(master, &o, 0.5);
    int st = 0;
    if (open) kill(pid, SIGKILL);
    waitpid(pid, &st, 0);
    close(master);
    *out = o.buf;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static char *sh(const char *cmd, int *rc) {
    char *out = NULL;
    *rc = test_run(cmd, &out);
    return out;
}

// ---- text prompts ----

// generate -p TEXT prints the text of the ids `generate --ids` gives for the tokenized TEXT.
TEST(cli_generate_text_equals_ids_path) {
    int rc;
    const char *text = "def fibonacci(n):\n    if n < 2:\n";
    char *cmd = fd_sprintf("printf '%%s' '%s' | %s tokenize %s", text, test_bin(), k_tiny);
    char *ids = sh(cmd, &rc);
    ASSERT(rc == 0 && ids, "tokenize failed");
    free(cmd);
    for (char *p = ids; *p; p++)
        if (*p == ' ') *p = ',';
    ids[strcspn(ids, "\n")] = 0;
    const char *modes[] = {"", "--draft models/tiny-qwen35-dflash", "--temperature 0.8 --seed 5"};
    for (int m = 0; m < 3; m++) {
        cmd = fd_sprintf("%s generate %s --ids %s -n 24 %s 2>/dev/null | %s tokenize %s --decode", test_bin(), k_tiny,
                         ids, modes[m], test_bin(), k_tiny);
        char *want = sh(cmd, &rc);
        free(cmd);
        cmd = fd_sprintf("%s generate %s -p '%s' -n 24 %s 2>/dev/null", test_bin(), k_tiny, text, modes[m]);
        char *got = sh(cmd, &rc);
        EXPECT(rc == 0 && want && got && !strncmp(got, want, strlen(want)) && strlen(got) <= strlen(want) + 1,
               "%s: text '%s' != ids path '%s'", modes[m], got ? got : "", want ? want : "");
        free(cmd);
        free(got);
        // from stdin
        cmd = fd_sprintf("printf '%%s' '%s' | %s generate %s -p - -n 24 %s 2>/dev/null", text, test_bin(), k_tiny,
                         modes[m]);
        got = sh(cmd, &rc);
        EXPECT(rc == 0 && want && got && !strncmp(got, want, strlen(want)), "%s stdin: '%s'", modes[m], got ? got : "");
        free(cmd);
        free(got);
        free(want);
    }
    free(ids);
}

// run MODEL_DIR reads a text prompt (it used to demand --ids), and --ids prints the text as well as the ids.
TEST(cli_run_model_text_prompt) {
    int rc;
    char *cmd = fd_sprintf("printf 'import os\\n' | %s run %s -n 12 2>/dev/null", test_bin(), k_tiny);
    char *out = sh(cmd, &rc);
    EXPECT(rc == 0 && out && strstr(out, "decode: 12 tokens") && !strstr(out, "generated ids"), "%s", out ? out : "");
    free(out);
    free(cmd);
    cmd = fd_sprintf("%s run %s --ids 5,6,7 -n 5 2>/dev/null", test_bin(), k_tiny);
    out = sh(cmd, &rc);
    char *ids_line = out ? strstr(out, "generated ids:") : NULL;
    EXPECT(rc == 0 && ids_line && ids_line != out, "text before the ids: %s", out ? out : "");
    free(out);
    free(cmd);
}

// info on the bundled drafter used to fail with "unknown architecture 'qwen3'".
TEST(cli_info_drafter) {
    int rc;
    char *cmd = fd_sprintf("%s info models/tiny-qwen35-dflash 2>&1", test_bin());
    char *out = sh(cmd, &rc);
    EXPECT(rc == 0 && out && strstr(out, "DFlashDraftModel") && strstr(out, "block size: 8") &&
               strstr(out, "parameters: "),
           "%s", out ? out : "");
    free(out);
    free(cmd);
    cmd = fd_sprintf("%s info tests/data/dflash/qwen35_moe_d2_b16 2>&1", test_bin());
    out = sh(cmd, &rc);
    EXPECT(rc == 0 && out && strstr(out, "DFlash2DraftModel"), "%s", out ? out : "");
    free(out);
    free(cmd);
}

// ---- chat ----

// The first answer is what generate gives for the rendered ChatML prompt; a second turn reuses the conversation
// the engine holds; /stats, /reset and multi-line input work; /quit ends with status 0.
TEST(cli_chat_pty) {
    const pty_step steps[] = {
        {">>> ", "hello\n", 0},        {">>> ", "/stats\n", 0},     {"reused", NULL, 0},
        {">>> ", "what about\\\n", 0}, {"... ", "two lines?\n", 0}, {">>> ", "/stats\n", 0},
        {"session:", NULL, 0},         {">>> ", "/reset\n", 0},     {"(conversation cleared)", NULL, 0},
        {">>> ", "/quit\n", 0},
    };
    char *out = NULL, *args = fd_sprintf("chat %s -n 8", k_tiny);
    int rc = pty_run(args, steps, (int)(sizeof steps / sizeof steps[0]), &out);
    EXPECT(rc == 0, "chat exited %d:\n%s", rc, out);
    int src;
    char *cmd = fd_sprintf("printf '<|im_start|>user\\nhello<|im_end|>\\n<|im_start|>assistant\\n' | %s generate %s "
                           "-p - -n 8 2>/dev/null",
                           test_bin(), k_tiny);
    char *want = sh(cmd, &src);
    ASSERT(src == 0 && want);
    want[strcspn(want, "\n")] = 0; // the first line of the answer is enough to identify it
    char *first = strstr(out, "hello\n");
    EXPECT(first && *want && strstr(first, want), "answer '%s' not in:\n%s", want, out);
    // the second turn prefilled only its new tokens: the last answer's stats show a nonzero reuse
    char *st2 = strstr(out, "two lines?");
    st2 = st2 ? strstr(st2, "last answer:") : NULL;
    char *reused = st2 ? strstr(st2, "prefilled, ") : NULL;
    EXPECT(reused && atoi(reused + 11) > 0, "no reuse in the second turn:\n%s", st2 ? st2 : out);
    free(want);
    free(cmd);
    free(out);
    free(args);
}

// The prefix cache: after /reset the same question restores the system prompt's prefix from the cache (every
// turn leaves a state snapshot at the last block boundary of its prompt).
TEST(cli_chat_prefix_cache_after_reset) {
    const pty_step steps[] = {
        {">>> ", "hello\n", 0}, {">>> ", "/reset\n", 0}, {"(conversation cleared)", NULL, 0},
        {">>> ", "hello\n", 0}, {">>> ", "/stats\n", 0}, {"last answer:", NULL, 0},
        {">>> ", "/quit\n", 0},
    };
    char *out = NULL, *args = fd_sprintf("chat %s -n 4 --system 'You write short, correct Python functions with "
                                         "docstrings and type hints, and nothing else.'",
                                         k_tiny);
    int rc = pty_run(args, steps, (int)(sizeof steps / sizeof steps[0]), &out);
    EXPECT(rc == 0, "chat exited %d:\n%s", rc, out);
    char *st = strstr(out, "last answer:");
    char *c = st ? strstr(st, "reused (") : NULL;
    EXPECT(c && atoi(c + 8) >= 16, "the second 'hello' restored nothing from the cache:\n%s", st ? st : out);
    free(out);
    free(args);
}

// chat --tp 2 (the fixture's heads split at 2): the answers are the plain chat's, and after /reset the second
// 'hello' restores the system prompt's prefix from the cache, every rank from its own part.
static char *chat_answers(const char *out) { // the text between each "hello" and the next prompt
    char *all = fd_strdup("");
    for (const char *a = strstr(out, "hello\n"); a; a = strstr(a + 1, "hello\n")) {
        const char *b = strstr(a, ">>> ");
        char *more = fd_sprintf("%s[%.*s]", all, (int)(b ? b - a : (long)strlen(a)), a);
        free(all);
        all = more;
    }
    return all;
}
TEST(cli_chat_tp_prefix_cache) {
    const pty_step steps[] = {
        {">>> ", "hello\n", 0}, {">>> ", "/reset\n", 0}, {"(conversation cleared)", NULL, 0},
        {">>> ", "hello\n", 0}, {">>> ", "/stats\n", 0}, {"last answer:", NULL, 0},
        {">>> ", "/quit\n", 0},
    };
    char *got[2];
    for (int tp = 0; tp < 2; tp++) {
        char *out = NULL, *args = fd_sprintf("chat tests/data/fixtures/qwen35_dense_tied --tokenizer "
                                             "tests/data/server/tokenizer.json -n 6 --system 'You write short, correct "
                                             "Python functions with docstrings and type hints.'%s",
                                             tp ? " --tp 2" : "");
        int rc = pty_run(args, steps, (int)(sizeof steps / sizeof steps[0]), &out);
        EXPECT(rc == 0, "chat%s exited %d:\n%s", tp ? " --tp 2" : "", rc, out);
        const char *st = strstr(out, "last answer:"), *c = st ? strstr(st, "reused (") : NULL;
        EXPECT(c && atoi(c + 8) >= 16, "chat%s: the second 'hello' restored nothing:\n%s", tp ? " --tp 2" : "",
               st ? st : out);
        got[tp] = chat_answers(out);
        free(out);
        free(args);
    }
    EXPECT(strlen(got[0]) > 20 && !strcmp(got[0], got[1]), "chat --tp 2 answers otherwise:\n%s\n%s", got[0], got[1]);
    free(got[0]), free(got[1]);
}

// Ctrl-C ends the answer being generated, not the program (--ignore-eos: the answer runs until interrupted). The
// random-weight model's sampled text is full of control bytes; none may reach the terminal.
TEST(cli_chat_ctrl_c_stops_answer) {
    const pty_step steps[] = {
        {">>> ", "write a long story\n", 0},
        {"story\n", "\003", 1.0}, // Ctrl-C once the answer is under way
        {"(stopped)", NULL, 0},
        {">>> ", "/stats\n", 0},
        {"last answer:", "/quit\n", 0.2},
    };
    char *out = NULL, *args = fd_sprintf("chat tests/data/fixtures/qwen35_dense_tied --tokenizer "
                                         "tests/data/server/tokenizer.json -n 100000 --ignore-eos --temperature 1 "
                                         "--seed 1");
    const double t0 = fd_time_s();
    int rc = pty_run(args, steps, (int)(sizeof steps / sizeof steps[0]), &out);
    EXPECT(rc == 0 && fd_time_s() - t0 < 60, "chat exited %d after %.1f s:\n%s", rc, fd_time_s() - t0, out);
    const char *a = strstr(out, "story\n"), *b = a ? strstr(a, "(stopped)") : NULL;
    EXPECT(a && b && b - a > 100, "a short answer:\n%s", out);
    for (const char *p = a; a && b && p < b; p++) {
        const unsigned char c = (unsigned char)*p;
        if ((c < 0x20 && c != '\n' && c != '\t' && c != 3) || c == 0x7f) {
            EXPECT(0, "control byte 0x%02x in the answer at offset %td", c, p - a);
            break;
        }
    }
    free(out);
    free(args);
}

// ---- progress: on a terminal, never on a pipe ----

TEST(cli_progress_tty_only) {
    char csv[2400];
    size_t k = 0;
    for (int i = 0; i < 300; i++) k += (size_t)snprintf(csv + k, sizeof csv - k, "%s%d", i ? "," : "", 7 + i % 500);
    char *args = fd_sprintf("generate %s --ids %s -n 2 --prefill-chunk 16", k_tiny, csv), *out = NULL;
    const pty_step none[] = {{NULL, NULL, 0}};
    int rc = pty_run(args, none, 0, &out);
    EXPECT(rc == 0 && strstr(out, "flashdelta: loading ") && strstr(out, "prefill 16 / 300 tokens") &&
               strstr(out, "ETA") && strstr(out, "prefill 300 / 300 tokens"),
           "no progress on a terminal:\n%s", out);
    free(out);
    char *cmd = fd_sprintf("%s %s 2>&1 | cat", test_bin(), args);
    out = sh(cmd, &rc);
    EXPECT(rc == 0 && out && !strstr(out, "prefill 16 /") && !strstr(out, "loading") && !strstr(out, "\033"),
           "progress on a pipe:\n%s", out ? out : "");
    free(out);
    free(cmd);
    free(args);
}

// ---- warnings and log lines ----

TEST(cli_warns_past_max_position_embeddings) {
    int rc; // the fixture's max_position_embeddings is 4096
    char *cmd = fd_sprintf("%s generate tests/data/fixtures/qwen35_moe --ids 1,2 -n 1 --ctx 5000 2>&1", test_bin());
    char *out = sh(cmd, &rc);
    EXPECT(rc == 0 && out &&
               strstr(out, "flashdelta: warning: --ctx 5000 exceeds the model's "
                           "max_position_embeddings 4096"),
           "%s", out ? out : "");
    free(out);
    free(cmd);
    char *csv = fd_malloc(4096 * 2 + 1);
    for (int i = 0; i < 4096; i++) csv[2 * i] = '7', csv[2 * i + 1] = ','; // 4096 ids, then 1 new: 4097
    csv[4096 * 2 - 1] = 0;
    cmd = fd_sprintf("%s generate tests/data/fixtures/qwen35_moe --ids %s -n 1 2>&1 >/dev/null", test_bin(), csv);
    free(csv);
    out = sh(cmd, &rc);
    EXPECT(rc == 0 && out && strstr(out, "4097 tokens (prompt + new) exceed"), "%s", out ? out : "");
    free(out);
    free(cmd);
}

// With stdout and stderr on one pipe every log line starts a line of its own (the demo's streamed text and the
// second session's log lines used to share one).
TEST(cli_log_lines_never_share_a_line) {
    int rc;
    char *cmd = fd_sprintf("%s run -n 40 2>&1", test_bin());
    char *out = sh(cmd, &rc);
    EXPECT(rc == 0 && out);
    for (char *p = out; p && (p = strstr(p, "flashdelta: ")); p++)
        EXPECT(p == out || p[-1] == '\n', "a log line in mid-line: ...%.60s", p > out + 40 ? p - 40 : out);
    free(out);
    free(cmd);
}

// ---- serve: --route, --trace, the default context, a long prefill logged, a busy port ----

TEST(cli_serve_route_trace_busy_port) {
    int rc;
    char *cmd = fd_sprintf(
        "d=$(mktemp -d); %s serve tests/data/fixtures/qwen35_dense_tied --tokenizer tests/data/server/tokenizer.json "
        "--port 0 --port-file $d/port --route kv=e4m3 --trace $d/t.json --max-num-seqs 2 -b 16 >$d/log 2>&1 & p=$!; "
        "for i in $(seq 300); do [ -s $d/port ] && break; sleep 0.1; done; "
        "curl -s -o /dev/null -d \"{\\\"model\\\": \\\"qwen35_dense_tied\\\", \\\"max_tokens\\\": 1, \\\"prompt\\\": "
        "\\\"$(printf 'hello world %%.0s' $(seq 150))\\\"}\" http://127.0.0.1:$(cat $d/port)/v1/completions; "
        "%s serve tests/data/fixtures/qwen35_dense_tied --tokenizer tests/data/server/tokenizer.json --port $(cat "
        "$d/port) >$d/log2 2>&1; echo \"second=$?\"; kill -TERM $p; wait $p; echo \"first=$?\"; cat $d/log; "
        "echo ----; cat $d/log2; test -s $d/t.json && echo TRACE_WRITTEN; rm -rf $d",
        test_bin(), test_bin());
    char *out = NULL;
    rc = test_run(cmd, &out);
    ASSERT(out && rc == 0);
    EXPECT(strstr(out, "first=0") && strstr(out, "kv=e4m3") && strstr(out, "TRACE_WRITTEN") &&
               strstr(out, "context 4096 tokens per sequence: the model's max_position_embeddings 4096") &&
               strstr(out, " tokens in ") && strstr(out, "flashdelta: prefill "),
           "%s", out);
    const char *sep = strstr(out, "----\n");
    const size_t at = sep ? (size_t)(sep - out) + 5 : strlen(out);
    EXPECT(strstr(out, "second=1") && sep && strstr(out + at, "Address already in use") &&
               strstr(out + at, "flashdelta: http: ") && !strstr(out, "is not the first option"),
           "%s", out);
    for (size_t l = at; out[l]; l += strcspn(out + l, "\n") + (out[l + strcspn(out + l, "\n")] != 0))
        if (out[l] != '\n' && strncmp(out + l, "TRACE", 5))
            EXPECT(!strncmp(out + l, "flashdelta: ", 12), "unprefixed log line: %.80s", out + l);
    free(out);
    free(cmd);
}

// ---- the build records its settings ----

// A build with other settings (CUDA on/off, flags) rebuilds every object; the same settings rebuild nothing.
TEST(cli_build_records_settings) {
    char dir[] = "/tmp/fd_buildXXXXXX";
    ASSERT(mkdtemp(dir));
    int rc;
    const char *env = "env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make -s -C " FD_SOURCE_DIR;
    char *cmd = fd_sprintf("%s BUILD=%s CUDA=0 OPT=-O0 %s/src/base/base.o >/dev/null 2>&1", env, dir, dir);
    char *out = sh(cmd, &rc);
    ASSERT(rc == 0, "building one object failed");
    free(out);
    free(cmd);
    const char *same = "CUDA=0 OPT=-O0", *other[] = {"CUDA=0 OPT=-O1", "CUDA=1 OPT=-O0 NVCC=/bin/true"};
    cmd = fd_sprintf("%s BUILD=%s %s -q %s/src/base/base.o", env, dir, same, dir);
    out = sh(cmd, &rc);
    EXPECT(rc == 0, "same settings: not up to date");
    free(out);
    free(cmd);
    for (int i = 0; i < 2; i++) {
        cmd = fd_sprintf("%s BUILD=%s %s -q %s/src/base/base.o", env, dir, other[i], dir);
        out = sh(cmd, &rc);
        EXPECT(rc == 1, "%s: the object counts as up to date (make -q %d)", other[i], rc);
        free(out);
        free(cmd);
    }
    cmd = fd_sprintf("%s BUILD=%s %s -q %s/src/base/base.o", env, dir, same, dir); // -q wrote nothing
    out = sh(cmd, &rc);
    EXPECT(rc == 0, "make -q changed the recorded settings");
    free(out);
    free(cmd);
    // a plain `make` still builds the binary (the settings rule once became the default goal)
    cmd = fd_sprintf("%s BUILD=%s %s -n", env, dir, same);
    out = sh(cmd, &rc);
    char *want = fd_sprintf("-o %s/flashdelta", dir);
    EXPECT(rc == 0 && out && strstr(out, want), "make's default goal does not build flashdelta:\n%s", out ? out : "");
    free(want);
    free(out);
    free(cmd);
    cmd = fd_sprintf("rm -rf %s", dir);
    test_run(cmd, NULL);
    free(cmd);
}

// chat renders with the model's own template when the directory has one (chat_template.jinja here; a template
// whose raise_exception names itself proves which one ran), as serve does.
TEST(cli_chat_uses_the_models_template) {
    char tmpl[] = "/tmp/fd_chattplXXXXXX";
    ASSERT(mkdtemp(tmpl), "mkdtemp");
    char *abs = realpath(k_tiny, NULL);
    ASSERT(abs, "realpath %s", k_tiny);
    const char *files[] = {"config.json", "generation_config.json", "model.safetensors", "tokenizer.json"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char *src = fd_sprintf("%s/%s", abs, files[i]), *dst = fd_sprintf("%s/%s", tmpl, files[i]);
        EXPECT(symlink(src, dst) == 0, "symlink %s", dst);
        free(src);
        free(dst);
    }
    char *jp = fd_sprintf("%s/chat_template.jinja", tmpl);
    FILE *f = fopen(jp, "w");
    ASSERT(f, "%s", jp);
    fputs("{{ raise_exception('the model template ran') }}", f);
    fclose(f);
    const pty_step steps[] = {{">>> ", "hello\n", 0}, {"the model template ran", NULL, 0}, {">>> ", "/quit\n", 0}};
    char *out = NULL, *args = fd_sprintf("chat %s -n 4", tmpl);
    int rc = pty_run(args, steps, (int)(sizeof steps / sizeof steps[0]), &out);
    EXPECT(rc == 0 && out && strstr(out, "the model template ran"), "chat exited %d:\n%s", rc, out ? out : "");
    free(out);
    free(args);
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char *dst = fd_sprintf("%s/%s", tmpl, files[i]);
        unlink(dst);
        free(dst);
    }
    unlink(jp);
    free(jp);
    rmdir(tmpl);
    free(abs);
}
