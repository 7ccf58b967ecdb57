// Chat template vs the Qwen3 Jinja template (expected strings rendered from tokenizer_config.json's chat_template
// with transformers' Jinja settings by tools/tokenizer_golden.py chat-write), and eos ids from the config files.
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/chat_template.h"
#include "test.h"
#include "test_tokenizer.h"

TEST(chat_template_qwen3_cases) {
    json_error_t e;
    json_t *cases = json_load_file(FD_TEST_SOURCE_DIR "/tests/data/tokenizer/chat_cases.json", 0, &e);
    ASSERT(json_is_array(cases), "chat_cases.json: %s", e.text);
    EXPECT(json_array_size(cases) >= 10);
    for (size_t i = 0; i < json_array_size(cases); i++) {
        json_t *c = json_array_get(cases, i), *msgs = json_object_get(c, "messages");
        int n = (int)json_array_size(msgs);
        chat_msg *m = fd_calloc((size_t)n, sizeof *m);
        for (int k = 0; k < n; k++) {
            json_t *jm = json_array_get(msgs, (size_t)k);
            m[k].role = json_string_value(json_object_get(jm, "role"));
            m[k].content = json_string_value(json_object_get(jm, "content"));
            m[k].reasoning_content = json_string_value(json_object_get(jm, "reasoning_content"));
        }
        json_t *th = json_object_get(c, "enable_thinking");
        int think = json_is_null(th) ? CHAT_THINKING_DEFAULT : json_is_true(th) ? CHAT_THINKING_ON : CHAT_THINKING_OFF;
        char *got = chat_render_qwen3(m, n, json_is_true(json_object_get(c, "add_generation_prompt")), think);
        const char *want = json_string_value(json_object_get(c, "expected"));
        EXPECT(got && !strcmp(got, want), "case %s:\n got: %s\nwant: %s", json_string_value(json_object_get(c, "name")),
               got ? got : fd_error_msg(), want);
        free(got);
        free(m);
    }
    json_decref(cases);
}

TEST(chat_template_bad_input) {
    chat_msg m[] = {{"user", "hi", NULL}, {"developer", "x", NULL}};
    EXPECT(chat_render_qwen3(m, 2, 1, CHAT_THINKING_DEFAULT) == NULL && strstr(fd_error_msg(), "role \"developer\""));
    EXPECT(chat_render_qwen3(m, 0, 1, CHAT_THINKING_DEFAULT) == NULL && strstr(fd_error_msg(), "no messages"));
    chat_msg null_content[] = {{"user", NULL, NULL}};
    char *s = chat_render_qwen3(null_content, 1, 0, CHAT_THINKING_DEFAULT);
    EXPECT(s && !strcmp(s, "<|im_start|>user\n<|im_end|>\n"));
    free(s);
}

static void write_file(const char *dir, const char *name, const char *text) {
    char *p = fd_path_join(dir, name);
    FILE *f = fopen(p, "w");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
    free(p);
}

TEST(chat_eos_ids_from_configs) {
    tok_tokenizer *t = test_tok_qwen3();
    if (!t) return;
    char dir[] = "/tmp/fd_eos_XXXXXX";
    ASSERT(mkdtemp(dir));
    int32_t ids[8];
    EXPECT(chat_eos_ids(dir, t, ids, 8) == 0, "no config files: no eos ids");
    write_file(dir, "tokenizer_config.json", "{\"eos_token\": \"<|im_end|>\"}");
    EXPECT(chat_eos_ids(dir, t, ids, 8) == 1 && ids[0] == 151645);
    write_file(dir, "generation_config.json", "{\"eos_token_id\": [151645, 151643]}");
    int n = chat_eos_ids(dir, t, ids, 8);
    EXPECT(n == 2 && ids[0] == 151645 && ids[1] == 151643, "n=%d", n);
    write_file(dir, "generation_config.json", "{\"eos_token_id\": 151643}");
    write_file(dir, "tokenizer_config.json", "{\"eos_token\": {\"content\": \"<|im_end|>\"}}");
    n = chat_eos_ids(dir, t, ids, 8);
    EXPECT(n == 2 && ids[0] == 151643 && ids[1] == 151645, "n=%d", n);
    write_file(dir, "generation_config.json", "{\"eos_token_id\": 99999999}");
    EXPECT(chat_eos_ids(dir, t, ids, 8) == -1 && strstr(fd_error_msg(), "not a token id"));
    write_file(dir, "generation_config.json", "{");
    EXPECT(chat_eos_ids(dir, t, ids, 8) == -1 && strstr(fd_error_msg(), "generation_config.json"));
    write_file(dir, "generation_config.json", "{}");
    write_file(dir, "tokenizer_config.json", "{\"eos_token\": \"<nope>\"}");
    EXPECT(chat_eos_ids(dir, t, ids, 8) == -1 && strstr(fd_error_msg(), "\"<nope>\" is not in the vocabulary"));
    // The rendered template tokenizes into the ChatML special ids.
    chat_msg m[] = {{"user", "Hi", NULL}};
    char *s = chat_render_qwen3(m, 1, 1, CHAT_THINKING_OFF);
    tok_ids v = {0};
    ASSERT(s && tok_encode(t, s, strlen(s), &v) == 0);
    EXPECT(v.n > 4 && v.ids[0] == 151644 && v.ids[v.n - 1] != 151645);
    EXPECT(tok_token_id(t, "<think>") >= 0 && tok_token_id(t, "<|im_start|>") == 151644);
    free(s);
    tok_ids_free(&v);
    char *cmd = fd_sprintf("rm -rf %s", dir);
    test_run(cmd, NULL);
    free(cmd);
    tok_free(t);
}

// The built-in template (Qwen3's, rendered by the Jinja interpreter) gives what chat_render_qwen3 gives, which
// chat_cases.json checks against transformers.
TEST(chat_template_builtin_matches_qwen3_cases) {
    json_error_t e;
    json_t *cases = json_load_file(FD_TEST_SOURCE_DIR "/tests/data/tokenizer/chat_cases.json", 0, &e);
    ASSERT(json_is_array(cases), "chat_cases.json: %s", e.text);
    chat_template *t = chat_template_builtin();
    ASSERT(t, "%s", fd_error_msg());
    for (size_t i = 0; i < json_array_size(cases); i++) {
        json_t *c = json_array_get(cases, i), *th = json_object_get(c, "enable_thinking");
        json_t *kw = json_object();
        if (json_is_boolean(th)) json_object_set(kw, "enable_thinking", th);
        char *got = chat_template_apply(t, json_object_get(c, "messages"), NULL, NULL, kw,
                                        json_is_true(json_object_get(c, "add_generation_prompt")));
        const char *want = json_string_value(json_object_get(c, "expected"));
        EXPECT(got && !strcmp(got, want), "case %s:\n got: %s\nwant: %s", json_string_value(json_object_get(c, "name")),
               got ? got : fd_error_msg(), want);
        free(got);
        json_decref(kw);
    }
    chat_template_free(t);
    json_decref(cases);
}

TEST(chat_template_load_from_model_dir) {
    char dir[] = "/tmp/fd_tpl_XXXXXX";
    ASSERT(mkdtemp(dir));
    int found = -1;
    EXPECT(chat_template_load(dir, NULL, &found) == NULL && found == 0, "no template: the built-in is used");
    write_file(dir, "tokenizer_config.json",
               "{\"bos_token\": {\"content\": \"<s>\"}, \"chat_template\": [{\"name\": \"tool_use\", \"template\": \"T\"},"
               " {\"name\": \"default\", \"template\": \"{{ bos_token }}{% for m in messages %}{{ m.content }}"
               "{% endfor %}\"}]}");
    chat_template *t = chat_template_load(dir, NULL, &found);
    ASSERT(t && found == 1, "%s", fd_error_msg());
    json_t *msgs = json_loads("[{\"role\": \"user\", \"content\": \"hi\"}]", 0, NULL);
    char *s = chat_template_apply(t, msgs, NULL, NULL, NULL, 1);
    EXPECT(s && !strcmp(s, "<s>hi"), "%s", s ? s : fd_error_msg());
    free(s);
    chat_template_free(t);
    write_file(dir, "chat_template.jinja", "J{{ messages|length }}{{ x }}\n"); // preferred over the config's
    t = chat_template_load(dir, NULL, &found);
    json_t *kw = json_loads("{\"x\": \"!\"}", 0, NULL);
    s = t ? chat_template_apply(t, msgs, NULL, NULL, kw, 1) : NULL;
    EXPECT(s && !strcmp(s, "J1!"), "%s", s ? s : fd_error_msg());
    free(s);
    chat_template_free(t);
    char *p = fd_path_join(dir, "chat_template.jinja");
    write_file(dir, "override.jinja", "{% if %}");
    char *bad = fd_path_join(dir, "override.jinja");
    EXPECT(chat_template_load(dir, bad, &found) == NULL && found == 1 && strstr(fd_error_msg(), "override.jinja"),
           "%s", fd_error_msg());
    write_file(dir, "override.jinja", "{{ raise_exception('no ' ~ messages[0].role) }}");
    t = chat_template_load(dir, bad, &found);
    s = t ? chat_template_apply(t, msgs, NULL, NULL, NULL, 1) : NULL;
    EXPECT(!s && strstr(fd_error_msg(), "raise_exception: no user"), "%s", fd_error_msg());
    chat_template_free(t);
    unlink(bad);
    unlink(p);
    free(bad);
    free(p);
    char *cfg = fd_path_join(dir, "tokenizer_config.json");
    unlink(cfg);
    free(cfg);
    rmdir(dir);
    json_decref(msgs);
    json_decref(kw);
}
