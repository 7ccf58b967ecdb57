// The benchmark (see bench.h). Timings are wall-clock around synchronised backend work; each phase starts
// from the same post-prefill state (restored from a snapshot), so decode, its repeat and the DFlash rounds
// see identical inputs.
#include "engine/bench.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine_state.h"
#include "engine/engine_tp.h"

// Bytes a decode step reads of a weight: as stored for quantized formats (data and scales), 2 per element for
// dense matrices (the GPU holds them in bf16).
static double weight_bytes(const fd_weight *w) {
    if (!w->data) return 0.0;
    return w->fmt == FD_WFMT_DENSE ? (double)w->rows * w->cols * 2.0 : (double)fd_weight_bytes(w);
}
static double weight_params(const fd_weight *w) { return w->data ? (double)w->rows * w->cols : 0.0; }

void bench_count(const fd_model *m, int64_t ctx, double *prefill_flops, double *decode_bytes) {
    const fd_config *c = &m->cfg;
    double dense = 0, active_experts = 0, attn_kv = 0, gdn_state = 0, gdn_flops_tok = 0, params_tok = 0;
    for (int i = 0; i < c->num_layers; i++) {
        const fd_layer *L = &m->layers[i];
        const fd_weight *ws[] = {&L->in_qkvz, &L->in_ba,  &L->in_qkv,    &L->in_z,    &L->in_b,      &L->in_a,
                                 &L->out_proj, &L->q_proj, &L->k_proj,    &L->v_proj,  &L->o_proj,    &L->gate_proj,
                                 &L->up_proj,  &L->down_proj, &L->router, &L->sh_gate, &L->sh_up,     &L->sh_down};
        for (size_t j = 0; j < sizeof ws / sizeof ws[0]; j++) {
            dense += weight_bytes(ws[j]);
            params_tok += weight_params(ws[j]);
        }
        if (L->is_moe && c->num_experts) { // top-k of the experts per token
            active_experts += (double)c->num_experts_per_tok *
                              (weight_bytes(&L->ex_gate[0]) + weight_bytes(&L->ex_up[0]) + weight_bytes(&L->ex_down[0]));
            params_tok += (double)c->num_experts_per_tok * (weight_params(&L->ex_gate[0]) +
                                                             weight_params(&L->ex_up[0]) + weight_params(&L->ex_down[0]));
        }
        if (L->kind == FD_LAYER_ATTN) {
            attn_kv += 2.0 * c->num_kv_heads * c->head_dim * 2.0; // bf16 K and V per token
        } else {
            const double dk = c->gdn_k_dim, dv = c->gdn_v_dim, Hv = c->gdn_num_v_heads;
            gdn_state += 2.0 * Hv * dk * dv * 4.0; // fp32 state read and written
            gdn_flops_tok += Hv * 2.0 * (3.0 * dk * dv + 64.0 * (2.0 * dk + dv)); // chunked form, chunk 64
        }
    }
    int n_attn = 0;
    for (int i = 0; i < c->num_layers; i++) n_attn += c->layer_kind[i] == FD_LAYER_ATTN;
    // causal attention: QK^T and PV over ctx(ctx+1)/2 pairs per head
    const double attn_flops = (double)n_attn * 4.0 * c->num_heads * c->head_dim * ((double)ctx * (ctx + 1) / 2.0);
    *prefill_flops = 2.0 * params_tok * (double)ctx + gdn_flops_tok * (double)ctx + attn_flops +
                     2.0 * (double)c->hidden_size * c->vocab_size; // the LM head for the last position
    *decode_bytes = dense + active_experts + weight_bytes(&m->lm_head) + attn_kv * (double)ctx + gdn_state;
}

static void sync(fd_engine *e) { e->be->sync(e->be); }

// Oracle schedule whose mean accepted count is tau - 1 (capped by the block).
static void oracle_schedule(double tau, int B, int *sched, int n) {
    const double a = tau - 1.0;
    for (int r = 0; r < n; r++) {
        int k = (int)floor((r + 1) * a) - (int)floor(r * a);
        sched[r] = k < 0 ? 0 : (k > B - 1 ? B - 1 : k);
    }
}

// Greedy steps with the argmax on the backend (4 bytes per token back to the host, as a server's greedy decode).
static int decode_steps(fd_engine *e, int32_t first, int n, int32_t *out) {
    int32_t tok = first;
    for (int i = 0; i < n; i++) {
        FD_TRY(engine_forward_greedy(e, &tok, 1, &out[i]));
        tok = out[i];
    }
    return 0;
}

// Full DFlash blocks with the oracle drafter (forced acceptance at tau) until about D tokens are out (the reference
// covers one more block); *seconds is the wall time of the rounds, one sync per round (s->phase_sync).
static int oracle_rounds(fd_engine *e, fd_dflash *s, double tau, int32_t *ref, int n_ref, int32_t anchor, int D,
                         int64_t *produced_out, double *seconds) {
    const int B = s->B;
    int sched[64];
    oracle_schedule(tau, B, sched, 64);
    fd_spec_oracle orc = {ref, n_ref, sched, 64, 1}; // forced acceptance: tau exact (see dflash.h)
    s->oracle = &orc;
    s->phase_sync = 1; // one sync per round (~10 us) so the commit's device time is its own phase
    int64_t produced = 1;
    int32_t tok = anchor, emitted[FD_SPEC_MAX_BLOCK];
    int rc = 0;
    sync(e);
    const double t0 = fd_time_s();
    while (rc == 0 && produced < D + 1 && produced + B <= n_ref) {
        int got;
        rc = dflash_round(s, tok, B, NULL, produced, emitted, &got);
        produced += got;
        tok = emitted[got - 1];
    }
    sync(e);
    *seconds = fd_time_s() - t0;
    s->oracle = NULL;
    s->phase_sync = 0;
    *produced_out = produced;
    return rc;
}

int bench_run(fd_engine *e, fd_dflash *s, const fd_bench_opts *o, fd_bench_row *rows) {
    const int V = e->m->cfg.vocab_size, D = o->decode_tokens;
    es_parts snap = {0}; // the post-prefill state (under --tp every rank's, each on its own device)
    float *logits = fd_malloc((size_t)V * sizeof(float));
    // The oracle's reference continuation runs past the timed decode so every measured round is a full block.
    const int B = s ? s->B : 0, n_ref = D + 2 * B + 1;
    int32_t *ref = fd_malloc(sizeof(int32_t) * (size_t)(n_ref + 1)), *again = fd_malloc(sizeof(int32_t) * (size_t)(D + 1));
    int rc = 0;
    for (int ci = 0; rc == 0 && ci < o->n_ctx; ci++) {
        fd_bench_row *r = &rows[ci];
        memset(r, 0, sizeof *r);
        const int64_t L = o->ctx[ci];
        r->ctx = L;
        if (L + n_ref + B + 1 > e->opt.capacity) {
            rc = fd_error_set("context %lld + %d decode tokens exceeds the capacity %lld (--capacity)", (long long)L, D,
                              (long long)e->opt.capacity);
            break;
        }
        int32_t *ids = fd_malloc(sizeof(int32_t) * (size_t)L);
        uint64_t st = o->seed ^ (uint64_t)L;
        for (int64_t i = 0; i < L; i++) {
            st = st * 6364136223846793005ull + 1442695040888963407ull;
            ids[i] = (int32_t)((st >> 33) % (uint64_t)V);
        }
        // cold prefill: fresh sequence state
        engine_reset(e);
        if (s) dflash_reset(s);
        const int64_t before = e->tokens_computed;
        int32_t anchor = 0;
        sync(e);
        double t0 = fd_time_s();
        if (s) {
            rc = dflash_prefill(s, ids, L, o->prefill_chunk, NULL, &anchor);
        } else {
            rc = engine_prefill(e, ids, L, o->prefill_chunk, logits, 0);
            anchor = engine_argmax(logits, V);
        }
        sync(e);
        r->prefill_s = fd_time_s() - t0;
        free(ids);
        if (rc) break;
        r->computed = e->tokens_computed - before;
        if (r->computed != L) {
            rc = fd_error_set("computed %lld prefill tokens for a %lld-token prompt", (long long)r->computed,
                              (long long)L);
            break;
        }
        double flops, bytes;
        bench_count(e->m, L, &flops, &bytes);
        r->prefill_tok_s = (double)L / r->prefill_s;
        r->prefill_tflops = flops / r->prefill_s / 1e12;
        r->prefill_roof = o->gemm_ceiling > 0 ? flops / r->prefill_s / o->gemm_ceiling : NAN;
        fprintf(stderr, "bench: ctx %lld: prefill %.2f s (%.0f tok/s)\n", (long long)L, r->prefill_s, r->prefill_tok_s);
        es_snap_save(e, &snap);
        const int64_t draft_ctx = s ? s->n_ctx : 0;
        // Pure decode twice from the snapshot: the first run (untimed) gives the reference ids and warms what a
        // first call pays once (lazy module loads, graph recordings); the second, timed, must repeat it exactly.
        ref[0] = anchor;
        if ((rc = decode_steps(e, anchor, D, ref + 1))) break;
        if (s && (rc = decode_steps(e, ref[D], n_ref - 1 - D, ref + D + 1))) break; // the oracle's continuation
        es_snap_load(e, &snap);
        e->n_past = L;
        const fd_engine *ge = engine_tp_rank(e, 0); // under --tp the ranks' engines run the forwards (and graphs)
        const fd_graph_stats gs0 = ge->graph_stats;
        sync(e);
        t0 = fd_time_s();
        if ((rc = decode_steps(e, anchor, D, again))) break;
        sync(e);
        const double dt = fd_time_s() - t0;
        r->graphs = e->routes[FD_ROUTE_GRAPHS].values[e->graphs_sel];
        r->decode_graph_replays = ge->graph_stats.replayed - gs0.replayed;
        r->decode_graph_recordings = ge->graph_stats.recorded - gs0.recorded;
        r->decode_tok_s = D / dt;
        bench_count(e->m, L + D / 2, &flops, &bytes);
        r->decode_gbs = bytes * D / dt / 1e9;
        r->decode_roof = o->copy_ceiling > 0 ? bytes * D / dt / o->copy_ceiling : NAN;
        r->deterministic = !memcmp(again, ref + 1, sizeof(int32_t) * (size_t)D);
        fprintf(stderr, "bench: ctx %lld: decode %.1f tok/s%s (graphs=%s: %lld replays, %lld recordings in %d steps)\n",
                (long long)L, r->decode_tok_s, r->deterministic ? "" : " (NOT deterministic)", r->graphs,
                (long long)r->decode_graph_replays, (long long)r->decode_graph_recordings, D);
        if (!s) continue;
        // DFlash rounds with the oracle drafter proposing the target's own continuation: once untimed (the drafter's
        // first launches, the verify's graph recording), then timed from the same snapshot
        double ts = 0;
        int64_t produced = 1;
        for (int pass = 0; rc == 0 && pass < 2; pass++) {
            es_snap_load(e, &snap);
            e->n_past = L;
            s->n_ctx = draft_ctx;
            memset(&s->st, 0, sizeof s->st);
            rc = oracle_rounds(e, s, o->oracle_tau, ref, n_ref, anchor, D, &produced, &ts);
        }
        if (rc) break;
        r->has_spec = 1;
        r->round_ms = 1e3 * ts / (double)s->st.rounds;
        r->accepted_per_round = (double)s->st.accepted / (double)s->st.rounds;
        r->emitted_per_round = (double)s->st.emitted / (double)s->st.rounds;
        r->spec_tok_s = (double)(produced - 1) / ts;
        const double per = 1e3 / (double)s->st.rounds;
        r->round_draft_ms = per * s->st.draft_s, r->round_verify_ms = per * s->st.verify_s;
        r->round_accept_ms = per * s->st.accept_s, r->round_commit_ms = per * s->st.commit_s;
        // every round of a run verifies the same way (the route is fixed for the run): a tree round counts its
        // nodes besides the root in draft_tokens, a chain round its B - 1 drafts
        r->spec_verify = s->st.tree_rounds ? "tree" : "chain";
        r->tree_budget = s->st.tree_rounds ? s->tree_budget : 0;
        r->nodes_per_round = (double)s->st.draft_tokens / (double)s->st.rounds + 1.0;
        fprintf(stderr,
                "bench: ctx %lld: dflash (oracle) %s round %.2f ms, %.2f tokens/round, %.1f rows verified/round (draft "
                "%.2f, verify %.2f, accept %.2f, commit %.2f ms)\n",
                (long long)L, r->spec_verify, r->round_ms, r->emitted_per_round, r->nodes_per_round,
                r->round_draft_ms, r->round_verify_ms, r->round_accept_ms, r->round_commit_ms);
    }
    es_parts_free(&snap);
    free(logits);
    free(ref);
    free(again);
    return rc;
}

static void fmt_ratio(char *buf, size_t n, double x) {
    if (isnan(x)) snprintf(buf, n, "n/a");
    else snprintf(buf, n, "%.1f%%", 100.0 * x);
}

void bench_print(const fd_bench_opts *o, const fd_bench_row *rows, int n, FILE *f) {
    (void)o;
    fprintf(f, "\n%8s %12s %9s %8s %8s %12s %8s %8s %6s | %9s %9s %9s %12s %9s\n", "ctx", "prefill t/s", "prefill s",
            "TFLOP/s", "roof", "decode t/s", "GB/s", "roof", "det", "round ms", "acc/rnd", "emit/rnd", "spec t/s",
            "rows/rnd");
    for (int i = 0; i < n; i++) {
        const fd_bench_row *r = &rows[i];
        char pr[16], dr[16];
        fmt_ratio(pr, sizeof pr, r->prefill_roof);
        fmt_ratio(dr, sizeof dr, r->decode_roof);
        fprintf(f, "%8lld %12.0f %9.2f %8.1f %8s %12.1f %8.1f %8s %6s", (long long)r->ctx, r->prefill_tok_s,
                r->prefill_s, r->prefill_tflops, pr, r->decode_tok_s, r->decode_gbs, dr, r->deterministic ? "yes" : "NO");
        if (r->has_spec)
            fprintf(f, " | %9.2f %9.2f %9.2f %12.1f %9.1f\n", r->round_ms, r->accepted_per_round,
                    r->emitted_per_round, r->spec_tok_s, r->nodes_per_round);
        else
            fprintf(f, " | %9s %9s %9s %12s %9s\n", "-", "-", "-", "-", "-");
    }
    int any = 0;
    for (int i = 0; i < n; i++) any |= rows[i].has_spec;
    if (!any) return;
    for (int i = 0; i < n; i++)
        if (rows[i].has_spec) {
            if (rows[i].tree_budget)
                fprintf(f, "DFlash rounds verify a tree (spec_verify=tree, budget %d draft nodes): rows/rnd = the "
                           "tree's nodes with the root\n",
                        rows[i].tree_budget);
            else
                fprintf(f, "DFlash rounds verify the chain (spec_verify=chain): rows/rnd = the block\n");
            break;
        }
    // the round's phases (host clock, the round waiting for its commit): draft forward + its ids, verify forward +
    // its ids (greedy) or logits, acceptance on the host, state commit + drafter context; "other" is the rest
    fprintf(f, "\n%8s | %9s %9s %9s %9s %9s %9s\n", "ctx", "round ms", "draft", "verify", "accept", "commit", "other");
    for (int i = 0; i < n; i++) {
        const fd_bench_row *r = &rows[i];
        if (!r->has_spec) continue;
        const double other =
            r->round_ms - r->round_draft_ms - r->round_verify_ms - r->round_accept_ms - r->round_commit_ms;
        fprintf(f, "%8lld | %9.2f %9.2f %9.2f %9.2f %9.2f %9.2f\n", (long long)r->ctx, r->round_ms, r->round_draft_ms,
                r->round_verify_ms, r->round_accept_ms, r->round_commit_ms, other);
    }
}

int bench_write_json(const char *path, const char *what, const fd_bench_opts *o, const fd_bench_row *rows, int n) {
    json_t *root = json_object(), *arr = json_array();
    json_object_set_new(root, "what", json_string(what));
    json_object_set_new(root, "decode_tokens", json_integer(o->decode_tokens));
    json_object_set_new(root, "prefill_chunk", json_integer(o->prefill_chunk));
    json_object_set_new(root, "oracle_tau", json_real(o->oracle_tau));
    json_object_set_new(root, "gemm_ceiling_flops", json_real(o->gemm_ceiling));
    json_object_set_new(root, "copy_ceiling_bytes", json_real(o->copy_ceiling));
    for (int i = 0; i < n; i++) {
        const fd_bench_row *r = &rows[i];
        json_t *row = json_object();
        json_object_set_new(row, "ctx", json_integer(r->ctx));
        json_object_set_new(row, "computed_prefill_tokens", json_integer(r->computed));
        json_object_set_new(row, "prefill_s", json_real(r->prefill_s));
        json_object_set_new(row, "prefill_tok_s", json_real(r->prefill_tok_s));
        json_object_set_new(row, "prefill_tflops", json_real(r->prefill_tflops));
        if (!isnan(r->prefill_roof)) json_object_set_new(row, "prefill_roofline", json_real(r->prefill_roof));
        json_object_set_new(row, "decode_tok_s", json_real(r->decode_tok_s));
        json_object_set_new(row, "decode_gb_s", json_real(r->decode_gbs));
        if (!isnan(r->decode_roof)) json_object_set_new(row, "decode_roofline", json_real(r->decode_roof));
        json_object_set_new(row, "deterministic", json_boolean(r->deterministic));
        if (r->graphs) json_object_set_new(row, "graphs", json_string(r->graphs));
        json_object_set_new(row, "decode_graph_replays", json_integer(r->decode_graph_replays));
        json_object_set_new(row, "decode_graph_recordings", json_integer(r->decode_graph_recordings));
        if (r->has_spec) {
            json_object_set_new(row, "round_ms", json_real(r->round_ms));
            json_object_set_new(row, "accepted_drafts_per_round", json_real(r->accepted_per_round));
            json_object_set_new(row, "emitted_tokens_per_round", json_real(r->emitted_per_round));
            json_object_set_new(row, "spec_decode_tok_s", json_real(r->spec_tok_s));
            json_t *ph = json_object();
            json_object_set_new(ph, "draft", json_real(r->round_draft_ms));
            json_object_set_new(ph, "verify", json_real(r->round_verify_ms));
            json_object_set_new(ph, "accept", json_real(r->round_accept_ms));
            json_object_set_new(ph, "commit", json_real(r->round_commit_ms));
            json_object_set_new(row, "round_phases_ms", ph);
            json_object_set_new(row, "spec_verify", json_string(r->spec_verify));
            if (r->tree_budget) json_object_set_new(row, "tree_budget", json_integer(r->tree_budget));
            json_object_set_new(row, "verified_rows_per_round", json_real(r->nodes_per_round));
        }
        json_array_append_new(arr, row);
    }
    json_object_set_new(root, "rows", arr);
    int rc = json_dump_file(root, path, JSON_INDENT(1));
    json_decref(root);
    return rc ? fd_error_set("cannot write %s", path) : 0;
}
