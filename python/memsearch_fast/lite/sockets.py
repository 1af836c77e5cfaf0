"""Socket directories and names: private (0700) directories of this user, one socket per server."""

from __future__ import annotations

import hashlib
import os
import stat
import tempfile
from pathlib import Path

from memsearch_fast.errors import StoreUnavailableError, one_line

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
    name = _name(db_path, pid)
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


def _name(db_path: str, pid: int) -> str:
    return f"{hashlib.sha256(db_path.encode('utf-8', 'surrogateescape')).hexdigest()[:16]}-{pid}.sock"


def server_socket(db_path: str, pid: int, address: object) -> str:
    """The unix socket of server *pid* for *db_path*: the one its record's *address*
    names when that has the socket's name and lies in a private (0700) directory of
    this user, else where this process would put it (:func:`socket_path`).

    A server puts its socket under its own ``$TMPDIR``; a client started with
    another one (an MCP host passes none) looked under its own, found nothing, and
    took the live server for dead. The caller still checks who accepts on it.
    """
    path = socket_file(address) if isinstance(address, str) else None
    if path and os.path.basename(path) == _name(db_path, pid) and _is_private(Path(path).parent):
        return path
    return socket_path(db_path, pid)


def _is_private(d: Path) -> bool:
    try:
        st = os.lstat(d)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() and not stat.S_IMODE(st.st_mode) & 0o077


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
