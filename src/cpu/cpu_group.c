// CPU backend: an in-process tensor-parallel group (backend.h all_reduce / group_join). The ranks are backends
// driven by one host thread each; all_reduce meets the other ranks at a barrier, every rank sums all ranks' buffers
// in rank order into its private buffer (so every rank computes the same bits, whatever the thread timing), meets
// them again once everyone has read, and copies the sum back.
#include <pthread.h>
#include <stdio.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu.h"

#define CPU_GROUP_MAX 64

typedef struct cpu_group {
    int tp;
    atomic_int members; // backends still holding the group
    pthread_barrier_t barrier;
    float *bufs[CPU_GROUP_MAX];
    int64_t counts[CPU_GROUP_MAX];
} cpu_group;

static void cpu_all_reduce(fd_backend *be, void *x, int64_t count) {
    cpu_impl *c = cpu_of(be);
    cpu_group *g = c->group;
    FD_CHECK(g, "all_reduce on a cpu backend outside a tensor-parallel group");
    g->bufs[c->rank] = x;
    g->counts[c->rank] = count;
    pthread_barrier_wait(&g->barrier);
    for (int r = 0; r < g->tp; r++)
        FD_CHECK(g->counts[r] == count, "all_reduce: rank %d reduces %lld elements, rank %d %lld", c->rank,
                 (long long)count, r, (long long)g->counts[r]);
    if (count > c->sum_cap) {
        free(c->sum);
        c->sum = fd_malloc((size_t)count * sizeof(float));
        c->sum_cap = count;
    }
    for (int64_t i = 0; i < count; i++) {
        float s = g->bufs[0][i];
        for (int r = 1; r < g->tp; r++) s += g->bufs[r][i];
        c->sum[i] = s;
    }
    pthread_barrier_wait(&g->barrier); // every rank has read every buffer: now they may be overwritten
    memcpy(x, c->sum, (size_t)count * sizeof(float));
}

static int cpu_group_join(fd_backend *be, fd_backend *const *ranks, int tp) {
    if (tp < 1 || tp > CPU_GROUP_MAX) return fd_error_set("tensor-parallel group of %d ranks (1..%d)", tp, CPU_GROUP_MAX);
    if (ranks[0] != be) return fd_error_set("group_join: rank 0 must be the backend joining them");
    for (int r = 0; r < tp; r++) {
        if (ranks[r]->group_join != cpu_group_join)
            return fd_error_set("tensor-parallel group: rank %d is backend %s, not cpu", r, ranks[r]->name);
        if (cpu_of(ranks[r])->group) return fd_error_set("tensor-parallel group: rank %d is in a group already", r);
        for (int q = 0; q < r; q++)
            if (ranks[q] == ranks[r]) return fd_error_set("tensor-parallel group: ranks %d and %d are one backend", q, r);
    }
    cpu_group *g = fd_calloc(1, sizeof *g);
    g->tp = tp;
    atomic_init(&g->members, tp);
    FD_CHECK(pthread_barrier_init(&g->barrier, NULL, (unsigned)tp) == 0, "pthread_barrier_init");
    for (int r = 0; r < tp; r++) {
        cpu_impl *c = cpu_of(ranks[r]);
        c->group = g;
        c->rank = r;
        ranks[r]->all_reduce = cpu_all_reduce;
    }
    return 0;
}

void cpu_group_leave(fd_backend *be) {
    cpu_impl *c = cpu_of(be);
    free(c->sum);
    c->sum = NULL;
    cpu_group *g = c->group;
    c->group = NULL;
    if (g && atomic_fetch_sub(&g->members, 1) == 1) {
        pthread_barrier_destroy(&g->barrier);
        free(g);
    }
}

// The reference backend links no kernel library: what a rank reports for the agreement at start (backend.h).
static void cpu_lib_versions(fd_backend *be, char *buf, size_t cap) {
    (void)be;
    snprintf(buf, cap, "cpu");
}

void cpu_install_group(fd_backend *be) {
    be->group_join = cpu_group_join;
    be->lib_versions = cpu_lib_versions;
}
