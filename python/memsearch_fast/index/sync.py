"""Lazy sync: bring the index up to date just before a search.

Every index run over paths (``memsearch index``, each run of ``memsearch
watch``, :meth:`MemSearch.index`) records its paths, scan rules, chunk
settings and model beside the collection's manifest
(``<manifest>.roots.json``). :func:`sync` replays those runs through the
manifest, so an unchanged file costs a stat and nothing else; a changed,
new or deleted file is indexed, embedded or removed as ``index`` would.

The record keeps one entry per path set (16 at most, the latest first). A
run replaces the entry of the same paths, and the entries of overlapping
paths indexed with other settings: replaying both would undo each other on
every search. ``reset`` (:meth:`MemSearch.drop`) forgets them; a collection
re-created by another tool is noticed where the engine reports collection
ids (a Milvus server; Milvus Lite reports none).

A sync never fails a search: what went wrong is in the :class:`SyncReport`
(``warning()`` is the one line to show). It skips the paths a running
``memsearch watch`` holds (the watcher keeps them fresh), recorded paths that
no longer exist (their rows stay, as ``watch`` leaves them), and everything
while another index run holds the collection's manifest lock (it is not
waited for).
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from memsearch_fast.errors import describe, one_line
from memsearch_fast.index.record import Recorded, load, record_path, update
from memsearch_fast.store.manifest import Manifest

if TYPE_CHECKING:
    from collections.abc import Sequence

    from memsearch_fast.embeddings import EmbeddingProvider
    from memsearch_fast.index import IndexReport
    from memsearch_fast.store.milvus import MilvusStore


class MemSearch(Protocol):
    """What lazy sync needs of the API object (``api.MemSearch`` is one): its
    settings, its store and provider, and one index run of given paths."""

    paths: list[str]
    ignore_files: list[str]
    exclude: list[str]
    max_chunk_size: int
    overlap_lines: int

    @property
    def uri(self) -> str: ...
    @property
    def collection(self) -> str: ...
    @property
    def store(self) -> MilvusStore: ...
    @property
    def provider(self) -> EmbeddingProvider: ...
    def collection_exists(self) -> bool: ...
    async def index_paths(
        self,
        paths: Sequence[str],
        *,
        ignore_files: Sequence[str],
        exclude: Sequence[str],
        max_chunk_size: int,
        overlap_lines: int,
        manifest: Manifest | None,
    ) -> IndexReport: ...


logger = logging.getLogger(__name__)


def remember(ms: MemSearch) -> None:
    """Record the paths of the index run *ms* just made (logged, never raised, on failure)."""
    if not ms.paths:
        return
    try:
        run = Recorded(
            paths=[str(Path(p).expanduser().resolve()) for p in ms.paths],
            ignore_files=list(ms.ignore_files),
            exclude=list(ms.exclude),
            max_chunk_size=ms.max_chunk_size,
            overlap_lines=ms.overlap_lines,
            model=str(ms.provider.model_name),
        )
        update(record_path(ms.uri, ms.collection), ms.collection, str(ms.store.collection_id()), run)
    except Exception as exc:  # noqa: BLE001 - the index is written; only a later sync misses these paths
        logger.warning("cannot record the indexed paths of collection %s: %s", ms.collection, describe(exc))


@dataclass
class SyncReport:
    """What a sync did, summed over the recorded runs it replayed."""

    runs: int = 0  # index runs made
    roots: list[str] = field(default_factory=list)  # the paths synced
    watched: list[str] = field(default_factory=list)  # paths a running watcher keeps fresh: not synced
    missing: list[str] = field(default_factory=list)  # recorded paths that no longer exist: skipped
    busy: bool = False  # another index run held the collection: not waited for
    skipped: str = ""  # why nothing could be synced at all
    errors: list[str] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)  # paths that could not be indexed
    files: int = 0
    read: int = 0  # files read (the others cost a stat)
    unchanged: int = 0
    changed: int = 0
    embedded: int = 0
    reused: int = 0
    deleted: int = 0
    sources_removed: int = 0
    manifest: bool = False  # every run made trusted the manifest
    seconds: float = 0.0

    def add(self, paths: list[str], report: IndexReport) -> None:
        self.manifest = report.manifest and (self.manifest or not self.runs)
        self.runs += 1
        self.roots.extend(paths)
        self.failed.extend(report.failed)
        for name in ("files", "read", "unchanged", "changed", "embedded", "reused", "deleted", "sources_removed"):
            setattr(self, name, getattr(self, name) + getattr(report, name))

    def warning(self) -> str | None:
        """One line for the user when something went wrong, else None."""
        if self.errors:
            more = f" (and {len(self.errors) - 1} more)" if len(self.errors) > 1 else ""
            return one_line(f"sync failed: {self.errors[0]}{more}")
        if self.failed:
            n = len(self.failed)
            path, reason = self.failed[0]
            first = f"{path}: {reason}" if path else reason
            return one_line(
                f"sync: {n} path{'' if n == 1 else 's'} could not be indexed ({first}{', …' if n > 1 else ''})"
            )
        if self.skipped:
            return one_line(f"sync skipped: {self.skipped}")
        return None

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["failed"] = [{"path": p, "reason": r} for p, r in self.failed]
        data["seconds"] = round(self.seconds, 4)
        status = "synced" if self.runs else "failed" if self.errors else "skipped"
        return {"status": status, **data}


async def sync(ms: MemSearch) -> SyncReport:
    """Replay the recorded index runs of *ms*'s collection; never raises an ``Exception``."""
    started = time.perf_counter()
    report = SyncReport()
    try:
        await _sync(ms, report)
    except Exception as exc:  # noqa: BLE001 - reported: a sync never fails the search after it
        report.errors.append(describe(exc))
    report.seconds = time.perf_counter() - started
    return report


async def _sync(ms: MemSearch, report: SyncReport) -> None:
    import asyncio

    from memsearch_fast.index.watch_lock import WatchLock, lock_base

    record = await asyncio.to_thread(load, ms.uri, ms.collection)
    if record is None or not record.runs:
        report.skipped = (
            f"no indexed paths recorded for collection '{ms.collection}' (index them once with 'memsearch index PATH')"
        )
        return
    if not await asyncio.to_thread(ms.collection_exists):
        report.skipped = f"collection '{ms.collection}' does not exist"
        return
    store, provider = await asyncio.to_thread(lambda: (ms.store, ms.provider))
    if record.identity and record.identity != await asyncio.to_thread(store.collection_id):
        report.skipped = "the collection was re-created since its paths were indexed"
        return
    model = str(provider.model_name)
    for run in record.runs:
        if run.model != model:
            report.errors.append(f"{', '.join(run.paths)} were indexed with model {run.model}, not {model}")
            continue
        if WatchLock(lock_base(ms.uri, ms.collection, run.paths)).held():
            report.watched.extend(run.paths)
            continue
        present = [p for p in run.paths if not _missing(p)]
        report.missing.extend(p for p in run.paths if p not in present)
        if not present:
            continue
        try:
            done = await ms.index_paths(
                present,
                ignore_files=run.ignore_files,
                exclude=run.exclude,
                max_chunk_size=run.max_chunk_size,
                overlap_lines=run.overlap_lines,
                manifest=_NoWait.for_store(ms.uri, ms.collection),
            )
        except _Busy:
            report.busy = True
            return  # the collection is being indexed: the other runs would wait too
        except Exception as exc:  # noqa: BLE001 - reported; the other recorded runs still sync
            report.errors.append(describe(exc))
            continue
        report.add(present, done)


def _missing(path: str) -> bool:
    """Gone (an unreadable path is not missing: the scan reports it)."""
    try:
        os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return True
    except OSError:
        return False
    return False


class _Busy(Exception):
    """Another index run holds the collection's manifest lock."""


class _NoWait(Manifest):
    """The manifest, whose lock a sync takes only when it is free: a search
    never waits behind a long index run."""

    def acquire(self) -> None:
        import fcntl

        self.waited = False
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(self.lock_path, os.O_CREAT | os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise _Busy from None
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
