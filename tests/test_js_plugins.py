"""The OpenCode and OpenClaw plugins (hooks/opencode, hooks/openclaw).

Their own ``node --test`` suites run against a fake ``memsearch``; the last
test drives each plugin's ``memory_search`` tool through node against the real
CLI, on a tiny journal indexed into a temporary Milvus Lite database.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NODE = shutil.which("node")

pytestmark = pytest.mark.skipif(NODE is None, reason="node is not on PATH; the JS plugins cannot be tested")


def _clean_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMSEARCH_")}
    env.update(
        HOME=str(home),
        MEMSEARCH_LITE_IDLE_TIMEOUT="30",
        MEMSEARCH_OFFLINE="1",
        MEMSEARCH_NO_WATCH="1",
        HF_HUB_OFFLINE="1",
        PYTHONIOENCODING="utf-8",
    )
    home.mkdir(parents=True, exist_ok=True)
    return env


def test_node_suites_pass(tmp_path: Path) -> None:
    proc = subprocess.run(
        [str(NODE), "--test", "hooks/opencode", "hooks/openclaw"],
        cwd=ROOT,
        env=_clean_env(tmp_path / "home"),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=300,
    )
    report = proc.stdout + proc.stderr
    assert proc.returncode == 0, report[-4000:]
    passed = re.search(r"^# pass (\d+)$", proc.stdout, re.M)
    failed = re.search(r"^# fail (\d+)$", proc.stdout, re.M)
    assert passed and int(passed.group(1)) > 0, report[-4000:]
    assert failed and int(failed.group(1)) == 0, report[-4000:]


# Calls memory_search of both plugins the way their hosts would, then
# memory_expand and memory_get on the first hit and memory_transcript on an
# OpenClaw session file, and prints what each returned as one JSON object.
DRIVER = """
const [root, project, query, session] = process.argv.slice(1);
const { default: opencode } = await import(root + "/hooks/opencode/index.js");
const { default: openclaw } = await import(root + "/hooks/openclaw/index.js");
const hooks = await opencode({ client: {}, directory: project, worktree: project });
const fromOpencode = await hooks.tool.memory_search.execute({ query, top_k: 3 }, { directory: project });
const tools = new Map();
openclaw.register({ pluginConfig: {}, config: {}, logger: {}, on() {}, registerTool: (f, o) => tools.set(o.name, f) });
const tool = tools.get("memory_search")({ workspaceDir: project, agentId: "main", sessionId: "s1" });
const fromOpenclaw = (await tool.execute("call-1", { query, top_k: 3 })).content[0].text;
let hit = JSON.parse(fromOpencode);
hit = (hit.results ?? hit)[0];
const expand = await hooks.tool.memory_expand.execute({ chunk_hash: hit.chunk_hash }, { directory: project });
const get = await hooks.tool.memory_get.execute({ path: hit.source, from: 5, lines: 2 }, { directory: project });
const transcript = (await tools.get("memory_transcript")({ workspaceDir: project }).execute("call-2", {
  path: session,
  turn: "rec-1",
})).content[0].text;
process.stdout.write(JSON.stringify({ opencode: fromOpencode, openclaw: fromOpenclaw, expand, get, transcript }));
"""


def _memsearch(args: list[str], env: dict[str, str], cwd: Path, stdin: str = "") -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "memsearch_fast", *args],
        env=env,
        cwd=cwd,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@pytest.mark.slow(reason="runs the plugins under node against real `memsearch` subprocesses")
def test_plugin_tools_against_real_memsearch(tmp_path: Path, model_dir: Path) -> None:
    env = _clean_env(tmp_path / "home")
    config = tmp_path / "home" / ".memsearch" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text(
        f"[milvus]\nuri = {json.dumps(str(tmp_path / 'milvus.db'))}\n\n"
        f'[embedding]\nprovider = "onnx"\nmodel = {json.dumps(str(model_dir))}\n',
        encoding="utf-8",
    )
    project = tmp_path / "project"
    memory = project / ".memsearch" / "memory"
    memory.mkdir(parents=True)
    (memory / "2026-01-02.md").write_text(
        "# 2026-01-02\n\n## Session 10:00\n\n### 10:05\n"
        "- The team chose Valkey for the session cache because of its licence.\n"
        "- Assistant wrote the eviction policy in cache/policy.py.\n\n"
        "### 10:40\n- User asked to rename the release branch to trunk.\n",
        encoding="utf-8",
    )

    where = json.loads(_memsearch(["hook", "opencode", "locate"], env, project, json.dumps({"cwd": str(project)})))
    assert where["memory_dir"] == str(memory)
    _memsearch(["index", str(memory), "--collection", where["collection"], "-q"], env, project)

    session = tmp_path / "session.jsonl"
    records = [
        {"type": "session", "id": "s1"},
        {"type": "message", "id": "rec-1", "message": {"role": "user", "content": "How do we deploy to prod?"}},
        {
            "type": "message",
            "id": "rec-2",
            "message": {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Run the deploy script."},
                    {"type": "toolCall", "id": "c1", "name": "exec", "arguments": {"command": "./deploy.sh prod"}},
                ],
            },
        },
    ]
    session.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")

    env["MEMSEARCH_CMD"] = json.dumps([sys.executable, "-m", "memsearch_fast"])
    proc = subprocess.run(
        [
            str(NODE),
            "--input-type=module",
            "-e",
            DRIVER,
            str(ROOT),
            str(project),
            "which cache did we choose",
            str(session),
        ],
        env=env,
        cwd=project,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    for host in ("opencode", "openclaw"):
        text = out[host]
        assert not text.startswith("memory_search failed"), f"{host}: {text}"
        hits = json.loads(text)
        hits = hits["results"] if isinstance(hits, dict) else hits
        assert hits, f"{host}: no hits"
        assert "Valkey" in hits[0]["content"], f"{host}: {hits[0]}"
        assert hits[0]["source"] == str(memory / "2026-01-02.md")
    # The follow-up tools take what memory_search returned.
    assert "Valkey" in json.loads(out["expand"])["content"], out["expand"]
    got = json.loads(out["get"])
    assert "Valkey" in got["content"] and got["from"] == 5, out["get"]
    turns = json.loads(out["transcript"])
    assert [t["uuid"] for t in turns] == ["rec-1", "rec-2"], out["transcript"]
    assert turns[1]["tools"][0]["command"] == "./deploy.sh prod"
