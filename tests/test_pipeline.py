"""The index pipeline on real files, real Milvus Lite and the real model."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from memsearch_fast import MemSearch, chunk_files, chunk_markdown
from memsearch_fast.index import run_index
from memsearch_fast.index.scan import scan_paths
from memsearch_fast.store import MilvusStore


@pytest.fixture(scope="module")
def provider(model_dir: Path):
    from memsearch_fast.embeddings import get_provider

    p = get_provider("onnx", model=str(model_dir), workers=1)
    yield p
    p.close()


class CountingProvider:
    """The real provider, counting the texts it is asked to embed."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.model_name = inner.model_name
        self.dimension = inner.dimension
        self.batch_size = inner.batch_size
        self.texts: list[str] = []

    async def embed(self, texts: list[str]) -> list[list[float]]:
        self.texts.extend(texts)
        return await self.inner.embed(texts)

    async def embed_query(self, text: str) -> list[float]:
        return await self.inner.embed_query(text)


@pytest.fixture
def store(tmp_path: Path, provider):
    s = MilvusStore(str(tmp_path / "m.db"), dimension=provider.dimension)
    yield s
    s.close()


def index(store, provider, root: Path, **kw):
    counting = CountingProvider(provider)
    files = scan_paths([root])
    report = asyncio.run(run_index(store, counting, files, cleanup_roots=[str(root.resolve())], **kw))
    return report, counting


def rows_by_source(store) -> dict[str, int]:
    out: dict[str, int] = {}
    for _, source in store.iter_ids_by_source():
        out[source] = out.get(source, 0) + 1
    return out


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


LONG = "\n\n".join(
    f"## Part {i}\n" + " ".join(f"Paragraph {i} explains detail {j} of the storage engine." for j in range(12))
    for i in range(20)
)


def test_index_search_and_noop_reindex(
    tmp_path: Path, store, provider, sample_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEMSEARCH_SPANS", "0")  # the chunk pipeline's embeddings alone (spans: test_spans.py)
    root = tmp_path / "notes"
    import shutil

    shutil.copytree(sample_dir, root)
    report, counting = index(store, provider, root)
    assert report.failed == [] and report.files == 3 and report.changed == 3
    assert report.embedded == report.chunks == store.count() == len(counting.texts) > 0
    # The model sees chunk text without the HTML-comment anchors.
    assert not any("<!--" in t for t in counting.texts)

    vector = asyncio.run(provider.embed_query("thumbnail benchmark with libvips and Pillow"))
    hits = store.search(vector, "thumbnail benchmark with libvips and Pillow", top_k=3)
    assert hits[0]["source"].endswith("2026-11-21.md") and "libvips" in hits[0]["content"]

    again, counting = index(store, provider, root)
    assert again.embedded == 0 and again.reused == 0 and again.deleted == 0 and counting.texts == []
    assert again.unchanged == 3 and store.count() == report.chunks


@pytest.mark.slow(reason="indexes with the real model on a database of its own, run after run")
def test_edit_insert_delete_and_line_shift_reuse(tmp_path: Path, store, provider) -> None:
    root = tmp_path / "notes"
    long_file = write(root / "long.md", LONG)
    write(root / "other.md", "# Other\nunrelated text about gardening\n")
    index(store, provider, root, max_chunk_size=400)
    before = rows_by_source(store)
    assert before[str(long_file)] >= 20

    # One line inserted at the top shifts every line number: every id changes,
    # but only the chunks whose text changed are embedded again.
    long_file.write_text("# Title line added on top\n" + LONG, encoding="utf-8")
    shifted, counting = index(store, provider, root, max_chunk_size=400)
    assert shifted.changed == 1 and shifted.unchanged == 1
    assert len(counting.texts) <= 2, counting.texts
    assert shifted.reused >= before[str(long_file)] - 2
    assert rows_by_source(store)[str(long_file)] == len(
        chunk_markdown(long_file.read_text(), str(long_file), max_chunk_size=400)
    )

    # Editing one paragraph re-embeds that chunk only.
    text = long_file.read_text().replace("Paragraph 7 explains detail 3", "Paragraph 7 now explains the WAL format")
    long_file.write_text(text, encoding="utf-8")
    edited, counting = index(store, provider, root, max_chunk_size=400)
    assert 1 <= len(counting.texts) <= 2 and any("WAL format" in t for t in counting.texts)
    assert edited.deleted >= 1

    # A deleted file's rows go away; the other file is untouched.
    (root / "other.md").unlink()
    removed, counting = index(store, provider, root, max_chunk_size=400)
    assert removed.sources_removed == 1 and counting.texts == []
    assert str(root / "other.md") not in rows_by_source(store)


def test_force_reembeds_everything(tmp_path: Path, store, provider) -> None:
    root = tmp_path / "notes"
    write(root / "a.md", "# A\nalpha text here\n\n# B\nbeta text here\n")
    index(store, provider, root)
    forced, counting = index(store, provider, root, force=True)
    assert forced.embedded == 2 == len(counting.texts) and store.count() == 2


def test_unreadable_file_does_not_stop_the_run(tmp_path: Path, store, provider) -> None:
    root = tmp_path / "notes"
    write(root / "good.md", "# Good\nthis file is fine\n")
    write(root / "bad.md", "# Bad\n").unlink()
    (root / "bad.md").mkdir()  # a directory named like a file cannot be read
    files = [str(root / "good.md"), str(root / "bad.md")]
    report = asyncio.run(run_index(store, provider, files))
    assert [p for p, _ in report.failed] == [str(root / "bad.md")]
    assert report.embedded == 1 and store.count() == 1


def test_file_that_becomes_unreadable_keeps_its_rows(tmp_path: Path, store, provider) -> None:
    root = tmp_path / "notes"
    f = write(root / "a.md", "# A\nkeep me indexed\n")
    index(store, provider, root)
    files = [str(f)]
    f.unlink()
    f.mkdir()
    report = asyncio.run(run_index(store, provider, files, cleanup_roots=[str(root)]))
    assert report.failed and store.count() == 1


def test_invalid_utf8_is_indexed_and_reported(tmp_path: Path, store, provider) -> None:
    root = tmp_path / "notes"
    root.mkdir()
    (root / "log.md").write_bytes(b"# Log\nbuild output \xff\xfe garbage then the fix worked\n")
    report, _ = index(store, provider, root)
    assert report.invalid_utf8 == [str(root / "log.md")] and report.embedded == 1


@pytest.mark.parametrize(
    "name", ['quote"d.md', "back\\slash.md", "it's.md", "new\nline.md", "100%_done.md", "空 白.md"]
)
def test_hostile_file_names_round_trip(tmp_path: Path, store, provider, name: str) -> None:
    root = tmp_path / "notes"
    write(root / name, "# Hostile\nthe file name is hostile but the text is plain\n")
    write(root / "plain.md", "# Plain\nan ordinary file\n")
    first, _ = index(store, provider, root)
    assert first.failed == [] and store.count() == 2
    again, counting = index(store, provider, root)
    assert counting.texts == [] and again.unchanged == 2
    (root / name).unlink()
    removed, _ = index(store, provider, root)
    assert removed.sources_removed == 1 and store.count() == 1


@pytest.mark.slow(reason="indexes with the real model on a database of its own, run after run")
def test_explicit_file_paths_prune_nothing_else(tmp_path: Path, provider, model_dir: Path) -> None:
    root = tmp_path / "notes"
    a = write(root / "a.md", "# A\nalpha facts\n")
    write(root / "b.md", "# B\nbeta facts\n")
    uri = str(tmp_path / "m.db")
    with MemSearch([root], embedding_model=str(model_dir), milvus_uri=uri) as ms:
        assert asyncio.run(ms.index()) == 2
        a.write_text("# A\nalpha facts, revised\n")
        assert asyncio.run(ms.index_file(a)) == 1
        assert rows_by_source(ms.store) == {str(a): 1, str(root / "b.md"): 1}
    with MemSearch([a], embedding_model=str(model_dir), milvus_uri=uri) as ms:
        report = asyncio.run(ms.index_with_report())
        assert report.sources_removed == 0 and ms.store.count() == 2


@pytest.mark.slow(reason="interrupts a real index run, then runs it again")
def test_interrupted_run_is_repaired_by_the_next(
    tmp_path: Path, model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.helpers.corpus import write_corpus

    monkeypatch.setenv("MEMSEARCH_SPANS", "0")  # the chunk rows are what an interrupt may leave half written

    root = tmp_path / "corpus"
    write_corpus(root, total_bytes=250_000, seed=5)
    uri = str(tmp_path / "m.db")
    # The real model, paced (0.3 s per batch) so that SIGINT lands mid-run on
    # any machine; the child reports each written batch on stdout. A child of a
    # script's background job (a CI runner's, `bash .ci/run &`) starts with
    # SIGINT ignored, and asyncio.run then leaves it so: the child takes Ctrl-C back.
    code = (
        "import asyncio, signal\n"
        "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
        "from memsearch_fast.embeddings import get_provider\n"
        "from memsearch_fast.index import run_index\n"
        "from memsearch_fast.index.scan import scan_paths\n"
        "from memsearch_fast.store import MilvusStore\n"
        f"p = get_provider('onnx', model={str(model_dir)!r}, workers=1)\n"
        "inner = p.embed\n"
        "async def paced(texts):\n"
        "    await asyncio.sleep(0.3)\n"
        "    out = await inner(texts)\n"
        "    print('batch', len(texts), flush=True)\n"
        "    return out\n"
        "p.embed = paced\n"
        f"store = MilvusStore({uri!r}, dimension=p.dimension)\n"
        f"asyncio.run(run_index(store, p, scan_paths([{str(root)!r}]), cleanup_roots=[{str(root)!r}]))\n"
        "print('done', flush=True)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    batches = 0
    for line in proc.stdout:
        batches += line.startswith("batch")
        if batches == 1:
            break
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert "done" not in out and proc.returncode != 0, (out, err)

    with MemSearch([root], embedding_model=str(model_dir), milvus_uri=uri) as ms:
        report = asyncio.run(ms.index_with_report())
        assert report.failed == []
        expected = sum(len(fc.chunks) for batch in chunk_files(scan_paths([root])) for fc in batch)
        assert ms.store.count() == expected
        # What the interrupted run embedded was kept and not embedded again.
        assert 0 < report.embedded < expected
        again = asyncio.run(ms.index_with_report())
        assert again.embedded == 0 and again.reused == 0


def test_vectors_of_another_model_are_never_reused(tmp_path: Path, store, provider) -> None:
    root = tmp_path / "notes"
    f = write(root / "a.md", "# A\nalpha text\n\n# B\nbeta text\n")
    other = CountingProvider(provider)
    other.model_name = "another-model"
    asyncio.run(run_index(store, other, scan_paths([root]), cleanup_roots=[str(root)]))
    f.write_text("# New\nfirst\n\n# A\nalpha text\n\n# B\nbeta text\n")
    report, counting = index(store, provider, root)
    assert report.reused == 0 and len(counting.texts) == 3


def test_unlisted_directories_are_not_pruned(tmp_path: Path, store, provider) -> None:
    root = tmp_path / "notes"
    write(root / "sub" / "a.md", "# A\nalpha text\n")
    write(root / "b.md", "# B\nbeta text\n")
    index(store, provider, root)
    # The scan could not list "sub": its file is unseen but must be kept.
    files = [str(root / "b.md")]
    report = asyncio.run(run_index(store, provider, files, cleanup_roots=[str(root)], unlisted=[str(root / "sub")]))
    assert report.sources_removed == 0 and store.count() == 2


def test_chunk_size_is_bounded_to_fit_the_store(model_dir: Path) -> None:
    with pytest.raises(ValueError, match="max_chunk_size"):
        MemSearch([], embedding_model=str(model_dir), max_chunk_size=100_000)


def _pending(n: int) -> list:
    from memsearch_fast import compute_chunk_id
    from memsearch_fast.index.embed import Pending

    text = "\n\n".join(f"## Note {i}\nFact number {i} about the deploy pipeline." for i in range(n))
    chunks = chunk_markdown(text, "/notes/facts.md")
    assert len(chunks) == n
    vec = [1.0] + [0.0] * 383
    return [Pending(compute_chunk_id(c.source, c.start_line, c.end_line, c.content_hash, "m"), c, vec) for c in chunks]


def test_overlapping_upserts_all_land(tmp_path: Path) -> None:
    from memsearch_fast.index.upsert import UpsertStage

    items = _pending(100)
    with MilvusStore(str(tmp_path / "m.db"), dimension=384) as store:

        async def run() -> UpsertStage:
            stage = UpsertStage(store, batch_size=7, in_flight=4)
            for i in range(0, len(items), 9):
                await stage.add(items[i : i + 9])
            await stage.finish()
            await stage.flush()
            return stage

        stage = asyncio.run(run())
        assert stage.upserted == 100 and store.count() == 100
        assert {h for h, _ in store.iter_ids_by_source()} == {p.chunk_id for p in items}


def test_failed_write_is_raised_and_what_landed_is_kept(tmp_path: Path) -> None:
    from memsearch_fast.index.upsert import UpsertStage
    from memsearch_fast.store import StoreError

    class FailingThird:
        """The real store, except that its third upsert call is refused."""

        def __init__(self, inner: MilvusStore) -> None:
            self.inner, self.calls = inner, 0

        def upsert(self, rows):
            self.calls += 1
            if self.calls == 3:
                raise StoreError("Milvus upsert failed: refused")
            return self.inner.upsert(rows)

        def flush(self) -> None:
            self.inner.flush()

    items = _pending(50)
    with MilvusStore(str(tmp_path / "m.db"), dimension=384) as store:
        failing = FailingThird(store)

        async def run() -> None:
            stage = UpsertStage(failing, batch_size=10, in_flight=2)
            try:
                await stage.add(items)
                await stage.finish()
            finally:
                await stage.flush()

        with pytest.raises(StoreError, match="refused"):
            asyncio.run(run())
        # Every call but the refused one wrote its 10 rows and was flushed.
        assert store.count() == 10 * (failing.calls - 1) and failing.calls >= 3


class WriteSpy:
    """The real store, counting its insert and upsert calls; ``lose_ack`` makes
    that insert call land and then fail, as when the reply is lost."""

    def __init__(self, inner: MilvusStore, lose_ack: int = 0) -> None:
        self.inner, self.lose_ack = inner, lose_ack
        self.inserts = self.upserts = 0

    def insert(self, rows):
        from memsearch_fast.store import StoreError

        self.inserts += 1
        n = self.inner.insert(rows)
        if self.inserts == self.lose_ack:
            raise StoreError("Milvus insert failed: connection reset")
        return n

    def upsert(self, rows):
        self.upserts += 1
        return self.inner.upsert(rows)

    def __getattr__(self, name: str):
        return getattr(self.inner, name)


def test_fresh_rows_are_inserted_and_a_lost_reply_is_settled_by_upsert(tmp_path: Path) -> None:
    from memsearch_fast.index.upsert import UpsertStage

    items = _pending(50)
    with MilvusStore(str(tmp_path / "m.db"), dimension=384) as store:
        spy = WriteSpy(store, lose_ack=2)

        async def run() -> UpsertStage:
            stage = UpsertStage(spy, batch_size=10, in_flight=1, fresh=True)
            await stage.add(items)
            await stage.finish()
            await stage.flush()
            return stage

        stage = asyncio.run(run())
        assert (spy.inserts, spy.upserts) == (5, 1) and stage.upserted == 50
        # The batch that landed before its error is stored once, not twice.
        assert store.count() == 50
        assert sorted(h for h, _ in store.iter_ids_by_source()) == sorted(p.chunk_id for p in items)


@pytest.mark.slow(reason="indexes with the real model on a database of its own, run after run")
def test_runs_under_the_writer_lock_insert_new_rows(tmp_path: Path, provider) -> None:
    from memsearch_fast.store.manifest import Manifest

    root = tmp_path / "notes"
    write(root / "a.md", LONG)
    write(root / "b.md", "# B\nshort note about the cache.\n")
    uri = str(tmp_path / "m.db")
    with MilvusStore(uri, dimension=provider.dimension) as inner:
        spy = WriteSpy(inner)
        manifest = Manifest.for_store(uri, inner.collection)
        first, _ = index(spy, provider, root, manifest=manifest)
        assert spy.inserts > 0 and spy.upserts == 0 and inner.count() == first.chunks
        write(root / "b.md", "# B\nshort note about the cache, now with a TTL.\n")
        index(spy, provider, root, manifest=manifest)
        assert spy.upserts == 0
        # --force writes ids that are stored already: those are upserted.
        inserts = spy.inserts
        forced, _ = index(spy, provider, root, manifest=manifest, force=True)
        assert spy.inserts == inserts and spy.upserts > 0
        assert inner.count() == forced.chunks
        # Without the lock (no manifest) nothing is known about other writers: upsert.
        write(root / "c.md", "# C\nthird note.\n")
        index(spy, provider, root)
        assert spy.inserts == inserts
        ids = [h for h, _ in inner.iter_ids_by_source()]
        assert len(ids) == len(set(ids)) == inner.count()


@pytest.mark.slow(reason="indexes with the real model on a database of its own, run after run")
def test_a_new_database_opens_while_the_first_batches_embed(tmp_path: Path, model_dir: Path, monkeypatch) -> None:
    """Under the writer lock, a database the run creates has nothing to read:
    the first batches embed while the store opens (here an engine that takes
    2 s to start); a database that exists is opened first, as before."""
    import milvus_lite.server

    from memsearch_fast.lite import settings as lite_settings

    real = Path(milvus_lite.server.BIN_PATH)
    slow = tmp_path / "bin"
    slow.mkdir()
    engine = f'LD_LIBRARY_PATH="{real}:$LD_LIBRARY_PATH" exec "{real}/milvus" "$@"'
    (slow / "milvus").write_text(f"#!/bin/sh\nsleep 2\n{engine}\n")
    (slow / "milvus").chmod(0o755)
    monkeypatch.setenv(lite_settings.ENV_MODE, "embedded")
    monkeypatch.setenv("BIN_PATH", str(slow))
    root = tmp_path / "notes"
    write(root / "a.md", LONG)
    write(root / "b.md", "# B\nshort note about the cache.\n")
    uri = str(tmp_path / "db" / "m.db")
    with MemSearch([root], embedding_model=str(model_dir), milvus_uri=uri) as ms:
        store_open: list[bool] = []
        inner = ms.provider.embed

        async def embed(texts: list[str]) -> list[list[float]]:
            store_open.append(ms._store is not None)
            return await inner(texts)

        ms.provider.embed = embed
        with ms._manifest().writer():
            report = asyncio.run(ms.index_with_report())
        assert store_open[0] is False and report.failed == []
        expected = sum(len(fc.chunks) for batch in chunk_files(scan_paths([root])) for fc in batch)
        assert report.chunks == expected == ms.store.count() == report.embedded + report.reused
        assert [h["source"] for h in asyncio.run(ms.search("cache note", top_k=1))] == [str((root / "b.md").resolve())]
        # The manifest it wrote is trusted by the next run (files written within
        # the last 2 s are read again, but nothing changed).
        again = asyncio.run(ms.index_with_report())
        assert again.manifest and again.changed == 0 and again.embedded == again.reused == 0

        store_open.clear()
        ms.close_store()
        write(root / "c.md", "# C\nthird note about the queue.\n")
        with ms._manifest().writer():
            third = asyncio.run(ms.index_with_report())
        assert store_open == [True] and third.embedded == 1 and ms.store.count() == expected + 1


def test_dedup_diffs_packed_and_foreign_ids(tmp_path: Path) -> None:
    """Stored ids are held packed; ids another tool wrote (not SHA-256 hex) still diff exactly."""
    from memsearch_fast.index.dedup import Dedup

    path = write(tmp_path / "a.md", "# A\nalpha text here\n\n# B\nbeta text here\n")
    (fc,) = next(iter(chunk_files([str(path)])))
    ids = [c.chunk_id("m") for c in fc.chunks]
    assert len(ids) == 2
    packed = Dedup("m", iter([(cid, fc.path) for cid in ids]))
    assert packed.odd == {} and len(packed.by_source[fc.path]) == 8 * len(ids)
    assert packed.stored_ids(fc.path) == set(ids) and packed.plan(fc).new == []
    stored = [(ids[0], fc.path), ("legacy-id", fc.path), (ids[1].upper(), fc.path), (ids[1], "gone.md")]
    dedup = Dedup("m", iter(stored))
    assert len(dedup.by_source[fc.path]) == 8 and dedup.odd[fc.path] == ["legacy-id", ids[1].upper()]
    assert dedup.stored_ids(fc.path) == {ids[0], "legacy-id", ids[1].upper()}
    plan = dedup.plan(fc)
    assert [cid for cid, _ in plan.new] == [ids[1]] and plan.had_rows
    assert plan.stale == {"legacy-id", ids[1].upper()}
    assert Dedup("m", iter(stored)).orphans([str(tmp_path)]) == [fc.path]  # not seen yet
    assert dedup.orphans([str(tmp_path)]) == [] and sorted(dedup.by_source) == ["gone.md"]


@pytest.mark.slow(reason="indexes with the real model on a database of its own, run after run")
def test_drop_waits_for_a_running_writer(tmp_path: Path, model_dir: Path) -> None:
    """The API gives the CLI's guarantee: a drop never cuts a running index of its collection."""
    import threading

    from memsearch_fast.store.manifest import Manifest

    root = tmp_path / "notes"
    root.mkdir()
    (root / "a.md").write_text("# A\nalpha\n", encoding="utf-8")
    uri = str(tmp_path / "m.db")
    with MemSearch([str(root)], embedding_model=str(model_dir), milvus_uri=uri) as ms:
        asyncio.run(ms.index())
        held, release = threading.Event(), threading.Event()

        def writer() -> None:
            with Manifest.for_store(ms.uri, ms.collection).writer():
                held.set()
                release.wait(30)

        other = threading.Thread(target=writer)
        other.start()
        held.wait(30)
        heard: list[str] = []
        threading.Timer(1.0, release.set).start()
        started = time.monotonic()
        assert ms.drop(on_wait=heard.append) is True
        waited = time.monotonic() - started
        other.join(30)
        assert heard and waited >= 0.9, (heard, waited)
        assert not ms.collection_exists()
