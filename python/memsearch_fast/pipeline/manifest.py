"""The manifest of a collection: what each indexed file looked like when its rows were written.

A re-index reads only files whose size or mtime differ from their entry, and
diffs against the store only those whose xxh3 fingerprint then differs too;
an unchanged file is neither read nor looked up in Milvus. The store stays
the truth: the manifest is trusted only while its header matches the run
(format, model, chunk settings, collection identity) and the collection
still holds the row count recorded after the last run's flush. Anything else
— a missing, unreadable or foreign file, rows changed by another tool — means
"no manifest": a full run, which then writes a fresh one.

Crash safety: the file is removed before a run's first write to the store and
written again, atomically (temp file + rename, 0600, never through a
symlink), only after that run's flush; a run killed in between leaves no
manifest, so the next run is a full one. Runs that use a manifest hold an
exclusive ``flock`` on ``<manifest>.lock`` from load to save, so two runs on
one collection never interleave their updates.

Each entry also lists its chunks as packed (content-hash prefix, chunk id)
pairs, 16 bytes a chunk: the content-addressed index that lets a renamed,
moved or copied file reuse stored vectors (:mod:`.donors`).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memsearch_fast.config import DEFAULT_MANIFEST_DIR

logger = logging.getLogger(__name__)

FORMAT = 1

#: One packed chunk record: 8 bytes of content hash, then the 8-byte chunk id.
RECORD = 16


@dataclass(slots=True)
class Entry:
    """One file as last indexed.

    ``size`` -1 / ``fingerprint`` "" mean unknown (the file has rows but must
    be read and diffed against the store next time); ``mtime`` None means the
    stat cannot be trusted (recorded too close to a write), so the file is
    read again and compared by fingerprint.
    """

    size: int
    mtime: float | None
    fingerprint: str
    chunks: bytes | str = b""  # packed records; base64 text as loaded from disk

    @classmethod
    def unknown(cls, chunks: bytes | str = b"") -> Entry:
        return cls(-1, None, "", chunks)

    def same_stat(self, size: int, mtime: float) -> bool:
        return self.mtime is not None and self.size == size and self.mtime == mtime

    def packed(self) -> bytes:
        if isinstance(self.chunks, str):
            try:
                raw = base64.b64decode(self.chunks, validate=True)
            except ValueError:
                return b""
            return raw if len(raw) % RECORD == 0 else b""
        return self.chunks


@dataclass(slots=True)
class Header:
    """What a manifest must agree with to be trusted."""

    model: str
    max_chunk_size: int
    overlap_lines: int
    collection: str
    identity: str  # the collection's id where the engine reports one: a dropped and re-created one differs

    def as_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "model": self.model,
            "max_chunk_size": self.max_chunk_size,
            "overlap_lines": self.overlap_lines,
            "collection": self.collection,
            "identity": self.identity,
        }


@dataclass(slots=True)
class Loaded:
    """A manifest read from disk whose header matched; ``rows`` is still to be checked."""

    rows: int
    entries: dict[str, Entry]


def manifest_path(uri: str, collection: str) -> Path:
    """``<db>.manifest-<key>.json`` beside a local database, else under
    ``~/.memsearch/manifests/``; the key hashes the collection (and the URI
    of a server)."""
    from memsearch_fast.store.compat import is_local_uri

    if is_local_uri(uri):
        db = Path(uri).expanduser().resolve()
        key = hashlib.sha256(collection.encode("utf-8", "surrogateescape")).hexdigest()[:12]
        return db.parent / f"{db.name}.manifest-{key}.json"
    key = hashlib.sha256(f"{uri}\0{collection}".encode("utf-8", "surrogateescape")).hexdigest()[:16]
    return Path(os.path.expanduser(DEFAULT_MANIFEST_DIR)) / f"{key}.json"


def pack(pairs: Iterable[tuple[str, str]]) -> bytes:
    """(content hash, chunk id) hex pairs → packed records (ids of another form are left out)."""
    return b"".join(bytes.fromhex(h[:16]) + bytes.fromhex(cid) for h, cid in pairs if len(cid) == 16)


class Manifest:
    """The manifest file of one collection, its lock, and its (re)writing."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.lock_path = self.path.with_name(self.path.name + ".lock")
        self._tmp = self.path.with_name(f".{self.path.name}.tmp")
        self._fd: int | None = None

    @classmethod
    def for_store(cls, uri: str, collection: str) -> Manifest:
        return cls(manifest_path(uri, collection))

    def acquire(self) -> None:
        """Take the collection's index lock; blocks while another run holds it
        (the kernel releases the lock of a process that dies)."""
        import fcntl

        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(self.lock_path, os.O_CREAT | os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                logger.info("waiting for another index run on %s", self.path)
                fcntl.flock(fd, fcntl.LOCK_EX)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)

    def load(self, header: Header) -> Loaded | None:
        """The entries when the file exists, parses and matches ``header``; else None."""
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            return None
        except OSError as exc:
            logger.info("manifest %s unreadable (%s): full run", self.path, exc.strerror or exc)
            return None
        try:
            with os.fdopen(fd, "rb") as f:
                data = json.loads(f.read())
        except (OSError, ValueError) as exc:
            logger.info("manifest %s unreadable (%s): full run", self.path, exc)
            return None
        if not isinstance(data, dict) or any(data.get(k) != v for k, v in header.as_dict().items()):
            return None
        rows, files = data.get("rows"), data.get("files")
        if not isinstance(rows, int) or isinstance(rows, bool) or not isinstance(files, dict):
            return None
        entries: dict[str, Entry] = {}
        for path, raw in files.items():
            entry = _entry(raw)
            if entry is None:
                return None
            entries[path] = entry
        return Loaded(rows, entries)

    def invalidate(self) -> None:
        """Remove the manifest: the store is about to change, and a run killed
        before it writes a new one must leave none behind."""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)

    def save(self, header: Header, rows: int, entries: dict[str, Entry]) -> None:
        """Write the manifest atomically: temp file (0600, O_EXCL, no symlink), fsync, rename."""
        files: dict[str, list[Any]] = {}
        for path in sorted(entries):
            e = entries[path]
            chunks = e.chunks if isinstance(e.chunks, str) else base64.b64encode(e.chunks).decode("ascii")
            files[path] = [e.size, e.mtime, e.fingerprint, chunks]
        body = json.dumps({**header.as_dict(), "rows": rows, "files": files}, separators=(",", ":"))
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._tmp)  # left by a run killed while saving (we hold the lock)
        fd = os.open(self._tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(body.encode("utf-8"))
                f.flush()
                os.fsync(f.fileno())
            os.replace(self._tmp, self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(self._tmp)
            raise


def _entry(raw: Any) -> Entry | None:
    """An entry from its JSON list, or None when malformed."""
    if not isinstance(raw, list) or len(raw) != 4:
        return None
    size, mtime, fingerprint, chunks = raw
    if not isinstance(size, int) or isinstance(size, bool):
        return None
    if mtime is not None and (not isinstance(mtime, (int, float)) or isinstance(mtime, bool)):
        return None
    if not isinstance(fingerprint, str) or not isinstance(chunks, str):
        return None
    return Entry(size, None if mtime is None else float(mtime), fingerprint, chunks)
