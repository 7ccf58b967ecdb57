"""make_fixtures.py's file helpers: hashes, safetensors listing and reading, per-expert <-> fused expert
layouts, sharded writes and state comparison (split out of tools/make_fixtures.py; that tool imports these
back)."""
import hashlib
import json
import os
import re

import torch


# ----------------------------------------------------------------------------------------------------------
# files


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for b in iter(lambda: f.read(1 << 20), b""):
            h.update(b)
    return h.hexdigest()


def weight_files(d):
    return sorted(f for f in os.listdir(d) if f.endswith(".safetensors"))


def list_tensors(d):
    from safetensors import safe_open
    rows = []
    for f in weight_files(d):
        with safe_open(os.path.join(d, f), framework="pt") as sf:
            for k in sf.keys():
                try:
                    sl = sf.get_slice(k)
                    dt, shape = str(sl.get_dtype()), list(sl.get_shape())
                except Exception:  # noqa: BLE001
                    t = sf.get_tensor(k)
                    dt, shape = str(t.dtype).replace("torch.", ""), list(t.shape)
                rows.append({"name": k, "dtype": dt, "shape": shape, "file": f})
    rows.sort(key=lambda r: r["name"])
    return rows


def read_state(d):
    from safetensors.torch import load_file
    sd = {}
    for f in weight_files(d):
        sd.update(load_file(os.path.join(d, f)))
    return sd


def expert_layout_of(keys):
    per = any(re.search(r"mlp\.experts\.\d+\.", k) for k in keys)
    fused = any(k.endswith("mlp.experts.gate_up_proj") for k in keys)
    return "per_expert" if per and not fused else "fused" if fused and not per else "mixed" if per else "none"


def to_per_expert(sd):
    out = {}
    for k, v in sd.items():
        if k.endswith("mlp.experts.gate_up_proj"):
            pre = k[: -len("gate_up_proj")]
            E, twoI, _ = v.shape
            I = twoI // 2
            for e in range(E):
                out[f"{pre}{e}.gate_proj.weight"] = v[e, :I].clone().contiguous()
                out[f"{pre}{e}.up_proj.weight"] = v[e, I:].clone().contiguous()
        elif k.endswith("mlp.experts.down_proj"):
            pre = k[: -len("down_proj")]
            for e in range(v.shape[0]):
                out[f"{pre}{e}.down_proj.weight"] = v[e].clone().contiguous()
        else:
            out[k] = v
    return out


def to_fused(sd):
    out, groups = {}, {}
    for k, v in sd.items():
        m = re.match(r"(.*mlp\.experts\.)(\d+)\.(gate_proj|up_proj|down_proj)\.weight$", k)
        if m:
            groups.setdefault(m.group(1), {}).setdefault(m.group(3), {})[int(m.group(2))] = v
        else:
            out[k] = v
    for pre, parts in groups.items():
        E = len(parts["gate_proj"])
        gate = torch.stack([parts["gate_proj"][e] for e in range(E)])
        up = torch.stack([parts["up_proj"][e] for e in range(E)])
        out[pre + "gate_up_proj"] = torch.cat([gate, up], dim=1).contiguous()
        out[pre + "down_proj"] = torch.stack([parts["down_proj"][e] for e in range(E)]).contiguous()
    return out


def save_file_pt(sd, path):
    from safetensors.torch import save_file
    save_file({k: v.detach().contiguous().clone() for k, v in sd.items()}, path, metadata={"format": "pt"})


def write_sharded(sd, d, n_shards):
    keys = sorted(sd)
    total = sum(sd[k].numel() * sd[k].element_size() for k in keys)
    budget = total / n_shards
    shards, cur, cur_b = [], [], 0
    for k in keys:
        b = sd[k].numel() * sd[k].element_size()
        if cur and cur_b + b > budget * 1.02 and len(shards) < n_shards - 1:
            shards.append(cur)
            cur, cur_b = [], 0
        cur.append(k)
        cur_b += b
    shards.append(cur)
    assert len(shards) == n_shards, f"got {len(shards)} shards"
    wmap = {}
    for i, ks in enumerate(shards):
        fn = f"model-{i + 1:05d}-of-{n_shards:05d}.safetensors"
        save_file_pt({k: sd[k] for k in ks}, os.path.join(d, fn))
        for k in ks:
            wmap[k] = fn
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": dict(sorted(wmap.items()))}, f, indent=2)
        f.write("\n")


def load_pretrained(cls, d):
    kw = dict(attn_implementation="eager", output_loading_info=True)
    try:
        m, info = cls.from_pretrained(d, dtype=torch.float32, **kw)
    except TypeError:
        m, info = cls.from_pretrained(d, torch_dtype=torch.float32, **kw)
    m = m.to(torch.float32).eval()
    info = {k: sorted(map(str, v)) if isinstance(v, (list, set, tuple)) else str(v) for k, v in info.items()}
    return m, info


def compare_state(ref_model, other_model, prefix_map=None):
    a = ref_model.state_dict()
    b = other_model.state_dict()
    if prefix_map:
        b = {prefix_map(k): v for k, v in b.items()}
    missing = sorted(k for k in a if k not in b)
    extra = sorted(k for k in b if k not in a)
    maxdiff = 0.0
    for k in a:
        if k in b and a[k].shape == b[k].shape:
            maxdiff = max(maxdiff, float((a[k].float() - b[k].float()).abs().max()) if a[k].numel() else 0.0)
        elif k in b:
            missing.append(k + f" (shape {tuple(a[k].shape)} vs {tuple(b[k].shape)})")
    return {"params_missing_in_loaded": missing[:50], "params_extra_in_loaded": extra[:50],
            "param_maxabs_diff": maxdiff}
