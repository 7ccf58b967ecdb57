// `flashdelta check`: the self-check a user runs on a new machine. Each screen runs one backend op at a model's
// shapes on fresh random inputs and compares it with a float64 reference computed here on the host (written from
// the op's contract in backend.h, not from either backend's code), against a bound for the precision the selected
// routes promise; every op also runs twice and must agree bitwise (determinism). One table, and the count of
// screens over their bound.
#ifndef FD_CHECK_H
#define FD_CHECK_H
#include <stdio.h>

#include "backend.h"
#include "model/config.h"

// Shapes come from cfg (NULL: small built-in shapes). FD_CHECK_INJECT=<screen name prefix> perturbs that screen's
// backend output before the comparison (the check's own test: a wrong kernel must fail its screen by name).
// Returns the number of failed screens (0: all within bound), or -1 with fd_error set.
int fd_check_run(fd_backend *be, const fd_config *cfg, FILE *out);
// The same with the screens of a tensor-parallel group of the tp backends bes[0..tp) (tp >= 1, none in a group
// yet; the op screens run on bes[0]): "rank agreement" (build, kernel libraries and routes of every rank equal,
// tp_agree.h; FD_TP_TEST_DISAGREE=<rank> injects a difference) and "all_reduce" (the group joined, an exact sum on
// every rank, the same bits on all). tp 0: fd_check_run. The backends join the group and stay in it.
int fd_check_run_ranks(fd_backend *const *bes, int tp, const fd_config *cfg, FILE *out);
// check_tp.c: those two screens; returns how many failed, adds the screens it ran to *screens.
int fd_check_ranks(fd_backend *const *bes, int tp, FILE *out, int *screens);
#endif
