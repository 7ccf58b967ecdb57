#!/usr/bin/env python3
"""Builds the tokenizer golden corpus (tests/data/tokenizer/corpus.jsonl.gz) from real text that Debian ships
under permissive licences, so anyone can rebuild it:

  apt-get download unicode-cldr-core unicode-data && for f in *.deb; do dpkg -x $f x; done
  python3 tools/tokenizer_corpus.py x/usr/share/unicode /usr/lib/python3.11 tests/data/tokenizer/corpus.jsonl.gz

Sources (and why):
  - CLDR 41 locale data (Unicode licence): real names/phrases in Arabic, Devanagari, CJK, Cyrillic, Thai, ...
  - CLDR emoji annotations: emoji (with skin-tone modifiers, ZWJ sequences) next to their names in many languages.
  - Unicode 15 emoji-test.txt: every emoji sequence, including modifier and ZWJ ones.
  - Unicode 15 NormalizationTest.txt: decoded into real strings, it exercises NFC with combining marks.
  - Python 3.11 stdlib sources (PSF licence): source code, indentation runs, digits, English contractions; one copy
    with CRLF line ends.
  - tools/tokenizer_stress.txt (ours): special-token strings, mixed-case contractions, whitespace/CRLF runs.
Each source is cut at line boundaries into documents of at most DOC_MAX bytes; each document is one golden case.
"""
import bz2
import gzip
import json
import os
import re
import sys
import xml.etree.ElementTree as ET

DOC_MAX = 6000

LOCALES = ["ar", "hi", "zh", "ja", "ko", "ru", "uk", "el", "he", "th", "ta", "bn", "fa", "vi", "tr", "de", "fr",
           "es", "am", "ka", "hy", "my", "km", "ur", "mr", "sr", "bg", "pl", "zh_Hant", "yue", "ml", "te", "si", "lo"]
ANNOT = ["ar", "hi", "ja", "ru", "zh", "ko", "en", "fr"]
PY_FILES = ["json/decoder.py", "json/encoder.py", "textwrap.py", "argparse.py", "string.py", "base64.py",
            "heapq.py", "bisect.py", "colorsys.py", "shlex.py", "fractions.py", "calendar.py"]


def xml_text(path, cap):
    out, n = [], 0
    for el in ET.parse(path).iter():
        t = (el.text or "").strip()
        if not t:
            continue
        line = t
        if el.get("type"):
            line = el.get("type") + ": " + t
        out.append(line)
        n += len(line.encode())
        if n > cap:
            break
    return "\n".join(out) + "\n"


def annotations(path, cap):
    out, n = [], 0
    for el in ET.parse(path).iter("annotation"):
        line = "%s %s" % (el.get("cp"), el.text or "")
        out.append(line)
        n += len(line.encode())
        if n > cap:
            break
    return "\n".join(out) + "\n"


def norm_test(path, cap):
    out, n = [], 0
    with bz2.open(path, "rt", encoding="utf-8") as f:
        for line in f:
            line = line.split("#")[0].strip()
            if not line or line.startswith("@"):
                continue
            cols = line.split(";")[:5]
            s = " ".join("".join(chr(int(h, 16)) for h in c.split()) for c in cols)
            out.append(s)
            n += len(s.encode())
            if n > cap:
                break
    return "\n".join(out) + "\n"


def split_docs(name, text):
    docs, cur, size = [], [], 0
    for line in text.splitlines(keepends=True):
        b = len(line.encode())
        if cur and size + b > DOC_MAX:
            docs.append("".join(cur))
            cur, size = [], 0
        cur.append(line)
        size += b
    if cur:
        docs.append("".join(cur))
    return [{"name": "%s#%d" % (name, i), "text": d} for i, d in enumerate(docs)]


def main():
    uni, pylib, out = sys.argv[1], sys.argv[2], sys.argv[3]
    here = os.path.dirname(os.path.abspath(__file__))
    docs = []
    with open(os.path.join(here, "tokenizer_stress.txt"), encoding="utf-8", newline="") as f:
        stress = f.read()
    docs += split_docs("stress", stress)
    for loc in LOCALES:
        docs += split_docs("cldr-" + loc, xml_text(os.path.join(uni, "cldr/common/main", loc + ".xml"), 24000))
    for loc in ANNOT:
        docs += split_docs("annot-" + loc, annotations(os.path.join(uni, "cldr/common/annotations", loc + ".xml"),
                                                       16000))
    with open(os.path.join(uni, "emoji/emoji-test.txt"), encoding="utf-8") as f:
        emoji = f.read()
    docs += split_docs("emoji-test", emoji[len(emoji) // 3: len(emoji) // 3 + 120000])
    docs += split_docs("nfc-test", norm_test(os.path.join(uni, "NormalizationTest.txt.bz2"), 60000))
    for i, p in enumerate(PY_FILES):
        with open(os.path.join(pylib, p), encoding="utf-8") as f:
            src = f.read()
        if i % 3 == 0:
            src = src.replace("\n", "\r\n")
        docs += split_docs("py-" + p, src)
    # Whole-document cases, a few larger than a typical chunk.
    docs.append({"name": "stress-x3", "text": stress * 3})
    docs.append({"name": "empty", "text": ""})
    total = sum(len(d["text"].encode()) for d in docs)
    with gzip.GzipFile(out, "wb", mtime=0) as f:
        for d in docs:
            f.write((json.dumps(d, ensure_ascii=False) + "\n").encode())
    print("%d documents, %d bytes of text" % (len(docs), total))


if __name__ == "__main__":
    main()
