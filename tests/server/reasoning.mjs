// `serve --chat-template tests/data/chat_templates/qwen3_5.jinja`: Qwen3.5's template, which opens the assistant's
// <think> in the prompt, so the model's text up to </think> is reasoning. With the fixture model's noise (no
// </think>), everything is reasoning_content: greedy text = `flashdelta generate`'s, trimmed; enable_thinking=false
// closes the block in the prompt and the text is content again. Prompts are checked token for token against the
// template rendered by @huggingface/jinja, XML tool instructions and a forced call opening included.
import { readFileSync } from "node:fs";
import { Template } from "@huggingface/jinja";
import { check, client, done, expected, MODEL, tokenize } from "./common.mjs";

const N = 12;
const tpl = new Template(readFileSync("../data/chat_templates/qwen3_5.jinja", "utf8"));
const render = (messages, tools, kw = {}) =>
  tpl.render({ messages, tools: tools ?? null, documents: null, add_generation_prompt: true, eos_token: "<|im_end|>",
               ...kw });
const msgs = [{ role: "system", content: "Think first." }, { role: "user", content: "Why is the sky blue?" }];

const ids = tokenize(render(msgs));
const want = expected(ids, N);
const r = await client.chat.completions.create({ model: MODEL, messages: msgs, max_tokens: N, temperature: 0 });
const m = r.choices[0].message;
check(r.usage.prompt_tokens === ids.length, `prompt ${r.usage.prompt_tokens} != ${ids.length}`);
check(m.reasoning_content === want.text.trim() && m.content === "",
      `reasoning ${JSON.stringify(m.reasoning_content)} content ${JSON.stringify(m.content)} want ${JSON.stringify(want.text)}`);

let reasoning = "", content = "";
for await (const c of await client.chat.completions.create({ model: MODEL, messages: msgs, max_tokens: N,
                                                             temperature: 0, stream: true }))
  for (const ch of c.choices) {
    reasoning += ch.delta?.reasoning_content ?? "";
    content += ch.delta?.content ?? "";
  }
check(reasoning === m.reasoning_content && content === "", `streamed reasoning ${JSON.stringify(reasoning)}`);

// thinking off: the template closes the block, the text is content
const off = render(msgs, null, { enable_thinking: false });
const wantOff = expected(tokenize(off), N);
const r2 = await client.chat.completions.create({ model: MODEL, messages: msgs, max_tokens: N, temperature: 0,
                                                 chat_template_kwargs: { enable_thinking: false } });
check(r2.usage.prompt_tokens === tokenize(off).length && r2.choices[0].message.content === wantOff.text &&
      !r2.choices[0].message.reasoning_content, `thinking off: ${JSON.stringify(r2.choices[0].message)}`);

// tools in Qwen3.5's XML format; a named tool_choice closes the open <think> and opens the call
const tools = [{ type: "function", function: { name: "get_weather", parameters: { type: "object",
  properties: { city: { type: "string" } } } } }];
const r3 = await client.chat.completions.create({ model: MODEL, messages: msgs, tools, max_tokens: 4, temperature: 0 });
check(r3.usage.prompt_tokens === tokenize(render(msgs, tools)).length, "tools prompt (XML instructions)");
const forced = render(msgs, tools) + "\n</think>\n\n<tool_call>\n<function=get_weather>\n";
const r4 = await client.chat.completions.create({ model: MODEL, messages: msgs, tools, max_tokens: 4, temperature: 0,
  tool_choice: { type: "function", function: { name: "get_weather" } } });
check(r4.usage.prompt_tokens === tokenize(forced).length, `forced XML call prompt ${r4.usage.prompt_tokens}`);
check(!r4.choices[0].message.reasoning_content, "a forced call has no reasoning");

// a conversation the template refuses (raise_exception) is a 400 with its message
try {
  await client.chat.completions.create({ model: MODEL, messages: [{ role: "assistant", content: "x" }], max_tokens: 2 });
  check(false, "no user message: should be refused");
} catch (e) {
  check(e.status === 400 && /No user query/.test(e.message), `raise_exception: ${e.status} ${e.message}`);
}

done("reasoning");
