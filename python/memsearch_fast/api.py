"""`MemSearch`: the Python API over the index pipeline, search and expand.

Keyword names follow memsearch 0.4.23 so code written against it works here; `workers` sets
the inference and chunking parallelism. The embedding provider, the reranker and the store
are opened on first use, so `expand` and `stats` never load a model.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memsearch_fast.config import schema, tuning
from memsearch_fast.config.settings import Settings
from memsearch_fast.embeddings.query_cache import QueryCache
from memsearch_fast.index import IndexReport, Progress, run_index
from memsearch_fast.parallelism import plan

if TYPE_CHECKING:
    from memsearch_fast.embeddings import EmbeddingProvider
    from memsearch_fast.index.sync import SyncReport
    from memsearch_fast.store import MilvusStore
    from memsearch_fast.store.copy.dense_index import DenseIndex
    from memsearch_fast.store.schema import EmbeddingModel


class MemSearch:
    """Index markdown paths into Milvus and search them."""

    def __init__(
        self,
        paths: Sequence[str | os.PathLike[str]] | None = None,
        *,
        embedding_provider: str = schema.DEFAULT_PROVIDER,
        embedding_model: str | None = None,
        embedding_batch_size: int = 0,
        embedding_base_url: str | None = None,
        embedding_api_key: str | None = None,
        milvus_uri: str = schema.DEFAULT_MILVUS_URI,
        milvus_token: str | None = None,
        collection: str = schema.DEFAULT_COLLECTION,
        description: str = "",
        max_chunk_size: int = schema.DEFAULT_MAX_CHUNK_SIZE,
        overlap_lines: int = schema.DEFAULT_OVERLAP_LINES,
        ignore_files: Sequence[str] | None = None,
        exclude: Sequence[str] | None = None,
        workers: int | None = None,
        reranker_model: str = "",
        embedding_options: Mapping[str, Any] | None = None,
        dense_index: bool = False,
        manifest_uri: str | None = None,
    ) -> None:
        if not 1 <= max_chunk_size <= schema.MAX_CHUNK_SIZE_LIMIT:
            raise ValueError(f"max_chunk_size must be between 1 and {schema.MAX_CHUNK_SIZE_LIMIT}")
        if not 0 <= overlap_lines <= schema.MAX_OVERLAP_LINES:
            raise ValueError(f"overlap_lines must be between 0 and {schema.MAX_OVERLAP_LINES}")
        self.paths = [os.fspath(p) for p in (paths or [])]
        self.max_chunk_size = max_chunk_size
        self.overlap_lines = overlap_lines
        self.ignore_files = list(ignore_files or [])
        self.exclude = list(exclude or [])
        self.workers = workers
        #: Pool sizes for this instance's runs, resolved once from ``workers``.
        self.parallelism = plan(workers)
        self._provider_args: dict[str, Any] = {
            "name": embedding_provider,
            "model": embedding_model or None,
            "batch_size": embedding_batch_size,
            "base_url": embedding_base_url or None,
            "api_key": embedding_api_key or None,
            "parallelism": self.parallelism,
            **dict(embedding_options or {}),  # extra provider options (get_provider's **options)
        }
        from memsearch_fast.lite.fallback import effective_uri

        # memsearch 0.4.23's Lite 3.x database at the default path is left as it is (lite.fallback).
        milvus_uri = effective_uri(milvus_uri)
        self._store_args: dict[str, Any] = {
            "uri": milvus_uri,
            "token": milvus_token or None,
            "collection": collection,
            "description": description,
            "database": manifest_uri if manifest_uri != milvus_uri else None,  # its span file, through its server
        }
        #: Cross-encoder that reorders the fused hits ("" = none); see :mod:`memsearch_fast.recall.rerank`.
        self.reranker_model = reranker_model or ""
        self._reranker: Any = None
        self._provider: EmbeddingProvider | None = None
        self._store: MilvusStore | None = None
        self._query_cache = QueryCache()
        #: Vectors in memory for processes that search many times (:mod:`memsearch_fast.store.copy.dense_index`);
        #: ``manifest_uri``: the local database (its server's URI given) whose manifest and span file count.
        self._dense_wanted = dense_index
        self._manifest_uri = manifest_uri or milvus_uri
        if dense_index:  # the saved copy parsed while the first search opens the collection
            from memsearch_fast.store.copy.dense_index import read_ahead

            read_ahead(self._manifest_uri, collection)
        self._dense: DenseIndex | None = None
        self.on_wait: Callable[[str], None] | None = None  # hears a run wait for another writer

    @classmethod
    def from_config(
        cls,
        cfg: Settings,
        paths: Sequence[str | os.PathLike[str]] = (),
        *,
        description: str = "",
        ignore_files: Sequence[str] = (),
        exclude: Sequence[str] = (),
        workers: int | None = None,
        dense_index: bool = False,
    ) -> MemSearch:
        """The instance ``config.resolve()``'s settings describe, plus *ignore_files* and *exclude*."""
        emb, milvus, chunking, indexing = cfg.embedding, cfg.milvus, cfg.chunking, cfg.indexing
        return cls(
            list(paths),
            embedding_provider=emb.provider,
            embedding_model=emb.model or None,
            embedding_batch_size=emb.batch_size,
            embedding_base_url=emb.base_url or None,
            embedding_api_key=emb.api_key or None,
            milvus_uri=milvus.uri,
            milvus_token=milvus.token or None,
            collection=milvus.collection,
            description=description,
            max_chunk_size=chunking.max_chunk_size,
            overlap_lines=chunking.overlap_lines,
            ignore_files=list(dict.fromkeys([*indexing.ignore_files, *ignore_files])),
            exclude=list(dict.fromkeys([*indexing.exclude, *exclude])),
            workers=workers,
            reranker_model=cfg.reranker.model,
            dense_index=dense_index,
        )

    @property
    def provider(self) -> Any:
        if self._provider is None:
            from memsearch_fast.embeddings import get_provider

            args = dict(self._provider_args)
            self._provider = get_provider(args.pop("name"), **args)
        return self._provider

    @provider.setter
    def provider(self, lent: Any) -> None:  # a provider someone else owns (the service's model), or None
        self._provider = lent

    @property
    def reranker(self) -> Any:
        """The cross-encoder of ``reranker_model`` (None when reranking is off), loaded
        on first use with every inference core (it runs alone, after the query's embedding)."""
        if not self.reranker_model:
            return None
        if self._reranker is None:
            from memsearch_fast.recall import rerank

            pools = self.parallelism
            self._reranker = rerank.load(self.reranker_model, threads=pools.inference_threads)
        return self._reranker

    @property
    def store(self) -> Any:
        """The store for writing: the collection is created with the model's
        dimension (and records the model) when missing, and an existing one
        must match both."""
        if self._store is None or not self._store.exists:
            from memsearch_fast.store import MilvusStore

            if self._store is not None:
                self._store.close()
            self._store = MilvusStore(
                **self._store_args, dimension=self.provider.dimension, model=self._embedding_model()
            )
        self._check_dimension(self._store)
        return self._store

    def _read_store(self) -> MilvusStore:
        """The store opened once, with no model (expand, stats, search): never creates a collection."""
        if self._store is None:
            from memsearch_fast.store import MilvusStore

            self._store = MilvusStore(**self._store_args)
        return self._store

    def _check_dimension(self, store: MilvusStore) -> None:
        """The collection's vectors must come from this instance's model."""
        store.check_embedder(self._embedding_model(), self.provider.dimension, self.provider.model_name)

    def _embedding_model(self) -> EmbeddingModel:
        from memsearch_fast.store.schema import embedding_model

        return embedding_model(str(self._provider_args["name"]), str(self.provider.model_name))

    # -- indexing --------------------------------------------------------------------
    async def index(self, force: bool = False) -> int:
        """Index every configured path; returns the number of chunks written."""
        return (await self.index_with_report(force=force)).indexed

    async def index_with_report(self, *, force: bool = False, progress: Progress | None = None) -> IndexReport:
        from memsearch_fast.index import sync

        report = await self.index_paths(
            self.paths,
            ignore_files=self.ignore_files,
            exclude=self.exclude,
            max_chunk_size=self.max_chunk_size,
            overlap_lines=self.overlap_lines,
            force=force,
            progress=progress,
            manifest=self._manifest(),
        )
        # What `sync` replays; never fails the run.
        await asyncio.to_thread(sync.remember, self)
        return report

    async def index_paths(
        self,
        paths: Sequence[str],
        *,
        ignore_files: Sequence[str],
        exclude: Sequence[str],
        max_chunk_size: int,
        overlap_lines: int,
        manifest: Any,
        force: bool = False,
        progress: Progress | None = None,
    ) -> IndexReport:
        """One index run of *paths* with these scan and chunk settings (``index``,
        and lazy sync replaying a recorded run); the caller holds no lock, *manifest*
        takes the collection's writer lock."""
        from memsearch_fast.index.scan import scan

        found = await asyncio.to_thread(scan, paths, ignore_files=ignore_files, exclude=exclude)
        roots = [str(Path(p).expanduser().resolve()) for p in paths if Path(p).expanduser().is_dir()]
        opening = None
        if self._creates_database(manifest):
            from memsearch_fast.store.opening import OpeningStore

            provider = await asyncio.to_thread(lambda: self.provider)
            store = opening = OpeningStore(lambda: self.store)
        else:
            store, provider = await asyncio.to_thread(lambda: (self.store, self.provider))
        try:
            report = await run_index(
                store,
                provider,
                found.files,
                cleanup_roots=roots,
                unlisted=found.incomplete,
                # Explicit files only: consult just their rows, prune nothing else.
                only_sources=None if roots else [f.path for f in found.files],
                force=force,
                max_chunk_size=max_chunk_size,
                overlap_lines=overlap_lines,
                parallelism=self.parallelism,
                progress=progress,
                manifest=manifest,
                new_store=opening is not None,
            )
        finally:
            if opening is not None:  # whatever opened is then closed by close()
                await asyncio.to_thread(opening.wait)
        report.failed[:0], report.hidden = [(e.path, e.reason) for e in found.errors], found.hidden
        return report

    def _creates_database(self, manifest: Any) -> bool:
        """Whether this run creates its local database: the file is missing while this
        context holds the writer lock, so no other run adds rows before its first
        write (the store may then open beside the first embeddings)."""
        from memsearch_fast.store.compat import is_local_uri

        uri = str(self._store_args["uri"])
        if self._store is not None or manifest is None or not manifest.held() or not is_local_uri(uri):
            return False
        return not os.path.lexists(Path(uri).expanduser())

    async def sync(self) -> SyncReport:
        """Bring the index up to date for the paths earlier index and watch runs of this
        collection recorded (``search --sync``); never raises for a store or file
        problem: the :class:`~memsearch_fast.index.sync.SyncReport` carries it."""
        from memsearch_fast.index import sync

        return await sync.sync(self)

    async def index_file(self, path: str | os.PathLike[str]) -> int:
        """Index one file; other files' rows are left alone."""
        resolved = str(Path(path).expanduser().resolve())
        store, provider = await asyncio.to_thread(lambda: (self.store, self.provider))
        report = await run_index(
            store,
            provider,
            [resolved],
            only_sources=[resolved],
            max_chunk_size=self.max_chunk_size,
            overlap_lines=self.overlap_lines,
            parallelism=self.parallelism,
            manifest=self._manifest(),
        )
        if report.failed:
            raise OSError(f"{report.failed[0][0]}: {report.failed[0][1]}")
        return report.indexed

    def _manifest(self) -> Any:
        """The collection's manifest (beside a local database, else under ~/.memsearch)."""
        from memsearch_fast.store.manifest import Manifest

        return Manifest.for_store(self._store_args["uri"], self._store_args["collection"], self.on_wait)

    # -- reading ---------------------------------------------------------------------
    async def search(
        self,
        query: str,
        top_k: int = tuning.API_TOP_K,
        source_prefix: str | os.PathLike[str] | None = None,
        *,
        explain: bool = False,
    ) -> list[dict[str, Any]]:
        """Hybrid (dense + BM25) search; dicts carry content, source, heading,
        chunk_hash, heading_level, start_line, end_line and score (and, with
        *explain*, ``explain``: each retriever's rank and score, the fused sum).

        With a ``reranker_model``, the best :func:`memsearch_fast.recall.rerank.candidate_count`
        fused hits are reordered by the cross-encoder and cut to *top_k*: ``score``
        is then its relevance probability, ``rerank_score`` its log-odds, and
        ``explain`` also has ``rerank_score`` and ``fused_rank``.
        """
        prefix = str(Path(source_prefix).expanduser().resolve()) if source_prefix is not None else None
        store = await asyncio.to_thread(self._search_store)
        if store is None:
            return []  # nothing indexed yet
        # Loaded before the query is embedded: a bad model fails the search before any work.
        reranker = await asyncio.to_thread(lambda: self.reranker) if self.reranker_model else None
        vector = await self._query_cache.vector(self.provider, query)
        fetch = top_k
        if reranker is not None:
            from memsearch_fast.recall.rerank import candidate_count

            fetch = candidate_count(top_k)
        hits: list[dict[str, Any]] | None = None
        dense = self._dense_index(store) if self._dense_wanted else None
        if dense is not None:
            hits = await asyncio.to_thread(
                dense.search, store, vector, query, top_k=fetch, source_prefix=prefix, explain=explain
            )
        if hits is None:
            hits = list(
                await asyncio.to_thread(store.search, vector, query, top_k=fetch, source_prefix=prefix, explain=explain)
            )
        if reranker is None or not hits:
            return hits
        return list(await asyncio.to_thread(reranker.rerank, query, hits, top_k=top_k))

    def chunks(self, *, source: str | None = None, fields: Sequence[str] = ("content",)) -> list[dict[str, Any]]:
        """Every stored chunk (of one *source* when given) with *fields* and ``source``."""
        store = self._read_store()
        if not store.exists:
            return []
        pages = store.iter_rows_for_sources([source], list(fields)) if source else store.iter_rows(list(fields))
        return [row for page in pages for row in page]

    def loading_copy(self) -> bool:
        """Whether the in-memory copy of the vectors is being read from the engine now."""
        return self._dense is not None and self._dense.loading

    def _dense_index(self, store: MilvusStore) -> DenseIndex | None:
        """The in-memory copy of the vectors; None for a server URI."""
        if self._dense is None:
            from memsearch_fast.store.copy.dense_index import DenseIndex

            self._dense = DenseIndex.for_store(self._store_args, self._manifest_uri, store)
            self._dense_wanted = self._dense is not None
        return self._dense

    def _search_store(self) -> MilvusStore | None:
        """The store for search, or None when nothing is indexed yet."""
        store = self._read_store()
        if not store.exists:
            return None
        self._check_dimension(store)
        return store

    def collection_exists(self) -> bool:
        """Whether the collection exists (before a search loads a model); creates nothing."""
        return bool(self._read_store().exists)

    def stats(self) -> dict[str, Any] | None:
        """Chunk and file counts and the vector dimension; None when the
        collection does not exist. Loads no model."""
        store = self._read_store()
        if not store.exists:
            return None
        counts = {"chunks": store.count(), "files": store.count_sources(), "dimension": store.dimension}
        return {**counts, **store.spans.counts()}  # loads them: a damaged part is reported too

    def drop(self, *, on_wait: Callable[[str], None] | None = None) -> bool:
        """Drop the collection; False when there was none. Waits for a running
        index of it (the writer lock; *on_wait* hears why), which would go on
        writing into what is dropped."""
        from memsearch_fast.index import record
        from memsearch_fast.store.copy import saved as saved_copy

        writer = self._manifest()
        if on_wait is not None:
            writer.on_wait = on_wait
        # A local database that does not exist gets no lock file beside it.
        exists = writer.database is None or os.path.lexists(writer.database)
        with writer.writer() if exists else contextlib.nullcontext(writer):
            store = self._read_store()
            if not store.exists:
                return False
            store.drop()
            record.forget(self.uri, self.collection)  # a new collection starts with no recorded paths
            saved_copy.forget(writer.path)  # and the copy a search service saved
            return True

    def expand(self, chunk_hash: str, *, section: bool = True, lines: int | None = None) -> dict[str, Any] | None:
        """The stored chunk plus its context from the markdown file."""
        from memsearch_fast.recall.expand import expand_chunk
        from memsearch_fast.recall.get import is_indexed

        store = self._read_store()
        row = store.get(chunk_hash)
        if row is None:
            return None
        return expand_chunk(row, section=section, lines=lines, indexed=lambda real: is_indexed(store, real))

    def get(self, path: str | os.PathLike[str], *, start: int = 1, count: int | None = None) -> dict[str, Any] | None:
        """Lines ``start`` .. ``start + count - 1`` (1-based) of an indexed markdown file.

        The real path (symlinks resolved) must be a source stored in the
        collection, else :class:`memsearch_fast.recall.get.GetError`; None when the
        collection does not exist. Loads no model. Keys: path, from, lines,
        total_lines, content.
        """
        from memsearch_fast.recall.get import GetError, is_indexed, read_lines, real_path

        store = self._read_store()
        if not store.exists:
            return None
        source = real_path(path)
        if not is_indexed(store, source):
            raise GetError(f"not an indexed file: {os.fspath(path)} (only files under indexed roots can be read)")
        return read_lines(source, start=start, count=count, shown=os.fspath(path))

    def watch(self, *, debounce_ms: int = schema.DEFAULT_DEBOUNCE_MS, stop: asyncio.Event | None = None) -> Any:
        """Index the paths now and after every burst of file changes.

        An async iterator of :class:`memsearch_fast.index.watch.WatchEvent`
        (one per index run, error, or stop); set ``stop`` (or cancel the
        iteration) to end it after the run in hand is written and flushed.
        """
        from memsearch_fast.index.watch import watch
        from memsearch_fast.store.compat import is_local_uri

        uri = self._store_args["uri"]
        database = str(Path(uri).expanduser().resolve()) if is_local_uri(uri) else None
        return watch(
            self.index_with_report,
            self.paths,
            ignore_files=self.ignore_files,
            debounce_ms=debounce_ms,
            stop=stop,
            database=database,
        )

    @property
    def uri(self) -> str:
        return str(self._store_args["uri"])

    @property
    def collection(self) -> str:
        return str(self._store_args["collection"])

    def close_store(self) -> None:
        """Close the connection to Milvus, keeping the model loaded (the next call reconnects)."""
        if self._store is not None:
            self._store.close()
            self._store = None

    def close(self) -> None:
        self.close_store()
        if self._dense is not None:
            self._dense.close()
            self._dense = None
        if self._provider is not None:
            self._provider.close()
            self._provider = None
        self._reranker = None  # the session stays loaded for the process (rerank.load)
        self._query_cache.clear()

    def __enter__(self) -> MemSearch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
