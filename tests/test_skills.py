"""`memsearch skills`: the candidate store shared with memsearch 0.4.23.

Our CLI runs as a subprocess; the reference runs in a long-lived process of
its own environment (click's runner, in the same directory and HOME) so the
differential checks stay fast. Both
work on the same store: whatever one writes, the other lists the same way.
`distill` talks to a local OpenAI-compatible server or a fake `claude`.
"""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from memsearch_fast.agents.skills import distill as dist
from memsearch_fast.agents.skills import store
from tests.helpers import reference
from tests.helpers.llm import KEY, FakeLLMServer

#: `--help` of every memsearch 0.4.23 command, as that release prints it.
SPEC = Path(__file__).resolve().parent / "fixtures" / "memsearch-0.4.23-cli-help.txt"
BODY = "## Run the tests\n\n1. Run `make test`.\n2. Read the first failure.\n"
HINT = "SKILLS: {} candidate skill version(s) pending install - run the memory-to-skill skill to review and install.\n"
READ_ONLY = [
    ["list"],
    ["list", "-j"],
    ["status"],
    ["status", "-j"],
    ["status", "--hint"],
    ["status", "--hint", "-j"],
]


REF_SKILLS = """
import os
from click.testing import CliRunner
from memsearch import config as ref_config
from memsearch.cli import cli

overrides = {k: None for k in os.environ if k.startswith(("MEMSEARCH_", "OPENAI_", "ANTHROPIC_", "GIT_"))}
overrides.update(env)
before, global_config = os.getcwd(), ref_config.GLOBAL_CONFIG_PATH
os.chdir(cwd)
ref_config.GLOBAL_CONFIG_PATH = home / ".memsearch" / "config.toml"  # fixed when it was imported
try:
    r = CliRunner().invoke(cli, argv, input=stdin, env=overrides)
finally:
    os.chdir(before)
    ref_config.GLOBAL_CONFIG_PATH = global_config
result = [r.exit_code, r.stdout, r.stderr]
"""


@dataclass
class Run:
    code: int
    stdout: str
    stderr: str


@dataclass
class Project:
    root: Path
    home: Path
    env: dict[str, str] = field(default_factory=dict)

    @property
    def store(self) -> Path:
        return self.root / ".memsearch" / "skill-candidates"

    def ours(self, *args: str, stdin: str | None = None, **env: str) -> Run:
        full = {
            k: v for k, v in os.environ.items() if not k.startswith(("MEMSEARCH_", "OPENAI_", "ANTHROPIC_", "GIT_"))
        }
        full.update(HOME=str(self.home), PYTHONIOENCODING="utf-8", **self.env, **env)
        proc = subprocess.run(
            [sys.executable, "-m", "memsearch_fast", "skills", *args],
            cwd=self.root,
            env=full,
            input=stdin if stdin is not None else "",
            capture_output=True,
            text=True,
            encoding="utf-8",
            timeout=120,
        )
        return Run(proc.returncode, proc.stdout, proc.stderr)

    def ref(self, *args: str, stdin: str | None = None, **env: str) -> Run:
        overrides = dict(HOME=str(self.home), **self.env, **env)
        code, out, err = reference.run(
            REF_SKILLS, argv=["skills", *args], stdin=stdin, env=overrides, cwd=self.root, home=self.home
        )
        return Run(code, out, err)

    def both_agree(self) -> None:
        for args in READ_ONLY:
            ours, ref = self.ours(*args), self.ref(*args)
            assert (ours.code, ours.stdout) == (ref.code, ref.stdout), args
            assert ours.stderr == ""


def one_line_error(run: Run, code: int, *needles: str) -> str:
    assert run.code == code, (run.code, run.stdout, run.stderr)
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in run.stderr, run.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def ok(run: Run) -> Run:
    assert run.code == 0, (run.code, run.stdout, run.stderr)
    return run


@pytest.fixture
def project(tmp_path: Path) -> Project:
    root = tmp_path / "project"
    root.mkdir()
    home = tmp_path / "home"
    (home / ".memsearch").mkdir(parents=True)
    return Project(root.resolve(), home)


def meta_of(project: Project, name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((project.store / name / "meta.json").read_text(encoding="utf-8"))
    return data


def git_log(root: Path) -> list[str]:
    out = subprocess.run(["git", "log", "--format=%s"], cwd=root, capture_output=True, text=True, check=True)
    return out.stdout.splitlines()


# -- the store, both tools -------------------------------------------------------------------


@pytest.mark.slow(reason="runs skill commands as subprocesses on a real store")
def test_an_empty_store_reads_the_same_and_stays_empty(project: Project) -> None:
    project.both_agree()
    assert ok(project.ours("list")).stdout == "No skills in the store yet.\n"
    assert ok(project.ours("status")).stdout == "No candidate skill versions pending install.\n"
    assert ok(project.ours("status", "--hint")).stdout == ""
    summary = json.loads(ok(project.ours("status", "-j")).stdout)
    assert summary == {
        "root": str(project.store),
        "candidate_count": 0,
        "pending_count": 0,
        "new_count": 0,
        "updated_count": 0,
        "pending_names": [],
    }
    assert not (project.root / ".memsearch").exists()  # reading creates nothing


@pytest.mark.slow(reason="runs skill commands as subprocesses on a real store")
def test_one_store_two_tools(project: Project, tmp_path: Path) -> None:
    ref = project.ref(
        "add", "--name", "Run Tests", "--description", "Run the suite. Use to test.", "--body-file", "-", stdin=BODY
    )
    assert ref.code == 0, ref.stderr
    body_file = tmp_path / "deploy.md"
    body_file.write_text("## Deploy\n\n1. `make deploy`\n", encoding="utf-8")
    ours = ok(
        project.ours(
            "add", "--name", "deploy", "--description", 'Ship "staging" — déployer.', "--body-file", str(body_file)
        )
    )
    assert (
        ours.stdout == "Added candidate skill: deploy\nInstall it with: memsearch skills install deploy --path <dir>\n"
    )
    project.both_agree()
    assert project.ours("status", "--hint").stdout == HINT.format(2)
    lines = project.ours("list").stdout.splitlines()
    assert lines == [
        '- deploy [candidate, install ready] - Ship "staging" — déployer.',
        "- run-tests [candidate, install ready] - Run the suite. Use to test.",
    ]

    # Ours installs the reference's candidate, the reference ours.
    elsewhere = tmp_path / "agents" / "skills"
    installed = ok(project.ours("install", "run-tests", "--path", ".claude/skills", "--path", str(elsewhere)))
    assert installed.stdout == (
        f"Installed: {project.root}/.claude/skills/run-tests/SKILL.md\nInstalled: {elsewhere}/run-tests/SKILL.md\n"
    )
    project.both_agree()
    assert json.loads(project.ours("status", "-j").stdout)["pending_names"] == ["deploy"]
    assert project.ref("install", "deploy", "--path", ".agents/skills").code == 0
    project.both_agree()
    assert project.ours("status", "--hint").stdout == ""
    assert project.ours("list").stdout.splitlines()[1] == "- run-tests [installed] - Run the suite. Use to test."
    source = (project.store / "run-tests" / "SKILL.md").read_bytes()
    assert (elsewhere / "run-tests" / "SKILL.md").read_bytes() == source
    assert (project.root / ".claude/skills/run-tests/SKILL.md").read_bytes() == source
    meta = meta_of(project, "run-tests")
    assert meta["status"] == "installed" and meta["installed_hash"] == meta["content_hash"]
    assert meta["installed_paths"] == sorted(
        [f"{project.root}/.claude/skills/run-tests/SKILL.md", f"{elsewhere}/run-tests/SKILL.md"]
    )

    # A new version of an installed candidate waits for the next install: "update ready".
    ok(
        project.ours(
            "add",
            "--name",
            "run-tests",
            "--description",
            "Run the suite.",
            "--body-file",
            "-",
            stdin=BODY + "3. Fix it.\n",
        )
    )
    assert (
        project.ref("add", "--name", "deploy", "--description", "Ship it.", "--body-file", "-", stdin="1. Ship.\n").code
        == 0
    )
    project.both_agree()
    assert project.ours("list").stdout.splitlines() == [
        "- deploy [installed, update ready] - Ship it.",
        "- run-tests [installed, update ready] - Run the suite.",
    ]
    assert project.ours("status").stdout == HINT.format(2) + "New: 0; updated: 2.\n"
    # The installed snapshot is untouched until the next install.
    assert (elsewhere / "run-tests" / "SKILL.md").read_bytes() == source

    # One history: a commit per change, from either tool, nothing left uncommitted.
    assert len(git_log(project.store)) == 6
    status = subprocess.run(["git", "status", "--porcelain"], cwd=project.store, capture_output=True, text=True)
    assert status.stdout == ""


def _normalized(value: Any, root: Path) -> Any:
    if isinstance(value, dict):
        return {k: _normalized(v, root) for k, v in value.items() if not k.endswith("_at")}
    if isinstance(value, list):
        return [_normalized(v, root) for v in value]
    return value.replace(str(root), "<P>") if isinstance(value, str) else value


@pytest.mark.slow(reason="runs skill commands as subprocesses on a real store")
def test_commands_write_and_print_what_the_reference_does(tmp_path: Path) -> None:
    """The same commands in two projects, ours in one, the reference in the other."""
    a, b = (Project((tmp_path / n).resolve(), tmp_path / "home") for n in ("a", "b"))
    for p in (a, b):
        p.root.mkdir()
        (p.root / "body.md").write_text("Check the **logs**.\n\n\n", encoding="utf-8")
    steps: list[tuple[list[str], str | None]] = [
        (
            [
                "add",
                "--name",
                "  Debug: Flaky CI!! ",
                "--description",
                " Debug flaky CI.\nTwo lines. ",
                "--body-file",
                "-",
            ],
            BODY,
        ),
        (["add", "--name", "ünïcode ☃ tool", "--description", "Use the tool", "--body-file", "body.md"], None),
        (["add", "--name", "debug-flaky-ci", "--description", "Debug flaky CI again.", "--body-file", "body.md"], None),
        (["add", "--name", "", "--description", "No name", "--body-file", "-"], "1. x\n"),
        (["install", "Debug: Flaky CI!!", "--path", ".claude/skills", "--path", "./x/../y/skills"], None),
        (["install", "n-code-tool", "--path", str(tmp_path / "shared-skills")], None),
        (["install", "skill", "--path", ".codex/skills", "--path", ".codex/skills"], None),
        (["install", "missing", "--path", ".claude/skills"], None),
        (["install", "debug-flaky-ci"], None),
        (["add", "--name", "x", "--description", "  ", "--body-file", "-"], "body\n"),
        (["add", "--name", "x", "--description", "d", "--body-file", "-"], " \n\t\n"),
    ]
    for args, stdin in steps:
        ours, ref = a.ours(*args, stdin=stdin), b.ref(*args, stdin=stdin)
        assert ours.code == ref.code, (args, ours, ref)
        assert ours.stdout.replace(str(a.root), "<P>") == ref.stdout.replace(str(b.root), "<P>"), args
        if ours.code:
            assert one_line_error(ours, ours.code) == ref.stderr.strip().splitlines()[-1], args
    for args in READ_ONLY:
        ours, ref = ok(a.ours(*args)), b.ref(*args)
        if "-j" in args:  # the same but for the time stamps
            assert _normalized(json.loads(ours.stdout), a.root) == _normalized(json.loads(ref.stdout), b.root)
        else:
            assert ours.stdout == ref.stdout, args
    a.both_agree()
    b.both_agree()

    def files(p: Project) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for path in sorted(p.root.rglob("*")):
            rel = path.relative_to(p.root).as_posix()
            if path.is_file() and ".git/" not in rel:
                text = path.read_text(encoding="utf-8")
                out[rel] = _normalized(json.loads(text), p.root) if path.name == "meta.json" else text
        return out

    ours_files, ref_files = files(a), files(b)
    assert ours_files == ref_files
    assert set(ours_files) >= {
        ".memsearch/skill-candidates/debug-flaky-ci/SKILL.md",
        ".memsearch/skill-candidates/n-code-tool/meta.json",
        ".memsearch/skill-candidates/skill/SKILL.md",
        ".claude/skills/debug-flaky-ci/SKILL.md",
        "y/skills/debug-flaky-ci/SKILL.md",
        ".codex/skills/skill/SKILL.md",
    }
    assert ours_files[".memsearch/skill-candidates/debug-flaky-ci/SKILL.md"] == (
        '---\nname: debug-flaky-ci\ndescription: "Debug flaky CI again."\n---\n\nCheck the **logs**.\n'
    )
    assert (tmp_path / "shared-skills" / "n-code-tool" / "SKILL.md").is_file()
    # The same keys in the same order as the reference writes them.
    for name in ("debug-flaky-ci", "n-code-tool", "skill"):
        assert list(meta_of(a, name)) == list(meta_of(b, name)), name

    # A body file that cannot be read is a usage error, before anything is written.
    one_line_error(
        a.ours("add", "--name", "n", "--description", "d", "--body-file", "nope.md"), 2, "--body-file", "nope.md"
    )
    assert b.ref("add", "--name", "n", "--description", "d", "--body-file", "nope.md").code == 2
    assert not (a.store / "n").exists()


def test_memsearch_dir_moves_the_store_for_both_tools(project: Project) -> None:
    project.env["MEMSEARCH_DIR"] = "mem"
    ok(project.ours("add", "--name", "a", "--description", "A.", "--body-file", "-", stdin=BODY))
    assert (project.root / "mem" / "skill-candidates" / "a" / "SKILL.md").is_file()
    assert json.loads(project.ours("status", "-j").stdout)["root"] == str(project.root / "mem" / "skill-candidates")
    project.both_agree()


@pytest.mark.slow(reason="runs skill commands as subprocesses on a real store")
def test_names_and_symlinks_cannot_escape(project: Project, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    for name in ("../evil", "/tmp/evil", "a/b", "..", "x\\y"):
        one_line_error(
            project.ours("add", "--name", name, "--description", "d", "--body-file", "-", stdin="b"), 1, "is a path"
        )
        one_line_error(project.ours("install", name, "--path", str(outside)), 1, "is a path")
    ok(project.ours("add", "--name", "safe", "--description", "d", "--body-file", "-", stdin="b"))

    # A candidate directory that is a symlink is neither written through, installed, nor listed.
    (project.store / "linked").symlink_to(outside, target_is_directory=True)
    one_line_error(
        project.ours("add", "--name", "linked", "--description", "d", "--body-file", "-", stdin="b"), 1, "symlink"
    )
    (outside / "SKILL.md").write_text("secret", encoding="utf-8")
    (outside / "meta.json").write_text('{"name": "linked"}', encoding="utf-8")
    one_line_error(project.ours("install", "linked", "--path", str(tmp_path / "dest")), 1, "symlink")
    assert [m["name"] for m in json.loads(project.ours("list", "-j").stdout)] == ["safe"]
    assert sorted(p.name for p in outside.iterdir()) == ["SKILL.md", "meta.json"]
    assert not (tmp_path / "dest").exists()

    # A destination skill directory or SKILL.md that is a symlink: refused, nothing written anywhere.
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / "safe").symlink_to(outside, target_is_directory=True)
    good = tmp_path / "good"
    one_line_error(project.ours("install", "safe", "--path", str(good), "--path", str(dest)), 1, "symlink")
    assert not good.exists()
    (dest / "safe").unlink()
    (dest / "safe").mkdir()
    (dest / "safe" / "SKILL.md").symlink_to(outside / "SKILL.md")
    one_line_error(project.ours("install", "safe", "--path", str(dest)), 1, "symlink")
    assert (outside / "SKILL.md").read_text(encoding="utf-8") == "secret"
    assert meta_of(project, "safe")["status"] == "candidate"


def test_files_are_private_and_replaced_atomically(project: Project) -> None:
    ok(project.ours("add", "--name", "t", "--description", "d", "--body-file", "-", stdin=BODY))

    def mode(path: Path) -> int:
        return stat.S_IMODE(path.stat().st_mode)

    assert mode(project.root / ".memsearch") == 0o700
    assert mode(project.store) == 0o700 and mode(project.store / "t") == 0o700
    assert mode(project.store / "t" / "SKILL.md") == 0o600 and mode(project.store / "t" / "meta.json") == 0o600
    ok(project.ours("install", "t", "--path", "skills"))
    umask = os.umask(0)
    os.umask(umask)
    assert mode(project.root / "skills" / "t" / "SKILL.md") == 0o644 & ~umask
    before = (project.store / "t" / "SKILL.md").stat().st_ino
    ok(project.ours("add", "--name", "t", "--description", "d2", "--body-file", "-", stdin=BODY))
    assert (project.store / "t" / "SKILL.md").stat().st_ino != before  # a new file renamed over the old one
    assert not [p for p in project.root.rglob("*.tmp")]
    # The reference can still rewrite what we wrote.
    assert project.ref("add", "--name", "t", "--description", "d3", "--body-file", "-", stdin=BODY).code == 0
    assert meta_of(project, "t")["description"] == "d3"


def test_concurrent_writers_lose_nothing(project: Project) -> None:
    ok(project.ours("add", "--name", "shared", "--description", "d", "--body-file", "-", stdin=BODY))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMSEARCH_", "GIT_"))}
    env["HOME"] = str(project.home)
    skills = [sys.executable, "-m", "memsearch_fast", "skills"]
    procs = [
        subprocess.Popen(
            [*skills, "add", "--name", f"s{i}", "--description", "d", "--body-file", "-"],
            cwd=project.root,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
        )
        for i in range(6)
    ] + [
        subprocess.Popen(
            [*skills, "install", "shared", "--path", f"dest{i}"],
            cwd=project.root,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
        )
        for i in range(3)
    ]
    for proc in procs:
        if proc.stdin is not None:
            proc.stdin.write(BODY.encode())
            proc.stdin.close()
    assert [proc.wait(timeout=120) for proc in procs] == [0] * len(procs)
    names = [m["name"] for m in json.loads(project.ours("list", "-j").stdout)]
    assert names == ["s0", "s1", "s2", "s3", "s4", "s5", "shared"]
    assert meta_of(project, "shared")["installed_paths"] == [
        f"{project.root}/dest{i}/shared/SKILL.md" for i in range(3)
    ]
    assert len(git_log(project.store)) == 10
    status = subprocess.run(["git", "status", "--porcelain"], cwd=project.store, capture_output=True, text=True)
    assert status.stdout == ""


def test_names_slugify_as_the_reference() -> None:
    ref_skills = reference.module("memsearch.skills")
    for name in ("Run Tests!", "  ", "--a--b--", "ÄÖÜ", "a_b.c", "deploy/staging", "x" * 300, "CamelCase2"):
        expected = ref_skills._slugify(name)
        assert store.slugify(name) == expected[: store.MAX_SLUG].rstrip("-")
    assert store.check_name("Run Tests!") == "run-tests"
    with pytest.raises(store.SkillError):
        store.check_name("../x")


def test_help_matches_the_reference(project: Project) -> None:
    spec = SPEC.read_text(encoding="utf-8")
    for command in ("", " add", " distill", " install", " list", " status"):
        match = re.search(rf"^\$ memsearch skills{command} --help\n(.*?)\n(?:-{{10,}}|={{10,}})", spec, re.S | re.M)
        assert match, command
        ours = ok(project.ours(*command.split(), "--help")).stdout
        assert ours.strip() == match.group(1).strip(), command


# -- distill ---------------------------------------------------------------------------------


@pytest.fixture
def server() -> Iterator[FakeLLMServer]:
    s = FakeLLMServer()
    yield s
    s.close()


def configure(project: Project, text: str) -> None:
    (project.home / ".memsearch" / "config.toml").write_text(text, encoding="utf-8")


def provider_config(server: FakeLLMServer, platform: str = "codex", extra: str = "") -> str:
    return (
        f'[llm.providers.work]\ntype = "openai-compatible"\nmodel = "small-model"\nbase_url = "{server.url}/v1"\n'
        f'api_key = "env:WORK_LLM_KEY"\n[plugins.{platform}.memory_to_skill]\nprovider = "work"\n'
        f"min_occurrences = 2\n{extra}"
    )


def journals(project: Project, count: int = 3) -> Path:
    memory = project.root / ".memsearch" / "memory"
    memory.mkdir(parents=True, exist_ok=True)
    for day in range(count):
        (memory / f"2026-03-0{day + 1}.md").write_text(
            f"## Session {day}\n- User asked to deploy staging; ran `make deploy ENV=staging`.\n", encoding="utf-8"
        )
    return memory


def answer(*skills: dict[str, Any], fenced: bool = False) -> str:
    text = json.dumps({"skills": list(skills)})
    return f"Here you go.\n```json\n{text}\n```\nDone." if fenced else text


DEPLOY = {
    "name": "Deploy Staging",
    "description": "Deploy the branch to staging. Use when asked to deploy.",
    "body": "## Deploy\n\n1. Run `make deploy ENV=staging`.",
    "occurrences": 3,
    "sources": ["2026-03-01.md", "2026-03-02.md"],
    "reason": "Seen in 3 sessions.",
}


@pytest.mark.slow(reason="runs skill commands as subprocesses on a real store")
def test_distill_mines_journals_and_follows_the_due_logic(server: FakeLLMServer, project: Project) -> None:
    configure(project, provider_config(server))
    memory = journals(project)
    server.answer = answer(DEPLOY, {"name": "no-body", "description": "x", "body": " "}, "junk", {"name": "y"})
    run = ok(project.ours("distill", "--plugin", "codex", WORK_LLM_KEY=KEY))
    assert run.stdout == "Distilled 1 candidate skill(s): deploy-staging\n"
    (request,) = server.requests
    assert request["body"]["model"] == "small-model"
    prompt = server.prompts()[0]
    assert "make deploy ENV=staging" in prompt and f"<!-- source:{memory / '2026-03-01.md'} -->" in prompt
    assert "at least 2 different sessions" in prompt and "codex" in prompt and str(project.root) in prompt
    assert "{{" not in prompt and "(none)" in prompt
    skill_md = (project.store / "deploy-staging" / "SKILL.md").read_text(encoding="utf-8")
    assert skill_md == store.render_skill_md("deploy-staging", DEPLOY["description"], DEPLOY["body"])
    meta = meta_of(project, "deploy-staging")
    assert (meta["status"], meta["occurrences"], meta["sources"], meta["reason"]) == (
        "candidate",
        3,
        DEPLOY["sources"],
        "Seen in 3 sessions.",
    )
    assert not (project.store / "no-body").exists()

    # The state is the reference's: same key, same digest of the input.
    _input_digest = reference.module("memsearch.maintenance")._input_digest
    state = json.loads((project.root / ".memsearch" / ".maintenance-state.json").read_text(encoding="utf-8"))
    entry = state["codex.memory_to_skill"]
    assert entry["last_action"] == "distilled" and entry["last_input_digest"] == _input_digest(memory)
    assert entry["output_file"] == str(project.store)

    # Unchanged input: skipped (by both tools); changed input: not due yet; --force: runs.
    assert ok(project.ours("distill", "--plugin", "codex", WORK_LLM_KEY=KEY)).stdout == "Skipped: input unchanged\n"
    assert project.ref("distill", "--plugin", "codex", WORK_LLM_KEY=KEY).stdout == "Skipped: input unchanged\n"
    (memory / "2026-03-09.md").write_text("- User deployed staging again.\n", encoding="utf-8")
    assert ok(project.ours("distill", "--plugin", "codex", WORK_LLM_KEY=KEY)).stdout == "Skipped: not due for 24h\n"
    assert len(server.requests) == 1

    revised = dict(
        DEPLOY,
        name="deploy-staging",
        body="## Deploy\n\n1. Run `make deploy-staging`.",
        occurrences=2,
        sources=["2026-03-09.md"],
    )
    server.answer = answer(revised, fenced=True)
    run = ok(project.ours("distill", "--plugin", "codex", "--force", WORK_LLM_KEY=KEY))
    assert run.stdout == "Distilled 1 candidate skill(s): deploy-staging\n"
    prompt = server.prompts()[-1]
    assert "### deploy-staging" in prompt and "Run `make deploy ENV=staging`." in prompt  # the current body, to revise
    meta = meta_of(project, "deploy-staging")
    assert meta["occurrences"] == 3 and meta["sources"] == ["2026-03-01.md", "2026-03-02.md", "2026-03-09.md"]
    assert "make deploy-staging" in (project.store / "deploy-staging" / "SKILL.md").read_text(encoding="utf-8")
    assert len(git_log(project.store)) == 2

    # Nothing new: said so, and recorded.
    server.answer = '{"skills": []}'
    assert (
        ok(project.ours("distill", "--plugin", "codex", "--force", WORK_LLM_KEY=KEY)).stdout
        == "No new candidate skills.\n"
    )
    state = json.loads((project.root / ".memsearch" / ".maintenance-state.json").read_text(encoding="utf-8"))
    assert state["codex.memory_to_skill"]["last_action"] == "none"
    project.both_agree()


def test_reference_and_ours_share_the_distill_state(server: FakeLLMServer, project: Project) -> None:
    configure(project, provider_config(server, "claude-code"))
    journals(project)
    server.answer = answer(DEPLOY)
    ref = project.ref("distill", "--plugin", "claude-code", WORK_LLM_KEY=KEY)
    assert ref.code == 0 and "deploy-staging" in ref.stdout, (ref.stdout, ref.stderr)
    assert (
        ok(project.ours("distill", "--plugin", "claude-code", WORK_LLM_KEY=KEY)).stdout == "Skipped: input unchanged\n"
    )
    project.both_agree()


@pytest.mark.parametrize(
    ("faults", "needle"),
    [
        ([(200, {}, {"choices": [{"message": {"content": "Credit balance is too low"}}]})], "Credit balance"),
        ([(200, {}, {"choices": [{"message": {"content": "I'm sorry, I can't help with that."}}]})], "refused"),
        ([(200, {}, {"choices": [{"message": {"content": ""}}]})], "empty answer"),
        ([(200, {}, {"choices": [{"message": {"content": "Deploying is common. No JSON."}}]})], "JSON"),
        ([(200, {}, {"choices": [{"message": {"content": '{"skills": "deploy"}'}}]})], "'skills' list"),
        ([(200, {}, {"choices": [{"message": {"content": '{"error": {"message": "bad"}}'}}]})], "error"),
        ([(400, {}, {"error": {"message": "context length exceeded"}})], "context length"),
    ],
)
def test_an_unusable_answer_is_never_a_skill(
    server: FakeLLMServer, project: Project, faults: list[Any], needle: str
) -> None:
    configure(project, provider_config(server))
    journals(project)
    server.faults = list(faults)
    one_line_error(project.ours("distill", "--plugin", "codex", WORK_LLM_KEY=KEY), 1, needle)
    assert [p.name for p in project.store.iterdir() if not p.name.startswith(".")] == []
    entry = json.loads((project.root / ".memsearch" / ".maintenance-state.json").read_text(encoding="utf-8"))[
        "codex.memory_to_skill"
    ]
    assert (
        entry["last_action"] == "error"
        and "last_success_at" not in entry
        and needle.lower() in entry["last_error"].lower()
    )
    # A failed run does not mark the input as done: the next run tries again.
    server.answer = answer(DEPLOY)
    assert ok(project.ours("distill", "--plugin", "codex", WORK_LLM_KEY=KEY)).stdout.startswith("Distilled 1")


def test_distill_usage_and_routing_errors(server: FakeLLMServer, project: Project) -> None:
    one_line_error(project.ours("distill", "--plugin", "codex"), 2, "native", "plugins.codex.memory_to_skill.provider")
    one_line_error(project.ours("distill", "--plugin", "vscode"), 2, "unknown plugin 'vscode'")
    # A repository's project file may not pick the provider.
    (project.root / ".memsearch.toml").write_text(provider_config(server), encoding="utf-8")
    run = project.ours("distill", "--plugin", "codex", WORK_LLM_KEY=KEY)
    assert run.code == 2 and "may not set" in run.stderr and server.requests == []
    (project.root / ".memsearch.toml").unlink()

    configure(project, '[plugins.codex.memory_to_skill]\nprovider = "nope"\n')
    journals(project)
    one_line_error(project.ours("distill", "--plugin", "codex"), 1, "unknown LLM provider 'nope'")
    configure(project, provider_config(server))
    one_line_error(project.ours("distill", "--plugin", "codex", "--force"), 1, "WORK_LLM_KEY")

    # No journals: nothing to ask about.
    for path in (project.root / ".memsearch" / "memory").iterdir():
        path.unlink()
    (project.root / ".memsearch" / ".maintenance-state.json").unlink()
    run = ok(project.ours("distill", "--plugin", "codex", WORK_LLM_KEY=KEY))
    assert run.stdout.startswith("Skipped: no memory journals in ") and server.requests == []


FAKE_CLAUDE = """\
import json, os, sys
if sys.argv[1:] == ["--help"]:  # asked once, for the flags it takes
    print("Usage: claude [options]")
    sys.exit(0)
prompt = sys.stdin.read()
with open(os.environ["FAKE_AGENT_LOG"], "a", encoding="utf-8") as log:
    log.write(json.dumps({"argv": sys.argv[1:], "stdin": prompt}) + "\\n")
sys.stdout.write(os.environ["FAKE_ANSWER"])
"""


def test_distill_through_the_claude_cli(project: Project, tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    claude = bin_dir / "claude"
    claude.write_text(f"#!{sys.executable}\n{FAKE_CLAUDE}", encoding="utf-8")
    claude.chmod(0o755)
    log = tmp_path / "claude.jsonl"
    env = {
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "FAKE_AGENT_LOG": str(log),
        "FAKE_ANSWER": answer(DEPLOY, fenced=True),
    }
    configure(project, '[plugins.claude-code.memory_to_skill]\nprovider = "claude-code"\nmodel = "sonnet"\n')
    journals(project)
    run = ok(project.ours("distill", "--plugin", "claude-code", **env))
    assert run.stdout == "Distilled 1 candidate skill(s): deploy-staging\n"
    (call,) = [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]
    assert call["argv"][call["argv"].index("--model") + 1] == "sonnet" and "make deploy ENV=staging" in call["stdin"]
    env["FAKE_ANSWER"] = "API Error: 529 overloaded"
    one_line_error(project.ours("distill", "--plugin", "claude-code", "--force", **env), 1, "529")
    assert meta_of(project, "deploy-staging")["description"] == DEPLOY["description"]


def test_one_distill_at_a_time(server: FakeLLMServer, project: Project) -> None:
    configure(project, provider_config(server))
    journals(project)
    lock = project.root / ".memsearch" / ".maintenance-codex-memory_to_skill.lock"
    lock.write_text(str(os.getpid()), encoding="utf-8")  # a live holder
    assert ok(project.ours("distill", "--plugin", "codex", WORK_LLM_KEY=KEY)).stdout == "Skipped: locked\n"
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    lock.write_text(str(dead.pid), encoding="utf-8")  # left by a process that is gone
    server.answer = answer(DEPLOY)
    assert ok(project.ours("distill", "--plugin", "codex", WORK_LLM_KEY=KEY)).stdout.startswith("Distilled 1")
    assert not lock.exists()


# -- pieces ----------------------------------------------------------------------------------


def test_parse_answer_keeps_only_usable_skills() -> None:
    skills = dist.parse_answer(
        'Sure! {"note": 1} then {"skills": [{"name": "A b", "description": "d", "body": "b", "occurrences": true,'
        ' "sources": ["x.md", 3]}, {"name": "a-b", "description": "dup", "body": "b"},'
        ' {"description": 5, "body": "b"}]}'
    )
    assert [(s.name, s.description, s.occurrences, s.sources) for s in skills] == [("a-b", "d", None, ["x.md"])]
    for bad in ("", "[1, 2]", '{"skills": {}}', "no json"):
        with pytest.raises(dist.LLMError):
            dist.parse_answer(bad)


REF_IS_DUE = """
from memsearch import maintenance
from memsearch.config import PluginMemoryToSkillConfig

result = maintenance._is_due(PluginMemoryToSkillConfig(min_interval_hours=24), entry, digest, force)
"""


def test_due_logic_matches_the_reference() -> None:
    cases: list[tuple[dict[str, Any], str, bool]] = [
        ({}, "d", False),
        ({"last_input_digest": "d"}, "d", False),
        ({"last_input_digest": "d"}, "d", True),
        ({"last_input_digest": "o", "last_success_at": store.now()}, "d", False),
        ({"last_input_digest": "o", "last_success_at": "2020-01-01T00:00:00Z"}, "d", False),
        ({"last_input_digest": "o", "last_success_at": "garbage"}, "d", False),
    ]
    for entry, digest, force in cases:
        expected = tuple(reference.run(REF_IS_DUE, entry=entry, digest=digest, force=force))  # a JSON list
        assert dist.is_due(24, entry, digest, force) == expected, entry
