"""Embed stage: cross-file batches of chunk texts through the provider.

Chunks from many files are packed into large batches so the provider can sort
them by length (little padding) and keep every inference worker busy; a
bounded number of batches is in flight at once, which is the backpressure
that keeps memory flat.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from memsearch_fast._core import Chunk, clean_content_for_embedding


@dataclass(slots=True)
class Pending:
    """A chunk on its way to the store."""

    chunk_id: str
    chunk: Chunk
    vector: list[float] | None = None


def embedding_text(chunk: Chunk) -> str:
    """What the model sees: the chunk without HTML-comment anchors."""
    return clean_content_for_embedding(chunk.content) or chunk.content


class EmbedStage:
    """Packs pending chunks into batches and embeds up to `in_flight` at once."""

    def __init__(
        self,
        embed: Callable[[list[str]], Awaitable[list[list[float]]]],
        deliver: Callable[[list[Pending]], Awaitable[None]],
        *,
        batch_size: int = 512,
        in_flight: int = 2,
    ) -> None:
        self._embed = embed
        self._deliver = deliver
        self.batch_size = max(1, batch_size)
        self._buffer: list[Pending] = []
        self._slots = asyncio.Semaphore(max(1, in_flight))
        self._tasks: set[asyncio.Task[None]] = set()
        self._error: BaseException | None = None
        self.embedded = 0

    def _raise_failure(self) -> None:
        if self._error is not None:
            raise self._error

    async def add(self, items: list[Pending]) -> None:
        """Queue items; waits when `in_flight` batches are already running."""
        self._raise_failure()
        self._buffer.extend(items)
        while len(self._buffer) >= self.batch_size:
            batch, self._buffer = self._buffer[: self.batch_size], self._buffer[self.batch_size :]
            await self._launch(batch)

    async def _launch(self, batch: list[Pending]) -> None:
        await self._slots.acquire()
        task = asyncio.create_task(self._run(batch))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run(self, batch: list[Pending]) -> None:
        try:
            vectors = await self._embed([embedding_text(p.chunk) for p in batch])
            if len(vectors) != len(batch):
                raise RuntimeError(f"embedding provider returned {len(vectors)} vectors for {len(batch)} texts")
            for p, v in zip(batch, vectors, strict=True):
                p.vector = v
            self.embedded += len(batch)
            await self._deliver(batch)
        except BaseException as exc:  # noqa: BLE001 - kept and re-raised by the next add() or finish()
            if self._error is None:
                self._error = exc
        finally:
            self._slots.release()

    async def finish(self) -> None:
        """Embed what is left and wait for every batch."""
        if self._buffer:
            batch, self._buffer = self._buffer, []
            await self._launch(batch)
        if self._tasks:
            await asyncio.gather(*list(self._tasks))
        self._raise_failure()

    async def cancel(self) -> None:
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*list(self._tasks), return_exceptions=True)
