"""Whose pid a hook's lease names: the agent's, past the wrappers between it and
the hook. A plugin's hook is often a script run by its ``#!`` line, named after
itself rather than its shell; a lease that named that short-lived script lapsed
at once and the project's memory was silently not watched. Real processes."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="reads the process tree in /proc")


def test_a_hook_run_through_a_wrapper_script_leases_with_the_agents_pid(tmp_path: Path) -> None:
    agent = tmp_path / "fake-agent"  # a program that is no shell by name: the agent
    shutil.copy("/bin/sh", agent)
    hook = tmp_path / "memsearch-session-start.sh"
    hook.write_text(
        f'#!/bin/sh\n"{sys.executable}" -c "from memsearch_fast.agents.watcher import agent_pid; print(agent_pid())"\n',
        encoding="utf-8",
    )
    hook.chmod(0o755)
    out = subprocess.run(
        [str(agent), "-c", f'echo "$$"; "{hook}"; true'],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert out.returncode == 0, out.stderr
    agent_pid, leased = out.stdout.split()
    assert leased == agent_pid  # not the wrapper script's pid, which is gone when the hook returns
