// Test helpers shared by hooks/opencode/index.test.js and
// hooks/openclaw/index.test.js: a fake `memsearch` on PATH that records each
// call (argv, stdin, pid, session id) and prints canned JSON.

import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { delimiter, join } from "node:path";

export const COLLECTION = "ms_fake_0123abcd";
export const MILVUS_URI = "/tmp/fake-milvus.db";
export const CONTEXT = "## 2026-01-02\n- The team chose Redis for the session cache.";

// Behaviour, from the environment of each call:
//   FAKE_MS_FAIL=verb,...   exit 1 with a one-line error for these verbs
//   FAKE_MS_HANG=verb,...   never answer (sleep) for these verbs
//   FAKE_MS_ORPHAN=verb,... answer, but leave a grandchild holding stdout
//   FAKE_MS_DELAY_MS=N      sleep N ms before answering `hook … stop`
// where verb is the first argument, or the hook event for `hook`.
const FAKE = String.raw`#!/usr/bin/env node
const fs = require("node:fs");
const { spawn } = require("node:child_process");
const argv = process.argv.slice(2);
const verb = argv[0] === "hook" ? argv[2] : argv[0];
const has = (name) => (process.env[name] || "").split(",").includes(verb);
let sid = null;
try { sid = Number(fs.readFileSync("/proc/self/stat", "utf8").split(") ")[1].split(" ")[3]); } catch {}
let stdin = "";
try { stdin = fs.readFileSync(0, "utf8"); } catch {}
fs.appendFileSync(process.env.FAKE_MS_LOG, JSON.stringify({ argv, stdin, pid: process.pid, sid, cwd: process.cwd(), root: process.env.MEMSEARCH_PLUGIN_ROOT }) + "\n");
if (has("FAKE_MS_HANG")) { setInterval(() => {}, 1000); return; }
if (has("FAKE_MS_FAIL")) { process.stderr.write("Traceback hidden\nError: collection 'ghost' does not exist\n"); process.exit(1); }
const answers = {
  locate: { project_dir: process.cwd(), memsearch_dir: "/p/.memsearch", memory_dir: "/p/.memsearch/memory", collection: "${COLLECTION}", milvus_uri: "${MILVUS_URI}" },
  "session-start": { systemMessage: "[memsearch] 2 memory files", hookSpecificOutput: { hookEventName: "SessionStart", additionalContext: ${JSON.stringify(CONTEXT)} } },
  search: [{ content: "Redis was chosen", source: "/p/.memsearch/memory/2026-01-02.md", chunk_hash: "abc123", score: 0.91, argv }],
  expand: { chunk_hash: argv[1], content: "## Session\n- Redis", argv },
  get: { path: argv[1], from: 1, lines: 2, content: "line one\nline two", argv },
  transcript: { turns: [{ role: "user", text: "hi" }], argv },
};
const answer = argv[0] === "hook" ? answers[verb] || {} : answers[verb];
if (has("FAKE_MS_ORPHAN")) spawn("sleep", ["5"], { stdio: ["ignore", "inherit", "inherit"] }).unref();
const delay = verb === "stop" ? Number(process.env.FAKE_MS_DELAY_MS || 0) : 0;
setTimeout(() => process.stdout.write(JSON.stringify(answer) + "\n"), delay);
`;

/**
 * Install the fake memsearch in a fresh directory at the front of PATH.
 * Returns helpers to read its calls and to restore the environment.
 */
export function installFake() {
  const root = mkdtempSync(join(tmpdir(), "memsearch-plugin-test-"));
  const bin = join(root, "bin");
  mkdirSync(bin);
  const script = join(bin, "memsearch");
  writeFileSync(script, FAKE);
  chmodSync(script, 0o755);
  const log = join(root, "calls.jsonl");
  const saved = { ...process.env };
  const reset = () => {
    for (const key of Object.keys(process.env)) if (!(key in saved)) delete process.env[key];
    Object.assign(process.env, saved);
    process.env.PATH = `${bin}${delimiter}${saved.PATH ?? ""}`;
    process.env.FAKE_MS_LOG = log;
    for (const key of ["MEMSEARCH_CMD", "MEMSEARCH_DISABLE", "MEMSEARCH_PLUGIN_TIMEOUT_MS", "XDG_CONFIG_HOME"]) {
      delete process.env[key];
    }
    process.env.XDG_CONFIG_HOME = join(root, "xdg");
    rmSync(log, { force: true });
  };
  reset();

  /** @returns {{ argv: string[], stdin: string, pid: number, sid: number | null, cwd: string }[]} */
  const calls = () =>
    existsSync(log)
      ? readFileSync(log, "utf8")
          .split("\n")
          .filter(Boolean)
          .map((l) => JSON.parse(l))
      : [];

  /** Wait until a call matching PRED is logged (detached children log asynchronously). */
  const waitForCall = async (pred, ms = 5000) => {
    const end = Date.now() + ms;
    for (;;) {
      const hit = calls().find(pred);
      if (hit) return hit;
      if (Date.now() > end) throw new Error(`no matching memsearch call; calls: ${JSON.stringify(calls())}`);
      await new Promise((r) => setTimeout(r, 25));
    }
  };

  const cleanup = () => {
    for (const key of Object.keys(process.env)) if (!(key in saved)) delete process.env[key];
    Object.assign(process.env, saved);
    // Sessions the tests left open would be ended at exit by the real memsearch.
    process.env.MEMSEARCH_DISABLE = "1";
    rmSync(root, { recursive: true, force: true });
  };

  return { root, bin, log, calls, waitForCall, reset, cleanup };
}

/** True when process PID is still running. */
export function alive(pid) {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** Wait up to MS for process PID to be gone (and reaped); true when it is. */
export async function gone(pid, ms = 3000) {
  const end = Date.now() + ms;
  while (alive(pid)) {
    if (Date.now() > end) return false;
    await sleep(25);
  }
  return true;
}

/** Arguments of a hook call (`hook <platform> <event>`). */
export const isHook = (event) => (c) => c.argv[0] === "hook" && c.argv[2] === event;
