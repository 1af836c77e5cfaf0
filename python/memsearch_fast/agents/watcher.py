"""The project's watcher, shared by the agent sessions open on the project.

On a local database with the local ONNX model, the database's service
watches the project's memory root (:mod:`memsearch_fast.serve.watchers`):
SessionStart registers it with a lease held by the agent's process (the
nearest ancestor of the hook that is not a shell or an interpreter), every
later event renews it (at most every 30 s: the session's marker below
records when, and which service), SessionEnd releases it. A session that
never ends (Codex sends no SessionEnd) loses its lease when its agent exits, or 120 s
after its last event; a service killed meanwhile is started again by the
next event, which registers the root again. When no service runs, a
detached helper starts it and registers, so the hook never waits for it.

Otherwise (a remote Milvus, another provider) SessionStart starts ``memsearch watch <memory dir>`` detached unless one
already holds the watcher lock (``watch``'s own single-instance rule: a
second watcher would exit at once anyway, this only saves its start-up).
Each session leaves a marker under ``.memsearch/sessions/``; SessionEnd
removes its own and stops the watcher only when no other live session
remains. A marker not touched for :data:`STALE_SECONDS` belongs to a session
that died without SessionEnd and does not count.

The markers live in the project, so they are reached from a verified
directory fd: only regular files in a real ``sessions`` folder are counted or
removed, never anything a link leads to. The pid of a watcher just started is
kept beside its lock (outside the project): a SessionEnd that comes before
the watcher takes its lock still stops it, once its command line is checked.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from memsearch_fast._os import open_dir, open_private, write_atomic
from memsearch_fast.agents.project import Project

if TYPE_CHECKING:
    from memsearch_fast.config.settings import Settings
    from memsearch_fast.index.watch_lock import WatchLock
    from memsearch_fast.serve.protocol import WatchLease

STALE_SECONDS = 24 * 3600


def _lock(uri: str, project: Project) -> WatchLock:
    from memsearch_fast.index.watch_lock import WatchLock, lock_base

    # `watch` keys its lock by its resolved roots: so must we, or SessionEnd misses it.
    return WatchLock(lock_base(uri, project.collection, [os.path.realpath(project.memory_dir)]))


def running(uri: str, project: Project) -> int | None:
    """The pid of the project's watcher, or None when none holds the lock."""
    lock = _lock(uri, project)
    if not lock.held():
        return None
    return lock.holder().pid or -1


#: Processes between the agent and this hook: the plugin's wrapper script, shells, interpreters.
_WRAPPERS = frozenset(
    {"sh", "bash", "dash", "zsh", "fish", "ksh", "env", "nice", "timeout", "memsearch", "memsearch-hook", "uv", "uvx"}
)


#: Interpreters whose scripts are wrappers: a plugin's hook script. A program run
#: by another interpreter and named after itself (``#!/usr/bin/env python3`` in an
#: agent written in Python) is the agent.
_SHELLS = frozenset({"sh", "bash", "dash", "zsh", "fish", "ksh"})


#: The agents' own process names: an ancestor so named is the agent, even a
#: script (a test's stand-in, a user's launcher named after the agent).
_AGENTS = frozenset({"claude", "codex", "opencode", "openclaw"})


def _ancestors() -> list[tuple[int, str, str]]:
    """(pid, name, the first word of its command line) from this process's parent up, below init."""
    out: list[tuple[int, str, str]] = []
    pid = os.getppid()
    for _ in range(8):
        if pid <= 1:
            break
        try:
            with open(f"/proc/{pid}/comm", encoding="utf-8", errors="replace") as f:
                comm = f.read().strip()
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                runner = os.path.basename(f.read().split(b"\0", 1)[0].decode("utf-8", "replace"))
            with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
                parent = int(f.read().rsplit(")", 1)[-1].split()[1])
        except (OSError, ValueError, IndexError):
            break
        out.append((pid, comm, runner))
        pid = parent
    return out


def agent_pid() -> int | None:
    """The agent process that runs this hook: the nearest ancestor named as an
    agent, else the nearest that is not a wrapper; None when there is none below
    init (the lease then lives by renewal). A script run by its ``#!`` line is
    named after itself, not its shell (a plugin's hook script): its command
    line's first word says which shell runs it."""
    chain = _ancestors()
    for pid, comm, _runner in chain:
        if comm in _AGENTS:
            return pid
    for pid, comm, runner in chain:
        if comm not in _WRAPPERS and not comm.startswith("python") and runner not in _SHELLS:
            return pid
    return None


def _holder(session: str) -> str:
    return f"session:{session}" if session else f"agent:{agent_pid() or os.getppid()}"


def lease(cfg: Settings, project: Project, session: str, log: Path) -> bool:
    """Register (or renew) the project's memory root with the database's service;
    False where no service can watch it (the caller keeps a process of its own)."""
    from memsearch_fast.serve import client

    prepared = client.lease_request(
        cfg, [project.memory_dir], holder=_holder(session), pid=agent_pid(), collection=project.collection
    )
    if prepared is None:
        return False
    db_path, request = prepared
    if client.server_record(db_path) is None:
        _spawn_helper(db_path, request, project, log)
        return True
    reply = client.call(db_path, request, timeout=5.0)
    if reply is None:  # gone meanwhile: start it again
        _spawn_helper(db_path, request, project, log)
        return True
    return bool(reply.get("ok"))  # a server of another installation: a process of our own


def _spawn_helper(db_path: str, request: WatchLease, project: Project, log: Path) -> None:
    """Start the service and register, detached: the hook returns at once."""
    # The root is named too, so that SessionEnd can tell this helper from any other process.
    argv = [sys.executable, "-m", "memsearch_fast.serve.client", "lease", db_path, project.memory_dir]
    with _log_file(log) as out:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=out,
            stderr=out,
            cwd=project.project_dir if os.path.isdir(project.project_dir) else None,
            start_new_session=True,
            close_fds=True,
        )
    assert proc.stdin is not None
    with contextlib.suppress(OSError), proc.stdin:
        proc.stdin.write(json.dumps(request).encode("utf-8"))
    _remember_spawn(db_path, project, proc.pid)


#: A session's lease is renewed at most this often (seconds): a prompt a second
#: costs a stat, not a configuration read and a request.
RENEW_S = 30.0


def renew_due(project: Project, session: str) -> bool:
    """Whether the session's lease is due for renewal: its marker (written at each
    renewal with the service's pid) is older than :data:`RENEW_S`, missing, or
    names a service that is gone (killed: the root is registered again now).
    Read through the real ``sessions`` folder only, never a link."""
    from memsearch_fast._os import pid_alive

    marker = _marker(project, session)
    try:
        folder = open_dir(marker.parent)
    except OSError:
        return True
    try:
        fd = open_private(marker.name, os.O_RDONLY, dir_fd=folder, shown=str(marker))
        with open(fd, "rb") as f:
            st = os.fstat(f.fileno())
            pid = int(f.read(32).strip() or b"0")
    except (OSError, ValueError):
        return True
    finally:
        os.close(folder)
    return time.time() - st.st_mtime >= RENEW_S or not pid_alive(pid)


def renew(cfg: Settings, project: Project, session: str, log: Path) -> None:
    """A later event of the session: its lease lives on (or is taken again)."""
    _register(cfg, project, session, log)


def _register(cfg: Settings, project: Project, session: str, log: Path) -> bool:
    """Register or renew; the session's marker records the service that holds the
    lease (none yet while a helper starts it: the next event looks again)."""
    from memsearch_fast.serve import client

    served = lease(cfg, project, session, log)
    db_path = client.served_database(cfg) if served else None
    st = client.server_record(db_path) if db_path else None
    join(project, session or "unknown", st["pid"] if st and st.get("pid") else 0)
    return served


def release(cfg: Settings, project: Project, session: str) -> None:
    """SessionEnd: the session's lease goes; the root stays watched while another lives."""
    from memsearch_fast.serve import client

    db_path = client.served_database(cfg)
    if db_path is None:
        return
    helper = _spawned(db_path, project, ("memsearch_fast.serve.client", "lease"))
    if helper is not None:  # still starting the service: it registers nothing once stopped
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(helper, signal.SIGTERM)
        end = time.monotonic() + 5
        while time.monotonic() < end and os.path.exists(f"/proc/{helper}") and _spawned(db_path, project, ()):
            time.sleep(0.02)
    client.release(db_path, _holder(session), [project.memory_dir], project.collection)


def _log_file(log: Path) -> BinaryIO:
    folder = open_dir(log.parent, create=True)
    try:
        fd = open_private(log.name, os.O_WRONLY | os.O_APPEND | os.O_CREAT, dir_fd=folder, shown=str(log))
    finally:
        os.close(folder)
    return open(fd, "ab")


def start(uri: str, project: Project, log: Path, *, cfg: Settings | None = None, session: str = "") -> int | None:
    """Have the project's memory root watched: by the database's service where it
    can, else by a `memsearch watch` process unless one runs; the new pid (None
    if one ran or the service watches)."""
    if cfg is not None and _register(cfg, project, session, log):
        return None
    if running(uri, project) is not None:
        return None
    argv = [sys.executable, "-m", "memsearch_fast.cli", "watch", project.memory_dir, "--collection", project.collection]
    argv += ["--milvus-uri", uri, "-q"]
    with _log_file(log) as out:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
            cwd=project.project_dir if os.path.isdir(project.project_dir) else None,
            start_new_session=True,  # outlives the hook; the agent does not wait on its pipes
            close_fds=True,
        )
    _remember_spawn(uri, project, proc.pid)
    return proc.pid


def _spawn_record(uri: str, project: Project) -> Path:
    lock = _lock(uri, project).lock_path
    return lock.with_name(lock.name.removesuffix(".lock") + ".spawned")


def _remember_spawn(uri: str, project: Project, pid: int) -> None:
    with contextlib.suppress(OSError):
        write_atomic(_spawn_record(uri, project), f"{pid}\n".encode(), fsync=False)


def _is_watch(pid: int, project: Project) -> bool:
    """Whether *pid* is a `memsearch watch` of the project's memory."""
    from memsearch_fast.lite.process import cmdline_args

    args = cmdline_args(pid) or []
    return "watch" in args and any(project.memory_dir == a or os.path.realpath(a) == project.memory_dir for a in args)


def _spawned(uri: str, project: Project, command: tuple[str, ...] = ("memsearch_fast.cli", "watch")) -> int | None:
    """The pid of a watcher this project started that has not taken its lock
    yet: the recorded pid, when that process is still our watcher of the project."""
    try:
        fd = open_private(_spawn_record(uri, project), os.O_RDONLY)
        with open(fd, "rb") as f:
            pid = int(f.read(32).strip() or b"0")
    except (OSError, ValueError):
        return None
    if pid <= 1 or pid == os.getpid():
        return None
    from memsearch_fast.lite.process import cmdline_args

    args = cmdline_args(pid) or []
    ours = all(word in args for word in command) and project.memory_dir in args
    return pid if ours else None


def stop(uri: str, project: Project) -> bool:
    """Ask the project's watcher to finish its run and exit (SIGTERM); also the
    one just started that has not taken its lock yet."""
    pid = running(uri, project)
    if pid is not None and not _is_watch(pid, project):
        return False  # the database's service holds the lock: its leases decide
    if pid is None:
        pid = _spawned(uri, project)
    if pid is None or pid <= 1 or pid == os.getpid():
        return False
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signal.SIGTERM)
        return True
    return False


def _marker(project: Project, session: str) -> Path:
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", session)[:120] or "unknown"
    return Path(project.memsearch_dir) / "sessions" / safe


def join(project: Project, session: str, service: int | None = None) -> None:
    """Record (or refresh) *session* as a user of the project's watcher; with
    *service*, the pid of the service that holds its lease."""
    marker = _marker(project, session)
    folder = open_dir(marker.parent, create=True)
    try:
        flags = os.O_WRONLY | os.O_CREAT | (os.O_TRUNC if service is not None else 0)
        fd = open_private(marker.name, flags, dir_fd=folder, shown=str(marker))
        try:
            if service is not None:
                os.write(fd, f"{service}\n".encode())
            os.utime(fd)
        finally:
            os.close(fd)
    finally:
        os.close(folder)


def leave(project: Project, session: str) -> int:
    """Forget *session*; the number of other live sessions left on the project.

    Only regular files of the real ``sessions`` folder are read or removed
    (through its fd): a ``sessions`` link raises instead of leading elsewhere.
    """
    marker = _marker(project, session)
    try:
        folder = open_dir(marker.parent)
    except FileNotFoundError:
        return 0
    live = 0
    now = time.time()
    try:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(marker.name, dir_fd=folder)
        for entry in os.scandir(folder):
            with contextlib.suppress(FileNotFoundError):
                st = os.stat(entry.name, dir_fd=folder, follow_symlinks=False)
                if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
                    continue
                if now - st.st_mtime < STALE_SECONDS:
                    live += 1
                else:
                    os.unlink(entry.name, dir_fd=folder)
    finally:
        os.close(folder)
    return live
