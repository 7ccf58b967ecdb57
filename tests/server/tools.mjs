// Tools, tool_choice, reasoning and chat_template_kwargs through real clients (the official openai npm client and
// the Vercel AI SDK) against `flashdelta serve` with the fixture model, whose text is noise: what must hold is the
// protocol. The prompt the server builds is checked token for token against Qwen3's template (the server's
// built-in) rendered by @huggingface/jinja over the same conversation, and greedy output against `flashdelta
// generate` on those tokens. Parsing of real Qwen tool-call texts is tests/test_chat_output.c's.
import { readFileSync } from "node:fs";
import { Template } from "@huggingface/jinja";
import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import { generateText, streamText, tool, stepCountIs } from "ai";
import { z } from "zod";
import { check, client, done, expected, MODEL, tokenize, URL_BASE } from "./common.mjs";

const N = 16;
const qwen3 = new Template(readFileSync("../data/chat_templates/qwen3.jinja", "utf8"));
const render = (messages, tools, kw = {}) =>
  qwen3.render({ messages, tools: tools ?? null, documents: null, add_generation_prompt: true,
                 eos_token: "<|im_end|>", ...kw });

const tools = [{ type: "function", function: { name: "get_weather", description: "Weather in a city",
  parameters: { type: "object", properties: { city: { type: "string" }, days: { type: "integer" } },
                required: ["city"] } } }];

function checkMessage(m, finish, what) {
  check(m.role === "assistant", `${what}: role ${m.role}`);
  check(["stop", "length", "tool_calls"].includes(finish), `${what}: finish ${finish}`);
  if (m.tool_calls) {
    check(finish === "tool_calls" || finish === "length", `${what}: tool calls with finish ${finish}`);
    for (const c of m.tool_calls)
      check(c.id?.startsWith("call_") && c.type === "function" && typeof c.function?.name === "string" &&
            typeof JSON.parse(c.function.arguments) === "object", `${what}: tool call ${JSON.stringify(c)}`);
  } else {
    check(typeof m.content === "string", `${what}: content ${JSON.stringify(m.content)}`);
  }
}

// 1. tools offered (auto): the prompt is the template's with the tools; the answer is greedy generate's
const msgs = [{ role: "system", content: "Use tools." }, { role: "user", content: "Weather in Paris?" }];
const ids = tokenize(render(msgs, tools));
const want = expected(ids, N);
const r = await client.chat.completions.create({ model: MODEL, messages: msgs, tools, max_tokens: N, temperature: 0 });
check(r.usage.prompt_tokens === ids.length, `tools prompt: ${r.usage.prompt_tokens} tokens, template gives ${ids.length}`);
checkMessage(r.choices[0].message, r.choices[0].finish_reason, "tools auto");
if (!r.choices[0].message.tool_calls && !r.choices[0].message.reasoning_content)
  check(r.choices[0].message.content === want.text, `tools auto text ${JSON.stringify(r.choices[0].message.content)}`);

// streamed: the same message, as deltas
async function collectChat(stream) {
  const m = { role: null, content: "", reasoning_content: "", tool_calls: [] };
  let finish = null;
  for await (const c of stream)
    for (const ch of c.choices) {
      const d = ch.delta ?? {};
      if (d.role) m.role = d.role;
      if (d.content) m.content += d.content;
      if (d.reasoning_content) m.reasoning_content += d.reasoning_content;
      for (const t of d.tool_calls ?? []) {
        const slot = (m.tool_calls[t.index] ??= { id: t.id, type: t.type, function: { name: "", arguments: "" } });
        if (t.function?.name) slot.function.name += t.function.name;
        if (t.function?.arguments) slot.function.arguments += t.function.arguments;
      }
      if (ch.finish_reason) finish = ch.finish_reason;
    }
  if (!m.tool_calls.length) delete m.tool_calls;
  return { m, finish };
}
const s = await collectChat(await client.chat.completions.create({ model: MODEL, messages: msgs, tools, max_tokens: N,
                                                                   temperature: 0, stream: true }));
check(s.m.content === (r.choices[0].message.content ?? "") && s.finish === r.choices[0].finish_reason &&
      s.m.reasoning_content === (r.choices[0].message.reasoning_content ?? ""),
      `streamed tools answer ${JSON.stringify(s)} != ${JSON.stringify(r.choices[0])}`);

// 2. the round trip: the assistant's call (arguments as a JSON string) and the tool's answer come back
const call = { id: "call_1", type: "function", function: { name: "get_weather", arguments: "{\"city\": \"Paris\"}" } };
const trip = [...msgs, { role: "assistant", content: null, tool_calls: [call] },
              { role: "tool", tool_call_id: "call_1", content: "{\"temp\": 21}" }];
const tripRef = trip.map((m) => m.tool_calls ? { ...m, content: "", tool_calls: [{ ...call,
  function: { name: "get_weather", arguments: { city: "Paris" } } }] } : m);
const tripIds = tokenize(render(tripRef, tools));
const r2 = await client.chat.completions.create({ model: MODEL, messages: trip, tools, max_tokens: N, temperature: 0 });
check(r2.usage.prompt_tokens === tripIds.length, `round trip prompt ${r2.usage.prompt_tokens} != ${tripIds.length}`);
checkMessage(r2.choices[0].message, r2.choices[0].finish_reason, "round trip");

// 3. tool_choice: none hides the tools; a named function opens its call in the prompt
const r3 = await client.chat.completions.create({ model: MODEL, messages: msgs, tools, tool_choice: "none",
                                                 max_tokens: 4, temperature: 0 });
check(r3.usage.prompt_tokens === tokenize(render(msgs, null)).length, "tool_choice none: no tools in the prompt");
check(!r3.choices[0].message.tool_calls && r3.choices[0].finish_reason !== "tool_calls", "tool_choice none: no calls");
const forced = render(msgs, tools) + "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": ";
const r4 = await client.chat.completions.create({ model: MODEL, messages: msgs, tools, max_tokens: N, temperature: 0,
  tool_choice: { type: "function", function: { name: "get_weather" } } });
check(r4.usage.prompt_tokens === tokenize(forced).length, `named tool_choice prompt ${r4.usage.prompt_tokens}`);
const m4 = r4.choices[0].message;
checkMessage(m4, r4.choices[0].finish_reason, "named tool_choice");
// the noise model cannot finish the call: the output degrades to text that starts with the forced opening
check(m4.tool_calls || m4.content.startsWith("<tool_call>\n{\"name\": \"get_weather\""), `forced call ${m4.content}`);
const r5 = await client.chat.completions.create({ model: MODEL, messages: msgs, tools, tool_choice: "required",
                                                 max_tokens: 4, temperature: 0 });
checkMessage(r5.choices[0].message, r5.choices[0].finish_reason, "required tool_choice");

// 4. reasoning switch: enable_thinking=false closes the think block in the prompt
const r6 = await client.chat.completions.create({ model: MODEL, messages: msgs, max_tokens: 4, temperature: 0,
  chat_template_kwargs: { enable_thinking: false } });
check(r6.usage.prompt_tokens === tokenize(render(msgs, null, { enable_thinking: false })).length,
      "enable_thinking=false in the prompt");

// 5. the openai client's agent loop
// (the runner refuses a "length" finish: a stop string from the greedy answer ends the noise with "stop")
let calls = 0;
const stopAt = [...want.text].findIndex((ch, i) => i > 0 && /[!-~]/.test(ch));
const stop = stopAt > 0 ? [...want.text][stopAt] : undefined;
const runner = client.chat.completions.runTools({ model: MODEL, messages: msgs, max_tokens: N, temperature: 0, stop,
  tools: [{ type: "function", function: { name: "get_weather", parameters: tools[0].function.parameters,
    function: (args) => { calls++; return { temp: 21, args }; }, parse: JSON.parse } }] });
const final = await runner.finalChatCompletion();
check(final.choices?.length === 1, `runTools finished (${calls} tool calls made)`);

// 6. the Vercel AI SDK (openai-compatible provider): generateText / streamText with a tool
const provider = createOpenAICompatible({ name: "flashdelta", baseURL: `${URL_BASE}/v1`, apiKey: "unused" });
const weather = tool({ description: "Weather in a city", inputSchema: z.object({ city: z.string() }),
                       execute: async ({ city }) => ({ city, temp: 21 }) });
const g = await generateText({ model: provider(MODEL), prompt: "Weather in Paris?", tools: { weather },
                               stopWhen: stepCountIs(2), maxOutputTokens: N, temperature: 0, maxRetries: 0 });
check(typeof g.text === "string" && ["stop", "length", "tool-calls"].includes(g.finishReason),
      `generateText: ${g.finishReason} ${JSON.stringify(g.text)}`);
check(g.usage.inputTokens > 0, `generateText usage ${JSON.stringify(g.usage)}`);
const st = streamText({ model: provider(MODEL), prompt: "Weather in Paris?", tools: { weather },
                        stopWhen: stepCountIs(2), maxOutputTokens: N, temperature: 0, maxRetries: 0,
                        onError: ({ error }) => check(false, `streamText error ${error}`) });
let streamed = "";
for await (const part of st.textStream) streamed += part;
check(streamed === (await st.text) && ["stop", "length", "tool-calls"].includes(await st.finishReason),
      `streamText: ${await st.finishReason}`);

done("tools");
