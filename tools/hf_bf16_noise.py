"""How far HF transformers itself moves from its own fp32 logits when the fixture models run in bf16.

Our CUDA route gemm_act=bf16 rounds GEMM activations to bf16; this measures the same kind of noise in the
reference implementation (weights and activations bf16, eager attention) so the fixture bounds can be judged.
Run on the GPU machine from the repo root: python3 tools/hf_bf16_noise.py [--device cuda]
Prints, per fixture: logits rel-L2 vs tests/data/fixtures/*/logits.f32 (HF fp32), worst position, argmax agreement
over the prompt, and the first position where bf16 greedy (48 tokens, no cache) leaves the fp32 greedy ids.
"""
import argparse
import json
import os

import numpy as np
import torch
import transformers as T

ap = argparse.ArgumentParser()
ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
ap.add_argument("--root", default="tests/data/fixtures")
a = ap.parse_args()
torch.manual_seed(0)


def load(d, dtype):
    errs = []
    for cls in (T.AutoModelForCausalLM, getattr(T, "Qwen3_5ForConditionalGeneration", None)):
        if cls is None:
            continue
        try:
            return cls.from_pretrained(d, dtype=dtype, attn_implementation="eager").to(a.device).eval()
        except Exception as e:  # the VL fixture needs the conditional-generation class
            errs.append(f"{cls.__name__}: {e}")
    raise RuntimeError("; ".join(errs))


def logits_of(m, ids):
    with torch.no_grad():
        return m(input_ids=torch.tensor([ids], device=a.device), use_cache=False).logits[0].float().cpu().numpy()


for name in sorted(os.listdir(a.root)):
    d = os.path.join(a.root, name)
    if not os.path.isfile(os.path.join(d, "prompt.json")):
        continue
    p = json.load(open(os.path.join(d, "prompt.json")))
    ids, greedy, V = p["ids"], p["greedy"], p["vocab_size"]
    ref = np.fromfile(os.path.join(d, "logits.f32"), dtype=np.float32).reshape(len(ids), V)
    try:
        m = load(d, torch.bfloat16)
    except Exception as e:
        print(f"{name:20s} could not load in bf16: {e}")
        continue
    lg = logits_of(m, ids)[:, :V]
    rows = np.linalg.norm(lg - ref, axis=1) / np.maximum(np.linalg.norm(ref, axis=1), 1e-30)
    tot = np.linalg.norm(lg - ref) / np.linalg.norm(ref)
    am = int((lg.argmax(1) == ref.argmax(1)).sum())
    seq, first = list(ids), -1
    for t in range(len(greedy)):
        nxt = int(logits_of(m, seq)[-1, :V].argmax())
        if nxt != greedy[t]:
            first = t
            break
        seq.append(nxt)
    print(f"{name:20s} HF bf16 vs HF fp32: logits rel-L2 {tot:.2e} (worst position {rows.max():.2e}), argmax equal at "
          f"{am}/{len(ids)}, greedy {'identical (%d tokens)' % len(greedy) if first < 0 else 'differs at new token %d' % first}")
