"""The MCP server's stdio transport: the SDK's, plus the errors JSON-RPC 2.0 asks for.

The SDK's stdio transport drops a line it cannot parse or validate, and its
server answers an unknown method with -32602; a client waiting for its answer
then hangs or is misled. Here an unparsable line is answered with -32700, an
object that is neither a request, a notification nor a response with -32600,
a request for a method the SDK does not know with -32601, a request whose id is
no string or number with -32600 (id null), params that are no object and a call
of a tool not served with -32602. Requests still running when stdin ends are
answered before the server stops. Everything else goes to the SDK's server
unchanged.
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


def _methods(union: Any) -> frozenset[str]:
    """The methods of the SDK's messages in *union* (empty, so nothing is refused or
    dropped, if its types change)."""
    try:
        members = typing.get_args(union.model_fields["root"].annotation)
        return frozenset(typing.get_args(m.model_fields["method"].annotation)[0] for m in members)
    except (AttributeError, IndexError, KeyError, TypeError):
        return frozenset()


def _request_methods() -> frozenset[str]:
    return _methods(types.ClientRequest)


#: The notifications the SDK acts on; another is dropped without a word.
_NOTIFICATIONS = _methods(types.ClientNotification)


def _rpc_error(id_: Any, code: int, message: str) -> str:
    error = {"code": code, "message": message}
    return json.dumps({"jsonrpc": "2.0", "id": id_ if _valid_id(id_) else None, "error": error})


def _valid_id(id_: Any) -> bool:
    return isinstance(id_, (str, int)) and not isinstance(id_, bool)


def check_line(
    line: str, methods: frozenset[str], tools: frozenset[str] = frozenset()
) -> types.JSONRPCMessage | str | None:
    """A client's line as a message for the SDK, or the error to answer it with (a JSON line),
    or None (nothing to do: a blank line, an invalid notification). *tools*: the tools
    served (a call of another is -32602, as the MCP specification asks)."""
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
    if has_id and method is not None and not _valid_id(raw["id"]):
        return _rpc_error(None, -32600, "Invalid Request: id must be a string or a number")  # not a notification
    if has_id and isinstance(method, str) and methods and method not in methods:
        return _rpc_error(raw["id"], -32601, f"Method not found: {method}")
    if not has_id and isinstance(method, str) and _NOTIFICATIONS and method not in _NOTIFICATIONS:
        return None  # a notification nobody here acts on: no answer, and no page of warnings from the SDK
    params = raw.get("params")
    if has_id and isinstance(method, str) and params is not None and not isinstance(params, dict):
        return _rpc_error(raw["id"], -32602, "Invalid params: params must be an object")
    if has_id and method == "tools/call" and tools and isinstance(params, dict) and params.get("name") not in tools:
        return _rpc_error(raw["id"], -32602, f"Unknown tool: {params.get('name')}")
    try:
        return types.JSONRPCMessage.model_validate(raw)
    except ValueError:
        return _rpc_error(raw.get("id"), -32600, "Invalid Request") if has_id else None


def _dump(message: SessionMessage) -> str:
    return message.message.model_dump_json(by_alias=True, exclude_none=True)


#: Seconds the requests in hand at the end of stdin may take to be answered.
DRAIN_S = 120.0


def _answered(item: Any) -> Any:
    """The id a line written out answers (a response or an error), or None."""
    root = getattr(getattr(item, "message", None), "root", None)
    return root.id if isinstance(root, (types.JSONRPCResponse, types.JSONRPCError)) else None


@contextlib.asynccontextmanager
async def stdio_transport(out: IO[str], tools: frozenset[str] = frozenset()) -> AsyncIterator[tuple[Any, Any]]:
    """The SDK's stdio transport, but a bad line is answered as JSON-RPC 2.0 says (the SDK's
    own drops it, and a client waiting for that answer hangs), and the requests in hand
    when stdin ends are answered before the server stops (the SDK's drops them)."""
    stdin = anyio.wrap_file(TextIOWrapper(sys.stdin.buffer, encoding="utf-8", errors="replace"))
    stdout = anyio.wrap_file(out)
    methods = _request_methods()
    to_server, read = anyio.create_memory_object_stream[Any](0)
    write, outgoing = anyio.create_memory_object_stream[Any](0)
    pending: set[Any] = set()  # ids of the requests sent to the server and not answered yet

    async def reader(errors: Any) -> None:
        with contextlib.suppress(anyio.ClosedResourceError):
            async with to_server, errors:
                async for line in stdin:
                    checked = check_line(line, methods, tools)
                    if isinstance(checked, str):
                        await errors.send(checked)
                    elif checked is not None:
                        if isinstance(checked.root, types.JSONRPCRequest):
                            pending.add(checked.root.id)
                        await to_server.send(SessionMessage(checked))
                with anyio.move_on_after(DRAIN_S):  # stdin ended: the answers in hand first
                    while pending:
                        await anyio.sleep(0.02)

    async def writer() -> None:
        with contextlib.suppress(anyio.ClosedResourceError):
            async with outgoing:
                async for item in outgoing:
                    text = item if isinstance(item, str) else _dump(item)
                    await stdout.write(text + "\n")
                    await stdout.flush()
                    pending.discard(_answered(item))

    async with anyio.create_task_group() as tg:
        tg.start_soon(reader, write.clone())
        tg.start_soon(writer)
        yield read, write
