// `flashdelta bench`: cold prefill, pure decode and DFlash rounds (ORACLE drafter) at several context lengths, with
// roofline ratios and the route check.
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/session.h"
#include "engine/engine_graphs.h"
#include "engine/routes.h"

static const char *bench_why_not(opt_id id) {
    switch (id) {
    case O_TRACE:
        return "bench does not run traced (tracing synchronises every op); use --trace with generate or logits";
    case O_IDS:
    case O_PROMPT:
        return "bench makes its own prompts (--contexts)";
    default:
        return NULL;
    }
}
static const opt_id k_bench_opts[] = {O_MODEL,    O_RANDOM_WEIGHTS, O_DRAFT,         O_DRAFT_RANDOM, O_BLOCK_SIZE,
                                      O_TREE_BUDGET, O_CONTEXTS, O_DECODE_TOKENS,  O_ORACLE_TAU,    O_GEMM_CEILING, O_COPY_CEILING,
                                      O_JSON,     O_SEED,           O_TP,            CLI_ENGINE_OPTS, O_COUNT};
const cmd_spec cmd_bench_spec = {
    "bench", "(MODEL_DIR | --random-weights CONFIG.json)",
    "cold prefill tok/s, decode tok/s, roofline ratios, determinism and (with a drafter) DFlash rounds of the ORACLE "
    "drafter at each context",
    k_bench_opts, bench_why_not};

// bench: cold prefill, pure decode and DFlash rounds (oracle drafter) at several context lengths.
int cmd_bench(int argc, char **argv) {
    cli_opts o;
    int done, rc = cli_parse(&cmd_bench_spec, argc, argv, &o, 1, &done);
    if (rc || done) return rc;
    int64_t cap = 0;
    for (int i = 0; i < o.bench.n_ctx; i++) cap = o.bench.ctx[i] > cap ? o.bench.ctx[i] : cap;
    cap += o.bench.decode_tokens + 3 * FD_SPEC_MAX_BLOCK + 8; // decode, the oracle reference, a verify block
    if (!o.ctx) o.ctx = cap;
    if (o.prefill_chunk)
        o.bench.prefill_chunk = o.prefill_chunk;
    else
        o.prefill_chunk = o.bench.prefill_chunk;
    session s;
    double t0 = fd_time_s();
    if ((rc = session_open(&s, &o, cap))) return rc;
    const int on_gpu = !strcmp(s.be->name, "cuda");
    // Ceilings measured on the H200 this project benchmarks on (README): cuBLAS bf16 GEMM and device copy.
    if (o.bench.gemm_ceiling < 0) o.bench.gemm_ceiling = on_gpu ? 709e12 : 0;
    if (o.bench.copy_ceiling < 0) o.bench.copy_ceiling = on_gpu ? 4.25e12 : 0;
    fprintf(stderr, "bench: %s%s, %.2f B parameters, backend %s, set up in %.1f s\n",
            o.random_cfg ? "random weights from " : "", o.random_cfg ? o.random_cfg : o.model_dir,
            (double)s.model.n_params / 1e9, s.be->name, fd_time_s() - t0);
    if (s.has_draft)
        fprintf(stderr,
                "bench: DFlash drafter %s (%s), block %d; rounds use the ORACLE drafter with forced acceptance "
                "at tau %.2f\n",
                o.draft_random ? o.draft_random : o.draft_dir, o.draft_random ? "random weights" : "checkpoint",
                s.spec.B, o.bench.oracle_tau);
    fd_bench_row rows[FD_BENCH_MAX_CTX];
    rc = bench_run(&s.eng, s.has_draft ? &s.spec : NULL, &o.bench, rows);
    if (rc) {
        fprintf(stderr, "flashdelta: error: %s\n", fd_error_msg());
    } else {
        printf("flashdelta bench: %s, backend %s, prefill budget %d, %d decode tokens%s\n",
               o.random_cfg ? o.random_cfg : o.model_dir, s.be->name, o.bench.prefill_chunk, o.bench.decode_tokens,
               s.has_draft ? ", DFlash columns from the ORACLE drafter (forced acceptance)" : "");
        bench_print(&o.bench, rows, o.bench.n_ctx, stdout);
        // one table per tensor-parallel rank (a plain engine is its own rank 0)
        const int tp = engine_tp_size(&s.eng);
        int bad = 0;
        for (int r = 0; r < tp; r++) {
            if (tp > 1) printf("rank %d of %d: ", r, tp);
            routes_print_hits(engine_tp_rank(&s.eng, r), stdout);
            if (!bad) bad = routes_verify(engine_tp_rank(&s.eng, r)); // the bench measured the routes it names
        }
        engine_graphs_print(engine_tp_rank(&s.eng, 0), stdout);
        if (bad) {
            fprintf(stderr, "flashdelta: error: %s\n", fd_error_msg());
            rc = 1;
        } else {
            printf("route check: every counted call ran its selected route\n");
        }
        if (o.json_out &&
            bench_write_json(o.json_out, o.random_cfg ? o.random_cfg : o.model_dir, &o.bench, rows, o.bench.n_ctx)) {
            fprintf(stderr, "flashdelta: error: %s\n", fd_error_msg());
            rc = 1;
        }
    }
    session_close(&s);
    return rc ? 1 : 0;
}
