// Binds a Hugging Face checkpoint's tensors to the model contract (model.h): every tensor is found by name,
// its dtype must be F32/F16/BF16 and its shape must be exactly the one the config implies, or loading fails
// with a one-line message naming the tensor and the file. qwen3_5 / qwen3_5_moe / qwen3_next share the
// decoder; they differ in the GDN projection layout and the FFN.
#include "model/model.h"


#include <stdarg.h>
#include <stdlib.h>
#include <string.h>


// Binds `name` with the expected shape (ndim dims given as varargs); linear: a linear layer's weight, which may
// also be FP8 block-scaled as published, or quantized at load (bind.h).
static int bind_v(fd_model *m, fd_weight *w, const char *name, int linear, int ndim, va_list ap) {
    int64_t want[ST_MAX_DIMS];
    for (int i = 0; i < ndim && i < ST_MAX_DIMS; i++) want[i] = va_arg(ap, int64_t);
    return linear ? bind_linear(&m->binder, w, name, ndim, want) : bind_tensor(&m->binder, w, name, ndim, want);
}
static int bind(fd_model *m, fd_weight *w, const char *name, int ndim, ...) {
    va_list ap;
    va_start(ap, ndim);
    const int rc = bind_v(m, w, name, 0, ndim, ap);
    va_end(ap);
    return rc;
}
static int bind_lin(fd_model *m, fd_weight *w, const char *name, int ndim, ...) {
    va_list ap;
    va_start(ap, ndim);
    const int rc = bind_v(m, w, name, 1, ndim, ap);
    va_end(ap);
    return rc;
}

// A view of `rows` rows starting at row `row0` of a bound fused expert tensor, as a 2-D [rows, cols] weight.
static int view_rows(const fd_weight *w, int64_t row0, int64_t rows, int64_t cols, fd_weight *out) {
    fd_weight w2 = *w;
    w2.cols = cols;
    return fd_weight_view_rows(&w2, row0, rows, out);
}

#define NAME(...) (snprintf(nm, sizeof nm, __VA_ARGS__), nm)

static int bind_gdn(fd_model *m, fd_layer *L, const char *p, int i) {
    const fd_config *c = &m->cfg;
    char nm[256];
    const int64_t d = c->hidden_size, Hk = c->gdn_num_k_heads, Hv = c->gdn_num_v_heads, dk = c->gdn_k_dim,
                  dv = c->gdn_v_dim, conv_dim = 2 * Hk * dk + Hv * dv;
    if (c->arch == FD_ARCH_QWEN3_NEXT) {
        FD_TRY(bind_lin(m, &L->in_qkvz, NAME("%slayers.%d.linear_attn.in_proj_qkvz.weight", p, i), 2,
                    2 * Hk * dk + 2 * Hv * dv, d));
        FD_TRY(bind(m, &L->in_ba, NAME("%slayers.%d.linear_attn.in_proj_ba.weight", p, i), 2, 2 * Hv, d));
    } else {
        FD_TRY(bind_lin(m, &L->in_qkv, NAME("%slayers.%d.linear_attn.in_proj_qkv.weight", p, i), 2, conv_dim, d));
        FD_TRY(bind_lin(m, &L->in_z, NAME("%slayers.%d.linear_attn.in_proj_z.weight", p, i), 2, Hv * dv, d));
        FD_TRY(bind(m, &L->in_b, NAME("%slayers.%d.linear_attn.in_proj_b.weight", p, i), 2, Hv, d));
        FD_TRY(bind(m, &L->in_a, NAME("%slayers.%d.linear_attn.in_proj_a.weight", p, i), 2, Hv, d));
    }
    FD_TRY(bind(m, &L->conv_w, NAME("%slayers.%d.linear_attn.conv1d.weight", p, i), 3, conv_dim, (int64_t)1,
                (int64_t)c->gdn_conv_kernel));
    FD_TRY(bind(m, &L->A_log, NAME("%slayers.%d.linear_attn.A_log", p, i), 1, Hv));
    FD_TRY(bind(m, &L->dt_bias, NAME("%slayers.%d.linear_attn.dt_bias", p, i), 1, Hv));
    FD_TRY(bind(m, &L->gdn_norm, NAME("%slayers.%d.linear_attn.norm.weight", p, i), 1, dv));
    FD_TRY(bind_lin(m, &L->out_proj, NAME("%slayers.%d.linear_attn.out_proj.weight", p, i), 2, d, Hv * dv));
    return 0;
}

static int bind_attn(fd_model *m, fd_layer *L, const char *p, int i) {
    const fd_config *c = &m->cfg;
    char nm[256];
    const int64_t d = c->hidden_size, H = c->num_heads, Hkv = c->num_kv_heads, hd = c->head_dim;
    FD_TRY(bind_lin(m, &L->q_proj, NAME("%slayers.%d.self_attn.q_proj.weight", p, i), 2, 2 * H * hd, d));
    FD_TRY(bind_lin(m, &L->k_proj, NAME("%slayers.%d.self_attn.k_proj.weight", p, i), 2, Hkv * hd, d));
    FD_TRY(bind_lin(m, &L->v_proj, NAME("%slayers.%d.self_attn.v_proj.weight", p, i), 2, Hkv * hd, d));
    FD_TRY(bind_lin(m, &L->o_proj, NAME("%slayers.%d.self_attn.o_proj.weight", p, i), 2, d, H * hd));
    FD_TRY(bind(m, &L->q_norm, NAME("%slayers.%d.self_attn.q_norm.weight", p, i), 1, hd));
    FD_TRY(bind(m, &L->k_norm, NAME("%slayers.%d.self_attn.k_norm.weight", p, i), 1, hd));
    return 0;
}

// Experts as published either per expert (mlp.experts.E.{gate,up,down}_proj.weight) or fused
// (mlp.experts.gate_up_proj [E, 2I, d] with gate rows first, mlp.experts.down_proj [E, d, I]).
static int bind_moe(fd_model *m, fd_layer *L, const char *p, int i) {
    const fd_config *c = &m->cfg;
    char nm[256];
    const int64_t d = c->hidden_size, E = c->num_experts, I = c->moe_intermediate_size;
    FD_TRY(bind(m, &L->router, NAME("%slayers.%d.mlp.gate.weight", p, i), 2, E, d));
    L->ex_gate = fd_calloc((size_t)E, sizeof(fd_weight));
    L->ex_up = fd_calloc((size_t)E, sizeof(fd_weight));
    L->ex_down = fd_calloc((size_t)E, sizeof(fd_weight));
    if (st_find(&m->st, NAME("%slayers.%d.mlp.experts.gate_up_proj", p, i))) {
        fd_weight gu, dn;
        FD_TRY(bind_lin(m, &gu, nm, 3, E, 2 * I, d));
        FD_TRY(bind_lin(m, &dn, NAME("%slayers.%d.mlp.experts.down_proj", p, i), 3, E, d, I));
        for (int64_t e = 0; e < E; e++) {
            FD_TRY(view_rows(&gu, e * 2 * I, I, d, &L->ex_gate[e]));
            FD_TRY(view_rows(&gu, e * 2 * I + I, I, d, &L->ex_up[e]));
            FD_TRY(view_rows(&dn, e * d, d, I, &L->ex_down[e]));
        }
    } else {
        for (int64_t e = 0; e < E; e++) {
            FD_TRY(bind_lin(m, &L->ex_gate[e], NAME("%slayers.%d.mlp.experts.%lld.gate_proj.weight", p, i, (long long)e),
                        2, I, d));
            FD_TRY(bind_lin(m, &L->ex_up[e], NAME("%slayers.%d.mlp.experts.%lld.up_proj.weight", p, i, (long long)e), 2,
                        I, d));
            FD_TRY(bind_lin(m, &L->ex_down[e], NAME("%slayers.%d.mlp.experts.%lld.down_proj.weight", p, i, (long long)e),
                        2, d, I));
        }
    }
    const int64_t Is = c->shared_expert_intermediate_size;
    if (Is > 0) {
        FD_TRY(bind_lin(m, &L->sh_gate, NAME("%slayers.%d.mlp.shared_expert.gate_proj.weight", p, i), 2, Is, d));
        FD_TRY(bind_lin(m, &L->sh_up, NAME("%slayers.%d.mlp.shared_expert.up_proj.weight", p, i), 2, Is, d));
        FD_TRY(bind_lin(m, &L->sh_down, NAME("%slayers.%d.mlp.shared_expert.down_proj.weight", p, i), 2, d, Is));
        FD_TRY(bind(m, &L->sh_gate_w, NAME("%slayers.%d.mlp.shared_expert_gate.weight", p, i), 2, (int64_t)1, d));
    }
    return 0;
}

static void moe_wire(const fd_config *c, fd_layer *L) {
    fd_moe_weights *mw = &L->moe;
    mw->router = &L->router;
    mw->gate = L->ex_gate;
    mw->up = L->ex_up;
    mw->down = L->ex_down;
    const int has_shared = c->shared_expert_intermediate_size > 0;
    mw->sh_gate = has_shared ? &L->sh_gate : NULL;
    mw->sh_up = has_shared ? &L->sh_up : NULL;
    mw->sh_down = has_shared ? &L->sh_down : NULL;
    mw->sh_gate_w = has_shared ? &L->sh_gate_w : NULL;
    mw->n_experts = c->num_experts;
    mw->top_k = c->num_experts_per_tok;
    mw->inter = c->moe_intermediate_size;
    mw->sh_inter = c->shared_expert_intermediate_size;
    mw->renorm = c->norm_topk_prob;
}

static int bind_all(fd_model *m) {
    m->binder.st = &m->st;
    m->binder.quant = &m->cfg.quant;
    const fd_config *c = &m->cfg;
    char nm[256];
    const int64_t d = c->hidden_size, V = c->vocab_size;
    const char *p = st_find(&m->st, "model.language_model.embed_tokens.weight") ? "model.language_model." : "model.";
    snprintf(m->weight_prefix, sizeof m->weight_prefix, "%s", p);
    FD_TRY(bind(m, &m->embed, NAME("%sembed_tokens.weight", p), 2, V, d));
    FD_TRY(bind(m, &m->final_norm, NAME("%snorm.weight", p), 1, d));
    if (m->binder.synthetic ? !c->tie_word_embeddings : st_find(&m->st, "lm_head.weight") != NULL) {
        FD_TRY(bind(m, &m->lm_head, "lm_head.weight", 2, V, d));
    } else if (c->tie_word_embeddings) {
        m->lm_head = m->embed;
    } else {
        return fd_error_set("missing tensor 'lm_head.weight' (expected shape [%lld, %lld]; the config does not "
                            "tie word embeddings)",
                            (long long)V, (long long)d);
    }
    m->layers = fd_calloc((size_t)c->num_layers, sizeof(fd_layer));
    for (int i = 0; i < c->num_layers; i++) {
        fd_layer *L = &m->layers[i];
        L->kind = c->layer_kind[i];
        L->is_moe = c->layer_is_moe[i];
        FD_TRY(bind(m, &L->input_norm, NAME("%slayers.%d.input_layernorm.weight", p, i), 1, d));
        FD_TRY(bind(m, &L->post_norm, NAME("%slayers.%d.post_attention_layernorm.weight", p, i), 1, d));
        FD_TRY(L->kind == FD_LAYER_GDN ? bind_gdn(m, L, p, i) : bind_attn(m, L, p, i));
        if (L->is_moe) {
            FD_TRY(bind_moe(m, L, p, i));
            moe_wire(c, L);
        } else {
            const int64_t I = c->intermediate_size;
            FD_TRY(bind_lin(m, &L->gate_proj, NAME("%slayers.%d.mlp.gate_proj.weight", p, i), 2, I, d));
            FD_TRY(bind_lin(m, &L->up_proj, NAME("%slayers.%d.mlp.up_proj.weight", p, i), 2, I, d));
            FD_TRY(bind_lin(m, &L->down_proj, NAME("%slayers.%d.mlp.down_proj.weight", p, i), 2, d, I));
        }
    }
    return 0;
}

int model_random(const char *config_path, uint64_t seed, fd_model *m) {
    return model_random_with(config_path, seed, NULL, m);
}

int model_random_with(const char *config_path, uint64_t seed, const fd_load_opts *o, fd_model *m) {
    memset(m, 0, sizeof *m);
    m->binder.quantize_fp8 = o && o->quantize_fp8;
    m->binder.quantize_int4 = o ? o->quantize_int4 : 0;
    size_t len;
    char *text = fd_read_file(config_path, &len);
    if (!text) return -1;
    int rc = cfg_parse(text, config_path, &m->cfg);
    free(text);
    if (rc || plan_init(&m->plan, &m->cfg, 0, 1)) return -1;
    m->binder.synthetic = 1;
    m->binder.seed = seed;
    if (bind_all(m)) {
        fd_error_prefix("%s", config_path);
        model_free(m);
        return -1;
    }
    m->n_params = m->binder.n_params;
    return 0;
}

int model_load(const char *dir, fd_model *m) { return model_load_with(dir, NULL, m); }

int model_load_with(const char *dir, const fd_load_opts *o, fd_model *m) {
    memset(m, 0, sizeof *m);
    m->binder.quantize_fp8 = o && o->quantize_fp8;
    m->binder.quantize_int4 = o ? o->quantize_int4 : 0;
    if (cfg_load_dir(dir, &m->cfg) || plan_init(&m->plan, &m->cfg, 0, 1)) return -1;
    if (st_open_dir(dir, &m->st)) return -1;
    if (bind_all(m)) {
        fd_error_prefix("%s", dir);
        model_free(m);
        return -1;
    }
    m->n_params = m->binder.n_params;
    return 0;
}

// A tied LM head is the embedding itself (a tensor-parallel rank's head is a slice of it: a weight of its own).
static int lm_head_is_embed(const fd_model *m) {
    return m->lm_head.data == m->embed.data && m->lm_head.rows == m->embed.rows;
}

// Every weight of the model except the tied LM head (which is the embedding), in one place for upload and release.
static void for_each_weight(fd_model *m, fd_backend *be, void (*fn)(fd_backend *, fd_weight *)) {
    if (!m->layers) return; // not (or no longer) bound
    fn(be, &m->embed);
    if (!lm_head_is_embed(m)) fn(be, &m->lm_head);
    fn(be, &m->final_norm);
    for (int i = 0; i < m->cfg.num_layers; i++) {
        fd_layer *L = &m->layers[i];
        fd_weight *ws[] = {&L->input_norm, &L->post_norm, &L->in_qkvz,   &L->in_ba,     &L->in_qkv,    &L->in_z,
                           &L->in_b,       &L->in_a,      &L->conv_w,    &L->A_log,     &L->dt_bias,   &L->gdn_norm,
                           &L->out_proj,   &L->q_proj,    &L->k_proj,    &L->v_proj,    &L->o_proj,    &L->q_norm,
                           &L->k_norm,     &L->gate_proj, &L->up_proj,   &L->down_proj, &L->router,    &L->sh_gate,
                           &L->sh_up,      &L->sh_down,   &L->sh_gate_w};
        for (size_t j = 0; j < sizeof ws / sizeof ws[0]; j++) fn(be, ws[j]);
        if (L->is_moe)
            for (int e = 0; e < m->cfg.num_experts; e++) {
                fn(be, &L->ex_gate[e]);
                fn(be, &L->ex_up[e]);
                fn(be, &L->ex_down[e]);
            }
    }
}

static void upload(fd_backend *be, fd_weight *w) {
    if (w->data) be->upload_weight(be, w);
}
static void release(fd_backend *be, fd_weight *w) {
    if (w->dev) be->release_weight(be, w);
}

void model_upload(fd_model *m, fd_backend *be) {
    for_each_weight(m, be, upload);
    if (lm_head_is_embed(m)) m->lm_head = m->embed; // tied: share the device copy too
}

void model_release(fd_model *m, fd_backend *be) {
    for_each_weight(m, be, release);
    if (lm_head_is_embed(m)) m->lm_head = m->embed;
}

void model_free(fd_model *m) {
    if (m->layers)
        for (int i = 0; i < m->cfg.num_layers; i++) {
            free(m->layers[i].ex_gate);
            free(m->layers[i].ex_up);
            free(m->layers[i].ex_down);
        }
    free(m->layers);
    m->layers = NULL;
    binder_free(&m->binder);
    st_close(&m->st);
}

void model_print_info(const fd_model *m, FILE *f) {
    const fd_config *c = &m->cfg;
    int n_gdn = 0, n_attn = 0, n_moe = 0;
    for (int i = 0; i < c->num_layers; i++) {
        n_gdn += c->layer_kind[i] == FD_LAYER_GDN;
        n_attn += c->layer_kind[i] == FD_LAYER_ATTN;
        n_moe += c->layer_is_moe[i];
    }
    fprintf(f, "architecture: %s (model_type %s%s%s)%s\n", cfg_arch_name(c->arch), c->model_type,
            c->architecture[0] ? ", " : "", c->architecture, c->nested_text ? " [fields from text_config]" : "");
    fprintf(f, "layers: %d (%d gated-deltanet, %d attention; %d MoE FFN, %d dense FFN)\n", c->num_layers, n_gdn,
            n_attn, n_moe, c->num_layers - n_moe);
    fprintf(f, "layer plan: ");
    for (int i = 0; i < c->num_layers; i++)
        fprintf(f, "%s%s", c->layer_kind[i] == FD_LAYER_GDN ? "G" : "A", c->layer_is_moe[i] ? "m" : "");
    fprintf(f, "   (G = gated deltanet, A = attention, m = MoE)\n");
    fprintf(f, "hidden: %d  vocab: %d  tied embeddings: %s\n", c->hidden_size, c->vocab_size,
            m->lm_head.data == m->embed.data ? "yes" : "no");
    fprintf(f, "attention: %d q heads, %d kv heads, head_dim %d, rotary %d dims, theta %g\n", c->num_heads,
            c->num_kv_heads, c->head_dim, c->rotary_dim, (double)c->rope_theta);
    fprintf(f, "gated deltanet: %d k heads, %d v heads (r = %d), dk %d, dv %d, conv %d\n", c->gdn_num_k_heads,
            c->gdn_num_v_heads, c->gdn_num_v_heads / c->gdn_num_k_heads, c->gdn_k_dim, c->gdn_v_dim,
            c->gdn_conv_kernel);
    if (c->num_experts)
        fprintf(f, "moe: %d experts, top-%d, expert ffn %d, shared ffn %d, renormalise %s\n", c->num_experts,
                c->num_experts_per_tok, c->moe_intermediate_size, c->shared_expert_intermediate_size,
                c->norm_topk_prob ? "yes" : "no");
    if (n_moe < c->num_layers) fprintf(f, "dense ffn: %d\n", c->intermediate_size);
    if (c->quant.method == FD_QUANT_FP8 || m->binder.quantize_fp8)
        fprintf(f, "weights: FP8 e4m3, %d x %d block scales (%s)\n", m->binder.quantize_fp8 ? 128 : c->quant.block_rows,
                m->binder.quantize_fp8 ? 128 : c->quant.block_cols,
                m->binder.quantize_fp8 ? "quantized at load" : "as published");
    if (m->binder.quantize_int4)
        fprintf(f, "weights: %s int4, groups of 128 (quantized at load)\n",
                m->binder.quantize_int4 == FD_WFMT_GPTQ_INT4 ? "GPTQ (Qwen's exclusions)" : "AWQ gemm");
    if (c->quant.method == FD_QUANT_GPTQ || c->quant.method == FD_QUANT_AWQ) {
        char g[32];
        snprintf(g, sizeof g, c->quant.group_size ? "groups of %d" : "one group per row", c->quant.group_size);
        fprintf(f, "weights: %s int4, %s%s (as published)\n",
                c->quant.method == FD_QUANT_GPTQ ? "GPTQ" : "AWQ gemm", g,
                c->quant.method == FD_QUANT_GPTQ ? (c->quant.zero_add ? ", checkpoint_format gptq (v1)" : ", gptq_v2")
                                                 : "");
    }
    int counts[FD_DTYPE_COUNT] = {0};
    for (int i = 0; i < m->st.n_tensors; i++) counts[m->st.tensors[i].dtype]++;
    fprintf(f, "parameters: %lld (%.3f M)\n", (long long)m->n_params, (double)m->n_params / 1e6);
    fprintf(f, "dtypes:");
    for (int t = 0; t < FD_DTYPE_COUNT; t++)
        if (counts[t]) fprintf(f, " %s x%d", fd_dtype_name((fd_dtype)t), counts[t]);
    fprintf(f, "  (%d tensors in %d file%s, weight prefix '%s')\n", m->st.n_tensors, m->st.n_files,
            m->st.n_files == 1 ? "" : "s", m->weight_prefix);
}
