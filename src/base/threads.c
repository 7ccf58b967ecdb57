// Thread pool: workers sleep on a condition variable; each job is one fd_parallel_for call.
#include "threads.h"

#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#include "base.h"

#define FD_MAX_THREADS 256

static struct {
    int n; // workers including the caller
    pthread_t tid[FD_MAX_THREADS];
    pthread_mutex_t mu;
    pthread_cond_t go, done;
    uint64_t generation;
    int pending;
    int stop;
    fd_range_fn fn;
    void *ctx;
    int64_t total, per;
    // One job at a time: callers on several threads (the ranks of an in-process tensor-parallel group) take turns
    // on the pool instead of overwriting each other's job.
    pthread_mutex_t job;
} g_pool = {.mu = PTHREAD_MUTEX_INITIALIZER,
            .go = PTHREAD_COND_INITIALIZER,
            .done = PTHREAD_COND_INITIALIZER,
            .job = PTHREAD_MUTEX_INITIALIZER};

static _Thread_local int t_in_worker;

static void run_part(int idx) {
    int64_t b = (int64_t)idx * g_pool.per, e = b + g_pool.per;
    if (e > g_pool.total) e = g_pool.total;
    if (b < e) g_pool.fn(g_pool.ctx, b, e);
}

static void *worker_main(void *arg) {
    int idx = (int)(intptr_t)arg;
    t_in_worker = 1;
    uint64_t seen = 0;
    pthread_mutex_lock(&g_pool.mu);
    for (;;) {
        while (g_pool.generation == seen && !g_pool.stop) pthread_cond_wait(&g_pool.go, &g_pool.mu);
        if (g_pool.stop) break;
        seen = g_pool.generation;
        pthread_mutex_unlock(&g_pool.mu);
        run_part(idx);
        pthread_mutex_lock(&g_pool.mu);
        if (--g_pool.pending == 0) pthread_cond_signal(&g_pool.done);
    }
    pthread_mutex_unlock(&g_pool.mu);
    return NULL;
}

void fd_threads_init(int n) {
    if (g_pool.n) return;
    if (n <= 0) {
        const char *e = getenv("FD_THREADS");
        n = e ? atoi(e) : (int)sysconf(_SC_NPROCESSORS_ONLN);
    }
    if (n < 1) n = 1;
    if (n > FD_MAX_THREADS) n = FD_MAX_THREADS;
    g_pool.n = n;
    for (int i = 1; i < n; i++)
        FD_CHECK(pthread_create(&g_pool.tid[i], NULL, worker_main, (void *)(intptr_t)i) == 0);
}

int fd_threads_count(void) { return g_pool.n ? g_pool.n : 1; }

void fd_parallel_for(int64_t n, int64_t min_chunk, fd_range_fn fn, void *ctx) {
    if (n <= 0) return;
    if (!g_pool.n) fd_threads_init(0);
    if (min_chunk < 1) min_chunk = 1;
    int parts = g_pool.n;
    if ((int64_t)parts * min_chunk > n) parts = (int)((n + min_chunk - 1) / min_chunk);
    if (parts <= 1 || t_in_worker) {
        fn(ctx, 0, n);
        return;
    }
    pthread_mutex_lock(&g_pool.job);
    pthread_mutex_lock(&g_pool.mu);
    g_pool.fn = fn;
    g_pool.ctx = ctx;
    g_pool.total = n;
    g_pool.per = (n + parts - 1) / parts; // workers past `parts` get empty ranges
    g_pool.pending = g_pool.n - 1;
    g_pool.generation++;
    pthread_cond_broadcast(&g_pool.go);
    pthread_mutex_unlock(&g_pool.mu);
    t_in_worker = 1;
    run_part(0);
    t_in_worker = 0;
    pthread_mutex_lock(&g_pool.mu);
    while (g_pool.pending > 0) pthread_cond_wait(&g_pool.done, &g_pool.mu);
    pthread_mutex_unlock(&g_pool.mu);
    pthread_mutex_unlock(&g_pool.job);
}

void fd_threads_shutdown(void) {
    if (!g_pool.n) return;
    pthread_mutex_lock(&g_pool.mu);
    g_pool.stop = 1;
    pthread_cond_broadcast(&g_pool.go);
    pthread_mutex_unlock(&g_pool.mu);
    for (int i = 1; i < g_pool.n; i++) pthread_join(g_pool.tid[i], NULL);
    g_pool.n = 0;
    g_pool.stop = 0;
}
