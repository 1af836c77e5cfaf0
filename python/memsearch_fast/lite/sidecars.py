"""Files beside a database (opened safely), checks of its directory and layout, and the broker lock."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import logging
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from memsearch_fast._os import locked, write_atomic
from memsearch_fast.errors import (
    StoreError,
    StoreUnavailableError,
    UnusableDatabaseError,
    another_users_file,
    one_line,
    others_file,
    user_name,
    way_on,
)
from memsearch_fast.lite.fallback import is_lite3_database
from memsearch_fast.lite.sockets import runtime_dir
from memsearch_fast.lite.version import milvus_lite_major

logger = logging.getLogger(__name__)


def writable_dir(path: str | Path) -> bool:
    """Whether this process may create files in the directory ``path`` (its
    effective user and capabilities; False on a read-only mount too)."""
    effective = os.access in os.supports_effective_ids
    return os.access(path, os.W_OK | os.X_OK, effective_ids=effective)


def sidecar_paths(db_path: str, *, beside: bool = False) -> dict[str, str]:
    """Files kept beside the database: broker lock, server record, server log,
    and the marker of a database found damaged (:mod:`.damage`).

    When this user cannot create files in the database's directory (a
    read-only directory or mount, another user's database), they live in
    :func:`runtime_dir` instead, named after a hash of the database's path:
    searches can then still start a server that reads the database. Every
    process of one user decides alike, as long as the directory's modes stay.
    ``beside`` gives the names beside the database whatever the directory's modes.
    """
    base = db_path
    if not beside and relocated(db_path):
        key = hashlib.sha256(db_path.encode("utf-8", "surrogateescape")).hexdigest()[:16]
        base = str(runtime_dir() / f"{key}-{os.path.basename(db_path)}")
    return {
        "lock": base + ".lock",
        "state": base + ".server.json",
        "log": base + ".server.log",
        "damaged": base + ".damaged",
    }


def relocated(db_path: str) -> bool:
    """Whether the sidecars of ``db_path`` live in :func:`runtime_dir` (see :func:`sidecar_paths`)."""
    parent = os.path.dirname(db_path)
    return os.path.isdir(parent) and not writable_dir(parent)


def check_writable(db_path: str) -> None:
    """Raise a one-line StoreError when this user cannot write the database
    (index, watch and reset write it and files beside it; readers need not)."""
    parent = Path(db_path).parent
    readers = "search, stats, expand and get can still read it"
    if parent.is_dir() and not writable_dir(parent):
        raise StoreError(f"cannot write {db_path}: its directory {parent} is read-only for this user ({readers})")
    effective = os.access in os.supports_effective_ids
    writable = writable_dir(db_path) if os.path.isdir(db_path) else os.access(db_path, os.W_OK, effective_ids=effective)
    if os.path.exists(db_path) and not writable:
        raise StoreError(f"cannot write {db_path}: the database is read-only for this user ({readers})")


def refuse_others(*paths: str) -> None:
    """Refuse, in one line with a way on, files beside the database that another
    user made (in a directory others can write): before a server fails on them."""
    for path in paths:
        with contextlib.suppress(FileNotFoundError):
            owner = os.lstat(path).st_uid
            if owner != os.geteuid():
                raise StoreUnavailableError(others_file(path, owner))


def _refuse(path: str, what: str) -> StoreUnavailableError:
    return StoreUnavailableError(f"{path} {what}; refusing to use it beside the database: {way_on(path)}")


def open_sidecar(path: str, flags: int, *, replace: bool = False) -> int:
    """Open a file beside the database: never through a symlink, only a regular
    file of this user, created 0600 (an existing one with wider modes is set to 0600).

    Anyone who can write the database's directory can plant links there, so
    ``O_NOFOLLOW`` keeps every open on the name itself, and ``O_NONBLOCK`` keeps
    a planted FIFO from blocking the open. A file that is not usable is
    refused with a one-line error naming it, or, with ``replace``, removed
    (``unlink`` removes a link, never its target) and created afresh with
    ``O_EXCL``; ``replace`` suits files whose content is disposable (the log).
    """
    base = flags | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    problem = ""
    try:
        fd = os.open(path, base, 0o600)
    except OSError as exc:
        if exc.errno not in (errno.ELOOP, errno.EMLINK, errno.ENXIO, errno.EISDIR):
            planted = another_users_file(exc)
            if planted:
                raise StoreUnavailableError(planted) from None
            raise
        problem = _kind(path)
    else:
        problem = _unusable(fd)
        if not problem:
            return _settle(fd)
        os.close(fd)
    if not replace:
        raise _refuse(path, problem)
    logger.warning("%s %s; replacing it", path, problem)
    try:
        os.unlink(path)
        fd = os.open(path, base | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError as exc:
        raise _refuse(path, f"{problem} and cannot be replaced ({one_line(exc)})") from None
    if _unusable(fd):
        os.close(fd)
        raise _refuse(path, "changed while it was being replaced")
    return _settle(fd)


def _kind(path: str) -> str:
    try:
        st = os.lstat(path)
    except OSError:
        return "cannot be opened safely"
    if stat.S_ISLNK(st.st_mode):
        return "is a symbolic link"
    return "is not a regular file"


def _unusable(fd: int) -> str:
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        return "is not a regular file"
    if st.st_uid != os.geteuid():
        return f"belongs to another user ({user_name(st.st_uid)})"
    return ""


def _settle(fd: int) -> int:
    """Clear ``O_NONBLOCK`` (the fd may become a child's stdout) and tighten the mode."""
    import fcntl

    fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    if stat.S_IMODE(os.fstat(fd).st_mode) & 0o077:
        os.fchmod(fd, 0o600)
    return fd


def make_parent(db_path: str) -> None:
    """Create the database's missing parent directories (the last one 0700).

    A parent that exists as a file is reported in one line instead of
    ``[Errno 17] File exists``, and so is a database that does not exist in a
    directory this user cannot write.
    """
    parent = Path(db_path).parent
    if check_parent(db_path):
        if not os.path.lexists(db_path) and not writable_dir(parent):
            raise StoreError(f"cannot create {db_path}: its directory {parent} is read-only for this user")
        return
    try:
        parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        raise StoreUnavailableError(f"cannot create the directory of {db_path}: {one_line(exc)}") from None


def check_parent(db_path: str) -> bool:
    """Whether the database's directory exists; raises a one-line StoreError
    when the nearest existing ancestor is a file (instead of ``[Errno 17]`` or
    ``[Errno 20]`` later)."""
    parent = Path(db_path).parent
    for p in (parent, *parent.parents):
        if os.path.lexists(p):
            if not p.is_dir():
                raise StoreError(f"cannot use {db_path}: {p} is a file, not a directory")
            return p == parent
    return False


def check_layout(db_path: str) -> None:
    """Refuse a database another user owns; refuse one written by the other Milvus
    Lite generation, with advice; refuse a path that is no database at all (an empty
    file or directory) with what it is. Each refusal is an
    :class:`UnusableDatabaseError` (final)."""
    major = milvus_lite_major()
    if major is None:
        raise StoreUnavailableError("milvus-lite is not installed; install it or use a Milvus server URI")
    p = Path(db_path)
    with contextlib.suppress(OSError):
        owner = p.stat().st_uid
        if owner != os.geteuid():
            # One made first in a shared directory by someone else: they could read what is
            # indexed into it and plant rows that come up in searches.
            way = "choose a database path of your own (the default is ~/.memsearch/milvus.db)"
            raise UnusableDatabaseError(others_file(db_path, owner, way))
    if major >= 3 and p.is_file():
        if _is_sqlite(p):
            raise UnusableDatabaseError(
                f"{db_path} is a Milvus Lite 2.x database file but milvus-lite {major}.x is installed; "
                "move it aside and run 'memsearch index', or install milvus-lite<3"
            )
        raise UnusableDatabaseError(
            f"{db_path} is {'an empty file' if p.stat().st_size == 0 else 'a file'}, not a Milvus Lite database "
            f"(milvus-lite {major}.x keeps a database as a directory); remove it or choose another path"
        )
    if major < 3 and p.is_file() and _header(p) not in (None, b"", _SQLITE_HEADER):
        raise UnusableDatabaseError(
            f"{db_path} is not a Milvus Lite database (milvus-lite {major}.x keeps a database as one SQLite "
            "file, and this file is something else); choose another path"
        )
    if major < 3 and p.is_dir():
        raise UnusableDatabaseError(_directory_refusal(db_path, major))


def _directory_refusal(db_path: str, major: int) -> str:
    """Why a directory cannot serve as a database for milvus-lite ``major``.x (< 3)."""
    p = Path(db_path)
    if not any(p.iterdir()):
        return (
            f"{db_path} is an empty directory, not a Milvus Lite database "
            f"(milvus-lite {major}.x keeps a database as one file); remove it or choose another path"
        )
    rebuild = "choose another --milvus-uri and run 'memsearch index PATH' to rebuild the index from your markdown"
    if is_lite3_database(p):
        return (
            f"{db_path} is a Milvus Lite 3.x database (memsearch 0.4.23 writes these) that the installed "
            f"milvus-lite {major}.x cannot open; memsearch-fast leaves it as it is: {rebuild}"
        )
    return (
        f"{db_path} is a directory, neither a Milvus Lite {major}.x database (one file) nor a 3.x one; "
        f"memsearch-fast leaves it as it is: {rebuild}"
    )


_SQLITE_HEADER = b"SQLite format 3\0"


def _header(p: Path) -> bytes | None:
    """The first 16 bytes of a file (None when it cannot be read)."""
    try:
        with open(p, "rb") as f:
            return f.read(16)
    except OSError:
        return None


def _is_sqlite(p: Path) -> bool:
    return _header(p) == _SQLITE_HEADER


def open_lock(path: str) -> int:
    """A lock file beside the database, for ``flock`` (which needs no write
    access: an existing lock file this user may only read serves as well)."""
    try:
        return open_sidecar(path, os.O_CREAT | os.O_RDWR)
    except PermissionError:
        return open_sidecar(path, os.O_RDONLY)


@contextlib.contextmanager
def flock(path: str, timeout: float) -> Iterator[None]:
    """Exclusive advisory lock on ``path``, waiting at most ``timeout`` seconds."""
    with contextlib.ExitStack() as held:
        try:
            held.enter_context(locked(path, timeout=timeout, opener=open_lock))
        except TimeoutError:
            raise StoreUnavailableError(
                f"timed out after {timeout:.0f}s waiting for {path} (another memsearch process is starting "
                "the database server)"
            ) from None
        yield


def write_sidecar_json(target: str, data: dict[str, Any], *, what: str = "") -> None:
    """Atomically replace the JSON file ``target`` beside a database (0600; see
    :func:`memsearch_fast.lite.state.write_state`)."""
    try:
        write_atomic(target, json.dumps(data).encode("utf-8"), temp=f"{target}.{os.getpid()}.tmp", fsync=False)
    except OSError as exc:
        raise StoreUnavailableError(
            another_users_file(exc) or f"cannot write {what or target}: {one_line(exc)}"
        ) from None
