"""The rows of the in-memory copy (:mod:`memsearch_fast.store.copy.dense_index`): chunk ids, display fields
and unit vectors, gathered page by page, kept or replaced file by file."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from memsearch_fast.store.copy.spans import Spans, normalised

if TYPE_CHECKING:
    from memsearch_fast.store.spans.collection import SpanStore
    from memsearch_fast.store.spans.file import SpanFile
from memsearch_fast.store.schema import QUERY_FIELDS

#: What the copy reads of each row.
FIELDS = list(dict.fromkeys([*QUERY_FIELDS, "embedding"]))
#: The display fields kept beside the ids and sources.
KEPT = [f for f in QUERY_FIELDS if f not in ("chunk_hash", "source")]


@dataclass(slots=True)
class Copy:
    ids: list[str]
    sources: list[str]
    fields: dict[str, list[Any]]  # the other display fields, by row (a pk lookup in Lite is a 10 ms scan)
    matrix: np.ndarray  # rows normalised: a dot product is the cosine Milvus reports (float16: see hold)
    token: tuple[int, int, int] | None
    entries: dict[str, str] | None
    checked: float
    spans: Spans | None = None  # None: the collection has no span collection (Milvus searches it)

    def hold(self, spans: Spans | None) -> Copy:
        """This copy with *spans*: their int8 codes (and each chunk's own vector's)
        rank every chunk, so the matrix is read only for a few rows (under a
        path prefix, BM25 hits) and is kept as float16, 46 MB instead of 92 at 50
        MB of journals (a cosine moves by less than 0.001)."""
        self.spans = spans
        if spans is not None:
            self.matrix = self.matrix.astype(np.float16)
        return self

    def positions(self) -> dict[str, int]:
        return {cid: i for i, cid in enumerate(self.ids)}

    def own_scores(self, pos: Mapping[str, int], vector: Any, ids: list[str]) -> list[tuple[str, float]]:
        """The cosine of each chunk of *ids* (at *pos*) with *vector*, as Milvus's own-vector list gives it."""
        q = unit(vector)
        return [(cid, float(self.matrix[pos[cid]] @ q)) for cid in ids]

    def best_spans(
        self, stored: SpanStore | SpanFile, pos: Mapping[str, int], vector: list[float], ids: list[str]
    ) -> list[dict[str, Any]]:
        """The best span of each chunk of *ids* that has spans: from the held codes, or
        from the store's spans (*stored*) when the copy holds none."""
        if self.spans is not None:
            return list(self.spans.best_of(self.ids, self.sources, pos, vector, ids).values())
        return list(stored.best_of(vector, ids).values())

    def rows_at(self, pos: Mapping[str, int], ids: list[str]) -> dict[str, dict[str, Any]]:
        """The display fields of the chunks of *ids* the copy holds."""
        return {cid: self.row(pos[cid]) for cid in ids if cid in pos}

    def dense(self, vector: Any, top_k: int, among: list[int] | None) -> list[tuple[str, float]]:
        """The dense list: (id, cosine) best first, as Milvus's COSINE search gives it;
        of the chunks at positions *among* alone when given."""
        q = unit(vector)
        rows = np.asarray(among, dtype=np.int64) if among is not None else None
        scores = self.matrix[rows] @ q if rows is not None else self.matrix @ q
        k = min(top_k, scores.shape[0])
        if k <= 0:
            return []
        top = np.argpartition(-scores, k - 1)[:k] if k < scores.shape[0] else np.arange(scores.shape[0])
        top = top[np.lexsort((top, -scores[top]))]  # by score, then by position (a stable order for ties)
        ids = rows[top] if rows is not None else top
        return [(self.ids[i], float(scores[j])) for i, j in zip(ids, top, strict=True)]

    def row(self, i: int) -> dict[str, Any]:
        """The display fields of row ``i``, in the order :meth:`MilvusStore.search` gives them."""
        own = {"chunk_hash": self.ids[i], "source": self.sources[i]}
        return {f: own[f] if f in own else self.fields[f][i] for f in QUERY_FIELDS}


class Rows:
    """Columns gathered page by page."""

    def __init__(self, dim: int) -> None:
        self.dim = dim
        self.ids: list[str] = []
        self.sources: list[str] = []
        self.fields: dict[str, list[Any]] = {f: [] for f in KEPT}
        self.parts: list[np.ndarray] = []

    def add(self, page: list[dict[str, Any]]) -> None:
        self.ids.extend(r["chunk_hash"] for r in page)
        self.sources.extend(r["source"] for r in page)
        for f, col in self.fields.items():
            col.extend(r.get(f) for r in page)
        self.parts.append(normalised([r["embedding"] for r in page], self.dim))

    @classmethod
    def kept(cls, rows: Copy | Rows, matrix: np.ndarray, keep: list[int], dim: int) -> Rows:
        """The rows at positions ``keep`` of ``rows`` (whose vectors are ``matrix``)."""
        out = cls(dim)
        out.ids = [rows.ids[i] for i in keep]
        out.sources = [rows.sources[i] for i in keep]
        out.fields = {f: [col[i] for i in keep] for f, col in rows.fields.items()}
        out.parts = [matrix[np.asarray(keep, dtype=np.int64)]]
        return out

    def dedupe(self) -> Rows:
        """These rows, keeping the first of an id read twice (a row written while the pages were read)."""
        if len(set(self.ids)) == len(self.ids):
            return self
        first: dict[str, int] = {}
        for i, cid in enumerate(self.ids):
            first.setdefault(cid, i)
        return Rows.kept(self, np.concatenate(self.parts), sorted(first.values()), self.dim)

    def copy(self, token: tuple[int, int, int] | None, entries: dict[str, str] | None) -> Copy:
        matrix = np.concatenate(self.parts) if self.parts else np.zeros((0, self.dim), np.float32)
        return Copy(self.ids, self.sources, self.fields, matrix, token, entries, time.monotonic())


def unit(vector: Any) -> np.ndarray:
    q = np.asarray(vector, dtype=np.float32).reshape(-1)
    norm = float(np.linalg.norm(q))
    return q / norm if norm else q


def under(by_source: dict[str, np.ndarray], prefix: str) -> list[int]:
    """The positions of the chunks whose source starts with *prefix* (a filtered search
    ranks these alone, with the codes the unfiltered one uses)."""
    picked = [ix for s, ix in by_source.items() if s.startswith(prefix)]
    return np.concatenate(picked).tolist() if picked else []
