"""The collection's schema: BM25 analyzers, create or adopt, the embedding model.

The schema matches memsearch 0.4.23 field for field, so an index built by
either tool is searchable by the other; the embedding model that built a
collection is recorded in its ``embedding`` field's description
(:class:`EmbeddingModel`) and checked by :meth:`StoreSchema.check_model`.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, NamedTuple

from memsearch_fast.errors import DimensionMismatchError, ModelMismatchError, StoreError
from memsearch_fast.store.client import StoreClient
from memsearch_fast.store.compat import create_loaded
from memsearch_fast.store.rows import MAX_CONTENT_BYTES, MAX_HEADING_BYTES, MAX_SOURCE_BYTES

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


def embedding_model(provider: str, model_name: str) -> EmbeddingModel:
    """Provider and model name as a collection records them; a model directory by its
    absolute path, so ``./m`` and ``/abs/m`` are one model."""
    from pathlib import Path

    if provider in ("onnx", "local") and Path(model_name).expanduser().is_dir():
        model_name = str(Path(model_name).expanduser().resolve())
    return EmbeddingModel(provider, model_name)


class StoreSchema(StoreClient):
    """The collection half of :class:`~memsearch_fast.store.milvus.MilvusStore`:
    open, create or adopt it, and check the model its vectors come from."""

    dimension: int | None
    description: str
    model: EmbeddingModel | None
    recorded_model: EmbeddingModel | None
    _model_checked: tuple[EmbeddingModel, str] | None
    analyzer: dict[str, Any] | None
    content_max_bytes: int
    _write_lock: threading.RLock

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
            self._call("create_collection", lambda c: create_loaded(c, self.collection, schema, index_params))

    @property
    def exists(self) -> bool:
        """Whether the collection exists (False for a read-only open of an empty location)."""
        return self._exists

    def check_embedder(self, model: EmbeddingModel, dimension: int, id_model: str) -> None:
        """The collection's vectors must come from this model: same *dimension*, and
        the same model (:meth:`check_model`)."""
        if self.dimension != dimension:
            raise DimensionMismatchError(
                f"collection {self.collection!r} has dimension {self.dimension} but the embedding model "
                f"produces {dimension}; run 'memsearch reset' or use the model it was built with"
            )
        self.check_model(model, id_model)

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
        return self._count_in(self.collection) if self._exists else 0
