"""Configuration layering, the project-file allowlist and secret masking."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from memsearch_fast import config as cfgmod


@pytest.fixture
def dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """(home, project): $HOME and the current directory, both empty."""
    home, project = tmp_path / "home", tmp_path / "project"
    home.mkdir()
    project.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(project)
    return home, project


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def global_file(home: Path, text: str) -> Path:
    return write(home / ".memsearch" / "config.toml", text)


def cli(args: list[str], home: Path, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("MEMSEARCH_")}
    full_env.update(HOME=str(home), **env)
    return subprocess.run(
        [sys.executable, "-m", "memsearch_fast", *args],
        env=full_env,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_defaults(dirs: tuple[Path, Path]) -> None:
    cfg = cfgmod.resolve()
    assert cfg["embedding"]["provider"] == "onnx"
    assert cfg["embedding"]["model"] == "all-MiniLM-L6-v2"
    assert cfg["milvus"] == {"uri": "~/.memsearch/milvus.db", "token": "", "collection": "memsearch_chunks"}
    assert cfg["chunking"] == {"max_chunk_size": 1500, "overlap_lines": 2}
    # Another provider gets its own default model, not the onnx one.
    assert cfgmod.resolve({"embedding.provider": "openai"})["embedding"]["model"] == "text-embedding-3-small"


def test_precedence(dirs: tuple[Path, Path]) -> None:
    home, project = dirs
    assert cfgmod.global_config_path() == home / ".memsearch" / "config.toml"
    # --default-collection only replaces the built-in default.
    assert cfgmod.resolve(default_collection="fallback")["milvus"]["collection"] == "fallback"

    global_file(home, '[milvus]\ncollection = "global"\nuri = "/g.db"\n[chunking]\nmax_chunk_size = 900\n')
    cfg = cfgmod.resolve(default_collection="fallback")
    assert cfg["milvus"]["collection"] == "global" and cfg["milvus"]["uri"] == "/g.db"

    write(project / ".memsearch.toml", '[milvus]\ncollection = "project"\n[chunking]\noverlap_lines = 5\n')
    cfg = cfgmod.resolve(default_collection="fallback")
    assert cfg["milvus"]["collection"] == "project"
    assert cfg["chunking"] == {"max_chunk_size": 900, "overlap_lines": 5}

    cfg = cfgmod.resolve({"milvus.collection": "flag", "chunking.max_chunk_size": None, "embedding.batch_size": "64"})
    assert cfg["milvus"]["collection"] == "flag"
    assert cfg["chunking"]["max_chunk_size"] == 900  # None means "flag not given"
    assert cfg["embedding"]["batch_size"] == 64


def test_project_file_cannot_redirect_data_or_credentials(dirs: tuple[Path, Path]) -> None:
    _home, project = dirs
    write(
        project / ".memsearch.toml",
        '[milvus]\nuri = "http://evil:19530"\ntoken = "stolen"\ncollection = "ok"\n'
        '[embedding]\nprovider = "openai"\nmodel = "evil/model"\nbase_url = "http://evil"\napi_key = "x"\n'
        "batch_size = 16\n"
        '[indexing]\nexclude = ["drafts/"]\n',
    )
    warnings: list[str] = []
    cfg = cfgmod.resolve(warn=warnings.append)
    assert cfg["milvus"] == {"uri": "~/.memsearch/milvus.db", "token": "", "collection": "ok"}
    assert cfg["embedding"] == {
        "provider": "onnx",
        "model": "all-MiniLM-L6-v2",
        "batch_size": 16,
        "base_url": "",
        "api_key": "",
    }
    assert cfg["indexing"]["exclude"] == ["drafts/"]
    assert len(warnings) == 1 and "\n" not in warnings[0]
    for key in ("milvus.uri", "milvus.token", "embedding.provider", "embedding.model", "embedding.base_url"):
        assert key in warnings[0]
    assert "stolen" not in warnings[0]

    with pytest.raises(cfgmod.ConfigError, match=r"may not set milvus\.uri"):
        cfgmod.set_value("milvus.uri", "http://x", project=True)
    value, path = cfgmod.set_value("chunking.max_chunk_size", "700", project=True)
    assert value == 700 and path == project / ".memsearch.toml"
    assert cfgmod.resolve()["chunking"]["max_chunk_size"] == 700


def test_values_are_checked(dirs: tuple[Path, Path]) -> None:
    home, _ = dirs
    with pytest.raises(cfgmod.ConfigError, match="unknown config key"):
        cfgmod.set_value("milvus.nope", "1")
    with pytest.raises(cfgmod.ConfigError, match="must be >= 1"):
        cfgmod.set_value("chunking.max_chunk_size", "0")
    with pytest.raises(cfgmod.ConfigError, match="expected an integer"):
        cfgmod.resolve({"embedding.batch_size": "many"})
    assert cfgmod.set_value("indexing.exclude", "a/, b/")[0] == ["a/", "b/"]
    assert cfgmod.set_value("indexing.ignore_files", '[".gitignore", ".mdignore"]')[0] == [".gitignore", ".mdignore"]
    assert cfgmod.resolve()["indexing"]["ignore_files"] == [".gitignore", ".mdignore"]

    global_file(home, '[chunking]\nmax_chunk_size = "big"\n')
    with pytest.raises(cfgmod.ConfigError, match=r"chunking\.max_chunk_size.*config\.toml"):
        cfgmod.resolve()
    global_file(home, "[chunking\n")
    with pytest.raises(cfgmod.ConfigError, match="cannot parse"):
        cfgmod.resolve()


def test_env_references_and_masking(dirs: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    home, _ = dirs
    global_file(home, '[embedding]\napi_key = "env:TEST_MS_KEY"\n[milvus]\ntoken = "root:Milvus-secret-token"\n')
    with pytest.raises(cfgmod.ConfigError, match="TEST_MS_KEY"):
        cfgmod.resolve()
    monkeypatch.setenv("TEST_MS_KEY", "sk-live-0123456789")
    cfg = cfgmod.resolve()
    assert cfg["embedding"]["api_key"] == "sk-live-0123456789"
    shown = cfgmod.for_display(cfgmod.resolve(resolve_env=False))
    assert shown["embedding"]["api_key"] == "env:TEST_MS_KEY"
    assert shown["milvus"]["token"] == "roo***"
    assert cfgmod.mask("sk-abcdefghijklmnop") == "sk-***"
    assert cfgmod.mask("short") == "***" and cfgmod.mask("") == ""


def test_config_commands(tmp_path: Path) -> None:
    home, project = tmp_path / "home", tmp_path / "project"
    project.mkdir()
    secret = "sk-proj-SECRET0123456789"
    assert (
        cli(["config", "set", "embedding.api_key", secret], home, project)
        .stdout.strip()
        .endswith(f"= sk-*** in {home / '.memsearch' / 'config.toml'}")
    )
    assert cli(["config", "set", "milvus.collection", "mine"], home, project).returncode == 0
    write(project / ".memsearch.toml", '[embedding]\nbase_url = "http://evil"\nbatch_size = 8\n')

    listed = cli(["config", "list", "-j"], home, project)
    assert listed.returncode == 0, listed.stderr
    data = json.loads(listed.stdout)
    assert data["embedding"]["api_key"] == "sk-***" and data["embedding"]["base_url"] == ""
    assert data["embedding"]["batch_size"] == 8 and data["milvus"]["collection"] == "mine"
    assert [line for line in listed.stderr.splitlines() if line] == [listed.stderr.strip()]
    assert "embedding.base_url" in listed.stderr

    for args in (["config", "list"], ["config", "list", "--global"], ["config", "get", "embedding.api_key"]):
        proc = cli(args, home, project)
        assert proc.returncode == 0 and secret not in proc.stdout + proc.stderr
        assert "sk-***" in proc.stdout
    assert cli(["config", "get", "milvus.collection"], home, project).stdout.strip() == "mine"
    assert (
        cli(["config", "get", "chunking.max_chunk_size", "--default-collection", "x"], home, project).stdout.strip()
        == "1500"
    )

    bad = cli(["config", "set", "--project", "embedding.provider", "openai"], home, project)
    assert bad.returncode == 1 and bad.stderr.count("\n") == 1 and "Traceback" not in bad.stderr
    bad = cli(["config", "set", "chunking.max_chunk_size", "zero"], home, project)
    assert bad.returncode == 1 and bad.stderr.startswith("Error: bad config value")

    # A broken file is one line too, for every command that reads configuration.
    write(home / ".memsearch" / "config.toml", "[milvus\n")
    for args in (["config", "list"], ["stats"]):
        proc = cli(args, home, project)
        assert proc.returncode == 1 and proc.stderr.startswith("Error: cannot parse") and proc.stderr.count("\n") == 1

    # A configured collection is used by commands (no model is loaded: the database does not exist).
    write(home / ".memsearch" / "config.toml", '[milvus]\ncollection = "fromfile"\n')
    proc = cli(["stats", "--milvus-uri", str(tmp_path / "none.db")], home, project)
    assert proc.returncode == 1 and "'fromfile'" in proc.stderr
    proc = cli(["stats", "--milvus-uri", str(tmp_path / "none.db"), "-c", "fromflag"], home, project)
    assert "'fromflag'" in proc.stderr


def test_config_init_without_terminal(tmp_path: Path) -> None:
    home, project = tmp_path / "home", tmp_path / "project"
    project.mkdir()
    proc = cli(["config", "init"], home, project)
    assert proc.returncode == 0, proc.stderr
    written = cfgmod.flatten(cfgmod.load_file(home / ".memsearch" / "config.toml"))
    assert written["embedding.provider"] == "onnx" and written["indexing.ignore_files"] == [".gitignore"]
    proc = cli(["config", "init", "--project"], home, project)
    assert proc.returncode == 0, proc.stderr
    written = cfgmod.flatten(cfgmod.load_file(project / ".memsearch.toml"))
    assert set(written) == set(cfgmod.PROJECT_ALLOWED)


def test_project_file_cannot_read_the_environment() -> None:
    from memsearch_fast.config import filter_project

    allowed, rejected = filter_project({"milvus": {"collection": "env:SECRET_TOKEN"}, "chunking": {"overlap_lines": 3}})
    assert rejected == ["milvus.collection"]
    assert allowed == {"chunking": {"overlap_lines": 3}}


def test_chunking_values_are_bounded() -> None:
    from memsearch_fast.config import ConfigError, filter_project

    for key, value in (("max_chunk_size", 100_000), ("overlap_lines", 10**6)):
        with pytest.raises(ConfigError):
            filter_project({"chunking": {key: value}})


def test_saved_config_is_owner_only(tmp_path) -> None:
    from memsearch_fast.config import save_file

    path = tmp_path / "config.toml"
    save_file({"embedding": {"api_key": "sk-test"}}, path)
    assert path.stat().st_mode & 0o777 == 0o600
