"""The manifest and content-addressed vectors, on real files, real Milvus Lite and the real model.

"Equal to a clean index" means: the stored (id, source) pairs are exactly the
ids the chunker gives the tree now (what a fresh index of it stores), and a
run after it has nothing to do.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from memsearch_fast import chunk_files
from memsearch_fast.index import run_index
from memsearch_fast.index.scan import scan_paths
from memsearch_fast.store import MilvusStore
from memsearch_fast.store.manifest import Manifest, manifest_path
from memsearch_fast.store.schema import ROW_FIELDS


@pytest.fixture(scope="module")
def provider(model_dir: Path):
    from memsearch_fast.embeddings import get_provider

    p = get_provider("onnx", model=str(model_dir), workers=1)
    yield p
    p.close()


class CountingProvider:
    """The real provider, recording the texts it is asked to embed."""

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


class RecordingStore(MilvusStore):
    """The real store, recording which sources' ids and rows were asked for."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.id_lookups: list[list[str] | None] = []

    def iter_ids_by_source(self, sources=None):
        self.id_lookups.append(None if sources is None else list(sources))
        return super().iter_ids_by_source(sources)


@pytest.fixture(autouse=True)
def _chunks_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests count the texts the chunk pipeline embeds; span vectors (and how
    they survive kills, renames and repairs) are tested in test_spans.py."""
    monkeypatch.setenv("MEMSEARCH_SPANS", "0")


@pytest.fixture
def uri(tmp_path: Path) -> str:
    return str(tmp_path / "m.db")


@pytest.fixture
def store(uri: str, provider):
    s = RecordingStore(uri, dimension=provider.dimension)
    yield s
    s.close()


def index(store, provider, root: Path, *, manifest: bool = True, files=None, **kw):
    counting = CountingProvider(provider)
    found = scan_paths([root]) if files is None else files
    report = asyncio.run(
        run_index(
            store,
            counting,
            found,
            cleanup_roots=[str(root.resolve())],
            manifest=Manifest.for_store(store.uri, store.collection) if manifest else None,
            **kw,
        )
    )
    return report, counting


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def note(topic: str, sections: int = 3) -> str:
    return "\n\n".join(
        f"## {topic} {i}\n" + " ".join(f"{topic} fact {i}.{j} about the storage engine." for j in range(6))
        for i in range(sections)
    )


def age(root: Path) -> None:
    """Files written in the last minute get an mtime two minutes ago, as if
    written long before the next run: their stat is recorded (not racy)."""
    now = time.time_ns()
    for p in root.rglob("*.md"):
        if p.stat().st_mtime_ns > now - 60 * 10**9:
            os.utime(p, ns=(now - 120 * 10**9, now - 120 * 10**9))


def tree(root: Path) -> Path:
    """10 files; projects/alpha holds 3 of them (30%)."""
    for i in range(4):
        write(root / "memory" / f"2026-01-0{i + 1}.md", note(f"day{i}"))
    for i in range(3):
        write(root / "projects" / "alpha" / f"spec{i}.md", note(f"alpha{i}", 4))
    for i in range(3):
        write(root / "docs" / f"page{i}.md", note(f"page{i}", 2))
    age(root)
    return root


def expected(root: Path, model: str, **kw) -> set[tuple[str, str]]:
    """The (id, source) pairs a clean index of the tree stores."""
    return {
        (c.chunk_id(model), fc.path)
        for batch in chunk_files(scan_paths([root]), **kw)
        for fc in batch
        for c in fc.chunks
    }


def stored(store) -> set[tuple[str, str]]:
    return set(store.iter_ids_by_source())


# -- the manifest ---------------------------------------------------------------------------


def test_manifest_lives_beside_the_database_or_under_home(tmp_path: Path, monkeypatch) -> None:
    db = tmp_path / "sub" / "m.db"
    local = manifest_path(str(db), "memsearch_chunks")
    assert local.parent == db.parent and local.name.startswith("m.db.manifest-") and local.suffix == ".json"
    assert manifest_path(str(db), "other") != local
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    remote = manifest_path("http://milvus.example:19530", "memsearch_chunks")
    assert remote.parent == tmp_path / "home" / ".memsearch" / "manifests"
    assert manifest_path("http://other.example:19530", "memsearch_chunks") != remote


_WRITE_ELSEWHERE = """
import sys
from memsearch_fast.store.manifest import Entry, Header, Manifest
Manifest(sys.argv[1]).save(Header("m", 1500, 1, "c", "id"), 7, {"/b.md": Entry(20, 2.0, "g", b"y" * 16, 6, 3.0)})
"""


def test_a_manifest_this_process_left_is_taken_again_unread_until_another_writes_it(
    tmp_path: Path, monkeypatch
) -> None:
    from memsearch_fast.store import manifest as module
    from memsearch_fast.store.manifest import Entry, Header

    path = tmp_path / "m.json"
    header = Header("m", 1500, 1, "c", "id")
    Manifest(path).save(header, 3, {"/a.md": Entry(10, 1.0, "f", b"x" * 16, 5, 2.0)})
    parsed: list[int] = []
    loads = module.orjson.loads
    monkeypatch.setattr(module.orjson, "loads", lambda raw: parsed.append(1) or loads(raw))
    again = Manifest(path).load(header)  # a later run's Manifest, as the service makes one a run
    assert again is not None and again.rows == 3 and again.entries["/a.md"].packed() == b"x" * 16
    assert parsed == []  # the file this process left: not read again
    again.entries.clear()  # what a run does with its copy leaves the next run's alone
    assert Manifest(path).load(header).entries["/a.md"].fingerprint == "f"  # type: ignore[union-attr]
    assert Manifest(path).load(Header("m", 1000, 1, "c", "id")) is None  # another header: read, refused
    assert parsed == [1]
    # Another process writes it: read again, its entries, not the ones this process left.
    subprocess.run([sys.executable, "-c", _WRITE_ELSEWHERE, str(path)], check=True, timeout=60)
    other = Manifest(path).load(header)
    assert other is not None and other.rows == 7 and set(other.entries) == {"/b.md"}
    assert len(parsed) == 2
    Manifest(path).invalidate()
    assert Manifest(path).load(header) is None


def test_entries_records_and_lists_read_back_as_written(tmp_path: Path) -> None:
    """The records of many entries in one buffer (as each entry gives its own),
    whether held as bytes or as the file's base64 text; a damaged entry adds none.
    A saved, loaded and saved again manifest is the same file."""
    import base64

    from memsearch_fast.store.manifest import Entry, Header, records_of

    a, b = bytes(range(32)), bytes(range(100, 116))
    entries = {
        "/a.md": Entry(10, 1.0, "f", a, 5, 2.0),
        "/b.md": Entry(4, None, "g", base64.b64encode(b).decode(), 6, 3.5),
        "/bad.md": Entry(1, 1.0, "h", "not*base64"),
        "/torn.md": Entry(1, 1.0, "h", base64.b64encode(b"x" * 15).decode()),
        "/unknown.md": Entry.unknown(),
    }
    assert records_of(entries.values()) == b"".join(e.packed() for e in entries.values()) == a + b
    path = tmp_path / "m.json"
    header = Header("m", 1500, 1, "c", "id")
    Manifest(path).save(header, 3, entries)
    first = path.read_bytes()
    path.write_bytes(first)  # another file: read and parsed again, not taken from this process
    loaded = Manifest(path).load(header)
    assert loaded is not None

    def stats(es: dict[str, Entry]) -> dict[str, tuple[object, ...]]:
        return {k: (e.size, e.mtime, e.fingerprint, e.ino, e.ctime) for k, e in es.items()}

    assert stats(loaded.entries) == stats(entries)
    assert loaded.entries["/a.md"].packed() == a and records_of(loaded.entries.values()) == a + b
    loaded.entries["/c.md"] = Entry(7, 9.0, "k", b, 8, 4.0)
    Manifest(path).save(header, 4, loaded.entries)
    again = json.loads(path.read_bytes())
    added = [7, 9.0, "k", base64.b64encode(b).decode(), 8, 4.0]
    assert again["files"] == {**json.loads(first)["files"], "/c.md": added}


def test_noop_reads_no_file_and_fetches_no_id(tmp_path: Path, store, provider) -> None:
    root = tree(tmp_path / "notes")
    first, counting = index(store, provider, root)
    assert first.read == 10 and not first.manifest and first.embedded == len(counting.texts) > 0
    path = Manifest.for_store(store.uri, store.collection).path
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    saved = path.read_bytes()

    store.id_lookups.clear()
    again, counting = index(store, provider, root)
    assert again.manifest and again.read == 0 and again.failed == [] and counting.texts == []
    assert again.unchanged == 10 and again.chunks == 0 and again.deleted == 0
    assert store.id_lookups == []  # no stored id fetched
    assert path.read_bytes() == saved  # nothing to record

    # A file rewritten with other text of the same size and its mtime put back
    # keeps size and mtime, not its status-change time: it is read again.
    f = root / "docs" / "page0.md"
    st = f.stat()
    f.write_text(f.read_text().replace("page0 fact", "PAGE0 FACT"))
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
    time.sleep(0.01)
    rewritten, _ = index(store, provider, root)
    assert rewritten.read == 1 and rewritten.unchanged == 9
    assert any("PAGE0 FACT" in r["content"] for r in store.rows_for_sources([str(f)], ["content"]))


def test_files_swapped_by_renames_are_noticed(tmp_path: Path, store, provider) -> None:
    """`mv a t; mv b a; mv t b` on two files of one size and mtime (as an archive
    restores them): their inodes and ctimes differ, so both are read again and
    each name's hits show its own text."""
    root = tmp_path / "notes"
    a = write(root / "a.md", "# Cache\n\nThe cache keeps thumbnails.\n")
    b = write(root / "b.md", "# Relay\n\nThe relay drops old frames.\n")
    assert a.stat().st_size == b.stat().st_size
    past = time.time_ns() - 120 * 10**9
    for p in (a, b):
        os.utime(p, ns=(past, past))
    index(store, provider, root)
    t = root / "t.tmp"
    a.rename(t)
    b.rename(a)
    t.rename(b)
    swapped, _ = index(store, provider, root)
    assert swapped.read == 2 and swapped.unchanged == 0
    assert stored(store) == expected(root, provider.model_name)
    assert "thumbnails" in store.rows_for_sources([str(b)], ["content"])[0]["content"]
    assert "frames" in store.rows_for_sources([str(a)], ["content"])[0]["content"]


def test_touched_identical_file_costs_no_embedding(tmp_path: Path, store, provider) -> None:
    root = tree(tmp_path / "notes")
    index(store, provider, root)
    f = root / "memory" / "2026-01-01.md"
    f.write_text(f.read_text())  # same bytes, new mtime
    past = time.time_ns() - 60 * 10**9  # not racy
    os.utime(f, ns=(past, past))
    store.id_lookups.clear()
    touched, counting = index(store, provider, root)
    assert touched.read == 1 and touched.unchanged == 10 and counting.texts == [] and touched.indexed == 0
    assert store.id_lookups == []  # same fingerprint: not even its ids are fetched
    after, _ = index(store, provider, root)
    assert after.read == 0  # its new stat was recorded


def test_file_written_just_before_a_run_is_read_again_once(tmp_path: Path, store, provider) -> None:
    root = tree(tmp_path / "notes")
    index(store, provider, root)
    write(root / "docs" / "fresh.md", note("fresh"))  # mtime within the racy window of the next run
    first, _ = index(store, provider, root)
    assert first.read == 1 and first.embedded == 3
    # A second write within the same timestamp tick would keep size and mtime;
    # so the next run reads it again (and finds it identical).
    again, counting = index(store, provider, root)
    assert again.read == 1 and counting.texts == [] and again.indexed == 0
    age(root)
    index(store, provider, root)
    assert index(store, provider, root)[0].read == 0


def test_changes_with_a_manifest_end_equal_to_a_clean_index(tmp_path: Path, store, provider) -> None:
    root = tree(tmp_path / "notes")
    index(store, provider, root)
    model = provider.model_name
    (root / "docs" / "page1.md").unlink()
    f = root / "memory" / "2026-01-02.md"
    f.write_text(f.read_text().replace("day1 fact 1.3", "day1 now says the WAL is fsynced"))
    write(root / "memory" / "2026-01-09.md", note("day9", 2))
    (root / "empty.md").write_text("")
    age(root)
    store.id_lookups.clear()
    report, counting = index(store, provider, root)
    assert report.manifest and report.read == 3 and report.sources_removed == 1
    assert len(counting.texts) == 1 + 2 and any("WAL is fsynced" in t for t in counting.texts)
    # The edited file's stored ids and the vanished file's are those their entries
    # recorded (a lookup by source scans the collection): the store is asked, in one
    # query for the batch, only about the files the manifest has no entry for.
    new = {str(root / "memory" / "2026-01-09.md"), str(root / "empty.md")}
    assert [set(x or ()) for x in store.id_lookups] == [new]
    assert stored(store) == expected(root, model)
    assert index(store, provider, root)[0].read == 0
    (root / "empty.md").unlink()
    gone, _ = index(store, provider, root)
    assert gone.sources_removed == 0 and gone.deleted == 0  # it had no rows


def _stale_behind_its_back(store, root: Path) -> None:
    store.delete_sources([str(root / "docs" / "page2.md")])  # another tool removes rows
    store.flush()


def _corrupt(path: Path) -> None:
    path.write_text('{"format": 1, "model": ')


def _foreign(path: Path) -> None:
    data = json.loads(path.read_text())
    data["files"] = {k: ["x", 0, "", ""] for k in data["files"]}
    path.write_text(json.dumps(data))


def _symlinked(path: Path) -> None:
    target = path.with_name("elsewhere.json")
    path.rename(target)
    path.symlink_to(target)


@pytest.mark.parametrize("damage", ["deleted", "corrupt", "foreign", "stale", "symlink", "rows added"])
def test_missing_or_untrustworthy_manifest_means_a_full_run(tmp_path: Path, store, provider, damage: str) -> None:
    root = tree(tmp_path / "notes")
    model = provider.model_name
    index(store, provider, root)
    path = Manifest.for_store(store.uri, store.collection).path
    if damage == "deleted":
        path.unlink()
    elif damage == "corrupt":
        _corrupt(path)
    elif damage == "foreign":
        _foreign(path)
    elif damage == "stale":
        _stale_behind_its_back(store, root)
    elif damage == "symlink":
        _symlinked(path)
        elsewhere = path.with_name("elsewhere.json").read_bytes()
    else:  # another writer adds a row, for a file that does not exist
        ghost = {**store.rows_for_sources([str(root / "docs" / "page0.md")], ROW_FIELDS)[0]}
        store.upsert([{**ghost, "chunk_hash": "0123456789abcdef", "source": str(root / "ghost.md")}])
        store.flush()
    f = root / "memory" / "2026-01-03.md"
    f.write_text(f.read_text() + "\n\n## Added\nA section added while the manifest was untrustworthy.\n")
    age(root)
    report, counting = index(store, provider, root)
    assert not report.manifest and report.read == 10
    assert stored(store) == expected(root, model)
    if damage == "symlink":
        assert path.is_file() and not path.is_symlink()  # replaced, never written through
        assert path.with_name("elsewhere.json").read_bytes() == elsewhere
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    again, counting = index(store, provider, root)
    assert again.manifest and again.read == 0 and counting.texts == []
    assert not list(tmp_path.glob(".*.tmp"))  # a temp file left by a kill mid-save is gone


def test_chunk_settings_and_force_ignore_the_manifest(tmp_path: Path, store, provider) -> None:
    root = tree(tmp_path / "notes")
    model = provider.model_name
    index(store, provider, root)
    resized, _ = index(store, provider, root, max_chunk_size=300)
    assert not resized.manifest and resized.read == 10
    assert stored(store) == expected(root, model, max_chunk_size=300)
    assert index(store, provider, root, max_chunk_size=300)[0].read == 0
    forced, counting = index(store, provider, root, max_chunk_size=300, force=True)
    assert not forced.manifest and forced.read == 10 and forced.embedded == len(counting.texts) > 0
    assert forced.reused == 0  # nothing taken from stored rows
    assert index(store, provider, root, max_chunk_size=300)[0].read == 0


def test_unlisted_directory_and_unreadable_file_keep_their_rows(tmp_path: Path, store, provider) -> None:
    root = tree(tmp_path / "notes")
    model = provider.model_name
    index(store, provider, root)
    before = stored(store)
    files = [f for f in scan_paths([root]) if "/alpha/" not in f.path and not f.path.endswith("page0.md")]
    page0 = root / "docs" / "page0.md"
    page0.rename(root / "docs" / "kept.txt")
    page0.mkdir()  # a directory named like the file: unreadable
    report, _ = index(store, provider, root, files=[*files, str(page0)], unlisted=[str(root / "projects" / "alpha")])
    assert [p for p, _ in report.failed] == [str(page0)] and report.sources_removed == 0
    assert stored(store) == before
    # Once readable again it is read (its entry says "unknown") and diffed.
    page0.rmdir()
    (root / "docs" / "kept.txt").rename(page0)
    write(page0, page0.read_text() + "\n\n## More\nA section added while it was unreadable.\n")
    age(root)
    again, counting = index(store, provider, root)
    assert again.read == 1 and len(counting.texts) == 1
    assert stored(store) == expected(root, model)


@pytest.mark.parametrize("name", ['quote"d.md', "back\\slash.md", "new\nline.md", "空 白.md", "tab\t.md"])
def test_hostile_file_names_round_trip_through_the_manifest(tmp_path: Path, store, provider, name: str) -> None:
    root = tmp_path / "notes"
    write(root / name, "# Hostile\nthe file name is hostile but the text is plain\n")
    write(root / "plain.md", "# Plain\nan ordinary file\n")
    age(root)
    index(store, provider, root)
    again, _ = index(store, provider, root)
    assert again.manifest and again.read == 0 and again.unchanged == 2
    (root / name).unlink()
    removed, _ = index(store, provider, root)
    assert removed.manifest and removed.sources_removed == 1 and stored(store) == expected(root, provider.model_name)


# -- content-addressed vectors ----------------------------------------------------------------


def _vectors(store) -> dict[tuple[str, str], list[float]]:
    rows = store.rows_for_ids([i for i, _ in stored(store)], ["source", "embedding"])
    return {(r["chunk_hash"], r["source"]): r["embedding"] for r in rows}


@pytest.mark.parametrize("manifest", [True, False], ids=["manifest", "no-manifest"])
@pytest.mark.slow(reason="interrupts index runs at many points and repairs them with the real model")
def test_directory_rename_embeds_nothing_and_equals_a_clean_index(
    tmp_path: Path, store, provider, manifest: bool
) -> None:
    import numpy as np

    root = tree(tmp_path / "notes")
    model = provider.model_name
    index(store, provider, root, manifest=manifest)
    moved = {p.name for p in (root / "projects" / "alpha").iterdir()}
    (root / "projects" / "alpha").rename(root / "projects" / "beta")
    report, counting = index(store, provider, root, manifest=manifest)
    assert counting.texts == [] and report.embedded == 0
    assert report.sources_removed == len(moved) == 3 and report.reused > 0
    assert stored(store) == expected(root, model)

    # A clean index of the new tree, in its own database: same ids per source, same vectors.
    with MilvusStore(str(tmp_path / "clean.db"), dimension=provider.dimension) as clean:
        index(clean, provider, root, manifest=False)
        assert stored(clean) == stored(store)
        ours, theirs = _vectors(store), _vectors(clean)
        for key, vector in theirs.items():
            assert np.allclose(ours[key], vector, atol=1e-5), key


@pytest.mark.parametrize("manifest", [True, False], ids=["manifest", "no-manifest"])
def test_file_renamed_twice_during_a_run_keeps_its_vectors(tmp_path: Path, store, provider, manifest: bool) -> None:
    """A -> B before the scan, B -> C between the scan and the read: the run
    cannot see C, so A's rows wait and the next run gives them to C."""
    root = tree(tmp_path / "notes")
    model = provider.model_name
    index(store, provider, root, manifest=manifest)
    a = root / "docs" / "page1.md"
    b = a.rename(root / "docs" / "renamed-once.md")
    listed = scan_paths([root])
    c = b.rename(root / "docs" / "renamed-twice.md")
    report, counting = index(store, provider, root, manifest=manifest, files=listed)
    assert [p for p, _ in report.failed] == [str(b.resolve())]
    assert counting.texts == [] and report.sources_removed == 0
    assert str(a.resolve()) in {s for _, s in stored(store)}  # kept for the next run

    age(root)
    report, counting = index(store, provider, root, manifest=manifest)
    assert counting.texts == [] and report.embedded == 0 and report.reused > 0
    assert report.sources_removed == 1 and not report.failed
    assert stored(store) == expected(root, model)
    assert str(c.resolve()) in {s for _, s in stored(store)}


def test_copied_file_embeds_nothing(tmp_path: Path, store, provider) -> None:
    root = tree(tmp_path / "notes")
    index(store, provider, root)
    shutil.copy(root / "docs" / "page2.md", root / "a-copy-of-page2.md")  # sorts before its original
    age(root)
    report, counting = index(store, provider, root)
    assert counting.texts == [] and report.reused == 2 and report.read == 1
    assert stored(store) == expected(root, provider.model_name)


def test_identical_texts_in_one_run_are_embedded_once(tmp_path: Path, store, provider) -> None:
    root = tmp_path / "notes"
    checklist = "## Checklist\n- run the migrations\n- verify the deploy key fingerprint\n"
    for i in range(4):
        write(root / f"day{i}.md", f"# Day {i}\nwhat happened on day {i} in the storage team\n\n{checklist}")
    write(root / "twice.md", f"# Twice\nthe same section twice in one file\n\n{checklist}\n{checklist}")
    report, counting = index(store, provider, root)
    assert report.chunks == 4 * 2 + 3
    assert len(counting.texts) == len(set(counting.texts)) == 4 + 1 + 1  # the checklist once
    assert report.embedded == 6 and report.reused == 5
    assert stored(store) == expected(root, provider.model_name)
    rows = [r for r in store.rows_for_sources([str(p) for p in root.iterdir()], ["content", "embedding"])]
    same = [r["embedding"] for r in rows if r["content"].startswith("## Checklist")]
    assert len(same) == 6 and all(v == same[0] for v in same)


def test_sort_window_keeps_batches_small_and_of_similar_length(provider) -> None:
    """The embed stage sorts a window of chunks by length and embeds it in small batches."""
    from memsearch_fast import chunk_markdown, compute_chunk_id
    from memsearch_fast.index.embed import EmbedStage, Pending

    text = "\n\n".join(f"## N{i}\n" + "word " * (1 + (i * 37) % 90) + f"end {i}" for i in range(64))
    chunks = chunk_markdown(text, "/notes/n.md")
    assert len(chunks) == 64
    calls: list[list[str]] = []
    delivered: list[Pending] = []

    async def embed(texts: list[str]) -> list[list[float]]:
        calls.append(texts)
        return await provider.embed(texts)

    async def deliver(items: list[Pending]) -> None:
        delivered.extend(items)

    async def run() -> EmbedStage:
        stage = EmbedStage(embed, deliver, batch_size=8, window=32, in_flight=2)
        for c in chunks:
            await stage.add([Pending(compute_chunk_id(c.source, c.start_line, c.end_line, c.content_hash, "m"), c)])
        await stage.finish()
        return stage

    stage = asyncio.run(run())
    assert stage.embedded == 64 and len(delivered) == 64 and all(p.vector for p in delivered)
    assert [len(c) for c in calls] == [8] * 8
    for i in range(0, 8, 4):  # each window of 32 is cut into length-ordered batches
        window = calls[i : i + 4]
        lengths = [len(t.encode()) for batch in window for t in batch]
        assert lengths == sorted(lengths)


# -- crash safety -------------------------------------------------------------------------------

CHILD = """
import asyncio, os, sys, time
from memsearch_fast.embeddings import get_provider
from memsearch_fast.index import run_index
from memsearch_fast.store.manifest import Manifest
from memsearch_fast.index.scan import scan_paths
from memsearch_fast.store import MilvusStore
from memsearch_fast.store.schema import ROW_FIELDS

root, uri, model_dir, kill_at = sys.argv[1:5]

def mark(name):
    if name == kill_at:
        print("at", name, flush=True)
        time.sleep(60)  # killed here

def hook(cls, method, name):
    real = getattr(cls, method)
    def wrapped(self, *a, **k):
        out = real(self, *a, **k)
        mark(name)
        return out
    setattr(cls, method, wrapped)

# "upsert": a write of rows, by insert (ids read as absent) or upsert.
for method, name in [("upsert", "upsert"), ("insert", "upsert"), ("delete_ids", "delete"),
                     ("delete_sources", "delete sources"), ("flush", "flush")]:
    hook(MilvusStore, method, name)
real_replace = os.replace
def replace(src, dst, **kw):
    if str(dst).endswith(".json") and ".manifest-" in str(dst):
        mark("replace")
    return real_replace(src, dst, **kw)
os.replace = replace

p = get_provider("onnx", model=model_dir, workers=1)
inner = p.embed
async def embed(texts):
    out = await inner(texts)
    await asyncio.to_thread(mark, "embed")
    return out
p.embed = embed
store = MilvusStore(uri, dimension=p.dimension)
asyncio.run(run_index(store, p, scan_paths([root]), cleanup_roots=[root],
                      manifest=Manifest.for_store(uri, store.collection)))
print("done", flush=True)
"""


@pytest.mark.parametrize("kill_at", ["embed", "upsert", "delete", "delete sources", "flush", "replace"])
@pytest.mark.slow(reason="interrupts index runs at many points and repairs them with the real model")
def test_run_killed_at_any_point_is_repaired_by_the_next(
    tmp_path: Path, store, provider, model_dir: Path, kill_at: str
) -> None:
    root = tree(tmp_path / "notes")
    model = provider.model_name
    index(store, provider, root)
    # Every kind of change at once: a renamed directory (reused vectors), an
    # edit (embedded + stale rows), a deleted file and a new one.
    (root / "projects" / "alpha").rename(root / "projects" / "beta")
    f = root / "memory" / "2026-01-02.md"
    f.write_text(f.read_text().replace("day1 fact 2.1", "day1 now records the fsync policy"))
    (root / "docs" / "page1.md").unlink()
    write(root / "docs" / "page9.md", note("page9", 2))
    age(root)
    if kill_at == "delete sources":  # with a manifest, a vanished file's rows go by their recorded ids
        Manifest.for_store(store.uri, store.collection).path.unlink()
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(root), store.uri, str(model_dir), kill_at],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    proc.send_signal(signal.SIGKILL)
    out, err = proc.communicate(timeout=60)
    assert line.strip() == f"at {kill_at}", (line, out, err[-2000:])

    report, counting = index(store, provider, root)
    assert report.failed == []
    assert stored(store) == expected(root, model)
    # What the killed run embedded was kept; the rest is done now, once.
    assert len(counting.texts) <= 1 + 2
    again, counting = index(store, provider, root)
    assert again.manifest and again.read == 0 and counting.texts == []
    assert not list(tmp_path.glob(".*.tmp"))  # a temp file left by a kill mid-save is gone
