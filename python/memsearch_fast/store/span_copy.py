"""The vectors of the in-memory copy (:mod:`.dense_index`) as int8 codes, grouped by chunk.

A long-lived process that searches often keeps every chunk vector and every
span vector (:mod:`.spans`) of a collection as int8 codes with a scale per
row, each chunk's own vector first in its group: a quarter of float32, and
:func:`memsearch_fast._core.best_groups` ranks every chunk by its best vector
in one pass on every core, where numpy has no fast int8 product and Milvus
Lite scans the span collection for every search (98 ms at 5 MB). A cosine
here is within about 0.002 of Milvus's float32 one.

That pass first reads each row's sign bits (an eighth of the codes) and
scores with the codes only the :func:`shortlist` chunks nearest by them: at
50 MB of journals (620,000 rows) the kernel takes 6 ms instead of 18, and the
ten best chunks of the 40 questions of the agent set were all in the
shortlist (docs/retrieval.md, "Warm search at 50 MB").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from memsearch_fast._core import best_groups, best_in_groups

#: Chunks scored with the codes after the sign-bit pass (recall@10 1.000 and
#: @60 0.998 against scoring all, at 50 MB of agent journals).
SHORTLIST = 4000
ENV_SHORTLIST = "MEMSEARCH_SPAN_SHORTLIST"


@dataclass(slots=True)
class Spans:
    """The vectors of a copy's chunks as int8 codes with a scale per row, grouped by
    chunk position: the chunk's own (index 0) first, then its spans (:mod:`.spans`)."""

    codes: bytes  # rows × dim int8
    scales: bytes  # a little-endian float32 per row
    offsets: bytes  # chunk position g holds rows offsets[g]..offsets[g + 1] (u32)
    signs: bytes  # each row's sign bits (code > 0), an eighth of the codes: the shortlist's pass
    chunk: np.ndarray  # the chunk position of each row
    starts: np.ndarray
    ends: np.ndarray
    index: np.ndarray  # the span's index in its chunk
    basis: str = ""  # the digest of the basis the span vectors were lifted from ("" none)

    def _hit(self, ids: list[str], sources: list[str], g: int, r: int, score: float) -> dict[str, Any]:
        """The row Milvus's span search would give for row *r* of chunk *g*."""
        cid = ids[g]
        return {
            "span_id": f"{cid}:{int(self.index[r])}",
            "chunk_hash": cid,
            "source": sources[g],
            "start_line": int(self.starts[r]),
            "end_line": int(self.ends[r]),
            "distance": score,
        }

    def search(self, ids: list[str], sources: list[str], vector: list[float], k: int) -> list[dict[str, Any]]:
        """The *k* chunks (of a copy of chunks *ids* from *sources*) whose best vector
        is nearest to *vector*, each with that row (index 0: the chunk's own)."""
        top = best_groups(self.codes, len(vector), self.scales, self.offsets, vector, k, self.signs, shortlist(k))
        return [self._hit(ids, sources, g, r, score) for g, r, score in top]

    def best_of(
        self, ids: list[str], sources: list[str], pos: dict[str, int], vector: list[float], wanted: list[str]
    ) -> dict[str, Any]:
        """The best vector (its own or a span's) of each *wanted* chunk; *pos*: positions of *ids*."""
        groups = [pos[cid] for cid in wanted if cid in pos]
        best = best_in_groups(self.codes, len(vector), self.scales, self.offsets, vector, groups)
        return {ids[g]: self._hit(ids, sources, g, r, score) for g, r, score in best}


class SpanRows:
    """Span rows gathered page by page for a copy whose chunk positions are *pos*,
    lifted from the basis *basis* names ("" for every dimension)."""

    def __init__(self, dim: int, pos: dict[str, int], basis: str = "") -> None:
        self.dim = dim
        self.pos = pos
        self.basis = basis
        self.cols: dict[str, list[np.ndarray]] = {
            k: [] for k in ("chunk", "starts", "ends", "index", "codes", "scales")
        }

    def _append(self, **cols: np.ndarray) -> None:
        for k, v in cols.items():
            self.cols[k].append(v)

    def add(self, page: list[dict[str, Any]]) -> None:
        rows = [r for r in page if r["chunk_hash"] in self.pos]  # a span whose chunk is gone: left out
        if not rows:
            return
        n = len(rows)
        codes, scales = quantised([r["embedding"] for r in rows], self.dim)
        self._append(
            chunk=np.fromiter((self.pos[r["chunk_hash"]] for r in rows), np.int64, n),
            starts=np.fromiter((int(r["start_line"]) for r in rows), np.int32, n),
            ends=np.fromiter((int(r["end_line"]) for r in rows), np.int32, n),
            index=np.fromiter((int(str(r["span_id"]).rpartition(":")[2]) for r in rows), np.int32, n),
            codes=codes,
            scales=scales,
        )

    def keep(self, old: Spans, old_ids: list[str], kept: list[int]) -> None:
        """The rows of *old* (a copy of chunks *old_ids*) whose chunk position is in *kept*."""
        to_new = np.full(len(old_ids), -1, np.int64)
        for i in kept:
            to_new[i] = self.pos.get(old_ids[i], -1)
        new = to_new[old.chunk] if len(old.chunk) else np.zeros(0, np.int64)
        mask = (new >= 0) & (old.index != 0)  # the chunks' own rows are made again by build
        if not mask.any():
            return
        self._append(
            chunk=new[mask],
            starts=old.starts[mask],
            ends=old.ends[mask],
            index=old.index[mask],
            codes=np.frombuffer(old.codes, np.int8).reshape(-1, self.dim)[mask],
            scales=np.frombuffer(old.scales, "<f4")[mask],
        )

    def build(self, matrix: np.ndarray) -> Spans:
        """The rows grouped by chunk position, each chunk's own vector (a row of
        *matrix*, index 0) first in its group: one pass ranks every chunk by its
        best vector, its own or a span's, as :func:`.spans.merge_dense` does."""
        chunks = matrix.shape[0]
        own_codes, own_scales = quantised(matrix, self.dim)
        zeros = np.zeros(chunks, np.int32)
        own = {"chunk": np.arange(chunks, dtype=np.int64), "starts": zeros, "ends": zeros, "index": zeros}
        own.update(codes=own_codes, scales=own_scales)

        def col(k: str) -> np.ndarray:  # own rows first: the sort below is stable, so they win ties
            return np.concatenate([own[k], *self.cols.pop(k)])

        chunk = col("chunk")
        order = np.argsort(chunk, kind="stable")
        counts = np.bincount(chunk, minlength=chunks)
        offsets = np.concatenate([[0], np.cumsum(counts)]).astype("<u4")
        codes = col("codes")[order]
        return Spans(
            codes=codes.tobytes(),
            signs=sign_bits(codes),
            scales=col("scales")[order].astype("<f4").tobytes(),
            offsets=offsets.tobytes(),
            chunk=chunk[order],
            starts=col("starts")[order],
            ends=col("ends")[order],
            index=col("index")[order],
            basis=self.basis,
        )


def read_spans(
    store: Any,
    dim: int,
    ids: list[str],
    sources: list[str] | None,
    old_ids: list[str] | None = None,
    old: Spans | None = None,
    kept: list[int] | None = None,
    *,
    stop: Callable[[], bool],
) -> SpanRows | None:
    """The span rows of a copy of chunks *ids*: those of *sources* (all when None)
    read from *store*, the rest kept from *old* (a copy of *old_ids*, its chunks at
    positions *kept* kept); None when the collection has no spans. Reading ends
    early once *stop* says so."""
    spans_store = getattr(store, "spans", None)
    unchanged = sources == [] and old is not None  # no file changed: Lite need not load the spans
    if spans_store is None or not (spans_store.present() if unchanged else spans_store.exists):
        return None
    out = SpanRows(dim, {cid: i for i, cid in enumerate(ids)}, spans_store.basis_digest)
    if old is not None and old_ids is not None and kept is not None:
        out.keep(old, old_ids, kept)
    elif old_ids is not None:
        sources = None  # the old copy had no spans: read them all
    for page in spans_store.iter_vectors(sources) if not unchanged else ():
        if stop():
            break
        out.add(page)
    return out


def shortlist(k: int) -> int:
    """How many chunks, nearest by sign bits, are scored with the codes for the *k*
    best: :data:`SHORTLIST` (or ``MEMSEARCH_SPAN_SHORTLIST``; 0 scores them all)."""
    import os

    raw = os.environ.get(ENV_SHORTLIST, "").strip()
    n = int(raw) if raw.isdigit() else SHORTLIST
    return max(k, n) if n else 0


def sign_bits(codes: np.ndarray) -> bytes:
    """Each row's sign bits (code > 0), eight to a byte, the first component in the low bit."""
    return np.packbits(codes > 0, axis=1, bitorder="little").tobytes()


def quantised(vectors: Any, dim: int) -> tuple[np.ndarray, np.ndarray]:
    """Unit vectors as int8 codes and a scale each (the largest component is ±127)."""
    m = normalised(vectors, dim)
    scale = np.abs(m).max(axis=1) / 127.0
    scale[scale == 0] = 1.0
    codes = np.clip(np.rint(m / scale[:, None]), -127, 127).astype(np.int8)
    return codes, scale.astype(np.float32)


def normalised(vectors: list[Any], dim: int) -> np.ndarray:
    m = np.asarray(vectors, dtype=np.float32).reshape(-1, dim)
    norms = np.linalg.norm(m, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    out: np.ndarray = m / norms
    return out
