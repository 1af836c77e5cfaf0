"""Where a database's server lives: settings, socket paths, the record and the broker lock."""

from __future__ import annotations

import contextlib
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


SERVER_MARK = "memsearch_fast.lite.server"


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


def _socket_dirs() -> list[Path]:
    """Where sockets may live: the temp dir, else /tmp when that path is too long.

    Not ``$XDG_RUNTIME_DIR``: it is removed at the last logout while a server
    kept busy by ``watch`` lives on.
    """
    dirs = [Path(tempfile.gettempdir()) / f"memsearch-{os.geteuid()}", Path("/tmp") / f"memsearch-{os.geteuid()}"]
    return list(dict.fromkeys(dirs))


def _private_dir(d: Path) -> Path:
    """Create or check ``d`` as a 0700 directory of this user (not a symlink)."""
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
    raise StoreUnavailableError(f"no private directory for the Milvus Lite server's socket: {problem}")


def socket_file(address: str | None) -> str | None:
    """The socket path of a ``unix:/path`` address; None for ``host:port``."""
    return address[len("unix:") :] if address and address.startswith("unix:") else None


def own_socket(address: str | None) -> str | None:
    """The path of ``address`` when it is a socket in one of our socket dirs
    (only those may be removed on a dead server's behalf)."""
    sock = socket_file(address)
    if sock is None:
        return None
    path = Path(sock)
    ours = path.suffix == ".sock" and path.parent in _socket_dirs()
    return sock if ours else None


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


def sidecar_paths(db_path: str) -> dict[str, str]:
    """Files kept beside the database: broker lock, server record, server log."""
    return {"lock": db_path + ".lock", "state": db_path + ".server.json", "log": db_path + ".server.log"}


def check_layout(db_path: str) -> None:
    """Refuse a database written by the other Milvus Lite generation, with advice."""
    major = milvus_lite_major()
    if major is None:
        raise StoreUnavailableError("milvus-lite is not installed; install it or use a Milvus server URI")
    p = Path(db_path)
    if major >= 3 and p.is_file():
        raise StoreError(
            f"{db_path} is a Milvus Lite 2.x database file but milvus-lite {major}.x is installed; "
            "move it aside and run 'memsearch index', or install milvus-lite<3"
        )
    if major < 3 and p.is_dir():
        raise StoreError(
            f"{db_path} is a Milvus Lite 3.x database directory but milvus-lite {major}.x is installed; "
            "move it aside and run 'memsearch index', or install milvus-lite>=3"
        )


@contextlib.contextmanager
def flock(path: str, timeout: float) -> Iterator[None]:
    """Exclusive advisory lock on ``path``, waiting at most ``timeout`` seconds."""
    import fcntl

    fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o644)
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


def read_state(db_path: str) -> dict[str, Any] | None:
    """The recorded server for ``db_path`` (may be stale), or None."""
    try:
        with open(sidecar_paths(db_path)["state"], encoding="utf-8") as f:
            data = json.load(f)
        return data if isinstance(data, dict) else None
    except (OSError, ValueError):
        return None


def write_state(db_path: str, data: dict[str, Any]) -> None:
    """Atomically replace the server record."""
    target = sidecar_paths(db_path)["state"]
    tmp = f"{target}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(data, f)
    os.replace(tmp, target)


def remove_state_if(db_path: str, pid: int) -> None:
    st = read_state(db_path)
    if st is not None and st.get("pid") == pid:
        with contextlib.suppress(OSError):
            os.unlink(sidecar_paths(db_path)["state"])
