#!/usr/bin/env python3
"""Install memsearch-fast's hooks and skills for Codex CLI.

- ``~/.codex/hooks.json``: SessionStart, UserPromptSubmit, Stop and PreCompact
  run ``memsearch-hook codex <event>`` (by the absolute path found now, so hooks
  work from Codex's minimal PATH; ``memsearch hook`` when only that exists),
  with ``MEMSEARCH_PLUGIN_ROOT`` naming this folder, so the status line can say
  when the clone is newer than the installed command.
  Codex has no SessionEnd event. Entries of other tools are kept; earlier
  memsearch-fast entries are replaced, so running it twice changes nothing.
  The previous file is kept as ``hooks.json.bak``. memsearch 0.4's own Codex
  hooks (``…/plugins/codex/hooks/*.sh``) are removed too, or every turn would
  be journaled twice; that file is also kept as ``hooks.json.memsearch-0.4.bak``.
- ``~/.codex/config.toml``: ``[features] hooks = true`` (other settings kept).
- ``~/.agents/skills/``: the ``memory-recall``, ``memory-config`` and
  ``memory-to-skill`` skills (``hooks/install_skills.py``).

``CODEX_HOME`` moves ``~/.codex``. Standard library only.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
#: How to put the command where agents find it (the package is not on PyPI).
INSTALL_HINT = "install memsearch-fast first, from a clone: pipx install . (or uv tool install .)"
#: Windows: said in one line, nothing written (the hooks need a POSIX system).
UNSUPPORTED = (
    "memsearch-fast's hooks do not support Windows (they need a POSIX system: Linux, macOS, or WSL); "
    "nothing was installed"
)
EVENTS = {
    "SessionStart": ("session-start", 30),
    "UserPromptSubmit": ("user-prompt", 10),
    "Stop": ("stop", 30),
    "PreCompact": ("pre-compact", 30),
}
#: The hook scripts of memsearch 0.4's own Codex plugin, as its installer writes them.
REFERENCE = re.compile(r"plugins[/\\]codex[/\\]hooks[/\\](session-start|user-prompt-submit|stop|pre-compact)\.sh")


def ours(command: str) -> bool:
    """Whether a hook command is one of ours (from any earlier install)."""
    return "memsearch" in command and " codex " in command


def reference(command: str) -> bool:
    """Whether a hook command runs memsearch 0.4's own Codex plugin."""
    return REFERENCE.search(command) is not None


def memsearch_command() -> str:
    """The hook command: ``"/abs/memsearch-hook"`` or ``"/abs/memsearch" hook``."""
    fast = shutil.which("memsearch-hook")
    if fast:
        return f'"{fast}"'
    found = os.environ.get("MEMSEARCH_CMD") or shutil.which("memsearch")
    if not found:
        sys.exit(f"memsearch is not on PATH: {INSTALL_HINT}")
    return f'"{found}" hook'


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)  # never a half-written file


def install_hooks(codex: Path, command: str) -> tuple[Path, list[str]]:
    """Write our entries; the path and the memsearch 0.4 commands that were removed."""
    path = codex / "hooks.json"
    data: dict = {}
    if path.exists():
        shutil.copy2(path, path.with_name("hooks.json.bak"))
        data = json.loads(path.read_text(encoding="utf-8") or "{}")
    hooks = data.setdefault("hooks", {})
    replaced: list[str] = []
    for event in [*EVENTS, *(e for e in hooks if e not in EVENTS)]:
        groups = []
        for group in hooks.get(event, []):
            kept = []
            for hook in group.get("hooks", []):
                text = str(hook.get("command", ""))
                if reference(text):
                    replaced.append(text)
                elif not ours(text):
                    kept.append(hook)
            if kept:
                groups.append({**group, "hooks": kept})
        if event in EVENTS:
            name, timeout = EVENTS[event]
            run = f"MEMSEARCH_PLUGIN_ROOT={shlex.quote(str(HERE))} {command} codex {name}"
            groups.append({"hooks": [{"type": "command", "command": run, "timeout": timeout}]})
        if groups:
            hooks[event] = groups
        else:
            hooks.pop(event, None)
    if replaced:
        shutil.copy2(path, path.with_name("hooks.json.memsearch-0.4.bak"))
    _write(path, json.dumps(data, indent=2) + "\n")
    return path, replaced


def enable_hooks(codex: Path) -> Path:
    """``hooks = true`` under ``[features]``, editing lines so comments and order survive."""
    path = codex / "config.toml"
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True) if path.exists() else []
    header = next((i for i, line in enumerate(lines) if re.match(r"\[features\]\s*(#.*)?$", line.strip())), None)
    if header is None:
        if lines and not lines[-1].endswith("\n"):
            lines[-1] += "\n"
        lines += ["\n"] if lines else []
        lines += ["[features]\n", "hooks = true\n"]
    else:
        end = next((i for i in range(header + 1, len(lines)) if lines[i].lstrip().startswith("[")), len(lines))
        setting = re.compile(r"\s*(codex_hooks|hooks)\s*=")
        block = [line for line in lines[header + 1 : end] if not setting.match(line)]
        lines[header + 1 : end] = ["hooks = true\n", *block]
    _write(path, "".join(lines))
    return path


def install_skills(home: Path) -> list[Path]:
    """memsearch's three skills in ``~/.agents/skills`` (``hooks/install_skills.py``)."""
    sys.path.insert(0, str(HERE.parent))
    import install_skills

    written: list[Path] = install_skills.install_and_say(home / ".agents" / "skills")
    return written


def main(argv: list[str] | None = None) -> None:
    import argparse

    parser = argparse.ArgumentParser(
        prog="install.py",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
        epilog="Writes ~/.codex/hooks.json, ~/.codex/config.toml and ~/.agents/skills (CODEX_HOME "
        "moves ~/.codex); running it again changes nothing.",
    )
    parser.parse_args(argv)
    if (os.environ.get("MEMSEARCH_TEST_OS_NAME") or os.name) != "posix":  # as memsearch_fast.agents.posix
        sys.exit(UNSUPPORTED)
    home = Path(os.path.expanduser("~"))
    codex = Path(os.environ.get("CODEX_HOME") or home / ".codex")
    codex.mkdir(parents=True, exist_ok=True)
    command = memsearch_command()
    path, replaced = install_hooks(codex, command)
    print(f"hooks:  {path}")
    if replaced:
        print(
            f"        replaced memsearch 0.4's own Codex hooks ({len(replaced)} entries), which would journal "
            f"every turn a second time; the file as it was: {path.with_name('hooks.json.memsearch-0.4.bak')}"
        )
    print(f"config: {enable_hooks(codex)} ([features] hooks = true)")
    for skill in install_skills(home):
        print(f"skill:  {skill}")
    print(
        "Codex runs new or changed hooks only once you trust them: start codex, open /hooks and trust the "
        "memsearch entries. From then on, a session's first message shows a [memsearch] status line."
    )


if __name__ == "__main__":
    main()
