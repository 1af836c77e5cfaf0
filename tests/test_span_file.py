"""The span file beside a Milvus Lite database (:mod:`memsearch_fast.store.spans.file`).

Real Milvus Lite and real SQLite; the quick tests write made-up vectors, the
slow ones index with the real model.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import numpy as np
import pytest

from memsearch_fast import MemSearch
from memsearch_fast.errors import UnusableDatabaseError
from memsearch_fast.store.milvus import MilvusStore
from memsearch_fast.store.spans import basis as span_basis
from memsearch_fast.store.spans import reads
from memsearch_fast.store.spans.file import SpanFile, check_file, path_of
from tests.test_spans import FACT, recorded
from tests.test_spans import notes as notes  # a fixture

DIM = 64


def rows(chunks: int, spans: int, seed: int = 0) -> tuple[list[dict], list[dict]]:
    """Span rows and each chunk's row 0, vectors at random, chunk *c* in file ``s{c % 5}.md``."""
    rng = np.random.default_rng(seed)
    span_rows, own = [], []
    for c in range(chunks):
        cid, source = f"{c:016x}", f"/notes/s{c % 5}.md"
        for i in range(1, spans + 1):
            span_rows.append(
                {
                    "span_id": f"{cid}:{i}",
                    "chunk_hash": cid,
                    "source": source,
                    "text_hash": f"{c:04d}{i:04d}" * 8,
                    "start_line": 10 * c + i,
                    "end_line": 10 * c + i,
                    "embedding": rng.normal(size=DIM),
                }
            )
        own.append(
            {
                "span_id": f"{cid}:0",
                "chunk_hash": cid,
                "source": source,
                "text_hash": "",
                "start_line": 10 * c,
                "end_line": 10 * c + spans,
                "embedding": rng.normal(size=DIM),
            }
        )
    return span_rows, own


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(span_basis, "DIMS", 16)
    monkeypatch.setattr(span_basis, "FIT_ROWS", 200)
    with MilvusStore(str(tmp_path / "m.db"), collection="notes", dimension=DIM) as s:
        yield s


def unit(v: np.ndarray) -> np.ndarray:
    return v / np.linalg.norm(v)


def test_a_chunks_spans_are_stored_found_reused_and_deleted(store: MilvusStore) -> None:
    spans = store.spans
    assert isinstance(spans, SpanFile) and not spans.exists
    span_rows, own = rows(60, 8)
    assert spans.create([r["embedding"] for r in span_rows]) and spans.basis is not None
    spans.put(span_rows, own)
    assert spans.counts() == {"span_vectors": 480, "span_chunks": 60}
    assert spans.chunk_hashes() == {o["chunk_hash"] for o in own}
    # A span's own vector finds it first, scored as its vector lifted from the basis.
    target = span_rows[77]
    lifted = unit(spans.basis.lift(spans.basis.project(unit(target["embedding"]))))
    hit = spans.search(list(target["embedding"]), 3, None)[0]
    assert hit["span_id"] == target["span_id"] and hit["start_line"] == target["start_line"]
    assert abs(hit["distance"] - float(lifted @ unit(target["embedding"]))) < 5e-3
    # Filtered by source: only chunks of that file, the same scores.
    some = spans.search(list(target["embedding"]), 100, "/notes/s1")
    assert some and all(h["source"] == "/notes/s1.md" for h in some)
    whole = {h["chunk_hash"]: h["distance"] for h in spans.search(list(target["embedding"]), 100, None)}
    assert all(abs(whole[h["chunk_hash"]] - h["distance"]) < 1e-6 for h in some)
    assert set(spans.best_of(list(target["embedding"]), [own[3]["chunk_hash"], "gone"])) == {own[3]["chunk_hash"]}
    # A moved chunk's spans take the stored vectors: stored again, the same codes. They
    # are looked up where the run says: the old file's chunks, or the chunk a vector came from.
    reused = spans.vectors_for([target["text_hash"], "no such text"], [target["source"]])
    assert set(reused) == {target["text_hash"]}
    assert spans.vectors_for([target["text_hash"]], chunks=[target["chunk_hash"]]) == reused
    other = next(o["source"] for o in own if o["source"] != target["source"])
    assert not spans.vectors_for([target["text_hash"]], [other]) and not spans.vectors_for([target["text_hash"]])
    assert float(unit(np.asarray(reused[target["text_hash"]])) @ lifted) > 0.999
    before = np.concatenate([page[1] for page in spans.iter_codes(["/notes/s2.md"])])
    moved = [{**r, "embedding": reused[target["text_hash"]]} for r in span_rows[:1]]
    spans.put(moved, own[:1])
    assert spans.counts() == {"span_vectors": 473, "span_chunks": 60}  # chunk 0 now holds one span
    assert np.array_equal(np.concatenate([page[1] for page in spans.iter_codes(["/notes/s2.md"])]), before)
    spans.delete_sources(["/notes/s1.md"])
    spans.delete_chunks([own[0]["chunk_hash"]])
    assert spans.counts() == {"span_vectors": 376, "span_chunks": 47}
    assert not spans.vectors_for([span_rows[8]["text_hash"]], ["/notes/s1.md"])  # chunk 1 was in s1.md
    store.drop()
    assert not spans.exists and not store.exists


def test_spans_kept_in_every_dimension_are_stored_again_in_fewer_once_enough(store: MilvusStore) -> None:
    spans = store.spans
    few, own = rows(10, 5)
    spans.create([r["embedding"] for r in few])  # 50 spans: too few to fit on
    spans.put(few, own)
    assert spans.basis is None and not spans.refit()
    more, more_own = rows(50, 5, seed=1)
    more = [{**r, "chunk_hash": "b" + r["chunk_hash"][1:], "span_id": "b" + r["span_id"][1:]} for r in more]
    more_own = [{**r, "chunk_hash": "b" + r["chunk_hash"][1:], "span_id": "b" + r["span_id"][1:]} for r in more_own]
    spans.put(more, more_own)
    texts = [r["text_hash"] for r in few]
    assert spans.refit() and spans.basis is not None and spans.basis.dims == 16
    assert spans.counts() == {"span_vectors": 300, "span_chunks": 60}
    # every text still found by its hash
    assert set(spans.vectors_for(texts, {r["source"] for r in few})) == set(texts)
    hit = spans.search(list(few[7]["embedding"]), 1, None)[0]
    assert hit["span_id"] == few[7]["span_id"]


def test_past_the_scan_limit_a_search_scores_the_spans_of_the_chunks_its_lists_found(
    store: MilvusStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A span file too large to score span by span for each search (1.2 M chunks
    at 1 GB of journals: 27 s a search) gives the spans of the chunks a deeper
    dense list and the BM25 list found; where those lists hold every chunk, that
    is the same answer, hit for hit."""
    spans = store.spans
    span_rows, own = rows(60, 8)
    spans.create([r["embedding"] for r in span_rows])
    spans.put(span_rows, own)
    store.upsert(
        [
            {
                "chunk_hash": o["chunk_hash"],
                "embedding": list(map(float, unit(o["embedding"]))),
                "content": f"note {c} on topic{c}x and topic{c + 1}x",
                "source": o["source"],
                "heading": "",
                "heading_level": 0,
                "start_line": o["start_line"],
                "end_line": o["end_line"],
            }
            for c, o in enumerate(own)
        ]
    )
    asks = [(span_rows[i]["embedding"], f"topic{i // 8}x") for i in (3, 77, 200, 333, 479)]

    def search_all() -> list[list[dict]]:
        return [store.search(list(map(float, unit(v))), text, top_k=5, explain=True) for v, text in asks]

    monkeypatch.setenv("MEMSEARCH_SPAN_SCAN_MAX", "480")
    assert spans.scans_all()
    every = search_all()
    # The span a question was asked by is what found its chunk, first.
    assert [h[0]["chunk_hash"] for h in every] == [span_rows[i]["chunk_hash"] for i in (3, 77, 200, 333, 479)]
    assert all("span" in h[0]["explain"] for h in every)

    monkeypatch.setenv("MEMSEARCH_SPAN_SCAN_MAX", "479")
    assert not spans.scans_all()

    def scan(*args: object) -> None:
        raise AssertionError("every span scored past the limit")

    monkeypatch.setattr(SpanFile, "search", scan)
    assert search_all() == every
    # A write changes the count the limit is held against.
    monkeypatch.setenv("MEMSEARCH_SPAN_SCAN_MAX", "480")
    assert spans.scans_all()
    spans.delete_chunks([own[0]["chunk_hash"]])
    monkeypatch.setenv("MEMSEARCH_SPAN_SCAN_MAX", "472")
    assert spans.scans_all()
    # The count stops a page of chunks past the cap, and is the whole count below it.
    monkeypatch.setattr(reads, "COUNT_PAGE", 7)
    assert spans.count_past(10_000) == spans.count() == 472
    for cap in (0, 55, 56, 400, 471):
        assert cap < spans.count_past(cap) <= min(472, cap + 7 * 8)
    assert spans.count_past(472) == 472
    monkeypatch.setenv("MEMSEARCH_SPAN_SCAN_MAX", "471")
    assert not spans.scans_all()


def test_a_planted_or_damaged_span_file_is_refused_or_set_aside(tmp_path: Path) -> None:
    db = str(tmp_path / "m.db")
    path = path_of(db)
    os.symlink(tmp_path / "elsewhere", path)
    with pytest.raises(UnusableDatabaseError, match="not a regular file"):
        check_file(path)
    os.unlink(path)
    Path(path).write_bytes(b"")
    os.chown(path, 65534, 65534)
    if os.geteuid() == 0:  # only root can give a file away: another user's file
        with pytest.raises(UnusableDatabaseError, match="another user"):
            check_file(path)
    os.unlink(path)
    with MilvusStore(db, collection="notes", dimension=DIM) as store:
        span_rows, own = rows(5, 3)
        store.spans.create()
        store.spans.put(span_rows, own)
    Path(path).write_bytes(b"this is no database at all" * 100)
    for side in ("-wal", "-shm"):
        Path(path + side).unlink(missing_ok=True)
    with MilvusStore(db, collection="notes", dimension=DIM) as store:
        assert not store.spans.exists and store.spans.search([0.1] * DIM, 3, None) == []  # read: no spans
        assert store.spans.create()  # a writer sets it aside and starts again
        store.spans.put(span_rows, own)
        assert store.spans.counts()["span_chunks"] == 5
    assert Path(path + ".damaged").read_bytes().startswith(b"this is no database")


@pytest.mark.slow(reason="indexes with the real model twice")
def test_a_database_whose_spans_were_a_collection_moves_them_in_one_run(
    notes: Path,
    tmp_path: Path,
    model_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    question = "which bucket does the aspen nightly export archive go to"
    db = str(tmp_path / "m.db")
    monkeypatch.setenv("MEMSEARCH_SPAN_STORE", "collection")
    with MemSearch([str(notes)], embedding_model=str(model_dir), milvus_uri=db) as ms:
        asyncio.run(ms.index())
        legacy = ms.store.spans.counts()
        before = asyncio.run(ms.search(question, top_k=3, explain=True))
    monkeypatch.delenv("MEMSEARCH_SPAN_STORE")
    with MemSearch([str(notes)], embedding_model=str(model_dir), milvus_uri=db) as ms:
        sent = recorded(ms)
        report = asyncio.run(ms.index_with_report())
        assert report.spans is not None and report.spans.moved == legacy["span_chunks"] > 0
        assert not sent and report.spans.embedded == 0  # nothing embedded again
        assert ms.store.spans.counts() == legacy
        assert not ms.store._call("has", lambda c: c.has_collection(ms.store.collection + "_spans"))
        after = asyncio.run(ms.search(question, top_k=3, explain=True))
    assert FACT in after[0]["content"]
    assert [h["chunk_hash"] for h in after] == [h["chunk_hash"] for h in before]
    assert after[0]["explain"]["span"]["start_line"] == before[0]["explain"]["span"]["start_line"]


KILLED_RUN = """
import asyncio, os, signal, sys
from memsearch_fast import MemSearch
from memsearch_fast.store.spans.columns import Columns

calls, at = [0], int(sys.argv[4])
take_each = Columns.take_each


def rows(blobs):  # inside a write's transaction: some chunks of it inserted, none committed
    for blob in blobs:
        calls[0] += 1
        if calls[0] == at:
            os.kill(os.getpid(), signal.SIGKILL)
        yield blob


Columns.take_each = lambda self, *a, **k: rows(take_each(self, *a, **k))
with MemSearch([sys.argv[1]], embedding_model=sys.argv[3], milvus_uri=sys.argv[2]) as ms:
    asyncio.run(ms.index())
"""


@pytest.fixture(scope="module")
def span_kill_corpus(tmp_path_factory: pytest.TempPathFactory, model_dir: Path):
    """60 KB of notes and a clean index of them, shared by the kill points (one
    worker: their xdist group)."""
    from tests.helpers.harness import corpus, dump, stop_servers

    base = tmp_path_factory.mktemp("span-kill")
    notes = base / "notes"
    corpus(notes, 60_000, seed=48)
    clean = base / "clean.db"
    try:
        with MemSearch([str(notes)], embedding_model=str(model_dir), milvus_uri=str(clean)) as ms:
            asyncio.run(ms.index())
        want = dump(clean)
    finally:
        stop_servers(base)
    assert any(k.startswith("span:") for k in want)
    return notes, want


@pytest.mark.slow(reason="indexes a corpus with the real model twice for each kill point")
@pytest.mark.xdist_group("span_kill")
@pytest.mark.parametrize("at", [2, 40])
def test_a_run_killed_inside_a_span_write_is_repaired_by_the_next(
    tmp_path: Path, model_dir: Path, span_kill_corpus: tuple[Path, dict], at: int
) -> None:
    """kill -9 in the middle of a span file transaction (the first write, or a later one
    after others committed): the next run leaves what a clean index holds, spans included."""
    import subprocess
    import sys

    from tests.helpers.harness import ROOT, assert_same, dump, stop_servers

    notes, want = span_kill_corpus
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    db = tmp_path / "killed.db"
    run = [sys.executable, "-c", KILLED_RUN, str(notes), str(db), str(model_dir)]
    try:
        killed = subprocess.run([*run, str(at)], env=env, capture_output=True, timeout=300)
        assert killed.returncode == -9, killed.stderr[-2000:]
        repaired = subprocess.run([*run, "0"], env=env, capture_output=True, timeout=300)
        assert repaired.returncode == 0, repaired.stderr[-2000:]
        assert_same(dump(db), want, f"killed at span write {at}")
    finally:
        stop_servers(tmp_path)
