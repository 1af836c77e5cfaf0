"""Upsert stage: rows to Milvus in large batches, stale rows out, then flush.

pymilvus calls block, so they run in a worker thread, one at a time, while
the event loop keeps embedding the next batches.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

from memsearch_fast.embed import Pending


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


class UpsertStage:
    """Buffers rows and writes them `batch_size` at a time, serially."""

    def __init__(self, store: Any, *, batch_size: int = 1000) -> None:
        self.store = store
        self.batch_size = max(1, batch_size)
        self._rows: list[dict[str, Any]] = []
        self._lock = asyncio.Lock()
        self.upserted = 0
        self.deleted = 0

    async def add(self, items: Iterable[Pending]) -> None:
        self._rows.extend(row(p) for p in items)
        if len(self._rows) >= self.batch_size:
            await self._write(final=False)

    async def _write(self, *, final: bool) -> None:
        async with self._lock:
            while len(self._rows) >= self.batch_size or (final and self._rows):
                batch, self._rows = self._rows[: self.batch_size], self._rows[self.batch_size :]
                self.upserted += await asyncio.to_thread(self.store.upsert, batch)

    async def finish(self) -> None:
        await self._write(final=True)

    async def delete_ids(self, ids: list[str]) -> None:
        if ids:
            async with self._lock:
                self.deleted += await asyncio.to_thread(self.store.delete_ids, ids)

    async def delete_sources(self, sources: list[str]) -> None:
        if sources:
            async with self._lock:
                self.deleted += await asyncio.to_thread(self.store.delete_sources, sources)

    async def flush(self) -> None:
        """Make everything written durable and visible to other processes."""
        async with self._lock:
            await asyncio.to_thread(self.store.flush)
