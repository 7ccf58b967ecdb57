// Renders every template x case of tests/data/chat_templates with @huggingface/jinja (the Jinja implementation of
// transformers.js: written independently of ours) and prints {"<template>/<case>": {"text"} | {"error"}} as JSON.
// tests/test_jinja.c compares our renderer with it byte for byte. The context is the one transformers'
// apply_chat_template builds: messages, tools (null when none), documents (null), add_generation_prompt, the
// tokenizer's special tokens, then the chat_template_kwargs.
import { readFileSync } from "node:fs";
import { Template } from "@huggingface/jinja";

const dir = process.argv[2];
const templates = JSON.parse(readFileSync(`${dir}/templates.json`, "utf8"));
const cases = JSON.parse(readFileSync(`${dir}/cases.json`, "utf8"));
const out = {};
for (const [name, t] of Object.entries(templates)) {
  const tpl = new Template(readFileSync(`${dir}/${t.file}`, "utf8"));
  for (const c of cases) {
    if (c.only && !c.only.includes(name)) continue;
    const ctx = { messages: c.messages, tools: c.tools ?? null, documents: c.documents ?? null,
                  add_generation_prompt: c.add_generation_prompt ?? true, ...t.kwargs, ...(c.kwargs ?? {}) };
    try {
      out[`${name}/${c.name}`] = { text: tpl.render(ctx) };
    } catch (e) {
      out[`${name}/${c.name}`] = { error: String(e.message ?? e) };
    }
  }
}
process.stdout.write(JSON.stringify(out, null, 1) + "\n");
