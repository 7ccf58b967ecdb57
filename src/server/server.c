// Server lifecycle: load the model and tokenizer, start the scheduler and libmicrohttpd, wait for SIGINT/SIGTERM,
// then stop in the order that lets every open request end cleanly (new connections refused, jobs ended with 503,
// suspended connections resumed, daemon stopped) and free everything (the tests run it under LSan).
#include <arpa/inet.h>
#include <netdb.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <sys/socket.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/threads.h"
#include "engine/engine_tp.h"
#include "engine/kv_pool.h"
#include "server/conn.h"
#include "engine/trace.h"
#include "server/http.h"

void srv_config_defaults(srv_config *c) {
    memset(c, 0, sizeof *c);
    c->host = "127.0.0.1";
    c->port = 8000;
    c->backend = "cpu";
    c->http_threads = 4;
    c->slots = 4;
    c->ctx = 4096;
    c->kv_tokens = FD_KV_TOKENS_DEFAULT;
    c->prefill_chunk = 512;
    c->max_queue = 64;
    c->queue_timeout = 60;
    c->request_timeout = 600;
    c->conn_timeout = 30;
    c->recv_timeout = 30;
    c->max_conns = 1000;
    c->max_conns_per_ip = 64;
    const char *k = getenv("FD_ADMIN_KEY"); // the environment keeps the key out of `ps`
    c->admin_key = k && k[0] ? k : NULL;
    c->max_body = 4u << 20;
    c->default_max_tokens = 16;
    c->prefix_cache = 1;
    c->pc_block = 16;
    c->pc_checkpoint = 256;
    c->pc_budget = (size_t)1 << 30;
    c->gdn_prefill = FD_GDN_CHUNKED;
}

static const char *base_name(const char *dir) {
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/') n--;
    static char buf[256];
    size_t b = n;
    while (b > 0 && dir[b - 1] != '/') b--;
    snprintf(buf, sizeof buf, "%.*s", (int)(n - b), dir + b);
    return buf;
}

static int write_port_file(const char *path, int port) {
    char *tmp = fd_sprintf("%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    int rc = f && fprintf(f, "%d\n", port) > 0 && fclose(f) == 0 && rename(tmp, path) == 0 ? 0 : -1;
    if (f && rc) fclose(f);
    free(tmp);
    return rc;
}

// The end-of-generation ids: the model's (generation_config / tokenizer_config) and ChatML's end tokens.
static int collect_eos(const char *model_dir, const tok_tokenizer *t, int32_t *eos, int max) {
    int n = chat_eos_ids(model_dir, t, eos, max);
    if (n < 0) return -1;
    const char *extra[] = {"<|im_end|>", "<|endoftext|>"};
    for (int i = 0; i < 2; i++) {
        int32_t id = tok_token_id(t, extra[i]);
        int seen = id < 0;
        for (int k = 0; k < n; k++) seen |= eos[k] == id;
        if (!seen && n < max) eos[n++] = id;
    }
    return n;
}

// The chat template: --chat-template, else the model's (model directory, then the tokenizer's directory), else the
// built-in Qwen3 one.
static chat_template *load_template(const srv_config *cfg) {
    int found = 0;
    chat_template *t = chat_template_load(cfg->model_dir, cfg->chat_template, &found);
    if (!found && cfg->tokenizer) { // --tokenizer DIR (or a tokenizer.json whose directory has the config)
        char *dir = fd_strdup(cfg->tokenizer);
        char *slash = strrchr(dir, '/');
        if (strstr(dir, ".json") && slash) *slash = 0;
        t = chat_template_load(dir, NULL, &found);
        free(dir);
    }
    if (!found) t = chat_template_builtin();
    if (t) FD_INFO("chat template: %s", chat_template_origin(t));
    return t;
}

// libmicrohttpd's own messages, as one prefixed line each like every other line of the log (the logger must be
// the daemon's first option, or MHD prints some messages itself).
static void mhd_log(void *cls, const char *fmt, va_list ap) {
    (void)cls;
    char buf[512];
    vsnprintf(buf, sizeof buf, fmt, ap);
    size_t n = strlen(buf);
    while (n && (buf[n - 1] == '\n' || buf[n - 1] == '\r')) buf[--n] = 0;
    fprintf(stderr, "flashdelta: http: %s\n", buf);
}

// The address to listen on: IPv4 ("0.0.0.0"), IPv6 ("::1", "::", or bracketed as in URLs, "[::1]"), or a host
// name ("localhost": its first address). 0, or -1 with fd_error_set.
static int listen_addr(const char *host, int port, struct sockaddr_storage *ss, socklen_t *len) {
    char name[256];
    size_t n = strlen(host);
    if (n >= 2 && host[0] == '[' && host[n - 1] == ']') host++, n -= 2;
    if (n == 0 || n >= sizeof name) return fd_error_set("--host '%s' is not an address", host);
    memcpy(name, host, n);
    name[n] = 0;
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    char service[16];
    snprintf(service, sizeof service, "%d", port);
    const int rc = getaddrinfo(name, service, &hints, &res);
    if (rc || !res)
        return fd_error_set("--host '%s' is not an IPv4 or IPv6 address or a known host name (%s)", name,
                            gai_strerror(rc));
    memcpy(ss, res->ai_addr, res->ai_addrlen);
    *len = res->ai_addrlen;
    freeaddrinfo(res);
    return 0;
}

// The listening address as a URL's host part: IPv6 in brackets.
static void addr_text(const struct sockaddr_storage *ss, char *out, size_t cap) {
    char ip[INET6_ADDRSTRLEN] = "?";
    if (ss->ss_family == AF_INET6) {
        inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)ss)->sin6_addr, ip, sizeof ip);
        snprintf(out, cap, "[%s]", ip);
    } else {
        inet_ntop(AF_INET, &((const struct sockaddr_in *)ss)->sin_addr, ip, sizeof ip);
        snprintf(out, cap, "%s", ip);
    }
}

// Why the daemon could not start: bind the address ourselves (as libmicrohttpd does, SO_REUSEADDR) for the errno.
static const char *listen_error(const struct sockaddr_storage *addr, socklen_t len) {
    int fd = socket(addr->ss_family, SOCK_STREAM, 0), one = 1;
    if (fd < 0) return strerror(errno);
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    const char *why = bind(fd, (const struct sockaddr *)addr, len) || listen(fd, 1)
                          ? strerror(errno)
                          : "libmicrohttpd could not start (see its message above)";
    close(fd);
    return why;
}

// What the scheduler runs on: rank 0's backend with the model (and the drafter) uploaded, and under --tp the group
// of ranks, made as the model commands make theirs (engine_tp.h: tp_group_open).
typedef struct {
    fd_backend *be;
    fd_drafter dr;
    int has_draft;
    fd_tp_set tp;
} srv_engines;

static void close_engines(srv_engines *x) {
    tp_group_close(&x->tp); // before rank 0's backend: the group's shards are released through it
    if (x->has_draft) drafter_free(&x->dr);
    if (x->be) x->be->destroy(x->be);
}

// 0, or 1 with the message printed and nothing kept.
static int open_engines(const srv_config *cfg, fd_model *model, srv_engines *x) {
    memset(x, 0, sizeof *x);
    if (tp_check_devices(cfg->backend, cfg->tp) || !(x->be = tp_backend_create(cfg->backend, cfg->threads, 0))) {
        fprintf(stderr, "flashdelta: error: %s\n", fd_error_msg());
        return 1;
    }
    if (cfg->trace) x->be = trace_wrap(x->be); // every op timed; the trace is written at shutdown
    model_upload(model, x->be);
    int bad = 0;
    if (cfg->draft_dir) {
        bad = drafter_load(cfg->draft_dir, model, &x->dr);
        x->has_draft = !bad;
        if (!bad) drafter_upload(&x->dr, x->be);
    }
    // a drafter reads the full model's embedding and LM head on rank 0's backend: that copy stays for it
    if (!bad && cfg->tp) bad = tp_group_open(&x->tp, model, x->be, cfg->backend, cfg->threads, cfg->tp, x->has_draft);
    if (!bad) return 0;
    fprintf(stderr, "flashdelta: error: %s\n", fd_error_msg());
    close_engines(x);
    return 1;
}

// The server proper, once the options that need no model were checked (srv_main).
static int run_server(const srv_config *cfg, const srv_cors *cors, const struct sockaddr_storage *listen_at,
                      socklen_t addr_len) {
    struct sockaddr_storage addr = *listen_at; // libmicrohttpd takes a non-const pointer
    // Signals go to sigwait() below only: block them before any thread starts.
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    static srv_server S; // static: the callbacks reach it through cls, and it outlives every thread
    memset(&S, 0, sizeof S);
    S.cfg = cfg;
    S.cors = *cors;
    fd_model model;
    fd_load_opts lo = {.quantize_fp8 = cfg->quantize_fp8};
    if (model_load_with(cfg->model_dir, &lo, &model)) {
        fprintf(stderr, "flashdelta: error: %s\n", fd_error_msg());
        return 1;
    }
    const char *tok_path = cfg->tokenizer ? cfg->tokenizer : cfg->model_dir;
    S.tok = tok_load(tok_path);
    if (!S.tok) {
        fprintf(stderr, "flashdelta: error: %s (give a tokenizer.json with --tokenizer)\n", fd_error_msg());
        model_free(&model);
        return 1;
    }
    S.tpl = load_template(cfg);
    if (!S.tpl) {
        fprintf(stderr, "flashdelta: error: chat template: %s\n", fd_error_msg());
        tok_free(S.tok);
        model_free(&model);
        return 1;
    }
    int32_t eos[16];
    int n_eos = collect_eos(cfg->model_dir, S.tok, eos, 16);
    if (n_eos < 0) {
        fprintf(stderr, "flashdelta: error: %s\n", fd_error_msg());
        chat_template_free(S.tpl);
        tok_free(S.tok);
        model_free(&model);
        return 1;
    }
    srv_engines x;
    if (open_engines(cfg, &model, &x)) {
        chat_template_free(S.tpl);
        tok_free(S.tok);
        model_free(&model);
        return 1;
    }
    fd_backend *be = x.be;
    S.vocab = model.cfg.vocab_size;
    S.model_name = cfg->model_name ? cfg->model_name : base_name(cfg->model_dir);
    S.boot_time = (long)time(NULL);
    S.boot_nonce = (uint64_t)S.boot_time * 0x9e3779b97f4a7c15ULL ^ (uint64_t)getpid() << 17 ^
                   (uint64_t)(fd_time_s() * 1e9);
    srv_metrics_init(&S.met, cfg->ctx);
    int rc = 0;
    srv_conns *conns = NULL;
    S.sched = sched_create(cfg, &model, be, x.tp.tp ? &x.tp : NULL, S.tok, x.has_draft ? &x.dr : NULL, eos, n_eos,
                           &S.met);
    if (!S.sched) {
        fprintf(stderr, "flashdelta: error: %s\n", fd_error_msg());
        rc = fd_error_code() == FD_ERR_REFUSED ? 2 : 1;
        goto out;
    }
    conns = srv_conns_create(cfg->recv_timeout);
    // Slow clients: at most --max-conns-per-ip connections from one address and --max-conns in all, each cut if
    // idle for --conn-timeout or if its request has not arrived whole within --recv-timeout (conn.c).
    S.daemon = MHD_start_daemon(
        MHD_USE_AUTO | MHD_USE_INTERNAL_POLLING_THREAD | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG |
            (addr.ss_family == AF_INET6 ? MHD_USE_DUAL_STACK : 0), // "::" takes IPv4 clients too, as on Linux
        0, NULL, NULL,
        srv_on_request, &S, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr,
        MHD_OPTION_THREAD_POOL_SIZE, (unsigned)cfg->http_threads, MHD_OPTION_CONNECTION_TIMEOUT,
        (unsigned)cfg->conn_timeout, MHD_OPTION_CONNECTION_LIMIT, (unsigned)cfg->max_conns,
        MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)cfg->max_conns_per_ip, MHD_OPTION_CONNECTION_MEMORY_LIMIT,
        (size_t)(64 * 1024), MHD_OPTION_NOTIFY_COMPLETED, srv_on_completed, &S, MHD_OPTION_NOTIFY_CONNECTION,
        srv_conns_notify, conns, MHD_OPTION_END);
    if (!S.daemon) {
        fprintf(stderr, "flashdelta: error: cannot listen on %s port %d: %s\n", cfg->host, cfg->port,
                listen_error(&addr, addr_len));
        rc = 1;
        goto out;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(S.daemon, MHD_DAEMON_INFO_BIND_PORT);
    const int port = di ? di->port : cfg->port;
    char host_text[INET6_ADDRSTRLEN + 2];
    addr_text(&addr, host_text, sizeof host_text);
    FD_INFO("serving %s (%s, vocab %d) on http://%s:%d: backend %s, %d slots x %lld tokens (KV pool %lld tokens), "
            "prefill budget %d, "
            "routes gdn_prefill=%s, prefix cache %s (block %d, snapshot every %d, %zu MiB), speculative decoding: %s",
            S.model_name, cfg->model_dir, S.vocab, host_text, port, be->name, cfg->slots, (long long)cfg->ctx,
            (long long)sched_kv_tokens(cfg), cfg->prefill_chunk,
            cfg->gdn_prefill == FD_GDN_CHUNKED ? "chunked" : "serial", cfg->prefix_cache ? "on" : "off", cfg->pc_block,
            cfg->pc_checkpoint, cfg->pc_budget >> 20, x.has_draft ? cfg->draft_dir : "off");
    if (cfg->port_file && write_port_file(cfg->port_file, port)) {
        fprintf(stderr, "flashdelta: error: cannot write --port-file %s\n", cfg->port_file);
        rc = 1;
        goto out;
    }
    int sig = 0;
    sigwait(&sigs, &sig);
    FD_INFO("signal %d: shutting down", sig);
out:
    atomic_store(&S.stopping, 1);
    if (S.daemon) MHD_quiesce_daemon(S.daemon); // no new connections
    sched_stop(S.sched);                          // every open job ends (503) and its connection is resumed
    if (S.daemon) {
        usleep(200 * 1000); // let resumed connections write their last bytes
        MHD_stop_daemon(S.daemon);
    }
    srv_conns_free(conns); // after the daemon: no connection is left to notify
    sched_free(S.sched);
    srv_metrics_destroy(&S.met);
    if (cfg->trace) {
        trace_print_summary(be, stderr);
        if (trace_write(be, cfg->trace)) fprintf(stderr, "flashdelta: error: %s\n", fd_error_msg());
        else FD_INFO("trace written to %s", cfg->trace);
    }
    close_engines(&x);
    fd_threads_shutdown();
    chat_template_free(S.tpl);
    tok_free(S.tok);
    model_free(&model);
    return rc;
}

int srv_main(const srv_config *cfg) {
    if (cfg->pc_checkpoint % cfg->pc_block || cfg->prefill_chunk < 1 || cfg->slots < 1 || cfg->ctx < 2 ||
        cfg->kv_tokens < 1) {
        fprintf(stderr, "flashdelta: error: serve: bad limits (--prefix-checkpoint must be a multiple of "
                        "--prefix-block; --slots, --prefill-chunk, --kv-tokens >= 1; --ctx >= 2)\n");
        return 2;
    }
    struct sockaddr_storage addr;
    socklen_t addr_len = 0;
    if (listen_addr(cfg->host, cfg->port, &addr, &addr_len)) {
        fprintf(stderr, "flashdelta: error: %s\n", fd_error_msg());
        return 2;
    }
    srv_cors cors;
    if (srv_cors_parse(cfg->allowed_origins, &cors)) {
        fprintf(stderr, "flashdelta: error: %s\n", fd_error_msg());
        return 2;
    }
    if (srv_cors_enabled(&cors)) FD_INFO("CORS: %d allowed origin(s)%s", cors.n, cors.any ? " (any origin)" : "");
    const int rc = run_server(cfg, &cors, &addr, addr_len);
    srv_cors_free(&cors);
    return rc;
}
