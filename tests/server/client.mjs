// The official openai npm client against `flashdelta serve`: completions and chat, plain and streamed, greedy output
// identical to `flashdelta generate`; prompt as token ids; stop strings; errors surface as APIError with the status.
import { check, chatml, client, collect, decode, done, expected, MODEL, tokenize } from "./common.mjs";

const N = 24;
const prompts = ["hello the world, this is a test of the server", "Errors should never pass silently. é ü 中文 🙂"];

for (const p of prompts) {
  const want = expected(tokenize(p), N);
  const r = await client.completions.create({ model: MODEL, prompt: p, max_tokens: N, temperature: 0 });
  check(r.object === "text_completion" && r.id.startsWith("cmpl-") && r.model === MODEL, `completion shape ${r.id}`);
  check(r.choices.length === 1 && r.choices[0].text === want.text,
        `completion text ${JSON.stringify(r.choices[0].text)} != ${JSON.stringify(want.text)}`);
  check(r.choices[0].finish_reason === want.finish, `finish ${r.choices[0].finish_reason} != ${want.finish}`);
  check(r.usage.prompt_tokens === tokenize(p).length && r.usage.completion_tokens === want.completion_tokens &&
        r.usage.total_tokens === r.usage.prompt_tokens + r.usage.completion_tokens, `usage ${JSON.stringify(r.usage)}`);
  check(typeof r.usage.prompt_tokens_details?.cached_tokens === "number", "usage.prompt_tokens_details.cached_tokens");

  const s = await collect(await client.completions.create({ model: MODEL, prompt: p, max_tokens: N, temperature: 0,
                                                          stream: true, stream_options: { include_usage: true } }));
  check(s.text === want.text, `streamed completion ${JSON.stringify(s.text)} != ${JSON.stringify(want.text)}`);
  check(s.finish === want.finish && s.usage?.completion_tokens === want.completion_tokens,
        `streamed finish ${s.finish} usage ${JSON.stringify(s.usage)}`);

  // the same prompt as token ids
  const ids = tokenize(p);
  const r2 = await client.completions.create({ model: MODEL, prompt: ids, max_tokens: N, temperature: 0 });
  check(r2.choices[0].text === want.text, "completion from token ids");
}

// chat, plain and streamed
const msgs = [{ role: "system", content: "You are terse." }, { role: "user", content: "Say hello to the world." }];
const wantChat = expected(tokenize(chatml(msgs)), N);
const c = await client.chat.completions.create({ model: MODEL, messages: msgs, max_tokens: N, temperature: 0 });
check(c.object === "chat.completion" && c.id.startsWith("chatcmpl-"), "chat shape");
check(c.choices[0].message.role === "assistant" && c.choices[0].message.content === wantChat.text,
      `chat text ${JSON.stringify(c.choices[0].message.content)} != ${JSON.stringify(wantChat.text)}`);
check(c.choices[0].finish_reason === wantChat.finish, "chat finish");
check(c.usage.prompt_tokens === tokenize(chatml(msgs)).length, `chat prompt tokens ${c.usage.prompt_tokens}`);
const cs = await collect(await client.chat.completions.create({ model: MODEL, messages: msgs, max_tokens: N,
                                                               temperature: 0, stream: true,
                                                               stream_options: { include_usage: true } }), true);
check(cs.role === "assistant" && cs.text === wantChat.text && cs.finish === wantChat.finish,
      `streamed chat ${JSON.stringify(cs.text)} role ${cs.role} finish ${cs.finish}`);
check(cs.usage?.completion_tokens === wantChat.completion_tokens, "streamed chat usage");
const noUsage = await collect(await client.chat.completions.create({ model: MODEL, messages: msgs, max_tokens: 4,
                                                                    temperature: 0, stream: true }), true);
check(noUsage.usage === null, "no usage chunk unless asked for");

// stop strings: cut before the first occurrence, finish "stop", never streamed in part
const full = expected(tokenize(prompts[0]), N);
let at = -1;
for (let i = 2; i + 2 <= full.text.length && at < 0; i++)
  if (/^[ -~]{2}$/.test(full.text.slice(i, i + 2))) at = i;
if (check(at >= 0, `no ASCII pair to use as a stop string in ${JSON.stringify(full.text)}`)) {
  const stop = full.text.slice(at, at + 2);
  const cut = full.text.slice(0, full.text.indexOf(stop));
  const r = await client.completions.create({ model: MODEL, prompt: prompts[0], max_tokens: N, temperature: 0,
                                             stop: [stop] });
  check(r.choices[0].text === cut && r.choices[0].finish_reason === "stop",
        `stop ${JSON.stringify(stop)}: ${JSON.stringify(r.choices[0].text)} != ${JSON.stringify(cut)}`);
  const s = await collect(await client.completions.create({ model: MODEL, prompt: prompts[0], max_tokens: N,
                                                           temperature: 0, stop: stop, stream: true }));
  check(s.text === cut && s.finish === "stop", `streamed stop: ${JSON.stringify(s.text)}`);
}

// sampling: the same seed gives the same text
const a = await client.completions.create({ model: MODEL, prompt: prompts[0], max_tokens: 12, temperature: 0.8,
                                           top_p: 0.9, seed: 7 });
const b = await client.completions.create({ model: MODEL, prompt: prompts[0], max_tokens: 12, temperature: 0.8,
                                           top_p: 0.9, seed: 7 });
check(a.choices[0].text === b.choices[0].text, "seeded sampling is reproducible");

// errors come back as OpenAI errors
async function status(fn) {
  try {
    await fn();
    return 200;
  } catch (e) {
    return e.status ?? -1;
  }
}
check(await status(() => client.completions.create({ model: MODEL, prompt: "x", max_tokens: 0 })) === 400, "max_tokens 0");
check(await status(() => client.completions.create({ model: "no-such-model", prompt: "x" })) === 404, "unknown model");
check(await status(() => client.completions.create({ model: MODEL, prompt: "x", max_tokens: 1 << 30 })) === 400,
      "huge max_tokens");
check(await status(() => client.chat.completions.create({ model: MODEL, messages: [] })) === 400, "empty messages");
const models = await client.models.list();
check(models.data.length === 1 && models.data[0].id === MODEL, "models.list");
done("client.mjs");
