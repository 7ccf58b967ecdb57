// Shared helpers of the real-client server tests. Environment (set by tests/test_server_http.c):
//   FD_URL       http://127.0.0.1:PORT          FD_MODEL_NAME  the served model id
//   FD_BIN       the flashdelta binary          FD_MODEL_DIR   the fixture model directory
//   FD_TOKENIZER the tokenizer.json the server uses
// Expected outputs come from the CLI: `flashdelta tokenize` for the ids, `flashdelta generate` for the greedy ids,
// `flashdelta tokenize --decode` for the text. Loopback only; every loop is bounded.
import { spawnSync } from "node:child_process";
import OpenAI from "openai";

export const URL_BASE = process.env.FD_URL;
export const MODEL = process.env.FD_MODEL_NAME;
const BIN = process.env.FD_BIN, MODEL_DIR = process.env.FD_MODEL_DIR, TOK = process.env.FD_TOKENIZER;
if (!URL_BASE || !URL_BASE.startsWith("http://127.0.0.1:")) throw new Error("FD_URL must be a loopback URL");

// The fixture models name no eos id, so the server stops on ChatML's <|im_end|> (511) and <|endoftext|> (509);
// special tokens (509..511) are not part of the text (skip_special_tokens, as vLLM).
const EOS = new Set([509, 511]);
const SPECIAL = new Set([509, 510, 511]);

export const client = new OpenAI({ baseURL: `${URL_BASE}/v1`, apiKey: "unused", maxRetries: 0, timeout: 120000 });

let failures = 0;
export function check(cond, what) {
  if (!cond) {
    failures++;
    console.error(`    FAIL ${what}`);
  }
  return cond;
}
export function done(name) {
  console.log(`${name}: ${failures ? "FAILED" : "ok"} (${failures} failures)`);
  process.exit(failures ? 1 : 0);
}

function run(args, input) {
  const r = spawnSync(BIN, args, { input, encoding: "utf8", timeout: 60000, maxBuffer: 1 << 24 });
  if (r.status !== 0) throw new Error(`${BIN} ${args.join(" ")} failed: ${r.stderr}`);
  return r.stdout;
}

export function tokenize(text) {
  return run(["tokenize", TOK], text).trim().split(/\s+/).filter((s) => s.length).map(Number);
}

export function decode(ids) {
  return ids.length ? run(["tokenize", TOK, "--decode"], ids.join(" ")) : "";
}

export function chatml(messages) { // Qwen3's template for plain text turns, generation prompt added
  return messages.map((m) => `<|im_start|>${m.role}\n${m.content}<|im_end|>\n`).join("") + "<|im_start|>assistant\n";
}

// What the server must answer for prompt ids with greedy decoding and max_tokens n.
export function expected(ids, n) {
  const out = run(["generate", MODEL_DIR, "--ids", ids.join(","), "-n", String(n), "--ctx", "4096"])
    .trim().split(/\s+/).map(Number);
  let k = out.findIndex((t) => EOS.has(t));
  const finish = k >= 0 ? "stop" : "length";
  const kept = k >= 0 ? out.slice(0, k) : out;
  return { ids: out, text: decode(kept.filter((t) => !SPECIAL.has(t))), finish,
           completion_tokens: k >= 0 ? k + 1 : n };
}

export async function metrics() {
  const r = await fetch(`${URL_BASE}/metrics`);
  const m = {};
  for (const line of (await r.text()).split("\n")) {
    const g = /^flashdelta:([a-z_]+)\{model_name="[^"]*"\} (\S+)$/.exec(line);
    if (g) m[g[1]] = Number(g[2]);
  }
  return m;
}

// An admin route (the server runs with --admin-key $FD_ADMIN_KEY); the reset is queued, so wait until it is done.
export async function resetPrefixCache() {
  const before = (await metrics()).prefix_cache_resets_total;
  const r = await fetch(`${URL_BASE}/reset_prefix_cache`,
                        { method: "POST", headers: { Authorization: `Bearer ${process.env.FD_ADMIN_KEY}` } });
  check(r.status === 200, `reset_prefix_cache status ${r.status}`);
  for (let i = 0; i < 200 && (await metrics()).prefix_cache_resets_total <= before; i++)
    await new Promise((res) => setTimeout(res, 25));
}

// Collects a streamed completion or chat answer: text, finish_reason, usage, chunk count.
export async function collect(stream, chat) {
  let text = "", finish = null, usage = null, chunks = 0, role = null, first = null;
  for await (const c of stream) {
    chunks++;
    if (c.usage) usage = c.usage;
    for (const ch of c.choices) {
      const piece = chat ? ch.delta?.content ?? "" : ch.text ?? "";
      if (chat && ch.delta?.role) role = ch.delta.role;
      if (piece.length && first === null) first = performance.now();
      text += piece;
      if (ch.finish_reason) finish = ch.finish_reason;
    }
  }
  return { text, finish, usage, chunks, role, first };
}
