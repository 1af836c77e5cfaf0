"""What the command says on a fresh machine: progress, counts, missing keys,
bad flags, help texts and install advice, each as a real subprocess or run."""

from __future__ import annotations

import asyncio
import io
import json
import os
import pty
import re
import select
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers.cli import make_env, ok, one_line_error, run
from tests.helpers.lite3 import make_lite3_database

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def cli_env(tmp_path: Path, model_dir: Path) -> dict[str, str]:
    home = tmp_path / "home"
    (home / ".memsearch").mkdir(parents=True)
    (home / ".memsearch" / "config.toml").write_text(f'[embedding]\nmodel = "{model_dir}"\n', encoding="utf-8")
    env = make_env(home)
    for key in ("OPENAI_API_KEY", "OPENAI_BASE_URL"):
        env.pop(key, None)
    return env


# -- progress ---------------------------------------------------------------------------


@pytest.mark.slow(reason="indexes through `memsearch` subprocesses with the real model")
def test_progress_never_shows_more_embedded_than_queued_and_gives_an_eta(
    tmp_path: Path, model_dir: Path, db: Path
) -> None:
    """One file of 3,000 sections fills the embed stage's sort window and its
    batches in flight: its file and chunks must be counted when it is read, not
    after most of it is embedded."""
    from memsearch_fast.api import MemSearch
    from memsearch_fast.cli.display import JsonProgress

    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "big.md").write_text("".join(f"## P{i}\n\nw{i}\n\n" for i in range(3000)), encoding="utf-8")
    for i in range(3):
        (notes / f"small{i}.md").write_text(f"# Small {i}\n\nA short note {i}.\n", encoding="utf-8")
    stream = io.StringIO()
    progress = JsonProgress(stream, interval=0)
    with MemSearch([str(notes)], embedding_model=str(model_dir), milvus_uri=str(db)) as ms:
        report = asyncio.run(ms.index_with_report(progress=progress))
    progress.finish()
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert lines and report.embedded > 2900
    assert all(line["embedded"] <= line["chunks"] for line in lines), [
        (line["embedded"], line["chunks"]) for line in lines if line["embedded"] > line["chunks"]
    ][:3]
    embedding = [line for line in lines if 0 < line["embedded"] < report.embedded]
    assert embedding and all(line["eta_s"] is not None and line["files_done"] > 0 for line in embedding)
    assert lines[-1]["eta_s"] == 0 and lines[-1]["embedded"] == lines[-1]["chunks"] == report.embedded


class PacedProvider:
    """Vectors from the text's hash, at a cost in time proportional to its
    characters on one worker: a model's cost, without its noise on a busy machine."""

    model_name, dimension, batch_size, workers = "paced", 384, 32, 1
    SECONDS_PER_CHAR = 80e-6

    def __init__(self) -> None:
        self._lock = asyncio.Lock()

    async def embed(self, texts: list[str]) -> list[list[float]]:
        import numpy as np

        async with self._lock:
            await asyncio.sleep(sum(map(len, texts)) * self.SECONDS_PER_CHAR)
        out = []
        for t in texts:
            v = np.random.default_rng(abs(hash(t)) % 2**32).standard_normal(384)
            out.append((v / np.linalg.norm(v)).tolist())
        return out

    async def embed_query(self, text: str) -> list[float]:
        return (await self.embed([text]))[0]


@pytest.mark.slow(reason="an index run of 12 s, timed")
def test_the_eta_follows_the_work_on_files_of_mixed_sizes(tmp_path: Path) -> None:
    """Files of a few bytes to 60 KB, interleaved: from a fifth of the run on, the ETA is
    within 30 % of the time that really remains (and the share done follows the clock)."""
    import random

    from memsearch_fast.cli.display import JsonProgress
    from memsearch_fast.index import run_index
    from memsearch_fast.index.scan import scan_paths
    from memsearch_fast.store import MilvusStore

    rng = random.Random(7)
    notes = tmp_path / "notes"
    notes.mkdir()
    sizes = [1] * 12 + [15] * 10 + [120] * 3
    rng.shuffle(sizes)
    for i, sections in enumerate(sizes):
        body = "".join(
            f"## Part {j}\n\n"
            + " ".join(f"Detail {k} of part {j} in file {i}." for k in range(rng.randint(1, 14)))
            + "\n\n"
            for j in range(sections)
        )
        (notes / f"{i:03d}.md").write_text(f"# File {i}\n\n{body}", encoding="utf-8")
    stamps: list[tuple[float, dict]] = []

    class Stamped(io.StringIO):
        def write(self, text: str) -> int:
            stamps.extend((time.monotonic(), json.loads(line)) for line in text.splitlines() if line)
            return len(text)

    store = MilvusStore(str(tmp_path / "m.db"), dimension=384)
    try:
        start = time.monotonic()
        asyncio.run(run_index(store, PacedProvider(), scan_paths([notes]), progress=JsonProgress(Stamped(), 0)))
    finally:
        store.close()
    # The ETA is of the embedding work: it ends with the first line that says all is done.
    # What follows (the flush, the manifest, the loop's close) is the store's, not counted.
    end = next(at for at, line in stamps if line["done"] >= 1.0)
    wall = end - start
    checked = 0
    for at, line in stamps:
        real = end - at
        if at - start < 0.2 * wall or real < 1.0:
            continue
        checked += 1
        assert line["eta_s"] == pytest.approx(real, rel=0.3), (round(at - start, 1), line, round(real, 1))
        assert line["done"] == pytest.approx((at - start) / wall, abs=0.2), (round(at - start, 1), line)
    assert checked >= 6, (checked, wall)


def test_the_bar_shows_an_eta_once_chunks_are_embedded() -> None:
    from memsearch_fast.cli.display import RichProgress

    bar = RichProgress(io.StringIO())
    bar.start(10)
    fields = bar._progress.tasks[0].fields
    assert fields["eta"] == "estimating"
    bar.files_done(2, 100)
    time.sleep(0.05)
    bar.chunks_embedded(20)
    eta = bar._progress.tasks[0].fields["eta"]
    assert re.fullmatch(r"\d+:\d\d:\d\d", eta), eta  # 500 expected, 480 left at the rate so far
    # The span pass after the chunks: a bar of its own, with its own ETA once it has a rate.
    bar.spans_done(0, 10)
    assert bar._progress.tasks[1].fields["eta"] == "estimating"
    time.sleep(0.05)
    bar.spans_done(5, 10)
    bar.finish()
    spans = bar._progress.tasks[1]
    assert spans.completed == 5 and spans.total == 10
    assert re.fullmatch(r"\d+:\d\d:\d\d", spans.fields["eta"]), spans.fields["eta"]


# -- index reports ----------------------------------------------------------------------


@pytest.mark.slow(reason="indexes through `memsearch` subprocesses with the real model")
def test_one_chunk_is_singular_and_a_heading_only_file_is_new(cli_env: dict[str, str], tmp_path: Path) -> None:
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "one.md").write_text("# One\n\nOne paragraph.\n", encoding="utf-8")
    (notes / ".github").mkdir()
    (notes / ".github" / "CONTRIBUTING.md").write_text("# How to help\n\nRun the tests.\n", encoding="utf-8")
    db = tmp_path / "db" / "m.db"
    out = ok(run(["index", str(notes), "--milvus-uri", str(db)], cli_env)).stdout
    assert out.startswith("Indexed 1 chunk.\n"), out
    # The hidden rule's leftovers are said, with the way to index them.
    assert "  hidden:  1 markdown file skipped in hidden folders and files (.github); " in out, out
    named = ok(run(["index", str(notes), str(notes / ".github"), "--milvus-uri", str(db)], cli_env)).stdout
    assert named.startswith("Indexed 1 chunk.\n") and "hidden:" not in named, named

    only = tmp_path / "only"
    only.mkdir()
    (only / "title.md").write_text("# Just a title\n", encoding="utf-8")
    fresh = tmp_path / "db" / "fresh.db"
    report = json.loads(ok(run(["index", str(only), "--milvus-uri", str(fresh), "-j"], cli_env)).stdout)
    assert (report["changed"], report["unchanged"], report["embedded"]) == (1, 0, 0), report
    from memsearch_fast.lite import broker

    broker.stop_server(str(db))
    broker.stop_server(str(fresh))


def test_a_first_run_that_fails_at_its_first_embedding_leaves_nothing(cli_env: dict[str, str], tmp_path: Path) -> None:
    """An endpoint that refuses every embedding: the first run's database, its side
    files and its server go with the failure; a database that holds chunks stays."""
    from memsearch_fast.lite.process import cmdline_args
    from tests.helpers.llm import KEY, FakeLLMServer

    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "a.md").write_text("# A\n\nSome text to embed.\n", encoding="utf-8")
    where = tmp_path / "db"
    where.mkdir()
    db = where / "m.db"
    server = FakeLLMServer()  # /v1/embeddings is not one of its endpoints: 404
    try:
        remote = ["-p", "openai", "--base-url", server.url + "/v1", "--api-key", KEY, "--milvus-uri", str(db)]
        proc = run(["index", str(notes), *remote], cli_env, timeout=120)
        one_line_error(proc, "Error:")
        assert any(r["path"] == "/v1/embeddings" for r in server.requests)  # it got as far as embedding
        assert sorted(p.name for p in where.iterdir()) == []
        pids = [int(p.name) for p in Path("/proc").glob("[0-9]*")]
        serving = [pid for pid in pids if any(str(db) in a for a in cmdline_args(pid) or [])]
        assert serving == [], serving
        # A database with chunks in it is kept when a later run fails.
        ok(run(["index", str(notes), "--milvus-uri", str(db)], cli_env))
        (notes / "b.md").write_text("# B\n\nMore text.\n", encoding="utf-8")
        assert run(["index", str(notes), *remote], cli_env, timeout=120).returncode != 0
        assert db.is_file()
    finally:
        server.close()
        from memsearch_fast.lite import broker

        broker.stop_server(str(db))


def test_a_missing_openai_key_is_said_before_anything_is_made(cli_env: dict[str, str], tmp_path: Path) -> None:
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "a.md").write_text("# A\n\ntext\n", encoding="utf-8")
    where = tmp_path / "db"
    where.mkdir()
    start = time.monotonic()
    proc = run(["index", str(notes), "-p", "openai", "--milvus-uri", str(where / "m.db")], cli_env, timeout=60)
    one_line_error(proc, "OPENAI_API_KEY", "--api-key")
    assert time.monotonic() - start < 15  # no retries against api.openai.com
    assert list(where.iterdir()) == []  # no database, no server, no lock file
    one_line_error(run(["search", "x", "-p", "openai", "--milvus-uri", str(where / "m.db")], cli_env), "OPENAI_API_KEY")
    assert list(where.iterdir()) == []


@pytest.mark.slow(reason="indexes through `memsearch` subprocesses with the real model")
def test_failed_runs_leave_no_lock_files(cli_env: dict[str, str], tmp_path: Path) -> None:
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "a.md").write_text("# A\n\ntext\n", encoding="utf-8")
    where = tmp_path / "db"
    where.mkdir()
    one_line_error(
        run(["index", str(notes), "-m", str(tmp_path / "no-model"), "--milvus-uri", str(where / "m.db")], cli_env),
        "no-model",
    )
    assert list(where.iterdir()) == []
    make_lite3_database(where / "old.db")
    for command in ("index", "watch"):
        one_line_error(run([command, str(notes), "--milvus-uri", str(where / "old.db"), "-q"], cli_env), "3.x")
    assert [p.name for p in where.iterdir()] == ["old.db"]


def test_an_empty_milvus_uri_is_a_usage_error(cli_env: dict[str, str], tmp_path: Path) -> None:
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "a.md").write_text("# A\n\ntext\n", encoding="utf-8")
    for args in (["index", str(notes)], ["search", "x"], ["stats"]):
        one_line_error(run([*args, "--milvus-uri", ""], cli_env, cwd=tmp_path), "milvus.uri", "empty")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["home", "notes"]  # nothing made in the cwd


# -- help and install advice ------------------------------------------------------------


def test_help_lists_the_hook_platforms_events_and_providers(cli_env: dict[str, str]) -> None:
    from memsearch_fast.agents.hooks import EVENTS, PLATFORMS
    from memsearch_fast.embeddings import PROVIDERS

    text = " ".join(ok(run(["hook", "--help"], cli_env)).stdout.split())
    for name in (*PLATFORMS, *EVENTS):
        assert re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", text), name
    index_help = " ".join(ok(run(["index", "--help"], cli_env)).stdout.split())
    provider = index_help[index_help.index("--provider") :]
    for name in PROVIDERS:
        assert name in provider[:300], name


def test_config_init_explains_each_question(cli_env: dict[str, str], tmp_path: Path) -> None:
    """In a terminal every question comes after one line saying what it sets."""
    env = {**cli_env, "TERM": "dumb", "COLUMNS": "200"}
    argv = [sys.executable, "-m", "memsearch_fast", "config", "init"]
    pid, master = pty.fork()  # the pty is the child's terminal: hidden prompts read /dev/tty
    if pid == 0:  # pragma: no cover - the child
        os.chdir(tmp_path)
        os.execve(sys.executable, argv, env)
    out = b""
    hidden = False
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.5)
            if not ready:
                continue
            try:
                data = os.read(master, 65536)
            except OSError:
                break  # the child exited
            if not data:
                break
            out += data
            # Keep the shown value. A hidden prompt (a secret) is its question,
            # then " " once the terminal's echo is off: answered only then
            # (input typed before that is dropped).
            hidden = hidden or b"keeps the current value" in data
            if data.endswith(b" ") if hidden else data.rstrip().endswith(b":"):
                os.write(master, b"\n")
                hidden = False
    finally:
        os.close(master)
        _, status = os.waitpid(pid, 0)
    returncode = os.waitstatus_to_exitcode(status)
    text = out.decode("utf-8", "replace").replace("\r", "")
    assert returncode == 0, text
    from memsearch_fast.cli.config import _asked
    from memsearch_fast.config import schema

    asked = [key for key in schema.SCHEMA if _asked(key)]
    assert len(asked) >= 20
    for key in asked:
        # The program writes the explanation, then the question (the answer's echo comes after).
        assert re.search(rf"# [^\n]{{10,}}\n +{re.escape(key)}[ :]", text), (key, text[-2000:])


def test_codex_install_help_prints_help_and_installs_nothing(tmp_path: Path) -> None:
    env = dict(os.environ, HOME=str(tmp_path / "home"), CODEX_HOME=str(tmp_path / "codex"))
    proc = subprocess.run(
        [sys.executable, str(ROOT / "hooks" / "codex" / "install.py"), "--help"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert proc.returncode == 0 and "usage:" in proc.stdout and "hooks.json" in proc.stdout, proc
    assert not (tmp_path / "codex").exists() and not (tmp_path / "home").exists()


def test_every_install_hint_says_how_to_install_from_a_clone(tmp_path: Path) -> None:
    """The package is not on PyPI: README, the plugins' READMEs, both shims and the Codex
    installer all say pipx install . / uv tool install ."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "pip install memsearch-fast" not in readme
    assert "pipx install ." in readme and "uv tool install ." in readme
    for plugin in ("opencode", "openclaw"):
        text = (ROOT / "hooks" / plugin / "README.md").read_text(encoding="utf-8")
        assert "pipx install ." in text and "uv tool install ." in text, plugin
    sh = shutil.which("sh")
    assert sh
    shim = subprocess.run(
        [sh, str(ROOT / "hooks" / "claude-code" / "bin" / "memsearch-hook"), "claude-code", "session-start"],
        input="{}",
        capture_output=True,
        text=True,
        env={"PATH": "/nonexistent", "HOME": str(tmp_path)},
        timeout=30,
    )
    message = json.loads(shim.stdout)["systemMessage"]
    assert "pipx install ." in message and "uv tool install ." in message
    assert "pip install memsearch-fast" not in message
    cli = subprocess.run(
        [sh, str(ROOT / "hooks" / "claude-code" / "bin" / "memsearch"), "search", "x"],
        capture_output=True,
        text=True,
        env={"PATH": "/nonexistent", "HOME": str(tmp_path)},
        timeout=30,
    )
    assert cli.returncode == 127
    assert "pipx install ." in cli.stderr and "uv tool install ." in cli.stderr, cli.stderr
    installer = subprocess.run(
        [sys.executable, str(ROOT / "hooks" / "codex" / "install.py")],
        capture_output=True,
        text=True,
        env={"PATH": "/nonexistent", "HOME": str(tmp_path), "CODEX_HOME": str(tmp_path / "codex")},
        timeout=30,
    )
    assert installer.returncode != 0
    assert "pipx install ." in installer.stderr and "uv tool install ." in installer.stderr
