"""Span vectors stored in fewer dimensions: the directions of most energy of the
collection's own spans.

A span row of journals costs 1,369 bytes in Milvus Lite at 384 float16
dimensions (three to a 4 KiB page) and 684 at 128 (six to a page): the
database goes from 4.0x its size without spans to 2.5x at 5 MB of journals,
and the fused hit@k of thirteen sets holds (docs/retrieval.md, "Fewer
dimensions a span row"). The directions are fitted once, on the vectors of
the collection's first write (an uncentred PCA), and kept in the collection's
description, made in the same call as the collection: a collection is never
without its basis. Directions fitted on another corpus lose hit@5, so a
collection whose first write is too small to fit on keeps every dimension
until it holds :data:`FIT_ROWS` rows, when the next run that writes stores
them again in fewer (:meth:`memsearch_fast.store.spans.SpanStore.refit`).

A span's score is its vector lifted back into the model's space (``lift``):
its cosine with the whole question, the same from Milvus (a cosine in the
basis times :meth:`Basis.kept`) and from the in-memory copy (codes in the
basis scored against the question projected onto it). A stored vector
lifted and projected again is the one stored, so a moved chunk's spans keep
their rows exactly.
"""

from __future__ import annotations

import base64
import functools
import hashlib
from dataclasses import dataclass, field
from typing import Any

import numpy as np

#: Dimensions a span vector keeps (``MEMSEARCH_SPAN_DIMS``; 0 keeps every one).
DIMS = 128
ENV_DIMS = "MEMSEARCH_SPAN_DIMS"
#: Span vectors a first write needs for its directions to be fitted (2,000 first
#: rows held the hit@k of all rows at 5 MB of journals).
FIT_ROWS = 2048
#: Span vectors the directions are fitted on, at most (a first write of long
#: documents can hold tens of thousands).
SAMPLE = 20_000
#: Rows of a collection of every dimension stored again in fewer once it holds
#: :data:`FIT_ROWS`, at most (read whole into memory: 77 MB of vectors).
REFIT_MAX = 50_000
_MARK = "\nbasis:"
#: The description of a collection whose server refused the basis (no base64 to read).
REFUSED = _MARK + " refused by the server"


@dataclass(frozen=True, slots=True)
class Basis:
    """*rows*: k orthonormal directions (k × the model's dimension, float64: see
    :meth:`project`), decoded from *payload* (what a description holds), so every
    reader has the same ones."""

    rows: np.ndarray
    payload: str = field(repr=False)

    @property
    def dims(self) -> int:
        return int(self.rows.shape[0])

    @property
    def full(self) -> int:
        return int(self.rows.shape[1])

    def project(self, vectors: Any) -> np.ndarray:
        """Vectors of the model's dimension in the basis (others are returned as they
        are). In float64: a float32 product's last bit depends on how many rows a
        write holds, and would round a stored float16 either way."""
        m = np.asarray(vectors, dtype=np.float64)
        return (m @ self.rows.T if m.shape[-1] == self.full else m).astype(np.float32)

    def lift(self, vectors: Any) -> np.ndarray:
        """Stored vectors back in the model's space."""
        out: np.ndarray = np.asarray(vectors, dtype=np.float64) @ self.rows
        return out.astype(np.float32)

    def kept(self, vector: Any) -> float:
        """The share of *vector*'s length the basis keeps: a Milvus cosine in the basis
        times this is the lifted vector's cosine with *vector*."""
        v = np.asarray(vector, dtype=np.float64).reshape(-1)
        whole = float(np.linalg.norm(v))
        return float(np.linalg.norm(self.rows @ v)) / whole if whole else 1.0

    @property
    def digest(self) -> str:
        """A short name of the basis: the in-memory copy and its saved file say which
        basis their span vectors are stored in."""
        return hashlib.sha256(self.payload.encode("ascii")).hexdigest()[:16]

    def describe(self, text: str) -> str:
        """*text* with the basis after it: a collection's description."""
        return text + _MARK + self.payload


def fit(vectors: Any, dims: int | None = None) -> Basis | None:
    """The *dims* directions of most energy of *vectors* (None when they are too few
    to fit on, or no more dimensions than that)."""
    if dims is None:
        from memsearch_fast.config import environment

        dims = environment.integer(ENV_DIMS, DIMS)
    k = dims
    if k <= 0:
        return None
    m = np.asarray(vectors, dtype=np.float32)
    if m.ndim != 2 or len(m) < max(FIT_ROWS, k) or m.shape[1] <= k:
        return None
    m = m[:SAMPLE]
    values, directions = np.linalg.eigh((m.T @ m).astype(np.float64) / len(m))
    top = directions[:, np.argsort(values)[::-1][:k]].T
    head = np.asarray(top.shape, dtype="<u4").tobytes()
    # What every reader decodes: stored as float16, made orthonormal again the same way.
    return _decode(base64.b64encode(head + top.astype("<f2").tobytes()).decode("ascii"))


def read(description: str | None) -> Basis | None:
    """The basis a description holds (None: the collection keeps every dimension)."""
    if not description or _MARK not in description:
        return None
    return _decode(description.rpartition(_MARK)[2])


@functools.lru_cache(maxsize=8)
def _decode(text: str) -> Basis | None:
    try:
        raw = base64.b64decode(text.encode("ascii"), validate=True)
        dims, full = (int(x) for x in np.frombuffer(raw[:8], dtype="<u4"))
        rows = np.frombuffer(raw[8:], dtype="<f2").astype(np.float64).reshape(dims, full)
    except (ValueError, TypeError):
        return None
    q, r = np.linalg.qr(rows.T)
    q = q * np.where(np.diag(r) < 0, -1.0, 1.0)  # each direction keeps its sign
    return Basis(np.ascontiguousarray(q.T, dtype=np.float64), text)
