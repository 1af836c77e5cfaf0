"""`memsearch index` in its own process against the same run handed to the database's service.

    python -m benches.index_service [--mb 5] [--rounds 2]

Each round runs both arms, in alternating order, each on a fresh database
with its own server: a one-file collection is indexed and searched first, so
the server holds the model (as it does once a session has searched), then
the generated corpus (`tests/helpers/corpus.py`) is indexed cold into the same
collection and timed: *here* with ``MEMSEARCH_INDEX_SERVICE=0`` (the CLI loads
its own model, as before), *service* without (the run goes to the server).
Reported per run: the CLI's wall time and peak RSS (``wait4``), and the
server's RSS after the run (``memsearch status -j``); then the median wall of
each arm and their ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benches.bench_index import MODEL_DIR
from tests.helpers.corpus import write_corpus


def _env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMSEARCH_")}
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # as installed: no module compiled again per process
    env.update(HOME=str(home), MEMSEARCH_OFFLINE="1", MEMSEARCH_LITE_IDLE_TIMEOUT="600", **extra)
    home.mkdir(parents=True, exist_ok=True)
    return env


def _cli(env: dict[str, str], *args: str) -> str:
    """The stdout of one `memsearch` process that must succeed."""
    out = subprocess.run([sys.executable, "-m", "memsearch_fast.cli", *args], env=env, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"memsearch {' '.join(args)} failed: {out.stderr[-2000:]}")
    return out.stdout


def _timed(env: dict[str, str], *args: str) -> tuple[float, float, str]:
    """(wall seconds, peak RSS MB, stdout) of one `memsearch` process (its own peak, from ``wait4``)."""
    started = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "memsearch_fast.cli", *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert proc.stdout is not None and proc.stderr is not None
    out = proc.stdout.read()
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - started
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"memsearch {' '.join(args)} failed: {err.decode()[-2000:]}")
    return wall, usage.ru_maxrss / 1024, out.decode()


def arm(name: str, corpus: Path, seed: Path, work: Path) -> dict[str, Any]:
    from memsearch_fast.lite import broker

    db = work / f"{name}.db"
    env = _env(work / "home", **({"MEMSEARCH_INDEX_SERVICE": "0"} if name == "here" else {}))
    common = ["--milvus-uri", str(db), "-m", str(MODEL_DIR), "--collection", "bench"]
    try:
        _cli(env, "index", str(seed), "-q", *common)
        _cli(env, "search", "the seed note", "-j", *common)  # the server loads the model
        wall, rss, out = _timed(env, "index", str(corpus), "-j", *common)
        report = json.loads(out)
        status = json.loads(_cli(env, "status", "-j", "--milvus-uri", str(db)))
        return {
            "arm": name,
            "wall_s": round(wall, 2),
            "cli_peak_rss_mb": round(rss, 1),
            "server_rss_mb": status.get("rss_mb"),
            "both_mb": round(rss + float(status.get("rss_mb") or 0), 1),
            "index_runs_in_server": status.get("index_runs"),
            "chunks": report["chunks"],
            "embedded": report["embedded"],
        }
    finally:
        broker.stop_server(str(db))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="index-service-") as tmp:
        work = Path(tmp)
        corpus = work / "corpus"
        write_corpus(corpus, total_bytes=int(args.mb * 1_000_000), seed=7)
        seed = work / "seed"
        seed.mkdir()
        (seed / "seed.md").write_text("# Seed\n\nThe seed note of the benchmark.\n", encoding="utf-8")
        print(json.dumps({"machine": platform.processor() or platform.machine(), "cpus": os.cpu_count()}))
        runs: list[dict[str, Any]] = []
        for r in range(args.rounds):
            for name in ("here", "service") if r % 2 == 0 else ("service", "here"):
                result = {
                    "round": r,
                    "load_1m": round(os.getloadavg()[0], 2),
                    **arm(name, corpus, seed, work / f"{name}-{r}"),
                }
                print(json.dumps(result), flush=True)
                runs.append(result)
        here = statistics.median(x["wall_s"] for x in runs if x["arm"] == "here")
        service = statistics.median(x["wall_s"] for x in runs if x["arm"] == "service")
        ratio = round(service / here, 3)
        print(json.dumps({"median_here_s": here, "median_service_s": service, "service_over_here": ratio}))


if __name__ == "__main__":
    main()
