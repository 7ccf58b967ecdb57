// Model commands: info, logits, generate, draft-logits.
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/gen.h"
#include "engine/engine_graphs.h"
#include "engine/routes.h"
#include "io/chat_template.h"

static const opt_id k_info_opts[] = {O_MODEL, O_COUNT};
const cmd_spec cmd_info_spec = {"info", "MODEL_DIR",
                                "architecture, layer plan, parameters, dtypes (a model or a "
                                "DFlash drafter)",
                                k_info_opts, NULL};

// A DFlash drafter directory (architectures names DFlashDraftModel / DFlash2DraftModel)?
static int is_drafter_dir(const char *dir) {
    char *p = fd_path_join(dir, "config.json");
    json_t *root = json_load_file(p, 0, NULL);
    free(p);
    int yes = 0;
    json_t *a = json_object_get(root, "architectures");
    for (size_t i = 0; i < json_array_size(a); i++) {
        const char *s = json_string_value(json_array_get(a, i));
        yes |= s && strstr(s, "DFlash") != NULL;
    }
    json_decref(root);
    return yes;
}

static int info_drafter(const char *dir) {
    fd_drafter d;
    if (drafter_load(dir, NULL, &d)) {
        fprintf(stderr, "flashdelta: error: %s\n", fd_error_msg());
        return 1;
    }
    printf("architecture: %s (a DFlash drafter: give it to --draft with its target model)\n", d.architecture);
    printf("layers: %d (attention over the context and the block, non-causal)\n", d.num_layers);
    printf("hidden: %d  vocab: %d (embedding and LM head are the target's)\n", d.hidden_size, d.vocab_size);
    printf("attention: %d q heads, %d kv heads, head_dim %d, rotary %d dims, theta %g\n", d.num_heads, d.num_kv_heads,
           d.head_dim, d.rotary_dim, d.rope_theta);
    printf("dense ffn: %d\nblock size: %d  mask token: %d\ntarget layers tapped:", d.intermediate_size, d.block_size,
           d.mask_token_id);
    for (int i = 0; i < d.n_taps; i++) printf("%s%d", i ? "," : " ", d.target_layer_ids[i]);
    if (d.num_target_layers) printf(" (of a %d-layer target)", d.num_target_layers);
    int64_t params = 0;
    int per_dtype[FD_DTYPE_COUNT] = {0};
    for (int i = 0; i < d.st.n_tensors; i++) {
        int64_t n = 1;
        for (int k = 0; k < d.st.tensors[i].ndim; k++) n *= d.st.tensors[i].shape[k];
        params += n;
        if ((unsigned)d.st.tensors[i].dtype < FD_DTYPE_COUNT) per_dtype[d.st.tensors[i].dtype]++;
    }
    printf("\nparameters: %lld (%.3f M)\ndtypes:", (long long)params, (double)params / 1e6);
    for (int t = 0; t < FD_DTYPE_COUNT; t++)
        if (per_dtype[t]) printf(" %s x%d", fd_dtype_name((fd_dtype)t), per_dtype[t]);
    printf("  (%d tensors in %d file%s)\n", d.st.n_tensors, d.st.n_files, d.st.n_files == 1 ? "" : "s");
    drafter_free(&d);
    return 0;
}

int cmd_info(int argc, char **argv) {
    cli_opts o;
    int done, rc = cli_parse(&cmd_info_spec, argc, argv, &o, 1, &done);
    if (rc || done) return rc;
    if (is_drafter_dir(o.model_dir)) return info_drafter(o.model_dir);
    fd_model m;
    if (model_load(o.model_dir, &m)) {
        fprintf(stderr, "flashdelta: error: %s\n", fd_error_msg());
        return 1;
    }
    model_print_info(&m, stdout);
    model_free(&m);
    return 0;
}

// --ids, or -p TEXT through the model's tokenizer (kept in *tok for printing text; NULL with --ids).
static int prompt_of(cli_opts *o, const char *cmd, tok_tokenizer **tok) {
    *tok = NULL;
    if (o->ids) return 0;
    if (!o->prompt) return cli_error("%s needs --ids 1,2,3 or -p TEXT", cmd);
    *tok = cli_tokenizer(o->model_dir);
    if (!*tok) return 1;
    int rc = cli_prompt_ids(o, *tok);
    if (rc) {
        tok_free(*tok);
        *tok = NULL;
    }
    return rc;
}

static const opt_id k_logits_opts[] = {O_MODEL, O_IDS, O_PROMPT, O_OUT, O_TP, CLI_ENGINE_OPTS, O_TRACE, O_COUNT};
const cmd_spec cmd_logits_spec = {"logits", "MODEL_DIR (--ids 1,2,3 | -p TEXT) --out FILE",
                                  "float32 logits of every prompt position, [n_ids x vocab]", k_logits_opts, NULL};

int cmd_logits(int argc, char **argv) {
    cli_opts o;
    int done, rc = cli_parse(&cmd_logits_spec, argc, argv, &o, 1, &done);
    if (rc || done) return rc;
    if (!o.out) {
        free(o.ids);
        return cli_error("logits needs --out FILE");
    }
    tok_tokenizer *tok;
    if ((rc = prompt_of(&o, "logits", &tok))) return rc;
    tok_free(tok);
    session s;
    if ((rc = session_open(&s, &o, o.n_ids))) {
        free(o.ids);
        return rc;
    }
    const int V = s.model.cfg.vocab_size;
    float *logits = fd_malloc((size_t)o.n_ids * V * sizeof(float));
    cli_progress pr;
    progress_attach(&pr, &s.eng, "prefill");
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

static const char *generate_why_not(opt_id id) {
    return id == O_RANDOM_WEIGHTS ? "generate runs a checkpoint (bench takes random weights)" : NULL;
}
static const opt_id k_generate_opts[] = {O_MODEL, O_IDS,        O_PROMPT,        O_N_NEW, O_TEMPERATURE,
                                         O_TOP_K, O_TOP_P,      O_SEED,          O_DRAFT, O_BLOCK_SIZE,
                                         O_TREE_BUDGET, O_STATS, O_IGNORE_EOS, O_TP, CLI_ENGINE_OPTS, O_TRACE,
                                         O_COUNT};
const cmd_spec cmd_generate_spec = {
    "generate", "MODEL_DIR (--ids 1,2,3 | -p TEXT)",
    "-p TEXT ('-' = stdin): the continuation as text, streamed (ends at the model's eos); --ids: the N new ids on "
    "one line. Greedy unless --temperature; DFlash with --draft (same ids when greedy)",
    k_generate_opts, generate_why_not};

int cmd_generate(int argc, char **argv) {
    cli_opts o;
    int done, rc = cli_parse(&cmd_generate_spec, argc, argv, &o, 1, &done);
    if (rc || done) return rc;
    if ((rc = cli_check_sampling(&o))) {
        free(o.ids);
        return rc;
    }
    tok_tokenizer *tok;
    if ((rc = prompt_of(&o, "generate", &tok))) return rc;
    session s;
    if ((rc = session_open(&s, &o, o.n_ids + o.n_new))) {
        free(o.ids);
        tok_free(tok);
        return rc;
    }
    int32_t *out = fd_malloc((size_t)(o.n_new + 1) * sizeof *out);
    fd_sampler smp;
    sampler_init(&smp, o.temperature, o.top_k, o.top_p, o.seed);
    cli_progress pr;
    progress_attach(&pr, &s.eng, "prefill");
    double t0 = fd_time_s();
    int n_out = o.n_new;
    if (tok) { // text: streamed as it is generated, ending at the model's own end-of-sequence ids
        int32_t eos[16];
        int n_eos = chat_eos_ids(o.model_dir, tok, eos, 16);
        text_out txt;
        text_out_init(&txt, tok);
        gen_sink k = {eos, n_eos > 0 && !o.ignore_eos ? n_eos : 0, NULL, text_out_token, &txt};
        gen_result r;
        rc = gen_run(&s, o.ids, o.n_ids, o.prefill_chunk, o.n_new, &smp, &k, out, &r);
        text_out_finish(&txt);
        if (!txt.wrote_newline_last) putchar('\n');
        n_out = r.n_out;
    } else {
        rc = s.has_draft ? dflash_generate(&s.spec, o.ids, o.n_ids, o.prefill_chunk, o.n_new, &smp, out)
                         : engine_generate(&s.eng, o.ids, o.n_ids, o.prefill_chunk, o.n_new, &smp, out);
        if (!rc) {
            for (int i = 0; i < o.n_new; i++) printf("%s%d", i ? " " : "", out[i]);
            printf("\n");
        }
    }
    double dt = fd_time_s() - t0;
    fflush(stdout);
    if (rc) {
        fprintf(stderr, "flashdelta: error: %s\n", fd_error_msg());
    } else {
        FD_INFO("%lld prompt + %d new tokens in %.3f s", (long long)o.n_ids, n_out, dt);
        if (s.has_draft && o.stats) dflash_print_stats(&s.spec, stderr);
        if (o.stats) routes_print_hits(&s.eng, stderr);
        if (o.stats) engine_graphs_print(&s.eng, stderr);
    }
    free(out);
    free(o.ids);
    tok_free(tok);
    session_close(&s);
    return rc ? 1 : 0;
}

static const opt_id k_draft_logits_opts[] = {O_MODEL,      O_DRAFT,         O_IDS,   O_PROMPT, O_OUT,
                                             O_BLOCK_SIZE, CLI_ENGINE_OPTS, O_TRACE, O_COUNT};
const cmd_spec cmd_draft_logits_spec = {
    "draft-logits", "MODEL_DIR --draft DIR (--ids 1,2,3 | -p TEXT) --out FILE",
    "prefill, greedy anchor, one draft forward on [anchor, MASK x (B-1)]: (B-1) x vocab float32", k_draft_logits_opts,
    NULL};

// draft-logits: prefill the target on the ids, take the greedy anchor, run one draft forward on
// [anchor, MASK x (B-1)] and write the (B-1) x vocab fp32 logits.
int cmd_draft_logits(int argc, char **argv) {
    cli_opts o;
    int done, rc = cli_parse(&cmd_draft_logits_spec, argc, argv, &o, 1, &done);
    if (rc || done) return rc;
    if (!o.out || !o.draft_dir) {
        free(o.ids);
        return cli_error("draft-logits needs --draft DIR and --out FILE");
    }
    tok_tokenizer *tok;
    if ((rc = prompt_of(&o, "draft-logits", &tok))) return rc;
    tok_free(tok);
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
