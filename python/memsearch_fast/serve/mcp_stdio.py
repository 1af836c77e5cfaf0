"""The MCP server's stdio transport: the SDK's, plus the errors JSON-RPC 2.0 asks for.

The SDK's stdio transport drops a line it cannot parse or validate, and its
server answers an unknown method with -32602; a client waiting for its answer
then hangs or is misled. Here an unparsable line is answered with -32700, an
object that is neither a request, a notification nor a response with -32600,
and a request for a method the SDK does not know with -32601. Everything else
goes to the SDK's server unchanged.
"""

from __future__ import annotations

import contextlib
import json
import sys
import typing
from collections.abc import AsyncIterator
from io import TextIOWrapper
from typing import IO, Any

import anyio
from mcp import types
from mcp.shared.message import SessionMessage


def _request_methods() -> frozenset[str]:
    """The request methods the SDK knows (empty, so nothing is refused, if its types change)."""
    try:
        members = typing.get_args(types.ClientRequest.model_fields["root"].annotation)
        return frozenset(typing.get_args(m.model_fields["method"].annotation)[0] for m in members)
    except (AttributeError, IndexError, KeyError, TypeError):
        return frozenset()


def _rpc_error(id_: Any, code: int, message: str) -> str:
    valid = isinstance(id_, (str, int)) and not isinstance(id_, bool)
    return json.dumps({"jsonrpc": "2.0", "id": id_ if valid else None, "error": {"code": code, "message": message}})


def check_line(line: str, methods: frozenset[str]) -> types.JSONRPCMessage | str | None:
    """A client's line as a message for the SDK, or the error to answer it with (a JSON line),
    or None (nothing to do: a blank line, an invalid notification)."""
    if not line.strip():
        return None
    try:
        raw = json.loads(line)
    except ValueError:
        return _rpc_error(None, -32700, "Parse error")
    if not isinstance(raw, dict) or raw.get("jsonrpc") != "2.0":
        return _rpc_error(raw.get("id") if isinstance(raw, dict) else None, -32600, "Invalid Request")
    method, has_id = raw.get("method"), "id" in raw
    if method is None and not ("result" in raw or "error" in raw):
        return _rpc_error(raw.get("id"), -32600, "Invalid Request")
    if has_id and isinstance(method, str) and methods and method not in methods:
        return _rpc_error(raw["id"], -32601, f"Method not found: {method}")
    try:
        return types.JSONRPCMessage.model_validate(raw)
    except ValueError:
        return _rpc_error(raw.get("id"), -32600, "Invalid Request") if has_id else None


def _dump(message: SessionMessage) -> str:
    return message.message.model_dump_json(by_alias=True, exclude_none=True)


@contextlib.asynccontextmanager
async def stdio_transport(out: IO[str]) -> AsyncIterator[tuple[Any, Any]]:
    """The SDK's stdio transport, but a bad line is answered as JSON-RPC 2.0 says (the SDK's
    own drops it, and a client waiting for that answer hangs)."""
    stdin = anyio.wrap_file(TextIOWrapper(sys.stdin.buffer, encoding="utf-8", errors="replace"))
    stdout = anyio.wrap_file(out)
    methods = _request_methods()
    to_server, read = anyio.create_memory_object_stream[Any](0)
    write, outgoing = anyio.create_memory_object_stream[Any](0)

    async def reader(errors: Any) -> None:
        with contextlib.suppress(anyio.ClosedResourceError):
            async with to_server, errors:
                async for line in stdin:
                    checked = check_line(line, methods)
                    if isinstance(checked, str):
                        await errors.send(checked)
                    elif checked is not None:
                        await to_server.send(SessionMessage(checked))

    async def writer() -> None:
        with contextlib.suppress(anyio.ClosedResourceError):
            async with outgoing:
                async for item in outgoing:
                    text = item if isinstance(item, str) else _dump(item)
                    await stdout.write(text + "\n")
                    await stdout.flush()

    async with anyio.create_task_group() as tg:
        tg.start_soon(reader, write.clone())
        tg.start_soon(writer)
        yield read, write
