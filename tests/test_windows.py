"""Windows: the hooks need a POSIX system and say so in one line, at install and at every event,
never with a traceback. The platform is simulated: ``MEMSEARCH_TEST_OS_NAME=nt`` makes the check
see Windows, and the POSIX-only pieces the hooks use (``fcntl``, ``os.O_NOFOLLOW``,
``signal.SIGALRM``) are removed from the interpreter, as they are missing there."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from memsearch_fast.agents import posix
from tests.helpers.installed import PACKAGE_PARENT

ROOT = Path(__file__).resolve().parents[1]
WITHOUT_POSIX = (
    "import os, signal, sys, runpy; sys.modules['fcntl'] = None; del os.O_NOFOLLOW; del signal.SIGALRM; "
    "target = sys.argv.pop(1); "
    "runpy.run_path(target, run_name='__main__') if target.endswith('.py') "
    "else runpy.run_module(target, run_name='__main__')"
)
EVENTS = ["session-start", "user-prompt", "stop", "pre-compact", "session-end", "locate"]


def run(tmp_path: Path, *argv: str, stdin: str = "", **env: str) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if not k.startswith("MEMSEARCH_")}
    full.update({"HOME": str(tmp_path / "home"), "PYTHONPATH": PACKAGE_PARENT, "MEMSEARCH_TEST_OS_NAME": "nt"})
    full.update(env)
    return subprocess.run(
        [sys.executable, "-c", WITHOUT_POSIX, *argv],
        input=stdin,
        capture_output=True,
        text=True,
        env=full,
        timeout=60,
        cwd=tmp_path,
    )


@pytest.mark.parametrize("platform", ["claude-code", "codex", "opencode", "openclaw"])
def test_every_event_says_so_in_one_line(tmp_path: Path, platform: str) -> None:
    project = tmp_path / "proj"
    (project / ".git").mkdir(parents=True)
    payload = json.dumps({"cwd": str(project), "session_id": "s", "prompt": "a long enough prompt"})
    for event in EVENTS:
        out = run(tmp_path, "memsearch_fast.agents.main", platform, event, stdin=payload)
        assert out.returncode == 0 and out.stderr == posix.MESSAGE + "\n", (event, out.stderr)
        if event == "session-start":
            assert json.loads(out.stdout) == {"systemMessage": posix.MESSAGE}
        elif platform == "codex" and event in ("stop", "pre-compact"):
            assert out.stdout == ""  # Codex takes no output as "nothing to do" there
        else:
            assert json.loads(out.stdout) == {}
    assert not (project / ".memsearch").exists() and not (tmp_path / "home").exists()
    assert "Windows is not supported" in posix.MESSAGE and "\n" not in posix.MESSAGE


def test_the_cli_hook_command_says_the_same(tmp_path: Path) -> None:
    out = run(tmp_path, "memsearch_fast", "hook", "claude-code", "session-start", stdin="{}")
    assert out.returncode == 0 and json.loads(out.stdout) == {"systemMessage": posix.MESSAGE}
    assert "Traceback" not in out.stderr


def test_without_the_simulation_the_pieces_are_missing_indeed(tmp_path: Path) -> None:
    """The simulation bites: with POSIX pieces removed and the check seeing POSIX, the hooks
    could not run (this is what a Windows user would get without the check)."""
    out = run(
        tmp_path,
        "memsearch_fast.agents.main",
        "claude-code",
        "session-start",
        stdin="{}",
        MEMSEARCH_TEST_OS_NAME="posix",
    )
    assert "Traceback" in out.stderr or out.returncode != 0


def test_the_codex_installer_says_so_and_writes_nothing(tmp_path: Path) -> None:
    codex = tmp_path / "codex-home"
    out = run(tmp_path, str(ROOT / "hooks" / "codex" / "install.py"), CODEX_HOME=str(codex))
    assert out.returncode == 1 and out.stdout == "" and "Traceback" not in out.stderr
    (line,) = out.stderr.splitlines()
    assert "do not support Windows" in line and "nothing was installed" in line
    assert not codex.exists() and not (tmp_path / "home").exists()
