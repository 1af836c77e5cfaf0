"""Telling whether a recorded server process is alive, ours and answering."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from typing import Any

from memsearch_fast.errors import one_line
from memsearch_fast.lite.paths import SERVER_MARK, sidecar_paths, socket_file


def pid_alive(pid: Any) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie is dead for our purposes
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            return f.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except OSError:
        return True


def _cmdline(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode("utf-8", "replace")
    except FileNotFoundError:
        return ""
    except OSError:
        pass
    try:
        out = subprocess.run(
            ["ps", "-o", "command=", "-p", str(pid)], capture_output=True, text=True, timeout=5, check=False
        )
        return out.stdout
    except (OSError, subprocess.SubprocessError):
        return None


def is_ours(pid: Any, db_path: str, mark: str = SERVER_MARK) -> bool:
    """Alive and running ``mark`` on ``db_path`` (guards against pid reuse)."""
    if not pid_alive(pid):
        return False
    cmd = _cmdline(pid)
    return cmd is None or (mark in cmd and db_path in cmd)


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
        with open(sidecar_paths(db_path)["log"], "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 4096))
            lines = [ln.strip() for ln in f.read().decode("utf-8", "replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    return one_line(lines[-1]) if lines else ""
