// Runs src/cuda/attention_wgmma.cu (route attn_kernel=wgmma) on the host with tools/gdn_emu's runtime (one
// std::thread per CUDA thread, cp.async queued until its wait) and an independent model of Hopper's warpgroup MMA
// written from the PTX ISA text (section "Asynchronous Warpgroup Level Matrix Multiply-Accumulate"):
//  - wgmma.mma_async .m64nNk16 .f32.bf16.bf16, issued by all 128 threads of a warpgroup (the descriptors must be
//    the same in every thread), queued at issue and executed at wgmma.wait_group (oldest commit groups first), so
//    reading an accumulator before the wait, or refilling a stage before it, gives a wrong answer here too;
//  - the descriptor decoded field by field (start address, leading / stride byte offsets, base offset, swizzle
//    mode; only 128-byte swizzle with base offset 0 is modelled, anything else aborts), the operand addresses from
//    the canonical layouts (K-major: ((8,m),(T,2k)):((8T,SBO),(1,T)); MN-major: ((T,8,m),(8,k)):((1,T,LBO),(8T,SBO)),
//    T = 8 bf16), then the 128-byte swizzle on the shared-window address (bits 4-6 ^= bits 7-9);
//  - the accumulator layout (warp w of the warpgroup rows 16w..16w+15; register 4t+i: row g + 8(i/2), column
//    8t + 2(lane%4) + i%2, g = lane/4) and the RS A fragment (per warp the mma.m16n8k16 A layout: {row g, k 2c..},
//    {g+8, 2c..}, {g, 8+2c..}, {g+8, 8+2c..});
//  - the instruction strings of src/cuda/wgmma_ptx.cuh read back and checked against what this model assumes
//    (shapes, operand numbering, imm-scale / imm-trans immediates).
// The shared window starts off a 1024-byte boundary (at 0x410) so the kernel's own alignment is exercised.
// Checks: the output against a direct attention in double over the same bf16 Q, K, V (rel-L2 <= 5e-3; P enters
// the PV product as bf16), every output finite; bitwise paged == contiguous and pos_dev == pos0; the shapes the
// kernel declines (head_dim 128, < 64 rows, a cache with neither layout) return 0. The e4m3 cache: raw bytes and
// per-(slot, head) scales, the reference on the dequantised values.
// From the repo root (g++ and the CUDA headers):
//   g++ -std=c++17 -O2 -Isrc -Itools -I/usr/local/cuda/include -Wno-unknown-pragmas tools/wg_emu.cpp -o .dev/wg_emu
//   -lpthread && .dev/wg_emu [quick]        "0 bad" at the end
#include "gdn_emu/emu.h"

#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <string>
#include <tuple>

#include "gdn_emu/emu_rt.h"

// ---- what cuda_common.h gives the kernel file (the same definitions, host side; as tools/dw_emu.cpp) ----
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
static inline bool __all_sync(unsigned, bool p) {
    uint32_t mine = p, all[32][16];
    emu_warp_exchange(&mine, 1, all);
    for (int l = 0; l < 32; l++)
        if (!all[l][0]) return false;
    return true;
}

// ---- wgmma_ptx.cuh on the host ----
#define FD_CUDA_WGMMA_PTX_CUH
static const uint32_t EMU_WINDOW = 0x410; // the shared-window address of sm4[0]: off the 1024-byte grid on purpose
static inline uint32_t wg_smem(const void *p) {
    const uintptr_t a = (uintptr_t)p, b = (uintptr_t)sm4;
    if (a < b || a - b > sizeof(float4) * 65536) {
        fprintf(stderr, "wg_smem: %p is not shared memory\n", p);
        abort();
    }
    return (uint32_t)(a - b) + EMU_WINDOW;
}
static inline void wg_cp16(void *dst, const void *src, bool ok) {
    cu_cp_async16(dst, src, ok);
}
static inline void wg_cp4(void *dst, const void *src, bool ok) {
    emu_cp_async4(dst, src, ok);
}
static inline void wg_commit() {
    cu_cp_async_commit();
}
static inline void wg_wait_all() {
    emu_cp_wait(0);
}
static inline void wg_fence_proxy() {}
static inline void wgmma_fence() {}
template <typename T, int N> static inline void wg_fence_regs(T (&)[N]) {}
static inline float wg_exp2(float x) {
    return exp2f(x);
}

static inline float bf_of(uint16_t h) {
    uint32_t f = (uint32_t)h << 16;
    float x;
    memcpy(&x, &f, 4);
    return x;
}
// one bf16 of shared memory at a shared-window address
static inline float smem_bf(uint32_t addr) {
    if (addr < EMU_WINDOW || addr + 2 > EMU_WINDOW + emu_smem_bytes || (addr & 1)) {
        fprintf(stderr, "wgmma operand address 0x%x outside the block's shared memory\n", addr);
        abort();
    }
    uint16_t h;
    memcpy(&h, (const char *)sm4 + (addr - EMU_WINDOW), 2);
    return bf_of(h);
}
struct desc_t {
    uint32_t start, lbo, sbo;
};
static desc_t decode(uint64_t d) {
    desc_t r;
    r.start = (uint32_t)(d & 0x3fff) << 4;
    r.lbo = (uint32_t)((d >> 16) & 0x3fff) << 4;
    r.sbo = (uint32_t)((d >> 32) & 0x3fff) << 4;
    const int base_offset = (int)((d >> 49) & 7), swz = (int)(d >> 62);
    const bool reserved = ((d >> 14) & 3) || ((d >> 30) & 3) || ((d >> 46) & 7) || ((d >> 52) & 0x3ff);
    if (swz != 1 || base_offset != 0 || reserved) {
        fprintf(stderr, "descriptor %016llx: only 128-byte swizzle, base offset 0, reserved bits 0 are modelled\n",
                (unsigned long long)d);
        abort();
    }
    return r;
}
static inline uint32_t swizzle128(uint32_t addr) {
    return addr ^ (((addr >> 7) & 7) << 4);
}
// element (row m, k) of a K-major operand (A: M x K; B: N x K), k < 16
static inline float kmajor(const desc_t &d, int m, int k) {
    return smem_bf(swizzle128(d.start + (uint32_t)(m / 8) * d.sbo + (uint32_t)(m % 8) * 128u + (uint32_t)k * 2u));
}
// element (k, n) of an MN-major B (K x N, N contiguous), k < 16
static inline float mnmajor(const desc_t &d, int k, int n) {
    return smem_bf(swizzle128(d.start + (uint32_t)(n / 64) * d.lbo + (uint32_t)(n % 64) * 2u + (uint32_t)(k % 8) * 128u +
                              (uint32_t)(k / 8) * d.sbo));
}

struct wg_op {
    float *d;
    int N, trans_b, a_regs, scale_d;
    uint64_t da, db;
    std::vector<float> A; // a_regs: the warpgroup's 64 x 16 A, rebuilt at issue from every thread's registers
};
static thread_local std::vector<wg_op> wg_open;
static thread_local std::vector<std::vector<wg_op>> wg_groups;
static void wg_execute(const wg_op &op) {
    const int t = threadIdx.x & 127, w = t >> 5, lane = t & 31, g = lane >> 2, c = lane & 3;
    const desc_t db = decode(op.db);
    desc_t da = {};
    if (!op.a_regs) da = decode(op.da);
    double A[2][16], B[256][16]; // this thread's two rows of A, all N columns of B
    for (int h = 0; h < 2; h++)
        for (int k = 0; k < 16; k++) {
            const int row = 16 * w + g + 8 * h;
            A[h][k] = op.a_regs ? op.A[row * 16 + k] : kmajor(da, row, k);
        }
    for (int n = 0; n < op.N; n++)
        if ((n & 7) / 2 == c)
            for (int k = 0; k < 16; k++) B[n][k] = op.trans_b ? mnmajor(db, k, n) : kmajor(db, n, k);
    for (int i = 0; i < op.N / 2; i++) {
        const int row_h = (i & 3) >> 1, col = 8 * (i >> 2) + 2 * c + (i & 1);
        double s = 0;
        for (int k = 0; k < 16; k++) s += A[row_h][k] * B[col][k];
        op.d[i] = (float)((op.scale_d ? (double)op.d[i] : 0.0) + s);
    }
}
// every thread of the warpgroup issues the same instruction with the same descriptors; the A registers of all 128
// threads rebuilt into the 64 x 16 matrix
static void wg_issue(float *d, int N, int trans_b, uint64_t da, uint64_t db, int scale_d, const uint32_t *a) {
    uint32_t mine[9] = {(uint32_t)da, (uint32_t)(da >> 32), (uint32_t)db, (uint32_t)(db >> 32), (uint32_t)scale_d,
                        0, 0, 0, 0};
    if (a) memcpy(mine + 5, a, 16);
    static thread_local uint32_t all[128][16];
    emu_wg_exchange(mine, 9, all);
    for (int t = 0; t < 128; t++)
        if (memcmp(all[t], all[0], 20)) {
            fprintf(stderr, "wgmma: descriptors / scale-d differ across the warpgroup\n");
            abort();
        }
    wg_op op;
    op.d = d, op.N = N, op.trans_b = trans_b, op.a_regs = a != NULL, op.scale_d = scale_d, op.da = da, op.db = db;
    if (a) {
        op.A.assign(64 * 16, 0.f);
        for (int t = 0; t < 128; t++) {
            const int w = t >> 5, g = (t & 31) >> 2, c = t & 3;
            for (int h = 0; h < 2; h++) {
                op.A[(16 * w + g) * 16 + 2 * c + h] = bf_of((uint16_t)(all[t][5] >> (16 * h)));
                op.A[(16 * w + g + 8) * 16 + 2 * c + h] = bf_of((uint16_t)(all[t][6] >> (16 * h)));
                op.A[(16 * w + g) * 16 + 8 + 2 * c + h] = bf_of((uint16_t)(all[t][7] >> (16 * h)));
                op.A[(16 * w + g + 8) * 16 + 8 + 2 * c + h] = bf_of((uint16_t)(all[t][8] >> (16 * h)));
            }
        }
    }
    wg_open.push_back(op);
}
static inline void wgmma_ss_m64n64(float (&d)[32], uint64_t da, uint64_t db, int scale_d) {
    wg_issue(d, 64, 0, da, db, scale_d, NULL);
}
static inline void wgmma_rs_m64n256_mn(float (&d)[128], const uint32_t a[4], uint64_t db) {
    wg_issue(d, 256, 1, 0, db, 1, a);
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

#include "cuda/attention_wgmma.cu"

// ---------------------------------------------------------------------------------------------------------
static int bad = 0, checks = 0;
static void expect(bool ok, const char *what) {
    checks++;
    if (!ok) bad++, printf("  BAD: %s\n", what);
}

// The PTX strings of wgmma_ptx.cuh, whitespace and quotes dropped, must say what the model above executes.
static void check_ptx_text() {
    char *src = NULL;
    size_t len = 0;
    FILE *f = fopen("src/cuda/wgmma_ptx.cuh", "rb");
    if (f) {
        fseek(f, 0, SEEK_END), len = (size_t)ftell(f), fseek(f, 0, SEEK_SET);
        src = (char *)calloc(len + 1, 1);
        len = fread(src, 1, len, f);
        fclose(f);
    }
    expect(src != NULL, "src/cuda/wgmma_ptx.cuh readable (run from the repo root)");
    if (!src) return;
    std::string s;
    for (size_t i = 0; i < len; i++)
        if (src[i] != ' ' && src[i] != '\n' && src[i] != '"') s += src[i];
    free(src);
    auto list = [](int a, int b) {
        std::string r;
        for (int i = a; i < b; i++) r += (i > a ? ",%" : "%") + std::to_string(i);
        return r;
    };
    const std::string ss = "{.reg.predp;setp.ne.b32p,%34,0;wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16{" +
                           list(0, 32) + "},%32,%33,p,1,1,0,0;}";
    const std::string rs = "{.reg.predp;setp.ne.b32p,%133,0;wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16{" +
                           list(0, 128) + "},{%128,%129,%130,%131},%132,p,1,1,1;}";
    expect(s.find(ss) != std::string::npos, "wgmma_ss_m64n64's PTX: m64n64k16, d %0..31, descs %32 %33, "
                                            "scale-d %34, no negation, no transpose");
    expect(s.find(rs) != std::string::npos, "wgmma_rs_m64n256_mn's PTX: m64n256k16, d %0..127, a %128..131, "
                                            "desc %132, scale-d %133, imm-trans-b 1");
    for (int i = 0; i < 128; i++) {
        const std::string op = "+f(d[" + std::to_string(i) + "])";
        if (s.find(op) == std::string::npos) {
            expect(false, "accumulator operand list");
            break;
        }
    }
    expect(s.find(":l(da),l(db),r(scale_d));") != std::string::npos &&
               s.find(":r(a[0]),r(a[1]),r(a[2]),r(a[3]),l(db),r(1));") != std::string::npos,
           "input operands in the order the strings number them");
}

static uint64_t rng = 88172645463325252ull;
static float urand(float lo, float hi) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return lo + (hi - lo) * (float)((rng >> 11) * (1.0 / 9007199254740992.0));
}
static float rbf(float x) {
    return __bfloat162float(__float2bfloat16_rn(x));
}

struct cache {
    int Hkv, paged, e4;
    std::vector<__nv_bfloat16> k, v;  // bf16 layout
    std::vector<uint8_t> k8, v8;      // e4m3 layout: bytes and one scale per (slot, head) row
    std::vector<float> ks, vs;
    std::vector<int32_t> pages; // page size 64
    cu_kv view() const {
        cu_kv c = {};
        if (e4)
            c.k8 = k8.data(), c.v8 = v8.data(), c.ks = ks.data(), c.vs = vs.data();
        else
            c.k = k.data(), c.v = v.data();
        c.pages = paged ? pages.data() : NULL, c.page_shift = paged ? 6 : 0;
        return c;
    }
    // element d of (slot, head) row r as the kernel must see it
    double kval(int64_t r, int d) const {
        return e4 ? (double)fp8f(k8[r * 256 + d]) * ks[r] : (double)__bfloat162float(k[r * 256 + d]);
    }
    double vval(int64_t r, int d) const {
        return e4 ? (double)fp8f(v8[r * 256 + d]) * vs[r] : (double)__bfloat162float(v[r * 256 + d]);
    }
    static float fp8f(uint8_t b) {
        const __half_raw h = __nv_cvt_fp8_to_halfraw(b, __NV_E4M3);
        return __half2float(__half(h));
    }
};
static cache make_cache(int Hkv, int64_t tot, int paged, int e4 = 0) {
    cache c;
    c.Hkv = Hkv, c.paged = paged, c.e4 = e4;
    const int64_t npages = (tot + 63) / 64;
    for (int i = 0; i < npages; i++) c.pages.push_back(i);
    for (int i = (int)npages - 1; i > 0; i--) std::swap(c.pages[i], c.pages[(int)(urand(0, 1) * (i + 1)) % (i + 1)]);
    const size_t rows = (size_t)npages * 64 * Hkv, nel = rows * 256;
    c.k.resize(nel), c.v.resize(nel);
    for (size_t i = 0; i < nel; i++) c.k[i] = __float2bfloat16_rn(urand(-2, 2)), c.v[i] = __float2bfloat16_rn(urand(-1, 1));
    if (e4) { // per-row amax / 448 scales (rows of different magnitude), bytes saturated and rounded to nearest
        c.k8.resize(nel), c.v8.resize(nel), c.ks.resize(rows), c.vs.resize(rows);
        for (size_t r = 0; r < rows; r++) {
            const float mag = urand(0.25f, 4.0f);
            float ak = 0, av = 0;
            for (int d = 0; d < 256; d++)
                ak = fmaxf(ak, fabsf(__bfloat162float(c.k[r * 256 + d]) * mag)),
                av = fmaxf(av, fabsf(__bfloat162float(c.v[r * 256 + d])));
            c.ks[r] = ak / 448.f, c.vs[r] = av / 448.f;
            for (int d = 0; d < 256; d++) {
                c.k8[r * 256 + d] = __nv_cvt_float_to_fp8(__bfloat162float(c.k[r * 256 + d]) * mag / c.ks[r],
                                                          __NV_SATFINITE, __NV_E4M3);
                c.v8[r * 256 + d] = __nv_cvt_float_to_fp8(__bfloat162float(c.v[r * 256 + d]) / c.vs[r],
                                                          __NV_SATFINITE, __NV_E4M3);
            }
        }
    }
    return c;
}
// the same positions laid out contiguously
static cache flatten(const cache &c, int64_t tot) {
    cache f = c;
    f.paged = 0;
    const cu_kv pv = c.view();
    const size_t row = (size_t)c.Hkv * 256;
    for (int64_t p = 0; p < tot; p++) {
        const int64_t s = cu_kv_slot(pv, p);
        for (size_t i = 0; i < row; i++) f.k[p * row + i] = c.k[s * row + i], f.v[p * row + i] = c.v[s * row + i];
        if (c.e4) {
            for (size_t i = 0; i < row; i++) f.k8[p * row + i] = c.k8[s * row + i], f.v8[p * row + i] = c.v8[s * row + i];
            for (int h = 0; h < c.Hkv; h++)
                f.ks[p * c.Hkv + h] = c.ks[s * c.Hkv + h], f.vs[p * c.Hkv + h] = c.vs[s * c.Hkv + h];
        }
    }
    return f;
}
static std::vector<float> run(const cache &c, const std::vector<float> &q, int64_t pos0, int n, int H, int causal,
                              int use_dev) {
    const size_t on = (size_t)n * H * 256;
    float *out = (float *)cu_scratch(NULL, CU_SCR_A, on * 4); // NaN-filled: rows never written stay NaN
    int64_t pd = pos0;
    const int ran = cu_attention_wgmma(NULL, out, q.data(), c.view(), use_dev ? 0 : pos0, use_dev ? &pd : NULL, n, H,
                                       c.Hkv, 256, 1.0f / 16.0f, causal);
    expect(ran == 1, "the kernel takes head_dim 256, bf16 or e4m3, >= 64 rows");
    return std::vector<float>(out, out + on);
}
static double vs_reference(const cache &c, const std::vector<float> &out, const std::vector<float> &q, int64_t pos0,
                           int n, int H, int causal) {
    const int Hkv = c.Hkv, G = H / Hkv;
    const cu_kv kv = c.view();
    double num = 0, den = 0;
    for (int t = 0; t < n; t++)
        for (int h = 0; h < H; h++) {
            const int kvh = h / G;
            const int64_t last = causal ? pos0 + t : pos0 + n - 1;
            std::vector<double> s(last + 1);
            double mx = -INFINITY;
            for (int64_t k = 0; k <= last; k++) {
                const int64_t kr = cu_kv_slot(kv, k) * Hkv + kvh;
                double dot = 0;
                for (int d = 0; d < 256; d++) dot += (double)rbf(q[((size_t)t * H + h) * 256 + d]) * c.kval(kr, d);
                s[k] = dot / 16.0, mx = fmax(mx, s[k]);
            }
            double Z = 0;
            for (double &x : s) x = exp(x - mx), Z += x;
            for (int d = 0; d < 256; d++) {
                double ref = 0;
                for (int64_t k = 0; k <= last; k++)
                    ref += s[k] * c.vval(cu_kv_slot(kv, k) * Hkv + kvh, d);
                ref /= Z;
                const double got = out[((size_t)t * H + h) * 256 + d];
                if (!std::isfinite(got)) return INFINITY;
                num += (got - ref) * (got - ref), den += ref * ref;
            }
        }
    return sqrt(num / den);
}

int main(int argc, char **argv) {
    const int quick = argc > 1 && !strcmp(argv[1], "quick");
    check_ptx_text();
    // the shapes the kernel declines run nothing (the mma kernel takes them)
    {
        cache c = make_cache(1, 64, 0);
        cu_kv none = c.view();
        none.k = NULL, none.v = NULL; // and no e4m3 planes either
        float out[4];
        expect(!cu_attention_wgmma(NULL, out, NULL, c.view(), 0, NULL, 64, 2, 1, 128, 0.1f, 1), "head_dim 128 declined");
        expect(!cu_attention_wgmma(NULL, out, NULL, none, 0, NULL, 64, 2, 1, 256, 0.1f, 1), "no cache declined");
        expect(!cu_attention_wgmma(NULL, out, NULL, c.view(), 0, NULL, 31, 2, 1, 256, 0.1f, 1), "62 rows declined");
    }
    // G, Hkv, n, pos0, causal, paged: one block of exactly 128 rows; blocks across the causal diagonal; a second
    // warpgroup partly (rows 64..79) or barely (2 rows) live; pos0 off the key grid; tiles straddling shuffled pages;
    // many tiles; non-causal; GQA groups 1, 2, 3, 6; the e4m3 cache (last column) on the same edges
    const int cfg[][7] = {
        {2, 1, 64, 0, 1, 0, 0},   {2, 2, 100, 37, 1, 1, 1}, {2, 1, 40, 0, 1, 1, 0},  {3, 1, 22, 70, 1, 0, 1},
        {6, 1, 50, 130, 1, 1, 0}, {1, 2, 200, 0, 0, 0, 0},  {2, 1, 72, 33, 0, 1, 1}, {2, 1, 300, 500, 1, 1, 0},
        {6, 1, 50, 130, 1, 1, 1}, {2, 1, 300, 500, 1, 1, 1},
    };
    const int ncfg = quick ? 4 : (int)(sizeof cfg / sizeof cfg[0]);
    for (int ci = 0; ci < ncfg; ci++) {
        const int G = cfg[ci][0], Hkv = cfg[ci][1], n = cfg[ci][2], causal = cfg[ci][4], paged = cfg[ci][5];
        const int e4 = cfg[ci][6];
        const int64_t pos0 = cfg[ci][3], tot = pos0 + n;
        const int H = G * Hkv;
        cache c = make_cache(Hkv, tot, paged, e4);
        std::vector<float> q((size_t)n * H * 256);
        for (float &x : q) x = urand(-2, 2);
        const std::vector<float> out = run(c, q, pos0, n, H, causal, 0);
        const double e = vs_reference(c, out, q, pos0, n, H, causal);
        char what[200];
        snprintf(what, sizeof what, "G=%d Hkv=%d n=%d pos0=%lld%s%s%s: rel-L2 %.3g", G, Hkv, n, (long long)pos0,
                 causal ? "" : " noncausal", paged ? " paged" : "", e4 ? " e4m3" : "", e);
        printf("%s\n", what);
        fflush(stdout);
        expect(e <= 5e-3, what);
        if (paged) {
            const std::vector<float> of = run(flatten(c, tot), q, pos0, n, H, causal, 0);
            expect(!memcmp(of.data(), out.data(), out.size() * 4), "paged differs from contiguous");
        }
        if (causal && ci % 2 == 0) {
            const std::vector<float> od = run(c, q, pos0, n, H, causal, 1);
            expect(!memcmp(od.data(), out.data(), out.size() * 4), "pos_dev differs from pos0");
        }
    }
    printf("%d checks, %d bad\n", checks, bad);
    return bad != 0;
}
