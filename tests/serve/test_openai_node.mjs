// sonde serve through the official OpenAI client for Node (the npm package `openai`, pinned in
// tests/serve/node/package.json and its lock file; `npm ci --prefix tests/serve/node` installs it
// before ctest runs, and this test never reaches the network): completions, chat completions and
// streaming of both, each compared with what `sonde generate` makes of the same prompt.
// Usage: node test_openai_node.mjs SONDE_BIN. Exit 0 pass, 1 fail, 77 skip (package not installed).
import { spawn, execFileSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import assert from "node:assert/strict";

const here = dirname(fileURLToPath(import.meta.url));
const sonde = process.argv[2];
let OpenAI;
try {
  OpenAI = createRequire(join(here, "node", "package.json"))("openai").default;
} catch (e) {
  console.log("[  SKIPPED ] skipped: missing package npm openai (run npm ci --prefix tests/serve/node)");
  process.exit(77);
}

const watchdog = setTimeout(() => {  // a test that hangs fails instead
  console.error("test_openai_node: no end after 240 s");
  process.exit(1);
}, 240_000);

const root = mkdtempSync(join(tmpdir(), "sonde-serve-node-"));
const run = (...args) => execFileSync(sonde, args, { encoding: "utf8", timeout: 120_000 });
const model = join(root, "qwen2");
run("make-model", "--arch", "qwen2", "--preset", "tiny", "--out", model);
const generate = (...flags) => JSON.parse(run("generate", "--model", model, "--json", "--temperature", "0", ...flags));

// The server on a free loopback port; its first line names it.
const server = spawn(sonde, ["serve", "--model", model, "--port", "0", "--api-key", "node-key"], { stdio: ["ignore", "pipe", "inherit"] });
const baseURL = await new Promise((resolve, reject) => {
  let out = "";
  server.stdout.on("data", (d) => {
    out += d;
    const m = out.match(/http:\/\/[0-9.]+:[0-9]+/);
    if (m) resolve(m[0] + "/v1");
  });
  server.on("exit", (code) => reject(new Error(`sonde serve exited ${code} before listening`)));
});
const exited = new Promise((resolve) => server.on("exit", (code, signal) => resolve(code ?? signal)));
const client = new OpenAI({ baseURL, apiKey: "node-key", timeout: 60_000, maxRetries: 0 });

let failed = false;
async function check(name, fn) {
  try {
    await fn();
    console.log(`ok   ${name}`);
  } catch (e) {
    failed = true;
    console.log(`FAIL ${name}: ${e.stack || e}`);
  }
}

try {
  await check("models", async () => {
    const list = await client.models.list();
    assert.equal(list.data.length, 1);
    assert.equal(list.data[0].id, "qwen2");
  });
  await check("completion over token ids equals generate", async () => {
    const want = generate("--ids", "5,6,7,8", "--max-new-tokens", "6");
    const r = await client.completions.create({ model: "qwen2", prompt: [5, 6, 7, 8], max_tokens: 6, temperature: 0 });
    assert.deepEqual(r.choices[0].token_ids, want.completion_ids);
    assert.equal(r.choices[0].text, want.completion);
    assert.equal(r.usage.prompt_tokens, 4);
  });
  await check("text completion, streamed, equals unstreamed", async () => {
    const body = { model: "qwen2", prompt: "hello world", max_tokens: 8, temperature: 0 };
    const whole = await client.completions.create(body);
    const stream = await client.completions.create({ ...body, stream: true });
    let text = "";
    let finish = null;
    for await (const chunk of stream) {
      text += chunk.choices[0].text;
      finish = chunk.choices[0].finish_reason ?? finish;
    }
    assert.equal(text, whole.choices[0].text);
    assert.equal(finish, whole.choices[0].finish_reason);
  });
  await check("chat, streamed and not, equals generate --chat", async () => {
    const want = generate("--prompt", "hi there", "--chat", "--max-new-tokens", "5");
    const messages = [{ role: "user", content: "hi there" }];
    const r = await client.chat.completions.create({ model: "qwen2", messages, max_tokens: 5, temperature: 0 });
    assert.equal(r.choices[0].message.role, "assistant");
    assert.equal(r.choices[0].message.content, want.completion);
    const stream = await client.chat.completions.create({ model: "qwen2", messages, max_tokens: 5, temperature: 0, stream: true });
    let content = "";
    for await (const chunk of stream) content += chunk.choices[0]?.delta?.content ?? "";
    assert.equal(content, want.completion);
  });
  await check("errors come back as the client's APIError", async () => {
    await assert.rejects(client.completions.create({ model: "qwen2", prompt: [1], max_tokens: 2, top_p: 7 }),
      (e) => e.status === 400 && e.param === "top_p");
    const wrong = new OpenAI({ baseURL, apiKey: "bad", maxRetries: 0 });
    await assert.rejects(wrong.models.list(), (e) => e.status === 401);
  });
} finally {
  server.kill("SIGTERM");
  const code = await exited;
  if (code !== 0) {
    failed = true;
    console.log(`FAIL sonde serve exited ${code} after SIGTERM, not 0`);
  }
  rmSync(root, { recursive: true, force: true });
  clearTimeout(watchdog);
}
process.exit(failed ? 1 : 0);
