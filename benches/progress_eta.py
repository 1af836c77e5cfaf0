"""How well does ``memsearch index``'s ETA predict the time left? A cold index of
a corpus through the CLI (``-j``: its progress lines on stderr, stamped as they
come), each line's ``eta_s`` set against the time that really remained, beside
what the previous estimate (files read and chunks embedded, at the chunk rate
so far) would have said from the same line.

    python -m benches.progress_eta CORPUS_DIR DB

Prints a line per tenth of the run and, from 20 % of the run on, the worst
relative error of each estimate among the lines with at least 5 s left. A
corpus of real documents of mixed sizes shows it best (a few KB to a few
hundred KB a file); say the machine and its load: the rate moves with both.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from typing import Any


def _old_eta(line: dict[str, Any], at: float) -> float | None:
    """The estimate before progress measured work: the chunks the files not yet read
    would queue at the chunks per file so far, at the chunks embedded per second."""
    done, files, chunks, embedded = line["files_done"], line["files"], line["chunks"], line["embedded"]
    if not done or not embedded:
        return None
    left = max(0.0, chunks / done * files - embedded)
    return left / (embedded / at)


def main(corpus: str, db: str) -> None:
    start = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "memsearch_fast.cli", "index", corpus, "--milvus-uri", db, "-j"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    lines: list[tuple[float, dict[str, Any]]] = []
    for raw in proc.stderr:
        try:
            line = json.loads(raw)
        except ValueError:
            continue
        if isinstance(line, dict) and line.get("event") == "progress":
            lines.append((time.monotonic() - start, line))
    proc.wait()
    wall = time.monotonic() - start
    worst = {"now": 0.0, "before": 0.0}
    shown = -1
    for at, line in lines:
        real = wall - at
        old = _old_eta(line, at)
        if at >= 0.2 * wall and real >= 5:
            for key, eta in (("now", line.get("eta_s")), ("before", old)):
                if eta is not None:
                    worst[key] = max(worst[key], abs(eta - real) / real)
        if int(10 * at / wall) > shown:
            shown = int(10 * at / wall)
            print(
                f"{at:7.1f} s ({at / wall:4.0%}): left {real:6.1f} s, eta now {line.get('eta_s')}, "
                f"before {None if old is None else round(old, 1)}; done {line.get('done')}, "
                f"files {line['files_done']}/{line['files']}, chunks {line['embedded']}/{line['chunks']}"
            )
    print(json.dumps({"wall_s": round(wall, 1), "lines": len(lines), "worst_from_20pct": worst}))


if __name__ == "__main__":
    main(*sys.argv[1:3])
