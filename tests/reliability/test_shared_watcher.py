"""The service watches every root with one inotify instance.

The kernel allows a user 128 of them; a service that made one per watched root
took them all at 140 roots (`memsearch watch notes/*`), failed the rest every
second, and left the user's editors none. Real inotify, a real service.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from memsearch_fast.serve import client
from memsearch_fast.serve.notify import Hub
from tests.helpers.lease import lease

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts inotify instances in /proc")


@pytest.fixture
def served_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """This process and the service it starts: a HOME of their own, leases that outlive the test."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("MEMSEARCH_OFFLINE", "1")
    monkeypatch.setenv("MEMSEARCH_WATCH_LEASE_S", "300")
    for k in ("MEMSEARCH_LITE_MODE", "MEMSEARCH_SEARCH_SERVICE", "MEMSEARCH_SEARCH_UNLOAD_S"):
        monkeypatch.delenv(k, raising=False)
    (tmp_path / "home").mkdir()


def open_files(pid: int | str = "self") -> list[str]:
    """What *pid*'s descriptors name (one closed while they are read is left out)."""
    held = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            held.append(os.readlink(f"/proc/{pid}/fd/{fd}"))
        except OSError:
            continue
    return held


def inotify_instances(pid: int | str = "self") -> int:
    return open_files(pid).count("anon_inode:inotify")


def _scenario(tmp_path: Path) -> dict[str, Any]:
    """Forty roots on one hub, run in a process of its own (no other thread there opens
    or closes an inotify instance while they are counted)."""
    roots = [tmp_path / f"r{i:02d}" for i in range(40)]
    for r in roots:
        (r / "sub").mkdir(parents=True)
    before = inotify_instances()

    async def main() -> tuple[int, dict[int, set[str]], dict[int, set[str]]]:
        hub = Hub()
        stop = asyncio.Event()
        heard: dict[int, set[str]] = {}
        ready = 0

        async def follow(i: int) -> None:
            nonlocal ready
            first = True
            async for changes in hub.changes(str(roots[i]), stop_event=stop, rust_timeout=50):
                if first:
                    ready, first = ready + 1, False
                heard.setdefault(i, set()).update(p for _, p in changes)

        tasks = [asyncio.create_task(follow(i)) for i in range(len(roots))]
        while ready < len(roots):
            await asyncio.sleep(0.05)
        during = inotify_instances()
        (roots[17] / "sub" / "a.md").write_text("seventeen\n")
        (roots[3] / "b.md").write_text("three\n")
        deadline = time.monotonic() + 10
        while not ({17, 3} <= heard.keys() and heard[17] and heard[3]) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        first = {k: set(v) for k, v in heard.items()}
        # A root released and another leased: the watcher is made again, and no event is lost meanwhile.
        stop_one = asyncio.Event()
        extra = tmp_path / "extra"
        extra.mkdir()
        late: set[str] = set()

        async def follow_extra() -> None:
            async for changes in hub.changes(str(extra), stop_event=stop_one, rust_timeout=50):
                late.update(p for _, p in changes)

        extra_task = asyncio.create_task(follow_extra())
        (roots[30] / "c.md").write_text("thirty\n")  # while the watcher is being made again
        await asyncio.sleep(0.5)
        (extra / "d.md").write_text("extra\n")
        deadline = time.monotonic() + 10
        while not (late and heard.get(30)) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        stop_one.set()
        stop.set()
        await asyncio.gather(*tasks, extra_task)
        hub.close()
        heard[99] = late
        return during, first, heard

    during, first, heard = asyncio.run(main())
    # The watcher's own thread closes its instance once told to: on busy cores, a moment later.
    deadline = time.monotonic() + 10
    while inotify_instances() > before and time.monotonic() < deadline:
        time.sleep(0.05)
    return {
        "more": during - before,
        "after": inotify_instances() - before,
        "first": {str(k): sorted(v) for k, v in first.items() if v},
        "thirty": sorted(heard.get(30, ())),
        "late": sorted(heard[99]),
    }


def test_forty_roots_share_one_watcher_and_each_hears_only_its_own(tmp_path: Path) -> None:
    code = (
        "import json, sys; from pathlib import Path; "
        "from tests.reliability.test_shared_watcher import _scenario; "
        "print(json.dumps(_scenario(Path(sys.argv[1]))))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)],
        cwd=Path(__file__).resolve().parents[2],
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    roots = [tmp_path / f"r{i:02d}" for i in range(40)]
    assert got["more"] == 1  # forty roots, one inotify instance
    assert got["first"] == {"3": [str(roots[3] / "b.md")], "17": [str(roots[17] / "sub" / "a.md")]}
    assert str(roots[30] / "c.md") in got["thirty"] and str(tmp_path / "extra" / "d.md") in got["late"]
    assert got["after"] == 0  # closed with the hub


@pytest.mark.slow(reason="starts the resident service with the real model and leases 30 roots")
def test_the_service_watches_thirty_roots_with_one_inotify_instance_and_no_idle_files(
    served_home, db, model_dir, tmp_path
) -> None:
    roots = []
    for i in range(30):
        r = tmp_path / f"notes{i:02d}"
        r.mkdir()
        (r / "a.md").write_text(f"# Note {i}\n\nThe relay number {i} listens on port {7000 + i}.\n", encoding="utf-8")
        roots.append(r)
    for i, r in enumerate(roots):
        assert client.send_lease(str(db), lease(model_dir, r, f"s{i}", os.getpid()), start=i == 0)["ok"]
    pid = int(client.server_record(str(db))["pid"])  # type: ignore[index]

    def ran() -> bool:
        st = client.status(str(db))
        return bool(st) and len(st["roots"]) == 30 and all(x["runs"] >= 1 for x in st["roots"])

    deadline = time.monotonic() + 180
    while not ran():
        assert time.monotonic() < deadline, client.status(str(db))
        time.sleep(0.5)
    assert inotify_instances(pid) <= 1
    # Between runs a root holds its watcher lock and nothing else (no span file, no journal).
    held = open_files(pid)
    assert not [h for h in held if ".spans" in h], held
    (roots[29] / "b.md").write_text("# Cache\n\nThe otter cache expires after ninety seconds.\n", encoding="utf-8")
    deadline = time.monotonic() + 60
    while True:
        st = client.status(str(db))
        last = next(x for x in st["roots"] if x["root"] == str(roots[29]))  # type: ignore[index]
        if last["runs"] >= 2:
            break
        assert time.monotonic() < deadline, last
        time.sleep(0.3)
    assert last["last_run"]["changed"] == 1
    for i in range(30):
        client.call(str(db), {"op": "watch.release", "holder": f"s{i}", "roots": None, "collection": None}, 10.0)
