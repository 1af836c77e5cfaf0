"""`memsearch watch` and lazy sync on a live corpus: latency, bursts, event storms.

Run (benchmarks are disabled by default in pytest's addopts):

    python -m pytest benches/bench_watch.py --benchmark-enable -s -q

The corpus is ``MEMSEARCH_BENCH_WATCH_MB`` MB (default 5) of the generated
daily logs and docs (`tests/helpers/corpus.py`) plus a daily log of 5,000 lines,
indexed once by `memsearch index` with the real ONNX model (int8, the
default file: about 90 s at 5 MB on two cores). Then, each test against a
`memsearch watch -j` subprocess of its own (``--debounce-ms``
``MEMSEARCH_BENCH_WATCH_DEBOUNCE_MS``, default 1500, the default):

- *lazy sync*: ``MemSearch.sync()`` on the clean tree, in process, and a
  search with and without it (no watcher running);
- *edit → searchable*: ``MEMSEARCH_BENCH_WATCH_ROUNDS`` (default 20) times,
  one ``### HH:MM`` entry with a word never seen before appended to the
  5,000-line log, then this process searches for the word every 50 ms until
  a hit holds it (the search, on the same database through its shared Lite
  server, is what an agent would run). p50/p95 of write → visible, and of
  write → the watcher's ``indexed`` event;
- *burst*: 1,000 operations as fast as they can be made (800 appends to
  random files, 100 renames, 50 deletes, 50 new files; spread over
  ``MEMSEARCH_BENCH_WATCH_BURST_S`` seconds instead when set), then the time
  from the last one until the index holds exactly the chunk ids of the final
  tree (what a clean index of it stores), checked after every watcher run;
- *storm*: twice, 10,000 file events (touches, and renames counted as the
  two events they are) in 20 waves a second apart; the watcher's RSS is
  sampled every 0.2 s (``/proc/PID/status``) from a baseline taken after it
  embedded 25 new pages (a few hundred chunks: onnxruntime's arenas at full
  batches of full-length texts) to after each storm,
  and the index must again equal the final tree. Where `watch` is a client
  of the database's service (a local database, the ONNX model), the
  service's process is sampled (its model and watchers; the Lite engine is a
  process of its own and is not counted).

Figures are printed and stored in ``extra_info``.
"""

from __future__ import annotations

import asyncio
import json
import os
import queue
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import date
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.corpus import daily_log, doc_page, write_corpus

ROOT = Path(__file__).resolve().parents[1]
MODEL_DIR = Path(
    os.environ.get("MEMSEARCH_TEST_MODEL_DIR", ROOT.parent / "shared" / "models" / "all-MiniLM-L6-v2-onnx")
)
CORPUS_MB = float(os.environ.get("MEMSEARCH_BENCH_WATCH_MB", "5"))
DEBOUNCE_MS = int(os.environ.get("MEMSEARCH_BENCH_WATCH_DEBOUNCE_MS", "1500"))
ROUNDS = int(os.environ.get("MEMSEARCH_BENCH_WATCH_ROUNDS", "20"))
BURST_S = float(os.environ.get("MEMSEARCH_BENCH_WATCH_BURST_S", "0"))
LOG_LINES = 5000
STORM_EVENTS = 10_000
STORM_WAVES = 20

if not (MODEL_DIR / "tokenizer.json").is_file():
    pytest.skip(f"benchmark model not found at {MODEL_DIR}", allow_module_level=True)


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMSEARCH_")}
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # as installed: a process does not compile its modules again
    env.update(HOME=str(home), MEMSEARCH_OFFLINE="1", HF_HUB_OFFLINE="1", MEMSEARCH_LITE_IDLE_TIMEOUT="900")
    home.mkdir(parents=True, exist_ok=True)
    return env


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _ms(values: list[float]) -> dict[str, float]:
    return {
        "p50_ms": round(_pct(values, 0.5) * 1000, 1),
        "p95_ms": round(_pct(values, 0.95) * 1000, 1),
        "max_ms": round(max(values) * 1000, 1),
    }


def _rss_kb(pid: int, field: str = "VmRSS") -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} for pid {pid}")


class Watcher:
    """A `memsearch watch -j` subprocess; its JSON events are read on a thread and timestamped."""

    def __init__(self, root: Path, flags: list[str], env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "memsearch_fast",
                "watch",
                str(root),
                *flags,
                "-j",
                "--debounce-ms",
                str(DEBOUNCE_MS),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
            env=env,
        )
        self.events: queue.Queue[tuple[float, dict[str, Any]]] = queue.Queue()
        self.stderr: list[str] = []
        self.started: dict[str, Any] = {}  # its "watching" event
        self.readers = [
            threading.Thread(target=self._read, daemon=True),
            threading.Thread(target=self._read_err, daemon=True),
        ]
        for reader in self.readers:
            reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.events.put((time.perf_counter(), json.loads(line)))

    def _read_err(self) -> None:
        assert self.proc.stderr is not None
        self.stderr.extend(self.proc.stderr)

    def next(self, kind: str, timeout: float = 600.0) -> tuple[float, dict[str, Any]]:
        """(arrival time, event) of the next event of ``kind``; others are skipped."""
        deadline = time.perf_counter() + timeout
        while True:
            left = deadline - time.perf_counter()
            if left <= 0:
                raise AssertionError(f"no {kind!r} event within {timeout} s: {''.join(self.stderr)[-2000:]}")
            try:
                at, event = self.events.get(timeout=left)
            except queue.Empty:
                continue
            if event["event"] == "error":
                print(f"\nwatcher error: {event}")
            if event["event"] == kind:
                return at, event

    def drain(self) -> list[tuple[float, dict[str, Any]]]:
        out = []
        while True:
            try:
                out.append(self.events.get_nowait())
            except queue.Empty:
                return out

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for reader in self.readers:  # they end at the pipes' end of file
            reader.join(timeout=10)
        for pipe in (self.proc.stdout, self.proc.stderr):
            if pipe is not None:
                pipe.close()


class Bench:
    """The indexed corpus, its flags, and an in-process MemSearch on the same database."""

    def __init__(self, base: Path) -> None:
        self.root = base / "corpus"
        self.total = write_corpus(self.root, total_bytes=int(CORPUS_MB * 1_000_000), seed=1)
        self.log = self.root / "memory" / "2031-01-01.md"
        rng, lines = random.Random(5), []
        day = date(2031, 1, 1)
        while len(lines) < LOG_LINES:
            lines.extend(daily_log(rng, day).splitlines())
        self.log.write_text("\n".join(lines[:LOG_LINES]) + "\n", encoding="utf-8")
        self.db = base / "m.db"
        self.env = _env(base / "home")
        self.flags = ["--milvus-uri", str(self.db), "-m", str(MODEL_DIR)]
        t0 = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, "-m", "memsearch_fast", "index", str(self.root), "-j", *self.flags],
            env=self.env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=3600,
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
        report = json.loads(proc.stdout)
        self.facts = {
            "corpus_mb": round(self.total / 1e6, 2),
            "files": report["files"],
            "chunks": report["chunks"],
            "index_s": round(time.perf_counter() - t0, 1),
            "debounce_ms": DEBOUNCE_MS,
            "cpus": os.cpu_count(),
        }
        print(f"\nindexed {self.facts}")
        from memsearch_fast.api import MemSearch

        self._home = os.environ.get("HOME")
        os.environ["HOME"] = self.env["HOME"]
        self.ms = MemSearch(milvus_uri=str(self.db), embedding_model=str(MODEL_DIR))
        self.loop = asyncio.new_event_loop()
        self.loop.run_until_complete(self.ms.search("warm up", top_k=1))
        self.model = self.ms.provider.model_name

    def search(self, query: str, top_k: int = 5) -> list[dict[str, Any]]:
        return self.loop.run_until_complete(self.ms.search(query, top_k=top_k))

    def stored(self) -> set[tuple[str, str]]:
        return set(self.ms.store.iter_ids_by_source())

    def expected(self) -> set[tuple[str, str]]:
        """The (id, source) pairs a clean index of the tree as it is now stores."""
        from memsearch_fast import chunk_files
        from memsearch_fast.index.scan import scan_paths

        return {
            (c.chunk_id(self.model), fc.path)
            for batch in chunk_files(scan_paths([self.root]))
            for fc in batch
            for c in fc.chunks
        }

    def watcher(self) -> Watcher:
        w = Watcher(self.root, self.flags, self.env)
        w.started = w.next("watching")[1]
        w.next("indexed")  # the first run: nothing changed since the index
        return w

    def watching_pid(self, w: Watcher) -> int:
        """The process that watches: the database's service where `watch` is its client."""
        if w.started.get("service"):
            from memsearch_fast.lite.state import read_state

            st = read_state(str(w.started["service"]))
            assert st is not None, "no service record"
            return int(st["pid"])
        return w.proc.pid

    def settle(self, w: Watcher, after: float, timeout: float = 900.0) -> tuple[float, list[dict[str, Any]]]:
        """Wait for the watcher's runs until the index equals the tree: (time of that run's event, runs)."""
        runs: list[dict[str, Any]] = []
        want = self.expected()
        deadline = time.perf_counter() + timeout
        while True:
            at, event = w.next("indexed", timeout=max(1.0, deadline - time.perf_counter()))
            runs.append(event)
            if at > after and self.stored() == want:
                return at, runs

    def close(self) -> None:
        self.ms.close()
        self.loop.close()
        if self._home is not None:
            os.environ["HOME"] = self._home
        from memsearch_fast.lite import broker as lite_broker

        lite_broker.stop_server(str(self.db))


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bench]:
    b = Bench(tmp_path_factory.mktemp("watch-bench"))
    try:
        yield b
    finally:
        b.close()


def _brief(run: dict[str, Any]) -> dict[str, Any]:
    """One watcher run, as its `-j` event reports it."""
    keys = ("changes", "files", "read", "changed", "embedded", "reused", "deleted", "sources_removed", "manifest")
    return {**{k: run.get(k) for k in keys}, "failed": len(run["failed"]), "seconds": round(run["seconds"], 2)}


def _docs(root: Path) -> list[Path]:
    return sorted((root / "docs").rglob("*.md"))


def test_lazy_sync_on_a_clean_tree(benchmark: Any, bench: Bench) -> None:
    """What `search --sync` adds to a search when nothing changed: the stat walk and the manifest check."""
    for _ in range(3):
        bench.loop.run_until_complete(bench.ms.sync())  # warm (and reads the files the index recorded as racy)
    syncs: list[float] = []
    reports: list[Any] = []

    def one() -> None:
        t0 = time.perf_counter()
        reports.append(bench.loop.run_until_complete(bench.ms.sync()))
        syncs.append(time.perf_counter() - t0)

    benchmark.pedantic(one, rounds=ROUNDS * 2, iterations=1)
    last = reports[-1]
    assert last.warning() is None and last.read == 0 and last.manifest and last.runs == 1, last
    plain, synced = [], []
    for i in range(ROUNDS * 2):
        t0 = time.perf_counter()
        bench.search(f"thumbnail service libvips {i}")
        plain.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        bench.loop.run_until_complete(bench.ms.sync())
        bench.search(f"thumbnail service libvips {i}")
        synced.append(time.perf_counter() - t0)
    stats = {
        "sync": _ms(syncs),
        "search": _ms(plain),
        "sync_then_search": _ms(synced),
        "files_stat": last.files,
        "load_avg_1m": round(os.getloadavg()[0], 2),
    }
    benchmark.extra_info.update(bench.facts, **stats)
    print(f"\nlazy sync on a clean tree: {stats}")


def test_edit_to_searchable_latency(benchmark: Any, bench: Bench) -> None:
    """Append one entry to the 5,000-line log; time until a search returns it."""
    w = bench.watcher()
    visible: list[float] = []
    indexed: list[float] = []
    runs: list[float] = []  # the index run's own time, from its event
    rng = random.Random(11)
    try:

        def one() -> None:
            i = len(visible)
            word = "".join(rng.choice("bcdfghjklmnpqrstvwxz") for _ in range(10)) + str(i)
            entry = f"\n### {i // 60 % 24:02d}:{i % 60:02d}\nChecked the {word} rollout with the on-call team.\n"
            w.drain()
            t0 = time.perf_counter()
            with bench.log.open("a", encoding="utf-8") as f:
                f.write(entry)
            while not any(word in h["content"] for h in bench.search(word, top_k=3)):
                if time.perf_counter() - t0 > 120:
                    raise AssertionError(f"{word} not searchable after 120 s: {''.join(w.stderr)[-2000:]}")
                time.sleep(0.05)
            visible.append(time.perf_counter() - t0)
            at, event = w.next("indexed", timeout=120)
            indexed.append(at - t0)
            runs.append(event["seconds"])
            time.sleep(0.3 + rng.random() * 0.4)  # not in step with the watcher's polling

        benchmark.pedantic(one, rounds=ROUNDS, iterations=1)
    finally:
        w.stop()
    stats = {
        "write_to_visible": _ms(visible),
        "write_to_indexed_event": _ms(indexed),
        "index_run": _ms(runs),
        "rounds": len(visible),
        "load_avg_1m": round(os.getloadavg()[0], 2),
    }
    benchmark.extra_info.update(bench.facts, **stats)
    print(f"\nedit -> searchable through watch: {stats}")


def _burst(root: Path, rng: random.Random, n: int, spread_s: float) -> dict[str, int]:
    """n operations: appends, renames, deletes and new files, evenly over spread_s seconds (0: at once)."""
    docs = _docs(root)
    logs = sorted((root / "memory").glob("*.md"))
    done = {"append": 0, "rename": 0, "delete": 0, "create": 0}
    t0 = time.perf_counter()
    for i in range(n):
        roll = rng.random()
        if roll < 0.8:
            f = rng.choice(docs + logs)
            with f.open("a", encoding="utf-8") as fh:
                fh.write(
                    f"\nBurst edit {i}: the {rng.choice(['cache', 'queue', 'deploy'])} check {rng.random():.6f}.\n"
                )
            done["append"] += 1
        elif roll < 0.9 and len(docs) > 1:
            f = docs.pop(rng.randrange(len(docs)))
            new = f.with_name(f"{f.stem.split('~')[0]}~{i}.md")
            f.rename(new)
            docs.append(new)
            done["rename"] += 1
        elif roll < 0.95 and len(docs) > 1:
            docs.pop(rng.randrange(len(docs))).unlink()
            done["delete"] += 1
        else:
            f = root / "docs" / f"area{i % 17}" / f"burst-{i:04d}.md"
            f.write_text(f"# Burst page {i}\n\nA page made in the burst, number {i}.\n", encoding="utf-8")
            docs.append(f)
            done["create"] += 1
        if spread_s:
            time.sleep(max(0.0, t0 + spread_s * (i + 1) / n - time.perf_counter()))
    return done


def test_burst_of_1000_edits_settles_to_a_clean_index(benchmark: Any, bench: Bench) -> None:
    w = bench.watcher()
    result: dict[str, Any] = {}
    try:

        def one() -> None:
            ops = _burst(bench.root, random.Random(21), 1000, BURST_S)
            last = time.perf_counter()
            at, runs = bench.settle(w, last)
            result.update(
                ops=ops,
                settle_s=round(at - last, 2),
                runs=len(runs),
                embedded=sum(r["embedded"] for r in runs),
                reused=sum(r["reused"] for r in runs),
                files_read=sum(r.get("read", 0) for r in runs),
                run_details=[_brief(r) for r in runs],
            )

        benchmark.pedantic(one, rounds=1, iterations=1)
    finally:
        w.stop()
    result["load_avg_1m"] = round(os.getloadavg()[0], 2)
    benchmark.extra_info.update(bench.facts, **result)
    print(f"\n1,000-operation burst (spread over {BURST_S} s): {result}")


def _storm(bench: Bench, w: Watcher, rng: random.Random, tag: str) -> dict[str, Any]:
    """STORM_EVENTS file events in STORM_WAVES waves a second apart, then until the index equals the tree."""
    docs = _docs(bench.root)
    events = 0
    started = time.perf_counter()
    per_wave = STORM_EVENTS // STORM_WAVES
    for _ in range(STORM_WAVES):
        wave = 0
        while wave < per_wave:
            if rng.random() < 0.5:
                os.utime(rng.choice(docs))
                wave += 1
            else:  # a rename is two events: the old name goes, the new one comes
                k = rng.randrange(len(docs))
                new = docs[k].with_name(f"{docs[k].stem.split('~')[0]}~{tag}{events + wave}.md")
                docs[k].rename(new)
                docs[k] = new
                wave += 2
        events += wave
        time.sleep(1.0)
    last = time.perf_counter()
    at, runs = bench.settle(w, last)
    time.sleep(2.0)  # settled: what stays
    return {
        "events": events,
        "storm_s": round(last - started, 1),
        "settle_s": round(at - last, 2),
        "runs": len(runs),
        "changes_seen": sum(r.get("changes", 0) for r in runs),
        "embedded": sum(r["embedded"] for r in runs),
        "reused": sum(r["reused"] for r in runs),
        "run_details": [_brief(r) for r in runs],
    }


def test_watcher_rss_under_10000_events(benchmark: Any, bench: Bench) -> None:
    """Two storms of 10,000 events: RSS from the warm baseline to after the
    first, and from after the first to after the second (growth that goes on
    across storms would be a leak; growth that stops is allocator and arena
    high-water)."""
    w = bench.watcher()
    pid = bench.watching_pid(w)
    rng = random.Random(31)
    samples: list[tuple[float, int]] = []
    sampling = threading.Event()

    def sample() -> None:
        while not sampling.is_set():
            try:
                samples.append((time.perf_counter(), _rss_kb(pid)))
            except (OSError, AssertionError):
                return
            sampling.wait(0.2)

    result: dict[str, Any] = {}
    try:
        # Warm: new pages of the corpus's kind (a few hundred chunks, long ones
        # included) embedded, so onnxruntime's arenas have grown to full
        # batches of full-length texts before the baseline is taken.
        (bench.root / "docs" / "warm-up").mkdir(exist_ok=True)
        for i in range(25):
            page = doc_page(random.Random(1000 + i), f"Warm-up {i}", True)
            (bench.root / "docs" / "warm-up" / f"page-{i}.md").write_text(page, encoding="utf-8")
        _, warm = w.next("indexed", timeout=300)
        assert warm["embedded"] >= 128, warm
        time.sleep(1.0)
        baseline = _rss_kb(pid)
        threading.Thread(target=sample, daemon=True).start()
        storms: list[dict[str, Any]] = []
        after: list[int] = []

        def one() -> None:
            for tag in ("s", "t"):
                before = len(samples)
                storms.append(_storm(bench, w, rng, tag))
                after.append(_rss_kb(pid))
                storms[-1]["rss_peak_mb"] = round(max(kb for _, kb in samples[before:]) / 1024, 1)
                storms[-1]["rss_after_mb"] = round(after[-1] / 1024, 1)

        benchmark.pedantic(one, rounds=1, iterations=1)
        result.update(
            storms=storms,
            rss_baseline_mb=round(baseline / 1024, 1),
            rss_after_first_over_baseline=round(after[0] / baseline, 3),
            rss_after_second_over_first=round(after[1] / after[0], 3),
            vm_hwm_mb=round(_rss_kb(pid, "VmHWM") / 1024, 1),
        )
    finally:
        sampling.set()
        w.stop()
    result["load_avg_1m"] = round(os.getloadavg()[0], 2)
    benchmark.extra_info.update(bench.facts, **result)
    print(f"\nwatcher under 2 × {STORM_EVENTS:,} file events: {result}")
