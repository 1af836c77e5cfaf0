"""Client side: attach to the database's server, starting one when none answers."""

from __future__ import annotations

import contextlib
import logging
import os
import stat
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from memsearch_fast._os import pid_alive
from memsearch_fast.config import environment
from memsearch_fast.errors import DatabaseDamagedError, StoreUnavailableError, another_users_file, one_line
from memsearch_fast.lite import pk_index
from memsearch_fast.lite.process import (
    endpoint_open,
    is_engine_of,
    is_ours,
    log_tail,
    pid_uid,
    terminate,
    verify_server,
)
from memsearch_fast.lite.settings import (
    DEFAULT_START_TIMEOUT,
    ENV_MODE,
    ENV_START,
    SERVER_MARK,
    idle_timeout,
)
from memsearch_fast.lite.sidecars import flock, make_parent, open_sidecar, refuse_others, relocated, sidecar_paths
from memsearch_fast.lite.sockets import address_uri, search_socket, server_socket
from memsearch_fast.lite.state import read_state

logger = logging.getLogger(__name__)


_T = TypeVar("_T")


def server_status(db_path: str) -> dict[str, Any] | None:
    """The live server record for ``db_path``, or None when no verified server runs."""
    db_path = str(Path(db_path).expanduser().resolve())
    st = read_state(db_path)
    if st and st.get("status") == "ready" and verify_server(db_path, st)[0] is not None:
        return st
    return None


def attach(
    db_path: str, connect: Callable[[str], _T], *, start_timeout: float | None = None, tables: tuple[str, ...] = ()
) -> _T:
    """Connect to the server owning ``db_path``, starting one if needed.

    ``connect(uri)`` runs while the broker lock is held, so the server cannot
    reach its idle exit between being found and being connected to. A server
    started here makes the ``tables`` (collections) with a primary-key index
    when absent (:mod:`memsearch_fast.lite.pk_index`).
    """
    db_path = str(Path(db_path).expanduser().resolve())
    start_timeout = start_timeout or environment.number(ENV_START, DEFAULT_START_TIMEOUT)
    make_parent(db_path)
    try:
        return _attach_locked(db_path, connect, start_timeout, tables)
    except OSError as exc:
        raise StoreUnavailableError(
            another_users_file(exc) or f"cannot use Milvus Lite database {db_path}: {one_line(exc)}"
        ) from None


def _attach_locked(db_path: str, connect: Callable[[str], _T], start_timeout: float, tables: tuple[str, ...]) -> _T:
    paths = sidecar_paths(db_path)
    refuse_others(paths["state"], paths["log"])  # planted by another user: said before a server fails on it
    with flock(paths["lock"], timeout=start_timeout + 30):
        if relocated(db_path):
            client = _attach_beside(db_path, connect)
            if client is not None:
                return client
        st = read_state(db_path)
        if st and st.get("status") == "starting" and is_ours(st.get("pid"), db_path):
            st = _wait_ready(db_path, st["pid"], start_timeout)  # a spawner died mid-start
        if st and st.get("status") == "ready" and is_ours(st.get("pid"), db_path):
            address, problem = verify_server(db_path, st)
            if address is not None:
                try:
                    return connect(address_uri(address))
                except Exception as exc:  # noqa: BLE001 - decided below
                    if endpoint_open(address) and pid_alive(st.get("pid")):
                        raise StoreUnavailableError(
                            f"Milvus Lite server for {db_path} (pid {st['pid']}) refused the connection: "
                            f"{one_line(exc)}"
                        ) from None
            else:
                uid = pid_uid(st["pid"])
                if uid is not None and uid != os.geteuid():
                    raise StoreUnavailableError(
                        f"the Milvus Lite server for {db_path} (pid {st['pid']}) runs as another user (uid {uid}); "
                        "use memsearch as that user, or stop that server"
                    )
                logger.warning("Milvus Lite server pid %s for %s: %s; restarting it", st["pid"], db_path, problem)
        elif st and st.get("status") == "ready":
            logger.info("ignoring the record of %s: pid %s is not its server", db_path, st.get("pid"))
        if st:
            _cleanup(db_path, st)
        st = _spawn(db_path, start_timeout, tables)
        address, problem = verify_server(db_path, st)
        if address is None:
            raise StoreUnavailableError(f"the Milvus Lite server started for {db_path} failed its check: {problem}")
        try:
            return connect(address_uri(address))
        except Exception as exc:  # noqa: BLE001
            raise StoreUnavailableError(
                f"cannot connect to the Milvus Lite server for {db_path}: {one_line(exc)}"
            ) from None


def _attach_beside(db_path: str, connect: Callable[[str], _T]) -> _T | None:
    """A client of the server recorded beside the database, if one still serves it.

    Its directory became read-only while that server ran (its record is beside
    the database, ours in the runtime directory); a second server could not
    open the database while the first holds it.
    """
    st = read_state(db_path, beside=True)
    if not st or st.get("status") != "ready":
        return None
    address, _problem = verify_server(db_path, st)
    if address is None:
        return None
    try:
        return connect(address_uri(address))
    except Exception:  # noqa: BLE001 - it went away meanwhile: start our own
        return None


def _cleanup(db_path: str, st: dict[str, Any]) -> None:
    """Stop what is left of a dead or hung server and forget it.

    Only processes that serve exactly ``db_path`` are stopped, and only the
    sockets named after ``db_path`` and the recorded pid are removed: a forged
    or stale record naming another database's server costs that server nothing.
    """
    pid = st.get("pid")
    if isinstance(pid, int) and is_ours(pid, db_path):
        terminate(pid)
    engine_pid = st.get("engine_pid")
    if isinstance(engine_pid, int) and is_engine_of(engine_pid, db_path):
        terminate(engine_pid)  # a 2.x engine orphaned where parent-death signals do not exist
    if isinstance(pid, int) and pid > 0 and not pid_alive(pid):
        sock = server_socket(db_path, pid, st.get("address"))
        for path in (sock, search_socket(sock)):  # the engine's socket and the search service's
            with contextlib.suppress(OSError):
                if stat.S_ISSOCK(os.lstat(path).st_mode):
                    os.unlink(path)
    with contextlib.suppress(OSError):
        os.unlink(sidecar_paths(db_path)["state"])


def _open_log(path: str) -> int:
    """The server log for appending (0600, never through a link); one past
    1 MB is removed and started afresh (never truncated in place)."""
    with contextlib.suppress(OSError):
        st = os.lstat(path)
        if stat.S_ISREG(st.st_mode) and st.st_size > 1 << 20:
            os.unlink(path)
    return open_sidecar(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, replace=True)


def _spawn(db_path: str, start_timeout: float, tables: tuple[str, ...] = ()) -> dict[str, Any]:
    """Start a detached server for ``db_path`` and wait until it serves."""
    paths = sidecar_paths(db_path)
    env = os.environ.copy()
    pkg_root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (pkg_root, env.get("PYTHONPATH", "")) if p)
    env.pop(ENV_MODE, None)
    cmd = [sys.executable, "-m", SERVER_MARK, "serve", "--detach", "--idle-timeout", str(idle_timeout())]
    cmd += [a for t in tables if pk_index.NAME.fullmatch(t) for a in ("--table", t)] + [db_path]
    log = _open_log(paths["log"])
    try:
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
            close_fds=True,
            env=env,
            cwd=str(Path(db_path).parent),
        )
    finally:
        os.close(log)
    try:
        rc = proc.wait(timeout=30)  # the launcher forks the server and exits at once
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise StoreUnavailableError(f"Milvus Lite server launcher for {db_path} hung") from None
    if rc != 0:
        raise StoreUnavailableError(f"cannot start the Milvus Lite server for {db_path}: {log_tail(db_path)}")
    return _wait_ready(db_path, None, start_timeout)


def _wait_ready(db_path: str, pid: int | None, start_timeout: float) -> dict[str, Any]:
    deadline = time.monotonic() + start_timeout
    delay = 0.005
    seen_pid = pid
    while time.monotonic() < deadline:
        st = read_state(db_path)
        if st:
            seen_pid = st.get("pid", seen_pid)
            if st.get("status") == "ready":
                return st
            if st.get("status") == "error":
                with contextlib.suppress(OSError):
                    os.unlink(sidecar_paths(db_path)["state"])
                if st.get("damaged"):  # the message names the database, the cause and what to delete
                    raise DatabaseDamagedError(one_line(st.get("error")))
                raise StoreUnavailableError(f"cannot open Milvus Lite database {db_path}: {one_line(st.get('error'))}")
        if seen_pid is not None and not pid_alive(seen_pid):
            raise StoreUnavailableError(
                f"Milvus Lite server for {db_path} exited while starting: {log_tail(db_path) or 'see the .server.log'}"
            )
        time.sleep(delay)
        delay = min(delay * 2, 0.05)
    if seen_pid is not None and is_ours(seen_pid, db_path):
        terminate(seen_pid)
    raise StoreUnavailableError(f"Milvus Lite server for {db_path} did not start within {start_timeout:.0f}s")


def stop_server(db_path: str, timeout: float = 10.0) -> bool:
    """Stop the server owning ``db_path``; True when one was running."""
    db_path = str(Path(db_path).expanduser().resolve())
    st = read_state(db_path)
    if not st:
        return False
    pid = st.get("pid")
    running = False
    if isinstance(pid, int) and is_ours(pid, db_path):
        running = True
        terminate(pid, grace=timeout)
    _cleanup(db_path, st)
    return running
