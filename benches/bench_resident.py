"""Resident memory of five agent projects on one Lite database (a script, not collected by pytest).

    python benches/bench_resident.py                     # this checkout
    python benches/bench_resident.py --package /other/python --projects 5 --further 10

Five projects, each with a live memory root, start a session through the real
``memsearch-hook`` entry point (SessionStart), as Claude Code runs it; then a
``memsearch search`` runs in each. The RSS of every memsearch process (the
database's server and its engine, watcher processes where the code under test
still starts them) is summed from ``/proc`` once the watchers have indexed.
Then *further* projects start a session each and the RSS per further root is
reported. Each figure is taken twice: right after the searches, and *idle*
seconds later (150; every session renews its lease with a prompt meanwhile,
nothing searches or writes), once the service has released the engine's idle
collections. ``--package`` runs another checkout's package (its ``python/``
directory) for a before/after comparison on the same machine.

Prints a line per phase and a last JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
MODEL_DIR = Path(
    os.environ.get("MEMSEARCH_TEST_MODEL_DIR", ROOT.parent / "shared" / "models" / "all-MiniLM-L6-v2-onnx")
)


def processes(db: str) -> dict[int, int]:
    """pid → RSS (KiB) of every process working for this run: memsearch processes
    and the engine that name its directory (the database, a memory root)."""
    out: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            argv = Path(f"/proc/{entry}/cmdline").read_bytes()
            status = Path(f"/proc/{entry}/status").read_text(encoding="ascii", errors="replace")
        except OSError:
            continue
        if os.path.dirname(db).encode() not in argv:
            continue
        for line in status.splitlines():
            if line.startswith("VmRSS:"):
                out[int(entry)] = int(line.split()[1])
    return out


class Bench:
    def __init__(self, tmp: Path, package: Path) -> None:
        self.tmp = tmp
        self.db = str(tmp / "milvus.db")
        self.collections: dict[Path, str] = {}
        home = tmp / "home"
        (home / ".memsearch").mkdir(parents=True)
        (home / ".memsearch" / "config.toml").write_text(
            f'[milvus]\nuri = "{self.db}"\n[embedding]\nmodel = "{MODEL_DIR}"\n', encoding="utf-8"
        )
        self.env = dict(os.environ, HOME=str(home), PYTHONPATH=str(package), MEMSEARCH_OFFLINE="1")
        for name in ("MEMSEARCH_DISABLE", "MEMSEARCH_DIR", "MEMSEARCH_NO_WATCH", "MEMSEARCH_LITE_MODE"):
            self.env.pop(name, None)

    def project(self, i: int) -> Path:
        p = self.tmp / f"proj{i}"
        (p / ".git").mkdir(parents=True, exist_ok=True)
        memory = p / ".memsearch" / "memory"
        memory.mkdir(parents=True, exist_ok=True)
        (memory / "2026-11-20.md").write_text(
            f"## Session 10:00\n\n### 10:00\n- Project {i} keeps its release notes in docs/release-{i}.md.\n"
            f"- The build of project {i} takes {i + 3} minutes on CI.\n",
            encoding="utf-8",
        )
        return p

    def hook(self, project: Path, event: str, payload: dict[str, Any]) -> float:
        t0 = time.monotonic()
        out = subprocess.run(
            [sys.executable, "-m", "memsearch_fast.agents.main", "claude-code", event],
            input=json.dumps({"cwd": str(project), **payload}),
            capture_output=True,
            text=True,
            env=self.env,
            timeout=60,
        )
        if out.returncode != 0:
            raise SystemExit(f"hook failed: {out.stderr[-1000:]}")
        return time.monotonic() - t0

    def collection(self, project: Path) -> str:
        out = subprocess.run(
            [sys.executable, "-m", "memsearch_fast.agents.main", "claude-code", "locate"],
            input=json.dumps({"cwd": str(project)}),
            capture_output=True,
            text=True,
            env=self.env,
            timeout=60,
        )
        return str(json.loads(out.stdout)["collection"])

    def search(self, project: Path, query: str) -> str:
        collection = self.collections.get(project) or self.collections.setdefault(project, self.collection(project))
        out = subprocess.run(
            [sys.executable, "-m", "memsearch_fast.cli", "search", query, "-j", "--collection", collection],
            capture_output=True,
            text=True,
            env=self.env,
            cwd=project,
            timeout=120,
        )
        if out.returncode != 0 and "does not exist" not in out.stderr:  # not yet: the first run is not done
            raise SystemExit(f"search failed: {out.stderr[-1000:]}")
        return out.stdout

    def settle(self, projects: list[Path], timeout: float = 120.0) -> None:
        """Wait until each project's memory is searchable (its watcher's first run is done)."""
        deadline = time.monotonic() + timeout
        for i, p in enumerate(projects):
            while f"release-{i}.md" not in self.search(p, f"where are the release notes of project {i}"):
                if time.monotonic() > deadline:
                    raise SystemExit(f"project {i} was never indexed")
                time.sleep(1.0)

    def stop(self) -> None:
        subprocess.run(
            [sys.executable, "-m", "memsearch_fast.serve.lite_main", "stop", self.db],
            env=self.env,
            capture_output=True,
            timeout=60,
        )
        for pid in processes(self.db):  # watcher processes of the code under test, if any
            argv = Path(f"/proc/{pid}/cmdline").read_bytes()
            if self.tmp.as_posix().encode() in argv:
                os.kill(pid, 15)


def idle(bench: Bench, projects: list[Path], sessions: list[str], seconds: float) -> None:
    """Let *seconds* pass with every session alive (a prompt each 30 s renews its lease) and no
    search or new turn: the engine's idle collections are released meanwhile."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for p, session in zip(projects, sessions, strict=True):
            bench.hook(p, "user-prompt", {"session_id": session, "prompt": "carry on"})
        time.sleep(max(0.0, min(30.0, deadline - time.monotonic())))


def total_mb(db: str) -> tuple[float, int]:
    procs = processes(db)
    if os.environ.get("BENCH_VERBOSE"):
        for pid, kb in sorted(procs.items()):
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")[:160].decode(errors="replace")
            print(f"  {pid} {kb / 1024:.0f} MB {argv}", flush=True)
    return sum(procs.values()) / 1024, len(procs)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--projects", type=int, default=5)
    parser.add_argument("--further", type=int, default=10)
    parser.add_argument("--package", type=Path, default=ROOT / "python")
    parser.add_argument(
        "--idle", type=float, default=150.0, help="seconds without searches before the steady-state figure (0: none)"
    )
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-resident-"))
    bench = Bench(tmp, args.package.resolve())
    result: dict[str, Any] = {"package": str(args.package), "projects": args.projects}
    try:
        projects = [bench.project(i) for i in range(args.projects)]
        starts = [bench.hook(p, "session-start", {"session_id": f"s{i}"}) for i, p in enumerate(projects)]
        bench.settle(projects)
        time.sleep(2.0)
        mb, n = total_mb(bench.db)
        result.update(rss_mb=round(mb, 1), processes=n, session_start_s=sorted(starts)[len(starts) // 2])
        print(f"{args.projects} projects, a search in each: {mb:.0f} MB in {n} processes", flush=True)
        if args.idle > 0:
            idle(bench, projects, [f"s{i}" for i in range(len(projects))], args.idle)
            mb_idle, _ = total_mb(bench.db)
            result.update(rss_mb_idle=round(mb_idle, 1))
            print(f"{args.projects} projects, {args.idle:.0f} s later (leases renewed): {mb_idle:.0f} MB", flush=True)
        more = [bench.project(args.projects + i) for i in range(args.further)]
        for i, p in enumerate(more):
            bench.hook(p, "session-start", {"session_id": f"f{i}"})
        bench.settle(projects + more)
        time.sleep(2.0)
        mb2, n2 = total_mb(bench.db)
        per = (mb2 - mb) / max(1, args.further)
        result.update(rss_mb_after_further=round(mb2, 1), processes_after_further=n2, rss_mb_per_root=round(per, 2))
        print(f"+{args.further} roots: {mb2:.0f} MB in {n2} processes, {per:.1f} MB per further root", flush=True)
        if args.idle > 0:
            sessions = [f"s{i}" for i in range(len(projects))] + [f"f{i}" for i in range(len(more))]
            idle(bench, projects + more, sessions, args.idle)
            mb2_idle, _ = total_mb(bench.db)
            per_idle = (mb2_idle - mb_idle) / max(1, args.further)
            result.update(rss_mb_after_further_idle=round(mb2_idle, 1), rss_mb_per_root_idle=round(per_idle, 2))
            print(f"+{args.further} roots, idle: {mb2_idle:.0f} MB, {per_idle:.1f} MB per further root", flush=True)
        for i, p in enumerate(projects + more):
            bench.hook(p, "session-end", {"session_id": f"s{i}" if i < args.projects else f"f{i - args.projects}"})
    finally:
        bench.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    result["uptime"] = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
