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
import itertools
import math
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from memsearch_fast._core import Chunk, clean_content_for_embedding
from memsearch_fast.index.spans import cut_columns
from memsearch_fast.store.spans.columns import SpanBlock

if TYPE_CHECKING:
    from memsearch_fast.embeddings import EmbeddingProvider

#: Chunks the embed stage sorts by length before cutting them into batches:
#: chunks of similar length share a batch, so the provider pads little.
EMBED_SORT_WINDOW = 2048


@dataclass(slots=True)
class Pending:
    """A chunk on its way to the store; ``spans`` is None when the span pass,
    not this stage, gives it its span rows (empty: a short chunk needs none).
    ``left`` counts its texts not embedded yet, ``read`` says whether the model
    read one (not the store)."""

    chunk_id: str
    chunk: Chunk
    vector: list[float] | np.ndarray | None = None
    spans: SpanBlock | None = None
    left: int = 0
    read: bool = False


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


#: Chunks cut into spans in one call to the Rust core.
CUT_BATCH = 256


def _mean(spans: SpanBlock) -> np.ndarray:
    """The chunk's vector: the normalised mean of its spans' (their sum, normalised),
    a float32 row as the providers give theirs."""
    assert spans.vectors is not None
    m: np.ndarray = spans.vectors.sum(axis=0, dtype=np.float32)
    n = math.sqrt(float(np.dot(m, m)))
    if n > 0:
        m *= 1.0 / n
    return m


def _objects(items: list[Any]) -> np.ndarray:
    """*items* as a numpy array of objects (fancy indexing at C speed)."""
    out: np.ndarray = np.fromiter(items, dtype=object, count=len(items))
    return out


class EmbedStage:
    """Sorts pending chunks by length in windows of ``window``, embeds them
    ``batch_size`` at a time with up to ``in_flight`` batches running.

    With ``hold``, the vectors delivered stay reusable by later identical
    texts until :meth:`release` says their rows are written (the upsert
    buffer holds the same lists, so this costs no memory of its own). With
    ``spans`` a long chunk is embedded as its spans; ``window`` then counts texts,
    and ``known`` (span text hashes, the files of their chunks -> stored
    vectors) spares the spans of an edited chunk that did not change.

    The texts wait in four parallel lists (UTF-8 size, text, chunk, slot: -1 the
    chunk's own text, else a span's), sorted and cut with numpy: half a million
    span texts at 50 MB of journals, where a tuple and a call a text cost seconds.
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
        self._buffer = _Texts()
        self._spans = spans
        self._known = known
        self._slots = asyncio.Semaphore(max(1, in_flight))
        self._tasks: set[asyncio.Task[None]] = set()
        self._error: BaseException | None = None
        # content hash -> later chunks with that text, for each chunk queued or in flight
        self._waiting: dict[str, list[Pending]] = {}
        self._hold = hold
        # content hash -> vector (and spans) whose row is not written yet
        self._delivered: dict[str, tuple[list[float] | np.ndarray, SpanBlock | None]] = {}
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
            await self._launch_sorted(self._buffer.take(self.window))

    def _queue_new(self, new: list[Pending]) -> int:
        """Buffer the texts of chunks met here first, returning their UTF-8 bytes: their
        spans cut by the Rust core without the GIL, :data:`CUT_BATCH` chunks a call (the
        core's memory for a call is kept by its allocator for the next: a small batch
        keeps it small). A chunk with no spans (short, or spans off) is its own text.

        UTF-8 length tracks token count better than characters (a CJK
        character is a token, an English word of five letters about one).
        """
        queued = 0
        buf = self._buffer
        for at in range(0, len(new), CUT_BATCH) if self._spans else ():
            part = new[at : at + CUT_BATCH]
            blocks, texts, sizes = cut_columns([(p.chunk.content, p.chunk.heading, p.chunk.start_line) for p in part])
            buf.sizes.extend(sizes.tolist())
            buf.texts.extend(texts)
            queued += int(sizes.sum())
            for p, block in zip(part, blocks, strict=True):
                p.spans = block
                p.left = len(block)
                buf.owners.extend(itertools.repeat(p, p.left))
                buf.slots.extend(range(p.left))
        for p in new:
            if not p.left:
                t = embedding_text(p.chunk)
                p.left = 1
                buf.add(len(t.encode()), t, p, -1)
                queued += buf.sizes[-1]
        return queued

    async def _take_known(self, entries: _Texts) -> _Texts:
        """Spans whose text has a stored vector take it; the rest are returned."""
        spanned = [(p, slot) for p, slot in zip(entries.owners, entries.slots, strict=True) if slot >= 0 and p.spans]
        if not spanned:
            return entries
        assert self._known is not None
        hashes = list({p.spans.hashes[slot]: None for p, slot in spanned if p.spans})
        sources = list({p.chunk.source: None for p, _ in spanned})
        known = await self._known(hashes, sources)
        if not known:
            return entries
        rest = _Texts()
        out: list[Pending] = []
        spared = 0
        for size, t, p, slot in zip(entries.sizes, entries.texts, entries.owners, entries.slots, strict=True):
            v = known.get(p.spans.hashes[slot]) if slot >= 0 and p.spans else None
            if v is None:
                rest.add(size, t, p, slot)
                continue
            self.span_reused += 1
            spared += size
            v = np.asarray(v, dtype=np.float32)
            self._put_span(p, slot, v)
            p.left -= 1
            if not p.left:
                self._finish_chunk(p, out)
        self._on_work(0, spared)
        if out:
            await self._deliver(out)
        return rest

    def release(self, content_hashes: Iterable[str]) -> None:
        """These texts' rows are written: later copies find them in the store."""
        for h in content_hashes:
            self._delivered.pop(h, None)

    @staticmethod
    def _put_span(p: Pending, slot: int, v: np.ndarray) -> None:
        spans = p.spans
        assert spans is not None
        if spans.vectors is None:
            spans.vectors = np.empty((len(spans), v.shape[-1]), np.float32)
        spans.vectors[slot] = v

    def _finish_chunk(self, p: Pending, out: list[Pending]) -> None:
        """Every text of *p* has its vector: *p* (and its identical copies) go to *out*."""
        if p.spans:
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
        if p.read:
            self.embedded += 1
        else:
            self.from_stored += 1

    async def _launch_sorted(self, entries: _Texts) -> None:
        if self._known is not None:
            entries = await self._take_known(entries)
        n = len(entries)
        if not n:
            return
        sizes = np.asarray(entries.sizes, np.int64)
        order = np.argsort(sizes, kind="stable")
        sizes = sizes[order]
        texts = _objects(entries.texts)[order].tolist()
        owners = _objects(entries.owners)[order]
        slots = np.asarray(entries.slots, np.int64)[order]
        # One text, one embedding: a line repeated across chunks is sent once.
        unique = list(dict.fromkeys(texts))
        at = {t: i for i, t in enumerate(unique)}
        rows = np.fromiter(map(at.__getitem__, texts), np.int64, n)
        for i in range(0, len(unique), self.batch_size):
            mine = (rows >= i) & (rows < i + self.batch_size)
            batch = (owners[mine].tolist(), slots[mine].tolist(), (rows[mine] - i).tolist())
            await self._launch(batch, unique[i : i + self.batch_size], int(sizes[mine].sum()))

    async def _launch(self, batch: _Batch, texts: list[str], work: int) -> None:
        await self._slots.acquire()
        task = asyncio.create_task(self._run(batch, texts, work))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run(self, batch: _Batch, texts: list[str], work: int) -> None:
        try:
            got = await self._embed(texts)
            if len(got) != len(texts):
                raise RuntimeError(f"embedding provider returned {len(got)} vectors for {len(texts)} texts")
            self._on_work(0, work)
            # A chunk's own vector is the provider's row as given; spans are rows of one array.
            vectors = np.asarray(got, dtype=np.float32) if any(slot >= 0 for slot in batch[1]) else None
            out: list[Pending] = []
            for p, slot, row in zip(*batch, strict=True):
                if vectors is None or slot < 0:
                    p.vector = got[row]
                else:
                    self._put_span(p, slot, vectors[row])
                p.read = True
                p.left -= 1
                if not p.left:
                    self._finish_chunk(p, out)
            self.span_texts += len({row for slot, row in zip(batch[1], batch[2], strict=True) if slot >= 0})
            if out:
                await self._deliver(out)
        except BaseException as exc:  # noqa: BLE001 - kept and re-raised by the next add() or finish()
            if self._error is None:
                self._error = exc
        finally:
            self._slots.release()

    async def finish(self) -> None:
        """Embed what is left and wait for every batch."""
        if len(self._buffer):
            await self._launch_sorted(self._buffer.take(len(self._buffer)))
        if self._tasks:
            await asyncio.gather(*list(self._tasks))
        self._raise_failure()

    async def cancel(self) -> None:
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*list(self._tasks), return_exceptions=True)


#: A launched batch: each text's chunk, slot and row in the batch's texts.
_Batch = tuple[list[Pending], list[int], list[int]]


@dataclass(slots=True)
class _Texts:
    """Texts waiting to be embedded, four parallel lists (see :class:`EmbedStage`)."""

    sizes: list[int] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    owners: list[Pending] = field(default_factory=list)
    slots: list[int] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.texts)

    def add(self, size: int, text: str, owner: Pending, slot: int) -> None:
        self.sizes.append(size)
        self.texts.append(text)
        self.owners.append(owner)
        self.slots.append(slot)

    def take(self, n: int) -> _Texts:
        """The first *n* texts, out of the buffer."""
        head = _Texts(self.sizes[:n], self.texts[:n], self.owners[:n], self.slots[:n])
        del self.sizes[:n], self.texts[:n], self.owners[:n], self.slots[:n]
        return head
