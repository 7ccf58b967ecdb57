// `flashdelta serve [MODEL_DIR | --model DIR] [options]`: the OpenAI-compatible server (src/server,
// docs/server.md). The vLLM / llama.cpp names of the same settings work too (--served-model-name, --max-num-seqs /
// -np, --max-model-len / -c, -m). Without --ctx the context is the model's max_position_embeddings, capped by the
// KV budget.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "model/config.h"
#include "server/server.h"

static const char *serve_why_not(opt_id id) {
    switch (id) {
    case O_IDS:
    case O_PROMPT:
        return "prompts arrive as requests (docs/server.md)";
    case O_N_NEW:
        return "requests give max_tokens";
    case O_TEMPERATURE:
    case O_TOP_K:
    case O_TOP_P:
    case O_SEED:
        return "requests give their own sampling parameters";
    default:
        return NULL;
    }
}
static const opt_id k_serve_opts[] = {O_MODEL,
                                      O_TOKENIZER,
                                      O_MODEL_NAME,
                                      O_HOST,
                                      O_PORT,
                                      O_PORT_FILE,
                                      O_SLOTS,
                                      O_MAX_QUEUE,
                                      O_QUEUE_TIMEOUT,
                                      O_REQUEST_TIMEOUT,
                                      O_CONN_TIMEOUT,
                                      O_BODY_TIMEOUT,
                                      O_MAX_CONNS,
                                      O_MAX_CONNS_PER_IP,
                                      O_API_KEY,
                                      O_ALLOWED_ORIGINS,
                                      O_CHAT_TEMPLATE,
                                      O_ADMIN_KEY,
                                      O_CACHE_SALT_API_KEY,
                                      O_PARSE_SPECIAL,
                                      O_MAX_BODY,
                                      O_HTTP_THREADS,
                                      O_NO_PREFIX_CACHE,
                                      O_PREFIX_BLOCK,
                                      O_PREFIX_CHECKPOINT,
                                      O_PREFIX_CACHE_MB,
                                      O_DRAFT,
                                      O_BLOCK_SIZE,
                                      O_TP,
                                      CLI_ENGINE_OPTS,
                                      O_TRACE,
                                      O_COUNT};
const cmd_spec cmd_serve_spec = {"serve", "(MODEL_DIR | --model DIR)",
                                 "OpenAI-compatible HTTP server (docs/server.md); --ctx defaults to the model's "
                                 "maximum, capped by --kv-tokens",
                                 k_serve_opts, serve_why_not};

typedef struct {
    srv_config c;
    int ctx_given;
} serve_args;

static int num(const char *name, const char *v, double lo, double hi, double *out) {
    if (!opt_num(v, lo, hi, out)) return 0;
    return cli_error("%s: '%s' is not a number in [%g, %g]", name, v, lo, hi);
}

static int apply_serve(void *ctx, opt_id id, const char *name, const char *v) {
    serve_args *a = ctx;
    srv_config *c = &a->c;
    double x;
#define NUM(lo, hi, field)                                                                                             \
    if (num(name, v, lo, hi, &x)) return 2;                                                                            \
    c->field = x;                                                                                                      \
    return 0
    switch (id) {
    case O_MODEL:
        if (c->model_dir) return cli_error("give the model directory once (%s %s)", name, v);
        c->model_dir = v;
        return 0;
    case O_TOKENIZER:
        c->tokenizer = v;
        return 0;
    case O_MODEL_NAME:
        c->model_name = v;
        return 0;
    case O_HOST:
        c->host = v;
        return 0;
    case O_PORT_FILE:
        c->port_file = v;
        return 0;
    case O_DRAFT:
        c->draft_dir = v;
        return 0;
    case O_TRACE:
        c->trace = v;
        return 0;
    case O_API_KEY:
        c->api_key = v;
        return 0;
    case O_ALLOWED_ORIGINS:
        c->allowed_origins = v;
        return 0;
    case O_CHAT_TEMPLATE:
        c->chat_template = v;
        return 0;
    case O_ADMIN_KEY:
        c->admin_key = v[0] ? v : NULL;
        return 0;
    case O_CACHE_SALT_API_KEY:
        c->cache_salt_api_key = 1;
        return 0;
    case O_PARSE_SPECIAL:
        c->parse_special = 1;
        return 0;
    case O_QUANTIZE:
        if (strcmp(v, "fp8")) return cli_error("%s: '%s' is not fp8 (the one format quantized at load)", name, v);
        c->quantize_fp8 = 1;
        return 0;
    case O_NO_PREFIX_CACHE:
        c->prefix_cache = 0;
        return 0;
    case O_BACKEND:
        if (strcmp(v, "cpu") && strcmp(v, "cuda")) return cli_error("%s: '%s' is not cpu or cuda", name, v);
        c->backend = v;
        return 0;
    case O_ROUTE:
    case O_GDN_PREFILL:
        if (c->n_routes == 8) return cli_error("at most 8 --route options");
        if (id == O_GDN_PREFILL && strcmp(v, "chunked") && strcmp(v, "serial"))
            return cli_error("--gdn-prefill: '%s' is not a route value (chunked | serial)", v);
        if (id == O_GDN_PREFILL) c->gdn_prefill = strcmp(v, "serial") ? FD_GDN_CHUNKED : FD_GDN_SERIAL;
        c->route_specs[c->n_routes++] =
            id == O_ROUTE ? v : (!strcmp(v, "chunked") ? "gdn_prefill=chunked" : "gdn_prefill=serial");
        return 0;
    case O_TP:
        return opt_tp(name, v, &c->tp);
    case O_PORT:
        NUM(0, 65535, port);
    case O_THREADS:
        NUM(0, 256, threads);
    case O_HTTP_THREADS:
        NUM(1, 256, http_threads);
    case O_SLOTS:
        NUM(1, 4096, slots);
    case O_CTX:
        a->ctx_given = 1;
        NUM(2, 1 << 24, ctx);
    case O_KV_TOKENS:
        NUM(1, 1 << 30, kv_tokens);
    case O_PREFILL_CHUNK:
        NUM(1, 1 << 20, prefill_chunk);
    case O_MAX_QUEUE:
        NUM(1, 1 << 20, max_queue);
    case O_QUEUE_TIMEOUT:
        NUM(0.001, 1e6, queue_timeout);
    case O_REQUEST_TIMEOUT:
        NUM(0.001, 1e6, request_timeout);
    case O_CONN_TIMEOUT:
        NUM(1, 1e6, conn_timeout);
    case O_BODY_TIMEOUT:
        NUM(0.001, 1e6, recv_timeout);
    case O_MAX_CONNS:
        NUM(1, 1 << 20, max_conns);
    case O_MAX_CONNS_PER_IP:
        NUM(1, 1 << 20, max_conns_per_ip);
    case O_MAX_BODY:
        NUM(1, 1 << 30, max_body);
    case O_PREFIX_BLOCK:
        NUM(1, 1 << 16, pc_block);
    case O_BLOCK_SIZE:
        NUM(2, 64, block_size);
    case O_PREFIX_CHECKPOINT:
        NUM(1, 1 << 24, pc_checkpoint);
    case O_PREFIX_CACHE_MB:
        if (num(name, v, 0, 1 << 24, &x)) return 2;
        c->pc_budget = (size_t)(x * 1048576.0);
        return 0;
    default:
        return cli_error("%s: not a serve option", name);
    }
#undef NUM
}

int cmd_serve(int argc, char **argv) {
    serve_args a;
    memset(&a, 0, sizeof a);
    srv_config_defaults(&a.c);
    a.c.api_key = getenv("FLASHDELTA_API_KEY"); // --api-key overrides
    const char *pos = NULL;
    int rc = opts_parse(&cmd_serve_spec, argc, argv, apply_serve, &a, &pos);
    if (rc) return rc == 1 ? 0 : rc;
    srv_config *c = &a.c;
    if (pos && c->model_dir) return cli_error("give the model directory once ('%s' and '%s')", c->model_dir, pos);
    if (pos) c->model_dir = pos;
    if (!c->model_dir) return cli_error("serve needs MODEL_DIR (or --model DIR)");
    c->build = FD_VERSION;
    if (cli_check_trace_tp(c->trace, c->tp)) return 2;
    fd_config mc;
    if (cfg_load_dir(c->model_dir, &mc)) {
        fprintf(stderr, "flashdelta: error: %s\n", fd_error_msg());
        return 1;
    }
    if (a.ctx_given && c->ctx > mc.max_position_embeddings)
        FD_WARN("--ctx %lld exceeds the model's max_position_embeddings %d: positions past it were never trained",
                (long long)c->ctx, mc.max_position_embeddings);
    if (!a.ctx_given) { // the model's own maximum, capped by the KV budget
        c->ctx = mc.max_position_embeddings < c->kv_tokens ? mc.max_position_embeddings : c->kv_tokens;
        FD_INFO("context %lld tokens per sequence: the model's max_position_embeddings %d%s", (long long)c->ctx,
                mc.max_position_embeddings,
                c->ctx < mc.max_position_embeddings ? ", capped by the KV budget (--kv-tokens; or give --ctx)" : "");
    }
    if (c->prefill_chunk > c->ctx) c->prefill_chunk = (int)c->ctx;
    return srv_main(c);
}
