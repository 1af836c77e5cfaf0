"""Upsert stage: rows to Milvus in large batches, stale rows out, then flush.

pymilvus calls block, so they run in worker threads while the event loop
keeps embedding the next batches. A few upserts stay in flight at once
(Milvus Lite serves overlapping calls about twice as fast as serial ones);
deletes and the flush wait until every write before them has landed, so
the order the pipeline asks for is the order Milvus sees.

Rows whose ids the run read as absent are inserted, not upserted, when the
run holds the collection's writer lock: Milvus Lite's upsert cost grows with
the collection (docs/store.md), which made a 1 GB index quadratic.

A chunk the embed stage embedded as spans brings its span rows: they are
written in the same call, just after the batch's chunk rows, and each
chunk's row 0 after all the spans (the mark that its rows are complete), so
a killed run leaves rows that the next run's span pass completes.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from memsearch_fast.index.embed import Pending
from memsearch_fast.index.protocol import IndexStore
from memsearch_fast.store.rows import MAX_CONTENT_BYTES, MAX_HEADING_BYTES
from memsearch_fast.store.spans.columns import ChunkSpans, span_vectors

if TYPE_CHECKING:
    from memsearch_fast.store.spans.collection import SpanStore
    from memsearch_fast.store.spans.file import SpanFile

#: Upsert calls in flight; each holds one batch of rows in memory.
IN_FLIGHT = 4
#: Rows written without their spans that are kept for the span pass, which would
#: otherwise read them back from the store (an edit's few rows: one call to the
#: engine less, 15-360 ms at 1 GB); a run that writes more keeps none.
KEEP_UNSPANNED = 512


def row(p: Pending) -> dict[str, Any]:
    """The reference schema's row for one embedded chunk."""
    c = p.chunk
    return {
        "chunk_hash": p.chunk_id,
        "embedding": p.vector,
        "content": c.content,
        "source": c.source,
        "heading": c.heading,
        "heading_level": c.heading_level,
        "start_line": c.start_line,
        "end_line": c.end_line,
    }


def chunk_spans(p: Pending) -> ChunkSpans | None:
    """A chunk embedded as spans, as the span stores take it; None without spans."""
    if not p.spans:
        return None
    c = p.chunk
    return ChunkSpans(p.chunk_id, c.source, c.start_line, c.end_line, p.vector, p.spans)


class UpsertStage:
    """Buffers rows and writes them `batch_size` at a time, `in_flight` calls at once.

    ``before_write`` runs once, before the first call that changes the store
    (the manifest is withdrawn there); ``on_written`` receives the (content
    hash, chunk id) pairs of every batch Milvus acknowledged. With ``fresh``
    every row added is one the caller knows is not stored (read as absent,
    no other writer): it is inserted, and a batch whose insert fails is
    upserted instead, which also replaces whatever part of it landed.
    With ``spans`` the store's companion collection (``store.spans``, created
    before the first span write) receives the span rows of chunks embedded as
    spans; ``created_spans`` says whether this stage created it.
    """

    def __init__(
        self,
        store: IndexStore,
        *,
        batch_size: int = 1000,
        in_flight: int = IN_FLIGHT,
        before_write: Callable[[], None] | None = None,
        on_written: Callable[[list[tuple[str, str]]], None] | None = None,
        fresh: bool = False,
        spans: bool = False,
    ) -> None:
        self.store = store
        self.spans = spans
        self.created_spans = False
        self._spans_ready = threading.Lock()
        self._span_store: SpanStore | SpanFile | None = None
        self.fresh = fresh and callable(getattr(store, "insert", None))
        self.batch_size = max(1, batch_size)
        self._rows: list[dict[str, Any]] = []
        self._keys: list[tuple[str, str]] = []  # (content hash, chunk id) of each buffered row
        self._extra: list[ChunkSpans | None] = []  # the spans of each
        self._before_write = before_write
        self._on_written = on_written
        self.wrote = False  # a call that changes the store was made
        self._slots = asyncio.Semaphore(max(1, in_flight))
        self._writes: set[asyncio.Task[None]] = set()
        self._error: Exception | None = None
        self.upserted = 0
        self.deleted = 0
        self.span_chunks = 0  # chunks whose span rows were written here
        #: Rows written without spans, by id, as the store holds them (None past
        #: :data:`KEEP_UNSPANNED`): what the span pass reads instead of the store.
        self.unspanned: dict[str, dict[str, Any]] | None = {}

    def _writing(self) -> None:
        self.wrote = True
        hook, self._before_write = self._before_write, None
        if hook is not None:
            hook()

    async def add(self, items: Iterable[Pending]) -> None:
        for p in items:
            self._rows.append(row(p))
            self._keys.append((p.chunk.content_hash, p.chunk_id))
            self._extra.append(chunk_spans(p) if self.spans else None)
        while len(self._rows) >= self.batch_size:
            await self._send()

    async def _send(self) -> None:
        """Start one write; waits while `in_flight` writes are running."""
        self._raise_failure()
        await self._slots.acquire()
        if not self._rows:  # another caller sent them while this one waited
            self._slots.release()
            return
        n = self.batch_size
        batch, self._rows = self._rows[:n], self._rows[n:]
        keys, self._keys = self._keys[:n], self._keys[n:]
        extra, self._extra = self._extra[:n], self._extra[n:]
        self._writing()
        task = asyncio.ensure_future(self._write(batch, keys, extra))
        self._writes.add(task)
        task.add_done_callback(self._writes.discard)

    async def _write(
        self,
        batch: list[dict[str, Any]],
        keys: list[tuple[str, str]],
        extra: list[ChunkSpans | None],
    ) -> None:
        try:
            written = await asyncio.to_thread(self._store_rows, batch)
            spanned = [e for e in extra if e is not None]
            if spanned:
                await asyncio.to_thread(self._store_spans, spanned)
                self.span_chunks += len(spanned)
        except Exception as exc:  # noqa: BLE001 - re-raised by the next add/finish
            if self._error is None:
                self._error = exc
        else:
            self.upserted += written  # after the await: overlapping writes add up
            self._keep(batch, extra)
            if self._on_written is not None:
                self._on_written(keys)
        finally:
            self._slots.release()

    def _keep(self, batch: list[dict[str, Any]], extra: list[ChunkSpans | None]) -> None:
        kept = self.unspanned
        if kept is None:
            return
        for r, e in zip(batch, extra, strict=True):
            if e is None:
                # Stored as given: neither split (long content) nor cut (long heading).
                if len(r["content"].encode()) > MAX_CONTENT_BYTES or len(r["heading"].encode()) > MAX_HEADING_BYTES:
                    continue
                kept[r["chunk_hash"]] = r
        if len(kept) > KEEP_UNSPANNED:
            self.unspanned = None

    def _store_rows(self, batch: list[dict[str, Any]]) -> int:
        if self.fresh:
            try:
                return int(self.store.insert(batch))
            except Exception:  # noqa: BLE001 - it may have landed in part: the upsert below settles it
                pass
        return int(self.store.upsert(batch))

    def _store_spans(self, extra: list[ChunkSpans]) -> None:
        with self._spans_ready:
            if self._span_store is None:
                store: SpanStore | SpanFile = self.store.spans  # type: ignore[attr-defined]
                sample = span_vectors(extra)  # its directions' fit
                self.created_spans = bool(store.create(sample))
                self._span_store = store
        # Rows a killed run left of these chunks go first (none in a fresh database).
        self._span_store.put_chunks(extra, replace=not self.fresh)

    def _raise_failure(self) -> None:
        if self._error is not None:
            raise self._error

    async def _settle(self) -> None:
        # asyncio.wait, unlike gather, does not cancel the writes when the
        # waiter is cancelled (Ctrl-C): they stay tracked, and the flush in
        # the pipeline's cleanup still waits for their threads to finish.
        while self._writes:
            await asyncio.wait(set(self._writes))

    async def drain(self) -> None:
        """Wait for every write in flight; re-raise the first one that failed."""
        await self._settle()
        self._raise_failure()

    async def finish(self) -> None:
        """Write what is buffered and wait for it."""
        while self._rows and self._error is None:
            await self._send()
        await self.drain()

    async def delete_ids(self, ids: list[str]) -> None:
        if ids:
            await self.drain()
            self._writing()
            n = await asyncio.to_thread(self.store.delete_ids, ids)
            self.deleted += n

    async def delete_sources(self, sources: list[str]) -> None:
        if sources:
            await self.drain()
            self._writing()
            n = await asyncio.to_thread(self.store.delete_sources, sources)
            self.deleted += n

    async def flush(self) -> None:
        """Make everything written durable and visible to other processes
        (nothing to do when the run wrote nothing).

        Runs after a failed write too: what did land is kept.
        """
        await self._settle()
        if self.wrote:
            await asyncio.to_thread(self.store.flush)
