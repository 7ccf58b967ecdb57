// `flashdelta check --tp N`: the screens of every rank of a group (see check.h). The agreement compares what each
// rank's backend reports (tp_agree.h: build, kernel libraries, routes in force); the all-reduce screen joins the
// ranks into one group and reduces a buffer of small integers on every rank at once (one host thread per rank,
// as the engine runs them), so the sum is exact whatever order the backend adds in (NCCL's is its own) and every
// rank must end with the same, exact bits.
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "engine/check.h"
#include "engine/engine_tp.h"
#include "engine/tp_agree.h"

#define CHECK_AR_COUNT 4099 // not a multiple of any vector width: the tail is covered

typedef struct {
    fd_backend *be;
    int rank, tp;
    double err; // max |got - want| over the elements
    int same;   // bitwise what rank 0 got (filled in afterwards)
    float *got;
} ar_job;

static void *ar_rank(void *arg) {
    ar_job *j = arg;
    fd_backend *be = j->be;
    float *x = fd_malloc(sizeof(float) * CHECK_AR_COUNT);
    for (int i = 0; i < CHECK_AR_COUNT; i++) x[i] = (float)((i % 97) - 48 + 3 * j->rank);
    void *dev = be->alloc(be, sizeof(float) * CHECK_AR_COUNT);
    be->to_device(be, dev, x, sizeof(float) * CHECK_AR_COUNT);
    be->all_reduce(be, dev, CHECK_AR_COUNT);
    j->got = fd_malloc(sizeof(float) * CHECK_AR_COUNT);
    be->to_host(be, j->got, dev, sizeof(float) * CHECK_AR_COUNT);
    be->free(be, dev);
    j->err = 0;
    for (int i = 0; i < CHECK_AR_COUNT; i++) {
        const double want = (double)j->tp * ((i % 97) - 48) + 3.0 * j->tp * (j->tp - 1) / 2;
        const double e = j->got[i] > want ? j->got[i] - want : want - j->got[i];
        if (!(e <= j->err)) j->err = e != e ? 1e30 : e;
    }
    free(x);
    return NULL;
}

int fd_check_ranks(fd_backend *const *bes, int tp, FILE *out, int *screens) {
    int failed = 0;
    tp_rank_report *reps = fd_calloc((size_t)tp, sizeof *reps);
    for (int r = 0; r < tp; r++) tp_report_backend(bes[r], "flashdelta", &reps[r]);
    tp_reports_inject(reps, tp);
    char shape[64];
    snprintf(shape, sizeof shape, "build, libraries, routes on %d rank%s", tp, tp == 1 ? "" : "s");
    const int differ = tp_reports_compare(reps, tp, NULL, 0) != 0;
    fprintf(out, "%-22s %-38s %10s %10s  %s\n", "rank agreement", shape, "-", "equal", differ ? "FAIL" : "ok");
    failed += differ;
    (*screens)++;
    if (differ) tp_reports_compare(reps, tp, out, 1);
    free(reps);

    snprintf(shape, sizeof shape, "%d rank%s x %d act, in place", tp, tp == 1 ? "" : "s", CHECK_AR_COUNT);
    (*screens)++;
    if (!bes[0]->group_join || bes[0]->group_join(bes[0], bes, tp)) {
        fprintf(out, "%-22s %-38s %10s %10s  FAIL (%s)\n", "all_reduce", shape, "-", "exact",
                bes[0]->group_join ? fd_error_msg() : "no group on this backend");
        return failed + 1;
    }
    ar_job jobs[FD_TP_MAX];
    pthread_t tid[FD_TP_MAX];
    for (int r = 0; r < tp; r++) jobs[r] = (ar_job){bes[r], r, tp, 0, 1, NULL};
    for (int r = 1; r < tp; r++) FD_CHECK(pthread_create(&tid[r], NULL, ar_rank, &jobs[r]) == 0, "pthread_create");
    ar_rank(&jobs[0]);
    for (int r = 1; r < tp; r++) pthread_join(tid[r], NULL);
    double err = 0;
    int same = 1;
    for (int r = 0; r < tp; r++) {
        if (jobs[r].err > err) err = jobs[r].err;
        same &= !memcmp(jobs[r].got, jobs[0].got, sizeof(float) * CHECK_AR_COUNT);
    }
    const char *inject = getenv("FD_CHECK_INJECT");
    if (inject && *inject && !strncmp("all_reduce", inject, strlen(inject))) err += 1; // the screen's own test
    const int ok = err == 0 && same;
    fprintf(out, "%-22s %-38s %10.2e %10.1e  %s%s\n", "all_reduce", shape, err, 0.0, ok ? "ok" : "FAIL",
            same ? "" : " (ranks differ)");
    for (int r = 0; r < tp; r++) free(jobs[r].got);
    return failed + !ok;
}
