"""`memsearch index` through the CLI against an OpenAI-compatible endpoint: wall time,
peak RSS of every process of the database, bytes on disk per byte of markdown.

    python -m benches.embed_server zero --port 8765 &
    python -m benches.cli_index CORPUS_DIR DB --base-url http://127.0.0.1:8765/v1

Runs ``memsearch index CORPUS_DIR --milvus-uri DB --provider openai`` and polls
``/proc`` four times a second for the summed RSS of the CLI and every process
whose command line names DB (the Lite engine and its server), then prints one
JSON line: wall seconds, that peak and each process's share of it, the database's bytes on disk (the database
and its span file; not the manifest nor a saved copy) per byte of markdown, the
index report's chunks and spans, the CPU seconds of the CLI, the engine and the
embedding server (``--timeline`` adds each one's CPU every five seconds: which
of them the wall waits on), and the load. Give DB a fresh path each run;
set ``MEMSEARCH_SPANS=0`` or ``MEMSEARCH_SPAN_STORE=collection`` in the
environment to compare. The database's Lite server is stopped at the end.
Say the machine and its load.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import resource
import subprocess
import time
from pathlib import Path


def _rss_kb(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/status").read_text().split("VmRSS:")[1].split()[0])
    except (OSError, IndexError, ValueError):
        return 0


def _name(pid: int) -> str:
    """A process's program and its pid, for the peak's parts."""
    try:
        args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return str(pid)
    words = [a.decode(errors="replace") for a in args[:4] if a]
    module = next((w for w in words[1:] if w.startswith("memsearch")), "")
    return f"{os.path.basename(words[0]) if words else '?'} {module} {pid}".replace("  ", " ")


def _cpu_s(pid: int) -> float:
    """User and system CPU seconds of a live process (0 once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _naming(word: str) -> list[int]:
    """Processes whose command line holds *word*."""
    out = []
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                cmd = Path(f"/proc/{p}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if word in cmd:
                out.append(int(p))
    return out


def _server_pid() -> int | None:
    """The zero-cost embedding server on this machine, if one runs."""
    return next(iter(_naming("benches.embed_server")), None)


def _related(db: str, cli: int) -> list[int]:
    return [cli, *(p for p in _naming(db) if p != cli)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("corpus")
    parser.add_argument("db")
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--model", default="zero")
    parser.add_argument("--timeline", action="store_true", help="each process's CPU every 5 s")
    args = parser.parse_args()
    server = _server_pid()
    server_cpu0 = _cpu_s(server) if server else 0.0

    def server_cpu() -> dict[str, float]:
        return {"server": round(_cpu_s(server) - server_cpu0, 1)} if server else {}

    env = {**os.environ, "OPENAI_API_KEY": os.environ.get("OPENAI_API_KEY", "x")}
    cmd = ["memsearch", "index", args.corpus, "--milvus-uri", args.db, "--provider", "openai"]
    cmd += ["--base-url", args.base_url, "-m", args.model, "-j"]
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    peak, at_peak = 0, {}
    cpu: dict[int, float] = {}
    timeline, next_tick = [], 5.0
    while proc.poll() is None:
        related = _related(args.db, proc.pid)
        each = {p: _rss_kb(p) for p in related}
        if sum(each.values()) > peak:
            peak, at_peak = sum(each.values()), each
        for p in related:
            cpu[p] = max(cpu.get(p, 0.0), _cpu_s(p))
        if args.timeline and time.perf_counter() - start >= next_tick:
            timeline.append({"t": round(next_tick), **{_name(p): round(c, 1) for p, c in cpu.items()}, **server_cpu()})
            next_tick += 5.0
        time.sleep(0.25)
    wall = time.perf_counter() - start
    cli_cpu = resource.getrusage(resource.RUSAGE_CHILDREN)
    for p in cpu:
        cpu[p] = max(cpu[p], _cpu_s(p))
    cpu[proc.pid] = cli_cpu.ru_utime + cli_cpu.ru_stime
    report = json.loads(proc.stdout.read() if proc.stdout else b"{}")
    files = [f for f in glob.glob(glob.escape(args.db) + "*") if os.path.isfile(f)]
    size = sum(os.path.getsize(f) for f in files if ".manifest" not in f and ".copy" not in f)
    markdown = sum(f.stat().st_size for f in Path(args.corpus).rglob("*.md"))
    print(
        json.dumps(
            {
                "wall_s": round(wall, 1),
                "peak_rss_mb_all": peak // 1024,
                "at_peak_mb": {_name(p): kb // 1024 for p, kb in at_peak.items()},
                "disk_mb": round(size / 1e6),
                "bytes_per_md_byte": round(size / markdown, 2),
                "chunks": report.get("chunks"),
                "spans": report.get("spans"),
                "cpu_s": {_name(p) if p != proc.pid else "cli": round(c, 1) for p, c in cpu.items()} | server_cpu(),
                **({"timeline": timeline} if args.timeline else {}),
                "load": round(os.getloadavg()[0], 2),
            }
        )
    )
    # The database's server would stay ten idle minutes, its engine compacting
    # beside the next run: stopped, so runs back to back measure alike.
    from memsearch_fast.lite import broker

    broker.stop_server(args.db)


if __name__ == "__main__":
    main()
