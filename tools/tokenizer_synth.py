#!/usr/bin/env python3
"""Makes the synthetic tokenizer.json files that prove the C tokenizer is not tied to Qwen's vocabulary or regex.

  python3 tools/tokenizer_synth.py third_party/tokenizer-qwen3/models/tokenizer.json tests/data/tokenizer

Both keep the first K of Qwen3's merges (renumbered densely: the 256 byte tokens, then merge results in merge order)
and change everything else that HF lets a byte-level BPE change:
  synth_a: NFKC normalizer; Split(\\p{N}{1,3}) then a Llama-3 style Split, both Isolated; ByteLevel with
           add_prefix_space=true and use_regex=false; merges as "a b" strings; added tokens that are special,
           lstrip/rstrip, single_word, and a non-special normalized one whose content NFKC changes.
  synth_b: no normalizer; Split on the literal "\\n" MergedWithPrevious, then ByteLevel use_regex=true (the GPT-2
           pattern); ignore_merges=true; merges as ["a","b"] pairs; a Contiguous Split of digits.
  synth_c: NFD; the Split behaviours the others lack: MergedWithNext (literal " "), Removed (punctuation), an
           inverted Isolated split, then plain ByteLevel; an rstrip added token.
  synth_d: shaped like Qwen3.5's tokenizer (whose 248K-vocab file we cannot fetch here): NFC and its pre-tokenizer
           regex, which adds \\p{M} to the letter runs; Qwen's special tokens, numbered after the vocab.
"""
import gzip
import json
import os
import sys


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def base(src, k):
    merges = src["model"]["merges"][:k]
    merges = [m.split(" ") if isinstance(m, str) else m for m in merges]
    vocab = {}
    b2u = bytes_to_unicode()
    for b in range(256):
        vocab.setdefault(b2u[b], len(vocab))
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))
    return vocab, merges


def added(vocab, items):
    out = []
    for content, special, extra in items:
        d = {"id": len(vocab) + len(out), "content": content, "single_word": False, "lstrip": False, "rstrip": False,
             "normalized": not special, "special": special}
        d.update(extra)
        out.append(d)
    return out


def synth_a(src):
    vocab, merges = base(src, 20000)
    return {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": added(vocab, [
            ("<|endoftext|>", True, {}),
            ("<|im_start|>", True, {}),
            ("<|im_end|>", True, {"rstrip": True}),
            ("<mask>", True, {"lstrip": True}),
            ("<sep>", False, {"lstrip": True, "rstrip": True}),
            ("\ufb01x", False, {}),  # NFKC turns the ligature into "fix": matched on normalized text
            ("word", False, {"single_word": True}),
            ("<think>", False, {"normalized": False}),
        ]),
        "normalizer": {"type": "Sequence", "normalizers": [{"type": "NFKC"}]},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": "\\p{N}{1,3}"}, "behavior": "Isolated", "invert": False},
            {"type": "Split", "pattern": {"Regex":
                "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*"
                "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": False}]},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": [a + " " + b for a, b in merges]},
    }


def synth_b(src):
    vocab, merges = base(src, 12000)
    return {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": added(vocab, [("<|endoftext|>", True, {}), ("<pad>", True, {})]),
        "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"String": "\n"}, "behavior": "MergedWithPrevious", "invert": False},
            {"type": "Split", "pattern": {"Regex": "\\d+"}, "behavior": "Contiguous", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": True}]},
        "post_processor": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": True},
        "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "ignore_merges": True,
                  "vocab": vocab, "merges": merges},
    }


def synth_c(src):
    vocab, merges = base(src, 8000)
    return {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": added(vocab, [("<|endoftext|>", True, {"rstrip": True}), ("\u00e9t\u00e9", False, {})]),
        "normalizer": {"type": "NFD"},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"String": " "}, "behavior": "MergedWithNext", "invert": False},
            {"type": "Split", "pattern": {"Regex": "\\p{P}+"}, "behavior": "Removed", "invert": False},
            {"type": "Split", "pattern": {"Regex": "\\p{L}+"}, "behavior": "Isolated", "invert": True},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}]},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": [a + " " + b for a, b in merges]},
    }


QWEN35_REGEX = ("(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}"
                "| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")


def synth_d(src):
    vocab, merges = base(src, 24000)
    specials = [(a["content"], a["special"], {}) for a in src["added_tokens"]]
    return {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": added(vocab, specials),
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": QWEN35_REGEX}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}]},
        "post_processor": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
        "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": merges},
    }


def main():
    with open(sys.argv[1], encoding="utf-8") as f:
        src = json.load(f)
    for name, fn in (("synth_a", synth_a), ("synth_b", synth_b), ("synth_c", synth_c), ("synth_d", synth_d)):
        path = os.path.join(sys.argv[2], name + ".json.gz")
        with gzip.GzipFile(path, "wb", mtime=0) as f:
            f.write(json.dumps(fn(src), ensure_ascii=False).encode())
        print(path, os.path.getsize(path))


if __name__ == "__main__":
    main()
