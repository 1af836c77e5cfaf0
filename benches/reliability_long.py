"""The long reliability run (a script, not collected by pytest).

    python benches/reliability_long.py                          # 100 kill points, 30 minutes concurrent
    python benches/reliability_long.py --points 16 --minutes 2  # a short run

Phase 1, kill points: ``--points`` index runs of a generated corpus (cold, or
incremental after edits, deletes, additions and a rename), each interrupted
at a seeded random point: kill -9 of the ``memsearch index`` CLI (anywhere
after its store is open, or within its writes), SIGINT, SIGTERM, or kill -9
of the database's Lite server and its engine. After each, one clean
``memsearch index`` run; the database must then hold exactly what a clean
index of the same files into a fresh database holds.

Phase 2, concurrency: ``--minutes`` of one database shared by a ``memsearch
watch``, a writer changing the files every few seconds, ``memsearch index``
runs every 5-15 s (a second writer; one in five killed -9), searches from
this process (the model kept loaded), lazy-sync searches (``memsearch search
--sync``) every 3-10 s, and agent sessions on a git project beside the tree,
driven through the real hook entry point (SessionStart, journal appends as a
capture writes them, SessionEnd; some ended at once after their start, some
with their watcher killed -9, some never ended). Then the writer stops, the
watch settles, and the database is compared with a clean index of the final
files; then once more after one more ``memsearch index``. The project's
collection is compared with a clean index of its memory after one more
session, and once every session has ended no watcher of the project may be
left (leaked processes).

With ``--bad-inputs`` (default) both corpora also hold the bad files of
``tests/reliability/test_kill.py`` (invalid UTF-8, NUL bytes, a 5 MB line,
10,000 headings, a symlink loop, a FIFO, a failing name with a newline, a
directory named like a file); index runs then exit 1, as the CLI defines.

Prints each phase's figures and a last JSON line: lost, duplicate, stale and
changed rows (0 expected), hangs and leaked processes (0 expected), and the
counts behind them.
Exit status 0 when every one of those is 0.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from memsearch_fast.lite import broker as lite_broker  # noqa: E402
from tests.helpers import harness  # noqa: E402 - after the path is set
from tests.helpers.harness import (  # noqa: E402
    Background,
    RunWatcher,
    bad_corpus,
    census,
    cli_env,
    copy_database,
    corpus,
    differences,
    exits_within,
    index_args,
    memsearch,
    mutate,
    server_pids,
    stop_servers,
)

KINDS = {  # kind: weight
    "kill9-run": 4,
    "kill9-writes": 3,
    "sigint": 1,
    "sigterm": 1,
    "server-kill9": 1,
}
QUERIES = [
    "retries with exponential backoff",
    "postgres migration lock timeout",
    "thumbnail service libvips",
    "flaky test temp directory",
    "deploy key fingerprint",
    "数据库迁移",
    "idempotency keys",
]


class Tally:
    def __init__(self) -> None:
        self.rows = Counter[str]()
        self.hangs = 0
        self.leaked = 0
        self.events = Counter[str]()
        self.failures: list[str] = []

    def compare(
        self, db: Path, want: dict[str, Any], what: str, collection: str = harness.COLLECTION
    ) -> dict[str, int]:
        got, count = census(db, collection)
        diff = differences(got, want)
        diff["duplicate"] = count - len(got)
        for k, v in diff.items():
            self.rows[k] += v
        if any(diff.values()):
            self.failures.append(f"{what}: {diff}")
        return diff


def reference(
    env: dict[str, str],
    model: Path,
    tree: Path,
    db: Path,
    ok_codes: tuple[int, ...],
    collection: str = harness.COLLECTION,
) -> dict[str, Any]:
    more = ["-q", "--collection", collection]
    proc = memsearch(index_args([tree], db, model, *more), env, timeout=900)
    if proc.returncode not in ok_codes:
        raise SystemExit(f"reference index of {tree} failed (rc {proc.returncode}): {proc.stderr[-2000:]}")
    rows, count = census(db, collection)
    assert count == len(rows)
    lite_broker.stop_server(str(db))
    return rows


def kill_point(
    i: int,
    kind: str,
    rng: random.Random,
    env: dict[str, str],
    model: Path,
    db: Path,
    tree: Path,
    window: harness.Window,
    ok_codes: tuple[int, ...],
    tally: Tally,
) -> tuple[int | None, int]:
    """One interrupted run and its repair; (the interrupted run's status, rows it left)."""
    run = Background(index_args([tree], db, model, "-q"), env, db.parent / "logs", f"{db.stem}-{i}")
    watcher = RunWatcher(run, db)
    status: int | None = None
    try:
        t0 = watcher.until(watcher.store_open)
        from_writes = kind == "kill9-writes"
        if from_writes:
            t0 = watcher.until(watcher.writing)
        span = (window.end - window.first_write) if from_writes else window.end
        delay = rng.uniform(0.02, 0.95) * max(span, 0.05)
        if not exits_within(run, t0 + delay):
            if kind == "server-kill9":
                for pid in server_pids(db):
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
            else:
                sig = {"sigint": signal.SIGINT, "sigterm": signal.SIGTERM}.get(kind, signal.SIGKILL)
                run.signal(sig)
        try:
            status = run.proc.wait(300)
        except Exception:  # noqa: BLE001 - a hang is a finding, not a crash of the bench
            tally.hangs += 1
            tally.failures.append(f"point {i} ({kind}): the index run hung")
            run.kill()
    finally:
        watcher.close()
    left = len(census(db)[0]) if db.exists() else 0
    repair = memsearch(index_args([tree], db, model, "-q"), env, timeout=900)
    if repair.returncode not in ok_codes:
        tally.failures.append(f"point {i} ({kind}): repair exited {repair.returncode}: {repair.stderr[-300:]}")
    return status, left


def phase_kills(args: argparse.Namespace, base: Path, env: dict[str, str], tally: Tally) -> dict[str, Any]:
    model = args.model
    rng = random.Random(args.seed)
    cold_tree, warm_tree = base / "cold" / "notes", base / "warm" / "notes"
    for tree in (cold_tree, warm_tree):  # the same files twice (a FIFO cannot be copied)
        corpus(tree, args.corpus_kb * 1000, seed=args.seed)
        if args.bad_inputs:
            bad_corpus(tree / "bad", args.seed + 1)
    ok_codes = (1,) if args.bad_inputs else (0,)

    want_cold = reference(env, model, cold_tree, base / "ref-cold.db", ok_codes)
    cold_window = timed(env, model, cold_tree, base / "timed-cold.db", ok_codes)
    warm_base = base / "warm-base.db"
    reference(env, model, warm_tree, warm_base, ok_codes)
    mutate(warm_tree, seed=args.seed)
    want_warm = reference(env, model, warm_tree, base / "ref-warm.db", ok_codes)
    copy_database(warm_base, base / "timed-warm.db")
    warm_window = timed(env, model, warm_tree, base / "timed-warm.db", ok_codes)
    print(
        f"corpus: {len(want_cold)} rows cold, {len(want_warm)} after the change; "
        f"store open -> first write -> end: cold {cold_window.first_write:.2f} / {cold_window.end:.2f} s, "
        f"incremental {warm_window.first_write:.2f} / {warm_window.end:.2f} s",
        flush=True,
    )
    kinds = [k for k, w in KINDS.items() for _ in range(w)]
    statuses = Counter[str]()
    left_partial = 0
    started = time.monotonic()
    for i in range(args.points):
        kind = rng.choice(kinds)
        warm = i % 2 == 1
        db = base / "points" / f"p{i:03d}.db"
        db.parent.mkdir(exist_ok=True)
        if warm:
            copy_database(warm_base, db)
        tree, want, window = (warm_tree, want_warm, warm_window) if warm else (cold_tree, want_cold, cold_window)
        status, left = kill_point(i, kind, rng, env, model, db, tree, window, ok_codes, tally)
        diff = tally.compare(db, want, f"point {i} ({kind}, {'incremental' if warm else 'cold'})")
        statuses[f"{kind}:{status}"] += 1
        left_partial += int(left > 0 and left != len(want))
        tally.events[f"{'warm' if warm else 'cold'} {kind}"] += 1
        print(
            f"point {i:3d} {'warm' if warm else 'cold'} {kind:13s} status {status}, {left} rows left -> {diff}",
            flush=True,
        )
        lite_broker.stop_server(str(db))
        shutil.rmtree(db.parent / "logs", ignore_errors=True)
        if db.is_dir():
            shutil.rmtree(db, ignore_errors=True)
        else:
            for f in db.parent.glob(db.name + "*"):
                with contextlib.suppress(OSError):
                    f.unlink()
    return {
        "points": args.points,
        "seconds": round(time.monotonic() - started, 1),
        "statuses": dict(sorted(statuses.items())),
        "points_that_left_a_partial_index": left_partial,
    }


def timed(env: dict[str, str], model: Path, tree: Path, db: Path, ok_codes: tuple[int, ...]) -> harness.Window:
    run = Background(index_args([tree], db, model, "-q"), env, db.parent / "logs", db.stem)
    watcher = RunWatcher(run, db)
    try:
        opened = watcher.until(watcher.store_open)
        writing = watcher.until(watcher.writing)
        rc = run.wait(900)
        if rc not in ok_codes:
            raise SystemExit(f"timed run failed (rc {rc}): {run.stderr()[-2000:]}")
        return harness.Window(writing - opened, time.monotonic() - opened)
    finally:
        watcher.close()
        lite_broker.stop_server(str(db))


# -- phase 2 ----------------------------------------------------------------------------------


def change_files(root: Path, rng: random.Random, n: int) -> str:
    files = sorted(p for p in root.rglob("*.md") if p.is_file() and not p.is_symlink() and "bad" not in p.parts)
    what = rng.choice(["edit", "append", "add", "delete", "rename"] if len(files) > 5 else ["add"])
    if what == "add" or not files:
        d = root / "memory" / "live"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"live-{n}.md").write_text(f"# Live {n}\n\nA note written during the run, number {n}.\n", "utf-8")
    elif what == "delete":
        rng.choice(files).unlink()
    elif what == "rename":
        f = rng.choice(files)
        f.rename(f.with_name(f"moved-{n}-{f.name}"))
    else:
        f = rng.choice(files)
        text = f.read_text("utf-8")
        if what == "append":
            text += f"\n\n## Later {n}\n\nAppended while indexing, change {n}.\n"
        else:
            lines = text.split("\n")
            lines.insert(rng.randrange(1, max(2, len(lines))), f"Edited during the run ({n}).")
            text = "\n".join(lines)
        f.write_text(text, "utf-8")
    return what


class Sessions:
    """Agent sessions on a git project, through ``python -m memsearch_fast.agents.main`` as the agents run it."""

    def __init__(self, base: Path, env: dict[str, str], db: Path, model: Path) -> None:
        import subprocess

        self.project = base / "live" / "project"
        self.project.mkdir(parents=True)
        subprocess.run(["git", "init", "-q", str(self.project)], check=True)
        self.memory = self.project / ".memsearch" / "memory"
        home = Path(env["HOME"])
        (home / ".memsearch").mkdir(parents=True, exist_ok=True)
        (home / ".memsearch" / "config.toml").write_text(
            f'[milvus]\nuri = "{db}"\n[embedding]\nmodel = "{model}"\n', encoding="utf-8"
        )
        self.env = dict(env)
        self.open: list[str] = []
        self.n = 0

    def hook(self, event: str, session: str) -> int:
        import subprocess

        done = subprocess.run(
            [sys.executable, "-m", "memsearch_fast.agents.main", "claude-code", event],
            input=json.dumps({"cwd": str(self.project), "session_id": session}),
            capture_output=True,
            text=True,
            env=self.env,
            timeout=60,
        )
        json.loads(done.stdout or "{}")  # one JSON object (or nothing), always
        return done.returncode

    def append(self, session: str, rng: random.Random) -> None:
        from memsearch_fast.agents import journal

        day = time.strftime("%Y-%m-%d")
        words = " ".join(rng.choice(QUERIES) for _ in range(4))
        bullets = [f"- Worked on {words} ({rng.randrange(10**6)})", "- Left a follow-up in the tracker"]
        journal.append(self.memory / f"{day}.md", time.strftime("%H:%M"), journal.Anchor(session, "t", ""), bullets)

    def watchers(self) -> list[int]:
        return harness.watcher_pids(self.memory)

    def step(self, rng: random.Random, counts: Counter[str]) -> None:
        """One thing a user's agent does: start, work, end (sometimes at once), or lose its watcher."""
        roll = rng.random()
        if not self.open or roll < 0.3:
            self.n += 1
            session = f"s{self.n}"
            self.hook("session-start", session)
            counts["session start"] += 1
            if rng.random() < 0.25:
                self.hook("session-end", session)  # ended right after its start
                counts["session end at once"] += 1
            elif rng.random() < 0.1:
                counts["session never ended"] += 1  # a crashed agent: its marker goes stale
            else:
                self.open.append(session)
        elif roll < 0.8:
            self.append(rng.choice(self.open), rng)
            counts["journal append"] += 1
        elif roll < 0.9:
            for pid in self.watchers():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                    counts["session watcher killed -9"] += 1
        else:
            self.hook("session-end", self.open.pop(rng.randrange(len(self.open))))
            counts["session end"] += 1

    def finish(self) -> int:
        """End every session (then one full session, so the last appends are indexed);
        the watchers left once all have ended."""
        self.hook("session-start", "last")
        for session in [*self.open, "last"]:
            self.hook("session-end", session)
        self.open = []
        # Markers of sessions that never ended are stale only after a day: remove them as that day would.
        for marker in (self.project / ".memsearch" / "sessions").iterdir():
            marker.unlink()
        self.hook("session-end", "stale-cleanup")
        deadline = time.monotonic() + 30
        while self.watchers() and time.monotonic() < deadline:
            time.sleep(0.5)
        return len(self.watchers())


def phase_concurrent(args: argparse.Namespace, base: Path, env: dict[str, str], tally: Tally) -> dict[str, Any]:
    from memsearch_fast.api import MemSearch

    model = args.model
    rng = random.Random(args.seed + 7)
    tree = base / "live" / "notes"
    corpus(tree, args.corpus_kb * 1000, seed=args.seed + 3)
    if args.bad_inputs:
        bad_corpus(tree / "bad", args.seed + 4)
    ok_codes = (1,) if args.bad_inputs else (0,)
    db = base / "live.db"
    first = memsearch(index_args([tree], db, model, "-q"), env, timeout=900)
    assert first.returncode in ok_codes, first.stderr
    watch = Background(
        ["watch", str(tree), "--milvus-uri", str(db), "-m", str(model), "--debounce-ms", "500"],
        env,
        base / "logs",
        "watch",
    )
    stop = threading.Event()
    counts: Counter[str] = Counter()
    latencies: list[float] = []
    sessions = Sessions(base, env, db, model)

    def syncer() -> None:
        local = random.Random(args.seed + 17)
        while not stop.wait(local.uniform(3, 10)):
            done = memsearch(["search", local.choice(QUERIES), "--sync", "-j", "--milvus-uri", str(db)], env)
            counts[f"search --sync exit {done.returncode}"] += 1
            if done.returncode != 0:
                tally.failures.append(f"search --sync exited {done.returncode}: {done.stderr[-300:]}")

    def agent() -> None:
        local = random.Random(args.seed + 19)
        while not stop.wait(local.uniform(0.5, 3.0)):
            try:
                sessions.step(local, counts)
            except Exception as exc:  # noqa: BLE001 - counted
                counts["session error"] += 1
                tally.failures.append(f"session step failed: {exc}")

    def writer() -> None:
        n = 0
        while not stop.wait(rng.uniform(1.0, 4.0)):
            n += 1
            counts["change " + change_files(tree, rng, n)] += 1

    def indexer() -> None:
        local = random.Random(args.seed + 11)
        k = 0
        while not stop.wait(local.uniform(5, 15)):
            k += 1
            run = Background(index_args([tree], db, model, "-q"), env, base / "logs", f"index-{k}")
            killed = local.random() < 0.2
            if killed and not exits_within(run, time.monotonic() + local.uniform(1, 8)):
                run.kill()
                counts["index killed -9"] += 1
                continue
            try:
                rc = run.proc.wait(600)
            except Exception:  # noqa: BLE001
                tally.hangs += 1
                tally.failures.append(f"concurrent index run {k} hung")
                run.kill()
                continue
            counts[f"index exit {rc}"] += 1
            if rc not in ok_codes:
                tally.failures.append(f"concurrent index run {k} exited {rc}: {run.stderr()[-300:]}")

    def searcher() -> None:
        async def loop() -> None:
            with MemSearch([str(tree)], embedding_model=str(model), milvus_uri=str(db)) as ms:
                local = random.Random(args.seed + 13)
                while not stop.is_set():
                    t = time.perf_counter()
                    try:
                        hits = await ms.search(local.choice(QUERIES), top_k=5)
                        latencies.append(time.perf_counter() - t)
                        counts["search ok"] += 1
                        counts["search foreign hits"] += sum(not h["source"].startswith(str(tree)) for h in hits)
                    except Exception as exc:  # noqa: BLE001 - counted
                        counts["search error"] += 1
                        tally.failures.append(f"search failed: {exc}")
                    await asyncio.sleep(local.uniform(0.2, 1.0))

        asyncio.run(loop())

    threads = [threading.Thread(target=f, daemon=True) for f in (writer, indexer, searcher, syncer, agent)]
    started = time.monotonic()
    for t in threads:
        t.start()
    try:
        while time.monotonic() - started < args.minutes * 60:
            time.sleep(5)
            if watch.proc.poll() is not None:
                tally.failures.append(f"watch exited {watch.proc.returncode}: {watch.stderr()[-300:]}")
                break
            print(f"  {time.monotonic() - started:6.0f} s: {dict(counts)}", flush=True)
    finally:
        stop.set()
        for t in threads:
            t.join(900)
    # Let the watch take in the last changes: no new run for 8 quiet seconds.
    settle_deadline = time.monotonic() + 300
    runs = -1
    while time.monotonic() < settle_deadline:
        now = watch.stderr().count("indexed:")
        if now == runs:
            break
        runs = now
        time.sleep(8)
    clean = base / "live-clean.db"
    want = reference(env, model, tree, clean, ok_codes)
    after_watch = tally.compare(db, want, "concurrent: after the watch settled")
    watch.signal(signal.SIGTERM)
    try:
        watch_rc = watch.proc.wait(300)
    except Exception:  # noqa: BLE001
        tally.hangs += 1
        tally.failures.append("watch did not stop on SIGTERM")
        watch.kill()
        watch_rc = None
    last = memsearch(index_args([tree], db, model, "-q"), env, timeout=900)
    after_index = tally.compare(db, want, "concurrent: after one more index run")
    from memsearch_fast.agents.project import locate

    leaked = sessions.finish()
    tally.leaked += leaked
    if leaked:
        tally.failures.append(f"{leaked} watcher(s) of the project left after every session ended")
    collection = locate(str(sessions.project), {}).collection
    # What the next session's watcher does first: one run over the memory (repairs what a killed watcher left).
    repair = memsearch(index_args([sessions.memory], db, model, "-q", "--collection", collection), env)
    if repair.returncode != 0:
        tally.failures.append(f"index of the project's memory exited {repair.returncode}: {repair.stderr[-300:]}")
    memory_want = reference(env, model, sessions.memory, base / "memory-clean.db", (0,), collection)
    memory_rows = tally.compare(db, memory_want, "sessions: the project's collection", collection)
    err = watch.stderr()
    return {
        "minutes": args.minutes,
        "watch_runs": err.count("indexed:"),
        "watch_errors": err.count("error:"),
        "watch_waited_for_a_writer": err.count("waiting for it to finish"),
        "watch_exit": watch_rc,
        "last_index_exit": last.returncode,
        "counts": dict(sorted(counts.items())),
        "search_p50_ms": round(statistics.median(latencies) * 1000, 1) if latencies else None,
        "after_watch_settled": after_watch,
        "after_one_more_index": after_index,
        "sessions_collection": memory_rows,
        "leaked_watchers": leaked,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--points", type=int, default=100, help="kill points (default 100)")
    p.add_argument("--minutes", type=float, default=30, help="minutes of concurrent index/search/watch (default 30)")
    p.add_argument("--corpus-kb", type=int, default=150, help="size of each generated corpus (default 150 KB)")
    p.add_argument("--seed", type=int, default=2026)
    p.add_argument("--bad-inputs", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument(
        "--model",
        type=Path,
        default=Path(os.environ.get("MEMSEARCH_TEST_MODEL_DIR", ROOT.parent / "shared/models/all-MiniLM-L6-v2-onnx")),
    )
    p.add_argument("--work", type=Path, default=None, help="working directory (default: a temp dir, removed)")
    args = p.parse_args(argv)
    os.environ.pop("MEMSEARCH_LITE_MODE", None)
    os.environ.setdefault("MEMSEARCH_LITE_IDLE_TIMEOUT", "60")
    base = args.work or Path(tempfile.mkdtemp(prefix="memsearch-reliability-"))
    base.mkdir(parents=True, exist_ok=True)
    env = cli_env(base / "home")
    tally = Tally()
    started = time.monotonic()
    result: dict[str, Any] = {}
    try:
        if args.points:
            print(f"== phase 1: {args.points} kill points", flush=True)
            result["kills"] = phase_kills(args, base, env, tally)
            print(json.dumps(result["kills"]), flush=True)
        if args.minutes:
            print(f"== phase 2: {args.minutes} minutes of concurrent index/search/watch", flush=True)
            result["concurrent"] = phase_concurrent(args, base, env, tally)
            print(json.dumps(result["concurrent"]), flush=True)
    finally:
        stop_servers(base)
        if args.work is None:
            shutil.rmtree(base, ignore_errors=True)
    summary = {
        "lost": tally.rows["lost"],
        "duplicate": tally.rows["duplicate"],
        "stale": tally.rows["stale"],
        "changed": tally.rows["changed"],
        "hangs": tally.hangs,
        "leaked": tally.leaked,
        "failures": tally.failures[:20],
        "seconds": round(time.monotonic() - started, 1),
        **result,
    }
    print("== summary")
    for line in tally.failures[:20]:
        print("  " + line)
    print(json.dumps(summary))
    bad = any(summary[k] for k in ("lost", "duplicate", "stale", "changed", "hangs", "leaked"))
    return 1 if bad or tally.failures else 0


if __name__ == "__main__":
    sys.exit(main())
