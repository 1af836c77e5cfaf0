"""Configuration layering, the project-file allowlist and secret masking."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from memsearch_fast import config as cfgmod
from memsearch_fast.config import display, files, schema


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
    assert cfg.embedding.provider == "onnx"
    assert cfg.embedding.model == "all-MiniLM-L6-v2"
    assert cfg.to_dict()["milvus"] == {"uri": "~/.memsearch/milvus.db", "token": "", "collection": "memsearch_chunks"}
    assert cfg.to_dict()["chunking"] == {"max_chunk_size": 1500, "overlap_lines": 2}
    # Another provider gets its own default model, not the onnx one.
    assert cfgmod.resolve({"embedding.provider": "openai"}).embedding.model == "text-embedding-3-small"


def test_precedence(dirs: tuple[Path, Path]) -> None:
    home, project = dirs
    assert cfgmod.global_config_path() == home / ".memsearch" / "config.toml"
    # --default-collection only replaces the built-in default.
    assert cfgmod.resolve(default_collection="fallback").milvus.collection == "fallback"

    global_file(home, '[milvus]\ncollection = "global"\nuri = "/g.db"\n[chunking]\nmax_chunk_size = 900\n')
    cfg = cfgmod.resolve(default_collection="fallback")
    assert cfg.milvus.collection == "global" and cfg.milvus.uri == "/g.db"

    write(project / ".memsearch.toml", '[milvus]\ncollection = "project"\n[chunking]\noverlap_lines = 5\n')
    cfg = cfgmod.resolve(default_collection="fallback")
    assert cfg.milvus.collection == "project"
    assert cfg.to_dict()["chunking"] == {"max_chunk_size": 900, "overlap_lines": 5}

    cfg = cfgmod.resolve({"milvus.collection": "flag", "chunking.max_chunk_size": None, "embedding.batch_size": "64"})
    assert cfg.milvus.collection == "flag"
    assert cfg.chunking.max_chunk_size == 900  # None means "flag not given"
    assert cfg.embedding.batch_size == 64


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
    assert cfg.to_dict()["milvus"] == {"uri": "~/.memsearch/milvus.db", "token": "", "collection": "ok"}
    assert cfg.to_dict()["embedding"] == {
        "provider": "onnx",
        "model": "all-MiniLM-L6-v2",
        "batch_size": 16,
        "base_url": "",
        "api_key": "",
    }
    assert cfg.indexing.exclude == ("drafts/",)
    assert len(warnings) == 1 and "\n" not in warnings[0]
    for key in ("milvus.uri", "milvus.token", "embedding.provider", "embedding.model", "embedding.base_url"):
        assert key in warnings[0]
    assert "stolen" not in warnings[0]

    with pytest.raises(cfgmod.ConfigError, match=r"may not set milvus\.uri"):
        cfgmod.set_value("milvus.uri", "http://x", project=True)
    value, path = cfgmod.set_value("chunking.max_chunk_size", "900", project=True)
    assert value == 900 and path == project / ".memsearch.toml"
    assert cfgmod.resolve().chunking.max_chunk_size == 900


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
    assert cfgmod.resolve().indexing.ignore_files == (".gitignore", ".mdignore")

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
    assert cfg.embedding.api_key == "sk-live-0123456789"
    shown = display.for_display(cfgmod.merged(resolve_env=False))
    assert shown["embedding"]["api_key"] == "env:TEST_MS_KEY"
    assert shown["milvus"]["token"] == "roo***"
    assert display.mask("sk-abcdefghijklmnop") == "sk-***"
    assert display.mask("short") == "***" and display.mask("") == ""


@pytest.mark.slow(reason="runs a series of `memsearch config` subprocesses")
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
    # Of --resolved/--global/--project the last one given wins, as in 0.4.23.
    last = cli(["config", "list", "--resolved", "--global", "-j"], home, project)
    assert last.returncode == 0 and json.loads(last.stdout) == {
        "embedding": {"api_key": "sk-***"},
        "milvus": {"collection": "mine"},
    }
    last = cli(["config", "list", "--global", "--resolved", "-j"], home, project)
    assert "chunking" in json.loads(last.stdout)
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
    written = files.flatten(files.load_file(home / ".memsearch" / "config.toml"))
    assert written["embedding.provider"] == "onnx" and written["indexing.ignore_files"] == [".gitignore"]
    proc = cli(["config", "init", "--project"], home, project)
    assert proc.returncode == 0, proc.stderr
    written = files.flatten(files.load_file(project / ".memsearch.toml"))
    assert set(written) == set(schema.PROJECT_ALLOWED)


def test_project_file_cannot_read_the_environment() -> None:
    from memsearch_fast.config.files import filter_project

    allowed, rejected = filter_project({"milvus": {"collection": "env:SECRET_TOKEN"}, "chunking": {"overlap_lines": 3}})
    assert rejected == ["milvus.collection"]
    assert allowed == {"chunking": {"overlap_lines": 3}}


def test_chunking_values_are_bounded() -> None:
    from memsearch_fast.config.files import filter_project
    from memsearch_fast.config.schema import ConfigError

    for key, value in (("max_chunk_size", 100_000), ("overlap_lines", 10**6)):
        with pytest.raises(ConfigError):
            filter_project({"chunking": {key: value}})


def test_saved_config_is_owner_only(tmp_path) -> None:
    from memsearch_fast.config.files import save_file

    path = tmp_path / "config.toml"
    save_file({"embedding": {"api_key": "sk-test"}}, path)
    assert path.stat().st_mode & 0o777 == 0o600


# -- the LLM, prompt and plugin keys -----------------------------------------------------


def test_llm_prompt_and_plugin_keys(dirs: tuple[Path, Path]) -> None:
    home, _ = dirs
    cfg = cfgmod.resolve()
    assert cfg.to_dict()["llm"] == {"provider": "", "model": "", "base_url": "", "api_key": "", "providers": {}}
    assert cfg.compact.llm_provider == "openai" and cfg.prompts.summarize == ""
    for platform in ("claude-code", "codex", "opencode", "openclaw", "dsh"):
        assert cfg.to_dict()["plugins"][platform]["summarize"] == {"enabled": True, "provider": "", "model": ""}
        assert cfg.plugins[platform].project_review.output_file == ".memsearch/PROJECT.md"
        assert cfg.plugins[platform].memory_to_skill.min_occurrences == 3

    assert cfgmod.set_value("plugins.codex.summarize.enabled", "false")[0] is False
    assert cfgmod.set_value("plugins.claude_code.summarize.provider", "work")[0] == "work"  # the reference's alias
    assert cfgmod.set_value("llm.providers.work.type", "anthropic")[0] == "anthropic"
    assert cfgmod.set_value("plugins.opencode.memory_to_skill.paths", ".claude/skills, .codex/skills")[0] == [
        ".claude/skills",
        ".codex/skills",
    ]
    cfg = cfgmod.resolve()
    assert cfg.plugins["codex"].summarize.enabled is False
    assert cfg.plugins["claude-code"].summarize.provider == "work"
    assert cfgmod.get_value(cfgmod.merged(), "plugins.claude_code.summarize.provider") == "work"
    assert cfg.to_dict()["llm"]["providers"] == {
        "work": {"type": "anthropic", "model": "", "base_url": "", "api_key": ""}
    }

    for key, value, message in (
        ("plugins.codex.summarize.enabled", "maybe", "expected true or false"),
        ("plugins.vscode.summarize.provider", "x", "platform one of claude-code"),
        ("plugins.codex.summarize.temperature", "1", "summarize fields: enabled, provider, model"),
        ("llm.providers.work.temperature", "1", "llm.providers.*.type"),
        ("llm.providers..type", "x", "unknown config key"),
        ("prompts.nope", "x", "prompts.summarize"),
    ):
        with pytest.raises(cfgmod.ConfigError, match=message):
            cfgmod.set_value(key, value)

    # A file written by the reference, alias table included, loads.
    global_file(
        home,
        '[plugins.claude_code.summarize]\nprovider = "a"\nmodel = "m"\n'
        '[plugins.claude-code.summarize]\nprovider = "b"\n'
        '[llm.providers.a]\ntype = "openai"\nextra = 1\n',
    )
    cfg = cfgmod.resolve()
    assert cfg.to_dict()["plugins"]["claude-code"]["summarize"] == {"enabled": True, "provider": "b", "model": "m"}
    global_file(home, '[plugins.codex.summarize]\nenabled = "sometimes"\n')
    with pytest.raises(cfgmod.ConfigError, match=r"plugins\.codex\.summarize\.enabled"):
        cfgmod.resolve()


def test_project_file_cannot_set_llm_keys(dirs: tuple[Path, Path]) -> None:
    _, project = dirs
    write(
        project / ".memsearch.toml",
        '[llm]\nprovider = "openai"\nbase_url = "http://evil"\n[llm.providers.evil]\ntype = "openai"\n'
        '[compact]\nbase_url = "http://evil"\n[prompts]\nsummarize = "/tmp/evil.txt"\n'
        '[plugins.claude-code.summarize]\nprovider = "evil"\nmodel = "x"\n'
        "[plugins.claude_code.summarize]\nenabled = false\n",
    )
    warnings: list[str] = []
    cfg = cfgmod.resolve(warn=warnings.append)
    assert cfg.llm.provider == "" and cfg.to_dict()["llm"]["providers"] == {}
    assert cfg.compact.base_url == "" and cfg.prompts.summarize == ""
    assert cfg.to_dict()["plugins"]["claude-code"]["summarize"] == {"enabled": True, "provider": "", "model": ""}
    for key in (
        "llm.provider",
        "llm.providers.evil.type",
        "prompts.summarize",
        "plugins.claude-code.summarize.provider",
    ):
        assert key in warnings[0]
    for key in ("llm.model", "llm.providers.x.api_key", "prompts.summarize", "plugins.codex.summarize.provider"):
        with pytest.raises(cfgmod.ConfigError, match="may not set"):
            cfgmod.set_value(key, "x", project=True)


def test_llm_secrets_are_masked_and_read_late(dirs: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    home, _ = dirs
    global_file(
        home,
        '[llm]\napi_key = "sk-ant-LIVE-0123456789"\nbase_url = "env:UNSET_LLM_URL"\n'
        '[llm.providers.work]\napi_key = "sk-WORK-0123456789"\n[compact]\napi_key = "env:UNSET_COMPACT_KEY"\n',
    )
    # Unset variables in the LLM sections do not break indexing or search: they are read when an LLM is called.
    cfg = cfgmod.resolve()
    assert cfg.llm.base_url == "env:UNSET_LLM_URL"
    shown = display.for_display(cfgmod.merged(resolve_env=False))
    assert shown["llm"]["api_key"] == "sk-***" and shown["llm"]["providers"]["work"]["api_key"] == "sk-***"
    assert shown["llm"]["base_url"] == "env:UNSET_LLM_URL" and shown["compact"]["api_key"] == "env:UNSET_COMPACT_KEY"
    # Elsewhere an unset variable is still an error.
    global_file(home, '[embedding]\nbase_url = "env:UNSET_EMBEDDING_URL"\n')
    with pytest.raises(cfgmod.ConfigError, match="UNSET_EMBEDDING_URL"):
        cfgmod.resolve()


@pytest.mark.slow(reason="runs a series of `memsearch config` subprocesses")
def test_llm_config_commands(tmp_path: Path) -> None:
    home, project = tmp_path / "home", tmp_path / "project"
    project.mkdir()
    secret = "sk-ant-SECRET0123456789"
    for key, value in (
        ("llm.provider", "anthropic"),
        ("llm.providers.work.api_key", secret),
        ("plugins.claude-code.summarize.provider", "work"),
        ("plugins.codex.summarize.enabled", "off"),
    ):
        proc = cli(["config", "set", key, value], home, project)
        assert proc.returncode == 0, proc.stderr
        assert secret not in proc.stdout
    assert cli(["config", "get", "plugins.codex.summarize.enabled"], home, project).stdout == "false\n"
    assert cli(["config", "get", "plugins.claude-code.summarize.provider"], home, project).stdout == "work\n"
    assert cli(["config", "get", "llm.providers.work.api_key"], home, project).stdout == "sk-***\n"
    for args in (["config", "list"], ["config", "list", "-j"], ["config", "list", "--global"]):
        proc = cli(args, home, project)
        assert proc.returncode == 0 and secret not in proc.stdout and "sk-***" in proc.stdout
    data = json.loads(cli(["config", "list", "-j"], home, project).stdout)
    assert data["llm"]["provider"] == "anthropic" and data["plugins"]["codex"]["summarize"]["enabled"] is False
    bad = cli(["config", "set", "--project", "llm.provider", "openai"], home, project)
    assert bad.returncode == 1 and bad.stderr.count("\n") == 1

    # The wizard writes the summarize routing and [llm], not the deprecated [compact] or the advanced tasks.
    proc = cli(["config", "init"], home, project)
    assert proc.returncode == 0, proc.stderr
    written = files.flatten(files.load_file(home / ".memsearch" / "config.toml"))
    assert written["plugins.claude-code.summarize.provider"] == "work" and written["llm.provider"] == "anthropic"
    assert written["llm.providers.work.api_key"] == secret
    assert not any(k.startswith(("compact.", "plugins.dsh.")) or ".project_review." in k for k in written)


def test_settings_mirror_the_schema(dirs: tuple[Path, Path]) -> None:
    """Every configuration key is a settings attribute, and the settings cannot be changed."""
    import dataclasses

    cfg = cfgmod.resolve()
    assert set(files.flatten(cfg.to_dict())) == set(schema.SCHEMA)
    assert cfg.to_dict() == cfgmod.merged()
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.milvus.uri = "/elsewhere.db"  # type: ignore[misc]


def test_a_project_file_sets_chunking_only_near_the_defaults(dirs: tuple[Path, Path]) -> None:
    """A cloned repository's 50-character chunks and 1,000 lines of overlap would
    multiply its index many times over: refused there, in one warning naming the
    value and the range, and kept as the user's config or the defaults have them."""
    from memsearch_fast.config.files import filter_project

    allowed, rejected = filter_project({"chunking": {"max_chunk_size": 50, "overlap_lines": 1000}})
    assert allowed == {}
    assert rejected == [
        f"chunking.max_chunk_size = 50 (a project file: 750-{schema.MAX_CHUNK_SIZE_LIMIT})",
        "chunking.overlap_lines = 1000 (a project file: 0-10)",
    ]
    assert filter_project({"chunking": {"max_chunk_size": 750, "overlap_lines": 10}})[1] == []
    home, project = dirs
    refused = cli(["config", "set", "chunking.overlap_lines", "50", "--project"], home, project)
    assert refused.returncode != 0 and "only from 0 to 10" in refused.stderr
    assert cli(["config", "set", "chunking.overlap_lines", "50"], home, project).returncode == 0  # the user's own
