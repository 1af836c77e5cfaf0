"""memsearch 0.4.23's default database (a Milvus Lite 3.x directory) on a machine
switching to memsearch-fast: left as it is, the index rebuilt beside it, the
user told once per channel; a refused database stops a watcher for good."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.cli import make_env, ok, one_line_error, run
from tests.helpers.lite3 import make_lite3_database, snapshot

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def home(tmp_path: Path, model_dir: Path):
    """A HOME whose default database is a 3.x directory, and a notes folder."""
    home = tmp_path / "home"
    make_lite3_database(home / ".memsearch" / "milvus.db")
    (home / ".memsearch" / "config.toml").write_text(f'[embedding]\nmodel = "{model_dir}"\n', encoding="utf-8")
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "a.md").write_text("# Switch\n\nThe reindex keeps the old directory as it is.\n", encoding="utf-8")
    yield home
    from memsearch_fast.lite import broker

    broker.stop_server(str(home / ".memsearch" / "milvus-fast.db"))


@pytest.mark.slow(reason="builds a Milvus Lite 3.x database and runs the CLI and hooks beside it")
def test_the_default_3x_database_is_left_and_the_index_goes_beside_it(home: Path, tmp_path: Path) -> None:
    env = make_env(home)
    old = home / ".memsearch" / "milvus.db"
    before = snapshot(old)
    first = ok(run(["index", str(tmp_path / "notes")], env))
    notes = [line for line in first.stderr.splitlines() if line.startswith("note:")]
    assert len(notes) == 1 and "3.x" in notes[0] and "~/.memsearch/milvus-fast.db" in notes[0], first.stderr
    assert (home / ".memsearch" / "milvus-fast.db").is_file()
    hits = json.loads(ok(run(["search", "old directory", "-j"], env)).stdout)
    assert hits and hits[0]["source"].endswith("a.md")
    again = ok(run(["index", str(tmp_path / "notes")], env))
    assert "note:" not in again.stderr  # said once
    assert snapshot(old) == before  # untouched: no file added, changed or removed


def _hook(home: Path, project: Path, event: str, *, watch: bool = False) -> dict[str, object]:
    env = make_env(home)
    if not watch:
        env.update(MEMSEARCH_NO_WATCH="1")
    out = subprocess.run(
        [sys.executable, "-m", "memsearch_fast.agents.main", "claude-code", event],
        input=json.dumps({"cwd": str(project), "session_id": "s"}),
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    return dict(json.loads(out.stdout))


def test_session_start_says_where_the_index_goes_once(home: Path, tmp_path: Path) -> None:
    project = tmp_path / "proj"
    (project / ".git").mkdir(parents=True)
    first = str(_hook(home, project, "session-start")["systemMessage"])
    assert "milvus: ~/.memsearch/milvus-fast.db" in first and "ERROR" not in first
    assert "3.x" in first and "leaves it as it is" in first
    second = str(_hook(home, project, "session-start")["systemMessage"])
    assert "milvus: ~/.memsearch/milvus-fast.db" in second and "3.x" not in second


@pytest.mark.slow(reason="builds a Milvus Lite 3.x database and starts the resident service from a hook")
def test_a_switchers_session_start_leases_its_memory_on_the_new_database(home: Path, tmp_path: Path) -> None:
    """SessionStart registers the project's memory with the service of the database the
    index went to (``milvus-fast.db``), not with the 3.x one, and writes nothing beside it."""
    import time

    from memsearch_fast.serve import client

    project = tmp_path / "proj"
    (project / ".git").mkdir(parents=True)
    state = home / ".memsearch"
    old = state / "milvus.db"
    before = snapshot(old)
    _hook(home, project, "session-start", watch=True)
    fast = str(state / "milvus-fast.db")
    memory = str((project / ".memsearch" / "memory").resolve())

    def leased() -> bool:
        st = client.status(fast)
        return bool(st) and any(r["root"] == memory for r in st["roots"])

    deadline = time.monotonic() + 60
    while not leased() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert leased(), "the memory folder is not watched"
    assert snapshot(old) == before
    assert sorted(p.name for p in state.iterdir() if p.name.startswith("milvus.db")) == ["milvus.db"]
    _hook(home, project, "session-end", watch=True)


@pytest.mark.slow(reason="builds a Milvus Lite 3.x database and runs the CLI and hooks beside it")
def test_a_3x_database_named_explicitly_is_refused_and_stops_a_watcher(home: Path, tmp_path: Path) -> None:
    env = make_env(home)
    other = tmp_path / "other" / "m.db"
    make_lite3_database(other)
    before = snapshot(other)
    line = one_line_error(
        run(["watch", str(tmp_path / "notes"), "--milvus-uri", str(other), "-q"], env, timeout=60),
        "Milvus Lite 3.x database",
    )
    assert "milvus-lite>=3" not in line and "memsearch index" in line
    assert snapshot(other) == before


def test_the_watch_loop_ends_on_a_refused_database(tmp_path: Path, model_dir: Path) -> None:
    """The database a watcher indexes into is refused (here: a 3.x one from the
    start): the loop reports it once and ends instead of retrying."""
    import asyncio

    from memsearch_fast.api import MemSearch

    other = tmp_path / "other" / "m.db"
    make_lite3_database(other)
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "a.md").write_text("# A\n\ntext\n", encoding="utf-8")

    async def events() -> list[tuple[str, str]]:
        with MemSearch([str(notes)], embedding_model=str(model_dir), milvus_uri=str(other)) as ms:
            return [(e.kind, e.error) async for e in ms.watch(debounce_ms=50)]

    seen = asyncio.run(asyncio.wait_for(events(), timeout=60))
    assert [kind for kind, _ in seen] == ["failed", "stopped"], seen
    assert "3.x" in seen[0][1]


@pytest.mark.slow(reason="builds a Milvus Lite 3.x database and runs the CLI and hooks beside it")
def test_session_start_reports_a_refused_database(home: Path, tmp_path: Path) -> None:
    other = tmp_path / "other" / "m.db"
    make_lite3_database(other)
    (home / ".memsearch" / "config.toml").write_text(f'[milvus]\nuri = "{other}"\n', encoding="utf-8")
    project = tmp_path / "proj"
    (project / ".git").mkdir(parents=True)
    status = str(_hook(home, project, "session-start")["systemMessage"])
    assert "ERROR:" in status and "3.x" in status and "memory search disabled" in status


@pytest.mark.slow(reason="builds a Milvus Lite 3.x database and runs the CLI and hooks beside it")
def test_only_the_default_path_is_redirected(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from memsearch_fast.lite import fallback

    monkeypatch.setenv("HOME", str(tmp_path))
    other = tmp_path / "x.db"
    make_lite3_database(other)
    assert fallback.effective_uri(str(other)) == str(other)
    assert fallback.effective_uri("~/.memsearch/milvus.db") == "~/.memsearch/milvus.db"  # nothing there
    make_lite3_database(tmp_path / ".memsearch" / "milvus.db")
    assert fallback.effective_uri("~/.memsearch/milvus.db") == fallback.FALLBACK_URI
    assert fallback.effective_uri(str(tmp_path / ".memsearch" / "milvus.db")) == fallback.FALLBACK_URI
    assert not os.path.exists(tmp_path / ".memsearch" / "milvus-fast.db.switched")


@pytest.mark.parametrize("on", [True, False], ids=["enabled", "disabled"])
def test_session_start_names_the_04_plugin_left_enabled_once(tmp_path: Path, model_dir: Path, on: bool) -> None:
    """memsearch 0.4's Claude Code plugin still enabled beside ours stops every Milvus Lite
    engine at its events: SessionStart says so once, with the command that disables it."""
    home = tmp_path / "home"
    (home / ".claude").mkdir(parents=True)
    (home / ".claude" / "settings.json").write_text(
        json.dumps({"enabledPlugins": {"memsearch@memsearch-plugins": on, "memsearch-fast@memsearch-fast": True}}),
        encoding="utf-8",
    )
    (home / ".memsearch").mkdir()
    (home / ".memsearch" / "config.toml").write_text(f'[embedding]\nmodel = "{model_dir}"\n', encoding="utf-8")
    project = tmp_path / "proj"
    (project / ".git").mkdir(parents=True)
    first = str(_hook(home, project, "session-start")["systemMessage"])
    said = "claude plugin disable memsearch@memsearch-plugins"
    assert (said in first) == on and "ERROR" not in first, first
    assert said not in str(_hook(home, project, "session-start")["systemMessage"])  # once
