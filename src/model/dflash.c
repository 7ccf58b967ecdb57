// Binds a DFlash drafter checkpoint (see dflash.h). The config is read here rather than by cfg_parse: the
// drafter is a Qwen3 stack with DFlash fields, not one of the hybrid target architectures.
#include "model/dflash.h"

#include "model/dflash2.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static int get_int(json_t *o, const char *key, int def, int *out, const char *path) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) {
        if (def == INT32_MIN) return fd_error_set("%s: missing field '%s'", path, key);
        *out = def;
        return 0;
    }
    if (!json_is_integer(v)) return fd_error_set("%s: field '%s' must be an integer", path, key);
    json_int_t x = json_integer_value(v);
    if (x < -1 || x > (1 << 30)) return fd_error_set("%s: field '%s' = %lld is out of range", path, key, (long long)x);
    *out = (int)x;
    return 0;
}

static int get_num(json_t *o, const char *key, double def, double *out, const char *path) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) {
        *out = def;
        return 0;
    }
    if (!json_is_number(v)) return fd_error_set("%s: field '%s' must be a number", path, key);
    *out = json_number_value(v);
    return 0;
}

static int parse_config(json_t *root, const char *path, fd_drafter *d) {
    json_t *arch = json_array_get(json_object_get(root, "architectures"), 0);
    snprintf(d->architecture, sizeof d->architecture, "%s", json_is_string(arch) ? json_string_value(arch) : "");
    const int v2 = !strcmp(d->architecture, "DFlash2DraftModel");
    if (!v2 && strcmp(d->architecture, "DFlashDraftModel"))
        return fd_error_set("%s: architecture '%s' is not a supported drafter (supported: DFlashDraftModel, "
                            "DFlash2DraftModel)", path, d->architecture);
    json_t *dc = json_object_get(root, "dflash_config");
    if (!json_is_object(dc)) return fd_error_set("%s: missing object 'dflash_config'", path);
    FD_TRY(get_int(root, "hidden_size", INT32_MIN, &d->hidden_size, path));
    FD_TRY(get_int(root, "num_hidden_layers", INT32_MIN, &d->num_layers, path));
    FD_TRY(get_int(root, "num_attention_heads", INT32_MIN, &d->num_heads, path));
    FD_TRY(get_int(root, "num_key_value_heads", d->num_heads, &d->num_kv_heads, path));
    FD_TRY(get_int(root, "head_dim", d->num_heads > 0 ? d->hidden_size / d->num_heads : 0, &d->head_dim, path));
    FD_TRY(get_int(root, "intermediate_size", INT32_MIN, &d->intermediate_size, path));
    FD_TRY(get_int(root, "vocab_size", INT32_MIN, &d->vocab_size, path));
    FD_TRY(get_int(root, "num_target_layers", 0, &d->num_target_layers, path));
    int bs_top = 0;
    FD_TRY(get_int(root, "block_size", 0, &bs_top, path));
    FD_TRY(get_int(dc, "block_size", bs_top, &d->block_size, path));
    FD_TRY(get_int(dc, "mask_token_id", INT32_MIN, &d->mask_token_id, path));
    double eps = 0, mult = 0, cap = 0, prf = 0;
    FD_TRY(get_num(root, "rms_norm_eps", 1e-6, &eps, path));
    d->rms_norm_eps = (float)eps;
    json_t *rp = json_object_get(root, "rope_parameters");
    double theta = 0;
    FD_TRY(get_num(root, "rope_theta", 10000.0, &theta, path)); // legacy top-level field
    if (json_is_object(rp)) FD_TRY(get_num(rp, "rope_theta", theta, &theta, path));
    d->rope_theta = (float)theta;
    FD_TRY(get_num(json_is_object(rp) ? rp : root, "partial_rotary_factor", 1.0, &prf, path));
    d->rotary_dim = (int)(d->head_dim * prf);
    FD_TRY(get_num(dc, "output_multiplier", 1.0, &mult, path));
    FD_TRY(get_num(dc, "final_logit_softcapping", 0.0, &cap, path));
    d->output_multiplier = (float)mult;
    d->final_logit_softcap = (float)cap;
    json_t *taps = json_object_get(dc, "target_layer_ids");
    if (!json_is_array(taps) || json_array_size(taps) == 0 || json_array_size(taps) > FD_MAX_TAPS)
        return fd_error_set("%s: dflash_config.target_layer_ids must be a list of 1..%d layer ids", path, FD_MAX_TAPS);
    d->n_taps = (int)json_array_size(taps);
    for (int i = 0; i < d->n_taps; i++) {
        json_t *v = json_array_get(taps, (size_t)i);
        if (!json_is_integer(v)) return fd_error_set("%s: target_layer_ids[%d] is not an integer", path, i);
        d->target_layer_ids[i] = (int)json_integer_value(v);
    }
    // Only the non-causal full-attention drafter is implemented; refuse the variants rather than run them wrong.
    // (DFlash2 reads its layer types, sliding windows included, in dflash2_parse_config.)
    json_t *lt = json_object_get(root, "layer_types");
    for (size_t i = 0; !v2 && json_is_array(lt) && i < json_array_size(lt); i++) {
        const char *t = json_string_value(json_array_get(lt, i));
        if (!t || strcmp(t, "full_attention"))
            return fd_error_set("%s: drafter layer %zu is '%s'; only full_attention drafter layers are supported", path,
                                i, t ? t : "?");
    }
    json_t *causal = json_object_get(dc, "causal");
    if (!causal) causal = json_object_get(root, "is_causal");
    if (json_is_true(causal)) return fd_error_set("%s: causal drafters are not supported", path);
    if (d->hidden_size < 1 || d->num_layers < 1 || d->num_heads < 1 || d->num_kv_heads < 1 || d->head_dim < 2 ||
        d->num_heads % d->num_kv_heads || d->intermediate_size < 1 || d->block_size < 2 || d->block_size > 64 ||
        d->rotary_dim < 2 || d->rotary_dim % 2 || d->rotary_dim > d->head_dim)
        return fd_error_set("%s: inconsistent drafter geometry (hidden %d, layers %d, heads %d/%d x %d, block %d)",
                            path, d->hidden_size, d->num_layers, d->num_heads, d->num_kv_heads, d->head_dim,
                            d->block_size);
    return v2 ? dflash2_parse_config(root, dc, path, d) : 0;
}

static int check_fits(const fd_drafter *d, const fd_model *t, const char *dir) {
    const fd_config *c = &t->cfg;
    if (d->hidden_size != c->hidden_size)
        return fd_error_set("%s: drafter hidden size %d does not match the target's %d", dir, d->hidden_size,
                            c->hidden_size);
    if (d->vocab_size != c->vocab_size)
        return fd_error_set("%s: drafter vocabulary %d does not match the target's %d", dir, d->vocab_size,
                            c->vocab_size);
    if (d->num_target_layers && d->num_target_layers != c->num_layers)
        return fd_error_set("%s: drafter was made for a %d-layer target; this target has %d layers", dir,
                            d->num_target_layers, c->num_layers);
    for (int i = 0; i < d->n_taps; i++)
        if (d->target_layer_ids[i] < 0 || d->target_layer_ids[i] >= c->num_layers)
            return fd_error_set("%s: tap layer %d is outside the target's layers 0..%d", dir, d->target_layer_ids[i],
                                c->num_layers - 1);
    if (d->mask_token_id < 0 || d->mask_token_id >= c->vocab_size)
        return fd_error_set("%s: mask_token_id %d is outside the vocabulary [0, %d)", dir, d->mask_token_id,
                            c->vocab_size);
    return 0;
}

// A matrix [rows, cols], or a vector [rows] when cols == 1.
static int bind(fd_drafter *d, fd_weight *w, const char *name, int64_t rows, int64_t cols) {
    const int64_t dims[2] = {rows, cols};
    return bind_tensor(&d->binder, w, name, cols == 1 ? 1 : 2, dims);
}

#define NM(...) (snprintf(nm, sizeof nm, __VA_ARGS__), nm)

static int bind_all(fd_drafter *d) {
    char nm[160];
    const int64_t D = d->hidden_size, H = d->num_heads, Hkv = d->num_kv_heads, hd = d->head_dim,
                  I = d->intermediate_size;
    FD_TRY(bind(d, &d->fc, "fc.weight", D, (int64_t)d->n_taps * D));
    FD_TRY(bind(d, &d->hidden_norm, "hidden_norm.weight", D, 1));
    FD_TRY(bind(d, &d->norm, "norm.weight", D, 1));
    d->layers = fd_calloc((size_t)d->num_layers, sizeof(fd_draft_layer));
    for (int i = 0; i < d->num_layers; i++) {
        fd_draft_layer *L = &d->layers[i];
        FD_TRY(bind(d, &L->input_norm, NM("layers.%d.input_layernorm.weight", i), D, 1));
        FD_TRY(bind(d, &L->post_norm, NM("layers.%d.post_attention_layernorm.weight", i), D, 1));
        FD_TRY(bind(d, &L->q_proj, NM("layers.%d.self_attn.q_proj.weight", i), H * hd, D));
        FD_TRY(bind(d, &L->k_proj, NM("layers.%d.self_attn.k_proj.weight", i), Hkv * hd, D));
        FD_TRY(bind(d, &L->v_proj, NM("layers.%d.self_attn.v_proj.weight", i), Hkv * hd, D));
        FD_TRY(bind(d, &L->o_proj, NM("layers.%d.self_attn.o_proj.weight", i), D, H * hd));
        FD_TRY(bind(d, &L->q_norm, NM("layers.%d.self_attn.q_norm.weight", i), hd, 1));
        FD_TRY(bind(d, &L->k_norm, NM("layers.%d.self_attn.k_norm.weight", i), hd, 1));
        FD_TRY(bind(d, &L->gate_proj, NM("layers.%d.mlp.gate_proj.weight", i), I, D));
        FD_TRY(bind(d, &L->up_proj, NM("layers.%d.mlp.up_proj.weight", i), I, D));
        FD_TRY(bind(d, &L->down_proj, NM("layers.%d.mlp.down_proj.weight", i), D, I));
    }
    return d->v2 ? dflash2_bind(d) : 0;
}

// Reads the config at `path` (dir names the drafter in messages); binds from dir's safetensors unless synthetic.
static int drafter_open(const char *dir, char *path, const fd_model *target, fd_drafter *d) {
    json_error_t err;
    json_t *root = json_load_file(path, 0, &err);
    int rc = 0;
    if (!root) {
        rc = fd_file_exists(path) ? fd_error_set("%s:%d:%d: %s", path, err.line, err.column, err.text)
                                  : fd_error_set("%s: no such file (is %s a DFlash drafter directory?)", path, dir);
    } else if (!json_is_object(root)) {
        rc = fd_error_set("%s: top level is not a JSON object", path);
    } else {
        rc = parse_config(root, path, d);
    }
    json_decref(root);
    free(path);
    if (!rc && target) rc = check_fits(d, target, dir);
    if (!rc && !d->binder.synthetic) rc = st_open_dir(dir, &d->st);
    d->binder.st = &d->st;
    if (!rc && bind_all(d)) rc = fd_error_prefix("%s", dir);
    if (rc) drafter_free(d);
    return rc;
}

int drafter_load(const char *dir, const fd_model *target, fd_drafter *d) {
    memset(d, 0, sizeof *d);
    return drafter_open(dir, fd_path_join(dir, "config.json"), target, d);
}

int drafter_random(const char *config_path, const fd_model *target, uint64_t seed, fd_drafter *d) {
    memset(d, 0, sizeof *d);
    d->binder.synthetic = 1;
    d->binder.seed = seed;
    return drafter_open(config_path, fd_strdup(config_path), target, d);
}

// Every DFlash (v1) weight of the drafter.
static void for_each_weight(fd_drafter *d, fd_backend *be, void (*fn)(fd_backend *, fd_weight *)) {
    fn(be, &d->fc);
    fn(be, &d->hidden_norm);
    fn(be, &d->norm);
    for (int i = 0; i < d->num_layers; i++) {
        fd_draft_layer *L = &d->layers[i];
        fd_weight *ws[] = {&L->input_norm, &L->post_norm, &L->q_proj,    &L->k_proj,  &L->v_proj,   &L->o_proj,
                           &L->q_norm,     &L->k_norm,    &L->gate_proj, &L->up_proj, &L->down_proj};
        for (size_t j = 0; j < sizeof ws / sizeof ws[0]; j++) fn(be, ws[j]);
    }
}

static void upload(fd_backend *be, fd_weight *w) { be->upload_weight(be, w); }
static void release(fd_backend *be, fd_weight *w) {
    if (w->dev) be->release_weight(be, w);
}

void drafter_upload(fd_drafter *d, fd_backend *be) {
    for_each_weight(d, be, upload);
    if (d->v2) dflash2_upload(d, be);
}

void drafter_release(fd_drafter *d, fd_backend *be) {
    if (!d->layers) return;
    for_each_weight(d, be, release);
    dflash2_for_each_weight(d, be, release); // no-op for a DFlash drafter
}

void drafter_free(fd_drafter *d) {
    dflash2_free(d);
    free(d->layers);
    d->layers = NULL;
    binder_free(&d->binder);
    st_close(&d->st);
}
