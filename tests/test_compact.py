"""`memsearch compact` as a subprocess: real Lite, the real model, and an LLM
server on 127.0.0.1 that speaks OpenAI chat completions and Anthropic Messages."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from datetime import date
from pathlib import Path

import pytest

from tests.helpers.llm import KEY, FakeLLMServer

ROOT = Path(__file__).resolve().parents[1]
SUMMARY = "## Billing\n\n- Invoices are rounded once per invoice, not per line.\n- The cron job runs at 02:00."


@pytest.fixture
def server() -> Iterator[FakeLLMServer]:
    s = FakeLLMServer()
    s.answer = SUMMARY
    yield s
    s.close()


class Project:
    def __init__(self, tmp: Path, model_dir: Path, server: FakeLLMServer) -> None:
        self.tmp = tmp
        self.notes = tmp / "notes"
        self.db = tmp / "m.db"
        self.out = tmp / "out"
        self.server = server
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ANTHROPIC_", "MEMSEARCH_DIR"))}
        self.env.update(HOME=str(tmp / "home"))
        self.common = ["--milvus-uri", str(self.db), "-m", str(model_dir)]
        self.llm = ["--llm-provider", "openai", "--llm-base-url", f"{server.url}/v1", "--llm-api-key", KEY]

    def write(self, name: str, text: str) -> Path:
        path = self.notes / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        return path

    def run(self, *args: str, code: int = 0) -> subprocess.CompletedProcess[str]:
        out = subprocess.run(
            [sys.executable, "-m", "memsearch_fast.cli", *args],
            capture_output=True,
            text=True,
            env=self.env,
            cwd=self.tmp,
            timeout=300,
        )
        assert out.returncode == code, out.stderr + out.stdout
        return out

    def close(self) -> None:
        from memsearch_fast.lite import broker

        broker.stop_server(str(self.db))


@pytest.fixture
def project(tmp_path: Path, model_dir: Path, server: FakeLLMServer) -> Iterator[Project]:
    p = Project(tmp_path, model_dir, server)
    p.write(
        "billing.md", "# Billing\n\n## Rounding\nInvoices are rounded once per invoice.\n\n## Cron\nRuns at 02:00.\n"
    )
    p.write("deploy.md", "# Deploy\n\nThe deploy key fingerprint is checked before each release.\n")
    p.run("index", str(p.notes), *p.common, "-q")
    yield p
    p.close()


@pytest.mark.slow(reason="indexes and compacts through CLI subprocesses against a local LLM server")
def test_compact_writes_the_summary_to_todays_log_and_indexes_it(project: Project) -> None:
    out = project.run("compact", *project.common, *project.llm, "-o", str(project.out))
    assert out.stdout.startswith("Compact complete. Summary:\n\n## Billing")
    log = project.out / "memory" / f"{date.today().isoformat()}.md"
    text = log.read_text(encoding="utf-8")
    assert re.fullmatch(
        rf"# {date.today().isoformat()}\n\n\n## Memory Compact \d\d:\d\d\n\n{re.escape(SUMMARY)}\n", text
    )
    prompt = project.server.prompts()[0]
    assert "Invoices are rounded once per invoice." in prompt and "deploy key fingerprint" in prompt
    assert prompt.index("Invoices") < prompt.index("deploy key")  # file and line order
    assert "\n\n---\n\n" in prompt
    hits = json.loads(project.run("search", "cron job time", *project.common, "-j").stdout)
    assert any(h["source"] == str(log) for h in hits)

    project.run("compact", *project.common, *project.llm, "-o", str(project.out))  # a second one appends
    assert log.read_text(encoding="utf-8").count("## Memory Compact") == 2
    assert not [p for p in log.parent.iterdir() if p.name.startswith(".")]  # no temp file left


@pytest.mark.slow(reason="indexes and compacts through CLI subprocesses against a local LLM server")
def test_compact_source_filter_and_empty_selections(project: Project) -> None:
    source = project.notes / "deploy.md"
    out = project.run("compact", "-s", str(source), *project.common, *project.llm, "-o", str(project.out))
    assert "Compact complete" in out.stdout
    prompt = project.server.prompts()[-1]
    assert "deploy key" in prompt and "Invoices" not in prompt
    missing = project.run("compact", "-s", str(project.notes / "nope.md"), *project.common, *project.llm)
    assert missing.stdout.strip() == f"No chunks matched source: {project.notes / 'nope.md'}"
    empty = project.run("compact", *project.common, "-c", "empty_one", *project.llm)
    assert empty.stdout.strip() == "No chunks to compact."
    assert len(project.server.requests) == 1


@pytest.mark.slow(reason="indexes and compacts through CLI subprocesses against a local LLM server")
def test_compact_prompts(project: Project) -> None:
    bad = project.run("compact", *project.common, *project.llm, "--prompt", "no placeholder here", code=2)
    assert "must contain the {chunks} placeholder" in bad.stderr and "Traceback" not in bad.stderr
    template = project.tmp / "t.txt"
    template.write_text("Summarize {these} as JSON {\n{chunks}\nEND", encoding="utf-8")
    project.run("compact", *project.common, *project.llm, "--prompt-file", str(template), "-o", str(project.out))
    prompt = project.server.prompts()[-1]
    assert prompt.startswith("Summarize {these} as JSON {\n") and prompt.endswith("\nEND")
    missing = project.run("compact", *project.common, *project.llm, "--prompt-file", str(project.tmp / "x"), code=2)
    assert "cannot read --prompt-file" in missing.stderr


@pytest.mark.slow(reason="indexes and compacts through CLI subprocesses against a local LLM server")
def test_a_failing_llm_writes_nothing(project: Project) -> None:
    project.server.answer = "API Error: 529 Overloaded"
    out = project.run("compact", *project.common, *project.llm, "-o", str(project.out), code=1)
    assert out.stderr.startswith("Error: ") and len(out.stderr.strip().splitlines()) == 1
    assert KEY not in out.stderr
    assert not (project.out / "memory").exists()


@pytest.mark.slow(reason="indexes and compacts through CLI subprocesses against a local LLM server")
def test_large_selections_are_summarized_in_parts(project: Project) -> None:
    for i in range(12):
        project.write(f"bulk/{i}.md", f"# Note {i}\n\n" + f"Paragraph {i} about topic {i}. " * 60 + "\n")
    project.run("index", str(project.notes), *project.common, "-q")
    project.env["MEMSEARCH_COMPACT_PART_CHARS"] = "4000"
    project.run("compact", *project.common, *project.llm, "-o", str(project.out))
    prompts = project.server.prompts()
    assert len(prompts) > 2
    assert all(len(p) < 4000 + 1000 for p in prompts)
    assert prompts[-1].count(SUMMARY) >= 2  # the last request combines the parts' summaries
    text = "".join(prompts[:-1])
    assert all(f"Paragraph {i} about topic {i}." in text for i in range(12))


@pytest.mark.slow(reason="indexes and compacts through CLI subprocesses against a local LLM server")
def test_config_routes_the_llm(project: Project) -> None:
    """[llm] first, the deprecated [compact] keys after it, as memsearch 0.4.23."""
    cfg = project.tmp / "home" / ".memsearch" / "config.toml"
    cfg.parent.mkdir(parents=True, exist_ok=True)
    cfg.write_text(
        f'[compact]\nllm_provider = "anthropic"\nbase_url = "{project.server.url}"\napi_key = "env:THE_KEY"\n'
        'llm_model = "claude-x"\n',
        encoding="utf-8",
    )
    project.env["THE_KEY"] = KEY
    project.run("compact", *project.common, "-o", str(project.out))
    assert project.server.requests[-1]["path"] == "/v1/messages"
    assert project.server.requests[-1]["body"]["model"] == "claude-x"
    cfg.write_text(
        cfg.read_text(encoding="utf-8")
        + f'[llm]\nprovider = "openai"\nbase_url = "{project.server.url}/v1"\napi_key = "env:THE_KEY"\n',
        encoding="utf-8",
    )
    project.run("compact", *project.common, "-o", str(project.out))
    assert project.server.requests[-1]["path"] == "/v1/chat/completions"


def test_rewrite_keeps_a_concurrent_append(tmp_path: Path) -> None:
    """The compact's atomic rewrite and the hooks' appends share the log's lock: none is lost."""
    script = (
        "import sys; from pathlib import Path; from memsearch_fast.agents import journal\n"
        "log = Path(sys.argv[1])\n"
        "for i in range(30):\n"
        "    if sys.argv[2] == 'append':\n"
        "        journal.append(log, '10:00', journal.Anchor('s', f't{i}', ''), [f'- note {i}'])\n"
        "    else:\n"
        "        journal.rewrite(log, lambda old, i=i: old + f'\\n## Memory Compact\\n\\nsummary {i}\\n')\n"
    )
    log = tmp_path / "memory" / "2026-11-23.md"
    env = dict(os.environ)
    procs = [
        subprocess.Popen([sys.executable, "-c", script, str(log), mode], env=env) for mode in ("append", "rewrite")
    ]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    text = log.read_text(encoding="utf-8")
    assert all(f"- note {i}\n" in text for i in range(30))
    assert all(f"summary {i}\n" in text for i in range(30))
