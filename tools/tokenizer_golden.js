#!/usr/bin/env node
// Expected ids from Hugging Face `tokenizers` (the npm package `tokenizers`, HF's own Node bindings of the same
// Rust crate as the Python package). tools/tokenizer_golden.py does the same in Python on the GPU machine and
// checks that both agree.
//
//   npm install --prefix /tmp/hf tokenizers@0.23.2
//   NODE_PATH=/tmp/hf/node_modules node tools/tokenizer_golden.js TOKENIZER.json[.gz] CORPUS.jsonl.gz OUT.ids.gz
//
// Run for qwen3, llama3, gpt4o, deepseek_v3 (third_party/tokenizer-<name>/models/tokenizer.json, `make tokenizer-data`)
// and tests/data/tokenizer/synth_{a,b}.json.gz; OUT is tests/data/tokenizer/<name>.ids.gz.
// OUT: one line per corpus document: its ids separated by spaces. Also checks decode(encode(x)) == x and reports.
const fs = require("fs");
const zlib = require("zlib");
const os = require("os");
const path = require("path");
const { Tokenizer } = require("tokenizers");

function readMaybeGz(p) {
  const b = fs.readFileSync(p);
  return p.endsWith(".gz") ? zlib.gunzipSync(b).toString("utf8") : b.toString("utf8");
}

async function main() {
  const [tokPath, corpusPath, outPath] = process.argv.slice(2);
  let tokFile = tokPath;
  if (tokPath.endsWith(".gz")) {
    tokFile = path.join(os.tmpdir(), "golden-" + process.pid + ".json");
    fs.writeFileSync(tokFile, readMaybeGz(tokPath));
  }
  const tok = Tokenizer.fromFile(tokFile);
  const docs = readMaybeGz(corpusPath).split("\n").filter((l) => l.length).map((l) => JSON.parse(l));
  const lines = [];
  let bad = 0, n = 0;
  for (const d of docs) {
    const enc = await tok.encode(d.text, null, { addSpecialTokens: false });
    const ids = enc.getIds();
    n += ids.length;
    lines.push(ids.join(" "));
    const back = await tok.decode(ids, false);
    if (back !== d.text) {
      bad++;
      if (bad < 5) console.error("decode differs for " + d.name);
    }
  }
  fs.writeFileSync(outPath, zlib.gzipSync(Buffer.from(lines.join("\n") + "\n"), { level: 9 }));
  console.log(`${tokPath}: ${docs.length} documents, ${n} ids, decode(encode(x)) != x for ${bad}`);
}
main();
