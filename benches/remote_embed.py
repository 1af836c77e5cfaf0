"""Remote embedding at speed: the index pipeline through an OpenAI-compatible
server against the zero-cost in-process pipeline, side by side.

    python -m benches.remote_embed zero [--mb 5] [--rounds 3] [--workers 4] [--procs 1]
    python -m benches.remote_embed onnx [--mb 0.2] [--workers 1,2,4] [--procs 1,2]

``zero``: each round indexes the same corpus into a fresh database three
times, in rotating order: with the zero-cost in-process embedder (a fixed
vector: what the pipeline alone costs), with the zero-cost server's vectors
handed over in process (distinct vectors: what they cost the store), and
with ``--provider openai --base-url`` pointed at ``benches.embed_server
zero`` (answers at once). The ratio of chunks/s, remote over in-process,
says what the remote path costs over the pipeline.
``onnx``: the model in process with N inference workers, then the remote
run against ``benches.embed_server onnx`` with K model processes, for each
K and N: how chunks/s scales with the server's capacity and the client's
``--workers``.

Every run is a fresh process (peak RSS is that run's: ru_maxrss). The
server runs in processes of its own, so the client's RSS excludes it but its
CPU competes with the client's on the same cores.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Any

from benches.bench_index import MODEL_DIR, ZERO_COST
from tests.helpers.corpus import write_corpus

ROOT = Path(__file__).resolve().parents[1]

RUN = (
    ZERO_COST
    + """
import asyncio, json, resource, sys, time
from memsearch_fast.embeddings import get_provider
from memsearch_fast.index import run_index
from memsearch_fast.index.scan import scan_paths
from memsearch_fast.store import MilvusStore

root, uri, url, workers = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
if url == "-":
    provider = ZeroCost()
elif url == "pool":  # the server's vectors, in process: what distinct vectors cost the store
    import zlib
    from benches.embed_server import POOL, _pool
    class PoolCost(ZeroCost):
        def __init__(self):
            self.table = [json.loads(f) for f in _pool(384)[0]]
        async def embed(self, texts):
            return [self.table[zlib.crc32(t.encode("utf-8", "surrogatepass")) % POOL] for t in texts]
    provider = PoolCost()
elif url.startswith("onnx:"):  # the model in process, N inference workers
    provider = get_provider("onnx", model=url[5:], workers=workers)
else:
    provider = get_provider("openai", model="bench", base_url=url, workers=workers, dimensions=384)
store = MilvusStore(uri, dimension=provider.dimension)
cpu0 = time.process_time()
t0 = time.perf_counter()
report = asyncio.run(run_index(store, provider, scan_paths([root]), cleanup_roots=[root], workers=workers))
wall = time.perf_counter() - t0
cpu = time.process_time() - cpu0
rows = store.count()
span_rows = store.spans.count()
store.close()
from memsearch_fast.lite import broker
broker.stop_server(uri)  # not left running (and compacting) beside the next run
provider.close()
spans = report.spans
print(json.dumps({"wall": wall, "cpu": cpu, "chunks": report.chunks, "embedded": report.embedded, "rows": rows,
                  "span_rows": span_rows, "spans_embedded": spans.embedded if spans else 0,
                  "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""
)


def run_once(root: Path, db: Path, url: str, workers: int) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(RUN), str(root), str(db), url, str(workers)],
        capture_output=True,
        text=True,
        timeout=3600,
        cwd=ROOT,
    )
    if out.returncode != 0:
        raise SystemExit(out.stderr[-3000:])
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    result["db_bytes"] = db.stat().st_size  # the Lite database file once flushed and closed
    result["chunks_per_s"] = round(result["chunks"] / result["wall"], 1)
    # What the provider was asked for: chunk texts and span texts.
    result["vectors_per_s"] = round((result["embedded"] + result["spans_embedded"]) / result["wall"], 1)
    return result


class Server:
    """``benches.embed_server`` in a process group of its own (killed as one)."""

    def __init__(self, kind: str, procs: int) -> None:
        argv = [sys.executable, "-m", "benches.embed_server", kind, "--procs", str(procs), "--model", str(MODEL_DIR)]
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, cwd=ROOT, start_new_session=True)
        line = self.proc.stdout.readline() if self.proc.stdout else ""
        if not line.startswith("ready "):
            self.close()
            raise SystemExit(f"embedding server did not start: {line!r}")
        self.url = line.split()[1]

    def cpu_s(self) -> float:
        """CPU seconds used so far by the server's processes (its process group)."""
        tick = os.sysconf("SC_CLK_TCK")
        total = 0
        for stat in Path("/proc").glob("[0-9]*/stat"):
            with contextlib.suppress(OSError, ValueError, IndexError):
                fields = stat.read_text().rsplit(")", 1)[1].split()
                if int(fields[2]) == self.proc.pid:  # pgrp
                    total += int(fields[11]) + int(fields[12])  # utime + stime
        return total / tick

    def close(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        self.proc.wait()

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def machine() -> dict[str, Any]:
    lines = Path("/proc/cpuinfo").read_text().splitlines()
    model = next((ln.split(":", 1)[1].strip() for ln in lines if ln.startswith("model name")), "unknown")
    return {"cpu": model, "cores": os.cpu_count(), "python": platform.python_version()}


def ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",")]


def median(xs: list[float]) -> float:
    xs = sorted(xs)
    return xs[len(xs) // 2] if len(xs) % 2 else (xs[len(xs) // 2 - 1] + xs[len(xs) // 2]) / 2


CONFIGS = ("local", "pool", "remote")  # fixed vector in process, distinct vectors in process, over HTTP


def bench_zero(root: Path, tmp: Path, args: argparse.Namespace) -> None:
    for procs in ints(args.procs):
        with Server("zero", procs) as server:
            for workers in ints(args.workers):
                runs: dict[str, list[dict[str, Any]]] = {c: [] for c in CONFIGS}
                for r in range(args.rounds):  # rotated, so drift in the machine's load hits each alike
                    for name in CONFIGS[r % 3 :] + CONFIGS[: r % 3]:
                        url = {"local": "-", "pool": "pool", "remote": server.url}[name]
                        before = server.cpu_s()
                        res = run_once(root, tmp / f"{name}-{procs}-{workers}-{r}.db", url, workers)
                        res["server_cpu"] = server.cpu_s() - before
                        runs[name].append(res)
                rate = {c: median([x["chunks_per_s"] for x in runs[c]]) for c in CONFIGS}
                summary: dict[str, Any] = {"mb": args.mb, "server_procs": procs, "workers": workers}
                first = runs["local"][0]
                summary.update(chunks=first["chunks"], span_rows=first["span_rows"])
                summary["vectors"] = first["embedded"] + first["spans_embedded"]
                for c in CONFIGS:
                    summary[c] = {
                        "chunks_per_s": [x["chunks_per_s"] for x in runs[c]],
                        "vectors_per_s": [x["vectors_per_s"] for x in runs[c]],
                        "cpu_s": [round(x["cpu"], 1) for x in runs[c]],
                        "server_cpu_s": [round(x["server_cpu"], 1) for x in runs[c]],
                        "rss_mb": max(round(x["rss_mb"]) for x in runs[c]),
                        "db_mb": round(runs[c][0]["db_bytes"] / 1e6, 1),
                    }
                summary["remote_over_local_median"] = round(rate["remote"] / rate["local"], 3)
                summary["remote_over_pool_median"] = round(rate["remote"] / rate["pool"], 3)
                summary["load"] = [round(x, 2) for x in os.getloadavg()]
                print(json.dumps(summary), flush=True)


def bench_onnx(root: Path, tmp: Path, args: argparse.Namespace) -> None:
    for workers in ints(args.workers):  # the model in process first: what one machine's embedder does
        res = run_once(root, tmp / f"inproc-{workers}.db", f"onnx:{MODEL_DIR}", workers)
        res.update(in_process=True, workers=workers, mb=args.mb, load=[round(x, 2) for x in os.getloadavg()])
        print(json.dumps(res), flush=True)
    for procs in ints(args.procs):
        with Server("onnx", procs) as server:
            for workers in ints(args.workers):
                before = server.cpu_s()
                res = run_once(root, tmp / f"onnx-{procs}-{workers}.db", server.url, workers)
                res.update(server_cpu=round(server.cpu_s() - before, 1))
                res.update(server_procs=procs, workers=workers, mb=args.mb, load=[round(x, 2) for x in os.getloadavg()])
                print(json.dumps(res), flush=True)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("kind", choices=("zero", "onnx"))
    ap.add_argument("--mb", type=float, default=None, help="corpus size (zero: 5, onnx: 0.2)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--workers", default="4", help="client --workers values, comma-separated")
    ap.add_argument("--procs", default="1", help="server processes, comma-separated")
    args = ap.parse_args(argv)
    args.mb = args.mb if args.mb is not None else (5.0 if args.kind == "zero" else 0.2)
    print(json.dumps({"machine": machine(), "load_at_start": [round(x, 2) for x in os.getloadavg()]}), flush=True)
    with tempfile.TemporaryDirectory(prefix="remote-embed-") as d:
        tmp = Path(d)
        root = tmp / "corpus"
        write_corpus(root, total_bytes=int(args.mb * 1_000_000), seed=11)
        (bench_zero if args.kind == "zero" else bench_onnx)(root, tmp, args)


if __name__ == "__main__":
    main()
