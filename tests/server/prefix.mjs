// Prefix-cache counters through the public API (server started with --prefix-block 16 --prefix-checkpoint 64):
// cold computes every prompt token; warm computes only the uncached tail and returns the same tokens; a prompt that
// shares a prefix hits up to the last snapshot inside the shared part; reset makes it cold again; a second chat turn
// reuses the first turn.
import { readFileSync } from "node:fs";
import { check, chatml, client, done, expected, metrics, MODEL, resetPrefixCache, tokenize } from "./common.mjs";

const B = 16, CK = 64, N = 8;
const ids = JSON.parse(readFileSync(`${process.env.FD_MODEL_DIR}/prompt.json`, "utf8")).ids; // 200 ids
const want = expected(ids, N);

async function run(prompt, label) {
  const m0 = await metrics();
  const r = await client.completions.create({ model: MODEL, prompt, max_tokens: N, temperature: 0 });
  const m1 = await metrics();
  const d = (k) => m1[k] - m0[k];
  const res = { text: r.choices[0].text, cached: r.usage.prompt_tokens_details.cached_tokens,
                computed: d("prefill_computed_tokens_total"), hits: d("prefix_cache_hits_total"),
                queries: d("prefix_cache_queries_total"), prompt: r.usage.prompt_tokens };
  console.log(`    ${label}: prompt ${res.prompt} cached ${res.cached} computed ${res.computed} hits ${res.hits}`);
  check(res.queries === res.prompt && res.hits === res.cached && res.computed === res.prompt - res.cached,
        `${label}: counters ${JSON.stringify(res)}`);
  return res;
}

await resetPrefixCache();
const cold = await run(ids, "cold");
check(cold.cached === 0 && cold.computed === ids.length, "cold run computes everything");
check(cold.text === want.text, "cold run text equals flashdelta generate");
const warm = await run(ids, "warm");
const last = Math.floor((ids.length - 1) / B) * B; // the last block boundary before the final prompt token
check(warm.cached === last && warm.computed === ids.length - last, `warm run computes only the tail (${warm.cached})`);
check(warm.text === cold.text, "warm run returns the same tokens");

// shares the first 130 tokens: the snapshot at 128 (every 64) is the deepest usable point
const mixed = ids.slice(0, 130).concat(ids.slice(130).map((t) => (t + 1) % 509));
const part = await run(mixed, "shared prefix");
check(part.cached === 2 * CK, `shared prefix hits up to the snapshot at 128 (${part.cached})`);
check(part.text === expected(mixed, N).text, "shared-prefix run equals flashdelta generate");

await resetPrefixCache();
const m = await metrics();
check(m.prefix_cache_blocks === 0 && m.prefix_cache_state_snapshots === 0 && m.prefix_cache_usage_bytes === 0,
      "reset empties the cache");
const again = await run(ids, "after reset");
check(again.cached === 0 && again.computed === ids.length && again.text === cold.text, "reset makes it cold");

// multi-turn chat: turn 2 repeats turn 1's prompt and answer
const turn1 = [{ role: "user", content: "Errors should never pass silently. Unless explicitly silenced. ".repeat(3) }];
const r1 = await client.chat.completions.create({ model: MODEL, messages: turn1, max_tokens: 24, temperature: 0 });
const answer = r1.choices[0].message.content;
const p1 = r1.usage.prompt_tokens;
const turn2 = turn1.concat([{ role: "assistant", content: answer }, { role: "user", content: "And then?" }]);
const m2 = await metrics();
const r2 = await client.chat.completions.create({ model: MODEL, messages: turn2, max_tokens: 8, temperature: 0 });
const m3 = await metrics();
const cached2 = r2.usage.prompt_tokens_details.cached_tokens;
console.log(`    chat turn 1: prompt ${p1}; turn 2: prompt ${r2.usage.prompt_tokens} cached ${cached2}`);
check(cached2 >= Math.floor((p1 - 1) / B) * B && cached2 > 0, `turn 2 reuses turn 1 (cached ${cached2})`);
check(m3.prefill_computed_tokens_total - m2.prefill_computed_tokens_total === r2.usage.prompt_tokens - cached2,
      "turn 2 computes only what is not cached");
check(r2.choices[0].message.content === expected(tokenize(chatml(turn2)), 8).text,
      "turn 2 (restored state) equals flashdelta generate");
done("prefix.mjs");
