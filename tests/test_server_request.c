// The request parser and validator (src/server/request.c), table-driven: every bad-input class gets the right status,
// the offending `param` and a message that says what is wrong; good requests parse to the right fields.
#include <stdlib.h>
#include <string.h>

#include "server/request.h"
#include "test.h"

typedef struct {
    srv_kind kind;
    const char *body;
    int status;         // 0 = must parse
    const char *param;  // expected param (NULL: none / not checked for good requests)
    const char *msg;    // substring of the message
} req_case;

static const req_case k_cases[] = {
    // malformed bodies
    {SRV_COMPLETION, "", 400, NULL, "empty"},
    {SRV_COMPLETION, "{", 400, NULL, "Invalid JSON"},
    {SRV_COMPLETION, "{\"prompt\": \"a\",}", 400, NULL, "Invalid JSON"},
    {SRV_COMPLETION, "[1,2]", 400, NULL, "must be a JSON object"},
    {SRV_COMPLETION, "\"text\"", 400, NULL, "must be a JSON object"},
    {SRV_COMPLETION, "{\"prompt\": \"a\"} trailing", 400, NULL, "Invalid JSON"},
    {SRV_COMPLETION, "{\"prompt\": \"a\", \"prompt\": \"b\"}", 400, NULL, "duplicate"},
    {SRV_COMPLETION, "{\"prompt\": \"\xff\xfe\"}", 400, NULL, "not valid UTF-8"},
    {SRV_COMPLETION, "{\"prompt\": \"\xc3\"}", 400, NULL, "not valid UTF-8"},
    {SRV_COMPLETION, "{\"prompt\": \"\xed\xa0\x80\"}", 400, NULL, "not valid UTF-8"}, // a UTF-16 surrogate
    {SRV_COMPLETION, "{\"prompt\": \"a\\u0000b\"}", 400, "prompt", "NUL"},
    // unknown and unsupported fields
    {SRV_COMPLETION, "{\"prompt\": \"a\", \"bogus\": 1}", 400, "bogus", "Unrecognized request argument"},
    {SRV_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}], \"prompt\": \"x\"}", 400, "prompt",
     "Unrecognized"},
    {SRV_COMPLETION, "{\"prompt\": \"a\", \"messages\": []}", 400, "messages", "Unrecognized"},
    {SRV_COMPLETION, "{\"prompt\": \"a\", \"n\": 17}", 400, "n", "must be in [1, 16]"},
    {SRV_COMPLETION, "{\"prompt\": \"a\", \"n\": 2, \"stream\": true}", 0, NULL, NULL},
    {SRV_COMPLETION, "{\"prompt\": \"a\", \"logprobs\": 6}", 400, "logprobs", "must be in [0, 5]"},
    {SRV_COMPLETION, "{\"prompt\": \"a\", \"presence_penalty\": 2.5}", 400, "presence_penalty", "must be in [-2, 2]"},
    {SRV_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}], \"logprobs\": 2}", 400, "logprobs",
     "must be a boolean"},
    {SRV_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}], \"top_logprobs\": 3}", 400,
     "top_logprobs", "needs 'logprobs'"},
    {SRV_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}], \"logprobs\": true, \"top_logprobs\": 21}",
     400, "top_logprobs", "must be in [0, 20]"},
    {SRV_COMPLETION, "{\"prompt\": \"a\", \"logit_bias\": {\"x\": 1}}", 400, "logit_bias", "must be token ids"},
    {SRV_COMPLETION, "{\"prompt\": \"a\", \"logit_bias\": {\"5\": 101}}", 400, "logit_bias values", "must be in"},
    {SRV_COMPLETION, "{\"prompt\": \"a\", \"min_p\": 1.5}", 400, "min_p", "must be in [0, 1]"},
    {SRV_COMPLETION, "{\"prompt\": \"a\", \"repetition_penalty\": 0}", 400, "repetition_penalty", "must be in"},
    {SRV_COMPLETION, "{\"prompt\": \"a\", \"logprobs\": 2, \"presence_penalty\": 0.5, \"frequency_penalty\": -1, "
     "\"repetition_penalty\": 1.1, \"min_p\": 0.05, \"logit_bias\": {\"5\": -100, \"7\": 3.5}}", 0, NULL, NULL},
    {SRV_COMPLETION, "{\"prompt\": \"a\", \"echo\": true, \"logprobs\": 1}", 400, "echo", "not supported"},
    {SRV_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}], \"echo\": true}", 400, "echo",
     "Unrecognized"},
    {SRV_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}], \"tools\": [{}]}", 400, "tools",
     "must be {\"type\": \"function\""},
    {SRV_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}], \"tool_choice\": \"required\"}", 400,
     "tool_choice", "needs 'tools'"},
    {SRV_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}], \"tools\": [{\"type\": \"function\", "
     "\"function\": {\"name\": \"f\"}}], \"tool_choice\": {\"type\": \"function\", \"function\": {\"name\": \"g\"}}}",
     400, "tool_choice", "not in 'tools'"},
    {SRV_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}], \"tool_choice\": \"sometimes\"}", 400,
     "tool_choice", "must be"},
    {SRV_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"a\", \"tool_calls\": []}]}", 400, "messages[0]",
     "only for assistant"},
    {SRV_CHAT, "{\"messages\": [{\"role\": \"assistant\", \"content\": null, \"tool_calls\": [{\"function\": {}}]}]}",
     400, "messages[0]", "tool_calls[0]"},
    {SRV_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"a\", \"extra\": 1}]}", 400, "messages[0]",
     "unsupported field"},
    // wrong types
    {SRV_COMPLETION, "{\"prompt\": 5}", 400, "prompt", "must be a string or an array"},
    {SRV_COMPLETION, "{\"prompt\": \"a\", \"max_tokens\": \"5\"}", 400, "max_tokens", "must be an integer"},
    {SRV_COMPLETION, "{\"prompt\": \"a\", \"max_tokens\": 5.5}", 400, "max_tokens", "must be an integer"},
    {SRV_COMPLETION, "{\"prompt\": \"a\", \"temperature\": \"hot\"}", 400, "temperature", "must be a number"},
    {SRV_COMPLETION, "{\"prompt\": \"a\", \"stream\": 1}", 400, "stream", "must be a boolean"},
    {SRV_COMPLETION, "{\"prompt\": \"a\", \"stop\": 7}", 400, "stop", "string or an array"},
    {SRV_COMPLETION, "{\"prompt\": \"a\", \"stop\": [\"a\", 1]}", 400, "stop", "must be strings"},
    {SRV_COMPLETION, "{\"prompt\": \"a\", \"model\": 3}", 400, "model", "must be a string"},
    {SRV_COMPLETION, "{\"prompt\": \"a\", \"seed\": \"x\"}", 400, "seed", "must be an integer"},
    {SRV_CHAT, "{\"messages\": {}}", 400, "messages", "must be an array"},
    {SRV_CHAT, "{\"messages\": [5]}", 400, "messages[0]", "must be an object"},
    {SRV_CHAT, "{\"messages\": [{\"role\": 1, \"content\": \"a\"}]}", 400, "messages[0]", "role' must be a string"},
    {SRV_CHAT, "{\"messages\": [{\"role\": \"wizard\", \"content\": \"a\"}]}", 400, "messages[0]", "must be system"},
    {SRV_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": 5}]}", 400, "messages[0].content",
     "must be a string or an array"},
    {SRV_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"image_url\"}]}]}", 400,
     "messages[0].content", "only text"},
    {SRV_CHAT, "{\"messages\": [{\"role\": \"user\"}]}", 400, "messages[0]", "content' is required"},
    {SRV_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}], \"chat_template_kwargs\": 5}",
     400, "chat_template_kwargs", "must be an object"},
    {SRV_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}], \"chat_template_kwargs\": "
     "{\"enable_thinking\": 1}}", 400, "chat_template_kwargs.enable_thinking", "must be a boolean"},
    {SRV_COMPLETION, "{\"prompt\": \"a\", \"stream_options\": {\"include_usage\": true}}", 400, "stream_options",
     "needs 'stream': true"},
    {SRV_COMPLETION, "{\"prompt\": \"a\", \"stream\": true, \"stream_options\": {\"x\": true}}", 400,
     "stream_options", "unsupported field"},
    // missing / empty
    {SRV_COMPLETION, "{}", 400, "prompt", "is required"},
    {SRV_CHAT, "{\"model\": \"m\"}", 400, "messages", "is required"},
    {SRV_COMPLETION, "{\"prompt\": \"\"}", 400, "prompt", "must not be empty"},
    {SRV_COMPLETION, "{\"prompt\": []}", 400, "prompt", "must not be empty"},
    {SRV_COMPLETION, "{\"prompt\": [\"a\", \"b\"]}", 400, "prompt", "only one prompt"},
    {SRV_COMPLETION, "{\"prompt\": [1, -2]}", 400, "prompt", "not a token id"},
    {SRV_COMPLETION, "{\"prompt\": [1, 2.5]}", 400, "prompt", "not a token id"},
    {SRV_COMPLETION, "{\"prompt\": [1, 4294967296]}", 400, "prompt", "not a token id"},
    {SRV_CHAT, "{\"messages\": []}", 400, "messages", "must not be empty"},
    {SRV_COMPLETION, "{\"prompt\": \"a\", \"stop\": [\"\"]}", 400, "stop", "must not be empty"},
    {SRV_COMPLETION, "{\"prompt\": \"a\", \"stop\": [\"a\",\"b\",\"c\",\"d\",\"e\"]}", 400, "stop", "at most 4"},
    // ranges
    {SRV_COMPLETION, "{\"prompt\": \"a\", \"max_tokens\": 0}", 400, "max_tokens", "at least 1"},
    {SRV_COMPLETION, "{\"prompt\": \"a\", \"max_tokens\": -3}", 400, "max_tokens", "at least 1"},
    {SRV_COMPLETION, "{\"prompt\": \"a\", \"max_tokens\": 99999999999}", 400, "max_tokens", "must be in"},
    {SRV_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}], \"max_completion_tokens\": 0}", 400,
     "max_completion_tokens", "at least 1"},
    {SRV_COMPLETION, "{\"prompt\": \"a\", \"temperature\": 2.5}", 400, "temperature", "must be in"},
    {SRV_COMPLETION, "{\"prompt\": \"a\", \"temperature\": -1}", 400, "temperature", "must be in"},
    {SRV_COMPLETION, "{\"prompt\": \"a\", \"top_p\": 0}", 400, "top_p", "(0, 1]"},
    {SRV_COMPLETION, "{\"prompt\": \"a\", \"top_p\": 1.5}", 400, "top_p", "must be in"},
    {SRV_COMPLETION, "{\"prompt\": \"a\", \"top_k\": -5}", 400, "top_k", "must be in"},
    // good requests
    {SRV_COMPLETION, "{\"prompt\": \"hello\"}", 0, NULL, NULL},
    {SRV_COMPLETION, "{\"prompt\": [\"hello\"], \"max_tokens\": null, \"n\": 1, \"user\": \"u\"}", 0, NULL, NULL},
    {SRV_COMPLETION, "{\"prompt\": [[1, 2, 3]]}", 0, NULL, NULL},
    {SRV_COMPLETION,
     "{\"model\": \"m\", \"prompt\": [5, 6], \"max_tokens\": 7, \"temperature\": 0, \"top_p\": 0.5, \"top_k\": 3, "
     "\"seed\": 42, \"stop\": [\"x\", \"yz\"], \"stream\": true, \"stream_options\": {\"include_usage\": true}, "
     "\"frequency_penalty\": 0, \"presence_penalty\": 0.0, \"logprobs\": null, \"echo\": false, \"best_of\": 1}",
     0, NULL, NULL},
    {SRV_CHAT,
     "{\"messages\": [{\"role\": \"system\", \"content\": \"s\"}, {\"role\": \"developer\", \"content\": \"d\"}, "
     "{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"a\"}, {\"type\": \"text\", \"text\": "
     "\"b\"}]}, {\"role\": \"assistant\", \"content\": null, \"reasoning_content\": \"r\"}, {\"role\": \"user\", "
     "\"content\": \"q\", \"name\": \"n\"}], \"max_completion_tokens\": 9, \"stop\": \"s\", "
     "\"chat_template_kwargs\": {\"enable_thinking\": false}, \"response_format\": {\"type\": \"text\"}, "
     "\"tool_choice\": \"none\", \"tools\": []}",
     0, NULL, NULL},
    {SRV_CHAT,
     "{\"messages\": [{\"role\": \"user\", \"content\": \"w?\"}, {\"role\": \"assistant\", \"content\": null, "
     "\"tool_calls\": [{\"id\": \"c1\", \"type\": \"function\", \"function\": {\"name\": \"f\", \"arguments\": "
     "\"{\\\"x\\\": 1}\"}}]}, {\"role\": \"tool\", \"tool_call_id\": \"c1\", \"content\": \"r\"}], \"tools\": "
     "[{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": {\"type\": \"object\"}}}], "
     "\"tool_choice\": {\"type\": \"function\", \"function\": {\"name\": \"f\"}}, \"parallel_tool_calls\": true, "
     "\"chat_template_kwargs\": {\"custom\": [1], \"enable_thinking\": true}}",
     0, NULL, NULL},
};

TEST(server_request_table) {
    const int n = (int)(sizeof k_cases / sizeof k_cases[0]);
    int bad = 0;
    for (int i = 0; i < n; i++) {
        const req_case *c = &k_cases[i];
        srv_req r;
        srv_err e;
        memset(&e, 0, sizeof e);
        int rc = srv_req_parse(c->body, strlen(c->body), c->kind, &r, &e);
        if (c->status == 0) {
            EXPECT(rc == 0, "case %d %s: %s", i, c->body, e.message);
            if (rc == 0) srv_req_free(&r);
            else bad++;
            continue;
        }
        EXPECT(rc == -1 && e.status == c->status, "case %d %s: rc %d status %d", i, c->body, rc, e.status);
        EXPECT(!c->param || !strcmp(e.param, c->param), "case %d %s: param '%s', want '%s'", i, c->body, e.param,
               c->param);
        EXPECT(!c->msg || strstr(e.message, c->msg), "case %d %s: message '%s' lacks '%s'", i, c->body, e.message,
               c->msg);
        if (rc == 0) srv_req_free(&r);
        // the error body is OpenAI's shape
        char *j = srv_err_json(&e);
        EXPECT(strstr(j, "{\"error\":{\"message\":") == j && strstr(j, "\"type\":\"invalid_request_error\""), "%s",
               j);
        free(j);
    }
    printf("    %d request cases\n", n);
    EXPECT(bad == 0);
}

TEST(server_request_fields) {
    srv_req r;
    srv_err e;
    const char *b = "{\"model\": \"m\", \"prompt\": [5, 6], \"max_tokens\": 7, \"temperature\": 0, \"top_p\": 0.5, "
                    "\"top_k\": 3, \"seed\": 42, \"stop\": [\"x\", \"yz\"], \"stream\": true, \"stream_options\": "
                    "{\"include_usage\": true}}";
    ASSERT(srv_req_parse(b, strlen(b), SRV_COMPLETION, &r, &e) == 0, "%s", e.message);
    EXPECT(r.kind == SRV_COMPLETION && !strcmp(r.model, "m") && !r.prompt_text);
    EXPECT(r.n_prompt_ids == 2 && r.prompt_ids[0] == 5 && r.prompt_ids[1] == 6);
    EXPECT(r.max_tokens == 7 && r.temperature == 0 && r.top_p == 0.5 && r.top_k == 3);
    EXPECT(r.has_seed && r.seed == 42 && r.stream && r.include_usage);
    EXPECT(r.n_stop == 2 && !strcmp(r.stop[0], "x") && !strcmp(r.stop[1], "yz"));
    srv_req_free(&r);
    // defaults: OpenAI's temperature 1, no max_tokens, no stop
    b = "{\"prompt\": \"hi\"}";
    ASSERT(srv_req_parse(b, strlen(b), SRV_COMPLETION, &r, &e) == 0);
    EXPECT(r.temperature == 1 && r.top_p == 1 && r.top_k == 0 && r.max_tokens == -1 && !r.stream && !r.has_seed);
    EXPECT(r.prompt_text && !strcmp(r.prompt_text, "hi") && !r.model && r.n_stop == 0);
    srv_req_free(&r);
    // chat: developer becomes system, text parts are joined, thinking switch read
    b = "{\"messages\": [{\"role\": \"developer\", \"content\": \"d\"}, {\"role\": \"user\", \"content\": [{\"type\": "
        "\"text\", \"text\": \"a\"}, {\"type\": \"text\", \"text\": \"b\"}]}, {\"role\": \"assistant\", \"content\": "
        "null}], \"max_completion_tokens\": 4, \"chat_template_kwargs\": {\"enable_thinking\": false}}";
    ASSERT(srv_req_parse(b, strlen(b), SRV_CHAT, &r, &e) == 0, "%s", e.message);
    EXPECT(r.n_msgs == 3 && !strcmp(r.msgs[0].role, "system") && !strcmp(r.msgs[1].content, "ab"));
    EXPECT(!strcmp(r.msgs[2].role, "assistant") && !strcmp(r.msgs[2].content, ""));
    EXPECT(r.max_tokens == 4 && r.enable_thinking == CHAT_THINKING_OFF);
    srv_req_free(&r);
    // a stop string keeps its bytes; control characters in a quoted field name do not break the one-line message
    b = "{\"prompt\": \"a\", \"bad\\nname\": 1}";
    ASSERT(srv_req_parse(b, strlen(b), SRV_COMPLETION, &r, &e) == -1);
    EXPECT(!strchr(e.message, '\n'), "%s", e.message);
}

// Every prefix of a valid body, and single-byte corruptions of it, parse or fail cleanly (LSan: nothing leaks).
TEST(server_request_truncations_and_corruptions) {
    const char *b = "{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"h\\u00e9\"}]}],"
                    " \"stop\": [\"x\"], \"max_tokens\": 3, \"stream\": true, \"stream_options\": {\"include_usage\":"
                    " true}, \"seed\": 1}";
    const size_t n = strlen(b);
    int ok = 0, failed = 0;
    char *buf = malloc(n + 1);
    for (size_t len = 0; len <= n; len++) {
        srv_req r;
        srv_err e;
        if (srv_req_parse(b, len, SRV_CHAT, &r, &e) == 0) {
            ok++;
            srv_req_free(&r);
        } else {
            failed++;
            EXPECT(e.status == 400 && e.message[0]);
        }
    }
    static const char subst[] = {'"', '{', '}', '[', ']', ',', ':', '0', 'x', '\\', (char)0xff};
    for (size_t i = 0; i < n; i++)
        for (size_t k = 0; k < sizeof subst; k++) {
            memcpy(buf, b, n + 1);
            buf[i] = subst[k];
            srv_req r;
            srv_err e;
            if (srv_req_parse(buf, n, SRV_CHAT, &r, &e) == 0) srv_req_free(&r);
            else EXPECT(e.status == 400 && e.message[0]);
        }
    free(buf);
    EXPECT(ok == 1 && failed == (int)n, "%d parsed, %d refused", ok, failed);
}
