"""The built-in prompts are package files: each loads and carries the placeholders its task fills."""

from __future__ import annotations

from pathlib import Path

import pytest

from memsearch_fast import config
from memsearch_fast.agents import prompts
from memsearch_fast.config.settings import Settings


@pytest.fixture(autouse=True)
def _own_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No configuration file of the user's or of the working directory is read."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)


def settings(**keys: str) -> Settings:
    return config.resolve(keys)


@pytest.mark.parametrize(
    ("task", "markers"),
    [
        ("summarize", ["{{AGENT_NAME}}"]),
        ("compact", ["{chunks}"]),
        ("memory_to_skill", ["{{AGENT_NAME}}", "{{PROJECT_DIR}}", "{{INPUT_DIR}}", "{{MIN_OCCURRENCES}}"]),
        ("project_review", ["{{AGENT_NAME}}", "{{TASK_NAME}}", "{{PROJECT_DIR}}", "{{INPUT_DIR}}", "{{OUTPUT_FILE}}"]),
        ("user_profile", ["{{AGENT_NAME}}", "{{TASK_NAME}}", "{{PROJECT_DIR}}", "{{INPUT_DIR}}", "{{OUTPUT_FILE}}"]),
    ],
)
def test_builtin_prompt(task: str, markers: list[str]) -> None:
    text = prompts.builtin(task)
    assert text.strip() and not text.endswith("\n\n")
    for marker in markers:
        assert marker in text


def test_configured_prompt_replaces_the_builtin(tmp_path: Path) -> None:
    custom = tmp_path / "notes.txt"
    custom.write_text("Only {{AGENT_NAME}}.\n", encoding="utf-8")
    assert prompts.configured(settings(**{"prompts.summarize": str(custom)}), "summarize") == "Only {{AGENT_NAME}}.\n"
    assert prompts.configured(settings(), "summarize") == prompts.builtin("summarize")


def test_unreadable_prompt_warns_and_falls_back(tmp_path: Path) -> None:
    warnings: list[str] = []
    missing = tmp_path / "missing.txt"
    text = prompts.configured(settings(**{"prompts.compact": str(missing)}), "compact", warnings.append)
    assert text == prompts.builtin("compact")
    assert len(warnings) == 1 and str(missing) in warnings[0] and "built-in" in warnings[0]
