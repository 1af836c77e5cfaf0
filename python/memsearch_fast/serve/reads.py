"""``expand`` and ``stats`` answered by the database's running service.

Neither needs a model, but a CLI process that answers them itself spends most
of a second (two for ``stats``) importing pymilvus and connecting to the Lite
engine. Where the database's service already runs (a session has searched, a
root is watched), it answers them on its socket as it answers searches
(:mod:`memsearch_fast.serve.search`): the CLI sends one JSON line and prints
the result as it would have printed its own (``MEMSEARCH_SEARCH_SERVICE=0``
turns it off, as for searches). The service is never started
for them, and any reply but a result (no service, an error, an unknown chunk,
a missing collection) sends the CLI back to its own path, which says why.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from memsearch_fast.serve.client import server_record

if TYPE_CHECKING:
    from memsearch_fast.config.settings import Settings
    from memsearch_fast.serve import protocol


def expand(cfg: Settings, chunk_hash: str, *, section: bool, lines: int | None) -> dict[str, Any] | None:
    """The service's :meth:`MemSearch.expand` of *chunk_hash*, or None when this process must answer it."""
    request: protocol.Expand = {
        "op": "expand",
        "collection": cfg.milvus.collection,
        "chunk_hash": chunk_hash,
        "section": section,
        "lines": lines,
    }
    return ask(cfg, request)


def stats(cfg: Settings) -> dict[str, Any] | None:
    """The service's :meth:`MemSearch.stats`, or None when this process must answer it."""
    return ask(cfg, {"op": "stats", "collection": cfg.milvus.collection})


def ask(cfg: Settings, request: protocol.Expand | protocol.Stats, timeout: float = 30.0) -> dict[str, Any] | None:
    """The service's result of *request*, or None when this process must answer it itself."""
    from memsearch_fast.config import environment
    from memsearch_fast.serve.client import call, served_database

    try:
        db_path = served_database(cfg)
    except Exception:  # noqa: BLE001 - this process answers and says why
        return None
    if db_path is None or not environment.flag("MEMSEARCH_SEARCH_SERVICE") or server_record(db_path) is None:
        return None
    reply = call(db_path, request, timeout)
    result = reply.get("result") if reply is not None else None
    return result if isinstance(result, dict) else None


def answer(engine_uri: str, db_path: str | None, req: protocol.Expand | protocol.Stats) -> protocol.ReadAnswer:
    """The service's side: ``{"result": ...}`` (None for an unknown chunk or a missing
    collection), or ``{"error": ...}``."""
    from memsearch_fast.api import MemSearch
    from memsearch_fast.errors import one_line

    ms = MemSearch(milvus_uri=engine_uri, collection=req["collection"], manifest_uri=db_path)
    try:
        if req["op"] == "stats":
            return {"result": ms.stats()}
        return {"result": ms.expand(req["chunk_hash"], section=req.get("section", True), lines=req.get("lines"))}
    except Exception as exc:  # noqa: BLE001 - the client answers itself and reports it
        return {"error": one_line(exc)}
    finally:
        ms.close()
