"""train_tiny.py's data helpers: the tokenizer specials and split pattern, the source corpus split, the
tokenizer trainer and the held-out prompt picker (split out of tools/train_tiny.py; that tool and
tools/train_drafter.py use them through it)."""
import os
import random
import zlib

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|mask|>"]
# The Qwen2/Qwen3 pre-tokenizer split pattern.
QWEN_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
              r"|\s+(?!\S)|\s+")


def collect_sources(root, seed, max_train_bytes, val_per_mille):
    """Python files under root, in a seeded order, split by file. Returns (train_texts, val_texts, stats)."""
    paths = []
    for dp, dns, fns in os.walk(root):
        dns.sort()
        for fn in sorted(fns):
            if fn.endswith(".py"):
                paths.append(os.path.join(dp, fn))
    random.Random(seed).shuffle(paths)
    train, val, nb_train, nb_val, skipped = [], [], 0, 0, 0
    max_val_bytes = max_train_bytes * val_per_mille // 1000 + 1_000_000
    for p in paths:
        if nb_train >= max_train_bytes and nb_val >= max_val_bytes:
            break
        try:
            sz = os.path.getsize(p)
            if sz < 512 or sz > 200_000:
                skipped += 1
                continue
            with open(p, "rb") as f:
                text = f.read().decode("utf-8")
        except (OSError, UnicodeDecodeError):
            skipped += 1
            continue
        rel = os.path.relpath(p, root)
        if zlib.crc32(rel.encode()) % 1000 < val_per_mille:
            if nb_val < max_val_bytes:
                val.append(text)
                nb_val += len(text)
        elif nb_train < max_train_bytes:
            train.append(text)
            nb_train += len(text)
    stats = dict(root=root, files_seen=len(paths), train_files=len(train), val_files=len(val),
                 train_chars=nb_train, val_chars=nb_val, skipped=skipped,
                 split=f"validation = files whose crc32(relative path) % 1000 < {val_per_mille}")
    return train, val, stats


def train_tokenizer(texts, vocab_size, max_chars):
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, \
        trainers
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN_SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    sample, n = [], 0
    for t in texts:
        if n >= max_chars:
            break
        sample.append(t)
        n += len(t)
    trainer = trainers.BpeTrainer(vocab_size=vocab_size - len(SPECIALS), min_frequency=2, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), special_tokens=[])
    tok.train_from_iterator(sample, trainer=trainer, length=len(sample))
    # the specials go after the learned vocabulary, as in Qwen's tokenizers
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in SPECIALS])
    return tok, dict(tokenizer_train_chars=n, tokenizer_train_files=len(sample))


def pick_prompts(tok, val_texts, n, length, seed):
    """Held-out prompts: `length`-token windows of validation files, starting at a line start."""
    rng = random.Random(seed + 7)
    res = []
    for t in rng.sample(val_texts, min(len(val_texts), 200)):
        if len(res) == n:
            break
        lines = t.split("\n")
        if len(lines) < 40:
            continue
        start = rng.randrange(0, len(lines) - 30)
        text = "\n".join(lines[start:])
        ids = tok.encode(text, add_special_tokens=False).ids
        if len(ids) < length:
            continue
        ids = ids[:length]
        res.append(dict(ids=ids, text=tok.decode(ids), hf_encode_of_text=tok.encode(tok.decode(ids),
                                                                                    add_special_tokens=False).ids))
    return res
