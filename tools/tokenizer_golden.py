#!/usr/bin/env python3
"""Expected ids from Hugging Face `tokenizers` (Python), and the encode benchmark beside HF.

  python3 tools/tokenizer_golden.py check  QWEN3_TOKENIZER_JSON          # compare with the committed ids
  python3 tools/tokenizer_golden.py write  QWEN3_TOKENIZER_JSON          # (re)write tests/data/tokenizer/*.ids.gz
  python3 tools/tokenizer_golden.py bench  QWEN3_TOKENIZER_JSON FLASHDELTA_BIN
  python3 tools/tokenizer_golden.py chat   MODEL_DIR                     # chat template strings via transformers
  python3 tools/tokenizer_golden.py chat-write TOKENIZER_CONFIG_JSON     # write chat_cases.json with jinja2 directly

The committed ids were written by tools/tokenizer_golden.js (HF's Node bindings, same Rust crate); `check` is the
cross-check that the Python package gives the same ids. `bench` runs HF single-threaded (RAYON_NUM_THREADS=1) and
`flashdelta tokenize --bench` on the same corpus text, one after the other in the same run.
"""
import gzip
import json
import os
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("RAYON_NUM_THREADS", "1")  # before tokenizers is imported
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "tokenizer")


def corpus():
    with gzip.open(os.path.join(DATA, "corpus.jsonl.gz"), "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def load(spec):
    from tokenizers import Tokenizer
    if spec.endswith(".gz"):
        with gzip.open(spec, "rt", encoding="utf-8") as f:
            return Tokenizer.from_str(f.read())
    return Tokenizer.from_file(spec)


def tokenizers_list(qwen3):
    out = [("qwen3", qwen3), ("synth_a", os.path.join(DATA, "synth_a.json.gz")),
           ("synth_b", os.path.join(DATA, "synth_b.json.gz")), ("synth_c", os.path.join(DATA, "synth_c.json.gz")),
           ("synth_d", os.path.join(DATA, "synth_d.json.gz"))]
    # The other real tokenizers of `make tokenizer-data`, when present next to Qwen3's.
    third_party = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(qwen3))))
    for name in ("llama3", "gpt4o", "deepseek_v3"):
        p = os.path.join(third_party, "tokenizer-" + name, "models", "tokenizer.json")
        if os.path.exists(p):
            out.append((name, p))
    return out


def encode_all(tok, docs):
    return [tok.encode(d["text"], add_special_tokens=False).ids for d in docs]


def check_or_write(qwen3, write):
    import tokenizers
    docs = corpus()
    ok = True
    for name, spec in tokenizers_list(qwen3):
        ids = encode_all(load(spec), docs)
        path = os.path.join(DATA, name + ".ids.gz")
        if write:
            with gzip.GzipFile(path, "wb", mtime=0) as f:
                f.write(("\n".join(" ".join(map(str, x)) for x in ids) + "\n").encode())
            print("wrote", path)
            continue
        with gzip.open(path, "rt") as f:
            want = [[int(v) for v in line.split()] for line in f.read().split("\n")[: len(docs)]]
        bad = [d["name"] for d, a, b in zip(docs, ids, want) if a != b]
        n = sum(len(x) for x in ids)
        print("tokenizers %s (Python) vs committed %s: %d documents, %d ids, %d differ %s" %
              (tokenizers.__version__, name, len(docs), n, len(bad), bad[:5]))
        ok = ok and not bad
    return ok


def bench(qwen3, binary):
    import tokenizers
    docs = corpus()
    text = "".join(d["text"] for d in docs)
    nbytes = len(text.encode())
    with tempfile.NamedTemporaryFile("w", encoding="utf-8", newline="", suffix=".txt", delete=False) as f:
        f.write(text)
        path = f.name
    for name, spec in tokenizers_list(qwen3):
        tok = load(spec)
        best = 1e9
        for _ in range(3):
            t0 = time.perf_counter()
            n = len(tok.encode(text, add_special_tokens=False).ids)
            best = min(best, time.perf_counter() - t0)
        best_docs = 1e9
        for _ in range(2):
            t0 = time.perf_counter()
            for d in docs:
                tok.encode(d["text"], add_special_tokens=False)
            best_docs = min(best_docs, time.perf_counter() - t0)
        print("%s: HF tokenizers %s encode: %.2f MB/s whole text (%d bytes -> %d tokens), %.2f MB/s per document, "
              "1 thread" % (name, tokenizers.__version__, nbytes / best / 1e6, nbytes, n, nbytes / best_docs / 1e6))
        tj = spec
        if spec.endswith(".gz"):
            tj = path + "." + name + ".json"
            with gzip.open(spec, "rb") as src, open(tj, "wb") as dst:
                dst.write(src.read())
        out = subprocess.run([binary, "tokenize", tj, "--bench", path, "--repeat", "5"], capture_output=True, text=True)
        print("%s: %s" % (name, (out.stdout + out.stderr).strip()))
        ids = subprocess.run([binary, "tokenize", tj], input=text.encode(), capture_output=True).stdout.split()
        print("%s: flashdelta ids on the whole text %s HF's" %
              (name, "==" if [int(x) for x in ids] == tok.encode(text, add_special_tokens=False).ids else "!="))


def chat(model_dir):
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(model_dir)
    with open(os.path.join(DATA, "chat_cases.json"), encoding="utf-8") as f:
        cases = json.load(f)
    bad = 0
    for c in cases:
        kw = {} if c.get("enable_thinking") is None else {"enable_thinking": c["enable_thinking"]}
        s = tok.apply_chat_template(c["messages"], tokenize=False, add_generation_prompt=c["add_generation_prompt"],
                                    **kw)
        if s != c["expected"]:
            bad += 1
            print("chat case %s differs:\n%r\n%r" % (c["name"], s, c["expected"]))
    print("chat template via transformers: %d cases, %d differ" % (len(cases), bad))


CHAT_CASES = [
    ("system_user", [("system", "You are helpful."), ("user", "Hi!")], True, None),
    ("user_no_think", [("user", "2+2?")], True, False),
    ("user_think_on", [("user", "2+2?")], True, True),
    ("user_no_prompt", [("user", "Hello")], False, None),
    ("multi_turn_think_in_content", [("system", "S"), ("user", "q1"), ("assistant", "<think>\nr1\n</think>\n\na1"),
                                     ("user", "q2")], True, None),
    ("assistant_last", [("user", "q"), ("assistant", "<think>\n\nwhy\n\n</think>\n\nbecause")], False, None),
    ("assistant_last_plain", [("user", "q"), ("assistant", "\n\nplain answer")], False, None),
    ("reasoning_field", [("user", "q"), {"role": "assistant", "content": "\nans", "reasoning_content": "\nthought\n"},
                         ("user", "q2"), {"role": "assistant", "content": "a2", "reasoning_content": "r2"}], False, None),
    ("tools", [("user", "weather?"), ("assistant", "calling"), ("tool", "sunny"), ("tool", "22C"),
               ("assistant", "<think>ok</think>It is sunny."), ("user", "<tool_response>x</tool_response>"),
               ("assistant", "done")], True, False),
    ("second_system", [("system", "A"), ("user", "u"), ("system", "B"), ("user", "v")], True, None),
    ("unicode", [("user", "\u4f60\u597d \U0001F44B\U0001F3FD e\u0301 \r\n tabs\t")], True, None),
    ("assistant_between_two_thinks", [("user", "q"), ("assistant", "<think>a</think>b<think>c</think>d")], False, None),
]


def chat_write(config_path):
    import jinja2
    import jinja2.sandbox
    from jinja2.ext import loopcontrols
    with open(config_path, encoding="utf-8") as f:
        tmpl_src = json.load(f)["chat_template"]
    # transformers' settings for chat templates
    env = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = lambda x, **kw: json.dumps(x, ensure_ascii=False, **kw)
    tmpl = env.from_string(tmpl_src)
    out = []
    for name, msgs, gen, think in CHAT_CASES:
        msgs = [m if isinstance(m, dict) else {"role": m[0], "content": m[1]} for m in msgs]
        kw = {} if think is None else {"enable_thinking": think}
        out.append({"name": name, "messages": msgs, "add_generation_prompt": gen, "enable_thinking": think,
                    "expected": tmpl.render(messages=msgs, add_generation_prompt=gen, **kw)})
    with open(os.path.join(DATA, "chat_cases.json"), "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)
    print("wrote %d chat cases" % len(out))


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd in ("check", "write"):
        sys.exit(0 if check_or_write(sys.argv[2], cmd == "write") else 1)
    elif cmd == "bench":
        bench(sys.argv[2], sys.argv[3])
    elif cmd == "chat":
        chat(sys.argv[2])
    elif cmd == "chat-write":
        chat_write(sys.argv[2])
