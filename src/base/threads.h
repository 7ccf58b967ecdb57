// A small persistent thread pool for the CPU backend: fd_parallel_for splits [0, n) into contiguous
// ranges, one per worker, and returns when all are done. Calls from inside a worker run serially.
#ifndef FD_THREADS_H
#define FD_THREADS_H
#include <stdint.h>

typedef void (*fd_range_fn)(void *ctx, int64_t begin, int64_t end);
void fd_threads_init(int n_threads); // 0 = FD_THREADS env or number of cores; idempotent
int fd_threads_count(void);
void fd_parallel_for(int64_t n, int64_t min_chunk, fd_range_fn fn, void *ctx);
void fd_threads_shutdown(void);
#endif
