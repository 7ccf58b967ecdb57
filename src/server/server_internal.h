// Shared between the HTTP side (http.c, libmicrohttpd threads) and the scheduler (sched.c, the one engine thread).
//
// A request becomes a srv_job. The HTTP thread fills the immutable part and submits it; the scheduler runs it and
// publishes output under job->mu (SSE bytes for streams, the text for plain responses), then resumes the suspended
// libmicrohttpd connection. A job is reference counted: the connection, the streaming response and the scheduler
// each hold one.
#ifndef FD_SERVER_INTERNAL_H
#define FD_SERVER_INTERNAL_H
#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "io/tokenizer.h"
#include "engine/engine_tp.h"
#include "engine/sampling_host.h"
#include "model/dflash.h"
#include "model/model.h"
#include "server/chat.h"
#include "server/metrics.h"
#include "server/request.h"
#include "server/server.h"

typedef enum { SRV_FINISH_NONE = 0, SRV_FINISH_STOP, SRV_FINISH_LENGTH, SRV_FINISH_TOOL_CALLS } srv_finish;
const char *srv_finish_name(srv_finish f); // "stop", "length", "tool_calls"; NULL for none

typedef struct {
    char *p;
    size_t len, cap;
} srv_buf;
void srv_buf_add(srv_buf *b, const char *s, size_t n);
void srv_buf_free(srv_buf *b);

// One choice of a plain (non-streaming) response: n > 1 runs one sequence (slot) per choice.
typedef struct {
    srv_buf text;       // the completion text (chat: the content)
    srv_finish finish;
    char *reasoning;    // chat: the reasoning, or NULL
    json_t *tool_calls; // chat: the OpenAI tool_calls array, or NULL
    int content_null;   // chat: tool calls and no content (content: null)
    json_t *lp_all;     // logprobs: every token's entry, in OpenAI's chat shape
    int n_completion, done;
    // streams: the entries not sent yet (logprobs); chat: the splitter over chat.forced + the text published so far
    json_t *lp_pending;
    srv_chat_split split;
    srv_buf ctext;
    size_t ctext_from; // bytes of the slot's text already in ctext
} srv_choice;

typedef struct srv_job {
    // ---- immutable after submit ----
    char id[48];
    srv_kind kind;
    int stream, include_usage, ignore_eos;
    const char *model_name;
    int32_t *prompt;
    int n_prompt;
    int max_tokens;
    double temperature, top_p;
    int top_k;
    uint64_t seed;
    char *stop[SRV_MAX_STOP];
    int n_stop;
    double t_arrival;
    long created; // unix seconds, for the response objects
    int fd;       // client socket (peeked by the scheduler while suspended, to notice a disconnect)
    // host sampling (logprobs, penalties, min_p, logit_bias): the request runs without speculation
    int host, logprobs, top_logprobs;
    fd_host_params hp; // its bias arrays are owned by the job
    srv_chat_prompt chat; // chat: how to read the output (reasoning, tool calls, a forced call opening); no text
    json_t *tools;        // chat: the request's tools (their schemas type tool-call arguments), or NULL
    uint64_t cache_salt; // prefix-cache tenant: 0 = shared; from cache_salt and (--cache-salt-api-key) the API key
    int http11;          // the request was HTTP/1.1: an interim "100 Continue" may be sent (the half-close probe)

    // ---- shared, under mu ----
    pthread_mutex_t mu;
    int refs;
    struct MHD_Connection *conn; // NULL once libmicrohttpd is done with the connection
    int suspended;
    srv_buf out;     // streaming: SSE bytes not yet handed to libmicrohttpd
    size_t out_sent; // bytes of out already handed over
    char *echo;                // completions with echo: the prompt's text, which every choice starts with
    int n, n_done;             // choices, and how many have ended (the job is done when all have)
    srv_choice ch[SRV_MAX_N];
    int cur; // streams: the choice whose chunks are being written (under mu)
    int done;
    int admitted;     // the scheduler gave it a slot and its prompt's KV pages (a stream's 200 waits for this)
    int headers_sent; // a stream's 200 went out: a later failure can only be an SSE error event
    srv_finish finish;
    srv_err err; // err.status != 0: the request failed
    int n_completion, n_cached; // n_completion: all choices' tokens
    double t_first, t_done;
    atomic_int cancelled; // set by the HTTP side (client gone); read by the scheduler
} srv_job;

srv_job *srv_job_new(void);
void srv_job_ref(srv_job *j);
void srv_job_unref(srv_job *j);
// Under j->mu: wakes the connection if it waits for output. Callers hold j->mu.
void srv_job_wake_locked(srv_job *j);

// ---- scheduler ----
typedef struct srv_sched srv_sched;
// Tokens of the KV pool the slots share (one per rank under --tp): --kv-tokens, at most slots x ctx (rounded up to
// pages), all they can use.
int64_t sched_kv_tokens(const srv_config *cfg);
// m on be (rank 0's backend under --tp); tp: the group every slot's engine leads (NULL: plain engines); dr: a DFlash
// drafter for speculative decoding, or NULL. NULL with fd_error set on failure (FD_ERR_REFUSED: ranks that
// disagree, their table printed to stderr).
srv_sched *sched_create(const srv_config *cfg, fd_model *m, fd_backend *be, const fd_tp_set *tp,
                        const tok_tokenizer *tok, fd_drafter *dr, const int32_t *eos, int n_eos, srv_metrics *met);
// Queues a job (takes a reference). -1 + err (429 queue full, 503 stopping) when refused.
int sched_submit(srv_sched *s, srv_job *j, srv_err *err);
// Asks the scheduler thread to drop the prefix cache and returns at once (the reset runs before the next admission,
// so a request sent after this returns never hits the old cache).
void sched_reset_prefix_cache(srv_sched *s);
// Ends every job (503) and stops the thread.
void sched_stop(srv_sched *s);
void sched_free(srv_sched *s);

// Appends one SSE event "data: <json>\n\n" for the job's object type (scheduler side helper, also used by http.c).
void srv_sse_chunk(srv_job *j, const char *delta, size_t len, int role_chunk, srv_finish finish);
// chat: a reasoning_content delta; the tool calls (one chunk each, whole arguments); the message's tool_calls array
void srv_sse_reasoning(srv_job *j, const char *delta, size_t len);
void srv_sse_tool_calls(srv_job *j, const srv_tool_call *calls, int n);
json_t *srv_tool_calls_json(srv_job *j, int choice, const srv_tool_call *calls, int n);
void srv_sse_usage(srv_job *j, int n_prompt);
// logprobs: one token's entry {token, logprob, bytes, top_logprobs}; the pending entries as one chunk (streams);
// a completion's logprobs object {tokens, token_logprobs, top_logprobs, text_offset} from chat-shaped entries.
json_t *srv_logprob_entry(const tok_tokenizer *t, const fd_token_logprobs *lp);
void srv_sse_logprobs(srv_job *j);
json_t *srv_completion_logprobs(const json_t *entries);
// Chat output published (chat_stream.c; the caller holds j->mu): streams get their deltas for text[0..upto), and
// at the end (fin) the tool calls; plain responses get content / reasoning / tool_calls at the end. Returns the
// finish reason, which becomes tool_calls when the model stopped after calling tools.
srv_finish srv_chat_publish(srv_job *j, srv_choice *ch, const char *text, size_t upto, srv_finish fin);
void srv_sse_error(srv_job *j);
void srv_sse_done(srv_job *j);
#endif
