// Runs src/cuda/gdn_chunk_bf16.cu's kernels on the host (emu.h) and compares them with (a) a plain double model
// of the same algorithm with bf16 rounding at the same points and (b) the fp64 recurrence: how the kernels were
// checked without a GPU (docs/perf-notes.md, session 8). From the repo root (needs only g++ and the CUDA headers):
//   g++ -std=c++17 -O2 -Isrc -I/usr/local/cuda/include -Wno-unknown-pragmas tools/gdn_emu/emu.cpp -o .dev/gdn_emu
//   -lpthread .dev/gdn_emu [quick]       16 shapes (x 2 cp.async modes, plus a 4200-token call unless quick); "0 bad"
//   at the end (each shape also runs with 32-column state_out blocks, whose output and state must be the same bits)
//   .dev/gdn_emu peer IN OUT   peer_gdn_chunk_io's file contract (tests_cuda/bench_cuda_gdn.c), for peer_flow.py
// One std::thread per CUDA thread: a full run takes a few minutes of both cores.
#include "emu.h"

#include <string>
#include <tuple>

#include "emu_rt.h"

#include "cuda/gdn_chunk_bf16.cu"

// ---------------------------------------------------------------------------------------------------------
static uint64_t rng = 88172645463325252ull;
static float urand(float lo, float hi) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return lo + (hi - lo) * (float)((rng >> 11) * (1.0 / 9007199254740992.0));
}
static double rb(double x) {
    return (double)__bfloat162float(__float2bfloat16_rn((float)x));
}

// fp64 recurrence (the definition) or the chunk model with bf16 rounding where the kernels round (bf = 1)
static void reference(double *o, double *S, const float *qkv, const float *b, const float *a, const float *A_log,
                      const float *dt_bias, int n, int Hk, int Hv, int dk, int dv, int bf) {
    const int cq = 2 * Hk * dk + Hv * dv, r = Hv / Hk, C = 64;
    std::vector<double> q((size_t)n * dk), k((size_t)n * dk), v((size_t)n * dv), be(n), gg(n);
    for (int h = 0; h < Hv; h++) {
        double *Sh = S + (size_t)h * dk * dv;
        for (int t = 0; t < n; t++) {
            const float *row = qkv + (size_t)t * cq;
            const float *qs = row + (h / r) * dk, *ks = row + Hk * dk + (h / r) * dk, *vs = row + 2 * Hk * dk + h * dv;
            double nq = 0, nk = 0;
            for (int i = 0; i < dk; i++) nq += (double)qs[i] * qs[i], nk += (double)ks[i] * ks[i];
            for (int i = 0; i < dk; i++) {
                q[(size_t)t * dk + i] = qs[i] / sqrt(nq + 1e-6) / sqrt((double)dk);
                k[(size_t)t * dk + i] = ks[i] / sqrt(nk + 1e-6);
                if (bf)
                    q[(size_t)t * dk + i] = rb(q[(size_t)t * dk + i]),
                                       k[(size_t)t * dk + i] = rb(k[(size_t)t * dk + i]);
            }
            for (int j = 0; j < dv; j++) v[(size_t)t * dv + j] = vs[j];
            double x = (double)a[t * Hv + h] + dt_bias[h];
            gg[t] = -exp((double)A_log[h]) * (x > 20 ? x : log1p(exp(x)));
            be[t] = 1 / (1 + exp(-(double)b[t * Hv + h]));
        }
        if (!bf) {
            for (int t = 0; t < n; t++) {
                for (int i = 0; i < dk * dv; i++) Sh[i] *= exp(gg[t]);
                for (int j = 0; j < dv; j++) {
                    double kv = 0;
                    for (int i = 0; i < dk; i++) kv += Sh[i * dv + j] * k[(size_t)t * dk + i];
                    double u = be[t] * (v[(size_t)t * dv + j] - kv);
                    for (int i = 0; i < dk; i++) Sh[i * dv + j] += k[(size_t)t * dk + i] * u;
                }
                for (int j = 0; j < dv; j++) {
                    double s = 0;
                    for (int i = 0; i < dk; i++) s += Sh[i * dv + j] * q[(size_t)t * dk + i];
                    o[((size_t)t * Hv + h) * dv + j] = s;
                }
            }
            continue;
        }
        for (int t0 = 0; t0 < n; t0 += C) {
            const int L = min(C, n - t0);
            std::vector<double> gam(L), T((size_t)L * L, 0), A((size_t)L * L, 0), U((size_t)L * dv), W((size_t)L * dk);
            std::vector<double> P((size_t)L * L, 0), Sb((size_t)dk * dv), Vn((size_t)L * dv);
            double s = 0;
            for (int i = 0; i < L; i++) s += gg[t0 + i], gam[i] = s;
            auto dot = [&](const double *x, const double *y) {
                double z = 0;
                for (int i = 0; i < dk; i++) z += x[i] * y[i];
                return z;
            };
            for (int i = 0; i < L; i++)
                for (int j = 0; j <= i; j++) {
                    const double dec = exp(gam[i] - gam[j]);
                    if (j < i)
                        A[i * L + j] = be[t0 + i] * dot(&k[(size_t)(t0 + i) * dk], &k[(size_t)(t0 + j) * dk]) * dec;
                    P[i * L + j] = rb(dot(&q[(size_t)(t0 + i) * dk], &k[(size_t)(t0 + j) * dk]) * dec);
                }
            for (int j = 0; j < L; j++) // T = (I + A)^-1 by forward substitution, column j
                for (int i = 0; i < L; i++) {
                    double x = i == j ? 1 : 0;
                    for (int m = 0; m < i; m++) x -= A[i * L + m] * T[m * L + j];
                    T[i * L + j] = x;
                }
            for (auto &x : T) x = rb(x);
            for (int i = 0; i < L; i++) {
                for (int c = 0; c < dv; c++) {
                    double z = 0;
                    for (int j = 0; j <= i; j++) z += T[i * L + j] * rb(be[t0 + j] * v[(size_t)(t0 + j) * dv + c]);
                    U[(size_t)i * dv + c] = rb(z);
                }
                for (int c = 0; c < dk; c++) {
                    double z = 0;
                    for (int j = 0; j <= i; j++)
                        z += T[i * L + j] * rb(k[(size_t)(t0 + j) * dk + c] * be[t0 + j] * exp(gam[j]));
                    W[(size_t)i * dk + c] = rb(z);
                }
            }
            for (int i = 0; i < dk * dv; i++) Sb[i] = rb(Sh[i]);
            for (int i = 0; i < L; i++)
                for (int c = 0; c < dv; c++) {
                    double ws = 0, qs = 0;
                    for (int m = 0; m < dk; m++)
                        ws += W[(size_t)i * dk + m] * Sb[(size_t)m * dv + c],
                            qs += q[(size_t)(t0 + i) * dk + m] * Sb[(size_t)m * dv + c];
                    Vn[(size_t)i * dv + c] = U[(size_t)i * dv + c] - ws;
                    o[((size_t)(t0 + i) * Hv + h) * dv + c] = exp(gam[i]) * qs;
                }
            for (int i = 0; i < L; i++)
                for (int c = 0; c < dv; c++) {
                    double z = 0;
                    for (int j = 0; j <= i; j++) z += P[i * L + j] * rb(Vn[(size_t)j * dv + c]);
                    o[((size_t)(t0 + i) * Hv + h) * dv + c] += z;
                }
            const double gl = gam[L - 1];
            for (int i = 0; i < dk * dv; i++) Sh[i] *= exp(gl);
            for (int j = 0; j < L; j++)
                for (int c = 0; c < dv; c++) {
                    const double vd = rb(Vn[(size_t)j * dv + c] * exp(gl - gam[j]));
                    for (int m = 0; m < dk; m++) Sh[(size_t)m * dv + c] += k[(size_t)(t0 + j) * dk + m] * vd;
                }
        }
    }
}

static double rel(const float *x, const double *y, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        if (!std::isfinite(x[i])) return INFINITY;
        num += (x[i] - y[i]) * (x[i] - y[i]), den += y[i] * y[i];
    }
    return sqrt(num / (den > 0 ? den : 1));
}
static double reld(const double *x, const double *y, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) num += (x[i] - y[i]) * (x[i] - y[i]), den += y[i] * y[i];
    return sqrt(num / (den > 0 ? den : 1));
}

// calls of the given lengths in sequence (state carried); the model runs per call too (its chunks restart at
// each call, as the kernels' do)
static int check(const std::vector<int> &calls, int Hk, int Hv, int dk, int dv) {
    int n = 0;
    for (int m : calls) n += m;
    const int cq = 2 * Hk * dk + Hv * dv;
    const size_t ns = (size_t)Hv * dk * dv, no = (size_t)n * Hv * dv;
    std::vector<float> qkv((size_t)n * cq), b((size_t)n * Hv), a((size_t)n * Hv), Al(Hv), dtb(Hv), S(ns), o(no);
    for (auto &x : qkv) x = urand(-1, 1);
    for (auto &x : b) x = urand(-3, 3);
    for (auto &x : a) x = urand(-3, 3);
    for (auto &x : Al) x = urand(-1, 1.5f);
    for (auto &x : dtb) x = urand(-1, 1);
    for (auto &x : S) x = urand(-0.3f, 0.3f);
    std::vector<double> S64(S.begin(), S.end()), Sm(S.begin(), S.end()), o64(no), om(no);
    std::vector<float> S32(S), o32(no); // the same calls with 32-column state_out blocks: the same bits
    reference(o64.data(), S64.data(), qkv.data(), b.data(), a.data(), Al.data(), dtb.data(), n, Hk, Hv, dk, dv, 0);
    int t0 = 0;
    for (int m : calls) {
        reference(om.data() + (size_t)t0 * Hv * dv, Sm.data(), qkv.data() + (size_t)t0 * cq, b.data() + (size_t)t0 * Hv,
                  a.data() + (size_t)t0 * Hv, Al.data(), dtb.data(), m, Hk, Hv, dk, dv, 1);
        cu_gdn_chunked_bf16(NULL, o.data() + (size_t)t0 * Hv * dv, qkv.data() + (size_t)t0 * cq,
                            b.data() + (size_t)t0 * Hv, a.data() + (size_t)t0 * Hv, Al.data(), dtb.data(), S.data(), m,
                            Hk, Hv, dk, dv);
        gdn_chunked_bf16_cols(NULL, o32.data() + (size_t)t0 * Hv * dv, qkv.data() + (size_t)t0 * cq,
                              b.data() + (size_t)t0 * Hv, a.data() + (size_t)t0 * Hv, Al.data(), dtb.data(), S32.data(),
                              m, Hk, Hv, dk, dv, 32);
        t0 += m;
    }
    const bool same32 = !memcmp(o.data(), o32.data(), no * 4) && !memcmp(S.data(), S32.data(), ns * 4);
    const double eo = rel(o.data(), om.data(), no), es = rel(S.data(), Sm.data(), ns);
    const double fo = rel(o.data(), o64.data(), no), fs = rel(S.data(), S64.data(), ns);
    const double mo = reld(om.data(), o64.data(), no), ms = reld(Sm.data(), S64.data(), ns);
    char split[64] = "";
    for (size_t i = 0; i < calls.size(); i++)
        snprintf(split + strlen(split), sizeof split - strlen(split), i ? "+%d" : "%d", calls[i]);
    const int bad = !(eo < 3e-3 && es < 3e-3 && fo < 3e-2 && fs < 3e-2 && same32);
    printf("%s n=%-12s Hk=%d Hv=%d dk=%-3d dv=%-3d cp=%s | kernel vs bf16 model out %.2e state %.2e | kernel vs fp64 "
           "out %.2e state %.2e | model vs fp64 out %.2e state %.2e | cols 32 %s\n",
           bad ? "BAD " : "ok  ", split, Hk, Hv, dk, dv, emu_cp_immediate ? "issue" : "wait ", eo, es, fo, fs, mo, ms,
           same32 ? "same bits" : "DIFFERENT");
    fflush(stdout);
    return bad;
}

// peer_gdn_chunk_io's file contract (tests_cuda/bench_cuda_gdn.c), emulated: OUT.bf16 from the kernels and
// OUT.ref64 (the fp64 recurrence, as fp32) in the output layout
static int peer(const char *in, const char *out) {
    FILE *f = fopen(in, "rb");
    int32_t hd[8];
    if (!f || fread(hd, 4, 8, f) != 8 || hd[0] != 0x504e4447 || hd[1] != 1) return fprintf(stderr, "bad file\n"), 1;
    const int n = hd[2], Hk = hd[3], Hv = hd[4], dk = hd[5], dv = hd[6], cq = 2 * Hk * dk + Hv * dv;
    const size_t ns = (size_t)Hv * dk * dv, no = (size_t)n * Hv * dv;
    std::vector<float> qkv((size_t)n * cq), b((size_t)n * Hv), a((size_t)n * Hv), Al(Hv), dtb(Hv), S(ns), o(no);
    for (auto *v : {&qkv, &b, &a, &Al, &dtb, &S})
        if (fread(v->data(), 4, v->size(), f) != v->size()) return fprintf(stderr, "short\n"), 1;
    fclose(f);
    std::vector<double> S64(S.begin(), S.end()), o64(no);
    reference(o64.data(), S64.data(), qkv.data(), b.data(), a.data(), Al.data(), dtb.data(), n, Hk, Hv, dk, dv, 0);
    cu_gdn_chunked_bf16(NULL, o.data(), qkv.data(), b.data(), a.data(), Al.data(), dtb.data(), S.data(), n, Hk, Hv, dk,
                        dv);
    std::string p1 = std::string(out) + ".bf16", p2 = std::string(out) + ".ref64";
    FILE *g = fopen(p1.c_str(), "wb");
    fwrite(o.data(), 4, no, g), fwrite(S.data(), 4, ns, g), fclose(g);
    std::vector<float> of(o64.begin(), o64.end()), sf(S64.begin(), S64.end());
    g = fopen(p2.c_str(), "wb");
    fwrite(of.data(), 4, no, g), fwrite(sf.data(), 4, ns, g), fclose(g);
    printf("peer: n=%d Hk=%d Hv=%d dk=%d dv=%d: kernel vs fp64 out %.3e state %.3e\n", n, Hk, Hv, dk, dv,
           rel(o.data(), o64.data(), no), rel(S.data(), S64.data(), ns));
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 4 && !strcmp(argv[1], "peer")) return peer(argv[2], argv[3]);
    int bad = 0;
    const int quick = argc > 1 && !strcmp(argv[1], "quick");
    struct shape {
        std::vector<int> calls;
        int Hk, Hv, dk, dv;
    };
    std::vector<shape> shapes = {
        {{7}, 1, 1, 16, 16},      {{64}, 1, 2, 32, 32},        {{90, 40}, 2, 4, 16, 16},    {{1}, 2, 6, 128, 128},
        {{200}, 2, 6, 128, 128},  {{64, 1}, 2, 6, 128, 128},   {{130, 70}, 2, 4, 96, 48},   {{7, 200}, 1, 3, 64, 32},
        {{3, 5}, 2, 2, 256, 256}, {{129, 63}, 3, 3, 128, 128}, {{100, 28}, 2, 6, 64, 37},   {{150}, 1, 2, 256, 128},
        {{70, 3}, 1, 2, 48, 40},  {{66}, 1, 1, 24, 20},        {{65, 127}, 1, 3, 128, 128},
    };
    if (!quick) shapes.push_back({{100, 4200, 33}, 1, 1, 32, 32}); // a call over one 4096-token pass
    for (auto &s : shapes)
        for (int imm = 0; imm < (quick ? 1 : 2); imm++) {
            emu_cp_immediate = imm;
            bad += check(s.calls, s.Hk, s.Hv, s.dk, s.dv);
        }
    printf("%d bad\n", bad);
    return bad != 0;
}
