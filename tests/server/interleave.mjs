// Chunked prefill does not stall running streams: while stream A decodes, request B arrives with a long prompt. With
// --prefill-chunk 64 the scheduler runs B's prompt 64 tokens per step between A's decode tokens, so A's longest
// pause during B's prefill must be a small fraction of B's whole prefill time.
import { check, done, metrics, MODEL, URL_BASE } from "./common.mjs";

const post = (path, body) => fetch(`${URL_BASE}${path}`, { method: "POST", headers: { "Content-Type": "application/json" },
                                                          body: JSON.stringify(body) });
const m0 = await metrics();
const a = await post("/v1/completions", { model: MODEL, prompt: "x", max_tokens: 3000, ignore_eos: true, stream: true,
                                          temperature: 0 });
const reader = a.body.getReader();
const stamps = [];
let stop = false;
const pump = (async () => {
  while (!stop) {
    const { done: end } = await reader.read();
    if (end) break;
    stamps.push(performance.now());
  }
})();
while (stamps.length < 20) await new Promise((r) => setTimeout(r, 5)); // A is decoding
const ids = Array.from({ length: 3000 }, (_, i) => (i * 37) % 500);
const tb0 = performance.now();
const b = await (await post("/v1/completions", { model: MODEL, prompt: ids, max_tokens: 1, temperature: 0 })).json();
const tb1 = performance.now();
stop = true;
await reader.cancel();
await pump.catch(() => {});
const during = stamps.filter((t) => t > tb0 && t < tb1);
let gap = 0;
for (let i = 1; i < during.length; i++) gap = Math.max(gap, during[i] - during[i - 1]);
gap = Math.max(gap, during.length ? during[0] - tb0 : tb1 - tb0);
const m1 = await metrics();
const chunks = m1.scheduler_prefill_chunks_total - m0.scheduler_prefill_chunks_total;
console.log(`    B: 3000-token prompt in ${(tb1 - tb0).toFixed(0)} ms, ${chunks} prefill chunks; A streamed ` +
            `${during.length} chunks meanwhile, longest pause ${gap.toFixed(1)} ms`);
check(b.usage?.prompt_tokens === 3000, `B usage ${JSON.stringify(b.usage)}`);
check(chunks >= 3000 / 64, `prefill ran in budget-sized chunks (${chunks})`);
check(during.length >= 10 && gap < (tb1 - tb0) / 4, "A kept streaming during B's prefill");
done("interleave.mjs");
