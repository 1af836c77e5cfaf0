"""The candidate store's git history: one commit per change, with a fixed
committer identity (as memsearch 0.4.23 writes it); without ``git`` on PATH
every call is a quiet no-op and the store works the same, without history."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path


def _git(root: Path, *args: str) -> bool:
    """Run git in *root* with the store's committer; ``False`` when it failed or is missing.

    ``GIT_*`` variables are dropped (a hook that runs memsearch may have
    ``GIT_DIR`` set: that must not redirect the store's commits), and neither
    the user's hooks nor commit signing run.
    """
    exe = shutil.which("git")
    if exe is None:
        return False
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    config = (
        "user.name=memsearch",
        "user.email=memsearch@localhost",
        "commit.gpgsign=false",
        f"core.hooksPath={os.devnull}",
        "init.defaultBranch=main",
    )
    argv = [exe]
    for item in config:
        argv += ["-c", item]
    try:
        proc = subprocess.run(
            [*argv, *args],
            cwd=root,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=60,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return proc.returncode == 0


def init(root: Path) -> None:
    """Make *root* a git repository (nothing when git is missing or fails)."""
    _git(root, "init", "-q")


def commit(root: Path, message: str) -> None:
    """Commit everything in the store (nothing when nothing changed)."""
    if (root / ".git").exists() and _git(root, "add", "-A"):
        _git(root, "commit", "-q", "-m", message)
