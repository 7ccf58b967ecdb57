// Test runner: runs every registered test (or those whose name contains one of argv[1..]) and prints the
// summary line "N passed, N failed" last.
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "test.h"

#define MAX_TESTS 1024
static struct {
    const char *name;
    test_fn fn;
} g_tests[MAX_TESTS];
static int g_n_tests, g_cur_failed;
jmp_buf test_abort_jmp;

void test_register(const char *name, test_fn fn) {
    FD_CHECK(g_n_tests < MAX_TESTS);
    g_tests[g_n_tests].name = name;
    g_tests[g_n_tests].fn = fn;
    g_n_tests++;
}

void test_fail(const char *file, int line, const char *what, const char *fmt, ...) {
    va_list ap;
    fprintf(stderr, "    FAIL %s:%d: %s ", file, line, what);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    g_cur_failed = 1;
}

double test_rel_l2(const float *a, const float *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(a[i]) || !isfinite(b[i])) return INFINITY;
        double d = (double)a[i] - (double)b[i];
        num += d * d;
        den += (double)b[i] * (double)b[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

void test_fill_uniform(float *x, size_t n, float lo, float hi, uint64_t *seed) {
    for (size_t i = 0; i < n; i++) {
        uint64_t s = *seed;
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        *seed = s;
        x[i] = lo + (hi - lo) * (float)((s >> 11) * (1.0 / 9007199254740992.0));
    }
}

double test_chi2(const int *counts, const float *probs, int V, int N, int *dof) {
    double stat = 0, rest_e = 0, rest_o = 0;
    int bins = 0;
    for (int v = 0; v < V; v++) {
        const double e = (double)probs[v] * N;
        if (e >= 5) {
            stat += (counts[v] - e) * (counts[v] - e) / e;
            bins++;
        } else {
            rest_e += e;
            rest_o += counts[v];
        }
    }
    if (rest_e > 0) {
        stat += (rest_o - rest_e) * (rest_o - rest_e) / rest_e;
        bins++;
    } else if (rest_o > 0) {
        stat = INFINITY;
    }
    *dof = bins - 1;
    return stat;
}

double test_chi2_crit(int k) {
    const double z = 3.09, a = 2.0 / (9.0 * k);
    return k * pow(1 - a + z * sqrt(a), 3);
}

const char *test_bin(void) {
    const char *b = getenv("FD_BIN");
    return b ? b : "build/flashdelta";
}

int test_run(const char *cmd, char **out) {
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    size_t cap = 4096, n = 0;
    char *buf = fd_malloc(cap);
    size_t got;
    while ((got = fread(buf + n, 1, cap - n - 1, p)) > 0) {
        n += got;
        if (n + 1 >= cap) buf = fd_realloc(buf, cap *= 2);
    }
    buf[n] = 0;
    int st = pclose(p);
    if (out) *out = buf;
    else free(buf);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

int main(int argc, char **argv) {
    static int passed, failed; // static: survive longjmp from ASSERT
    static double t0;
    t0 = fd_time_s();
    for (int i = 0; i < g_n_tests; i++) {
        int selected = argc < 2;
        for (int a = 1; a < argc; a++)
            if (strstr(g_tests[i].name, argv[a])) selected = 1;
        if (!selected) continue;
        g_cur_failed = 0;
        static double t;
        t = fd_time_s();
        fd_error_clear();
        if (!setjmp(test_abort_jmp)) g_tests[i].fn();
        printf("%s %s (%.2fs)\n", g_cur_failed ? "FAIL" : "ok  ", g_tests[i].name, fd_time_s() - t);
        fflush(stdout);
        if (g_cur_failed) failed++;
        else passed++;
    }
    printf("total %.1fs\n", fd_time_s() - t0);
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
