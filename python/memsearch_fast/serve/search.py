"""Searches answered by the database's running server, for a fast CLI ``search``.

A ``memsearch search`` process spends most of its second importing pymilvus
and loading the embedding model; the search itself takes milliseconds. The
per-database Lite server (:mod:`memsearch_fast.lite.server`) already runs
between commands, so it also answers searches on a second private socket:
it loads pymilvus and the model on the first request and keeps them. The CLI
then only reads its settings, resolves the model's directory, sends one JSON
line and prints the output it gets back.

:func:`ask` is the client: it returns None whenever the server cannot answer
exactly as the CLI would (no server, a model not on this machine, an error,
a missing collection), and the caller runs the search itself. Only the local
ONNX model qualifies: no API key ever crosses the socket. :class:`Service`
is the server side. Both ends check with ``SO_PEERCRED`` that the other one
runs as this user; the socket lives in this user's 0700 socket directory.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memsearch_fast._os import give_back_memory
from memsearch_fast.config import environment
from memsearch_fast.config.tuning import DEFAULT_TOP_K
from memsearch_fast.serve import protocol, reads
from memsearch_fast.serve.client import model_of, read_line, server_record
from memsearch_fast.serve.client import peer as _peer
from memsearch_fast.serve.models import Models, fingerprint

if TYPE_CHECKING:
    from memsearch_fast.config.settings import Settings
    from memsearch_fast.serve.watchers import Registry

logger = logging.getLogger(__name__)

#: Set to 0 (or off/false/no) and ``memsearch search`` never asks the server.
ENV_SWITCH = "MEMSEARCH_SEARCH_SERVICE"
#: Seconds without a search after which the server drops the models it loaded.
ENV_UNLOAD = "MEMSEARCH_SEARCH_UNLOAD_S"
DEFAULT_UNLOAD_S = 300.0
#: Models (one per collection and model) a server keeps loaded at most.
MAX_LOADED = 4
#: Seconds a client has to send its whole request line: one that says nothing,
#: or sends a byte now and then, holds its own connection's thread and no other.
REQUEST_S = 10.0
#: Connections whose requests are read at once (a thread each); more wait to be
#: accepted, in a listen queue of :data:`BACKLOG`.
MAX_CONNECTIONS = 64
BACKLOG = 256


# -- client ------------------------------------------------------------------------------


def request_for(cfg: Settings, query: str, **options: Any) -> tuple[str, protocol.Search] | None:
    """The database path and request for a search the server can answer as this
    process would, or None (a remote Milvus, an embedded database, another
    provider, a reranker, a model not on this machine, the switch off)."""
    from memsearch_fast.serve.client import served_database

    db_path = served_database(cfg)
    if db_path is None or cfg.reranker.model:
        return None
    if not environment.flag(ENV_SWITCH):
        return None
    # Resolved here, as this process would (its directory, its environment);
    # never downloaded here: a missing model is this process's job.
    model = model_of(cfg)
    if model is None:
        return None
    prefix = options.get("source_prefix")
    request: protocol.Search = {
        "op": "search",
        "collection": cfg.milvus.collection,
        "model_dir": model[0],
        "model_name": model[1],
        "query": query,
        "top_k": int(options.get("top_k", DEFAULT_TOP_K)),
        "source_prefix": str(Path(prefix).expanduser().resolve()) if prefix is not None else None,
        "explain": bool(options.get("explain", False)),
    }
    return db_path, request


def ask(
    cfg: Settings,
    query: str,
    *,
    render: protocol.Render | None = None,
    timeout: float = 60.0,
    **options: Any,
) -> str | None:
    """This search's output from the database's running server, or None when it
    cannot answer (the caller then searches itself). Options: ``top_k``,
    ``source_prefix``, ``explain``; *render*: the output tiers of
    :func:`memsearch_fast.recall.render_search` (``json_output``, ``digest``,
    ``budget``, ``min_score``)."""
    from memsearch_fast.serve.client import call

    try:
        prepared = request_for(cfg, query, **options)
    except Exception as exc:  # noqa: BLE001 - e.g. an unresolvable path: this process searches and says why
        _aside(f"the request could not be made ({exc})")
        return None
    if prepared is None:
        _aside(
            "the service does not take this search (a remote Milvus, an embedded database, another "
            f"provider, a reranker, a model not on this machine, or {ENV_SWITCH}=0)"
        )
        return None
    db_path, request = prepared
    request["render"] = render.copy() if render is not None else {}
    if server_record(db_path) is None and not _started_for_saved_copy(db_path, cfg.milvus.collection):
        _aside("no ready server is recorded for the database")
        return None
    reply = call(db_path, request, timeout)
    text = reply.get("text") if reply is not None else None
    if isinstance(text, str):
        return text
    _aside("no service answered" if reply is None else f"the service answered {reply!r}")
    return None


def _aside(why: str) -> None:
    """Say on stderr, under ``MEMSEARCH_DEBUG``, why the service did not answer (a search slower than it should be)."""
    if environment.flag("MEMSEARCH_DEBUG"):
        import sys

        print(f"memsearch: searching in this process: {why}", file=sys.stderr)


def _started_for_saved_copy(db_path: str, collection: str) -> bool:
    """Start the database's server when none runs and an in-memory copy is saved
    beside the database: this process would start one anyway to search, and
    then wait for the engine to load the span collection (14 s at 50 MB of
    journals) before scanning it, where the server's service reads the saved
    copy in seconds (docs/retrieval.md, "The copy saved beside the database").
    Only this collection's copy counts: another's would not be read."""
    from memsearch_fast.store.manifest import manifest_path, saved_copy_path

    if not saved_copy_path(manifest_path(db_path, collection)).is_file():
        return False
    from memsearch_fast.serve.client import ensure_server

    try:
        ensure_server(db_path)
    except Exception:  # noqa: BLE001 - this process searches and says why
        return False
    return server_record(db_path) is not None


# -- server ------------------------------------------------------------------------------


def _render(ms: Any, hits: list[dict[str, Any]], render: protocol.Render) -> str:
    """The search's output as ``memsearch search`` prints it (tiers applied,
    ``--budget`` counted with the model's tokenizer)."""
    from memsearch_fast.recall import search as recall

    budget = render.get("budget")
    budget = int(budget) if budget is not None else None
    min_score = render.get("min_score")
    count, tokenizer = (
        recall.token_counter(ms.provider)
        if budget is not None and hits
        else (recall.approx_tokens, recall.APPROX_TOKENIZER)
    )
    return recall.render_search(
        hits,
        json_output=render.get("json_output", False),
        digest=render.get("digest", False),
        budget=budget,
        min_score=float(min_score) if min_score is not None else None,
        count=count,
        tokenizer=tokenizer,
    )


class Service:
    """Answers search requests for one database on a unix socket, in a thread.

    ``engine_uri`` is where the server's own engine listens; ``touch`` is
    called per request so searches count as activity for the idle timeout.
    Each connection's request is read in a thread of its own, by a deadline
    (:data:`REQUEST_S`); requests then run one at a time; the client
    connection to the engine is closed after each, so an idle service holds no connection, and the
    models go after ``MEMSEARCH_SEARCH_UNLOAD_S`` (300) seconds without a
    search. A database known to be damaged is left to the searching process,
    which reports it.
    """

    def __init__(
        self,
        path: str,
        engine_uri: str,
        touch: Callable[[], None],
        db_path: str | None = None,
        *,
        models: Models | None = None,
        watchers: Registry | None = None,
    ) -> None:
        from collections import OrderedDict

        self.path = path
        #: The watched roots (:class:`memsearch_fast.serve.watchers.Registry`), answered on this socket too.
        self.watchers = watchers
        #: Releases the engine's idle collections (:class:`memsearch_fast.serve.keeper.Keeper`).
        self.keeper: Any = None
        self._engine_uri = engine_uri
        self._db_path = db_path
        self._touch = touch
        self._unload_after = environment.number(ENV_UNLOAD, DEFAULT_UNLOAD_S)
        self.models = models if models is not None else Models(self._unload_after)
        self._instances: OrderedDict[tuple[Any, ...], Any] = OrderedDict()
        #: What :meth:`busy` reads from the keeper's thread: a copy the socket thread replaces whole.
        self._searchers: tuple[tuple[tuple[Any, ...], Any], ...] = ()
        self._loop: Any = None
        self._last = time.monotonic()
        self._code = protocol.code_id()  # at start: files replaced later (an upgrade) no longer match
        self._stopped = False
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        self._listener.bind(path)
        os.chmod(path, 0o600)
        self._listener.listen(BACKLOG)
        self._thread = threading.Thread(target=self._serve, name="search-service", daemon=True)
        #: One request at a time past its reading: the searchers, the models and the event loop.
        self._serial = threading.RLock()
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)

    @property
    def address(self) -> str:
        return "unix:" + self.path

    def start(self) -> Service:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopped = True
        if self.keeper is not None:
            self.keeper.stop()
        if self.watchers is not None:
            self.watchers.stop()  # the runs in hand write what they embedded, then end
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            self._listener.close()
        with contextlib.suppress(OSError):
            os.unlink(self.path)

    def _serve(self) -> None:
        try:
            self._listener.settimeout(max(0.05, min(60.0, self._unload_after / 4)))
            self._accept_loop()
        finally:  # a dead service must not leave a socket that clients wait on
            self.stop()

    def _accept_loop(self) -> None:
        while not self._stopped:
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                with self._serial:
                    if self._instances and time.monotonic() - self._last > self._unload_after:
                        self._unload()
                    elif self.models.unload_idle():  # the watchers' runs have borrowed none lately
                        give_back_memory()
                continue
            except OSError:
                return
            self._last = time.monotonic()
            # Every slot held by clients that have not sent their request: this one
            # waits for the first deadline to free one.
            if not self._slots.acquire(timeout=REQUEST_S + 1):
                conn.close()
                continue
            threading.Thread(target=self._connection, args=(conn,), name="service-request", daemon=True).start()

    def _connection(self, conn: socket.socket) -> None:
        kept = False
        try:
            kept = self._answer(conn)
        except TimeoutError:
            logger.info("a client sent no request within %s s", REQUEST_S)
        except Exception as exc:  # noqa: BLE001 - one bad request must not stop the service
            logger.warning("search request failed: %s", exc)
        finally:
            self._slots.release()
            if not kept:
                conn.close()

    def _unload(self) -> None:
        """Drop the searchers and the models after a quiet spell: a server kept
        up by a watcher should not hold them for good."""
        for ms in self._instances.values():
            self._close(ms)
        self._instances.clear()
        self._searchers = ()
        self.models.unload_idle()
        give_back_memory()

    def _answer(self, conn: socket.socket) -> bool:
        """Answer one request; True when the connection was handed on (a ``watch.follow``
        or an ``index.run``). One that cannot be read gets one line saying why."""
        peer = _peer(conn)
        if peer is not None and peer[1] != os.geteuid():
            return False
        req = protocol.read(read_line(conn, time.monotonic() + REQUEST_S), self._code)
        conn.settimeout(10)
        if isinstance(req, protocol.Refusal):
            logger.info("refused a request: %s", req.reason)
            conn.sendall(protocol.reply(req.answer))
            return False
        with self._serial:
            self._last = time.monotonic()
            if req["op"] == "watch.follow" and self.watchers is not None:
                from memsearch_fast.serve import follow

                follow.start(conn, self.watchers, req, peer[0] if peer is not None else req.get("pid"))
                return True
            if req["op"] == "index.run" and self.watchers is not None:
                from memsearch_fast.serve import runs

                runs.start(conn, self.watchers, req, self._touch)
                return True
            answer = self._dispatch(req)
        conn.sendall(protocol.reply(answer))
        return False

    def handle(self, req: object) -> protocol.Answer:
        """One request's reply: ``{"text": output}``, or ``{"unsupported"|"missing"|"error": ...}``;
        ``status`` and ``watch.*`` requests go to the watched roots."""
        checked = protocol.check(req, self._code)
        if isinstance(checked, protocol.Refusal):
            return checked.answer
        with self._serial:
            return self._dispatch(checked)

    def _dispatch(self, req: protocol.Request) -> protocol.Answer:
        if req["op"] == "search":
            return self._search(req)
        if req["op"] == "status":
            return self._status()
        if req["op"] == "expand" or req["op"] == "stats":
            self._touch()
            if self._damaged():
                return {"unsupported": "damaged"}
            return reads.answer(self._engine_uri, self._db_path, req)
        if req["op"] == "watch.lease" or req["op"] == "watch.release" or req["op"] == "watch.list":
            return self.watchers.handle(req) if self.watchers is not None else {"unsupported": "request"}
        return {"unsupported": "request"}  # no watched roots here, or a streamed op without its connection

    def _status(self) -> protocol.StatusAnswer:
        roots: protocol.Roots = (
            self.watchers.describe() if self.watchers is not None else {"roots": [], "queue": 0, "index_runs": 0}
        )
        keeper = self.keeper
        released = (
            {"idle_s": keeper.idle_s, "loaded": keeper.loaded, "released": keeper.released}
            if keeper is not None
            else None
        )
        return {"models": self.models.describe(), "searchers": len(self._instances), "release": released, **roots}

    def _search(self, req: protocol.Search) -> protocol.SearchAnswer:
        from memsearch_fast.errors import StoreError, StoreUnavailableError, one_line

        self._touch()
        self._used(str(req["collection"]))
        if self._damaged():
            return {"unsupported": "damaged"}
        model_dir, model_name = str(req["model_dir"]), str(req["model_name"])
        ms = self._instance(str(req["collection"]), model_dir, model_name)
        engine = self._engine_pid()
        try:
            try:
                return self._search_with(ms, req, model_dir, model_name)
            except StoreError as exc:
                # The engine went away under it (killed from outside): the server
                # starts it again on the same socket within seconds; once more then.
                # A call cut off mid-answer need not read as unreachable: an engine
                # started again since the search began counts too.
                lost = isinstance(exc, StoreUnavailableError) or self._engine_pid() != engine or not self._engine_up()
                if not lost or not self._engine_back():
                    raise
                ms.close_store()
                return self._search_with(ms, req, model_dir, model_name)
        except Exception as exc:  # noqa: BLE001 - the client searches itself and reports it
            logger.warning("search in %s left to its client: %s", req["collection"], one_line(exc))
            return {"error": one_line(exc)}
        finally:
            ms.close_store()
            self._touch()
            self._used(str(req["collection"]))

    def _search_with(self, ms: Any, req: protocol.Search, model_dir: str, model_name: str) -> protocol.SearchAnswer:
        if not ms.collection_exists():
            return {"missing": True}
        with self.models.lend(ms, model_dir, model_name):
            query, explain = req["query"], req.get("explain", False)
            hits = self._run(
                ms.search(query, top_k=req["top_k"], source_prefix=req.get("source_prefix"), explain=explain)
            )
            if self._damaged():  # the engine found damage while loading: the process reports it
                return {"unsupported": "damaged"}
            return {"text": _render(ms, hits, req.get("render", {}))}

    def _engine_pid(self) -> object:
        """The recorded engine's pid (the server records each engine it starts again)."""
        if self._db_path is None:
            return None
        from memsearch_fast.lite.state import read_state

        return (read_state(self._db_path) or {}).get("engine_pid")

    def _engine_up(self) -> bool:
        from memsearch_fast.lite.process import endpoint_open

        return endpoint_open(self._engine_uri.removeprefix("http://"), timeout=0.2)

    def _engine_back(self, wait: float = 10.0) -> bool:
        """Whether the engine listens again within *wait* seconds."""
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if self._engine_up():
                return True
            time.sleep(0.2)
        return False

    def _used(self, collection: str) -> None:
        if self.keeper is not None:
            self.keeper.touch(collection)

    def busy(self, collection: str) -> bool:
        """Whether a searcher of *collection* is reading it into its in-memory copy."""
        return any(k[0] == collection and ms.loading_copy() for k, ms in self._searchers)

    def _damaged(self) -> bool:
        """Whether the database is known damaged, or its engine has said so since it started."""
        if self._db_path is None:
            return False
        from memsearch_fast.lite import damage

        return os.path.lexists(damage.marker_path(self._db_path)) or bool(damage.stated_since_start(self._db_path))

    def _instance(self, collection: str, model_dir: str, model_name: str) -> Any:
        """The MemSearch for this collection and model, kept between searches (its
        in-memory dense copy); one whose model's files changed (re-imported) is made
        again, and at most :data:`MAX_LOADED` stay. Its model is lent per search
        by :attr:`models`, shared with the watchers' runs."""
        key = (collection, model_dir, model_name, fingerprint(model_dir))
        if key in self._instances:
            self._instances.move_to_end(key)
            return self._instances[key]
        from memsearch_fast.api import MemSearch

        for old in [k for k in self._instances if k[:3] == key[:3]]:
            self._close(self._instances.pop(old))
        while len(self._instances) >= MAX_LOADED:
            self._close(self._instances.popitem(last=False)[1])
        # Made after the closes: one may save the copy anew, which the new one reads ahead.
        self._instances[key] = MemSearch(
            embedding_provider="onnx",
            embedding_model=model_dir,
            embedding_options={"model_name": model_name},
            milvus_uri=self._engine_uri,
            collection=collection,
            # Vectors in memory for large collections; the database's manifest says when rows change.
            dense_index=self._db_path is not None,
            manifest_uri=self._db_path,
        )
        self._searchers = tuple(self._instances.items())
        return self._instances[key]

    @staticmethod
    def _close(ms: Any) -> None:
        with contextlib.suppress(Exception):
            ms.close()

    def _run(self, coro: Any) -> Any:
        import asyncio

        if self._loop is None:
            self._loop = asyncio.new_event_loop()
        return self._loop.run_until_complete(coro)
