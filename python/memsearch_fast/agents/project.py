"""Where a hook's project keeps its memory, and the collection that indexes it.

The project is the git top level above the agent's working directory (else
that directory); ``MEMSEARCH_DIR`` replaces the project's ``.memsearch``
directory and makes the memory global to every project that sets it. The
collection name is the reference's: ``ms_<basename>_<sha256[:8]>`` of the
resolved project path (or of ``MEMSEARCH_DIR`` when set), so memsearch and
memsearch-fast, and every agent, find the same collection.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import NamedTuple

#: A Windows drive path (``C:/…`` or ``C:\\…``) is absolute wherever it is read.
_DRIVE = re.compile(r"^[A-Za-z]:[\\/]")


class Project(NamedTuple):
    project_dir: str
    memsearch_dir: str
    memory_dir: str
    collection: str

    def as_json(self) -> dict[str, str]:
        return {
            "project_dir": self.project_dir,
            "memsearch_dir": self.memsearch_dir,
            "memory_dir": self.memory_dir,
            "collection": self.collection,
        }


def is_absolute(path: str) -> bool:
    return os.path.isabs(path) or bool(_DRIVE.match(path))


def absolute(path: str, base: str | None = None) -> str:
    """*path* made absolute and resolved (symlinks followed, missing parts kept);
    a Windows drive path is kept as given, with ``/`` separators."""
    if _DRIVE.match(path):
        return path.replace("\\", "/").rstrip("/") or path
    if not os.path.isabs(path):
        path = os.path.join(base or os.getcwd(), path)
    return os.path.realpath(path)


def git_top(start: str) -> str | None:
    """The nearest directory at or above *start* holding ``.git`` (a directory,
    or a file for worktrees and submodules); found without starting git."""
    here = Path(start)
    for candidate in (here, *here.parents):
        if (candidate / ".git").exists():
            return str(candidate)
    return None


def collection_name(path: str) -> str:
    """``ms_<sanitized basename>_<8 hex of sha256(path)>`` for an absolute *path*."""
    base = re.split(r"[\\/]", path.rstrip("/\\"))[-1] if path.strip("/\\") else ""
    name = re.sub(r"_+", "_", re.sub(r"[^a-z0-9]", "_", base.lower())).strip("_")[:40]
    digest = hashlib.sha256(path.encode("utf-8", "surrogateescape")).hexdigest()[:8]
    return f"ms_{name}_{digest}"


def locate(cwd: str | None = None, env: Mapping[str, str] | None = None) -> Project:
    """The project a hook runs for: *cwd* is the agent's working directory
    (from its hook payload), else ``CLAUDE_PROJECT_DIR``, else the process's."""
    env = os.environ if env is None else env
    start = cwd or env.get("CLAUDE_PROJECT_DIR") or os.getcwd()
    start = absolute(start)
    top = None if _DRIVE.match(start) else git_top(start)
    project_dir = top or start
    explicit = env.get("MEMSEARCH_DIR", "").strip()
    if explicit:
        memsearch_dir = absolute(os.path.expanduser(explicit), project_dir if not _DRIVE.match(project_dir) else None)
        collection = collection_name(memsearch_dir)
    else:
        memsearch_dir = _join(project_dir, ".memsearch")
        collection = collection_name(project_dir)
    return Project(project_dir, memsearch_dir, _join(memsearch_dir, "memory"), collection)


def _join(base: str, name: str) -> str:
    return f"{base.rstrip('/')}/{name}" if _DRIVE.match(base) else os.path.join(base, name)
