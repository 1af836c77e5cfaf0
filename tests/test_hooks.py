"""`memsearch hook PLATFORM EVENT` run as the agents run it: a subprocess with the
agent's stdin JSON, on real files, a real Milvus Lite and the real ONNX model.

The summarizer is the one thing faked: a `claude` / `codex` script on PATH
(the agent binaries cannot run here) that answers with notes, an error text,
a rate-limit text, nothing, or hangs.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "transcripts"
SHIM = ROOT / "hooks" / "claude-code" / "bin" / "memsearch-hook"

NOTES = "- User asked about the {topic}.\n- Claude Code explained the {topic} and changed nothing else."


class Env:
    """A project, a HOME with a config, a fake `claude`, and the hook runner."""

    def __init__(self, tmp: Path, model_dir: Path) -> None:
        self.tmp = tmp
        self.model_dir = model_dir
        self.home = tmp / "home"
        self.project = tmp / "proj"
        (self.project / ".git").mkdir(parents=True)
        (self.home / ".memsearch").mkdir(parents=True)
        self.db = tmp / "milvus.db"
        self.model_dir = model_dir
        (self.home / ".memsearch" / "config.toml").write_text(
            f'[milvus]\nuri = "{self.db}"\n[embedding]\nmodel = "{model_dir}"\n', encoding="utf-8"
        )
        self.bin = tmp / "bin"
        self.bin.mkdir()
        self.memory = self.project / ".memsearch" / "memory"
        self.vars = dict(
            os.environ,
            HOME=str(self.home),
            # This environment's `memsearch` and `memsearch-hook` are on PATH, as where the
            # agent runs them, whether or not the environment was activated.
            PATH=os.pathsep.join([str(self.bin), str(Path(sys.executable).parent), os.environ["PATH"]]),
            MEMSEARCH_SUMMARIZE_TIMEOUT="20",
        )
        for name in ("MEMSEARCH_DISABLE", "MEMSEARCH_DIR", "MEMSEARCH_NO_WATCH", "CLAUDE_PROJECT_DIR", "CODEX_HOME"):
            self.vars.pop(name, None)

    def fake_agent(self, name: str, script: str) -> None:
        """`name` on PATH: records its stdin and argv, then runs *script* (sh); ``--help`` prints a usage."""
        path = self.bin / name
        log = self.tmp / f"{name}.calls"
        path.write_text(
            '#!/bin/sh\nif [ "$1" = "--help" ]; then echo "Usage: claude [options]"; exit 0; fi\n'
            f'cat > "{log}.stdin.$$"\necho "$@ MEMSEARCH_DISABLE=$MEMSEARCH_DISABLE" >> "{log}"\n{script}\n',
            encoding="utf-8",
        )
        path.chmod(0o755)

    def answers(self, text: str) -> None:
        self.fake_agent("claude", "cat <<'EOF'\n" + text + "\nEOF")

    def hook(
        self, platform: str, event: str, payload: dict[str, Any] | None = None, **env: str
    ) -> tuple[int, str, float]:
        data = {"cwd": str(self.project), **(payload or {})}
        start = time.monotonic()
        out = subprocess.run(
            [sys.executable, "-m", "memsearch_fast.agents.main", platform, event],  # `memsearch-hook`
            input=json.dumps(data),
            capture_output=True,
            text=True,
            env={**self.vars, **env},
            timeout=60,
            cwd=self.tmp,
        )
        took = time.monotonic() - start
        assert out.returncode == 0, out.stderr
        return out.returncode, out.stdout, took

    def json_hook(self, platform: str, event: str, payload: dict[str, Any] | None = None, **env: str) -> Any:
        _, stdout, _ = self.hook(platform, event, payload, **env)
        return json.loads(stdout)

    def cli(self, *args: str) -> str:
        out = subprocess.run(
            [sys.executable, "-m", "memsearch_fast.cli", *args],
            capture_output=True,
            text=True,
            env=self.vars,
            timeout=120,
            cwd=self.project,
        )
        assert out.returncode == 0, out.stderr
        return out.stdout

    @property
    def collection(self) -> str:
        return str(self.json_hook("claude-code", "locate")["collection"])

    def log_text(self) -> str:
        return "".join(p.read_text(encoding="utf-8") for p in sorted(self.memory.glob("*.md")))

    def hooks_log(self) -> str:
        path = self.project / ".memsearch" / "hooks.log"
        return path.read_text(encoding="utf-8") if path.exists() else ""

    def wait_for(self, what: Callable[[], bool], timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while not what():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out; hooks.log: {self.hooks_log()[-1500:]}")
            time.sleep(0.2)

    def captured(self, count: int) -> None:
        """Wait until *count* captures finished (written and indexed, or given up)."""
        done = re.compile(r" pid=\d+ (captured|capture:|nothing captured)")
        self.wait_for(lambda: len(done.findall(self.hooks_log())) >= count)

    def watchers(self) -> list[int]:
        """Pids of `memsearch watch` processes of this project's memory directory."""
        pids = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"watch" in argv and os.fsencode(self.memory) in argv:
                pids.append(int(entry.name))
        return pids

    def served(self) -> list[dict[str, Any]]:
        """The database's service's watchers of this project's memory directory."""
        from memsearch_fast.serve import client

        st = client.status(str(self.db))
        return [r for r in (st or {}).get("roots", []) if r["root"] == str(self.memory)]

    def close(self) -> None:
        import signal

        for pid in self.watchers():
            os.kill(pid, signal.SIGTERM)
        from memsearch_fast.lite import broker

        broker.stop_server(str(self.db))


@pytest.fixture
def env(tmp_path: Path, model_dir: Path) -> Iterator[Env]:
    e = Env(tmp_path, model_dir)
    yield e
    e.close()


def session_file(env: Env, name: str, turns: list[tuple[str, str]]) -> Path:
    """A Claude Code session of (prompt, answer) pairs, with a tool call in each turn."""
    path = env.tmp / f"{name}.jsonl"
    records: list[dict[str, Any]] = [{"type": "summary", "summary": "s", "leafUuid": "x"}]
    for i, (prompt, answer) in enumerate(turns):
        records.append({"type": "user", "uuid": f"{name}-u{i}", "message": {"role": "user", "content": prompt}})
        records.append(
            {
                "type": "assistant",
                "uuid": f"{name}-a{i}",
                "message": {
                    "role": "assistant",
                    "content": [
                        {"type": "text", "text": answer},
                        {"type": "tool_use", "id": f"t{i}", "name": "Bash", "input": {"command": f"make step{i}"}},
                    ],
                },
            }
        )
        records.append(
            {
                "type": "user",
                "uuid": f"{name}-r{i}",
                "message": {
                    "role": "user",
                    "content": [{"type": "tool_result", "tool_use_id": f"t{i}", "content": "ok"}],
                },
            }
        )
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def stop_payload(session: str, transcript: Path) -> dict[str, Any]:
    return {"session_id": session, "transcript_path": str(transcript), "stop_hook_active": False}


# -- the project, its collection --------------------------------------------------------------


def test_collection_name_is_the_reference_rule(env: Env, tmp_path: Path) -> None:
    """`ms_<sanitized basename>_<sha256[:8] of the path>`, as the reference's shell script derives it."""
    odd = tmp_path / "My App.v2 (final)"
    (odd / ".git").mkdir(parents=True)
    (odd / "src" / "deep").mkdir(parents=True)
    got = env.json_hook("claude-code", "locate", {"cwd": str(odd / "src" / "deep")})
    shell = subprocess.run(
        [
            "bash",
            "-c",
            'p="$(realpath -m "$1")"; n=$(basename "$p" | tr "[:upper:]" "[:lower:]" | sed "s/[^a-z0-9]/_/g" '
            '| sed "s/__*/_/g" | sed "s/^_//;s/_$//" | cut -c1-40); '
            'h=$(printf "%s" "$p" | sha256sum | cut -c1-8); echo "ms_${n}_${h}"',
            "_",
            str(odd),
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert got["collection"] == shell == "ms_my_app_v2_final_" + hashlib.sha256(str(odd).encode()).hexdigest()[:8]
    assert got["project_dir"] == str(odd)  # the git top level, not the subdirectory
    assert got["memory_dir"] == str(odd / ".memsearch" / "memory")

    shared = tmp_path / "shared-memory"
    via_dir = env.json_hook("codex", "locate", {"cwd": str(odd)}, MEMSEARCH_DIR=str(shared))
    assert via_dir["memory_dir"] == str(shared / "memory")
    assert via_dir["collection"].startswith("ms_shared_memory_")
    windows = env.json_hook("claude-code", "locate", {"cwd": "C:/Users/dev/shop"})
    assert windows["project_dir"] == "C:/Users/dev/shop"
    assert windows["collection"] == "ms_shop_" + hashlib.sha256(b"C:/Users/dev/shop").hexdigest()[:8]


# -- the events -------------------------------------------------------------------------------


@pytest.mark.slow(reason="runs agent hooks as subprocesses with their watcher, database and model")
def test_session_start_answers_fast_with_recent_memory_and_starts_one_watcher(env: Env) -> None:
    env.memory.mkdir(parents=True)
    (env.memory / "2026-11-20.md").write_text("### 09:00\n- User asked about the old cache.\n", encoding="utf-8")
    (env.memory / "2026-11-21.md").write_text(
        "\n## Session 10:00\n\n### 10:00\n<!-- session:a turn:b transcript:/x -->\n- User asked about rates.\n"
        "\n### 10:30\n- User asked about invoices.\n",
        encoding="utf-8",
    )
    (env.memory / "2026-11-22.md").write_text("## Session 11:00\n\n", encoding="utf-8")  # a legacy stub
    out = env.json_hook("claude-code", "session-start", {"session_id": "one"})
    from memsearch_fast import __version__

    # The model is a directory here: shown after the provider, never joined to it by a slash.
    assert out["systemMessage"].startswith(f"[memsearch v{__version__}] embedding: onnx ({env.model_dir}) | milvus: ")
    assert env.collection in out["systemMessage"]
    context = out["hookSpecificOutput"]["additionalContext"]
    assert out["hookSpecificOutput"]["hookEventName"] == "SessionStart"
    assert "User asked about rates." in context and "User asked about invoices." in context
    assert context.index("rates") < context.index("invoices")
    assert "old cache" not in context  # only the two newest logs
    assert "<!--" not in context
    # The database's service watches the root: no watcher process of its own.
    env.wait_for(lambda: len(env.served()) == 1)
    assert not env.watchers()

    second = env.json_hook("claude-code", "session-start", {"session_id": "two"})
    assert "ERROR" not in second["systemMessage"]
    time.sleep(1.0)
    assert len(env.served()) == 1 and not env.watchers()  # the running watcher is reused
    assert {x["holder"] for x in env.served()[0]["leases"]} == {"session:one", "session:two"}

    env.json_hook("claude-code", "session-end", {"session_id": "one"})
    time.sleep(1.0)
    assert len(env.served()) == 1  # the other session still uses it
    env.json_hook("claude-code", "session-end", {"session_id": "two"})
    env.wait_for(lambda: not env.served(), timeout=30)
    assert not env.watchers()


def test_only_a_local_database_with_the_local_model_is_watched_by_the_service(env: Env) -> None:
    """A remote Milvus or an API provider: no lease (the hook keeps a `memsearch watch` process)."""
    from memsearch_fast import config
    from memsearch_fast.agents import project as project_mod
    from memsearch_fast.agents import watcher

    project = project_mod.locate(str(env.project), {})
    base = {"milvus.uri": str(env.db), "embedding.model": str(env.model_dir)}
    for key, value in (("milvus.uri", "http://localhost:19530"), ("embedding.provider", "openai")):
        cfg = config.resolve({**base, key: value}, resolve_env=False)
        assert watcher.lease(cfg, project, "s", env.tmp / "w.log") is False
    assert not env.served()


@pytest.mark.slow(reason="runs agent hooks as subprocesses with their watcher, database and model")
def test_frequent_events_renew_the_lease_at_most_every_30_s_unless_the_service_died(env: Env) -> None:
    """A prompt a second costs a stat of the session's marker, not a request, while the service lives."""
    from memsearch_fast.agents import project as project_mod
    from memsearch_fast.agents import watcher
    from memsearch_fast.lite import state as lite_state

    env.json_hook("claude-code", "session-start", {"session_id": "r"})
    env.wait_for(lambda: len(env.served()) == 1)
    project = project_mod.locate(str(env.project), {})
    env.json_hook("claude-code", "user-prompt", {"session_id": "r", "prompt": "what did we decide about it?"})
    server = lite_state.read_state(str(env.db))["pid"]
    marker = env.project / ".memsearch" / "sessions" / "r"
    assert marker.read_text(encoding="utf-8") == f"{server}\n"
    assert not watcher.renew_due(project, "r")
    os.utime(marker, (time.time() - 31, time.time() - 31))
    assert watcher.renew_due(project, "r")
    marker.write_text("999999999\n", encoding="utf-8")  # a service that is gone
    assert watcher.renew_due(project, "r")
    env.json_hook("claude-code", "user-prompt", {"session_id": "r", "prompt": "what did we decide about it?"})
    assert marker.read_text(encoding="utf-8") == f"{server}\n" and not watcher.renew_due(project, "r")


@pytest.mark.slow(reason="runs agent hooks as subprocesses with their watcher, database and model")
def test_a_session_that_never_ends_loses_its_root_with_its_agent(env: Env) -> None:
    """Codex sends no SessionEnd: the lease is held by the agent's process and
    lapses when it is killed; an event after the service was killed registers
    the root again."""
    import signal

    env.memory.mkdir(parents=True)
    start, prompt, go = env.tmp / "start.json", env.tmp / "prompt.json", env.tmp / "go"
    start.write_text(json.dumps({"cwd": str(env.project), "session_id": "codex-1"}), encoding="utf-8")
    prompt.write_text(
        json.dumps({"cwd": str(env.project), "session_id": "codex-1", "prompt": "what did we decide?"}),
        encoding="utf-8",
    )
    hook = f'"{sys.executable}" -m memsearch_fast.agents.main codex'
    agent = env.bin / "codex"  # the agent process: its name is what the hook looks for above it
    agent.write_text(
        f'#!/bin/sh\n{hook} session-start < "{start}"\n'
        # Bounded waits: a pytest killed from outside skips the finally below.
        f'i=0; while [ ! -e "{go}" ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i + 1)); done\n'
        f'{hook} user-prompt < "{prompt}"\nsleep 600\n',
        encoding="utf-8",
    )
    agent.chmod(0o755)
    proc = subprocess.Popen([str(agent)], env=env.vars, stdout=subprocess.DEVNULL, start_new_session=True)
    try:
        env.wait_for(lambda: len(env.served()) == 1)
        [lease] = env.served()[0]["leases"]
        assert (lease["holder"], lease["pid"]) == ("session:codex-1", proc.pid)
        from memsearch_fast.lite import state as lite_state

        server = lite_state.read_state(str(env.db))["pid"]
        os.kill(server, signal.SIGKILL)  # the service dies: the next event takes the root again
        env.wait_for(lambda: not os.path.exists(f"/proc/{server}"), timeout=10)
        go.touch()
        env.wait_for(lambda: len(env.served()) == 1)
        assert lite_state.read_state(str(env.db))["pid"] != server
        assert [x["pid"] for x in env.served()[0]["leases"]] == [proc.pid]
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        env.wait_for(lambda: not env.served(), timeout=15)  # its agent is gone
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def test_session_start_context_is_bounded(env: Env) -> None:
    env.memory.mkdir(parents=True)
    entries = "".join(f"\n### 10:{i:02d}\n- Entry number {i} " + "x" * 400 + "\n" for i in range(60))
    (env.memory / "2026-11-23.md").write_text(entries, encoding="utf-8")
    context = env.json_hook("claude-code", "session-start", {"session_id": "s"}, MEMSEARCH_NO_WATCH="1")[
        "hookSpecificOutput"
    ]["additionalContext"]
    assert "Entry number 59" in context and "Entry number 0 " not in context
    assert len(context) < 1500 * 4 + 400


def test_a_broken_configuration_is_a_status_line(env: Env) -> None:
    env.vars.pop("OPENAI_API_KEY", None)
    out = env.json_hook("claude-code", "session-start", {"session_id": "s"}, MEMSEARCH_NO_WATCH="1")
    assert "ERROR" not in out["systemMessage"]
    cfg = env.home / ".memsearch" / "config.toml"
    cfg.write_text(cfg.read_text(encoding="utf-8") + 'provider = "openai"\n', encoding="utf-8")
    out = env.json_hook("claude-code", "session-start", {"session_id": "s"}, MEMSEARCH_NO_WATCH="1")
    assert "ERROR: OPENAI_API_KEY not set" in out["systemMessage"] and "hookSpecificOutput" not in out
    cfg.write_text('[milvus]\nuri = "http://127.0.0.1:9"\n', encoding="utf-8")
    out = env.json_hook("claude-code", "session-start", {"session_id": "s"}, MEMSEARCH_NO_WATCH="1")
    assert "ERROR: Milvus at 127.0.0.1:9 is unreachable" in out["systemMessage"]
    cfg.write_text("[milvus\nnot toml", encoding="utf-8")
    code, stdout, _ = env.hook("claude-code", "session-start", {"session_id": "s"})
    assert code == 0 and json.loads(stdout)["systemMessage"].startswith("[memsearch] ERROR: ")
    assert "Traceback" not in stdout


def test_user_prompt_hint(env: Env) -> None:
    env.memory.mkdir(parents=True)
    assert env.json_hook("claude-code", "user-prompt", {"prompt": "hi"}) == {}
    out = env.json_hook("claude-code", "user-prompt", {"prompt": "how did we fix the upload limit?"})
    assert out == {"systemMessage": "[memsearch] Memory available"}


def test_stdin_that_never_closes_is_read_with_a_deadline(env: Env) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "memsearch_fast.cli", "hook", "claude-code", "user-prompt"],  # through the CLI too
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env.vars,
        cwd=env.project,
    )
    assert proc.stdin is not None
    proc.stdin.write(b'{"prompt": "x"}')  # never closed
    proc.stdin.flush()
    try:
        assert proc.wait(timeout=15) == 0
        out = proc.stdout.read() if proc.stdout else b""
    finally:
        proc.stdin.close()
        if proc.stdout:
            proc.stdout.close()
        proc.kill()
        proc.wait()
    assert json.loads(out) == {}


def test_a_complete_payload_is_answered_without_waiting_for_eof(env: Env) -> None:
    """A host that writes its event and leaves stdin open gets its answer at once, not after the
    stdin deadline."""

    def took(close: bool) -> float:
        start = time.monotonic()
        proc = subprocess.Popen(
            [sys.executable, "-m", "memsearch_fast.agents.main", "claude-code", "locate"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env.vars,
            cwd=env.tmp,
        )
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(json.dumps({"cwd": str(env.project)}).encode() + b"\n")
        proc.stdin.flush()
        if close:
            proc.stdin.close()
        try:
            out = proc.stdout.read()
            assert proc.wait(timeout=15) == 0
        finally:
            proc.stdin.close()
            proc.stdout.close()
            proc.kill()
        assert json.loads(out)["project_dir"] == str(env.project)  # the payload was read
        return time.monotonic() - start

    closed = min(took(True) for _ in range(2))
    left_open = min(took(False) for _ in range(2))
    assert left_open < closed + 1.0, (left_open, closed)


def test_disabled_hooks_touch_nothing(env: Env) -> None:
    transcript = session_file(env, "d", [("explain the retry policy please", "It backs off.")])
    for event in ("session-start", "user-prompt", "stop", "pre-compact", "session-end"):
        payload = {**stop_payload("d", transcript), "prompt": "a long enough prompt"}
        assert env.json_hook("claude-code", event, payload, MEMSEARCH_DISABLE="1") == {}
    _code, stdout, _ = env.hook("codex", "stop", stop_payload("d", transcript), MEMSEARCH_DISABLE="1")
    assert stdout == ""  # Codex rejects {} from Stop
    shim = subprocess.run(
        ["sh", str(SHIM), "claude-code", "stop"],
        input="{}",
        capture_output=True,
        text=True,
        env={**env.vars, "MEMSEARCH_DISABLE": "1"},
    )
    assert shim.stdout.strip() == "{}"
    time.sleep(1.0)
    assert not (env.project / ".memsearch").exists()
    assert not env.watchers()


def test_stop_guards(env: Env) -> None:
    env.answers(NOTES.format(topic="guards"))
    transcript = session_file(env, "g", [("explain the retry policy please", "It backs off.")])
    assert env.json_hook("claude-code", "stop", {**stop_payload("g", transcript), "stop_hook_active": True}) == {}
    short = env.tmp / "short.jsonl"
    short.write_text('{"type": "summary"}\n{"type": "user", "message": {"content": "hi"}}\n', encoding="utf-8")
    assert env.json_hook("claude-code", "stop", stop_payload("g", short)) == {}
    assert env.json_hook("claude-code", "stop", stop_payload("g", env.tmp / "missing.jsonl")) == {}
    time.sleep(2.0)
    assert not (env.tmp / "claude.calls").exists()
    assert not env.memory.exists() or not list(env.memory.glob("*.md"))


# -- capture ----------------------------------------------------------------------------------


@pytest.mark.slow(reason="runs agent hooks as subprocesses with their watcher, database and model")
def test_stop_returns_at_once_and_the_entry_becomes_searchable(env: Env) -> None:
    env.answers(NOTES.format(topic="invoice rounding"))
    transcript = session_file(env, "s1", [("why are invoice totals off by a cent?", "Rounding per line.")])
    _, stdout, took = env.hook("claude-code", "stop", stop_payload("s1", transcript))
    assert json.loads(stdout) == {}
    assert took < 5.0  # the summary and the indexing happen in the detached worker
    env.captured(1)
    text = env.log_text()
    assert f"<!-- session:s1 turn:s1-u0 transcript:{transcript} -->" in text
    assert "- User asked about the invoice rounding." in text
    assert text.count("## Session ") == 1
    calls = (env.tmp / "claude.calls").read_text(encoding="utf-8")
    assert "-p" in calls and "MEMSEARCH_DISABLE=1" in calls  # the summarizer cannot re-enter our hooks
    prompt = next(env.tmp.glob("claude.calls.stdin.*")).read_text(encoding="utf-8")
    assert "[User]: why are invoice totals off by a cent?" in prompt and "[Tool Bash]: make step0" in prompt
    hits = json.loads(env.cli("search", "invoice rounding", "--collection", env.collection, "-j"))
    assert hits and "invoice rounding" in hits[0]["content"]


@pytest.mark.parametrize(
    "answer",
    [
        "API Error: 529 Overloaded. Please try again later.",
        "Claude AI usage limit reached|1763900000",
        "Error: rate limit exceeded for model haiku",
        "",
        "I cannot help with summarizing this conversation.",
        "Here is a summary of what happened in the turn without any bullets at all.",
    ],
)
@pytest.mark.slow(reason="runs agent hooks as subprocesses with their watcher, database and model")
def test_a_failed_summary_is_never_stored_as_memory(env: Env, answer: str) -> None:
    env.answers(answer)
    transcript = session_file(env, "f", [("summarize the deployment plan for friday", "Done.")])
    env.json_hook("claude-code", "stop", stop_payload("f", transcript))
    env.captured(1)
    text = env.log_text()
    assert "turn:f-u0" in text  # the anchor stays, so `transcript` reaches the turn
    body = [line for line in text.splitlines() if line.startswith("- ")]
    assert body == ["- Turn not summarized; its transcript is linked above."]
    if answer:
        assert answer.split()[0] not in text.replace("- Turn", "")
    assert "summary failed" in env.hooks_log()


@pytest.mark.slow(reason="runs agent hooks as subprocesses with their watcher, database and model")
def test_a_hanging_summarizer_is_cut_by_the_hooks_own_timeout(env: Env) -> None:
    env.fake_agent("claude", "sleep 120")
    transcript = session_file(env, "h", [("what does the cron job do at night?", "It rotates logs.")])
    start = time.monotonic()
    env.json_hook("claude-code", "stop", stop_payload("h", transcript), MEMSEARCH_SUMMARIZE_TIMEOUT="2")
    env.captured(1)
    assert time.monotonic() - start < 30
    assert "timed out" in env.hooks_log()
    subprocess.run(["pkill", "-f", f"{env.bin}/claude"], check=False)


def test_concurrent_stops_on_one_daily_log_lose_nothing(tmp_path: Path) -> None:
    """Many processes appending at once: every entry whole, one heading per session."""
    log = tmp_path / "memory" / "2026-11-23.md"
    script = (
        "import sys; from pathlib import Path; from memsearch_fast.agents import journal\n"
        "s = sys.argv[1]\n"
        "for i in range(40):\n"
        "    journal.append(Path(sys.argv[2]), '10:00', journal.Anchor(s, f'{s}-{i}', '/t.jsonl'),"
        " [f'- note {i} of {s} ' + 'y' * 3000])\n"
    )
    env = dict(os.environ)
    procs = [subprocess.Popen([sys.executable, "-c", script, f"s{k}", str(log)], env=env) for k in range(4)]
    assert all(p.wait(timeout=120) == 0 for p in procs)
    text = log.read_text(encoding="utf-8")
    for k in range(4):
        assert text.count("## Session 10:00\n") >= 1
        for i in range(40):
            entry = (
                f"### 10:00\n<!-- session:s{k} turn:s{k}-{i} transcript:/t.jsonl -->\n- note {i} of s{k} " + "y" * 3000
            )
            assert text.count(entry) == 1
    assert text.count("## Session ") == 4


@pytest.mark.slow(reason="runs agent hooks as subprocesses with their watcher, database and model")
def test_codex_stop_without_a_transcript_uses_its_history(env: Env) -> None:
    codex_home = env.tmp / "codex-home"
    codex_home.mkdir()
    (codex_home / "history.jsonl").write_text(
        json.dumps({"session_id": "cx", "ts": 1, "text": "make the cart totals exact"}) + "\n", encoding="utf-8"
    )
    env.fake_agent("codex", "echo '- User asked for exact cart totals.'; echo '- Codex summed in Decimal.'")
    _code, stdout, _ = env.hook(
        "codex",
        "stop",
        {"session_id": "cx", "transcript_path": None, "last_assistant_message": "Totals now use Decimal."},
        CODEX_HOME=str(codex_home),
    )
    assert stdout == ""
    env.captured(1)
    assert "- Codex summed in Decimal." in env.log_text()
    prompt = next(env.tmp.glob("codex.calls.stdin.*")).read_text(encoding="utf-8")
    assert "[User]: make the cart totals exact" in prompt and "[Codex]: Totals now use Decimal." in prompt
    assert "exec" in (env.tmp / "codex.calls").read_text(encoding="utf-8")


def codex_rollout(env: Env, turn_ids: bool) -> Path:
    """A Codex rollout of two turns; the second edits a file with apply_patch (a custom tool call)."""

    def turn(turn_id: str, prompt: str) -> list[dict[str, Any]]:
        context = [{"type": "turn_context", "payload": {"turn_id": turn_id, "cwd": str(env.project)}}]
        return [
            *(context if turn_ids else []),
            {"type": "event_msg", "payload": {"type": "user_message", "message": prompt}},
        ]

    def item(payload: dict[str, Any]) -> dict[str, Any]:
        return {"type": "response_item", "payload": payload}

    records = [
        {"type": "session_meta", "payload": {"id": "rx"}},
        *turn("t-1", "what does the cart module do"),
        {"type": "event_msg", "payload": {"type": "agent_message", "message": "It sums line items."}},
        *turn("t-2", "make the cart totals exact please"),
        {"type": "event_msg", "payload": {"type": "agent_message", "message": "First I look for the rounding."}},
        item({"type": "function_call", "name": "shell", "arguments": '{"command": ["rg", "round("]}', "call_id": "c1"}),
        item({"type": "function_call_output", "call_id": "c1", "output": "totals.py:41"}),
        item(
            {
                "type": "custom_tool_call",
                "name": "apply_patch",
                "call_id": "c2",
                "input": "*** Begin Patch\n*** Update File: src/cart/totals.py\n*** End Patch",
            }
        ),
        item({"type": "custom_tool_call_output", "call_id": "c2", "output": "Success."}),
        {"type": "event_msg", "payload": {"type": "agent_message", "message": "Totals now use Decimal."}},
    ]
    path = env.tmp / f"rollout-{turn_ids}.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


@pytest.mark.slow(reason="runs agent hooks as subprocesses with their watcher, database and model")
def test_codex_turns_keep_their_edits_their_order_and_their_id(env: Env) -> None:
    """The notes' input holds apply_patch edits, each text before the calls made after it, and the
    anchor names the turn: from the rollout's turn_context, else from the Stop hook's turn_id."""
    from memsearch_fast.agents import turns

    excerpt = turns.last_turn(codex_rollout(env, True), "Codex")
    assert excerpt is not None and excerpt.turn_id == "t-2"
    assert excerpt.text.splitlines() == [
        "[User]: make the cart totals exact please",
        "[Codex]: First I look for the rounding.",
        "[Tool shell]: rg round(",
        "[Tool apply_patch]: *** Begin Patch",
        "*** Update File: src/cart/totals.py",
        "*** End Patch",
        "[Codex]: Totals now use Decimal.",
    ]
    env.fake_agent("codex", "echo '- User asked for exact cart totals.'; echo '- Codex patched totals.py.'")
    for session, with_ids in (("cx1", True), ("cx2", False)):
        payload = {"session_id": session, "transcript_path": str(codex_rollout(env, with_ids)), "turn_id": "t-2"}
        assert env.hook("codex", "stop", payload)[1] == ""
    env.captured(2)
    text = env.log_text()
    assert re.search(r"<!-- session:cx1 turn:t-2 transcript:\S+ -->", text), text
    assert re.search(r"<!-- session:cx2 turn:t-2 transcript:\S+ -->", text), text


def test_last_turn_of_recorded_transcripts() -> None:
    from memsearch_fast.agents import turns

    claude = turns.last_turn(FIXTURES / "claude-code.jsonl", "Claude Code")
    # The compaction summary (isCompactSummary) and the interruption notice are Claude Code's own
    # records: the turn is the user's last prompt before them.
    assert claude is not None and claude.turn_id == "d4f6a8b0-0011-4c3e-8d4f-bbbbbbbbbbbb"
    assert claude.text.startswith("[User]: Here is the gateway error from staging:")
    assert "This session is being continued" not in claude.text
    assert claude.text.endswith("Staging accepts 20 MiB uploads again ✅ — 修复完成。")
    codex = turns.last_turn(FIXTURES / "codex-rollout.jsonl", "Codex")
    assert codex is not None
    assert codex.text.splitlines() == [
        "[User]: Great — push it to a branch and open a PR 🚀",
        "[Tool exec_command]: git switch -c fix/cent-rounding && git push -u origin HEAD",
    ]
    openclaw = turns.last_turn(FIXTURES / "openclaw.jsonl", "OpenClaw")
    assert openclaw is not None and openclaw.text.startswith("[User]: commit and push")


def test_agent_written_user_records_are_never_the_prompt(tmp_path: Path) -> None:
    """Skill bodies and command wrappers (``isMeta``), a compaction's summary (``isCompactSummary``)
    and a subagent's prompt (``isSidechain``) are user records Claude Code writes itself: the turn
    is the user's prompt before them."""
    from memsearch_fast.agents import turns

    def user(uuid: str, text: str, **flags: bool) -> dict[str, Any]:
        return {"type": "user", "uuid": uuid, "message": {"role": "user", "content": text}, **flags}

    def reply(uuid: str, text: str) -> dict[str, Any]:
        return {
            "type": "assistant",
            "uuid": uuid,
            "message": {"role": "assistant", "content": [{"type": "text", "text": text}]},
        }

    records = [
        user("compact", "This session is being continued from a previous conversation.", isCompactSummary=True),
        user("u1", "recall what we decided about the cache keys"),
        user("meta", "Base directory for this skill: /plugins/memory-recall ...", isMeta=True),
        # An older layout: the prompt a subagent got, written after the user's own.
        user("side", "Search the journals for the cache key decision", isSidechain=True),
        reply("a1", "We chose sha256 keys."),
    ]
    path = tmp_path / "meta.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    last = turns.last_turn(path, "Claude Code")
    assert last is not None and last.turn_id == "u1"
    assert "Base directory" not in last.text and "[Claude Code]: We chose sha256 keys." in last.text
    every = turns.uncaptured(path, "Claude Code", set())
    assert every is not None and every.turn_id == "u1" and every.turns == 1
    assert "being continued" not in every.text


@pytest.mark.slow(reason="runs agent hooks as subprocesses with their watcher, database and model")
def test_stop_fired_twice_for_one_turn_writes_one_entry(env: Env) -> None:
    env.answers(NOTES.format(topic="double stops"))
    pairs = [("explain the double stop problem please", "Hosts may fire Stop twice.")]
    transcript = session_file(env, "twice", pairs)
    assert env.json_hook("claude-code", "stop", stop_payload("twice", transcript)) == {}
    assert env.json_hook("claude-code", "stop", stop_payload("twice", transcript)) == {}
    pairs.append(("and what about the next turn then", "It is captured."))
    env.json_hook("claude-code", "stop", stop_payload("twice", session_file(env, "twice", pairs)))
    env.captured(2)
    time.sleep(3.0)  # a duplicate capture would have finished by now
    env.captured(2)
    text = env.log_text()
    assert text.count("turn:twice-u0 ") == 1 and text.count("turn:twice-u1 ") == 1
    assert len(re.findall(r" pid=\d+ (captured|capture:|nothing captured)", env.hooks_log())) == 2


def test_pre_compact_anchors_to_the_oldest_turn_it_keeps(env: Env) -> None:
    """Too many uncaptured turns for one summary: the newest are kept, and the anchor names the
    oldest of those, not a turn whose text was left out."""
    from memsearch_fast.agents import turns

    pairs = [(f"question {i} " + "about the ledger " * 150, f"answer {i}") for i in range(12)]
    excerpt = turns.uncaptured(session_file(env, "many", pairs), "Claude Code", set())
    assert excerpt is not None and 1 < excerpt.turns < 12
    first = 12 - excerpt.turns
    assert excerpt.turn_id == f"many-u{first}"
    assert excerpt.text.startswith(f"[User]: question {first} ") and "answer 11" in excerpt.text


@pytest.mark.slow(reason="runs agent hooks as subprocesses with their watcher, database and model")
def test_a_claude_only_in_the_users_bin_directory_still_summarizes(env: Env) -> None:
    """An agent launched from an IDE may lack ~/.local/bin on PATH: the worker finds claude there."""
    env.answers(NOTES.format(topic="launcher paths"))
    local = env.home / ".local" / "bin"
    local.mkdir(parents=True)
    shutil.move(env.bin / "claude", local / "claude")
    path = os.pathsep.join([str(Path(sys.executable).parent), "/usr/bin", "/bin"])
    transcript = session_file(env, "ide", [("why does the launcher miss my tools", "PATH differs.")])
    env.json_hook("claude-code", "stop", stop_payload("ide", transcript), PATH=path)
    env.captured(1)
    assert "- User asked about the launcher paths." in env.log_text()


def test_the_plugin_ships_a_memsearch_entry(env: Env) -> None:
    """Bare `memsearch` (the recall skill, the SessionStart hint) works with only the plugin's bin/
    on PATH: through MEMSEARCH_CMD (spaces allowed), or the first other `memsearch` on PATH."""
    plugin = _plugin_copy(env)
    tools = env.tmp / "my tools"
    tools.mkdir()
    wrapper = tools / "memsearch"
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m memsearch_fast.cli "$@"\n', encoding="utf-8")
    wrapper.chmod(0o755)
    bare = {**env.vars, "HOME": str(env.tmp / "nohome")}
    own = str(plugin / "bin")
    cases = [
        ({"PATH": f"{own}:/usr/bin:/bin", "MEMSEARCH_CMD": str(wrapper)}, 0),
        ({"PATH": f"{own}:{own}:{tools}:/usr/bin:/bin"}, 0),
        ({"PATH": f"{own}:/usr/bin:/bin"}, 127),
        ({"PATH": f"{own}:/usr/bin:/bin", "MEMSEARCH_CMD": str(plugin / "bin" / "memsearch")}, 127),
    ]
    for extra, code in cases:
        out = subprocess.run(
            ["sh", "-c", "memsearch hook claude-code locate"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            env={**bare, **extra},
            cwd=env.project,
            timeout=60,
        )
        assert out.returncode == code, (extra, out.stderr)
        if code == 0:
            assert json.loads(out.stdout)["project_dir"] == str(env.project)
        else:
            assert out.stdout == "" and len(out.stderr.strip().splitlines()) == 1, out.stderr


@pytest.mark.slow(reason="runs agent hooks as subprocesses with their watcher, database and model")
def test_pre_compact_captures_what_stop_did_not_and_never_blocks(env: Env) -> None:
    env.answers(NOTES.format(topic="compaction"))
    pairs = [(f"question number {i} about the billing service", f"answer {i}") for i in range(4)]
    transcript = session_file(env, "pc", pairs[:2])
    env.json_hook("claude-code", "stop", stop_payload("pc", transcript))
    env.captured(1)
    transcript = session_file(env, "pc", pairs)  # two more turns, not captured (capture was off)
    out = env.json_hook("claude-code", "pre-compact", {**stop_payload("pc", transcript), "trigger": "auto"})
    assert out == {} and "decision" not in out
    env.captured(2)
    text = env.log_text()
    assert "turn:pc-u1 " in text and "turn:pc-u2 " in text
    prompts = sorted(env.tmp.glob("claude.calls.stdin.*"), key=lambda p: p.stat().st_mtime)
    last = prompts[-1].read_text(encoding="utf-8")
    assert "question number 2" in last and "question number 3" in last and "question number 1" not in last
    assert text.count("## Session ") == 1


@pytest.mark.slow(reason="runs agent hooks as subprocesses with their watcher, database and model")
def test_a_turn_compacted_before_it_ends_keeps_one_entry(env: Env) -> None:
    """PreCompact mid-turn writes the running turn's notes; that turn's Stop then
    replaces them in the same entry instead of journaling the turn twice."""
    pairs = [(f"question number {i} about the billing service", f"answer {i}") for i in range(2)]
    env.answers(NOTES.format(topic="first turn"))
    env.json_hook("claude-code", "stop", stop_payload("mid", session_file(env, "mid", pairs[:1])))
    env.captured(1)
    transcript = session_file(env, "mid", pairs)  # the second turn, still running when compaction hits
    env.answers(NOTES.format(topic="half of the second turn"))
    env.json_hook("claude-code", "pre-compact", {**stop_payload("mid", transcript), "trigger": "auto"})
    env.captured(2)
    env.answers(NOTES.format(topic="whole second turn"))
    env.json_hook("claude-code", "stop", stop_payload("mid", transcript))
    env.captured(3)
    text = env.log_text()
    assert text.count("turn:mid-u1 ") == 1 and text.count("turn:mid-u0 ") == 1, text
    assert "whole second turn" in text and "half of the second turn" not in text, text
    assert text.count("### ") == 2 and text.count("## Session ") == 1, text


@pytest.mark.slow(reason="runs agent hooks as subprocesses with a summarizer that takes 3 s")
def test_a_compaction_before_stops_notes_are_written_leaves_the_turn_to_its_stop(env: Env) -> None:
    """Stop writes its notes in the background; a PreCompact that comes before they are in
    the log (the host compacting as the turn ends) does not journal the same turn again."""
    transcript = session_file(env, "race", [("a question about the billing service", "its answer")])
    env.fake_agent("claude", "sleep 3\ncat <<'EOF'\n" + NOTES.format(topic="the billing turn") + "\nEOF")
    env.json_hook("claude-code", "stop", stop_payload("race", transcript))
    env.json_hook("claude-code", "pre-compact", {**stop_payload("race", transcript), "trigger": "auto"})
    env.captured(1)
    time.sleep(4)  # a second capture, had one started with the compaction, is done by now
    text = env.log_text()
    assert text.count("turn:race-u0 ") == 1 and text.count("### ") == 1, text


def test_merge_replaces_a_turns_notes_or_extends_an_entry_of_several_turns(tmp_path: Path) -> None:
    from memsearch_fast.agents import journal

    log = tmp_path / "2026-11-28.md"
    journal.append(log, "10:00", journal.Anchor("s", "t0", "/t.jsonl"), ["- zero"])
    journal.append(log, "10:05", journal.Anchor("s", "t1", "/t.jsonl"), ["- one, half done"])
    journal.append(log, "10:09", journal.Anchor("other", "t1", "/o.jsonl"), ["- another session"])
    journal.merge(log, "10:10", journal.Anchor("s", "t1", "/t.jsonl"), ["- one, done"], into="t1")
    text = log.read_text(encoding="utf-8")
    assert "- one, done" in text and "half done" not in text and text.count("### ") == 3, text
    assert text.index("- one, done") < text.index("- another session")  # in place
    # A PreCompact entry anchored to an earlier turn it also covered: extended, not replaced.
    journal.merge(log, "10:20", journal.Anchor("s", "t2", "/t.jsonl"), ["- two"], into="t0")
    text = log.read_text(encoding="utf-8")
    assert "- zero\n- two\n" in text and "turn:t2 " not in text and text.count("### ") == 3, text
    # No such entry: appended, as a new entry.
    journal.merge(log, "10:30", journal.Anchor("s", "t3", "/t.jsonl"), ["- three"], into="t9")
    assert log.read_text(encoding="utf-8").count("### ") == 4


@pytest.mark.slow(reason="runs agent hooks as subprocesses with their watcher, database and model")
def test_full_loop_start_stop_search_expand_transcript(env: Env) -> None:
    """SessionStart → Stop ×3 → search finds the three entries → expand shows their
    anchors → transcript returns the original turns."""
    topics = ["kafka consumer lag", "postgres vacuum settings", "terraform state locking"]
    env.json_hook("claude-code", "session-start", {"session_id": "loop"}, MEMSEARCH_NO_WATCH="1")
    pairs: list[tuple[str, str]] = []
    for n, topic in enumerate(topics, start=1):
        env.answers(NOTES.format(topic=topic))
        pairs.append((f"please look into the {topic} problem", f"I looked at the {topic}."))
        transcript = session_file(env, "loop", pairs)
        env.json_hook("claude-code", "stop", stop_payload("loop", transcript))
        env.captured(n)
    collection = env.collection
    for i, topic in enumerate(topics):
        hits = json.loads(env.cli("search", topic, "--collection", collection, "-j", "--top-k", "3"))
        assert topic in hits[0]["content"]
        expanded = json.loads(env.cli("expand", hits[0]["chunk_hash"], "--collection", collection, "-j"))
        anchor = re.search(r"<!-- session:(\S+) turn:(\S+) transcript:(\S+) -->", json.dumps(expanded))
        assert anchor is not None and anchor.group(1) == "loop" and anchor.group(2) == f"loop-u{i}"
        original = json.loads(
            env.cli("transcript", anchor.group(3).rstrip('\\"'), "--turn", anchor.group(2), "--context", "0", "-j")
        )
        assert original[0]["text"] == f"please look into the {topic} problem"
    assert env.log_text().count("## Session ") == 1


def test_codex_install_writes_hooks_and_enables_them(env: Env) -> None:
    codex_dir = env.home / ".codex"
    codex_dir.mkdir()
    (codex_dir / "config.toml").write_text('model = "gpt-5"\n[features]\nweb_search = true\n', encoding="utf-8")
    (codex_dir / "hooks.json").write_text(
        json.dumps({"hooks": {"Stop": [{"hooks": [{"type": "command", "command": "other-tool"}]}]}}), encoding="utf-8"
    )
    for _ in range(2):  # idempotent
        subprocess.run(
            [sys.executable, str(ROOT / "hooks" / "codex" / "install.py")],
            env=env.vars,
            check=True,
            capture_output=True,
        )
    import tomllib

    cfg = tomllib.loads((codex_dir / "config.toml").read_text(encoding="utf-8"))
    assert cfg["features"] == {"web_search": True, "hooks": True} and cfg["model"] == "gpt-5"
    hooks = json.loads((codex_dir / "hooks.json").read_text(encoding="utf-8"))["hooks"]
    stop_cmds = [h["command"] for group in hooks["Stop"] for h in group["hooks"]]
    assert "other-tool" in stop_cmds
    ours = [c for c in stop_cmds if "memsearch" in c and " codex stop" in c]
    assert len(ours) == 1
    assert set(hooks) >= {"SessionStart", "UserPromptSubmit", "Stop"}
    assert (env.home / ".agents" / "skills" / "memory-recall" / "SKILL.md").is_file()
    run = subprocess.run(ours[0], shell=True, input="{}", capture_output=True, text=True, env=env.vars, timeout=60)
    assert run.returncode == 0 and run.stdout == ""


def test_codex_install_replaces_the_reference_hooks_and_registers_pre_compact(env: Env) -> None:
    """A switcher's hooks.json holds memsearch 0.4's Codex hooks: they are replaced (each turn would
    be journaled twice), the file is backed up, and the installer says so and that Codex wants the
    hooks trusted in /hooks."""
    codex_dir = env.home / ".codex"
    codex_dir.mkdir()
    old = "/home/u/src/memsearch/plugins/codex/hooks"
    before = {
        "hooks": {
            "SessionStart": [
                {"matcher": "", "hooks": [{"type": "command", "command": f"bash {old}/session-start.sh"}]}
            ],
            "UserPromptSubmit": [{"hooks": [{"type": "command", "command": f"bash {old}/user-prompt-submit.sh"}]}],
            "Stop": [
                {"hooks": [{"type": "command", "command": f"bash {old}/stop.sh", "timeout": 30}]},
                {"hooks": [{"type": "command", "command": "other-tool"}]},
            ],
        }
    }
    (codex_dir / "hooks.json").write_text(json.dumps(before), encoding="utf-8")
    out = subprocess.run(
        [sys.executable, str(ROOT / "hooks" / "codex" / "install.py")],
        env=env.vars,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    hooks = json.loads((codex_dir / "hooks.json").read_text(encoding="utf-8"))["hooks"]
    commands = {event: [h["command"] for g in groups for h in g["hooks"]] for event, groups in hooks.items()}
    assert not any("plugins/codex/hooks" in c for cmds in commands.values() for c in cmds)
    assert "other-tool" in commands["Stop"]
    for event, name in [("SessionStart", "session-start"), ("Stop", "stop"), ("PreCompact", "pre-compact")]:
        assert [c for c in commands[event] if c.endswith(f" codex {name}")], event
    assert "SessionEnd" not in hooks  # Codex has no such event
    backup = json.loads((codex_dir / "hooks.json.memsearch-0.4.bak").read_text(encoding="utf-8"))
    assert backup == before
    assert "replaced memsearch 0.4's own Codex hooks (3 entries)" in out
    assert "/hooks" in out and "trust" in out


CODEX_INSTALL = [sys.executable, str(ROOT / "hooks" / "codex" / "install.py")]
REFERENCE_CODEX_HOOKS = "/home/u/src/memsearch/plugins/codex/hooks"


def test_codex_install_keeps_the_variables_set_before_the_hooks_it_replaces(env: Env) -> None:
    """`MEMSEARCH_DIR=… ` (any assignment) before the hooks it replaces goes before every hook it
    writes, so the memory stays where it was, run after run; a `codex_hooks` line's comment survives."""
    codex_dir = env.home / ".codex"
    codex_dir.mkdir()
    shared = env.tmp / "shared memory"
    prefix = f"MEMSEARCH_DIR={shlex.quote(str(shared))} TZ=UTC"
    old = REFERENCE_CODEX_HOOKS
    before = {
        "hooks": {
            event: [{"hooks": [{"type": "command", "command": f"{prefix} bash {old}/{script}.sh"}]}]
            for event, script in [
                ("SessionStart", "session-start"),
                ("UserPromptSubmit", "user-prompt-submit"),
                ("Stop", "stop"),
            ]
        }
    }
    (codex_dir / "hooks.json").write_text(json.dumps(before), encoding="utf-8")
    (codex_dir / "config.toml").write_text(
        "[features]\ncodex_hooks = true  # memsearch's hooks need it\nweb_search = true\n", encoding="utf-8"
    )
    for _ in range(2):  # the second run replaces its own entries
        out = subprocess.run(CODEX_INSTALL, env=env.vars, check=True, capture_output=True, text=True).stdout
        assert f"kept {prefix}" in out
    hooks = json.loads((codex_dir / "hooks.json").read_text(encoding="utf-8"))["hooks"]
    commands = {event: [h["command"] for g in groups for h in g["hooks"]] for event, groups in hooks.items()}
    for event, name in [
        ("SessionStart", "session-start"),
        ("UserPromptSubmit", "user-prompt"),
        ("Stop", "stop"),
        ("PreCompact", "pre-compact"),
    ]:
        (command,) = commands[event]
        assert command.startswith(prefix + " MEMSEARCH_PLUGIN_ROOT=") and command.endswith(f" codex {name}"), command
        assert command.count("MEMSEARCH_DIR=") == 1 and command.count("MEMSEARCH_PLUGIN_ROOT=") == 1, command
    config = (codex_dir / "config.toml").read_text(encoding="utf-8")
    assert "hooks = true  # memsearch's hooks need it\n" in config and "codex_hooks" not in config, config
    import tomllib

    assert tomllib.loads(config)["features"] == {"hooks": True, "web_search": True}
    # The kept variable still takes effect: the hook command finds the shared folder.
    locate = commands["Stop"][0].removesuffix(" codex stop") + " codex locate"
    found = subprocess.run(
        locate, shell=True, input=json.dumps({"cwd": str(env.project)}), capture_output=True, text=True, env=env.vars
    )
    assert json.loads(found.stdout)["memory_dir"] == str(shared / "memory"), found.stderr


def test_codex_install_refuses_hooks_that_set_different_variables(env: Env) -> None:
    """Earlier hooks that disagree on what they set (here: one moves the memory, one does not) are
    not guessed at: one line says so and nothing is written."""
    codex_dir = env.home / ".codex"
    codex_dir.mkdir()
    old = REFERENCE_CODEX_HOOKS
    start = f"MEMSEARCH_DIR=/m bash {old}/session-start.sh"
    before = {
        "hooks": {
            "SessionStart": [{"hooks": [{"type": "command", "command": start}]}],
            "Stop": [{"hooks": [{"type": "command", "command": f"bash {old}/stop.sh"}]}],
        }
    }
    (codex_dir / "hooks.json").write_text(json.dumps(before), encoding="utf-8")
    run = subprocess.run(CODEX_INSTALL, env=env.vars, capture_output=True, text=True)
    assert run.returncode != 0 and run.stdout == "" and len(run.stderr.strip().splitlines()) == 1, run.stderr
    assert "MEMSEARCH_DIR=/m" in run.stderr and "Traceback" not in run.stderr
    assert json.loads((codex_dir / "hooks.json").read_text(encoding="utf-8")) == before
    assert sorted(p.name for p in codex_dir.iterdir()) == ["hooks.json"]
    assert not (env.home / ".agents").exists()


def test_codex_stop_and_pre_compact_print_nothing(env: Env) -> None:
    """Codex takes an empty stdout from its Stop and PreCompact hooks as 'nothing to do' (it
    refuses `{}` from Stop), whether the hook ran or was turned off."""
    payload = {"session_id": "c", "transcript_path": str(env.tmp / "gone.jsonl"), "trigger": "auto"}
    for event in ("stop", "pre-compact"):
        for switch in ({}, {"MEMSEARCH_DISABLE": "1"}):
            code, stdout, _ = env.hook("codex", event, payload, **switch)
            assert code == 0 and stdout == "", (event, switch, stdout)
    assert env.json_hook("claude-code", "pre-compact", payload) == {}


@pytest.mark.slow(reason="runs agent hooks as subprocesses with their watcher, database and model")
def test_the_recall_skill_steps_chain(env: Env) -> None:
    """The memory-recall skill's commands, run as written: its search step prints the chunk_hash
    its expand step takes; it names its task ($ARGUMENTS), which the Codex copy leaves out."""
    skill = (ROOT / "hooks" / "claude-code" / "skills" / "memory-recall" / "SKILL.md").read_text(encoding="utf-8")
    assert "$ARGUMENTS" in skill
    env.memory.mkdir(parents=True)
    (env.memory / "2026-11-20.md").write_text(
        "## Session 09:00\n\n### 09:00\n<!-- session:s turn:u1 transcript:/t/s.jsonl -->\n"
        "- User asked why invoice totals were off by a cent; rounding moved to the ledger.\n",
        encoding="utf-8",
    )

    def sh(command: str) -> str:
        out = subprocess.run(
            ["sh", "-c", command], capture_output=True, text=True, env=env.vars, cwd=env.project, timeout=120
        )
        assert out.returncode == 0, (command, out.stderr)
        return out.stdout

    locate = re.search(r"!`([^`]+)`", skill)
    assert locate is not None
    collection = json.loads(sh(locate.group(1)))["collection"]
    env.cli("index", str(env.memory), "--collection", collection)
    search = re.search(r"`(memsearch search [^`]+)`", skill)
    expand = re.search(r"`(memsearch expand [^`]+)`", skill)
    assert search is not None and expand is not None
    found = sh(
        search.group(1).replace("<what you are looking for>", "invoice rounding").replace("<collection>", collection)
    )
    hashes = re.findall(r'"chunk_hash": "([0-9a-f]+)"', found)
    assert hashes, found
    shown = sh(expand.group(1).replace("<chunk_hash>", hashes[0]).replace("<collection>", collection))
    assert "rounding moved to the ledger" in shown and "Transcript: /t/s.jsonl" in shown

    codex_home = env.home / ".codex"
    codex_home.mkdir()
    subprocess.run(
        [sys.executable, str(ROOT / "hooks" / "codex" / "install.py")], env=env.vars, check=True, capture_output=True
    )
    codex_skill = (env.home / ".agents" / "skills" / "memory-recall" / "SKILL.md").read_text(encoding="utf-8")
    assert "$ARGUMENTS" not in codex_skill and "The question" not in codex_skill
    assert codex_skill.count("memsearch hook <agent> locate") == 1 and "`codex` in Codex" in codex_skill
    assert (env.home / ".agents" / "skills" / "memory-to-skill" / "SKILL.md").is_file()


def test_hook_usage_errors(env: Env) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "memsearch_fast.cli", "hook", "vim", "stop"],
        capture_output=True,
        text=True,
        env=env.vars,
    )
    assert out.returncode == 2 and "unknown platform 'vim'" in out.stderr and "Traceback" not in out.stderr
    sh = shutil.which("sh")
    if sh:
        shim = subprocess.run(
            [sh, str(SHIM), "claude-code", "session-start"],
            input="{}",
            capture_output=True,
            text=True,
            env={**env.vars, "PATH": "/nonexistent", "HOME": str(env.tmp / "nohome")},
        )
        assert "not installed" in json.loads(shim.stdout)["systemMessage"]


@pytest.mark.slow(reason="runs agent hooks as subprocesses with their watcher, database and model")
def test_opencode_and_openclaw_summarize_with_their_own_cli(env: Env) -> None:
    """With no provider configured, OpenCode's turns go to `opencode run` and OpenClaw's to
    `openclaw agent --local` (as the reference's plugins do), our hooks off inside them; a host
    without its CLI gets the one-line marker under the turn's anchor, never nothing."""
    env.fake_agent("opencode", "echo '- User asked OpenCode to refactor payments.'; echo '- It split the module.'")
    env.fake_agent("openclaw", "echo '[plugins] memsearch loaded'; echo '- User asked OpenClaw for a commit.'")
    for platform, name in (("opencode", "oc"), ("openclaw", "ow")):
        transcript = session_file(env, name, [(f"refactor the payment module please ({name})", "Done.")])
        env.json_hook(platform, "stop", stop_payload(name, transcript))
    env.captured(2)
    text = env.log_text()
    assert "- User asked OpenCode to refactor payments.\n- It split the module." in text
    assert "- User asked OpenClaw for a commit." in text and "[plugins]" not in text
    opencode = (env.tmp / "opencode.calls").read_text(encoding="utf-8")
    assert opencode.startswith("run ") and "(oc)" in opencode and "MEMSEARCH_DISABLE=1" in opencode
    openclaw = (env.tmp / "openclaw.calls").read_text(encoding="utf-8")
    assert (
        openclaw.startswith("agent --local --session-id memsearch-summarize -m ") and "MEMSEARCH_DISABLE=1" in openclaw
    )

    (env.bin / "opencode").unlink()
    transcript = session_file(env, "none", [("refactor the billing module please", "Done.")])
    env.json_hook("opencode", "stop", stop_payload("none", transcript))
    env.captured(3)
    assert re.search(r"<!-- session:none turn:none-u0 transcript:\S+ -->\n- Turn not summarized", env.log_text())
    assert "'opencode' is not on PATH" in env.hooks_log()


@pytest.mark.slow(reason="runs agent hooks as subprocesses with their watcher, database and model")
def test_opencode_entries_anchor_to_its_session_database(env: Env) -> None:
    """OpenCode hands the turn itself (no transcript file): the anchor names OpenCode's session
    database and the turn's message id (`db:` as the reference writes it), not an empty transcript."""
    env.fake_agent("opencode", "echo '- User asked which cache was picked.'; echo '- OpenCode said Redis.'")
    db = env.tmp / "share" / "opencode" / "opencode.db"
    db.parent.mkdir(parents=True)
    db.write_bytes(b"")
    turn = {"id": "msg_03", "text": "[User]: Which cache did we pick?\n[Assistant]: We picked Redis."}
    env.json_hook("opencode", "stop", {"session_id": "ses_1", "turn": turn, "db_path": str(db)})
    env.captured(1)
    assert f"<!-- session:ses_1 turn:msg_03 db:{db} -->\n- User asked which cache was picked." in env.log_text()


@pytest.mark.slow(reason="runs agent hooks as subprocesses with their watcher, database and model")
def test_two_sessions_stopping_at_once_write_whole_entries(env: Env) -> None:
    """Two sessions' Stop hooks on the same daily log at the same moment: both entries, each whole, each
    under its own session heading."""
    env.fake_agent("claude", "sleep 0.5; echo '- User asked about the shared log.'; echo '- Nothing else.'")
    first = session_file(env, "c1", [("first session question about caching", "ok")])
    second = session_file(env, "c2", [("second session question about queues", "ok")])
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "memsearch_fast.agents.main", "claude-code", "stop"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env.vars,
            text=True,
        )
        for _ in range(2)
    ]
    for proc, (name, path) in zip(procs, [("c1", first), ("c2", second)], strict=True):
        assert proc.stdin is not None
        proc.stdin.write(json.dumps({"cwd": str(env.project), **stop_payload(name, path)}))
        proc.stdin.close()
    assert [p.wait(timeout=30) for p in procs] == [0, 0]
    for p in procs:
        assert p.stdout is not None
        p.stdout.close()
    env.captured(2)
    text = env.log_text()
    assert text.count("## Session ") == 2
    for name in ("c1", "c2"):
        assert re.search(rf"### \d\d:\d\d\n<!-- session:{name} turn:{name}-u0 transcript:\S+ -->\n- User asked", text)


def test_a_hook_gives_up_before_the_agents_timeout(env: Env) -> None:
    """A transcript too large to read in the hook's deadline: the hook answers in time and logs why."""
    big = env.tmp / "big.jsonl"
    line = json.dumps({"type": "user", "uuid": "u", "message": {"content": "question " + "z" * 2000}}) + "\n"
    with big.open("w", encoding="utf-8") as f:
        for _ in range(60_000):
            f.write(line)
    _, stdout, took = env.hook("claude-code", "pre-compact", stop_payload("big", big), MEMSEARCH_HOOK_DEADLINE="0.3")
    assert json.loads(stdout) == {}
    assert took < 10
    assert "ran out of time" in env.hooks_log()


def _plugin_copy(env: Env, where: str = "plugin cache") -> Path:
    """The Claude Code plugin, installed under *where* (a space in it, as a user's home may have)."""
    plugin = env.tmp / where / "memsearch-fast"
    shutil.copytree(ROOT / "hooks" / "claude-code", plugin)
    return plugin


def test_the_shim_skips_its_own_directory_on_path(env: Env) -> None:
    """The agent puts the plugin's bin/ first on PATH: the shim finds the real hook, never itself."""
    plugin = _plugin_copy(env, "plugins")
    real = Path(sys.executable).parent  # where this environment's memsearch-hook lives
    path = os.pathsep.join([str(plugin / "bin"), str(plugin / "bin"), str(real), env.vars["PATH"]])
    for event in ("locate", "user-prompt"):
        out = subprocess.run(
            ["sh", str(plugin / "bin" / "memsearch-hook"), "claude-code", event],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            env={**env.vars, "PATH": path},
            cwd=env.project,
            timeout=30,
        )
        assert out.returncode == 0, out.stderr
        answer = json.loads(out.stdout)
        if event == "locate":
            assert answer["project_dir"] == str(env.project)


def test_the_shim_takes_paths_with_spaces(env: Env) -> None:
    """MEMSEARCH_CMD and PATH entries may contain spaces."""
    plugin = _plugin_copy(env)
    tools = env.tmp / "my tools"
    tools.mkdir()
    wrapper = tools / "memsearch"
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m memsearch_fast.cli "$@"\n', encoding="utf-8")
    wrapper.chmod(0o755)
    bare = {**env.vars, "PATH": "/usr/bin:/bin", "HOME": str(env.tmp / "nohome")}
    for extra in ({"MEMSEARCH_CMD": str(wrapper)}, {"PATH": f"{tools}:/usr/bin:/bin"}):
        out = subprocess.run(
            ["sh", str(plugin / "bin" / "memsearch-hook"), "claude-code", "locate"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            env={**bare, **extra},
            cwd=env.project,
            timeout=60,
        )
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout)["project_dir"] == str(env.project), extra
