// Per-rank agreement of a tensor-parallel group at start (issue 17): every rank reports the build it runs, its
// backend's kernel libraries (backend.h lib_versions), the routes in force, a digest of the model configuration
// and a checksum of a sample of its weights; ranks that disagree on any of them must not run together (a rank on
// another library, a forced route on one rank, a corrupt upload would give wrong or diverging results silently),
// so the command refuses to start (exit 2) and prints the table.
//
// The weight sample is each rank's own device copy of replicated tensors (the final norm and the norms of the
// first, middle and last layers, read back from the rank's backend), so the comparison is rank-independent by
// construction: every rank must hold the same bits. A checksum of the full-model tensors the shards were cut from
// could not disagree inside one process (every shard is sliced from the one host copy); what can is the upload.
//
// FD_TP_TEST_DISAGREE=<rank> (tests only) perturbs that rank's report (its weight checksum; with no model, its
// routes) so the refusal path is exercised without a broken build.
#ifndef FD_ENGINE_TP_AGREE_H
#define FD_ENGINE_TP_AGREE_H
#include <stdio.h>

#include "engine/engine.h"

typedef struct {
    char build[96];
    char libs[256];
    char routes[768];
    int has_model;         // config and weights below are set
    uint64_t config, weights;
} tp_rank_report;

// A backend's part (no model): build id as given, libraries, the backend's own routes.
void tp_report_backend(fd_backend *be, const char *build, tp_rank_report *rep);
// Rank r of engine e (a leader; a plain engine is its own rank 0): the backend part with the rank engine's routes
// (engine and backend), the configuration digest and the weight sample of the rank's shard.
void tp_report_rank(fd_engine *e, int r, const char *build, tp_rank_report *rep);
// Applies FD_TP_TEST_DISAGREE to reps[0..tp).
void tp_reports_inject(tp_rank_report *reps, int tp);
// 0 when every field of every rank equals rank 0's; else 1, and the table (every rank, the fields that differ
// named) is printed to out (NULL: nothing printed). verbose: the table is printed even when the ranks agree.
int tp_reports_compare(const tp_rank_report *reps, int tp, FILE *out, int verbose);
// The whole check of a tensor-parallel leader: reports of every rank, injection, comparison. 0 agree, 1 not.
int tp_agree(fd_engine *e, const char *build, FILE *out);
#endif
