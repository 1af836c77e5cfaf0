"""What fewer bits a span code would cost in recall, on the same database.

``python -m benches.span_bits DB.spans BITS`` stores every span code of a span file
again at BITS bits of precision (each code rounded to 2**(BITS-1) - 1 steps a side
of its own largest component; still one int8 a component, the scale widened to
match), in place: run it on a bench's work directory
(``benches.retrieval --workdir W``), then the same ``benches.retrieval`` command
again, whose index run has nothing to do, so the chunk rows, the BM25 list and the
own vectors are the ones measured before and only the spans' precision differs.
A code stored in 6 bits takes 96 bytes instead of 128: the span file's format 2
stores them so (docs/store.md, "The span file's format 2"); this bench reads the
int8 codes of format 1, so make the database with a build of before. Rounding the
int8 codes again is a little coarser than quantising the vectors once at that
precision.
"""

from __future__ import annotations

import argparse
import sqlite3

import numpy as np

from memsearch_fast.store.spans.basis import read
from memsearch_fast.store.spans.layout import record


def requantise(path: str, bits: int) -> int:
    """Round every code of the span file at *path* to *bits* bits; the spans done."""
    levels = 2 ** (bits - 1) - 1
    db = sqlite3.connect(path)
    done = 0
    if db.execute("PRAGMA user_version").fetchone()[0] != 1:
        db.close()
        raise SystemExit(f"{path}: not a span file of format 1 (int8 codes); make it with a build of before")
    try:
        with db:
            for name, dim, basis in db.execute("SELECT name, dim, basis FROM collections").fetchall():
                fitted = read(str(basis)) if basis else None
                rec = record(fitted.dims if fitted is not None else int(dim), 1)
                table = '"' + str(name).replace('"', '""') + '__span_chunks"'
                for rid, blob in db.execute(f"SELECT id, data FROM {table}").fetchall():
                    r = np.frombuffer(blob, dtype=rec).copy()
                    if not len(r):
                        continue
                    codes = np.clip(np.rint(r["code"].astype(np.float64) * levels / 127.0), -levels, levels)
                    r["scale"] = r["scale"] * np.float32(127.0 / levels)
                    r["code"] = codes.astype(np.int8)
                    db.execute(f"UPDATE {table} SET data = ? WHERE id = ?", (r.tobytes(), rid))
                    done += len(r)
    finally:
        db.close()
    return done


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("span_file", help="a bench database's <database>.spans (rewritten in place)")
    parser.add_argument("bits", type=int, choices=range(2, 8), metavar="BITS", help="2-7")
    args = parser.parse_args()
    print(f"{requantise(args.span_file, args.bits)} spans stored again at {args.bits} bits")


if __name__ == "__main__":
    main()
