"""Where a hook's project keeps its memory, and the collection that indexes it.

The project is the git top level above the agent's working directory (else
that directory); ``MEMSEARCH_DIR`` replaces the project's ``.memsearch``
directory and makes the memory global to every project that sets it. The
collection name is the reference's: ``ms_<basename>_<sha256[:8]>`` of the
resolved project path (or of ``MEMSEARCH_DIR`` when set), so memsearch and
memsearch-fast, and every agent, find the same collection.

A cloned repository brings its ``.memsearch`` along, symbolic links
included, so :func:`guard` checks it before any hook touches it: the folder,
``memory``, ``sessions``, ``jobs``, ``turns`` and the logs must be real directories and
files of the user's. ``.memsearch`` itself may be a link the user made (one
memory for several worktrees) when the link is not part of the repository
(``git ls-files`` does not list it) and leads to a folder of the user's
inside their home directory. ``MEMSEARCH_DIR`` is the user's own choice and
is followed as given.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import NamedTuple

from memsearch_fast._os import UnsafePathError, check_dir, check_file, is_inside
from memsearch_fast.config import environment

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
    explicit = environment.text("MEMSEARCH_DIR", env).strip()
    if explicit:
        memsearch_dir = absolute(os.path.expanduser(explicit), project_dir if not _DRIVE.match(project_dir) else None)
        collection = collection_name(memsearch_dir)
    else:
        memsearch_dir = _join(project_dir, ".memsearch")
        collection = collection_name(project_dir)
    return Project(project_dir, memsearch_dir, _join(memsearch_dir, "memory"), collection)


#: What the hooks keep under the memory folder: folders, then files.
FOLDERS = ("memory", "sessions", "jobs", "turns")
FILES = ("hooks.log", "watch.log")
_HOW_OUT = "memory is off for this project (set MEMSEARCH_DIR to keep its memory elsewhere)"


class UnsafeProjectError(UnsafePathError):
    """The project's ``.memsearch`` would lead the hooks outside it."""


def guard(project: Project) -> Project:
    """*project* once its memory folder is safe to read, write and delete in;
    a ``.memsearch`` link the user made is replaced by the folder it leads to.
    Raises :class:`UnsafeProjectError` (one line, with the way out)."""
    if _DRIVE.match(project.memsearch_dir):
        return project
    try:
        if stat.S_ISLNK(os.lstat(project.memsearch_dir).st_mode):
            real = _trusted_link(project)
            project = project._replace(memsearch_dir=real, memory_dir=os.path.join(real, "memory"))
        check_folder(project.memsearch_dir)
    except FileNotFoundError:
        pass
    except UnsafePathError as exc:
        raise UnsafeProjectError(f"{exc}; {_HOW_OUT}") from None
    return project


def check_folder(memsearch_dir: str) -> None:
    """Raise :class:`UnsafePathError` unless *memsearch_dir* and what the hooks
    use in it are real folders and files of the user's (or missing)."""
    if not check_dir(memsearch_dir):
        return
    for name in FOLDERS:
        check_dir(os.path.join(memsearch_dir, name))
    for name in FILES:
        check_file(os.path.join(memsearch_dir, name))


def _trusted_link(project: Project) -> str:
    link = project.memsearch_dir
    real = os.path.realpath(link)
    if not os.path.isdir(real):
        raise UnsafePathError(f"{link} is a symbolic link to a missing folder")
    check_dir(real)
    if not is_inside(real, os.path.expanduser("~")):
        raise UnsafePathError(f"{link} is a symbolic link out of your home directory")
    if _tracked(project.project_dir, os.path.basename(link)):
        raise UnsafePathError(f"{link} is a symbolic link that came with the repository")
    return real


def _tracked(top: str, name: str) -> bool:
    """Whether git tracks *name* at the top of the project (True when git cannot tell)."""
    if not os.path.lexists(os.path.join(top, ".git")):
        return False
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    try:
        out = subprocess.run(
            ["git", "-C", top, "ls-files", "-z", "--", name],
            capture_output=True,
            timeout=3,
            env=env,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return True
    return out.returncode != 0 or bool(out.stdout)


def _join(base: str, name: str) -> str:
    return f"{base.rstrip('/')}/{name}" if _DRIVE.match(base) else os.path.join(base, name)
