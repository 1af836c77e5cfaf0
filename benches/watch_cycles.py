"""Watcher start/stop cycles as agent sessions make them (a script, not collected by pytest).

    python benches/watch_cycles.py                # 50 cycles
    python benches/watch_cycles.py --cycles 10

Each cycle is one of the ways sessions come and go on one project, through
the real ``memsearch-hook`` entry point (SessionStart spawns the watcher,
SessionEnd stops it when no other session remains) and the real CLI:

- *one*: a session starts and ends;
- *two*: two sessions start at the same moment, then end one after the other;
- *crash*: a session starts and its watcher is killed -9 (the next session
  must replace it);
- *orphan*: a session starts and never ends (the agent died);
- *manual*: two ``memsearch watch`` on the project's memory started at once
  by hand, beside the hooks' one;
- *worktree*: a second project (a git worktree) starts a session and is
  then deleted without SessionEnd: its watcher must exit by itself;
- *codex*: a second project's session is started by an agent process (a
  fake ``codex``) that never sends SessionEnd and is killed -9: its root
  must be unwatched within 2 minutes;
- *service*: a session starts and the database's service is killed -9 (the
  next event restarts it and registers the root again).

After every cycle the watchers are counted: processes running ``memsearch
watch`` on this database (from ``/proc``) and the roots the database's
service watches (``memsearch status``): once settled (10 s at most), at
most one per database and root may be alive. A sampler also records the
peak seen at any moment (a second watcher lives until it has read the lock).
At the end the last session ends: no watcher may be left, and no memsearch
process one idle timeout later.

Prints a line per cycle and a last JSON line; exit status 0 when every check held.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
MODEL_DIR = Path(
    os.environ.get("MEMSEARCH_TEST_MODEL_DIR", ROOT.parent / "shared" / "models" / "all-MiniLM-L6-v2-onnx")
)
KINDS = ("one", "two", "crash", "orphan", "manual", "worktree", "codex", "service")
#: The server's idle timeout here (seconds): how long after the last session it may live.
IDLE_S = 5


def watchers(db: str) -> dict[int, str]:
    """pid → watched root of every ``memsearch watch`` process on *db*."""
    found: dict[int, str] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        args = [a.decode(errors="replace") for a in argv if a]
        if "watch" in args and db in args and any("memsearch" in a for a in args[:3]):
            try:
                state = Path(f"/proc/{entry}/stat").read_text().split(") ", 1)[1].split()[0]
            except (OSError, IndexError):
                continue
            if state != "Z":
                found[int(entry)] = args[args.index("watch") + 1]
    return found


def served(db: str) -> list[str]:
    """The roots the database's service watches (one entry per watcher)."""
    from memsearch_fast.serve import client

    st = client.status(db)
    return [r["root"] for r in (st or {}).get("roots", [])]


def all_roots(db: str) -> list[str]:
    return list(watchers(db).values()) + served(db)


def service_pid(db: str) -> int | None:
    from memsearch_fast.lite.state import read_state

    st = read_state(db)
    pid = st.get("pid") if st else None
    return pid if isinstance(pid, int) else None


def memsearch_processes(tmp: Path) -> list[int]:
    """Processes of this run still alive (the service, its engine, watchers)."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                if str(tmp).encode() in Path(f"/proc/{entry}/cmdline").read_bytes():
                    state = Path(f"/proc/{entry}/stat").read_text().rsplit(") ", 1)[1].split()[0]
                    if state != "Z":
                        out.append(int(entry))
    return out


class Lab:
    """A HOME with a config, projects, and the hook runner."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.home = tmp / "home"
        (self.home / ".memsearch").mkdir(parents=True)
        self.db = str(tmp / "milvus.db")
        (self.home / ".memsearch" / "config.toml").write_text(
            f'[milvus]\nuri = "{self.db}"\n[embedding]\nmodel = "{MODEL_DIR}"\n', encoding="utf-8"
        )
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMSEARCH_", "CLAUDE"))}
        self.env.update(HOME=str(self.home), MEMSEARCH_OFFLINE="1", HF_HUB_OFFLINE="1")
        self.env["MEMSEARCH_LITE_IDLE_TIMEOUT"] = str(IDLE_S)
        self.project = self.new_project("proj")
        self.sessions = 0

    def new_project(self, name: str) -> Path:
        project = self.tmp / name
        (project / ".git").mkdir(parents=True)
        memory = project / ".memsearch" / "memory"
        memory.mkdir(parents=True)
        (memory / "2026-11-23.md").write_text(f"## Session 09:00\n\n### 09:00\n- Notes of {name}.\n", encoding="utf-8")
        return project

    def hook(self, event: str, session: str, project: Path | None = None) -> subprocess.Popen[str]:
        proc = subprocess.Popen(
            [sys.executable, "-m", "memsearch_fast.agents.main", "claude-code", event],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            text=True,
            env=self.env,
            cwd=self.tmp,
        )
        assert proc.stdin is not None
        proc.stdin.write(json.dumps({"cwd": str(project or self.project), "session_id": session}))
        proc.stdin.close()
        return proc

    def run_hooks(self, *calls: tuple[str, str, Path | None]) -> None:
        procs = [self.hook(*c) for c in calls]
        for p in procs:
            if p.wait(timeout=60) != 0:
                raise AssertionError(f"hook exited {p.returncode}")

    def session(self) -> str:
        self.sessions += 1
        return f"s{self.sessions}"

    def codex_session(self, project: Path, session: str) -> subprocess.Popen[bytes]:
        """An agent process named `codex` whose hook starts a session; it never sends SessionEnd."""
        payload = self.tmp / f"{session}.json"
        payload.write_text(json.dumps({"cwd": str(project), "session_id": session}), encoding="utf-8")
        agent = self.tmp / "bin" / "codex"
        agent.parent.mkdir(exist_ok=True)
        agent.write_text(
            f'#!/bin/sh\n"{sys.executable}" -m memsearch_fast.agents.main codex session-start < "$1"\nexec sleep 600\n',
            encoding="utf-8",
        )
        agent.chmod(0o755)
        return subprocess.Popen([str(agent), str(payload)], env=self.env, stdout=subprocess.DEVNULL)

    def manual_watch(self) -> subprocess.Popen[bytes]:
        collection = json.loads(
            subprocess.run(
                [sys.executable, "-m", "memsearch_fast.agents.main", "claude-code", "locate"],
                input=json.dumps({"cwd": str(self.project)}),
                capture_output=True,
                text=True,
                env=self.env,
                check=True,
            ).stdout
        )["collection"]
        memory = str(self.project / ".memsearch" / "memory")
        argv = [sys.executable, "-m", "memsearch_fast.cli", "watch", memory, "--collection", collection]
        argv += ["--milvus-uri", self.db, "-q"]
        return subprocess.Popen(argv, env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def settle(db: str, timeout: float = 10.0) -> tuple[list[str], float]:
    """Wait until at most one watcher per root is alive; what is alive then, and how long it took."""
    start = time.monotonic()
    while True:
        alive = watchers(db)
        roots = list(alive.values()) + served(db)
        if len(roots) == len(set(roots)) or time.monotonic() - start > timeout:
            return roots, time.monotonic() - start
        time.sleep(0.1)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cycles", type=int, default=50)
    p.add_argument("--seed", type=int, default=2026)
    args = p.parse_args()
    rng = random.Random(args.seed)
    tmp = Path(tempfile.mkdtemp(prefix="ms-cycles-"))
    lab = Lab(tmp)
    peak = {"count": 0}
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            peak["count"] = max(peak["count"], len(all_roots(lab.db)))
            stop.wait(0.05)

    threading.Thread(target=sample, daemon=True).start()
    failures: list[str] = []
    open_sessions: list[str] = []
    codex_unwatched: list[float] = []
    idle_exit = -1.0
    started = time.monotonic()
    try:
        for i in range(args.cycles):
            kind = KINDS[i] if i < len(KINDS) else rng.choice(KINDS)
            s = lab.session()
            if kind == "one":
                lab.run_hooks(("session-start", s, None))
                lab.run_hooks(("session-end", s, None))
            elif kind == "two":
                t = lab.session()
                lab.run_hooks(("session-start", s, None), ("session-start", t, None))
                settle(lab.db)
                lab.run_hooks(("session-end", s, None))
                lab.run_hooks(("session-end", t, None))
            elif kind == "crash":
                lab.run_hooks(("session-start", s, None))
                time.sleep(0.5)
                for pid in watchers(lab.db):
                    os.kill(pid, signal.SIGKILL)
                open_sessions.append(s)
            elif kind == "service":
                lab.run_hooks(("session-start", s, None))
                time.sleep(0.5)
                pid = service_pid(lab.db)
                if pid is not None:
                    os.kill(pid, signal.SIGKILL)
                time.sleep(0.5)
                lab.run_hooks(("user-prompt", s, None))  # the next event: the root is watched again
                deadline = time.monotonic() + 30
                while not served(lab.db) and time.monotonic() < deadline:
                    time.sleep(0.2)
                if not served(lab.db):
                    failures.append(f"cycle {i}: the root was not registered again after the service was killed")
                open_sessions.append(s)
            elif kind == "codex":
                tree = lab.new_project(f"codex{i}")
                agent = lab.codex_session(tree, s)
                deadline = time.monotonic() + 30
                while not any(f"codex{i}" in r for r in all_roots(lab.db)) and time.monotonic() < deadline:
                    time.sleep(0.2)
                agent.kill()
                agent.wait()
                killed = time.monotonic()
                while any(f"codex{i}" in r for r in all_roots(lab.db)) and time.monotonic() - killed < 120:
                    time.sleep(0.2)
                codex_unwatched.append(round(time.monotonic() - killed, 1))
                if any(f"codex{i}" in r for r in all_roots(lab.db)):
                    failures.append(f"cycle {i}: the killed codex session's root is still watched after 2 min")
            elif kind == "orphan":
                lab.run_hooks(("session-start", s, None))
                open_sessions.append(s)
            elif kind == "manual":
                lab.run_hooks(("session-start", s, None))
                procs = [lab.manual_watch(), lab.manual_watch()]
                for proc in procs:
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        proc.wait(timeout=30)  # a second watcher says who holds the lock and exits 0
                open_sessions.append(s)
            elif kind == "worktree":
                tree = lab.new_project(f"worktree{i}")
                lab.run_hooks(("session-start", s, tree))
                time.sleep(1.0)
                shutil.rmtree(tree)
            roots, took = settle(lab.db)
            alive = roots
            ok = len(roots) == len(set(roots))
            if kind == "worktree":
                deadline = time.monotonic() + 15
                while any("worktree" in r for r in all_roots(lab.db)) and time.monotonic() < deadline:
                    time.sleep(0.2)
                if any("worktree" in r for r in all_roots(lab.db)):
                    ok = False
                    failures.append(f"cycle {i}: the deleted worktree's watcher is still alive")
            if not ok and kind != "worktree":
                failures.append(f"cycle {i} ({kind}): {len(roots)} watchers on {len(set(roots))} roots")
            print(
                f"cycle {i:3d} {kind:8s} watchers alive {len(alive)} (settled in {took:.1f} s) {'ok' if ok else 'FAIL'}"
            )
        # The last session ends: every marker is an orphan's or ours; end them all.
        lab.run_hooks(*[("session-end", s, None) for s in open_sessions])
        lab.run_hooks(("session-end", lab.session(), None))
        deadline = time.monotonic() + 30
        while all_roots(lab.db) and time.monotonic() < deadline:
            time.sleep(0.2)
        left = all_roots(lab.db)
        if left:
            failures.append(f"{len(left)} watcher(s) left after the last session ended: {sorted(left)}")
        ended = time.monotonic()
        while memsearch_processes(tmp) and time.monotonic() - ended < IDLE_S + 10:
            time.sleep(0.2)
        idle_exit = round(time.monotonic() - ended, 1)
        if memsearch_processes(tmp):
            failures.append(f"processes left {IDLE_S + 10} s after the last session: {memsearch_processes(tmp)}")
    finally:
        stop.set()
        for pid in watchers(lab.db):
            os.kill(pid, signal.SIGKILL)
        from memsearch_fast.lite import broker

        broker.stop_server(lab.db)  # the watchers' server
        shutil.rmtree(tmp, ignore_errors=True)
    result: dict[str, Any] = {
        "cycles": args.cycles,
        "failures": failures,
        "peak_watchers_at_any_moment": peak["count"],
        "codex_root_unwatched_after_kill_s": codex_unwatched,
        "last_process_gone_after_last_session_s": idle_exit,
        "seconds": round(time.monotonic() - started, 1),
        "load_avg_1m": round(os.getloadavg()[0], 2),
    }
    print(json.dumps(result))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
