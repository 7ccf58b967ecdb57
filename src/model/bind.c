// Tensor binding (see bind.h).
#include "model/bind.h"

#include <stdlib.h>
#include <string.h>

#include "model/synth.h"

static void shape_str(char *buf, size_t n, int ndim, const int64_t *shape) {
    size_t used = (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < ndim && used < n; i++)
        used += (size_t)snprintf(buf + used, n - used, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (used < n) snprintf(buf + used, n - used, "]");
}

int bind_tensor(fd_binder *b, fd_weight *w, const char *name, int ndim, const int64_t *dims) {
    FD_CHECK(ndim >= 1 && ndim <= ST_MAX_DIMS, "bind %s: %d dims", name, ndim);
    int64_t cols = 1;
    for (int i = 1; i < ndim; i++) cols *= dims[i];
    if (b->synthetic) {
        b->names = fd_realloc(b->names, sizeof(char *) * (size_t)(b->n + 1));
        b->data = fd_realloc(b->data, sizeof(void *) * (size_t)(b->n + 1));
        char *nm = b->names[b->n] = fd_strdup(name);
        synth_weight(w, nm, dims[0], cols, b->seed);
        b->data[b->n++] = (void *)w->data;
        b->n_params += dims[0] * cols;
        return 0;
    }
    const st_tensor *t = st_find(b->st, name);
    char want[128], got[128];
    shape_str(want, sizeof want, ndim, dims);
    if (!t) return fd_error_set("missing tensor '%s' (expected shape %s)", name, want);
    const char *file = b->st->files[t->file].path;
    if (t->dtype != FD_F32 && t->dtype != FD_F16 && t->dtype != FD_BF16)
        return fd_error_set("%s: tensor '%s' has dtype %s, expected F32, F16 or BF16", file, name,
                            fd_dtype_name(t->dtype));
    int ok = t->ndim == ndim;
    for (int i = 0; ok && i < ndim; i++) ok = t->shape[i] == dims[i];
    if (!ok) {
        shape_str(got, sizeof got, t->ndim, t->shape);
        return fd_error_set("%s: tensor '%s' has the wrong shape (expected %s); the file has %s", file, name, want,
                            got);
    }
    memset(w, 0, sizeof *w);
    w->name = t->name;
    w->dtype = t->dtype;
    w->data = t->data;
    w->rows = dims[0];
    w->cols = cols;
    b->n_params += dims[0] * cols;
    return 0;
}

static void *own(fd_binder *b, void *p) {
    b->owned = fd_realloc(b->owned, sizeof(void *) * (size_t)(b->n_owned + 1));
    b->owned[b->n_owned++] = p;
    return p;
}

// w becomes q, its quantization made at load (q's storage already owned by b), under w's name; a synthetic
// tensor's bf16 data is then no longer needed and is freed.
static void replace_quantized(fd_binder *b, fd_weight *w, fd_weight q) {
    if (b->synthetic)
        for (int64_t i = b->n - 1; i >= 0; i--)
            if (b->data[i] == w->data) {
                free(b->data[i]);
                b->data[i] = NULL;
                break;
            }
    q.name = w->name;
    *w = q;
}

// The scale tensor's shape: exactly [ceil(rows/bn), ceil(cols/bk)], as Qwen's and DeepSeek's FP8 files store it.
static int scale_shape_ok(const st_tensor *s, int64_t sr, int64_t sc) {
    return s->ndim == 2 && s->shape[0] == sr && s->shape[1] == sc;
}

static int bind_fp8(fd_binder *b, fd_weight *w, const char *name, const st_tensor *t, int ndim) {
    const char *file = b->st->files[t->file].path;
    const fd_quant_config *q = b->quant;
    if (!q || q->method != FD_QUANT_FP8)
        return fd_error_set("%s: tensor '%s' is F8_E4M3 but config.json has no FP8 quantization_config", file, name);
    if (cfg_quant_skips(q, name))
        return fd_error_set("%s: tensor '%s' is F8_E4M3 but quantization_config.modules_to_not_convert lists its "
                            "module",
                            file, name);
    if (ndim != 2)
        return fd_error_set("%s: tensor '%s': fused FP8 expert tensors are not supported (published FP8 "
                            "checkpoints store experts one by one)",
                            file, name);
    char sname[512];
    snprintf(sname, sizeof sname, "%s_scale_inv", name);
    const st_tensor *s = st_find(b->st, sname);
    const int64_t sr = (w->rows + q->block_rows - 1) / q->block_rows, sc = (w->cols + q->block_cols - 1) / q->block_cols;
    if (!s)
        return fd_error_set("%s: tensor '%s' is F8_E4M3 but its scale '%s' is missing (expected shape [%lld, %lld])",
                            file, name, sname, (long long)sr, (long long)sc);
    if (s->dtype != FD_F32 && s->dtype != FD_BF16 && s->dtype != FD_F16)
        return fd_error_set("%s: scale '%s' has dtype %s, expected F32, BF16 or F16", b->st->files[s->file].path,
                            sname, fd_dtype_name(s->dtype));
    if (!scale_shape_ok(s, sr, sc))
        return fd_error_set("%s: scale '%s' has the wrong shape for %lld x %lld weights in %d x %d blocks (expected "
                            "[%lld, %lld])",
                            b->st->files[s->file].path, sname, (long long)w->rows, (long long)w->cols,
                            q->block_rows, q->block_cols, (long long)sr, (long long)sc);
    w->fmt = FD_WFMT_FP8_BLOCK;
    w->scale = s->data;
    w->scale_dtype = s->dtype;
    w->block_rows = q->block_rows;
    w->block_cols = q->block_cols;
    w->scale_cols = sc;
    return 0;
}

// The int4 companions of `module` (X.qzeros, X.scales, X.g_idx): present, of dtype I32 (or a float dtype for the
// scales) and exactly the published 2-D (or 1-D) shape, or one error naming the tensor.
static int int4_part(const fd_binder *b, const char *file, const char *module, const char *part, int is_scale,
                     int ndim, int64_t d0, int64_t d1, const st_tensor **out) {
    char nm[600];
    snprintf(nm, sizeof nm, "%s.%s", module, part);
    const st_tensor *t = *out = st_find(b->st, nm);
    char want[64];
    shape_str(want, sizeof want, ndim, (const int64_t[]){d0, d1});
    if (!t)
        return fd_error_set("%s: tensor '%s.qweight' is int4 but its %s '%s' is missing (expected %s %s)", file,
                            module, part, nm, is_scale ? "F16" : "I32", want);
    const char *tf = b->st->files[t->file].path;
    if (is_scale ? t->dtype != FD_F16 && t->dtype != FD_BF16 && t->dtype != FD_F32 : t->dtype != FD_I32)
        return fd_error_set("%s: tensor '%s' has dtype %s, expected %s", tf, nm, fd_dtype_name(t->dtype),
                            is_scale ? "F16, BF16 or F32" : "I32 (packed int4)");
    if (t->ndim != ndim || t->shape[0] != d0 || (ndim == 2 && t->shape[1] != d1)) {
        char got[128];
        shape_str(got, sizeof got, t->ndim, t->shape);
        return fd_error_set("%s: tensor '%s' has the wrong shape (expected %s); the file has %s", tf, nm, want, got);
    }
    return 0;
}

// GPTQ / AWQ int4 (weight.h has the layouts). Returns 1 when the module is not stored in int4 (bind it dense), 0
// when bound, -1 with fd_error set.
static int bind_int4(fd_binder *b, fd_weight *w, const char *name, const st_tensor *t, int ndim, const int64_t *dims) {
    char module[512], qn[600];
    size_t n = strlen(name);
    if (n > 7 && !strcmp(name + n - 7, ".weight")) n -= 7;
    if (n >= sizeof module) return 1;
    memcpy(module, name, n);
    module[n] = 0;
    snprintf(qn, sizeof qn, "%s.qweight", module);
    const st_tensor *qt = st_find(b->st, qn);
    const fd_quant_config *q = b->quant;
    const int int4 = q && (q->method == FD_QUANT_GPTQ || q->method == FD_QUANT_AWQ);
    const char *meth = int4 && q->method == FD_QUANT_AWQ ? "awq" : "gptq";
    int gs = 0;
    const int quantized = int4 ? cfg_quant_int4_module(q, module, &gs) : 0;
    if (quantized < 0) return -1;
    if (!qt) {
        // A module the config quantizes may still be stored dense (a checkpoint that left it out is read as it
        // is); neither form present is worth naming the int4 tensor the config led us to expect.
        if (!t && quantized)
            return fd_error_set("missing tensor '%s' (quantization_config (%s) quantizes module '%s'; no '%s' "
                                "either)",
                                qn, meth, module, name);
        return 1;
    }
    const char *file = b->st->files[qt->file].path;
    if (!int4)
        return fd_error_set("%s: tensor '%s' is int4 (GPTQ/AWQ) but config.json has no gptq or awq "
                            "quantization_config",
                            file, qn);
    if (t) return fd_error_set("%s: module '%s' has both '%s' and '%s'", file, module, name, qn);
    if (ndim != 2)
        return fd_error_set("%s: tensor '%s': fused int4 expert tensors are not supported (published int4 "
                            "checkpoints store experts one by one)",
                            file, qn);
    if (!quantized)
        return fd_error_set("%s: tensor '%s' is int4 but quantization_config excludes module '%s' (%s)", file, qn,
                            module, q->method == FD_QUANT_AWQ ? "modules_to_not_convert" : "a '-:' dynamic rule or "
                                                                                           "modules_to_not_convert");
    const int64_t N = dims[0], K = dims[1];
    if (N % 8 || K % 8)
        return fd_error_set("%s: tensor '%s': int4 needs both sides of the weight to be multiples of 8 (it is "
                            "%lld x %lld)",
                            file, qn, (long long)N, (long long)K);
    const int64_t group = gs ? gs : K, G = (K + group - 1) / group;
    const int gptq = q->method == FD_QUANT_GPTQ;
    const st_tensor *qz, *sc, *gi = NULL;
    {
        const st_tensor *qw;
        // qweight itself, through the same checks (it is found, so only dtype and shape can fail)
        FD_TRY(int4_part(b, file, module, "qweight", 0, 2, gptq ? K / 8 : K, gptq ? N : N / 8, &qw));
    }
    FD_TRY(int4_part(b, file, module, "qzeros", 0, 2, G, N / 8, &qz));
    FD_TRY(int4_part(b, file, module, "scales", 1, 2, G, N, &sc));
    if (gptq) {
        char gn[600];
        snprintf(gn, sizeof gn, "%s.g_idx", module);
        if (st_find(b->st, gn)) {
            FD_TRY(int4_part(b, file, module, "g_idx", 0, 1, K, 0, &gi));
            const int32_t *g = gi->data;
            for (int64_t k = 0; k < K; k++)
                if (g[k] < 0 || g[k] >= G)
                    return fd_error_set("%s: tensor '%s': g_idx[%lld] = %d is outside the %lld groups", file, gn,
                                        (long long)k, (int)g[k], (long long)G);
        } else if (q->desc_act) {
            return fd_error_set("%s: tensor '%s' is missing (desc_act true needs the group of every input)", file, gn);
        }
    }
    memset(w, 0, sizeof *w);
    w->name = qt->name;
    w->fmt = gptq ? FD_WFMT_GPTQ_INT4 : FD_WFMT_AWQ_INT4;
    w->dtype = FD_I32;
    w->rows = N;
    w->cols = K;
    w->data = qt->data;
    w->scale = sc->data;
    w->scale_dtype = sc->dtype;
    w->qzeros = qz->data;
    w->g_idx = gi ? gi->data : NULL;
    w->group_size = (int)group;
    w->zero_add = gptq ? q->zero_add : 0;
    w->n_groups = G;
    b->n_params += N * K;
    return 0;
}

int bind_linear(fd_binder *b, fd_weight *w, const char *name, int ndim, const int64_t *dims) {
    const st_tensor *t = b->synthetic ? NULL : st_find(b->st, name);
    if (!b->synthetic) {
        const int r = bind_int4(b, w, name, t, ndim, dims);
        if (r <= 0) return r;
    }
    if (t && t->dtype == FD_F8E4M3) {
        // bind_tensor's shape check, with the e4m3 dtype allowed
        int64_t cols = 1;
        for (int i = 1; i < ndim; i++) cols *= dims[i];
        int ok = t->ndim == ndim;
        for (int i = 0; ok && i < ndim; i++) ok = t->shape[i] == dims[i];
        if (!ok) {
            char want[128], got[128];
            shape_str(want, sizeof want, ndim, dims);
            shape_str(got, sizeof got, t->ndim, t->shape);
            return fd_error_set("%s: tensor '%s' has the wrong shape (expected %s); the file has %s",
                                b->st->files[t->file].path, name, want, got);
        }
        memset(w, 0, sizeof *w);
        w->name = t->name;
        w->dtype = FD_F8E4M3;
        w->data = t->data;
        w->rows = dims[0];
        w->cols = cols;
        b->n_params += dims[0] * cols;
        return bind_fp8(b, w, name, t, ndim);
    }
    FD_TRY(bind_tensor(b, w, name, ndim, dims));
    if (t) {
        char sname[512];
        snprintf(sname, sizeof sname, "%s_scale_inv", name);
        if (st_find(b->st, sname))
            return fd_error_set("%s: tensor '%s' has a scale '%s' but is %s, not F8_E4M3", b->st->files[t->file].path,
                                name, sname, fd_dtype_name(t->dtype));
    }
    if (b->quantize_fp8 && ndim == 2) {
        uint8_t *qd;
        float *sd;
        fd_weight qw;
        fd_weight_quantize_fp8(w, 128, 128, &qd, &sd, &qw);
        own(b, qd);
        own(b, sd);
        replace_quantized(b, w, qw);
    }
    // int4 at load: GPTQ leaves what Qwen's GPTQ-Int4 checkpoints leave in bf16 (their `dynamic` rules -:.*attn.*
    // and -:.*shared_expert.*); AWQ quantizes every linear weight. Fused expert tensors stay dense.
    const int int4_skip =
        b->quantize_int4 == FD_WFMT_GPTQ_INT4 && (strstr(name, "attn") || strstr(name, "shared_expert"));
    if (b->quantize_int4 && ndim == 2 && !int4_skip && w->rows % 8 == 0 && w->cols % 8 == 0) {
        uint32_t *qw, *qz;
        uint16_t *sc;
        fd_weight q4;
        fd_weight_quantize_int4(w, (fd_wfmt)b->quantize_int4, 128, &qw, &qz, &sc, &q4);
        own(b, qw);
        own(b, qz);
        own(b, sc);
        replace_quantized(b, w, q4);
    }
    return 0;
}

void binder_free(fd_binder *b) {
    for (int64_t i = 0; i < b->n_owned; i++) free(b->owned[i]);
    free(b->owned);
    b->owned = NULL;
    b->n_owned = 0;
    for (int64_t i = 0; i < b->n; i++) {
        free(b->data[i]);
        free(b->names[i]);
    }
    free(b->data);
    free(b->names);
    b->data = NULL;
    b->names = NULL;
    b->n = 0;
}
