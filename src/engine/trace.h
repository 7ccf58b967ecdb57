// Trace mode (`--trace FILE`): a backend that forwards every entry point to the real one and times each op,
// synchronising before and after it, then writes Chrome-trace JSON (opens in Perfetto / chrome://tracing).
// The synchronisation changes the timing of the whole run, so traced runs are never used for the unprofiled
// numbers; the bench refuses to run traced.
#ifndef FD_TRACE_H
#define FD_TRACE_H
#include <stdio.h>

#include "backend.h"

// Wraps `inner` (which the returned backend owns and destroys with itself).
fd_backend *trace_wrap(fd_backend *inner);
int trace_is_traced(const fd_backend *be);
// A span of host time [t0, t1] (fd_time_s) named `name` (a string that outlives the trace), e.g. a phase of the
// DFlash round around the ops it ran; nothing when `be` is not traced.
void trace_span(fd_backend *be, const char *name, double t0, double t1);
// Writes the events recorded so far; returns 0 or -1 with fd_error set.
int trace_write(const fd_backend *traced, const char *path);
// Per-op totals (calls, ms, share), largest first.
void trace_print_summary(const fd_backend *traced, FILE *f);
#endif
