// Operations against `flashdelta serve --api-key test-key`: Bearer authentication (the official openai client with
// the right key, a wrong one and none), GET /v1/models and /v1/models/{id}, POST /tokenize and /detokenize
// (checked against `flashdelta tokenize`), GET /version.
import OpenAI from "openai";
import { check, chatml, decode, done, MODEL, tokenize, URL_BASE } from "./common.mjs";

const KEY = "test-key";
const good = new OpenAI({ baseURL: `${URL_BASE}/v1`, apiKey: KEY, maxRetries: 0, timeout: 60000 });
const bad = new OpenAI({ baseURL: `${URL_BASE}/v1`, apiKey: "test-kez", maxRetries: 0, timeout: 60000 });

async function status(fn) {
  try {
    await fn();
    return 200;
  } catch (e) {
    return e.status ?? -1;
  }
}

// authentication
const list = await good.models.list();
check(list.data.length === 1 && list.data[0].id === MODEL && list.data[0].max_model_len === 4096,
      `models ${JSON.stringify(list.data)}`);
check(await status(() => bad.models.list()) === 401, "a wrong key is refused (401)");
check(await status(() => bad.chat.completions.create({ model: MODEL, messages: [{ role: "user", content: "x" }] }))
      === 401, "a wrong key cannot generate");
const none = await fetch(`${URL_BASE}/v1/models`);
const body = await none.json();
check(none.status === 401 && body.error?.code === "invalid_api_key", `no key: ${none.status} ${JSON.stringify(body)}`);
check((await fetch(`${URL_BASE}/health`)).status === 200, "/health needs no key");
const c = await good.chat.completions.create({ model: MODEL, messages: [{ role: "user", content: "hi" }],
                                              max_tokens: 2, temperature: 0 });
check(c.choices.length === 1, "the right key generates");

// models/{id}
const m = await good.models.retrieve(MODEL);
check(m.id === MODEL && m.object === "model" && m.max_model_len === 4096, `retrieve ${JSON.stringify(m)}`);
check(await status(() => good.models.retrieve("no-such-model")) === 404, "unknown model id: 404");

// tokenize / detokenize
const auth = { "Content-Type": "application/json", Authorization: `Bearer ${KEY}` };
const post = async (path, obj) => {
  const r = await fetch(`${URL_BASE}${path}`, { method: "POST", headers: auth, body: JSON.stringify(obj) });
  return { status: r.status, body: await r.json() };
};
const text = "Errors should never pass silently. é 中文";
const t = await post("/tokenize", { model: MODEL, prompt: text });
check(t.status === 200 && JSON.stringify(t.body.tokens) === JSON.stringify(tokenize(text)) &&
      t.body.count === t.body.tokens.length && t.body.max_model_len === 4096, `tokenize ${JSON.stringify(t)}`);
const msgs = [{ role: "user", content: "Say hi." }];
const tm = await post("/tokenize", { messages: msgs });
check(tm.status === 200 && JSON.stringify(tm.body.tokens) === JSON.stringify(tokenize(chatml(msgs))),
      "tokenize messages = the chat prompt");
const d = await post("/detokenize", { tokens: t.body.tokens });
check(d.status === 200 && d.body.prompt === decode(t.body.tokens), `detokenize ${JSON.stringify(d)}`);
check((await post("/detokenize", { tokens: [1e9] })).status === 400, "detokenize: an id outside the vocabulary: 400");
check((await post("/tokenize", { prompt: 5 })).status === 400, "tokenize: a bad prompt: 400");

// version
const v = await (await fetch(`${URL_BASE}/version`)).json();
check(typeof v.version === "string" && v.version.length > 0, `version ${JSON.stringify(v)}`);

done("api");
