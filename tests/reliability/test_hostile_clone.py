"""A cloned repository is hostile input: its ``.memsearch/`` never leads the hooks outside it.

Each repository is built with real ``git`` (symlinks committed), cloned into
the user's home, and driven through the real hook entry point
(``python -m memsearch_fast.agents.main``, what ``memsearch-hook`` runs) with
the agent's stdin JSON. The user's files outside the clone are fingerprinted
before and compared after: nothing may be read into memory, written, cut or
deleted, and every hook answers one JSON object in time.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.harness import watcher_pids

ROOT = Path(__file__).resolve().parents[2]
DAY = 24 * 3600


def _git(cwd: Path, *args: str) -> None:
    who = {"GIT_AUTHOR_NAME": "u", "GIT_AUTHOR_EMAIL": "u@x", "GIT_COMMITTER_NAME": "u", "GIT_COMMITTER_EMAIL": "u@x"}
    env = {**os.environ, **who}
    subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, timeout=60)


class Home:
    """A user's home with files worth stealing, a memsearch config, and the hook runner."""

    def __init__(self, tmp: Path, model_dir: Path) -> None:
        self.tmp = tmp
        self.home = tmp / "home"
        self.ssh = self.home / ".ssh"
        self.ssh.mkdir(parents=True)
        (self.ssh / "id_ed25519").write_text("PRIVATE KEY\n", encoding="utf-8")
        (self.ssh / "known_hosts").write_text("host key\n", encoding="utf-8")
        old = time.time() - 3 * DAY  # older than a stale session marker
        for f in self.ssh.iterdir():
            os.utime(f, (old, old))
        (self.home / ".bashrc").write_text("export PS1='$ '\n", encoding="utf-8")
        self.big = self.home / "mail.mbox"
        self.big.write_bytes(b"From someone\n" + (b"x" * 80 + b"\n") * 40_000)  # over the log's 1 MB cut
        self.notes = self.home / "notes"
        self.notes.mkdir()
        (self.notes / "secret.md").write_text("# Bank\n\nThe vault code is 4242-SECRET.\n", encoding="utf-8")
        (self.home / ".memsearch").mkdir()
        self.db = tmp / "milvus.db"
        (self.home / ".memsearch" / "config.toml").write_text(
            f'[milvus]\nuri = "{self.db}"\n[embedding]\nmodel = "{model_dir}"\n', encoding="utf-8"
        )
        self.vars = dict(os.environ, HOME=str(self.home))
        for name in ("MEMSEARCH_DISABLE", "MEMSEARCH_DIR", "MEMSEARCH_NO_WATCH", "CLAUDE_PROJECT_DIR"):
            self.vars.pop(name, None)
        self.before = self.fingerprint()

    def fingerprint(self) -> dict[str, tuple[int, float, bytes]]:
        """Every file of the home outside ``src/`` and ``.memsearch/``: size, mtime, head."""
        out = {}
        for path in sorted(self.home.rglob("*")):
            rel = path.relative_to(self.home)
            if rel.parts[0] in ("src", ".memsearch") or path.is_symlink() or not path.is_file():
                continue
            st = path.stat()
            with open(path, "rb") as f:
                out[str(rel)] = (st.st_size, st.st_mtime, f.read(64))
        return out

    def untouched(self) -> None:
        assert self.fingerprint() == self.before
        assert not list(self.home.rglob("PWNED*")) and not list(self.tmp.rglob("PWNED*"))

    def clone(self, build: Callable[[Path], None], name: str = "repo") -> Path:
        """A repository made by *build*, committed with git and cloned to ``~/src/<name>``."""
        upstream = self.tmp / "upstream" / name
        upstream.mkdir(parents=True)
        _git(upstream, "init", "-q")
        (upstream / "README.md").write_text("# A project\n", encoding="utf-8")
        build(upstream)
        _git(upstream, "add", "-A", "-f")
        _git(upstream, "commit", "-q", "-m", "init")
        dest = self.home / "src" / name
        dest.parent.mkdir(exist_ok=True)
        _git(self.home / "src", "clone", "-q", str(upstream), name)
        return dest

    def hook(self, project: Path, event: str, payload: dict[str, Any] | None = None, **env: str) -> Any:
        """One hook call as Claude Code makes it; its one JSON answer (None when it printed nothing)."""
        data = {"cwd": str(project), "session_id": "s1", **(payload or {})}
        start = time.monotonic()
        out = subprocess.run(
            [sys.executable, "-m", "memsearch_fast.agents.main", "claude-code", event],
            input=json.dumps(data),
            capture_output=True,
            text=True,
            env={**self.vars, **env},
            timeout=60,
            cwd=project,
        )
        took = time.monotonic() - start
        assert out.returncode == 0, out.stderr
        assert "Traceback" not in out.stderr, out.stderr
        assert took < 10, f"{event} took {took:.1f} s"
        lines = out.stdout.strip().splitlines()
        assert len(lines) <= 1, out.stdout
        return json.loads(lines[0]) if lines else None

    def home_log(self) -> str:
        path = self.home / ".memsearch" / "hooks.log"
        return path.read_text(encoding="utf-8") if path.exists() else ""

    def watchers(self, memory: Path) -> list[int]:
        """Who watches *memory*: each `memsearch watch` process, and the database's
        service once per watcher of that root it runs."""
        from memsearch_fast.serve import client

        st = client.status(str(self.db))
        served = [r for r in (st or {}).get("roots", []) if r["root"] == os.path.realpath(memory)]
        return watcher_pids(memory) + [-1] * len(served)

    def stop_all(self) -> None:
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    argv = (entry / "cmdline").read_bytes()
                except OSError:
                    continue
                if b"memsearch_fast.cli\0watch" in argv and os.fsencode(str(self.tmp)) in argv:
                    os.kill(int(entry.name), signal.SIGTERM)
        from memsearch_fast.lite import broker

        broker.stop_server(str(self.db))


@pytest.fixture
def user(tmp_path: Path, model_dir: Path) -> Iterator[Home]:
    h = Home(tmp_path, model_dir)
    yield h
    h.stop_all()


def _wait(what: Callable[[], bool], timeout: float = 30.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if what():
            return True
        time.sleep(0.2)
    return what()


def _link(repo: Path, rel: str, target: str) -> None:
    path = repo / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.symlink_to(target)


def _refused(answer: Any) -> str:
    message = str(answer["systemMessage"])
    assert "ERROR" in message and "memory is off for this project" in message, message
    return message


# -- 1. SessionEnd deletes files anywhere --------------------------------------------------


def test_a_sessions_link_never_deletes_or_creates_files_outside(user: Home) -> None:
    repo = user.clone(lambda r: _link(r, ".memsearch/sessions", "../../../.ssh"))
    assert (repo / ".memsearch" / "sessions").is_symlink()
    message = _refused(user.hook(repo, "session-start"))
    assert "sessions" in message and "symbolic link" in message
    assert user.hook(repo, "session-end") == {}
    assert sorted(p.name for p in user.ssh.iterdir()) == ["id_ed25519", "known_hosts"]
    user.untouched()
    assert "memory is off" in user.home_log()


def test_a_turns_link_never_creates_files_outside(user: Home, tmp_path: Path) -> None:
    """Stop claims its turn in ``.memsearch/turns``: a link there that came with the clone is refused."""
    repo = user.clone(lambda r: _link(r, ".memsearch/turns", "../../../.ssh"))
    transcript = tmp_path / "t.jsonl"
    records = [
        {"type": "user", "uuid": f"u{i}", "message": {"role": "user", "content": f"question {i} about it"}}
        for i in range(3)
    ]
    transcript.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    assert user.hook(repo, "stop", {"transcript_path": str(transcript)}) == {}
    assert sorted(p.name for p in user.ssh.iterdir()) == ["id_ed25519", "known_hosts"]
    user.untouched()
    assert "turns" in user.home_log() and "symbolic link" in user.home_log()


def test_a_sessions_folder_holding_a_link_keeps_the_links_target(user: Home, tmp_path: Path) -> None:
    """A real ``sessions`` folder whose old entry is a link: the link may go, its target stays."""

    def build(r: Path) -> None:
        _link(r, ".memsearch/sessions/old", "../../../../.ssh/id_ed25519")

    repo = user.clone(build)
    os.utime(repo / ".memsearch" / "sessions" / "old", (0, 0), follow_symlinks=False)
    assert "ERROR" not in user.hook(repo, "session-start", MEMSEARCH_NO_WATCH="1")["systemMessage"]
    assert user.hook(repo, "session-end", MEMSEARCH_NO_WATCH="1") == {}
    assert (user.ssh / "id_ed25519").read_text(encoding="utf-8") == "PRIVATE KEY\n"
    user.untouched()


# -- 2, 3. logs written through a link ------------------------------------------------------


@pytest.mark.parametrize("name", ["hooks.log", "watch.log"])
@pytest.mark.parametrize("target", [".bashrc", "mail.mbox"])
def test_a_log_link_is_never_written_or_cut(user: Home, name: str, target: str) -> None:
    def build(r: Path) -> None:
        _link(r, f".memsearch/{name}", f"../../../{target}")
        (r / ".memsearch.toml").write_text("[chunking]\nmax_chunk_size = \"'$(touch PWNED)'\"\n", encoding="utf-8")

    repo = user.clone(build)
    _refused(user.hook(repo, "session-start"))
    for event in ("user-prompt", "stop", "pre-compact", "session-end"):
        user.hook(repo, event, {"prompt": "what did we decide about the cache?"})
    assert not user.watchers(repo / ".memsearch" / "memory")
    user.untouched()
    log = user.home_log()
    assert log and all(ch == "\n" or ch.isprintable() for ch in log)


def test_log_lines_with_repository_text_stay_one_printable_line(user: Home) -> None:
    """A real (unlinked) project log: a hostile config value lands as inert text, the log 0600."""

    def build(r: Path) -> None:
        (r / ".memsearch.toml").write_text(
            '[chunking]\nmax_chunk_size = "\\u001b]0;x\\u0007\\n$(touch PWNED)"\n', encoding="utf-8"
        )

    repo = user.clone(build)
    answer = user.hook(repo, "session-start", MEMSEARCH_NO_WATCH="1")
    assert "ERROR" in answer["systemMessage"]
    user.hook(repo, "session-end", MEMSEARCH_NO_WATCH="1")
    log = repo / ".memsearch" / "hooks.log"
    text = log.read_text(encoding="utf-8")
    assert "\x1b" not in text and "\x07" not in text
    assert all(line.startswith("20") for line in text.splitlines())
    assert log.stat().st_mode & 0o777 == 0o600
    user.untouched()


# -- 4. a journal linked to a device -----------------------------------------------------------


def test_a_journal_linked_to_dev_zero_is_refused_in_time(user: Home) -> None:
    def build(r: Path) -> None:
        _link(r, ".memsearch/memory/2099-01-01.md", "/dev/zero")
        (r / ".memsearch" / "memory" / "2026-01-01.md").write_text(
            "### 10:00\n- The team chose Redis for the cache.\n", encoding="utf-8"
        )

    repo = user.clone(build)
    answer = user.hook(repo, "session-start", MEMSEARCH_NO_WATCH="1")
    assert "ERROR" not in answer["systemMessage"]
    assert "Redis" in answer["hookSpecificOutput"]["additionalContext"]
    transcript = repo.parent / "t.jsonl"
    transcript.write_text("".join(json.dumps({"type": "user", "n": i}) + "\n" for i in range(5)), encoding="utf-8")
    assert user.hook(repo, "pre-compact", {"transcript_path": str(transcript)}, MEMSEARCH_NO_WATCH="1") == {}
    user.untouched()


# -- 5. memory linked out of the project, and the links a user makes -----------------------------


def test_a_memory_link_out_of_the_project_is_refused(user: Home) -> None:
    repo = user.clone(lambda r: _link(r, ".memsearch/memory", "../../../notes"))
    message = _refused(user.hook(repo, "session-start"))
    assert "memory" in message
    time.sleep(1.0)
    assert not user.watchers(repo / ".memsearch" / "memory") and not user.watchers(user.notes)
    assert sorted(p.name for p in user.notes.iterdir()) == ["secret.md"]
    user.untouched()


def test_a_committed_memsearch_link_is_refused_even_inside_home(user: Home) -> None:
    shared = user.home / "shared-memory"
    shared.mkdir()
    repo = user.clone(lambda r: _link(r, ".memsearch", str(shared)))
    message = _refused(user.hook(repo, "session-start"))
    assert "came with the repository" in message
    assert list(shared.iterdir()) == []


def test_a_memsearch_link_the_user_made_works_and_session_end_stops_its_watcher(user: Home) -> None:
    """Memory shared across worktrees: the user links ``.memsearch`` (not committed) to a folder in their home."""
    shared = user.home / "shared-memory"
    (shared / "memory").mkdir(parents=True)
    (shared / "memory" / "2026-01-02.md").write_text("### 09:00\n- Deploys go out on Tuesdays.\n", encoding="utf-8")
    repo = user.clone(lambda r: None)
    (repo / ".memsearch").symlink_to(shared)
    answer = user.hook(repo, "session-start")
    assert "ERROR" not in answer["systemMessage"], answer
    assert "Tuesdays" in answer["hookSpecificOutput"]["additionalContext"]
    assert _wait(lambda: len(user.watchers(shared / "memory")) == 1)
    assert user.hook(repo, "session-end") == {}
    assert _wait(lambda: not user.watchers(shared / "memory")), "SessionEnd left the watcher running"


def test_a_memsearch_link_out_of_home_is_refused(user: Home, tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    repo = user.clone(lambda r: None)
    (repo / ".memsearch").symlink_to(outside)
    assert "out of your home directory" in _refused(user.hook(repo, "session-start"))
    assert list(outside.iterdir()) == []


# -- 9. SessionEnd right after SessionStart ---------------------------------------------------------


@pytest.mark.slow(reason="runs the agent hooks and their watcher as subprocesses on a cloned project")
def test_session_end_right_after_session_start_leaves_no_watcher(user: Home) -> None:
    repo = user.clone(lambda r: None)
    memory = repo / ".memsearch" / "memory"
    for i in range(3):
        assert "ERROR" not in user.hook(repo, "session-start", {"session_id": f"s{i}"})["systemMessage"]
        assert user.hook(repo, "session-end", {"session_id": f"s{i}"}) == {}
        assert _wait(lambda: not user.watchers(memory), timeout=20), f"cycle {i}: the watcher outlived its session"


def test_session_end_never_signals_a_process_that_is_not_the_projects_watcher(user: Home) -> None:
    """The recorded pid of a started watcher is trusted only while it is still that watcher."""
    repo = user.clone(lambda r: None)
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        user.hook(repo, "session-start", MEMSEARCH_NO_WATCH="1")
        from memsearch_fast.agents import project as project_mod
        from memsearch_fast.agents import watcher

        project = project_mod.locate(str(repo), {})
        record = watcher._spawn_record(str(user.db), project)
        record.parent.mkdir(parents=True, exist_ok=True)
        record.write_text(f"{bystander.pid}\n", encoding="utf-8")
        assert user.hook(repo, "session-end") == {}
        time.sleep(0.5)
        assert bystander.poll() is None
    finally:
        bystander.kill()
        bystander.wait()


def test_skills_add_never_writes_through_a_committed_memsearch_link(user: Home) -> None:
    """`memsearch skills add` (an agent's skill runs it in the project) keeps to the hooks' rules."""
    repo = user.clone(lambda r: _link(r, ".memsearch", "../../.ssh"))
    body = repo.parent / "body.md"
    body.write_text("Run the tests.\n", encoding="utf-8")
    args = ["skills", "add", "--name", "run tests", "--description", "d", "--body-file", str(body)]
    done = subprocess.run(
        [sys.executable, "-m", "memsearch_fast.cli", *args],
        capture_output=True,
        text=True,
        env=user.vars,
        cwd=repo,
        timeout=60,
    )
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert "came with the repository" in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert sorted(p.name for p in user.ssh.iterdir()) == ["id_ed25519", "known_hosts"]
    user.untouched()


@pytest.mark.slow(reason="indexes a cloned project's journal twice through the CLI with the real model")
def test_a_cloned_projects_chunk_settings_cannot_multiply_its_index(user: Home) -> None:
    """A `.memsearch.toml` with 50-character chunks and 1,000 lines of overlap made
    N short journal lines into about N²/4 chunks (1,000 lines: 249,107 chunks, a
    1 GB database). A project file may set chunking only near the defaults: the
    clone's settings are refused in one line, and its journal costs what the
    same journal costs with the defaults."""
    journal = "".join(f"- {i:03d} deployed the gateway again\n" for i in range(400))

    def build(r: Path) -> None:
        (r / ".memsearch.toml").write_text("[chunking]\nmax_chunk_size = 50\noverlap_lines = 1000\n", encoding="utf-8")
        (r / ".memsearch" / "memory").mkdir(parents=True)
        (r / ".memsearch" / "memory" / "2026-11-20.md").write_text("## Session\n\n" + journal, encoding="utf-8")

    def index(project: Path, collection: str) -> tuple[dict[str, Any], str]:
        out = subprocess.run(
            [sys.executable, "-m", "memsearch_fast", "index", ".memsearch/memory", "-j", "--collection", collection],
            capture_output=True,
            text=True,
            env={**user.vars, "MEMSEARCH_INDEX_SERVICE": "0"},
            cwd=project,
            timeout=110,
        )
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout), out.stderr

    hostile = user.clone(build)
    got, said = index(hostile, "hostile")
    plain = user.clone(build, name="plain")
    (plain / ".memsearch.toml").unlink()
    defaults, _ = index(plain, "plain")
    assert got["chunks"] <= 2 * defaults["chunks"], (got, defaults)
    warnings = [line for line in said.splitlines() if "may not set" in line]
    assert len(warnings) == 1 and "chunking.max_chunk_size = 50" in warnings[0], said
    assert "chunking.overlap_lines = 1000" in warnings[0], said
