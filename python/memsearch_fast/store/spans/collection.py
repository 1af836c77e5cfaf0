"""The span vectors of a collection, in a companion collection ``<collection>_spans``.

The main collection keeps memsearch 0.4.23's schema, so a 0.4.23 client
still searches it. Beside it, the rows of the chunks that have spans
(:mod:`memsearch_fast.index.spans`; a short chunk has none): index 1… its
spans, index 0 its own vector, written last as the mark that the chunk has
all its rows. Milvus ranks them grouped by chunk, so one search gives each
chunk's best span. ``text_hash`` (the span text's content hash) lets a moved or
copied chunk take its spans' vectors instead of embedding them again.

Rows follow their chunk: :class:`~memsearch_fast.store.milvus.MilvusStore`
deletes a chunk's spans just before the chunk (by id or source) and drops
them with the collection; the index run writes them just after their chunks
(:mod:`memsearch_fast.index.upsert` for chunks it embedded as spans,
:mod:`memsearch_fast.index.span_pass` for the rest). Search ignores a span whose chunk is
gone, and the next full run removes it.

Span vectors are stored as float16 (``FLOAT16_VECTOR``): Milvus Lite fits two
float32 span rows of journals in a 4 KiB page and three float16 ones, so the
database is about a quarter smaller (114 MB against 157 MB at 5 MB of
journals) and the in-memory copy loads a third faster (docs/retrieval.md,
"Span vectors stored as float16"). A collection made before keeps its
float32 vectors and is read and written as it is.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from memsearch_fast.store.compat import create_loaded
from memsearch_fast.store.filters import in_filter
from memsearch_fast.store.rows import MAX_SOURCE_BYTES
from memsearch_fast.store.spans.reads import HALF_SCAN_COST

if TYPE_CHECKING:
    from memsearch_fast.store.schema import StoreSchema
    from memsearch_fast.store.spans.basis import Basis
    from memsearch_fast.store.spans.columns import ChunkSpans

SUFFIX = "_spans"
#: Ids per ``in [...]`` filter, rows per write and per iterator page.
BATCH = 512
FIELDS = ["span_id", "chunk_hash", "source", "text_hash", "start_line", "end_line"]
#: The rows of spans, not a chunk's own (row 0 has no text hash).
SPANS_ONLY = 'text_hash != ""'


def span_id(chunk_hash: str, index: int) -> str:
    return f"{chunk_hash}:{index}"


def span_row(
    chunk_hash: str, source: str, index: int, start: int, end: int, text_hash: str, vector: Any
) -> dict[str, Any]:
    """One row: span *index* of a chunk (0: the chunk's own vector, ``text_hash`` "").
    *vector* may be a list of floats or an array: :meth:`SpanStore.insert` and
    :meth:`SpanStore.upsert` convert it to the collection's vector type."""
    return {
        "span_id": span_id(chunk_hash, index),
        "chunk_hash": chunk_hash,
        "source": source,
        "text_hash": text_hash,
        "start_line": start,
        "end_line": end,
        "embedding": vector,
    }


def span_schema(client: Any, dim: int, description: str) -> tuple[Any, Any]:
    """The schema and index parameters of a span collection of *dim* float16 dimensions."""
    from pymilvus import DataType

    schema = client.create_schema(enable_dynamic_field=False, description=description)
    schema.add_field(field_name="span_id", datatype=DataType.VARCHAR, max_length=80, is_primary=True)
    schema.add_field(field_name="chunk_hash", datatype=DataType.VARCHAR, max_length=64)
    schema.add_field(field_name="source", datatype=DataType.VARCHAR, max_length=MAX_SOURCE_BYTES)
    schema.add_field(field_name="text_hash", datatype=DataType.VARCHAR, max_length=64)
    schema.add_field(field_name="start_line", datatype=DataType.INT64)
    schema.add_field(field_name="end_line", datatype=DataType.INT64)
    schema.add_field(field_name="embedding", datatype=DataType.FLOAT16_VECTOR, dim=dim)
    index = client.prepare_index_params()
    index.add_index(field_name="embedding", index_type="FLAT", metric_type="COSINE")
    return schema, index


class SpanStore:
    """The companion collection of *store* (same connection, same dimension)."""

    def __init__(self, store: StoreSchema) -> None:
        self.store = store
        self.collection = f"{store.collection}{SUFFIX}"
        self._exists: bool | None = None
        self._half: bool | None = None
        self._basis: Basis | None = None  # read with _half
        self._refused = False  # the server kept no basis: every dimension, for good

    # -- the collection ---------------------------------------------------------------

    @property
    def exists(self) -> bool:
        if self._exists is None:
            if not self.store.exists:
                return False
            self._exists = bool(self._call("has_collection", lambda c: c.has_collection(self.collection)))
            self._half = None  # read again with it: another process may have made it anew
            if self._exists:  # loaded as the main collection is: a damaged part is reported, not served
                self.store._load(collection=self.collection)
        return self._exists

    def present(self) -> bool:
        """Whether the collection exists, asked without loading it (Lite takes 14 s
        to load one of 620,000 float16 rows; a copy that keeps every span it held
        reads none)."""
        if self._exists is not None:
            return self._exists
        return self.store.exists and bool(self._call("has_collection", lambda c: c.has_collection(self.collection)))

    def create(self, sample: Any = None) -> bool:
        """Create the collection when missing, its vectors in the directions fitted on
        *sample* (the first write's vectors, when enough: :mod:`memsearch_fast.store.spans.basis`); True
        when this call created it."""
        if self.exists:
            return False
        from memsearch_fast.store.spans.basis import fit

        return self._create(fit(sample) if sample is not None and len(sample) else None)

    def _create(self, basis: Basis | None) -> bool:
        from memsearch_fast.store.spans.basis import REFUSED, read

        dim = self.store.dimension
        assert dim is not None
        text = "span vectors of " + self.store.collection

        def create(c: Any, b: Basis | None, note: str = "") -> None:
            schema, index = span_schema(c, b.dims if b else dim, b.describe(text) if b else text + note)
            create_loaded(c, self.collection, schema, index)
            kept = c.describe_collection(self.collection).get("description")
            if b is not None and getattr(read(kept), "payload", None) != b.payload:
                c.drop_collection(self.collection)  # the description was cut: no basis to read back
                raise ValueError("the server did not keep the basis")

        refused = False
        try:
            try:
                self._call("create_collection", lambda c: create(c, basis))
            except Exception:
                if basis is None or self._call("has_collection", lambda c: c.has_collection(self.collection)):
                    raise
                # A server that keeps no description this long (Milvus may cap it at 1 KB):
                # every dimension, and no refit that would be refused again.
                basis, refused = None, True
                self._call("create_collection", lambda c: create(c, None, REFUSED))
        except Exception:
            # Another writer may have created it meanwhile (a Lite server serves both).
            if not self._call("has_collection", lambda c: c.has_collection(self.collection)):
                raise
            self._exists = None
            return False
        self._exists, self._half, self._basis, self._refused = True, True, basis, refused
        return True

    @property
    def half(self) -> bool:
        """Whether the vectors are float16 (a collection made before is float32)."""
        if self._half is None:
            from pymilvus import DataType

            from memsearch_fast.store.spans.basis import REFUSED, read

            info = self._call("describe_collection", lambda c: c.describe_collection(self.collection))
            kind = next((f.get("type") for f in info.get("fields", []) if f.get("name") == "embedding"), None)
            self._basis = read(info.get("description"))
            self._refused = str(info.get("description") or "").endswith(REFUSED)
            self._half = kind == DataType.FLOAT16_VECTOR
        return self._half

    @property
    def basis(self) -> Basis | None:
        """The directions the vectors are stored in (None: every dimension)."""
        return self._basis if self.half else None

    @property
    def basis_digest(self) -> str:
        """The basis's short name ("" for every dimension): what a copy of the vectors records."""
        basis = self.basis
        return basis.digest if basis else ""

    def stored(self, vector: Any) -> Any:
        """*vector* (a query or a row's) as the field takes it, in its basis: pymilvus
        reads any other array or list for a float16 field as raw bytes, silently."""
        import numpy as np

        basis = self.basis
        return np.asarray(basis.project(vector) if basis else vector, dtype=np.float16 if self.half else np.float32)

    def read(self, value: Any) -> Any:
        """A stored vector as float32 in the model's space."""
        basis = self.basis
        return basis.lift(_as_array(value)) if basis else _as_array(value)

    def _layout(self) -> tuple[bool, str | None]:
        """What a search's vector must match: the vector type and the basis."""
        basis = self.basis
        return self.half, basis.payload if basis else None

    def refit(self) -> bool:
        """Store the vectors again in the directions fitted on them, once a collection
        of every dimension (its first write too small to fit on, or made before)
        holds enough rows; True when it did. The rows are read whole first, so a
        collection past :data:`memsearch_fast.store.spans.basis.REFIT_MAX` rows is left as it is. A run
        killed meanwhile leaves chunks without their rows and no manifest: the
        next run's span pass gives them their rows again."""
        from memsearch_fast.store.spans import basis as span_basis

        if not self.exists or not self.half or self.basis is not None or self._refused:
            return False
        if not span_basis.FIT_ROWS <= self.count() <= span_basis.REFIT_MAX:
            return False
        rows = [r for page in self._iterate("", [*FIELDS, "embedding"]) for r in page]
        for r in rows:
            r["embedding"] = _as_array(r["embedding"])
        own = [r for r in rows if str(r["span_id"]).endswith(":0")]
        spans = [r for r in rows if not str(r["span_id"]).endswith(":0")]
        basis = span_basis.fit([r["embedding"] for r in spans])
        if basis is None:
            return False
        self.drop()
        if not self._create(basis):
            return False  # another writer made it meanwhile
        self.insert(spans)
        self.insert(own)  # last: a chunk with row 0 has all its spans
        return True

    def drop(self) -> None:
        if self._call("has_collection", lambda c: c.has_collection(self.collection)):
            self._call("drop_collection", lambda c: c.drop_collection(self.collection))
        self._exists, self._half, self._basis = False, None, None

    def flush(self) -> None:
        if self.exists:
            self._call("flush", lambda c: c.flush(self.collection))

    def _call(self, op: str, fn: Any) -> Any:
        return self.store._call(op, fn)

    # -- writes -----------------------------------------------------------------------

    def upsert(self, rows: list[dict[str, Any]]) -> int:
        return self._write("upsert", rows)

    def put(self, span_rows: list[dict[str, Any]], own_rows: list[dict[str, Any]], *, replace: bool = True) -> int:
        """The spans of the chunks of *own_rows* (each chunk's row 0), their old rows
        deleted first unless the caller knows there are none (*replace* False)."""
        if replace:
            self.delete_chunks(str(own["chunk_hash"]) for own in own_rows)
        self.insert(span_rows)
        return self.insert(own_rows) + len(span_rows)  # last: a chunk with row 0 has all its spans

    def put_chunks(self, chunks: Sequence[ChunkSpans], *, replace: bool = True) -> int:
        """:meth:`put` for chunks handed over with their spans."""
        rows = [span_row(c.chunk_hash, c.source, *span) for c in chunks for span in c.spans.rows()]
        own = [span_row(c.chunk_hash, c.source, 0, c.start_line, c.end_line, "", c.vector) for c in chunks]
        return self.put(rows, own, replace=replace)

    def insert(self, rows: list[dict[str, Any]]) -> int:
        """Add rows whose ids are not stored (the caller deleted their chunks' rows
        first): Milvus Lite's upsert looks every id up, so its cost grows with the
        collection, and a span collection holds several rows per chunk."""
        return self._write("insert", rows)

    def _write(self, op: str, rows: list[dict[str, Any]]) -> int:
        # The vector type is read again for every write: a float16 field takes a float32
        # vector without a word (as raw bytes), and another process may have made the
        # collection anew since (reset, then index). A search with the wrong type fails.
        self._half = None
        for i in range(0, len(rows), BATCH):
            part = rows[i : i + BATCH]
            vectors = self.stored([r["embedding"] for r in part])
            part = [{**r, "embedding": v} for r, v in zip(part, vectors, strict=True)]
            self._call(op, lambda c, b=part: getattr(c, op)(collection_name=self.collection, data=b))
        return len(rows)

    def delete_chunks(self, chunk_hashes: Iterable[str]) -> None:
        self._delete("chunk_hash", list(dict.fromkeys(chunk_hashes)))

    def delete_sources(self, sources: Iterable[str]) -> None:
        """Every span of these files (looked up first: no file name reaches a delete)."""
        wanted = set(sources)
        if not wanted or not self.exists:
            return
        ids = [r["span_id"] for page in self._iterate("", ["span_id", "source"]) for r in page if r["source"] in wanted]
        self._delete("span_id", ids)

    def _delete(self, field: str, values: list[str]) -> None:
        if not values or not self.exists:
            return
        for i in range(0, len(values), BATCH):
            expr = in_filter(field, values[i : i + BATCH])
            self._call("delete", lambda c, e=expr: c.delete(collection_name=self.collection, filter=e))

    # -- reads ------------------------------------------------------------------------

    def count(self) -> int:
        """Span rows (0 without the collection)."""
        return self.store._count_in(self.collection) if self.exists else 0

    def counts(self) -> dict[str, int]:
        """Span vectors and the chunks they belong to, as an index report counts
        them: a chunk's own vector (row 0) is not a span."""
        if not self.exists:
            return {"span_vectors": 0, "span_chunks": 0}
        spans = self.store._count_in(self.collection, SPANS_ONLY)
        return {"span_vectors": spans, "span_chunks": self.store._count_in(self.collection, 'text_hash == ""')}

    def scan_rows(self) -> int:
        """The span rows at their cost to Lite's scan, in float32 rows: a float16
        row costs about four."""
        return self.count() * (HALF_SCAN_COST if self.half else 1)

    def chunk_hashes(self) -> set[str]:
        """The chunks that have their span rows (row 0 is written last of a chunk's)."""
        if not self.exists:
            return set()
        return {r["chunk_hash"] for page in self._iterate('span_id like "%:0"', ["chunk_hash"]) for r in page}

    def iter_rows(self) -> Iterator[list[dict[str, Any]]]:
        """Every row (without its vector), a page at a time."""
        if self.exists:
            yield from self._iterate("", FIELDS)

    def iter_vectors(self, sources: list[str] | None = None, *, lifted: bool = True) -> Iterator[list[dict[str, Any]]]:
        """The span rows (index ≥ 1) with their vectors (in the model's space, or as
        stored unless *lifted*), a page at a time; of these *sources* only when
        given (the in-memory copy of a long-lived process)."""
        if not self.exists:
            return
        fields = [*FIELDS, "embedding"]
        wanted = list(dict.fromkeys(sources)) if sources is not None else None
        exprs = (
            [""]
            if wanted is None
            else [in_filter("source", wanted[i : i + BATCH]) for i in range(0, len(wanted), BATCH)]
        )
        for expr in exprs:
            for page in self._iterate(expr, fields):  # row 0 left out here: Lite has no "not like"
                rows = [r for r in page if not str(r["span_id"]).endswith(":0")]
                vectors = [_as_array(r["embedding"]) for r in rows]
                basis = self.basis
                if lifted and basis is not None and vectors:  # a page lifted in one product
                    vectors = list(basis.lift(vectors))
                for r, v in zip(rows, vectors, strict=True):
                    r["embedding"] = v
                yield rows

    def iter_chunk_rows(self) -> Iterator[tuple[str, str]]:
        """(span_id, chunk_hash) of every row."""
        if not self.exists:
            return
        for page in self._iterate("", ["span_id", "chunk_hash"]):
            for r in page:
                yield r["span_id"], r["chunk_hash"]

    def vectors_for(
        self, text_hashes: list[str], sources: Iterable[str] = (), chunks: Iterable[str] = ()
    ) -> dict[str, list[float]]:
        """Stored vectors of span texts, by text hash (the reuse of a moved chunk's
        spans), wherever they are stored: *sources* and *chunks*, where the span file
        looks, are not needed here.

        One row of each text is read with its vector: a line said in every meeting
        ("Agreed.") has a row per chunk, and Milvus Lite answers many rows with
        vectors in a time that grows faster than their count."""
        first: dict[str, str] = {}
        for r in self._query_in("text_hash", text_hashes, ["text_hash", "span_id"]):
            first.setdefault(r["text_hash"], r["span_id"])
        out: dict[str, list[float]] = {}
        for r in self._query_in("span_id", list(first.values()), ["text_hash", "embedding"]):
            out.setdefault(r["text_hash"], self.read(r["embedding"]).tolist())
        return out

    def _query_in(self, field: str, values: list[str], fields: list[str]) -> Iterator[dict[str, Any]]:
        """The rows whose *field* is one of *values*, a batch of values per query."""
        wanted = list(dict.fromkeys(values))
        if not wanted or not self.exists:
            return
        for i in range(0, len(wanted), BATCH):
            expr = in_filter(field, wanted[i : i + BATCH])
            yield from self._call(
                "query", lambda c, e=expr: c.query(collection_name=self.collection, filter=e, output_fields=fields)
            )

    def scans_all(self) -> bool:
        """Always: the engine searches its span rows itself (a server's index scales)."""
        return True

    def search(self, vector: list[float], limit: int, source_prefix: str | None) -> list[dict[str, Any]]:
        """The *limit* chunks whose best span is nearest to *vector*, best first: each
        chunk's best span row, with its ``distance`` (Milvus groups by chunk)."""
        if not self.exists or limit <= 0:
            return []
        return self._nearest(self.store._search_in, vector, limit, source_prefix)  # type: ignore[no-any-return]

    def best_of(self, vector: list[float], chunk_hashes: list[str]) -> dict[str, dict[str, Any]]:
        """The best span row of each of these chunks for *vector* (chunks without
        span rows are absent): the dense score of a chunk only BM25 found."""
        if not chunk_hashes or not self.exists:
            return {}
        hits = self._nearest(self.store._search_among, vector, chunk_hashes)
        return {str(hit["chunk_hash"]): hit for hit in hits}

    def _nearest(self, search: Callable[..., Any], vector: list[float], *between: Any) -> Any:
        """The store's *search* (``_search_in`` or ``_search_among``, *between* its own
        arguments) over this collection's vectors, each chunk's best span. Asked
        again once when it fails and the collection's vector type or basis is not
        the one read before: another process made the collection anew (``reset``,
        then ``index``), and a long-lived process would otherwise fail every
        search until it restarts."""

        def ask() -> Any:
            data = [self.stored(vector)]
            basis = self.basis
            if basis is None:
                return search(self.collection, data, "embedding", "COSINE", *between, FIELDS, group_by="chunk_hash")
            # Spans alone: a chunk's own vector in the basis is a lesser copy of the one its
            # main row holds, which the dense list and the in-memory copy score. And the
            # lifted vectors' cosines, as the copy scores them.
            hits = search(
                self.collection, data, "embedding", "COSINE", *between, FIELDS, where=SPANS_ONLY, group_by="chunk_hash"
            )
            kept = basis.kept(vector)
            return [{**h, "distance": float(h["distance"]) * kept} for h in hits]

        before = self._layout()
        try:
            return ask()
        except Exception:
            self._half = None
            anew = False  # the type unreadable: the first error says more
            with contextlib.suppress(Exception):
                anew = self._layout() != before
            if not anew:
                raise
            return ask()  # a failure now is about the collection as it is, the first chained to it

    def _iterate(self, expr: str, fields: list[str]) -> Iterator[list[dict[str, Any]]]:
        return self.store._iterate(expr, fields, collection=self.collection)


def _as_array(value: Any) -> Any:
    """A stored vector as float32 (pymilvus gives a float16 one as ``[bytes]``)."""
    import numpy as np

    if isinstance(value, list) and value and isinstance(value[0], bytes | bytearray):
        value = value[0]
    if isinstance(value, bytes | bytearray):
        return np.frombuffer(value, dtype=np.float16).astype(np.float32)
    return np.asarray(value, dtype=np.float32)
