"""Fusion variants compared on the lists a search really gets, without indexing again.

``python -m benches.fusion_offline --set agent --mb 1 --workdir W`` opens the
database ``benches.retrieval`` left in *W* (run it first with the same
arguments), asks every planted question once, and keeps each list as the store
gives it: the dense list (chunks at their best vector, spans included), the
BM25 list, and for every chunk of either list its score in the other list
(the BM25 score of a dense hit the BM25 list was too short to hold comes from
a BM25 search among those chunks alone). Then it ranks with each variant:

* ``scaled w`` — each list over its best, dense weight *w* (the default is 0.5);
* ``scaled+bm25fill w`` — the same, with every dense hit also given its BM25
  score (the store fills dense scores of BM25 hits already);
* ``rrf`` — reciprocal ranks, k 60, each list as deep as the search;
* ``dense`` / ``bm25`` — one list alone.

Prints hit@1, hit@5 and MRR@10 per variant, and the same for every kind of
question with ``--by-kind``.
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path
from typing import Any

from benches.retrieval import MODEL_DIR, layout, planted_facts, rank_of, scores

#: Each list's depth at top_k 10 (``fusion.depth``).
DEPTH = 30

VARIANTS = [
    "dense",
    "bm25",
    "rrf",
    *(f"scaled {w:.1f}" for w in (0.3, 0.4, 0.5, 0.6, 0.7)),
    *(f"scaled+bm25fill {w:.1f}" for w in (0.4, 0.5, 0.6)),
    *(f"spanlex:{lam} {w:.1f}" for lam in (0.1, 0.2) for w in (0.5, 0.6, 0.7)),
    *(f"adapt:{a} {w:.1f}" for a in (1.5, 2, 3) for w in (0.4, 0.5, 0.6)),
    *(f"adaptlex:{p}:{lam} {w:.1f}" for p in (2, 3) for lam in (0.1, 0.2, 0.3) for w in (0.5, 0.6, 0.7)),
]


def facts_of(corpus_set: str, count: int, seed: int, by_key: bool) -> list[Any]:
    if corpus_set == "default":
        return planted_facts(count, 0, seed, by_key)
    from benches import agent_corpus, dialogue_corpus

    if corpus_set == "agent":
        return agent_corpus.make_facts(count, seed)[0]
    return dialogue_corpus.make_facts(count, seed)


def capture(ms: Any, facts: list[Any]) -> list[dict[str, Any]]:
    """Per question: the store's two lists as fusion receives them, the BM25 scores
    of the dense hits, and the content of every chunk named."""
    from memsearch_fast.store.spans import words as span_words

    seen: dict[str, Any] = {}
    real_words = span_words.with_words
    store = ms.store
    real_fill = store.fill_sparse

    def spy_words(ranked: Any, matched: Any, rows: Any, question: str) -> Any:
        seen.update(dense=list(ranked), matched=dict(matched), rows=dict(rows))
        return real_words(ranked, matched, rows, question)

    def spy_fill(sparse: Any, ranked: Any, query_text: str) -> Any:
        out = real_fill(sparse, ranked, query_text)
        have = {c for c, _ in sparse}
        seen.update(sparse=list(sparse), filled={c: s for c, s in out if c not in have})
        return out

    span_words.with_words = spy_words  # type: ignore[assignment]
    store.fill_sparse = spy_fill
    out = []
    try:
        for fact in facts:
            vector = asyncio.run(ms.provider.embed_query(fact.question))
            seen.clear()
            store.search(vector, fact.question, top_k=10)
            dense, sparse, matched = seen["dense"], seen["sparse"], seen["matched"]
            ids = list(dict.fromkeys([c for c, _ in dense] + [c for c, _ in sparse]))
            rows = {r["chunk_hash"]: r for r in store.rows_for_ids(ids, ["content", "start_line"])}
            out.append(
                {
                    "fact": fact,
                    "dense": dense,
                    "sparse": sparse,
                    "filled": seen["filled"],
                    "content": {c: r["content"] for c, r in rows.items()},
                    "best": {
                        c: span_words.span_text(r, matched[c]) if c in matched else r["content"]
                        for c, r in rows.items()
                    },
                }
            )
    finally:
        span_words.with_words = real_words  # type: ignore[assignment]
        del store.fill_sparse
    return out


def _overlap(question: str, text: str) -> float:
    from memsearch_fast.store.spans.words import words

    q = words(question)
    return len(q & words(text)) / len(q) if q else 0.0


def _scaled(pairs: list[tuple[str, float]], top: float | None = None) -> dict[str, float]:
    hi = max((s for _, s in pairs), default=0.0) if top is None else top
    return {c: (max(0.0, s) / hi if hi > 0 else 1.0) for c, s in pairs}


def rank(q: dict[str, Any], variant: str) -> list[str]:
    dense, sparse = q["dense"], q["sparse"]
    if variant == "dense":
        return [c for c, _ in dense]
    if variant == "bm25":
        return [c for c, _ in sparse]
    if variant == "rrf":
        score: dict[str, float] = {}
        for lst in (dense, sparse):
            for r, (c, _) in enumerate(lst, start=1):
                score[c] = score.get(c, 0.0) + 1.0 / (60 + r)
        return sorted(score, key=lambda c: -score[c])
    name, w_text = variant.rsplit(" ", 1)
    w = float(w_text)
    peak = 1.0
    lex = 0.0
    if name.startswith("adaptlex"):
        lex = float(name.split(":")[2])
    if name.startswith("adapt"):  # BM25 trusted by how far its best stands above its middle
        from memsearch_fast.store import fusion

        saved, fusion.PEAK = fusion.PEAK, float(name.split(":")[1])
        try:
            peak = fusion.trust([s for _, s in sparse], DEPTH)
        finally:
            fusion.PEAK = saved
        name = f"spanlex:{lex}" if lex else "scaled+bm25fill"
    if name.startswith("spanlex"):  # dense plus the matched span's share of the question's words
        lam = float(name.split(":")[1])
        question = q["fact"].question
        dense = sorted(
            ((c, s + lam * _overlap(question, q["best"].get(c, ""))) for c, s in dense), key=lambda kv: -kv[1]
        )
        name = "scaled+bm25fill" if lex else "scaled"
    d = _scaled(dense)
    top = max((s for _, s in sparse), default=0.0)
    extra = list(q["filled"].items()) if name == "scaled+bm25fill" else []
    s = _scaled([*sparse, *extra], top if top > 0 else None)
    if not dense or not sparse:
        w = 1.0 if dense else 0.0
    order = list(dict.fromkeys([c for c, _ in dense] + [c for c, _ in sparse]))
    fused = {c: w * d.get(c, 0.0) + (1 - w) * peak * s.get(c, 0.0) for c in order}
    return sorted(order, key=lambda c: -fused[c])


def table(captured: list[dict[str, Any]], by_kind: bool) -> str:
    rows = ["| variant | kind | n | hit@1 | hit@5 | mrr@10 |", "|---|---|---|---|---|---|"]
    kinds = sorted({q["fact"].kind for q in captured}) if by_kind else []
    for variant in VARIANTS:
        for kind in ["all", *kinds]:
            part = [q for q in captured if kind == "all" or q["fact"].kind == kind]
            ranks = [
                rank_of([{"content": q["content"].get(c, "")} for c in rank(q, variant)[:10]], q["fact"].key)
                for q in part
            ]
            sc = scores(ranks)
            rows.append(
                f"| {variant} | {kind} | {len(part)} | {sc['hit@1']:.3f} | {sc['hit@5']:.3f} | {sc['mrr@10']:.3f} |"
            )
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", dest="corpus_set", choices=["default", "agent", "dialogue"], default="default")
    parser.add_argument("--workdir", type=Path, required=True, help="the workdir benches.retrieval indexed")
    parser.add_argument("--facts", type=int, default=40)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--by-key", action="store_true")
    parser.add_argument("--by-kind", action="store_true")
    args = parser.parse_args()

    from memsearch_fast import MemSearch
    from memsearch_fast.lite import broker

    corpus, prefix = layout(args.workdir, args.corpus_set)
    db = args.workdir / f"{prefix}m.db"
    facts = facts_of(args.corpus_set, args.facts, args.seed, args.by_key)
    ms = MemSearch([str(corpus)], embedding_model=str(MODEL_DIR), milvus_uri=str(db), collection="retrieval")
    try:
        captured = capture(ms, facts)
    finally:
        ms.close()
        broker.stop_server(str(db))
    print(f"set {args.corpus_set}{' by key' if args.by_key else ''}, {len(captured)} questions, {db}")
    print(table(captured, args.by_kind))


if __name__ == "__main__":
    main()
