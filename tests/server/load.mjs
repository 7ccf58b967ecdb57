// Bounded load test: FD_CLIENTS concurrent streaming clients x FD_REQUESTS requests each (completions and chat
// alternating, greedy), every answer checked against `flashdelta generate`; fails past FD_TIME_LIMIT seconds.
import { check, chatml, client, collect, done, expected, MODEL, tokenize } from "./common.mjs";

const CLIENTS = Number(process.env.FD_CLIENTS || 32), REQS = Number(process.env.FD_REQUESTS || 4);
const LIMIT = Number(process.env.FD_TIME_LIMIT || 120);
const timer = setTimeout(() => {
  console.error(`    FAIL load test exceeded ${LIMIT} s`);
  process.exit(1);
}, LIMIT * 1000);

const texts = ["The Zen of Python, by Tim Peters", "Beautiful is better than ugly. Explicit is better than implicit.",
               "Namespaces are one honking great idea", "Sparse is better than dense. Readability counts. ".repeat(4)];
const cases = [];
for (let i = 0; i < texts.length; i++) {
  const chat = i % 2 === 1, n = 16 + 8 * i;
  const msgs = [{ role: "user", content: texts[i] }];
  cases.push({ chat, n, msgs, prompt: texts[i], want: expected(tokenize(chat ? chatml(msgs) : texts[i]), n) });
}

const ttft = [], lat = [];
let tokens = 0, bad = 0, ok = 0;
const t0 = performance.now();
async function worker(w) {
  for (let k = 0; k < REQS; k++) {
    const c = cases[(w + k) % cases.length];
    const t = performance.now();
    const args = { model: MODEL, max_tokens: c.n, temperature: 0, stream: true, stream_options: { include_usage: true } };
    const s = c.chat ? await collect(await client.chat.completions.create({ ...args, messages: c.msgs }), true)
                     : await collect(await client.completions.create({ ...args, prompt: c.prompt }));
    const good = s.text === c.want.text && s.finish === c.want.finish &&
                 s.usage?.completion_tokens === c.want.completion_tokens;
    if (!check(good, `client ${w} request ${k}: ${JSON.stringify(s.text)} (${s.finish}) != ${JSON.stringify(c.want.text)}`))
      bad++;
    else ok++;
    tokens += s.usage?.completion_tokens ?? 0;
    if (s.first !== null) ttft.push(s.first - t);
    lat.push(performance.now() - t);
  }
}
await Promise.all(Array.from({ length: CLIENTS }, (_, w) => worker(w)));
clearTimeout(timer);
const wall = (performance.now() - t0) / 1000;
const pct = (a, p) => (a.sort((x, y) => x - y), a[Math.min(a.length - 1, Math.floor(p * a.length))] ?? 0);
console.log(`    load: ${CLIENTS} clients x ${REQS} requests: ${ok} complete and correct, ${bad} wrong; ` +
            `${tokens} tokens in ${wall.toFixed(2)} s (${(tokens / wall).toFixed(0)} tok/s); ` +
            `TTFT p50 ${pct(ttft, 0.5).toFixed(1)} ms p99 ${pct(ttft, 0.99).toFixed(1)} ms; ` +
            `latency p50 ${pct(lat, 0.5).toFixed(1)} ms p99 ${pct(lat, 0.99).toFixed(1)} ms`);
check(ok === CLIENTS * REQS, "every response complete and correct");
done("load.mjs");
