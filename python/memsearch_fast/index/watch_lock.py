"""One watcher per database and root set.

The watcher holds an exclusive ``flock`` on a lock file for its whole life and
records its pid beside it. A second watcher finds the lock taken and reports
the holder; a killed watcher's lock is released by the kernel, so a stale
holder is replaced without any pid check. Files are created 0600 and never
through a symlink.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memsearch_fast._os import locked, write_atomic
from memsearch_fast.errors import MemsearchError, one_line


class WatchLockError(MemsearchError, OSError):
    """The watcher's lock file could not be created or opened."""


@dataclass
class Holder:
    """The watcher that holds a lock (as far as its record says)."""

    pid: int | None
    roots: list[str]
    started: float | None


def lock_base(uri: str, collection: str, roots: Sequence[str]) -> Path:
    """Where the lock and record of a watcher of ``roots`` on ``uri``/``collection`` live.

    Beside a local database (``<db>.watch-<key>``), else under
    ``~/.memsearch/watch/``. The key hashes the collection and the sorted
    roots, so another root set on the same database is another watcher.
    """
    from memsearch_fast.store.compat import is_local_uri

    # A local database by its real path: `~/m.db`, `./m.db` and `/home/u/m.db` are one
    # database, so one watcher (the database's service keys it this way too).
    db = Path(uri).expanduser().resolve() if is_local_uri(uri) else None
    key_src = "\0".join([str(db) if db is not None else uri, collection, *sorted(roots)])
    key = hashlib.sha256(key_src.encode("utf-8", "surrogateescape")).hexdigest()[:12]
    if db is not None:
        return db.parent / f"{db.name}.watch-{key}"
    return Path(os.path.expanduser("~")) / ".memsearch" / "watch" / key


def _open_private(path: Path, flags: int) -> int:
    try:
        return os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        raise WatchLockError(f"cannot open {path}: {one_line(exc.strerror or exc)}") from None


class WatchLock:
    """The exclusive lock of one watcher; :meth:`acquire` returns False when another holds it."""

    def __init__(self, base: Path) -> None:
        self.lock_path = base.with_name(base.name + ".lock")
        self.record_path = base.with_name(base.name + ".json")
        self._fd: int | None = None

    def acquire(self, roots: Sequence[str]) -> bool:
        import fcntl

        self.lock_path.parent.mkdir(parents=True, exist_ok=True)
        fd = _open_private(self.lock_path, os.O_CREAT | os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        self._fd = fd
        self._write_record({"pid": os.getpid(), "roots": list(roots), "started": time.time()})
        return True

    def held(self) -> bool:
        """Whether a live watcher holds the lock (tried, never kept)."""

        def existing(path: str) -> int:
            return os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)

        try:
            with locked(self.lock_path, timeout=0, opener=existing):
                return False
        except TimeoutError:
            return True
        except OSError:
            return False  # no lock file: no watcher ever ran here

    def _write_record(self, data: dict[str, Any]) -> None:
        tmp = self.record_path.with_name(f"{self.record_path.name}.{os.getpid()}.tmp")
        try:
            write_atomic(self.record_path, json.dumps(data).encode("utf-8"), temp=tmp, fsync=False)
        except OSError as exc:
            raise WatchLockError(f"cannot write {self.record_path}: {one_line(exc.strerror or exc)}") from None

    def holder(self) -> Holder:
        """The recorded holder (pid None when the record is missing or unreadable)."""
        try:
            fd = _open_private(self.record_path, os.O_RDONLY)
            with os.fdopen(fd, encoding="utf-8") as f:
                data = json.load(f)
        except (OSError, ValueError):
            return Holder(None, [], None)
        pid = data.get("pid") if isinstance(data, dict) else None
        roots = data.get("roots") if isinstance(data, dict) else None
        started = data.get("started") if isinstance(data, dict) else None
        return Holder(
            pid if isinstance(pid, int) else None,
            [r for r in roots if isinstance(r, str)] if isinstance(roots, list) else [],
            started if isinstance(started, (int, float)) else None,
        )

    def release(self) -> None:
        """Remove the record (if it is ours) and drop the lock."""
        if self._fd is None:
            return
        if self.holder().pid == os.getpid():
            with contextlib.suppress(OSError):
                os.unlink(self.record_path)
        os.close(self._fd)
        self._fd = None

    def __enter__(self) -> WatchLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
