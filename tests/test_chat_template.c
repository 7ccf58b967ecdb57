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
