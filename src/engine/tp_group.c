// Opening a tensor-parallel group from a command's settings (engine_tp.h): the one place the model commands
// (cli/session.c, check) and the server make their rank backends, so `run --tp N` and `serve --tp N` build the
// same group.
#include "engine/engine_tp.h"

#include <string.h>

fd_backend *tp_backend_create(const char *name, int threads, int rank) {
    if (!strcmp(name, "cuda")) {
#ifdef FD_HAVE_CUDA
        return fd_backend_cuda_create(rank); // rank r of a tensor-parallel group runs on device r
#else
        (void)rank;
        fd_error_set("this build has no CUDA backend (rebuild with CUDA=1)");
        return NULL;
#endif
    }
    (void)rank; // every cpu rank is a backend of its own in this process
    return fd_backend_cpu_create(threads);
}

int tp_check_devices(const char *name, int tp) {
#ifdef FD_HAVE_CUDA
    if (tp > 0 && !strcmp(name, "cuda")) {
        const int count = fd_cuda_device_count();
        if (tp > count)
            return fd_error_set("--tp %d needs %d CUDA devices (rank r runs on device r); %d %s visible", tp, tp, count,
                                count == 1 ? "is" : "are");
    }
#else
    (void)name;
    (void)tp;
#endif
    return 0;
}

int tp_group_open(fd_tp_set *t, fd_model *full, fd_backend *be0, const char *name, int threads, int tp, int keep_full) {
    memset(t, 0, sizeof *t);
    if (tp < 1 || tp > FD_TP_MAX) return fd_error_set("--tp %d: 1..%d ranks", tp, FD_TP_MAX);
    fd_backend *bes[FD_TP_MAX] = {be0};
    for (int r = 1; r < tp; r++)
        if (!(bes[r] = tp_backend_create(name, threads, r))) {
            for (int q = 1; q < r; q++) bes[q]->destroy(bes[q]);
            return -1;
        }
    if (tp_set_init(t, full, bes, tp)) {
        for (int r = 1; r < tp; r++) bes[r]->destroy(bes[r]);
        return -1;
    }
    if (!keep_full) model_release(full, be0);
    return 0;
}

void tp_group_close(fd_tp_set *t) {
    fd_backend *bes[FD_TP_MAX] = {0};
    memcpy(bes, t->bes, sizeof bes);
    const int tp = t->tp;
    if (tp) tp_set_free(t);
    for (int r = 1; r < tp; r++) bes[r]->destroy(bes[r]);
}
