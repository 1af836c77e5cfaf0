"""Past the copy's cap: each chunk's own vector alone, as int8 codes, and the
hits' fields read again from their files.

Past :func:`~.dense_index.max_rows` chunks the full copy would hold gigabytes
(display fields, a float16 matrix, every span's codes), and Milvus Lite
answers a search of 1 GB of journals (1.2 M chunks) in about half a second:
a scan of every chunk vector for the dense list (about 300 ms) and a scan by
primary key for the rows the lists lack (434 ms for 30; docs/scale.md). A
long-lived process keeps instead each chunk's own vector as int8 codes with
their sign bits (about 440 bytes a chunk: 530 MB at 1 GB), ranked by the
copy's kernel (:class:`.spans.OwnRows`); the spans of the chunks that list and
BM25 found are scored from the span file, one indexed read each, as a search
without a copy does (:meth:`~memsearch_fast.store.search.StoreSearch.search`);
and a hit's fields, where the BM25 list did not carry them, come from its
markdown file while the manifest shows it unchanged (:mod:`.file_rows`),
else from Milvus. The copy answers under the rules of the full one (the
manifest the same, no run writing); after a run, the files whose recorded
chunks changed are read again and the rest kept.
"""

from __future__ import annotations

import bisect
import itertools
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from memsearch_fast.config import environment
from memsearch_fast.store.copy.file_rows import Described, read_manifest, rows_from_files
from memsearch_fast.store.copy.spans import OwnRows, quantised, sign_bits
from memsearch_fast.store.schema import QUERY_FIELDS
from memsearch_fast.store.search import MAX_TOP_K, candidates, together

if TYPE_CHECKING:
    from memsearch_fast.store.milvus import MilvusStore

#: Past this many chunks no copy is kept (the codes' scan passes 60 ms near 5 M
#: chunks, docs/scale.md: a graph index is then worth its build).
DEFAULT_MAX_ROWS = 5_000_000
ENV_MAX_ROWS = "MEMSEARCH_LEAN_COPY_MAX_ROWS"
#: What the lean copy reads of each row.
FIELDS = ["chunk_hash", "source", "embedding"]


def max_rows() -> int:
    return environment.integer(ENV_MAX_ROWS, DEFAULT_MAX_ROWS)


@dataclass(slots=True)
class Lean:
    """The chunks *ids* (from *sources*) with their own vectors as codes, current
    while the manifest is *token*; *described*: that manifest."""

    ids: list[str]
    sources: list[str]
    own: OwnRows
    token: tuple[int, int, int] | None
    described: Described
    checked: float
    index: Mapping[str, int] | None = field(default=None, compare=False)

    @property
    def entries(self) -> dict[str, str]:
        return self.described.entries

    def positions(self) -> Mapping[str, int]:
        if self.index is None:
            self.index = {cid: i for i, cid in enumerate(self.ids)}  # 0.6 s at 1.2 M chunks
        return self.index


class Shifted(Mapping[str, int]):
    """A refreshed copy's positions without a dict of every chunk (0.6 s to make at
    1.2 M chunks, for the few lookups a search makes): the previous copy's
    positions past the rows it lost (*removed*, sorted), and the rows *added*."""

    #: Refreshes chained before the next one makes a dict again.
    DEPTH = 16

    def __init__(self, base: Mapping[str, int], removed: list[int], added: dict[str, int], ids: list[str]) -> None:
        self.base, self.removed, self.added, self.ids = base, removed, added, ids
        self.depth: int = base.depth + 1 if isinstance(base, Shifted) else 1

    def get(self, cid: str, default: Any = None) -> Any:
        at = self.added.get(cid)
        if at is not None:
            return at
        was = self.base.get(cid)
        if was is None:
            return default
        j = bisect.bisect_left(self.removed, was)
        if j < len(self.removed) and self.removed[j] == was:
            return default
        return was - j

    def __getitem__(self, cid: str) -> int:
        at: int | None = self.get(cid)
        if at is None:
            raise KeyError(cid)
        return at

    def __contains__(self, cid: object) -> bool:
        return isinstance(cid, str) and self.get(cid) is not None

    def __iter__(self) -> Iterator[str]:
        return iter(self.ids)

    def __len__(self) -> int:
        return len(self.ids)


class LeanRows:
    """Ids, sources and codes gathered page by page, each column a list of pieces
    joined into its bytes once: a copy of 460 MB at 1.2 M chunks costs a quarter
    second here, so a refresh copies each column once."""

    def __init__(self, dim: int) -> None:
        self.dim = dim
        self.ids: list[str] = []
        self.sources: list[str] = []
        self.codes: list[Any] = []  # pieces with the buffer protocol: arrays, memoryviews
        self.scales: list[Any] = []
        self.signs: list[Any] = []
        self._names: dict[str, str] = {}  # one string a source, not one a row (1.2 M rows at 1 GB)
        self.kept = 0  # rows taken from an older copy first: known to be distinct

    def add(self, page: list[dict[str, Any]]) -> None:
        if not page:
            return
        self.ids.extend(str(r["chunk_hash"]) for r in page)
        names = self._names
        self.sources.extend(names.setdefault(s, s) for s in (str(r["source"]) for r in page))
        codes, scales = quantised([r["embedding"] for r in page], self.dim)
        self.codes.append(codes)
        self.scales.append(scales.astype("<f4"))
        self.signs.append(np.frombuffer(sign_bits(codes), np.uint8).reshape(len(codes), -1))

    def keep(self, old: Lean, dropped: list[int]) -> None:
        """The rows of *old* but those at *dropped* (sorted), before any other row: the
        runs between them as slices (a refresh after an edit keeps 1.2 M rows at 1 GB)."""
        assert not self.ids
        runs, start = [], 0
        for at in [*dropped, len(old.ids)]:
            if at > start:
                runs.append((start, at))
            start = at + 1
        self.ids.extend(itertools.chain.from_iterable(old.ids[a:b] for a, b in runs))
        self.sources.extend(itertools.chain.from_iterable(old.sources[a:b] for a, b in runs))
        for pieces, column in ((self.codes, old.own.codes), (self.scales, old.own.scales), (self.signs, old.own.signs)):
            width, view = len(column) // max(1, len(old.ids)), memoryview(column)
            pieces.extend(view[a * width : b * width] for a, b in runs)
        self.kept = len(self.ids)

    def build(self, token: tuple[int, int, int] | None, described: Described) -> Lean:
        """The copy, keeping the first of an id read twice (a row written while the pages were read)."""
        ids, sources = self.ids, self.sources
        parts = {"codes": self.codes, "scales": self.scales, "signs": self.signs}
        self.codes, self.scales, self.signs = [], [], []
        at = None
        read = ids[self.kept :]  # the kept rows are distinct, and of other sources than the rows read
        if len(set(read)) != len(read):
            first: dict[str, int] = {}
            for i, cid in enumerate(ids):
                first.setdefault(cid, i)
            kept = sorted(first.values())
            ids, sources, at = [ids[i] for i in kept], [sources[i] for i in kept], np.asarray(kept, dtype=np.int64)

        def joined(name: str) -> bytes:  # one column's bytes, its pieces let go once joined
            pieces = parts.pop(name)
            whole = b"".join(pieces)
            pieces.clear()
            if at is None or not whole:
                return whole
            return np.frombuffer(whole, np.uint8).reshape(len(self.ids), -1)[at].tobytes()

        own = OwnRows(joined("codes"), joined("scales"), joined("signs"), self.dim)
        return Lean(ids, sources, own, token, described, time.monotonic())


def load(
    store: MilvusStore,
    dim: int,
    manifest: Path,
    quiet: Callable[[], tuple[int, int, int] | None],
    old: Lean | None,
    *,
    stop: Callable[[], bool],
) -> Lean | None:
    """The lean copy of *store*'s collection (the files whose recorded chunks changed
    since *old* read again, the rest kept), or None when a run wrote meanwhile, the
    manifest does not describe the rows, or *stop* said so."""
    token = quiet()
    described = read_manifest(manifest, files=True) if token is not None else None
    if described is None:
        return None
    rows = LeanRows(dim)
    if old is None:
        pages = store.iter_rows(FIELDS)
    else:
        now, was = described.entries, old.entries
        changed = {s for s in now.keys() | was.keys() if now.get(s) != was.get(s)}
        if not changed:  # a saved copy a new process starts from, as it was: the same codes
            if quiet() != token or described.rows != len(old.ids):
                return None
            return Lean(old.ids, old.sources, old.own, token, described, time.monotonic(), old.index)
        dropped = np.flatnonzero(
            np.fromiter(map(changed.__contains__, old.sources), dtype=bool, count=len(old.sources))
        ).tolist()
        rows.keep(old, dropped)
        pages = store.iter_rows_for_sources(sorted(changed & now.keys()), FIELDS)
    for page in pages:
        if stop():
            return None
        rows.add(page)
    out = rows.build(token, described)
    if quiet() != token or described.rows != len(out.ids):
        return None
    if (
        old is not None
        and old.index is not None
        and not (isinstance(old.index, Shifted) and old.index.depth >= Shifted.DEPTH)
    ):
        added = {cid: i for i, cid in enumerate(out.ids[rows.kept :], rows.kept)}
        out.index = Shifted(old.index, dropped, added, out.ids)
    return out


def search(
    store: MilvusStore,
    lean: Lean,
    pos: Mapping[str, int],
    among: list[int] | None,
    vector: list[float],
    query_text: str,
    *,
    top_k: int,
    source_prefix: str | None,
    explain: bool,
) -> list[dict[str, Any]] | None:
    """The hybrid hits :meth:`MilvusStore.search` would give; None when BM25 found a
    chunk the copy lacks (a row written by a tool that keeps no manifest)."""
    from memsearch_fast.store import fusion
    from memsearch_fast.store.spans import merge

    deep = fusion.depth(top_k, MAX_TOP_K)
    wide = candidates(deep)  # deeper, as a search without a copy asks: the chunks whose spans are scored

    def dense() -> list[tuple[int, float]]:
        scores = lean.own.top(vector, wide) if among is None else lean.own.scores(vector, among)
        return sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))[:wide]

    spans = store.spans
    present = spans.present()

    def dense_spans() -> tuple[list[tuple[str, float]], dict[str, dict[str, Any]]]:
        # The dense list's spans are read while the engine still ranks BM25 (it takes
        # longer than the codes' scan): at 1 GB a search waited for both, then the reads.
        listed = [(lean.ids[g], score) for g, score in dense()]
        return listed, spans.best_of(vector, [cid for cid, _ in listed]) if present else {}

    (listed, span_of), sparse = together(
        dense_spans, lambda: store.sparse_search(query_text, top_k=deep, source_prefix=source_prefix)
    )
    if any(h["chunk_hash"] not in pos for h in sparse):
        return None
    scored = dict(listed)  # the deeper list scored some of the BM25 hits the fused depth left out
    rest = [h["chunk_hash"] for h in sparse if h["chunk_hash"] not in scored]
    if present and rest:
        span_of = {**span_of, **spans.best_of(vector, rest)}
    ranked, matched = merge.merge_dense(listed, list(span_of.values()), deep)

    def own_of(lacking: list[str]) -> list[tuple[str, float]]:
        asked = [pos[cid] for cid in lacking if cid not in scored]
        own = [(cid, scored[cid]) for cid in lacking if cid in scored]
        return own + [(lean.ids[g], s) for g, s in (lean.own.scores(vector, asked) if asked else {}).items()]

    return store.finish_hybrid(
        ranked,
        matched,
        sparse,
        {h["chunk_hash"]: h for h in sparse},
        query_text,
        top_k=top_k,
        deep=deep,
        explain=explain,
        own_of=own_of,
        spans_of=lambda lacking: [span_of[cid] for cid in lacking if cid in span_of],
        rows_of=lambda missing: _rows(store, lean.described, {cid: lean.sources[pos[cid]] for cid in missing}),
    )


def _rows(store: MilvusStore, described: Described, wanted: dict[str, str]) -> dict[str, dict[str, Any]]:
    """The fields of the chunks *wanted* ({id: source}): from their files where
    unchanged, the rest from Milvus."""
    if not wanted:
        return {}
    out = rows_from_files(described, wanted)
    rest = [cid for cid in wanted if cid not in out]
    if rest:
        out.update((str(r["chunk_hash"]), r) for r in store.rows_for_ids(rest, QUERY_FIELDS))
    return out
