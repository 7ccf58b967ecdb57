#!/usr/bin/env python3
"""Renders every chat template x message list of tests/data/chat_templates with HF transformers (the reference
for chat templates) and writes tests/data/chat_templates/expected_hf.json, which tests/test_jinja.c compares our
Jinja interpreter against byte for byte.

Run where transformers is installed (no model download: the templates are files in the repository):
    python3 tools/chat_template_golden.py            # writes tests/data/chat_templates/expected_hf.json
    python3 tools/chat_template_golden.py --check    # compares instead of writing; exit 1 on a difference

It uses transformers' own rendering function (render_jinja_template, the one apply_chat_template calls: its
ImmutableSandboxedEnvironment with trim_blocks/lstrip_blocks, its tojson, raise_exception and strftime_now), with
the context apply_chat_template builds: messages, tools, documents, add_generation_prompt, the tokenizer's special
tokens (templates.json "kwargs") and the case's chat_template_kwargs.
"""
import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "..", "tests", "data", "chat_templates")


def render_one(template, case, kwargs):
    import transformers
    from transformers.utils import chat_template_utils as ctu

    ctx = dict(kwargs)
    ctx.update(case.get("kwargs", {}))
    agp = case.get("add_generation_prompt", True)
    if hasattr(ctu, "render_jinja_template"):
        rendered, _ = ctu.render_jinja_template(
            conversations=[case["messages"]], tools=case.get("tools"), documents=case.get("documents"),
            chat_template=template, add_generation_prompt=agp, **ctx)
        return rendered[0]
    # older transformers: the compiled template apply_chat_template used
    compiled = ctu._compile_jinja_template(template)
    print(f"note: transformers {transformers.__version__} has no render_jinja_template", file=sys.stderr)
    return compiled.render(messages=case["messages"], tools=case.get("tools"), documents=case.get("documents"),
                           add_generation_prompt=agp, **ctx)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="compare with the committed file instead of writing it")
    args = ap.parse_args()
    import transformers

    templates = json.load(open(os.path.join(DATA, "templates.json"), encoding="utf-8"))
    cases = json.load(open(os.path.join(DATA, "cases.json"), encoding="utf-8"))
    out = {}
    for name, t in templates.items():
        template = open(os.path.join(DATA, t["file"]), encoding="utf-8").read()
        for case in cases:
            if "only" in case and name not in case["only"]:
                continue
            key = f"{name}/{case['name']}"
            try:
                out[key] = {"text": render_one(template, case, t["kwargs"])}
            except Exception as e:  # a template's raise_exception, or a Jinja error: both count as "an error"
                out[key] = {"error": f"{type(e).__name__}: {e}"}
    doc = {"transformers_version": transformers.__version__, "renderings": out}
    path = os.path.join(DATA, "expected_hf.json")
    if args.check:
        old = json.load(open(path, encoding="utf-8"))["renderings"]
        bad = [k for k in out if out[k] != old.get(k)]
        for k in bad:
            print(f"differs: {k}", file=sys.stderr)
        print(f"{len(out)} renderings, {len(bad)} differ")
        return 1 if bad else 0
    with open(path, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, indent=1)
        f.write("\n")
    n_err = sum(1 for v in out.values() if "error" in v)
    print(f"wrote {path}: {len(out)} renderings ({n_err} errors) with transformers {transformers.__version__}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
