#!/usr/bin/env python3
# A lane-by-lane model of src/cuda/attention_decode_warp.cu's index arithmetic (route attn_decode=warp), written
# without a GPU: the shared-memory ring layout and pitches, Q's dim permutation (e4m3), the K/V fragments read by
# ldmatrix (.trans) or converted from fp8 bytes, the masks, the online softmax, P^T moved by movmatrix, the 4-warp
# merge and the dims the partials are stored at, with the PTX fragment layouts of mma.m16n8k16, ldmatrix and
# movmatrix emulated. Each case (one 512-key chunk, one kv head) is compared with a direct attention over the same
# bf16 / dequantised values: rel-L2 ~1e-3 (P rounded to bf16); a wrong layout gives ~1. It mirrors the kernel by
# hand: change both together. Pure Python (no numpy), ~35 s for all cases:  python3 tools/dw_fragment_sim.py [case]
import math, random, struct, sys

def bf16_bits(x):
    b = struct.unpack('<I', struct.pack('<f', x))[0]
    lsb = (b >> 16) & 1
    b = (b + 0x7fff + lsb) & 0xffffffff
    return b >> 16
def bf16_val(h):
    return struct.unpack('<f', struct.pack('<I', (h & 0xffff) << 16))[0]
def rbf(x): return bf16_val(bf16_bits(x))
def f32(x): return struct.unpack('<f', struct.pack('<f', x))[0]

def e4m3_decode(b):
    s = -1.0 if b & 0x80 else 1.0
    e = (b >> 3) & 0xf; m = b & 7
    if e == 0: return s * m * 2.0 ** -9
    return s * (1 + m / 8) * 2.0 ** (e - 7)
E4_TABLE = sorted(set(e4m3_decode(b) for b in range(256) if (b & 0x7f) != 0x7f))
def e4m3_encode(x):  # nearest (ties whatever): only needs to be some valid byte
    best = min(range(256), key=lambda b: abs(e4m3_decode(b) - x) if (b & 0x7f) != 0x7f else 1e30)
    return best

def pack2(lo, hi): return (lo & 0xffff) | ((hi & 0xffff) << 16)
def lo16(r): return r & 0xffff
def hi16(r): return (r >> 16) & 0xffff

class Smem:
    def __init__(self, n): self.b = bytearray(n)
    def u32(self, a): return struct.unpack_from('<I', self.b, a)[0]
    def u16(self, a): return struct.unpack_from('<H', self.b, a)[0]
    def put16(self, a, v): struct.pack_into('<H', self.b, a, v)
    def putf(self, a, v): struct.pack_into('<f', self.b, a, v)
    def getf(self, a): return struct.unpack_from('<f', self.b, a)[0]

def ldsm_x4(sm, addr):  # addr[t]: byte address lane t supplies; returns regs[t][4]
    out = []
    for t in range(32):
        out.append([sm.u32(addr[8 * i + t // 4] + 4 * (t % 4)) for i in range(4)])
    return out
def ldsm_x4_trans(sm, addr):
    out = []
    for t in range(32):
        regs = []
        for i in range(4):
            lo = sm.u16(addr[8 * i + 2 * (t % 4)] + 2 * (t // 4))
            hi = sm.u16(addr[8 * i + 2 * (t % 4) + 1] + 2 * (t // 4))
            regs.append(pack2(lo, hi))
        out.append(regs)
    return out
def movt(x):  # x[t]: reg of lane t
    M = [[0] * 8 for _ in range(8)]
    for t in range(32):
        M[t // 4][2 * (t % 4)] = lo16(x[t]); M[t // 4][2 * (t % 4) + 1] = hi16(x[t])
    return [pack2(M[2 * (t % 4)][t // 4], M[2 * (t % 4) + 1][t // 4]) for t in range(32)]
def mma(C, A, B):  # C[t][4] floats, A[t][4] regs, B[t][2] regs; in place
    Am = [[0.0] * 16 for _ in range(16)]; Bm = [[0.0] * 8 for _ in range(16)]
    for t in range(32):
        g, c = t >> 2, t & 3
        for e in range(2):
            h = lo16 if e == 0 else hi16
            Am[g][2 * c + e] = bf16_val(h(A[t][0])); Am[g + 8][2 * c + e] = bf16_val(h(A[t][1]))
            Am[g][2 * c + 8 + e] = bf16_val(h(A[t][2])); Am[g + 8][2 * c + 8 + e] = bf16_val(h(A[t][3]))
            Bm[2 * c + e][g] = bf16_val(h(B[t][0])); Bm[2 * c + 8 + e][g] = bf16_val(h(B[t][1]))
    for t in range(32):
        g, c = t >> 2, t & 3
        for x in range(4):
            row = g + 8 * (x >> 1); col = 2 * c + (x & 1)
            C[t][x] += sum(Am[row][k] * Bm[k][col] for k in range(16))

def e4_pair(two, s):  # low 16 bits: 2 fp8 bytes -> bf16x2 of value*s
    b0, b1 = two & 0xff, (two >> 8) & 0xff
    return pack2(bf16_bits(f32(e4m3_decode(b0) * s)), bf16_bits(f32(e4m3_decode(b1) * s)))
def byte_perm(x, y, s):
    src = x | (y << 32); r = 0
    for i in range(4):
        sel = (s >> (4 * i)) & 7
        r |= ((src >> (8 * sel)) & 0xff) << (8 * i)
    return r
def qcol(P, E4):
    if not E4: return P
    return (P & ~31) + ((P >> 2) & 1) * 16 + ((P >> 1) & 1) * 8 + ((P >> 3) & 3) * 2

def run(HD, RT, E4, G, n, p0, causal, seed, keys_total):
    rnd = random.Random(seed)
    ROWS = 8 * RT; R = n * G; W = 4; DW_KEYS = 128; BK = 16
    KP = HD + 32 if E4 else 2 * HD + 16; VP = HD + 16 if E4 else 2 * HD + 16
    SCALES = BK * KP; ENTRY = BK * KP + (64 if E4 else 0); QP = HD + 8
    kbeg = 0
    # cache: K, V [keys][HD] as the kernel sees them (bf16 values, or fp8 bytes + scale)
    K = [[rnd.uniform(-2, 2) for _ in range(HD)] for _ in range(keys_total)]
    V = [[rnd.uniform(-1, 1) for _ in range(HD)] for _ in range(keys_total)]
    if E4:
        def quant(row):
            amax = max(abs(x) for x in row); s = amax / 448 if amax > 0 else 1.0
            return [e4m3_encode(x / s) for x in row], s
        K8 = [quant(r) for r in K]; V8 = [quant(r) for r in V]
        Kd = [[rbf(f32(e4m3_decode(b) * s)) for b in r] for r, s in K8]
        Vd = [[rbf(f32(e4m3_decode(b) * s)) for b in r] for r, s in V8]
    else:
        Kb = [[bf16_bits(x) for x in r] for r in K]; Vb = [[bf16_bits(x) for x in r] for r in V]
        Kd = [[bf16_val(h) for h in r] for r in Kb]; Vd = [[bf16_val(h) for h in r] for r in Vb]
    q = [[rnd.uniform(-2, 2) for _ in range(HD)] for _ in range(R)]  # rows r = t*G + g (one kv head)
    scale = 1 / math.sqrt(HD); scale_log2 = f32(scale * 1.4426950408889634)
    klast = (p0 + (R - 1) // G) if causal else p0 + n - 1
    kend = min(klast + 1, kbeg + 512)
    outs = {}
    for rb0 in range(0, R, ROWS):
        rows_here = min(ROWS, R - rb0)
        klast_b = (p0 + (rb0 + rows_here - 1) // G) if causal else p0 + n - 1
        if kbeg > klast_b: continue
        kend = min(klast_b + 1, kbeg + 512)
        Qs = Smem(ROWS * QP * 2)
        for i in range(ROWS):
            for d in range(0, HD, 2):
                lo = bf16_bits(q[rb0 + i][d]) if i < rows_here else 0
                hi = bf16_bits(q[rb0 + i][d + 1]) if i < rows_here else 0
                Qs.put16((i * QP + qcol(d, E4)) * 2, lo); Qs.put16((i * QP + qcol(d, E4) + 1) * 2, hi)
        def qr_of(i):
            if i >= rows_here: return -1
            r = rb0 + i; qpos = p0 + r // G if causal else p0 + n - 1
            return max(-1, min(1024, qpos - kbeg))
        partial = []
        for w in range(W):
            kw0 = kbeg + w * DW_KEYS
            nsteps = min(8, (kend - kw0 + 15) // 16) if kw0 < kend else 0
            o = [[[[0.0] * 4 for _ in range(32)] for _ in range(HD // 16)] for _ in range(RT)]
            m = [[[-math.inf] * 2 for _ in range(32)] for _ in range(RT)]
            l = [[[0.0] * 2 for _ in range(32)] for _ in range(RT)]
            for t in range(nsteps):
                k0 = kw0 + 16 * t
                for plane in range(2):
                    ent = Smem(ENTRY); pitch = VP if plane else KP
                    for j in range(16):
                        kp = k0 + j; ok = kp < kend
                        for dd in range(HD):
                            if E4:
                                b = (V8 if plane else K8)[kp][0][dd] if ok else 0
                                ent.b[j * pitch + dd] = b
                            else:
                                h = (Vb if plane else Kb)[kp][dd] if ok else 0
                                ent.put16(j * pitch + 2 * dd, h)
                        if E4: ent.putf(SCALES + 4 * j, (V8 if plane else K8)[kp][1] if ok else 0.0)
                    if plane == 0: Ke = ent
                    else: Ve = ent
                # S^T
                sa = [[[0.0] * 4 for _ in range(32)] for _ in range(RT)]
                for kp_ in range(HD // 32):
                    if E4:
                        ka, kb = [], []
                        for lane in range(32):
                            g, c = lane >> 2, lane & 3
                            ks0, ks1 = Ke.getf(SCALES + 4 * g), Ke.getf(SCALES + 4 * (g + 8))
                            x0 = (Ke.u32(g * KP + 32 * kp_ + 8 * c), Ke.u32(g * KP + 32 * kp_ + 8 * c + 4))
                            x1 = (Ke.u32((g + 8) * KP + 32 * kp_ + 8 * c), Ke.u32((g + 8) * KP + 32 * kp_ + 8 * c + 4))
                            ka.append([e4_pair(x0[0], ks0), e4_pair(x1[0], ks1), e4_pair(x0[0] >> 16, ks0), e4_pair(x1[0] >> 16, ks1)])
                            kb.append([e4_pair(x0[1], ks0), e4_pair(x1[1], ks1), e4_pair(x0[1] >> 16, ks0), e4_pair(x1[1] >> 16, ks1)])
                    else:
                        addr = [((L & 7) + ((L >> 3) & 1) * 8) * KP + (32 * kp_ + (L >> 4) * 8) * 2 for L in range(32)]
                        ka = ldsm_x4(Ke, addr); kb = ldsm_x4(Ke, [a + 32 for a in addr])
                    for rt in range(RT):
                        qaddr = [((rt * 8 + (L & 7)) * QP + 32 * kp_ + (L >> 3) * 8) * 2 for L in range(32)]
                        qb = ldsm_x4(Qs, qaddr)
                        mma(sa[rt], ka, [[qb[L][0], qb[L][1]] for L in range(32)])
                        mma(sa[rt], kb, [[qb[L][2], qb[L][3]] for L in range(32)])
                key0s = [w * DW_KEYS + t * 16 + (L >> 2) for L in range(32)]
                pb = []
                for rt in range(RT):
                    v = [[0.0] * 4 for _ in range(32)]
                    for L in range(32):
                        c = L & 3
                        for x in range(4):
                            qr = qr_of(rt * 8 + 2 * c + (x & 1))
                            vis = key0s[L] + 8 * (x >> 1) <= qr
                            v[L][x] = f32(sa[rt][L][x] * scale_log2) if vis else -math.inf
                    alpha = [[1.0, 1.0] for _ in range(32)]
                    for j in range(2):
                        mx = [max(v[L][j], v[L][j + 2]) for L in range(32)]
                        for off in (4, 8, 16):
                            mx = [max(mx[L], mx[L ^ off]) for L in range(32)]
                        for L in range(32):
                            mn = max(m[rt][L][j], mx[L])
                            if mn != -math.inf:
                                alpha[L][j] = 2 ** (m[rt][L][j] - mn) if m[rt][L][j] != -math.inf else 0.0
                                v[L][j] = 2 ** (v[L][j] - mn) if v[L][j] != -math.inf else 0.0
                                v[L][j + 2] = 2 ** (v[L][j + 2] - mn) if v[L][j + 2] != -math.inf else 0.0
                            else:
                                alpha[L][j] = 1.0; v[L][j] = v[L][j + 2] = 0.0
                            l[rt][L][j] = l[rt][L][j] * alpha[L][j] + v[L][j] + v[L][j + 2]
                            m[rt][L][j] = mn
                    p0r = movt([pack2(bf16_bits(v[L][0]), bf16_bits(v[L][1])) for L in range(32)])
                    p1r = movt([pack2(bf16_bits(v[L][2]), bf16_bits(v[L][3])) for L in range(32)])
                    pb.append([[p0r[L], p1r[L]] for L in range(32)])
                    for md in range(HD // 16):
                        for L in range(32):
                            o[rt][md][L][0] *= alpha[L][0]; o[rt][md][L][1] *= alpha[L][1]
                            o[rt][md][L][2] *= alpha[L][0]; o[rt][md][L][3] *= alpha[L][1]
                # O^T
                if E4:
                    for jg in range(HD // 64):
                        va_all = [[None] * 4 for _ in range(32)]
                        for L in range(32):
                            g, c = L >> 2, L & 3
                            vs = [Ve.getf(SCALES + 4 * k) for k in (2 * c, 2 * c + 1, 2 * c + 8, 2 * c + 9)]
                            wv = []
                            for kk in range(4):
                                a = (2 * c + (kk & 1) + (kk >> 1) * 8) * VP + 64 * jg + 8 * g
                                x = (Ve.u32(a), Ve.u32(a + 4))
                                wv.append([e4_pair(x[0], vs[kk]), e4_pair(x[0] >> 16, vs[kk]), e4_pair(x[1], vs[kk]), e4_pair(x[1] >> 16, vs[kk])])
                            for i in range(4):
                                va_all[L][i] = [byte_perm(wv[0][i], wv[1][i], 0x5410), byte_perm(wv[0][i], wv[1][i], 0x7632),
                                                byte_perm(wv[2][i], wv[3][i], 0x5410), byte_perm(wv[2][i], wv[3][i], 0x7632)]
                        for i in range(4):
                            for rt in range(RT):
                                mma(o[rt][4 * jg + i], [va_all[L][i] for L in range(32)], pb[rt])
                else:
                    vr = [((L >> 4) * 8 + (L & 7)) * VP + ((L >> 3) & 1) * 16 for L in range(32)]
                    for md in range(HD // 16):
                        va = ldsm_x4_trans(Ve, [a + md * 32 for a in vr])
                        for rt in range(RT):
                            mma(o[rt][md], va, pb[rt])
            # finalize l
            for rt in range(RT):
                for j in range(2):
                    for off in (4, 8, 16):
                        nl = [l[rt][L][j] + l[rt][L ^ off][j] for L in range(32)]
                        for L in range(32): l[rt][L][j] = nl[L]
            partial.append((o, m, l))
        # merge + store
        for rt in range(RT):
            for jg in range(HD // 64):
                for L in range(32):
                    g, c = L >> 2, L & 3
                    for j in range(2):
                        i = rt * 8 + 2 * c + j
                        if i >= rows_here: continue
                        r = rb0 + i; qpos = p0 + r // G if causal else p0 + n - 1
                        if qpos < kbeg: continue
                        ms = [partial[ww][1][rt][L][j] for ww in range(W)]
                        ls = [partial[ww][2][rt][L][j] for ww in range(W)]
                        M = max(ms); f = [0.0 if x == -math.inf else 2 ** (x - M) for x in ms]
                        Lsum = sum(f[ww] * ls[ww] for ww in range(W))
                        for i4 in range(4):
                            md = 4 * jg + i4
                            for h in range(2):
                                val = sum(f[ww] * partial[ww][0][rt][md][L][2 * h + j] for ww in range(W))
                                dim = 64 * jg + (8 * g + 2 * i4 + h if E4 else 16 * i4 + g + 8 * h)
                                outs.setdefault(r, [None] * HD)
                                assert outs[r][dim] is None, "dim written twice"
                                outs[r][dim] = val / Lsum
    # reference (bf16 Q, dequantised K/V, exact softmax)
    worst = 0.0; num = den = 0.0
    for r in range(R):
        qpos = p0 + r // G if causal else p0 + n - 1
        vis = [k for k in range(min(kend, keys_total)) if k <= qpos]
        if not vis:
            assert r not in outs; continue
        qb = [rbf(x) for x in q[r]]
        s = [sum(qb[d] * Kd[k][d] for d in range(HD)) * scale for k in vis]
        mx = max(s); p = [math.exp(x - mx) for x in s]; Z = sum(p)
        ref = [sum(p[a] * Vd[k][d] for a, k in enumerate(vis)) / Z for d in range(HD)]
        got = outs[r]
        assert all(x is not None for x in got), "missing dims"
        for d in range(HD):
            num += (got[d] - ref[d]) ** 2; den += ref[d] ** 2
    return math.sqrt(num / den)

cases = [
    # HD, RT, E4, G, n, p0, causal, keys_total
    (64, 1, 0, 6, 1, 299, 1, 300),
    (64, 1, 1, 6, 1, 299, 1, 300),
    (64, 2, 0, 3, 5, 290, 1, 295),
    (64, 2, 1, 3, 5, 290, 0, 295),
    (64, 4, 1, 6, 5, 150, 1, 155),
    (256, 1, 0, 6, 1, 140, 1, 141),
    (256, 1, 1, 6, 1, 140, 1, 141),
    (256, 2, 1, 4, 4, 130, 1, 134),
]
only = int(sys.argv[1]) if len(sys.argv) > 1 else -1
for ci, cs in enumerate(cases):
    if only >= 0 and ci != only: continue
    HD, RT, E4, G, n, p0, causal, kt = cs
    e = run(HD, RT, E4, G, n, p0, causal, 1000 + ci, kt)
    print(f"HD={HD} RT={RT} E4={E4} G={G} n={n} p0={p0} causal={causal}: rel-L2 {e:.3g}", flush=True)
