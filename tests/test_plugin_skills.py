"""The Claude Code plugin's `memory-config` and `memory-to-skill` skills: their triggers, and
their commands run as written (in `sh`, against real `memsearch` subprocesses in a temporary
project), so a renamed command, option or key breaks a test rather than the skill.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from memsearch_fast.config.schema import PROJECT_ALLOWED, SCHEMA
from tests.helpers.installed import PACKAGE_PARENT

ROOT = Path(__file__).resolve().parents[1]
SKILLS = ROOT / "hooks" / "claude-code" / "skills"
sys.path.insert(0, str(ROOT / "hooks"))
import install_skills  # noqa: E402


def skill(name: str, agent: str | None = None) -> tuple[dict[str, str], str]:
    """A skill's frontmatter and body: Claude Code's, or the copy `hooks/install_skills.py` writes
    for the other agents, read by *agent* (its `<agent>` replaced)."""
    if agent is None:
        text = (SKILLS / name / "SKILL.md").read_text(encoding="utf-8")
    else:
        text = install_skills.render(name).replace("<agent>", agent)
    m = re.match(r"---\n(.*?)\n---\n(.*)", text, re.S)
    assert m, name
    front = {}
    for line in m.group(1).splitlines():
        key, _, value = line.partition(":")
        front[key.strip()] = value.strip().strip('"')
    return front, m.group(2)


def blocks(body: str) -> list[str]:
    return re.findall(r"```bash\n(.*?)```", body, re.S)


class Shell:
    """`sh -c` in a temporary project, with `memsearch` and `memsearch-hook` on PATH."""

    def __init__(self, tmp: Path, model_dir: Path) -> None:
        self.project = tmp / "proj"
        (self.project / ".git").mkdir(parents=True)
        self.home = tmp / "home"
        (self.home / ".memsearch").mkdir(parents=True)
        (self.home / ".memsearch" / "config.toml").write_text(
            f'[milvus]\nuri = "{tmp / "milvus.db"}"\n[embedding]\nmodel = "{model_dir}"\n', encoding="utf-8"
        )
        bin_dir = tmp / "bin"
        bin_dir.mkdir()
        for name, module in (("memsearch", "memsearch_fast"), ("memsearch-hook", "memsearch_fast.agents.main")):
            (bin_dir / name).write_text(f'#!/bin/sh\nexec "{sys.executable}" -m {module} "$@"\n', encoding="utf-8")
            (bin_dir / name).chmod(0o755)
        self.vars = {k: v for k, v in os.environ.items() if not k.startswith(("MEMSEARCH_", "GIT_"))}
        self.vars.update(
            HOME=str(self.home),
            PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
            PYTHONPATH=PACKAGE_PARENT,
            MEMSEARCH_NO_WATCH="1",
        )

    def __call__(self, command: str, ok: bool = True) -> str:
        out = subprocess.run(
            ["sh", "-c", command], capture_output=True, text=True, env=self.vars, cwd=self.project, timeout=120
        )
        if ok:
            assert out.returncode == 0 and "Traceback" not in out.stderr, (command, out.stdout, out.stderr)
        return out.stdout


@pytest.fixture
def sh(tmp_path: Path, model_dir: Path) -> Shell:
    return Shell(tmp_path, model_dir)


@pytest.mark.parametrize(
    ("name", "triggers"),
    [
        (
            "memory-config",
            ["settings", "summarization", "PROJECT.md", "USER.md", "index health", "provider", "prompt", "update"],
        ),
        ("memory-to-skill", ["make", "extract", "distill", "review", "install", "turn this into a skill"]),
    ],
)
def test_each_skill_triggers_on_what_users_ask(name: str, triggers: list[str]) -> None:
    front, body = skill(name)
    assert front["name"] == name and front["context"] == "fork" and front["allowed-tools"] == "Bash"
    for word in triggers:
        assert word in front["description"], word
    assert "not Claude Code's own" in front["description"]
    assert "$ARGUMENTS" in body


def memsearch_commands(body: str) -> list[list[str]]:
    """Each `memsearch …` command line the skill shows (continuations joined)."""
    lines = [line for block in blocks(body) for line in block.replace("\\\n", " ").splitlines()]
    lines += re.findall(r"`(memsearch [^`]+)`", re.sub(r"```.*?```", "", body, flags=re.S).replace("\n", " "))
    found = []
    for line in lines:
        for part in re.split(r"\|", re.sub(r"\s#\s.*$", "", line)):
            words = part.split()
            if words and words[0] == "memsearch":
                found.append(words[1:])
    return found


def assert_options_exist(words: list[str], sh: Shell) -> None:
    """Every option a skill's command shows is in its command's ``--help``, or is one of
    ours that ``--help`` leaves out (to stay memsearch 0.4.23's word for word) and the
    command still accepts."""
    path = [w for w in words[:2] if re.fullmatch(r"[a-z]+", w) and w not in ("true", "false")]
    path = path[:2] if path[:1] in (["config"], ["skills"]) else path[:1]  # the groups have subcommands
    usage = sh(" ".join(["memsearch", *path, "--help"]))
    for option in (w.split("=")[0] for w in words if w.startswith("--")):
        if option not in usage:
            accepted = subprocess.run(
                [sys.executable, "-m", "memsearch_fast", *path, option, "--help"],
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert accepted.returncode == 0, (words, option, accepted.stderr[-500:])


@pytest.mark.parametrize("name", ["memory-config", "memory-to-skill"])
def test_every_command_and_option_the_skill_shows_exists(name: str, sh: Shell) -> None:
    _, body = skill(name)
    commands = memsearch_commands(body)
    assert commands
    for words in commands:
        assert_options_exist(words, sh)


def test_the_keys_the_skills_name_are_real() -> None:
    text = "".join(skill(n)[1] for n in ("memory-config", "memory-to-skill"))
    keys = set(re.findall(r"\b((?:plugins\.claude-code|prompts)\.[a-z_]+(?:\.[a-z_]+)?)\b", text))
    assert keys
    for key in keys:
        assert key in SCHEMA or any(k.startswith(key + ".") for k in SCHEMA), key
    _, config = skill("memory-config")
    section = config.split("A project file may only set local indexing knobs:", 1)[1].split("Everything else", 1)[0]
    assert set(re.findall(r"`([a-z_.]+)`", section)) == PROJECT_ALLOWED


@pytest.mark.slow(reason="runs the other agents' skill copies as written, through subprocesses")
def test_memory_config_diagnosis_runs(sh: Shell) -> None:
    _, body = skill("memory-config")
    diagnose = blocks(body)[0]
    out = sh(diagnose)
    assert '"collection"' in out and "[milvus]" in out
    located = json.loads(sh("memsearch-hook claude-code locate < /dev/null"))
    assert located["project_dir"] == str(sh.project)
    files = blocks(body)[1]
    (Path(located["memory_dir"])).mkdir(parents=True)
    sh(files)
    # The maintenance switches the skill shows turn the tasks on, globally.
    for command in re.findall(r"^memsearch config set plugins\.claude-code\.\S+ true$", blocks(body)[-2], re.M):
        sh(command)
    for task in ("project_review", "user_profile", "memory_to_skill"):
        assert sh(f"memsearch config get plugins.claude-code.{task}.enabled").strip().lower() == "true"
    assert "project_review" in (sh.home / ".memsearch" / "config.toml").read_text(encoding="utf-8")


def test_capture_review_and_install_run_as_written(sh: Shell) -> None:
    _, body = skill("memory-to-skill")
    add = next(b for b in blocks(body) if "memsearch skills add" in b)
    command = (
        add.replace("<Title>", "Run the ledger tests")
        .replace('"1. <step>"', '"1. Run \\`make test-ledger\\`."')
        .replace('"2. <step>"', '"2. Read the first failure."')
        .replace("<short-slug>", "Ledger Tests")
        .replace("<what it does and when to use it, led by the verbs a user would type>", "Run the ledger tests.")
    )
    sh(command)
    stored = (sh.project / ".memsearch" / "skill-candidates" / "ledger-tests" / "SKILL.md").read_text(encoding="utf-8")
    assert "## Run the ledger tests\n\n1. Run `make test-ledger`.\n2. Read the first failure." in stored
    review = next(b for b in blocks(body) if "memsearch skills status" in b)
    assert "ledger-tests" in sh(review)
    install = next(b for b in blocks(body) if "memsearch skills install" in b)
    sh(install.replace("<name>", "ledger-tests").replace("<folder the user approved>", ".claude/skills"))
    installed = sh.project / ".claude" / "skills" / "ledger-tests" / "SKILL.md"
    assert installed.read_text(encoding="utf-8") == stored


# -- the copy for Codex, OpenCode and OpenClaw (~/.agents/skills) ------------------------------


@pytest.mark.parametrize("name", install_skills.NAMES)
def test_the_other_agents_copy_holds_nothing_only_claude_code_reads(name: str) -> None:
    """No `$ARGUMENTS`, `!` command, `context: fork` or `allowed-tools` (Claude Code's alone), no
    Claude Code plugin name or folder where the agent's own belongs, and the reading of `<agent>`."""
    front, body = skill(name, "codex")
    assert front["name"] == name and "context" not in front and "allowed-tools" not in front
    text = install_skills.render(name)
    assert "$ARGUMENTS" not in text and "!`" not in text and "Claude Code's own" not in text
    assert "claude-code" not in text.replace("`ollama`, `claude-code`, `codex`", "")  # the protocols' list
    assert ".claude/skills`:" not in text and "/plugin marketplace" not in text
    assert "`codex` in Codex, `opencode` in OpenCode, `openclaw` in OpenClaw" in body


@pytest.mark.parametrize("agent", ["codex", "opencode", "openclaw"])
@pytest.mark.slow(reason="runs the other agents' skill copies as written, through subprocesses")
def test_the_other_agents_copy_runs_as_written(agent: str, sh: Shell) -> None:
    """Read by each agent, every command and option the copy shows exists, its diagnosis runs and
    its switches set that agent's keys."""
    for name in ("memory-config", "memory-to-skill"):
        for words in memsearch_commands(skill(name, agent)[1]):
            assert_options_exist(words, sh)
    _, body = skill("memory-config", agent)
    out = sh(blocks(body)[0])
    assert '"collection"' in out and "[milvus]" in out
    for command in re.findall(rf"^memsearch config set plugins\.{agent}\.\S+ true$", blocks(body)[-2], re.M):
        sh(command)
    for task in ("project_review", "user_profile", "memory_to_skill"):
        assert sh(f"memsearch config get plugins.{agent}.{task}.enabled").strip().lower() == "true"
    _, body = skill("memory-to-skill", agent)
    configure = next(b for b in blocks(body) if "min_occurrences" in b)
    sh(configure)
    assert sh(f"memsearch config get plugins.{agent}.memory_to_skill.paths").strip() == '[".agents/skills"]'


def test_the_skills_installer_writes_the_three(tmp_path: Path) -> None:
    """Into ~/.agents/skills; a skill folder there that links elsewhere (memsearch 0.4's OpenCode
    installer links its clone's skills) is replaced, and nothing is written through it."""
    theirs = tmp_path / "memsearch-0.4" / "plugins" / "opencode" / "skills" / "memory-recall"
    theirs.mkdir(parents=True)
    (theirs / "SKILL.md").write_text("their skill\n", encoding="utf-8")
    (tmp_path / "skills").mkdir()
    (tmp_path / "skills" / "memory-recall").symlink_to(theirs, target_is_directory=True)
    out = subprocess.run(
        [sys.executable, str(ROOT / "hooks" / "install_skills.py"), "--dest", str(tmp_path / "skills")],
        capture_output=True,
        text=True,
        check=True,
    )
    for name in install_skills.NAMES:
        path = tmp_path / "skills" / name / "SKILL.md"
        assert path.read_text(encoding="utf-8") == install_skills.render(name) and str(path) in out.stdout
    assert not (tmp_path / "skills" / "memory-recall").is_symlink() and "replaced the link" in out.stdout
    assert (theirs / "SKILL.md").read_text(encoding="utf-8") == "their skill\n" and len(list(theirs.iterdir())) == 1
