// OpenAI request bodies (POST /v1/completions and /v1/chat/completions): parsing and validation into srv_req, with
// OpenAI-style error reporting. Pure functions of the body (no server state), so they are tested table-driven.
//
// Policy: a field OpenAI does not define is refused ("Unrecognized request argument supplied"), as OpenAI does;
// a field we know but cannot honour (n > 1, logprobs, tools, penalties != 0, ...) is refused with a message that
// says so, never silently ignored. Limits that depend on the model (vocabulary, context) are checked by the server.
#ifndef FD_SERVER_REQUEST_H
#define FD_SERVER_REQUEST_H
#include <stddef.h>
#include <stdint.h>

#include "io/chat_template.h"

typedef enum { SRV_COMPLETION = 0, SRV_CHAT = 1 } srv_kind;

#define SRV_MAX_STOP 4
#define SRV_MAX_STOP_LEN 256

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
    char *model;         // NULL when not given
    int max_tokens;      // -1: not given
    double temperature;  // default 1 (OpenAI); 0 = greedy
    double top_p;        // (0, 1]
    int top_k;           // 0 = off
    uint64_t seed;
    int has_seed;
    char *stop[SRV_MAX_STOP];
    int n_stop;
    int stream, include_usage;
    int ignore_eos; // vLLM extension: generate through end-of-sequence tokens (benchmarks, tests)
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
