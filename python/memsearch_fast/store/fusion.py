"""Fusing the dense and BM25 lists of a hybrid search into one ranking.

Each list is searched :data:`DEPTH` deep (or ``top_k`` when deeper), its
scores are divided by the list's best (negative cosines count 0), and a
hit's score is :data:`DENSE_WEIGHT` times its dense value plus the rest times
its BM25 value (0 where it is absent): 1.0 for a chunk first in both lists.

Measured with ``benches/retrieval.py`` against RRF (k=60, each list
``top_k`` deep: what memsearch 0.4.23 does through Milvus's RRFRanker),
hit@1 / hit@5 at top_k 10 on three sets: the 5 MB corpus with 40 facts and
20 ``--hard`` paraphrases (questions that share only a project's name with
their fact) 0.667 / 0.883 → 0.850 / 1.000; the same 60 facts asked by their
exact key (a port, a date, a channel name: the lookup only BM25 can do
well) 0.700 / 0.983 → 0.833 / 1.000; a 2 MB corpus of other facts (25 + 15
hard) 0.725 / 0.975 → 0.925 / 1.000. RRF sees only ranks, so a chunk far
ahead in one list but absent from the other lost to chunks midway in both
(a project's name in many entries); scaled scores keep the margin. Scaling
by the list's range instead (best 1, worst 0) did as well on questions but
worse on exact keys (hit@5 0.917); weighting dense 0.6 or 0.7 likewise.
An empty query text, or one whose words occur nowhere, leaves the dense
list alone, which then carries the whole weight.

With span vectors (a chunk's dense score is its best vector's, its own or a
sentence's: :mod:`memsearch_fast.store.spans`) and a BM25 hit missing from
the dense list given its real dense score (:func:`.spans.merge.fill_dense`), hit@1 /
hit@5 at 1-2 MB, dense 0.5 → 0.6 → 0.7: exact keys 0.850 / 1.000 → 0.800 /
1.000 → 0.725 / 0.925; agent journals 0.500 / 0.850 → 0.650 / 0.850 → 0.625 /
0.875; dialogue 0.350 / 0.450 → 0.350 / 0.475 → 0.350 / 0.475; the planted
facts 0.950 / 1.000 at all three. 0.6 gains a few first places and loses a
keyword whose dense score is the worst (a BM25-only hit then cannot reach
the top 3: tests/test_store.py), so 0.5 stays (docs/retrieval.md).

BM25's share is then scaled by :func:`trust` (how far its best stands out of
its list), a dense hit the BM25 list was too short to hold gets its BM25
score (:meth:`.search.StoreSearch.fill_sparse`), and the dense list gains the
share of the question's words in the lines that matched
(:func:`memsearch_fast.store.spans.words.with_words`). On six sets (``benches/fusion_offline.py``, the
same lists for every variant) the mean hit@5 went 0.792 → 0.854 and MRR@10
0.690 → 0.781, no set lower; docs/retrieval.md has the table. A dense
weight of 0.6 or 0.7 gained another point or two in the mean but lost the
unique keyword with the worst dense score (tests/test_store.py).

That share also counts in the fused score, with :data:`WORDS_WEIGHT`: inside
the dense score it is scaled and halved with it, and BM25 over whole chunks
still ranked a look-alike entry above the fact whose line holds more of the
question's words ("who took over rolling out the feature flag for meadow": an
entry naming meadow and the feature flag on several lines, against the one
line that says who took it over). On seven sets, weights 0.2 to 2.0 moved
no set down and 0.4 and above reached the same plateau (agent journals
hit@1 0.725 → 0.875); docs/retrieval.md has the table.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

#: How deep each list is searched before fusion (a larger ``top_k`` searches deeper).
DEPTH = 30
#: The dense list's share of a fused score; BM25 has the rest.
DENSE_WEIGHT = 0.5
#: The dense list's first chunk (its best line nearest the question, with the
#: question's words in it) is fused no lower than this place: see :func:`fuse`.
#: Any place from 2 to 5 gives the same hit@1, hit@5 and hit@10 (the chunks it
#: passes move down one place); second place gave the best mean MRR@10 on eight
#: sets (docs/retrieval.md, "The dense list's first chunk is kept second").
DENSE_FIRST_WITHIN = 2
#: It takes the first place when the fused first is a chunk the dense list scores
#: below this share of its best, whose matched lines lack a word asked: see :func:`fuse`.
DENSE_FIRST_OVER = 0.75
#: The weight of the share of the question's words found in the lines that gave a
#: chunk its dense score (:func:`memsearch_fast.store.spans.words.with_words`), beside the two lists'.
WORDS_WEIGHT = 0.5
#: BM25 keeps its whole share when its best score is at least this many times
#: (best − middle of its list) over best: see :func:`trust`.
PEAK = 2.0


@dataclass(slots=True)
class Fused:
    id: str
    score: float
    dense_rank: int | None
    dense_score: float | None
    sparse_rank: int | None
    sparse_score: float | None
    kept_at: int | None = None  # moved up to this place (1, or :data:`DENSE_FIRST_WITHIN`)


def depth(top_k: int, limit: int) -> int:
    """How deep to search each list for ``top_k`` results (at most ``limit``)."""
    return min(limit, max(top_k, DEPTH))


def trust(scores: Sequence[float], deep: int) -> float:
    """How much of its share BM25 gets for one question, 0..1: how far its best
    score stands above the middle of its list (padded with zeros to *deep*).

    A question whose words single out a few chunks (a key, a name, a port)
    gives a list that falls off fast: BM25 keeps its share. One whose words
    are everywhere (a project's name, "who", "said") gives a flat list of
    near-equal scores that ranks noise; scaled to its best, every hit of it
    would gain almost a full share over chunks the dense side ranks higher.
    """
    ranked = sorted((max(0.0, s) for s in scores), reverse=True)
    if not ranked or ranked[0] <= 0:
        return 1.0
    ranked += [0.0] * max(0, deep - len(ranked))
    return min(1.0, PEAK * (ranked[0] - ranked[len(ranked) // 2]) / ranked[0])


def _scaled(scores: Sequence[float]) -> list[float]:
    """Each score over the list's best, in 0..1 (all 1.0 when the best is not above 0)."""
    if not scores:
        return []
    hi = max(scores)
    return [1.0 if hi <= 0 else max(0.0, s) / hi for s in scores]


def fuse(
    dense: Sequence[tuple[str, float]],
    sparse: Sequence[tuple[str, float]],
    top_k: int,
    *,
    bm25_trust: float = 1.0,
    words: dict[str, float] | None = None,
) -> list[Fused]:
    """The best ``top_k`` of the two ranked lists of (id, score), best first.

    BM25's weight is its share times *bm25_trust* (:func:`trust`); each chunk's
    share of the question's *words* (0..1, :func:`memsearch_fast.store.spans.words.with_words`) counts
    with :data:`WORDS_WEIGHT` where any line holds one. Scores are divided by
    the weights' sum, so a chunk first in both lists, its line holding every
    word, still scores 1.0.
    Equal scores keep the dense order, then the BM25 order.

    The dense list's first chunk ranks no lower than :data:`DENSE_FIRST_WITHIN`
    (at the score of the place it takes): BM25 over whole chunks prefers the
    meetings and entries that name a component most often, and pushed the one
    whose line the model found nearest ("what did we do once the outage
    started": the outage line, and the turn after it) below the first five.
    It takes the first place when the fused first is a chunk the dense list
    scores below :data:`DENSE_FIRST_OVER` of its best (its dense score counts
    the question's words in its line, :func:`memsearch_fast.store.spans.words.with_words`) and whose
    *words* share is below 1 (the lines that matched, with its heading, lack a
    word asked): BM25's pick alone, a meeting that names the service over and
    over, over the turn that answers. A question's every word (a key with the
    rest of what was asked, a phrase in a language the model cannot read) in
    the lines that matched keeps it first.
    That move passes one chunk at most, so hit@5 and hit@10 cannot change; on
    thirteen sets hit@1 and MRR@10 rose or stayed (docs/retrieval.md, "The
    dense list's first chunk over BM25's lone pick").
    The order does not depend on ``top_k``.
    """
    if dense and sparse:
        total = DENSE_WEIGHT + (1.0 - DENSE_WEIGHT) * bm25_trust
        weights = [DENSE_WEIGHT / total, (1.0 - DENSE_WEIGHT) * bm25_trust / total]
    else:
        weights = [1.0, 1.0]
    # None of the lines holds a word asked: the term would move no chunk, only lower every score.
    words = words if words and any(v > 0 for v in words.values()) else None
    lexical = WORDS_WEIGHT / (1.0 + WORDS_WEIGHT) if words else 0.0  # the lists share the rest
    weights = [w * (1.0 - lexical) for w in weights]
    out: dict[str, Fused] = {}
    for rank, ((cid, raw), value) in enumerate(zip(dense, _scaled([s for _, s in dense]), strict=True), start=1):
        if cid not in out:
            out[cid] = Fused(cid, weights[0] * value, rank, raw, None, None)
    for rank, ((cid, raw), value) in enumerate(zip(sparse, _scaled([s for _, s in sparse]), strict=True), start=1):
        hit = out.get(cid)
        if hit is None:
            out[cid] = Fused(cid, weights[1] * value, None, None, rank, raw)
        elif hit.sparse_rank is None:
            hit.score += weights[1] * value
            hit.sparse_rank, hit.sparse_score = rank, raw
    if words:
        for f in out.values():
            f.score += lexical * words.get(f.id, 0.0)
    # Insertion order is dense rank, then BM25 rank: a stable sort keeps it for ties.
    ranked = sorted(out.values(), key=lambda h: -h.score)
    if dense and sparse and ranked:
        (top, best), first = dense[0], ranked[0]
        far = max(0.0, first.dense_score or 0.0) < DENSE_FIRST_OVER * best
        alone = first.id != top and best > 0 and far and (words or {}).get(first.id, 0.0) < 1.0
        _keep_within(ranked, top, 1 if alone else DENSE_FIRST_WITHIN)
    return ranked[:top_k]


def fill_matters(
    dense: Sequence[tuple[str, float]],
    sparse: Sequence[tuple[str, float]],
    top_k: int,
    *,
    deep: int,
    bm25_trust: float = 1.0,
    words: dict[str, float] | None = None,
) -> bool:
    """Whether the BM25 scores of the dense hits missing from the BM25 list
    (:meth:`.search.StoreSearch.fill_sparse`, one more engine call) could change
    what :func:`fuse` gives for ``top_k``.

    A missing hit scores at most the list's last score (the list is the best
    *deep*; a shorter one holds every chunk with a score), and only its own
    fused score depends on it. So when even at that bound none of them reaches
    the first ``top_k`` (or the place the dense first chunk is kept within),
    the answer is the same without asking.
    """
    have = {cid for cid, _ in sparse}
    lacking = {cid for cid, _ in dense if cid not in have}
    if not lacking or not sparse:
        return False
    if len(sparse) < deep:
        return False
    if dense[0][0] in lacking:  # its kept place and score depend on its own
        return True
    floor = min(score for _, score in sparse)
    bound = fuse(
        dense,
        [*sparse, *((cid, floor) for cid, _ in dense if cid in lacking)],
        len(dense) + len(sparse),
        bm25_trust=bm25_trust,
        words=words,
    )
    # One place past the kept one: the chunk the dense first chunk moved above lends it its
    # score. The first place is in the slice too, so the fused first (whether the dense first
    # goes above it) is the same with or without the fill when this says no.
    return any(f.id in lacking for f in bound[: max(top_k, DENSE_FIRST_WITHIN + 1)])


def _keep_within(ranked: list[Fused], cid: str, place: int) -> None:
    """Move *cid* up to *place* (1-based) in *ranked* when it is lower, at that place's score."""
    at = next((i for i, h in enumerate(ranked) if h.id == cid), None)
    if at is None or at < place:
        return
    hit = ranked.pop(at)
    hit.score, hit.kept_at = ranked[place - 1].score, place
    ranked.insert(place - 1, hit)


def hit(f: Fused, row: dict[str, Any], fields: Sequence[str], explain: bool) -> dict[str, Any]:
    """A search result: the row's display ``fields``, the fused ``score`` and,
    with *explain*, ``explain`` (each list's rank and raw score, the fused score,
    and ``kept_at`` where the dense list's first was moved up to that place)."""
    out = {k: row.get(k) for k in fields}
    out["score"] = min(1.0, max(0.0, f.score))
    if explain:
        why: dict[str, Any] = {
            "dense_rank": f.dense_rank,
            "dense_score": None if f.dense_score is None else round(f.dense_score, 6),
            "sparse_rank": f.sparse_rank,
            "sparse_score": None if f.sparse_score is None else round(f.sparse_score, 6),
            "fused": round(f.score, 6),
        }
        if f.kept_at is not None:
            why["kept_at"] = f.kept_at
        out["explain"] = why
    return out
