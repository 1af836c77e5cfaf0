// node --test: the OpenClaw plugin against a stub of OpenClaw's plugin API
// and a fake `memsearch` on PATH (hooks/_js/testkit.mjs).

import assert from "node:assert/strict";
import { mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, beforeEach, test } from "node:test";

import { COLLECTION, CONTEXT, MILVUS_URI, gone, installFake, isHook, sleep } from "../_js/testkit.mjs";
import plugin from "./index.js";

const fake = installFake();
after(() => fake.cleanup());
beforeEach(() => {
  fake.reset();
  process.env.OPENCLAW_STATE_DIR = STATE;
});

const WORKSPACE = join(fake.root, "workspace");
const STATE = join(fake.root, "openclaw-state");
mkdirSync(WORKSPACE);
mkdirSync(STATE);

/** A stub of the `api` object OpenClaw passes to register(). */
function fakeApi(pluginConfig = {}) {
  const api = {
    id: "memsearch",
    pluginConfig,
    config: {},
    warnings: [],
    logger: { info() {}, warn: (m) => api.warnings.push(m), error() {} },
    tools: new Map(),
    hooks: new Map(),
    registerTool(factory, opts) {
      api.tools.set(opts.name, factory);
    },
    on(name, handler) {
      api.hooks.set(name, handler);
    },
  };
  plugin.register(api);
  return api;
}

const CTX = { agentId: "main", sessionId: "sess-1", sessionKey: "agent:main:main", workspaceDir: WORKSPACE };

/** Agent messages of one run, the way agent_end reports them. */
const MESSAGES = [
  { role: "user", content: "old question", timestamp: 1 },
  { role: "assistant", content: [{ type: "text", text: "old answer" }], timestamp: 2 },
  {
    role: "user",
    content: [{ type: "text", text: `<memsearch-context>\n${CONTEXT}\n</memsearch-context>\n\nHow do we deploy?` }],
    timestamp: 1700000000000,
  },
  {
    role: "assistant",
    content: [
      { type: "thinking", thinking: "hmm" },
      { type: "text", text: "Checking the scripts." },
      { type: "toolCall", id: "call_1", name: "exec", arguments: { command: "cat deploy.sh" } },
    ],
    timestamp: 1700000000001,
  },
  { role: "toolResult", toolCallId: "call_1", toolName: "exec", content: [{ type: "text", text: "#!/bin/sh" }] },
  { role: "assistant", content: [{ type: "text", text: "Run ./deploy.sh prod." }], timestamp: 1700000000002 },
];

const EXPECTED_TURN =
  "[User]: How do we deploy?\n" +
  "[Assistant]: Checking the scripts.\n" +
  "[Tool exec]: cat deploy.sh\n" +
  "[Assistant]: Run ./deploy.sh prod.\n";

test("manifest and package point at the plugin entry", () => {
  const manifest = JSON.parse(readFileSync(new URL("./openclaw.plugin.json", import.meta.url), "utf8"));
  const pkg = JSON.parse(readFileSync(new URL("./package.json", import.meta.url), "utf8"));
  assert.equal(manifest.id, plugin.id);
  assert.equal(manifest.kind, "memory");
  assert.equal(manifest.configSchema.type, "object");
  assert.deepEqual(pkg.openclaw.extensions, ["./index.js"]);
  assert.equal(typeof plugin.register, "function");
});

test("registers four tool factories and the lifecycle hooks", () => {
  const api = fakeApi();
  assert.deepEqual([...api.tools.keys()].sort(), ["memory_expand", "memory_get", "memory_search", "memory_transcript"]);
  const tool = api.tools.get("memory_search")(CTX);
  assert.equal(tool.name, "memory_search");
  assert.deepEqual(tool.parameters.required, ["query"]);
  assert.equal(tool.parameters.properties.top_k.type, "integer");
  assert.deepEqual([...api.hooks.keys()].sort(), [
    "agent_end",
    "before_agent_start",
    "before_compaction",
    "gateway_stop",
    "session_end",
  ]);
});

test("tools run memsearch in the agent's workspace and return its JSON as text", async () => {
  const api = fakeApi();
  const search = api.tools.get("memory_search")(CTX);
  const result = await search.execute("call-1", { query: "deploy", top_k: 2, budget: 300 });
  assert.equal(result.content.length, 1);
  assert.equal(result.content[0].type, "text");
  const hits = JSON.parse(result.content[0].text);
  assert.deepEqual(hits[0].argv, [
    "search",
    "deploy",
    "-j",
    "--collection",
    COLLECTION,
    "--milvus-uri",
    MILVUS_URI,
    "--top-k",
    "2",
    "--budget",
    "300",
  ]);
  const get = await api.tools.get("memory_get")(CTX).execute("call-2", { path: "/w/.memsearch/memory/a.md" });
  assert.deepEqual(JSON.parse(get.content[0].text).argv.slice(0, 3), ["get", "/w/.memsearch/memory/a.md", "-j"]);

  const locates = fake.calls().filter(isHook("locate"));
  assert.equal(locates.length, 1, "locate is cached per workspace");
  assert.deepEqual(locates[0].argv, ["hook", "openclaw", "locate"]);
  assert.deepEqual(JSON.parse(locates[0].stdin), { cwd: WORKSPACE });
  assert.equal(locates[0].cwd, WORKSPACE);
});

test("failing and hanging memsearch give one-line errors in time", async () => {
  process.env.FAKE_MS_FAIL = "expand";
  process.env.FAKE_MS_HANG = "transcript";
  process.env.MEMSEARCH_PLUGIN_TIMEOUT_MS = "600";
  const api = fakeApi();
  const expand = await api.tools.get("memory_expand")(CTX).execute("c", { chunk_hash: "h1" });
  assert.equal(
    expand.content[0].text,
    "memory_expand failed: memsearch expand: Error: collection 'ghost' does not exist",
  );
  const t0 = Date.now();
  const tr = await api.tools.get("memory_transcript")(CTX).execute("c", { path: "/s.jsonl" });
  assert.equal(tr.content[0].text, "memory_transcript failed: memsearch transcript: timed out after 0.6s");
  assert.ok(Date.now() - t0 < 3000);
  const hung = fake.calls().find((c) => c.argv[0] === "transcript");
  assert.ok(await gone(hung.pid), "the hung memsearch was killed");
});

test("the first run of a session gets recent memory prepended, later runs do not", async () => {
  const api = fakeApi();
  const start = api.hooks.get("before_agent_start");
  const first = await start({ prompt: "hi" }, CTX);
  assert.deepEqual(first, { prependContext: `<memsearch-context>\n${CONTEXT}\n</memsearch-context>` });
  assert.equal(await start({ prompt: "again" }, CTX), undefined);
  const starts = fake.calls().filter(isHook("session-start"));
  assert.equal(starts.length, 1);
  assert.deepEqual(starts[0].argv, ["hook", "openclaw", "session-start"]);
  assert.equal(starts[0].root, import.meta.dirname); // the plugin's folder, for the update hint
  assert.deepEqual(JSON.parse(starts[0].stdin), { session_id: "sess-1", cwd: WORKSPACE });
});

test("autoRecall: false still starts the session but injects nothing", async () => {
  const api = fakeApi({ autoRecall: false });
  assert.equal(await api.hooks.get("before_agent_start")({ prompt: "hi" }, CTX), undefined);
  assert.equal(fake.calls().filter(isHook("session-start")).length, 1);
});

test("agent_end hands the rendered turn to a detached `hook openclaw stop`", async () => {
  process.env.FAKE_MS_DELAY_MS = "3000";
  const api = fakeApi();
  const t0 = Date.now();
  await api.hooks.get("agent_end")({ messages: MESSAGES, success: true }, CTX);
  assert.ok(Date.now() - t0 < 1000, "agent_end returned without waiting");
  const call = await fake.waitForCall(isHook("stop"));
  assert.deepEqual(call.argv, ["hook", "openclaw", "stop"]);
  assert.deepEqual(JSON.parse(call.stdin), {
    session_id: "sess-1",
    cwd: WORKSPACE,
    turn: { id: "1700000000000", text: EXPECTED_TURN },
  });
  if (call.sid !== null) assert.equal(call.sid, call.pid, "stop runs in its own session (detached)");
});

test("agent_end passes the session's JSONL transcript instead of the turn when OpenClaw has one", async () => {
  const sessions = join(STATE, "agents", "main", "sessions");
  mkdirSync(sessions, { recursive: true });
  const file = join(sessions, "sess-1.jsonl");
  writeFileSync(file, '{"type":"session","id":"sess-1"}\n');
  try {
    const api = fakeApi();
    await api.hooks.get("agent_end")({ messages: MESSAGES, success: true }, CTX);
    const call = await fake.waitForCall(isHook("stop"));
    const payload = JSON.parse(call.stdin);
    assert.deepEqual(payload, { session_id: "sess-1", cwd: WORKSPACE, transcript_path: file });
  } finally {
    rmSync(file);
  }
});

test("before_compaction sends the host's sessionFile to pre-compact; session_end ends", async () => {
  const api = fakeApi();
  await api.hooks.get("before_compaction")({ messageCount: 9, sessionFile: "/x/s.jsonl" }, CTX);
  const pre = await fake.waitForCall(isHook("pre-compact"));
  assert.deepEqual(JSON.parse(pre.stdin), { session_id: "sess-1", cwd: WORKSPACE, transcript_path: "/x/s.jsonl" });
  await api.hooks.get("session_end")({ sessionId: "sess-1", messageCount: 9 }, { agentId: "main", sessionId: "sess-1" });
  const end = await fake.waitForCall(isHook("session-end"));
  assert.deepEqual(JSON.parse(end.stdin), { session_id: "sess-1", cwd: WORKSPACE });
});

test("gateway_stop ends the sessions still open", async () => {
  const api = fakeApi();
  await api.hooks.get("before_agent_start")({ prompt: "hi" }, { ...CTX, sessionId: "sess-9" });
  await api.hooks.get("gateway_stop")({ reason: "shutdown" }, {});
  const end = await fake.waitForCall(isHook("session-end"));
  assert.deepEqual(JSON.parse(end.stdin), { session_id: "sess-9", cwd: WORKSPACE });
});

test("failed runs and runs with nothing to capture spawn nothing", async () => {
  const api = fakeApi();
  await api.hooks.get("agent_end")({ messages: MESSAGES, success: false }, CTX);
  await api.hooks.get("agent_end")({ messages: [{ role: "user", content: "hi" }], success: true }, CTX);
  await sleep(300);
  assert.deepEqual(fake.calls(), []);
});

test("MEMSEARCH_DISABLE=1: hooks do nothing and tools say so", async () => {
  process.env.MEMSEARCH_DISABLE = "1";
  const api = fakeApi();
  assert.equal(await api.hooks.get("before_agent_start")({ prompt: "hi" }, CTX), undefined);
  await api.hooks.get("agent_end")({ messages: MESSAGES, success: true }, CTX);
  await api.hooks.get("session_end")({ sessionId: "sess-1" }, CTX);
  const out = await api.tools.get("memory_search")(CTX).execute("c", { query: "x" });
  assert.equal(out.content[0].text, "memory_search failed: memsearch is disabled (MEMSEARCH_DISABLE is set)");
  await sleep(300);
  assert.deepEqual(fake.calls(), []);
});

test("autoCapture: false turns capture off", async () => {
  const api = fakeApi({ autoCapture: false });
  await api.hooks.get("agent_end")({ messages: MESSAGES, success: true }, CTX);
  await sleep(300);
  assert.deepEqual(fake.calls(), []);
});

/** memsearch 0.4's plugin settings (its openclaw.plugin.json): a leftover entry may hold any of them. */
const SETTINGS_04 = { provider: "onnx", autoCapture: true, autoRecall: true };

/** The checks OpenClaw makes of `plugins.entries.memsearch.config` against the manifest's configSchema. */
function schemaErrors(schema, config) {
  const errors = [];
  for (const [key, value] of Object.entries(config)) {
    const property = schema.properties?.[key];
    if (!property) {
      if (schema.additionalProperties === false) errors.push(`${key}: not allowed`);
    } else if (property.type && typeof value !== property.type) errors.push(`${key}: not a ${property.type}`);
  }
  return errors;
}

test("memsearch 0.4's settings are accepted and ignored, with one warning naming them", async () => {
  const manifest = JSON.parse(readFileSync(new URL("./openclaw.plugin.json", import.meta.url), "utf8"));
  assert.deepEqual(schemaErrors(manifest.configSchema, SETTINGS_04), []);
  assert.deepEqual(schemaErrors(manifest.configSchema, { provider: "openai" }), []);
  assert.deepEqual(schemaErrors(manifest.configSchema, { autoRecal: true }), ["autoRecal: not allowed"]);

  const first = fakeApi({ provider: "openai" });
  const again = fakeApi({ ...SETTINGS_04 }); // OpenClaw may register the plugin more than once
  const warnings = [...first.warnings, ...again.warnings];
  assert.equal(warnings.length, 1, warnings.join("\n"));
  assert.match(warnings[0], /^\[memsearch\] .*\bprovider\b.*ignored/);
  assert.match(warnings[0], /embedding\.provider/);
  assert.equal(warnings[0].includes("\n"), false);
  assert.deepEqual(fakeApi({ autoCapture: true, autoRecall: true }).warnings, []);

  // Ignored indeed: the session still starts and its memory is injected.
  const out = await first.hooks.get("before_agent_start")({ prompt: "hi" }, { ...CTX, sessionId: "sess-04" });
  assert.match(out.prependContext, /<memsearch-context>/);
  assert.deepEqual(first.warnings, warnings.slice(0, 1));
});
