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
  Variables the replaced hooks set before their program (``MEMSEARCH_DIR=…``)
  are set before the new ones, as written; hooks that set different ones, or
  that do more than run one program, are not guessed at: one line says so and
  nothing is written.
- ``~/.codex/config.toml``: ``[features] hooks = true`` (other settings kept;
  a ``codex_hooks`` line is rewritten in place, its comment kept).
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
#: One word as the shell reads it: quoted parts, escapes, ``$(…)`` and backquotes included.
_WORD = r"""(?:'[^']*'|"(?:[^"\\]|\\.)*"|\\.|\$\([^()]*\)|`[^`]*`|[^\s'"\\;&|<>()`])*"""
#: ``NAME=value`` at the start of a command, and the blanks after it.
ASSIGNMENT = re.compile(rf"([A-Za-z_][A-Za-z0-9_]*)=({_WORD})\s+")
#: Set anew by every install (never carried over from an earlier one).
PLUGIN_ROOT = "MEMSEARCH_PLUGIN_ROOT"


def ours(command: str) -> bool:
    """Whether a hook command is one of ours (from any earlier install)."""
    return "memsearch" in command and " codex " in command


def reference(command: str) -> bool:
    """Whether a hook command runs memsearch 0.4's own Codex plugin."""
    return REFERENCE.search(command) is not None


def leading_assignments(command: str) -> tuple[list[tuple[str, str]], str]:
    """The ``NAME=value`` words a command starts with (name, text as written; after a plain
    ``env`` too) and the rest of the command."""
    rest = command.lstrip()
    wrapper = re.match(r"env\s+", rest)
    if wrapper and ASSIGNMENT.match(rest, wrapper.end()):
        rest = rest[wrapper.end() :]
    found = []
    while match := ASSIGNMENT.match(rest):
        found.append((match.group(1), match.group(0).rstrip()))
        rest = rest[match.end() :]
    return found, rest


def prefix_of(command: str) -> list[str]:
    """What a replaced hook sets before its program (``MEMSEARCH_DIR=…``, each as written, without
    :data:`PLUGIN_ROOT`); ValueError, saying why, for a command whose other parts would be lost."""
    found, rest = leading_assignments(command)
    lexer = shlex.shlex(rest, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    try:
        words = list(lexer)
    except ValueError:
        raise ValueError("its quotes do not close") from None
    if any(word and set(word) <= set(";&|()<>") for word in words):
        raise ValueError("it runs more than one program, or redirects one")
    if any(re.match(r"[A-Za-z_][A-Za-z0-9_]*=", word) for word in words):
        raise ValueError("it sets variables after the start of the command")
    return [text for name, text in found if name != PLUGIN_ROOT]


def shared_prefix(path: Path, found: list[tuple[str, str]]) -> str:
    """The one prefix every earlier memsearch hook (event, command) sets; exits with one line
    (nothing written) when they differ or one cannot be kept."""
    seen: dict[tuple[str, ...], tuple[str, str]] = {}
    for event, command in found:
        try:
            words = prefix_of(command)
        except ValueError as exc:
            sys.exit(
                f"{path}: the {event} hook {command!r} cannot be replaced without losing part of it ({exc}); "
                "leave only NAME=value settings before the program, or remove it, then run this again "
                "(nothing was written)"
            )
        seen.setdefault(tuple(sorted(words)), (event, " ".join(words)))
    if len(seen) > 1:
        said = ", ".join(f"{event}: {prefix or 'nothing'}" for event, prefix in seen.values())
        sys.exit(
            f"{path}: the memsearch hooks set different variables before their program ({said}); "
            "make them the same, then run this again (nothing was written)"
        )
    return next(iter(seen.values()))[1] if seen else ""


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


def install_hooks(codex: Path, command: str) -> tuple[Path, list[str], str]:
    """Write our entries; the path, the memsearch 0.4 commands that were removed and the
    variables kept before every hook (:func:`shared_prefix`)."""
    path = codex / "hooks.json"
    data: dict = {}
    if path.exists():
        data = json.loads(path.read_text(encoding="utf-8") or "{}")
    hooks = data.setdefault("hooks", {})
    earlier = [
        (event, text)
        for event, groups in hooks.items()
        for group in groups
        for text in (str(hook.get("command", "")) for hook in group.get("hooks", []))
        if reference(text) or ours(text)
    ]
    prefix = shared_prefix(path, earlier)
    if path.exists():
        shutil.copy2(path, path.with_name("hooks.json.bak"))
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
            run = f"{prefix}{' ' if prefix else ''}{PLUGIN_ROOT}={shlex.quote(str(HERE))} {command} codex {name}"
            groups.append({"hooks": [{"type": "command", "command": run, "timeout": timeout}]})
        if groups:
            hooks[event] = groups
        else:
            hooks.pop(event, None)
    if replaced:
        shutil.copy2(path, path.with_name("hooks.json.memsearch-0.4.bak"))
    _write(path, json.dumps(data, indent=2) + "\n")
    return path, replaced, prefix


def _comment(line: str) -> str:
    """A TOML line's comment, from its ``#`` outside strings with the blanks before it ('' if none)."""
    quote = ""
    i = 0
    while i < len(line):
        char = line[i]
        if quote:
            if char == "\\" and quote == '"':
                i += 1
            elif char == quote:
                quote = ""
        elif char in "\"'":
            quote = char
        elif char == "#":
            start = i
            while start and line[start - 1] in " \t":
                start -= 1
            return line[start:].rstrip("\r\n")
        i += 1
    return ""


def enable_hooks(codex: Path) -> Path:
    """``hooks = true`` under ``[features]``, editing lines so comments and order survive: the first
    ``hooks``/``codex_hooks`` line is rewritten in place, its comment kept; a later one leaves its
    comment alone on its line."""
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
        setting = re.compile(r"([ \t]*)(codex_hooks|hooks)\s*=")
        block: list[str] = []
        written = False
        for line in lines[header + 1 : end]:
            match = setting.match(line)
            if not match:
                block.append(line)
                continue
            comment = _comment(line)
            if not written:
                block.append(f"{match.group(1)}hooks = true{comment}\n")
                written = True
            elif comment:
                block.append(f"{match.group(1)}{comment.lstrip()}\n")
        lines[header + 1 : end] = block if written else ["hooks = true\n", *block]
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
    path, replaced, prefix = install_hooks(codex, command)
    print(f"hooks:  {path}")
    if prefix:
        print(f"        kept {prefix} before each hook, as the hooks it replaced had it")
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
