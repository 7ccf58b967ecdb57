// `flashdelta bench`: cold prefill, pure decode and (with a drafter) the DFlash round at several context lengths,
// with the computed-prefill check, a determinism check and roofline ratios.
#ifndef FD_BENCH_H
#define FD_BENCH_H
#include "engine/dflash.h"

#define FD_BENCH_MAX_CTX 16

typedef struct {
    int64_t ctx[FD_BENCH_MAX_CTX];
    int n_ctx;
    int decode_tokens;   // pure-decode steps per context
    int prefill_chunk;   // token budget per forward
    double oracle_tau;   // emitted tokens/round the oracle drafter aims at (with a drafter)
    double gemm_ceiling; // FLOP/s for the prefill roofline ratio (0 = not reported)
    double copy_ceiling; // bytes/s for the decode roofline ratio (0 = not reported)
    uint64_t seed;
} fd_bench_opts;

typedef struct {
    int64_t ctx, computed;
    double prefill_s, prefill_tok_s, prefill_tflops, prefill_roof;
    double decode_tok_s, decode_gbs, decode_roof;
    int deterministic;
    const char *graphs;             // route graphs during the timed decode (on | off)
    int64_t decode_graph_replays;   // graph launches during the timed decode (0 with graphs off)
    int64_t decode_graph_recordings; // recordings made during it (1 on the first context, 0 after)
    int has_spec;
    double round_ms, accepted_per_round, emitted_per_round, spec_tok_s;
    // where a round's time goes (fd_spec_stats, per round; the rounds wait for their commit): draft, verify,
    // accept, commit; round_ms less their sum is the host work between rounds
    double round_draft_ms, round_verify_ms, round_accept_ms, round_commit_ms;
    // what a round verified (route spec_verify): "chain" (B rows) or "tree" (its nodes, the root included, under
    // --tree-budget), and the rows verified per round
    const char *spec_verify;
    int tree_budget;
    double nodes_per_round;
} fd_bench_row;

// Runs every context length; s may be NULL (no drafter). Prints one progress line per phase to stderr.
int bench_run(fd_engine *e, fd_dflash *s, const fd_bench_opts *o, fd_bench_row *rows);
void bench_print(const fd_bench_opts *o, const fd_bench_row *rows, int n, FILE *f);
int bench_write_json(const char *path, const char *what, const fd_bench_opts *o, const fd_bench_row *rows, int n);
// Work per context: prefill FLOPs for ctx tokens, bytes read+written by one decode step at ctx.
void bench_count(const fd_model *m, int64_t ctx, double *prefill_flops, double *decode_bytes);
#endif
