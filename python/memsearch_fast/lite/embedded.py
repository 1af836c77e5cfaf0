"""Embedded mode: the Lite engine inside this process, shared by its clients.

:func:`open_client` opens a database in this process and counts one user of
it; :func:`release` stops the engine when the last user closes. The logging
helpers keep the in-process engine's tracebacks off the terminal.
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
import threading
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from memsearch_fast.errors import StoreError, StoreUnavailableError, another_users_file, one_line
from memsearch_fast.lite.process import endpoint_open
from memsearch_fast.lite.sidecars import make_parent, writable_dir

_T = TypeVar("_T")

# Embedded Lite engines are per path and per process, shared by every client
# on that path: release one only when its last user closes.
_REFS: dict[str, int] = {}


_LOCK = threading.Lock()


def open_client(db_path: str, make_client: Callable[[str], _T]) -> _T:
    """``make_client(db_path)``, opening the database in this process; counts one user."""
    if not db_path.endswith(".db"):
        raise StoreError(f"embedded Milvus Lite needs a path ending in .db, got {db_path}")
    make_parent(db_path)
    _quiet_grpc_server()
    _quiet_lite_embedded()
    new = not os.path.lexists(db_path)
    started = False
    try:
        started = _start_engine(db_path)
        client = make_client(db_path)
    except Exception as exc:  # noqa: BLE001 - any failure to open means the database is unavailable here
        if started:  # the engine this attempt started must not hold the database
            _stop_engine(db_path)
        parent = os.path.dirname(db_path)
        why = (
            f"milvus-lite opens it in-process only where it can create its lock file, and {parent} is read-only "
            "for this user; unset MEMSEARCH_LITE_MODE to read it through a server"
            if not writable_dir(parent)
            else "is another process using it? unset MEMSEARCH_LITE_MODE to share it through a server"
        )
        planted = another_users_file(exc)
        if planted:
            raise StoreUnavailableError(planted) from None
        raise StoreUnavailableError(f"cannot open Milvus Lite database {db_path}: {one_line(exc)} ({why})") from None
    if new:
        _make_private(db_path)
    with _LOCK:
        _REFS[db_path] = _REFS.get(db_path, 0) + 1
    return client


def _start_engine(db_path: str, timeout: float = 60.0) -> bool:
    """Start milvus-lite 2.x's engine for ``db_path`` and wait until it listens;
    True when this call started it (False: already running in this process).

    pymilvus starts the engine itself but connects 0.5 s later, and its
    first RPC fails at once when the socket is not there yet: on a busy
    machine the engine takes longer than that to listen. Started here, the
    engine is the one pymilvus then finds and uses. An engine that cannot
    start (a held database) or exits ends the wait at once.
    """
    try:
        from milvus_lite.server_manager import server_manager_instance
    except ImportError:  # milvus-lite 3.x: no separate engine process
        return False
    key = str(Path(db_path).absolute().resolve())
    with _LOCK:
        if key in getattr(server_manager_instance, "_servers", {}):
            return False  # this process's engine: probing its lock here would release it (POSIX locks)
        _probe_lock(db_path)
        uri = server_manager_instance.start_and_get_uri(db_path)
    if not uri:
        # Not a second try through pymilvus: a failed start unlinks the lock
        # file its holder still holds, so a second start would succeed.
        raise StoreUnavailableError("Open local milvus failed")
    server = getattr(server_manager_instance, "_servers", {}).get(key)
    proc = getattr(server, "_p", None)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and (proc is None or proc.poll() is None):
        if endpoint_open(uri, timeout=0.2):
            break
        time.sleep(0.02)
    return True


def _probe_lock(db_path: str) -> None:
    """Refuse a database another process's engine holds, before milvus-lite tries:
    its failed start deletes the holder's lock file, and the next opener would
    then take a fresh one and open the database a second time."""
    import fcntl

    path = os.path.join(os.path.dirname(db_path), f".{os.path.basename(db_path)}.lock")
    try:
        fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return  # none yet (nobody holds it), or not ours to open: the start says why
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        raise StoreUnavailableError(f"{db_path} is open in another process") from None
    finally:
        os.close(fd)  # also drops the probe's lock


def _make_private(db_path: str) -> None:
    """Tighten a database the engine has just created in this process: a 2.x
    file to 0600 (its journals take the file's mode), a 3.x directory to 0700.

    A shared server creates it under umask 077 instead; the process umask is
    not changed here because it is process-wide and other threads may be
    creating files.
    """
    with contextlib.suppress(OSError):
        st = os.lstat(db_path)
        if stat.S_ISREG(st.st_mode):
            os.chmod(db_path, 0o600)
        elif stat.S_ISDIR(st.st_mode):
            os.chmod(db_path, 0o700)


def release(db_path: str) -> None:
    """One user of ``db_path`` closed its client: stop the engine if it was the last.

    Stopping it at once releases the database lock now rather than at
    interpreter exit.
    """
    with _LOCK:
        left = _REFS.get(db_path, 1) - 1
        if left > 0:
            _REFS[db_path] = left
            return
        _REFS.pop(db_path, None)
    _stop_engine(db_path)


def _stop_engine(db_path: str) -> None:
    with contextlib.suppress(Exception):  # an engine already gone, or a milvus-lite without the manager
        from milvus_lite.server_manager import server_manager_instance

        if str(Path(db_path).absolute().resolve()) in getattr(server_manager_instance, "_servers", {}):
            server_manager_instance.release_server(db_path)


def drop_unimplemented(record: logging.LogRecord) -> bool:
    """Logging filter hiding grpc's traceback for RPCs Milvus Lite does not implement.

    pymilvus probes optional RPCs (e.g. AllocTimestamp for iterators) and
    falls back; the in-process gRPC server would print a traceback for each.
    """
    exc = record.exc_info[1] if record.exc_info else None
    return not isinstance(exc, NotImplementedError)


def _quiet_grpc_server() -> None:
    log = logging.getLogger("grpc._server")
    if drop_unimplemented not in log.filters:
        log.addFilter(drop_unimplemented)


def _quiet_lite_embedded() -> None:
    """Silence the in-process engine's tracebacks (held database, failed request).

    Each failure reaches the store as an error it reports in one line; in
    server mode the same logs go to the server's log file instead.
    """
    log = logging.getLogger("milvus_lite")
    if log.level == logging.NOTSET:
        log.setLevel(logging.CRITICAL)
    # milvus-lite 2.x's import warns about pkg_resources: noise on the terminal, not a problem of ours.
    warnings.filterwarnings("ignore", message="pkg_resources is deprecated", category=UserWarning)
