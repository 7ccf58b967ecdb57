// OpenAI request bodies (POST /v1/completions and /v1/chat/completions): parsing and validation into srv_req, with
// OpenAI-style error reporting. Pure functions of the body (no server state), so they are tested table-driven.
//
// Policy: a field OpenAI does not define is refused ("Unrecognized request argument supplied"), as OpenAI does;
// a field we know but cannot honour (n > 1, logprobs, tools, penalties != 0, ...) is refused with a message that
// says so, never silently ignored. Limits that depend on the model (vocabulary, context) are checked by the server.
#ifndef FD_SERVER_REQUEST_H
#define FD_SERVER_REQUEST_H
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "io/chat_template.h"

typedef enum { SRV_COMPLETION = 0, SRV_CHAT = 1 } srv_kind;
// tool_choice: the model may call tools (auto), must not (none), must call one (required) or a named one.
typedef enum { SRV_TOOLS_AUTO = 0, SRV_TOOLS_NONE, SRV_TOOLS_REQUIRED, SRV_TOOLS_NAMED } srv_tool_choice;

#define SRV_MAX_STOP 4
#define SRV_MAX_STOP_LEN 256
#define SRV_MAX_N 16 // choices per request

typedef struct {
    srv_kind kind;
    // completions: the prompt as text, or as token ids (exactly one of the two)
    char *prompt_text;
    int32_t *prompt_ids;
    int n_prompt_ids;
    // chat: messages (strings owned by the request)
    chat_msg *msgs;
    int n_msgs;
    int enable_thinking; // CHAT_THINKING_* (chat_template_kwargs.enable_thinking)
    json_t *chat_messages;   // chat: the messages as the template sees them (role, content as a string, and
                             // reasoning_content / tool_calls with parsed arguments / tool_call_id / name when given)
    json_t *tools;           // chat: the "tools" array (NULL: none)
    srv_tool_choice tool_choice;
    char *tool_choice_name;  // SRV_TOOLS_NAMED: the function
    json_t *template_kwargs; // chat_template_kwargs (an object) or NULL
    char *model;         // NULL when not given
    int max_tokens;      // -1: not given
    double temperature;  // default 1 (OpenAI); 0 = greedy
    double top_p;        // (0, 1]
    int top_k;           // 0 = off
    uint64_t seed;
    int has_seed;
    char *stop[SRV_MAX_STOP];
    int n_stop;
    int echo; // completions: the prompt comes back before the completion
    int n; // choices: each its own sequence (seeds seed, seed + 1, ...), all in one response
    int stream, include_usage;
    int ignore_eos; // vLLM extension: generate through end-of-sequence tokens (benchmarks, tests)
    // Host-side sampling controls (any of them set: the request is sampled on the host, without speculation)
    int logprobs;             // chat: logprobs true; completions: logprobs N (0..5); 0 = off
    int top_logprobs;         // alternatives per token (chat: top_logprobs; completions: the N of logprobs)
    double presence_penalty, frequency_penalty; // OpenAI's, over the generated tokens; 0 = off
    double repetition_penalty; // vLLM / HF: over prompt and generated tokens; 1 = off
    double min_p;             // 0 = off
    int n_bias;               // logit_bias entries
    int32_t *bias_ids;
    float *bias;
    char *cache_salt; // vLLM extension: prefix-cache tenant (NULL: none)
} srv_req;

typedef struct {
    int status;         // HTTP status
    const char *type;   // "invalid_request_error", ...
    const char *code;   // NULL or e.g. "context_length_exceeded"
    char param[64];     // offending field, "" if none
    char message[320];
} srv_err;

// Fills e and returns -1 (always), for the caller's `return srv_err_set(...)`.
int srv_err_set(srv_err *e, int status, const char *type, const char *code, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
// The OpenAI error body {"error": {"message", "type", "param", "code"}} (malloc'ed JSON text).
char *srv_err_json(const srv_err *e);

// Parses body[0..len). 0 on success (free with srv_req_free), or -1 with *err filled (nothing to free).
int srv_req_parse(const char *body, size_t len, srv_kind kind, srv_req *r, srv_err *err);
void srv_req_free(srv_req *r);
#endif
