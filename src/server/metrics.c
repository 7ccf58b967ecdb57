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

void srv_metrics_init(srv_metrics *m) {
    memset(m, 0, sizeof *m);
    pthread_mutex_init(&m->mu, NULL);
    // vLLM's bucket bounds for these histograms
    static const double ttft[] = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
                                  2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0};
    static const double itl[] = {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0,
                                 7.5, 10.0, 20.0, 40.0, 80.0};
    static const double e2e[] = {0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
                                 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
    hist_init(&m->ttft, ttft, (int)(sizeof ttft / sizeof *ttft));
    hist_init(&m->itl, itl, (int)(sizeof itl / sizeof *itl));
    hist_init(&m->e2e, e2e, (int)(sizeof e2e / sizeof *e2e));
    hist_init(&m->queue, e2e, (int)(sizeof e2e / sizeof *e2e));
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

static void meta(srv_buf *b, const char *name, const char *type, const char *help) {
    put(b, "# HELP flashdelta:%s %s\n# TYPE flashdelta:%s %s\n", name, help, name, type);
}

static void counter(srv_buf *b, const char *model, const char *name, const char *help, int64_t v) {
    meta(b, name, "counter", help);
    put(b, "flashdelta:%s{model_name=\"%s\"} %lld\n", name, model, (long long)v);
}

static void gauge(srv_buf *b, const char *model, const char *name, const char *help, double v) {
    meta(b, name, "gauge", help);
    put(b, "flashdelta:%s{model_name=\"%s\"} %.17g\n", name, model, v);
}

static void hist(srv_buf *b, const char *model, const char *name, const char *help, const srv_hist *h) {
    meta(b, name, "histogram", help);
    int64_t cum = 0;
    for (int i = 0; i < h->n; i++) {
        cum += h->count[i];
        put(b, "flashdelta:%s_bucket{model_name=\"%s\",le=\"%g\"} %lld\n", name, model, h->le[i], (long long)cum);
    }
    cum += h->count[h->n];
    put(b, "flashdelta:%s_bucket{model_name=\"%s\",le=\"+Inf\"} %lld\n", name, model, (long long)cum);
    put(b, "flashdelta:%s_sum{model_name=\"%s\"} %.17g\n", name, model, h->sum);
    put(b, "flashdelta:%s_count{model_name=\"%s\"} %lld\n", name, model, (long long)h->total);
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

char *srv_metrics_render(srv_metrics *m, const char *model_raw) {
    srv_buf b = {0};
    char model[256]; // every line is formatted through put()'s 512-byte buffer: the name is cut, not the line
    srv_prom_escape(model_raw, model, sizeof model);
    pthread_mutex_lock(&m->mu);
    gauge(&b, model, "num_requests_running", "Requests holding a sequence slot (prefill or decode).", m->running);
    gauge(&b, model, "num_requests_waiting", "Requests queued for a slot.", m->waiting);
    counter(&b, model, "prompt_tokens_total", "Prompt tokens of finished and running requests.", m->prompt_tokens);
    counter(&b, model, "generation_tokens_total", "Generated tokens.", m->generation_tokens);
    counter(&b, model, "prefill_computed_tokens_total",
            "Prompt tokens run through the model (prompt tokens minus prefix-cache hits).",
            m->prefill_computed_tokens);
    counter(&b, model, "prefix_cache_queries_total", "Prompt tokens looked up in the prefix cache.", m->pc_queries);
    counter(&b, model, "prefix_cache_hits_total", "Prompt tokens served from the prefix cache.", m->pc_hits);
    counter(&b, model, "prefix_cache_resets_total", "Prefix cache resets done (POST /reset_prefix_cache; calls while one is pending count once each).", m->pc_resets);
    gauge(&b, model, "prefix_cache_usage_bytes", "Bytes of KV blocks and state snapshots held.", m->pc_bytes);
    gauge(&b, model, "prefix_cache_budget_bytes", "Prefix cache byte budget.", m->pc_budget);
    gauge(&b, model, "prefix_cache_blocks", "KV blocks held.", (double)m->pc_nodes);
    gauge(&b, model, "prefix_cache_state_snapshots", "GDN/conv state snapshots held.", (double)m->pc_snapshots);
    counter(&b, model, "prefix_cache_evictions_total", "KV blocks evicted (LRU).", m->pc_evictions);
    meta(&b, "request_success_total", "counter", "Finished requests by finish reason.");
    static const char *const fin[SRV_FIN_N] = {"stop", "length", "abort", "error"};
    for (int i = 0; i < SRV_FIN_N; i++)
        put(&b, "flashdelta:request_success_total{model_name=\"%s\",finished_reason=\"%s\"} %lld\n", model, fin[i],
            (long long)m->finished[i]);
    meta(&b, "http_responses_total", "counter", "HTTP responses by status class.");
    for (int i = 1; i <= 5; i++)
        put(&b, "flashdelta:http_responses_total{model_name=\"%s\",status=\"%dxx\"} %lld\n", model, i,
            (long long)m->http_status[i]);
    meta(&b, "requests_rejected_total", "counter", "Requests refused by admission control.");
    put(&b, "flashdelta:requests_rejected_total{model_name=\"%s\",reason=\"queue_full\"} %lld\n", model,
        (long long)m->rejected_queue_full);
    put(&b, "flashdelta:requests_rejected_total{model_name=\"%s\",reason=\"queue_timeout\"} %lld\n", model,
        (long long)m->rejected_timeout);
    meta(&b, "route_calls_total", "counter", "Calls that ran each value of each named execution route.");
    for (int i = 0; i < m->n_route_hits; i++)
        put(&b, "flashdelta:route_calls_total{model_name=\"%s\",op=\"%s\",route=\"%s\"} %lld\n", model,
            m->route_hits[i].route, m->route_hits[i].value, (long long)m->route_hits[i].calls);
    meta(&b, "route_tokens_total", "counter", "Tokens (rows) through each value of each named execution route.");
    for (int i = 0; i < m->n_route_hits; i++)
        put(&b, "flashdelta:route_tokens_total{model_name=\"%s\",op=\"%s\",route=\"%s\"} %lld\n", model,
            m->route_hits[i].route, m->route_hits[i].value, (long long)m->route_hits[i].tokens);
    counter(&b, model, "scheduler_decode_steps_total", "Single-token decode forwards.", m->decode_steps);
    counter(&b, model, "scheduler_prefill_chunks_total", "Prefill forwards (chunks).", m->prefill_chunks);
    counter(&b, model, "spec_decode_num_drafts_total", "Speculative rounds (no drafter loaded: 0).", m->spec_drafts);
    counter(&b, model, "spec_decode_num_draft_tokens_total", "Drafted tokens.", m->spec_draft_tokens);
    counter(&b, model, "spec_decode_num_accepted_tokens_total", "Accepted draft tokens.", m->spec_accepted);
    meta(&b, "spec_decode_num_accepted_tokens_per_pos_total", "counter", "Accepted draft tokens by block position.");
    for (int i = 0; i < SRV_SPEC_POS; i++)
        put(&b, "flashdelta:spec_decode_num_accepted_tokens_per_pos_total{model_name=\"%s\",position=\"%d\"} %lld\n",
            model, i, (long long)m->spec_accepted_pos[i]);
    hist(&b, model, "time_to_first_token_seconds", "Time from arrival to the first generated token.", &m->ttft);
    hist(&b, model, "inter_token_latency_seconds", "Time between consecutive generated tokens.", &m->itl);
    hist(&b, model, "e2e_request_latency_seconds", "Time from arrival to the last token.", &m->e2e);
    hist(&b, model, "request_queue_time_seconds", "Time spent waiting for a slot.", &m->queue);
    pthread_mutex_unlock(&m->mu);
    srv_buf_add(&b, "", 0);
    b.p[b.len] = 0;
    return b.p;
}
