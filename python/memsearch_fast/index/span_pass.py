"""The span pass: after an index run's chunks are written, the span vectors
the stages did not write.

A chunk the run embedded got its span rows with its own row
(:mod:`memsearch_fast.index.upsert`); the rest (a moved or copied chunk that
took a stored vector, a collection indexed before spans existed, rows a
killed run left unfinished) get them here. Spans
(:mod:`memsearch_fast.index.spans`) are read back from the chunks stored, so
they follow whatever the run decided without another path through the
stages. A span whose text was embedded before takes the stored vector, looked
up where the run says it lies (:class:`Near`: the chunk a moved or copied
chunk took its vector from, the files a rename removed). A chunk's row 0 (its own vector) is written after its
spans, so a chunk with row 0 has all its spans; a short chunk has no spans
and no rows (a full reconcile reads it again and finds none).

A run with no trusted manifest (a first run, a repair after a killed run, a
collection indexed before spans existed) reconciles the whole collection:
every chunk without its rows gets them, and rows of chunks that are gone go.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from memsearch_fast.config import environment
from memsearch_fast.index.spans import Span, cut
from memsearch_fast.store.spans.collection import span_row

if TYPE_CHECKING:
    from memsearch_fast.embeddings import EmbeddingProvider
    from memsearch_fast.store.milvus import MilvusStore

#: Chunks read back and given their spans per step.
PAGE = 512
#: Span texts per provider call: the provider sorts and splits a call across its
#: workers, and short texts sorted in large windows pad little (64 per call took
#: 2.5x as long as 1024 on two cores).
EMBED_BATCH = 1024
_FIELDS = ["content", "heading", "source", "start_line", "end_line", "embedding"]


@dataclass
class Near:
    """Where the stored spans of a page's chunks may lie: *donors* maps a chunk given
    a stored vector to the chunk it came from, *lookup* a content hash to a stored
    chunk with that content (for the rest: a repair after a killed run); *gone*: the
    files that vanished in the run, when few."""

    donors: dict[str, str]
    gone: list[str]
    lookup: Callable[[list[str]], list[str | None]] | None = None

    def chunks(self, rows: list[dict[str, Any]]) -> list[str]:
        ids = [self.donors.get(str(r["chunk_hash"])) for r in rows]
        rest = [i for i, d in enumerate(ids) if d is None]
        if rest and self.lookup is not None:
            from memsearch_fast._core import content_hash

            found = self.lookup([content_hash(str(rows[i].get("content") or "")) for i in rest])
            for i, d in zip(rest, found, strict=True):
                ids[i] = d if d != rows[i]["chunk_hash"] else None
        return [d for d in ids if d is not None]


def enabled() -> bool:
    """``MEMSEARCH_SPANS=0`` writes no spans (search then ranks by chunk vectors alone)."""
    return environment.flag("MEMSEARCH_SPANS")


@dataclass
class SpanReport:
    """``chunks``: chunks given their span rows (a short chunk gets none)."""

    chunks: int = 0
    embedded: int = 0
    reused: int = 0
    removed: int = 0
    moved: int = 0  # chunks whose spans moved from a collection to the span file
    refitted: bool = False  # the vectors were stored again in fewer dimensions


async def refit(store: MilvusStore, report: SpanReport) -> None:
    """After a run that wrote: a collection of every dimension that has grown enough
    is stored again in fewer (:meth:`~memsearch_fast.store.spans.SpanStore.refit`)."""
    spans_store = store.spans
    if await asyncio.to_thread(spans_store.refit):
        report.refitted = True
        await asyncio.to_thread(spans_store.flush)


async def write_spans(
    store: MilvusStore,
    provider: EmbeddingProvider,
    written: Iterable[str],
    *,
    full: bool,
    progress: Callable[[int, int], None] | None = None,
    near: Near | None = None,
    rows: dict[str, dict[str, Any]] | None = None,
) -> SpanReport:
    """Give the chunks *written* (every chunk lacking them when *full*) their span
    rows; *progress* hears (chunks done, chunks to do) after each page; *near*
    says where stored spans of the same texts lie; *rows*: rows of chunks to do
    as the store holds them (the run wrote them), not read back."""
    report = SpanReport()
    spans_store = store.spans
    written = list(written)
    legacy = store.legacy_spans() if hasattr(store, "legacy_spans") else None
    adopt = getattr(spans_store, "adopt", None)
    if legacy is not None and adopt is not None and await asyncio.to_thread(legacy.present):
        # Spans a collection held before they lived in a file: moved, not embedded again.
        report.moved = await asyncio.to_thread(adopt, legacy)
    if not full and not written and await asyncio.to_thread(lambda: spans_store.exists):
        return report  # nothing written, nothing to add
    missing = not await asyncio.to_thread(lambda: spans_store.exists)
    if full or missing:
        todo = await asyncio.to_thread(_reconcile, store, report)
    else:
        todo = list(dict.fromkeys(written))
    if progress is not None and todo:
        progress(0, len(todo))
    given = rows or {}
    for i in range(0, len(todo), PAGE):
        ids = todo[i : i + PAGE]
        page = [given[c] for c in ids if c in given]
        ask = [c for c in ids if c not in given]
        if ask:
            page += await asyncio.to_thread(store.rows_for_ids, ask, _FIELDS)
        await _page(store, provider, page, report, near)
        if progress is not None:
            progress(min(len(todo), i + PAGE), len(todo))
    if missing:  # made by the first page with spans, fitted on them; or now, with none to write
        await asyncio.to_thread(spans_store.create)
    await asyncio.to_thread(spans_store.flush)
    return report


def _reconcile(store: MilvusStore, report: SpanReport) -> list[str]:
    """The chunks without their span rows; rows of chunks no longer stored are deleted."""
    stored = {cid for cid, _ in store.iter_ids_by_source(None)}
    spans_store = store.spans
    gone = {cid for _, cid in spans_store.iter_chunk_rows() if cid not in stored}
    if gone:
        spans_store.delete_chunks(gone)
        report.removed += len(gone)
    have = spans_store.chunk_hashes()
    return sorted(stored - have)


async def _page(
    store: MilvusStore, provider: EmbeddingProvider, rows: list[dict[str, Any]], report: SpanReport, near: Near | None
) -> None:
    chunks = [(str(r.get("content") or ""), str(r.get("heading") or ""), int(r.get("start_line") or 0)) for r in rows]
    cuts = cut(chunks)
    pieces = [(row, Span(*s)) for row, parts in zip(rows, cuts, strict=True) for s in parts]
    hashes = [s.text_hash for _, s in pieces]
    known = {}
    if near is not None:
        known = await asyncio.to_thread(store.spans.vectors_for, hashes, near.gone, near.chunks(rows))
    wanted = list(dict.fromkeys(h for h in hashes if h not in known))
    texts = {h: s.text for (_, s), h in zip(pieces, hashes, strict=True)}
    if wanted:
        known.update(await _embed(provider, wanted, texts))
    report.embedded += len(wanted)
    report.reused += len(pieces) - len(wanted)
    span_rows = [
        span_row(str(row["chunk_hash"]), str(row.get("source") or ""), s.index, s.start_line, s.end_line, h, known[h])
        for (row, s), h in zip(pieces, hashes, strict=True)
    ]
    spanned = {id(row) for row, _ in pieces}
    own = [
        span_row(
            str(row["chunk_hash"]),
            str(row.get("source") or ""),
            0,
            int(row.get("start_line") or 0),
            int(row.get("end_line") or 0),
            "",
            np.asarray(row["embedding"], dtype=np.float32),
        )
        for row in rows
        if id(row) in spanned
    ]
    if span_rows:
        await asyncio.to_thread(store.spans.create, [r["embedding"] for r in span_rows])
    # Rows a killed pass left of these chunks go first; then every row is new.
    await asyncio.to_thread(store.spans.delete_chunks, [str(row["chunk_hash"]) for row in rows])
    await asyncio.to_thread(lambda: store.spans.put(span_rows, own, replace=False))
    report.chunks += len(own)


async def _embed(provider: EmbeddingProvider, wanted: list[str], texts: dict[str, str]) -> dict[str, list[float]]:
    """Vectors of the texts with these hashes, sorted by length into batches, the
    provider's workers kept busy."""
    order = sorted(wanted, key=lambda h: len(texts[h].encode()))
    batches = [order[i : i + EMBED_BATCH] for i in range(0, len(order), EMBED_BATCH)]
    slots = asyncio.Semaphore(max(1, int(getattr(provider, "workers", 1) or 1)))

    async def one(batch: list[str]) -> list[list[float]]:
        async with slots:
            return await provider.embed([texts[h] for h in batch])

    results = await asyncio.gather(*(one(b) for b in batches))
    return {h: v for batch, vectors in zip(batches, results, strict=True) for h, v in zip(batch, vectors, strict=True)}
