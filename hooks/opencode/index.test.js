// node --test: the OpenCode plugin against a stub of OpenCode's plugin input
// and a fake `memsearch` on PATH (hooks/_js/testkit.mjs).

import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, beforeEach, test } from "node:test";

import {
  COLLECTION,
  CONTEXT,
  MILVUS_URI,
  gone,
  installFake,
  isHook,
  sleep,
} from "../_js/testkit.mjs";
import * as entry from "./index.js";

const plugin = entry.default;
const fake = installFake();
after(() => fake.cleanup());
beforeEach(() => fake.reset());

const PROJECT = join(fake.root, "project");
mkdirSync(PROJECT);

/** OpenCode messages for one session: an earlier turn, then the turn to capture. */
const MESSAGES = [
  { info: { id: "msg_01", role: "user" }, parts: [{ type: "text", text: "earlier question" }] },
  { info: { id: "msg_02", role: "assistant" }, parts: [{ type: "text", text: "earlier answer" }] },
  {
    info: { id: "msg_03", role: "user" },
    parts: [
      { type: "text", text: "Which cache did we pick?" },
      { type: "text", text: "<file contents>", synthetic: true },
    ],
  },
  {
    info: { id: "msg_04", role: "assistant" },
    parts: [
      { type: "step-start" },
      { type: "reasoning", text: "thinking…" },
      { type: "text", text: "Let me check the notes." },
      {
        type: "tool",
        tool: "bash",
        callID: "c1",
        state: { status: "completed", input: { command: "grep -r cache\n  docs/" }, output: "docs/a.md" },
      },
      { type: "tool", tool: "read", state: { status: "completed", input: { filePath: "/p/docs/a.md" } } },
      { type: "text", text: "We picked Redis." },
      { type: "step-finish" },
    ],
  },
];

const EXPECTED_TURN =
  "[User]: Which cache did we pick?\n" +
  "[Assistant]: Let me check the notes.\n" +
  "[Tool bash]: grep -r cache docs/\n" +
  "[Tool read]: /p/docs/a.md\n" +
  "[Assistant]: We picked Redis.\n";

function fakeClient(messages = MESSAGES) {
  const requests = [];
  return {
    requests,
    session: {
      async messages(opts) {
        requests.push(opts);
        return { data: messages };
      },
    },
  };
}

async function load(client = fakeClient()) {
  return plugin({ client, directory: PROJECT, worktree: PROJECT, project: {}, $: undefined });
}

test("the module exports only the plugin function", () => {
  assert.deepEqual(Object.keys(entry), ["default"]);
  assert.equal(typeof plugin, "function");
});

test("registers the four tools and the hooks", async () => {
  const hooks = await load();
  assert.deepEqual(Object.keys(hooks.tool).sort(), [
    "memory_expand",
    "memory_get",
    "memory_search",
    "memory_transcript",
  ]);
  for (const t of Object.values(hooks.tool)) {
    assert.equal(typeof t.description, "string");
    assert.equal(typeof t.execute, "function");
  }
  // No @opencode-ai/plugin here: arguments are plain JSON Schema.
  assert.deepEqual(hooks.tool.memory_search.args.query, {
    type: "string",
    description: "What to look for, in natural language",
  });
  assert.equal(typeof hooks.event, "function");
  assert.equal(typeof hooks["experimental.chat.system.transform"], "function");
});

test("tools shell out with the located collection and return memsearch's JSON", async () => {
  const hooks = await load();
  const out = await hooks.tool.memory_search.execute({ query: "cache choice", top_k: 3 }, { directory: PROJECT });
  const hits = JSON.parse(out);
  assert.equal(hits[0].chunk_hash, "abc123");
  assert.deepEqual(hits[0].argv, [
    "search",
    "cache choice",
    "-j",
    "--collection",
    COLLECTION,
    "--milvus-uri",
    MILVUS_URI,
    "--top-k",
    "3",
  ]);

  const expand = JSON.parse(await hooks.tool.memory_expand.execute({ chunk_hash: "abc123" }, {}));
  assert.deepEqual(expand.argv, ["expand", "abc123", "-j", "--collection", COLLECTION, "--milvus-uri", MILVUS_URI]);

  const get = JSON.parse(await hooks.tool.memory_get.execute({ path: "/p/m.md", from: 2, lines: 5 }, {}));
  assert.deepEqual(get.argv, [
    "get",
    "/p/m.md",
    "-j",
    "--collection",
    COLLECTION,
    "--milvus-uri",
    MILVUS_URI,
    "--from",
    "2",
    "--lines",
    "5",
  ]);

  const tr = JSON.parse(
    await hooks.tool.memory_transcript.execute({ path: "/s/x.jsonl", turn: "abc", context: 1 }, {}),
  );
  assert.deepEqual(tr.argv, ["transcript", "/s/x.jsonl", "-j", "--turn", "abc", "--context", "1"]);

  // locate ran once for the project (cached), with the project as cwd and stdin.
  const locates = fake.calls().filter(isHook("locate"));
  assert.equal(locates.length, 1);
  assert.deepEqual(locates[0].argv, ["hook", "opencode", "locate"]);
  assert.deepEqual(JSON.parse(locates[0].stdin), { cwd: PROJECT });
  assert.equal(locates[0].cwd, PROJECT);
});

test("a failing memsearch yields a one-line error", async () => {
  process.env.FAKE_MS_FAIL = "search";
  const hooks = await load();
  const out = await hooks.tool.memory_search.execute({ query: "x" }, {});
  assert.equal(out, "memory_search failed: memsearch search: Error: collection 'ghost' does not exist");

  process.env.FAKE_MS_FAIL = "locate";
  const other = await load();
  const located = await other.tool.memory_expand.execute({ chunk_hash: "h" }, {});
  assert.match(located, /^memory_expand failed: memsearch hook locate: Error: collection 'ghost'/);
  assert.ok(!located.includes("\n"));

  const missing = await other.tool.memory_search.execute({}, {});
  assert.match(missing, /^memory_search failed: /);
});

test("a hanging memsearch is killed and reported within the timeout", async () => {
  process.env.FAKE_MS_HANG = "search";
  process.env.MEMSEARCH_PLUGIN_TIMEOUT_MS = "700";
  const hooks = await load();
  const t0 = Date.now();
  const out = await hooks.tool.memory_search.execute({ query: "x" }, {});
  const took = Date.now() - t0;
  assert.equal(out, "memory_search failed: memsearch search: timed out after 0.7s");
  assert.ok(took < 3000, `took ${took} ms`);
  const hung = fake.calls().find((c) => c.argv[0] === "search");
  assert.ok(await gone(hung.pid), "the hung memsearch was killed");
});

test("a grandchild holding the pipe does not keep the tool waiting", async () => {
  process.env.FAKE_MS_ORPHAN = "search";
  const hooks = await load();
  const t0 = Date.now();
  const out = await hooks.tool.memory_search.execute({ query: "x" }, {});
  assert.equal(JSON.parse(out)[0].chunk_hash, "abc123");
  assert.ok(Date.now() - t0 < 5000);
});

test("memsearch missing from PATH is a one-line error", async () => {
  process.env.MEMSEARCH_CMD = "/nonexistent/memsearch";
  const hooks = await load();
  const out = await hooks.tool.memory_search.execute({ query: "x" }, {});
  assert.match(out, /^memory_search failed: .*not found \(put memsearch on PATH or set MEMSEARCH_CMD\)$/);
});

test("MEMSEARCH_CMD may hold a command with arguments", async () => {
  process.env.MEMSEARCH_CMD = JSON.stringify([process.execPath, join(fake.bin, "memsearch")]);
  const hooks = await load();
  const out = await hooks.tool.memory_search.execute({ query: "x" }, {});
  assert.equal(JSON.parse(out)[0].chunk_hash, "abc123");
});

test("an idle session hands its last turn to a detached `hook opencode stop`", async () => {
  process.env.FAKE_MS_DELAY_MS = "3000"; // the hook is slow; the agent must not wait for it
  const data = join(fake.root, "xdg-data");
  mkdirSync(join(data, "opencode"), { recursive: true });
  writeFileSync(join(data, "opencode", "opencode.db"), "");
  process.env.XDG_DATA_HOME = data; // where OpenCode keeps its sessions: the anchor names it
  const client = fakeClient();
  const hooks = await load(client);
  const t0 = Date.now();
  await hooks.event({ event: { type: "session.idle", properties: { sessionID: "ses_1" } } });
  assert.ok(Date.now() - t0 < 1500, "the idle handler returned without waiting for memsearch");
  assert.deepEqual(client.requests[0].path, { id: "ses_1" });

  const call = await fake.waitForCall(isHook("stop"));
  assert.deepEqual(call.argv, ["hook", "opencode", "stop"]);
  assert.deepEqual(JSON.parse(call.stdin), {
    session_id: "ses_1",
    cwd: PROJECT,
    turn: { id: "msg_03", text: EXPECTED_TURN },
    db_path: join(data, "opencode", "opencode.db"),
  });
  delete process.env.XDG_DATA_HOME;
  if (call.sid !== null) assert.equal(call.sid, call.pid, "stop runs in its own session (detached)");

  // The same turn going idle again is not captured twice.
  await hooks.event({ event: { type: "session.status", properties: { sessionID: "ses_1", status: { type: "idle" } } } });
  await sleep(300);
  assert.equal(fake.calls().filter(isHook("stop")).length, 1);
});

test("a session without an answered turn captures nothing", async () => {
  const hooks = await load(fakeClient([{ info: { id: "m1", role: "user" }, parts: [{ type: "text", text: "hi" }] }]));
  await hooks.event({ event: { type: "session.idle", properties: { sessionID: "ses_2" } } });
  await sleep(300);
  assert.equal(fake.calls().length, 0);
});

test("recent memory from session-start is folded into the system prompt once", async () => {
  const hooks = await load();
  const transform = hooks["experimental.chat.system.transform"];
  const output = { system: ["You are a coding agent."] };
  await transform({ sessionID: "ses_3" }, output);
  assert.equal(output.system.length, 1);
  assert.ok(output.system[0].startsWith("You are a coding agent.\n\n<memsearch-context>\n"));
  assert.ok(output.system[0].includes(CONTEXT));

  // Every LLM call transforms a fresh copy; re-applying to the same one replaces the block.
  await transform({ sessionID: "ses_3" }, output);
  assert.equal(output.system[0].split("<memsearch-context>").length, 2);

  const empty = { system: [] };
  await transform({ sessionID: "ses_3" }, empty);
  assert.deepEqual(empty.system, [`<memsearch-context>\n${CONTEXT}\n</memsearch-context>`]);

  const starts = fake.calls().filter(isHook("session-start"));
  assert.equal(starts.length, 1, "session-start runs once per session");
  assert.deepEqual(JSON.parse(starts[0].stdin), { session_id: "ses_3", cwd: PROJECT });
  // The hook is told the plugin's folder: its package.json version feeds the update hint.
  assert.equal(starts[0].root, import.meta.dirname);
});

test("session.created starts the session early; session.deleted ends it", async () => {
  const hooks = await load();
  await hooks.event({ event: { type: "session.created", properties: { info: { id: "ses_4" } } } });
  await fake.waitForCall(isHook("session-start"));
  await hooks.event({ event: { type: "session.deleted", properties: { info: { id: "ses_4" } } } });
  const end = await fake.waitForCall(isHook("session-end"));
  assert.deepEqual(JSON.parse(end.stdin), { session_id: "ses_4", cwd: PROJECT });
});

test("sessions still open when OpenCode exits are ended", async () => {
  const script = `
    const { default: plugin } = await import(${JSON.stringify(new URL("./index.js", import.meta.url).href)});
    const hooks = await plugin({ client: {}, directory: ${JSON.stringify(PROJECT)} });
    await hooks["experimental.chat.system.transform"]({ sessionID: "ses_exit" }, { system: [] });
    process.exit(0);`;
  const r = spawnSync(process.execPath, ["--input-type=module", "-e", script], { encoding: "utf8", timeout: 20_000 });
  assert.equal(r.status, 0, r.stderr);
  const end = await fake.waitForCall(isHook("session-end"));
  assert.deepEqual(JSON.parse(end.stdin), { session_id: "ses_exit", cwd: PROJECT });
});

test("MEMSEARCH_DISABLE=1: no hook runs, nothing is injected, tools say so", async () => {
  process.env.MEMSEARCH_DISABLE = "1";
  const hooks = await load();
  const output = { system: ["base"] };
  await hooks["experimental.chat.system.transform"]({ sessionID: "ses_5" }, output);
  assert.deepEqual(output.system, ["base"]);
  await hooks.event({ event: { type: "session.created", properties: { info: { id: "ses_5" } } } });
  await hooks.event({ event: { type: "session.idle", properties: { sessionID: "ses_5" } } });
  const out = await hooks.tool.memory_search.execute({ query: "x" }, {});
  assert.equal(out, "memory_search failed: memsearch is disabled (MEMSEARCH_DISABLE is set)");
  await sleep(300);
  assert.deepEqual(fake.calls(), []);
});

test("uses OpenCode's zod for tool arguments when @opencode-ai/plugin is installed", async () => {
  // OpenCode installs @opencode-ai/plugin in its config directory; fake one there.
  const pkg = join(process.env.XDG_CONFIG_HOME, "opencode", "node_modules", "@opencode-ai", "plugin");
  mkdirSync(pkg, { recursive: true });
  writeFileSync(join(pkg, "package.json"), JSON.stringify({ name: "@opencode-ai/plugin", main: "index.js" }));
  writeFileSync(
    join(pkg, "index.js"),
    `const make = (kind) => ({ kind, desc: "", opt: false,
       describe(d) { return { ...this, desc: d }; },
       optional() { return { ...this, opt: true }; },
       int() { return { ...this, kind: kind + ":int" }; } });
     exports.tool = Object.assign((x) => x, { schema: { string: () => make("string"), number: () => make("number") } });`,
  );
  const hooks = await load();
  const args = hooks.tool.memory_search.args;
  assert.equal(args.query.kind, "string");
  assert.equal(args.query.opt, false);
  assert.equal(args.top_k.kind, "number:int");
  assert.equal(args.top_k.opt, true);
});
