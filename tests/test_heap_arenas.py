"""The heap arenas of an index run's process: one a core (at least two), not eight
a core, so the pages a run frees are not scattered over a dozen heaps
(``memsearch_fast._os.cap_heap_arenas``)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's arenas")

# Eight threads allocating at once, each holding 64 KB blocks (below the mmap threshold:
# they come from an arena), then glibc's own account of its arenas on stderr.
_THREADS = """
import ctypes, sys, threading
from memsearch_fast._os import cap_heap_arenas
if sys.argv[1] == "cap":
    cap_heap_arenas()
held, gate = [], threading.Barrier(8)
def work():
    gate.wait()
    held.append([bytearray(65536) for _ in range(20)])
threads = [threading.Thread(target=work) for _ in range(8)]
for t in threads: t.start()
for t in threads: t.join()
ctypes.CDLL("libc.so.6").malloc_stats()
"""


def _arenas(mode: str, env: dict[str, str] | None = None) -> int:
    out = subprocess.run(
        [sys.executable, "-c", _THREADS, mode],
        capture_output=True,
        text=True,
        timeout=60,
        env={k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"} | (env or {}),
        check=True,
    )
    return sum(1 for line in out.stderr.splitlines() if line.startswith("Arena "))


def test_an_index_process_keeps_one_arena_a_core() -> None:
    cores = max(2, len(os.sched_getaffinity(0)))
    uncapped = _arenas("none")
    if uncapped <= cores:
        pytest.skip(f"glibc gave {uncapped} arenas to 8 threads without a bound: nothing to bound here")
    assert _arenas("cap") <= cores


def test_a_bound_the_user_set_is_left_as_it_is() -> None:
    assert _arenas("cap", {"MALLOC_ARENA_MAX": "1"}) == 1  # not raised to the default's two
