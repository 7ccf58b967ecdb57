// The table-driven op harness: how a row runs (op_harness.h says what it checks and measures).
#include "op_harness.h"

#include <cuda_runtime.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../tests/test.h"
#include "bench_common.h"
#include "cuda/cuda.h"

CUDA_RIG(0x0b5eed0fab1eull)

// Guard regions: 256 bytes keep each buffer on the 256-byte alignment cudaMalloc gives (vector loads stay legal),
// and are wider than any one vector store past the end.
#define OH_GUARD 256
static uint8_t canary_byte(size_t i) {
    return (uint8_t)(0xa5u ^ (i * 131u));
} // position-dependent: a shifted copy fails

// ---- building a case ----
static oh_buf *new_buf(oh_case *c, const char *name, oh_kind kind) {
    FD_CHECK(c->nbuf < OH_MAX_BUFS, "%s: more than %d buffers", c->what, OH_MAX_BUFS);
    oh_buf *b = &c->buf[c->nbuf];
    memset(b, 0, sizeof *b);
    b->name = name, b->kind = kind;
    return b;
}

int oh_buf_f32(oh_case *c, const char *name, oh_kind kind, size_t count, float lo, float hi, double tol) {
    oh_buf *b = new_buf(c, name, kind);
    b->bytes[0] = b->bytes[1] = count * sizeof(float);
    b->tol = tol;
    if (kind == OH_IN || kind == OH_INOUT) b->host = cuda_rig_rnd(c->rig, count, lo, hi);
    return c->nbuf++;
}

int oh_buf_i32(oh_case *c, const char *name, oh_kind kind, size_t count, const int32_t *values) {
    oh_buf *b = new_buf(c, name, kind);
    b->is_i32 = 1;
    b->bytes[0] = b->bytes[1] = count * sizeof(int32_t);
    if (kind == OH_IN || kind == OH_INOUT) {
        FD_CHECK(values, "%s: input %s needs its values", c->what, name);
        b->host = fd_malloc(count * sizeof(int32_t) + 4);
        memcpy(b->host, values, count * sizeof(int32_t));
    }
    return c->nbuf++;
}

int oh_scratch(oh_case *c, const char *name, size_t bytes_cpu, size_t bytes_gpu) {
    oh_buf *b = new_buf(c, name, OH_SCRATCH);
    b->bytes[0] = bytes_cpu, b->bytes[1] = bytes_gpu;
    return c->nbuf++;
}

int oh_weight(oh_case *c, const char *name, int64_t rows, int64_t cols, fd_dtype dt, float lo, float hi) {
    FD_CHECK(c->nw < OH_MAX_WEIGHTS, "%s: more than %d weights", c->what, OH_MAX_WEIGHTS);
    c->w[c->nw] = cuda_rig_weight_rand(c->rig, name, rows, cols, dt, lo, hi);
    return c->nw++;
}

int oh_weight_fp8(oh_case *c, const char *name, int rows, int cols, int block_rows, int block_cols) {
    FD_CHECK(c->nw < OH_MAX_WEIGHTS, "%s: more than %d weights", c->what, OH_MAX_WEIGHTS);
    c->w[c->nw] = cuda_rig_weight_fp8(c->rig, name, rows, cols, block_rows, block_cols, 0);
    return c->nw++;
}

// ---- one side's buffers: allocation with guards, and the check after the op ----
static int is_host(const oh_buf *b, int side) {
    return side == OH_CPU || b->kind == OH_HOST_OUT;
}

// Fills buffer b of `side` (guards, then contents) at base; poisons outputs with NaN (an int32 output with the
// same bits: 0x7fc00000 is no valid id or index).
static void fill_side(fd_backend *be, oh_buf *b, int side, uint8_t *base) {
    const size_t n = b->bytes[side], total = n + 2 * OH_GUARD;
    uint8_t *img = fd_malloc(total);
    for (size_t i = 0; i < total; i++) img[i] = canary_byte(i);
    uint8_t *mid = img + OH_GUARD;
    if (b->kind == OH_IN || b->kind == OH_INOUT)
        memcpy(mid, b->host, n);
    else if (b->kind == OH_SCRATCH)
        memset(mid, 0, n);
    else
        for (size_t i = 0; i + 4 <= n; i += 4) memcpy(mid + i, &(float){NAN}, 4);
    if (is_host(b, side))
        memcpy(base, img, total);
    else
        be->to_device(be, base, img, total);
    free(img);
}

static void alloc_side(fd_backend *be, oh_buf *b, int side) {
    const size_t total = b->bytes[side] + 2 * OH_GUARD;
    b->base[side] = is_host(b, side) ? fd_malloc(total) : be->alloc(be, total);
    b->p[side] = (uint8_t *)b->base[side] + OH_GUARD;
    fill_side(be, b, side, b->base[side]);
}

// A host image of buffer b of `side`, guards included (fd_malloc'ed).
static uint8_t *image(fd_backend *be, const oh_buf *b, int side) {
    const size_t total = b->bytes[side] + 2 * OH_GUARD;
    uint8_t *img = fd_malloc(total);
    if (is_host(b, side))
        memcpy(img, b->base[side], total);
    else
        be->to_host(be, img, b->base[side], total);
    return img;
}

// Whether both guards of an image are intact; reports the first changed byte.
static int guards_intact(const oh_case *c, const oh_buf *b, int side, const uint8_t *img) {
    const size_t n = b->bytes[side];
    for (size_t i = 0; i < OH_GUARD; i++) {
        if (img[i] != canary_byte(i)) {
            EXPECT(0, "%s: %s side wrote %zu bytes before buffer %s", c->what, side ? "gpu" : "cpu", OH_GUARD - i,
                   b->name);
            return 0;
        }
        const size_t j = OH_GUARD + n + i;
        if (img[j] != canary_byte(j)) {
            EXPECT(0, "%s: %s side wrote past the end of buffer %s (byte %zu after it)", c->what, side ? "gpu" : "cpu",
                   b->name, i);
            return 0;
        }
    }
    return 1;
}

static void free_side(fd_backend *be, oh_buf *b, int side) {
    if (!b->base[side]) return;
    if (is_host(b, side))
        free(b->base[side]);
    else
        be->free(be, b->base[side]);
    b->base[side] = b->p[side] = NULL;
}

static void case_free(oh_case *c) {
    for (int i = 0; i < c->nbuf; i++) {
        free_side(cpu(), &c->buf[i], OH_CPU);
        free_side(gpu(), &c->buf[i], OH_GPU);
        free(c->buf[i].host);
    }
    for (int i = 0; i < c->nw; i++) cuda_rig_weight_free(c->rig, &c->w[i]);
}

// ---- test mode ----
// Compares one output of the two sides and checks the guards of both; returns the rel-L2 (0 for exact ints).
static void compare_buf(oh_case *c, oh_buf *b) {
    uint8_t *ic = image(cpu(), b, OH_CPU), *ig = image(gpu(), b, OH_GPU);
    const int ok_c = guards_intact(c, b, OH_CPU, ic), ok_g = guards_intact(c, b, OH_GPU, ig);
    const int compared = b->kind == OH_OUT || b->kind == OH_INOUT || b->kind == OH_HOST_OUT;
    if (compared && b->is_i32) {
        const size_t n = b->bytes[0] / 4;
        size_t diff = 0;
        for (size_t i = 0; i < n; i++) diff += memcmp(ic + OH_GUARD + 4 * i, ig + OH_GUARD + 4 * i, 4) != 0;
        printf("    %-66s %-8s %zu of %zu int32 differ (exact)%s\n", c->what, b->name, diff, n,
               ok_c && ok_g ? "" : " GUARD");
        EXPECT(diff == 0, "%s (%s): %zu of %zu ids differ", c->what, b->name, diff, n);
    } else if (compared) {
        const size_t n = b->bytes[0] / 4;
        const double e = test_rel_l2((const float *)(ig + OH_GUARD), (const float *)(ic + OH_GUARD), n);
        printf("    %-66s %-8s rel-L2 %-9.3g (<= %.0e)%s\n", c->what, b->name, e, b->tol, ok_c && ok_g ? "" : " GUARD");
        EXPECT(e <= b->tol, "%s (%s): rel-L2 %.3g > %.1g", c->what, b->name, e, b->tol);
    }
    free(ic), free(ig);
}

// The twin claim: the same GPU inputs through row->twin give bitwise the outputs of row->run.
static void check_twin(const oh_row *tr, oh_case *c) {
    uint8_t *first[OH_MAX_BUFS] = {0};
    for (int i = 0; i < c->nbuf; i++) {
        oh_buf *b = &c->buf[i];
        if (b->kind == OH_IN || b->kind == OH_SCRATCH) continue;
        first[i] = image(gpu(), b, OH_GPU);
        fill_side(gpu(), b, OH_GPU, b->base[OH_GPU]); // back to the inputs (INOUT) or NaN (outputs)
    }
    if (tr->prepare) {
        for (int i = 0; i < c->nbuf; i++)
            if (c->buf[i].kind == OH_SCRATCH) fill_side(gpu(), &c->buf[i], OH_GPU, c->buf[i].base[OH_GPU]);
        tr->prepare(gpu(), c, OH_GPU);
    }
    tr->twin(gpu(), c);
    gpu()->sync(gpu());
    for (int i = 0; i < c->nbuf; i++) {
        if (!first[i]) continue;
        uint8_t *again = image(gpu(), &c->buf[i], OH_GPU);
        const int same = !memcmp(again, first[i], c->buf[i].bytes[OH_GPU] + 2 * OH_GUARD);
        printf("    %-66s %-8s twin call %s\n", c->what, c->buf[i].name, same ? "bitwise equal" : "DIFFERS");
        EXPECT(same, "%s (%s): the twin call is not bitwise the call", c->what, c->buf[i].name);
        free(again), free(first[i]);
    }
}

// Sets the row's route on the GPU; returns the value to restore (NULL: none set).
static const char *set_route(const oh_row *tr, char *name, size_t cap) {
    if (!tr->route) return NULL;
    const char *eq = strchr(tr->route, '=');
    FD_CHECK(eq && (size_t)(eq - tr->route) < cap, "bad route spec %s", tr->route);
    memcpy(name, tr->route, (size_t)(eq - tr->route));
    name[eq - tr->route] = 0;
    const char *prev = fd_cuda_route(gpu(), name);
    FD_CHECK(prev && fd_cuda_set_route(gpu(), name, eq + 1) == 0, "%s: %s", tr->route, fd_error_msg());
    return prev;
}

// FD_OP_TABLE=substring runs only the rows whose op name or route contains it (FD_OP_TABLE=attention,
// FD_OP_TABLE=attn_kernel=mma).
static int row_selected(const oh_row *tr) {
    const char *only = getenv("FD_OP_TABLE");
    if (!only || !*only) return 1;
    return strstr(tr->op, only) || (tr->route && strstr(tr->route, only));
}

static int gpu_has(const oh_row *tr) {
    void *fn;
    memcpy(&fn, (const char *)gpu() + tr->entry, sizeof fn);
    return fn != NULL;
}

static void build(const oh_row *tr, oh_case *c) {
    memset(c, 0, sizeof *c);
    c->rig = &g_rig;
    tr->build(c, tr->s);
}

static void test_row(const oh_row *tr) {
    oh_case c;
    build(tr, &c);
    char rname[32];
    const char *prev = set_route(tr, rname, sizeof rname);
    for (int side = 0; side < 2; side++) {
        fd_backend *be = side ? gpu() : cpu();
        for (int i = 0; i < c.nbuf; i++) alloc_side(be, &c.buf[i], side);
        if (tr->prepare) tr->prepare(be, &c, side);
        tr->run(be, &c, side);
        be->sync(be);
    }
    for (int i = 0; i < c.nbuf; i++) compare_buf(&c, &c.buf[i]);
    if (tr->twin) check_twin(tr, &c);
    if (prev) fd_cuda_set_route(gpu(), rname, prev);
    case_free(&c);
}

// Runs fn on every selected row of one half of the table (test or perf mode).
static void run_table(const oh_row *rows, size_t count, void (*fn)(const oh_row *), int perf) {
    int ran = 0, skipped = 0;
    size_t last_skipped = (size_t)-1;
    for (size_t r = 0; r < count; r++) {
        const oh_row *tr = &rows[r];
        if (!row_selected(tr) || tr->perf == (perf ? OH_TEST_ONLY : OH_PERF_ONLY)) continue;
        if (!gpu_has(tr)) {
            if (tr->entry != last_skipped) printf("    (skipped: the cuda backend has no %s)\n", tr->op);
            last_skipped = tr->entry, skipped++;
            continue;
        }
        fn(tr);
        ran++;
    }
    printf("    %d rows run, %d skipped\n", ran, skipped);
    EXPECT(ran > 0 || getenv("FD_OP_TABLE"), "no row ran");
}

// Two tests (and two benches) so that each stays well inside gpu_run.sh's per-test timeout.
TEST(cuda_op_table_dense) {
    run_table(oh_rows_dense, oh_n_rows_dense, test_row, 0);
}
TEST(cuda_op_table_seq) {
    run_table(oh_rows_seq, oh_n_rows_seq, test_row, 0);
}

// ---- perf mode ----
// One copy of the GPU side of a case: its buffers and weights, so a pass can touch more than L2.
typedef struct {
    void *p[OH_MAX_BUFS], *base[OH_MAX_BUFS];
    fd_weight g[OH_MAX_WEIGHTS];
} oh_copy;

static size_t gpu_bytes(const oh_case *c) {
    size_t n = 0;
    for (int i = 0; i < c->nbuf; i++) n += c->buf[i].kind == OH_HOST_OUT ? 0 : c->buf[i].bytes[OH_GPU];
    for (int i = 0; i < c->nw; i++) n += fd_weight_bytes(&c->w[i].c);
    return n;
}

static void use_copy(oh_case *c, const oh_copy *k) {
    for (int i = 0; i < c->nbuf; i++) c->buf[i].p[OH_GPU] = k->p[i], c->buf[i].base[OH_GPU] = k->base[i];
    for (int i = 0; i < c->nw; i++) c->w[i].g = k->g[i];
}

static void perf_row(const oh_row *tr) {
    oh_case c;
    build(tr, &c);
    char rname[32];
    const char *prev = set_route(tr, rname, sizeof rname);
    const size_t set = gpu_bytes(&c), l2x2 = (size_t)100 << 20;
    int copies = set >= l2x2 ? 1 : (int)(l2x2 / (set ? set : 1)) + 1;
    if (copies > 64) copies = 64;
    oh_copy *k = fd_calloc((size_t)copies, sizeof *k);
    for (int j = 0; j < copies; j++) {
        for (int i = 0; i < c.nbuf; i++) {
            alloc_side(gpu(), &c.buf[i], OH_GPU);
            k[j].p[i] = c.buf[i].p[OH_GPU], k[j].base[i] = c.buf[i].base[OH_GPU];
        }
        for (int i = 0; i < c.nw; i++) {
            if (j == 0) {
                k[j].g[i] = c.w[i].g;
                continue;
            }
            fd_weight w = c.w[i].c;
            w.dev = NULL, w.dev_scale = NULL;
            gpu()->upload_weight(gpu(), &w);
            k[j].g[i] = w;
        }
        use_copy(&c, &k[j]);
        if (tr->prepare) tr->prepare(gpu(), &c, OH_GPU);
    }
    cudaEvent_t e0, e1;
    FD_CHECK(cudaEventCreate(&e0) == cudaSuccess && cudaEventCreate(&e1) == cudaSuccess, "cudaEventCreate");
    double ms[11];
    for (int s = -1; s < 11; s++) { // s = -1: the warm-up pass
        fd_cuda_record_event(gpu(), e0);
        for (int j = 0; j < copies; j++) use_copy(&c, &k[j]), tr->run(gpu(), &c, OH_GPU);
        fd_cuda_record_event(gpu(), e1);
        FD_CHECK(cudaEventSynchronize(e1) == cudaSuccess, "cudaEventSynchronize");
        float t = 0;
        cudaEventElapsedTime(&t, e0, e1);
        if (s >= 0) ms[s] = (double)t / copies;
    }
    qsort(ms, 11, sizeof ms[0], cmp_d);
    char what[200];
    snprintf(what, sizeof what, "op_table %s%s%s (x%d copies)", c.what, tr->route ? " " : "",
             tr->route ? tr->route : "", copies);
    row(what, ms[5], c.flop, c.bytes > 0 ? c.bytes : (double)set);
    cudaEventDestroy(e0), cudaEventDestroy(e1);
    for (int j = copies - 1; j >= 0; j--) {
        use_copy(&c, &k[j]);
        for (int i = 0; i < c.nbuf; i++) free_side(gpu(), &c.buf[i], OH_GPU);
        if (j > 0)
            for (int i = 0; i < c.nw; i++) gpu()->release_weight(gpu(), &k[j].g[i]);
    }
    for (int i = 0; i < c.nw; i++) c.w[i].g = k[0].g[i]; // copy 0's weights are the case's own: case_free's
    free(k);
    if (prev) fd_cuda_set_route(gpu(), rname, prev);
    case_free(&c);
}

TEST(bench_cuda_op_table_dense) {
    if (cuda_rig_bench_skipped()) return;
    run_table(oh_rows_dense, oh_n_rows_dense, perf_row, 1);
}
TEST(bench_cuda_op_table_seq) {
    if (cuda_rig_bench_skipped()) return;
    run_table(oh_rows_seq, oh_n_rows_seq, perf_row, 1);
}
