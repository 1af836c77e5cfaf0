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
manifest, so the next run is a full one.

One writer per collection: ``<manifest>.lock`` is the collection's writer
lock. An index or watch run holds an exclusive ``flock`` on it from load to
save (``memsearch index`` from before its scan: :meth:`Manifest.writer`), so
two runs on one collection never interleave; the holder writes its pid into
the file, and a run that has to wait says whose run it waits for. Readers
(search, expand, stats) never take it. The kernel releases the lock of a
process that dies, so a killed writer never blocks the next one.

Each entry also lists its chunks as packed (content-hash prefix, chunk id)
pairs, 16 bytes a chunk: the content-addressed index that lets a renamed,
moved or copied file reuse stored vectors (:mod:`.donors`).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import logging
import os
from collections.abc import Callable, Iterable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from memsearch_fast._core import join_records
from memsearch_fast._os import locked, open_private, write_atomic

logger = logging.getLogger(__name__)

#: Where the manifest of a collection on a Milvus server lives (a local
#: database keeps its manifests beside the database file).
DEFAULT_MANIFEST_DIR = "~/.memsearch/manifests"

FORMAT = 1

#: One packed chunk record: 8 bytes of content hash, then the 8-byte chunk id.
RECORD = 16

#: The last manifest this process read or wrote, by path, with the stamp of the file
#: it read or left: a long-lived process (the service, ``watch``) takes it again
#: without reading the file while that is the one it left (at 1 GB of journals the
#: read is 0.35-0.57 s of an edit's run). Its entries are never changed in place.
_LAST: dict[Path, tuple[tuple[int, ...], dict[str, Any], Loaded]] = {}


def _stamp(st: os.stat_result) -> tuple[int, ...]:
    """What changes with every write of a file: a save renames a new one in place."""
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


#: Writer locks this flow of control holds through :meth:`Manifest.writer`
#: (copied into the tasks and threads it starts): a run inside it does not
#: lock again, which would wait for itself.
_HELD: ContextVar[frozenset[str]] = ContextVar("memsearch_writer_locks", default=frozenset())


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
    #: The inode and status-change time: two files swapped by renames keep
    #: their sizes and mtimes, not these (0 / 0.0: unknown, from an older manifest).
    ino: int = 0
    ctime: float = 0.0
    #: The entry as the file lists it, once known: a save writes every entry, and at
    #: 1 GB of journals building 97,000 unchanged lists again took 0.15-0.26 s.
    listed: list[Any] | None = field(default=None, compare=False, repr=False)

    @classmethod
    def unknown(cls, chunks: bytes | str = b"") -> Entry:
        return cls(-1, None, "", chunks)

    def same_stat(self, size: int, mtime: float, ino: int = 0, ctime: float = 0.0) -> bool:
        return (
            self.mtime is not None
            and self.size == size
            and self.mtime == mtime
            and self.ino == ino
            and self.ctime == ctime
        )

    def packed(self) -> bytes:
        if isinstance(self.chunks, str):
            try:
                raw = base64.b64decode(self.chunks, validate=True)
            except ValueError:
                return b""
            return raw if len(raw) % RECORD == 0 else b""
        return self.chunks

    def as_list(self) -> list[Any]:
        """The entry as the manifest file lists it (never changed once made)."""
        if self.listed is None:
            chunks = self.chunks if isinstance(self.chunks, str) else base64.b64encode(self.chunks).decode("ascii")
            self.listed = [self.size, self.mtime, self.fingerprint, chunks, self.ino, self.ctime]
        return self.listed

    def recorded_ids(self) -> bytes | None:
        """The 8-byte ids of the rows the file's last run left, concatenated; None
        when the entry does not know them (unknown, or records that do not decode)."""
        raw = self.packed()
        if self.size < 0 or (self.chunks and not raw):
            return None
        return b"".join(raw[i + RECORD // 2 : i + RECORD] for i in range(0, len(raw), RECORD))


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


def saved_copy_path(manifest: Path) -> Path:
    """``<db>.copy-<key>.npz`` beside ``<db>.manifest-<key>.json``: the in-memory
    copy a search service saved for the next process (:mod:`memsearch_fast.store.copy.saved`)."""
    name = manifest.name.replace(".manifest-", ".copy-", 1)
    return manifest.with_name(name.removesuffix(".json") + ".npz")


def pack(pairs: Iterable[tuple[str, str]]) -> bytes:
    """(content hash, chunk id) hex pairs → packed records (ids of another form are left out)."""
    return b"".join(bytes.fromhex(h[:16]) + bytes.fromhex(cid) for h, cid in pairs if len(cid) == 16)


def records_of(entries: Iterable[Entry]) -> bytes:
    """The packed records of many entries, joined as :meth:`Entry.packed` gives
    each: one call into the core (a loop over 97,000 entries took 0.17 s at 1 GB)."""
    return join_records([e.chunks for e in entries], RECORD)


class Manifest:
    """The manifest file of one collection, its lock, and its (re)writing."""

    def __init__(self, path: str | os.PathLike[str], *, label: str = "", database: str | None = None) -> None:
        self.path = Path(path)
        self.lock_path = self.path.with_name(self.path.name + ".lock")
        self._tmp = self.path.with_name(f".{self.path.name}.tmp")
        self._fd: int | None = None
        #: What the lock guards, for the waiting message ("collection 'x' of /path/m.db").
        self.label = label or str(self.path)
        #: The local database beside which the manifest lives (None for a server URI).
        self.database = database
        #: Receives the one-line waiting message (None: logged as a warning).
        self.on_wait: Callable[[str], None] | None = None
        #: Whether the last :meth:`acquire` had to wait for another writer.
        self.waited = False

    @classmethod
    def for_store(cls, uri: str, collection: str, on_wait: Callable[[str], None] | None = None) -> Manifest:
        from memsearch_fast.store.compat import is_local_uri

        local = is_local_uri(uri)
        database = str(Path(uri).expanduser().resolve()) if local else None
        manifest = cls(
            manifest_path(uri, collection), label=f"collection '{collection}' of {database or uri}", database=database
        )
        manifest.on_wait = on_wait
        return manifest

    def acquire(self) -> None:
        """Take the collection's writer lock; blocks while another run holds it,
        after saying once whose run that is (the kernel releases the lock of a
        process that dies). A no-op inside :meth:`writer` of the same lock.
        A local database this user cannot write is refused here, in one line."""
        import fcntl

        self.waited = False
        if self.held():
            return
        self._make_dir()
        if self.database is not None:
            from memsearch_fast.lite.sidecars import check_writable

            check_writable(self.database)  # a read-only database: one line before any work
        try:
            fd = os.open(self.lock_path, os.O_CREAT | os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            from memsearch_fast.errors import StoreUnavailableError, another_users_file, one_line

            raise StoreUnavailableError(
                another_users_file(exc)
                or f"cannot open the writer lock {self.lock_path}: {one_line(exc.strerror or exc)}"
            ) from None
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                self.waited = True
                self._say_waiting(_holder(fd))
                fcntl.flock(fd, fcntl.LOCK_EX)
            _record_holder(fd)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd

    def _make_dir(self) -> None:
        if self.database is not None:
            from memsearch_fast.lite.sidecars import make_parent

            make_parent(self.database)  # a parent that is a file: one clear line, not "[Errno 17]"
        else:
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)

    def _say_waiting(self, pid: int | None) -> None:
        who = f"pid {pid}" if pid else "another process"
        line = f"another index run ({who}) is writing {self.label}; waiting for it to finish (searches are not blocked)"
        if self.on_wait is not None:
            self.on_wait(line)
        else:
            logger.warning("%s", line)

    def held(self) -> bool:
        """Whether the caller's context holds this writer lock (inside :meth:`writer`)."""
        return str(self.lock_path) in _HELD.get()

    def writer_running(self) -> bool:
        """Whether an index or watch run holds the writer lock now (for readers
        that must not trust the store mid-run). The probe is a shared lock taken
        and dropped at once; a run starting in that instant just waits for it."""
        if os.name != "posix":  # no flock: the manifest's presence is the only sign
            return False

        def existing(path: str) -> int:
            return os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)

        try:
            with locked(self.lock_path, timeout=0, shared=True, opener=existing):
                return False
        except FileNotFoundError:
            return False
        except OSError:
            return True  # held (TimeoutError), or cannot tell: assume a run

    async def acquire_in_thread(self) -> None:
        """:meth:`acquire` in a thread, for an event loop (it may wait for another
        writer). A run cancelled meanwhile (a long-lived process's client gone)
        must not keep the lock that thread takes later: it is let go once taken."""
        import asyncio

        taking = asyncio.ensure_future(asyncio.to_thread(self.acquire))
        try:
            await asyncio.shield(taking)
        except asyncio.CancelledError:
            taking.add_done_callback(lambda f: None if f.cancelled() or f.exception() else self.release())
            raise

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)

    @contextlib.contextmanager
    def writer(self) -> Iterator[Manifest]:
        """Hold the writer lock for a whole run, scan included: a run that
        waited then sees the files as the previous writer left them. Runs
        started inside (``run_index``) do not lock again."""
        self.acquire()
        token = _HELD.set(_HELD.get() | {str(self.lock_path)})
        try:
            yield self
        finally:
            _HELD.reset(token)
            self.release()

    def load(self, header: Header) -> Loaded | None:
        """The entries when the file exists, parses and matches ``header``; else None."""
        try:
            # Never a link, nor another user's file (a shared sticky directory): ignored.
            fd = open_private(self.path, os.O_RDONLY, single_link=False)
        except FileNotFoundError:
            return None
        except OSError as exc:
            logger.info("manifest %s unreadable (%s): full run", self.path, exc.strerror or exc)
            return None
        try:
            with os.fdopen(fd, "rb") as f:
                stamp = _stamp(os.fstat(f.fileno()))
                last = _LAST.get(self.path)
                if last is not None and last[0] == stamp and last[1] == header.as_dict():
                    return Loaded(last[2].rows, dict(last[2].entries))
                data = orjson.loads(f.read())
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
        loaded = Loaded(rows, entries)
        _LAST[self.path] = (stamp, header.as_dict(), Loaded(rows, dict(entries)))
        return loaded

    def invalidate(self) -> None:
        """Remove the manifest: the store is about to change, and a run killed
        before it writes a new one must leave none behind."""
        _LAST.pop(self.path, None)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)

    def save(self, header: Header, rows: int, entries: dict[str, Entry]) -> None:
        """Write the manifest atomically: temp file (0600, O_EXCL, no symlink), fsync, rename."""
        files = {path: entries[path].as_list() for path in sorted(entries)}
        # orjson: 0.03 s where json took 0.35 s for 97,000 files (1 GB of journals), the
        # same bytes; each watch event writes the whole manifest.
        body = orjson.dumps({**header.as_dict(), "rows": rows, "files": files})
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        # A temp file left by a run killed while saving is removed first (we hold the lock).
        _LAST.pop(self.path, None)
        write_atomic(self.path, body, temp=self._tmp)
        with contextlib.suppress(OSError):
            _LAST[self.path] = (_stamp(os.lstat(self.path)), header.as_dict(), Loaded(rows, dict(entries)))


def _holder(fd: int) -> int | None:
    """The pid the holder of the lock wrote into it (None when unknown)."""
    try:
        raw = os.pread(fd, 32, 0)
    except OSError:
        return None
    text = raw.decode("ascii", "replace").strip()
    return int(text) if text.isdigit() and int(text) > 0 else None


def _record_holder(fd: int) -> None:
    """Write our pid into the lock file we now hold (for a waiter's message)."""
    with contextlib.suppress(OSError):
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)


def _entry(raw: Any) -> Entry | None:
    """An entry from its JSON list, or None when malformed: exact types (JSON gives no
    subclasses, and a bool is no int), checked in one pass (97,000 entries at 1 GB)."""
    if type(raw) is not list or len(raw) not in (4, 6):
        return None
    size, mtime, fingerprint, chunks = raw[:4]
    ino, ctime = raw[4:] if len(raw) == 6 else (0, 0.0)
    if (
        type(size) is not int
        or type(ino) is not int
        or type(fingerprint) is not str
        or type(chunks) is not str
        or (mtime is not None and type(mtime) is not float and type(mtime) is not int)
        or not isinstance(ctime, (int, float))
    ):
        return None
    listed = raw if len(raw) == 6 else None  # as a save would write it again
    return Entry(size, None if mtime is None else float(mtime), fingerprint, chunks, ino, float(ctime), listed)
