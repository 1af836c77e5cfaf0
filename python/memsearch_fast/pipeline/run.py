"""The index run: scan → chunk → dedup → embed → upsert → flush.

Chunk batches come from the Rust stream on a worker thread; each batch is
diffed against the stored ids, its new chunks are packed into cross-file
embedding batches, and embedded rows are upserted while the next batches are
embedded. Every queue is bounded, so memory does not grow with the corpus.
Stale rows are deleted only after the new rows are written, and the run ends
with an explicit flush; an interrupted run leaves rows that the next run
recognises by id and completes.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from memsearch_fast import parallelism as par
from memsearch_fast._core import compute_chunk_id, content_hash
from memsearch_fast.config import DEFAULT_MAX_CHUNK_SIZE, DEFAULT_OVERLAP_LINES
from memsearch_fast.pipeline.chunk import chunk_files
from memsearch_fast.pipeline.dedup import Dedup, FilePlan
from memsearch_fast.pipeline.embed import EmbedStage, Pending
from memsearch_fast.pipeline.upsert import UpsertStage
from memsearch_fast.store import MAX_SOURCE_BYTES


@dataclass
class IndexReport:
    """What an index run did; `failed` lists (path, one-line reason)."""

    files: int = 0
    changed: int = 0
    unchanged: int = 0
    failed: list[tuple[str, str]] = field(default_factory=list)
    invalid_utf8: list[str] = field(default_factory=list)
    chunks: int = 0
    embedded: int = 0
    reused: int = 0
    deleted: int = 0
    sources_removed: int = 0
    seconds: float = 0.0

    @property
    def indexed(self) -> int:
        """Chunks written in this run (embedded or with a reused vector)."""
        return self.embedded + self.reused


class Progress(Protocol):
    """Receives progress; the CLI draws it, library callers may ignore it."""

    def start(self, files: int) -> None: ...
    def files_done(self, files: int, chunks: int) -> None: ...
    def chunks_embedded(self, n: int) -> None: ...
    def finish(self) -> None: ...


class NullProgress:
    """Draws nothing: library callers, pipes, logs and ``--quiet``."""

    def start(self, files: int) -> None: ...
    def files_done(self, files: int, chunks: int) -> None: ...
    def chunks_embedded(self, n: int) -> None: ...
    def finish(self) -> None: ...


def _embed_batch_size(provider: Any) -> int:
    """Cross-file batches of a few provider batches: enough for the provider
    to sort by length and keep its workers busy, small enough that little
    work is lost when a run is interrupted."""
    own = int(getattr(provider, "batch_size", 0) or 32)
    return max(32, min(512, own * 4))


def _embed_in_flight(provider: Any) -> int:
    """One batch per worker the provider really runs, plus one queued so a
    worker that finishes never waits for the next batch to be packed."""
    return max(1, int(getattr(provider, "workers", 1) or 1)) + 1


async def run_index(
    store: Any,
    provider: Any,
    files: Sequence[Any],
    *,
    cleanup_roots: Sequence[str] = (),
    unlisted: Sequence[str] = (),
    only_sources: Sequence[str] | None = None,
    force: bool = False,
    max_chunk_size: int = DEFAULT_MAX_CHUNK_SIZE,
    overlap_lines: int = DEFAULT_OVERLAP_LINES,
    workers: int | None = None,
    parallelism: par.Parallelism | None = None,
    progress: Progress | None = None,
) -> IndexReport:
    """Index *files* into *store* with *provider*.

    ``cleanup_roots`` are directory roots whose vanished files are removed
    from the index, except under ``unlisted`` directories (the scan could not
    read them); ``only_sources`` limits the stored ids consulted to those
    sources (explicit-file runs, which prune nothing else). ``parallelism``
    is the run's plan (:func:`memsearch_fast.parallelism.plan`), made from
    ``workers`` when not given.
    """
    started = time.perf_counter()
    progress = progress or NullProgress()
    report = IndexReport(files=len(files))
    progress.start(len(files))
    model = provider.model_name

    # Streamed from the store into Dedup's packed form: no list of every row.
    dedup = await asyncio.to_thread(Dedup, model, store.iter_ids_by_source(only_sources), force=force)

    upsert = UpsertStage(store)

    async def deliver(items: list[Pending]) -> None:
        await upsert.add(items)
        progress.chunks_embedded(len(items))

    pools = parallelism or par.plan(workers)
    embed = EmbedStage(
        provider.embed, deliver, batch_size=_embed_batch_size(provider), in_flight=_embed_in_flight(provider)
    )
    stream = chunk_files(files, max_chunk_size=max_chunk_size, overlap_lines=overlap_lines, workers=pools.chunk_threads)
    stale: list[str] = []
    failed = True
    try:
        while True:
            batch = await asyncio.to_thread(next, stream, None)
            if batch is None:
                break
            reusable: list[FilePlan] = []
            to_embed: list[Pending] = []
            for fc in batch:
                reason = fc.error
                if reason is None and len(fc.path.encode("utf-8")) > MAX_SOURCE_BYTES:
                    reason = f"path longer than {MAX_SOURCE_BYTES} bytes"
                if reason is not None:
                    report.failed.append((fc.path, reason))
                    dedup.keep(fc.path)  # its stored rows stay until it can be read
                    continue
                if fc.invalid_utf8:
                    report.invalid_utf8.append(fc.path)
                report.chunks += len(fc.chunks)
                plan = dedup.plan(fc)
                if plan.new or plan.stale:
                    report.changed += 1
                else:
                    report.unchanged += 1
                stale.extend(plan.stale)
                if plan.new and plan.had_rows and not force:
                    reusable.append(plan)
                else:
                    to_embed.extend(Pending(cid, c) for cid, c in plan.new)
            if reusable:
                reused = await _reuse_vectors(store, reusable, to_embed, model)
                report.reused += len(reused)
                await upsert.add(reused)
            await embed.add(to_embed)
            progress.files_done(len(batch), sum(len(fc.chunks) for fc in batch))
        await embed.finish()
        await upsert.finish()
        await upsert.delete_ids(stale)
        orphans = dedup.orphans(cleanup_roots, unlisted=unlisted)
        await upsert.delete_sources(orphans)
        report.sources_removed = len(orphans)
        failed = False
    except BaseException:
        await embed.cancel()
        raise
    finally:
        # Vectors already computed are written and made durable, even on
        # Ctrl-C or an error, so the next run does not embed them again.
        try:
            if failed:
                with contextlib.suppress(Exception):  # the original error matters more
                    await upsert.finish()
            await upsert.flush()
        except Exception:  # the original error matters more
            if not failed:
                raise
        progress.finish()
    report.embedded = embed.embedded
    report.deleted = upsert.deleted
    report.seconds = time.perf_counter() - started
    return report


async def _reuse_vectors(store: Any, plans: list[FilePlan], to_embed: list[Pending], model: str) -> list[Pending]:
    """Reuse stored vectors of identical content made by the same model (one
    query for the batch); what has no stored twin goes to `to_embed`."""
    fields = ["chunk_hash", "content", "embedding", "source", "start_line", "end_line"]
    rows = await asyncio.to_thread(store.rows_for_sources, [p.source for p in plans], fields)
    by_hash: dict[str, Any] = {}
    for r in rows:
        h = content_hash(r["content"])
        # The id encodes the model: a row from another model never matches.
        if r["chunk_hash"] == compute_chunk_id(r["source"], r["start_line"], r["end_line"], h, model):
            by_hash[h] = r["embedding"]
    reused: list[Pending] = []
    for plan in plans:
        for cid, chunk in plan.new:
            vector = by_hash.get(chunk.content_hash)
            if vector is None:
                to_embed.append(Pending(cid, chunk))
            else:
                reused.append(Pending(cid, chunk, list(vector)))
    return reused
