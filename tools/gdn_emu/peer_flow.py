# Runs tools/peer_prefill.py's gdn_peer() on the CPU with a fake FLA (the fp64 recurrence, output rounded to bf16)
# and the emulated fd_cuda_tests (fakebin/, over .dev/gdn_emu built as emu.cpp says): checks the control flow, the
# file format both ways, the fallback for an FLA without grouped value heads and the summary lines. Needs torch
# (CPU is enough; Debian's python3-torch): /usr/bin/python3 tools/gdn_emu/peer_flow.py
import importlib.util, sys, types
import torch
spec = importlib.util.spec_from_file_location("peer", "tools/peer_prefill.py")
P = importlib.util.module_from_spec(spec)
spec.loader.exec_module(P)
P.dev = torch.device("cpu")
P.HK, P.HV, P.DK, P.DV = 2, 6, 32, 32
P.events_ms = lambda fn, warm=3, runs=10: (fn(), 0.5)[1]
P.args = types.SimpleNamespace(bin="tools/gdn_emu/fakebin", screen_tokens=130, skip_gdn=False, skip_attn=True)
calls = []
def fake_fla(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False, cu_seqlens=None,
             use_qk_l2norm_in_kernel=False):
    calls.append(tuple(q.shape))
    if q.shape[2] != v.shape[2]:
        raise ValueError("this fake FLA has no grouped value heads")  # exercises the repeat fallback
    assert use_qk_l2norm_in_kernel and abs(scale - P.DK ** -0.5) < 1e-12 and output_final_state
    HK0 = P.HK
    P.HK = q.shape[2]  # ref64 maps heads by HV // HK
    o, S = P.ref64(q[0], k[0], v[0], g[0], beta[0], initial_state[0])
    P.HK = HK0
    return o.bfloat16()[None], S.float()[None]
mod = types.ModuleType("fla"); ops = types.ModuleType("fla.ops"); gdr = types.ModuleType("fla.ops.gated_delta_rule")
gdr.chunk_gated_delta_rule = fake_fla
sys.modules.update({"fla": mod, "fla.ops": ops, "fla.ops.gated_delta_rule": gdr})
# keep the timing loop small: the n list is fixed in gdn_peer, so shrink it through gdn_inputs
orig = P.gdn_inputs
P.gdn_inputs = lambda n, seed: orig(min(n, 200), seed) if seed == 1 else orig(n, seed)
P.gdn_peer()
print("FLA shapes tried:", sorted(set(calls)))
print("\n".join(P.summary))
