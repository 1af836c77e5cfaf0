"""The vectors of the in-memory copy (:mod:`memsearch_fast.store.copy.dense_index`) as int8 codes, grouped by chunk.

A long-lived process that searches often keeps every chunk vector and every
span vector (:mod:`memsearch_fast.store.spans`) of a collection as int8 codes with a scale per
row, each chunk's own vector first in its group (held apart in a basis,
below): a quarter of float32, and
:func:`memsearch_fast._core.best_groups` ranks every chunk by its best vector
in one pass on every core, where numpy has no fast int8 product and Milvus
Lite scans the span collection for every search (98 ms at 5 MB). A cosine
here is within about 0.002 of Milvus's float32 one.

That pass first reads each row's sign bits (an eighth of the codes) and
scores with the codes only the :func:`shortlist` chunks nearest by them: at
50 MB of journals (620,000 rows) the kernel takes 6 ms instead of 18, and the
ten best chunks of the 40 questions of the agent set were all in the
shortlist (docs/retrieval.md, "Warm search at 50 MB").

A span collection stored in a basis (:mod:`memsearch_fast.store.spans.basis`) is held in it too:
its span rows are codes of the basis's width (128 of 384: a third of the
bytes the kernel reads), scored against the question projected onto the
basis, which gives the lifted vector's cosine. Each chunk's own vector is
then held apart at the model's width (:class:`OwnRows`), as Milvus scores it
from the main collection, and a second pass of the kernel ranks those. The
codes are taken in the basis turned by an orthonormal DCT (:func:`held_directions`):
a basis's first direction carries most of every vector (0.45 of a unit
vector's largest component on average, against 0.16 lifted), which would make
the int8 step coarse for the rest; turned, it is 0.24 and a code's score is
within 0.0006 of the float cosine on average (0.0010 unturned, 0.0004 lifted
at 384; 20,000 span rows of the 5 MB agent set, 40 questions).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from memsearch_fast._core import best_groups, best_in_groups

#: Chunks scored with the codes after the sign-bit pass (recall@10 1.000 and
#: @60 0.998 against scoring all, at 50 MB of agent journals).
SHORTLIST = 4000
ENV_SHORTLIST = "MEMSEARCH_SPAN_SHORTLIST"


@dataclass(slots=True)
class OwnRows:
    """Each chunk's own vector as an int8 row (a group of one, at its chunk's
    position), held apart from span rows stored in a basis."""

    codes: bytes  # chunks × the model's dimension, int8
    scales: bytes
    signs: bytes
    dim: int
    offsets: bytes = field(init=False)  # 0, 1, … chunks (u32): a group of one row each

    def __post_init__(self) -> None:
        self.offsets = np.arange(len(self.scales) // 4 + 1, dtype="<u4").tobytes()

    @classmethod
    def of(cls, matrix: np.ndarray) -> OwnRows:
        codes, scales = quantised(matrix, matrix.shape[1])
        return cls(codes.tobytes(), scales.astype("<f4").tobytes(), sign_bits(codes), int(matrix.shape[1]))

    def top(self, query: list[float], k: int) -> dict[int, float]:
        top = best_groups(self.codes, self.dim, self.scales, self.offsets, query, k, self.signs, shortlist(k))
        return {g: score for g, _, score in top}

    def scores(self, query: list[float], groups: list[int]) -> dict[int, float]:
        best = best_in_groups(self.codes, self.dim, self.scales, self.offsets, query, groups)
        return {g: score for g, _, score in best}


@dataclass(slots=True)
class Spans:
    """The vectors of a copy's chunks as int8 codes with a scale per row, grouped by
    chunk position: the chunk's own (index 0) first, then its spans (:mod:`memsearch_fast.store.spans`);
    with *own*, the span rows alone, in the basis of *directions*."""

    codes: bytes  # rows × width int8
    scales: bytes  # a little-endian float32 per row
    offsets: bytes  # chunk position g holds rows offsets[g]..offsets[g + 1] (u32)
    signs: bytes  # each row's sign bits (code > 0), an eighth of the codes: the shortlist's pass
    chunk: np.ndarray  # the chunk position of each row
    starts: np.ndarray
    ends: np.ndarray
    index: np.ndarray  # the span's index in its chunk
    width: int  # a row's dimensions: the model's, or the basis's when the own vectors are apart
    basis: str = ""  # the digest of the basis the span vectors are stored in ("" none)
    own: OwnRows | None = None  # the chunks' own vectors, when the span rows are in a basis
    directions: np.ndarray | None = None  # that basis (width × the model's dimension, float64)
    filed: bool = False  # read from a span file, which holds them as they are: a saved copy leaves them out

    def _hit(self, ids: list[str], sources: list[str], g: int, r: int, score: float) -> dict[str, Any]:
        """The row Milvus's span search would give for row *r* of chunk *g* (-1: its own vector)."""
        cid = ids[g]
        own = r < 0
        return {
            "span_id": f"{cid}:{0 if own else int(self.index[r])}",
            "chunk_hash": cid,
            "source": sources[g],
            "start_line": 0 if own else int(self.starts[r]),
            "end_line": 0 if own else int(self.ends[r]),
            "distance": score,
        }

    def _projected(self, vector: list[float]) -> list[float]:
        """The question in the span rows' basis, not made unit again: a code's score is
        then the lifted vector's cosine with the question."""
        if self.directions is None:
            raise RuntimeError("span rows in a basis held without its directions")
        out: list[float] = (np.asarray(vector, dtype=np.float64) @ self.directions.T).astype(np.float32).tolist()
        return out

    def search(
        self, ids: list[str], sources: list[str], vector: list[float], k: int, among: list[int] | None = None
    ) -> list[dict[str, Any]]:
        """The *k* chunks (of a copy of chunks *ids* from *sources*) whose best vector
        is nearest to *vector*, each with that row (index 0: the chunk's own); of the
        chunks at positions *among* alone when given (a search filtered by source),
        scored by the same codes: the unfiltered answer's chunks of those sources."""
        if among is not None:
            best = sorted(self._best(vector, among), key=lambda t: (-t[2], t[0]))[:k]
            return [self._hit(ids, sources, g, r, score) for g, r, score in best]
        if self.own is None:
            top = best_groups(self.codes, self.width, self.scales, self.offsets, vector, k, self.signs, shortlist(k))
            return [self._hit(ids, sources, g, r, score) for g, r, score in top]
        # The k best by their best vector are among the k best by their own and the k best
        # by their best span: each of those is scored on the other side too.
        q, w = self._projected(vector), self.width
        top = best_groups(self.codes, w, self.scales, self.offsets, q, k, self.signs, shortlist(k))
        spans = {g: (r, score) for g, r, score in top}
        own = self.own.top(vector, k)
        own.update(self.own.scores(vector, [g for g in spans if g not in own]))
        more = best_in_groups(self.codes, w, self.scales, self.offsets, q, [g for g in own if g not in spans])
        spans.update((g, (r, score)) for g, r, score in more)
        best = sorted(self._merged(own, spans), key=lambda t: (-t[2], t[0]))[:k]
        return [self._hit(ids, sources, g, r, score) for g, r, score in best]

    @staticmethod
    def _merged(own: dict[int, float], spans: dict[int, tuple[int, float]]) -> list[tuple[int, int, float]]:
        """Each chunk of *own* (every chunk asked has its own vector) at its best: that
        vector (row -1, which wins a tie) or its best span."""
        out = []
        for g, score in own.items():
            span = spans.get(g)
            out.append((g, -1, score) if span is None or score >= span[1] else (g, *span))
        return out

    def best_of(
        self, ids: list[str], sources: list[str], pos: Mapping[str, int], vector: list[float], wanted: list[str]
    ) -> dict[str, Any]:
        """The best vector (its own or a span's) of each *wanted* chunk; *pos*: positions of *ids*."""
        best = self._best(vector, [pos[cid] for cid in wanted if cid in pos])
        return {ids[g]: self._hit(ids, sources, g, r, score) for g, r, score in best}

    def _best(self, vector: list[float], groups: list[int]) -> list[tuple[int, int, float]]:
        """(position, row, score) of each chunk of *groups* at its best vector (row -1: its own)."""
        if self.own is None:
            return best_in_groups(self.codes, self.width, self.scales, self.offsets, vector, groups)
        found = best_in_groups(self.codes, self.width, self.scales, self.offsets, self._projected(vector), groups)
        return self._merged(self.own.scores(vector, groups), {g: (r, s) for g, r, s in found})


@dataclass(frozen=True, slots=True)
class CodePage:
    """What a span file gives a copy (:meth:`.spans.reads.SpanReads.code_pages`): the
    spans of *chunks* (*counts* each, in order) as arrays, one entry a span."""

    chunks: list[str]
    counts: np.ndarray
    starts: np.ndarray
    ends: np.ndarray
    index: np.ndarray
    codes: np.ndarray
    scales: np.ndarray


class SpanRows:
    """Span rows gathered page by page for a copy whose chunk positions are *pos*,
    stored in the basis *basis* names ("" for every dimension) and held in it
    (*directions*: that basis)."""

    def __init__(self, dim: int, pos: dict[str, int], basis: str = "", directions: np.ndarray | None = None) -> None:
        self.dim = dim
        self.pos = pos
        self.basis = basis
        self.directions = directions
        self.width = dim if directions is None else int(directions.shape[0])
        self.filed = False  # gathered from a span file (:meth:`add_codes`)
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
        vectors = np.asarray([r["embedding"] for r in rows], dtype=np.float64).reshape(n, -1)
        if self.directions is not None:  # as stored, in the basis: turned as the directions are
            vectors = vectors @ _dct(self.width).T
        codes, scales = quantised(vectors, self.width)
        self._append(
            chunk=np.fromiter((self.pos[r["chunk_hash"]] for r in rows), np.int64, n),
            starts=np.fromiter((int(r["start_line"]) for r in rows), np.int32, n),
            ends=np.fromiter((int(r["end_line"]) for r in rows), np.int32, n),
            index=np.fromiter((int(str(r["span_id"]).rpartition(":")[2]) for r in rows), np.int32, n),
            codes=codes,
            scales=scales,
        )

    def add_codes(self, page: CodePage) -> None:
        """Spans already held as codes along this copy's directions (a span file's:
        :meth:`memsearch_fast.store.spans.reads.SpanReads.code_pages`), taken as they are."""
        at = np.fromiter((self.pos.get(cid, -1) for cid in page.chunks), np.int64, len(page.chunks))
        chunk = np.repeat(at, page.counts)
        mask = chunk >= 0  # a span whose chunk is gone: left out
        if not mask.any():
            return
        self._append(
            chunk=chunk[mask],
            starts=page.starts[mask].astype(np.int32),
            ends=page.ends[mask].astype(np.int32),
            index=page.index[mask].astype(np.int32),
            codes=np.ascontiguousarray(page.codes[mask], dtype=np.int8),
            scales=page.scales[mask].astype(np.float32),
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
            codes=np.frombuffer(old.codes, np.int8).reshape(-1, self.width)[mask],
            scales=np.frombuffer(old.scales, "<f4")[mask],
        )

    def build(self, matrix: np.ndarray) -> Spans:
        """The rows grouped by chunk position, each chunk's own vector (a row of
        *matrix*, index 0) first in its group: one pass ranks every chunk by its
        best vector, its own or a span's, as :func:`memsearch_fast.store.spans.merge.merge_dense` does.
        Span rows in a basis are grouped alone, the own vectors held apart."""
        chunks = matrix.shape[0]
        apart = self.directions is not None
        if apart:
            none = np.zeros(0, np.int32)
            own = {"chunk": np.zeros(0, np.int64), "starts": none, "ends": none, "index": none}
            own.update(codes=np.zeros((0, self.width), np.int8), scales=np.zeros(0, np.float32))
        else:
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
            width=self.width,
            basis=self.basis,
            own=OwnRows.of(matrix) if apart else None,
            directions=self.directions,
            filed=self.filed,
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
    basis = spans_store.basis
    directions = held_directions(basis.rows) if basis is not None else None
    out = SpanRows(dim, {cid: i for i, cid in enumerate(ids)}, spans_store.basis_digest, directions)
    if old is not None and (old.basis != out.basis or old.width != out.width):
        old, sources, unchanged = None, None, False  # the collection made anew since: every span read again
    if old is not None and old_ids is not None and kept is not None:
        out.keep(old, old_ids, kept)
    elif old_ids is not None:
        sources = None  # the old copy had no spans: read them all
    if unchanged:
        return out
    if hasattr(spans_store, "code_pages"):  # held as the copy holds them
        out.filed = True
        for code_page in spans_store.code_pages(sources):
            if stop():
                break
            out.add_codes(code_page)
        return out
    for page in spans_store.iter_vectors(sources, lifted=directions is None):
        if stop():
            break
        out.add(page)
    return out


def held_directions(basis: np.ndarray) -> np.ndarray:
    """The directions a copy holds span codes in: *basis* (k × the model's
    dimension) turned by the orthonormal DCT of size k, the same span of the
    model's space, with each vector's energy spread across its k components."""
    out: np.ndarray = _dct(basis.shape[0]) @ basis
    return out


@functools.lru_cache(maxsize=4)
def _dct(k: int) -> np.ndarray:
    """The orthonormal DCT-II matrix of size *k* (closed form: every process turns alike)."""
    n = np.arange(k)
    out: np.ndarray = np.sqrt(2.0 / k) * np.cos(np.pi * (n[None, :] + 0.5) * n[:, None] / k)
    out[0] /= np.sqrt(2.0)
    return out


def shortlist(k: int) -> int:
    """How many chunks, nearest by sign bits, are scored with the codes for the *k*
    best: :data:`SHORTLIST` (or ``MEMSEARCH_SPAN_SHORTLIST``; 0 scores them all)."""
    from memsearch_fast.config import environment

    n = environment.integer(ENV_SHORTLIST, SHORTLIST)
    return max(k, n) if n else 0


def sign_bits(codes: np.ndarray) -> bytes:
    """Each row's sign bits (code > 0), eight to a byte, the first component in the low bit;
    a block of rows at a time (the comparison's booleans are as large as the codes:
    460 MB for 1.2 M chunks)."""
    step = 1 << 16
    return b"".join(
        np.packbits(codes[i : i + step] > 0, axis=1, bitorder="little").tobytes()
        for i in range(0, max(len(codes), 1), step)
    )


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
