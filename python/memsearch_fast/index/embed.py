"""Embed stage: cross-file batches of chunk texts through the provider.

Chunks from many files are gathered into a sort window, ordered by length and
cut into batches, so each batch holds texts of similar length and the
provider pads little; a batch stays small enough that an interrupted run
loses little work. A bounded number of batches is in flight at once, which
is the backpressure that keeps memory flat. A chunk whose text is identical
to one queued, in flight or embedded earlier in this run (and not yet
written) reuses that vector instead of being embedded again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

from memsearch_fast._core import Chunk, clean_content_for_embedding

#: Chunks the embed stage sorts by length before cutting them into batches:
#: chunks of similar length share a batch, so the provider pads little.
EMBED_SORT_WINDOW = 2048


@dataclass(slots=True)
class Pending:
    """A chunk on its way to the store."""

    chunk_id: str
    chunk: Chunk
    vector: list[float] | None = None


def embedding_text(chunk: Chunk) -> str:
    """What the model sees: the chunk without HTML-comment anchors."""
    return clean_content_for_embedding(chunk.content) or chunk.content


def _first(item: tuple[int, str, Pending]) -> int:
    return item[0]


class EmbedStage:
    """Sorts pending chunks by length in windows of ``window``, embeds them
    ``batch_size`` at a time with up to ``in_flight`` batches running.

    With ``hold``, the vectors delivered stay reusable by later identical
    texts until :meth:`release` says their rows are written (the upsert
    buffer holds the same lists, so this costs no memory of its own).
    """

    def __init__(
        self,
        embed: Callable[[list[str]], Awaitable[list[list[float]]]],
        deliver: Callable[[list[Pending]], Awaitable[None]],
        *,
        batch_size: int = 512,
        window: int = EMBED_SORT_WINDOW,
        in_flight: int = 2,
        hold: bool = False,
    ) -> None:
        self._embed = embed
        self._deliver = deliver
        self.batch_size = max(1, batch_size)
        # A whole number of batches: no short batch in the middle of a run.
        self.window = -(-max(window, self.batch_size) // self.batch_size) * self.batch_size
        self._buffer: list[Pending] = []
        self._slots = asyncio.Semaphore(max(1, in_flight))
        self._tasks: set[asyncio.Task[None]] = set()
        self._error: BaseException | None = None
        # content hash -> later chunks with that text, for each chunk queued or in flight
        self._waiting: dict[str, list[Pending]] = {}
        self._hold = hold
        self._delivered: dict[str, list[float]] = {}  # content hash -> vector whose row is not written yet
        self.embedded = 0
        self.shared = 0  # chunks that took the vector of an identical text embedded in this run

    def _raise_failure(self) -> None:
        if self._error is not None:
            raise self._error

    async def add(self, items: list[Pending]) -> None:
        """Queue items; waits when `in_flight` batches are already running."""
        self._raise_failure()
        ready: list[Pending] = []
        for p in items:
            h = p.chunk.content_hash
            vector = self._delivered.get(h)
            if vector is not None:
                p.vector = vector
                ready.append(p)
                continue
            later = self._waiting.get(h)
            if later is not None:
                later.append(p)
                continue
            self._waiting[h] = []
            self._buffer.append(p)
        if ready:
            self.shared += len(ready)
            await self._deliver(ready)
        while len(self._buffer) >= self.window:
            window, self._buffer = self._buffer[: self.window], self._buffer[self.window :]
            await self._launch_sorted(window)

    def release(self, content_hashes: Iterable[str]) -> None:
        """These texts' rows are written: later copies find them in the store."""
        for h in content_hashes:
            self._delivered.pop(h, None)

    async def _launch_sorted(self, items: list[Pending]) -> None:
        # UTF-8 length tracks token count better than characters (a CJK
        # character is a token, an English word of five letters about one).
        keyed = sorted(((len(t.encode()), t, p) for p in items for t in (embedding_text(p.chunk),)), key=_first)
        for i in range(0, len(keyed), self.batch_size):
            part = keyed[i : i + self.batch_size]
            await self._launch([p for _, _, p in part], [t for _, t, _ in part])

    async def _launch(self, batch: list[Pending], texts: list[str]) -> None:
        await self._slots.acquire()
        task = asyncio.create_task(self._run(batch, texts))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run(self, batch: list[Pending], texts: list[str]) -> None:
        try:
            vectors = await self._embed(texts)
            if len(vectors) != len(batch):
                raise RuntimeError(f"embedding provider returned {len(vectors)} vectors for {len(batch)} texts")
            out = list(batch)
            for p, v in zip(batch, vectors, strict=True):
                p.vector = v
                h = p.chunk.content_hash
                for later in self._waiting.pop(h, ()):
                    later.vector = v
                    out.append(later)
                    self.shared += 1
                if self._hold:
                    self._delivered[h] = v
            self.embedded += len(batch)
            await self._deliver(out)
        except BaseException as exc:  # noqa: BLE001 - kept and re-raised by the next add() or finish()
            if self._error is None:
                self._error = exc
        finally:
            self._slots.release()

    async def finish(self) -> None:
        """Embed what is left and wait for every batch."""
        if self._buffer:
            batch, self._buffer = self._buffer, []
            await self._launch_sorted(batch)
        if self._tasks:
            await asyncio.gather(*list(self._tasks))
        self._raise_failure()

    async def cancel(self) -> None:
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*list(self._tasks), return_exceptions=True)
