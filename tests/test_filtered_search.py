"""A search filtered by source prefix over a shared collection finds what the same
search over a collection holding only those sources finds: spans on and off,
answered by Milvus and by the in-memory copy.

Real Milvus Lite, the real model, real index runs: one collection of every
source, and one of each source folder alone, in the same database. The dense
list is the same hit for hit, with the same scores. BM25 is not quite: Milvus
weighs a word by its rarity in the whole collection, so a shared one gives
other BM25 scores than a collection of those sources alone, which can swap
two hits of nearly equal fused scores; the hybrid answers must have the same
first hit and the same chunks with the same dense scores, but for one at the
cut.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from memsearch_fast import MemSearch
from memsearch_fast.store import dense_index
from tests.helpers.corpus import write_corpus

QUERIES = [
    "which worker owns the temp directory",
    "lock timeout raised for the migration",
    "thumbnail resize path libvips benchmark",
    "retry backoff jitter",
    "搜索页面改版",
    "deploy key fingerprint",
]
FOLDERS = [f"team-{i}" for i in range(6)]


def _open(paths: list[Path], db: Path, model_dir: Path, collection: str, copy: bool) -> MemSearch:
    return MemSearch(
        [str(p) for p in paths],
        embedding_model=str(model_dir),
        milvus_uri=str(db),
        collection=collection,
        dense_index=copy,
    )


def _ids(hits: list[dict]) -> list[tuple[str, int, int]]:
    return [(h["source"], h["start_line"], h["end_line"]) for h in hits]


def _scored(hits: list[dict]) -> list[tuple[tuple[str, int, int], float]]:
    return [(i, round(h["score"], 5)) for i, h in zip(_ids(hits), hits, strict=True)]


def _dense_scores(hits: list[dict]) -> dict[tuple[str, int, int], float]:
    return {i: round(h["explain"]["dense_score"], 5) for i, h in zip(_ids(hits), hits, strict=True)}


def _dense(ms: MemSearch, vector, prefix: Path | None) -> list[dict]:
    """The dense list alone (an empty query text), 10 deep, as the search's path gives it:
    the in-memory copy when the instance has one, else Milvus."""
    store = ms._search_store()
    at = str(prefix) if prefix else None
    if ms._dense is not None:
        hits = ms._dense.search(store, vector, "", top_k=10, source_prefix=at)
        assert hits is not None, "the copy did not answer"
        return hits
    return store.search(vector, "", top_k=10, source_prefix=at)


@pytest.mark.slow(reason="indexes six folders twice (shared and alone) with the real model, with and without spans")
@pytest.mark.parametrize("spans", [True, False], ids=["spans", "no-spans"])
def test_a_filtered_search_finds_what_those_sources_alone_give(tmp_path, db, model_dir, monkeypatch, spans):
    monkeypatch.setenv(dense_index.ENV_MIN_ROWS, "0")  # the copy even for a collection this small
    monkeypatch.delenv(dense_index.ENV_SWITCH, raising=False)
    if not spans:
        monkeypatch.setenv("MEMSEARCH_SPANS", "0")
    root = tmp_path / "notes"
    for i, folder in enumerate(FOLDERS):
        write_corpus(root / folder, total_bytes=9_000, seed=40 + i)
    alone = FOLDERS[1:3]
    with _open([root], db, model_dir, "shared", False) as ms:
        asyncio.run(ms.index())
        assert (ms.store.spans.count() > 0) == spans
    for folder in alone:
        with _open([root / folder], db, model_dir, f"alone_{folder.replace('-', '_')}", False) as ms:
            asyncio.run(ms.index())
    for copy in (False, True):
        shared = _open([root], db, model_dir, "shared", copy)
        try:
            for folder in alone:
                with _open([root / folder], db, model_dir, f"alone_{folder.replace('-', '_')}", copy) as own:
                    if copy:  # both answer from their copies, loaded by a first search
                        for ms in (shared, own):
                            asyncio.run(ms.search(QUERIES[0]))
                            assert ms._dense is not None and ms._dense.wait(120), "the copy did not load"
                    for text in QUERIES:
                        vector = asyncio.run(shared._query_cache.vector(shared.provider, text))
                        dense = _dense(shared, vector, root / folder)
                        assert dense and all(h["source"].startswith(str(root / folder)) for h in dense)
                        assert _scored(dense) == _scored(_dense(own, vector, None)), (copy, folder, text)
                        filtered = asyncio.run(shared.search(text, top_k=5, source_prefix=root / folder, explain=True))
                        whole = asyncio.run(own.search(text, top_k=5, explain=True))
                        assert filtered and all(h["source"].startswith(str(root / folder)) for h in filtered)
                        assert _ids(filtered)[0] == _ids(whole)[0], (copy, folder, text)
                        mine, theirs = _dense_scores(filtered), _dense_scores(whole)
                        both = mine.keys() & theirs.keys()
                        assert len(both) >= len(whole) - 1, (copy, folder, text)  # a swap at the cut at most
                        assert {i: mine[i] for i in both} == {i: theirs[i] for i in both}, (copy, folder, text)
        finally:
            shared.close()
