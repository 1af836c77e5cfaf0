"""What fewer dimensions per span vector would cost in hit@k, and save on disk.

The database target of docs/retrieval.md ("Fewer span rows would cost what the
spans gained") is out of reach with 384 float16 dimensions a span row: Milvus
Lite 2.5.1 keeps each row as one protobuf blob in a SQLite table, so a row's
bytes move in steps of what fits a 4 KiB page. This bench measures the other
way to fewer bytes: each span vector projected onto the *k* directions that
carry most of the span vectors' energy (an uncentred PCA fitted on the
database's own span vectors), through the store's own codec
(:mod:`memsearch_fast.store.spans.basis`: the question projected alike, a
span's score its lifted vector's cosine with the question).

``python -m benches.span_dims --set agent --workdir W [--seed N] [--by-key] --dims 256,192,128``
copies the database ``benches.retrieval`` left in *W* (run it first with the
same ``--set`` and ``--seed``), and for each *k* writes its span collection
again at *k* dimensions, asks every question through the store's own search
(Milvus's path, as a process without the in-memory copy) and reports hit@1 /
hit@5 / MRR@10 for the fused list and the dense list alone, and the span
table's bytes a row in the SQLite file. The main collection is left as it is.
``--fit-db D`` fits the directions on another database's span vectors (another
corpus) instead of this one's; ``--fit-rows N`` on the first *N* span rows of
this one, by file name (as the first files of a first index run).

``python -m benches.span_dims --kernel COPY.npz --dims 384,192,128`` times the
in-memory copy's kernel (``_core.best_groups``, 30 chunks asked, the sign-bit
shortlist) on the span codes of a saved copy, projected to each *k* (the
directions fitted on its first 8,000 rows), 40 of its chunk vectors as
questions, the dimensions alternated each round.

``python -m benches.span_dims --row-bytes --dims 384,192,128`` writes 20,000
span rows of random vectors at each *k* into a fresh Milvus Lite file, in
today's schema, with one-letter field names, and with those names and no
``source``, and prints the bytes a row its SQLite table takes.
"""

from __future__ import annotations

import argparse
import shutil
import sqlite3
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from benches.retrieval import MODEL_DIR, evaluate, layout, p95


def _open(db: Path, corpus: Path) -> Any:
    from memsearch_fast import MemSearch

    return MemSearch([str(corpus)], embedding_model=str(MODEL_DIR), milvus_uri=str(db), collection="retrieval")


def _close(ms: Any, db: Path) -> None:
    from memsearch_fast.lite import broker

    ms.close()
    broker.stop_server(str(db))


def span_rows(ms: Any) -> list[dict[str, Any]]:
    """Every span row (index 0, the chunk's own vector, included) with its vector."""
    from memsearch_fast.store.spans.collection import FIELDS

    spans = ms.store.spans
    return [
        {**r, "embedding": spans.read(r["embedding"])}
        for page in spans._iterate("", [*FIELDS, "embedding"])
        for r in page
    ]


def basis(vectors: np.ndarray, k: int) -> np.ndarray:
    """The *k* directions of most energy (uncentred) the store fits, as columns."""
    return fitted(vectors, k).rows.T  # type: ignore[no-any-return]


def fitted(vectors: np.ndarray, k: int) -> Any:
    """The store's basis of *k* directions fitted on *vectors*, however few."""
    from memsearch_fast.store.spans import basis as span_basis

    least, span_basis.FIT_ROWS = span_basis.FIT_ROWS, 0
    try:
        out = span_basis.fit(vectors, dims=k)
    finally:
        span_basis.FIT_ROWS = least
    assert out is not None
    return out


def rewrite(ms: Any, rows: list[dict[str, Any]], basis: Any) -> None:
    """The span collection made again in *basis* (:mod:`memsearch_fast.store.spans.basis`),
    as an index run whose first write was fitted on would make it; the store
    projects each row and each question itself."""
    spans = ms.store.spans
    spans.drop()
    spans._create(basis)
    assert spans.basis is not None and spans.basis.dims == basis.dims
    spans.insert(rows)
    spans.flush()


def table_bytes(db: Path) -> tuple[int, int, int]:
    """(bytes, rows) of the span table in the SQLite file Milvus Lite keeps, and the
    bytes of every other table and index (what a database without spans holds)."""
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as c:
        (size,) = c.execute("select sum(pgsize) from dbstat where name = 'retrieval_spans'").fetchone()
        (rest,) = c.execute("select sum(pgsize) from dbstat where name != 'retrieval_spans'").fetchone()
        (rows,) = c.execute("select count(*) from retrieval_spans").fetchone()
    return int(size or 0), int(rows), int(rest or 0)


def fitted_on(db: Path) -> np.ndarray:
    """The span vectors of another database, to fit the directions on data the
    questions were not asked of (as a collection's first writes would)."""
    with tempfile.TemporaryDirectory(prefix="span-dims-fit-") as tmp:
        copy = Path(tmp) / "fit.db"
        shutil.copyfile(db, copy)
        ms = _open(copy, Path(tmp))
        try:
            return np.stack([r["embedding"] for r in span_rows(ms)])
        finally:
            _close(ms, copy)


def run(
    corpus_set: str,
    workdir: Path,
    seed: int,
    dims: list[int],
    by_key: bool = False,
    fit_db: Path | None = None,
    fit_rows: int = 0,
) -> list[dict[str, Any]]:
    from benches.fusion_offline import facts_of

    corpus, prefix = layout(workdir, corpus_set)
    source = workdir / f"{prefix}m.db"
    if not source.exists():
        raise SystemExit(f"{source} does not exist: run benches.retrieval with --workdir {workdir} first")
    facts = facts_of(corpus_set, 40, seed, by_key)
    out = []
    with tempfile.TemporaryDirectory(prefix="span-dims-") as tmp:
        rows: list[dict[str, Any]] = []
        fit = np.zeros((0, 0), np.float32)
        for k in [0, *dims]:
            db = Path(tmp) / f"{k}.db"
            shutil.copyfile(source, db)
            ms = _open(db, corpus)
            try:
                if k == 0:
                    rows = span_rows(ms)
                    if fit_db:
                        fit = fitted_on(fit_db)
                    else:
                        first = sorted(rows, key=lambda r: (r["source"], r["start_line"]))[: fit_rows or None]
                        fit = np.stack([r["embedding"] for r in first])
                else:
                    rewrite(ms, rows, fitted(fit, k))
                report = evaluate(ms, facts, lists=True)
            finally:
                _close(ms, db)
            size, count, rest = table_bytes(db)
            out.append(
                {
                    "dims": k or len(rows[0]["embedding"]),
                    "fused": report["all"],
                    "dense": report["lists"]["dense"]["all"],
                    "span_rows": count,
                    "bytes_a_row": round(size / max(count, 1)),
                    "span_mb": round(size / 1e6, 1),
                    "ratio": round((size + rest) / max(rest, 1), 2),
                }
            )
            print(out[-1], flush=True)
    return out


#: Today's span fields, and one-letter names for them (protobuf keeps each name in every row).
NAMES = {"span_id": "i", "chunk_hash": "c", "source": "s", "text_hash": "t", "start_line": "a", "end_line": "b"}


def row_bytes(dim: int, short: bool, source: bool, n: int = 20_000) -> int:
    """Bytes a row of a span table written with *n* rows of random float16 vectors."""
    from pymilvus import DataType, MilvusClient

    name = (lambda f: NAMES[f]) if short else (lambda f: f)
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory(prefix="span-rows-") as tmp:
        db = Path(tmp) / "rows.db"
        client = MilvusClient(uri=str(db))
        schema = client.create_schema(enable_dynamic_field=False)
        schema.add_field(field_name=name("span_id"), datatype=DataType.VARCHAR, max_length=80, is_primary=True)
        schema.add_field(field_name=name("chunk_hash"), datatype=DataType.VARCHAR, max_length=64)
        if source:
            schema.add_field(field_name=name("source"), datatype=DataType.VARCHAR, max_length=1024)
        schema.add_field(field_name=name("text_hash"), datatype=DataType.VARCHAR, max_length=64)
        schema.add_field(field_name=name("start_line"), datatype=DataType.INT64)
        schema.add_field(field_name=name("end_line"), datatype=DataType.INT64)
        schema.add_field(field_name="v" if short else "embedding", datatype=DataType.FLOAT16_VECTOR, dim=dim)
        index = client.prepare_index_params()
        index.add_index(field_name="v" if short else "embedding", index_type="FLAT", metric_type="COSINE")
        client.create_collection(collection_name="retrieval_spans", schema=schema, index_params=index)
        for start in range(0, n, 1000):
            rows = []
            for i in range(start, start + 1000):
                chunk = f"{rng.integers(1 << 62):016x}"
                row = {
                    name("span_id"): f"{chunk}:{i % 12}",
                    name("chunk_hash"): chunk,
                    name("text_hash"): f"{rng.integers(1 << 62):016x}",
                    name("start_line"): i,
                    name("end_line"): i + 1,
                    "v" if short else "embedding": rng.standard_normal(dim).astype(np.float16),
                }
                if source:  # a journal's path as the plugins write it
                    row[name("source")] = f"/home/dev/projects/lotus/memory/2025-{i % 12 + 1:02d}-{i % 28 + 1:02d}.md"
                rows.append(row)
            client.insert(collection_name="retrieval_spans", data=rows)
        client.flush("retrieval_spans")
        client.close()
        size, count, _ = table_bytes(db)
    return round(size / max(count, 1))


def kernel_ms(npz: Path, dims: list[int], rounds: int = 3) -> dict[int, tuple[float, float]]:
    """p50 and p95 ms of one ``best_groups`` call on the copy's codes at each *k*."""
    import statistics
    import time

    from memsearch_fast._core import best_groups
    from memsearch_fast.store.copy.spans import quantised, shortlist, sign_bits

    with np.load(npz, allow_pickle=False) as z:
        if "own_codes" in z.files:
            raise SystemExit("--kernel takes a copy saved at every dimension (a collection without a basis)")
        full = z["matrix"].shape[1]
        codes = z["span_codes"].reshape(-1, full)
        scales, offsets = z["span_scales"], z["span_offsets"]
        questions = z["matrix"][:: max(1, len(z["matrix"]) // 40)][:40]
    vectors = codes.astype(np.float32) * scales[:, None]
    variants: dict[int, tuple[bytes, bytes, bytes, np.ndarray]] = {}
    for k in dims:
        if k >= full:
            variants[k] = (codes.tobytes(), scales.tobytes(), sign_bits(codes), questions)
            continue
        p = basis(vectors[:8000], k)
        c, sc = quantised(vectors @ p, k)
        variants[k] = (c.tobytes(), sc.astype("<f4").tobytes(), sign_bits(c), questions @ p)
    took: dict[int, list[float]] = {k: [] for k in dims}
    offset_bytes = offsets.tobytes()
    for _ in range(rounds):
        for k, (c_bytes, sc_bytes, signs, qs) in variants.items():
            for q in qs:
                start = time.perf_counter()
                best_groups(c_bytes, min(k, full), sc_bytes, offset_bytes, q.tolist(), 30, signs, shortlist(30))
                took[k].append((time.perf_counter() - start) * 1000)
    return {k: (statistics.median(t), p95(sorted(t))) for k, t in took.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", dest="corpus_set", choices=["default", "agent", "dialogue"], default="agent")
    parser.add_argument("--workdir", type=Path)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--by-key", action="store_true")
    parser.add_argument("--dims", default="256,192,128")
    parser.add_argument("--fit-db", type=Path, help="fit the directions on this database's span vectors instead")
    parser.add_argument("--fit-rows", type=int, default=0, help="fit on the first N span rows, by file (0: all)")
    parser.add_argument("--kernel", type=Path, help="time the copy's kernel on this saved copy (.npz) per k")
    parser.add_argument("--row-bytes", action="store_true", help="bytes a span row takes, per schema, random rows")
    args = parser.parse_args()
    dims = [int(d) for d in args.dims.split(",")]
    if args.kernel:
        print("| dims | kernel p50 | p95 |")
        print("|---|---|---|")
        for k, (p50, p95) in kernel_ms(args.kernel, dims).items():
            print(f"| {k} | {p50:.2f} ms | {p95:.2f} ms |")
        return
    if args.row_bytes:
        print("| dims | today's schema | one-letter names | one-letter names, no source |")
        print("|---|---|---|---|")
        for k in dims:
            cells = [row_bytes(k, short, source) for short, source in ((False, True), (True, True), (True, False))]
            print(f"| {k} | " + " | ".join(f"{c:,} B" for c in cells) + " |", flush=True)
        return
    if args.workdir is None:
        parser.error("--workdir is required (unless --kernel or --row-bytes)")
    results = run(
        args.corpus_set,
        args.workdir,
        args.seed,
        dims,
        args.by_key,
        args.fit_db,
        args.fit_rows,
    )
    print(
        "| dims | span rows | bytes a row | span table | database ÷ without spans "
        "| fused hit@1 / hit@5 / MRR@10 | dense alone |"
    )
    print("|---|---|---|---|---|---|---|")
    for r in results:
        f, d = r["fused"], r["dense"]
        print(
            f"| {r['dims']} | {r['span_rows']:,} | {r['bytes_a_row']:,} | {r['span_mb']} MB | {r['ratio']:.2f}× "
            f"| {f['hit@1']:.3f} / {f['hit@5']:.3f} / {f['mrr@10']:.3f} "
            f"| {d['hit@1']:.3f} / {d['hit@5']:.3f} / {d['mrr@10']:.3f} |"
        )


if __name__ == "__main__":
    main()
