"""Same-call peers for the prefill kernels (issue 16) on one GPU, at the Qwen3.5-27B shapes:
  GDN   FLA's Triton chunk_gated_delta_rule (if the `fla` package imports) vs ours (cuda route gdn_chunk, both
        kernel sets): 16 k / 48 v heads x 128, one call of 4096 tokens and a whole 64K prompt; plus the fp64 screen
        (output and final-state rel-L2 of FLA and of ours against an fp64 recurrence, each on the inputs it ran).
  attn  PyTorch SDPA, cuDNN and flash backends: 24 q / 4 kv heads x 256, bf16, causal: 4096 queries at 60K..64K
        (lower-right causal) and the whole 32K / 64K prompt; ours from bench_cuda_attn_prefill (4096-query chunks;
        a whole prompt is the sum over its chunks, estimated from the first and the last chunk: linear in keys).
Ours run as subprocesses of this script on the same GPU (fd_cuda_tests benches, FD_CUDA_BENCH=1; the fp64 screen's
inputs go through a file to fd_cuda_tests peer_gdn_chunk_io). Timing: CUDA events, warm-up, median of 10.
Run on the GPU machine from the repo root:
    python3 tools/peer_prefill.py [--bin .dev/build] [--skip-gdn] [--skip-attn] [--screen-tokens 4096]
Prints one line per measurement, then a summary with the ratios the issue's targets are stated in
(GDN: ours >= 1.5x FLA; attention: ours >= 0.9x cuDNN).
"""
import argparse
import inspect
import math
import os
import re
import struct
import subprocess
import tempfile

import numpy as np
import torch
import torch.nn.functional as F

HK, HV, DK, DV = 16, 48, 128, 128  # the 27B's GDN heads
dev = torch.device("cuda")
summary, summary_attn = [], {}
args = None


def events_ms(fn, warm=3, runs=10):
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    t = []
    for _ in range(runs):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        fn()
        e1.record()
        e1.synchronize()
        t.append(e0.elapsed_time(e1))
    return sorted(t)[len(t) // 2]


def ours(bench, env=None):
    """BENCH lines of one fd_cuda_tests bench: {what: ms}."""
    exe = os.path.join(args.bin, "fd_cuda_tests")
    e = dict(os.environ, FD_CUDA_BENCH="1", **(env or {}))
    p = subprocess.run([exe, bench], env=e, capture_output=True, text=True, timeout=900)
    rows = {}
    for line in p.stdout.splitlines():
        m = re.match(r"BENCH \| (.*?)\s*\| +([0-9.]+) ms", line)
        if m:
            rows[m.group(1)] = float(m.group(2))
    if p.returncode or not rows:
        print(f"  {bench}: exit {p.returncode}, {len(rows)} BENCH lines\n{p.stdout[-2000:]}{p.stderr[-2000:]}")
    return rows


# ---------------------------------------------------------------------------------------------------------------
def gdn_inputs(n, seed):
    """Our op's inputs (conv output qkv, raw gates) with q, k, v exactly bf16, and FLA's view of the same."""
    g = torch.Generator(device=dev).manual_seed(seed)
    u = lambda shape, lo, hi: torch.rand(shape, generator=g, device=dev) * (hi - lo) + lo
    q = u((n, HK, DK), -1, 1).bfloat16()
    k = u((n, HK, DK), -1, 1).bfloat16()
    v = u((n, HV, DV), -1, 1).bfloat16()
    b, a = u((n, HV), -3, 3), u((n, HV), -3, 3)
    A_log, dt_bias = u((HV,), -1, 1.5), u((HV,), -1, 1)
    S0 = u((HV, DK, DV), -0.3, 0.3)
    return dict(q=q, k=k, v=v, b=b, a=a, A_log=A_log, dt_bias=dt_bias, S0=S0)


def write_gdn_input(path, x, n):
    """The file peer_gdn_chunk_io reads (tests_cuda/bench_cuda_gdn.c): header, then fp32 qkv [n, Q | K | V heads],
    b, a [n, HV], A_log, dt_bias [HV], S0 [HV, DK, DV]."""
    qkv = torch.cat([x["q"].float().reshape(n, -1), x["k"].float().reshape(n, -1), x["v"].float().reshape(n, -1)], 1)
    assert qkv.shape[1] == 2 * HK * DK + HV * DV
    with open(path, "wb") as f:
        f.write(struct.pack("<8i", 0x504E4447, 1, n, HK, HV, DK, DV, 0))
        for t in (qkv, x["b"], x["a"], x["A_log"], x["dt_bias"], x["S0"]):
            f.write(t.float().contiguous().cpu().numpy().astype("<f4").tobytes())


def read_gdn_output(path, n):
    """o [n, HV, DV], S [HV, DK, DV] as peer_gdn_chunk_io wrote them."""
    raw = torch.from_numpy(np.fromfile(path, dtype="<f4")).to(dev)
    assert raw.numel() == n * HV * DV + HV * DK * DV, f"{path}: {raw.numel()} floats"
    return raw[: n * HV * DV].view(n, HV, DV), raw[n * HV * DV:].view(HV, DK, DV)


def gates(x, dtype):
    g = -torch.exp(x["A_log"].to(dtype)) * F.softplus(x["a"].to(dtype) + x["dt_bias"].to(dtype))
    return g, torch.sigmoid(x["b"].to(dtype))


def ref64(q, k, v, g, beta, S0):
    """fp64 recurrence from the definition: q, k l2-normalised (eps 1e-6), q / sqrt(dk), value head h reads key
    head h // (HV / HK); returns o [n, HV, DV], S [HV, DK, DV]."""
    r = HV // HK
    q, k, v, g, beta = (t.double() for t in (q, k, v, g, beta))
    q = q / torch.sqrt((q * q).sum(-1, keepdim=True) + 1e-6) / math.sqrt(DK)
    k = k / torch.sqrt((k * k).sum(-1, keepdim=True) + 1e-6)
    q, k = q.repeat_interleave(r, dim=1), k.repeat_interleave(r, dim=1)
    S, o = S0.double().clone(), torch.empty(v.shape, dtype=torch.float64, device=dev)
    for t in range(v.shape[0]):
        S *= torch.exp(g[t])[:, None, None]
        kv = torch.einsum("hkv,hk->hv", S, k[t])
        S += k[t][:, :, None] * (beta[t][:, None] * (v[t] - kv))[:, None, :]
        o[t] = torch.einsum("hkv,hk->hv", S, q[t])
    return o, S


def rel(x, ref):
    return (torch.linalg.norm(x.double() - ref) / torch.linalg.norm(ref)).item()


def fla_fn():
    try:
        from fla.ops.gated_delta_rule import chunk_gated_delta_rule
    except Exception as e:  # noqa: BLE001 - any import failure means: no FLA peer
        print(f"fla not importable ({type(e).__name__}: {e}); the GDN peer is skipped")
        return None
    import fla

    print(f"fla {getattr(fla, '__version__', '?')}")
    return chunk_gated_delta_rule


def fla_kwargs(fn, x):
    kw = dict(scale=DK**-0.5, initial_state=x["S0"][None].float().contiguous(), output_final_state=True,
              use_qk_l2norm_in_kernel=True)
    if "head_first" in inspect.signature(fn).parameters:
        kw["head_first"] = False
    return kw


def fla_call(fn, x, g, beta):
    """FLA on [1, T, H, K] inputs: beta fp32 unless this FLA wants q's dtype, q / k repeated to HV heads if it has
    no grouped value heads. Returns (o [T, HV, DV], S [HV, DK, DV], note, the (q, k, beta) it accepted)."""
    q, k = x["q"][None], x["k"][None]
    last = None
    for note, qq, kk, bb in (("", q, k, beta), ("beta bf16", q, k, beta.bfloat16()),
                             ("q/k repeated to 48 heads", q.repeat_interleave(HV // HK, 2),
                              k.repeat_interleave(HV // HK, 2), beta)):
        try:
            o, S = fn(qq, kk, x["v"][None], g[None].float(), bb[None], **fla_kwargs(fn, x))
            return o[0], S[0], note, (qq, kk, bb)
        except Exception as e:  # noqa: BLE001 - try the next form this FLA version may want
            last = e
    raise RuntimeError(f"chunk_gated_delta_rule refused every form: {last}")


def gdn_peer():
    fn = fla_fn()
    got = ours("bench_cuda_gdn_chunk")
    for n in (4096, 65536):
        fla_ms = None
        if fn:
            x = gdn_inputs(n, 1)
            g, beta = gates(x, torch.float32)
            _, _, note, (qq, kk, bb) = fla_call(fn, x, g, beta)
            kw, gg, vv, bb = fla_kwargs(fn, x), g[None].float(), x["v"][None], bb[None]
            fla_ms = events_ms(lambda: fn(qq, kk, vv, gg, bb, **kw))
            print(f"GDN FLA chunk_gated_delta_rule n={n}: {fla_ms:.3f} ms{' (' + note + ')' if note else ''}")
            del x
        for kern in ("tf32x3", "bf16"):
            key = f"gdn_chunk={kern} n={n} (Hk16 Hv48 128/128)"
            ms = got.get(key)
            print(f"GDN ours gdn_chunk={kern} n={n}: {ms if ms is None else f'{ms:.3f}'} ms")
            if ms and fla_ms:
                summary.append(f"GDN n={n}: ours {kern} {ms:.3f} ms vs FLA {fla_ms:.3f} ms = {fla_ms / ms:.2f}x FLA "
                               f"(target >= 1.5x)")
    if args.screen_tokens <= 0:
        return
    n = args.screen_tokens
    x = gdn_inputs(n, 2)
    with tempfile.TemporaryDirectory() as d:
        pin, pout = os.path.join(d, "in.bin"), os.path.join(d, "out")
        write_gdn_input(pin, x, n)
        exe = os.path.join(args.bin, "fd_cuda_tests")
        p = subprocess.run([exe, "peer_gdn_chunk_io"], env=dict(os.environ, FD_GDN_PEER_IN=pin, FD_GDN_PEER_OUT=pout),
                           capture_output=True, text=True, timeout=600)
        print(p.stdout.strip()[-1500:])
        res = {}
        for kern in ("tf32x3", "bf16"):
            path = f"{pout}.{kern}"
            if not os.path.exists(path):
                print(f"  screen: {path} missing (exit {p.returncode}) {p.stderr[-1000:]}")
                continue
            res[kern] = read_gdn_output(path, n)
    g64, b64 = gates(x, torch.float64)
    o_ref, S_ref = ref64(x["q"], x["k"], x["v"], g64, b64, x["S0"])
    errs = {k: (rel(o, o_ref), rel(S, S_ref)) for k, (o, S) in res.items()}
    if fn:
        g32, b32 = gates(x, torch.float32)
        o_f, S_f, note, (_, _, bb) = fla_call(fn, x, g32, b32)
        # FLA's own reference: the gates exactly as FLA received them (fp32 g, beta as passed)
        of_ref, Sf_ref = ref64(x["q"], x["k"], x["v"], g32, bb.float().reshape(n, HV), x["S0"])
        errs["FLA"] = (rel(o_f.float(), of_ref), rel(S_f.float(), Sf_ref))
    for k, (eo, es) in errs.items():
        print(f"GDN fp64 screen n={n} {k:7s}: output rel-L2 {eo:.3e}, final state rel-L2 {es:.3e}")
    if "FLA" in errs and "bf16" in errs:
        fo, fs = errs["FLA"]
        eo, es = errs["bf16"]
        ok = eo <= 2 * fo and es <= 2 * fs
        summary.append(f"GDN fp64 screen n={n}: ours bf16 out {eo:.2e} / state {es:.2e}, FLA {fo:.2e} / {fs:.2e}: "
                       f"{eo / fo:.2f}x / {es / fs:.2f}x FLA's error (screen <= 2x: {'pass' if ok else 'FAIL'})")


# ---------------------------------------------------------------------------------------------------------------
def attn_peer():
    from torch.nn.attention import SDPBackend, sdpa_kernel

    try:
        from torch.nn.attention.bias import causal_lower_right
    except Exception:  # noqa: BLE001
        causal_lower_right = None
    H, HKV, HD, N = 24, 4, 256, 4096
    got = ours("bench_cuda_attn_prefill")

    def flops(nq, pos0):  # causal: query i at pos0 + i sees pos0 + i + 1 keys
        return 4.0 * H * HD * (nq * pos0 + nq * (nq + 1) / 2)

    cases = [("4096 q at 60K..64K", N, 65536), ("whole 32K", 32768, 32768), ("whole 64K", 65536, 65536)]
    for name, nq, nk in cases:
        q = torch.randn(1, H, nq, HD, device=dev, dtype=torch.bfloat16)
        k = torch.randn(1, HKV, nk, HD, device=dev, dtype=torch.bfloat16)
        v = torch.randn(1, HKV, nk, HD, device=dev, dtype=torch.bfloat16)
        fl = flops(nq, nk - nq)
        for bname, be in (("cuDNN", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION)):
            note, ms = "", None
            for gqa in (True, False):
                kk, vv = (k, v) if gqa else (k.repeat_interleave(H // HKV, 1), v.repeat_interleave(H // HKV, 1))
                if nq == nk:
                    call = lambda: F.scaled_dot_product_attention(q, kk, vv, is_causal=True, enable_gqa=gqa)
                elif causal_lower_right is not None:
                    mask = causal_lower_right(nq, nk)
                    call = lambda: F.scaled_dot_product_attention(q, kk, vv, attn_mask=mask, enable_gqa=gqa)
                else:
                    note = "no lower-right causal bias in this torch"
                    break
                try:
                    with sdpa_kernel([be]):
                        ms = events_ms(call)
                    note = "" if gqa else "k/v repeated to 24 heads"
                    break
                except Exception as e:  # noqa: BLE001 - backend refuses this form: try the next
                    note = f"unsupported: {str(e).splitlines()[0][:100]}"
            if ms:
                print(f"attn SDPA {bname:5s} {name}: {ms:.3f} ms, {fl / ms / 1e9:.0f} TFLOP/s {note}")
                summary_attn[(name, bname)] = ms
            else:
                print(f"attn SDPA {bname:5s} {name}: {note}")
        del q, k, v
        torch.cuda.empty_cache()
    for kern in ("mma", "wgmma"):  # both tensor-core routes of bench_cuda_attn_prefill, bf16 cache
        first = got.get(f"attn prefill {kern} bf16 4096 q at 0K..4K")
        last = got.get(f"attn prefill {kern} bf16 4096 q at 60K..64K")
        mid = got.get(f"attn prefill {kern} bf16 4096 q at 28K..32K")
        est = {"4096 q at 60K..64K": last}
        if first and mid:
            est["whole 32K"] = 8 * (first + mid) / 2
        if first and last:
            est["whole 64K"] = 16 * (first + last) / 2
        for name, nq, nk in cases:
            ms = est.get(name)
            if not ms:
                print(f"attn ours {kern} {name}: no bench line")
                continue
            fl = flops(nq, nk - nq)
            print(f"attn ours {kern} bf16 {name}: {ms:.3f} ms, {fl / ms / 1e9:.0f} TFLOP/s"
                  f"{'' if nq == N else ' (sum of 4096-query chunks, from the first and last chunk)'}")
            c = summary_attn.get((name, "cuDNN"))
            if c:
                summary.append(f"attn {kern} {name}: ours {ms:.3f} ms vs cuDNN {c:.3f} ms = {c / ms:.2f}x cuDNN"
                               " (target >= 0.9x)")


def main():
    global args
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=".dev/build", help="folder with fd_cuda_tests (built with CUDA=1)")
    ap.add_argument("--skip-gdn", action="store_true")
    ap.add_argument("--skip-attn", action="store_true")
    ap.add_argument("--screen-tokens", type=int, default=4096, help="tokens of the fp64 screen (0: skip it)")
    args = ap.parse_args()
    torch.manual_seed(0)
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    if not args.skip_gdn:
        gdn_peer()
    if not args.skip_attn:
        attn_peer()
    print("\nsummary (same call, one GPU):")
    for s in summary:
        print("  " + s)


if __name__ == "__main__":
    main()
