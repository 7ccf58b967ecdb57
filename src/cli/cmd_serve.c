// `flashdelta serve --model DIR [options]`: the OpenAI-compatible server (src/server, docs/server.md).
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "server/server.h"

static int usage(FILE *f) {
    fprintf(f,
            "usage: flashdelta serve --model DIR [options]\n"
            "  --tokenizer PATH        tokenizer.json (or a directory holding it); default: the model directory\n"
            "  --model-name NAME       id served by /v1/models and expected in requests (default: directory name)\n"
            "  --api-key KEY           clients must send 'Authorization: Bearer KEY' on /v1/*, /tokenize,\n"
            "                          /detokenize (default: $FLASHDELTA_API_KEY; none: no authentication)\n"
            "  --chat-template FILE    Jinja chat template (or a JSON file with \"chat_template\"); default: the\n"
            "                          model's chat_template.jinja / tokenizer_config.json, else Qwen3's\n"
            "  --host ADDR             IPv4 address to bind (default 127.0.0.1)\n"
            "  --port N                TCP port (default 8000; 0 = any free port, see --port-file)\n"
            "  --port-file PATH        write the bound port there once listening\n"
            "  --backend cpu|cuda      (default cpu)   --threads N  CPU backend threads\n"
            "  --slots N               concurrent sequences (default 4)\n"
            "  --ctx N                 tokens per sequence, prompt + completion (default 4096)\n"
            "  --kv-tokens N           paged KV cache shared by the slots, tokens (default 262144; at most slots x ctx\n"
            "                          are used); a prompt waits for its pages, a generation finding none gets 503\n"
            "  --prefill-chunk K       token budget of one scheduler step (default 512)\n"
            "  --max-queue N           waiting requests before 429 (default 64)\n"
            "  --queue-timeout S       seconds waiting for a slot (or KV pages) before 503 (default 60)\n"
            "  --request-timeout S     seconds per request before 504 (default 600)\n"
            "  --conn-timeout S        idle connection timeout (default 30)\n"
            "  --recv-timeout S        deadline to receive a whole request, headers and body, from the connection's\n"
            "                          start or its previous response; then it is cut (default 30; --body-timeout)\n"
            "  --max-conns N           open connections in all (default 1000)\n"
            "  --max-conns-per-ip N    open connections from one client address (default 64)\n"
            "  --admin-key KEY         bearer token for admin routes (POST /reset_prefix_cache; refused without it);\n"
            "                          default: $FD_ADMIN_KEY\n"
            "  --cache-salt-api-key    share prefix-cache blocks only between requests with the same bearer token\n"
            "  --parse-special-tokens  special-token text in message content and prompts becomes control tokens\n"
            "                          (default: plain text; only the chat template inserts control tokens)\n"
            "  --max-body BYTES        request body limit before 413 (default 4194304)\n"
            "  --http-threads N        HTTP thread pool (default 4)\n"
            "  --no-prefix-cache       disable the prefix cache\n"
            "  --prefix-block N        prefix cache block, tokens (default 16)\n"
            "  --prefix-checkpoint N   GDN state snapshot every N prompt tokens (default 256)\n"
            "  --prefix-cache-mb N     prefix cache budget in MiB (default 1024)\n"
            "  --gdn-prefill chunked|serial\n"
            "  --draft DIR             DFlash drafter: speculative decoding\n"
            "  --block-size B          DFlash block (default: the drafter's)\n");
    return f == stdout ? 0 : 2;
}

static int num(const char *opt, const char *v, double lo, double hi, double *out) {
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (errno || end == v || *end || !(x >= lo && x <= hi)) {
        fprintf(stderr, "flashdelta: error: %s: '%s' is not a number in [%g, %g]\n", opt, v, lo, hi);
        return -1;
    }
    *out = x;
    return 0;
}

int cmd_serve(int argc, char **argv) {
    srv_config c;
    srv_config_defaults(&c);
    c.api_key = getenv("FLASHDELTA_API_KEY"); // --api-key overrides
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        double x;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) return usage(stdout);
        if (!strcmp(a, "--no-prefix-cache")) {
            c.prefix_cache = 0;
            continue;
        }
        if (!strcmp(a, "--cache-salt-api-key")) {
            c.cache_salt_api_key = 1;
            continue;
        }
        if (!strcmp(a, "--parse-special-tokens")) {
            c.parse_special = 1;
            continue;
        }
        if (!v) {
            fprintf(stderr, "flashdelta: error: serve: %s needs a value (see flashdelta serve --help)\n", a);
            return 2;
        }
        i++;
#define NUM(name, lo, hi, field)                                                                                       \
    else if (!strcmp(a, name)) {                                                                                       \
        if (num(a, v, lo, hi, &x)) return 2;                                                                           \
        c.field = x;                                                                                                   \
    }
        if (!strcmp(a, "--model")) c.model_dir = v;
        else if (!strcmp(a, "--tokenizer")) c.tokenizer = v;
        else if (!strcmp(a, "--model-name")) c.model_name = v;
        else if (!strcmp(a, "--chat-template")) c.chat_template = v;
        else if (!strcmp(a, "--api-key")) c.api_key = v;
        else if (!strcmp(a, "--host")) c.host = v;
        else if (!strcmp(a, "--port-file")) c.port_file = v;
        else if (!strcmp(a, "--draft")) c.draft_dir = v;
        else if (!strcmp(a, "--admin-key")) c.admin_key = v[0] ? v : NULL;
        else if (!strcmp(a, "--backend")) {
            if (strcmp(v, "cpu") && strcmp(v, "cuda")) {
                fprintf(stderr, "flashdelta: error: --backend: '%s' is not cpu or cuda\n", v);
                return 2;
            }
            c.backend = v;
        } else if (!strcmp(a, "--gdn-prefill")) {
            if (strcmp(v, "chunked") && strcmp(v, "serial")) {
                fprintf(stderr, "flashdelta: error: --gdn-prefill: '%s' is not chunked or serial\n", v);
                return 2;
            }
            c.gdn_prefill = strcmp(v, "serial") ? FD_GDN_CHUNKED : FD_GDN_SERIAL;
        }
        NUM("--port", 0, 65535, port)
        NUM("--threads", 0, 256, threads)
        NUM("--http-threads", 1, 256, http_threads)
        NUM("--slots", 1, 256, slots)
        NUM("--ctx", 2, 1 << 24, ctx)
        NUM("--kv-tokens", 1, 1 << 30, kv_tokens)
        NUM("--prefill-chunk", 1, 1 << 20, prefill_chunk)
        NUM("--max-queue", 1, 1 << 20, max_queue)
        NUM("--queue-timeout", 0.001, 1e6, queue_timeout)
        NUM("--request-timeout", 0.001, 1e6, request_timeout)
        NUM("--conn-timeout", 1, 1e6, conn_timeout)
        NUM("--recv-timeout", 0.001, 1e6, recv_timeout)
        NUM("--body-timeout", 0.001, 1e6, recv_timeout)
        NUM("--max-conns", 1, 1 << 20, max_conns)
        NUM("--max-conns-per-ip", 1, 1 << 20, max_conns_per_ip)
        NUM("--max-body", 1, 1 << 30, max_body)
        NUM("--prefix-block", 1, 1 << 16, pc_block)
        NUM("--block-size", 2, 64, block_size)
        NUM("--prefix-checkpoint", 1, 1 << 24, pc_checkpoint)
        else if (!strcmp(a, "--prefix-cache-mb")) {
            if (num(a, v, 0, 1 << 24, &x)) return 2;
            c.pc_budget = (size_t)(x * 1048576.0);
        } else {
            fprintf(stderr, "flashdelta: error: serve: unknown option '%s' (see flashdelta serve --help)\n", a);
            return 2;
        }
#undef NUM
    }
    if (!c.model_dir) {
        fprintf(stderr, "flashdelta: error: serve needs --model DIR\n");
        return 2;
    }
    if (c.prefill_chunk > c.ctx) c.prefill_chunk = (int)c.ctx;
    return srv_main(&c);
}
