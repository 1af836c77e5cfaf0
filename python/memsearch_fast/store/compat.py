"""pymilvus and grpc workarounds, and classifying their errors."""

from __future__ import annotations

import functools
import logging
from typing import Any


def is_local_uri(uri: str) -> bool:
    """True when ``uri`` names a Milvus Lite database rather than a server."""
    return not uri.startswith(("http://", "https://", "tcp://", "unix:", "grpc://"))


#: The first Milvus with BM25 functions (full-text search), the keyword half of hybrid search.
MIN_SERVER = (2, 5)


def server_too_old(version: str) -> str:
    """Why a Milvus server of ``version`` (``get_server_version()``: "v2.3.5-lite",
    "2.5.4") cannot hold the index, or "" when it can or the version is not a
    release number (Zilliz Cloud, a development build: its schema check then decides).

    Milvus before 2.5 has no BM25 function: it refuses the sparse field's
    index or drops the function, and hybrid search would lose its keyword half.
    """
    import re

    m = re.match(r"v?(\d+)\.(\d+)(?:\.(\d+))?", version.strip())
    if m is None or (int(m.group(1)), int(m.group(2))) >= MIN_SERVER:
        return ""
    need = ".".join(map(str, MIN_SERVER))
    return (
        f"version {version.strip()}; memsearch-fast needs Milvus >= {need} (BM25 full-text search for hybrid "
        f"search): upgrade the server, or use a local database path"
    )


def create_loaded(client: Any, collection: str, schema: Any, index_params: Any, timeout: float = 60.0) -> None:
    """Create *collection*, its indexes, and load it, as ``create_collection``
    with ``index_params`` does, without pymilvus's fixed waits.

    pymilvus sleeps 0.5 s before it first asks whether an index is built, once
    per index: a new collection cost a second of sleep (two with the span
    collection) where Milvus Lite builds the index of an empty collection at
    once. Here the load is asked at once, and again after a short wait while
    the server still builds (a server may refuse a load until then, naming
    the index).
    """
    import time

    client.create_collection(collection_name=collection, schema=schema)
    client.create_index(collection, index_params, sync=False)
    deadline = time.monotonic() + timeout
    delay = 0.01
    while True:
        try:
            client.load_collection(collection)
            return
        except Exception as exc:  # only a load that waits for its index is asked again
            if "index" not in str(exc).lower() or time.monotonic() + delay > deadline:
                raise
        time.sleep(delay)
        delay = min(delay * 2, 0.5)


def quiet_pymilvus() -> None:
    """Stop pymilvus printing tracebacks for errors the store reports itself.

    Only applies while the logger is at pymilvus's own default level, so an
    application that configured it keeps its setting.
    """
    log = logging.getLogger("pymilvus")
    if log.level in (logging.NOTSET, logging.WARNING):
        log.setLevel(logging.CRITICAL)


def skip_client_varchar_check() -> None:
    """Turn off pymilvus's client-side VARCHAR length check on row inserts.

    In pymilvus 3.0 the row path runs that check over every *character* of
    every string value (a Python loop), which costs about as much main-process
    CPU as the rest of the pipeline together. Lengths are enforced before
    sending (:meth:`MilvusStore._prepare_row`: content split, heading cut,
    source refused) and Milvus checks them again on the server. The flag is
    process-wide; it only changes which side reports an over-long string.
    """
    try:
        from pymilvus.client import entity_helper
    except ImportError:  # pragma: no cover - layout of another pymilvus line
        return
    if hasattr(entity_helper, "CHECK_STR_ARRAY"):
        entity_helper.CHECK_STR_ARRAY = False


def own_connection_kwargs() -> dict[str, Any]:
    """MilvusClient arguments giving this store a connection of its own.

    pymilvus shares one connection per URI between clients: with its
    connection manager (3.x, and 2.6 since the manager came) it stays open
    after the last client closes (so a Lite server could never see its
    clients leave and exit when idle, and a client made after the engine was
    killed got the dead connection back); in 2.5 one client's close() cuts the
    connection of every other. A dedicated connection (where the manager
    offers one) or a unique alias (2.5) makes close() close exactly this
    store's connection. Asked of the manager, not of the version: pymilvus
    2.6.17 has it and takes no alias.
    """
    import uuid

    return {"dedicated": True} if _has_dedicated() else {"alias": f"memsearch-store-{uuid.uuid4().hex}"}


@functools.cache
def _has_dedicated() -> bool:
    import inspect

    try:
        from pymilvus.client.connection_manager import ConnectionManager
    except ImportError:
        return False
    try:
        return "dedicated" in inspect.signature(ConnectionManager.get_or_create).parameters
    except (AttributeError, TypeError, ValueError):
        return False


#: No keepalive pings on a connection to a local Milvus Lite engine (about 24 days between them).
QUIET_KEEPALIVE_MS = 2**31 - 1


def local_channel_kwargs() -> dict[str, Any]:
    """MilvusClient arguments for a connection to a local Milvus Lite engine.

    pymilvus 3.x pings every 10 s, even without a call in flight; Lite 2.5's
    engine allows one ping per 5 minutes, so the first call after a minute or
    more idle (``watch``, the search service, an MCP server) was answered with
    GOAWAY "too_many_pings": gRPC logged two error lines to stderr and dropped
    the connection (pymilvus sent the call again on a new one). A socket on
    this machine needs no keepalive: a gone engine fails the next call at
    once. (pymilvus 2.5 pings only during calls, every 55 s, and ignores this
    argument.)
    """
    return {"grpc_options": {"grpc.keepalive_time_ms": QUIET_KEEPALIVE_MS, "grpc.keepalive_permit_without_calls": 0}}


# Message fragments of connection failures that carry no usable error code.
_UNAVAILABLE_TEXTS = (
    "fail connecting",
    "server unavailable",
    "failed to connect",
    "connection refused",
    "closed client",
)


def is_unavailable(exc: BaseException) -> bool:
    """Whether ``exc`` means Milvus could not be reached (as opposed to a bad request)."""
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        name = type(e).__name__
        if name in ("MilvusUnavailableException", "ConnectionNotExistException", "ConnectionConfigException"):
            return True
        code = getattr(e, "code", None)
        if callable(code):  # grpc.RpcError
            try:
                if getattr(code(), "name", "") in ("UNAVAILABLE", "DEADLINE_EXCEEDED", "CANCELLED"):
                    return True
            except Exception:  # noqa: BLE001 - a broken error object must not mask the real one
                pass
        text = str(getattr(e, "message", "") or e).lower()
        if any(s in text for s in _UNAVAILABLE_TEXTS):
            return True
        e = e.__cause__ or e.__context__
    return False
