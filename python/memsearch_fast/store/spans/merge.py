"""A chunk at its best vector: the dense list merged with each chunk's best span,
the chunks BM25 alone found filled in at their real dense score, and the span
that matched named in ``--explain``."""

from __future__ import annotations

from typing import Any


def merge_dense(
    dense: list[tuple[str, float]], span_hits: list[dict[str, Any]], deep: int
) -> tuple[list[tuple[str, float]], dict[str, dict[str, Any]]]:
    """The dense list with each chunk at its best vector (its own or a span's), best
    first and *deep* long, and the span that gave a chunk its score (index ≥ 1)."""
    best: dict[str, float] = {}
    matched: dict[str, dict[str, Any]] = {}
    for cid, score in dense:
        best.setdefault(cid, score)
    for hit in span_hits:
        cid, score = str(hit["chunk_hash"]), float(hit["distance"])
        if score > best.get(cid, float("-inf")):
            best[cid] = score
            if not str(hit.get("span_id") or "").endswith(":0"):
                matched[cid] = hit
            else:
                matched.pop(cid, None)
    # Equal scores (one span in two chunks, through the overlap of their lines) are ordered
    # by chunk id: Milvus and the in-memory copy list them in orders of their own, and
    # the fusion weighs a chunk by its place in this list.
    ranked = sorted(best.items(), key=lambda kv: (-kv[1], kv[0]))[:deep]
    return ranked, {cid: matched[cid] for cid, _ in ranked if cid in matched}


def fill_dense(ranked: list[tuple[str, float]], scores: dict[str, float]) -> list[tuple[str, float]]:
    """*ranked* plus the chunks of *scores* it lacks, at their best cosine, best
    first: a chunk BM25 found but the dense list was too short to hold is fused
    with its real dense score, not with none (an exact key, a port or a date, has
    look-alikes whose sentences the dense side ranks above it)."""
    have = {cid for cid, _ in ranked}
    extra = [(cid, score) for cid, score in scores.items() if cid not in have]
    if not extra:
        return ranked
    return sorted([*ranked, *extra], key=lambda kv: (-kv[1], kv[0]))


def explain_span(out: dict[str, Any], hit: dict[str, Any] | None, words_share: float | None = None) -> dict[str, Any]:
    """*out* (a search result with ``explain``) with the lines of the span that matched
    and the share of the question's words found in them (:func:`memsearch_fast.store.spans.words.with_words`)."""
    if words_share is not None and "explain" in out:
        out["explain"]["words"] = round(words_share, 6)
    if hit is not None and "explain" in out:
        out["explain"]["span"] = {
            "start_line": int(hit["start_line"]),
            "end_line": int(hit["end_line"]),
            "score": round(float(hit["distance"]), 6),
        }
    return out
