// logprobs / top_logprobs (chat and completions, plain and streamed), logit_bias, penalties and min_p through the
// official openai client. Greedy host sampling must give `flashdelta generate`'s text; logit_bias +100 on one token
// must make every token that one; the reported logprobs are the model's (the chosen greedy token is the top one).
import { check, chatml, client, done, expected, MODEL, tokenize } from "./common.mjs";

const N = 12;
const msgs = [{ role: "user", content: "Tell me about the world." }];
const want = expected(tokenize(chatml(msgs)), N);

const r = await client.chat.completions.create({ model: MODEL, messages: msgs, max_tokens: N, temperature: 0,
                                                logprobs: true, top_logprobs: 3 });
const m = r.choices[0];
check(m.message.content === want.text, `greedy with logprobs ${JSON.stringify(m.message.content)} != ${JSON.stringify(want.text)}`);
const lp = m.logprobs?.content ?? [];
check(lp.length === want.completion_tokens - (want.finish === "stop" ? 1 : 0), `${lp.length} logprob entries`);
for (const e of lp) {
  check(e.logprob <= 0 && e.top_logprobs.length === 3 && Array.isArray(e.bytes), `entry ${JSON.stringify(e)}`);
  check(e.top_logprobs[0].token === e.token && Math.abs(e.top_logprobs[0].logprob - e.logprob) < 1e-6,
        `greedy token is the top one: ${JSON.stringify(e)}`);
  for (let k = 1; k < 3; k++) check(e.top_logprobs[k].logprob <= e.top_logprobs[k - 1].logprob, "top_logprobs sorted");
}

// streamed: the same entries, spread over the chunks
const s = await client.chat.completions.create({ model: MODEL, messages: msgs, max_tokens: N, temperature: 0,
                                                logprobs: true, top_logprobs: 3, stream: true });
let text = "", entries = [];
for await (const c of s)
  for (const ch of c.choices) {
    text += ch.delta?.content ?? "";
    entries.push(...(ch.logprobs?.content ?? []));
  }
check(text === want.text && JSON.stringify(entries) === JSON.stringify(lp), "streamed logprobs = plain");

// completions: logprobs N
const p = "hello the world, this is a test";
const wc = expected(tokenize(p), N);
const c = await client.completions.create({ model: MODEL, prompt: p, max_tokens: N, temperature: 0, logprobs: 2 });
const cl = c.choices[0].logprobs;
check(c.choices[0].text === wc.text, "completion text with logprobs");
check(cl && cl.tokens.length === cl.token_logprobs.length && cl.top_logprobs.length === cl.tokens.length &&
      cl.text_offset.length === cl.tokens.length && Object.keys(cl.top_logprobs[0] ?? {}).length <= 2,
      `completion logprobs ${JSON.stringify(cl)}`);

// logit_bias: +100 on one token makes it every token; -100 on the greedy first token moves it
const a = tokenize("e")[0];
const b = await client.completions.create({ model: MODEL, prompt: p, max_tokens: 6, temperature: 0,
                                           logit_bias: { [a]: 100 }, logprobs: 0 });
check(b.choices[0].text === "e".repeat(6), `logit_bias +100: ${JSON.stringify(b.choices[0].text)}`);
const first = wc.ids[0];
const b2 = await client.completions.create({ model: MODEL, prompt: p, max_tokens: 1, temperature: 0,
                                            logit_bias: { [first]: -100 }, logprobs: 1 });
check(b2.choices[0].logprobs.tokens.length === 1 && b2.choices[0].logprobs.tokens[0] !== c.choices[0].logprobs.tokens[0],
      `logit_bias -100 moves the first token: ${JSON.stringify(b2.choices[0].logprobs.tokens)}`);

// penalties and min_p: accepted, sampled, reproducible with a seed
for (const extra of [{ presence_penalty: 1.5 }, { frequency_penalty: 1.0 }, { repetition_penalty: 1.3 }, { min_p: 0.1 }]) {
  const q = { model: MODEL, prompt: p, max_tokens: N, temperature: 0.9, seed: 11, ...extra };
  const x = await client.completions.create(q), y = await client.completions.create(q);
  check(x.choices[0].text === y.choices[0].text && ["stop", "length"].includes(x.choices[0].finish_reason),
        `${JSON.stringify(extra)} reproducible`);
}
// a strong presence penalty under greedy decoding: no token repeats
const g = await client.completions.create({ model: MODEL, prompt: p, max_tokens: N, temperature: 0,
                                           presence_penalty: 2, logprobs: 0 });
const ids = g.choices[0].logprobs.tokens;
check(new Set(ids).size === ids.length || ids.length <= 1, `presence_penalty 2: repeats in ${JSON.stringify(ids)}`);

// n = 2: two sequences, seeds seed and seed + 1, in one response (usage counts both)
const q = { model: MODEL, prompt: p, max_tokens: N, temperature: 0.9 };
const two = await client.completions.create({ ...q, n: 2, seed: 5 });
const s5 = await client.completions.create({ ...q, seed: 5 }), s6 = await client.completions.create({ ...q, seed: 6 });
check(two.choices.length === 2 && two.choices[0].index === 0 && two.choices[1].index === 1, "n = 2: two choices");
check(two.choices[0].text === s5.choices[0].text && two.choices[1].text === s6.choices[0].text,
      `n = 2 choices are seeds 5 and 6: ${JSON.stringify(two.choices.map((c) => c.text))}`);
check(two.usage.completion_tokens === s5.usage.completion_tokens + s6.usage.completion_tokens &&
      two.usage.prompt_tokens === s5.usage.prompt_tokens, `n = 2 usage ${JSON.stringify(two.usage)}`);
const chat2 = await client.chat.completions.create({ model: MODEL, messages: msgs, max_tokens: N, temperature: 0, n: 2,
                                                    logprobs: true, top_logprobs: 3 });
check(chat2.choices.length === 2 && chat2.choices.every((c) => c.message.content === want.text) &&
      JSON.stringify(chat2.choices[1].logprobs.content) === JSON.stringify(lp), "chat n = 2 greedy: both = generate");
let refused = 0;
try {
  await client.completions.create({ ...q, n: 3 });
} catch (e) {
  refused += e.status === 400;
}
check(refused === 1, "n above --slots: 400");

// n = 2 streamed: the choices' chunks interleave (index), each ends with its finish_reason, usage comes once
const texts = ["", ""], fins = [null, null];
let usages = 0;
for await (const ch of await client.completions.create({ ...q, n: 2, seed: 5, stream: true,
                                                          stream_options: { include_usage: true } })) {
  if (ch.usage) usages++;
  for (const c of ch.choices) {
    texts[c.index] += c.text ?? "";
    if (c.finish_reason) fins[c.index] = c.finish_reason;
  }
}
check(texts[0] === s5.choices[0].text && texts[1] === s6.choices[0].text && fins.every((f) => f) && usages === 1,
      `n = 2 streamed: ${JSON.stringify({ texts, fins, usages })}`);
const ctexts = ["", ""], roles = [null, null];
for await (const ch of await client.chat.completions.create({ model: MODEL, messages: msgs, max_tokens: N,
                                                               temperature: 0, n: 2, stream: true }))
  for (const c of ch.choices) {
    ctexts[c.index] += c.delta?.content ?? "";
    if (c.delta?.role) roles[c.index] = c.delta.role;
  }
check(ctexts.every((t) => t === want.text) && roles.every((r) => r === "assistant"), "chat n = 2 streamed greedy");

// echo: the prompt comes back first (plain, streamed, and as token ids)
const e1 = await client.completions.create({ model: MODEL, prompt: p, max_tokens: N, temperature: 0, echo: true });
check(e1.choices[0].text === p + wc.text, `echo ${JSON.stringify(e1.choices[0].text)}`);
let es = "";
for await (const ch of await client.completions.create({ model: MODEL, prompt: p, max_tokens: N, temperature: 0,
                                                          echo: true, stream: true }))
  es += ch.choices[0]?.text ?? "";
check(es === p + wc.text, `streamed echo ${JSON.stringify(es)}`);
const e2 = await client.completions.create({ model: MODEL, prompt: tokenize(p), max_tokens: N, temperature: 0, echo: true });
check(e2.choices[0].text === p + wc.text, "echo of a token-id prompt");

done("logprobs");
