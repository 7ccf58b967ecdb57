// Chat requests around the model: the prompt from the model's chat template, and the model's output split into
// reasoning (<think>...</think>), content and tool calls (Qwen's two formats), streamed or whole.
//
// Reasoning, as vLLM's Qwen3 reasoning parser: the text up to </think> is reasoning when the output opens with
// <think> or the prompt left a <think> open (Qwen3.5's template does); the reasoning is stripped of surrounding
// whitespace and the content after </think> of its leading newlines. An unclosed <think> is all reasoning.
//
// Tool calls are looked for in the content only (a call written inside the reasoning is thought, not made):
//   hermes (Qwen3):         <tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>
//   XML (Qwen3.5, -Coder):  <tool_call>\n<function=f>\n<parameter=p>\nvalue\n</parameter>\n</function>\n</tool_call>
// From the first call on, the output is held back; at the end it must be a sequence of well-formed calls (text
// after the last call is content). Anything else, a truncated call included, is returned as plain content.
#ifndef FD_SERVER_CHAT_H
#define FD_SERVER_CHAT_H
#include <jansson.h>
#include <stddef.h>

#include "io/chat_template.h"
#include "io/tokenizer.h"
#include "server/request.h"

// ---- prompt ----
typedef struct {
    char *text;   // the prompt (malloc'ed), including `forced`
    char *forced; // text the prompt ends with to force a tool call (tool_choice required / named), which the
                  // output continues: the parser sees forced + output. NULL when none.
    int in_think; // the prompt leaves a <think> block open
    int reasoning; // parse reasoning (the template knows </think>)
    int tools;     // parse tool calls
} srv_chat_prompt;

// Renders r's messages with t. 0, or -1 + e (400: the template refused the conversation).
int srv_chat_build_prompt(const chat_template *t, const srv_req *r, srv_chat_prompt *p, srv_err *e);
void srv_chat_prompt_free(srv_chat_prompt *p);
// Control-token injection (issue 21): where special-token text written in the messages (content, reasoning,
// tool arguments, any string a message carries) landed in p->text, as plain spans for tok_encode_opts, so it
// stays text while the template's own control tokens stay control tokens. Found by rendering the template a
// second time with the first byte of every such occurrence changed: the two renderings differ exactly there.
// When they differ in length (the template branched on that text) the positions cannot be told and the request
// is refused (400) rather than let through. *spans NULL and *n 0 when the messages hold no special-token text.
int srv_chat_plain_spans(const chat_template *t, const tok_tokenizer *tok, const srv_req *r, const srv_chat_prompt *p,
                         tok_span **spans, int *n, srv_err *e);

// ---- output ----
typedef struct {
    char *name;
    char *arguments; // JSON text of an object
} srv_tool_call;

// Parses text[0..n) as a sequence of tool calls (whitespace between them). 0 with *calls / *n_calls and *end (the
// offset after the last call), or -1 when it does not start with a well-formed call. tools: the request's tools,
// whose parameter schemas type the XML form's values (a "string" parameter stays a string).
int srv_tool_calls_parse(const char *text, size_t n, const json_t *tools, srv_tool_call **calls, int *n_calls,
                         size_t *end);
void srv_tool_calls_free(srv_tool_call *calls, int n);

// The streaming splitter. Feed it the output text as it grows (upto: the bytes that are safe to look at, whole
// UTF-8 characters); it calls emit for each reasoning / content piece that is final.
typedef void (*srv_emit_fn)(void *ctx, int reasoning, const char *s, size_t n);
typedef struct {
    int reasoning, tools; // what to look for
    int state;            // 0: start (a <think> may open), 1: reasoning, 2: content, 3: tool calls (held back)
    int content_started;  // the content's leading newlines are dropped once
    size_t pos;           // bytes consumed
    size_t held;          // state 2/3: where the held-back text (trailing whitespace, then the calls) begins
    size_t calls_at;      // state 3: where the first call begins
} srv_chat_split;

void srv_chat_split_init(srv_chat_split *s, int reasoning, int tools, int in_think);
void srv_chat_split_feed(srv_chat_split *s, const char *text, size_t upto, srv_emit_fn emit, void *ctx);
// The end of the output (text[0..len)): emits what is left, and returns the tool calls (*n_calls 0: none).
void srv_chat_split_finish(srv_chat_split *s, const char *text, size_t len, const json_t *tools, srv_emit_fn emit,
                           void *ctx, srv_tool_call **calls, int *n_calls);

// The whole output at once: reasoning (NULL if none), content (NULL if empty and there are calls), calls.
typedef struct {
    char *reasoning, *content;
    srv_tool_call *calls;
    int n_calls;
} srv_chat_result;
void srv_chat_parse(const srv_chat_prompt *p, const json_t *tools, const char *output, size_t n,
                    srv_chat_result *out);
void srv_chat_result_free(srv_chat_result *r);
#endif
