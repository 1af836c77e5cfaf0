"""Running the `memsearch` command as a real subprocess, and what its result must look like."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def make_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMSEARCH_")}
    env.update(
        HOME=str(home),
        MEMSEARCH_LITE_IDLE_TIMEOUT="120",
        MEMSEARCH_OFFLINE="1",
        HF_HUB_OFFLINE="1",
        PYTHONIOENCODING="utf-8",
    )
    home.mkdir(parents=True, exist_ok=True)
    return env


def run(
    args: list[str], env: dict[str, str], cwd: Path | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "memsearch_fast", *args],
        env=env,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=timeout,
    )


def ok(proc: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert proc.returncode == 0, f"rc={proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    return proc


def one_line_error(proc: subprocess.CompletedProcess[str], *needles: str) -> str:
    """The command failed with exactly one line on stderr (no traceback)."""
    assert proc.returncode != 0, proc.stdout
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]
