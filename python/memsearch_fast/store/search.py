"""Search: hybrid (dense and BM25 lists fused by :mod:`.fusion`), dense and sparse lists."""

from __future__ import annotations

import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from memsearch_fast.config.tuning import API_TOP_K
from memsearch_fast.errors import StoreError, StoreUnavailableError
from memsearch_fast.store.schema import QUERY_FIELDS, StoreSchema

if TYPE_CHECKING:
    from memsearch_fast.store.spans.collection import SpanStore
    from memsearch_fast.store.spans.file import SpanFile

#: The most hits one search may ask for (Milvus: offset + limit ≤ 16384).
MAX_TOP_K = 16384
#: Engine calls one search makes at once (Milvus Lite and a server both serve
#: overlapping calls).
PARALLEL_CALLS = 4
#: How many times deeper the dense list is when it names the chunks whose spans a
#: search scores (a span file past MEMSEARCH_SPAN_SCAN_MAX): the engine's scan
#: costs the same, and each chunk's spans are one indexed read (docs/scale.md).
CANDIDATES = 10


def candidates(deep: int) -> int:
    return min(MAX_TOP_K, deep * CANDIDATES)


@functools.cache
def _pool() -> ThreadPoolExecutor:
    # Threads start on first use; two pools made by a race cost nothing.
    return ThreadPoolExecutor(max_workers=PARALLEL_CALLS, thread_name_prefix="memsearch-search")


def together(*calls: Callable[[], Any]) -> list[Any]:
    """The answers of *calls*, run at once on a small shared pool; the first
    error is raised once every call has ended (none is left running)."""
    futures = [_pool().submit(call) for call in calls[1:]]
    out: list[Any] = []
    error: BaseException | None = None
    try:
        out.append(calls[0]())
    except BaseException as exc:  # noqa: BLE001 - raised below, after the others ended
        error = exc
    for f in futures:
        try:
            out.append(f.result())
        except BaseException as exc:  # noqa: BLE001
            error = error or exc
    if error is not None:
        raise error
    return out


class StoreSearch(StoreSchema):
    """The search half of :class:`~memsearch_fast.store.milvus.MilvusStore`."""

    def search(
        self,
        dense: list[float],
        query_text: str,
        *,
        top_k: int = API_TOP_K,
        source_prefix: str | None = None,
        explain: bool = False,
    ) -> list[dict[str, Any]]:
        """Hybrid search: dense (COSINE) and BM25 lists fused by :mod:`.fusion`.

        ``score`` is the fused score, 0..1 (1.0: first in both lists, with every
        word asked in the lines that matched). With
        *explain*, each hit also carries ``explain``: its rank and score in
        the dense and the BM25 list (rank None: not in that list, which is
        :func:`.fusion.depth` deep) and the fused score. An empty query text
        searches by the dense vector alone.
        """
        if top_k > MAX_TOP_K:
            raise StoreError(
                f"top_k {top_k} is above {MAX_TOP_K}, the most results Milvus returns for one search; "
                f"ask for {MAX_TOP_K} or fewer (-k/--top-k)"
            )
        if not self._exists or top_k <= 0:
            return []
        from memsearch_fast.store import fusion
        from memsearch_fast.store.spans import merge

        deep = fusion.depth(top_k, MAX_TOP_K)
        if hasattr(dense, "tolist"):
            dense = dense.tolist()
        vector = list(dense)
        # Too many spans to score each for every search (a span file past
        # MEMSEARCH_SPAN_SCAN_MAX): those of the chunks a deeper dense list and
        # the BM25 list found.
        every_span = self.spans.scans_all()
        # The lists are independent calls to the engine: asked together, a search
        # costs the slowest of them instead of their sum.
        try:
            dense_hits, sparse_hits, span_hits = together(
                lambda: self._list_search(
                    [vector], "embedding", "COSINE", deep if every_span else candidates(deep), source_prefix
                ),
                lambda: self.sparse_search(query_text, top_k=deep, source_prefix=source_prefix),
                lambda: self.spans.search(vector, deep, source_prefix) if every_span else [],
            )
            if not every_span:
                listed = [h["chunk_hash"] for h in [*dense_hits, *sparse_hits]]
                span_hits = list(self.spans.best_of(vector, listed).values())
        except StoreUnavailableError:
            raise
        except StoreError:
            # Some engines fail BM25 on an empty collection (average doc length
            # 0); an empty collection has no results rather than an error.
            if self._exists and self.count() == 0:
                return []
            raise
        ranked, matched = merge.merge_dense([(h["chunk_hash"], h["distance"]) for h in dense_hits], span_hits, deep)
        rows = {h["chunk_hash"]: h for h in [*sparse_hits, *dense_hits]}
        # What the lists already scored (a dense list deeper than the fused one, the
        # spans of the chunks it and BM25 found) is not asked again.
        scored = {h["chunk_hash"]: h for h in dense_hits}
        spanned = {} if every_span else {str(h["chunk_hash"]): h for h in span_hits}

        def own_of(lacking: list[str]) -> list[tuple[str, float]]:
            asked = [cid for cid in lacking if cid not in scored]
            known = [scored[cid] for cid in lacking if cid in scored]
            found = (
                self._search_among(self.collection, [vector], "embedding", "COSINE", asked, ["chunk_hash"])
                if asked
                else []
            )
            return [(h["chunk_hash"], h["distance"]) for h in [*known, *found]]

        def spans_of(lacking: list[str]) -> list[dict[str, Any]]:
            asked = [cid for cid in lacking if cid not in spanned]
            known = [spanned[cid] for cid in lacking if cid in spanned]
            return known + (list(self.spans.best_of(vector, asked).values()) if asked else [])

        def rows_of(missing: list[str]) -> dict[str, dict[str, Any]]:
            return {r["chunk_hash"]: r for r in self.rows_for_ids(missing, QUERY_FIELDS)}

        return self.finish_hybrid(
            ranked,
            matched,
            sparse_hits,
            rows,
            query_text,
            top_k=top_k,
            deep=deep,
            explain=explain,
            own_of=own_of,
            spans_of=spans_of,
            rows_of=rows_of,
        )

    def finish_hybrid(
        self,
        ranked: list[tuple[str, float]],
        matched: dict[str, dict[str, Any]],
        sparse_hits: list[dict[str, Any]],
        rows: dict[str, dict[str, Any]],
        query_text: str,
        *,
        top_k: int,
        deep: int,
        explain: bool,
        own_of: Callable[[list[str]], list[tuple[str, float]]],
        spans_of: Callable[[list[str]], list[dict[str, Any]]],
        rows_of: Callable[[list[str]], dict[str, dict[str, Any]]],
        fill_first: bool = True,
    ) -> list[dict[str, Any]]:
        """The second half of every hybrid search, whatever ranked its lists (Milvus,
        the in-memory copy, the lean copy: one rule, so they answer alike): the BM25
        hits the dense list *ranked* lacks get their real dense scores (*own_of*: their
        own vectors' cosines, *spans_of*: their best spans' hits), the ranked chunks
        *rows* lacks get their display fields (*rows_of*), and with *fill_first* the
        dense hits' BM25 scores are asked beside them (else only when they could
        change the answer, :meth:`fuse_lists`), the question's word shares counted
        meanwhile for the chunks whose fields are known; then the lists are fused."""
        from memsearch_fast.store.spans import merge

        pairs = [(h["chunk_hash"], h["distance"]) for h in sparse_hits]
        have = {cid for cid, _ in ranked}
        lacking = [cid for cid in dict.fromkeys(cid for cid, _ in pairs) if cid not in have]
        missing = [cid for cid, _ in ranked if cid not in rows]
        # They depend only on the lists: asked together, a search costs the slowest
        # (and what has nothing to do is not handed to the pool: a copy's search
        # often lacks nothing).
        calls: dict[str, Callable[[], Any]] = {}
        if fill_first:  # first: the engine's call is begun at once, the others wait less for it
            calls["filled"] = lambda: self.fill_sparse(pairs, ranked, query_text)
        if lacking:
            calls["own"], calls["best"] = lambda: own_of(lacking), lambda: spans_of(lacking)
        if missing or fill_first:
            # The question's words in the hits' lines counted while the engine fills BM25.
            calls["rows"] = lambda: self._rows_and_shares(ranked, matched, rows, missing, rows_of, query_text)
        got = dict(zip(calls, together(*calls.values()), strict=True)) if calls else {}
        if lacking:
            scores, found = merge.merge_dense(got["own"], got["best"], len(lacking))
            matched.update(found)
            ranked = merge.fill_dense(ranked, dict(scores))
        got_rows, known = got.get("rows", ({}, None))
        rows.update(got_rows)
        filled = got.get("filled")
        ranked = [(cid, score) for cid, score in ranked if cid in rows]  # a span whose chunk is gone: skipped
        return self.fuse_lists(
            ranked,
            matched,
            pairs,
            rows,
            query_text,
            top_k=top_k,
            deep=deep,
            explain=explain,
            filled=filled,
            shares=known,
        )

    @staticmethod
    def _rows_and_shares(
        ranked: list[tuple[str, float]],
        matched: dict[str, dict[str, Any]],
        rows: dict[str, dict[str, Any]],
        missing: list[str],
        rows_of: Callable[[list[str]], dict[str, dict[str, Any]]],
        query_text: str,
    ) -> tuple[dict[str, dict[str, Any]], dict[str, float]]:
        """The display fields of *missing*, and the word shares of the *ranked* chunks
        whose fields are then known (:func:`.spans.words.shares`)."""
        from memsearch_fast.store.spans import words as span_words

        got = rows_of(missing) if missing else {}
        return got, span_words.shares(ranked, matched, {**rows, **got}, query_text)

    def fuse_lists(
        self,
        ranked: list[tuple[str, float]],
        matched: dict[str, dict[str, Any]],
        sparse: list[tuple[str, float]],
        rows: dict[str, dict[str, Any]],
        query_text: str,
        *,
        top_k: int,
        deep: int,
        explain: bool,
        filled: list[tuple[str, float]] | None = None,
        shares: dict[str, float] | None = None,
    ) -> list[dict[str, Any]]:
        """The hits of the dense list *ranked* (chunks at their best vector, *matched*
        the spans that gave them) and the BM25 list *sparse*, fused; *rows* holds
        every ranked chunk's display fields; *filled*: :meth:`fill_sparse`'s answer
        when the caller asked already (else it is asked only when it could change
        the answer: :func:`.fusion.fill_matters`); *shares*: word shares counted already."""
        from memsearch_fast.store import fusion
        from memsearch_fast.store.spans import merge
        from memsearch_fast.store.spans import words as span_words

        ranked, share = span_words.with_words(ranked, matched, rows, query_text, shares)
        trust = fusion.trust([score for _, score in sparse], deep)
        if filled is None:
            filled = (
                self.fill_sparse(sparse, ranked, query_text)
                if fusion.fill_matters(ranked, sparse, top_k, deep=deep, bm25_trust=trust, words=share)
                else sparse
            )
        fused = fusion.fuse(ranked, filled, top_k, bm25_trust=trust, words=share)
        return [
            merge.explain_span(fusion.hit(f, rows[f.id], QUERY_FIELDS, explain), matched.get(f.id), share.get(f.id))
            for f in fused
        ]

    def fill_sparse(
        self, sparse: list[tuple[str, float]], ranked: list[tuple[str, float]], query_text: str
    ) -> list[tuple[str, float]]:
        """*sparse* (the BM25 list) plus the BM25 scores of the dense hits it lacks,
        best first: the mirror of the dense fill (:func:`.spans.merge.fill_dense`). A chunk the dense side ranks
        first but whose BM25 score fell just short of a flat list keeps that score
        instead of none. (The chunks the dense fill adds come from *sparse*: the
        answer is the same before and after it.)"""
        have = {cid for cid, _ in sparse}
        lacking = [cid for cid, _ in ranked if cid not in have]
        if not lacking or not sparse or not query_text.strip():
            return sparse
        hits = self._search_among(self.collection, [query_text], "sparse_vector", "BM25", lacking, ["chunk_hash"])
        extra = [(h["chunk_hash"], h["distance"]) for h in hits]
        return sorted([*sparse, *extra], key=lambda kv: -kv[1])  # stable: ties keep the BM25 order

    @property
    def spans(self) -> SpanStore | SpanFile:
        raise NotImplementedError

    def rows_for_ids(self, ids: list[str], fields: list[str]) -> list[dict[str, Any]]:
        raise NotImplementedError

    def sparse_search(self, query_text: str, *, top_k: int, source_prefix: str | None = None) -> list[dict[str, Any]]:
        """The BM25 list of :meth:`search`, best first, each row with its ``distance``."""
        if not query_text.strip():
            return []
        try:
            return self._list_search([query_text], "sparse_vector", "BM25", top_k, source_prefix)
        except StoreUnavailableError:
            raise
        except StoreError as exc:
            # Milvus Lite 2.5 scores BM25 against a snapshot with no documents (an
            # empty collection, or one whose first rows are still being written
            # while another process searches) as NaN and fails: no BM25 hits.
            if "NaN or Inf" in str(exc):
                return []
            raise

    def _list_search(
        self, data: list[Any], field: str, metric: str, limit: int, source_prefix: str | None
    ) -> list[dict[str, Any]]:
        if not self._exists or limit <= 0:
            return []
        return self._search_in(self.collection, data, field, metric, limit, source_prefix, QUERY_FIELDS)
