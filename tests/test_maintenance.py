"""SessionEnd's maintenance (PROJECT.md, USER.md, skill candidates), run as the agents run it:
`memsearch-hook claude-code session-end` as a subprocess, the detached worker it starts, a local
LLM server (or a fake `claude`) answering, real files in a temporary project.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from memsearch_fast import config
from memsearch_fast.agents import maintain
from tests.helpers.installed import PACKAGE_PARENT
from tests.helpers.llm import KEY, FakeLLMServer

ROOT = Path(__file__).resolve().parents[1]
PROJECT_MD = "# Project Memory\n\n## Decisions\n\n- Invoices round in the ledger, not in the UI."
USER_MD = "# User Memory\n\n## Preferences\n\n- Wants the tests run before every commit."
SKILL = {
    "name": "run-ledger-tests",
    "description": "Run the ledger tests. Use when asked to test or check the ledger.",
    "body": "## Ledger tests\n\n1. Run `make test-ledger`.",
    "occurrences": 3,
    "sources": ["2026-03-01.md"],
    "reason": "Seen in 3 sessions.",
}


class TaskServer(FakeLLMServer):
    """Answers each task by the instructions its prompt starts with."""

    def __init__(self) -> None:
        super().__init__()
        self.by_task = {
            "project_review": {"action": "replace", "reason": "a decision", "content": PROJECT_MD},
            "user_profile": {"action": "replace", "reason": "a preference", "content": USER_MD},
            "memory_to_skill": {"skills": [SKILL]},
        }

    def respond(self, path: str, headers: dict[str, str], body: dict[str, Any]) -> Any:
        prompt = body["messages"][0]["content"]
        if "\nTranscript:\n" in prompt:  # a turn to summarize
            self.answer = "- User asked to run the ledger tests.\n- Codex ran them."
            return super().respond(path, headers, body)
        task = next((t for t in ("project_review", "user_profile") if f"Task: {t}" in prompt), "memory_to_skill")
        self.answer = json.dumps(self.by_task[task])
        return super().respond(path, headers, body)

    def prompts_of(self, needle: str) -> list[str]:
        return [p for p in self.prompts() if needle in p]


class Project:
    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.home = tmp / "home"
        (self.home / ".memsearch").mkdir(parents=True)
        self.root = tmp / "proj"
        (self.root / ".git").mkdir(parents=True)
        self.mem = self.root / ".memsearch"
        self.memory = self.mem / "memory"
        self.memory.mkdir(parents=True)
        for day in range(3):
            (self.memory / f"2026-03-0{day + 1}.md").write_text(
                f"## Session {day}\n\n### 10:0{day}\n- Project decision: invoices round in the ledger.\n"
                "- User asked to run `make test-ledger` before committing.\n",
                encoding="utf-8",
            )
        self.bin = tmp / "bin"
        self.bin.mkdir()
        self.vars = {
            k: v for k, v in os.environ.items() if not k.startswith(("MEMSEARCH_", "OPENAI_", "ANTHROPIC_", "GIT_"))
        }
        self.vars.update(
            HOME=str(self.home),
            PATH=f"{self.bin}{os.pathsep}{os.environ['PATH']}",
            PYTHONPATH=PACKAGE_PARENT,
            MEMSEARCH_NO_WATCH="1",  # no database here: the watcher is another test's subject
            WORK_LLM_KEY=KEY,
        )

    def configure(self, text: str) -> None:
        (self.home / ".memsearch" / "config.toml").write_text(text, encoding="utf-8")

    def session_end(self, session: str = "s1") -> float:
        start = time.monotonic()
        out = subprocess.run(
            [sys.executable, "-m", "memsearch_fast.agents.main", "claude-code", "session-end"],
            input=json.dumps({"cwd": str(self.root), "session_id": session}),
            capture_output=True,
            text=True,
            env=self.vars,
            timeout=60,
            cwd=self.tmp,
        )
        took = time.monotonic() - start
        assert out.returncode == 0 and json.loads(out.stdout) == {}, out.stderr
        return took

    def hooks_log(self) -> str:
        path = self.mem / "hooks.log"
        return path.read_text(encoding="utf-8") if path.exists() else ""

    def wait_for(self, what: Callable[[], bool], timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while not what():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out; hooks.log: {self.hooks_log()[-1500:]}")
            time.sleep(0.1)

    def state(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads((self.mem / ".maintenance-state.json").read_text(encoding="utf-8"))
        return data

    def settings(self) -> config.Settings:
        old = os.environ.get("HOME")
        os.environ["HOME"] = str(self.home)
        try:
            return config.resolve(resolve_env=False)
        finally:
            os.environ["HOME"] = old or ""


@pytest.fixture
def server() -> Iterator[TaskServer]:
    s = TaskServer()
    yield s
    s.close()


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Project:
    monkeypatch.setenv("WORK_LLM_KEY", KEY)  # for the tasks run in this process
    return Project(tmp_path)


def provider(server: FakeLLMServer, *tasks: str, platform: str = "claude-code") -> str:
    text = (
        f'[llm.providers.work]\ntype = "openai"\nmodel = "judge"\nbase_url = "{server.url}/v1"\n'
        'api_key = "env:WORK_LLM_KEY"\n'
    )
    for task in tasks:
        text += f'[plugins.{platform}.{task}]\nenabled = true\nprovider = "work"\n'
    return text


@pytest.mark.slow(reason="runs the maintenance worker as a subprocess against a local LLM server")
def test_session_end_writes_project_user_and_skills_in_the_background(server: TaskServer, project: Project) -> None:
    project.configure(provider(server, "project_review", "user_profile", "memory_to_skill"))
    server.delay = 3.0  # a slow model: the hook must not wait for it
    took = project.session_end()
    assert took < server.delay and not (project.mem / "PROJECT.md").exists()
    done = ("maintenance project_review: replace", "maintenance user_profile: replace", "maintenance memory_to_skill")
    project.wait_for(lambda: all(d in project.hooks_log() for d in done))

    assert (project.mem / "PROJECT.md").read_text(encoding="utf-8") == PROJECT_MD + "\n"
    assert (project.mem / "USER.md").read_text(encoding="utf-8") == USER_MD + "\n"
    skill = (project.mem / "skill-candidates" / "run-ledger-tests" / "SKILL.md").read_text(encoding="utf-8")
    assert "make test-ledger" in skill and "name: run-ledger-tests" in skill
    assert len(server.requests) == 3 and {r["body"]["model"] for r in server.requests} == {"judge"}
    (review,) = server.prompts_of("Task: project_review")
    assert "invoices round in the ledger" in review and str(project.mem / "PROJECT.md") in review
    assert "## Existing output file" in review and "{{" not in review
    state = project.state()
    for task in ("project_review", "user_profile", "memory_to_skill"):
        assert state[f"claude-code.{task}"]["last_success_at"]
    assert state["claude-code.project_review"]["last_action"] == "replace"
    assert not list((project.mem / "jobs").iterdir())  # the job file is consumed

    # The same journals: nothing is asked again.
    server.delay = 0.0
    project.session_end("s2")
    project.wait_for(lambda: project.hooks_log().count("maintenance project_review: skip (input unchanged)") == 1)
    assert len(server.requests) == 3

    # New journals and a forced run: the file as it stands goes into the prompt.
    server.by_task["project_review"] = {"action": "none", "reason": "nothing new"}
    (project.memory / "2026-03-09.md").write_text("- Project progress: ledger tests pass.\n", encoding="utf-8")
    lines = maintain.run_all(project.settings(), "claude-code", project.root, project.mem, force=True)
    assert "project_review: none (nothing new)" in lines
    assert PROJECT_MD in server.prompts_of("Task: project_review")[-1]
    assert (project.mem / "PROJECT.md").read_text(encoding="utf-8") == PROJECT_MD + "\n"


def test_maintenance_is_off_by_default(server: TaskServer, project: Project) -> None:
    from memsearch_fast.agents import hooks

    assert set(hooks.MAINTENANCE_TASKS) == set(maintain.ALL_TASKS)  # the hook's switches are the worker's tasks
    project.configure(provider(server))  # a provider, but no task enabled
    assert maintain.enabled_tasks(project.settings(), "claude-code") == []
    project.session_end()
    time.sleep(1.5)
    assert server.requests == []
    assert not (project.mem / "PROJECT.md").exists() and not (project.mem / "USER.md").exists()
    assert not (project.mem / "skill-candidates").exists() and "maintenance" not in project.hooks_log()


FAKE_CLAUDE = """\
import json, os, sys
prompt = sys.stdin.read()
with open(os.environ["FAKE_AGENT_LOG"], "a", encoding="utf-8") as log:
    log.write(json.dumps({"argv": sys.argv[1:], "disable": os.environ.get("MEMSEARCH_DISABLE")}) + "\\n")
if '{"skills": []}' in prompt:
    print(json.dumps({"skills": []}))
else:
    print(json.dumps({"action": "replace", "reason": "r", "content": "# Project Memory\\n\\n- From claude."}))
"""


def test_a_native_provider_asks_the_claude_cli_with_sonnet(project: Project) -> None:
    claude = project.bin / "claude"
    claude.write_text(f"#!{sys.executable}\n{FAKE_CLAUDE}", encoding="utf-8")
    claude.chmod(0o755)
    log = project.tmp / "claude.jsonl"
    project.vars["FAKE_AGENT_LOG"] = str(log)
    project.configure(
        "[plugins.claude-code.project_review]\nenabled = true\n[plugins.claude-code.memory_to_skill]\nenabled = true\n"
    )
    project.session_end()
    project.wait_for(lambda: "maintenance project_review: replace" in project.hooks_log())
    project.wait_for(lambda: "maintenance memory_to_skill" in project.hooks_log())
    assert (project.mem / "PROJECT.md").read_text(encoding="utf-8") == "# Project Memory\n\n- From claude.\n"
    asked = [c for c in map(json.loads, log.read_text(encoding="utf-8").splitlines()) if "-p" in c["argv"]]
    assert len(asked) == 2 and all(c["argv"][c["argv"].index("--model") + 1] == "sonnet" for c in asked)
    assert all(c["disable"] == "1" for c in asked)
    # No tools for a file task; distilling skills may read the original turns, with nothing else.
    (review,) = [c["argv"] for c in asked if "--allowed-tools" not in c["argv"]]
    assert review[review.index("--tools") + 1] == ""
    (skills,) = [c["argv"] for c in asked if "--allowed-tools" in c["argv"]]
    assert skills[skills.index("--tools") + 1] == "Bash"
    allowed = skills[skills.index("--allowed-tools") + 1]
    assert allowed == "Bash(memsearch transcript:*) Bash(memsearch expand:*)"


def test_files_are_written_only_inside_the_memory_folder(server: TaskServer, project: Project) -> None:
    """A cloned repository's `.memsearch/` may hold links: none is written through or read into a prompt."""
    secret = project.tmp / "secret.txt"
    secret.write_text("PRIVATE-KEY-MATERIAL\n", encoding="utf-8")
    (project.mem / "PROJECT.md").symlink_to(secret)
    (project.memory / "leak.md").symlink_to(secret)
    project.configure(provider(server, "project_review", "user_profile"))
    project.session_end()
    project.wait_for(lambda: "maintenance user_profile: replace" in project.hooks_log())
    project.wait_for(lambda: "maintenance project_review: replace" in project.hooks_log())
    assert secret.read_text(encoding="utf-8") == "PRIVATE-KEY-MATERIAL\n"
    assert not (project.mem / "PROJECT.md").is_symlink()
    assert (project.mem / "PROJECT.md").read_text(encoding="utf-8") == PROJECT_MD + "\n"
    assert server.requests and not any("PRIVATE-KEY-MATERIAL" in p for p in server.prompts())

    # A configured path out of the folder, plainly or through a linked folder, is refused.
    outside = project.tmp / "elsewhere"
    outside.mkdir()
    (project.mem / "linked").symlink_to(outside, target_is_directory=True)
    for target in (str(project.tmp / "PROJECT.md"), "../PROJECT.md", ".memsearch/linked/PROJECT.md"):
        project.configure(provider(server, "project_review") + f'output_file = "{target}"\n'.replace("\\", "\\\\"))
        asked = len(server.requests)
        lines = maintain.run_all(project.settings(), "claude-code", project.root, project.mem, force=True)
        assert len(lines) == 1 and "outside the project's memory folder" in lines[0], lines
        assert len(server.requests) == asked
    assert not list(outside.iterdir()) and not (project.tmp / "PROJECT.md").exists()


def test_a_failing_task_is_recorded_and_the_others_still_run(server: TaskServer, project: Project) -> None:
    project.configure(provider(server, "project_review", "user_profile"))
    server.by_task["project_review"] = {"action": "rewrite"}  # not an action
    project.session_end()
    project.wait_for(lambda: "maintenance user_profile: replace" in project.hooks_log())
    project.wait_for(lambda: "maintenance project_review: failed" in project.hooks_log())
    entry = project.state()["claude-code.project_review"]
    assert entry["last_action"] == "error" and "'none' or 'replace'" in entry["last_error"]
    assert not (project.mem / "PROJECT.md").exists() and (project.mem / "USER.md").exists()


@pytest.mark.slow(reason="runs the maintenance worker as a subprocess against a local LLM server")
def test_codex_without_session_end_maintains_after_a_capture(
    server: TaskServer, project: Project, model_dir: Path
) -> None:
    """Codex has no SessionEnd event: the enabled tasks follow its Stop's capture, in the worker."""
    project.configure(
        f'[milvus]\nuri = "{project.tmp / "milvus.db"}"\n[embedding]\nmodel = "{model_dir}"\n'
        + provider(server, "project_review", platform="codex")
        + '[plugins.codex.summarize]\nprovider = "work"\n'
    )
    codex_home = project.tmp / "codex"
    codex_home.mkdir()
    (codex_home / "history.jsonl").write_text(
        json.dumps({"session_id": "c1", "ts": 1, "text": "run the ledger tests please"}) + "\n", encoding="utf-8"
    )
    project.vars["CODEX_HOME"] = str(codex_home)
    payload = {"cwd": str(project.root), "session_id": "c1", "turn_id": "t1", "last_assistant_message": "Done."}
    out = subprocess.run(
        [sys.executable, "-m", "memsearch_fast.agents.main", "codex", "stop"],
        input=json.dumps(payload),
        capture_output=True,
        text=True,
        env=project.vars,
        timeout=60,
    )
    assert out.returncode == 0 and out.stdout == "", out.stderr
    try:
        project.wait_for(lambda: "maintenance project_review: replace" in project.hooks_log(), timeout=120)
    finally:
        from memsearch_fast.lite import broker

        broker.stop_server(str(project.tmp / "milvus.db"))  # the capture's index started the database's service
    assert (project.mem / "PROJECT.md").read_text(encoding="utf-8") == PROJECT_MD + "\n"
    assert "User asked to run the ledger tests." in "".join(
        p.read_text(encoding="utf-8") for p in project.memory.glob("*.md")
    )
    assert project.state()["codex.project_review"]["last_action"] == "replace"
