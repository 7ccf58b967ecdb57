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

void binder_free(fd_binder *b) {
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
