// Runs src/cuda/gemv_w8a8.cu (route gemm_fp8=w8a8) on the host with tools/gdn_emu's runtime (one std::thread per
// CUDA thread, blocks in sequence; mma.sync m16n8k16 f16 rebuilt here from the PTX ISA's fragment layout and an
// IEEE f16 decoder, independently of the kernel's code and its e4m3 -> f16 bit trick; products in double) and
// checks, without a GPU:
//  - against a plain-C W8A8 reference (x quantized per token and 128-group: amax clamped at 1e-10, r = 448 / amax,
//    e4m3 by a brute-force nearest-even search over every finite code, saturating; exact e4m3 products in double,
//    each 128-block's sum times w_scale * amax / 448): rel-L2 <= 1e-6 (only fp32 rounding of the block sums
//    differs; the hardware's own e4m3 accumulation is not modelled: the GPU test allows 1e-3);
//  - against the weight-only fp32 result (x unrounded): printed, <= 5e-2 (the e4m3 rounding of x, ~2-3 %);
//  - bitwise: row j of an n-row call == the 1-row call of row j alone; a fused group == separate calls;
//  - every output written (NaN-poisoned before), n = 1..16, k % 128 != 0, partial row tiles, split k.
// From the repo root (g++ and the CUDA headers):
//   g++ -std=c++17 -O2 -Isrc -Itools -I/usr/local/cuda/include -Wno-unknown-pragmas tools/fp8mma_emu.cpp \
//     -o .dev/fp8mma_emu -lpthread && .dev/fp8mma_emu [quick]        "0 bad" at the end
#include "backend.h" // fd_weight; its FD_CHECK is replaced by emu.h's
#undef FD_CHECK
#include "gdn_emu/emu.h"

#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <string>
#include <tuple>

#include "gdn_emu/emu_rt.h"

// ---- what cuda_common.h and mma.cuh give gemv_w8a8.cu (host side) ----
#undef __shared__
#define __shared__       static // blocks run one after another: a function-level static is the block's shared memory
#define CU_GEMV_MAX_N    16
#define CU_GEMV_MAX_SEGS 4
struct cu_impl {
    int num_sms, gemv_blocks_per_sm;
    int64_t gemv_launches;
};
static cu_impl the_impl = {4, 2, 0}; // 4 "SMs": the shapes below get split k
static inline cu_impl *cu_of(fd_backend *) {
    return &the_impl;
}
static std::vector<int> counters_store;
int *cu_gemv_counters(cu_impl *, int tiles) {
    if ((int)counters_store.size() < tiles) counters_store.assign(tiles, 0);
    return counters_store.data();
}
#define cu_launch_early(be, kernel, grid, block, smem, ...) emu_launch(kernel, grid, block, smem, __VA_ARGS__)
static inline void __threadfence() {}
static inline int atomicAdd(int *p, int v) {
    return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST);
}
static inline float __ldcg(const float *p) {
    return *p;
}
static inline float4 __ldca(const float4 *p) {
    return *p;
}
static inline float __shfl_sync(unsigned, float v, int src) {
    uint32_t mine = 0, all[32][16];
    memcpy(&mine, &v, 4);
    emu_warp_exchange(&mine, 1, all);
    float r;
    memcpy(&r, &all[src & 31][0], 4);
    return r;
}
static inline uint4 cu_ld_stream(const void *p) {
    uint4 v;
    memcpy(&v, p, 16);
    return v;
}
// e4m3fn: sign, 4 exponent bits (bias 7), 3 mantissa bits; exponent 0 subnormal; 0x7f / 0xff NaN
static double e4m3_value(uint8_t b) {
    const int e = (b >> 3) & 15, m = b & 7;
    if (e == 15 && m == 7) return NAN;
    const double v = e ? ldexp(1.0 + m / 8.0, e - 7) : ldexp(m / 8.0, -6);
    return b & 0x80 ? -v : v;
}
// IEEE binary16: sign, 5 exponent bits (bias 15), 10 mantissa bits, exponent 0 subnormal
static double f16_value(uint16_t h) {
    const int e = (h >> 10) & 31, mant = h & 1023;
    const double v = e == 31 ? (mant ? NAN : INFINITY)
                     : e     ? ldexp(1.0 + mant / 1024.0, e - 15)
                             : ldexp(mant / 1024.0, -14);
    return h & 0x8000 ? -v : v;
}
// c += a . b, m16n8k16 f16 (the PTX layout: A row g / g+8, k 2t, 2t+1 | 8+2t, 8+2t+1; B the same k of column g)
static void cu_mma_f16(float c[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0, uint32_t b1) {
    uint32_t mine[6] = {a0, a1, a2, a3, b0, b1}, all[32][16];
    emu_warp_exchange(mine, 6, all);
    double A[16][16], B[16][8];
    for (int l = 0; l < 32; l++) {
        const int g = l >> 2, t = l & 3;
        for (int hi = 0; hi < 2; hi++) {
            A[g][2 * t + hi] = f16_value((uint16_t)(all[l][0] >> (16 * hi)));
            A[g + 8][2 * t + hi] = f16_value((uint16_t)(all[l][1] >> (16 * hi)));
            A[g][2 * t + 8 + hi] = f16_value((uint16_t)(all[l][2] >> (16 * hi)));
            A[g + 8][2 * t + 8 + hi] = f16_value((uint16_t)(all[l][3] >> (16 * hi)));
            B[2 * t + hi][g] = f16_value((uint16_t)(all[l][4] >> (16 * hi)));
            B[2 * t + 8 + hi][g] = f16_value((uint16_t)(all[l][5] >> (16 * hi)));
        }
    }
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    for (int e = 0; e < 4; e++) {
        const int row = g + 8 * (e >> 1), col = 2 * t + (e & 1);
        double s = 0;
        for (int k = 0; k < 16; k++) s += A[row][k] * B[k][col];
        c[e] = (float)((double)c[e] + s);
    }
}

#include "cuda/gemv_w8a8.cu"

// ---------------------------------------------------------------------------------------------------------
static uint64_t rng = 88172645463325252ull;
static float urand(float lo, float hi) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return lo + (hi - lo) * (float)((rng >> 11) * (1.0 / 9007199254740992.0));
}
// the nearest finite e4m3 value, ties to the even code, saturating at +-448 (by search over all codes)
static double e4m3_round(float v) {
    const double a = fabs((double)v);
    int best = 0;
    for (int c = 1; c < 0x7f; c++) {
        const double d = fabs(e4m3_value((uint8_t)c) - a), db = fabs(e4m3_value((uint8_t)best) - a);
        if (d < db || (d == db && !(c & 1))) best = c;
    }
    return v < 0 ? -e4m3_value((uint8_t)best) : e4m3_value((uint8_t)best);
}

struct wfp8 {
    int m, k, br;
    std::vector<uint8_t> q;
    std::vector<float> scale; // [ceil(m / br), ceil(k / 128)]
    fd_weight w;
};
static wfp8 make_w(int m, int k, int br) {
    wfp8 r;
    r.m = m, r.k = k, r.br = br;
    r.q.resize((size_t)m * k);
    for (auto &b : r.q) {
        b = (uint8_t)(urand(0, 256));
        if ((b & 0x7f) == 0x7f) b ^= 1; // no NaN codes (checkpoints hold none)
    }
    const int sr = (m + br - 1) / br, sc = (k + 127) / 128;
    r.scale.resize((size_t)sr * sc);
    for (auto &s : r.scale) s = ldexpf(urand(0.5f, 1.f), (int)urand(-12, -4)); // orders of magnitude apart
    memset(&r.w, 0, sizeof r.w);
    r.w.name = "W", r.w.fmt = FD_WFMT_FP8_BLOCK, r.w.rows = m, r.w.cols = k, r.w.block_rows = br, r.w.block_cols = 128,
    r.w.scale_cols = sc;
    r.w.dev = r.q.data(), r.w.dev_scale = r.scale.data();
    return r;
}
// plain-C W8A8: x quantized per (token, 128-group), exact products in double
static std::vector<double> ref_w8a8(const wfp8 &W, const float *x, int n) {
    std::vector<double> out((size_t)n * W.m);
    const int groups = (W.k + 127) / 128;
    for (int i = 0; i < n; i++) {
        std::vector<double> xq(W.k), xs(groups);
        for (int gi = 0; gi < groups; gi++) {
            const int a = 128 * gi, b = std::min(W.k, a + 128);
            float amax = 0;
            for (int kk = a; kk < b; kk++) amax = fmaxf(amax, fabsf(x[(size_t)i * W.k + kk]));
            amax = fmaxf(amax, 1e-10f);
            const float r = 448.f / amax;
            xs[gi] = amax / 448.f;
            for (int kk = a; kk < b; kk++) xq[kk] = e4m3_round(x[(size_t)i * W.k + kk] * r);
        }
        for (int row = 0; row < W.m; row++) {
            double acc = 0;
            for (int gi = 0; gi < groups; gi++) {
                double part = 0;
                for (int kk = 128 * gi; kk < std::min(W.k, 128 * gi + 128); kk++)
                    part += e4m3_value(W.q[(size_t)row * W.k + kk]) * xq[kk];
                acc += part * W.scale[(size_t)(row / W.br) * ((W.k + 127) / 128) + gi] * xs[gi];
            }
            out[(size_t)i * W.m + row] = acc;
        }
    }
    return out;
}
// weight-only: the dequantized weight times unrounded x, in double
static std::vector<double> ref_wonly(const wfp8 &W, const float *x, int n) {
    std::vector<double> out((size_t)n * W.m);
    for (int i = 0; i < n; i++)
        for (int row = 0; row < W.m; row++) {
            double acc = 0;
            for (int kk = 0; kk < W.k; kk++)
                acc += e4m3_value(W.q[(size_t)row * W.k + kk]) *
                       W.scale[(size_t)(row / W.br) * ((W.k + 127) / 128) + kk / 128] * x[(size_t)i * W.k + kk];
            out[(size_t)i * W.m + row] = acc;
        }
    return out;
}
static double rel_l2(const std::vector<float> &got, const std::vector<double> &ref) {
    double num = 0, den = 0;
    for (size_t i = 0; i < ref.size(); i++) {
        if (!std::isfinite(got[i])) return INFINITY;
        num += (got[i] - ref[i]) * (got[i] - ref[i]), den += ref[i] * ref[i];
    }
    return sqrt(num / den);
}
static std::vector<float> run(const std::vector<const wfp8 *> &Ws, const float *x, int n,
                              std::vector<std::vector<float>> *outs) {
    outs->clear();
    float *o[4];
    const fd_weight *w[4];
    for (size_t i = 0; i < Ws.size(); i++) {
        outs->emplace_back((size_t)n * Ws[i]->m, NAN);
        o[i] = outs->back().data(), w[i] = &Ws[i]->w;
    }
    cu_gemv_w8a8_multi(NULL, o, w, (int)Ws.size(), x, n);
    return (*outs)[0];
}

int main(int argc, char **argv) {
    const bool quick = argc > 1 && !strcmp(argv[1], "quick");
    int bad = 0, checks = 0;
    // m, k, block rows: partial row tiles, k % 128 != 0 (a short last group), split k (k > 2048 on 4 "SMs")
    const int shapes[][3] = {{64, 256, 128}, {200, 320, 128}, {96, 4160, 32}, {130, 8320, 128}, {48, 2064, 64}};
    const int ns_full[] = {1, 2, 7, 8, 9, 16}, ns_quick[] = {1, 9};
    const int *ns = quick ? ns_quick : ns_full, nn = quick ? 2 : 6;
    for (const auto &sh : shapes) {
        if (quick && sh[1] > 4200) continue;
        wfp8 W = make_w(sh[0], sh[1], sh[2]);
        for (int a = 0; a < nn; a++) {
            const int n = ns[a], k = sh[1];
            std::vector<float> x((size_t)n * k);
            for (auto &v : x) v = urand(-1, 1);
            for (int kk = 0; kk < std::min(k, 128); kk++) x[kk] = 0; // token 0: an all-zero group
            x[(size_t)(n - 1) * k + k / 2] = 30.f;                   // an outlier in one group of the last token
            std::vector<std::vector<float>> outs;
            std::vector<float> got = run({&W}, x.data(), n, &outs);
            const double e = rel_l2(got, ref_w8a8(W, x.data(), n)), ew = rel_l2(got, ref_wonly(W, x.data(), n));
            checks++;
            const bool ok = e <= 1e-6 && ew <= 5e-2;
            bad += !ok;
            printf("%s m %4d k %5d br %3d n %2d: vs W8A8 reference %.2e, vs weight-only %.2e\n", ok ? "ok " : "BAD",
                   sh[0], k, sh[2], n, e, ew);
            // bitwise: each row of the n-row call == that row alone
            for (int i = 0; i < n && n > 1; i += quick ? n - 1 : 1) {
                std::vector<std::vector<float>> o1;
                std::vector<float> one = run({&W}, x.data() + (size_t)i * k, 1, &o1);
                checks++;
                if (memcmp(one.data(), got.data() + (size_t)i * W.m, (size_t)W.m * 4)) {
                    bad++;
                    printf("BAD m %d k %d n %d: row %d differs from its 1-row call\n", sh[0], k, n, i);
                }
            }
        }
    }
    // a fused group (GDN-like: four weights of one k, different m and block rows) == the separate calls
    {
        wfp8 a = make_w(160, 2304, 128), b = make_w(64, 2304, 32), c = make_w(40, 2304, 128), d = make_w(32, 2304, 64);
        for (int n : {1, 12}) {
            std::vector<float> x((size_t)n * 2304);
            for (auto &v : x) v = urand(-2, 2);
            std::vector<std::vector<float>> fused, sep;
            run({&a, &b, &c, &d}, x.data(), n, &fused);
            const wfp8 *all[4] = {&a, &b, &c, &d};
            for (int i = 0; i < 4; i++) {
                run({all[i]}, x.data(), n, &sep);
                checks++;
                if (memcmp(sep[0].data(), fused[i].data(), sep[0].size() * 4)) {
                    bad++;
                    printf("BAD fused group n %d: weight %d differs from its separate call\n", n, i);
                }
            }
        }
        printf("fused groups checked\n");
    }
    printf("%d checks, %d bad\n", checks, bad);
    return bad != 0;
}
