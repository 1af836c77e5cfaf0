"""A search filtered to some sources of a shared collection against the same search
of a collection that holds those sources alone.

``python -m benches.filtered_parity --workdir W [--set conversation|chat] [--mb 1]``
indexes the conversation set (``benches/conversation_corpus.py``) twice: every
conversation into one collection, as the default store holds many sources, and
each conversation into a collection of its own. Each question is asked both ways
(``source_prefix`` set to its conversation, and no filter in its own collection)
and the two answers compared: the top hit the same, the top 5 and the top 10 the
same chunks in the same order, and the dense list alone (an empty query text)
the same hit for hit; hit@1 / hit@5 / MRR@10 of both. With ``MEMSEARCH_SPANS=0``
the run keeps databases of its own beside the default's.

Where the answers differ it is BM25: Milvus weighs a word by its rarity in the
whole collection (docs/retrieval.md, "A filtered search and the sources alone").
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
from pathlib import Path
from typing import Any

from benches.retrieval import MODEL_DIR, conversation_questions, rank_for, scores


def _answers(ms: Any, questions: list[Any], prefixed: bool, *, dense: bool) -> list[list[dict[str, Any]]]:
    async def ask() -> list[list[dict[str, Any]]]:
        out = []
        for q in questions:
            prefix = q.prefix if prefixed else None
            if dense:
                vector = await ms.provider.embed_query(q.question)
                out.append(await asyncio.to_thread(ms.store.search, vector, "", top_k=10, source_prefix=prefix))
            else:
                out.append(await ms.search(q.question, top_k=10, source_prefix=prefix))
        return out

    return asyncio.run(ask())


def run(workdir: Path, corpus_set: str, megabytes: float, seed: int) -> dict[str, Any]:
    from memsearch_fast import MemSearch
    from memsearch_fast.lite import broker

    corpus = workdir / f"corpus-{corpus_set}"
    style = "chat" if corpus_set == "chat" else "plain"
    questions = conversation_questions(corpus, workdir / f"{corpus_set}-questions.json", megabytes, seed, style)
    spans = "" if os.environ.get("MEMSEARCH_SPANS", "1") != "0" else "-nospans"
    db = str(workdir / f"parity{spans}.db")
    folders = sorted(dict.fromkeys(q.prefix for q in questions))

    def open_ms(paths: list[str], collection: str) -> Any:
        return MemSearch(paths, embedding_model=str(MODEL_DIR), milvus_uri=db, collection=collection)

    answers: dict[str, dict[str, list[list[dict[str, Any]]]]] = {"shared": {}, "alone": {}}
    try:
        shared = open_ms([str(corpus)], "shared")
        asyncio.run(shared.index())
        for dense in (False, True):
            answers["shared"][str(dense)] = _answers(shared, questions, True, dense=dense)
        shared.close()
        alone: dict[int, list[dict[str, Any]]] = {}
        alone_dense: dict[int, list[dict[str, Any]]] = {}
        for n, folder in enumerate(folders):
            ms = open_ms([folder], f"alone_{n}")
            asyncio.run(ms.index())
            mine = [i for i, q in enumerate(questions) if q.prefix == folder]
            asked = [questions[i] for i in mine]
            for i, hits in zip(mine, _answers(ms, asked, False, dense=False), strict=True):
                alone[i] = hits
            for i, hits in zip(mine, _answers(ms, asked, False, dense=True), strict=True):
                alone_dense[i] = hits
            ms.close()
        answers["alone"]["False"] = [alone[i] for i in range(len(questions))]
        answers["alone"]["True"] = [alone_dense[i] for i in range(len(questions))]
    finally:
        broker.stop_server(db)

    def ids(hits: list[dict[str, Any]], k: int) -> list[str]:
        return [h["chunk_hash"] for h in hits[:k]]

    out: dict[str, Any] = {"set": corpus_set, "seed": seed, "questions": len(questions), "spans": not spans}
    for name, dense in (("fused", "False"), ("dense", "True")):
        a, b = answers["shared"][dense], answers["alone"][dense]
        same = {
            f"same top {k}": round(sum(ids(x, k) == ids(y, k) for x, y in zip(a, b, strict=True)) / len(a), 3)
            for k in (1, 5, 10)
        }
        filtered = scores([rank_for(h, q) for h, q in zip(a, questions, strict=True)])
        own = scores([rank_for(h, q) for h, q in zip(b, questions, strict=True)])
        out[name] = {
            **same,
            "filtered, shared": {m: filtered[m] for m in ("hit@1", "hit@5", "mrr@10")},
            "alone": {m: own[m] for m in ("hit@1", "hit@5", "mrr@10")},
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, required=True, help="the corpus and databases (reused when present)")
    parser.add_argument("--set", choices=["conversation", "chat"], default="conversation")
    parser.add_argument("--mb", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    print(json.dumps(run(args.workdir, args.set, args.mb, args.seed), indent=2))


if __name__ == "__main__":
    main()
