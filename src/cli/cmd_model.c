// Model subcommands: info, logits, generate, run. Shared option parsing and engine setup live here.
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/threads.h"
#include "cli/cli.h"
#include "engine/bench.h"
#include "engine/dflash.h"
#include "engine/engine_graphs.h"
#include "engine/routes.h"
#include "engine/trace.h"
#include "io/tokenizer.h"

typedef struct {
    const char *model_dir;
    int32_t *ids;
    int64_t n_ids;
    const char *out;
    int n_new;
    int prefill_chunk; // 0 = default budget
    int threads;
    int64_t ctx; // 0 = what the request needs
    int64_t kv_tokens;          // paged KV pool (0 = FD_KV_TOKENS_DEFAULT)
    const char *route_specs[8]; // --route NAME=VALUE, applied after FD_ROUTE_* from the environment
    int n_routes;
    const char *backend;
    float temperature, top_p; // sampling (temperature 0 = greedy)
    int top_k;
    uint64_t seed;
    const char *random_cfg;   // --random-weights CONFIG.json: synthetic target instead of MODEL_DIR
    fd_load_opts load;        // --quantize fp8
    const char *draft_random; // --draft-random CONFIG.json: synthetic drafter
    fd_bench_opts bench;
    const char *json_out;
    const char *trace; // --trace FILE: Chrome-trace JSON of per-op timings
    const char *draft_dir; // DFlash drafter
    int block_size;        // 0 = the drafter's
    int stats;
} cli_opts;

static int cli_error(const char *fmt, const char *arg) {
    fprintf(stderr, "flashdelta: error: ");
    fprintf(stderr, fmt, arg);
    fputc('\n', stderr);
    return 2;
}

static int parse_int(const char *s, long long lo, long long hi, long long *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

// "1,2,3" (spaces allowed) -> ids
static int parse_ids(const char *s, int32_t **ids, int64_t *n) {
    int64_t cap = 64, cnt = 0;
    int32_t *v = fd_malloc((size_t)cap * sizeof *v);
    const char *p = s;
    while (*p) {
        while (*p == ' ' || *p == ',') p++;
        if (!*p) break;
        char *end;
        errno = 0;
        long long x = strtoll(p, &end, 10);
        if (end == p || errno || x < 0 || x > INT32_MAX || (*end && *end != ',' && *end != ' ')) {
            free(v);
            return fd_error_set("--ids: '%.40s' is not a comma-separated list of non-negative token ids", s);
        }
        if (cnt == cap) v = fd_realloc(v, (size_t)(cap *= 2) * sizeof *v);
        v[cnt++] = (int32_t)x;
        p = end;
    }
    if (!cnt) {
        free(v);
        return fd_error_set("--ids: no token ids given");
    }
    *ids = v;
    *n = cnt;
    return 0;
}

static int parse_opts_inner(int argc, char **argv, cli_opts *o, int need_model) {
    memset(o, 0, sizeof *o);
    o->n_new = 16;
    o->top_p = 1.0f;
    o->bench = (fd_bench_opts){.ctx = {1024, 32768, 65536, 131072}, .n_ctx = 4, .decode_tokens = 32,
                               .prefill_chunk = 4096, .oracle_tau = 4.74, .gemm_ceiling = -1, .copy_ceiling = -1,
                               .seed = 1};
    o->backend = "cpu";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        long long x;
        if (a[0] != '-') {
            if (o->model_dir) return cli_error("unexpected argument '%s'", a);
            o->model_dir = a;
            continue;
        }
        if (!v && strcmp(a, "--stats")) return cli_error("option %s needs a value", a);
        i++;
        if (!strcmp(a, "--ids")) {
            free(o->ids); // a repeated --ids replaces the earlier one
            o->ids = NULL;
            if (parse_ids(v, &o->ids, &o->n_ids)) return cli_error("%s", fd_error_msg());
        } else if (!strcmp(a, "--out")) {
            o->out = v;
        } else if (!strcmp(a, "-n") || !strcmp(a, "--n-new")) {
            if (parse_int(v, 0, 1 << 24, &x)) return cli_error("-n: '%s' is not a count in 0..16777216", v);
            o->n_new = (int)x;
        } else if (!strcmp(a, "--prefill-chunk")) {
            if (parse_int(v, 1, 1 << 20, &x)) return cli_error("--prefill-chunk: '%s' is not in 1..1048576", v);
            o->prefill_chunk = (int)x;
        } else if (!strcmp(a, "--threads")) {
            if (parse_int(v, 1, 256, &x)) return cli_error("--threads: '%s' is not in 1..256", v);
            o->threads = (int)x;
        } else if (!strcmp(a, "--ctx")) {
            if (parse_int(v, 1, 1 << 24, &x)) return cli_error("--ctx: '%s' is not in 1..16777216", v);
            o->ctx = x;
        } else if (!strcmp(a, "--kv-tokens")) {
            if (parse_int(v, 1, 1 << 30, &x)) return cli_error("--kv-tokens: '%s' is not in 1..1073741824", v);
            o->kv_tokens = x;
        } else if (!strcmp(a, "--route") || !strcmp(a, "--gdn-prefill")) { // --gdn-prefill X = --route gdn_prefill=X
            if (o->n_routes == 8) return cli_error("%s", "at most 8 --route options");
            if (a[2] == 'g' && strcmp(v, "chunked") && strcmp(v, "serial"))
                return cli_error("--gdn-prefill: '%s' is not a route value (chunked | serial)", v);
            o->route_specs[o->n_routes++] =
                a[2] == 'r' ? v : (!strcmp(v, "chunked") ? "gdn_prefill=chunked" : "gdn_prefill=serial");
        } else if (!strcmp(a, "--temperature") || !strcmp(a, "--top-p")) {
            char *end;
            errno = 0;
            double f = strtod(v, &end);
            const int is_t = a[2] == 't';
            if (errno || end == v || *end || !(f >= 0) || f > (is_t ? 100.0 : 1.0))
                return cli_error(is_t ? "--temperature: '%s' is not in 0..100" : "--top-p: '%s' is not in 0..1", v);
            if (is_t) o->temperature = (float)f;
            else o->top_p = (float)f;
        } else if (!strcmp(a, "--top-k")) {
            if (parse_int(v, 0, 1 << 30, &x)) return cli_error("--top-k: '%s' is not a count >= 0", v);
            o->top_k = (int)x;
        } else if (!strcmp(a, "--seed")) {
            if (parse_int(v, 0, INT64_MAX, &x)) return cli_error("--seed: '%s' is not a non-negative integer", v);
            o->seed = (uint64_t)x;
        } else if (!strcmp(a, "--quantize") || !strcmp(a, "--quant")) {
            if (strcmp(v, "fp8")) return cli_error("--quantize: '%s' is not supported (supported: fp8)", v);
            o->load.quantize_fp8 = 1;
        } else if (!strcmp(a, "--random-weights")) {
            o->random_cfg = v;
        } else if (!strcmp(a, "--draft-random")) {
            o->draft_random = v;
        } else if (!strcmp(a, "--trace")) {
            o->trace = v;
        } else if (!strcmp(a, "--json")) {
            o->json_out = v;
        } else if (!strcmp(a, "--decode")) {
            if (parse_int(v, 1, 1 << 20, &x)) return cli_error("--decode: '%s' is not in 1..1048576", v);
            o->bench.decode_tokens = (int)x;
        } else if (!strcmp(a, "--contexts")) {
            o->bench.n_ctx = 0;
            for (const char *p = v; *p;) {
                char *end;
                errno = 0;
                long long c = strtoll(p, &end, 10);
                if (end == p || errno || c < 1 || c > (1 << 24) || o->bench.n_ctx == FD_BENCH_MAX_CTX ||
                    (*end && *end != ','))
                    return cli_error("--contexts: '%s' is not a list of up to 16 lengths in 1..16777216", v);
                o->bench.ctx[o->bench.n_ctx++] = c;
                p = *end ? end + 1 : end;
            }
        } else if (!strcmp(a, "--oracle-tau") || !strcmp(a, "--gemm-ceiling") || !strcmp(a, "--copy-ceiling")) {
            char *end;
            errno = 0;
            double f = strtod(v, &end);
            if (errno || end == v || *end || !(f >= 0)) return cli_error("%s: not a non-negative number", a);
            if (a[2] == 'o') o->bench.oracle_tau = f;
            else if (a[2] == 'g') o->bench.gemm_ceiling = f;
            else o->bench.copy_ceiling = f;
        } else if (!strcmp(a, "--draft")) {
            o->draft_dir = v;
        } else if (!strcmp(a, "--block-size")) {
            if (parse_int(v, 2, FD_SPEC_MAX_BLOCK, &x)) return cli_error("--block-size: '%s' is not in 2..64", v);
            o->block_size = (int)x;
        } else if (!strcmp(a, "--stats")) {
            i--; // a flag without a value
            o->stats = 1;
        } else if (!strcmp(a, "--backend")) {
            if (strcmp(v, "cpu") && strcmp(v, "cuda")) return cli_error("--backend: '%s' is not cpu or cuda", v);
            o->backend = v;
        } else {
            return cli_error("unknown option '%s'", a);
        }
    }
    if (need_model && !o->model_dir && !o->random_cfg) return cli_error("%s", "missing MODEL_DIR (or --random-weights)");
    if (o->model_dir && o->random_cfg) return cli_error("%s", "give MODEL_DIR or --random-weights, not both");
    if (o->draft_dir && o->draft_random) return cli_error("%s", "give --draft or --draft-random, not both");
    return 0;
}

// Parses argv; on failure nothing stays allocated.
static int parse_opts(int argc, char **argv, cli_opts *o, int need_model) {
    int rc = parse_opts_inner(argc, argv, o, need_model);
    if (rc) {
        free(o->ids);
        o->ids = NULL;
    }
    return rc;
}

// Writes n little-endian fp32 values (the host is little-endian x86-64 / arm64); 1 with a message on failure.
static int write_f32(const char *path, const float *x, size_t n) {
    FILE *f = fopen(path, "wb");
    int bad = !f || fwrite(x, sizeof(float), n, f) != n;
    if (f && fclose(f)) bad = 1;
    if (bad) fprintf(stderr, "flashdelta: error: cannot write %s: %s\n", path, strerror(errno));
    return bad;
}

static fd_backend *make_backend(const cli_opts *o) {
    if (!strcmp(o->backend, "cuda")) {
#ifdef FD_HAVE_CUDA
        return fd_backend_cuda_create(0);
#else
        fprintf(stderr, "flashdelta: error: this build has no CUDA backend (rebuild with CUDA=1)\n");
        return NULL;
#endif
    }
    return fd_backend_cpu_create(o->threads);
}

typedef struct {
    const char *trace; // write the trace here at close
    fd_model model;
    fd_backend *be;
    fd_engine eng;
    fd_drafter dr;
    fd_dflash spec;
    int has_draft;
} session;

static void session_close(session *s) {
    if (s->trace && s->be) {
        trace_print_summary(s->be, stderr);
        if (trace_write(s->be, s->trace)) fprintf(stderr, "flashdelta: error: %s\n", fd_error_msg());
        else FD_INFO("trace written to %s", s->trace);
    }
    dflash_free(&s->spec);
    engine_free(&s->eng);
    if (s->be) model_release(&s->model, s->be);
    if (s->be && s->has_draft) drafter_release(&s->dr, s->be);
    if (s->has_draft) drafter_free(&s->dr);
    if (s->be) s->be->destroy(s->be);
    model_free(&s->model);
    memset(s, 0, sizeof *s); // a second close is a no-op
}

// Loads the model, creates the backend and an engine sized for `tokens` positions.
static int session_setup(session *s, const cli_opts *o, int64_t tokens) {
    memset(s, 0, sizeof *s);
    if (o->random_cfg ? model_random_with(o->random_cfg, o->seed, &o->load, &s->model)
                      : model_load_with(o->model_dir, &o->load, &s->model)) {
        fprintf(stderr, "flashdelta: error: %s\n", fd_error_msg());
        return 1;
    }
    const fd_config *c = &s->model.cfg;
    for (int64_t i = 0; i < o->n_ids; i++)
        if (o->ids[i] >= c->vocab_size) {
            fprintf(stderr, "flashdelta: error: --ids: token id %d (position %lld) is outside the vocabulary [0, %d)\n",
                    o->ids[i], (long long)i, c->vocab_size);
            return 1;
        }
    if (o->ctx && tokens > o->ctx) {
        fprintf(stderr, "flashdelta: error: %lld tokens (prompt + new) do not fit the context capacity --ctx %lld\n",
                (long long)tokens, (long long)o->ctx);
        return 1;
    }
    s->be = make_backend(o);
    if (!s->be) return 1;
    if (o->trace) {
        s->be = trace_wrap(s->be);
        s->trace = o->trace;
    }
    model_upload(&s->model, s->be);
    if (routes_backend_preset(s->be, o->route_specs, o->n_routes)) { // before any cache is sized
        fprintf(stderr, "flashdelta: error: %s\n", fd_error_msg());
        return 2;
    }
    fd_engine_opts eo;
    engine_default_opts(&eo);
    eo.capacity = o->ctx ? o->ctx : (tokens > 0 ? tokens : 1);
    eo.kv_tokens = o->kv_tokens ? o->kv_tokens : FD_KV_TOKENS_DEFAULT;
    if (o->prefill_chunk) eo.max_batch = o->prefill_chunk;
    if (eo.max_batch > eo.capacity) eo.max_batch = (int)eo.capacity;
    if (o->draft_dir || o->draft_random) {
        if (o->draft_random ? drafter_random(o->draft_random, &s->model, o->seed + 1, &s->dr)
                            : drafter_load(o->draft_dir, &s->model, &s->dr)) {
            fprintf(stderr, "flashdelta: error: %s\n", fd_error_msg());
            return 1;
        }
        s->has_draft = 1;
        drafter_upload(&s->dr, s->be);
        const int B = o->block_size ? o->block_size : s->dr.block_size;
        if (eo.max_batch < B) eo.max_batch = B; // a verify block is one forward
    }
    if (engine_init(&s->eng, &s->model, s->be, &eo)) {
        fprintf(stderr, "flashdelta: error: %s\n", fd_error_msg());
        return 1;
    }
    if (s->has_draft && dflash_init(&s->spec, &s->eng, &s->dr, o->block_size)) {
        fprintf(stderr, "flashdelta: error: %s\n", fd_error_msg());
        return 1;
    }
    // Routes: defaults, then the environment (FD_ROUTE_<NAME>), then --route; impossible combinations refused.
    int bad = routes_from_env(&s->eng);
    for (int i = 0; !bad && i < o->n_routes; i++) bad = routes_set(&s->eng, o->route_specs[i]);
    if (bad || routes_check(&s->eng)) {
        fprintf(stderr, "flashdelta: error: %s\n", fd_error_msg());
        return 2;
    }
    FD_INFO("backend %s, %d threads, capacity %lld tokens (KV pool %lld), prefill budget %d", s->be->name,
            fd_threads_count(), (long long)eo.capacity, (long long)kv_pool_tokens(s->eng.pool), eo.max_batch);
    if (fd_log_level_enabled(FD_LOG_INFO)) routes_print(&s->eng, stderr);
    return 0;
}

// session_setup, and on failure everything it built released again: callers only return the code.
static int session_open(session *s, const cli_opts *o, int64_t tokens) {
    int rc = session_setup(s, o, tokens);
    if (rc) session_close(s);
    return rc;
}


int cmd_info(int argc, char **argv) {
    cli_opts o;
    int rc = parse_opts(argc, argv, &o, 1);
    if (rc) return rc;
    fd_model m;
    if (model_load(o.model_dir, &m)) {
        fprintf(stderr, "flashdelta: error: %s\n", fd_error_msg());
        return 1;
    }
    model_print_info(&m, stdout);
    model_free(&m);
    return 0;
}

int cmd_logits(int argc, char **argv) {
    cli_opts o;
    int rc = parse_opts(argc, argv, &o, 1);
    if (rc) return rc;
    if (!o.ids || !o.out) {
        free(o.ids);
        return cli_error("%s", o.ids ? "logits needs --out FILE" : "logits needs --ids");
    }
    session s;
    if ((rc = session_open(&s, &o, o.n_ids))) {
        free(o.ids);
        return rc;
    }
    const int V = s.model.cfg.vocab_size;
    float *logits = fd_malloc((size_t)o.n_ids * V * sizeof(float));
    double t0 = fd_time_s();
    rc = engine_prefill(&s.eng, o.ids, o.n_ids, o.prefill_chunk, logits, 1);
    double dt = fd_time_s() - t0;
    if (rc) {
        fprintf(stderr, "flashdelta: error: %s\n", fd_error_msg());
    } else {
        rc = write_f32(o.out, logits, (size_t)o.n_ids * V);
        if (!rc)
            FD_INFO("wrote %lld x %d logits to %s (prefill %.1f tok/s)", (long long)o.n_ids, V, o.out,
                    (double)o.n_ids / dt);
    }
    free(logits);
    free(o.ids);
    session_close(&s);
    return rc ? 1 : 0;
}

int cmd_generate(int argc, char **argv) {
    cli_opts o;
    int rc = parse_opts(argc, argv, &o, 1);
    if (rc) return rc;
    if (!o.ids) return cli_error("%s", "generate needs --ids");
    session s;
    if ((rc = session_open(&s, &o, o.n_ids + o.n_new))) {
        free(o.ids);
        return rc;
    }
    int32_t *out = fd_malloc((size_t)(o.n_new + 1) * sizeof *out);
    double t0 = fd_time_s();
    fd_sampler smp;
    sampler_init(&smp, o.temperature, o.top_k, o.top_p, o.seed);
    rc = s.has_draft ? dflash_generate(&s.spec, o.ids, o.n_ids, o.prefill_chunk, o.n_new, &smp, out)
                     : engine_generate(&s.eng, o.ids, o.n_ids, o.prefill_chunk, o.n_new, &smp, out);
    double dt = fd_time_s() - t0;
    if (rc) {
        fprintf(stderr, "flashdelta: error: %s\n", fd_error_msg());
    } else {
        for (int i = 0; i < o.n_new; i++) printf("%s%d", i ? " " : "", out[i]);
        printf("\n");
        FD_INFO("%lld prompt + %d new tokens in %.3f s", (long long)o.n_ids, o.n_new, dt);
        if (s.has_draft && o.stats) dflash_print_stats(&s.spec, stderr);
        if (o.stats) routes_print_hits(&s.eng, stderr);
        if (o.stats) engine_graphs_print(&s.eng, stderr);
    }
    free(out);
    free(o.ids);
    session_close(&s);
    return rc ? 1 : 0;
}

// draft-logits: prefill the target on the ids, take the greedy anchor, run one draft forward on
// [anchor, MASK x (B-1)] and write the (B-1) x vocab fp32 logits.
int cmd_draft_logits(int argc, char **argv) {
    cli_opts o;
    int rc = parse_opts(argc, argv, &o, 1);
    if (rc) return rc;
    if (!o.ids || !o.out || !o.draft_dir) {
        free(o.ids);
        return cli_error("%s", "draft-logits needs --draft DIR, --ids and --out FILE");
    }
    session s;
    if ((rc = session_open(&s, &o, o.n_ids + 1))) {
        free(o.ids);
        return rc;
    }
    const int V = s.model.cfg.vocab_size, B = s.spec.B;
    float *logits = fd_malloc((size_t)(B - 1) * V * sizeof(float));
    int32_t anchor, draft[FD_SPEC_MAX_BLOCK];
    rc = dflash_prefill(&s.spec, o.ids, o.n_ids, o.prefill_chunk, NULL, &anchor);
    if (!rc) rc = dflash_draft(&s.spec, anchor, draft, logits);
    if (rc) {
        fprintf(stderr, "flashdelta: error: %s\n", fd_error_msg());
    } else {
        rc = write_f32(o.out, logits, (size_t)(B - 1) * V);
        if (!rc) FD_INFO("anchor %d; wrote %d x %d draft logits to %s", anchor, B - 1, V, o.out);
    }
    free(logits);
    free(o.ids);
    session_close(&s);
    return rc ? 1 : 0;
}

// bench: cold prefill, pure decode and DFlash rounds (oracle drafter) at several context lengths.
int cmd_bench(int argc, char **argv) {
    cli_opts o;
    int rc = parse_opts(argc, argv, &o, 1);
    if (rc) return rc;
    free(o.ids);
    if (o.trace) return cli_error("%s", "bench does not run traced (tracing synchronises every op); use --trace with "
                                        "generate or logits");
    int64_t cap = 0;
    for (int i = 0; i < o.bench.n_ctx; i++) cap = o.bench.ctx[i] > cap ? o.bench.ctx[i] : cap;
    cap += o.bench.decode_tokens + 3 * FD_SPEC_MAX_BLOCK + 8; // decode, the oracle reference, a verify block
    if (!o.ctx) o.ctx = cap;
    if (o.prefill_chunk) o.bench.prefill_chunk = o.prefill_chunk;
    else o.prefill_chunk = o.bench.prefill_chunk;
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
        fprintf(stderr, "bench: DFlash drafter %s (%s), block %d; rounds use the ORACLE drafter with forced acceptance "
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
        routes_print_hits(&s.eng, stdout);
        engine_graphs_print(&s.eng, stdout);
        if (routes_verify(&s.eng)) { // the bench must have measured the routes it names
            fprintf(stderr, "flashdelta: error: %s\n", fd_error_msg());
            rc = 1;
        } else {
            printf("route check: every counted call ran its selected route\n");
        }
        if (o.json_out && bench_write_json(o.json_out, o.random_cfg ? o.random_cfg : o.model_dir, &o.bench, rows,
                                           o.bench.n_ctx)) {
            fprintf(stderr, "flashdelta: error: %s\n", fd_error_msg());
            rc = 1;
        }
    }
    session_close(&s);
    return rc ? 1 : 0;
}

#ifndef FD_SOURCE_DIR
#define FD_SOURCE_DIR "."
#endif

// The bundled demo: the tiny random-weight qwen3_5 fixture, whose prompt and HF greedy continuation ship
// with it, so the demo can say whether the engine reproduced Hugging Face transformers exactly.
static const char *demo_dir(void) {
    return FD_SOURCE_DIR "/tests/data/fixtures/qwen35_dense_tied";
}

static int load_demo_prompt(const char *dir, int32_t **ids, int64_t *n, int32_t **ref, int *n_ref) {
    char *p = fd_path_join(dir, "prompt.json");
    json_error_t err;
    json_t *root = json_load_file(p, 0, &err);
    free(p);
    if (!root) return fd_error_set("%s/prompt.json: %s", dir, err.text);
    json_t *a = json_object_get(root, "ids"), *g = json_object_get(root, "greedy");
    *n = (int64_t)json_array_size(a);
    *n_ref = (int)json_array_size(g);
    *ids = fd_malloc(sizeof(int32_t) * (size_t)(*n + 1));
    *ref = fd_malloc(sizeof(int32_t) * (size_t)(*n_ref + 1));
    for (int64_t i = 0; i < *n; i++) (*ids)[i] = (int32_t)json_integer_value(json_array_get(a, (size_t)i));
    for (int i = 0; i < *n_ref; i++) (*ref)[i] = (int32_t)json_integer_value(json_array_get(g, (size_t)i));
    json_decref(root);
    return *n > 0 ? 0 : fd_error_set("%s/prompt.json: no prompt ids", dir);
}

// The demo's second half: the same prompt through DFlash with the bundled (random-weight) drafter. The ids
// must not change; with random weights the drafts are almost never accepted, which the stats show plainly.
static int demo_dflash(const cli_opts *plain, const int32_t *want, double plain_s) {
    cli_opts o = *plain;
    o.draft_dir = FD_SOURCE_DIR "/tests/data/dflash/qwen35_dense_tied_b8";
    session s;
    int rc = session_open(&s, &o, o.n_ids + o.n_new);
    int32_t *out = fd_malloc(sizeof(int32_t) * (size_t)(o.n_new + 1));
    double t0 = fd_time_s();
    if (!rc) rc = dflash_generate(&s.spec, o.ids, o.n_ids, o.prefill_chunk, o.n_new, NULL, out);
    double dt = fd_time_s() - t0;
    if (!rc) {
        const int same = !memcmp(out, want, sizeof(int32_t) * (size_t)o.n_new);
        printf("\nDFlash with the bundled drafter (tests/data/dflash/qwen35_dense_tied_b8, RANDOM weights, block %d):\n"
               "  same ids as plain decoding: %s; %.3f s vs %.3f s plain; emitted tokens/round %.2f (random drafts are\n"
               "  almost never accepted; `flashdelta bench` measures rounds at a set acceptance with the oracle drafter)\n",
               s.spec.B, same ? "yes" : "NO", dt, plain_s,
               s.spec.st.rounds ? (double)s.spec.st.emitted / (double)s.spec.st.rounds : 0.0);
        if (!same) rc = 1;
    } else {
        fprintf(stderr, "flashdelta: error: %s\n", fd_error_msg());
    }
    free(out);
    session_close(&s);
    return rc;
}

// The trained demo (models/, made by tools/train_tiny.py; env FD_DEMO_MODELS names another folder): a held-out
// code prompt (tests/data/trained/val_prompts.json) through our tokenizer, greedy text streamed, then the same
// prompt through DFlash with the trained drafter: ids must not change; tokens/s of both and emitted tokens/round.
static char *trained_root(void) {
    const char *env = getenv("FD_DEMO_MODELS");
    char *root = fd_strdup(env ? env : FD_SOURCE_DIR "/models");
    char *cfg = fd_sprintf("%s/tiny-qwen35/config.json", root), *dcfg = fd_sprintf("%s/tiny-qwen35-dflash/config.json", root);
    FILE *f1 = fopen(cfg, "r"), *f2 = fopen(dcfg, "r");
    const int ok = f1 && f2;
    if (f1) fclose(f1);
    if (f2) fclose(f2);
    free(cfg);
    free(dcfg);
    if (!ok) {
        free(root);
        return NULL;
    }
    return root;
}

// Prompt text and, where shipped, the ids and HF greedy continuation tools/train_tiny.py computed for it.
static const char *k_trained_default_prompt = "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n";
static char *trained_prompt(json_t **ref_ids, json_t **ref_greedy, json_t **roots) {
    json_error_t err;
    roots[0] = json_load_file(FD_SOURCE_DIR "/tests/data/trained/val_prompts.json", 0, &err);
    roots[1] = json_load_file(FD_SOURCE_DIR "/tests/data/trained/expected.json", 0, &err);
    json_t *p0 = json_array_get(roots[0], 0);
    const char *text = json_string_value(json_object_get(p0, "text"));
    *ref_ids = json_object_get(p0, "ids");
    *ref_greedy = json_object_get(roots[1], "greedy");
    return fd_strdup(text ? text : k_trained_default_prompt);
}

static int demo_trained(const cli_opts *po, const char *root, int n_given) {
    cli_opts o = *po;
    char *tdir = fd_sprintf("%s/tiny-qwen35", root), *ddir = fd_sprintf("%s/tiny-qwen35-dflash", root);
    char *tpath = fd_sprintf("%s/tokenizer.json", tdir);
    json_t *roots[2] = {NULL, NULL}, *ref_ids = NULL, *ref_greedy = NULL;
    char *text = trained_prompt(&ref_ids, &ref_greedy, roots);
    tok_tokenizer *tok = tok_load(tpath);
    tok_ids ids = {0};
    int rc = !tok || tok_encode(tok, text, strlen(text), &ids) || !ids.n;
    if (rc) fprintf(stderr, "flashdelta: error: %s\n", fd_error_msg());
    o.model_dir = tdir;
    o.ids = ids.ids;
    o.n_ids = (int64_t)ids.n;
    if (!n_given) o.n_new = 64;
    // HF's greedy ids apply when our tokenizer gave the ids they were computed for
    int n_ref = 0;
    if (!rc && json_array_size(ref_ids) == ids.n) {
        n_ref = (int)json_array_size(ref_greedy);
        for (size_t i = 0; i < ids.n; i++)
            if (json_integer_value(json_array_get(ref_ids, i)) != ids.ids[i]) n_ref = 0;
    }
    session s;
    memset(&s, 0, sizeof s);
    int32_t *out = fd_malloc(sizeof(int32_t) * (size_t)(o.n_new + 1)), *spec = NULL;
    double t0 = 0, t1 = 0, t2 = 0;
    if (!rc && !(rc = session_open(&s, &o, o.n_ids + o.n_new))) {
        printf("flashdelta demo: a small TRAINED qwen3_5 model (models/tiny-qwen35: %.1f M parameters, %d layers, "
               "trained\non Python source by tools/train_tiny.py; see models/README.md) and its DFlash drafter "
               "(models/tiny-qwen35-dflash).\n\nprompt (held-out code, %lld tokens):\n%s\n---- greedy continuation "
               "(%d tokens, streamed):\n",
               (double)s.model.n_params / 1e6, s.model.cfg.num_layers, (long long)o.n_ids, text, o.n_new);
        fflush(stdout);
        const int V = s.model.cfg.vocab_size;
        float *logits = fd_malloc((size_t)V * sizeof(float));
        tok_stream *ts = tok_stream_new(tok, 1);
        size_t len = 0;
        const char *piece;
        t0 = fd_time_s();
        rc = engine_prefill(&s.eng, o.ids, o.n_ids, o.prefill_chunk, logits, 0);
        t1 = fd_time_s();
        if (!rc && o.n_new > 0) out[0] = engine_argmax(logits, V);
        for (int i = 0; !rc && i < o.n_new; i++) {
            if ((piece = tok_stream_push(ts, out[i], &len)) && len) fwrite(piece, 1, len, stdout), fflush(stdout);
            if (i + 1 < o.n_new) rc = engine_forward_greedy(&s.eng, &out[i], 1, &out[i + 1]);
        }
        t2 = fd_time_s();
        if ((piece = tok_stream_flush(ts, &len)) && len) fwrite(piece, 1, len, stdout);
        tok_stream_free(ts);
        free(logits);
        if (rc) fprintf(stderr, "flashdelta: error: %s\n", fd_error_msg());
    }
    session_close(&s);
    if (!rc) {
        printf("\n----\n\nplain decoding: prefill %lld tokens in %.3f s (%.0f tok/s); decode %d tokens in %.3f s "
               "(%.1f tok/s); backend %s\n",
               (long long)o.n_ids, t1 - t0, (double)o.n_ids / (t1 - t0), o.n_new, t2 - t1,
               o.n_new > 1 ? (o.n_new - 1) / (t2 - t1) : 0.0, o.backend);
        int same = 0, n_cmp = n_ref < o.n_new ? n_ref : o.n_new;
        while (same < n_cmp && out[same] == (int32_t)json_integer_value(json_array_get(ref_greedy, (size_t)same)))
            same++;
        if (n_cmp) {
            printf("matches Hugging Face transformers' greedy output: %s (%d of %d reference tokens identical)\n",
                   same == n_cmp ? "yes" : "NO", same, n_cmp);
            if (same != n_cmp) rc = 1;
        }
    }
    if (!rc) {
        o.draft_dir = ddir;
        spec = fd_malloc(sizeof(int32_t) * (size_t)(o.n_new + 1));
        if (!(rc = session_open(&s, &o, o.n_ids + o.n_new))) {
            rc = dflash_generate(&s.spec, o.ids, o.n_ids, o.prefill_chunk, o.n_new, NULL, spec);
            if (rc) fprintf(stderr, "flashdelta: error: %s\n", fd_error_msg());
        }
        if (!rc) {
            const fd_spec_stats *st = &s.spec.st;
            const int same = !memcmp(out, spec, sizeof(int32_t) * (size_t)o.n_new);
            const double plain_tps = o.n_new > 1 ? (o.n_new - 1) / (t2 - t1) : 0.0;
            const double spec_tps = st->round_s > 0 ? (double)st->emitted / st->round_s : 0.0;
            printf("DFlash with the trained drafter (block %d): same ids as plain decoding: %s; decode %.1f tok/s vs "
                   "%.1f tok/s plain (%.2fx); %lld rounds, emitted tokens/round %.2f\n",
                   s.spec.B, same ? "yes" : "NO", spec_tps, plain_tps, plain_tps > 0 ? spec_tps / plain_tps : 0.0,
                   (long long)st->rounds, st->rounds ? (double)st->emitted / (double)st->rounds : 0.0);
            if (!same) rc = 1;
        }
        session_close(&s);
    }
    free(spec);
    free(out);
    tok_ids_free(&ids);
    tok_free(tok);
    json_decref(roots[0]);
    json_decref(roots[1]);
    free(text);
    free(tpath);
    free(tdir);
    free(ddir);
    return rc ? 1 : 0;
}

int cmd_run(int argc, char **argv) {
    cli_opts o;
    int rc = parse_opts(argc, argv, &o, 0);
    if (rc) return rc;
    int32_t *ref = NULL;
    int n_ref = 0, demo = !o.model_dir;
    if (demo && !o.ids) { // the trained models when models/ has them, else the random-weight fixture below
        char *root = trained_root();
        if (root) {
            int n_given = 0;
            for (int i = 1; i < argc; i++) n_given |= !strcmp(argv[i], "-n") || !strcmp(argv[i], "--n-new");
            rc = demo_trained(&o, root, n_given);
            free(root);
            return rc;
        }
    }
    if (demo) {
        o.model_dir = demo_dir();
        if (!o.ids && load_demo_prompt(o.model_dir, &o.ids, &o.n_ids, &ref, &n_ref)) {
            fprintf(stderr, "flashdelta: error: demo model not found: %s\n", fd_error_msg());
            return 1;
        }
        if (ref && o.n_new > n_ref) o.n_new = n_ref;
        if (ref) o.n_new = n_ref;
        printf("flashdelta demo: a tiny qwen3_5 model with RANDOM weights (tests/data/fixtures/qwen35_dense_tied,\n"
               "made with Hugging Face transformers). Its tokens mean nothing; the demo shows the engine loading a\n"
               "checkpoint, prefilling %lld prompt ids and decoding greedily, and checks the result against the\n"
               "continuation HF transformers produced for the same prompt.\n\n",
               (long long)o.n_ids);
    } else if (!o.ids) {
        free(ref);
        return cli_error("%s", "run MODEL_DIR needs --ids (text prompts arrive with the tokenizer)");
    }
    session s;
    if ((rc = session_open(&s, &o, o.n_ids + o.n_new))) {
        free(o.ids);
        free(ref);
        return rc;
    }
    const int V = s.model.cfg.vocab_size;
    float *logits = fd_malloc((size_t)V * sizeof(float));
    int32_t *out = fd_malloc(sizeof(int32_t) * (size_t)(o.n_new + 1));
    double t0 = fd_time_s();
    rc = engine_prefill(&s.eng, o.ids, o.n_ids, o.prefill_chunk, logits, 0);
    double t1 = fd_time_s();
    if (!rc && o.n_new > 0) out[0] = engine_argmax(logits, V);
    for (int i = 0; !rc && i + 1 < o.n_new; i++) rc = engine_forward_greedy(&s.eng, &out[i], 1, &out[i + 1]);
    double t2 = fd_time_s();
    if (rc) {
        fprintf(stderr, "flashdelta: error: %s\n", fd_error_msg());
    } else {
        printf("generated ids:");
        for (int i = 0; i < o.n_new; i++) printf(" %d", out[i]);
        printf(
            "\n\nprefill: %lld tokens in %.3f s (%.0f tok/s); decode: %d tokens in %.3f s (%.0f tok/s); backend %s\n",
            (long long)o.n_ids, t1 - t0, (double)o.n_ids / (t1 - t0), o.n_new, t2 - t1,
            o.n_new > 1 ? (o.n_new - 1) / (t2 - t1) : 0.0, s.be->name);
        if (ref) {
            int same = 0;
            while (same < o.n_new && out[same] == ref[same]) same++;
            printf("matches Hugging Face transformers' greedy output: %s (%d of %d tokens identical)\n",
                   same == o.n_new ? "yes" : "NO", same, o.n_new);
            if (same != o.n_new) rc = 1;
        }
    }
    if (!rc && demo) rc = demo_dflash(&o, out, t2 - t0);
    free(logits);
    free(out);
    free(o.ids);
    free(ref);
    session_close(&s);
    return rc ? 1 : 0;
}
