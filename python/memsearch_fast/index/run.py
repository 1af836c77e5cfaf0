"""The index run: scan → chunk → dedup → embed → upsert → flush.

With a manifest (:mod:`.manifest`) that still matches the store, only files
whose size or mtime changed are read, and only those whose fingerprint then
differs are diffed against their stored ids; without one, every file is read
and every stored id consulted, and a fresh manifest is written at the end.

Chunk batches come from the Rust stream on a worker thread; each batch is diffed
against the stored ids, its new chunks take a stored vector of identical content
where one exists (:mod:`.donors`) or are packed into cross-file embedding batches,
and embedded rows are upserted while the next batches are embedded. Every queue is
bounded, so memory does not grow with the corpus. Stale rows and the rows of
vanished files are deleted only after the new rows are written, and the run ends
with an explicit flush; an interrupted run leaves rows the next run completes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Sequence
from typing import Any

from memsearch_fast import parallelism as par
from memsearch_fast._core import FileChunks, ScannedFile
from memsearch_fast.config.schema import DEFAULT_MAX_CHUNK_SIZE, DEFAULT_OVERLAP_LINES
from memsearch_fast.embeddings import EmbeddingProvider
from memsearch_fast.errors import one_line
from memsearch_fast.index.chunk import chunk_files
from memsearch_fast.index.dedup import Dedup, FilePlan, recorded_rows, vanished
from memsearch_fast.index.donors import LEARN_FIELDS, Donors
from memsearch_fast.index.embed import EmbedStage, Pending, embed_batch_size, embed_in_flight
from memsearch_fast.index.process import index_settings
from memsearch_fast.index.protocol import IndexStore
from memsearch_fast.index.report import IndexReport, NullProgress, Progress
from memsearch_fast.index.span_pass import SpanReport
from memsearch_fast.index.upsert import UpsertStage
from memsearch_fast.store import MAX_SOURCE_BYTES
from memsearch_fast.store.manifest import Entry, Header, Loaded, Manifest, pack, records_of

logger = logging.getLogger(__name__)

#: A file modified less than this many seconds before an index run started is
#: recorded without its mtime, so the next run reads it again: a second write
#: within the file system's timestamp granularity would keep size and mtime.
MANIFEST_RACY_SECONDS = 2.0
#: Vanished files at most whose old spans every span lookup of a run reads (a rename).
GONE_NEAR = 16


async def run_index(
    store: IndexStore,
    provider: EmbeddingProvider,
    files: Sequence[str | ScannedFile],
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
    manifest: Manifest | None = None,
    new_store: bool = False,
) -> IndexReport:
    """Index *files* into *store* with *provider*.

    ``cleanup_roots`` are directory roots whose vanished files are removed
    from the index, except under ``unlisted`` directories (the scan could not
    read them); ``only_sources`` limits the stored ids consulted to those
    sources (explicit-file runs, which prune nothing else). ``parallelism``
    is the run's plan (:func:`memsearch_fast.parallelism.plan`), made from
    ``workers`` when not given. ``manifest`` is the collection's manifest
    (``Manifest.for_store(uri, collection)``): files given as ``ScannedFile``
    whose size and mtime match it are not read; ``force`` ignores it (and
    re-embeds everything), and the run writes a fresh one. ``new_store``
    says the store is a database this run creates, still opening (see
    :mod:`memsearch_fast.store.opening`): nothing stored, nothing read.
    """
    files = list({os.fspath(f): f for f in files}.values())  # a path given twice is one file
    if manifest is not None:
        await manifest.acquire_in_thread()
        if manifest.waited:
            # Another writer ran meanwhile: files it saw deleted are gone for
            # this run too (their rows go as vanished ones), not failures.
            files = [f for f in files if os.path.lexists(os.fspath(f))]
    try:
        with index_settings():
            return await _Run(
                store,
                provider,
                files,
                cleanup_roots=cleanup_roots,
                unlisted=unlisted,
                only_sources=only_sources,
                force=force,
                max_chunk_size=max_chunk_size,
                overlap_lines=overlap_lines,
                pools=parallelism or par.plan(workers),
                progress=progress or NullProgress(),
                manifest=manifest,
                new_store=new_store,
            ).execute()
    finally:
        if manifest is not None:
            manifest.release()


class _Run:
    """The state of one index run."""

    def __init__(
        self,
        store: IndexStore,
        provider: EmbeddingProvider,
        files: Sequence[str | ScannedFile],
        *,
        cleanup_roots: Sequence[str],
        unlisted: Sequence[str],
        only_sources: Sequence[str] | None,
        force: bool,
        max_chunk_size: int,
        overlap_lines: int,
        pools: par.Parallelism,
        progress: Progress,
        manifest: Manifest | None,
        new_store: bool = False,
    ) -> None:
        self.store = store
        self.provider = provider
        self.files = files
        self.roots = cleanup_roots
        self.unlisted = unlisted
        self.only_sources = only_sources
        self.force = force
        self.max_chunk_size = max_chunk_size
        self.overlap_lines = overlap_lines
        self.pools = pools
        self.progress = progress
        self.manifest = manifest
        self.new_store = new_store
        self.model: str = provider.model_name
        self.report = IndexReport(files=len(files))
        self.racy_after = 0.0
        self.old: dict[str, Entry] = {}  # the manifest's entries, when it is trusted
        self.new: dict[str, Entry] = {}  # entries this run establishes
        self.loaded: Loaded | None = None
        self.written_ids: list[str] = []  # chunk ids this run wrote without span rows: the span pass's work
        # ids of chunks in flight that the stages give their span rows (or found needing none)
        self.spanned: set[str] = set()
        self.header: Header | None = None
        self.donors = Donors(self.model)
        self.dedup = Dedup(self.model, force=force)
        self.gone: list[str] = []  # recorded or stored files under a root that vanished
        # A file listed by the scan that is gone by the time it is read: the
        # tree is moving under the run (a file renamed twice in a burst).
        # What vanished before the scan may then live on under a name this
        # run never saw, so its rows stay until a run over a settled tree:
        # the next run deletes them, or gives their vectors to the new name.
        self.unsettled = False
        self.stale: list[str] = []  # stored ids that files no longer yield

    # -- the run -------------------------------------------------------------------------

    async def execute(self) -> IndexReport:
        started = time.perf_counter()
        # A file modified after this instant may be modified again within its
        # timestamp's granularity: its stat is not recorded (read next time).
        self.racy_after = time.time() - MANIFEST_RACY_SECONDS
        report, store, progress = self.report, self.store, self.progress
        self.sizes = {os.fspath(f): int(getattr(f, "size", 0) or 0) for f in self.files}
        paths = await self._plan()
        # The work ahead: the bytes of the files to read (those the manifest skips cost nothing).
        progress.start(len(self.files), sum(self.sizes.get(p, 0) for p in paths))
        if report.unchanged:
            progress.files_done(report.unchanged, 0)
        spans = self._spans_on()
        self.upsert = UpsertStage(
            store,
            before_write=self.manifest.invalidate if self.manifest is not None else None,
            on_written=self._written,
            # Under the writer lock every id dedup reads as new is absent.
            fresh=self.manifest is not None and not self.force,
            spans=spans,
        )
        self.embed = EmbedStage(
            self.provider.embed,
            self._deliver,
            batch_size=embed_batch_size(self.provider),
            in_flight=embed_in_flight(self.provider),
            hold=True,
            spans=spans,
            # An edited chunk's unchanged spans are stored (a new database has none).
            known=self._known_spans if spans and not self.new_store and not self.force else None,
            on_work=getattr(progress, "work", None),  # optional in a caller's own progress
        )
        failed = True
        try:
            if paths:
                stream = chunk_files(
                    paths,
                    max_chunk_size=self.max_chunk_size,
                    overlap_lines=self.overlap_lines,
                    workers=self.pools.chunk_threads,
                )
                while True:
                    batch = await asyncio.to_thread(next, stream, None)
                    if batch is None:
                        break
                    await self._batch(batch)
            await self.embed.finish()
            await self.upsert.finish()
            # Before the deletes: a moved chunk's spans take the vectors of its old spans.
            report.spans = await self._spans()
            if self.unsettled and self.gone and not self.force:
                logger.info(
                    "files moved during the run: the rows of %d vanished files wait for the next run", len(self.gone)
                )
                self.gone = []
            known, ask = recorded_rows(self.gone, self.old if self.loaded is not None else None)
            await self.upsert.delete_ids([*self.stale, *(i for ids in known.values() for i in ids)])
            await self.upsert.delete_sources(ask)
            report.sources_removed = len(known) + len(ask)
            failed = False
        except BaseException:
            await self.embed.cancel()
            raise
        finally:
            # Vectors already computed are written and made durable, even on
            # Ctrl-C or an error, so the next run does not embed them again.
            try:
                if failed:
                    with contextlib.suppress(Exception):  # the original error matters more
                        await self.upsert.finish()
                await self.upsert.flush()
            except Exception:  # the original error matters more
                if not failed:
                    raise
            progress.finish()
        if self.manifest is not None:
            try:
                await asyncio.to_thread(self._save_manifest)
            except OSError as exc:  # the index is complete; the next run is a full one
                logger.warning("cannot write manifest %s: %s", self.manifest.path, one_line(exc.strerror or exc))
        report.embedded = self.embed.embedded
        report.reused += self.embed.shared + self.embed.from_stored
        report.deleted = self.upsert.deleted
        report.seconds = time.perf_counter() - started
        return report

    def _spans_on(self) -> bool:
        """Spans are on and the store keeps them (looked up on its type: a store
        still opening is not waited for)."""
        from memsearch_fast.index import span_pass
        from memsearch_fast.store.opening import OpeningStore

        if not span_pass.enabled():
            return False
        return isinstance(self.store, OpeningStore) or getattr(type(self.store), "spans", None) is not None

    async def _known_spans(self, hashes: list[str], sources: list[str]) -> dict[str, Any]:
        """Stored vectors of span texts among the old spans of *sources* (the files
        the chunks come from) and of the files that vanished, when few (a rename)."""
        spans = self.store.spans  # type: ignore[attr-defined]
        near = [*sources, *self._gone_near()]
        return await asyncio.to_thread(lambda: spans.vectors_for(hashes, near) if spans.exists else {})

    def _gone_near(self) -> list[str]:
        """The vanished files whose spans a lookup reads too: a few (a rename); past
        :data:`GONE_NEAR` a moved chunk's spans are found through its donor."""
        return self.gone if len(self.gone) <= GONE_NEAR else []

    async def _spans(self) -> SpanReport | None:
        """Span vectors for what this run wrote; the whole collection after a run
        with no trusted manifest (it may follow a killed one)."""
        from memsearch_fast.index import span_pass

        if not span_pass.enabled() or getattr(self.store, "spans", None) is None:
            return None
        # A collection created by this run's writes may follow one indexed before spans
        # existed; a database this run created holds nothing but what it wrote.
        full = not self.new_store and ((self.loaded is None and self.only_sources is None) or self.upsert.created_spans)
        told = getattr(self.progress, "spans_done", None)  # optional in a caller's own progress
        report = await span_pass.write_spans(
            self.store,  # type: ignore[arg-type]
            self.provider,
            self.written_ids,
            full=full,
            progress=told,
            near=span_pass.Near(self.donors.gave, self._gone_near(), self.donors.lookup),
            rows=None if full else self.upsert.unspanned,
        )
        if self.upsert.wrote:  # the manifest is withdrawn: a killed refit is repaired by the next run
            await span_pass.refit(self.store, report)  # type: ignore[arg-type]
        report.chunks += self.upsert.span_chunks
        report.embedded += self.embed.span_texts
        report.reused += self.embed.span_reused
        return report

    async def _plan(self) -> list[str]:
        """The files to read, and (in ``self.gone``) the sources whose rows go: from
        the manifest when it can be trusted, else from the ids the store holds."""
        store = self.store
        if self.manifest is not None and not self.new_store:
            await asyncio.to_thread(self._load_manifest)
        if self.loaded is not None:
            self.report.manifest = True
            self.old = self.loaded.entries
            paths, self.gone = self._plan_with_manifest()
            return paths
        paths = [os.fspath(f) for f in self.files]
        if not self.new_store:  # a store this run creates holds nothing to diff against
            self.dedup = await asyncio.to_thread(
                Dedup, self.model, store.iter_ids_by_source(self.only_sources), force=self.force
            )
            self.gone = self.dedup.orphans(self.roots, unlisted=self.unlisted, seen=set(paths))
        if self.gone and not self.force:
            gone = self.gone
            self.donors.defer(
                lambda: b"".join(self.donors.learn_rows(p) for p in store.iter_rows_for_sources(gone, LEARN_FIELDS))
            )
        return paths

    # -- manifest ------------------------------------------------------------------------

    def _header(self) -> Header:
        store = self.store
        return Header(
            model=self.model,
            max_chunk_size=self.max_chunk_size,
            overlap_lines=self.overlap_lines,
            collection=str(getattr(store, "collection", "")),
            identity=store.collection_id() if hasattr(store, "collection_id") else "",
        )

    def _load_manifest(self) -> None:
        assert self.manifest is not None
        self.header = self._header()
        if self.force:
            return
        loaded = self.manifest.load(self.header)
        # Rows added or removed behind the manifest's back: the store is the truth.
        if loaded is not None and loaded.rows == self.store.count():
            self.loaded = loaded

    def _plan_with_manifest(self) -> tuple[list[str], list[str]]:
        """Files to read (size or mtime differ from their entry) and the
        recorded files that vanished; stored ids are loaded later, only for
        the files whose content changed."""
        old, report = self.old, self.report
        paths: list[str] = []
        seen: set[str] = set()
        for f in self.files:
            path = os.fspath(f)
            seen.add(path)
            entry = old.get(path)
            if entry is not None and isinstance(f, ScannedFile) and entry.same_stat(f.size, f.mtime, f.ino, f.ctime):
                report.unchanged += 1
            else:
                paths.append(path)
        if not self.force:
            self.donors.defer(lambda: records_of(old.values()))
        return paths, vanished(old, self.roots, unlisted=self.unlisted, seen=seen)

    def _record(self, fc: FileChunks, chunks: bytes | str) -> None:
        mtime = None if fc.mtime >= self.racy_after else fc.mtime
        self.new[fc.path] = Entry(fc.size, mtime, fc.fingerprint, chunks, fc.ino, fc.ctime)

    def _save_manifest(self) -> None:
        """Record what this run established, after its flush."""
        assert self.manifest is not None
        if self.header is None:  # a new store: known once it is open
            self.header = self._header()
        if self.loaded is not None:
            if not self.upsert.wrote and not self.new and not self.gone:
                return  # nothing changed: the manifest on disk is still exact
            entries = dict(self.old)
            for source in self.gone:
                entries.pop(source, None)
        elif self.only_sources is None:
            # Every stored source needs an entry, so that its file's removal
            # is noticed by a later run; those not read here are unknown.
            entries = {s: Entry.unknown() for s in self.dedup.by_source if s not in self.gone}
        else:
            return  # other sources' rows were not consulted: no complete manifest to write
        entries.update(self.new)
        rows = self.store.count() if self.upsert.wrote or self.loaded is None else self.loaded.rows
        self.manifest.save(self.header, rows, entries)

    # -- one chunk batch ----------------------------------------------------------------

    async def _batch(self, batch: list[FileChunks]) -> None:
        report, dedup = self.report, self.dedup
        ready: list[FileChunks] = []
        for fc in batch:
            report.read += 1
            reason = fc.error
            if reason is None and len(fc.path.encode("utf-8")) > MAX_SOURCE_BYTES:
                reason = f"path longer than {MAX_SOURCE_BYTES} bytes"
            if reason is not None:
                if not os.path.lexists(fc.path):
                    self.unsettled = True
                report.failed.append((fc.path, reason))
                self._failed(fc.path)
                continue
            if fc.invalid_utf8:
                report.invalid_utf8.append(fc.path)
            report.chunks += len(fc.chunks)
            entry = self.old.get(fc.path)
            if entry is not None and entry.fingerprint and entry.fingerprint == fc.fingerprint and not self.force:
                # Touched but identical: its rows are the ones recorded.
                report.unchanged += 1
                self._record(fc, entry.chunks)
                continue
            ready.append(fc)
        if self.loaded is not None and (ask := dedup.take_recorded(ready, self.old)):
            await asyncio.to_thread(lambda: dedup.add(self.store.iter_ids_by_source(ask)))
        to_place: list[Pending] = []
        learn: list[str] = []
        for fc in ready:
            plan = dedup.plan(fc)
            if plan.new or plan.stale or self._first_seen(fc.path, plan):
                report.changed += 1
            else:
                report.unchanged += 1
            self.stale.extend(plan.stale)
            self._record(fc, pack(plan.pairs))
            to_place.extend(Pending(cid, c) for cid, c in plan.new)
            if not self.force and self.loaded is None:
                self._learn_kept(plan)
                if plan.new and plan.had_rows:
                    learn.append(plan.source)
        # Progress counts a batch when it is planned, before the stages' queues
        # may hold it back: its files are read, its chunks queued for embedding.
        size = sum(self.sizes.get(fc.path, 0) for fc in batch)
        if self.force:
            self.progress.files_done(len(batch), len(to_place), size)
            await self.embed.add(to_place)
        else:
            await self.donors.learn(self.store, learn)
            reused, to_embed = await self.donors.resolve(self.store, to_place)
            report.reused += len(reused)
            self.progress.files_done(len(batch), len(to_embed), size)
            await self.upsert.add(reused)
            await self.embed.add(to_embed)

    def _first_seen(self, path: str, plan: FilePlan) -> bool:
        """A file the store knew nothing of (a heading-only file in a new
        database is new, not "unchanged", though it adds no row)."""
        if plan.had_rows:
            return False
        return self.new_store or (self.loaded is not None and path not in self.old)

    def _learn_kept(self, plan: FilePlan) -> None:
        """A full run: the chunks a file already had stored are donors."""
        if plan.new:
            fresh = {cid for cid, _ in plan.new}
            self.donors.add_packed(pack(p for p in plan.pairs if p[1] not in fresh))
        else:
            self.donors.add_packed(pack(plan.pairs))

    def _failed(self, path: str) -> None:
        """An unreadable file keeps its rows until it can be read; its entry,
        if it has rows, says "unknown" so the next run reads it again."""
        if self.loaded is not None:
            entry = self.old.get(path)
            if entry is not None:
                self.new[path] = Entry.unknown(entry.chunks)
        else:
            if path in self.dedup.by_source:
                self.new[path] = Entry.unknown()
            self.dedup.keep(path)

    # -- callbacks from the stages --------------------------------------------------------

    async def _deliver(self, items: list[Pending]) -> None:
        self.spanned.update(p.chunk_id for p in items if p.spans is not None)
        await self.upsert.add(items)
        self.progress.chunks_embedded(len(items))

    def _written(self, pairs: list[tuple[str, str]]) -> None:
        for _, cid in pairs:
            if cid in self.spanned:
                self.spanned.discard(cid)  # written: the set holds only rows in flight
            else:
                self.written_ids.append(cid)
        self.embed.release(h for h, _ in pairs)
        if not self.force:
            self.donors.written(pairs)
