// One tensor-parallel rank's slice of a bound model (model.h: model_shard). Which rows and columns a rank takes
// follows the rank plan (plan.c) and vLLM's sharding of these models (qwen3_next.py, qwen_gdn_linear_attn.py):
//   GDN (qwen3_5): in_proj_qkv by its Q, K and V row blocks (the rank's key heads' Q and K rows, its value heads'
//     V rows), in_proj_z / _b / _a, A_log and dt_bias by value head, the conv channels as qkv's rows, out_proj by
//     its value heads' columns. qwen3_next's grouped in_proj_qkvz / in_proj_ba are laid out per key head (each
//     group holds its q, k and the r value heads' v, z, b, a), so a rank's key heads are one contiguous row block.
//   attention: q_proj (query|gate interleaved per head) by query head, k / v_proj by KV head (rank r holds KV head
//     r / (tp / Hkv) when tp exceeds the KV head count), o_proj by its query heads' columns.
//   dense FFN and every expert (the shared one too): gate / up by output rows, down by input columns. Experts are
//     split by width, not assigned to ranks: every rank routes the same tokens to the same experts, the work is even
//     whatever the router picks, and no tokens move between ranks (the sum after the FFN is the only collective).
//   LM head: vocabulary rows [vocab_begin, vocab_end); embedding, norms, router, shared-expert gate replicated.
// A single row block of a dense weight (or of an FP8 weight starting on a scale block) is a view of the full
// model's tensor; anything else is a copy in the shard's binder: dense keeps its dtype, FP8 keeps its blocks when
// every cut falls on a block edge, else becomes the f32 values fd_weight_f32 decodes (the same numbers the CPU
// matmul reads, at 4 bytes an element). int4 weights are refused.
#include <string.h>

#include "model/model.h"

typedef struct {
    int64_t begin, count;
} row_block;

static void *own(fd_model *m, void *p) {
    fd_binder *b = &m->binder;
    b->owned = fd_realloc(b->owned, sizeof(void *) * (size_t)(b->n_owned + 1));
    b->owned[b->n_owned++] = p;
    return p;
}

static int fp8_cuts_aligned(const fd_weight *w, const row_block *rb, int n_rb, int64_t col0, int64_t ncols) {
    for (int i = 0; i < n_rb; i++)
        if (rb[i].begin % w->block_rows || (i + 1 < n_rb && rb[i].count % w->block_rows)) return 0;
    return col0 % w->block_cols == 0 && (ncols % w->block_cols == 0 || col0 + ncols == w->cols);
}

// FP8 rows and columns cut on block edges: the bytes and the scale blocks they use.
static void copy_fp8_blocks(fd_model *m, const fd_weight *w, const row_block *rb, int n_rb, int64_t col0,
                            int64_t ncols, int64_t rows, fd_weight *out) {
    const int64_t bc = w->block_cols, scols = (ncols + bc - 1) / bc, sc0 = col0 / bc;
    const size_t ssz = fd_dtype_size(w->scale_dtype);
    uint8_t *q = own(m, fd_malloc((size_t)(rows * ncols)));
    char *sc = own(m, fd_malloc((size_t)(((rows + w->block_rows - 1) / w->block_rows) * scols) * ssz));
    int64_t r_out = 0;
    for (int i = 0; i < n_rb; i++) {
        for (int64_t r = 0; r < rb[i].count; r++)
            memcpy(q + (r_out + r) * ncols, (const uint8_t *)w->data + (rb[i].begin + r) * w->cols + col0,
                   (size_t)ncols);
        for (int64_t br = 0; br * w->block_rows < rb[i].count; br++) {
            const int64_t src_br = rb[i].begin / w->block_rows + br, dst_br = r_out / w->block_rows + br;
            memcpy(sc + (size_t)(dst_br * scols) * ssz, (const char *)w->scale + (size_t)(src_br * w->scale_cols + sc0) * ssz,
                   (size_t)scols * ssz);
        }
        r_out += rb[i].count;
    }
    out->data = q;
    out->scale = sc;
    out->scale_cols = scols;
}

// Rows rb[0..n_rb) (in that order) and columns [col0, col0 + ncols) of w into out.
static int slice(fd_model *m, const fd_weight *w, const row_block *rb, int n_rb, int64_t col0, int64_t ncols,
                 fd_weight *out) {
    *out = *w;
    out->dev = NULL;
    out->dev_scale = NULL;
    if (!w->data) return 0; // a weight this layer kind does not have
    if (fd_wfmt_is_int4(w->fmt))
        return fd_error_set("tensor parallelism: tensor '%s' is %s; int4 weights are not sharded (run --tp 1)",
                            w->name ? w->name : "?", fd_wfmt_name(w->fmt));
    int64_t rows = 0;
    for (int i = 0; i < n_rb; i++) rows += rb[i].count;
    const int fp8 = w->fmt == FD_WFMT_FP8_BLOCK;
    if (n_rb == 1 && col0 == 0 && ncols == w->cols && (!fp8 || rb[0].begin % w->block_rows == 0))
        return fd_weight_view_rows(w, rb[0].begin, rows, out);
    out->rows = rows;
    out->cols = ncols;
    if (fp8 && fp8_cuts_aligned(w, rb, n_rb, col0, ncols)) {
        copy_fp8_blocks(m, w, rb, n_rb, col0, ncols, rows, out);
        return 0;
    }
    const fd_dtype dt = fp8 ? FD_F32 : w->dtype;
    const size_t esz = fd_dtype_size(dt);
    char *dst = own(m, fd_malloc((size_t)(rows * ncols) * esz));
    int64_t r_out = 0;
    for (int i = 0; i < n_rb; i++)
        for (int64_t r = 0; r < rb[i].count; r++, r_out++) {
            const int64_t src = (rb[i].begin + r) * w->cols + col0;
            if (fp8) fd_weight_f32(w, src, ncols, (float *)(dst + (size_t)(r_out * ncols) * esz));
            else memcpy(dst + (size_t)(r_out * ncols) * esz, (const char *)w->data + (size_t)src * esz, (size_t)ncols * esz);
        }
    out->data = dst;
    if (fp8) { // decoded: a dense f32 weight from here on
        out->fmt = FD_WFMT_DENSE;
        out->dtype = FD_F32;
        out->scale = NULL;
        out->block_rows = out->block_cols = 0;
        out->scale_cols = 0;
    }
    return 0;
}

// Row block [begin, begin + count), all columns (column-parallel).
static int rows_of(fd_model *m, const fd_weight *w, int64_t begin, int64_t count, fd_weight *out) {
    const row_block rb = {begin, count};
    return slice(m, w, &rb, 1, 0, w->cols, out);
}
// Columns [col0, col0 + ncols), all rows (row-parallel).
static int cols_of(fd_model *m, const fd_weight *w, int64_t col0, int64_t ncols, fd_weight *out) {
    const row_block rb = {0, w->rows};
    return slice(m, w, &rb, 1, col0, ncols, out);
}
static void replicate(const fd_weight *w, fd_weight *out) {
    *out = *w;
    out->dev = NULL;
    out->dev_scale = NULL;
}

static int shard_gdn(fd_model *m, const fd_layer *F, fd_layer *L) {
    const fd_config *c = &m->cfg;
    const fd_rank_plan *p = &m->plan;
    const int64_t r = p->tp_rank, Hk = c->gdn_num_k_heads, dk = c->gdn_k_dim, dv = c->gdn_v_dim;
    const int64_t hk = p->gdn_k_heads, hv = p->gdn_v_heads;
    // The rank's Q, K and V channels of the contiguous conv layout (Q | K | V).
    const row_block qkv[3] = {{r * hk * dk, hk * dk}, {Hk * dk + r * hk * dk, hk * dk}, {2 * Hk * dk + r * hv * dv, hv * dv}};
    if (c->arch == FD_ARCH_QWEN3_NEXT) {
        const int64_t group = F->in_qkvz.rows / Hk, ba_group = F->in_ba.rows / Hk; // per key head
        FD_TRY(rows_of(m, &F->in_qkvz, r * hk * group, hk * group, &L->in_qkvz));
        FD_TRY(rows_of(m, &F->in_ba, r * hk * ba_group, hk * ba_group, &L->in_ba));
    } else {
        FD_TRY(slice(m, &F->in_qkv, qkv, 3, 0, F->in_qkv.cols, &L->in_qkv));
        FD_TRY(rows_of(m, &F->in_z, r * hv * dv, hv * dv, &L->in_z));
        FD_TRY(rows_of(m, &F->in_b, r * hv, hv, &L->in_b));
        FD_TRY(rows_of(m, &F->in_a, r * hv, hv, &L->in_a));
    }
    FD_TRY(slice(m, &F->conv_w, qkv, 3, 0, F->conv_w.cols, &L->conv_w));
    FD_TRY(rows_of(m, &F->A_log, r * hv, hv, &L->A_log));
    FD_TRY(rows_of(m, &F->dt_bias, r * hv, hv, &L->dt_bias));
    replicate(&F->gdn_norm, &L->gdn_norm);
    return cols_of(m, &F->out_proj, r * hv * dv, hv * dv, &L->out_proj);
}

static int shard_attn(fd_model *m, const fd_layer *F, fd_layer *L) {
    const fd_config *c = &m->cfg;
    const fd_rank_plan *p = &m->plan;
    const int64_t r = p->tp_rank, tp = p->tp_size, hd = c->head_dim, h = p->q_heads, hkv = p->kv_heads;
    // KV heads split while tp <= their count, else rank r holds head r / (tp / Hkv) (plan.c checked tp divides).
    const int64_t kv0 = c->num_kv_heads >= tp ? r * hkv : r / (tp / c->num_kv_heads);
    FD_TRY(rows_of(m, &F->q_proj, r * h * 2 * hd, h * 2 * hd, &L->q_proj));
    FD_TRY(rows_of(m, &F->k_proj, kv0 * hd, hkv * hd, &L->k_proj));
    FD_TRY(rows_of(m, &F->v_proj, kv0 * hd, hkv * hd, &L->v_proj));
    replicate(&F->q_norm, &L->q_norm);
    replicate(&F->k_norm, &L->k_norm);
    return cols_of(m, &F->o_proj, r * h * hd, h * hd, &L->o_proj);
}

// A SwiGLU FFN of local width w: gate / up rows and down columns [rank w, (rank + 1) w).
static int shard_swiglu(fd_model *m, const fd_weight *g, const fd_weight *u, const fd_weight *d, int64_t w,
                        fd_weight *go, fd_weight *uo, fd_weight *dout) {
    const int64_t r = m->plan.tp_rank;
    FD_TRY(rows_of(m, g, r * w, w, go));
    FD_TRY(rows_of(m, u, r * w, w, uo));
    return cols_of(m, d, r * w, w, dout);
}

static int shard_moe(fd_model *m, const fd_layer *F, fd_layer *L) {
    const fd_config *c = &m->cfg;
    const fd_rank_plan *p = &m->plan;
    const int E = c->num_experts;
    replicate(&F->router, &L->router);
    L->ex_gate = fd_calloc((size_t)E, sizeof(fd_weight));
    L->ex_up = fd_calloc((size_t)E, sizeof(fd_weight));
    L->ex_down = fd_calloc((size_t)E, sizeof(fd_weight));
    for (int e = 0; e < E; e++)
        FD_TRY(shard_swiglu(m, &F->ex_gate[e], &F->ex_up[e], &F->ex_down[e], p->expert_width, &L->ex_gate[e],
                            &L->ex_up[e], &L->ex_down[e]));
    const int has_shared = F->moe.sh_gate != NULL;
    if (has_shared) {
        FD_TRY(shard_swiglu(m, &F->sh_gate, &F->sh_up, &F->sh_down, p->shared_expert_width, &L->sh_gate, &L->sh_up,
                            &L->sh_down));
        replicate(&F->sh_gate_w, &L->sh_gate_w);
    }
    L->moe = F->moe;
    L->moe.router = &L->router;
    L->moe.gate = L->ex_gate;
    L->moe.up = L->ex_up;
    L->moe.down = L->ex_down;
    L->moe.sh_gate = has_shared ? &L->sh_gate : NULL;
    L->moe.sh_up = has_shared ? &L->sh_up : NULL;
    L->moe.sh_down = has_shared ? &L->sh_down : NULL;
    L->moe.sh_gate_w = has_shared ? &L->sh_gate_w : NULL;
    L->moe.inter = p->expert_width;
    L->moe.sh_inter = has_shared ? p->shared_expert_width : 0;
    return 0;
}

static int shard_all(const fd_model *full, fd_model *m) {
    const fd_rank_plan *p = &m->plan;
    replicate(&full->embed, &m->embed);
    replicate(&full->final_norm, &m->final_norm);
    FD_TRY(rows_of(m, &full->lm_head, p->vocab_begin, p->vocab_end - p->vocab_begin, &m->lm_head));
    m->layers = fd_calloc((size_t)p->num_layers, sizeof(fd_layer));
    for (int i = 0; i < p->num_layers; i++) {
        const fd_layer *F = &full->layers[i];
        fd_layer *L = &m->layers[i];
        L->kind = F->kind;
        L->is_moe = F->is_moe;
        replicate(&F->input_norm, &L->input_norm);
        replicate(&F->post_norm, &L->post_norm);
        FD_TRY(F->kind == FD_LAYER_GDN ? shard_gdn(m, F, L) : shard_attn(m, F, L));
        if (F->is_moe) FD_TRY(shard_moe(m, F, L));
        else FD_TRY(shard_swiglu(m, &F->gate_proj, &F->up_proj, &F->down_proj, p->ffn_width, &L->gate_proj,
                                 &L->up_proj, &L->down_proj));
    }
    return 0;
}

int model_shard(const fd_model *full, int rank, int tp, fd_model *out) {
    memset(out, 0, sizeof *out);
    if (full->plan.tp_size != 1) return fd_error_set("model_shard: the source model is itself a shard");
    out->cfg = full->cfg;
    if (plan_init(&out->plan, &out->cfg, rank, tp)) return -1;
    out->plan.grouped = 1;
    out->n_params = full->n_params;
    snprintf(out->weight_prefix, sizeof out->weight_prefix, "%s", full->weight_prefix);
    if (shard_all(full, out)) {
        fd_error_prefix("tensor parallelism, rank %d of %d", rank, tp);
        model_free(out);
        return -1;
    }
    return 0;
}
