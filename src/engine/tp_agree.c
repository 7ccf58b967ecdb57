// Per-rank agreement at start (see tp_agree.h).
#include "engine/tp_agree.h"

#include <stdlib.h>
#include <string.h>

#include "engine/engine_tp.h"
#include "engine/routes.h"

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}
#define FNV_SEED 14695981039346656037ull

static void append(char *buf, size_t cap, const char *fmt, const char *a, const char *b) {
    const size_t used = strlen(buf);
    if (used < cap) snprintf(buf + used, cap - used, fmt, a, b);
}

static void routes_str(fd_route *const *r, int n, char *buf, size_t cap) {
    buf[0] = 0;
    for (int i = 0; i < n; i++) append(buf, cap, i ? " %s=%s" : "%s=%s", r[i]->name, r[i]->values[*r[i]->sel]);
}

void tp_report_backend(fd_backend *be, const char *build, tp_rank_report *rep) {
    memset(rep, 0, sizeof *rep);
    snprintf(rep->build, sizeof rep->build, "%s %s act%d", build, be->name, be->act_bytes);
    if (be->lib_versions) be->lib_versions(be, rep->libs, sizeof rep->libs);
    else snprintf(rep->libs, sizeof rep->libs, "unknown");
    fd_route *r[FD_MAX_ROUTES];
    int n = 0;
    for (int i = 0; i < be->n_routes && n < FD_MAX_ROUTES; i++) r[n++] = &be->routes[i];
    routes_str(r, n, rep->routes, sizeof rep->routes);
}

// The configuration fields every shard copies from the full model, in a fixed text form (no struct padding).
static uint64_t config_digest(const fd_config *c) {
    char buf[1024];
    int len = snprintf(buf, sizeof buf, "%s|%s|%d|%d|%d|%d|%a|%d|%d|%d|%d|%a|%d|%d|%d|%d|%d|%d|%d|%d|%d|%d|%d|%d",
                       c->model_type, c->architecture, (int)c->arch, c->vocab_size, c->hidden_size, c->num_layers,
                       (double)c->rms_norm_eps, c->tie_word_embeddings, c->num_heads, c->num_kv_heads, c->head_dim,
                       (double)c->rope_theta, c->rotary_dim, c->gdn_num_k_heads, c->gdn_num_v_heads, c->gdn_k_dim,
                       c->gdn_v_dim, c->gdn_conv_kernel, c->num_experts, c->num_experts_per_tok,
                       c->moe_intermediate_size, c->shared_expert_intermediate_size, c->intermediate_size,
                       (int)c->quant.method);
    uint64_t h = fnv(FNV_SEED, buf, (size_t)len);
    for (int i = 0; i < c->num_layers; i++) {
        const int kind[2] = {(int)c->layer_kind[i], c->layer_is_moe[i]};
        h = fnv(h, kind, sizeof kind);
    }
    return h;
}

// A replicated tensor as the rank's backend holds it, read back (at most 4096 elements).
static uint64_t weight_sum(fd_backend *be, const fd_weight *w, uint64_t h) {
    if (!w->dev || w->fmt != FD_WFMT_DENSE) return fnv(h, "-", 1);
    const size_t es = fd_dtype_size(w->dev_dtype);
    int64_t n = w->rows * w->cols;
    if (n > 4096) n = 4096;
    void *host = fd_malloc((size_t)n * es + 1);
    be->to_host(be, host, w->dev, (size_t)n * es);
    h = fnv(h, host, (size_t)n * es);
    free(host);
    return h;
}

void tp_report_rank(fd_engine *e, int r, const char *build, tp_rank_report *rep) {
    fd_engine *q = engine_tp_rank(e, r);
    tp_report_backend(q->be, build, rep);
    fd_route *rt[FD_MAX_ROUTES];
    routes_str(rt, routes_list(q, rt), rep->routes, sizeof rep->routes);
    const fd_model *m = q->m;
    rep->has_model = 1;
    rep->config = config_digest(&m->cfg);
    const int L = m->plan.num_layers, sample[3] = {0, L / 2, L - 1};
    uint64_t h = weight_sum(q->be, &m->final_norm, FNV_SEED);
    for (int i = 0; i < 3; i++) {
        h = weight_sum(q->be, &m->layers[sample[i]].input_norm, h);
        h = weight_sum(q->be, &m->layers[sample[i]].post_norm, h);
    }
    rep->weights = h;
}

void tp_reports_inject(tp_rank_report *reps, int tp) {
    const char *v = getenv("FD_TP_TEST_DISAGREE");
    if (!v || !v[0]) return;
    const int r = atoi(v);
    if (r < 0 || r >= tp) return;
    if (reps[r].has_model) reps[r].weights ^= 1;
    else append(reps[r].routes, sizeof reps[r].routes, "%s%s", " injected=", "FD_TP_TEST_DISAGREE");
}

int tp_reports_compare(const tp_rank_report *reps, int tp, FILE *out, int verbose) {
    static const char *k_fields[5] = {"build", "libraries", "routes", "config", "weights"};
    int differ[5] = {0}, any = 0;
    for (int r = 1; r < tp; r++) {
        const tp_rank_report *a = &reps[0], *b = &reps[r];
        differ[0] |= strcmp(a->build, b->build) != 0;
        differ[1] |= strcmp(a->libs, b->libs) != 0;
        differ[2] |= strcmp(a->routes, b->routes) != 0;
        differ[3] |= a->config != b->config;
        differ[4] |= a->weights != b->weights;
    }
    for (int f = 0; f < 5; f++) any |= differ[f];
    if (!out || (!any && !verbose)) return any;
    fprintf(out, "tensor-parallel ranks (%d): %s", tp, any ? "DISAGREE on" : "agree");
    for (int f = 0; f < 5; f++)
        if (differ[f]) fprintf(out, " %s", k_fields[f]);
    fputc('\n', out);
    for (int r = 0; r < tp; r++) {
        const tp_rank_report *p = &reps[r];
        fprintf(out, "  rank %d: build %s | libraries %s", r, p->build, p->libs);
        if (p->has_model)
            fprintf(out, " | config %016llx | weights %016llx", (unsigned long long)p->config,
                    (unsigned long long)p->weights);
        fprintf(out, " | routes %s\n", p->routes);
    }
    return any;
}

int tp_agree(fd_engine *e, const char *build, FILE *out) {
    const int tp = engine_tp_size(e);
    tp_rank_report *reps = fd_calloc((size_t)tp, sizeof *reps);
    engine_tp_sync_routes(e);
    for (int r = 0; r < tp; r++) tp_report_rank(e, r, build, &reps[r]);
    tp_reports_inject(reps, tp);
    const int bad = tp_reports_compare(reps, tp, out, 0);
    free(reps);
    return bad;
}
