"""The version and update hint on SessionStart's status line: the real hook as a subprocess, a
plugin manifest on disk, and a local HTTP server standing in for a package index."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from memsearch_fast import __version__
from memsearch_fast.agents import update
from tests.helpers.installed import PACKAGE_PARENT

ROOT = Path(__file__).resolve().parents[1]


class Index:
    """A package index's JSON API (PyPI's shape) that counts requests and may be slow."""

    def __init__(self) -> None:
        self.version = "99.1.0"
        self.delay = 0.0
        self.hits = 0
        index = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                index.hits += 1
                time.sleep(index.delay)
                data = json.dumps({"info": {"name": "memsearch-fast", "version": index.version}}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/pypi/memsearch-fast/json"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class Env:
    def __init__(self, tmp: Path, model_dir: Path) -> None:
        self.tmp = tmp
        self.home = tmp / "home"
        (self.home / ".memsearch").mkdir(parents=True)
        (self.home / ".memsearch" / "config.toml").write_text(
            f'[milvus]\nuri = "{tmp / "milvus.db"}"\n[embedding]\nmodel = "{model_dir}"\n', encoding="utf-8"
        )
        self.project = tmp / "proj"
        (self.project / ".git").mkdir(parents=True)
        self.cache = self.home / ".memsearch" / "cache" / "update-check.json"
        self.vars = {k: v for k, v in os.environ.items() if not k.startswith(("MEMSEARCH_", "CLAUDE_"))}
        self.vars.update(HOME=str(self.home), PYTHONPATH=PACKAGE_PARENT, MEMSEARCH_NO_WATCH="1")

    def status(self, **env: str) -> tuple[str, float]:
        start = time.monotonic()
        out = subprocess.run(
            [sys.executable, "-m", "memsearch_fast.agents.main", "claude-code", "session-start"],
            input=json.dumps({"cwd": str(self.project), "session_id": "s"}),
            capture_output=True,
            text=True,
            env={**self.vars, **env},
            timeout=60,
        )
        took = time.monotonic() - start
        assert out.returncode == 0, out.stderr
        line: str = json.loads(out.stdout)["systemMessage"]
        assert line.startswith(f"[memsearch v{__version__}] ") and "ERROR" not in line, line
        return line, took

    def plugin(self, version: str) -> Path:
        root = self.tmp / f"plugin-{version}"
        (root / ".claude-plugin").mkdir(parents=True)
        (root / ".claude-plugin" / "plugin.json").write_text(json.dumps({"name": "m", "version": version}), "utf-8")
        return root

    def wait_cached(self, key: str, timeout: float = 20.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                entry: dict[str, Any] = json.loads(self.cache.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                entry = {}
            if key in entry:
                return entry
            time.sleep(0.1)
        raise AssertionError(f"no {key!r} in the cache")


@pytest.fixture
def env(tmp_path: Path, model_dir: Path) -> Env:
    return Env(tmp_path, model_dir)


@pytest.fixture
def index() -> Iterator[Index]:
    i = Index()
    yield i
    i.close()


def test_a_newer_plugin_than_the_package_says_to_reinstall(env: Env) -> None:
    line, _ = env.status(CLAUDE_PLUGIN_ROOT=str(env.plugin("99.0.0")))
    assert "update: the plugin is v99.0.0" in line and f"installed package v{__version__}" in line
    assert "pipx install --force ." in line
    for same_or_older in (__version__, "0.0.1"):
        line, _ = env.status(CLAUDE_PLUGIN_ROOT=str(env.plugin(same_or_older)))
        assert "update" not in line
    # The plugin as shipped in this repository matches the package it installs.
    line, _ = env.status(CLAUDE_PLUGIN_ROOT=str(ROOT / "hooks" / "claude-code"))
    assert "update" not in line
    assert not env.cache.exists()  # no index configured: nothing asked, nothing cached


def test_the_other_agents_plugins_say_so_too(env: Env) -> None:
    """OpenCode and OpenClaw name their plugin's folder (its package.json); Codex's hooks name the
    clone's hooks/codex (the clone's pyproject.toml): a newer one says to reinstall the command."""
    js = env.tmp / "opencode-plugin"
    js.mkdir()
    (js / "package.json").write_text(json.dumps({"name": "memsearch-opencode", "version": "99.0.0"}), "utf-8")
    clone = env.tmp / "clone"
    (clone / "hooks" / "codex").mkdir(parents=True)
    (clone / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["maturin"]\n\n[project]\nname = "memsearch-fast"\nversion = "99.2.0"\n', "utf-8"
    )
    for root, shipped in ((js, "99.0.0"), (clone / "hooks" / "codex", "99.2.0")):
        line, _ = env.status(MEMSEARCH_PLUGIN_ROOT=str(root))
        assert f"update: the plugin is v{shipped}" in line and "pipx install --force ." in line
    # The plugins as shipped in this repository match the package.
    for name in ("opencode", "openclaw", "codex"):
        line, _ = env.status(MEMSEARCH_PLUGIN_ROOT=str(ROOT / "hooks" / name))
        assert "update" not in line
    assert update.plugin_version({"MEMSEARCH_PLUGIN_ROOT": str(ROOT / "hooks" / "codex")}) == __version__
    assert update.plugin_version({"MEMSEARCH_PLUGIN_ROOT": str(ROOT / "hooks" / "openclaw")}) == __version__


def test_a_configured_index_is_asked_in_the_background_once_a_day(env: Env, index: Index) -> None:
    line, _ = env.status(MEMSEARCH_UPDATE_URL=index.url)
    assert "update" not in line  # the first start only starts the check
    assert env.wait_cached("latest")["latest"] == "99.1.0" and index.hits == 1
    line, _ = env.status(MEMSEARCH_UPDATE_URL=index.url)
    assert "update: v99.1.0 available" in line
    env.status(MEMSEARCH_UPDATE_URL=index.url)
    time.sleep(0.5)
    assert index.hits == 1  # cached for 24 h

    entry = json.loads(env.cache.read_text(encoding="utf-8"))
    entry["checked_at"] -= 25 * 3600
    env.cache.write_text(json.dumps(entry), encoding="utf-8")
    index.version = __version__
    env.status(MEMSEARCH_UPDATE_URL=index.url)
    deadline = time.monotonic() + 20
    while index.hits < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert index.hits == 2
    env.wait_cached("latest")
    time.sleep(0.3)
    line, _ = env.status(MEMSEARCH_UPDATE_URL=index.url)
    assert "update" not in line  # up to date now


@pytest.mark.slow(reason="runs hooks as subprocesses against a local update server")
def test_a_slow_or_dead_index_never_holds_the_hook(env: Env, index: Index) -> None:
    index.delay = 6.0
    _, took = env.status(MEMSEARCH_UPDATE_URL=index.url)
    assert took < 4.0  # the hook returned long before the index answered
    entry = env.wait_cached("error", timeout=15)
    assert "timed out" in entry["error"] or "Timeout" in entry["error"]
    dead = "http://127.0.0.1:9/pypi/memsearch-fast/json"
    env.cache.unlink()
    line, _ = env.status(MEMSEARCH_UPDATE_URL=dead)
    assert "update" not in line and "error" in env.wait_cached("error")


def test_offline_means_no_request(env: Env, index: Index) -> None:
    for _ in range(2):
        line, _ = env.status(MEMSEARCH_UPDATE_URL=index.url, MEMSEARCH_OFFLINE="1")
        assert "update" not in line
    time.sleep(1.0)
    assert index.hits == 0 and not env.cache.exists()


def test_versions_compare_as_releases() -> None:
    assert update.newer("0.2.0", "0.1.9") and update.newer("0.10.0", "0.9.0") and update.newer("v1.0", "0.9")
    assert not update.newer("0.2.0rc1", "0.2.0") and update.newer("0.2.0", "0.2.0rc1")
    assert not update.newer("0.1.0", "0.1.0") and not update.newer("junk", "0.1.0")
