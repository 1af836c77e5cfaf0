"""The record of a collection's index runs, which lazy sync replays: one entry per
path set (:data:`MAX_RUNS` at most, the latest first) in ``<manifest>.roots.json``.

A run replaces the entry of the same paths, and the entries of overlapping
paths indexed with other settings: replaying both would undo each other on
every search. The file is read ignoring anything malformed, and replaced
atomically under a lock held for microseconds.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from memsearch_fast._os import locked, open_private, write_atomic
from memsearch_fast.store.manifest import manifest_path

logger = logging.getLogger(__name__)

FORMAT = 1
#: Path sets kept in a record (the most recently indexed first).
MAX_RUNS = 16


@dataclass
class Recorded:
    """The paths of one index run and the settings they were indexed with."""

    paths: list[str]
    ignore_files: list[str]
    exclude: list[str]
    max_chunk_size: int
    overlap_lines: int
    model: str

    def settings(self) -> tuple[Any, ...]:
        return (sorted(self.ignore_files), sorted(self.exclude), self.max_chunk_size, self.overlap_lines, self.model)


@dataclass
class Record:
    """The recorded runs of one collection; ``identity`` is its engine id ("" where none is reported)."""

    collection: str
    identity: str
    runs: list[Recorded]


def record_path(uri: str, collection: str) -> Path:
    """Beside the collection's manifest: ``<db>.manifest-<key>.roots.json`` for a local database."""
    manifest = manifest_path(uri, collection)
    return manifest.with_name(f"{manifest.stem}.roots.json")


def load(uri: str, collection: str) -> Record | None:
    """The record, or None when missing, unreadable or malformed."""
    return _read(record_path(uri, collection), collection)


def forget(uri: str, collection: str) -> None:
    """Drop the record (the collection was dropped)."""
    path = record_path(uri, collection)
    with contextlib.suppress(OSError), _locked(path):
        os.unlink(path)


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """An exclusive lock on ``<record>.lock`` for a read-modify-write (held for microseconds)."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    with locked(path.with_name(path.name + ".lock")):
        yield


def _inside(path: str, root: str) -> bool:
    return path.startswith(os.path.join(root, ""))


def _overlap(a: list[str], b: list[str]) -> bool:
    return any(x == y or _inside(x, y) or _inside(y, x) for x in a for y in b)


def update(path: Path, collection: str, identity: str, run: Recorded) -> None:
    """Put *run* first in the record, replacing the runs it supersedes."""
    with _locked(path):
        old = _read(path, collection)
        kept = old.runs if old is not None and old.identity == identity else []
        kept = [
            r
            for r in kept
            if sorted(r.paths) != sorted(run.paths)
            and not (_overlap(r.paths, run.paths) and r.settings() != run.settings())
        ]
        runs = [run, *kept][:MAX_RUNS]
        if old is not None and old.identity == identity and old.runs == runs:
            return  # the same runs in the same order (every watch run lands here)
        _write(path, Record(collection, identity, runs))


def _read(path: Path, collection: str) -> Record | None:
    try:
        # Never a link, nor another user's file (a shared sticky directory): ignored.
        fd = open_private(path, os.O_RDONLY, single_link=False)
        with os.fdopen(fd, "rb") as f:
            data = json.loads(f.read())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        logger.info("sync record %s unreadable (%s): ignored", path, exc)
        return None
    if not isinstance(data, dict) or data.get("format") != FORMAT or data.get("collection") != collection:
        return None
    identity, raw_runs = data.get("identity"), data.get("runs")
    if not isinstance(identity, str) or not isinstance(raw_runs, list):
        return None
    runs = [r for r in map(_run, raw_runs) if r is not None]
    return Record(collection, identity, runs)


def _strings(value: Any) -> list[str] | None:
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return list(value)
    return None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _run(raw: Any) -> Recorded | None:
    if not isinstance(raw, dict):
        return None
    paths, ignore_files, exclude = (
        _strings(raw.get("paths")),
        _strings(raw.get("ignore_files")),
        _strings(raw.get("exclude")),
    )
    size, overlap, model = _int(raw.get("max_chunk_size")), _int(raw.get("overlap_lines")), raw.get("model")
    if not paths or ignore_files is None or exclude is None or size is None or overlap is None:
        return None
    if not isinstance(model, str) or not all(os.path.isabs(p) for p in paths):
        return None
    return Recorded(paths, ignore_files, exclude, size, overlap, model)


def _write(path: Path, record: Record) -> None:
    """Atomically: temp file (0600, O_EXCL, no symlink), fsync, rename."""
    # ASCII with \u escapes: a path that is not UTF-8 (surrogate escapes) round-trips.
    body = json.dumps({"format": FORMAT, **asdict(record)}, separators=(",", ":"))
    write_atomic(path, body.encode("ascii"))
