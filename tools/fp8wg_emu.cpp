// Runs src/cuda/gemv_fp8wg.cu (route gemm_fp8=wgmma: its kernel and its k plan, the kernel file's own source) on
// the host with tools/gdn_emu's runtime (one std::thread per CUDA thread) and a model of
// wgmma.mma_async.m64n16k32.f32.e4m3.e4m3 written from the PTX ISA text, independently of the kernel's index maths:
//  - the RS A fragment for 8-bit types, per warp w of the warpgroup rows 16w..16w+15 (PTX ISA, "Matrix Fragments
//    for mma.m16n8k32", .e4m3: row = groupID for a0..a3 and a8..a11, groupID + 8 otherwise; col = 4 *
//    threadID_in_group + (i & 3), + 16 for i >= 8; the wgmma k32 figure shows the same per warp); register i/4
//    holds elements 4(i/4)..4(i/4)+3, byte i%4 = element i;
//  - B from a matrix descriptor, K-major, no swizzle (the ISA's canonical layout ((8,m),(T,2k)):((T,SBO),(1,LBO)),
//    T = 16 bytes): element (n, k) at start + (n%8)*16 + (n/8)*SBO + k%16 + (k/16)*LBO; any other swizzle mode,
//    base offset or reserved bit aborts; the descriptor must be the same in all 128 threads;
//  - the accumulator (register i: row g + 8((i/2)%2), column 8(i/4) + 2c + i%2), queued at issue and executed at
//    wgmma.wait_group; scale-d from its predicate operand;
//  - products and sums in double per instruction (the hardware keeps fewer bits inside one wgmma: not modelled;
//    the kernel's fresh accumulator every 128 k is what bounds that on the GPU, tests_cuda's tolerance covers it);
//  - the conversion cvt.rn.satfinite.e4m3x2 as a nearest-even search over every finite code, saturating.
// Checks, against a plain-C W8A8 reference (x per token and 128-group: amax clamped at 1e-10, r = 448 / amax in
// fp32, x_q = e4m3(x * r), block sums in double times w_scale * amax / 448): every output within 1e-5 of the
// column's largest |ref| (the same quantization, sums in another order), every output finite, rows past m
// untouched; row j of an n-row call bitwise the 1-row call of row j (n = 1..16 over a 16-row x); a fused pair of
// segments (stacked tiles, one cut) against the reference and batch invariant; tiles cut into 2 or more pieces,
// runs spanning tiles, runs longer than a tile, one block; m not a multiple of 128, a warpgroup wholly past m,
// block_rows 64 and 128; an all-zero group and an outlier. With FP8WG_EMU_BROKEN=1 the model swaps A registers
// 1 and 2 (the 8-bit layout misread): the run must then report bad checks (the check can fail).
// From the repo root (g++ and the CUDA headers):
//   g++ -std=c++17 -O2 -Isrc -Itools -I/usr/local/cuda/include -Wno-unknown-pragmas tools/fp8wg_emu.cpp \
//     -o .dev/fp8wg_emu -lpthread && .dev/fp8wg_emu        "0 bad" at the end
#include "gdn_emu/emu.h"

#include <cuda_runtime.h>

#include <mutex>
#include <random>
#include <tuple>

#include "gdn_emu/emu_rt.h"

// ---- what cuda.h / cuda_common.h give the kernel part ----
#define FD_CUDA_H
#define CU_GEMV_MAX_SEGS 4
template <typename T> static inline T __ldcg(const T *p) {
    return *p;
}
static inline void __threadfence() {}
static std::mutex atomic_mu;
static inline int atomicAdd(int *p, int v) {
    std::lock_guard<std::mutex> l(atomic_mu);
    const int old = *p;
    *p = old + v;
    return old;
}

// ---- wgmma_ptx.cuh on the host ----
#define FD_CUDA_WGMMA_PTX_CUH
static const uint32_t EMU_WINDOW = 0x400; // the shared-window address of sm4[0]
static inline uint32_t wg_smem(const void *p) {
    const uintptr_t a = (uintptr_t)p, b = (uintptr_t)sm4;
    if (a < b || a - b > sizeof(float4) * 65536) {
        fprintf(stderr, "wg_smem: %p is not shared memory\n", p);
        abort();
    }
    return (uint32_t)(a - b) + EMU_WINDOW;
}
static inline void wg_fence_proxy() {}
static inline void wgmma_fence() {}
template <typename T, int N> static inline void wg_fence_regs(T (&)[N]) {}

static double e4m3_value(int b) {
    const int e = (b >> 3) & 15, mant = b & 7;
    if (e == 15 && mant == 7) return NAN;
    const double v = e ? ldexp(1.0 + mant / 8.0, e - 7) : ldexp(mant / 8.0, -6);
    return (b & 0x80) ? -v : v;
}
static uint8_t e4m3_code(float v) { // nearest, ties to the even code, saturating at +-448
    const double a = fabs((double)v);
    int best = 0;
    for (int c = 1; c < 0x7f; c++) {
        const double d = fabs(e4m3_value(c) - a), db = fabs(e4m3_value(best) - a);
        if (d < db || (d == db && !(c & 1))) best = c;
    }
    return (uint8_t)(best | (v < 0 && best ? 0x80 : 0));
}
static inline uint32_t wg_e4m3x4(float a, float b, float c, float d) {
    return (uint32_t)e4m3_code(a) | (uint32_t)e4m3_code(b) << 8 | (uint32_t)e4m3_code(c) << 16 |
           (uint32_t)e4m3_code(d) << 24;
}

static inline uint8_t smem_byte(uint32_t addr) {
    if (addr < EMU_WINDOW || addr + 1 > EMU_WINDOW + emu_smem_bytes) {
        fprintf(stderr, "wgmma operand address 0x%x outside the block's shared memory\n", addr);
        abort();
    }
    return ((const uint8_t *)sm4)[addr - EMU_WINDOW];
}
struct wg_op {
    float *d;
    int scale_d;
    uint32_t start, lbo, sbo;
    double A[64][32];
};
static thread_local std::vector<wg_op> wg_open;
static thread_local std::vector<std::vector<wg_op>> wg_groups;
static int model_broken = 0;

static void wg_execute(const wg_op &op) {
    const int t = threadIdx.x & 127, w = t >> 5, lane = t & 31, g = lane >> 2, c = lane & 3;
    for (int i = 0; i < 8; i++) {
        const int row = 16 * w + g + 8 * ((i >> 1) & 1), col = 8 * (i >> 2) + 2 * c + (i & 1);
        double s = 0;
        for (int k = 0; k < 32; k++) {
            const uint32_t addr = op.start + (uint32_t)(col % 8) * 16 + (uint32_t)(col / 8) * op.sbo + k % 16 +
                                  (uint32_t)(k / 16) * op.lbo;
            s += op.A[row][k] * e4m3_value(smem_byte(addr));
        }
        op.d[i] = (float)((op.scale_d ? (double)op.d[i] : 0.0) + s);
    }
}
static inline void wgmma_rs_m64n16k32_e4m3(float (&d)[8], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                           uint64_t db, int scale_d) {
    uint32_t mine[7] = {(uint32_t)db, (uint32_t)(db >> 32), (uint32_t)(scale_d != 0), a0, a1, a2, a3};
    if (model_broken) std::swap(mine[4], mine[5]);
    static thread_local uint32_t all[128][16];
    emu_wg_exchange(mine, 7, all);
    for (int t = 0; t < 128; t++)
        if (memcmp(all[t], all[0], 12)) {
            fprintf(stderr, "wgmma: descriptor / scale-d differ across the warpgroup\n");
            abort();
        }
    const int base_offset = (int)((db >> 49) & 7), swz = (int)(db >> 62);
    const bool reserved = ((db >> 14) & 3) || ((db >> 30) & 3) || ((db >> 46) & 7) || ((db >> 52) & 0x3ff);
    if (swz != 0 || base_offset != 0 || reserved) {
        fprintf(stderr, "descriptor %016llx: only no swizzle, base offset 0, reserved bits 0 are modelled\n",
                (unsigned long long)db);
        abort();
    }
    wg_op op;
    op.d = d, op.scale_d = scale_d != 0;
    op.start = (uint32_t)(db & 0x3fff) << 4, op.lbo = (uint32_t)((db >> 16) & 0x3fff) << 4;
    op.sbo = (uint32_t)((db >> 32) & 0x3fff) << 4;
    for (int t = 0; t < 128; t++) {
        const int w = t >> 5, g = (t & 31) >> 2, c = t & 3;
        for (int r = 0; r < 4; r++)
            for (int b = 0; b < 4; b++) {
                const int row = 16 * w + g + 8 * (r & 1), k = 16 * (r >> 1) + 4 * c + b;
                op.A[row][k] = e4m3_value((all[t][3 + r] >> (8 * b)) & 0xff);
            }
    }
    wg_open.push_back(op);
}
static inline void wgmma_commit() {
    wg_groups.push_back(wg_open);
    wg_open.clear();
}
template <int N> static inline void wgmma_wait() {
    while ((int)wg_groups.size() > N) {
        for (auto &op : wg_groups.front()) wg_execute(op);
        wg_groups.erase(wg_groups.begin());
    }
}

#define WG8_EMU
#include "cuda/gemv_fp8wg.cu"

// ---------------------------------------------------------------------------------------------------------
static int bad = 0, checks = 0;
static void expect(bool ok, const char *what) {
    checks++;
    if (!ok) bad++, printf("  BAD: %s\n", what);
}

struct fp8w {
    int m, k, br;
    std::vector<uint8_t> q;
    std::vector<float> s; // [ceil(m / br)][k / 128]
};
static fp8w make_w(int m, int k, int br, std::mt19937 &rng) {
    fp8w w{m, k, br, std::vector<uint8_t>((size_t)m * k), std::vector<float>((size_t)((m + br - 1) / br) * (k / 128))};
    for (auto &b : w.q)
        for (;;) {
            b = (uint8_t)rng();
            if ((b & 0x7f) != 0x7f) break; // no NaN codes
        }
    std::uniform_real_distribution<float> u(0.25f, 4.f);
    for (auto &v : w.s) v = u(rng) / 448.f;
    return w;
}
// out [n, m] in double
static std::vector<double> ref_w8a8(const fp8w &w, const float *x, int n) {
    const int groups = w.k / 128;
    std::vector<double> out((size_t)n * w.m), xq(w.k), xs(groups);
    for (int i = 0; i < n; i++) {
        const float *xi = x + (size_t)i * w.k;
        for (int g = 0; g < groups; g++) {
            float amax = 0.f;
            for (int c = 128 * g; c < 128 * g + 128; c++) amax = fmaxf(amax, fabsf(xi[c]));
            amax = fmaxf(amax, 1e-10f);
            const float r = 448.f / amax;
            xs[g] = amax / 448.f;
            for (int c = 128 * g; c < 128 * g + 128; c++) xq[c] = e4m3_value(e4m3_code(xi[c] * r));
        }
        for (int row = 0; row < w.m; row++) {
            double acc = 0;
            for (int g = 0; g < groups; g++) {
                double part = 0;
                for (int c = 128 * g; c < 128 * g + 128; c++) part += e4m3_value(w.q[(size_t)row * w.k + c]) * xq[c];
                acc += part * (double)w.s[(size_t)(row / w.br) * groups + g] * xs[g];
            }
            out[(size_t)i * w.m + row] = acc;
        }
    }
    return out;
}

// Runs the kernel over `count` weights (one launch); outs get NaN guards past their end.
static void run(const fp8w *const ws[], int count, const float *x, int n, int num_sms, int bps,
                std::vector<float> *outs) {
    const int k = ws[0]->k;
    wg8_job job;
    memset(&job, 0, sizeof job);
    job.count = count;
    for (int i = 0; i < count; i++) {
        wg8_seg *sg = &job.seg[i];
        outs[i].assign((size_t)n * ws[i]->m + 64, NAN);
        sg->W = ws[i]->q.data(), sg->scale = ws[i]->s.data(), sg->out = outs[i].data();
        sg->m = ws[i]->m, sg->br = ws[i]->br, sg->scols = k / 128;
    }
    wg8_stack(&job);
    size_t smem;
    const int blocks = wg8_plan(&job, k, num_sms, bps, &smem);
    std::vector<float> partial((size_t)(blocks + job.tiles) * WG8_PARTIAL, NAN);
    std::vector<int> counters(job.tiles, 0);
    job.partial = partial.data(), job.counters = counters.data();
    emu_launch(k_gemv_fp8wg, dim3(blocks), dim3(WG8_THREADS), smem, job, x, n, k);
    for (int t : counters)
        if (t) expect(false, "a split-k counter left non-zero");
}

static int check_vs_ref(const fp8w &w, const std::vector<float> &out, const float *x, int n, const char *what) {
    const std::vector<double> ref = ref_w8a8(w, x, n);
    int off = 0, nonfinite = 0;
    for (int i = 0; i < n; i++) {
        double colmax = 0;
        for (int r = 0; r < w.m; r++) colmax = std::max(colmax, fabs(ref[(size_t)i * w.m + r]));
        for (int r = 0; r < w.m; r++) {
            const float v = out[(size_t)i * w.m + r];
            if (!std::isfinite(v))
                nonfinite++;
            else if (fabs(v - ref[(size_t)i * w.m + r]) > 1e-5 * colmax + 1e-30)
                off++;
        }
    }
    bool guard = true;
    for (size_t e = (size_t)n * w.m; e < out.size(); e++) guard &= std::isnan(out[e]);
    char buf[200];
    snprintf(buf, sizeof buf, "%s: %d off the W8A8 reference, %d not finite, guard %s", what, off, nonfinite,
             guard ? "ok" : "written");
    expect(off == 0 && nonfinite == 0 && guard, buf);
    return off;
}

int main(int argc, char **argv) {
    model_broken = getenv("FP8WG_EMU_BROKEN") && atoi(getenv("FP8WG_EMU_BROKEN"));
    const bool quick = argc > 1 && !strcmp(argv[1], "quick");
    std::mt19937 rng(0xf8);
    std::uniform_real_distribution<float> ux(-1.f, 1.f);
    struct shape {
        int m, k, br, sms, bps;
    } shapes[] = {
        {200, 1024, 128, 2, 2}, // 2 tiles, the second part-filled; split k
        {48, 512, 64, 1, 1},    // one tile, warpgroup 1 wholly past m; S = 1 ... or by the plan
        {256, 768, 64, 4, 2},   // block_rows 64: the warpgroups read different scale rows
        {130, 4352, 128, 1, 1}, // a tile longer than WG8_MAX_SLOTS: runs of 32, cut tiles
        {520, 384, 128, 2, 1},  // runs longer than a tile (B slot = group): whole tiles direct, a tile cut in two
    };
    int nshape = quick ? 2 : (int)(sizeof shapes / sizeof shapes[0]);
    for (int si = 0; si < nshape; si++) {
        const shape &sh = shapes[si];
        const fp8w w = make_w(sh.m, sh.k, sh.br, rng);
        std::vector<float> x((size_t)16 * sh.k);
        for (auto &v : x) v = ux(rng);
        for (int c = 128; c < 256; c++) x[c] = 0.f; // token 0: an all-zero group
        x[(size_t)15 * sh.k + 5] = 60.f;            // token 15: an outlier
        wg8_job pj;
        memset(&pj, 0, sizeof pj);
        pj.count = 1, pj.seg[0].m = sh.m;
        wg8_stack(&pj);
        size_t smem;
        const int blocks = wg8_plan(&pj, sh.k, sh.sms, sh.bps, &smem);
        printf("m %d k %d br %d: %d tiles x %d units, run %d, %d blocks\n", sh.m, sh.k, sh.br, pj.tiles, pj.bk, pj.run,
               blocks);
        const fp8w *one[1] = {&w};
        std::vector<float> all16[1];
        run(one, 1, x.data(), 16, sh.sms, sh.bps, all16);
        char what[120];
        snprintf(what, sizeof what, "m %d k %d n 16", sh.m, sh.k);
        check_vs_ref(w, all16[0], x.data(), 16, what);
        // batch invariance: n = 1..16 (quick: 1, 5, 9), each row bitwise the 16-row call's
        for (int n = 1; n <= 16; n++) {
            if (quick && n != 1 && n != 5 && n != 9) continue;
            if (!quick && n > 3 && n != 8 && n != 9 && n != 15) continue; // the emulation is slow: a spread of n
            std::vector<float> o[1];
            run(one, 1, x.data(), n, sh.sms, sh.bps, o);
            bool same = true;
            for (int i = 0; i < n; i++)
                same &= !memcmp(o[0].data() + (size_t)i * sh.m, all16[0].data() + (size_t)i * sh.m, 4 * (size_t)sh.m);
            snprintf(what, sizeof what, "m %d k %d: n %d rows differ from the 16-row call", sh.m, sh.k, n);
            expect(same, what);
        }
    }
    // a fused pair (different m and block_rows, one k): stacked into one cut, a run crossing from one segment
    // into the other; against the reference, and the 7-row call's rows bitwise the 16-row call's
    {
        const int k = 640;
        const fp8w a = make_w(136, k, 128, rng), b = make_w(64, k, 64, rng);
        std::vector<float> x((size_t)16 * k);
        for (auto &v : x) v = ux(rng);
        const fp8w *pair[2] = {&a, &b};
        std::vector<float> f7[2], f16[2];
        run(pair, 2, x.data(), 7, 2, 2, f7);
        run(pair, 2, x.data(), 16, 2, 2, f16);
        check_vs_ref(a, f7[0], x.data(), 7, "fused pair, segment 0");
        check_vs_ref(b, f7[1], x.data(), 7, "fused pair, segment 1");
        expect(!memcmp(f7[0].data(), f16[0].data(), 4 * 7 * 136), "fused segment 0: 7 rows differ from the 16-row call");
        expect(!memcmp(f7[1].data(), f16[1].data(), 4 * 7 * 64), "fused segment 1: 7 rows differ from the 16-row call");
    }
    printf("fp8wg_emu%s: %d checks, %d bad\n", model_broken ? " (broken model)" : "", checks, bad);
    return bad != 0;
}
