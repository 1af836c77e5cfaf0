// memsearch plugin for OpenClaw (a "memory" kind plugin).
//
// - First agent run of a session (before_agent_start):
//   `memsearch hook openclaw session-start`; its recent-memory markdown is
//   prepended to that run's prompt.
// - Each finished agent run (agent_end): `memsearch hook openclaw stop` in a
//   detached process, given the session's JSONL transcript when there is one
//   and the last turn rendered from the run's messages.
// - before_compaction: `pre-compact` with the session file; session_end (and
//   gateway_stop, for sessions still open): `session-end`.
// - Tools memory_search / memory_expand / memory_get / memory_transcript shell
//   out to `memsearch … -j`.

import { existsSync } from "node:fs";
import { homedir } from "node:os";
import { join } from "node:path";

import {
  TIMEOUTS,
  TOOL_SPECS,
  callHook,
  commandOf,
  createRecall,
  isDisabled,
  renderLastTurn,
  spawnHookDetached,
  wrapContext,
} from "../_js/memsearch.mjs";

const PLATFORM = "openclaw";

/**
 * memsearch 0.4's plugin settings this plugin has no use for (its manifest
 * accepts them, so that a leftover `plugins.entries.memsearch.config` still
 * loads), and what to do instead.
 */
const IGNORED_SETTINGS = {
  provider: "the embedding provider is memsearch's own setting: memsearch config set embedding.provider NAME",
};
/** The ignored settings already warned about (OpenClaw may register the plugin more than once). */
const warnedIgnored = new Set();

/**
 * One warning, once per process, naming the ignored settings `config` holds.
 * @param {Record<string, unknown>} config
 * @param {any} logger
 */
function warnIgnored(config, logger) {
  const names = Object.keys(IGNORED_SETTINGS).filter((name) => Object.hasOwn(config, name));
  const fresh = names.filter((name) => !warnedIgnored.has(name));
  if (!fresh.length) return;
  for (const name of fresh) warnedIgnored.add(name);
  const list = fresh.map((name) => `plugins.entries.memsearch.config.${name}`).join(", ");
  const why = fresh.map((name) => IGNORED_SETTINGS[name]).join("; ");
  logger?.warn?.(`[memsearch] ${list} (memsearch 0.4's) ignored: ${why}`);
}

const stateDir = () => process.env.OPENCLAW_STATE_DIR || join(homedir(), ".openclaw");
const expandHome = (p) => (typeof p === "string" && p.startsWith("~/") ? join(homedir(), p.slice(2)) : p);

/**
 * OpenClaw messages — agent messages `{ role, content }` or session records
 * `{ type: "message", id, message }` — as the shared renderer's messages.
 * @param {any[]} messages
 */
function normalizeMessages(messages) {
  /** @type {import("../_js/memsearch.mjs").TurnMessage[]} */
  const out = [];
  for (const raw of Array.isArray(messages) ? messages : []) {
    const msg = raw?.message && typeof raw.message === "object" ? raw.message : raw;
    const role = msg?.role;
    if (role !== "user" && role !== "assistant") continue;
    const id = raw?.id ?? msg?.id ?? (msg?.timestamp != null ? String(msg.timestamp) : "");
    /** @type {import("../_js/memsearch.mjs").TurnPart[]} */
    const parts = [];
    const content = msg.content;
    if (typeof content === "string") parts.push({ kind: "text", text: content });
    for (const block of Array.isArray(content) ? content : []) {
      if (block?.type === "text" && typeof block.text === "string") {
        parts.push({ kind: "text", text: block.text });
      } else if (block?.type === "toolCall" && role === "assistant") {
        const input = block.arguments ?? block.input ?? block.parameters;
        parts.push({ kind: "tool", name: String(block.name ?? block.toolName ?? "tool"), command: commandOf(input) });
      }
    }
    out.push({ role, id, parts });
  }
  return out;
}

/** JSON Schema for a tool spec's arguments. */
function jsonSchema(spec) {
  const properties = {};
  const required = [];
  for (const [name, a] of Object.entries(spec.args)) {
    properties[name] = { type: a.type, description: a.description };
    if (a.required) required.push(name);
  }
  return { type: "object", properties, required, additionalProperties: false };
}

const plugin = {
  id: "memsearch",
  name: "memsearch",
  description: "Markdown-first semantic memory: journals each turn, recalls past sessions",
  kind: "memory",

  /** @param {any} api OpenClaw's plugin API */
  register(api) {
    const config = api?.pluginConfig ?? {};
    const autoCapture = config.autoCapture !== false;
    const autoRecall = config.autoRecall !== false;
    const logger = api?.logger;
    warnIgnored(config, logger);
    const recall = createRecall(PLATFORM);

    const defaultWorkspace = () =>
      expandHome(api?.config?.agents?.defaults?.workspace) || join(stateDir(), "workspace");
    /** sessionId -> workspace it ran in */
    const workspaces = new Map();
    /** sessions whose session-start has run */
    const started = new Set();

    const workspaceOf = (ctx) => {
      const dir = ctx?.workspaceDir || workspaces.get(ctx?.sessionId) || defaultWorkspace();
      if (ctx?.sessionId) workspaces.set(ctx.sessionId, dir);
      return dir;
    };

    /** The session's JSONL file: given by the host, else where OpenClaw keeps it (if it exists). */
    const transcriptOf = (event, ctx) => {
      const given = event?.sessionFile || ctx?.sessionFile;
      if (given) return given;
      if (!ctx?.sessionId) return undefined;
      const guess = join(stateDir(), "agents", ctx.agentId || "main", "sessions", `${ctx.sessionId}.jsonl`);
      return existsSync(guess) ? guess : undefined;
    };

    /**
     * Hand the run to `hookEvent` (stop / pre-compact), detached: the JSONL
     * transcript when there is one (memsearch reads the turn and its record
     * ids from it), else the last turn rendered from the run's messages.
     */
    const capture = (hookEvent, event, ctx) => {
      const cwd = workspaceOf(ctx);
      const payload = { session_id: ctx?.sessionId || "", cwd };
      const transcript = transcriptOf(event, ctx);
      if (transcript) payload.transcript_path = transcript;
      else {
        const turn = renderLastTurn(normalizeMessages(event?.messages));
        if (!turn) return false;
        payload.turn = turn;
      }
      return spawnHookDetached(PLATFORM, hookEvent, payload, { cwd });
    };

    const sessionEnd = (sessionId, cwd) => {
      started.delete(sessionId);
      workspaces.delete(sessionId);
      if (!isDisabled()) spawnHookDetached(PLATFORM, "session-end", { session_id: sessionId, cwd }, { cwd });
    };

    for (const [name, spec] of Object.entries(TOOL_SPECS)) {
      api.registerTool(
        (ctx) => ({
          name,
          label: name.replace("memory_", "Memory ").replace(/^./, (c) => c.toUpperCase()),
          description: spec.description,
          parameters: jsonSchema(spec),
          async execute(_toolCallId, params) {
            const text = await recall.run(name, params, workspaceOf(ctx));
            return { content: [{ type: "text", text }] };
          },
        }),
        { name },
      );
    }

    api.on("before_agent_start", async (_event, ctx) => {
      try {
        if (isDisabled()) return;
        const key = ctx?.sessionId || ctx?.sessionKey || "";
        if (started.has(key)) return;
        started.add(key);
        const cwd = workspaceOf(ctx);
        const out = await callHook(
          PLATFORM,
          "session-start",
          { session_id: key, cwd },
          { timeoutMs: TIMEOUTS.sessionStart, cwd },
        );
        if (out.error) logger?.warn?.(`[memsearch] ${out.error}`);
        else if (out.systemMessage) logger?.info?.(String(out.systemMessage));
        const context = out?.hookSpecificOutput?.additionalContext;
        if (autoRecall && typeof context === "string" && context.trim()) {
          return { prependContext: wrapContext(context) };
        }
      } catch (e) {
        logger?.warn?.(`[memsearch] session-start: ${e?.message ?? e}`);
      }
    });

    api.on("agent_end", async (event, ctx) => {
      try {
        if (!autoCapture || isDisabled() || event?.success === false) return;
        capture("stop", event, ctx);
      } catch (e) {
        logger?.warn?.(`[memsearch] stop: ${e?.message ?? e}`);
      }
    });

    api.on("before_compaction", async (event, ctx) => {
      try {
        if (!autoCapture || isDisabled()) return;
        capture("pre-compact", event, ctx);
      } catch (e) {
        logger?.warn?.(`[memsearch] pre-compact: ${e?.message ?? e}`);
      }
    });

    api.on("session_end", async (event, ctx) => {
      try {
        const sessionId = event?.sessionId || ctx?.sessionId || "";
        sessionEnd(sessionId, workspaceOf({ ...ctx, sessionId }));
      } catch (e) {
        logger?.warn?.(`[memsearch] session-end: ${e?.message ?? e}`);
      }
    });

    // Sessions still open when the gateway stops leave their project's watcher.
    api.on("gateway_stop", async () => {
      try {
        for (const sessionId of [...started]) if (sessionId) sessionEnd(sessionId, workspaceOf({ sessionId }));
      } catch (e) {
        logger?.warn?.(`[memsearch] gateway_stop: ${e?.message ?? e}`);
      }
    });
  },
};

export default plugin;
