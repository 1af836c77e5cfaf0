"""Embed stage: cross-file batches of chunk texts through the provider.

Chunks from many files are gathered into a sort window, ordered by length and
cut into batches, so each batch holds texts of similar length and the
provider pads little; a batch stays small enough that an interrupted run
loses little work. A bounded number of batches is in flight at once, which
is the backpressure that keeps memory flat. A chunk whose text is identical
to one queued, in flight or embedded earlier in this run (and not yet
written) reuses that vector instead of being embedded again.

With spans on, a chunk long enough to have spans (:mod:`memsearch_fast.store.spans`) is embedded
as its spans alone, and its own vector is their normalised mean: the model
reads every line of it (not its first 256 tokens), and its text is not
embedded twice, once whole and once in pieces.
"""

from __future__ import annotations

import asyncio
import math
import operator
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from memsearch_fast._core import Chunk, clean_content_for_embedding
from memsearch_fast.index.spans import SpanFields, utf8_size
from memsearch_fast.index.spans import cut as cut_spans

if TYPE_CHECKING:
    from memsearch_fast.embeddings import EmbeddingProvider

#: Chunks the embed stage sorts by length before cutting them into batches:
#: chunks of similar length share a batch, so the provider pads little.
EMBED_SORT_WINDOW = 2048


@dataclass(slots=True)
class SpanVector:
    """One span of a chunk with its vector (float32: a fifth of a list's memory)."""

    index: int
    start_line: int
    end_line: int
    text_hash: str
    vector: np.ndarray | None = None


@dataclass(slots=True)
class Pending:
    """A chunk on its way to the store; ``spans`` is None when the span pass,
    not this stage, gives it its span rows (empty: a short chunk needs none)."""

    chunk_id: str
    chunk: Chunk
    vector: list[float] | np.ndarray | None = None
    spans: list[SpanVector] | None = None


def embed_batch_size(provider: EmbeddingProvider) -> int:
    """Cross-file batches of a few provider batches: enough to keep the
    provider's workers busy, small enough that little work is lost when a
    run is interrupted. Padding is kept low by the embed stage's sort window
    (``EMBED_SORT_WINDOW``), not by larger batches."""
    own = int(getattr(provider, "batch_size", 0) or 32)
    return max(32, min(512, own * 4))


def embed_in_flight(provider: EmbeddingProvider) -> int:
    """One batch per worker the provider really runs, plus one queued so a
    worker that finishes never waits for the next batch to be packed."""
    return max(1, int(getattr(provider, "workers", 1) or 1)) + 1


def embedding_text(chunk: Chunk) -> str:
    """What the model sees: the chunk without HTML-comment anchors."""
    return clean_content_for_embedding(chunk.content) or chunk.content


_Text = tuple[int, str, Pending, int]


#: Chunks cut into spans in one call to the Rust core.
CUT_BATCH = 256
#: The key texts are sorted by: their size (a C call, not a Python one, per text).
_first = operator.itemgetter(0)


def _mean(parts: list[SpanVector]) -> np.ndarray:
    """The chunk's vector: the normalised mean of its spans' (their sum, normalised:
    a chunk a call, so the fewest array operations), a float32 row as the providers
    give theirs (as a list it took 8 times the memory: 40 MB held at 50 MB of journals)."""
    vectors = [s.vector for s in parts if s.vector is not None]
    m = np.array(vectors[0], np.float32)  # a copy: the spans keep their own
    for v in vectors[1:]:
        m += v
    n = math.sqrt(float(np.dot(m, m)))
    if n > 0:
        m *= 1.0 / n
    return m


class EmbedStage:
    """Sorts pending chunks by length in windows of ``window``, embeds them
    ``batch_size`` at a time with up to ``in_flight`` batches running.

    With ``hold``, the vectors delivered stay reusable by later identical
    texts until :meth:`release` says their rows are written (the upsert
    buffer holds the same lists, so this costs no memory of its own). With
    ``spans`` a long chunk is embedded as its spans; ``window`` then counts texts,
    and ``known`` (span text hashes, the files of their chunks -> stored
    vectors) spares the spans of an edited chunk that did not change.
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
        spans: bool = False,
        known: Callable[[list[str], list[str]], Awaitable[dict[str, Any]]] | None = None,
        on_work: Callable[[int, int], None] | None = None,
    ) -> None:
        self._embed = embed
        # (queued, done): UTF-8 bytes of texts queued, and of texts embedded or that took
        # a stored vector; progress measures the run in them.
        self._on_work = on_work or (lambda queued, done: None)
        self._deliver = deliver
        self.batch_size = max(1, batch_size)
        # A whole number of batches: no short batch in the middle of a run.
        self.window = -(-max(window, self.batch_size) // self.batch_size) * self.batch_size
        # (UTF-8 length, text, its chunk, slot): slot -1 the chunk's own text, else a span's
        self._buffer: list[_Text] = []
        self._spans = spans
        self._known = known
        self._left: dict[int, int] = {}  # id(pending) -> texts of it not embedded yet
        self._read: set[int] = set()  # id(pending) of chunks the model read a text of
        self._slots = asyncio.Semaphore(max(1, in_flight))
        self._tasks: set[asyncio.Task[None]] = set()
        self._error: BaseException | None = None
        # content hash -> later chunks with that text, for each chunk queued or in flight
        self._waiting: dict[str, list[Pending]] = {}
        self._hold = hold
        # content hash -> vector (and spans) whose row is not written yet
        self._delivered: dict[str, tuple[list[float] | np.ndarray, list[SpanVector] | None]] = {}
        self.embedded = 0  # chunks the model read (whole, or some of their spans)
        self.span_texts = 0  # span texts sent to the provider
        self.span_reused = 0  # span texts that took a stored vector
        self.shared = 0  # chunks that took the vector of an identical text embedded in this run
        self.from_stored = 0  # chunks whose every span took a stored vector: the model read none

    def _raise_failure(self) -> None:
        if self._error is not None:
            raise self._error

    async def add(self, items: list[Pending]) -> None:
        """Queue items; waits when `in_flight` batches are already running."""
        self._raise_failure()
        ready: list[Pending] = []
        new: list[Pending] = []
        for p in items:
            h = p.chunk.content_hash
            done = self._delivered.get(h)
            if done is not None:
                p.vector, p.spans = done
                ready.append(p)
                continue
            later = self._waiting.get(h)
            if later is not None:
                later.append(p)
                continue
            self._waiting[h] = []
            new.append(p)
        self._on_work(self._queue_new(new), 0)
        if ready:
            self.shared += len(ready)
            await self._deliver(ready)
        while len(self._buffer) >= self.window:
            window, self._buffer = self._buffer[: self.window], self._buffer[self.window :]
            await self._launch_sorted(window)

    def _queue_new(self, new: list[Pending]) -> int:
        """Buffer the texts of chunks met here first: their spans cut by the Rust core
        without the GIL, :data:`CUT_BATCH` chunks a call (the core's memory for a call
        is kept by its allocator for the next: a small batch keeps it small)."""
        if not self._spans:
            return sum(self._queue(p, None) for p in new)
        queued = 0
        for at in range(0, len(new), CUT_BATCH):
            part = new[at : at + CUT_BATCH]
            cuts = cut_spans([(p.chunk.content, p.chunk.heading, p.chunk.start_line) for p in part])
            queued += sum(self._queue(p, parts) for p, parts in zip(part, cuts, strict=True))
        return queued

    def _queue(self, p: Pending, parts: list[SpanFields] | None) -> int:
        """Buffer *p*'s texts: its spans' (*parts*, with spans on, for a long chunk), or
        its own; returns their UTF-8 bytes.

        UTF-8 length tracks token count better than characters (a CJK
        character is a token, an English word of five letters about one).
        """
        c = p.chunk
        if parts is not None:
            p.spans = [SpanVector(i, a, b, h) for i, a, b, _, h in parts]
            if parts:
                self._left[id(p)] = len(parts)
                texts = [(utf8_size(s[3]), s[3], p, i) for i, s in enumerate(parts)]
                self._buffer.extend(texts)
                return sum(n for n, *_ in texts)
        t = embedding_text(c)
        self._left[id(p)] = 1
        self._buffer.append((len(t.encode()), t, p, -1))
        return self._buffer[-1][0]

    async def _take_known(self, entries: list[_Text]) -> list[_Text]:
        """Spans whose text has a stored vector take it; the rest are returned."""
        wanted = [(p, slot) for _, _, p, slot in entries if slot >= 0]
        if not wanted:
            return entries
        assert self._known is not None
        hashes = list({p.spans[slot].text_hash for p, slot in wanted if p.spans is not None})
        known = await self._known(hashes, list({p.chunk.source: None for p, _ in wanted}))
        if not known:
            return entries
        rest: list[_Text] = []
        out: list[Pending] = []
        spared = 0
        for e in entries:
            size, _, p, slot = e
            v = known.get(p.spans[slot].text_hash) if slot >= 0 and p.spans is not None else None
            if v is None:
                rest.append(e)
            else:
                self.span_reused += 1
                spared += size
                self._arrived(p, slot, v, out, read=False)
        self._on_work(0, spared)
        if out:
            await self._deliver(out)
        return rest

    def release(self, content_hashes: Iterable[str]) -> None:
        """These texts' rows are written: later copies find them in the store."""
        for h in content_hashes:
            self._delivered.pop(h, None)

    def _arrived(self, p: Pending, slot: int, v: Any, out: list[Pending], *, read: bool = True) -> None:
        """Vector *v* of *p*'s text *slot* (*read*: from the model, not the store);
        *p* (and its identical copies) go to *out* once all its texts have theirs."""
        if slot < 0:
            p.vector = v
        else:
            assert p.spans is not None
            p.spans[slot].vector = np.asarray(v, dtype=np.float32)
        if read:
            self._read.add(id(p))
        left = self._left.pop(id(p)) - 1
        if left:
            self._left[id(p)] = left
            return
        if slot >= 0:
            assert p.spans is not None
            p.vector = _mean(p.spans)
        out.append(p)
        h = p.chunk.content_hash
        for later in self._waiting.pop(h, ()):
            later.vector, later.spans = p.vector, p.spans
            out.append(later)
            self.shared += 1
        if self._hold:
            assert p.vector is not None
            self._delivered[h] = (p.vector, p.spans)
        if id(p) in self._read:
            self._read.discard(id(p))
            self.embedded += 1
        else:
            self.from_stored += 1

    async def _launch_sorted(self, entries: list[_Text]) -> None:
        if self._known is not None:
            entries = await self._take_known(entries)
        # One text, one embedding: a line repeated across chunks is sent once.
        owners: dict[str, list[tuple[Pending, int]]] = {}
        sizes: dict[str, int] = {}
        for size, t, p, slot in sorted(entries, key=_first):
            owners.setdefault(t, []).append((p, slot))
            sizes[t] = size
        texts = list(owners)
        for i in range(0, len(texts), self.batch_size):
            part = texts[i : i + self.batch_size]
            await self._launch([owners[t] for t in part], part, sum(sizes[t] * len(owners[t]) for t in part))

    async def _launch(self, batch: list[list[tuple[Pending, int]]], texts: list[str], work: int) -> None:
        await self._slots.acquire()
        task = asyncio.create_task(self._run(batch, texts, work))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run(self, batch: list[list[tuple[Pending, int]]], texts: list[str], work: int) -> None:
        try:
            vectors = await self._embed(texts)
            if len(vectors) != len(batch):
                raise RuntimeError(f"embedding provider returned {len(vectors)} vectors for {len(batch)} texts")
            self._on_work(0, work)
            out: list[Pending] = []
            for owners, v in zip(batch, vectors, strict=True):
                for p, slot in owners:
                    self._arrived(p, slot, v, out)
            self.span_texts += sum(1 for owners in batch if owners[0][1] >= 0)
            if out:
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
