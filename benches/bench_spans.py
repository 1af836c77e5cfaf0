"""What span vectors cost, side by side with an index without them, alternated.

``python -m benches.bench_spans --set agent --mb 5 --rounds 2`` builds the set's
corpus once (``benches.retrieval``'s generators), then runs, round by round,
``MEMSEARCH_SPANS=0`` and ``=1`` one after the other, each a cold index into a
fresh database in a fresh process:

* ``index_s``: the cold index wall (``MemSearch.index``, spans included);
* ``rss_mb``: peak RSS of the index process plus the database's server and
  engine processes (``VmHWM``), the whole cost of a run on this machine;
  ``index_rss_mb``: the index process's own peak up to the index's end (the
  ``memsearch index`` process's share), ``server_rss_mb``: the server's and
  engine's;
* ``db_mb``: the database's size on disk once the run is flushed;
* ``search_p50_ms`` / ``search_p95_ms``: the set's questions asked three
  times each in that long-lived process, after the index;
* ``cli_search_s``: median wall of five ``memsearch search`` processes with the
  database's server up (the way an agent's hook searches).

With ``--copy`` the searches go through the in-memory copy
(:mod:`memsearch_fast.store.copy.dense_index`) whatever the collection's size, as
the database's long-lived service searches a large one; ``copy_load_s`` and
``copy_vectors_mb`` (chunk matrix, span codes, sign bits and their columns)
are added, and ``copy_reload_s`` (a new process's first search and its copy
held again, from the copy saved beside the database, :mod:`.saved_copy`)
with ``saved_copy_mb``, the size of that file; ``cli_after_exit_s`` and
``cli_after_exit_next_s``: the first two ``memsearch search`` processes after
the database's server exited.

It also prints the tokens embedded per MB of markdown (the chunks, each cut at
the model's 256 tokens, and the distinct span texts), counted with the
model's tokenizer. Timings are only comparable within one run; say the
machine and its ``uptime`` load.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benches.retrieval import MODEL_DIR

ROOT = Path(__file__).resolve().parents[1]

_CHILD = r"""
import asyncio, json, os, resource, statistics, sys, time
from pathlib import Path
from memsearch_fast import MemSearch
from memsearch_fast.lite import state
corpus, db, model, questions = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
ms = MemSearch([corpus], embedding_model=model, milvus_uri=db, collection="bench")
start = time.perf_counter()
asyncio.run(ms.index())
index_s = time.perf_counter() - start
index_rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # this process, up to the index's end
copy = {}
if os.environ.get("BENCH_COPY") == "1":  # as the database's service searches: the in-memory copy
    ms.close()
    ms = MemSearch([corpus], embedding_model=model, milvus_uri=db, collection="bench", dense_index=True)
    asyncio.run(ms.search(questions[0], top_k=10))
    start = time.perf_counter()
    assert ms._dense is not None and ms._dense.wait(600), "the copy did not load"
    held = ms._dense._copy
    sp = held.spans
    own = sp.own if sp else None
    copy = {"copy_load_s": time.perf_counter() - start, "copy_vectors_mb": (held.matrix.nbytes + (
        len(sp.codes) + len(sp.signs) + len(sp.scales) + 12 * len(sp.chunk)
        + (len(own.codes) + len(own.signs) + len(own.scales) if own else 0)
        if sp else 0)) / 1e6}
    saved = ms._dense._saved
    ms.close()  # as the service restarts: the copy saved beside the database, then refreshed
    ms = MemSearch([corpus], embedding_model=model, milvus_uri=db, collection="bench", dense_index=True)
    start = time.perf_counter()
    asyncio.run(ms.search(questions[0], top_k=10))
    assert ms._dense is not None and ms._dense.wait(600), "the saved copy did not load"
    copy.update(copy_reload_s=time.perf_counter() - start, saved_copy_mb=saved.stat().st_size / 1e6)
took = []
async def ask():
    await ms.search(questions[0], top_k=10)
    for _ in range(3):
        for q in questions:
            t = time.perf_counter()
            await ms.search(q, top_k=10)
            took.append(time.perf_counter() - t)
asyncio.run(ask())
took.sort()
def hwm(pid):
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        return 0
    return 0
st = state.read_state(db) or {}
others = sum(hwm(p) for p in (st.get("pid"), st.get("engine_pid")) if isinstance(p, int))
ms.close()
print(json.dumps({
    "index_s": index_s,
    "rss_mb": (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss + others) / 1024,
    "index_rss_mb": index_rss_mb,
    "server_rss_mb": others / 1024,
    "search_p50_ms": statistics.median(took) * 1000,
    "search_p95_ms": took[min(len(took) - 1, round(0.95 * (len(took) - 1)))] * 1000,
    **copy,
}))
"""


def tokens_per_mb(corpus: Path) -> dict[str, float]:
    """Tokens the model reads per MB: chunks (cut at 256) and distinct span texts."""
    from tokenizers import Tokenizer

    from memsearch_fast.index.chunk import chunk_markdown
    from memsearch_fast.index.spans import spans

    tok = Tokenizer.from_file(str(MODEL_DIR / "tokenizer.json"))
    tok.no_truncation()
    tok.no_padding()
    size = chunk_tokens = span_tokens = 0
    seen: set[str] = set()
    for f in sorted(corpus.rglob("*.md")):
        text = f.read_text(encoding="utf-8")
        size += len(text.encode())
        chunks = list(chunk_markdown(text, str(f)))
        chunk_tokens += sum(min(256, len(e.ids)) for e in tok.encode_batch([c.content for c in chunks]))
        texts = [s.text for c in chunks for s in spans(c.content, c.heading, c.start_line)]
        fresh = [t for t in dict.fromkeys(texts) if t not in seen]
        seen.update(fresh)
        span_tokens += sum(min(256, len(e.ids)) for e in tok.encode_batch(fresh)) if fresh else 0
    mb = size / 1e6
    return {"chunk_tokens_per_mb": chunk_tokens / mb, "span_tokens_per_mb": span_tokens / mb}


def one_run(corpus: Path, db: Path, questions: list[str], spans_on: bool, copy: bool = False) -> dict[str, Any]:
    from memsearch_fast.lite import broker

    env = dict(os.environ, MEMSEARCH_SPANS="1" if spans_on else "0")
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # as installed: a CLI call does not compile its modules again
    if copy:  # searched through the in-memory copy, whatever the collection's size
        env.update(BENCH_COPY="1", MEMSEARCH_DENSE_INDEX_MIN_ROWS="0")
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD, str(corpus), str(db), str(MODEL_DIR), json.dumps(questions)],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    out: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])

    def cli_search(q: str) -> float:
        start = time.perf_counter()
        args = ["search", q, "--milvus-uri", str(db), "-m", str(MODEL_DIR), "-c", "bench"]
        subprocess.run(
            [sys.executable, "-m", "memsearch_fast", *args],
            env=env,
            cwd=ROOT,
            capture_output=True,
            check=True,
        )
        return time.perf_counter() - start

    walls = [cli_search(q) for q in questions[:5]]  # the server is still up: a hook's search
    out["cli_search_s"] = statistics.median(walls)
    broker.stop_server(str(db))
    if copy:  # the server exited (idle): the next searches start it again
        out["cli_after_exit_s"] = cli_search(questions[5])
        out["cli_after_exit_next_s"] = cli_search(questions[6])
        broker.stop_server(str(db))
    out["db_mb"] = (
        sum(p.stat().st_size for p in db.parent.glob(db.name + "*") if p.is_file() and ".copy-" not in p.name) / 1e6
    )  # db included
    if db.is_dir():
        out["db_mb"] += sum(p.stat().st_size for p in db.rglob("*") if p.is_file()) / 1e6
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", dest="corpus_set", choices=["default", "agent", "dialogue"], default="agent")
    parser.add_argument("--mb", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--workdir", type=Path, help="keep the corpus and databases here")
    parser.add_argument(
        "--copy", action="store_true", help="search through the in-memory copy, as the database's service does"
    )
    parser.add_argument(
        "--spans-only", action="store_true", help="only the arm with spans (to compare two versions of it)"
    )
    args = parser.parse_args()
    arms = (True,) if args.spans_only else (False, True)
    from benches import agent_corpus, dialogue_corpus
    from benches.fusion_offline import facts_of
    from benches.retrieval import build

    work = args.workdir or Path(tempfile.mkdtemp(prefix="bench-spans-"))
    corpus = work / f"corpus-{args.corpus_set}"
    if not corpus.exists():
        if args.corpus_set == "default":
            build(corpus, args.mb, 40)
        else:
            (agent_corpus if args.corpus_set == "agent" else dialogue_corpus).build(corpus, args.mb, 40, 0)
    questions = [f.question for f in facts_of(args.corpus_set, 40, 0, False)]
    load = os.getloadavg()[0]
    print(f"set {args.corpus_set}, {args.mb} MB, {args.rounds} rounds, load {load:.2f} at the start")
    print(json.dumps({k: round(v) for k, v in tokens_per_mb(corpus).items()}))
    rows = []
    for r in range(args.rounds):
        for on in arms:
            res = one_run(corpus, work / f"r{r}-{'spans' if on else 'chunks'}.db", questions, on, args.copy)
            rows.append((on, res))
            print(json.dumps({"spans": on, "round": r, **{k: round(v, 2) for k, v in res.items()}}), flush=True)
    print(f"load {os.getloadavg()[0]:.2f} at the end")
    print("| | " + " | ".join(rows[0][1]) + " |")
    print("|---|" + "---|" * len(rows[0][1]))
    for on in arms:
        med = {k: statistics.median(res[k] for o, res in rows if o == on) for k in rows[0][1]}
        print(f"| {'spans' if on else 'chunks only'} | " + " | ".join(f"{v:.2f}" for v in med.values()) + " |")


if __name__ == "__main__":
    main()
