"""The project's watcher, shared by the agent sessions open on the project.

SessionStart starts ``memsearch watch <memory dir>`` detached unless one
already holds the watcher lock (``watch``'s own single-instance rule: a
second watcher would exit at once anyway, this only saves its start-up).
Each session leaves a marker under ``.memsearch/sessions/``; SessionEnd
removes its own and stops the watcher only when no other live session
remains. A marker not touched for :data:`STALE_SECONDS` belongs to a session
that died without SessionEnd and does not count.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from memsearch_fast.agents.project import Project

if TYPE_CHECKING:
    from memsearch_fast.watch.lock import WatchLock

STALE_SECONDS = 24 * 3600


def _lock(uri: str, project: Project) -> WatchLock:
    from memsearch_fast.watch.lock import WatchLock, lock_base

    return WatchLock(lock_base(uri, project.collection, [project.memory_dir]))


def running(uri: str, project: Project) -> int | None:
    """The pid of the project's watcher, or None when none holds the lock."""
    lock = _lock(uri, project)
    if not lock.held():
        return None
    return lock.holder().pid or -1


def start(uri: str, project: Project, log: Path) -> int | None:
    """Start the project's watcher unless one runs; the new pid (None if one ran)."""
    if running(uri, project) is not None:
        return None
    log.parent.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "memsearch_fast.cli", "watch", project.memory_dir, "--collection", project.collection]
    argv += ["--milvus-uri", uri, "-q"]
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
            cwd=project.project_dir if os.path.isdir(project.project_dir) else None,
            start_new_session=True,  # outlives the hook; the agent does not wait on its pipes
            close_fds=True,
        )
    return proc.pid


def stop(uri: str, project: Project) -> bool:
    """Ask the project's watcher to finish its run and exit (SIGTERM)."""
    pid = running(uri, project)
    if pid is None or pid <= 1 or pid == os.getpid():
        return False
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signal.SIGTERM)
        return True
    return False


def _marker(project: Project, session: str) -> Path:
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", session)[:120] or "unknown"
    return Path(project.memsearch_dir) / "sessions" / safe


def join(project: Project, session: str) -> None:
    """Record (or refresh) *session* as a user of the project's watcher."""
    marker = _marker(project, session)
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.touch()


def leave(project: Project, session: str) -> int:
    """Forget *session*; the number of other live sessions left on the project."""
    with contextlib.suppress(FileNotFoundError):
        _marker(project, session).unlink()
    folder = Path(project.memsearch_dir) / "sessions"
    live = 0
    now = time.time()
    with contextlib.suppress(FileNotFoundError):
        for entry in os.scandir(folder):
            with contextlib.suppress(FileNotFoundError):
                if now - entry.stat().st_mtime < STALE_SECONDS:
                    live += 1
                else:
                    os.unlink(entry.path)
    return live
