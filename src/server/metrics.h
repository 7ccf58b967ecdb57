// Server counters and histograms, rendered as Prometheus text (GET /metrics). Two families: "flashdelta:" names
// (vLLM's names where one exists, plus ours) and the "vllm:" names vLLM's own exposition has (vllm/v1/metrics/
// loggers.py, labels model_name and engine), so existing vLLM dashboards and PromQL read this server unchanged.
#ifndef FD_SERVER_METRICS_H
#define FD_SERVER_METRICS_H
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#define SRV_HIST_MAX 24
typedef struct {
    int n;                          // bucket upper bounds used
    double le[SRV_HIST_MAX];        // upper bounds (seconds)
    int64_t count[SRV_HIST_MAX + 1]; // per bucket (last: +Inf), not cumulative
    double sum;
    int64_t total;
} srv_hist;

enum { SRV_FIN_STOP = 0, SRV_FIN_LENGTH, SRV_FIN_ABORT, SRV_FIN_ERROR, SRV_FIN_N };
#define SRV_SPEC_POS 16      // per-position series of the flashdelta: names without a drafter (kept as before)
#define SRV_SPEC_POS_MAX 64  // = FD_SPEC_MAX_BLOCK, the largest DFlash block

typedef struct {
    pthread_mutex_t mu;
    // requests
    int64_t finished[SRV_FIN_N];
    int64_t http_status[6];          // by class: 1xx..5xx (index 1..5)
    int64_t rejected_queue_full, rejected_timeout;
    int running, waiting;
    double kv_usage; // fraction of the KV pool's pages held by sequences (copied by the scheduler)
    int64_t ctx;     // max_model_len: the token-count histograms' 1-2-5 buckets end there
    // tokens
    int64_t prompt_tokens, generation_tokens;
    int64_t prefill_computed_tokens;  // prompt tokens actually run through the model
    int64_t pc_queries, pc_hits;      // prefix cache, in tokens (vLLM semantics)
    int64_t pc_resets;
    // prefix cache state (copied by the scheduler)
    int64_t pc_nodes, pc_snapshots, pc_evictions;
    double pc_bytes, pc_budget;
    // routes: every value of every route of the route table (engine routes summed over the slots' engines,
    // backend routes once), copied by the scheduler into an array it sizes from the table (freed by destroy);
    // under --tp every rank's table, one after another, each sample labelled with its rank
    struct srv_route_hit {
        const char *route, *value;
        int rank;
        int64_t calls, tokens;
    } *route_hits;
    int n_route_hits;
    int tp; // --tp ranks (the route samples carry rank="r"); 0: a plain server, no rank label
    int64_t decode_steps, prefill_chunks;
    // speculative decoding (no drafter: stay 0, exported under flashdelta: so dashboards have the series)
    int spec_block; // the drafter's block B (0: none): B - 1 draft positions
    int64_t spec_drafts, spec_draft_tokens, spec_accepted, spec_accepted_pos[SRV_SPEC_POS_MAX];
    srv_hist ttft, itl, e2e, queue;
    // per finished request, as vLLM: prompt / generated tokens, prefill (admission -> first token), decode
    // (first -> last token), inference (admission -> last token)
    srv_hist req_prompt, req_gen, prefill_time, decode_time, inference_time;
} srv_metrics;

// ctx: the served max_model_len (the token-count histograms' bucket range).
void srv_metrics_init(srv_metrics *m, int64_t ctx);
void srv_metrics_destroy(srv_metrics *m);
void srv_hist_observe(srv_hist *h, double v); // caller holds m->mu
// Escapes a label value per the Prometheus text format into out (cap bytes, NUL-terminated; a value too long is cut
// at a whole escape). Returns the length written.
size_t srv_prom_escape(const char *v, char *out, size_t cap);
// Prometheus text exposition (malloc'ed). model: the served model name (label).
char *srv_metrics_render(srv_metrics *m, const char *model);
#endif
