// memsearch plugin for OpenCode.
//
// - First LLM call of a session: `memsearch hook opencode session-start`, and
//   its recent-memory markdown is folded into the system prompt
//   (experimental.chat.system.transform).
// - Session goes idle (a turn completed): the last turn is rendered from the
//   session's messages and handed to `memsearch hook opencode stop` in a
//   detached process, with OpenCode's session database for the entry's
//   anchor; the agent never waits for it.
// - Session deleted, or OpenCode exits: `memsearch hook opencode session-end`.
// - Tools memory_search / memory_expand / memory_get / memory_transcript shell
//   out to `memsearch … -j`.
//
// OpenCode calls every function this module exports as a plugin, so the
// default export is the only export.

import { existsSync } from "node:fs";
import { createRequire } from "node:module";
import { homedir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

import {
  CONTEXT_OPEN,
  TIMEOUTS,
  TOOL_SPECS,
  callHook,
  commandOf,
  createRecall,
  isDisabled,
  renderLastTurn,
  spawnHookDetached,
  stripInjected,
  wrapContext,
} from "../_js/memsearch.mjs";

const PLATFORM = "opencode";

/**
 * The zod instance OpenCode uses for tool arguments (`tool.schema` of
 * @opencode-ai/plugin), looked up next to this file and then in OpenCode's
 * config directories, where OpenCode installs that package itself. Null when
 * none is found: plain JSON Schema arguments are used instead (accepted by
 * OpenCode >= 1.14.49).
 * @param {string} directory
 */
async function findZod(directory) {
  const from = [
    import.meta.url,
    join(process.env.XDG_CONFIG_HOME || join(homedir(), ".config"), "opencode", "x.js"),
    join(directory || process.cwd(), ".opencode", "x.js"),
  ];
  for (const base of from) {
    try {
      const resolved = createRequire(base).resolve("@opencode-ai/plugin");
      const mod = await import(pathToFileURL(resolved).href);
      const schema = mod?.tool?.schema;
      if (schema && typeof schema.string === "function") return schema;
    } catch {
      /* not installed there */
    }
  }
  return null;
}

/** Tool argument definitions for one tool spec, zod when available. */
function toolArgs(spec, z) {
  /** @type {Record<string, any>} */
  const out = {};
  for (const [name, a] of Object.entries(spec.args)) {
    if (z) {
      let s = a.type === "string" ? z.string() : z.number().int();
      s = s.describe(a.description);
      out[name] = a.required ? s : s.optional();
    } else {
      out[name] = { type: a.type, description: a.description };
    }
  }
  return out;
}

/**
 * OpenCode's messages ({ info, parts }) as the shared renderer's messages.
 * (Not exported: OpenCode would call it as a plugin.)
 * @param {any[]} entries
 */
function normalizeMessages(entries) {
  /** @type {import("../_js/memsearch.mjs").TurnMessage[]} */
  const out = [];
  for (const entry of Array.isArray(entries) ? entries : []) {
    const info = entry?.info ?? {};
    if (info.role !== "user" && info.role !== "assistant") continue;
    /** @type {import("../_js/memsearch.mjs").TurnPart[]} */
    const parts = [];
    for (const p of Array.isArray(entry?.parts) ? entry.parts : []) {
      if (p?.type === "text" && typeof p.text === "string" && !p.synthetic && !p.ignored) {
        parts.push({ kind: "text", text: p.text });
      } else if (p?.type === "tool" && info.role === "assistant") {
        parts.push({ kind: "tool", name: String(p.tool ?? "tool"), command: commandOf(p.state?.input) });
      }
    }
    out.push({ role: info.role, id: info.id, parts });
  }
  return out;
}

/** Fold the memory block into the first system entry (some backends reject a second one). */
function injectSystem(system, block) {
  const list = Array.isArray(system) ? system : [];
  if (list.length === 0) {
    list.push(block);
    return list;
  }
  const first = String(list[0]);
  const base = first.includes(CONTEXT_OPEN) ? stripInjected(first) : first.trimEnd();
  list[0] = base ? `${base}\n\n${block}` : block;
  return list;
}

/** @param {any} result SDK result: `{ data }` or the data itself */
const dataOf = (result) => (result && typeof result === "object" && "data" in result ? result.data : result);

function withTimeout(promise, ms) {
  let timer;
  return Promise.race([
    promise,
    new Promise((resolve) => {
      timer = setTimeout(() => resolve(undefined), ms);
    }),
  ]).finally(() => clearTimeout(timer));
}

/** Sessions still open when OpenCode exits leave the project's watcher (one listener per process). */
const atExit = new Set();
process.once("exit", () => {
  for (const fn of atExit) {
    try {
      fn();
    } catch {
      /* exiting anyway */
    }
  }
});

/**
 * OpenCode's session database, where a journal anchor (`db:` + the turn's
 * message id) finds the turn again; null when there is none.
 */
function sessionDb() {
  const data = process.env.XDG_DATA_HOME || join(homedir(), ".local", "share");
  const path = join(data, "opencode", "opencode.db");
  return existsSync(path) ? path : null;
}

/** @type {(input: { client?: any, directory?: string, worktree?: string }) => Promise<Record<string, any>>} */
const MemsearchPlugin = async ({ client, directory } = {}) => {
  const projectDir = directory || process.cwd();
  const recall = createRecall(PLATFORM);
  const z = await findZod(projectDir);

  /** sessionID -> Promise of the context to inject ("" when none) */
  const started = new Map();
  /** sessionID -> signature of the last turn handed to `stop` */
  const captured = new Map();

  function sessionStart(sessionID) {
    const key = sessionID || "";
    if (!started.has(key)) {
      started.set(
        key,
        callHook(
          PLATFORM,
          "session-start",
          { session_id: key, cwd: projectDir },
          { timeoutMs: TIMEOUTS.sessionStart, cwd: projectDir },
        ).then((out) => {
          const ctx = out?.hookSpecificOutput?.additionalContext;
          return typeof ctx === "string" && ctx.trim() ? ctx : "";
        }),
      );
    }
    return started.get(key);
  }

  /** Render the session's last turn and hand it to `hook opencode stop`, detached. */
  async function capture(sessionID) {
    if (isDisabled() || !sessionID || !client?.session?.messages) return false;
    let entries;
    try {
      const request = client.session.messages({ path: { id: sessionID }, query: { directory: projectDir } });
      entries = dataOf(await withTimeout(request, 10_000));
    } catch {
      return false;
    }
    const turn = renderLastTurn(normalizeMessages(entries));
    if (!turn) return false;
    const signature = `${turn.id}:${turn.text.length}`;
    if (captured.get(sessionID) === signature) return false;
    captured.set(sessionID, signature);
    const payload = { session_id: sessionID, cwd: projectDir, turn };
    const db = sessionDb();
    if (db) payload.db_path = db;
    return spawnHookDetached(PLATFORM, "stop", payload, { cwd: projectDir });
  }

  function sessionEnd(sessionID) {
    started.delete(sessionID);
    captured.delete(sessionID);
    spawnHookDetached(PLATFORM, "session-end", { session_id: sessionID, cwd: projectDir }, { cwd: projectDir });
  }

  atExit.add(() => {
    for (const sessionID of started.keys()) if (sessionID) sessionEnd(sessionID);
  });

  const tools = {};
  for (const [name, spec] of Object.entries(TOOL_SPECS)) {
    tools[name] = {
      description: spec.description,
      args: toolArgs(spec, z),
      async execute(args, context) {
        return recall.run(name, args, context?.directory || projectDir);
      },
    };
  }

  return {
    tool: tools,

    event: async ({ event } = {}) => {
      try {
        if (isDisabled() || !event) return;
        const props = event.properties ?? {};
        const sessionID = props.sessionID ?? props.info?.id;
        if (event.type === "session.created" && sessionID) {
          void sessionStart(sessionID);
        } else if (
          event.type === "session.idle" ||
          (event.type === "session.status" && props.status?.type === "idle")
        ) {
          capture(sessionID).catch(() => {}); // not awaited: the host goes on at once
        } else if (event.type === "session.deleted" && sessionID) {
          sessionEnd(sessionID);
        }
      } catch {
        /* never into the host */
      }
    },

    "experimental.chat.system.transform": async (input, output) => {
      try {
        if (isDisabled() || !output) return;
        const ctx = await sessionStart(input?.sessionID);
        if (ctx) output.system = injectSystem(output.system, wrapContext(ctx));
      } catch {
        /* never into the host */
      }
    },
  };
};

export default MemsearchPlugin;
