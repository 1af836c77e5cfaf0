"""A leased root whose folder a ``git pull`` turns into a link while the service
watches it: the service checks the root before each run, as the hooks do at each
event, and drops the lease and the root's rows instead of following the link.
A real service, the real model, real files."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from memsearch_fast.lite import broker
from memsearch_fast.serve import client
from memsearch_fast.store import MilvusStore
from tests.helpers.lease import lease

pytestmark = pytest.mark.skipif(os.name != "posix", reason="the shared server is POSIX-only")


def _sources(db: Path) -> set[str]:
    store = MilvusStore(str(db), collection="notes")
    try:
        return {src for _, src in store.iter_ids_by_source(None)} if store.exists else set()
    finally:
        store.close()


def _wait(what, timeout: float = 90.0):
    deadline = time.monotonic() + timeout
    while not (got := what()) and time.monotonic() < deadline:
        time.sleep(0.3)
    return got


@pytest.mark.slow(reason="starts the resident service with the real model and waits for its runs")
def test_a_root_replaced_by_a_link_is_dropped_not_followed(
    tmp_path: Path, model_dir: Path, monkeypatch: pytest.MonkeyPatch, short_tmp: Path
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("MEMSEARCH_OFFLINE", "1")
    monkeypatch.setenv("MEMSEARCH_LITE_IDLE_TIMEOUT", "60")
    for k in ("MEMSEARCH_LITE_MODE", "MEMSEARCH_SEARCH_SERVICE"):
        monkeypatch.delenv(k, raising=False)
    memory = tmp_path / "proj" / ".memsearch" / "memory"
    memory.mkdir(parents=True)
    (memory / "2026-11-28.md").write_text("# Today\n\nThe falcon gateway listens on port 4242.\n", encoding="utf-8")
    private = tmp_path / "private"
    private.mkdir()
    (private / "diary.md").write_text("# Diary\n\nThe vault code is 9931.\n", encoding="utf-8")
    db = short_tmp / "m.db"
    request = lease(model_dir, memory, "session", os.getpid())
    try:
        assert client.send_lease(str(db), request, start=True)["ok"]
        assert _wait(lambda: str(memory / "2026-11-28.md") in _sources(db)), "the root was never indexed"
        # A pull replaces the folder with a committed link to another folder.
        memory.rename(memory.with_name("memory.old"))
        memory.symlink_to(private, target_is_directory=True)
        assert _wait(lambda: not (client.status(str(db)) or {"roots": [1]})["roots"]), "still watched"
        sources = _sources(db)
        assert not any("diary" in s or s.startswith(str(memory)) for s in sources), sources
    finally:
        broker.stop_server(str(db))


def test_a_root_is_unsafe_once_its_path_leads_through_a_link(tmp_path: Path) -> None:
    from memsearch_fast.serve.root_guard import unsafe_root

    project = tmp_path / "proj"
    root = project / ".memsearch" / "memory"
    root.mkdir(parents=True)
    assert unsafe_root(str(root)) == ""
    assert unsafe_root(str(tmp_path / "gone")) == ""  # a root that is gone is left to the watch loop
    private = tmp_path / "private"
    private.mkdir()
    root.rmdir()
    root.symlink_to(private, target_is_directory=True)  # the folder itself now a link
    assert "symbolic link" in unsafe_root(str(root))
    root.unlink()
    root.mkdir()
    (project / ".memsearch").rename(tmp_path / "elsewhere")  # a folder above it now a link
    (project / ".memsearch").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    assert unsafe_root(str(root)) == "now leads through a symbolic link"
