"""Damaged and wrong databases: every call says which database, why, and what to do.

A shared server that hit a load error used to keep the half-loaded collection
and serve it as if it were whole (61 of 257 chunks, silently). Now the first
call that meets the damage stops the server and leaves ``<db>.damaged``; every
later call (search, stats, index, reset) fails with one line naming the
database, the cause from the engine's log and the file to delete, without
starting a server, until the file is deleted or replaced. Start-up failures
(a truncated database, a markdown file given as the database, a read-only
database, a parent that is a file) name their cause instead of "exit code 255".
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from memsearch_fast._os import pid_alive
from memsearch_fast.lite import broker as lite_broker
from memsearch_fast.lite import damage
from memsearch_fast.lite import state as lite_state
from memsearch_fast.lite.version import milvus_lite_major
from tests.helpers.harness import (
    cli_env,
    copy_database,
    corpus,
    index_args,
    memsearch,
    ok,
    one_line_error,
    servers_stopped,
    stop_servers,
)

pytestmark = [
    pytest.mark.xdist_group("damaged"),  # its module fixture is built once, on one worker
    pytest.mark.skipif(os.name != "posix", reason="the shared server needs fcntl and fork"),
    pytest.mark.skipif((milvus_lite_major() or 0) >= 3, reason="a Milvus Lite 2.x database is one SQLite file"),
]

MALFORMED = "database disk image is malformed"


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory, model_dir: Path) -> Iterator[tuple[Path, Path, int]]:
    """~16 generated files indexed once into a database whose server is then stopped."""
    base = tmp_path_factory.mktemp("pristine")
    notes = base / "notes"
    files = corpus(notes, 140_000, seed=21)
    assert 15 <= len(files) <= 30
    db = base / "m.db"
    env = cli_env(base / "home")
    with servers_stopped(base):
        ok(memsearch(index_args([notes], db, model_dir, "-q"), env))
        chunks = int(ok(memsearch(["stats", "--milvus-uri", str(db)], env)).stdout.split("\n")[0].split()[-1])
    yield notes, db, chunks


@pytest.fixture
def indexed(work: Path, pristine: tuple[Path, Path, int]) -> tuple[Path, Path, dict[str, str], int]:
    """A copy of the pristine database (its manifest too) for one test to damage."""
    notes, src, chunks = pristine
    db = work / "m.db"
    copy_database(src, db)
    return notes, db, cli_env(work / "home"), chunks


def garble_middle(db: Path, n: int = 80_000, seed: int = 5) -> None:
    size = db.stat().st_size
    with open(db, "r+b") as f:
        f.seek(size // 2 - n // 2)
        f.write(random.Random(seed).randbytes(n))


def damaged_line(proc, db: Path) -> str:  # type: ignore[no-untyped-def]
    line = one_line_error(proc, str(db), "is damaged", MALFORMED, f"rm {db}")
    assert "segcore" not in line and "internal error" not in line
    return line


@pytest.mark.slow(reason="damages a database at several offsets and opens each")
@pytest.mark.timeout(300)  # 40-85 s on two busy cores: past the suite's 120 s limit on a slower machine
def test_garbage_in_the_middle_is_never_served_as_a_smaller_collection(
    indexed: tuple[Path, Path, dict[str, str], int], model_dir: Path
) -> None:
    notes, db, env, chunks = indexed
    garble_middle(db)
    model = ["-m", str(model_dir)]
    first = damaged_line(memsearch(["search", "retries with jitter", "--milvus-uri", str(db), *model], env), db)
    assert not lite_broker.server_status(str(db))  # the half-loaded server is gone
    assert os.path.isfile(damage.marker_path(str(db)))
    assert damaged_line(memsearch(["search", "postgres", "-j", "--milvus-uri", str(db), *model], env), db) == first
    assert damaged_line(memsearch(["stats", "--milvus-uri", str(db)], env), db) == first
    damaged_line(memsearch(index_args([notes], db, model_dir), env), db)
    damaged_line(memsearch(["reset", "--yes", "--milvus-uri", str(db)], env), db)
    assert not lite_broker.server_status(str(db))  # no server was started for any of them

    # What the message says to do recovers: delete the file, index again.
    os.unlink(db)
    ok(memsearch(index_args([notes], db, model_dir, "-q"), env))
    assert f"Total indexed chunks: {chunks}" in ok(memsearch(["stats", "--milvus-uri", str(db)], env)).stdout
    assert not os.path.lexists(damage.marker_path(str(db)))


@pytest.mark.slow(reason="damages a real database under its server and rebuilds it from the notes")
def test_a_load_failure_seen_by_another_client_stops_the_server(
    indexed: tuple[Path, Path, dict[str, str], int],
) -> None:
    """The server reads its engine's output: a load failure met by a client that is not
    memsearch's store (or one killed before it could report it) still ends the serving
    within a second or two."""
    from pymilvus import MilvusClient

    _notes, db, env, _chunks = indexed
    garble_middle(db)
    client = lite_broker.attach(str(db), lambda uri: MilvusClient(uri=uri))
    pid = lite_state.read_state(str(db))["pid"]
    try:
        # The engine answers with a segcore error, or with success on the part it read.
        # (The damaged part may be the span vectors' collection, which is most of the file.)
        for name in ("memsearch_chunks", "memsearch_chunks_spans"):
            with contextlib.suppress(Exception):
                client.load_collection(name)
    finally:
        client.close()
    deadline = time.monotonic() + 15
    while pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not pid_alive(pid)
    assert os.path.isfile(damage.marker_path(str(db)))
    damaged_line(memsearch(["stats", "--milvus-uri", str(db)], env), db)


@pytest.mark.slow(reason="damages a real database under its server and rebuilds it from the notes")
def test_a_replaced_database_is_tried_again(indexed: tuple[Path, Path, dict[str, str], int]) -> None:
    """The marker holds the file's identity: a good copy put in its place is served."""
    _notes, db, env, chunks = indexed
    good = db.with_name("good.db")
    good.write_bytes(db.read_bytes())
    garble_middle(db)
    damaged_line(memsearch(["stats", "--milvus-uri", str(db)], env), db)
    os.replace(good, db)
    assert f"Total indexed chunks: {chunks}" in ok(memsearch(["stats", "--milvus-uri", str(db)], env)).stdout
    assert not os.path.lexists(damage.marker_path(str(db)))


def test_truncated_database_names_the_cause(indexed: tuple[Path, Path, dict[str, str], int]) -> None:
    _notes, db, env, _chunks = indexed
    with open(db, "r+b") as f:
        f.truncate(db.stat().st_size // 4)
    for _ in range(2):
        line = damaged_line(memsearch(["stats", "--milvus-uri", str(db)], env), db)
        assert "exit code 255" not in line


def test_markdown_file_given_as_the_database(work: Path, model_dir: Path) -> None:
    md = work / "notes.md"
    md.write_text("# Notes\n\nNot a database.\n", encoding="utf-8")
    env = cli_env(work / "home")
    for args in (["stats"], ["search", "notes", "-m", str(model_dir)]):
        line = one_line_error(memsearch([*args, "--milvus-uri", str(md)], env), str(md), "not a Milvus Lite database")
        assert "exit code" not in line
    assert md.read_text(encoding="utf-8") == "# Notes\n\nNot a database.\n"
    assert lite_state.read_state(str(md)) is None


def test_parent_that_is_a_file_is_one_clear_line(work: Path, model_dir: Path) -> None:
    (work / "afile").write_text("x")
    db = work / "afile" / "m.db"
    env = cli_env(work / "home")
    notes = work / "notes"
    corpus(notes, 5_000, seed=22)
    for args in (index_args([notes], db, model_dir), ["stats", "--milvus-uri", str(db)]):
        line = one_line_error(memsearch(args, env), f"{work / 'afile'} is a file, not a directory")
        assert "Errno" not in line and "ImportError" not in line


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes read-only files")
def test_read_only_database_names_the_cause(indexed: tuple[Path, Path, dict[str, str], int]) -> None:
    _notes, db, env, chunks = indexed
    os.chmod(db, 0o400)
    try:
        proc = memsearch(["stats", "--milvus-uri", str(db)], env)
        if proc.returncode == 0:  # an engine that opens it read-only serves it: that is fine too
            assert f"Total indexed chunks: {chunks}" in proc.stdout
        else:
            line = one_line_error(proc, str(db))
            assert "exit code 255" not in line or "readonly" in line.lower() or "read-only" in line.lower()
    finally:
        os.chmod(db, 0o600)


@pytest.mark.slow(reason="damages a real database under its server and rebuilds it from the notes")
def test_an_engine_error_that_is_not_damage_marks_nothing(work: Path) -> None:
    """A BM25 search of an empty collection fails inside segcore ("NaN or Inf value") on
    Milvus Lite 2.x: an error of the request, not of the database."""
    from memsearch_fast.store import MilvusStore

    db = str(work / "m.db")
    store = MilvusStore(db, dimension=8)
    try:
        assert store.search([1.0] + [0.0] * 7, "hello world") == []
        pid = lite_state.read_state(db)["pid"]
        time.sleep(2.5)  # more than the server's poll of its log
        assert pid_alive(pid) and lite_broker.server_status(db)
        assert not os.path.lexists(damage.marker_path(db))
        assert store.count() == 0
    finally:
        store.close()


@pytest.mark.slow(reason="damages a real database under its server and rebuilds it from the notes")
def test_rebuild_by_removing_the_database_under_its_server(tmp_path: Path, model_dir: Path) -> None:
    """`rm m.db m.db.*` while its server runs, then `index` at once, again and again: the new
    server waits for the old one (which notices and exits) instead of failing "open in another process"."""
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "a.md").write_text("# Cache\n\nThe cache keeps thumbnails for a week.\n", encoding="utf-8")
    db = tmp_path / "m.db"
    env = cli_env(tmp_path / "home")
    try:
        for _ in range(8):
            for path in [db, *tmp_path.glob("m.db.*")]:
                if path.is_dir():
                    shutil.rmtree(path)
                else:
                    path.unlink(missing_ok=True)
            ok(memsearch(index_args([notes], db, model_dir, "-q"), env))
    finally:
        stop_servers(tmp_path)
