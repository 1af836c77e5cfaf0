"""Shared fixtures: the test model, the bundled sample, the subprocesses' environment."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.helpers.model import MISSING, find_model_dir

ROOT = Path(__file__).resolve().parents[1]
SAMPLE_DIR = ROOT / "examples" / "sample"

#: Modules whose tests drive `memsearch`, a hook, the MCP server or the search
#: service as real subprocesses (`-m e2e` / `-m "not e2e"`).
E2E_MODULES = {
    "test_cli",
    "test_cli_messages",
    "test_compact",
    "test_config",
    "test_embeddings_remote",
    "test_expand",
    "test_hooks",
    "test_js_plugins",
    "test_maintenance",
    "test_plugin_skills",
    "test_mcp",
    "test_milvus_server",
    "test_recall_tiers",
    "test_reference_parity",
    "test_rerank",
    "test_resident_service",
    "test_search_service",
    "test_skills",
    "test_store_sharing",
    "test_summarize",
    "test_switch",
    "test_sync",
    "test_transcript",
    "test_update_hint",
    "test_watch",
    "test_windows",
}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Markers by place: everything under tests/reliability is `reliability`
    (and end to end); the modules above are `e2e`."""
    for item in items:
        path = Path(str(item.path))
        if "reliability" in path.parts:
            item.add_marker(pytest.mark.reliability)
            item.add_marker(pytest.mark.e2e)
        elif path.stem in E2E_MODULES:
            item.add_marker(pytest.mark.e2e)


@pytest.fixture(scope="session")
def model_dir() -> Path:
    """The ONNX export of all-MiniLM-L6-v2 (tests/helpers/model.py says where it comes from)."""
    path = find_model_dir()
    if path is None or not (path / "tokenizer.json").is_file():
        pytest.fail(f"{MISSING} (looked in {path})" if path else MISSING)
    return path


@pytest.fixture(scope="session")
def sample_dir() -> Path:
    return SAMPLE_DIR


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """Environment for `memsearch` subprocesses: a HOME of their own, the installed
    package (the one this process imports), databases shared through their server."""
    home = tmp_path / "home"
    home.mkdir()
    e = dict(os.environ, HOME=str(home))
    for k in ("MEMSEARCH_LITE_MODE", "MEMSEARCH_SEARCH_SERVICE", "MEMSEARCH_SEARCH_UNLOAD_S"):
        e.pop(k, None)
    return e


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    """60 KB of generated journals and docs (a module may define its own ``corpus``)."""
    from tests.helpers.corpus import write_corpus

    root = tmp_path / "notes"
    write_corpus(root, total_bytes=60_000, seed=5)
    return root


@pytest.fixture
def db(tmp_path: Path):
    """A database path; its server is stopped after the test."""
    path = tmp_path / "m.db"
    yield path
    from memsearch_fast.lite import broker

    broker.stop_server(str(path))


# Per-database Milvus Lite servers started by tests exit soon after their last
# client, and any still running are stopped when the session ends.
os.environ.setdefault("MEMSEARCH_LITE_IDLE_TIMEOUT", "30")


@pytest.fixture(scope="session", autouse=True)
def _stop_lite_servers(tmp_path_factory: pytest.TempPathFactory):
    yield
    from memsearch_fast.lite import broker as lite_broker

    base = tmp_path_factory.getbasetemp()
    for state in base.rglob("*.server.json"):
        db = str(state)[: -len(".server.json")]
        lite_broker.stop_server(db)
