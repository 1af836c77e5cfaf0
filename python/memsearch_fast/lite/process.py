"""Telling whether a recorded server process is alive, ours and answering."""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket
import struct
import subprocess
import time
from typing import Any, NoReturn

from memsearch_fast._os import pid_alive
from memsearch_fast.errors import StoreError, one_line
from memsearch_fast.lite.settings import HOST, SERVER_MARKS
from memsearch_fast.lite.sidecars import open_sidecar, sidecar_paths
from memsearch_fast.lite.sockets import server_socket, socket_file
from memsearch_fast.lite.state import record_address, serves_current_database


def cmdline_args(pid: Any) -> list[str] | None:
    """The argument vector of ``pid``: [] when it is gone, None when unknown.

    Read from ``/proc/<pid>/cmdline`` split at its NUL separators, so an
    argument is compared whole; elsewhere ``ps`` gives the command split at
    whitespace (a path with spaces then matches nothing, which errs towards
    never touching a process).
    """
    if not isinstance(pid, int) or pid <= 0:
        return []
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        return []
    except OSError:
        pass
    else:
        raw = raw[:-1] if raw.endswith(b"\0") else raw
        return [os.fsdecode(a) for a in raw.split(b"\0")] if raw else []
    try:
        out = subprocess.run(
            ["ps", "-o", "command=", "-p", str(pid)], capture_output=True, text=True, timeout=5, check=False
        )
        return out.stdout.split()
    except (OSError, subprocess.SubprocessError):
        return None


def add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``python -m memsearch_fast.serve.lite_main serve``; the
    server parses them and clients read them back from a server's command line."""
    parser.add_argument("db")
    parser.add_argument("--idle-timeout", type=float, default=None)
    parser.add_argument("--detach", action="store_true")
    parser.add_argument(
        "--port",
        type=int,
        default=None,
        help="serve on 127.0.0.1:PORT (TCP, no authentication) instead of a private socket",
    )
    parser.add_argument(
        "--table",
        action="append",
        default=[],
        help="a collection a client is about to use: its table is made with a primary-key index if absent",
    )


class _NotServe(Exception):
    pass


class _QuietParser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise _NotServe(message)


def served_database(args: list[str] | None) -> tuple[str, int | None] | None:
    """``(db, port)`` of a ``python … -m memsearch_fast.serve.lite_main serve …``
    command line (``port`` None for the private socket), else None."""
    if not args:
        return None
    mark = next((m for m in SERVER_MARKS if m in args), None)
    if mark is None:
        return None
    i = args.index(mark)
    if i == 0 or args[i - 1] != "-m" or args[i + 1 : i + 2] != ["serve"]:
        return None
    parser = _QuietParser(add_help=False)
    add_serve_arguments(parser)
    try:
        ns = parser.parse_args(args[i + 2 :])
    except _NotServe:
        return None
    return ns.db, ns.port


def is_ours(pid: Any, db_path: str) -> bool:
    """Alive and a server of exactly ``db_path`` (guards against pid reuse and
    against another database's server: the database argument is compared whole)."""
    if not pid_alive(pid):
        return False
    served = served_database(cmdline_args(pid))
    return served is not None and served[0] == db_path


def is_engine_of(pid: Any, db_path: str) -> bool:
    """Alive and the Milvus Lite 2.x engine binary (``milvus <db> <address> …``) of exactly ``db_path``."""
    if not pid_alive(pid):
        return False
    args = cmdline_args(pid) or []
    return len(args) >= 2 and os.path.basename(args[0]) == "milvus" and args[1] == db_path


def parent_pid(pid: Any) -> int | None:
    """The parent of ``pid`` (Linux), or None when unknown."""
    try:
        with open(f"/proc/{int(pid)}/stat", encoding="ascii", errors="replace") as f:
            return int(f.read().rsplit(")", 1)[-1].split()[1])
    except (OSError, TypeError, ValueError, IndexError):
        return None


def peer_credentials(path: str, timeout: float = 1.0) -> tuple[int, int] | None:
    """``(pid, uid)`` of the process listening on unix socket ``path``
    (``SO_PEERCRED``, Linux), None where the system does not tell; raises
    OSError when nothing accepts the connection."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        s.connect(path)
        option = getattr(socket, "SO_PEERCRED", None)
        if option is None:
            return None
        pid, uid, _gid = struct.unpack("3i", s.getsockopt(socket.SOL_SOCKET, option, struct.calcsize("3i")))
        return pid, uid


def verify_server(db_path: str, st: dict[str, Any], timeout: float = 1.0) -> tuple[str | None, str]:
    """The address of the server a record names, once checked, or None and why not.

    The record is only a hint (anyone who can write the database's directory
    can write it): its pid must be alive and run ``serve`` on exactly
    ``db_path``; the address is derived from that process, not read from the
    record. Its unix socket is named after ``db_path`` and the pid inside a
    directory only this user may write, and ``SO_PEERCRED`` must show that the
    process accepting on it runs as this user and is that pid (or its Milvus
    Lite 2.x engine child). A TCP server (``--port``) must own the listening
    port (``/proc/net/tcp``). The database it opened must still be the one at
    ``db_path``.
    """
    pid = st.get("pid")
    served = served_database(cmdline_args(pid)) if pid_alive(pid) else None
    if served is None or served[0] != db_path:
        return None, f"pid {pid} is not a server of {db_path}"
    if not serves_current_database(db_path, st):
        return None, "the database it opened was removed or replaced"
    assert isinstance(pid, int)
    port = served[1]
    if port is None:
        sock = server_socket(db_path, pid, st.get("address"))
        try:
            creds = peer_credentials(sock, timeout)
        except OSError as exc:
            return None, f"its socket {sock} does not answer ({one_line(exc)})"
        if creds is not None:
            peer_pid, peer_uid = creds
            if peer_uid != os.geteuid():
                return None, f"its socket is served by another user (uid {peer_uid})"
            if peer_pid != pid and not (parent_pid(peer_pid) == pid and is_engine_of(peer_pid, db_path)):
                return None, f"its socket is served by pid {peer_pid}, not by pid {pid}"
        return "unix:" + sock, ""
    address = record_address(st) or ""
    host, _, recorded = address.rpartition(":")
    if host != HOST or not recorded.isdigit() or (port and int(recorded) != port):
        return None, f"its recorded address {address!r} is not the one it serves (--port {port})"
    owners = [pid]
    engine = st.get("engine_pid")
    if isinstance(engine, int) and parent_pid(engine) == pid and is_engine_of(engine, db_path):
        owners.append(engine)
    owned = _tcp_port_owned(int(recorded), owners)
    if owned is False or (owned is None and not port):
        return None, f"port {recorded} is not served by pid {pid}"
    if not endpoint_open(address, timeout):
        return None, f"{address} does not answer"
    return address, ""


def _tcp_port_owned(port: int, pids: list[int]) -> bool | None:
    """Whether one of ``pids`` listens on 127.0.0.1:``port`` as this user (Linux), None when unknown.

    gRPC may listen on an IPv6 socket bound to the IPv4-mapped loopback, so
    both tables are read.
    """
    local = {f"0100007F:{port:04X}", f"0000000000000000FFFF00000100007F:{port:04X}"}
    inodes = set()
    found = False
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table, encoding="ascii") as f:
                next(f, None)
                for line in f:
                    parts = line.split()
                    listening = len(parts) > 9 and parts[1] in local and parts[3] == "0A"
                    if listening and parts[7] == str(os.geteuid()):
                        inodes.add(parts[9])
            found = True
        except OSError:
            continue
    if not found:
        return None
    targets = {f"socket:[{i}]" for i in inodes}
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            return None
        for fd in fds:
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/{pid}/fd/{fd}") in targets:
                    return True
    return False


def endpoint_open(address: str | None, timeout: float = 1.0) -> bool:
    """Whether a server accepts connections at ``address`` (``unix:/path`` or ``host:port``)."""
    if not address:
        return False
    try:
        sock = socket_file(address)
        if sock is not None:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                s.settimeout(timeout)
                s.connect(sock)
            return True
        host, _, port = address.rpartition(":")
        with socket.create_connection((host, int(port)), timeout=timeout):
            return True
    except (OSError, ValueError):
        return False


def terminate(pid: int, grace: float = 5.0) -> None:
    """SIGTERM, then SIGKILL after ``grace`` seconds."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    if pid_alive(pid):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 5
        while pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)


def pid_uid(pid: Any) -> int | None:
    """The user a process runs as (Linux), or None when unknown."""
    try:
        return os.stat(f"/proc/{int(pid)}").st_uid
    except (OSError, TypeError, ValueError):
        return None


def log_tail(db_path: str) -> str:
    """Last meaningful line of the server log, for one-line error messages."""
    try:
        with os.fdopen(open_sidecar(sidecar_paths(db_path)["log"], os.O_RDONLY), "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 4096))
            lines = [ln.strip() for ln in f.read().decode("utf-8", "replace").splitlines() if ln.strip()]
    except (OSError, StoreError):
        return ""
    return one_line(lines[-1]) if lines else ""
