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
#endif
