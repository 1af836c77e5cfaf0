"""Today's fusion replayed on recorded inputs, with its constants varied.

A change to :mod:`memsearch_fast.store.fusion` moves only how two lists are
merged, so it can be measured on many sets without indexing or searching
again:

``python -m benches.fuse_replay capture --set dialogue --seed 2 --workdir W --out F.json``
asks every question of the database ``benches.retrieval`` left in *W* (run it
first with the same ``--set``, ``--seed`` and ``--by-key``) and records what
``fusion.fuse`` received for it: both lists, BM25's trust, each chunk's share
of the question's words, and the content of every chunk named (to tell a hit).

``python -m benches.fuse_replay replay F1.json F2.json --vary DENSE_FIRST_OVER=0,0.75``
fuses every recorded question again with each value of one of :data:`VARIED`
(the module's own code, nothing re-implemented) and prints hit@1 / hit@5 /
MRR@10 per file and the mean MRR@10. Without ``--vary`` it prints today's.

BM25's trust and the words shares are recorded as they were, so constants
that shape them (``PEAK``, ``span_words.WORD_BONUS``, ``DEPTH``) need a new
capture. The capture searches through Milvus, as a process without the
in-memory copy does; the copy scores spans from int8 codes, which can move a
chunk near a threshold.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path
from typing import Any

from benches.retrieval import MODEL_DIR, layout, rank_of, scores

#: The constants ``fusion.fuse`` reads itself (the others shape its recorded inputs).
VARIED = ("DENSE_WEIGHT", "DENSE_FIRST_WITHIN", "DENSE_FIRST_OVER", "WORDS_WEIGHT")


def capture(corpus_set: str, workdir: Path, seed: int, by_key: bool, facts: int) -> list[dict[str, Any]]:
    from benches.fusion_offline import facts_of
    from memsearch_fast import MemSearch
    from memsearch_fast.lite import broker
    from memsearch_fast.store import fusion

    corpus, prefix = layout(workdir, corpus_set)
    db = workdir / f"{prefix}m.db"
    if not db.exists():
        raise SystemExit(f"{db} does not exist: run benches.retrieval with --workdir {workdir} first")
    ms = MemSearch([str(corpus)], embedding_model=str(MODEL_DIR), milvus_uri=str(db), collection="retrieval")
    real = fusion.fuse
    seen: dict[str, Any] = {}

    def spy(dense: Any, sparse: Any, top_k: int, *, bm25_trust: float = 1.0, words: Any = None) -> Any:
        seen.update(dense=list(dense), sparse=list(sparse), trust=bm25_trust, words=dict(words or {}))
        return real(dense, sparse, top_k, bm25_trust=bm25_trust, words=words)

    out = []
    fusion.fuse = spy  # type: ignore[assignment]
    try:
        for fact in facts_of(corpus_set, facts, seed, by_key):
            vector = asyncio.run(ms.provider.embed_query(fact.question))
            seen.clear()
            ms.store.search(vector, fact.question, top_k=10)
            seen.setdefault("dense", [])  # an empty collection or question: nothing fused
            seen.setdefault("sparse", [])
            seen.setdefault("trust", 1.0)
            seen.setdefault("words", {})
            ids = list(dict.fromkeys([c for c, _ in seen["dense"]] + [c for c, _ in seen["sparse"]]))
            content = {r["chunk_hash"]: r["content"] for r in ms.store.rows_for_ids(ids, ["content"])}
            out.append({"kind": fact.kind, "key": fact.key, "content": content, **seen})
    finally:
        fusion.fuse = real  # type: ignore[assignment]
        ms.close()
        broker.stop_server(str(db))
    return out


def replay(questions: list[dict[str, Any]]) -> dict[str, float]:
    from memsearch_fast.store import fusion

    ranks = []
    for q in questions:
        dense = [tuple(p) for p in q["dense"]]
        sparse = [tuple(p) for p in q["sparse"]]
        fused = fusion.fuse(dense, sparse, 10, bm25_trust=q["trust"], words=q["words"] or None)
        ranks.append(rank_of([{"content": q["content"].get(f.id, "")} for f in fused], q["key"]))
    return scores(ranks)


def table(files: list[Path], vary: str | None) -> str:
    from memsearch_fast.store import fusion

    sets = {
        (f.stem if [g.stem for g in files].count(f.stem) == 1 else str(f)): json.loads(f.read_text()) for f in files
    }
    name, values = vary.split("=", 1) if vary and "=" in vary else ("", "")
    if vary and (name not in VARIED or not values):
        raise SystemExit(f"--vary takes NAME=v1,v2,... with NAME one of {', '.join(VARIED)}")
    saved = getattr(fusion, name) if name else None
    try:
        chosen = [type(saved)(v) if isinstance(saved, int) else float(v) for v in values.split(",")] if name else []
    except ValueError as exc:
        raise SystemExit(
            f"--vary {name}: each value must be a{'n integer' if isinstance(saved, int) else ' number'}"
        ) from exc
    rows = [f"| {name or 'today'} | " + " | ".join(sets) + " | mean MRR@10 |", "|---" * (len(sets) + 2) + "|"]
    try:
        for value in chosen or [None]:
            if name:
                setattr(fusion, name, value)
            cells, mrr = [], []
            for questions in sets.values():
                sc = replay(questions)
                mrr.append(sc["mrr@10"])
                cells.append(f"{sc['hit@1']:.3f} / {sc['hit@5']:.3f} / {sc['mrr@10']:.3f}")
            label = "now" if value is None else value
            rows.append(f"| {label} | " + " | ".join(cells) + f" | {sum(mrr) / len(mrr):.3f} |")
    finally:
        if name:
            setattr(fusion, name, saved)
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    cap = sub.add_parser("capture", help="record fuse's inputs for every question of a benches.retrieval workdir")
    cap.add_argument("--set", dest="corpus_set", choices=["default", "agent", "dialogue"], default="default")
    cap.add_argument("--workdir", type=Path, required=True)
    cap.add_argument("--seed", type=int, default=0)
    cap.add_argument("--by-key", action="store_true")
    cap.add_argument("--facts", type=int, default=40)
    cap.add_argument("--out", type=Path, required=True)
    rep = sub.add_parser("replay", help="fuse recorded inputs again, a constant varied")
    rep.add_argument("files", type=Path, nargs="+")
    rep.add_argument("--vary", help=f"NAME=v1,v2,... with NAME one of {', '.join(VARIED)}")
    args = parser.parse_args()
    if args.command == "capture":
        questions = capture(args.corpus_set, args.workdir, args.seed, args.by_key, args.facts)
        args.out.write_text(json.dumps(questions))
        print(f"{len(questions)} questions -> {args.out}")
    else:
        print(table(args.files, args.vary))


if __name__ == "__main__":
    main()
