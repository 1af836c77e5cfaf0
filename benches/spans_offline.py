"""Offline: would vectors of spans inside a chunk find one-bullet facts better?

``python -m benches.spans_offline`` (0.5 MB per set; ``--mb``) builds the agent and dialogue sets
(``benches/agent_corpus.py``, ``benches/dialogue_corpus.py``), chunks them with
the package's chunker and embeds with its ONNX provider (the shared
all-MiniLM-L6-v2 int8 model); no Milvus. Per chunk it embeds the chunk as the
index does (one vector of ``clean_content_for_embedding``) and spans of it:

* ``line``: each line (a bullet, a speaker line; a line over 400 characters is
  cut at sentence ends);
* ``win2+h``, ``win3+h``: each run of 2 or 3 consecutive lines, the chunk's
  heading prefixed;
* ``greedy32/64/128``: consecutive lines grouped greedily up to that many
  tokens, heading included (a longer line stands alone).

A chunk is scored for a question by its best span (``max``), by 0.5 best span +
0.5 chunk vector (``max+chunk``), or by the mean of its two best spans
(``top2``); each ranking is also fused with a BM25 list over the chunks' content
(Okapi k1 1.2, b 0.75, words lowercased, CJK as characters and character pairs:
close to, not the same as, Milvus's jieba analyzer) by RRF (k 60) and by the
package's scaled 0.5/0.5 fusion (``memsearch_fast.store.fusion.fuse``), each
list :data:`DEPTH` deep. Reports hit@1, hit@5 and MRR@10 per variant, and span
vectors per MB of corpus (each is one stored row's worth of vector).
"""

from __future__ import annotations

import argparse
import math
import re
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from benches.retrieval import MODEL_DIR

DEPTH = 30
TOP_K = 10
RRF_K = 60
LONG_LINE = 400


@dataclass
class Corpus:
    chunks: list[Any]
    texts: list[str]  # what the index embeds per chunk
    units: list[list[str]] = field(default_factory=list)  # the lines of each chunk
    nbytes: int = 0


def load(root: Path) -> Corpus:
    from memsearch_fast.index.chunk import chunk_markdown, clean_content_for_embedding

    chunks, nbytes = [], 0
    for path in sorted(root.rglob("*.md")):
        text = path.read_text(encoding="utf-8")
        nbytes += len(text.encode("utf-8"))
        chunks += chunk_markdown(text, str(path))
    texts = [clean_content_for_embedding(c.content) or c.content for c in chunks]
    return Corpus(chunks, texts, [units_of(c) for c in chunks], nbytes)


def units_of(chunk: Any) -> list[str]:
    """The chunk's lines, less headings and anchor comments; long lines cut at sentence ends."""
    out = []
    for raw in chunk.content.splitlines():
        line = raw.strip()
        if not line or line.startswith("#") or (line.startswith("<!--") and line.endswith("-->")):
            continue
        if len(line) <= LONG_LINE:
            out.append(line)
            continue
        piece = ""
        for sentence in re.split(r"(?<=[.!?。])\s+", line):
            if piece and len(piece) + len(sentence) > LONG_LINE:
                out.append(piece)
                piece = sentence
            else:
                piece = f"{piece} {sentence}".strip()
        if piece:
            out.append(piece)
    return out or [chunk.content.strip() or chunk.heading or "(empty)"]


def _prefix(chunk: Any) -> str:
    return f"{chunk.heading}\n" if chunk.heading else ""


def windows(chunk: Any, units: list[str], size: int) -> list[str]:
    if len(units) <= size:
        return [_prefix(chunk) + "\n".join(units)]
    return [_prefix(chunk) + "\n".join(units[i : i + size]) for i in range(len(units) - size + 1)]


def greedy(chunk: Any, units: list[str], budget: int, count: Callable[[str], int]) -> list[str]:
    head = _prefix(chunk)
    base = count(head) if head else 0
    groups, group, used = [], list[str](), base
    for unit in units:
        n = count(unit)
        if group and used + n > budget:
            groups.append(head + "\n".join(group))
            group, used = [], base
        group.append(unit)
        used += n
    if group:
        groups.append(head + "\n".join(group))
    return groups


def spans(corpus: Corpus, variant: str, count: Callable[[str], int]) -> tuple[list[str], np.ndarray]:
    """Span texts of every chunk and, for each span, its chunk's index."""
    texts: list[str] = []
    owner: list[int] = []
    for i, (chunk, units) in enumerate(zip(corpus.chunks, corpus.units, strict=True)):
        if variant == "line":
            group = units
        elif variant.startswith("win"):
            group = windows(chunk, units, int(variant[3]))
        else:
            group = greedy(chunk, units, int(variant.removeprefix("greedy")), count)
        texts += group
        owner += [i] * len(group)
    return texts, np.asarray(owner)


# -- BM25 --------------------------------------------------------------------------

_WORD = re.compile(r"[a-z0-9_]+|[\u3400-\u9fff]+")


def tokens(text: str) -> list[str]:
    out = []
    for word in _WORD.findall(text.lower()):
        if "\u3400" <= word[0] <= "\u9fff":
            out += list(word) + [word[i : i + 2] for i in range(len(word) - 1)]
        else:
            out.append(word)
    return out


class BM25:
    def __init__(self, docs: Sequence[str], k1: float = 1.2, b: float = 0.75) -> None:
        self.k1, self.b = k1, b
        self.docs = [Counter(tokens(d)) for d in docs]
        self.lengths = np.asarray([sum(c.values()) for c in self.docs], dtype=np.float64)
        self.avg = float(self.lengths.mean()) if len(docs) else 1.0
        df: Counter[str] = Counter()
        for c in self.docs:
            df.update(c.keys())
        n = len(docs)
        self.idf = {t: math.log(1 + (n - f + 0.5) / (f + 0.5)) for t, f in df.items()}
        self.postings: dict[str, list[tuple[int, int]]] = {}
        for i, c in enumerate(self.docs):
            for t, tf in c.items():
                self.postings.setdefault(t, []).append((i, tf))

    def scores(self, query: str) -> np.ndarray:
        out = np.zeros(len(self.docs))
        norm = self.k1 * (1 - self.b + self.b * self.lengths / self.avg)
        for t in set(tokens(query)):
            idf = self.idf.get(t)
            if idf is None:
                continue
            for i, tf in self.postings[t]:
                out[i] += idf * tf * (self.k1 + 1) / (tf + norm[i])
        return out


# -- ranking and fusion ------------------------------------------------------------


def top(scores: np.ndarray, depth: int = DEPTH, *, matched: bool = False) -> list[tuple[int, float]]:
    """The best *depth* (index, score); *matched*: only scores above 0 (BM25: a shared word)."""
    order = np.argsort(-scores, kind="stable")[:depth]
    return [(int(i), float(scores[i])) for i in order if not matched or scores[i] > 0]


def rrf(dense: list[tuple[int, float]], sparse: list[tuple[int, float]]) -> list[int]:
    score: dict[int, float] = {}
    for ranked in (dense, sparse):
        for rank, (i, _) in enumerate(ranked, start=1):
            score[i] = score.get(i, 0.0) + 1 / (RRF_K + rank)
    return sorted(score, key=lambda i: -score[i])[:TOP_K]


def scaled(dense: list[tuple[int, float]], sparse: list[tuple[int, float]]) -> list[int]:
    from memsearch_fast.store.fusion import fuse

    fused = fuse([(str(i), s) for i, s in dense], [(str(i), s) for i, s in sparse], TOP_K)
    return [int(f.id) for f in fused]


def per_chunk(span_scores: np.ndarray, owner: np.ndarray, n_chunks: int, how: str) -> np.ndarray:
    """A chunk's score from its spans' scores (one query)."""
    best = np.full(n_chunks, -1.0)
    np.maximum.at(best, owner, span_scores)
    if how == "max":
        return best
    # second best: order spans by (chunk, -score), take each chunk's second entry
    order = np.lexsort((-span_scores, owner))
    chunks_sorted = owner[order]
    first = np.r_[True, chunks_sorted[1:] != chunks_sorted[:-1]]
    second_mask = np.r_[False, first[:-1]] & ~first
    second = best.copy()
    second[chunks_sorted[second_mask]] = span_scores[order][second_mask]
    return (best + second) / 2


def rank_of(ranked: list[int], holds: set[int]) -> int | None:
    for r, i in enumerate(ranked[:TOP_K], start=1):
        if i in holds:
            return r
    return None


def metrics(ranks: list[int | None]) -> dict[str, float]:
    n = len(ranks) or 1
    return {
        "hit@1": sum(1 for r in ranks if r == 1) / n,
        "hit@5": sum(1 for r in ranks if r is not None and r <= 5) / n,
        "mrr@10": sum(1 / r for r in ranks if r is not None) / n,
    }


# -- the experiment ----------------------------------------------------------------

VARIANTS = ["line", "win2+h", "win3+h", "greedy32", "greedy64", "greedy128"]
SCORERS = ["max", "max+chunk", "top2"]


def run_set(name: str, root: Path, megabytes: float, facts_n: int, seed: int, provider: Any) -> list[str]:
    from benches import agent_corpus, dialogue_corpus

    module = agent_corpus if name == "agent" else dialogue_corpus
    facts = module.build(root, megabytes, facts_n, seed)
    started = time.perf_counter()
    corpus = load(root)
    mb = corpus.nbytes / 1e6
    count = provider.count_tokens
    over = sum(1 for t in corpus.texts if count(t) > 256)
    chunk_vecs = provider.embed_sync(corpus.texts)
    questions = provider.embed_sync([f.question for f in facts])
    bm25 = BM25([c.content for c in corpus.chunks])
    sparse_lists = [top(bm25.scores(f.question), matched=True) for f in facts]
    holds = [{i for i, c in enumerate(corpus.chunks) if f.key in c.content} for f in facts]
    dense_chunk = questions @ chunk_vecs.T

    rows: list[tuple[str, str, str, dict[str, float], int]] = []

    def evaluate(label: str, scorer: str, chunk_scores: np.ndarray, n_vectors: int) -> None:
        by_fusion: dict[str, list[int | None]] = {"dense": [], "rrf": [], "scaled": []}
        for q in range(len(facts)):
            dense = top(chunk_scores[q], DEPTH)
            by_fusion["dense"].append(rank_of([i for i, _ in dense], holds[q]))
            by_fusion["rrf"].append(rank_of(rrf(dense, sparse_lists[q]), holds[q]))
            by_fusion["scaled"].append(rank_of(scaled(dense, sparse_lists[q]), holds[q]))
        for fusion, ranks in by_fusion.items():
            rows.append((label, scorer, fusion, metrics(ranks), n_vectors))

    rows.append(
        (
            "bm25",
            "-",
            "-",
            metrics([rank_of([i for i, _ in s], h) for s, h in zip(sparse_lists, holds, strict=True)]),
            0,
        )
    )
    evaluate("chunk", "-", dense_chunk, len(corpus.chunks))
    timings = []
    for variant in VARIANTS:
        t0 = time.perf_counter()
        texts, owner = spans(corpus, variant, count)
        unique = list(dict.fromkeys(texts))
        vecs = provider.embed_sync(unique)
        where = {t: i for i, t in enumerate(unique)}
        span_vecs = vecs[[where[t] for t in texts]]
        span_scores = questions @ span_vecs.T
        for scorer in SCORERS:
            how = "top2" if scorer == "top2" else "max"
            per = np.stack([per_chunk(span_scores[q], owner, len(corpus.chunks), how) for q in range(len(facts))])
            if scorer == "max+chunk":
                per = 0.5 * per + 0.5 * dense_chunk
            evaluate(variant, scorer, per, len(texts))
        timings.append(f"{variant} {len(texts)} spans {time.perf_counter() - t0:.0f} s")

    took = time.perf_counter() - started
    out = [
        f"### {name}: {mb:.2f} MB, {len(corpus.chunks)} chunks ({len(corpus.chunks) / mb:.0f}/MB), "
        f"{over / len(corpus.chunks):.0%} over 256 tokens, {len(facts)} questions, {took:.0f} s",
        "",
        "| spans | chunk score | fusion | hit@1 | hit@5 | mrr@10 | vectors/MB |",
        "|---|---|---|---|---|---|---|",
    ]
    for label, scorer, fusion, m, n in rows:
        out.append(
            f"| {label} | {scorer} | {fusion} | {m['hit@1']:.3f} | {m['hit@5']:.3f} | {m['mrr@10']:.3f} "
            f"| {n / mb:.0f} |"
        )
    return [*out, "", "embedding time: " + "; ".join(timings), ""]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=0.5, help="corpus size of each set in MB (default 0.5)")
    parser.add_argument("--facts", type=int, default=40, help="planted facts per set (default 40)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--sets", nargs="+", choices=["agent", "dialogue"], default=["agent", "dialogue"])
    args = parser.parse_args()
    from memsearch_fast.embeddings import get_provider

    provider = get_provider("onnx", model=str(MODEL_DIR))
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for name in args.sets:
                lines = run_set(name, Path(tmp) / name, args.mb, args.facts, args.seed, provider)
                print("\n".join(lines))
                sys.stdout.flush()
    finally:
        provider.close()


if __name__ == "__main__":
    main()
