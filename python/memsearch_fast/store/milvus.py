"""Milvus store: the rebuildable index behind the markdown files.

One collection holds one row per chunk: a dense embedding for semantic search
and a BM25 sparse vector (computed by Milvus from ``content``) for keyword
search. :class:`MilvusStore` is built by role: the connection in
:mod:`.client`, the collection's schema and model record in :mod:`.schema`,
search in :mod:`.search`, and here the rows (write, delete, iterate, get).

``uri`` picks the backend: a local path is a Milvus Lite database, ``http(s)://``
is a Milvus server or Zilliz Cloud. pymilvus is imported lazily so that
importing this module stays cheap for the CLI and hooks. Filter escaping lives
in :mod:`.filters`, row limits and splitting in :mod:`.rows`, pymilvus
workarounds and error classification in :mod:`.compat`.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Generator, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memsearch_fast.config.schema import DEFAULT_COLLECTION, DEFAULT_MILVUS_URI
from memsearch_fast.errors import DimensionMismatchError, StoreError
from memsearch_fast.store.columns import write_columns
from memsearch_fast.store.compat import is_local_uri
from memsearch_fast.store.filters import prefix_filter, quote_filter_value
from memsearch_fast.store.rows import (
    MAX_CONTENT_BYTES,
    MAX_HEADING_BYTES,
    MAX_SOURCE_BYTES,
    split_long_rows,
    utf8_cut,
)
from memsearch_fast.store.schema import QUERY_FIELDS, EmbeddingModel
from memsearch_fast.store.search import StoreSearch
from memsearch_fast.store.spans.collection import SpanStore

if TYPE_CHECKING:
    from memsearch_fast.store.spans.file import SpanFile

# Values per ``IN [...]`` filter (rows per iterator page: client.ITER_BATCH): keeps
# every expression and response bounded whatever the size of the input set.
FILTER_BATCH = 512


# Rows per upsert call. Milvus Lite 2.5 slows ~10x on 5,000-row calls (see
# docs/store.md); 1,000 is at or near the best for both engines.
UPSERT_BATCH = 1000


UPSERT_MAX_BYTES = 32 * 1024 * 1024


class MilvusStore(StoreSearch):
    """Chunk storage and hybrid search on one Milvus collection.

    The collection is created when ``dimension`` is given and it does not
    exist; an existing one is checked against ``dimension`` and loaded, so
    queries never hit "collection not loaded" in a fresh process. With no
    ``dimension`` and no collection, reads return nothing and writes raise.
    A collection created with ``model`` records it (:class:`EmbeddingModel`);
    :meth:`check_model` compares a model with the one that built the collection.
    """

    def __init__(
        self,
        uri: str = DEFAULT_MILVUS_URI,
        *,
        token: str | None = None,
        collection: str = DEFAULT_COLLECTION,
        dimension: int | None = None,
        description: str = "",
        model: EmbeddingModel | None = None,
        database: str | None = None,
    ) -> None:
        self.uri = uri
        self.collection = collection
        self.dimension = dimension
        self.description = description
        self._spans: SpanStore | SpanFile | None = None
        self.model = model
        #: The model the collection records (None: created by an older version or another tool).
        self.recorded_model: EmbeddingModel | None = None
        self._model_checked: tuple[EmbeddingModel, str] | None = None
        self.analyzer: dict[str, Any] | None = None
        self.content_max_bytes = MAX_CONTENT_BYTES
        self._token = token
        self._client = None
        self._conn = None  # a local database's connection
        self._exists = False
        self._shared = False  # served by the per-database Lite server: re-attach if it dies
        # Deletes, flush and drop run one at a time; upserts may overlap
        # (the upsert stage keeps a few in flight, see upsert.py).
        self._write_lock = threading.RLock()
        self._conn_lock = threading.RLock()
        self._local = is_local_uri(uri)
        if self._local and re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://", uri):
            raise StoreError(
                f"unsupported Milvus URI {uri!r}: use a local database path, http(s)://host:port, "
                "tcp://host:port or a Zilliz Cloud https:// endpoint"
            )
        self._path = str(Path(uri).expanduser().resolve()) if self._local else None
        #: The Lite database whose span file this collection's spans live in (*uri*, or the
        #: database *database* names when *uri* is its server's address).
        self._span_db = self._path or (str(Path(database).expanduser().resolve()) if database else None)
        self._display = self._path or uri

        if dimension is not None and (not isinstance(dimension, int) or dimension <= 0):
            raise StoreError(f"embedding dimension must be a positive integer, got {dimension!r}")
        if self._local and self._path is not None and not os.path.exists(self._path) and dimension is None:
            from memsearch_fast.lite.sidecars import check_parent

            check_parent(self._path)  # a parent that is a file is a mistake worth naming
            return  # read-only open of a database that does not exist yet: nothing to read
        self._connect()
        try:
            self._open_collection()
        except BaseException:
            self._close_client()
            raise

    # -- filters --------------------------------------------------------------------------

    @staticmethod
    def _in_filter(field: str, values: list[str]) -> str:
        """``field in [...]`` for ``values``; values holding a newline use a prefix range.

        Callers must re-check results for exact membership: the range part can
        match more than the value (Milvus Lite 2.5 cannot express a newline).
        """
        plain = [v for v in values if "\n" not in v and "\r" not in v]
        parts = []
        if plain:
            parts.append(f"{field} in [{', '.join(quote_filter_value(v) for v in plain)}]")
        for v in values:
            if "\n" in v or "\r" in v:
                parts.append(prefix_filter(field, v) or f'{field} != ""')
        return " or ".join(parts)

    # -- writes ---------------------------------------------------------------------------

    def upsert(self, rows: list[dict[str, Any]]) -> int:
        """Insert or replace rows keyed by ``chunk_hash``; returns rows written.

        Over-long content is split (see :func:`split_long_rows`), over-long
        headings are truncated, ``sparse_vector`` is always left to Milvus.
        Several threads may upsert at once: Milvus Lite serves overlapping
        calls about twice as fast as one after another (docs/store.md).
        """
        return self._write("upsert", rows)

    def insert(self, rows: list[dict[str, Any]]) -> int:
        """Add rows whose ids the caller has just read as absent; returns rows written.

        Milvus Lite 2.5's upsert looks each id up among all stored rows, so its
        cost grows with the collection (25,000 rows: 7.6 s into an empty one,
        19.4 s at 125,000 rows; docs/store.md); insert's does not. An id that is in fact stored
        would then be stored twice, so a failed call is not retried here: the
        caller upserts the batch again, which also replaces any part of it
        that landed. Rows that must be split go through :meth:`upsert`.
        """
        if len(split_long_rows(rows, self.content_max_bytes)) != len(rows):  # a split row: ids of another form
            return self._write("upsert", rows)
        return self._write("insert", rows, retry=False)

    def _write(self, op: str, rows: list[dict[str, Any]], *, retry: bool = True) -> int:
        if not rows:
            return 0
        self._require_writable()
        prepared = [self._prepare_row(r) for r in split_long_rows(rows, self.content_max_bytes)]
        written = 0
        for batch in self._batches(prepared):

            def send(c: Any, b: list[dict[str, Any]] = batch) -> Any:
                done = write_columns(c, op, self.collection, b)
                return done if done is not None else getattr(c, op)(collection_name=self.collection, data=b)

            res = self._call(op, send, retry=retry)
            n = res.get(f"{op}_count") if isinstance(res, dict) else res
            written += int(n) if isinstance(n, int) else len(batch)
        return written

    def _prepare_row(self, row: dict[str, Any]) -> dict[str, Any]:
        out = dict(row)
        out.pop("sparse_vector", None)
        emb = out.get("embedding")
        if emb is None:
            raise StoreError(f"row {out.get('chunk_hash')!r} has no embedding")
        if hasattr(emb, "tolist"):
            emb = emb.tolist()
            out["embedding"] = emb
        if len(emb) != self.dimension:
            raise DimensionMismatchError(
                f"row {out.get('chunk_hash')!r} has a {len(emb)}-d embedding but collection "
                f"'{self.collection}' holds {self.dimension}-d; run 'memsearch reset' after changing the model"
            )
        source = out.get("source") or ""
        if len(source.encode("utf-8")) > MAX_SOURCE_BYTES:
            raise StoreError(f"source path longer than {MAX_SOURCE_BYTES} bytes: {source[:80]}…")
        heading = out.get("heading") or ""
        if len(heading.encode("utf-8")) > MAX_HEADING_BYTES:
            heading = heading[: utf8_cut(heading, MAX_HEADING_BYTES)]
        out["heading"] = heading
        out["source"] = source
        for key in ("heading_level", "start_line", "end_line"):
            out[key] = int(out.get(key) or 0)
        return out

    @staticmethod
    def _batches(rows: list[dict[str, Any]]) -> Iterator[list[dict[str, Any]]]:
        """Split rows into calls bounded by count and payload size."""
        batch: list[dict[str, Any]] = []
        size = 0
        for r in rows:
            rsize = len(r["content"]) * 2 + len(r["embedding"]) * 4 + 512
            if batch and (len(batch) >= UPSERT_BATCH or size + rsize > UPSERT_MAX_BYTES):
                yield batch
                batch, size = [], 0
            batch.append(r)
            size += rsize
        if batch:
            yield batch

    def delete_ids(self, ids: Iterable[str]) -> int:
        """Delete rows by primary key in bounded batches; returns ids submitted.

        Milvus does not report how many of them existed.
        """
        if not self._exists:
            return 0
        ids = list(dict.fromkeys(ids))
        with self._write_lock:
            self.spans.delete_chunks(ids)  # first: a span left behind would outlive its chunk
            for i in range(0, len(ids), FILTER_BATCH):
                expr = f"chunk_hash in [{', '.join(quote_filter_value(v) for v in ids[i : i + FILTER_BATCH])}]"

                def delete(c: Any, e: str = expr) -> Any:
                    return c.delete(collection_name=self.collection, filter=e)

                self._call("delete", delete)
        return len(ids)

    def delete_sources(self, sources: Iterable[str]) -> int:
        """Delete every row of the given source files; returns rows deleted.

        Ids are looked up first, so the count is exact and hostile file names
        never reach a delete expression.
        """
        ids = [h for h, _ in self.iter_ids_by_source(list(sources))]
        return self.delete_ids(ids) if ids else 0

    def flush(self) -> None:
        """Persist buffered writes (segments) so a restart does not replay them."""
        if not self._exists:
            return
        with self._write_lock:
            self._call("flush", lambda c: c.flush(self.collection))

    def drop(self) -> None:
        """Drop the collection (``memsearch reset``)."""
        if self._client is None:
            return
        with self._write_lock:
            self.spans.drop()
            legacy = self.legacy_spans()
            if legacy is not None:
                legacy.drop()
            if self._call("has_collection", lambda c: c.has_collection(self.collection)):
                self._call("drop_collection", lambda c: c.drop_collection(self.collection))
        self._exists = False

    @property
    def spans(self) -> SpanStore | SpanFile:
        """The span vectors of this collection: in a file beside a Milvus Lite
        database (:mod:`.spans.file`), a companion collection on a server
        (:mod:`.spans.collection`)."""
        if self._spans is None:
            from memsearch_fast.config import environment

            if self._span_db is not None and environment.text("MEMSEARCH_SPAN_STORE") != "collection":
                from memsearch_fast.store.spans.file import SpanFile

                self._spans = SpanFile(self, self._span_db)
            else:
                self._spans = SpanStore(self)
        return self._spans

    def legacy_spans(self) -> SpanStore | None:
        """The companion collection of a Lite database whose spans now live in a file
        (made before they did; :meth:`memsearch_fast.store.spans.file.SpanFile.adopt` moves them)."""
        if isinstance(self.spans, SpanStore) or self._client is None:
            return None
        return SpanStore(self)

    # -- reads ----------------------------------------------------------------------------

    def iter_ids_by_source(self, sources: Iterable[str] | None = None) -> Generator[tuple[str, str]]:
        """Yield ``(chunk_hash, source)`` for the given sources, or for all rows when None."""
        if not self._exists:
            return
        if sources is None:
            for page in self._iterate("", ["chunk_hash", "source"]):
                for r in page:
                    yield r["chunk_hash"], r["source"]
            return
        wanted = list(dict.fromkeys(sources))
        for i in range(0, len(wanted), FILTER_BATCH):
            chunk = wanted[i : i + FILTER_BATCH]
            exact = set(chunk)
            for page in self._iterate(self._in_filter("source", chunk), ["chunk_hash", "source"]):
                for r in page:
                    if r["source"] in exact:
                        yield r["chunk_hash"], r["source"]

    def iter_rows(self, fields: list[str]) -> Iterator[list[dict[str, Any]]]:
        """Every row with ``fields`` and ``source``, a page at a time."""
        if not self._exists:
            return
        for page in self._iterate("", list(dict.fromkeys([*fields, "source"]))):
            yield [_plain(r) for r in page]

    def rows_for_sources(self, sources: list[str], fields: list[str]) -> list[dict[str, Any]]:
        """Rows of the given sources with ``fields`` (e.g. content + embedding for reuse)."""
        return [r for page in self.iter_rows_for_sources(sources, fields) for r in page]

    def iter_rows_for_sources(self, sources: list[str], fields: list[str]) -> Iterator[list[dict[str, Any]]]:
        """:meth:`rows_for_sources` a page at a time, so any number of rows stays bounded in memory."""
        if not self._exists or not sources:
            return
        fields = list(dict.fromkeys([*fields, "source"]))
        wanted = list(dict.fromkeys(sources))
        for i in range(0, len(wanted), FILTER_BATCH):
            chunk = wanted[i : i + FILTER_BATCH]
            exact = set(chunk)
            for page in self._iterate(self._in_filter("source", chunk), fields):
                yield [_plain(r) for r in page if r.get("source") in exact]

    def rows_for_ids(self, ids: list[str], fields: list[str]) -> list[dict[str, Any]]:
        """Rows with the given ids (``chunk_hash``); ids not stored are left out.

        Strong consistency: every write acknowledged before the call is seen.
        """
        if not self._exists or not ids:
            return []
        fields = list(dict.fromkeys(["chunk_hash", *fields]))
        out: list[dict[str, Any]] = []
        wanted = list(dict.fromkeys(ids))
        for i in range(0, len(wanted), FILTER_BATCH):
            expr = f"chunk_hash in [{', '.join(quote_filter_value(v) for v in wanted[i : i + FILTER_BATCH])}]"

            def query(c: Any, e: str = expr) -> Any:
                return c.query(
                    collection_name=self.collection, filter=e, output_fields=fields, consistency_level="Strong"
                )

            out.extend(_plain(r) for r in self._call("query", query))
        return out

    def get(self, chunk_hash: str, fields: list[str] | None = None) -> dict[str, Any] | None:
        """One row by id (the display fields unless ``fields`` is given), or None."""
        if not self._exists:
            return None
        rows = self._call(
            "query",
            lambda c: c.query(
                collection_name=self.collection,
                filter=f"chunk_hash == {quote_filter_value(chunk_hash)}",
                output_fields=fields or QUERY_FIELDS,
                limit=1,
            ),
        )
        return _plain(rows[0]) if rows else None

    def count_sources(self) -> int:
        """Distinct source files, read with the iterator."""
        return len({s for _, s in self.iter_ids_by_source(None)})

    # -- lifecycle ------------------------------------------------------------------------

    def close(self) -> None:
        """Release the connection; a shared Lite server stays up for other processes."""
        close = getattr(self._spans, "close", None)
        if close is not None:
            close()
        self._close_client()

    def __enter__(self) -> MilvusStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _plain(row: Any) -> dict[str, Any]:
    """A plain dict copy of a result row (pymilvus may return lazy row types)."""
    return {k: row[k] for k in row}
