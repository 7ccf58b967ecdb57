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

int bind_linear(fd_binder *b, fd_weight *w, const char *name, int ndim, const int64_t *dims) {
    const st_tensor *t = b->synthetic ? NULL : st_find(b->st, name);
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
        if (b->synthetic) { // the bf16 synthetic tensor is no longer needed
            for (int64_t i = b->n - 1; i >= 0; i--)
                if (b->data[i] == w->data) {
                    free(b->data[i]);
                    b->data[i] = NULL;
                    break;
                }
        }
        qw.name = w->name;
        *w = qw;
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
