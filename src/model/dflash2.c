// Binds the DFlash2 parts of a drafter checkpoint (see dflash2.h). Tensor names and config fields follow the
// published DFlash2 drafters (z-lab / Inco AI) and the public NeMo Automodel implementation.
#include "model/dflash2.h"


#include <stdlib.h>
#include <string.h>

static int opt_int(json_t *o, const char *key, int def, int *out, const char *path) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) {
        *out = def;
        return 0;
    }
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > (1 << 30))
        return fd_error_set("%s: dflash_config.%s must be a non-negative integer", path, key);
    *out = (int)json_integer_value(v);
    return 0;
}

int dflash2_parse_config(json_t *root, json_t *dc, const char *path, fd_drafter *d) {
    fd_dflash2 *m = d->v2 = fd_calloc(1, sizeof *d->v2);
    m->window = fd_calloc((size_t)d->num_layers, sizeof(int));
    FD_TRY(opt_int(dc, "conv_kernel_size", 2, &m->conv_kernel, path));
    FD_TRY(opt_int(dc, "conv_group_size", 16, &m->conv_group, path));
    FD_TRY(opt_int(dc, "selector_rank", 256, &m->rank, path));
    FD_TRY(opt_int(dc, "selector_top_k", 16, &m->top_k, path));
    if (m->conv_kernel < 1 || m->conv_kernel > d->block_size)
        return fd_error_set("%s: dflash_config.conv_kernel_size %d must be 1..block_size (%d)", path, m->conv_kernel,
                            d->block_size);
    if (m->conv_group < 1 || d->hidden_size % m->conv_group)
        return fd_error_set("%s: dflash_config.conv_group_size %d must divide hidden_size %d", path, m->conv_group,
                            d->hidden_size);
    if (m->rank < 1) return fd_error_set("%s: dflash_config.selector_rank must be >= 1", path);
    if (m->top_k < 1 || m->top_k > d->vocab_size || m->top_k > FD_DFLASH2_MAX_TOPK)
        return fd_error_set("%s: dflash_config.selector_top_k %d must be 1..%d (and at most the vocabulary)", path,
                            m->top_k, FD_DFLASH2_MAX_TOPK);
    // A DFlash2 drafter replaces the sequential correction head of other DFlash variants with the selector.
    json_t *proj = json_object_get(dc, "projector_type");
    if (proj && !json_is_null(proj))
        return fd_error_set("%s: dflash_config.projector_type is set; DFlash2 drafters have none", path);
    // Sliding layers follow HF Qwen3: the window applies only with use_sliding_window (HF clears sliding_window
    // otherwise) and a non-null sliding_window; the drafter stays non-causal (the window is symmetric).
    json_t *lt = json_object_get(root, "layer_types"), *sw = json_object_get(root, "sliding_window");
    json_t *use = json_object_get(root, "use_sliding_window");
    int window = 0;
    if (sw && !json_is_null(sw)) {
        if (!json_is_integer(sw) || json_integer_value(sw) < 1 || json_integer_value(sw) > (1 << 30))
            return fd_error_set("%s: sliding_window must be a positive integer", path);
        window = json_is_false(use) ? 0 : (int)json_integer_value(sw);
    }
    // z-lab makes a sliding layer causal unless `is_causal` says otherwise, NeMo keeps every layer non-causal:
    // accept sliding layers only where the config settles it (the published drafters say "is_causal": false).
    json_t *causal = json_object_get(dc, "causal");
    if (!causal) causal = json_object_get(root, "is_causal");
    const int settled_noncausal = json_is_false(causal);
    if (lt && !json_is_null(lt)) {
        if (!json_is_array(lt) || (int)json_array_size(lt) != d->num_layers)
            return fd_error_set("%s: layer_types must list %d layer types", path, d->num_layers);
        for (int i = 0; i < d->num_layers; i++) {
            const char *t = json_string_value(json_array_get(lt, (size_t)i));
            if (t && !strcmp(t, "sliding_attention")) {
                if (!settled_noncausal)
                    return fd_error_set("%s: drafter layer %d is sliding_attention but the config does not say "
                                        "\"is_causal\": false; causal drafter layers are not supported", path, i);
                m->window[i] = window;
            }
            else if (!t || strcmp(t, "full_attention"))
                return fd_error_set("%s: drafter layer %d is '%s'; DFlash2 drafter layers must be full_attention or "
                                    "sliding_attention", path, i, t ? t : "?");
        }
    }
    return 0;
}

// Binds `name` with exactly the shape dims[0..nd) (viewed as rows x cols for the backend).
static int bind_nd(fd_drafter *d, fd_weight *w, const char *name, int nd, const int64_t *dims) {
    return bind_tensor(&d->binder, w, name, nd, dims);
}

int dflash2_bind(fd_drafter *d) {
    fd_dflash2 *m = d->v2;
    const int64_t D = d->hidden_size, K = m->conv_kernel, G = D / m->conv_group, R = m->rank, V = d->vocab_size;
    char nm[160];
    m->attn_conv = fd_calloc((size_t)d->num_layers, sizeof *m->attn_conv);
    m->mlp_conv = fd_calloc((size_t)d->num_layers, sizeof *m->mlp_conv);
    for (int i = 0; i < d->num_layers; i++)
        for (int s = 0; s < 2; s++) {
            fd_dflash2_conv *c = s ? &m->mlp_conv[i] : &m->attn_conv[i];
            const char *which = s ? "mlp_conv" : "attention_conv";
            const int64_t base[] = {2, K, D}, proj[] = {2 * K * G, D};
            snprintf(nm, sizeof nm, "layers.%d.%s.base_kernel", i, which);
            FD_TRY(bind_nd(d, &c->base, nm, 3, base));
            snprintf(nm, sizeof nm, "layers.%d.%s.kernel_projection.weight", i, which);
            FD_TRY(bind_nd(d, &c->proj, nm, 2, proj));
        }
    const int64_t hp[] = {R, D}, cb[] = {V, R};
    FD_TRY(bind_nd(d, &m->hidden_proj, "candidate_selector.hidden_projection.weight", 2, hp));
    FD_TRY(bind_nd(d, &m->pred_codebook, "candidate_selector.predecessor_codebook", 2, cb));
    FD_TRY(bind_nd(d, &m->succ_codebook, "candidate_selector.successor_codebook", 2, cb));
    return 0;
}

void dflash2_for_each_weight(fd_drafter *d, fd_backend *be, void (*fn)(fd_backend *, fd_weight *)) {
    fd_dflash2 *m = d->v2;
    if (!m || !m->attn_conv) return;
    for (int i = 0; i < d->num_layers; i++) {
        fn(be, &m->attn_conv[i].base);
        fn(be, &m->attn_conv[i].proj);
        fn(be, &m->mlp_conv[i].base);
        fn(be, &m->mlp_conv[i].proj);
    }
    fn(be, &m->hidden_proj);
}

static void upload(fd_backend *be, fd_weight *w) { be->upload_weight(be, w); }

void dflash2_upload(fd_drafter *d, fd_backend *be) { dflash2_for_each_weight(d, be, upload); }

void dflash2_free(fd_drafter *d) {
    fd_dflash2 *m = d->v2;
    if (!m) return;
    free(m->window);
    free(m->attn_conv);
    free(m->mlp_conv);
    free(m);
    d->v2 = NULL;
}
