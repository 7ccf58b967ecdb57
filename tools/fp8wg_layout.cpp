// Host check of the one layout trick gemm_fp8=wgmma's design rests on (docs/perf-notes.md, session 14): the
// weights are the RS A operand of wgmma.m64n16k32 .e4m3 loaded straight from their row-major bytes (lane c of a
// quad takes bytes 16c.. and 64 + 16c.. of row g and of row g+8 of a 128-k block), which permutes k inside the block;
// the quantized activations are stored into the K-major B tile with the same permutation, so the dot is unchanged.
// The wgmma model here is written from the PTX ISA text, independently of the design's index maths:
//  - RS A fragment for 8-bit types, per warp w (rows 16w..16w+15), lane (g = lane/4, c = lane%4), element i of 16:
//    register i/4 = {row g, k 4c..}, {row g+8, k 4c..}, {row g, k 16+4c..}, {row g+8, k 16+4c..}, byte i%4;
//  - B from a matrix descriptor, K-major, no swizzle: core matrices of 8 rows x 16 bytes, element (n, k) at
//    start + (n%8)*16 + (n/8)*SBO + (k%16) + (k/16)*LBO bytes (LBO / SBO as encoded, >> 4);
//  - e4m3 (fn) decoded from its bits; products and sums in double (exact for 128 e4m3 x e4m3 products).
// Checks: D of one 128-k block (4 wgmma steps) == the plain dot of the unpermuted rows, bitwise, for random codes
// (NaN codes excluded) over many trials; the same with the permutation dropped on one side must fail (the check
// can fail). Build and run from the repo root:
//   g++ -std=c++17 -O2 tools/fp8wg_layout.cpp -o .dev/fp8wg_layout && .dev/fp8wg_layout      "0 bad" at the end
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>

static double e4m3_value(uint8_t b) {
    const int sign = b >> 7, exp = (b >> 3) & 15, man = b & 7;
    const double v = exp == 0 ? std::ldexp(man / 8.0, -6) : std::ldexp(1.0 + man / 8.0, exp - 7);
    return sign ? -v : v;
}

// ---- the design's side: which bytes a lane loads, where the quantizer stores x_q ----
// Lane c's 32 bytes of a row's 128-k block are two 16-byte loads, physical k 16c.. (words 0..3) and 64 + 16c..
// (words 4..7), so a warp's load covers whole 32-byte sectors of its 8 rows; word w is fragment register
// (w % 2 ? k 16+4c.. : k 4c..) of k32 step w / 2 (row g: regs 0 and 2; row g+8: 1 and 3).
static int design_word_k(int c, int w) { // physical k of lane c's word w
    return w < 4 ? 16 * c + 4 * w : 64 + 16 * c + 4 * (w - 4);
}
static int design_phys_k(int step, int logical_k) { // logical k (0..31) of step j -> physical k of the block
    const int hi = logical_k >= 16, q = logical_k % 16;
    return design_word_k(q / 4, 2 * step + hi) + q % 4;
}

struct Fragment { uint8_t a[16]; };  // one lane's 4 registers of one k32 step, byte i = element i

static void design_load_a(const uint8_t *W, int ld, int warp, int lane, int step, Fragment *f, int permuted) {
    const int g = lane / 4, c = lane % 4;
    for (int half = 0; half < 2; half++) { // row g, row g + 8
        const uint8_t *row = W + (size_t)(16 * warp + g + 8 * half) * ld;
        for (int i = 0; i < 8; i++) {
            // permuted: the lane's own two 16-byte runs; not: the ISA's logical positions (a broken variant)
            const int k = permuted ? design_word_k(c, 2 * step + i / 4) + i % 4
                                   : 32 * step + (i < 4 ? 4 * c + i : 16 + 4 * c + i - 4);
            const int reg = half + (i < 4 ? 0 : 2);
            f->a[4 * reg + i % 4] = row[k];
        }
    }
}

// The B tile of one 128-k block: 16 tokens, core matrix (k16 chunk q, token half h) at q * 256 + h * 128.
static const int LBO = 256, SBO = 128;
static void design_store_b(const uint8_t *X, int ld, uint8_t *smem, int permuted) {
    for (int t = 0; t < 16; t++)
        for (int step = 0; step < 4; step++)
            for (int kl = 0; kl < 32; kl++) {
                const int kb = 32 * step + kl; // the B tile's own k
                const int src = permuted ? design_phys_k(step, kl) : kb;
                smem[(kb / 16) * LBO + (t / 8) * SBO + (t % 8) * 16 + kb % 16] = X[(size_t)t * ld + src];
            }
}

// ---- the independent model of wgmma.m64n16k32.f32.e4m3.e4m3 (RS) ----
static uint64_t make_desc(uint32_t start, uint32_t lbo, uint32_t sbo) {
    return (uint64_t)((start >> 4) & 0x3fff) | (uint64_t)((lbo >> 4) & 0x3fff) << 16 |
           (uint64_t)((sbo >> 4) & 0x3fff) << 32; // base offset 0, swizzle mode 0 (none)
}
static void model_wgmma(double D[64][16], const Fragment frag[4][32], const uint8_t *smem, uint64_t desc) {
    const uint32_t start = (uint32_t)(desc & 0x3fff) << 4, lbo = (uint32_t)((desc >> 16) & 0x3fff) << 4;
    const uint32_t sbo = (uint32_t)((desc >> 32) & 0x3fff) << 4;
    if ((desc >> 62) != 0) { std::fprintf(stderr, "model: only swizzle none\n"); std::exit(2); }
    double A[64][32], B[16][32];
    for (int w = 0; w < 4; w++)
        for (int lane = 0; lane < 32; lane++)
            for (int i = 0; i < 16; i++) {
                const int reg = i / 4, g = lane / 4, c = lane % 4;
                const int row = 16 * w + g + 8 * (reg & 1), k = 16 * (reg >> 1) + 4 * c + i % 4;
                A[row][k] = e4m3_value(frag[w][lane].a[i]);
            }
    for (int n = 0; n < 16; n++)
        for (int k = 0; k < 32; k++)
            B[n][k] = e4m3_value(smem[start + (n % 8) * 16 + (n / 8) * sbo + k % 16 + (k / 16) * lbo]);
    for (int m = 0; m < 64; m++)
        for (int n = 0; n < 16; n++)
            for (int k = 0; k < 32; k++) D[m][n] += A[m][k] * B[n][k];
}

static uint8_t random_code(std::mt19937 &rng) {
    for (;;) { const uint8_t b = (uint8_t)rng(); if ((b & 0x7f) != 0x7f) return b; }
}

// One trial: returns the number of output elements that differ from the plain dot.
static int trial(std::mt19937 &rng, int a_perm, int b_perm) {
    static uint8_t W[64 * 128], X[16 * 128], smem[8 * 256];
    for (auto &b : W) b = random_code(rng);
    for (auto &b : X) b = random_code(rng);
    std::memset(smem, 0, sizeof smem);
    design_store_b(X, 128, smem, b_perm);
    double D[64][16] = {};
    for (int step = 0; step < 4; step++) {
        Fragment frag[4][32];
        for (int w = 0; w < 4; w++)
            for (int lane = 0; lane < 32; lane++) design_load_a(W, 128, w, lane, step, &frag[w][lane], a_perm);
        model_wgmma(D, frag, smem, make_desc(512 * step, LBO, SBO));
    }
    int bad = 0;
    for (int m = 0; m < 64; m++)
        for (int n = 0; n < 16; n++) {
            double ref = 0;
            for (int k = 0; k < 128; k++) ref += e4m3_value(W[m * 128 + k]) * e4m3_value(X[n * 128 + k]);
            bad += D[m][n] != ref;
        }
    return bad;
}

int main() {
    std::mt19937 rng(14);
    int bad = 0, checks = 0;
    for (int t = 0; t < 200; t++, checks++) bad += trial(rng, 1, 1) != 0;
    for (int t = 0; t < 50; t++, checks++) bad += trial(rng, 0, 0) != 0; // the ISA's logical order on both sides
    // broken on purpose: the permutation on one side only must be caught
    int caught = 0;
    for (int t = 0; t < 20; t++) caught += trial(rng, 1, 0) != 0 && trial(rng, 0, 1) != 0;
    checks++;
    if (caught != 20) { std::printf("FAIL: a one-sided permutation went unnoticed (%d/20)\n", caught); bad++; }
    std::printf("fp8wg_layout: %d checks, %d bad\n", checks, bad);
    return bad != 0;
}
