// `flashdelta check [MODEL_DIR | --random-weights CONFIG.json]`: the self-check of this machine's backend (see
// engine/check.h) at the model's shapes (or small built-in ones). Exit status 0 only when every screen is within its
// bound.
#include <stdlib.h>

#include "cli/cli.h"
#include "cli/session.h"
#include "engine/check.h"
#include "engine/routes.h"

static const opt_id k_check_opts[] = {O_MODEL, O_RANDOM_WEIGHTS, O_BACKEND, O_THREADS, O_ROUTE, O_COUNT};
const cmd_spec cmd_check_spec = {"check", "[MODEL_DIR | --random-weights CONFIG.json]",
                                 "float64 screens of this backend's ops (GEMM, GDN chunked and serial, attention "
                                 "prefill and decode) at the model's shapes, and determinism; exit 0 only if all pass",
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
    fd_backend *be = cli_make_backend(o.backend, o.threads, 0);
    if (!be) return 2;
    if (routes_backend_preset(be, o.route_specs, o.n_routes)) {
        fprintf(stderr, "flashdelta: error: %s\n", fd_error_msg());
        be->destroy(be);
        return 2;
    }
    const int failed = fd_check_run(be, pc, stdout);
    be->destroy(be);
    if (failed < 0) {
        fprintf(stderr, "flashdelta: error: %s\n", fd_error_msg());
        return 2;
    }
    return failed ? 1 : 0;
}
