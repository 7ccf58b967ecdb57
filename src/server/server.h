// `flashdelta serve`: an OpenAI-compatible HTTP server (libmicrohttpd) over the engine. See docs/server.md.
#ifndef FD_SERVER_H
#define FD_SERVER_H
#include <stddef.h>
#include <stdint.h>

#include "backend.h"

typedef struct {
    const char *model_dir;
    const char *tokenizer;   // tokenizer.json or a directory holding it (default: model_dir)
    const char *model_name;  // the id served by /v1/models (default: last path component of model_dir)
    const char *api_key;       // --api-key (or FLASHDELTA_API_KEY): required as "Authorization: Bearer" on /v1/*
    const char *chat_template; // --chat-template FILE (default: the model's own, else the built-in Qwen3 one)
    const char *host;        // bind address (IPv4, IPv6 as ::1 or [::1], or a host name); loopback by default
    const char *allowed_origins; // --allowed-origins: CORS for these browser origins ("*" = any); NULL = off
    int port;                // 0 = any free port (see port_file)
    const char *port_file;   // if set, the bound port is written there once the server listens
    const char *backend;     // "cpu" | "cuda"
    int threads;             // CPU backend threads (0 = default)
    int tp;                  // --tp N: tensor-parallel ranks (engine_tp.h), every slot a leader over them; 0 = none
    const char *build;       // the build id the ranks must agree on (--tp)
    int http_threads;        // libmicrohttpd thread pool size
    int slots;               // concurrent sequences (one engine each)
    int64_t ctx;             // context capacity per sequence (prompt + completion)
    int64_t kv_tokens;       // paged KV pool shared by the slots, tokens (capped at slots x ctx, which is all they use)
    int prefill_chunk;       // token budget of one scheduler step
    int max_queue;           // requests waiting for a slot before 429
    double queue_timeout;    // seconds a request may wait for a slot before 503
    double request_timeout;  // seconds from arrival to the end of generation before 504
    double conn_timeout;     // idle seconds before libmicrohttpd drops a connection (slow clients)
    double recv_timeout;     // seconds to receive a whole request (headers and body) before the connection is cut
    int max_conns;           // open connections in all (libmicrohttpd refuses more)
    int max_conns_per_ip;    // open connections from one client address
    const char *admin_key;   // bearer token of the admin routes (/reset_prefix_cache); NULL = those routes refused
    int cache_salt_api_key;  // salt every request's prefix-cache use with its bearer token (tenant isolation)
    int parse_special;       // special-token text in message content / prompts becomes control tokens (unsafe)
    int quantize_fp8;        // --quantize fp8: linear weights to FP8 block-scaled at load
    size_t max_body;         // request body limit (413 above)
    int default_max_tokens;  // completions without max_tokens (OpenAI: 16); chat: the rest of the context
    int prefix_cache;        // 0 = off
    int pc_block;            // prefix cache block (tokens)
    int pc_checkpoint;       // snapshot the recurrent state every this many prompt tokens (multiple of pc_block)
    size_t pc_budget;        // bytes of KV blocks + snapshots
    fd_gdn_route gdn_prefill;
    const char *draft_dir;   // DFlash drafter (speculative decoding); NULL = none
    int block_size;          // DFlash block (0 = the drafter's)
    const char *route_specs[8]; // --route NAME=VALUE, applied after FD_ROUTE_* from the environment
    int n_routes;
    const char *trace;       // --trace FILE: every op timed, Chrome-trace JSON written at shutdown
} srv_config;

void srv_config_defaults(srv_config *c);
// Runs the server until SIGINT/SIGTERM. Returns the process exit status.
int srv_main(const srv_config *c);
#endif
