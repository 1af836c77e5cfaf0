"""How much a text's vector depends on the texts embedded with it, and what that does to retrieval.

``python -m benches.batch_invariance`` embeds real chunks of a generated
corpus alone and in three kinds of company (the whole set, as an index run
batches it; with 7 short mates; with 3 long mates) and prints the cosine of
each text's vector to its vector alone (min, 1st percentile, median): for
the fp32 file of the shared model in batches of 32, and for the int8 file in
batches of 32 (the old default) and one text per call (the default now).
The int8-to-fp32 cosine is printed for scale. Throughput of the two int8
settings: all chunks of the corpus embedded in one call, the settings
alternated for ``--rounds`` rounds, wall and process CPU time (medians).

``--retrieval`` also indexes the planted-facts corpus of
``benches/retrieval.py`` with each int8 setting, and with the fp32 file for
reference, and prints hit@1, hit@5 and MRR@10: the effect of the batch
dependence on what searches find.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
MODEL_DIR = Path(
    os.environ.get("MEMSEARCH_TEST_MODEL_DIR", ROOT.parent / "shared" / "models" / "all-MiniLM-L6-v2-onnx")
)
#: int8 settings compared: the batch size given to the provider (0: its default).
SETTINGS = {"batches of 32": 32, "default (one per call)": 0}


def chunks(seed: int) -> list[str]:
    """The chunk texts of a generated 300 KB corpus (as the index pipeline embeds them), shuffled."""
    from memsearch_fast.index.chunk import chunk_markdown, clean_content_for_embedding
    from tests.helpers.corpus import write_corpus

    with tempfile.TemporaryDirectory() as tmp:
        write_corpus(Path(tmp), total_bytes=300_000, seed=seed)
        texts = [
            clean_content_for_embedding(c.content)
            for p in sorted(Path(tmp).rglob("*.md"))
            for c in chunk_markdown(p.read_text(encoding="utf-8"), str(p))
        ]
    random.Random(seed).shuffle(texts)
    return texts


def cosines(a: Any, b: Any) -> Any:
    import numpy as np

    return np.sum(a * b, axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def summary(c: Any) -> dict[str, float]:
    import numpy as np

    return {
        "min": round(float(np.min(c)), 6),
        "p01": round(float(np.percentile(c, 1)), 6),
        "median": round(float(np.median(c)), 6),
    }


def invariance(emb: Any, texts: list[str], seed: int) -> tuple[dict[str, Any], Any]:
    """Cosine of each text's vector in company to its vector alone; the vectors alone."""
    import numpy as np

    rng = random.Random(seed)
    by_len = sorted(texts, key=len)
    short, long = by_len[: len(by_len) // 4], by_len[-(len(by_len) // 4) :]
    alone = np.vstack([emb.embed_sync([t]) for t in texts])
    with_short = np.vstack([emb.embed_sync([t, *rng.sample(short, 7)])[:1] for t in texts])
    with_long = np.vstack([emb.embed_sync([t, *rng.sample(long, 3)])[:1] for t in texts])
    report = {
        "whole set": summary(cosines(emb.embed_sync(texts), alone)),
        "7 short mates": summary(cosines(with_short, alone)),
        "3 long mates": summary(cosines(with_long, alone)),
    }
    return report, alone


def throughput(embs: dict[str, Any], texts: list[str], rounds: int) -> dict[str, Any]:
    """Each provider embeds ``texts`` in one call, alternated; median wall and CPU seconds."""
    wall: dict[str, list[float]] = {k: [] for k in embs}
    cpu: dict[str, list[float]] = {k: [] for k in embs}
    items = list(embs.items())
    for r in range(rounds):
        for name, emb in items if r % 2 == 0 else items[::-1]:
            w, c = time.perf_counter(), time.process_time()
            emb.embed_sync(texts)
            wall[name].append(time.perf_counter() - w)
            cpu[name].append(time.process_time() - c)
    return {
        name: {
            "texts_per_s": round(len(texts) / statistics.median(wall[name]), 1),
            "wall_s": round(statistics.median(wall[name]), 2),
            "cpu_s": round(statistics.median(cpu[name]), 2),
        }
        for name in embs
    }


def retrieval(megabytes: float, facts: int) -> dict[str, Any]:
    from benches.retrieval import build, evaluate
    from memsearch_fast import MemSearch
    from memsearch_fast.lite import broker

    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        corpus = Path(tmp) / "corpus"
        planted = build(corpus, megabytes, facts)
        db = Path(tmp) / "m.db"
        fp32 = Path(tmp) / "fp32-model"  # the shared model without its int8 file
        (fp32 / "onnx").mkdir(parents=True)
        for rel in ("tokenizer.json", "config.json", "sentence_bert_config.json", "onnx/model.onnx"):
            (fp32 / rel).symlink_to(MODEL_DIR / rel)
        runs = [(f"int8, {label}", MODEL_DIR, batch) for label, batch in SETTINGS.items()]
        for i, (label, model, batch) in enumerate([*runs, ("fp32, batches of 32", fp32, 32)]):
            ms = MemSearch(
                [str(corpus)],
                embedding_model=str(model),
                embedding_batch_size=batch,
                milvus_uri=str(db),
                collection=f"run{i}",
            )
            try:
                start = time.perf_counter()
                asyncio.run(ms.index())
                index_s = time.perf_counter() - start
                report = evaluate(ms, planted)
            finally:
                ms.close()
            out[label] = {"index_s": round(index_s, 1), **report["all"]}
        broker.stop_server(str(db))
    return out


def main() -> None:
    from memsearch_fast.embeddings.onnx import OnnxEmbedding

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--texts", type=int, default=100, help="chunks to embed (default 100)")
    parser.add_argument("--rounds", type=int, default=4, help="alternated throughput rounds (default 4)")
    parser.add_argument("--seed", type=int, default=5)
    parser.add_argument("--retrieval", action="store_true", help="also compare retrieval (int8 settings, fp32)")
    parser.add_argument("--only-retrieval", action="store_true", help="the retrieval comparison alone")
    parser.add_argument("--mb", type=float, default=1.0, help="retrieval corpus size in MB (default 1)")
    parser.add_argument("--facts", type=int, default=20, help="planted facts (default 20)")
    args = parser.parse_args()
    if args.only_retrieval:
        json.dump({"retrieval": retrieval(args.mb, args.facts)}, sys.stdout, indent=2)
        print()
        return
    corpus = chunks(args.seed)
    texts = corpus[: args.texts]
    report: dict[str, Any] = {"texts": len(texts), "throughput_texts": len(corpus), "cos_to_alone": {}}
    with OnnxEmbedding(str(MODEL_DIR), quantized=False, batch_size=32) as fp32:
        report["cos_to_alone"]["fp32, batches of 32"], fp32_alone = invariance(fp32, texts, args.seed)
    embs = {name: OnnxEmbedding(str(MODEL_DIR), batch_size=batch) for name, batch in SETTINGS.items()}
    try:
        for name, emb in embs.items():
            report["cos_to_alone"][f"int8, {name}"], int8_alone = invariance(emb, texts, args.seed)
        report["int8_vs_fp32_alone"] = summary(cosines(int8_alone, fp32_alone))
        report["int8_throughput"] = throughput(embs, corpus, args.rounds)
    finally:
        for emb in embs.values():
            emb.close()
    if args.retrieval:
        report["retrieval"] = retrieval(args.mb, args.facts)
    json.dump(report, sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    main()
