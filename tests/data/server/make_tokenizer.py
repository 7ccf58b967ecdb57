#!/usr/bin/env python3
# Writes tests/data/server/tokenizer.json: a small byte-level BPE tokenizer for the fixture models (vocab 512, no
# tokenizer of their own). 256 byte tokens (id = byte value), a few English merges, and the ChatML special tokens at
# the top of the vocabulary. It is test input: the server and `flashdelta tokenize` must agree on it, nothing more.
import json, os

def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}

b2u = bytes_to_unicode()
vocab = {b2u[b]: b for b in range(256)}
# Merges: a tiny BPE training run over a fixed English text until the vocabulary fills ids 256..508, so that every
# id the model can emit (0..511) decodes. Deterministic: ties go to the pair seen first.
import codecs, collections, contextlib, io, re
with contextlib.redirect_stdout(io.StringIO()):
    import this
corpus = codecs.decode(this.s, "rot13") + " " + open(__file__).read()
words = collections.Counter()
for m in re.finditer(r" ?[A-Za-z]+| ?[0-9]+| ?[^\sA-Za-z0-9]+|\s+", corpus):
    words[tuple(b2u[b] for b in m.group(0).encode())] += 1
words = dict(words)
merges = []
while len(vocab) < 509:
    pairs = collections.Counter()
    for w, c in words.items():
        for a, b in zip(w, w[1:]):
            pairs[(a, b)] += c
    if not pairs:
        raise SystemExit("corpus too small for the vocabulary")
    (a, b), _ = max(pairs.items(), key=lambda kv: kv[1])
    merges.append(f"{a} {b}")
    vocab[a + b] = len(vocab)
    nw = {}
    for w, c in words.items():
        out, i = [], 0
        while i < len(w):
            if i + 1 < len(w) and w[i] == a and w[i + 1] == b:
                out.append(a + b)
                i += 2
            else:
                out.append(w[i])
                i += 1
        nw[tuple(out)] = nw.get(tuple(out), 0) + c
    words = nw
specials = [("<|endoftext|>", 509), ("<|im_start|>", 510), ("<|im_end|>", 511)]
assert len(vocab) == 509
for s, i in specials:
    vocab[s] = i
tok = {
    "version": "1.0",
    "truncation": None,
    "padding": None,
    "added_tokens": [{"id": i, "content": s, "single_word": False, "lstrip": False, "rstrip": False,
                      "normalized": False, "special": True} for s, i in specials],
    "normalizer": None,
    "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
    "post_processor": None,
    "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
    "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
              "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
              "vocab": vocab, "merges": merges},
}
out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tokenizer.json")
with open(out, "w") as f:
    json.dump(tok, f, ensure_ascii=False, indent=1)
print(out, len(vocab), "vocab entries,", len(merges), "merges")
