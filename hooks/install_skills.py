#!/usr/bin/env python3
"""Install memsearch's skills for Codex, OpenCode and OpenClaw.

The skills are written for Claude Code (``hooks/claude-code/skills``:
``memory-recall``, ``memory-config``, ``memory-to-skill``). The other agents
all read ``~/.agents/skills``, so one copy serves the three of them: this
script writes it there (``--dest`` elsewhere), rendered without what only
Claude Code understands (``$ARGUMENTS``, ``!`` commands, ``context: fork``,
``allowed-tools``) and with ``<agent>`` where Claude Code's plugin name was:
the skill tells the agent to read it as ``codex``, ``opencode`` or
``openclaw``. Running it again rewrites the same files. Standard library only.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "claude-code" / "skills"
NAMES = ("memory-recall", "memory-config", "memory-to-skill")
AGENTS = "`codex` in Codex, `opencode` in OpenCode, `openclaw` in OpenClaw"

#: (pattern, replacement), applied in order; words may be wrapped across lines.
_RULES: tuple[tuple[str, str], ...] = (
    (r"(?m)^(context|allowed-tools):.*\n", ""),
    (r"The question: \$ARGUMENTS\n(?:\(.*\n)*?.*\)\n\n", ""),
    (r"The request: \$ARGUMENTS\n\n", ""),
    (
        r"This project's memory: !`memsearch hook claude-code locate < /dev/null`\n\nThe JSON above gives",
        "First run `memsearch hook <agent> locate < /dev/null`: its JSON gives",
    ),
    (r"memsearch-hook claude-code\b", "memsearch hook <agent>"),
    (r"plugins\.claude-code\.", "plugins.<agent>."),
    (r"`claude-code\.<task>`", "`<agent>.<task>`"),
    (r"--plugin(\s+)claude-code\b", r"--plugin\1<agent>"),
    (r"settings for the Claude(\s+)Code plugin", r"settings for this agent's\1plugin"),
    (r"Claude(\s+)Code's(\s+)own(\s+)`claude -p`", r"the\1agent's\2own\3CLI"),
    (r"Claude(\s+)Code's own", r"the\1agent's own"),
    (r"\(`claude -p`: `haiku` for turn notes, `sonnet` for maintenance\)", "(the agent CLI's own default)"),
    (r"the `/memory-to-skill` skill", "the `memory-to-skill` skill"),
    (r"the plugin with\s+`/plugin marketplace update memsearch-fast`", "the plugin from the same clone"),
    (r"- `\.claude/skills`: this project only", "- `.agents/skills`: this project only"),
    (r"- `~/\.claude/skills`: every project", "- `~/.agents/skills`: every project"),
    (r"'\[\"\.claude/skills\"\]'", "'[\".agents/skills\"]'"),
)


def render(name: str) -> str:
    """The Claude Code skill *name*, for the agents that read ``~/.agents/skills``."""
    text = (SOURCE / name / "SKILL.md").read_text(encoding="utf-8")
    for pattern, replacement in _RULES:
        text = re.sub(pattern, replacement, text)
    head, sep, body = text.partition("\n---\n")
    note = f"In the commands below, `<agent>` is this agent's memsearch plugin: {AGENTS}.\n\n"
    return f"{head}{sep}\n{note}{body.lstrip()}" if "<agent>" in body else text


def install(dest: Path, replaced: list[str] | None = None) -> list[Path]:
    """Write every skill under *dest* (``dest/<name>/SKILL.md``); the files written.

    A skill folder that is a link (memsearch 0.4's OpenCode installer links its
    own skills there) is replaced by a folder of ours, never written through;
    the link's target is added to *replaced*.
    """
    written = []
    dest.mkdir(parents=True, exist_ok=True)
    for name in NAMES:
        folder = dest / name
        if folder.is_symlink():
            if replaced is not None:
                replaced.append(f"{folder} -> {os.readlink(folder)}")
            folder.unlink()
        path = folder / "SKILL.md"
        path.parent.mkdir(exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(render(name), encoding="utf-8")
        os.replace(tmp, path)  # never a half-written skill
        written.append(path)
    return written


def install_and_say(dest: Path) -> list[Path]:
    """:func:`install`, saying on stdout which links it replaced."""
    replaced: list[str] = []
    written = install(dest, replaced)
    for link in replaced:
        print(f"        replaced the link {link} (left as it was there)")
    return written


def main(argv: list[str] | None = None) -> None:
    import argparse

    parser = argparse.ArgumentParser(
        prog="install_skills.py",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
        epilog="Codex, OpenCode and OpenClaw all read ~/.agents/skills; running it again changes nothing.",
    )
    parser.add_argument("--dest", default="~/.agents/skills", help="where to write (default: %(default)s)")
    args = parser.parse_args(argv)
    for path in install_and_say(Path(os.path.expanduser(args.dest))):
        print(f"skill:  {path}")
    print("Start a new session so the agent loads them.", file=sys.stderr)


if __name__ == "__main__":
    main()
