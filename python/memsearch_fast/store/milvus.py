"""Milvus store: the rebuildable index behind the markdown files.

One collection holds one row per chunk: a dense embedding for semantic search
and a BM25 sparse vector (computed by Milvus from ``content``) for keyword
search. The schema matches memsearch 0.4.23 field for field, so an index built
by either tool is searchable by the other.

``uri`` picks the backend: a local path is a Milvus Lite database, whose
client comes from :func:`memsearch_fast.lite.connect` (shared between
processes through a per-database server, or embedded; the store does not
need to know which), ``http(s)://`` is a Milvus server or Zilliz Cloud.
pymilvus is imported lazily so that importing this module stays cheap for the
CLI and hooks. Filter escaping lives in :mod:`.filters`, row limits and
splitting in :mod:`.rows`, pymilvus workarounds and error classification in
:mod:`.compat`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import threading
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

from memsearch_fast.config.schema import DEFAULT_COLLECTION, DEFAULT_MILVUS_URI
from memsearch_fast.config.tuning import API_TOP_K
from memsearch_fast.errors import (
    DimensionMismatchError,
    ModelMismatchError,
    StoreError,
    StoreUnavailableError,
    one_line,
)
from memsearch_fast.store.compat import (
    is_local_uri,
    is_unavailable,
    own_connection_kwargs,
    quiet_pymilvus,
    skip_client_varchar_check,
)
from memsearch_fast.store.filters import prefix_filter, quote_filter_value
from memsearch_fast.store.rows import (
    MAX_CONTENT_BYTES,
    MAX_HEADING_BYTES,
    MAX_SOURCE_BYTES,
    split_long_rows,
    utf8_cut,
)

if TYPE_CHECKING:
    from memsearch_fast.lite import LiteConnection

logger = logging.getLogger(__name__)


#: BM25 analyzer for new collections. jieba segments Chinese (and passes Latin
#: words through whole); the lowercase filter makes English case-insensitive on
#: Milvus server, where jieba alone keeps case (Milvus Lite 3.x lowercases
#: itself and ignores the filter). jieba also passes spaces and punctuation
#: through as tokens, so every chunk "matched" every query through them (a query
#: of unknown words got all rows at one score, and that noise reordered the
#: fusion): ``cnalphanumonly`` keeps only CJK and alphanumeric tokens. Built into
#: Milvus >= 2.5 and Milvus Lite 2.5; Milvus Lite 3.x needs the ``jieba``
#: package in the serving process.
CJK_ANALYZER: dict[str, Any] = {"tokenizer": "jieba", "filter": ["lowercase", "cnalphanumonly"]}

#: The analyzer of collections made before ``cnalphanumonly`` (still read and
#: written as they are: the analyzer is fixed when a collection is created), and
#: the fallback for an engine without that filter.
CJK_ANALYZER_PLAIN: dict[str, Any] = {"tokenizer": "jieba", "filter": ["lowercase"]}

#: Fallback when the engine has no jieba: Milvus's default "standard" analyzer.
STANDARD_ANALYZER: dict[str, Any] = {"tokenizer": "standard", "filter": ["lowercase"]}


QUERY_FIELDS = ["content", "source", "heading", "chunk_hash", "heading_level", "start_line", "end_line"]


ROW_FIELDS = ["chunk_hash", "embedding", *QUERY_FIELDS[:3], *QUERY_FIELDS[4:]]


# Values per ``IN [...]`` filter and rows per iterator page: keeps every
# expression and response bounded whatever the size of the input set.
FILTER_BATCH = 512


ITER_BATCH = 2000


#: The most hits one search may ask for (Milvus: offset + limit ≤ 16384).
MAX_TOP_K = 16384


# Rows per upsert call. Milvus Lite 2.5 slows ~10x on 5,000-row calls (see
# docs/store.md); 1,000 is at or near the best for both engines.
UPSERT_BATCH = 1000


UPSERT_MAX_BYTES = 32 * 1024 * 1024


_T = TypeVar("_T")


#: Rows whose chunk ids are recomputed to tell the model of a collection that
#: records none (:meth:`MilvusStore.check_model`).
MODEL_SAMPLE = 32


class EmbeddingModel(NamedTuple):
    """The embedding model a collection's vectors come from, recorded in the
    description of its ``embedding`` field when the collection is created.

    A field description is the one place Milvus Lite 2.5 keeps that the
    schema of memsearch 0.4.23 leaves free (collection properties are dropped,
    and altered ones unsupported), and that tool neither reads nor checks it.
    ``name`` is what identifies the model; ``provider`` says how to ask for it.
    """

    provider: str
    name: str

    def __str__(self) -> str:
        return f"'{self.name}' ({self.provider})" if self.provider else f"'{self.name}'"

    def record(self) -> str:
        import json

        return json.dumps({"embedding_provider": self.provider, "embedding_model": self.name})

    @classmethod
    def from_record(cls, text: Any) -> EmbeddingModel | None:
        """The model a field description records, or None (an empty or foreign description)."""
        import json

        if not isinstance(text, str) or not text.startswith("{"):
            return None
        try:
            data = json.loads(text)
        except ValueError:
            return None
        name = data.get("embedding_model") if isinstance(data, dict) else None
        if not isinstance(name, str) or not name:
            return None
        provider = data.get("embedding_provider")
        return cls(provider if isinstance(provider, str) else "", name)


class MilvusStore:
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
    ) -> None:
        self.uri = uri
        self.collection = collection
        self.dimension: int | None = dimension
        self.description = description
        self.model = model
        #: The model the collection records (None: created by an older version or another tool).
        self.recorded_model: EmbeddingModel | None = None
        self._model_checked: tuple[EmbeddingModel, str] | None = None
        self.analyzer: dict[str, Any] | None = None
        self.content_max_bytes = MAX_CONTENT_BYTES
        self._token = token
        self._client: Any = None
        self._conn: LiteConnection | None = None  # a local database's connection
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
        self._display = self._path or uri

        if dimension is not None and (not isinstance(dimension, int) or dimension <= 0):
            raise StoreError(f"embedding dimension must be a positive integer, got {dimension!r}")
        if self._local and self._path is not None and not os.path.exists(self._path) and dimension is None:
            from memsearch_fast.lite.paths import check_parent

            check_parent(self._path)  # a parent that is a file is a mistake worth naming
            return  # read-only open of a database that does not exist yet: nothing to read
        self._connect()
        try:
            self._open_collection()
        except BaseException:
            self._close_client()
            raise

    # -- connection ---------------------------------------------------------------------

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
            return

        from memsearch_fast import lite

        assert self._path is not None
        self._conn = lite.connect(self._path, self._new_client)
        self._client = self._conn.client
        self._shared = self._conn.shared

    @staticmethod
    def _new_client(uri: str, token: str | None = None) -> Any:
        """A client with a connection of its own to ``uri``.

        A server (remote, or a database's Lite server) gets a 10 s connect
        timeout; a database path is opened in this process with pymilvus's own.
        """
        from pymilvus import MilvusClient

        kwargs: dict[str, Any] = {"uri": uri, **own_connection_kwargs()}
        if not is_local_uri(uri):
            kwargs["timeout"] = 10
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

    # -- collection ---------------------------------------------------------------------

    def _open_collection(self) -> None:
        exists = self._call("has_collection", lambda c: c.has_collection(self.collection))
        if exists:
            self._adopt_existing()
        elif self.dimension is not None:
            try:
                self._create()
            except StoreError as exc:
                # another process created it between our check and our create
                if "exist" not in str(exc).lower() or not self._call(
                    "has_collection", lambda c: c.has_collection(self.collection)
                ):
                    raise
                self._adopt_existing()
        self._exists = exists or self.dimension is not None
        if self._exists:
            self._load()

    def _load(self, *, retry: bool = True) -> None:
        """Load the collection; on a shared Lite server, also make sure the engine
        loaded all of it. Milvus Lite 2.x answers a load that stopped at a damaged
        page with success and serves the rows read so far; only its log says
        "Load data failed" (lite.damage)."""
        self._call("load_collection", lambda c: c.load_collection(self.collection), retry=retry)
        if self._shared and self._path is not None:
            from memsearch_fast.lite import damage

            cause = damage.stated_since_start(self._path)
            if cause:
                self._close_client()
                raise damage.report(self._path, cause, shared=True)

    def _adopt_existing(self) -> None:
        """Read dimension, content length and analyzer from the existing schema."""
        info = self._call("describe_collection", lambda c: c.describe_collection(self.collection))
        dim = None
        for field in info.get("fields", []):
            params = field.get("params") or {}
            if field.get("name") == "embedding":
                raw_dim = params.get("dim")
                dim = int(raw_dim) if raw_dim is not None else None
                self.recorded_model = EmbeddingModel.from_record(field.get("description"))
            elif field.get("name") == "content":
                if params.get("max_length"):
                    self.content_max_bytes = int(params["max_length"])
                analyzer = params.get("analyzer_params")
                if isinstance(analyzer, str):
                    import json

                    try:
                        analyzer = json.loads(analyzer)
                    except ValueError:
                        analyzer = None
                self.analyzer = analyzer if isinstance(analyzer, dict) else None
        if dim is None:
            raise StoreError(f"collection '{self.collection}' at {self._display} has no 'embedding' vector field")
        if self.dimension is not None and dim != self.dimension:
            raise DimensionMismatchError(
                f"collection '{self.collection}' at {self._display} holds {dim}-d embeddings but the model "
                f"produces {self.dimension}-d; run 'memsearch reset' to drop it and re-index"
            )
        self.dimension = dim

    def _create(self) -> None:
        """Create the collection (schema of memsearch 0.4.23 plus a CJK-aware analyzer),
        with the best analyzer the engine has."""
        choices = (CJK_ANALYZER, CJK_ANALYZER_PLAIN, STANDARD_ANALYZER)
        for i, analyzer in enumerate(choices):
            try:
                self._create_with(analyzer)
            except StoreError as exc:
                low = str(exc).lower()
                if i == len(choices) - 1 or not any(s in low for s in ("jieba", "tokenizer", "analyzer", "filter")):
                    raise
                logger.warning("BM25 analyzer %s unavailable (%s); trying %s", analyzer, exc, choices[i + 1])
                continue
            self.analyzer = dict(analyzer)
            self.recorded_model = self.model
            return

    def _create_with(self, analyzer: dict[str, Any]) -> None:
        from pymilvus import DataType, Function, FunctionType

        assert self.dimension is not None
        client = self._client
        schema = client.create_schema(enable_dynamic_field=True, description=self.description)
        schema.add_field(field_name="chunk_hash", datatype=DataType.VARCHAR, max_length=64, is_primary=True)
        schema.add_field(
            field_name="embedding",
            datatype=DataType.FLOAT_VECTOR,
            dim=self.dimension,
            description=self.model.record() if self.model else "",
        )
        schema.add_field(
            field_name="content",
            datatype=DataType.VARCHAR,
            max_length=MAX_CONTENT_BYTES,
            enable_analyzer=True,
            analyzer_params=analyzer,
        )
        schema.add_field(field_name="sparse_vector", datatype=DataType.SPARSE_FLOAT_VECTOR)
        schema.add_field(field_name="source", datatype=DataType.VARCHAR, max_length=MAX_SOURCE_BYTES)
        schema.add_field(field_name="heading", datatype=DataType.VARCHAR, max_length=MAX_HEADING_BYTES)
        schema.add_field(field_name="heading_level", datatype=DataType.INT64)
        schema.add_field(field_name="start_line", datatype=DataType.INT64)
        schema.add_field(field_name="end_line", datatype=DataType.INT64)
        schema.add_function(
            Function(
                name="bm25_fn",
                function_type=FunctionType.BM25,
                input_field_names=["content"],
                output_field_names=["sparse_vector"],
            )
        )
        index_params = client.prepare_index_params()
        index_params.add_index(field_name="embedding", index_type="FLAT", metric_type="COSINE")
        index_params.add_index(field_name="sparse_vector", index_type="SPARSE_INVERTED_INDEX", metric_type="BM25")
        with self._write_lock:
            self._call(
                "create_collection",
                lambda c: c.create_collection(
                    collection_name=self.collection, schema=schema, index_params=index_params
                ),
            )

    @property
    def exists(self) -> bool:
        """Whether the collection exists (False for a read-only open of an empty location)."""
        return self._exists

    def check_model(self, model: EmbeddingModel, id_model: str) -> None:
        """Raise :class:`ModelMismatchError` when the collection was built with another model.

        A recorded model must have ``model``'s name. A collection without a
        record (made by an older version or by memsearch 0.4.23) is judged by
        its chunk ids, which hash the model name (``id_model``, as the index
        pipeline computes them) with each chunk's source, lines and content:
        when none of a sample of its rows has the id ``id_model`` would give
        it, its vectors came from another model. Rows of split chunks (64-hex
        ids) prove nothing and are skipped; an empty collection passes.
        """
        if not self._exists or self._model_checked == (model, id_model):
            return
        advice = "run 'memsearch reset' to drop it and re-index"
        where = f"collection '{self.collection}' at {self._display}"
        recorded = self.recorded_model
        if recorded is not None:
            if recorded.name != model.name:
                flags = f"--provider {recorded.provider} --model {recorded.name}" if recorded.provider else ""
                raise ModelMismatchError(
                    f"{where} holds embeddings of model {recorded} but this run uses {model}; "
                    f"use {flags or f'--model {recorded.name}'}, or {advice}"
                )
        elif self._ids_of_another_model(id_model):
            raise ModelMismatchError(
                f"{where} holds embeddings of another model than {model} (none of its chunk ids were made "
                f"with it); use the --model it was built with, or {advice}"
            )
        self._model_checked = (model, id_model)

    def _ids_of_another_model(self, id_model: str) -> bool:
        from memsearch_fast._core import compute_chunk_id, content_hash

        fields = ["chunk_hash", "source", "start_line", "end_line", "content"]
        rows = self._call(
            "query",
            lambda c: c.query(collection_name=self.collection, filter="", output_fields=fields, limit=MODEL_SAMPLE),
        )
        judged = 0
        for r in rows:
            cid = str(r.get("chunk_hash") or "")
            if len(cid) != 16:
                continue
            judged += 1
            made = compute_chunk_id(
                str(r.get("source") or ""),
                int(r.get("start_line") or 0),
                int(r.get("end_line") or 0),
                content_hash(str(r.get("content") or "")),
                id_model,
            )
            if made == cid:
                return False
        return judged > 0

    def _require_writable(self) -> None:
        if not self._exists:
            if self.dimension is None:
                raise StoreError(
                    f"collection '{self.collection}' does not exist at {self._display}; "
                    "open the store with the embedding dimension to create it"
                )
            with self._conn_lock:  # upserts may arrive from several threads: the first one opens it
                if not self._exists:
                    if self._client is None:
                        self._connect()
                    self._open_collection()

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

    def _iterate(self, expr: str, fields: list[str], batch_size: int = ITER_BATCH) -> Iterator[list[dict[str, Any]]]:
        """Page through every row matching ``expr`` with a query iterator."""
        it = self._call(
            "query_iterator",
            lambda c: c.query_iterator(
                collection_name=self.collection,
                batch_size=batch_size,
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
                return getattr(c, op)(collection_name=self.collection, data=b)

            res = self._call(op, send, retry=retry)
            n = res.get(f"{op}_count") if isinstance(res, dict) else None
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
            if self._call("has_collection", lambda c: c.has_collection(self.collection)):
                self._call("drop_collection", lambda c: c.drop_collection(self.collection))
        self._exists = False

    # -- reads ----------------------------------------------------------------------------

    def iter_ids_by_source(self, sources: Iterable[str] | None = None) -> Iterator[tuple[str, str]]:
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

    def search(
        self,
        dense: list[float],
        query_text: str,
        *,
        top_k: int = API_TOP_K,
        source_prefix: str | None = None,
        explain: bool = False,
    ) -> list[dict[str, Any]]:
        """Hybrid search: dense (COSINE) and BM25 lists fused by :mod:`.fusion`.

        ``score`` is the fused score, 0..1 (1.0: first in both lists). With
        *explain*, each hit also carries ``explain``: its rank and score in
        the dense and the BM25 list (rank None: not in that list, which is
        :func:`.fusion.depth` deep) and the fused score. An empty query text
        searches by the dense vector alone.
        """
        if top_k > MAX_TOP_K:
            raise StoreError(
                f"top_k {top_k} is above {MAX_TOP_K}, the most results Milvus returns for one search; "
                f"ask for {MAX_TOP_K} or fewer (-k/--top-k)"
            )
        if not self._exists or top_k <= 0:
            return []
        from memsearch_fast.store import fusion

        deep = fusion.depth(top_k, MAX_TOP_K)
        if hasattr(dense, "tolist"):
            dense = dense.tolist()
        try:
            dense_hits = self._list_search([list(dense)], "embedding", "COSINE", deep, source_prefix)
            sparse_hits = self.sparse_search(query_text, top_k=deep, source_prefix=source_prefix)
        except StoreUnavailableError:
            raise
        except StoreError:
            # Some engines fail BM25 on an empty collection (average doc length
            # 0); an empty collection has no results rather than an error.
            if self._exists and self.count() == 0:
                return []
            raise
        rows = {h["chunk_hash"]: h for h in [*sparse_hits, *dense_hits]}
        fused = fusion.fuse(
            [(h["chunk_hash"], h["distance"]) for h in dense_hits],
            [(h["chunk_hash"], h["distance"]) for h in sparse_hits],
            top_k,
        )
        return [fusion.hit(f, rows[f.id], QUERY_FIELDS, explain) for f in fused]

    def sparse_search(self, query_text: str, *, top_k: int, source_prefix: str | None = None) -> list[dict[str, Any]]:
        """The BM25 list of :meth:`search`, best first, each row with its ``distance``."""
        if not query_text.strip():
            return []
        try:
            return self._list_search([query_text], "sparse_vector", "BM25", top_k, source_prefix)
        except StoreUnavailableError:
            raise
        except StoreError as exc:
            # Milvus Lite 2.5 scores BM25 against a snapshot with no documents (an
            # empty collection, or one whose first rows are still being written
            # while another process searches) as NaN and fails: no BM25 hits.
            if "NaN or Inf" in str(exc):
                return []
            raise

    def _list_search(
        self, data: list[Any], field: str, metric: str, limit: int, source_prefix: str | None
    ) -> list[dict[str, Any]]:
        if not self._exists or limit <= 0:
            return []
        expr = prefix_filter("source", source_prefix) if source_prefix else ""
        res = self._call(
            "search",
            lambda c: c.search(
                collection_name=self.collection,
                data=data,
                anns_field=field,
                search_params={"metric_type": metric, "params": {}},
                limit=limit,
                filter=expr,
                output_fields=QUERY_FIELDS,
            ),
        )
        hits = []
        for hit in res[0] if res else []:
            entity = hit.get("entity", hit)
            row = {f: entity.get(f) for f in QUERY_FIELDS}
            if source_prefix and not str(row.get("source") or "").startswith(source_prefix):
                continue
            row["distance"] = float(hit["distance"])
            hits.append(row)
        return hits

    def collection_id(self) -> str:
        """The engine's id of the collection, "" where it reports none (Milvus
        Lite says 0): a dropped and re-created collection gets another one."""
        if not self._exists:
            return ""
        info = self._call("describe_collection", lambda c: c.describe_collection(self.collection))
        cid = info.get("collection_id") if isinstance(info, dict) else None
        return str(cid) if cid else ""

    def count(self) -> int:
        """Rows in the collection, by ``count(*)`` (metadata row counts lag)."""
        if not self._exists:
            return 0
        rows = self._call(
            "count",
            lambda c: c.query(
                collection_name=self.collection, filter="", output_fields=["count(*)"], consistency_level="Strong"
            ),
        )
        if not rows:
            return 0
        return int(rows[0]["count(*)"])

    def count_sources(self) -> int:
        """Distinct source files, read with the iterator."""
        return len({s for _, s in self.iter_ids_by_source(None)})

    # -- lifecycle ------------------------------------------------------------------------

    def close(self) -> None:
        """Release the connection; a shared Lite server stays up for other processes."""
        self._close_client()

    def __enter__(self) -> MilvusStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _is_damage(err: StoreError, op: str) -> bool:
    """Whether a failed call means the local database's content is unreadable:
    SQLite says so, or loading the collection failed inside the engine."""
    if isinstance(err, StoreUnavailableError):
        return False
    from memsearch_fast.lite.damage import is_damage

    text = str(err)
    return is_damage(text) or (op == "load_collection" and "segcore error" in text.lower())


def _plain(row: Any) -> dict[str, Any]:
    """A plain dict copy of a result row (pymilvus may return lazy row types)."""
    return {k: row[k] for k in row}
