// Shared by the OpenCode and OpenClaw plugins (hooks/opencode, hooks/openclaw):
// running the `memsearch` CLI with a deadline, the hook protocol (one JSON
// object in on stdin, one JSON object out on stdout), rendering the last turn
// of a conversation, and the four recall tools. Node built-ins only.
//
// Nothing here throws into the host: every call resolves, failures become
// one-line strings.

import { spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

/** `hooks/`: each plugin's folder is `hooks/<platform>`. */
const HOOKS_DIR = dirname(dirname(fileURLToPath(import.meta.url)));

/** The hook's environment, naming the plugin's folder (its package.json version feeds the update hint). */
function hookEnv(platform, env) {
  if (env.MEMSEARCH_PLUGIN_ROOT) return env;
  return { ...env, MEMSEARCH_PLUGIN_ROOT: join(HOOKS_DIR, platform) };
}

/** Default deadlines, in milliseconds. */
export const TIMEOUTS = Object.freeze({
  locate: 15_000,
  sessionStart: 10_000,
  search: 60_000,
  expand: 60_000,
  get: 30_000,
  transcript: 30_000,
  /** How long a detached hook may live before its direct child is killed. */
  detached: 120_000,
});

const MAX_OUTPUT = 16 * 1024 * 1024;
const TRUTHY = new Set(["1", "true", "yes", "on"]);

/** True when MEMSEARCH_DISABLE asks every hook to do nothing. */
export function isDisabled(env = process.env) {
  return TRUTHY.has(String(env.MEMSEARCH_DISABLE ?? "").trim().toLowerCase());
}

/**
 * The command that runs memsearch: MEMSEARCH_CMD (a JSON array of argv
 * words, or words separated by spaces), else `memsearch` on PATH.
 * @returns {string[]}
 */
export function memsearchCommand(env = process.env) {
  const raw = String(env.MEMSEARCH_CMD ?? "").trim();
  if (raw.startsWith("[")) {
    try {
      const argv = JSON.parse(raw);
      if (Array.isArray(argv) && argv.length && argv.every((a) => typeof a === "string")) return argv;
    } catch {
      /* fall through to the plain split */
    }
  }
  const words = raw.split(/\s+/).filter(Boolean);
  return words.length ? words : ["memsearch"];
}

/** A working directory for the child: CWD when it exists, else this process's. */
const workdir = (cwd) => (cwd && existsSync(cwd) ? cwd : undefined);

/** MEMSEARCH_PLUGIN_TIMEOUT_MS, when set, caps every deadline (tests, slow disks). */
function deadline(ms, env) {
  const cap = Number(env.MEMSEARCH_PLUGIN_TIMEOUT_MS);
  return Number.isFinite(cap) && cap > 0 ? Math.min(ms, cap) : ms;
}

/** The line of a message that says what went wrong (the first naming an error, else the last), kept short. */
export function oneLine(text, max = 300) {
  const lines = String(text ?? "")
    .split(/\r?\n/)
    .map((l) => l.trim())
    .filter(Boolean);
  const line = lines.find((l) => /error/i.test(l)) ?? lines[lines.length - 1] ?? "";
  return line.length > max ? `${line.slice(0, max - 1)}…` : line;
}

/**
 * @typedef {{ ok: boolean, code: number | null, stdout: string, stderr: string, error?: string }} RunResult
 */

/**
 * Run memsearch with ARGS, writing INPUT to its stdin. Resolves (never
 * rejects) by the deadline at the latest: on timeout the child's process
 * group is killed and its pipes are dropped, so a grandchild holding them
 * cannot keep the host waiting either.
 * @param {string[]} args
 * @param {{ input?: string, timeoutMs: number, cwd?: string, env?: NodeJS.ProcessEnv }} opts
 * @returns {Promise<RunResult>}
 */
export function runMemsearch(args, { input = "", timeoutMs, cwd, env = process.env }) {
  const [cmd, ...prefix] = memsearchCommand(env);
  const limit = deadline(timeoutMs, env);
  return new Promise((resolve) => {
    let child;
    try {
      // Own process group, so a timeout can kill everything the command started.
      child = spawn(cmd, [...prefix, ...args], {
        cwd: workdir(cwd),
        env,
        detached: true,
        stdio: ["pipe", "pipe", "pipe"],
      });
    } catch (e) {
      resolve({ ok: false, code: null, stdout: "", stderr: "", error: spawnError(cmd, e) });
      return;
    }
    const out = [];
    const err = [];
    let size = 0;
    let settled = false;
    let grace;
    const finish = (/** @type {Partial<RunResult>} */ result) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      clearTimeout(grace);
      child.stdout?.destroy();
      child.stderr?.destroy();
      const stdout = Buffer.concat(out).toString("utf8");
      const stderr = Buffer.concat(err).toString("utf8");
      resolve({ ok: false, code: null, stdout, stderr, ...result });
    };
    const collect = (sink) => (chunk) => {
      size += chunk.length;
      if (size <= MAX_OUTPUT) sink.push(chunk);
    };
    child.stdout.on("data", collect(out));
    child.stderr.on("data", collect(err));
    child.on("error", (e) => finish({ error: spawnError(cmd, e) }));
    child.on("close", (code) => finish({ ok: code === 0, code }));
    // If the command exits but something it started still holds the pipes,
    // take what has arrived instead of waiting for them to close.
    child.on("exit", (code) => {
      grace = setTimeout(() => finish({ ok: code === 0, code }), 300);
    });
    const timer = setTimeout(() => {
      killGroup(child);
      finish({ error: `timed out after ${Math.round(limit / 100) / 10}s` });
    }, limit);
    child.stdin.on("error", () => {}); // EPIPE when the command ignores stdin
    child.stdin.end(input);
  });
}

function killGroup(child) {
  try {
    process.kill(-child.pid, "SIGKILL");
  } catch {
    try {
      child.kill("SIGKILL");
    } catch {
      /* already gone */
    }
  }
}

function spawnError(cmd, e) {
  if (e && e.code === "ENOENT") {
    return `'${cmd}' not found (put memsearch on PATH or set MEMSEARCH_CMD)`;
  }
  return oneLine(e?.message ?? String(e));
}

/** Parse one JSON object from a command's stdout (the last line that parses wins). */
export function parseJsonObject(stdout) {
  const text = String(stdout ?? "").trim();
  const candidates = [text, ...text.split(/\r?\n/).reverse()];
  for (const c of candidates) {
    if (!c.trim().startsWith("{")) continue;
    try {
      const value = JSON.parse(c);
      if (value && typeof value === "object" && !Array.isArray(value)) return value;
    } catch {
      /* try the next candidate */
    }
  }
  return null;
}

/**
 * `memsearch hook PLATFORM EVENT` with PAYLOAD on stdin; resolves to the
 * object it printed, or to `{ error }` (one line) when it failed.
 * @returns {Promise<Record<string, any>>}
 */
export async function callHook(platform, event, payload, { timeoutMs, cwd, env = process.env } = {}) {
  if (isDisabled(env)) return {};
  const r = await runMemsearch(["hook", platform, event], {
    input: JSON.stringify(payload ?? {}),
    timeoutMs: timeoutMs ?? TIMEOUTS.sessionStart,
    cwd,
    env: hookEnv(platform, env),
  });
  if (r.error) return { error: `memsearch hook ${event}: ${r.error}` };
  const value = parseJsonObject(r.stdout);
  if (!value) {
    const why = oneLine(r.stderr) || (r.ok ? "printed no JSON object" : `exit status ${r.code}`);
    return { error: `memsearch hook ${event}: ${why}` };
  }
  return value;
}

/**
 * Fire-and-forget `memsearch hook PLATFORM EVENT`: a detached child that gets
 * PAYLOAD on stdin, with stdout/stderr ignored. Returns at once; the host
 * never waits for it (the child is unref'd, and killed if it outlives the
 * deadline while the host is still up). Returns false when nothing was
 * started.
 */
export function spawnHookDetached(platform, event, payload, { cwd, env = process.env, timeoutMs } = {}) {
  if (isDisabled(env)) return false;
  const [cmd, ...prefix] = memsearchCommand(env);
  let child;
  try {
    child = spawn(cmd, [...prefix, "hook", platform, event], {
      cwd: workdir(cwd),
      env: hookEnv(platform, env),
      detached: true,
      stdio: ["pipe", "ignore", "ignore"],
    });
  } catch {
    return false;
  }
  child.on("error", () => {});
  child.stdin.on("error", () => {});
  child.stdin.end(JSON.stringify(payload ?? {}));
  const timer = setTimeout(() => {
    try {
      child.kill("SIGKILL");
    } catch {
      /* gone */
    }
  }, deadline(timeoutMs ?? TIMEOUTS.detached, env));
  timer.unref();
  child.on("exit", () => clearTimeout(timer));
  child.unref();
  return true;
}

// -- turn rendering ------------------------------------------------------------------------

/** Delimiters around the memory block the plugins inject, so it can be found again. */
export const CONTEXT_OPEN = "<memsearch-context>";
export const CONTEXT_CLOSE = "</memsearch-context>";
const INJECTED = new RegExp(`${CONTEXT_OPEN}[\\s\\S]*?${CONTEXT_CLOSE}\\s*`, "g");

/** Wrap recent-memory markdown for injection into a prompt. */
export function wrapContext(markdown) {
  return `${CONTEXT_OPEN}\n${String(markdown).trim()}\n${CONTEXT_CLOSE}`;
}

/** Remove any block this plugin injected from a text. */
export function stripInjected(text) {
  return String(text ?? "").replace(INJECTED, "").trim();
}

const MAX_TEXT = 8000;
const MAX_COMMAND = 400;

function clip(text, max) {
  return text.length > max ? `${text.slice(0, max)} …(truncated)` : text;
}

/** A tool call's input as the one-line "command" the journal shows. */
export function commandOf(input) {
  if (input == null) return "";
  if (typeof input === "string") return clip(input.replace(/\s+/g, " ").trim(), MAX_COMMAND);
  if (typeof input !== "object") return String(input);
  for (const key of ["command", "cmd", "query", "pattern", "filePath", "file_path", "path", "url"]) {
    const v = input[key];
    if (typeof v === "string" && v.trim()) return clip(v.replace(/\s+/g, " ").trim(), MAX_COMMAND);
  }
  let json = "";
  try {
    json = JSON.stringify(input);
  } catch {
    json = String(input);
  }
  return clip(json, MAX_COMMAND);
}

/**
 * @typedef {{ kind: "text", text: string } | { kind: "tool", name: string, command: string }} TurnPart
 * @typedef {{ role: "user" | "assistant", id?: string, parts: TurnPart[] }} TurnMessage
 */

/**
 * Render the last turn — from the last user message that has text to the end
 * — as `[User]: …`, `[Assistant]: …` and `[Tool <name>]: <command>` lines.
 * @param {TurnMessage[]} messages normalized host messages, oldest first
 * @returns {{ id: string, text: string } | null}
 */
export function renderLastTurn(messages) {
  const list = Array.isArray(messages) ? messages : [];
  const userText = (m) =>
    m.parts
      .filter((p) => p.kind === "text")
      .map((p) => stripInjected(p.text))
      .filter(Boolean)
      .join("\n")
      .trim();
  let start = -1;
  for (let i = list.length - 1; i >= 0; i--) {
    if (list[i]?.role === "user" && userText(list[i])) {
      start = i;
      break;
    }
  }
  if (start < 0) return null;
  const lines = [`[User]: ${clip(userText(list[start]), MAX_TEXT)}`];
  for (const m of list.slice(start + 1)) {
    if (m?.role === "user") {
      const text = userText(m);
      if (text) lines.push(`[User]: ${clip(text, MAX_TEXT)}`);
      continue;
    }
    if (m?.role !== "assistant") continue;
    for (const p of m.parts) {
      if (p.kind === "tool") lines.push(`[Tool ${p.name || "tool"}]: ${p.command}`);
      else if (p.text.trim()) lines.push(`[Assistant]: ${clip(p.text.trim(), MAX_TEXT)}`);
    }
  }
  if (lines.length < 2) return null; // nothing answered yet
  return { id: String(list[start].id ?? ""), text: `${lines.join("\n")}\n` };
}

// -- recall tools ----------------------------------------------------------------------------

/** Argument specs of the four tools, host-neutral. */
export const TOOL_SPECS = {
  memory_search: {
    description:
      "Search this project's memory (past sessions' journal notes and indexed markdown) with " +
      "hybrid semantic + keyword search. Returns JSON hits with source, heading, content, score " +
      "and chunk_hash. Start recall here; follow up with memory_expand or memory_get.",
    args: {
      query: { type: "string", description: "What to look for, in natural language", required: true },
      top_k: { type: "integer", description: "How many hits (default 5)" },
      budget: { type: "integer", description: "Cap the hits at about this many tokens" },
    },
  },
  memory_expand: {
    description:
      "Expand one memory_search hit (by its chunk_hash) into the full markdown section around it. " +
      "Journal sections may carry a session anchor pointing at the original transcript.",
    args: {
      chunk_hash: { type: "string", description: "chunk_hash of a memory_search hit", required: true },
    },
  },
  memory_get: {
    description:
      "Read lines of an indexed memory markdown file (e.g. a hit's source path). Only files in " +
      "the index can be read.",
    args: {
      path: { type: "string", description: "Path of an indexed markdown file", required: true },
      from: { type: "integer", description: "First line, 1-based (default 1)" },
      lines: { type: "integer", description: "Number of lines (default: to the end)" },
    },
  },
  memory_transcript: {
    description:
      "Show the original conversation (with tool calls) from a session transcript named in a " +
      "journal anchor; with turn, only that turn and its neighbours.",
    args: {
      path: { type: "string", description: "Transcript path from the anchor", required: true },
      turn: { type: "string", description: "Turn id from the anchor (prefix match)" },
      context: { type: "integer", description: "Turns of context around the turn" },
    },
  },
};

const isInt = (v) => Number.isInteger(v) && v > 0;
const isCount = (v) => Number.isInteger(v) && v >= 0;

/**
 * A recall-tool runner bound to one host platform. `locate(cwd)` is cached
 * per project directory for the life of the process (failures are not
 * cached, so the next call tries again).
 * @param {string} platform "opencode" | "openclaw"
 */
export function createRecall(platform) {
  /** @type {Map<string, Promise<Record<string, any>>>} */
  const located = new Map();

  async function locate(cwd) {
    const key = cwd || "";
    let pending = located.get(key);
    if (!pending) {
      pending = callHook(platform, "locate", { cwd: key }, { timeoutMs: TIMEOUTS.locate, cwd: cwd || undefined });
      located.set(key, pending);
    }
    const value = await pending;
    if (value.error || !value.collection) located.delete(key);
    return value;
  }

  /** argv (after `memsearch`) and deadline for one tool call, or an error string. */
  function argvFor(name, a, where) {
    const str = (v) => (typeof v === "string" ? v : v == null ? "" : String(v));
    const store = ["--collection", where.collection];
    if (where.milvus_uri) store.push("--milvus-uri", String(where.milvus_uri));
    switch (name) {
      case "memory_search": {
        const query = str(a.query).trim();
        if (!query) return "query is required";
        const argv = ["search", query, "-j", ...store];
        if (isInt(a.top_k)) argv.push("--top-k", String(a.top_k));
        if (isInt(a.budget)) argv.push("--budget", String(a.budget));
        return { argv, timeoutMs: TIMEOUTS.search };
      }
      case "memory_expand": {
        const hash = str(a.chunk_hash).trim();
        if (!hash) return "chunk_hash is required";
        return { argv: ["expand", hash, "-j", ...store], timeoutMs: TIMEOUTS.expand };
      }
      case "memory_get": {
        const path = str(a.path).trim();
        if (!path) return "path is required";
        const argv = ["get", path, "-j", ...store];
        if (isInt(a.from)) argv.push("--from", String(a.from));
        if (isCount(a.lines)) argv.push("--lines", String(a.lines));
        return { argv, timeoutMs: TIMEOUTS.get };
      }
      case "memory_transcript": {
        const path = str(a.path).trim();
        if (!path) return "path is required";
        const argv = ["transcript", path, "-j"];
        if (str(a.turn).trim()) argv.push("--turn", str(a.turn).trim());
        if (isCount(a.context)) argv.push("--context", String(a.context));
        return { argv, timeoutMs: TIMEOUTS.transcript };
      }
      default:
        return `unknown tool ${name}`;
    }
  }

  /**
   * Run tool NAME with ARGS for the project in CWD. Resolves to memsearch's
   * JSON text, or to a one-line `<name> failed: …` string.
   * @returns {Promise<string>}
   */
  async function run(name, args, cwd) {
    const fail = (why) => `${name} failed: ${oneLine(why)}`;
    try {
      if (isDisabled()) return fail("memsearch is disabled (MEMSEARCH_DISABLE is set)");
      const a = args && typeof args === "object" ? args : {};
      let where = { collection: "" };
      if (name !== "memory_transcript") {
        where = await locate(cwd);
        if (where.error) return fail(where.error);
        if (!where.collection) return fail("memsearch hook locate returned no collection");
      }
      const plan = argvFor(name, a, where);
      if (typeof plan === "string") return fail(plan);
      const r = await runMemsearch(plan.argv, { timeoutMs: plan.timeoutMs, cwd: cwd || undefined });
      if (r.error) return fail(`memsearch ${plan.argv[0]}: ${r.error}`);
      if (!r.ok) return fail(`memsearch ${plan.argv[0]}: ${oneLine(r.stderr) || `exit status ${r.code}`}`);
      const text = r.stdout.trim();
      return text || fail(`memsearch ${plan.argv[0]} printed nothing`);
    } catch (e) {
      return fail(e?.message ?? String(e));
    }
  }

  return { locate, run, names: Object.keys(TOOL_SPECS) };
}
