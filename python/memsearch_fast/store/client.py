"""The store's connection: connect, re-attach, error translation.

:class:`StoreClient` holds the client of one store and runs every call
through :meth:`StoreClient._call`, which translates pymilvus errors into
one-line :class:`~memsearch_fast.errors.StoreError` messages, stops a damaged
local database's server (lite.damage), and re-attaches once when the shared
Lite server went away. A local path's client comes from
:func:`memsearch_fast.lite.connect` (shared through a per-database server, or
embedded; the store does not need to know which), ``http(s)://`` is a Milvus
server or Zilliz Cloud. pymilvus is imported lazily.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

from memsearch_fast.errors import StoreError, StoreUnavailableError, UnusableDatabaseError, one_line
from memsearch_fast.store.compat import (
    is_local_uri,
    is_unavailable,
    local_channel_kwargs,
    own_connection_kwargs,
    quiet_pymilvus,
    server_too_old,
    skip_client_varchar_check,
)

if TYPE_CHECKING:
    from memsearch_fast.lite import LiteConnection

_T = TypeVar("_T")


#: Chunk ids per ``chunk_hash in [...]`` filter of :meth:`StoreClient._search_among`.
AMONG_BATCH = 512

#: Rows per query-iterator page, and with a vector field. Milvus Lite 2.5.1 answers
#: a page of rows with vectors in a time that grows faster than the page: 60,105
#: chunks with their vectors read in 18.3 s in pages of 2,000 and 9.2 s in pages
#: of 500, while their ids alone take 0.8 s and 1.9 s (docs/store.md).
ITER_BATCH = 2000
ITER_BATCH_VECTORS = 500


class StoreClient:
    """The connection half of :class:`~memsearch_fast.store.milvus.MilvusStore`.

    The attributes are set by ``MilvusStore.__init__``.
    """

    uri: str
    collection: str
    _token: str | None
    _client: Any
    _conn: LiteConnection | None  # a local database's connection
    _exists: bool
    _shared: bool  # served by the per-database Lite server: re-attach if it dies
    _conn_lock: threading.RLock
    _local: bool
    _path: str | None
    _display: str

    def _connect(self) -> None:
        """Open the client: a Milvus server, or a local database through :func:`memsearch_fast.lite.connect`."""
        import pymilvus  # noqa: F401 - loaded here (about 1 s), never while the Lite broker's lock is held

        quiet_pymilvus()
        skip_client_varchar_check()
        if not self._local:
            try:
                self._client = self._new_client(self.uri, self._token)
            except Exception as exc:  # noqa: BLE001 - every pymilvus failure is translated to a StoreError
                raise self._translate(exc, "connect") from None
            problem = server_too_old(self._server_version())
            if problem:
                self._close_client()
                raise UnusableDatabaseError(f"Milvus at {self._display} is {problem}") from None
            return

        from memsearch_fast import lite

        assert self._path is not None
        self._conn = lite.connect(self._path, lambda uri: self._new_client(uri, lite=True), (self.collection,))
        self._client = self._conn.client
        self._shared = self._conn.shared

    def _server_version(self) -> str:
        """The server's version, or "" when it does not say (a proxy or our own
        Lite server over TCP answers UNIMPLEMENTED): unknown is not refused."""
        try:
            return str(self._client.get_server_version())
        except Exception as exc:  # noqa: BLE001 - only an unreachable server is an error here
            if is_unavailable(exc):
                self._close_client()
                raise self._translate(exc, "connect") from None
            return ""

    @staticmethod
    def _new_client(uri: str, token: str | None = None, *, lite: bool = False) -> Any:
        """A client with a connection of its own to ``uri``.

        A server (remote, or a database's Lite server) gets a 10 s connect
        timeout; a database path is opened in this process with pymilvus's own.
        A *lite* engine (served or in this process) gets no keepalive pings
        (:func:`.compat.local_channel_kwargs`).
        """
        from pymilvus import MilvusClient

        kwargs: dict[str, Any] = {"uri": uri, **own_connection_kwargs()}
        if not is_local_uri(uri):
            kwargs["timeout"] = 10
        if lite:
            kwargs.update(local_channel_kwargs())
        if token:
            kwargs["token"] = token
        return MilvusClient(**kwargs)

    def _reconnect(self) -> None:
        """Re-attach after the shared server went away (idle exit, crash, kill)."""
        self._close_client()
        self._connect()
        if self._exists:
            self._load(retry=False)

    def _close_client(self) -> None:
        client, self._client = self._client, None
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()  # also stops an embedded engine once its last store closes
        elif client is not None:
            with contextlib.suppress(Exception):  # closing a dead connection is not an error
                client.close()

    def _call(self, op: str, fn: Callable[[Any], _T], *, retry: bool = True) -> _T:
        """Run ``fn(client)``, translating errors; re-attach once if the Lite server died."""
        client = self._client
        if client is None:
            if not self._local or self._path is None or not os.path.exists(self._path):
                raise StoreUnavailableError(f"store for {self._display} is closed")
            with self._conn_lock:
                if self._client is None:
                    self._connect()
                client = self._client
        try:
            return fn(client)
        except StoreError:
            raise
        except Exception as exc:  # noqa: BLE001 - translated to a StoreError, raised below
            err = self._translate(exc, op)
            raw = one_line(getattr(exc, "message", None) or exc)
        if self._local and self._path is not None and _is_damage(err, op):
            # A collection the engine could only partly load: never go on with
            # that part. Stop its server and remember why (lite.damage).
            from memsearch_fast.lite import damage

            shared = self._shared
            self._close_client()
            raise damage.report(self._path, raw, shared=shared) from None
        if retry and self._shared:
            with self._conn_lock:
                # Calls in flight on other threads fail together: the first
                # re-attaches, the others (whatever their error, e.g. "closed
                # channel") retry on its new client.
                replaced = self._client is not client
                if not replaced and isinstance(err, StoreUnavailableError):
                    self._reconnect()
                    replaced = True
            if replaced:
                return self._call(op, fn, retry=False)
        raise err

    def _translate(self, exc: BaseException, op: str) -> StoreError:
        """Map a pymilvus/grpc error to a one-line StoreError."""
        msg = one_line(getattr(exc, "message", None) or exc)
        if is_unavailable(exc):
            return StoreUnavailableError(f"Milvus at {self._display} is unreachable during {op}: {msg}")
        code = getattr(exc, "code", None)
        low = msg.lower()
        if code == 100 or ("collection" in low and ("not exist" in low or "not found" in low)):
            self._exists = False
            return StoreError(
                f"collection '{self.collection}' does not exist at {self._display}; run 'memsearch index' to build it"
            )
        return StoreError(f"Milvus {op} failed on {self._display}: {msg}")

    def _count_in(self, collection: str, where: str = "") -> int:
        """Rows of *collection* (those *where* holds), by ``count(*)`` (metadata row counts lag)."""
        rows = self._call(
            "count",
            lambda c: c.query(
                collection_name=collection, filter=where, output_fields=["count(*)"], consistency_level="Strong"
            ),
        )
        return int(rows[0]["count(*)"]) if rows else 0

    def _search_in(
        self,
        collection: str,
        data: list[Any],
        field: str,
        metric: str,
        limit: int,
        source_prefix: str | None,
        fields: list[str],
        *,
        where: str = "",
        group_by: str | None = None,
    ) -> list[dict[str, Any]]:
        """One ranked list of *collection* (rows with *fields* and their ``distance``),
        under *source_prefix* when given (re-checked: the filter is a range), among
        the rows *where* holds, and with *group_by* the best row of each value."""
        from memsearch_fast.store.filters import all_of, prefix_filter

        expr = all_of(prefix_filter("source", source_prefix) if source_prefix else "", where)
        extra: dict[str, Any] = {"group_by_field": group_by} if group_by else {}
        res = self._call(
            "search",
            lambda c: c.search(
                collection_name=collection,
                data=data,
                anns_field=field,
                search_params={"metric_type": metric, "params": {}},
                limit=limit,
                filter=expr,
                output_fields=fields,
                **extra,
            ),
        )
        hits = []
        for hit in res[0] if res else []:
            entity = hit.get("entity", hit)
            row = {f: entity.get(f) for f in fields}
            if source_prefix and not str(row.get("source") or "").startswith(source_prefix):
                continue
            row["distance"] = float(hit["distance"])
            hits.append(row)
        return hits

    def _search_among(
        self,
        collection: str,
        data: list[Any],
        field: str,
        metric: str,
        chunk_hashes: list[str],
        fields: list[str],
        *,
        where: str = "",
        group_by: str | None = None,
    ) -> list[dict[str, Any]]:
        """:meth:`_search_in` among the rows of these chunks alone (and *where*), as
        many hits as chunks (in batches of :data:`AMONG_BATCH` ids: one filter each)."""
        from memsearch_fast.store.filters import all_of, in_filter

        wanted = list(dict.fromkeys(chunk_hashes))
        hits: list[dict[str, Any]] = []
        for i in range(0, len(wanted), AMONG_BATCH):
            part = wanted[i : i + AMONG_BATCH]
            expr = all_of(in_filter("chunk_hash", part), where)
            hits += self._search_in(
                collection, data, field, metric, len(part), None, fields, where=expr, group_by=group_by
            )
        return hits

    def _iterate(
        self, expr: str, fields: list[str], *, collection: str | None = None
    ) -> Iterator[list[dict[str, Any]]]:
        """Page through every row of *collection* (this store's by default) matching
        ``expr`` with a query iterator."""
        it = self._call(
            "query_iterator",
            lambda c: c.query_iterator(
                collection_name=collection or self.collection,
                batch_size=ITER_BATCH_VECTORS if "embedding" in fields else ITER_BATCH,
                filter=expr,
                output_fields=fields,
                consistency_level="Strong",  # the ids a run diffs against include every acknowledged write
            ),
        )
        try:
            while True:
                page = self._call("query_iterator", lambda _c: it.next(), retry=False)
                if not page:
                    return
                yield page
        finally:
            with contextlib.suppress(Exception):  # an iterator whose connection died
                it.close()

    def _load(self, *, retry: bool = True, collection: str | None = None) -> None:
        """Load the collection; on a shared Lite server, also make sure the engine
        loaded all of it. Milvus Lite 2.x answers a load that stopped at a damaged
        page with success and serves the rows read so far; only its log says
        "Load data failed" (lite.damage)."""
        name = collection or self.collection
        self._call("load_collection", lambda c: c.load_collection(name), retry=retry)
        if self._shared and self._path is not None:
            from memsearch_fast.lite import damage

            cause = damage.stated_since_start(self._path)
            if cause:
                self._close_client()
                raise damage.report(self._path, cause, shared=True)


def _is_damage(err: StoreError, op: str) -> bool:
    """Whether a failed call means the local database's content is unreadable:
    SQLite says so, or loading the collection failed inside the engine."""
    if isinstance(err, StoreUnavailableError):
        return False
    from memsearch_fast.lite.damage import is_damage

    text = str(err)
    return is_damage(text) or (op == "load_collection" and "segcore error" in text.lower())
