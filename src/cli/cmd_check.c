// `flashdelta check [MODEL_DIR | --random-weights CONFIG.json]`: the self-check of this machine's backend (see
// engine/check.h) at the model's shapes (or small built-in ones). Exit status 0 only when every screen is within its
// bound.
#include <stdlib.h>

#include "cli/cli.h"
#include "cli/session.h"
#include "engine/check.h"
#include "engine/engine_tp.h"
#include "engine/routes.h"

static const opt_id k_check_opts[] = {O_MODEL, O_RANDOM_WEIGHTS, O_BACKEND, O_THREADS, O_ROUTE, O_TP, O_COUNT};
const cmd_spec cmd_check_spec = {"check", "[MODEL_DIR | --random-weights CONFIG.json] [--tp N]",
                                 "float64 screens of this backend's ops (GEMM, GDN chunked and serial, attention "
                                 "prefill and decode) at the model's shapes, and determinism; with --tp N also the "
                                 "ranks' agreement (build, libraries, routes) and the group's all-reduce on every "
                                 "rank (cuda: device r, NCCL); exit 0 only if all pass",
                                 k_check_opts, NULL};

int cmd_check(int argc, char **argv) {
    cli_opts o;
    int done, rc = cli_parse(&cmd_check_spec, argc, argv, &o, 0, &done);
    if (rc || done) return rc;
    fd_config cfg;
    const fd_config *pc = NULL;
    if (o.model_dir || o.random_cfg) {
        size_t len = 0;
        char *text = o.random_cfg ? fd_read_file(o.random_cfg, &len) : NULL;
        rc = o.random_cfg ? (text ? cfg_parse(text, o.random_cfg, &cfg) : fd_error_set("cannot read %s", o.random_cfg))
                          : cfg_load_dir(o.model_dir, &cfg);
        free(text);
        if (rc) {
            fprintf(stderr, "flashdelta: error: %s\n", fd_error_msg());
            return 2;
        }
        pc = &cfg;
    }
    if (cli_check_tp_devices(&o)) return 2;
    const int ranks = o.tp ? o.tp : 1; // rank r: its own backend (cuda: device r), the routes preset on each
    fd_backend *bes[FD_TP_MAX] = {0};
    for (int r = 0; r < ranks; r++) {
        bes[r] = cli_make_backend(o.backend, o.threads, r);
        if (!bes[r] || routes_backend_preset(bes[r], o.route_specs, o.n_routes)) {
            if (bes[r]) fprintf(stderr, "flashdelta: error: %s\n", fd_error_msg());
            for (int q = 0; q <= r; q++)
                if (bes[q]) bes[q]->destroy(bes[q]);
            return 2;
        }
    }
    const int failed = fd_check_run_ranks(bes, o.tp, pc, stdout);
    for (int r = 0; r < ranks; r++) bes[r]->destroy(bes[r]);
    if (failed < 0) {
        fprintf(stderr, "flashdelta: error: %s\n", fd_error_msg());
        return 2;
    }
    return failed ? 1 : 0;
}
