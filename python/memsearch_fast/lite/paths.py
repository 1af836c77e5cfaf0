"""Where a database's server lives: settings, socket paths, the record and the broker lock."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import logging
import os
import stat
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from memsearch_fast.errors import StoreError, StoreUnavailableError, one_line
from memsearch_fast.lite.version import milvus_lite_major

logger = logging.getLogger(__name__)


ENV_MODE = "MEMSEARCH_LITE_MODE"


ENV_IDLE = "MEMSEARCH_LITE_IDLE_TIMEOUT"


ENV_START = "MEMSEARCH_LITE_START_TIMEOUT"


DEFAULT_IDLE_TIMEOUT = 600.0


DEFAULT_START_TIMEOUT = 120.0


HOST = "127.0.0.1"


SERVER_MARK = "memsearch_fast.serve.lite_main"
#: The module earlier versions started servers as: such a server, still running
#: after an upgrade, is recognised as ours.
SERVER_MARKS = (SERVER_MARK, "memsearch_fast.lite.server")


def lite_mode() -> str:
    """``server`` (shared through one process) or ``embedded`` (in this process)."""
    mode = os.environ.get(ENV_MODE, "").strip().lower()
    if mode in ("server", "embedded"):
        return mode
    if mode:
        logger.warning("ignoring %s=%r (expected 'server' or 'embedded')", ENV_MODE, mode)
    return "server" if os.name == "posix" else "embedded"


def env_seconds(name: str, default: float) -> float:
    try:
        value = float(os.environ.get(name, default))
    except ValueError:
        return default
    return value if value > 0 else default


def idle_timeout() -> float:
    return env_seconds(ENV_IDLE, DEFAULT_IDLE_TIMEOUT)


#: The system's shared temp dir, tried when ``$TMPDIR`` makes socket paths too long.
SHARED_TMP = Path("/tmp")


def _socket_dirs() -> list[Path]:
    """Where sockets may live: the temp dir, else /tmp when that path is too long,
    else ``~/.memsearch/run``.

    Not ``$XDG_RUNTIME_DIR``: it is removed at the last logout while a server
    kept busy by ``watch`` lives on.
    """
    uid = os.geteuid()
    dirs = [Path(tempfile.gettempdir()) / f"memsearch-{uid}", SHARED_TMP / f"memsearch-{uid}"]
    # Another local user may have created memsearch-<uid> in the shared temp dir
    # first: then the user's own home serves (found again through the server record).
    dirs.append(Path(os.path.expanduser("~")) / ".memsearch" / "run")
    return list(dict.fromkeys(dirs))


_WAY_OUT = " (set TMPDIR to a private directory, or MEMSEARCH_LITE_MODE=embedded to run without a server)"


def _private_dir(d: Path) -> Path:
    """Create or check ``d`` as a 0700 directory of this user (not a symlink)."""
    if d.name == "run":
        d.parent.mkdir(mode=0o700, exist_ok=True)
    d.mkdir(mode=0o700, exist_ok=True)
    st = os.lstat(d)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
        raise OSError(f"{d} is not a directory owned by this user")
    if stat.S_IMODE(st.st_mode) != 0o700:
        os.chmod(d, 0o700)
    return d


def socket_dir() -> Path:
    """A directory only this user can enter, for the servers' sockets.

    A socket's own mode is not a reliable guard on every system; a 0700
    directory is, so no other local user can reach a database through it.
    """
    return Path(socket_path("", 0)).parent


def socket_path(db_path: str, pid: int) -> str:
    """The unix socket of server ``pid`` for ``db_path``.

    Named per server instance, so a server on its way out can never remove
    the socket of its successor; sun_path holds ~107 bytes, so long temp
    dirs fall back to /tmp.
    """
    name = f"{hashlib.sha256(db_path.encode('utf-8', 'surrogateescape')).hexdigest()[:16]}-{pid}.sock"
    problem = ""
    for d in _socket_dirs():
        path = d / name
        if len(os.fsencode(path)) > 100:
            problem = f"{path} is too long for a unix socket"
            continue
        try:
            return str(_private_dir(d) / name)
        except OSError as exc:
            problem = one_line(exc)
    raise StoreUnavailableError(f"no private directory for the Milvus Lite server's socket: {problem}{_WAY_OUT}")


def search_socket(engine_socket: str) -> str:
    """The search service's socket beside a server's engine socket (``…/<hash>-<pid>.sock``)."""
    stem = engine_socket[: -len(".sock")] if engine_socket.endswith(".sock") else engine_socket
    return stem + "-search.sock"


def socket_file(address: str | None) -> str | None:
    """The socket path of a ``unix:/path`` address; None for ``host:port``."""
    return address[len("unix:") :] if address and address.startswith("unix:") else None


def address_uri(address: str) -> str:
    """pymilvus URI of a server address (``unix:/path`` or ``host:port``)."""
    return address if socket_file(address) else f"http://{address}"


def record_address(st: dict[str, Any]) -> str | None:
    """Where a recorded server listens (records of older versions name only a port)."""
    address = st.get("address")
    if isinstance(address, str):
        return address
    port = st.get("port")
    return f"{HOST}:{port}" if isinstance(port, int) else None


def writable_dir(path: str | Path) -> bool:
    """Whether this process may create files in the directory ``path`` (its
    effective user and capabilities; False on a read-only mount too)."""
    effective = os.access in os.supports_effective_ids
    return os.access(path, os.W_OK | os.X_OK, effective_ids=effective)


def runtime_dir() -> Path:
    """This user's private (0700) directory for the sockets, and for the
    sidecars of databases in a directory this user cannot write."""
    problem = ""
    for d in _socket_dirs():
        try:
            return _private_dir(d)
        except OSError as exc:
            problem = one_line(exc)
    raise StoreUnavailableError(f"no private directory for the Milvus Lite server's files: {problem}{_WAY_OUT}")


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


# Record files are a few hundred bytes; anything much larger is not a record.
_RECORD_LIMIT = 1 << 16


def _refuse(path: str, what: str) -> StoreUnavailableError:
    return StoreUnavailableError(f"{path} {what}; refusing to use it beside the database (remove it)")


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
        return f"belongs to another user (uid {st.st_uid})"
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
    """Refuse a database written by the other Milvus Lite generation, with advice;
    refuse a path that is no database at all (an empty file or directory) with
    what it is."""
    major = milvus_lite_major()
    if major is None:
        raise StoreUnavailableError("milvus-lite is not installed; install it or use a Milvus server URI")
    p = Path(db_path)
    if major >= 3 and p.is_file():
        if _is_sqlite(p):
            raise StoreError(
                f"{db_path} is a Milvus Lite 2.x database file but milvus-lite {major}.x is installed; "
                "move it aside and run 'memsearch index', or install milvus-lite<3"
            )
        raise StoreError(
            f"{db_path} is {'an empty file' if p.stat().st_size == 0 else 'a file'}, not a Milvus Lite database "
            f"(milvus-lite {major}.x keeps a database as a directory); remove it or choose another path"
        )
    if major < 3 and p.is_file() and _header(p) not in (None, b"", _SQLITE_HEADER):
        raise StoreError(
            f"{db_path} is not a Milvus Lite database (milvus-lite {major}.x keeps a database as one SQLite "
            "file, and this file is something else); choose another path"
        )
    if major < 3 and p.is_dir():
        if not any(p.iterdir()):
            raise StoreError(
                f"{db_path} is an empty directory, not a Milvus Lite database "
                f"(milvus-lite {major}.x keeps a database as one file); remove it or choose another path"
            )
        raise StoreError(
            f"{db_path} is a directory (a Milvus Lite 3.x database?) but milvus-lite {major}.x is installed; "
            "move it aside and run 'memsearch index', or install milvus-lite>=3"
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
    import fcntl

    fd = open_lock(path)
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise StoreUnavailableError(
                        f"timed out after {timeout:.0f}s waiting for {path} (another memsearch process is starting "
                        "the database server)"
                    ) from None
                time.sleep(0.02)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def database_id(db_path: str) -> list[int] | None:
    """The identity of the file (or 3.x directory) at ``db_path``: a server
    records the one it opened, so that a database removed or replaced under
    it (``rm`` to rebuild the index) is never served in its place."""
    try:
        st = os.stat(db_path)
    except OSError:
        return None
    return [st.st_dev, st.st_ino]


def serves_current_database(db_path: str, st: dict[str, Any]) -> bool:
    """Whether the database a server record names is still the one at ``db_path``
    (a record without an identity, from an older server, is taken at its word)."""
    recorded = st.get("db_id")
    if not isinstance(recorded, list):
        return True
    return database_id(db_path) == recorded


def read_state(db_path: str, *, beside: bool = False) -> dict[str, Any] | None:
    """The recorded server for ``db_path`` (may be stale or forged: see
    ``process.verify_server``), or None; ``beside``: the record beside the
    database, wherever :func:`sidecar_paths` puts it now.

    A record that is a symlink, not a regular file or not this user's is no
    record: the next server replaces it (``write_state`` renames over the name).
    """
    try:
        fd = open_sidecar(sidecar_paths(db_path, beside=beside)["state"], os.O_RDONLY)
    except (OSError, StoreError):
        return None
    try:
        with os.fdopen(fd, "rb") as f:
            raw = f.read(_RECORD_LIMIT + 1)
        data = json.loads(raw.decode("utf-8")) if len(raw) <= _RECORD_LIMIT else None
        return data if isinstance(data, dict) else None
    except (OSError, ValueError):
        return None


def write_state(db_path: str, data: dict[str, Any]) -> None:
    """Atomically replace the server record (0600).

    The temp file is created with ``O_EXCL | O_NOFOLLOW`` after removing any
    leftover of that name (a crashed writer's, or a planted link: ``unlink``
    never follows it), and renamed over the record, which replaces a link
    there rather than writing through it.
    """
    write_sidecar_json(sidecar_paths(db_path)["state"], data, what="the server record")


def write_sidecar_json(target: str, data: dict[str, Any], *, what: str = "") -> None:
    """Atomically replace the JSON file ``target`` beside a database (0600; see :func:`write_state`)."""
    tmp = f"{target}.{os.getpid()}.tmp"
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp)
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), 0o600)
    except OSError as exc:
        raise StoreUnavailableError(f"cannot write {what or target} {tmp}: {one_line(exc)}") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def remove_state_if(db_path: str, pid: int) -> None:
    st = read_state(db_path)
    if st is not None and st.get("pid") == pid:
        with contextlib.suppress(OSError):
            os.unlink(sidecar_paths(db_path)["state"])
