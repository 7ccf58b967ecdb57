// Trace backend (see trace.h). Every compute entry point is wrapped by TRACED(): sync, time, call, sync, time.
#include "engine/trace.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *name;
    double t0, dt; // seconds since the trace began
    int64_t n;     // rows / tokens / elements the op was called with; -1: a span around ops (trace_span)
} trace_event;

typedef struct {
    fd_backend pub; // what callers see; pub.impl points back to this struct
    fd_backend *in;
    trace_event *ev;
    int64_t n_ev, cap_ev;
    double origin;
} trace_be;

static trace_be *T(fd_backend *be) { return (trace_be *)be->impl; }
static fd_backend *IN(fd_backend *be) { return T(be)->in; }

static double begin(fd_backend *be) {
    IN(be)->sync(IN(be));
    return fd_time_s();
}

static void end(fd_backend *be, const char *name, double t0, int64_t n) {
    trace_be *t = T(be);
    t->in->sync(t->in);
    const double t1 = fd_time_s();
    if (t->n_ev == t->cap_ev) t->ev = fd_realloc(t->ev, sizeof(trace_event) * (size_t)(t->cap_ev = t->cap_ev ? 2 * t->cap_ev : 4096));
    t->ev[t->n_ev++] = (trace_event){name, t0 - t->origin, t1 - t0, n};
}

// ---- forwarding without timing: memory management ----
static void *tr_alloc(fd_backend *be, size_t b) { return IN(be)->alloc(IN(be), b); }
static void tr_free(fd_backend *be, void *p) { IN(be)->free(IN(be), p); }
static void tr_zero(fd_backend *be, void *p, size_t b) { IN(be)->zero(IN(be), p, b); }
static void tr_upload(fd_backend *be, fd_weight *w) { IN(be)->upload_weight(IN(be), w); }
static void tr_release(fd_backend *be, fd_weight *w) { IN(be)->release_weight(IN(be), w); }
static void tr_sync(fd_backend *be) { IN(be)->sync(IN(be)); }
static size_t tr_kvb(fd_backend *be, int Hkv, int hd) { return IN(be)->kv_bytes_per_token(IN(be), Hkv, hd); }
static void tr_destroy(fd_backend *be) {
    trace_be *t = T(be);
    t->in->destroy(t->in);
    free(t->ev);
    free(t);
}

// ---- timed ----
#define TRACED(name, n, call)                                                                                          \
    do {                                                                                                               \
        const double t0_ = begin(be);                                                                                  \
        call;                                                                                                          \
        end(be, name, t0_, n);                                                                                         \
    } while (0)

static void tr_to_device(fd_backend *be, void *d, const void *s, size_t b) {
    TRACED("to_device", (int64_t)b, IN(be)->to_device(IN(be), d, s, b));
}
static void tr_to_host(fd_backend *be, void *d, const void *s, size_t b) {
    TRACED("to_host", (int64_t)b, IN(be)->to_host(IN(be), d, s, b));
}
static void tr_copy(fd_backend *be, void *d, const void *s, size_t b) {
    TRACED("copy", (int64_t)b, IN(be)->copy(IN(be), d, s, b));
}
static void tr_embed(fd_backend *be, void *o, const fd_weight *t, const int32_t *ids, int n) {
    TRACED("embed", n, IN(be)->embed(IN(be), o, t, ids, n));
}
static void tr_rmsnorm(fd_backend *be, void *o, const void *x, const fd_weight *w, int64_t n, int d, float eps, int p1) {
    TRACED("rmsnorm", n, IN(be)->rmsnorm(IN(be), o, x, w, n, d, eps, p1));
}
static void tr_matmul(fd_backend *be, void *o, const void *x, const fd_weight *W, int n, int f32) {
    TRACED(W->name ? W->name : "matmul", n, IN(be)->matmul(IN(be), o, x, W, n, f32));
}
// One event for the group, named after its first weight (e.g. in_proj_qkv): the fused call cannot be timed per
// weight.
static void tr_matmul_multi(fd_backend *be, void *const o[], const fd_weight *const W[], int count, const void *x,
                            int n) {
    TRACED(W[0]->name ? W[0]->name : "matmul_multi", n, IN(be)->matmul_multi(IN(be), o, W, count, x, n));
}
static void tr_add(fd_backend *be, void *x, const void *y, int64_t c) { TRACED("add", c, IN(be)->add(IN(be), x, y, c)); }
static void tr_add_rmsnorm(fd_backend *be, void *o, void *x, const void *y, const fd_weight *w, int64_t n, int d,
                           float eps, int p1) {
    TRACED("add_rmsnorm", n, IN(be)->add_rmsnorm(IN(be), o, x, y, w, n, d, eps, p1));
}
static void tr_silu_mul(fd_backend *be, void *o, const void *g, const void *u, int64_t c) {
    TRACED("silu_mul", c, IN(be)->silu_mul(IN(be), o, g, u, c));
}
static void tr_sigmoid_mul(fd_backend *be, void *x, const void *g, int64_t c) {
    TRACED("sigmoid_mul", c, IN(be)->sigmoid_mul(IN(be), x, g, c));
}
static void tr_to_f32(fd_backend *be, float *o, const void *x, int64_t c) {
    TRACED("to_f32", c, IN(be)->to_f32(IN(be), o, x, c));
}
static void tr_copy_batch(fd_backend *be, void *const *d, const void *const *s, const size_t *b, int count) {
    TRACED("copy_batch", count, IN(be)->copy_batch(IN(be), d, s, b, count));
}
static void tr_copy_rows(fd_backend *be, void *d, size_t ds, const void *s, size_t ss, int64_t rows, size_t rb) {
    TRACED("copy_rows", rows, IN(be)->copy_rows(IN(be), d, ds, s, ss, rows, rb));
}
static void tr_split_qkvz(fd_backend *be, void *qkv, void *z, void *b, void *a, const void *qkvz, const void *ba, int n,
                          int Hk, int Hv, int dk, int dv) {
    TRACED("gdn_split_qkvz", n, IN(be)->gdn_split_qkvz(IN(be), qkv, z, b, a, qkvz, ba, n, Hk, Hv, dk, dv));
}
static void tr_conv(fd_backend *be, void *o, const void *x, const fd_weight *w, float *st, int n, int C, int K,
                    float *slots) {
    TRACED("conv1d_silu", n, IN(be)->conv1d_silu(IN(be), o, x, w, st, n, C, K, slots));
}
static void tr_gdn(fd_backend *be, fd_gdn_route r, void *o, const void *qkv, const void *b, const void *a,
                   const fd_weight *A, const fd_weight *dt, float *st, int n, int Hk, int Hv, int dk, int dv,
                   float *slots) {
    TRACED(r == FD_GDN_CHUNKED ? "gdn_core[chunked]" : "gdn_core[serial]", n,
           IN(be)->gdn_core(IN(be), r, o, qkv, b, a, A, dt, st, n, Hk, Hv, dk, dv, slots));
}
static void tr_gated_rmsnorm(fd_backend *be, void *o, const void *x, const void *z, const fd_weight *w, int64_t rows,
                             int dv, float eps) {
    TRACED("gated_rmsnorm", rows, IN(be)->gated_rmsnorm(IN(be), o, x, z, w, rows, dv, eps));
}
static void tr_split_q_gate(fd_backend *be, void *q, void *g, const void *qg, int n, int H, int hd) {
    TRACED("split_q_gate", n, IN(be)->split_q_gate(IN(be), q, g, qg, n, H, hd));
}
static void tr_rope(fd_backend *be, void *x, int n, int H, int hd, int rot, float theta, int64_t pos0,
                    const int64_t *pos_dev) {
    TRACED("rope", n, IN(be)->rope(IN(be), x, n, H, hd, rot, theta, pos0, pos_dev));
}
static void tr_qk_norm_rope(fd_backend *be, void *q, void *g, void *k, const void *qg, const fd_weight *qn,
                            const fd_weight *kn, int n, int H, int Hkv, int hd, int rot, float theta, float eps,
                            int64_t pos0, const int64_t *pos_dev) {
    TRACED("qk_norm_rope", n,
           IN(be)->qk_norm_rope(IN(be), q, g, k, qg, qn, kn, n, H, Hkv, hd, rot, theta, eps, pos0, pos_dev));
}
static void tr_kv_store(fd_backend *be, const fd_kv_view *c, const void *k, const void *v, int64_t pos0,
                        const int64_t *pos_dev, int n, int Hkv, int hd) {
    TRACED("kv_store", n, IN(be)->kv_store(IN(be), c, k, v, pos0, pos_dev, n, Hkv, hd));
}
static void tr_kv_copy(fd_backend *be, const fd_kv_view *d, int64_t dp, const fd_kv_view *s, int64_t sp, int64_t n,
                       int Hkv, int hd) {
    TRACED("kv_copy", n, IN(be)->kv_copy(IN(be), d, dp, s, sp, n, Hkv, hd));
}
static void tr_attention(fd_backend *be, void *o, const void *q, const fd_kv_view *c, int64_t pos0,
                         const int64_t *pos_dev, int n, int H, int Hkv, int hd, float scale, int causal) {
    TRACED(causal ? "attention" : "attention[noncausal]", pos0 + n,
           IN(be)->attention(IN(be), o, q, c, pos0, pos_dev, n, H, Hkv, hd, scale, causal));
}
static void tr_dyn_conv(fd_backend *be, void *o, const void *x, const float *dyn, int ds, const fd_weight *bw, int half,
                        int n, int d, int group, int K) {
    TRACED("dyn_conv", n, IN(be)->dyn_conv(IN(be), o, x, dyn, ds, bw, half, n, d, group, K));
}
static void tr_attention_window(fd_backend *be, void *o, const void *q, const fd_kv_view *c, int64_t pos0, int n, int H,
                                int Hkv, int hd, float scale, int window) {
    TRACED("attention[window]", pos0 + n,
           IN(be)->attention_window(IN(be), o, q, c, pos0, n, H, Hkv, hd, scale, window));
}
static void tr_argmax_rows(fd_backend *be, int32_t *o, const float *l, int rows, int V) {
    TRACED("argmax_rows", rows, IN(be)->argmax_rows(IN(be), o, l, rows, V));
}
static void tr_topk_rows(fd_backend *be, int32_t *ids, float *vals, const float *l, int rows, int V, int K) {
    TRACED("topk_rows", rows, IN(be)->topk_rows(IN(be), ids, vals, l, rows, V, K));
}
static void tr_sample_rows(fd_backend *be, int32_t *o, const float *l, int rows, int V, const fd_sample_params *p,
                           const double *u) {
    TRACED("sample_rows", rows, IN(be)->sample_rows(IN(be), o, l, rows, V, p, u));
}
static void tr_conv_tree(fd_backend *be, void *o, const void *x, const fd_weight *w, const float *st, int n, int C,
                         int K, float *slots, const int32_t *par) {
    TRACED("conv1d_silu[tree]", n, IN(be)->conv1d_silu_tree(IN(be), o, x, w, st, n, C, K, slots, par));
}
static void tr_gdn_tree(fd_backend *be, void *o, const void *qkv, const void *b, const void *a, const fd_weight *A,
                        const fd_weight *dt, const float *st, int n, int Hk, int Hv, int dk, int dv, float *slots,
                        const int32_t *par) {
    TRACED("gdn_core[tree]", n, IN(be)->gdn_core_tree(IN(be), o, qkv, b, a, A, dt, st, n, Hk, Hv, dk, dv, slots, par));
}
static void tr_gdn_readonly(fd_backend *be, void *o, const void *qkv, const void *b, const void *a, const fd_weight *A,
                            const fd_weight *dt, const float *st, int n, int Hk, int Hv, int dk, int dv) {
    TRACED("gdn_core[readonly]", n, IN(be)->gdn_core_readonly(IN(be), o, qkv, b, a, A, dt, st, n, Hk, Hv, dk, dv));
}
static void tr_attention_tree(fd_backend *be, void *o, const void *q, const fd_kv_view *c, int64_t pos0, int n, int H,
                              int Hkv, int hd, float scale, const int32_t *par) {
    TRACED("attention[tree]", pos0 + n, IN(be)->attention_tree(IN(be), o, q, c, pos0, n, H, Hkv, hd, scale, par));
}
static void tr_qk_norm_rope_tree(fd_backend *be, void *q, void *g, void *k, const void *qg, const fd_weight *qn,
                                 const fd_weight *kn, int n, int H, int Hkv, int hd, int rot, float theta, float eps,
                                 int64_t pos0, const int32_t *depth) {
    TRACED("qk_norm_rope[tree]", n,
           IN(be)->qk_norm_rope_tree(IN(be), q, g, k, qg, qn, kn, n, H, Hkv, hd, rot, theta, eps, pos0, depth));
}
static void tr_logsumexp_rows(fd_backend *be, float *o, const float *l, int rows, int V) {
    TRACED("logsumexp_rows", rows, IN(be)->logsumexp_rows(IN(be), o, l, rows, V));
}
static void tr_moe(fd_backend *be, void *o, const void *x, const fd_moe_weights *mw, int n, int d) {
    TRACED("moe", n, IN(be)->moe(IN(be), o, x, mw, n, d));
}

fd_backend *trace_wrap(fd_backend *inner) {
    trace_be *t = fd_calloc(1, sizeof *t);
    t->in = inner;
    t->origin = fd_time_s();
    fd_backend *be = &t->pub;
    *be = *inner; // names and sizes; every function pointer is replaced below
    be->impl = t;
    be->all_reduce = NULL; // a traced backend records one rank: it joins no tensor-parallel group
    be->group_join = NULL;
    be->alloc = tr_alloc;
    be->free = tr_free;
    be->zero = tr_zero;
    be->to_device = tr_to_device;
    be->to_host = tr_to_host;
    be->copy = tr_copy;
    if (inner->copy_batch) be->copy_batch = tr_copy_batch; // NULL stays NULL: the engine copies one at a time
    be->upload_weight = tr_upload;
    be->release_weight = tr_release;
    be->sync = tr_sync;
    be->destroy = tr_destroy;
    be->embed = tr_embed;
    be->rmsnorm = tr_rmsnorm;
    be->matmul = tr_matmul;
    be->matmul_multi = tr_matmul_multi;
    be->add = tr_add;
    be->add_rmsnorm = tr_add_rmsnorm;
    be->silu_mul = tr_silu_mul;
    be->sigmoid_mul = tr_sigmoid_mul;
    be->to_f32 = tr_to_f32;
    be->copy_rows = tr_copy_rows;
    be->gdn_split_qkvz = tr_split_qkvz;
    be->conv1d_silu = tr_conv;
    be->gdn_core = tr_gdn;
    be->gated_rmsnorm = tr_gated_rmsnorm;
    be->split_q_gate = tr_split_q_gate;
    be->rope = tr_rope;
    be->qk_norm_rope = tr_qk_norm_rope;
    be->kv_bytes_per_token = tr_kvb;
    be->kv_store = tr_kv_store;
    be->kv_copy = tr_kv_copy;
    be->attention = tr_attention;
    be->moe = tr_moe;
    // optional ops stay NULL where the wrapped backend lacks them (the engine checks for NULL)
    be->dyn_conv = inner->dyn_conv ? tr_dyn_conv : NULL;
    be->attention_window = inner->attention_window ? tr_attention_window : NULL;
    be->argmax_rows = tr_argmax_rows;
    be->topk_rows = inner->topk_rows ? tr_topk_rows : NULL;
    be->sample_rows = inner->sample_rows ? tr_sample_rows : NULL;
    be->logsumexp_rows = inner->logsumexp_rows ? tr_logsumexp_rows : NULL;
    be->conv1d_silu_tree = inner->conv1d_silu_tree ? tr_conv_tree : NULL;
    be->gdn_core_tree = inner->gdn_core_tree ? tr_gdn_tree : NULL;
    be->gdn_core_readonly = inner->gdn_core_readonly ? tr_gdn_readonly : NULL;
    be->attention_tree = inner->attention_tree ? tr_attention_tree : NULL;
    be->qk_norm_rope_tree = inner->qk_norm_rope_tree ? tr_qk_norm_rope_tree : NULL;
    // No recorded forwards under a trace: every op must run (and be timed) one by one, so the graphs route offers
    // only "off" on a traced backend.
    be->graph_begin = NULL;
    be->graph_end = NULL;
    be->graph_launch = NULL;
    be->graph_free = NULL;
    be->graph_generation = NULL;
    return be;
}

int trace_is_traced(const fd_backend *be) { return be->destroy == tr_destroy; }

void trace_span(fd_backend *be, const char *name, double t0, double t1) {
    if (!trace_is_traced(be)) return;
    trace_be *t = T(be);
    if (t->n_ev == t->cap_ev) t->ev = fd_realloc(t->ev, sizeof(trace_event) * (size_t)(t->cap_ev = t->cap_ev ? 2 * t->cap_ev : 4096));
    t->ev[t->n_ev++] = (trace_event){name, t0 - t->origin, t1 - t0, -1};
}

// Layer names like "model.layers.12.mlp.down_proj.weight" are kept whole in the trace; the summary groups by
// the part after the layer index so all layers of one kind add up.
static const char *op_kind(const char *name) {
    const char *p = strstr(name, "layers.");
    if (!p) return name;
    p += 7;
    while (*p >= '0' && *p <= '9') p++;
    return *p == '.' ? p + 1 : name;
}

int trace_write(const fd_backend *traced, const char *path) {
    const trace_be *t = (const trace_be *)traced->impl;
    FILE *f = fopen(path, "w");
    if (!f) return fd_error_set("cannot write trace %s", path);
    fprintf(f, "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n");
    fprintf(f, "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":1,\"args\":{\"name\":\"flashdelta %s\"}}", traced->name);
    for (int64_t i = 0; i < t->n_ev; i++) {
        const trace_event *e = &t->ev[i];
        fprintf(f, ",\n{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":1,\"tid\":1,\"ts\":%.3f,\"dur\":%.3f,"
                   "\"args\":{\"n\":%lld}}",
                e->name, op_kind(e->name), 1e6 * e->t0, 1e6 * e->dt, (long long)e->n);
    }
    fprintf(f, "\n]}\n");
    return fclose(f) ? fd_error_set("cannot write trace %s", path) : 0;
}

typedef struct {
    const char *kind;
    int64_t calls;
    double s;
} op_total;

static int by_time_desc(const void *a, const void *b) {
    const double x = ((const op_total *)a)->s, y = ((const op_total *)b)->s;
    return x < y ? 1 : x > y ? -1 : 0;
}

void trace_print_summary(const fd_backend *traced, FILE *f) {
    const trace_be *t = (const trace_be *)traced->impl;
    op_total *tot = fd_calloc((size_t)(t->n_ev + 1), sizeof *tot);
    int n = 0;
    double all = 0;
    int64_t n_ops = 0;
    for (int64_t i = 0; i < t->n_ev; i++) {
        if (t->ev[i].n < 0) continue; // spans contain ops: counting both would count the time twice
        n_ops++;
        const char *k = op_kind(t->ev[i].name);
        int j = 0;
        while (j < n && strcmp(tot[j].kind, k)) j++;
        if (j == n) tot[n++].kind = k;
        tot[j].calls++;
        tot[j].s += t->ev[i].dt;
        all += t->ev[i].dt;
    }
    qsort(tot, (size_t)n, sizeof *tot, by_time_desc);
    fprintf(f, "trace: %lld ops, %.3f ms in ops\n%-40s %8s %10s %6s\n", (long long)n_ops, 1e3 * all, "op", "calls",
            "ms", "share");
    for (int i = 0; i < n; i++)
        fprintf(f, "%-40s %8lld %10.3f %5.1f%%\n", tot[i].kind, (long long)tot[i].calls, 1e3 * tot[i].s,
                all > 0 ? 100.0 * tot[i].s / all : 0.0);
    free(tot);
}
