"""The lean copy past the in-memory copy's cap (:mod:`memsearch_fast.store.copy.lean`).

Real Milvus Lite, the real model, real index runs; the cap is lowered so a
60 KB corpus is "past it". The copy must rank as Milvus does, take the hits'
fields from their files only while those are as indexed, and see every run.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from memsearch_fast.store.copy import dense_index, lean
from tests.test_dense_index import QUERIES, assert_same_ranking, loaded, no_full_read, open_ms, vector

pytestmark = pytest.mark.slow(reason="indexes a 60 KB corpus with the real model and loads the lean copy")


@pytest.fixture
def past_the_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(dense_index.ENV_MIN_ROWS, "0")
    monkeypatch.setenv(dense_index.ENV_MAX_ROWS, "10")
    monkeypatch.delenv(lean.ENV_MAX_ROWS, raising=False)
    monkeypatch.delenv(dense_index.ENV_SWITCH, raising=False)


def stored_ids(store) -> list[str]:
    return sorted(r["chunk_hash"] for p in store.iter_rows(["chunk_hash"]) for r in p)


def lean_of(ms):
    """The instance's lean copy, loaded, with the store it searches."""
    dense = loaded(ms)
    copy = dense._copy
    assert isinstance(copy, lean.Lean)
    return dense, ms._search_store(), copy


def no_row_lookups(store) -> list[list[str]]:
    """Record the ids *store* is asked rows for (a scan of the collection in Lite)."""
    asked: list[list[str]] = []
    rows_for_ids = store.rows_for_ids

    def recorded(ids, fields):
        asked.append(list(ids))
        return rows_for_ids(ids, fields)

    store.rows_for_ids = recorded
    return asked


@pytest.mark.parametrize("spans", [True, False], ids=["spans", "no-spans"])
def test_the_lean_copy_ranks_as_milvus_does_with_fields_from_the_files(
    corpus, db, model_dir, past_the_cap, monkeypatch, spans
):
    if not spans:
        monkeypatch.setenv("MEMSEARCH_SPANS", "0")
    with open_ms(corpus, db, model_dir) as ms:
        asyncio.run(ms.index())
    with open_ms(corpus, db, model_dir, dense_index=True) as ms:
        dense, store, copy = lean_of(ms)
        assert sorted(copy.ids) == stored_ids(store)
        assert (store.spans.count() > 0) == spans
        assert len(copy.own.codes) == 384 * len(copy.ids)  # each chunk's own vector, nothing else
        asked = no_row_lookups(store)
        some = sorted(corpus.rglob("*.md"))[3]
        compared = 0
        for text in [*QUERIES, ""]:
            vec = vector(ms, text or "lock")
            for k in (1, 3, 5, 10):
                for prefix in (None, str(some.parent), str(some)):
                    before = len(asked)
                    ours = dense.search(store, vec, text, top_k=k, source_prefix=prefix)
                    assert ours is not None, "the lean copy did not answer"
                    assert len(asked) == before, "rows looked up in Milvus where the files were unchanged"
                    milvus = store.search(vec, text, top_k=k, source_prefix=prefix)
                    assert_same_ranking(ours, milvus)
                    if prefix:
                        assert all(h["source"].startswith(prefix) for h in ours)
                    compared += bool(ours)
        assert compared > 40
        # --explain names the span that gave each hit its score, as Milvus's search does
        # (codes and floats may choose differently between a chunk's own vector and a
        # span of nearly its score: one such choice in ten is allowed).
        named, differ = 0, 0
        for text in QUERIES:
            vec = vector(ms, text)
            ours = dense.search(store, vec, text, top_k=5, source_prefix=None, explain=True)
            milvus = {h["chunk_hash"]: h["explain"] for h in store.search(vec, text, top_k=5, explain=True)}
            assert ours is not None and all("explain" in h for h in ours)
            for h in ours:
                if h["chunk_hash"] in milvus:
                    lines = [
                        (x["start_line"], x["end_line"]) if x else None
                        for x in (h["explain"].get("span"), milvus[h["chunk_hash"]].get("span"))
                    ]
                    named += lines[0] is not None
                    differ += lines[0] != lines[1]
        assert (named > 0) == spans and differ <= max(1, named // 10)
        assert asyncio.run(ms.search(QUERIES[1], top_k=3, explain=True))  # through MemSearch.search too


def test_a_hit_in_a_file_changed_since_its_run_takes_its_fields_from_milvus(corpus, db, model_dir, past_the_cap):
    from memsearch_fast.store.copy import file_rows

    with open_ms(corpus, db, model_dir) as ms:
        asyncio.run(ms.index())
    with open_ms(corpus, db, model_dir, dense_index=True) as ms:
        dense, store, copy = lean_of(ms)
        text = QUERIES[0]
        vec = vector(ms, text)
        before = dense.search(store, vec, text, top_k=5, source_prefix=None)
        assert before
        wanted = {h["chunk_hash"]: h["source"] for h in before}
        from_files = file_rows.rows_from_files(copy.described, wanted)
        assert from_files.keys() == wanted.keys()  # every file as indexed
        for h in before:
            assert from_files[h["chunk_hash"]] == {k: h[k] for k in from_files[h["chunk_hash"]]}
        # Edited behind the index (no run yet): the manifest still describes the rows,
        # the file no longer holds what it did. Its chunks' fields come from Milvus.
        path = next(p for p in corpus.rglob("*.md") if str(p) == before[0]["source"])
        path.write_text("# Rewritten\n\nNothing of the old text is left here.\n")
        assert (
            file_rows.rows_from_files(copy.described, wanted)
            .keys()
            .isdisjoint(cid for cid, src in wanted.items() if src == str(path))
        )
        asked = no_row_lookups(store)
        after = dense.search(store, vec, text, top_k=5, source_prefix=None)
        assert after == before  # the stored rows, as Milvus holds them until the next run
        assert_same_ranking(after, store.search(vec, text, top_k=5))
        assert any(asked)


def test_an_index_run_is_seen_and_only_changed_files_are_read_again(corpus, db, model_dir, past_the_cap):
    with open_ms(corpus, db, model_dir) as writer, open_ms(corpus, db, model_dir, dense_index=True) as ms:
        asyncio.run(writer.index())
        dense = loaded(ms)
        store = ms._search_store()
        files = sorted(corpus.rglob("*.md"))
        gone, edited = files[0], files[1]
        gone_ids = {r["chunk_hash"] for r in store.rows_for_sources([str(gone)], ["chunk_hash"])}
        assert gone_ids
        gone.unlink()
        edited.write_text(edited.read_text() + "\n\n## Ports\n\nThe quokka relay listens on port 47113.\n")
        asyncio.run(writer.index())

        read: list[str] = []
        no_full_read(dense, read)  # a refresh: the changed files only
        text = "quokka relay port 47113"
        vec = vector(ms, text)
        assert dense.search(store, vec, text, top_k=5, source_prefix=None) is None, "a stale copy answered"
        assert dense.wait(60)
        hits = dense.search(store, vec, text, top_k=5, source_prefix=None)
        assert hits is not None and "quokka relay" in hits[0]["content"]
        assert read == [str(edited)]
        copy = dense._copy
        assert isinstance(copy, lean.Lean) and len(copy.ids) == store.count()
        assert not gone_ids & set(copy.ids)
        assert_same_ranking(hits, store.search(vec, text, top_k=5))
        # The refreshed copy's positions are the last copy's, shifted: as a dict of its ids gives them.
        assert isinstance(copy.index, lean.Shifted)
        assert dict(copy.positions().items()) == {cid: i for i, cid in enumerate(copy.ids)}


def test_past_the_lean_copys_own_cap_milvus_answers(corpus, db, model_dir, past_the_cap, monkeypatch):
    monkeypatch.setenv(lean.ENV_MAX_ROWS, "20")
    with open_ms(corpus, db, model_dir, dense_index=True) as ms:
        asyncio.run(ms.index())
        assert asyncio.run(ms.search(QUERIES[0]))
        ms._dense.wait(60)
        assert not ms._dense.loaded


def test_a_restarted_process_starts_from_the_saved_lean_copy_and_reads_only_what_changed(
    corpus, db, model_dir, past_the_cap
):
    from memsearch_fast.store.copy import saved as saved_copy

    with open_ms(corpus, db, model_dir) as writer:
        asyncio.run(writer.index())
    with open_ms(corpus, db, model_dir, dense_index=True) as ms:
        dense = loaded(ms)
        assert isinstance(dense._copy, lean.Lean)
        saved = dense._saved
        assert saved.stat().st_mode & 0o777 == 0o600
    held = saved_copy.load(saved, 384)
    assert isinstance(held, lean.Lean) and held.token is None  # current only once compared with the manifest

    files = sorted(corpus.rglob("*.md"))
    files[1].write_text(files[1].read_text() + "\n\n## Ports\n\nThe quokka relay listens on port 47113.\n")
    with open_ms(corpus, db, model_dir) as writer:
        asyncio.run(writer.index())
    text = "quokka relay port 47113"
    with open_ms(corpus, db, model_dir, dense_index=True) as ms:
        read: list[str] = []
        no_full_read(ms._dense_index(ms._search_store()), read)
        dense, store, copy = lean_of(ms)
        assert read == [str(files[1])]
        assert sorted(copy.ids) == stored_ids(store)
        vec = vector(ms, text)
        hits = dense.search(store, vec, text, top_k=5, source_prefix=None)
        assert hits is not None and "quokka relay" in hits[0]["content"]
        assert_same_ranking(hits, store.search(vec, text, top_k=5))


def test_a_refresh_a_run_overtook_keeps_the_copy_and_is_tried_again(corpus, db, model_dir, past_the_cap, monkeypatch):
    """A run that starts writing while the copy refreshes spoils that refresh: the copy it
    started from stays (Milvus answers meanwhile), never dropped to be read again whole
    (500 s at 1 GB of journals), and the refresh is tried again."""
    monkeypatch.setattr(dense_index, "RETRY_S", 0.05)
    with open_ms(corpus, db, model_dir) as writer, open_ms(corpus, db, model_dir, dense_index=True) as ms:
        asyncio.run(writer.index())
        dense, store, first = lean_of(ms)
        edited = sorted(corpus.rglob("*.md"))[1]
        edited.write_text(edited.read_text() + "\n\n## Ports\n\nThe quokka relay listens on port 47113.\n")
        asyncio.run(writer.index())

        real, calls = lean.load, []

        def overtaken(*args, **kwargs):
            calls.append(1)
            return None if len(calls) == 1 else real(*args, **kwargs)  # as when a run wrote meanwhile

        monkeypatch.setattr(lean, "load", overtaken)
        read: list[str] = []
        no_full_read(dense, read)
        text = "quokka relay port 47113"
        vec = vector(ms, text)
        assert dense.search(store, vec, text, top_k=5, source_prefix=None) is None
        assert dense.wait(60) and dense._copy is first, "the copy was dropped"
        deadline = time.monotonic() + 60
        hits = None
        while hits is None and time.monotonic() < deadline:
            hits = dense.search(store, vec, text, top_k=5, source_prefix=None)
            dense.wait(60)
        assert hits is not None and "quokka relay" in hits[0]["content"]
        assert len(calls) >= 2 and dense._copy is not first
        assert set(read) == {str(edited)}
