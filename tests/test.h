// Minimal test framework: TEST(name) { ... } registers a test; EXPECT records a failure and goes on,
// ASSERT records it and leaves the test. The runner (tests/test_main.c) prints "N passed, N failed".
#ifndef FD_TEST_H
#define FD_TEST_H
#include <math.h>
#include <setjmp.h>
#include <stdio.h>

#include "base/base.h"

typedef void (*test_fn)(void);
void test_register(const char *name, test_fn fn);
void test_fail(const char *file, int line, const char *what, const char *fmt, ...) FD_PRINTF(4, 5);
extern jmp_buf test_abort_jmp;

#define TEST(name)                                                                                                     \
    static void name(void);                                                                                            \
    __attribute__((constructor)) static void reg_##name(void) { test_register(#name, name); }                         \
    static void name(void)

#define EXPECT(cond, ...)                                                                                              \
    do {                                                                                                               \
        if (!(cond)) test_fail(__FILE__, __LINE__, "expected " #cond, " " __VA_ARGS__);                                 \
    } while (0)
#define ASSERT(cond, ...)                                                                                              \
    do {                                                                                                               \
        if (!(cond)) {                                                                                                 \
            test_fail(__FILE__, __LINE__, "assertion " #cond, " " __VA_ARGS__);                                         \
            longjmp(test_abort_jmp, 1);                                                                                \
        }                                                                                                              \
    } while (0)

// Relative L2 error ||a-b|| / ||b||; returns INFINITY if any value is NaN/Inf so NaN never passes.
double test_rel_l2(const float *a, const float *b, size_t n);
// Fills x with uniform values in [lo, hi) from a xorshift stream seeded by *seed.
void test_fill_uniform(float *x, size_t n, float lo, float hi, uint64_t *seed);
// Chi-square statistic of observed counts [V] against probabilities [V] for N draws; bins expected to hold < 5
// are merged into one (observations where p has no mass give INFINITY). *dof = bins - 1.
double test_chi2(const int *counts, const float *probs, int V, int N, int *dof);
// Upper 0.1 % point of chi-square with k degrees of freedom (Wilson-Hilferty approximation).
double test_chi2_crit(int k);
// Path of the flashdelta binary under test (env FD_BIN, default build/flashdelta).
const char *test_bin(void);
// Runs a shell command, captures stdout (malloc'ed, may be NULL) and returns the exit status (-1 on error).
int test_run(const char *cmd, char **out);
#endif
