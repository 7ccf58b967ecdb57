#!/usr/bin/env node
// Expected decode strings from HF `tokenizers` (Node bindings) for tests/data/tokenizer/decode_cases.json: runs of
// byte tokens that are not valid UTF-8, broken by added tokens, with and without skip_special_tokens.
//   NODE_PATH=/tmp/hf/node_modules node tools/tokenizer_decode_golden.js
// The synthetic tokenizers number their one-byte tokens by byte value (tools/tokenizer_synth.py).
const fs = require("fs");
const zlib = require("zlib");
const os = require("os");
const path = require("path");
const { Tokenizer } = require("tokenizers");

const DATA = path.join(__dirname, "..", "tests", "data", "tokenizer");
const TEXTS = ["x \u00e9t\u00e9 y<|endoftext|>\u4f60\u597d <|im_start|>user\nhi\u{1F44B}\u{1F3FD}<|im_end|> word <sep> \ufb01x",
               "<think>\n\n</think>\n\nok"];

async function main() {
  const out = [];
  for (const name of ["synth_a", "synth_b", "synth_c", "synth_d"]) {
    const file = path.join(os.tmpdir(), "decode-golden-" + name + ".json");
    fs.writeFileSync(file, zlib.gunzipSync(fs.readFileSync(path.join(DATA, name + ".json.gz"))));
    const tok = Tokenizer.fromFile(file);
    const eot = tok.tokenToId("<|endoftext|>");
    const seqs = [];
    for (const t of TEXTS) seqs.push((await tok.encode(t, null, { addSpecialTokens: false })).getIds());
    seqs.push([0xe4, 0xbd, eot, 0xa0, 0x61]);       // a cut CJK char on both sides of an added token
    seqs.push([0xf0, 0x9f, 0x91, 0x8b, eot]);       // a whole emoji in bytes
    seqs.push([0xff, 0x61, 0xc3, eot, 0xc3, 0xa9]); // invalid bytes, a lone lead byte, then a whole char
    seqs.push([eot, eot, 0x80]);
    for (const ids of seqs)
      for (const skip of [false, true])
        out.push({ tokenizer: name, ids, skip_special: skip, expected: await tok.decode(ids, skip) });
  }
  fs.writeFileSync(path.join(DATA, "decode_cases.json"), JSON.stringify(out, null, 0).replace(/\},\{/g, "},\n{"));
  console.log(out.length + " decode cases");
}
main();
