// The model's output split into reasoning, content and tool calls (server/chat.h), on texts in the shapes Qwen3
// (hermes JSON calls), Qwen3.5 / Qwen3-Coder (XML calls, a <think> the prompt opened) write: well-formed, truncated,
// malformed, interleaved with thinking; and streaming (fed one byte at a time) gives exactly the whole-text result.
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "server/chat.h"
#include "test.h"

static const char *TOOLS =
    "[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"parameters\": {\"type\": \"object\", "
    "\"properties\": {\"city\": {\"type\": \"string\"}, \"days\": {\"type\": \"integer\"}, \"zip\": {\"type\": "
    "\"string\"}, \"opts\": {\"type\": \"object\"}}}}}]";

typedef struct {
    const char *name, *forced, *out;
    int reasoning, tools, in_think;
    const char *want_reasoning, *want_content; // NULL: none
    int n_calls;
    const char *call0_name, *call0_args, *call1_args;
} ocase;

static const ocase CASES[] = {
    {"hermes one call", NULL,
     "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 3}}\n</tool_call>", 1, 1, 0,
     NULL, NULL, 1, "get_weather", "{\"city\":\"Paris\",\"days\":3}", NULL},
    {"hermes thinking, text, two calls", NULL,
     "<think>\nThe user wants two cities.\n</think>\n\nLet me check both.\n<tool_call>\n{\"name\": \"get_weather\", "
     "\"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
     "{\"city\": \"Lyon\"}}\n</tool_call>",
     1, 1, 0, "The user wants two cities.", "Let me check both.", 2, "get_weather", "{\"city\":\"Paris\"}",
     "{\"city\":\"Lyon\"}"},
    {"hermes arguments as a string", NULL,
     "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": \"{\\\"city\\\": \\\"Oslo\\\"}\"}\n</tool_call>", 1, 1, 0,
     NULL, NULL, 1, "get_weather", "{\"city\":\"Oslo\"}", NULL},
    {"xml (Qwen3-Coder), typed by the schema", NULL,
     "I'll look it up.\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nSan Francisco\n</parameter>\n"
     "<parameter=days>\n3\n</parameter>\n<parameter=zip>\n94103\n</parameter>\n<parameter=opts>\n{\"metric\": true}\n"
     "</parameter>\n</function>\n</tool_call>",
     0, 1, 0, NULL, "I'll look it up.", 1, "get_weather",
     "{\"city\":\"San Francisco\",\"days\":3,\"zip\":\"94103\",\"opts\":{\"metric\":true}}", NULL},
    {"xml after a <think> the prompt opened (Qwen3.5)", NULL,
     "Need the weather.\n</think>\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nRome\n</parameter>\n"
     "</function>\n</tool_call>",
     1, 1, 1, "Need the weather.", NULL, 1, "get_weather", "{\"city\":\"Rome\"}", NULL},
    {"a call inside the reasoning is thought, not made", NULL,
     "<think>\nMaybe <tool_call>\n{\"name\": \"get_weather\", \"arguments\": {}}\n</tool_call> later.\n</think>\n\n"
     "No call needed.",
     1, 1, 0, "Maybe <tool_call>\n{\"name\": \"get_weather\", \"arguments\": {}}\n</tool_call> later.",
     "No call needed.", 0, NULL, NULL, NULL},
    {"truncated call: plain content", NULL, "Sure.\n<tool_call>\n{\"name\": \"get_weather\", \"argum", 1, 1, 0, NULL,
     "Sure.\n<tool_call>\n{\"name\": \"get_weather\", \"argum", 0, NULL, NULL, NULL},
    {"truncated xml call: plain content", NULL, "<tool_call>\n<function=get_weather>\n<parameter=city>\nPar", 0, 1, 0,
     NULL, "<tool_call>\n<function=get_weather>\n<parameter=city>\nPar", 0, NULL, NULL, NULL},
    {"malformed json: plain content", NULL, "<tool_call>\n{name: get_weather}\n</tool_call>", 1, 1, 0, NULL,
     "<tool_call>\n{name: get_weather}\n</tool_call>", 0, NULL, NULL, NULL},
    {"a good call then a broken one: plain content", NULL,
     "<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n{\"name\": ", 1, 1, 0, NULL,
     "<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n{\"name\": ", 0, NULL, NULL, NULL},
    {"bare <function=> without the wrapper", NULL,
     "<function=get_weather>\n<parameter=city>\nKyiv\n</parameter>\n</function>", 0, 1, 0, NULL, NULL, 1,
     "get_weather", "{\"city\":\"Kyiv\"}", NULL},
    {"text after the calls is content", NULL,
     "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Nice\"}}\n</tool_call>\nDone.", 1, 1, 0, NULL,
     "Done.", 1, "get_weather", "{\"city\":\"Nice\"}", NULL},
    {"tools off: the call text is content", NULL, "<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>", 1,
     0, 0, NULL, "<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>", 0, NULL, NULL, NULL},
    {"forced named call (tool_choice)", "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": ",
     "{\"city\": \"Bern\"}}\n</tool_call>", 1, 1, 0, NULL, NULL, 1, "get_weather", "{\"city\":\"Bern\"}", NULL},
    {"forced xml call", "<tool_call>\n<function=", "get_weather>\n<parameter=days>\n2\n</parameter>\n</function>\n</tool_call>",
     1, 1, 0, NULL, NULL, 1, "get_weather", "{\"days\":2}", NULL},
    {"unclosed think: all reasoning", NULL, "<think>\nstill thinking about it", 1, 0, 0, "still thinking about it", "",
     0, NULL, NULL, NULL},
    {"thinking disabled: the content is the text", NULL, "Plain answer\n\n with  spaces \n", 1, 1, 0, NULL,
     "Plain answer\n\n with  spaces \n", 0, NULL, NULL, NULL},
    {"no reasoning parser: <think> stays", NULL, "<think>x</think>y", 0, 0, 0, NULL, "<think>x</think>y", 0, NULL,
     NULL, NULL},
    {"a prefix of <think> alone is content", NULL, "<thi", 1, 0, 0, NULL, "<thi", 0, NULL, NULL, NULL},
    {"empty reasoning", NULL, "<think>\n\n</think>\n\nHi", 1, 0, 0, NULL, "Hi", 0, NULL, NULL, NULL},
    {"utf-8 kept whole", NULL, "<think>é中</think>\n\n😀 ok", 1, 1, 0, "é中", "😀 ok", 0, NULL, NULL, NULL},
};

typedef struct {
    char r[4096], c[4096];
    size_t nr, nc;
    int pieces;
} sink;

static void emit(void *ctx, int reasoning, const char *s, size_t n) {
    sink *k = ctx;
    char *dst = reasoning ? k->r : k->c;
    size_t *len = reasoning ? &k->nr : &k->nc;
    if (*len + n < sizeof k->r) memcpy(dst + *len, s, n), *len += n, dst[*len] = 0;
    k->pieces++;
}

TEST(chat_output_cases) {
    json_t *tools = json_loads(TOOLS, 0, NULL);
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
        const ocase *c = &CASES[i];
        srv_chat_prompt p = {.forced = (char *)c->forced, .in_think = c->in_think, .reasoning = c->reasoning,
                             .tools = c->tools};
        srv_chat_result r;
        srv_chat_parse(&p, tools, c->out, strlen(c->out), &r);
        EXPECT((!r.reasoning && !c->want_reasoning) || (r.reasoning && c->want_reasoning && !strcmp(r.reasoning, c->want_reasoning)),
               "%s: reasoning [%s]", c->name, r.reasoning ? r.reasoning : "(none)");
        EXPECT((!r.content && !c->want_content) || (r.content && c->want_content && !strcmp(r.content, c->want_content)),
               "%s: content [%s]", c->name, r.content ? r.content : "(none)");
        EXPECT(r.n_calls == c->n_calls, "%s: %d calls", c->name, r.n_calls);
        if (r.n_calls > 0 && c->n_calls > 0)
            EXPECT(!strcmp(r.calls[0].name, c->call0_name) && !strcmp(r.calls[0].arguments, c->call0_args), "%s: %s %s",
                   c->name, r.calls[0].name, r.calls[0].arguments);
        if (r.n_calls > 1 && c->n_calls > 1)
            EXPECT(!strcmp(r.calls[1].arguments, c->call1_args), "%s: %s", c->name, r.calls[1].arguments);

        // streamed one byte at a time: the same pieces, in order
        char *text = fd_sprintf("%s%s", c->forced ? c->forced : "", c->out);
        size_t len = strlen(text);
        srv_chat_split s;
        srv_chat_split_init(&s, c->reasoning, c->tools, c->in_think);
        sink k = {0};
        for (size_t upto = 1; upto <= len; upto++) {
            if (upto < len && ((unsigned char)text[upto] & 0xC0) == 0x80) continue; // whole characters only
            srv_chat_split_feed(&s, text, upto, emit, &k);
        }
        srv_tool_call *calls;
        int n_calls;
        srv_chat_split_finish(&s, text, len, tools, emit, &k, &calls, &n_calls);
        EXPECT(!strcmp(k.r, r.reasoning ? r.reasoning : "") && !strcmp(k.c, r.content ? r.content : "") &&
                   n_calls == r.n_calls,
               "%s: streamed [%s] [%s] %d", c->name, k.r, k.c, n_calls);
        srv_tool_calls_free(calls, n_calls);
        free(text);
        srv_chat_result_free(&r);
    }
    json_decref(tools);
}
