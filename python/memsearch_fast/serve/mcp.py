"""``memsearch mcp``: the recall verbs as the tools of a stdio MCP server.

Four tools, each answering what its command prints with ``-j``:
``memory_search`` (``search``, with the ``--min-score``/``--budget``/``--digest``
tiers, through the same :func:`memsearch_fast.recall.tiered_search`),
``memory_expand`` (``expand``), ``memory_get`` (``get``) and
``memory_transcript`` (``transcript``).

One :class:`~memsearch_fast.api.MemSearch` stays open for the server's life,
so the model and the store are loaded once (warmed up in the background as
soon as the server starts) and a warm search costs the query's embedding plus
the store's search. A collection that does not exist yet is looked for again
on the next call (``memsearch index`` may build it meanwhile), and a store
failure reopens the store on the next call, so a restarted Milvus or a reset
collection never needs a server restart.

A failing call is a tool result with ``isError`` and one line of text (the
same line the command would print after ``Error:``), never a traceback, and the
server goes on; a line that is no request gets JSON-RPC's own error
(:mod:`.mcp_stdio`). The protocol owns the process's real stdout: file descriptor 1
and ``sys.stdout`` are pointed at stderr while it runs, so nothing a library
prints can corrupt the JSON-RPC stream.

Written against the low-level server API as it has been since ``mcp`` 1.2
(tools listed with their JSON schemas, results as text content, errors raised
and turned into ``isError`` results by the SDK); tested with 1.30.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from collections.abc import Awaitable, Callable, Sequence
from typing import IO, Any

from mcp import types
from mcp.server.lowlevel import Server

from memsearch_fast import __version__
from memsearch_fast.config.tuning import DEFAULT_TOP_K
from memsearch_fast.errors import MemsearchError, StoreError, describe, one_line
from memsearch_fast.recall import search as recall
from memsearch_fast.serve.mcp_stdio import stdio_transport

SERVER_NAME = "memsearch"

_NULLABLE_INT = {"type": ["integer", "null"]}

#: The tools, each with the JSON Schema of its arguments.
TOOLS: list[types.Tool] = [
    types.Tool(
        name="memory_search",
        description=(
            "Search the indexed markdown memory (hybrid dense + BM25) for QUERY. Returns JSON: the hits "
            "(content, source, heading, chunk_hash, heading_level, start_line, end_line, score), or with "
            "min_score/budget/digest an object {results, dropped, below_min_score, budget, tokens, tokenizer}. "
            "Use digest=true for one compact record per hit, budget=N to cap the answer at N tokens "
            "(whole hits only), then memory_expand on a chunk_hash for its full section. With reranker.model "
            "configured, hits are reordered by that cross-encoder: score is its relevance (0-1) and "
            "rerank_score its logit."
        ),
        inputSchema={
            "type": "object",
            "properties": {
                "query": {"type": "string", "minLength": 1, "description": "What to look for, in words."},
                "top_k": {
                    "type": "integer",
                    "minimum": 1,
                    "default": DEFAULT_TOP_K,
                    "description": "Number of results.",
                },
                "min_score": {"type": ["number", "null"], "description": "Drop hits scoring below this."},
                "budget": {
                    "type": ["integer", "null"],
                    "minimum": 1,
                    "description": "At most N tokens of hits (embedding model's tokenizer; whole hits only).",
                },
                "digest": {
                    "type": "boolean",
                    "default": False,
                    "description": "Hits without content: source, start_line, end_line, heading, score, chunk_hash.",
                },
                "source_prefix": {
                    "type": ["string", "null"],
                    "description": "Only search chunks whose source path starts with this prefix.",
                },
            },
            "required": ["query"],
            "additionalProperties": False,
        },
    ),
    types.Tool(
        name="memory_expand",
        description=(
            "Expand a chunk_hash from memory_search: the chunk's whole heading section read from its markdown "
            "file (or N lines around the chunk with lines=N), with its session anchor {session, turn, "
            "transcript} when the section has one. Returns JSON {chunk_hash, source, heading, start_line, "
            "end_line, content, anchor?}; a second text block carries a warning when the file changed."
        ),
        inputSchema={
            "type": "object",
            "properties": {
                "chunk_hash": {"type": "string", "minLength": 1, "description": "A chunk_hash from memory_search."},
                "lines": {
                    **_NULLABLE_INT,
                    "minimum": 0,
                    "description": "Show N lines before/after the chunk instead of its full section.",
                },
            },
            "required": ["chunk_hash"],
            "additionalProperties": False,
        },
    ),
    types.Tool(
        name="memory_get",
        description=(
            "Read lines of an indexed markdown file (only files in the index can be read). "
            "Returns JSON {path, from, lines, total_lines, content}."
        ),
        inputSchema={
            "type": "object",
            "properties": {
                "path": {"type": "string", "minLength": 1, "description": "An indexed markdown file."},
                "start": {"type": "integer", "minimum": 1, "default": 1, "description": "First line (1-based)."},
                "count": {
                    **_NULLABLE_INT,
                    "minimum": 0,
                    "description": "Number of lines (default: to the end of the file).",
                },
            },
            "required": ["path"],
            "additionalProperties": False,
        },
    ),
    types.Tool(
        name="memory_transcript",
        description=(
            "The original conversation behind a memory: the session file named in an anchor's transcript "
            "field (Claude Code, Codex or OpenClaw JSONL, auto-detected), as a JSON array of turns with "
            "every tool call. With turn (an id prefix), only that turn and `context` turns each side."
        ),
        inputSchema={
            "type": "object",
            "properties": {
                "path": {"type": "string", "minLength": 1, "description": "Session transcript (JSONL)."},
                "turn": {
                    "type": ["string", "null"],
                    "description": "Target turn/session id (prefix match); shows surrounding context.",
                },
                "context": {
                    "type": "integer",
                    "minimum": 0,
                    "default": 3,
                    "description": "Turns of context to show before/after turn.",
                },
            },
            "required": ["path"],
            "additionalProperties": False,
        },
    ),
]


#: Tool name -> the argument names its schema allows.
_ARGUMENTS = {tool.name: frozenset(tool.inputSchema["properties"]) for tool in TOOLS}


class ToolFailure(MemsearchError):
    """A tool call that cannot be answered; its text is the one line the client sees."""


# -- arguments ----------------------------------------------------------------------------
# The SDK validates against the schemas above in recent versions; these checks
# keep the same rules on every 1.x and name the argument in one line.


def _string(args: dict[str, Any], name: str, *, required: bool = False) -> str | None:
    value = args.get(name)
    if value is None:
        if required:
            raise ToolFailure(f"missing argument: {name}")
        return None
    if not isinstance(value, str) or (required and not value):
        raise ToolFailure(f"{name} must be a non-empty string")
    return value


def _integer(args: dict[str, Any], name: str, default: int | None, minimum: int) -> int | None:
    value = args.get(name, default)
    if value is None:
        return default
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ToolFailure(f"{name} must be an integer")
    if value < minimum:
        raise ToolFailure(f"{name} must be >= {minimum}, not {value}")
    return value


def _number(args: dict[str, Any], name: str) -> float | None:
    value = args.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ToolFailure(f"{name} must be a number")
    return float(value)


def _boolean(args: dict[str, Any], name: str) -> bool:
    value = args.get(name, False)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise ToolFailure(f"{name} must be true or false")
    return value


def _text(*blocks: str) -> list[types.TextContent]:
    return [types.TextContent(type="text", text=block) for block in blocks]


# -- the tools ------------------------------------------------------------------------------


class Recall:
    """The tools over one long-lived :class:`~memsearch_fast.api.MemSearch`.

    ``open_memsearch`` builds it (from the settings the command resolved);
    ``missing`` is the line reported while the collection does not exist.
    Calls that touch it run one at a time: its model and store open lazily,
    once.
    """

    def __init__(self, open_memsearch: Callable[[], Any], missing: str) -> None:
        self._open = open_memsearch
        self._missing = missing
        self._ms: Any = None
        self._lock = asyncio.Lock()
        self._counter: tuple[Any, tuple[recall.TokenCounter, str]] | None = None
        self._handlers: dict[str, Callable[[dict[str, Any]], Awaitable[list[types.TextContent]]]] = {
            "memory_search": self.search,
            "memory_expand": self.expand,
            "memory_get": self.get,
            "memory_transcript": self.transcript,
        }

    # -- the MemSearch ------------------------------------------------------------------

    def _ready(self) -> Any:
        """The MemSearch, its collection present: while it is missing, every call
        opens the store afresh (an open store does not see a collection made later)."""
        if self._ms is not None and self._ms.collection_exists():
            return self._ms
        self._discard()
        self._ms = self._open()
        if not self._ms.collection_exists():
            raise ToolFailure(self._missing)
        return self._ms

    def _discard(self) -> None:
        ms, self._ms = self._ms, None
        if ms is not None:
            with contextlib.suppress(Exception):  # closing a broken connection is not an error
                ms.close()

    def _token_counter(self, provider: Any) -> tuple[recall.TokenCounter, str]:
        """The provider's token count, its tokenizer copied once per provider."""
        if self._counter is None or self._counter[0] is not provider:
            self._counter = (provider, recall.token_counter(provider))
        return self._counter[1]

    async def warm_up(self) -> None:
        """Open the store and load the model before the first call needs them.

        Nothing when the collection does not exist (no model load, nothing
        created); failures are left for a call to report.
        """
        async with self._lock:
            try:
                ms = await asyncio.to_thread(self._ready)
                await ms.search("memory", top_k=1)
            except Exception:  # noqa: BLE001 - a call reports the same failure in one line
                return

    def close(self) -> None:
        self._discard()

    # -- calls ----------------------------------------------------------------------------

    async def call(self, name: str, args: dict[str, Any]) -> list[types.TextContent]:
        """Run tool *name*; every failure becomes a :class:`ToolFailure` of one line."""
        handler = self._handlers.get(name)
        if handler is None:
            raise ToolFailure(f"unknown tool: {name}")
        if not isinstance(args, dict):
            raise ToolFailure("arguments must be an object")
        unknown = sorted(set(args) - _ARGUMENTS[name])
        if unknown:
            raise ToolFailure(f"unknown argument for {name}: {', '.join(map(str, unknown))}")
        try:
            return await handler(args)
        except ToolFailure as exc:
            raise ToolFailure(one_line(exc)) from None
        except StoreError as exc:
            # The store may be gone (server restarted, collection reset): open it afresh next time.
            async with self._lock:
                await asyncio.to_thread(self._discard)
            raise ToolFailure(describe(exc)) from None
        except Exception as exc:  # noqa: BLE001 - a tool answers every failure in one line and the server goes on
            raise ToolFailure(describe(exc)) from None

    async def search(self, args: dict[str, Any]) -> list[types.TextContent]:
        query = _string(args, "query", required=True)
        assert query is not None
        top_k = _integer(args, "top_k", DEFAULT_TOP_K, 1)
        assert top_k is not None
        budget = _integer(args, "budget", None, 1)
        min_score = _number(args, "min_score")
        digest = _boolean(args, "digest")
        source_prefix = _string(args, "source_prefix")
        async with self._lock:
            ms = await asyncio.to_thread(self._ready)
            output = await recall.tiered_search(
                ms,
                query,
                top_k=top_k,
                source_prefix=source_prefix,
                json_output=True,
                digest=digest,
                budget=budget,
                min_score=min_score,
                counter=self._token_counter,
            )
        return _text(output)

    async def expand(self, args: dict[str, Any]) -> list[types.TextContent]:
        chunk_hash = _string(args, "chunk_hash", required=True)
        lines = _integer(args, "lines", None, 0)
        async with self._lock:
            ms = await asyncio.to_thread(self._ready)
            result = await asyncio.to_thread(ms.expand, chunk_hash, section=True, lines=lines)
        if result is None:
            raise ToolFailure(f"chunk not found: {chunk_hash}")
        warning = result.pop("warning", None)
        return _text(recall.to_json(result), *([f"warning: {one_line(warning)}"] if warning else []))

    async def get(self, args: dict[str, Any]) -> list[types.TextContent]:
        path = _string(args, "path", required=True)
        start = _integer(args, "start", 1, 1)
        count = _integer(args, "count", None, 0)
        async with self._lock:
            ms = await asyncio.to_thread(self._ready)
            result = await asyncio.to_thread(ms.get, path, start=start, count=count)
        if result is None:
            raise ToolFailure(self._missing)
        return _text(recall.to_json(result))

    async def transcript(self, args: dict[str, Any]) -> list[types.TextContent]:
        from memsearch_fast.recall import transcript as transcripts

        path = _string(args, "path", required=True)
        assert path is not None
        if not path.endswith(".jsonl"):
            # An anchor's path comes from memory a repository may have written: only session files are read.
            raise ToolFailure(f"{one_line(path, 200)} is not a session transcript (.jsonl); refusing to read it")
        turn = _string(args, "turn")
        context = _integer(args, "context", 3, 0)
        assert context is not None

        def render() -> str:
            parts: list[str] = []
            transcripts.write_json(path, parts.append, turn=turn, context=context)
            return "".join(parts)

        return _text(await asyncio.to_thread(render))


# -- the server -----------------------------------------------------------------------------


def build_server(tools: Recall) -> Server[Any, Any]:
    """A low-level MCP server that lists :data:`TOOLS` and routes calls to *tools*."""
    server: Server[Any, Any] = Server(SERVER_NAME, __version__)

    async def list_tools() -> list[types.Tool]:
        return TOOLS

    async def call_tool(name: str, arguments: dict[str, Any] | None) -> Sequence[types.TextContent]:
        return await tools.call(name, arguments if arguments is not None else {})

    server.list_tools()(list_tools)  # type: ignore[no-untyped-call]
    try:
        # Arguments are checked by Recall (same rules as the schemas); the SDK's
        # jsonschema pass would add ~2.5 ms to every call.
        register = server.call_tool(validate_input=False)
    except TypeError:  # older 1.x: no validation of its own
        register = server.call_tool()
    register(call_tool)
    return server


def _claim_stdout() -> IO[str]:
    """The real stdout for the protocol alone; fd 1 and ``sys.stdout`` go to stderr."""
    sys.stdout.flush()
    fd = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return open(fd, "w", encoding="utf-8", errors="replace", newline="\n")


async def serve(open_memsearch: Callable[[], Any], *, missing: str) -> None:
    """Serve the tools over stdin/stdout until the client closes stdin."""
    tools = Recall(open_memsearch, missing)
    server = build_server(tools)
    out = _claim_stdout()
    warm = asyncio.create_task(tools.warm_up())
    try:
        async with stdio_transport(out, frozenset(t.name for t in TOOLS)) as (read, write):
            await server.run(read, write, server.create_initialization_options())
    finally:
        warm.cancel()
        with contextlib.suppress(BaseException):
            await warm
        tools.close()
        with contextlib.suppress(OSError):
            out.close()
