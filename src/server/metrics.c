// Prometheus text rendering of the server metrics (see metrics.h).
#include "server/metrics.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "server/server_internal.h"

static void hist_init(srv_hist *h, const double *le, int n) {
    memset(h, 0, sizeof *h);
    h->n = n;
    memcpy(h->le, le, sizeof(double) * (size_t)n);
}

// vLLM's build_1_2_5_buckets(max_model_len): 1, 2, 5, 10, 20, 50, ... up to max (the token-count histograms).
static int buckets_1_2_5(int64_t max, double *le, int cap) {
    int n = 0;
    for (double base = 1; n < cap; base *= 10)
        for (int k = 0; k < 3 && n < cap; k++) {
            const double v = base * (k == 0 ? 1 : k == 1 ? 2 : 5);
            if (v > (double)max) return n;
            le[n++] = v;
        }
    return n;
}

void srv_metrics_init(srv_metrics *m, int64_t ctx) {
    memset(m, 0, sizeof *m);
    pthread_mutex_init(&m->mu, NULL);
    m->ctx = ctx;
    // vLLM's bucket bounds for these histograms
    static const double ttft[] = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
                                  2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0};
    static const double itl[] = {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0,
                                 7.5, 10.0, 20.0, 40.0, 80.0};
    static const double e2e[] = {0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
                                 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
    const int n_e2e = (int)(sizeof e2e / sizeof *e2e);
    hist_init(&m->ttft, ttft, (int)(sizeof ttft / sizeof *ttft));
    hist_init(&m->itl, itl, (int)(sizeof itl / sizeof *itl));
    hist_init(&m->e2e, e2e, n_e2e);
    hist_init(&m->queue, e2e, n_e2e);
    hist_init(&m->prefill_time, e2e, n_e2e);
    hist_init(&m->decode_time, e2e, n_e2e);
    hist_init(&m->inference_time, e2e, n_e2e);
    double tok[SRV_HIST_MAX];
    const int n_tok = buckets_1_2_5(ctx > 0 ? ctx : 1, tok, SRV_HIST_MAX);
    hist_init(&m->req_prompt, tok, n_tok);
    hist_init(&m->req_gen, tok, n_tok);
}

void srv_metrics_destroy(srv_metrics *m) {
    free(m->route_hits);
    m->route_hits = NULL;
    pthread_mutex_destroy(&m->mu);
}

void srv_hist_observe(srv_hist *h, double v) {
    int b = 0;
    while (b < h->n && v > h->le[b]) b++;
    h->count[b]++;
    h->sum += v;
    h->total++;
}

static void put(srv_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(srv_buf *b, const char *fmt, ...) {
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n > 0) srv_buf_add(b, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

// One metric family's prefix ("flashdelta:" / "vllm:") and the labels every sample carries.
typedef struct {
    srv_buf *b;
    const char *prefix, *labels;
} family;

static void meta(const family *f, const char *name, const char *type, const char *help) {
    put(f->b, "# HELP %s%s %s\n# TYPE %s%s %s\n", f->prefix, name, help, f->prefix, name, type);
}

static void counter(const family *f, const char *name, const char *help, int64_t v) {
    meta(f, name, "counter", help);
    put(f->b, "%s%s{%s} %lld\n", f->prefix, name, f->labels, (long long)v);
}

static void gauge(const family *f, const char *name, const char *help, double v) {
    meta(f, name, "gauge", help);
    put(f->b, "%s%s{%s} %.17g\n", f->prefix, name, f->labels, v);
}

// A counter with one extra label, one sample per value (names[i] = vals[i]).
static void counter_by(const family *f, const char *name, const char *help, const char *label,
                       const char *const *names, const int64_t *vals, int n) {
    meta(f, name, "counter", help);
    for (int i = 0; i < n; i++)
        put(f->b, "%s%s{%s,%s=\"%s\"} %lld\n", f->prefix, name, f->labels, label, names[i], (long long)vals[i]);
}

static void hist(const family *f, const char *name, const char *help, const srv_hist *h) {
    meta(f, name, "histogram", help);
    int64_t cum = 0;
    for (int i = 0; i < h->n; i++) {
        cum += h->count[i];
        put(f->b, "%s%s_bucket{%s,le=\"%g\"} %lld\n", f->prefix, name, f->labels, h->le[i], (long long)cum);
    }
    cum += h->count[h->n];
    put(f->b, "%s%s_bucket{%s,le=\"+Inf\"} %lld\n", f->prefix, name, f->labels, (long long)cum);
    put(f->b, "%s%s_sum{%s} %.17g\n", f->prefix, name, f->labels, h->sum);
    put(f->b, "%s%s_count{%s} %lld\n", f->prefix, name, f->labels, (long long)h->total);
}

// A label value in the Prometheus text format: backslash, double quote and line feed are escaped (\\ \" \n), so
// no value (the model name comes from the command line or the directory) can end the label or the line.
size_t srv_prom_escape(const char *v, char *out, size_t cap) {
    size_t n = 0;
    for (; v && *v && n + 3 < cap; v++) {
        const char c = *v;
        if (c == '\\' || c == '"' || c == '\n') {
            out[n++] = '\\';
            out[n++] = c == '\n' ? 'n' : c;
        } else {
            out[n++] = c;
        }
    }
    if (v && *v) // cut: drop a partial UTF-8 character at the end (the exposition must stay valid UTF-8)
        while (n > 0 && ((unsigned char)*v & 0xC0) == 0x80 && ((unsigned char)out[n - 1] & 0x80)) {
            const int lead = ((unsigned char)out[n - 1] & 0xC0) == 0xC0;
            n--;
            if (lead) break;
        }
    out[n] = 0;
    return n;
}

// One route sample; under --tp labelled with its rank (a plain server's samples stay as they were).
static void route_sample(const family *f, const srv_metrics *m, const char *name, int i, int64_t v) {
    const struct srv_route_hit *h = &m->route_hits[i];
    char rank[24] = "";
    if (m->tp) snprintf(rank, sizeof rank, ",rank=\"%d\"", h->rank);
    put(f->b, "%s%s{%s,op=\"%s\",route=\"%s\"%s} %lld\n", f->prefix, name, f->labels, h->route, h->value, rank,
        (long long)v);
}

// The flashdelta: family (unchanged since before the vllm: names existed).
static void render_ours(const family *f, const srv_metrics *m) {
    srv_buf *b = f->b;
    gauge(f, "num_requests_running", "Requests holding a sequence slot (prefill or decode).", m->running);
    gauge(f, "num_requests_waiting", "Requests queued for a slot.", m->waiting);
    counter(f, "prompt_tokens_total", "Prompt tokens of finished and running requests.", m->prompt_tokens);
    counter(f, "generation_tokens_total", "Generated tokens.", m->generation_tokens);
    counter(f, "prefill_computed_tokens_total",
            "Prompt tokens run through the model (prompt tokens minus prefix-cache hits).", m->prefill_computed_tokens);
    counter(f, "prefix_cache_queries_total", "Prompt tokens looked up in the prefix cache.", m->pc_queries);
    counter(f, "prefix_cache_hits_total", "Prompt tokens served from the prefix cache.", m->pc_hits);
    counter(f, "prefix_cache_resets_total",
            "Prefix cache resets done (POST /reset_prefix_cache; calls while one is pending count once each).",
            m->pc_resets);
    gauge(f, "prefix_cache_usage_bytes", "Bytes of KV blocks and state snapshots held.", m->pc_bytes);
    gauge(f, "prefix_cache_budget_bytes", "Prefix cache byte budget.", m->pc_budget);
    gauge(f, "prefix_cache_blocks", "KV blocks held.", (double)m->pc_nodes);
    gauge(f, "prefix_cache_state_snapshots", "GDN/conv state snapshots held.", (double)m->pc_snapshots);
    counter(f, "prefix_cache_evictions_total", "KV blocks evicted (LRU).", m->pc_evictions);
    static const char *const fin[SRV_FIN_N] = {"stop", "length", "abort", "error"};
    counter_by(f, "request_success_total", "Finished requests by finish reason.", "finished_reason", fin, m->finished,
               SRV_FIN_N);
    static const char *const cls[5] = {"1xx", "2xx", "3xx", "4xx", "5xx"};
    counter_by(f, "http_responses_total", "HTTP responses by status class.", "status", cls, m->http_status + 1, 5);
    static const char *const why[2] = {"queue_full", "queue_timeout"};
    const int64_t rejected[2] = {m->rejected_queue_full, m->rejected_timeout};
    counter_by(f, "requests_rejected_total", "Requests refused by admission control.", "reason", why, rejected, 2);
    meta(f, "route_calls_total", "counter", "Calls that ran each value of each named execution route.");
    for (int i = 0; i < m->n_route_hits; i++) route_sample(f, m, "route_calls_total", i, m->route_hits[i].calls);
    meta(f, "route_tokens_total", "counter", "Tokens (rows) through each value of each named execution route.");
    for (int i = 0; i < m->n_route_hits; i++) route_sample(f, m, "route_tokens_total", i, m->route_hits[i].tokens);
    counter(f, "scheduler_decode_steps_total", "Single-token decode forwards.", m->decode_steps);
    counter(f, "scheduler_prefill_chunks_total", "Prefill forwards (chunks).", m->prefill_chunks);
    counter(f, "spec_decode_num_drafts_total", "Speculative rounds (no drafter loaded: 0).", m->spec_drafts);
    counter(f, "spec_decode_num_draft_tokens_total", "Drafted tokens.", m->spec_draft_tokens);
    counter(f, "spec_decode_num_accepted_tokens_total", "Accepted draft tokens.", m->spec_accepted);
    meta(f, "spec_decode_num_accepted_tokens_per_pos_total", "counter", "Accepted draft tokens by block position.");
    const int n_pos = m->spec_block - 1 > SRV_SPEC_POS ? m->spec_block - 1 : SRV_SPEC_POS;
    for (int i = 0; i < n_pos; i++)
        put(b, "%sspec_decode_num_accepted_tokens_per_pos_total{%s,position=\"%d\"} %lld\n", f->prefix, f->labels, i,
            (long long)m->spec_accepted_pos[i]);
    hist(f, "time_to_first_token_seconds", "Time from arrival to the first generated token.", &m->ttft);
    hist(f, "inter_token_latency_seconds", "Time between consecutive generated tokens.", &m->itl);
    hist(f, "e2e_request_latency_seconds", "Time from arrival to the last token.", &m->e2e);
    hist(f, "request_queue_time_seconds", "Time spent waiting for a slot.", &m->queue);
}

// The vllm: family: the names, types and labels of vLLM's Prometheus exposition (its counters carry prometheus_
// client's "_total"; label engine="0": one engine). Only what this server measures the same way; the spec-decode
// series exist only with a drafter, one per draft position, as vLLM's exist only with a speculative config.
static void render_vllm(const family *f, const srv_metrics *m) {
    gauge(f, "num_requests_running", "Requests holding a sequence slot (prefill or decode).", m->running);
    gauge(f, "num_requests_waiting", "Requests queued for a slot.", m->waiting);
    gauge(f, "kv_cache_usage_perc", "Fraction of the KV pool's pages held by sequences (1 = full).", m->kv_usage);
    gauge(f, "gpu_cache_usage_perc",
          "The same as vllm:kv_cache_usage_perc (vLLM's older name, read by older dashboards).",
          m->kv_usage);
    counter(f, "prefix_cache_queries_total", "Prompt tokens looked up in the prefix cache.",
            m->pc_queries);
    counter(f, "prefix_cache_hits_total", "Prompt tokens served from the prefix cache.", m->pc_hits);
    counter(f, "num_preemptions_total", "Sequences preempted (always 0: KV pages are reserved at admission).", 0); // none: KV is reserved
    counter(f, "prompt_tokens_total", "Prompt tokens of admitted requests.", m->prompt_tokens);
    counter(f, "generation_tokens_total", "Generated tokens.", m->generation_tokens);
    // vLLM's finish reasons are stop / length / abort; a request that failed is aborted there
    static const char *const fin[3] = {"stop", "length", "abort"};
    const int64_t done[3] = {m->finished[SRV_FIN_STOP], m->finished[SRV_FIN_LENGTH],
                             m->finished[SRV_FIN_ABORT] + m->finished[SRV_FIN_ERROR]};
    counter_by(f, "request_success_total", "Finished sequences by finish reason (failed ones count as abort).", "finished_reason", fin, done, 3);
    hist(f, "request_prompt_tokens", "Prompt tokens per finished sequence.", &m->req_prompt);
    hist(f, "request_generation_tokens", "Generated tokens per finished sequence.", &m->req_gen);
    hist(f, "time_to_first_token_seconds", "Time from arrival to the first generated token.", &m->ttft);
    hist(f, "inter_token_latency_seconds", "Time between consecutive generated tokens.", &m->itl);
    hist(f, "time_per_output_token_seconds",
         "The same as vllm:inter_token_latency_seconds (vLLM's older name).",
         &m->itl);
    hist(f, "e2e_request_latency_seconds", "Time from arrival to the last token.", &m->e2e);
    hist(f, "request_queue_time_seconds", "Time from arrival to admission into a slot.", &m->queue);
    hist(f, "request_inference_time_seconds", "Time from admission to the last token.",
         &m->inference_time);
    hist(f, "request_prefill_time_seconds", "Time from admission to the first token.", &m->prefill_time);
    hist(f, "request_decode_time_seconds", "Time from the first token to the last.", &m->decode_time);
    if (m->spec_block > 1) {
        counter(f, "spec_decode_num_drafts_total", "DFlash rounds (one draft block each).", m->spec_drafts);
        counter(f, "spec_decode_num_draft_tokens_total", "Drafted tokens.", m->spec_draft_tokens);
        counter(f, "spec_decode_num_accepted_tokens_total", "Accepted draft tokens.", m->spec_accepted);
        meta(f, "spec_decode_num_accepted_tokens_per_pos_total", "counter", "Rounds whose draft at this position (0-based) was accepted.");
        for (int i = 0; i < m->spec_block - 1; i++)
            put(f->b, "%sspec_decode_num_accepted_tokens_per_pos_total{%s,position=\"%d\"} %lld\n", f->prefix,
                f->labels, i, (long long)m->spec_accepted_pos[i]);
    }
}

char *srv_metrics_render(srv_metrics *m, const char *model_raw) {
    srv_buf b = {0};
    char model[256]; // every line is formatted through put()'s 512-byte buffer: the name is cut, not the line
    srv_prom_escape(model_raw, model, sizeof model);
    char ours[300], vllm[320];
    snprintf(ours, sizeof ours, "model_name=\"%s\"", model);
    snprintf(vllm, sizeof vllm, "model_name=\"%s\",engine=\"0\"", model);
    const family f_ours = {&b, "flashdelta:", ours}, f_vllm = {&b, "vllm:", vllm};
    pthread_mutex_lock(&m->mu);
    render_ours(&f_ours, m);
    render_vllm(&f_vllm, m);
    pthread_mutex_unlock(&m->mu);
    srv_buf_add(&b, "", 0);
    b.p[b.len] = 0;
    return b.p;
}
