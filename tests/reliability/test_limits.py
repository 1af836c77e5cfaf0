"""Inputs at the edges of what the tools accept: our own one-line answers, bounded output.

`-k` above Milvus's 16,384 used to pass its raw "(offset+limit) should be in
range" text; `expand -n 0` of a chunk from a 20 MB single line printed the
20 MB.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from memsearch_fast.lite import settings as lite_settings
from tests.helpers.harness import cli_env, index_args, memsearch, ok, one_line_error, stop_servers

Indexed = tuple[Path, dict[str, str]]


# Its module fixtures are built once, on one worker (`--dist loadgroup`).
pytestmark = pytest.mark.xdist_group("limits")


@pytest.fixture(scope="module")
def long_line_db(tmp_path_factory: pytest.TempPathFactory, model_dir: Path) -> Iterator[Indexed]:
    base = tmp_path_factory.mktemp("limits")
    saved = os.environ.pop(lite_settings.ENV_MODE, None)
    notes = base / "notes"
    notes.mkdir()
    # One 20 MB line (repeated words: its length is the hazard, not its embeddings).
    (notes / "huge.md").write_text(
        "# Huge\n\n" + "lorem ipsum dolor sit amet " * 780_000 + "\n\n## After\n\nthe tail\n", encoding="utf-8"
    )
    (notes / "small.md").write_text("# Small\n\nA short note about caches.\n", encoding="utf-8")
    db = base / "m.db"
    env = cli_env(base / "home", MEMSEARCH_MAX_FILE_MB="32")  # over the default limit of one file
    try:
        ok(memsearch(index_args([notes], db, model_dir, "-q"), env))
        yield db, env
    finally:
        stop_servers(base)
        if saved is not None:
            os.environ[lite_settings.ENV_MODE] = saved


@pytest.mark.slow(reason="indexes through the CLI with the real model on a database of its own")
def test_top_k_above_the_engine_limit_gets_our_message(long_line_db: Indexed, model_dir: Path) -> None:
    db, env = long_line_db
    common = ["--milvus-uri", str(db), "-m", str(model_dir)]
    line = one_line_error(memsearch(["search", "caches", "-k", "16385", *common], env), "16385", "16384", "-k")
    assert "offset+limit" not in line and "invalid parameter" not in line
    hits = json.loads(ok(memsearch(["search", "caches", "-k", "16384", "-j", *common], env)).stdout)
    assert hits and len(hits) <= 16384


def test_expand_of_a_chunk_from_a_20mb_line_is_bounded(long_line_db: Indexed, model_dir: Path) -> None:
    db, env = long_line_db
    common = ["--milvus-uri", str(db)]
    found = ok(memsearch(["search", "lorem ipsum", "-k", "10", "-j", *common, "-m", str(model_dir)], env))
    hits = json.loads(found.stdout)
    hit = next(h for h in hits if h["source"].endswith("huge.md") and h["start_line"] <= 3 <= h["end_line"])
    for extra in (["-n", "0"], [], ["-n", "3"]):
        text = ok(memsearch(["expand", hit["chunk_hash"], *extra, *common], env, timeout=120)).stdout
        assert len(text.encode("utf-8")) < 64 * 1024, (extra, len(text))
        assert "characters not shown]" in text and "lorem ipsum dolor sit amet" in text
    data = json.loads(ok(memsearch(["expand", hit["chunk_hash"], "-n", "0", "-j", *common], env)).stdout)
    assert len(data["content"]) < 64 * 1024 and data["clipped"] > 20_000_000
    assert hit["content"].strip()[:200] in data["content"]


@pytest.mark.slow(reason="indexes through the CLI with the real model on a database of its own")
def test_a_file_over_the_size_limit_is_reported_and_the_rest_indexed(tmp_path: Path, model_dir: Path) -> None:
    """A file's chunks are held together, so one file's size bounds a run's memory: a file over
    the limit (default 16 MB, MEMSEARCH_MAX_FILE_MB) is one failed file with its reason."""
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "huge.md").write_text("# Huge\n\n" + "lorem ipsum dolor sit amet " * 700_000, encoding="utf-8")
    (notes / "small.md").write_text("# Small\n\nA short note about caches.\n", encoding="utf-8")
    db = tmp_path / "m.db"
    env = cli_env(tmp_path / "home", MEMSEARCH_MAX_FILE_MB="8")
    try:
        done = memsearch(index_args([notes], db, model_dir), env)
        assert done.returncode == 1, done.stderr
        assert "huge.md: 18.0 MB, over the 8 MB limit for one file (MEMSEARCH_MAX_FILE_MB raises it)" in done.stderr
        assert "Traceback" not in done.stderr
        common = ["--milvus-uri", str(db), "-m", str(model_dir)]
        hits = json.loads(ok(memsearch(["search", "caches", "-j", *common], env)).stdout)
        assert [Path(h["source"]).name for h in hits] == ["small.md"]
    finally:
        stop_servers(tmp_path)
