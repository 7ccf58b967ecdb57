// Runs src/cuda/attention_decode_warp.cu (route attn_decode=warp) on the host with tools/gdn_emu's runtime (one
// std::thread per CUDA thread; mma.sync, ldmatrix (.trans) and movmatrix rebuilt from the PTX fragment layouts,
// independently of the kernel's code; cp.async queued until its wait) and checks, without a GPU:
//  - the output (partials merged as k_attn_combine does, in double) against a direct attention over the same bf16
//    Q and bf16 / dequantised K, V: rel-L2 <= 5e-3 (P is rounded to bf16: ~1e-3 expected), both layouts, head dims
//    64/128/256, GQA 1 and 6, n 1..16, causal and not, contiguous and through a shuffled page table, tree masks;
//  - bitwise: row j of an n-token causal call == the 1-token call at pos0 + j; pos_dev with a larger capacity ==
//    the plain call; a chain-shaped tree == the causal call; paged == contiguous.
// From the repo root (g++ and the CUDA headers):
//   g++ -std=c++17 -O2 -Isrc -Itools -I/usr/local/cuda/include -Wno-unknown-pragmas tools/dw_emu.cpp -o .dev/dw_emu
//   -lpthread && .dev/dw_emu [quick]        "0 bad" at the end; a few minutes of both cores
#include "gdn_emu/emu.h"

#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <string>
#include <tuple>

#include "gdn_emu/emu_rt.h"

// ---- what cuda_common.h gives attention_decode_warp.cu (the same definitions, host side) ----
#define CU_DECODE_CHUNK   512
#define CU_TREE_MAX_NODES 64
typedef struct {
    const __nv_bfloat16 *k, *v;
    const uint8_t *k8, *v8;
    const float *ks, *vs;
    const int32_t *pages;
    int page_shift;
} cu_kv;
static inline int64_t cu_kv_slot(const cu_kv &kv, int64_t p) {
    if (!kv.pages) return p;
    return ((int64_t)kv.pages[p >> kv.page_shift] << kv.page_shift) | (p & ((1ll << kv.page_shift) - 1));
}
typedef struct {
    int64_t s0, s1, split;
} cu_kv_tile;
static inline cu_kv_tile cu_kv_tile_at(const cu_kv &kv, int64_t kt0, int64_t kend) {
    cu_kv_tile t;
    if (!kv.pages) {
        t.s0 = kt0, t.split = INT64_MAX, t.s1 = 0;
        return t;
    }
    t.s0 = cu_kv_slot(kv, kt0);
    t.split = (kt0 | ((1ll << kv.page_shift) - 1)) + 1;
    t.s1 = t.split < kend ? cu_kv_slot(kv, t.split) : 0;
    return t;
}
static inline int64_t cu_kv_tile_slot(const cu_kv_tile &t, int64_t kt0, int64_t kp) {
    return kp < t.split ? t.s0 + (kp - kt0) : t.s1 + (kp - t.split);
}
struct emu_impl {
    int device;
};
static emu_impl the_impl = {0};
static inline emu_impl *cu_of(fd_backend *) {
    return &the_impl;
}
static inline void __trap() {
    fprintf(stderr, "__trap\n");
    abort();
}
static inline float __fmaf_rn(float a, float b, float c) {
    return fmaf(a, b, c);
}
static inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s) {
    const uint64_t src = (uint64_t)x | ((uint64_t)y << 32);
    unsigned r = 0;
    for (int i = 0; i < 4; i++) r |= (unsigned)((src >> (8 * ((s >> (4 * i)) & 7))) & 0xff) << (8 * i);
    return r;
}
static inline void __syncwarp() {
    uint32_t x = 0, all[32][16];
    emu_warp_exchange(&x, 1, all);
}

// ---- decode_warp_ptx.cuh on the host ----
#define FD_CUDA_DECODE_WARP_PTX_CUH
static inline void dw_cp16(void *dst, const void *src, bool ok) {
    cu_cp_async16(dst, src, ok);
}
static inline void dw_cp4(void *dst, const void *src, bool ok) {
    emu_cp_async4(dst, src, ok);
}
static inline void dw_commit() {
    cu_cp_async_commit();
}
template <int N> static inline void dw_wait() {
    emu_cp_wait(N);
}
// every lane's row address; lane t gets from matrix i (rows addressed by lanes 8i..8i+7) row t/4, elements 2(t%4),
// +1 (plain) or row 2(t%4), +1, element t/4 (trans)
static void emu_ldsm(uint32_t r[4], const void *p, bool trans) {
    uint32_t mine[2], all[32][16];
    memcpy(mine, &p, sizeof p);
    emu_warp_exchange(mine, 2, all);
    const int t = threadIdx.x & 31;
    for (int i = 0; i < 4; i++) {
        const uint8_t *row[8];
        for (int j = 0; j < 8; j++) memcpy(&row[j], all[8 * i + j], sizeof row[j]);
        if (!trans) {
            memcpy(&r[i], row[t / 4] + 4 * (t % 4), 4);
        } else {
            uint16_t lo, hi;
            memcpy(&lo, row[2 * (t % 4)] + 2 * (t / 4), 2);
            memcpy(&hi, row[2 * (t % 4) + 1] + 2 * (t / 4), 2);
            r[i] = lo | ((uint32_t)hi << 16);
        }
    }
}
static inline void dw_ldsm_x4(uint32_t r[4], const void *p) {
    emu_ldsm(r, p, false);
}
static inline void dw_ldsm_x4_trans(uint32_t r[4], const void *p) {
    emu_ldsm(r, p, true);
}
static inline void dw_mma(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    cu_mma_bf16(c, a[0], a[1], a[2], a[3], b0, b1);
}
static inline uint32_t dw_movt(uint32_t a) {
    uint32_t all[32][16];
    emu_warp_exchange(&a, 1, all);
    uint16_t M[8][8];
    for (int l = 0; l < 32; l++)
        M[l / 4][2 * (l % 4)] = all[l][0] & 0xffff, M[l / 4][2 * (l % 4) + 1] = all[l][0] >> 16;
    const int t = threadIdx.x & 31;
    return M[2 * (t % 4)][t / 4] | ((uint32_t)M[2 * (t % 4) + 1][t / 4] << 16);
}

#include "cuda/attention_decode_warp.cu"

// ---------------------------------------------------------------------------------------------------------
static uint64_t rng = 88172645463325252ull;
static float urand(float lo, float hi) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return lo + (hi - lo) * (float)((rng >> 11) * (1.0 / 9007199254740992.0));
}
static float rbf(float x) {
    return __bfloat162float(__float2bfloat16_rn(x));
}

struct cache {
    int e4, Hkv, hd, paged;
    int64_t slots;
    std::vector<__nv_bfloat16> k, v;
    std::vector<uint8_t> k8, v8;
    std::vector<float> ks, vs;
    std::vector<int32_t> pages; // page size 64
    std::vector<float> kd, vd;  // [position][Hkv][hd]: the values the kernel multiplies (bf16, or e4m3 * scale)
    cu_kv view() const {
        cu_kv c = {};
        if (e4)
            c.k8 = k8.data(), c.v8 = v8.data(), c.ks = ks.data(), c.vs = vs.data();
        else
            c.k = k.data(), c.v = v.data();
        c.pages = paged ? pages.data() : NULL, c.page_shift = paged ? 6 : 0;
        return c;
    }
};
// `tot` random positions; paged: slots through a shuffled table of 64-token pages
static cache make_cache(int e4, int Hkv, int hd, int64_t tot, int paged) {
    cache c;
    c.e4 = e4, c.Hkv = Hkv, c.hd = hd, c.paged = paged;
    const int64_t npages = (tot + 63) / 64;
    c.slots = npages * 64;
    for (int i = 0; i < npages; i++) c.pages.push_back(i);
    for (int i = (int)npages - 1; i > 0; i--) std::swap(c.pages[i], c.pages[(int)(urand(0, 1) * (i + 1)) % (i + 1)]);
    const size_t n = (size_t)c.slots * Hkv * hd;
    c.k.resize(n), c.v.resize(n), c.k8.resize(n), c.v8.resize(n), c.ks.resize(c.slots * Hkv),
        c.vs.resize(c.slots * Hkv);
    c.kd.resize((size_t)tot * Hkv * hd), c.vd.resize((size_t)tot * Hkv * hd);
    cu_kv view = c.view();
    std::vector<float> row(hd);
    for (int64_t p = 0; p < tot; p++)
        for (int h = 0; h < Hkv; h++)
            for (int plane = 0; plane < 2; plane++) {
                for (int d = 0; d < hd; d++) row[d] = plane ? urand(-1, 1) : urand(-2, 2);
                const int64_t at = cu_kv_slot(view, p) * Hkv + h;
                float *dst = (plane ? c.vd.data() : c.kd.data()) + (p * Hkv + h) * hd;
                if (e4) { // as k_kv_store_e4m3
                    float amax = 0;
                    for (float x : row) amax = fmaxf(amax, fabsf(x));
                    const float s = amax > 0 ? amax / 448.0f : 1.0f;
                    (plane ? c.vs : c.ks)[at] = s;
                    for (int d = 0; d < hd; d++) {
                        const uint8_t b = __nv_cvt_float_to_fp8(row[d] / s, __NV_SATFINITE, __NV_E4M3);
                        (plane ? c.v8 : c.k8)[at * hd + d] = b;
                        __half_raw hr = __nv_cvt_fp8_to_halfraw(b, __NV_E4M3);
                        dst[d] = rbf(__half2float(*(__half *)&hr) * s);
                    }
                } else {
                    for (int d = 0; d < hd; d++) {
                        (plane ? c.v : c.k)[at * hd + d] = __float2bfloat16_rn(row[d]);
                        dst[d] = rbf(row[d]);
                    }
                }
            }
    return c;
}

struct result {
    std::vector<float> opart, ml;
    int64_t zslots;
};
static result run_kernel(const cache &c, const float *q, int64_t pos0, int n, int H, int64_t capacity, int use_dev,
                         int causal, const int32_t *parent) {
    result r;
    const int64_t keys = use_dev ? capacity : pos0 + n;
    r.zslots = (keys + CU_DECODE_CHUNK - 1) / CU_DECODE_CHUNK;
    const size_t rows = (size_t)n * H;
    float *opart = (float *)cu_scratch(NULL, CU_SCR_B, rows * r.zslots * c.hd * 4);
    float *ml = (float *)cu_scratch(NULL, CU_SCR_C, rows * r.zslots * 2 * 4);
    int64_t pd = pos0;
    cu_decode_warp_chunks(NULL, opart, ml, q, c.view(), use_dev ? 0 : pos0, use_dev ? &pd : NULL, n, H, c.Hkv, c.hd,
                          capacity, r.zslots, 1.0f / sqrtf((float)c.hd), causal, parent);
    r.opart.assign(opart, opart + rows * r.zslots * c.hd);
    r.ml.assign(ml, ml + rows * r.zslots * 2);
    return r;
}
// k_attn_combine in double
static std::vector<double> combine(const result &r, int64_t pos0, int n, int H, int hd, int causal) {
    std::vector<double> out((size_t)n * H * hd);
    for (int th = 0; th < n * H; th++) {
        const int64_t qpos = causal ? pos0 + th / H : pos0 + n - 1, zrow = qpos / CU_DECODE_CHUNK + 1;
        double M = -INFINITY, L = 0;
        for (int64_t z = 0; z < zrow; z++) M = fmax(M, r.ml[(th * r.zslots + z) * 2]);
        for (int64_t z = 0; z < zrow; z++)
            L += exp2(r.ml[(th * r.zslots + z) * 2] - M) * r.ml[(th * r.zslots + z) * 2 + 1];
        for (int d = 0; d < hd; d++) {
            double o = 0;
            for (int64_t z = 0; z < zrow; z++)
                o += exp2(r.ml[(th * r.zslots + z) * 2] - M) * r.opart[(th * r.zslots + z) * hd + d];
            out[(size_t)th * hd + d] = o / L;
        }
    }
    return out;
}
static double vs_reference(const cache &c, const std::vector<double> &out, const float *q, int64_t pos0, int n, int H,
                           int causal, const int32_t *parent) {
    const int G = H / c.Hkv, hd = c.hd;
    double num = 0, den = 0;
    for (int t = 0; t < n; t++)
        for (int h = 0; h < H; h++) {
            const int kvh = h / G;
            const int64_t qpos = causal ? pos0 + t : pos0 + n - 1;
            std::vector<double> s;
            std::vector<int64_t> ks;
            for (int64_t k = 0; k <= qpos; k++) {
                if (parent && k >= pos0) { // tree: ancestors and itself
                    int a = t;
                    while (a >= 0 && a != k - pos0) a = parent[a];
                    if (a < 0) continue;
                }
                double dot = 0;
                for (int d = 0; d < hd; d++)
                    dot += (double)rbf(q[((size_t)t * H + h) * hd + d]) * c.kd[(k * c.Hkv + kvh) * hd + d];
                s.push_back(dot / sqrt((double)hd)), ks.push_back(k);
            }
            double mx = -INFINITY, Z = 0;
            for (double x : s) mx = fmax(mx, x);
            for (double &x : s) x = exp(x - mx), Z += x;
            for (int d = 0; d < hd; d++) {
                double ref = 0;
                for (size_t i = 0; i < ks.size(); i++) ref += s[i] * c.vd[(ks[i] * c.Hkv + kvh) * hd + d];
                ref /= Z;
                const double got = out[((size_t)t * H + h) * hd + d];
                if (!std::isfinite(got)) return INFINITY;
                num += (got - ref) * (got - ref), den += ref * ref;
            }
        }
    return sqrt(num / den);
}
// the partials of row (t, h) over its chunks, as bytes: what bitwise invariance compares
static std::string row_bits(const result &r, int64_t qpos, int th, int hd) {
    const int64_t zrow = qpos / CU_DECODE_CHUNK + 1;
    std::string s;
    for (int64_t z = 0; z < zrow; z++) {
        s.append((const char *)&r.opart[(th * r.zslots + z) * hd], (size_t)hd * 4);
        s.append((const char *)&r.ml[(th * r.zslots + z) * 2], 8);
    }
    return s;
}

static int bad = 0, checks = 0;
static void expect(bool ok, const char *what) {
    checks++;
    if (!ok) bad++, printf("  BAD: %s\n", what);
}

int main(int argc, char **argv) {
    const int quick = argc > 1 && !strcmp(argv[1], "quick");
    // e4, hd, G, Hkv, n, pos0, paged
    const int cfg[][7] = {
        {0, 256, 6, 1, 1, 1100, 0}, {1, 256, 6, 1, 1, 1100, 1}, {0, 256, 6, 1, 8, 600, 1},
        {1, 256, 3, 2, 5, 500, 0},  {0, 128, 6, 1, 16, 520, 0}, {1, 128, 1, 2, 16, 300, 1},
        {0, 64, 6, 1, 5, 700, 0},   {1, 64, 8, 1, 16, 0, 1},    {0, 64, 1, 2, 1, 0, 0},
    };
    const int ncfg = quick ? 4 : (int)(sizeof cfg / sizeof cfg[0]);
    for (int ci = 0; ci < ncfg; ci++) {
        const int e4 = cfg[ci][0], hd = cfg[ci][1], G = cfg[ci][2], Hkv = cfg[ci][3], n = cfg[ci][4],
                  paged = cfg[ci][6];
        const int64_t pos0 = cfg[ci][5], tot = pos0 + n;
        const int H = G * Hkv;
        cache c = make_cache(e4, Hkv, hd, tot, paged);
        std::vector<float> q((size_t)n * H * hd);
        for (float &x : q) x = urand(-2, 2);
        char what[200];
        for (int causal = 1; causal >= 0; causal--) {
            const result r = run_kernel(c, q.data(), pos0, n, H, tot, 0, causal, NULL);
            const double e = vs_reference(c, combine(r, pos0, n, H, hd, causal), q.data(), pos0, n, H, causal, NULL);
            snprintf(what, sizeof what, "kv=%s hd=%d G=%d Hkv=%d n=%d pos0=%lld%s%s: rel-L2 %.3g", e4 ? "e4m3" : "bf16",
                     hd, G, Hkv, n, (long long)pos0, causal ? "" : " noncausal", paged ? " paged" : "", e);
            printf("%s\n", what);
            fflush(stdout);
            expect(e <= 5e-3, what);
            if (!causal) continue;
            // pos_dev with ~700 more slots: the same bits
            const result rd = run_kernel(c, q.data(), pos0, n, H, tot + 700, 1, 1, NULL); // grid from the capacity
            int same_dev = 1;
            for (int th = 0; th < n * H; th++)
                same_dev &= row_bits(rd, pos0 + th / H, th, hd) == row_bits(r, pos0 + th / H, th, hd);
            expect(same_dev, "pos_dev call with a larger capacity differs");
            if (paged) { // paged == contiguous
                cache cf = c;
                cf.paged = 0;
                // the contiguous copy of the same rows
                cu_kv pv = c.view();
                const size_t rowb = (size_t)Hkv * hd;
                for (int64_t p = 0; p < tot; p++) {
                    const int64_t s = cu_kv_slot(pv, p);
                    for (size_t i = 0; i < rowb; i++) {
                        cf.k[p * rowb + i] = c.k[s * rowb + i], cf.v[p * rowb + i] = c.v[s * rowb + i];
                        cf.k8[p * rowb + i] = c.k8[s * rowb + i], cf.v8[p * rowb + i] = c.v8[s * rowb + i];
                    }
                    for (int h = 0; h < Hkv; h++)
                        cf.ks[p * Hkv + h] = c.ks[s * Hkv + h], cf.vs[p * Hkv + h] = c.vs[s * Hkv + h];
                }
                const result rf = run_kernel(cf, q.data(), pos0, n, H, tot, 0, 1, NULL);
                expect(!memcmp(rf.opart.data(), r.opart.data(), r.opart.size() * 4), "paged differs from contiguous");
            }
            // rows == 1-token calls (bitwise), for the first and last token
            for (int t : {0, n - 1}) {
                const result r1 = run_kernel(c, q.data() + (size_t)t * H * hd, pos0 + t, 1, H, tot, 0, 1, NULL);
                int same = 1;
                for (int h = 0; h < H; h++)
                    same &= row_bits(r1, pos0 + t, h, hd) == row_bits(r, pos0 + t, t * H + h, hd);
                snprintf(what, sizeof what, "token %d of the %d-token call == its 1-token call", t, n);
                expect(same, what);
            }
            // a chain-shaped tree (parents t - 1) == the causal call; a branching tree vs the reference
            std::vector<int32_t> chain(n), tree(n);
            for (int t = 0; t < n; t++) chain[t] = t - 1, tree[t] = t == 0 ? -1 : (t % 3 == 0 ? -1 : t / 2);
            const result rc = run_kernel(c, q.data(), pos0, n, H, tot, 0, 1, chain.data());
            expect(!memcmp(rc.opart.data(), r.opart.data(), r.opart.size() * 4) &&
                       !memcmp(rc.ml.data(), r.ml.data(), r.ml.size() * 4),
                   "chain-shaped tree differs from causal");
            const result rt = run_kernel(c, q.data(), pos0, n, H, tot, 0, 1, tree.data());
            const double et = vs_reference(c, combine(rt, pos0, n, H, hd, 1), q.data(), pos0, n, H, 1, tree.data());
            snprintf(what, sizeof what, "  tree: rel-L2 %.3g", et);
            printf("%s\n", what);
            expect(et <= 5e-3, what);
        }
    }
    printf("%d checks, %d bad\n", checks, bad);
    return bad != 0;
}
