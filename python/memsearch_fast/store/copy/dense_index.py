"""An in-memory copy of a collection's vectors, for processes that search often.

Milvus Lite 2.5.1 answers a dense search by scanning every vector (about
0.3 µs each: 17 ms of a 28 ms hybrid search at 61,000 chunks, and it builds
no IVF index). A process that stays up — the per-database server answering
``memsearch search``, the MCP server, a library user — can hold the vectors
as one float32 matrix and rank them in a few milliseconds. BM25 still comes
from Milvus, and the two lists are fused by :mod:`.fusion` as
:meth:`MilvusStore.search` fuses them. The display fields of every row are
kept too: Lite finds a row by id with another full scan (about 10 ms at that
size). At 61,000 chunks (a 50 MB corpus) the process grows by about 250 MB:
94 MB of vectors, the text, and heap kept from the load. Only local databases
with :data:`DEFAULT_MIN_ROWS` to :data:`DEFAULT_MAX_ROWS` rows get one; larger
ones get a lean one (:mod:`.lean`: each chunk's own vector, nothing else).

The copy answers only while it can be shown current, Milvus whenever not:

- It is loaded in a background thread; searches go to Milvus meanwhile.
- Every index or watch run of memsearch-fast holds the collection's writer
  lock, removes the manifest before its first write and writes a new one
  after its flush. The copy is kept only when the manifest stayed the same
  while the rows were read, no run held the lock, and the manifest's row
  count is the copy's; it answers while that manifest is there unchanged (a
  run that has begun but not written yet changes nothing). After a run, the
  files whose recorded chunks changed are read again and the rest kept (with
  the same checks).
- Writers that keep no manifest (memsearch 0.4.23 itself) leave a row count
  the manifest does not describe, so no copy is made; rows they write later
  are caught by a BM25 hit the copy lacks, or by the row count, compared
  with the store's every :data:`RECHECK_S` seconds. One that replaces rows
  one for one is not seen until the next run of memsearch-fast.

Cosines are computed in float32 here and in Milvus alike, but not by the
same code: they may differ in the last bits, so chunks of nearly equal
scores may swap places.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from memsearch_fast._os import file_stamp
from memsearch_fast.config import environment
from memsearch_fast.store.copy import lean
from memsearch_fast.store.copy.file_rows import read_manifest
from memsearch_fast.store.copy.lean import Lean
from memsearch_fast.store.copy.rows import FIELDS, Copy, Rows, under
from memsearch_fast.store.copy.spans import held_directions, read_spans
from memsearch_fast.store.search import MAX_TOP_K

if TYPE_CHECKING:
    from memsearch_fast.store.milvus import MilvusStore

logger = logging.getLogger(__name__)

#: Collections with fewer rows (chunks and spans) are searched by Milvus alone
#: (its scan costs < 6 ms there).
DEFAULT_MIN_ROWS = 20_000
ENV_MIN_ROWS = "MEMSEARCH_DENSE_INDEX_MIN_ROWS"
#: Nor are larger ones: the copy costs about 4 KB a chunk (384-d), 0.8 GB at this size.
DEFAULT_MAX_ROWS = 200_000
ENV_MAX_ROWS = "MEMSEARCH_DENSE_INDEX_MAX_ROWS"
#: ``0`` turns the in-memory copy off everywhere.
ENV_SWITCH = "MEMSEARCH_DENSE_INDEX"
#: Seconds between row-count checks against the store (writers without a manifest).
RECHECK_S = 30.0
#: Seconds before a load that a writing run spoilt is tried again.
RETRY_S = 2.0
#: Seconds between saves of a copy that runs keep refreshing (:mod:`memsearch_fast.store.copy.saved`).
SAVE_EVERY_S = 600.0
#: Seconds a first search waits for the copy the last process saved (then Milvus answers).
SAVED_WAIT_S = 15.0


def enabled() -> bool:
    return environment.flag(ENV_SWITCH)


def min_rows() -> int:
    return environment.integer(ENV_MIN_ROWS, DEFAULT_MIN_ROWS)


def max_rows() -> int:
    return environment.integer(ENV_MAX_ROWS, DEFAULT_MAX_ROWS)


def _kind(store: MilvusStore) -> str | None:
    """The copy a collection gets: "full" between :func:`min_rows` and :func:`max_rows`
    chunks (span rows counted toward the minimum at their cost to Milvus's scan: it
    reads them all too), "lean" past it up to :func:`.lean.max_rows` (:mod:`.lean`), else None."""
    chunks = int(store.count())
    if chunks > max_rows():
        return "lean" if chunks <= lean.max_rows() else None
    if chunks >= min_rows():
        return "full"
    spans = getattr(store, "spans", None)
    return "full" if spans is not None and spans.exists and chunks + spans.scan_rows() >= min_rows() else None


def read_ahead(manifest_uri: str, collection: str) -> None:
    """Start reading the copy saved for this collection, if any, while the caller
    opens the collection (:func:`memsearch_fast.store.copy.saved.read_ahead`)."""
    from memsearch_fast.store.compat import is_local_uri

    if enabled() and is_local_uri(manifest_uri):
        from memsearch_fast.store.copy.saved import read_ahead as read
        from memsearch_fast.store.manifest import manifest_path, saved_copy_path

        read(saved_copy_path(manifest_path(manifest_uri, collection)))


class DenseIndex:
    """The vectors of one collection in memory; see the module docstring.

    ``open_store`` returns a fresh store connection (used by the loading
    thread, which closes it); ``manifest`` is the collection's manifest path.
    """

    @classmethod
    def for_store(cls, store_args: dict[str, Any], manifest_uri: str, store: MilvusStore) -> DenseIndex | None:
        """The copy of the collection that ``MilvusStore(**store_args)`` opens (*store*
        is one open on it); None for a server URI, whose writers elsewhere never
        touch this machine's manifest, or a store of no known dimension."""
        from memsearch_fast.store import MilvusStore
        from memsearch_fast.store.compat import is_local_uri
        from memsearch_fast.store.manifest import manifest_path

        if not is_local_uri(manifest_uri) or store.dimension is None:
            return None
        args = dict(store_args)
        return cls(lambda: MilvusStore(**args), manifest_path(manifest_uri, str(args["collection"])), store.dimension)

    def __init__(self, open_store: Callable[[], MilvusStore], manifest: str | os.PathLike[str], dimension: int) -> None:
        self._open_store = open_store
        from memsearch_fast.store.manifest import Manifest

        self._manifest = Path(manifest)
        self._writer = Manifest(self._manifest)  # only probed: its writer lock is never taken here
        self._dim = dimension
        self._copy: Copy | Lean | None = None
        self._pos: Mapping[str, int] = {}
        self._by_source: tuple[Copy | Lean, dict[str, np.ndarray]] | None = None
        self._lock = threading.Lock()
        self._loader: threading.Thread | None = None
        self._retry_after = 0.0
        self._closed = False
        from memsearch_fast.store.manifest import saved_copy_path

        self._saved = saved_copy_path(self._manifest)  # the copy kept on disk for the next process
        self._saved_at: float | None = None  # None: not read yet
        self._unsaved = False  # the copy held differs from the one saved

    # -- state ------------------------------------------------------------------------

    @property
    def loaded(self) -> bool:
        return self._copy is not None

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for a load or refresh in progress; True when a copy is held."""
        loader = self._loader
        if loader is not None:
            loader.join(timeout)
        return self._copy is not None

    def close(self) -> None:
        """Drop the copy; a load under way stops at its next page."""
        with self._lock:
            self._closed = True
            copy = self._copy
            self._install(None)
            loader = self._loader
        if loader is not None and loader is not threading.current_thread():
            loader.join(5.0)
        if copy is not None and self._unsaved:  # refreshed since its last save
            self._save(copy)

    def _install(self, copy: Copy | Lean | None) -> None:
        """Make ``copy`` the one searches use (called with ``_lock`` held)."""
        self._copy = copy
        self._pos = copy.positions() if copy else {}
        self._by_source = None  # made by the first filtered search (a second at 1.2 M chunks)

    def _grouped(self, copy: Copy | Lean) -> dict[str, np.ndarray]:
        """The positions of each source's chunks in *copy*."""
        held = self._by_source
        if held is not None and held[0] is copy:
            return held[1]
        by: dict[str, list[int]] = {}
        for i, src in enumerate(copy.sources):
            by.setdefault(src, []).append(i)
        out = {s: np.asarray(ix, dtype=np.int64) for s, ix in by.items()}
        with self._lock:
            if self._copy is copy:
                self._by_source = (copy, out)
        return out

    @property
    def loading(self) -> bool:
        """Whether rows are being read now (a load or a refresh)."""
        loader = self._loader
        return loader is not None and loader.is_alive()

    def _start(self, *, full: bool) -> None:
        """Load (or refresh) in the background unless one is under way or retried too soon."""
        with self._lock:
            if self._closed or (self._loader is not None and self._loader.is_alive()):
                return
            if time.monotonic() < self._retry_after:
                return
            self._loader = threading.Thread(target=self._load, args=(full,), name="dense-index", daemon=True)
            self._loader.start()

    def _begin(self, store: MilvusStore, now: float) -> bool:
        """Start a load unless one runs or was tried too recently; True when the copy
        the last process saved was there and is held now: that takes seconds (6 s at
        50 MB of journals), while the engine's first search of a large span
        collection loads it first (34 s there), so the first search waits for it."""
        if now < self._retry_after or self.loading:
            return False
        if _kind(store) is None:  # the search's own connection: no thread
            self._later(RECHECK_S)
            return False
        saved = self._saved_at is None and self._saved.is_file() and not self._saved.is_symlink()
        self._start(full=True)
        return saved and self.wait(SAVED_WAIT_S)

    def _stale(self, copy: Copy | Lean) -> None:
        """Rows changed behind *copy*: drop it and load it again, unless a run began
        writing since the search checked (its refresh reads only its files)."""
        if file_stamp(self._manifest) != copy.token:
            return
        with self._lock:
            if self._copy is copy:
                self._install(None)
        self._start(full=True)

    def _later(self, seconds: float) -> None:
        self._retry_after = time.monotonic() + seconds

    def _quiet(self) -> tuple[int, int, int] | None:
        """The manifest's identity when it exists and no run is writing, else None."""
        token = file_stamp(self._manifest)  # a new file after every write run
        return token if token is not None and not self._writer.writer_running() else None

    # -- loading ----------------------------------------------------------------------

    def _load(self, full: bool) -> None:
        try:
            store = self._open_store()
        except Exception as exc:  # noqa: BLE001 - Milvus keeps answering
            logger.info("dense index: store not opened (%s)", exc)
            self._later(RECHECK_S)
            return
        try:
            copy = self._copy
            if copy is None and self._saved_at is None:
                from memsearch_fast.store.copy import saved as saved_copy

                if self._quiet() is None:  # a run writes: the engine is read, a read ahead let go
                    saved_copy.drop_ahead(self._saved)
                else:
                    self._saved_at = time.monotonic()
                    copy = saved_copy.load(self._saved, self._dim)  # the last process's, refreshed as a held one
                    full = copy is None
            if full or copy is None:
                new = self._load_all(store)
            else:
                new = self._lean(store, copy) if isinstance(copy, Lean) else self._refresh(store, copy)
            with self._lock:
                if new is not None and not self._closed:
                    self._install(new)
            # A refresh a run's writes overtook keeps its copy (Milvus answers) and is tried
            # again: a copy dropped is read again whole (500 s at 1 GB of journals).
            if new is not None and (copy is None or new.entries != copy.entries):
                self._unsaved = True
                if copy is None or time.monotonic() - (self._saved_at or 0.0) >= SAVE_EVERY_S:
                    self._save(new)  # after a full load always; after refreshes now and then, and at close
            from memsearch_fast._os import give_back_memory

            give_back_memory()  # the pages the rows came in, and a replaced copy
        except Exception as exc:  # noqa: BLE001 - Milvus keeps answering
            logger.info("dense index: load failed (%s)", exc)
            self._later(RECHECK_S)
            with self._lock:
                self._install(None)
        finally:
            with contextlib.suppress(Exception):
                store.close()

    def _save(self, copy: Copy | Lean) -> None:
        from memsearch_fast.store.copy import saved as saved_copy

        saved_copy.save(self._saved, copy)
        self._saved_at, self._unsaved = time.monotonic(), False

    def _described(self, token: tuple[int, int, int] | None, rows: Copy | Rows) -> dict[str, str] | None:
        """The manifest's entries when it still is ``token``, no run is writing,
        and its row count is that of ``rows``; None when the rows cannot be trusted."""
        if token is None or self._quiet() != token:
            return None
        manifest = read_manifest(self._manifest)
        if manifest is None or manifest.rows != len(rows.ids) or self._quiet() != token:
            return None
        return manifest.entries

    def _load_all(self, store: MilvusStore) -> Copy | Lean | None:
        """Every row, kept only when no run wrote meanwhile and the manifest describes them."""
        token = self._quiet()
        kind = _kind(store) if token is not None and store.exists else None
        if kind is None:
            self._later(RECHECK_S if token is not None else RETRY_S)
            return None
        if kind == "lean":
            return self._lean(store, None)
        rows = Rows(self._dim)
        for page in store.iter_rows(FIELDS):
            if self._closed:
                return None
            rows.add(page)
        rows = rows.dedupe()
        spans = read_spans(store, self._dim, rows.ids, None, stop=lambda: self._closed)
        if self._closed:
            return None
        entries = self._described(token, rows)  # after the spans: a run writing meanwhile spoils both
        if entries is None:
            self._later(RETRY_S)  # a run wrote while the rows were read, or a writer keeps no manifest
            return None
        copy = rows.copy(token, entries)
        return copy.hold(spans.build(copy.matrix) if spans is not None else None)

    def _lean(self, store: MilvusStore, old: Lean | None) -> Lean | Copy | None:
        """The lean copy (:mod:`.lean`), *old*'s unchanged files kept."""
        if old is not None and _kind(store) != "lean":
            return self._load_all(store)
        new = lean.load(store, self._dim, self._manifest, self._quiet, old, stop=lambda: self._closed)
        if new is None:
            self._later(RETRY_S)  # a run wrote while the rows were read, or a writer keeps no manifest
        return new

    def _refresh(self, store: MilvusStore, copy: Copy) -> Copy | Lean | None:
        """Re-read only the sources whose recorded chunks changed since ``copy``."""
        token = self._quiet()
        manifest = read_manifest(self._manifest) if token is not None else None
        if manifest is None or copy.entries is None:
            return None
        entries = manifest.entries
        changed = {s for s in entries.keys() | copy.entries.keys() if entries.get(s) != copy.entries.get(s)}
        spans_store = getattr(store, "spans", None)
        if spans_store is not None and not spans_store.present():
            spans_store = None
        stored_in = spans_store.basis_digest if spans_store is not None else None
        if copy.spans is not None and stored_in is not None and copy.spans.basis != stored_in:
            return self._load_all(store)  # stored again in another basis: every span vector changed
        if copy.spans is not None and copy.spans.own is not None and copy.spans.directions is None:
            basis = spans_store.basis if spans_store is not None else None  # a saved copy: the store's
            if basis is None or basis.dims != copy.spans.width:
                return self._load_all(store)
            copy.spans.directions = held_directions(basis.rows)
        if not changed and copy.spans is None and stored_in is not None and hasattr(spans_store, "code_pages"):
            # A saved copy leaves out what a span file holds: its spans read again, the rows kept.
            spans = read_spans(store, self._dim, copy.ids, None, stop=lambda: self._closed)
            described = self._described(token, copy)
            if described is None or len(copy.ids) > max_rows():
                return self._load_all(store)
            out = Copy(copy.ids, copy.sources, copy.fields, copy.matrix, token, described, time.monotonic(), None)
            return out.hold(spans.build(out.matrix) if spans is not None else None)
        if not changed and (copy.spans is not None) == (stored_in is not None):
            # Nothing to read (a saved copy a new process starts from): the same arrays, not rebuilt.
            described = self._described(token, copy)
            if described is None or len(copy.ids) > max_rows():
                return self._load_all(store)
            return Copy(
                copy.ids, copy.sources, copy.fields, copy.matrix, token, described, time.monotonic(), copy.spans
            )
        keep = [i for i, s in enumerate(copy.sources) if s not in changed]
        new = Rows.kept(copy, copy.matrix, keep, self._dim)
        for page in store.iter_rows_for_sources(sorted(changed & entries.keys()), FIELDS):
            if self._closed:
                return None
            new.add(page)
        new = new.dedupe()
        spans = read_spans(
            store,
            self._dim,
            new.ids,
            sorted(changed & entries.keys()),
            copy.ids,
            copy.spans,
            keep,
            stop=lambda: self._closed,
        )
        if self._closed:
            return None
        described = self._described(token, new)
        if described is None or len(new.ids) > max_rows():
            return self._load_all(store)
        out = new.copy(token, described)
        return out.hold(spans.build(out.matrix) if spans is not None else None)

    # -- searching --------------------------------------------------------------------

    def search(
        self,
        store: MilvusStore,
        vector: Any,
        query_text: str,
        *,
        top_k: int,
        source_prefix: str | None,
        explain: bool = False,
    ) -> list[dict[str, Any]] | None:
        """The hybrid hits :meth:`MilvusStore.search` would give, or None when
        the copy cannot answer (not loaded, maybe stale, an error): then ask Milvus."""
        if self._closed or not enabled() or not 0 < top_k <= MAX_TOP_K:
            return None
        from memsearch_fast.errors import StoreError

        try:
            return self._search(store, vector, query_text, top_k, source_prefix, explain)
        except StoreError as exc:  # Milvus is asked again and reports it
            logger.info("dense index: search left to Milvus (%s)", exc)
            return None

    def _search(
        self, store: MilvusStore, vector: Any, query_text: str, top_k: int, source_prefix: str | None, explain: bool
    ) -> list[dict[str, Any]] | None:
        with self._lock:
            copy, pos = self._copy, self._pos
        now = time.monotonic()
        if copy is None:
            if not self._begin(store, now):
                return None
            with self._lock:
                copy, pos = self._copy, self._pos
            if copy is None:
                return None
        # The manifest as the copy saw it: no run has written since (a run removes
        # it before its first write; one that has only begun is planning).
        if file_stamp(self._manifest) != copy.token:
            if self._quiet() is not None:
                self._start(full=False)  # a run finished: read the files it changed
            return None  # or a run is writing now: Milvus answers
        if now - copy.checked > RECHECK_S:
            if store.count() != len(copy.ids):
                self._stale(copy)
                return None
            copy.checked = now
        as_list = list(map(float, vector))
        among = under(self._grouped(copy), source_prefix) if source_prefix else None
        if isinstance(copy, Lean):
            hits = lean.search(
                store, copy, pos, among, as_list, query_text, top_k=top_k, source_prefix=source_prefix, explain=explain
            )
            if hits is None:
                self._stale(copy)  # a row the copy lacks
            return hits
        from memsearch_fast.store import fusion
        from memsearch_fast.store.search import together
        from memsearch_fast.store.spans import merge

        deep = fusion.depth(top_k, MAX_TOP_K)
        held = copy.spans
        dense, span_hits, sparse = together(  # the engine's BM25 list while the others are ranked here
            lambda: [] if held is not None else copy.dense(vector, deep, among),
            lambda: (
                held.search(copy.ids, copy.sources, as_list, deep, among)  # chunk vectors and spans at once
                if held is not None
                else store.spans.search(as_list, deep, source_prefix)
            ),
            lambda: store.sparse_search(query_text, top_k=deep, source_prefix=source_prefix),
        )
        ranked, matched = merge.merge_dense(dense, span_hits, deep)
        if any(h["chunk_hash"] not in pos for h in sparse):
            self._stale(copy)  # a row the copy lacks
            return None
        return store.finish_hybrid(
            ranked,
            matched,
            sparse,
            {h["chunk_hash"]: h for h in sparse},
            query_text,
            top_k=top_k,
            deep=deep,
            explain=explain,
            own_of=functools.partial(copy.own_scores, pos, vector),
            spans_of=functools.partial(copy.best_spans, store.spans, pos, as_list),
            rows_of=functools.partial(copy.rows_at, pos),
            fill_first=False,  # the copy's lists cost nothing: BM25 is asked only where it could matter
        )
