// Real clients against `flashdelta serve` with the trained tiny model (models/tiny-qwen35, a Python-code model made by
// tools/train_tiny.py; the server runs with --api-key): the official openai client (auth, logprobs, n = 2, tools
// round trip plain and streamed, the runTools agent loop) and the Vercel AI SDK (generateText / streamText with a
// tool). The model's chat answers are poor; what must hold is the protocol: no client error, the shapes clients
// read. Where a reference exists it is HF transformers' own (tests/data/trained, written by train_tiny.py): the
// greedy continuation of a held-out prompt and the logits its first token is sampled from.
// Environment (tests/test_server_ops.c): FD_URL, FD_MODEL_NAME, FD_API_KEY, FD_BIN, FD_TOKENIZER, FD_DRAFT (1: the
// server runs the trained DFlash drafter; only the greedy and speculative-metrics part runs).
import { readFileSync } from "node:fs";
import OpenAI from "openai";
import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import { generateText, streamText, tool, stepCountIs } from "ai";
import { z } from "zod";
import { check, decode, done, MODEL, URL_BASE } from "./common.mjs";

const KEY = process.env.FD_API_KEY;
const client = new OpenAI({ baseURL: `${URL_BASE}/v1`, apiKey: KEY, maxRetries: 0, timeout: 120000 });
const DATA = "../data/trained";
const prompts = JSON.parse(readFileSync(`${DATA}/val_prompts.json`, "utf8"));
const ref = JSON.parse(readFileSync(`${DATA}/expected.json`, "utf8"));

// 1. HF's greedy continuation of held-out prompt 0 (a token-id prompt: no tokenizer between), as text
const greedy = await client.completions.create({ model: MODEL, prompt: prompts[0].ids, max_tokens: ref.greedy.length,
                                                temperature: 0, ignore_eos: true });
check(greedy.choices[0].text === decode(ref.greedy) && greedy.usage.completion_tokens === ref.greedy.length,
      `greedy != HF's: ${JSON.stringify(greedy.choices[0].text)} vs ${JSON.stringify(decode(ref.greedy))}`);

async function specMetrics() { // vllm: spec-decode series (only with the drafter)
  const text = await (await fetch(`${URL_BASE}/metrics`)).text();
  const get = (s) => Number((new RegExp(`^${s.replace(/[{}"]/g, "\\$&")} (\\S+)$`, "m").exec(text) ?? [])[1] ?? NaN);
  const L = `{model_name="${MODEL}",engine="0"}`;
  const pos = [];
  for (let i = 0; ; i++) {
    const v = get(`vllm:spec_decode_num_accepted_tokens_per_pos_total{model_name="${MODEL}",engine="0",position="${i}"}`);
    if (Number.isNaN(v)) break;
    pos.push(v);
  }
  return { drafts: get(`vllm:spec_decode_num_drafts_total${L}`), accepted: get(`vllm:spec_decode_num_accepted_tokens_total${L}`),
           pos };
}
if (process.env.FD_DRAFT === "1") {
  const m = await specMetrics();
  // the trained drafter is accepted often (tests/test_trained.c: ~2.6 tokens per round on this prompt)
  check(m.drafts > 0 && m.accepted > 0 && m.pos.length === 7, `spec metrics ${JSON.stringify(m)}`);
  check(m.pos.every((v, i) => i === 0 || v <= m.pos[i - 1]) && m.pos.reduce((a, b) => a + b, 0) === m.accepted,
        `per-position acceptance ${JSON.stringify(m.pos)}`);
  check(ref.greedy.length === 1 + m.drafts + m.accepted, `${ref.greedy.length} tokens from ${m.drafts} rounds`);
  console.log(`    DFlash: ${m.drafts} rounds, ${m.accepted} accepted, per position ${JSON.stringify(m.pos)}`);
  done("trained (drafter)");
}

// 2. authentication: a wrong key and none are refused, for the client too
const wrong = new OpenAI({ baseURL: `${URL_BASE}/v1`, apiKey: `${KEY}x`, maxRetries: 0, timeout: 60000 });
let status = 0;
try {
  await wrong.chat.completions.create({ model: MODEL, messages: [{ role: "user", content: "x" }], max_tokens: 1 });
} catch (e) {
  status = e.status;
}
check(status === 401, `a wrong key: ${status}`);
check((await fetch(`${URL_BASE}/v1/models`)).status === 401, "no key: 401");
const models = await client.models.list();
check(models.data.length === 1 && models.data[0].id === MODEL && models.data[0].max_model_len > 0, "models");

// 3. logprobs: the first token's top-5 log-probabilities are HF's log-softmax of its logits at the prompt's end
const V = ref.vocab_size, rows = ref.logits_tail_rows;
const tail = new Float32Array(readFileSync(`${DATA}/logits_tail.f32`).buffer.slice(0));
const last = Array.from(tail.subarray((rows - 1) * V, rows * V));
const mx = Math.max(...last), lse = mx + Math.log(last.reduce((a, x) => a + Math.exp(x - mx), 0));
const hfTop = last.map((x) => x - lse).sort((a, b) => b - a).slice(0, 5);
const lp = await client.completions.create({ model: MODEL, prompt: prompts[0].ids, max_tokens: 1, temperature: 0,
                                            logprobs: 5 });
const top = Object.values(lp.choices[0].logprobs.top_logprobs[0]).sort((a, b) => b - a);
check(top.length === 5 && top.every((v, i) => Math.abs(v - hfTop[i]) < 2e-3),
      `top-5 logprobs ${JSON.stringify(top)} vs HF ${JSON.stringify(hfTop)}`);
console.log(`    top-5 logprobs vs HF: max |diff| ${Math.max(...top.map((v, i) => Math.abs(v - hfTop[i]))).toExponential(1)}`);
check(lp.choices[0].logprobs.tokens[0] !== undefined && lp.choices[0].text === decode([ref.greedy[0]]),
      "the first token is HF's greedy one");
// chat logprobs: entries in OpenAI's shape, the greedy token the top one, streamed = plain
const code = prompts[1].text.slice(0, 200);
const msgs = [{ role: "user", content: `Continue this code:\n${code}` }];
const chat = await client.chat.completions.create({ model: MODEL, messages: msgs, max_tokens: 12, temperature: 0,
                                                   logprobs: true, top_logprobs: 3 });
const entries = chat.choices[0].logprobs?.content ?? [];
check(entries.length > 0 && entries.every((e) => e.logprob <= 0 && e.top_logprobs.length === 3 &&
      Math.abs(e.top_logprobs[0].logprob - e.logprob) < 1e-6 && Array.isArray(e.bytes)), "chat logprob entries");
let streamedText = "";
const streamedEntries = [];
for await (const c of await client.chat.completions.create({ model: MODEL, messages: msgs, max_tokens: 12,
                                                             temperature: 0, logprobs: true, top_logprobs: 3,
                                                             stream: true }))
  for (const ch of c.choices) {
    streamedText += ch.delta?.content ?? "";
    streamedEntries.push(...(ch.logprobs?.content ?? []));
  }
check(streamedText === (chat.choices[0].message.content ?? "") &&
      JSON.stringify(streamedEntries) === JSON.stringify(entries), "streamed chat logprobs = plain");

// 4. n = 2: seeds seed and seed + 1, plain and streamed
const q = { model: MODEL, messages: msgs, max_tokens: 10, temperature: 0.8 };
const two = await client.chat.completions.create({ ...q, n: 2, seed: 11 });
const s11 = await client.chat.completions.create({ ...q, seed: 11 }), s12 = await client.chat.completions.create({ ...q, seed: 12 });
check(two.choices.length === 2 && two.choices.map((c) => c.index).join() === "0,1" &&
      two.choices[0].message.content === s11.choices[0].message.content &&
      two.choices[1].message.content === s12.choices[0].message.content, "n = 2: the two seeds' answers");
const texts = ["", ""], fins = [null, null];
for await (const c of await client.chat.completions.create({ ...q, n: 2, seed: 11, stream: true }))
  for (const ch of c.choices) {
    texts[ch.index] += ch.delta?.content ?? "";
    if (ch.finish_reason) fins[ch.index] = ch.finish_reason;
  }
check(texts[0] === two.choices[0].message.content && texts[1] === two.choices[1].message.content &&
      fins.every((f) => f), `n = 2 streamed ${JSON.stringify({ texts, fins })}`);

// 5. tools: offered, the answer a valid message (content or calls), streamed = plain; the round trip with a tool
// message is accepted
const tools = [{ type: "function", function: { name: "run_python", description: "Run Python code",
  parameters: { type: "object", properties: { code: { type: "string" } }, required: ["code"] } } }];
const ask = [{ role: "user", content: "Run print(1+1) with the tool." }];
function validMessage(m, finish, what) {
  check(m.role === "assistant" && ["stop", "length", "tool_calls"].includes(finish), `${what}: ${m.role} ${finish}`);
  for (const c of m.tool_calls ?? [])
    check(c.type === "function" && typeof JSON.parse(c.function.arguments) === "object", `${what}: call ${JSON.stringify(c)}`);
  check(m.tool_calls?.length || typeof m.content === "string", `${what}: content ${JSON.stringify(m.content)}`);
}
const t1 = await client.chat.completions.create({ model: MODEL, messages: ask, tools, max_tokens: 24, temperature: 0 });
validMessage(t1.choices[0].message, t1.choices[0].finish_reason, "tools");
let tc = "", tfin = null, tcalls = 0;
for await (const c of await client.chat.completions.create({ model: MODEL, messages: ask, tools, max_tokens: 24,
                                                             temperature: 0, stream: true }))
  for (const ch of c.choices) {
    tc += ch.delta?.content ?? "";
    tcalls += ch.delta?.tool_calls?.length ?? 0;
    if (ch.finish_reason) tfin = ch.finish_reason;
  }
check(tc === (t1.choices[0].message.content ?? "") && tfin === t1.choices[0].finish_reason &&
      tcalls === (t1.choices[0].message.tool_calls?.length ?? 0), "streamed tools answer = plain");
const call = { id: "call_1", type: "function", function: { name: "run_python", arguments: "{\"code\": \"print(1+1)\"}" } };
const trip = [...ask, { role: "assistant", content: null, tool_calls: [call] },
              { role: "tool", tool_call_id: "call_1", content: "2" }];
const t2 = await client.chat.completions.create({ model: MODEL, messages: trip, tools, max_tokens: 24, temperature: 0 });
validMessage(t2.choices[0].message, t2.choices[0].finish_reason, "round trip");
check(t2.usage.prompt_tokens > t1.usage.prompt_tokens, "the round trip's prompt holds the call and its result");
let t2s = "";
for await (const c of await client.chat.completions.create({ model: MODEL, messages: trip, tools, max_tokens: 24,
                                                             temperature: 0, stream: true }))
  t2s += c.choices[0]?.delta?.content ?? "";
check(t2s === (t2.choices[0].message.content ?? ""), "streamed round trip = plain");

// 6. runTools: the agent loop ends (the runner refuses a "length" finish: a stop string from the greedy answer's
// own text ends it with "stop")
const plain = t1.choices[0].message.content ?? "";
const stopAt = [...plain].findIndex((ch, i) => i > 0 && /[!-~]/.test(ch));
let ran = 0;
const runner = client.chat.completions.runTools({ model: MODEL, messages: ask, max_tokens: 24, temperature: 0,
  stop: stopAt > 0 ? [...plain][stopAt] : undefined,
  tools: [{ type: "function", function: { name: "run_python", parameters: tools[0].function.parameters,
    function: () => { ran++; return "2"; }, parse: JSON.parse } }] });
const final = await runner.finalChatCompletion();
check(final.choices?.length === 1, `runTools finished (${ran} tool calls)`);
console.log(`    tools: finish ${t1.choices[0].finish_reason}, round trip ${t2.choices[0].finish_reason}, ` +
            `runTools ${final.choices[0].finish_reason} after ${ran} calls`);

// 7. the Vercel AI SDK: generateText and streamText with a tool, the key sent as its apiKey
const provider = createOpenAICompatible({ name: "flashdelta", baseURL: `${URL_BASE}/v1`, apiKey: KEY });
const runPython = tool({ description: "Run Python code", inputSchema: z.object({ code: z.string() }),
                         execute: async () => ({ stdout: "2" }) });
const g = await generateText({ model: provider(MODEL), prompt: "Run print(1+1) with the tool.", tools: { runPython },
                               stopWhen: stepCountIs(2), maxOutputTokens: 24, temperature: 0, maxRetries: 0 });
check(typeof g.text === "string" && ["stop", "length", "tool-calls"].includes(g.finishReason) &&
      g.usage.inputTokens > 0 && g.usage.outputTokens > 0, `generateText ${g.finishReason} ${JSON.stringify(g.usage)}`);
const st = streamText({ model: provider(MODEL), prompt: "Run print(1+1) with the tool.", tools: { runPython },
                        stopWhen: stepCountIs(2), maxOutputTokens: 24, temperature: 0, maxRetries: 0,
                        onError: ({ error }) => check(false, `streamText error ${error}`) });
let streamed = "";
for await (const part of st.textStream) streamed += part;
check(streamed === (await st.text) && streamed === g.text && ["stop", "length", "tool-calls"].includes(await st.finishReason),
      `streamText ${JSON.stringify(streamed)} vs generateText ${JSON.stringify(g.text)}`);
const noKey = createOpenAICompatible({ name: "flashdelta", baseURL: `${URL_BASE}/v1` });
let sdkError = null;
try {
  await generateText({ model: noKey(MODEL), prompt: "x", maxOutputTokens: 2, maxRetries: 0 });
} catch (e) {
  sdkError = e;
}
check(sdkError?.statusCode === 401, `the AI SDK without the key: ${sdkError?.statusCode}`);

done("trained");
