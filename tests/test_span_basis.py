"""Span vectors stored in fewer dimensions (:mod:`memsearch_fast.store.spans.basis`).

Real Milvus Lite, the real model, real index runs. The directions are fitted on
a collection's first write and kept in its description; search, the in-memory
copy and the reuse of a moved chunk's spans all see the vectors lifted back
into the model's space. The corpora here are small, so the fit's thresholds
are lowered in-process.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest

from memsearch_fast import MemSearch
from memsearch_fast.index.spans import spans
from memsearch_fast.store.copy import dense_index
from memsearch_fast.store.spans import basis as span_basis
from tests.test_dense_index import (
    QUERIES,
    assert_same_ranking,
    held_spans,
    loaded,
    no_full_read,
    span_rows,
    vector,
)
from tests.test_spans import recorded

DIMS = 48


@pytest.fixture(autouse=True)
def in_a_collection(monkeypatch: pytest.MonkeyPatch) -> None:
    """The basis as a span collection keeps it (a Milvus server's); the span file's
    own basis and refit: tests/test_span_file.py."""
    monkeypatch.setenv("MEMSEARCH_SPAN_STORE", "collection")


@pytest.fixture
def fewer(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(span_basis, "DIMS", DIMS)
    monkeypatch.setattr(span_basis, "FIT_ROWS", 2 * DIMS)


def open_ms(root: Path, db: Path, model_dir: Path, **kw) -> MemSearch:
    return MemSearch([str(root)], embedding_model=str(model_dir), milvus_uri=str(db), **kw)


def stored_rows(ms: MemSearch) -> list[tuple[int, int, bytes]]:
    """(first line, last line, the vector's bytes as stored) of every span row."""
    spans_store = ms.store.spans
    rows = [r for page in spans_store._iterate("", ["span_id", "start_line", "end_line", "embedding"]) for r in page]
    return sorted((r["start_line"], r["end_line"], bytes(r["embedding"][0]), r["span_id"][-2:]) for r in rows)


def field_dim(ms: MemSearch) -> int:
    spans_store = ms.store.spans
    info = ms.store._call("describe", lambda c: c.describe_collection(spans_store.collection))
    return int(next(f["params"]["dim"] for f in info["fields"] if f["name"] == "embedding"))


def test_a_basis_is_fitted_kept_in_a_description_and_read_back(
    corpus: Path, tmp_path: Path, model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with open_ms(corpus, tmp_path / "m.db", model_dir) as ms:
        texts = [line for p in sorted(corpus.rglob("*.md")) for line in p.read_text("utf-8").splitlines() if line][:400]
        vectors = np.asarray(asyncio.run(ms.provider.embed(texts)), dtype=np.float32)
    assert len(vectors) < span_basis.FIT_ROWS and span_basis.fit(vectors) is None  # every dimension kept
    monkeypatch.setattr(span_basis, "FIT_ROWS", 100)
    assert span_basis.fit(vectors[:99], dims=DIMS) is None
    assert span_basis.fit(vectors[:, :DIMS], dims=DIMS) is None  # no fewer dimensions than it has
    basis = span_basis.fit(vectors, dims=DIMS)
    assert basis is not None and basis.rows.shape == (DIMS, vectors.shape[1])
    assert basis.rows @ basis.rows.T == pytest.approx(np.eye(DIMS), abs=1e-5)  # orthonormal
    again = span_basis.read(basis.describe("span vectors of x"))
    assert again is not None and np.array_equal(again.rows, basis.rows)  # what the writer used, the reader gets
    assert span_basis.read("span vectors of x") is None and span_basis.read("x\nbasis:not base64!") is None
    codes = basis.project(vectors[:50])
    assert basis.project(basis.lift(codes)) == pytest.approx(codes, abs=1e-5)  # a lifted vector stores as it was
    # The directions of most energy keep most of a sentence's vector, not a random share of it.
    kept = [basis.kept(v) for v in vectors[200:260]]
    assert min(kept) > 0.6 and float(np.mean(kept)) > 0.8


@pytest.mark.slow(reason="indexes a corpus with the real model and fits span vectors in fewer dimensions")
def test_span_vectors_in_fewer_dimensions_are_searched_copied_and_reused(
    corpus: Path, db: Path, model_dir: Path, fewer: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(dense_index.ENV_MIN_ROWS, "0")
    with open_ms(corpus, db, model_dir) as ms:
        asyncio.run(ms.index())
        assert field_dim(ms) == DIMS and ms.store.spans.basis is not None
    with open_ms(corpus, db, model_dir, dense_index=True) as ms:
        basis = ms.store.spans.basis  # read back from the description by a new process
        assert basis is not None and basis.dims == DIMS
        dense = loaded(ms)
        store = ms._search_store()
        ranks_as_milvus(ms, dense)  # the copy holds the codes in the basis and ranks as Milvus does
        # A span's score is its lifted vector's cosine with the whole question, from Milvus too.
        question = QUERIES[0]
        q = np.asarray(vector(ms, question), dtype=np.float32)
        hit = next(h for h in store.search(q.tolist(), "", top_k=10, explain=True) if "span" in h["explain"])
        row = store.rows_for_ids([hit["chunk_hash"]], ["content", "heading", "start_line"])[0]
        text = next(
            s.text
            for s in spans(row["content"], row["heading"], int(row["start_line"]))
            if s.start_line == hit["explain"]["span"]["start_line"]
        )
        v = basis.lift(basis.project(np.asarray(asyncio.run(ms.provider.embed([text]))[0], dtype=np.float32)))
        cosine = float(v @ q / np.linalg.norm(v) / np.linalg.norm(q))
        assert hit["explain"]["span"]["score"] == pytest.approx(cosine, abs=3e-3)  # float16 codes

    # A moved file's chunks take their spans' stored rows as they were: nothing embedded again.
    with open_ms(corpus, db, model_dir) as ms:
        before = stored_rows(ms)
        files = sorted(corpus.rglob("*.md"))
        moved = files[2]
        target = moved.with_name("moved-" + moved.name)
        moved.rename(target)
        sent = recorded(ms)
        asyncio.run(ms.index())
        assert sent == []
        after = stored_rows(ms)
        assert after == before  # the moved chunks' rows hold the codes they held
        assert field_dim(ms) == DIMS

        # An edited chunk: its new line is embedded, its other spans take their stored vectors.
        edited = files[3]
        edited.write_text(edited.read_text("utf-8") + "\n\n## Relay\n\nThe quokka relay listens on port 47113.\n")
        asyncio.run(ms.index())
        assert sent and all("quokka" in t or "Relay" in t for t in sent)
        hits = asyncio.run(ms.search("which port does the quokka relay listen on", top_k=3))
        assert "47113" in hits[0]["content"]


@pytest.mark.slow(reason="indexes a corpus with the real model and fits span vectors in fewer dimensions")
def test_a_first_write_too_small_to_fit_on_keeps_every_dimension(
    corpus: Path, tmp_path: Path, model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(span_basis, "FIT_ROWS", 10**9)
    with open_ms(corpus, tmp_path / "m.db", model_dir) as ms:
        asyncio.run(ms.index())
        assert ms.store.spans.basis is None and field_dim(ms) == ms.store.dimension
        hits = asyncio.run(ms.search(QUERIES[1], top_k=3, explain=True))
        assert hits


@pytest.mark.slow(reason="indexes a corpus with the real model and fits span vectors in fewer dimensions")
def test_a_long_lived_process_searches_on_when_another_makes_the_collection_anew_in_fewer_dimensions(
    corpus: Path, db: Path, model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(span_basis, "FIT_ROWS", 10**9)
    question = QUERIES[0]
    with open_ms(corpus, db, model_dir) as ms:
        asyncio.run(ms.index())
        assert ms.store.spans.basis is None
        q = vector(ms, question)
        assert ms.store.search(q, question, top_k=3)
        monkeypatch.setattr(span_basis, "DIMS", DIMS)
        monkeypatch.setattr(span_basis, "FIT_ROWS", 2 * DIMS)
        with open_ms(corpus, db, model_dir) as other:  # reset, then index: a basis now
            assert other.drop()
            asyncio.run(other.index())
            assert other.store.spans.basis is not None
        after = ms.store.search(q, question, top_k=3, explain=True)  # the 384-dimension question is projected
        assert ms.store.spans.basis is not None and ms.store.spans.basis.dims == DIMS
    with open_ms(corpus, db, model_dir) as fresh:  # what a process started now answers
        assert after == fresh.store.search(q, question, top_k=3, explain=True)


def spanned(ms: MemSearch) -> set[str]:
    """The stored chunks long enough to have spans."""
    ids = [cid for cid, _ in ms.store.iter_ids_by_source(None)]
    rows = ms.store.rows_for_ids(ids, ["content", "heading", "start_line"])
    return {r["chunk_hash"] for r in rows if spans(r["content"], r["heading"], int(r["start_line"]))}


@pytest.mark.slow(reason="indexes a corpus with the real model and fits span vectors in fewer dimensions")
def test_a_collection_of_every_dimension_is_stored_again_in_fewer_once_it_has_grown(
    corpus: Path, db: Path, model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A collection whose first write was too small to fit on (a new project's first
    journal), or one made before, keeps every dimension until it holds enough rows;
    the next run that writes stores them again in fewer, without embedding them. A
    run that fails halfway leaves what the next run repairs."""
    from memsearch_fast.store.spans.collection import SpanStore

    monkeypatch.setattr(span_basis, "DIMS", DIMS)
    monkeypatch.setattr(span_basis, "FIT_ROWS", 10**9)
    files = sorted(corpus.rglob("*.md"))
    with open_ms(corpus, db, model_dir) as ms:
        asyncio.run(ms.index())
        assert ms.store.spans.basis is None
        before = {r["span_id"] for page in ms.store.spans.iter_rows() for r in page}
        monkeypatch.setattr(span_basis, "FIT_ROWS", 2 * DIMS)
        files[0].write_text(files[0].read_text("utf-8") + "\n\n## Relay\n\nThe quokka relay listens on port 47113.\n")
        sent = recorded(ms)
        report = asyncio.run(ms.index_with_report())
        assert report.spans is not None and report.spans.refitted
        assert field_dim(ms) == DIMS and ms.store.spans.basis is not None
        assert sent and all("quokka" in t or "Relay" in t for t in sent)  # the stored vectors not embedded again
        after = {r["span_id"] for page in ms.store.spans.iter_rows() for r in page}
        stored = {cid for cid, _ in ms.store.iter_ids_by_source(None)}
        assert not {i.rpartition(":")[0] for i in before - after} & stored  # every row of a stored chunk, kept
        assert ms.store.spans.chunk_hashes() == spanned(ms)
        hits = asyncio.run(ms.search("which port does the quokka relay listen on", top_k=3, explain=True))
        assert "47113" in hits[0]["content"]
        # Written again in the same basis from now on.
        files[1].write_text(files[1].read_text("utf-8") + "\n\nThe otter cache holds 512 entries.\n")
        report = asyncio.run(ms.index_with_report())
        assert report.spans is not None and not report.spans.refitted and field_dim(ms) == DIMS

    # A run that fails after the old rows were dropped: the next one gives every chunk its rows.
    other = db.with_name("other.db")
    monkeypatch.setattr(span_basis, "FIT_ROWS", 10**9)
    with open_ms(corpus, other, model_dir) as ms:
        asyncio.run(ms.index())
        assert ms.store.spans.basis is None
    monkeypatch.setattr(span_basis, "FIT_ROWS", 2 * DIMS)
    real_insert = SpanStore.insert

    def failing(self: SpanStore, rows: list[dict]) -> int:
        if self.basis is not None:
            raise RuntimeError("killed")
        return real_insert(self, rows)

    files[2].write_text(files[2].read_text("utf-8") + "\n\nThe heron queue drains every 90 seconds.\n")
    with open_ms(corpus, other, model_dir) as ms:
        monkeypatch.setattr(SpanStore, "insert", failing)
        with pytest.raises(Exception, match="killed"):
            asyncio.run(ms.index())
        monkeypatch.setattr(SpanStore, "insert", real_insert)
        assert ms.store.spans.count() == 0
    with open_ms(corpus, other, model_dir) as ms:
        report = asyncio.run(ms.index_with_report())
        assert report.spans is not None and report.spans.chunks > 0
        assert ms.store.spans.basis is not None and ms.store.spans.chunk_hashes() == spanned(ms)


def held_in_basis(dense: dense_index.DenseIndex) -> None:
    """The copy holds its span codes in the basis, each chunk's own vector apart at full width."""
    copy = dense._copy
    assert copy is not None and copy.spans is not None
    sp = copy.spans
    assert sp.width == DIMS and len(sp.codes) == DIMS * len(sp.index) and sp.directions is not None
    assert sp.own is not None and sp.own.dim == 384 and len(sp.own.codes) == 384 * len(copy.ids)


def ranks_as_milvus(ms: MemSearch, dense: dense_index.DenseIndex) -> None:
    store = ms._search_store()
    assert span_rows(store) and held_spans(dense) == span_rows(store)
    for text in QUERIES:
        vec = vector(ms, text)
        for k in (1, 5, 10):
            ours = dense.search(store, vec, text, top_k=k, source_prefix=None)
            assert ours is not None
            assert_same_ranking(ours, store.search(vec, text, top_k=k, source_prefix=None))


def refused_saved_files(path: Path) -> None:
    """The saved file as written parses; each way of spoiling it is refused (a full load instead)."""
    import json

    from memsearch_fast.store.copy import saved as saved_copy

    arrays = saved_copy._arrays(path)
    assert arrays is not None
    parsed = saved_copy._parse(arrays, 384)
    assert parsed is not None and parsed.spans is not None and parsed.spans.own is not None
    assert parsed.spans.directions is None  # taken from the collection when it is refreshed

    def meta(**changes: object) -> np.ndarray:
        m = json.loads(arrays["meta"].tobytes().decode("utf-8"))
        m.update(changes)
        return np.frombuffer(json.dumps(m).encode("utf-8"), np.uint8)

    spoiled = [
        {"meta": meta(format=1)},  # written before span codes were held in a basis
        {"meta": meta(span_width=384)},
        {"meta": meta(span_basis="")},  # codes in a basis it does not name
        {"own_codes": arrays["own_codes"][:-1]},
        {"own_scales": arrays["own_scales"][:-1]},
        {"span_codes": arrays["span_codes"][:-DIMS]},
        {"span_index": np.zeros_like(arrays["span_index"])},  # an own row among the spans
    ]
    for change in spoiled:
        assert saved_copy._parse({**arrays, **change}, 384) is None, list(change)
    without_own = {k: v for k, v in arrays.items() if not k.startswith("own_")}
    assert saved_copy._parse(without_own, 384) is None  # codes of the basis's width grouped as if whole


@pytest.mark.slow(reason="indexes a corpus with the real model and fits span vectors in fewer dimensions")
def test_a_copy_holds_span_codes_in_the_basis_and_starts_again_from_its_saved_file(
    corpus: Path, db: Path, model_dir: Path, fewer: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(dense_index.ENV_MIN_ROWS, "0")
    with open_ms(corpus, db, model_dir) as writer:
        asyncio.run(writer.index())
    with open_ms(corpus, db, model_dir, dense_index=True) as ms:
        dense = loaded(ms)
        held_in_basis(dense)
        ranks_as_milvus(ms, dense)
        saved = dense._saved
        assert saved.exists()
    refused_saved_files(saved)

    files = sorted(corpus.rglob("*.md"))
    files[1].write_text(files[1].read_text() + "\n\n## Ports\n\nThe quokka relay listens on port 47113.\n")
    with open_ms(corpus, db, model_dir) as writer:
        asyncio.run(writer.index())
    for changed in ([str(files[1])], []):  # the edited file read again; then nothing read at all
        with open_ms(corpus, db, model_dir, dense_index=True) as ms:
            read: list[str] = []
            no_full_read(ms._dense_index(ms._search_store()), read)
            dense = loaded(ms)
            assert read == changed
            held_in_basis(dense)  # the saved codes kept, the basis taken from the collection
            ranks_as_milvus(ms, dense)
            hits = asyncio.run(ms.search("which port does the quokka relay listen on", top_k=3))
            assert "47113" in hits[0]["content"]


@pytest.mark.slow(reason="indexes a corpus with the real model and fits span vectors in fewer dimensions")
def test_a_copy_is_read_again_whole_once_its_collection_is_stored_in_fewer_dimensions(
    corpus: Path, db: Path, model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(dense_index.ENV_MIN_ROWS, "0")
    monkeypatch.setattr(span_basis, "DIMS", DIMS)
    monkeypatch.setattr(span_basis, "FIT_ROWS", 10**9)
    with open_ms(corpus, db, model_dir) as writer, open_ms(corpus, db, model_dir, dense_index=True) as ms:
        asyncio.run(writer.index())
        dense = loaded(ms)
        assert dense._copy is not None and dense._copy.spans is not None and dense._copy.spans.basis == ""
        monkeypatch.setattr(span_basis, "FIT_ROWS", 2 * DIMS)
        edited = sorted(corpus.rglob("*.md"))[0]
        edited.write_text(edited.read_text("utf-8") + "\n\nThe quokka relay listens on port 47113.\n")
        report = asyncio.run(writer.index_with_report())
        assert report.spans is not None and report.spans.refitted
        basis = writer.store.spans.basis
        assert basis is not None
        store = ms._search_store()
        text = QUERIES[1]
        vec = vector(ms, text)
        assert dense.search(store, vec, text, top_k=5, source_prefix=None) is None  # a run wrote: Milvus answers
        assert dense.wait(60)
        assert dense._copy is not None and dense._copy.spans is not None
        assert dense._copy.spans.basis == basis.digest  # every span read again, held in the new basis
        held_in_basis(dense)
        assert held_spans(dense) == span_rows(store)
        ours = dense.search(store, vec, text, top_k=5, source_prefix=None)
        assert ours is not None
        assert_same_ranking(ours, store.search(vec, text, top_k=5, source_prefix=None))


@pytest.mark.slow(reason="indexes a corpus with the real model and fits span vectors in fewer dimensions")
def test_a_server_that_keeps_no_basis_gets_every_dimension_and_no_refit(
    corpus: Path, tmp_path: Path, model_dir: Path, fewer: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Milvus may cap a description at 1 KB, refusing it or (were it to) cutting it:
    the collection is made with every dimension and marked, so no later run tries
    again."""
    real = span_basis.Basis.describe
    monkeypatch.setattr(span_basis.Basis, "describe", lambda self, text: real(self, text)[:1024])  # cut
    with open_ms(corpus, tmp_path / "m.db", model_dir) as ms:
        asyncio.run(ms.index())
        spans_store = ms.store.spans
        assert spans_store.basis is None and field_dim(ms) == ms.store.dimension and spans_store._refused
        assert spans_store.count() >= span_basis.FIT_ROWS
        edited = sorted(corpus.rglob("*.md"))[0]
        edited.write_text(edited.read_text("utf-8") + "\n\nThe quokka relay listens on port 47113.\n")
        report = asyncio.run(ms.index_with_report())
        assert report.spans is not None and not report.spans.refitted
        hits = asyncio.run(ms.search("which port does the quokka relay listen on", top_k=3))
        assert "47113" in hits[0]["content"]
