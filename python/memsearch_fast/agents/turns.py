"""What the summarizer reads: the last turn of a session, or every turn not
yet captured (before a compaction), rendered as ``[User]:`` / ``[Assistant]:``
lines with the commands the agent ran.

Read with :mod:`memsearch_fast.recall.transcript`, so every format ``transcript``
shows (Claude Code, Codex, OpenClaw) can be captured. Bounded: each message
is clipped and the whole keeps its newest part.
"""

from __future__ import annotations

import os
from collections.abc import Container, Iterable
from typing import NamedTuple

from memsearch_fast.recall.transcript import Turn, Turns

#: Characters kept of one message and of the whole text handed to the summarizer.
MESSAGE_CHARS = 4_000
TEXT_CHARS = 16_000
#: User records that are the agent's own bookkeeping, not a prompt.
_NOT_A_PROMPT = ("<command-", "<local-command-", "<system-reminder>", "Caveat: ", "[Request interrupted by user")


class Excerpt(NamedTuple):
    turn_id: str  # the id of the (first) user turn it covers
    text: str
    turns: int  # user turns covered
    last_id: str = ""  # the id of the newest user turn it covers


def _is_prompt(turn: Turn) -> bool:
    if turn.role != "user" or turn.meta:
        return False
    return bool(turn.text.strip()) and not turn.text.lstrip().startswith(_NOT_A_PROMPT)


def segments(turns: Iterable[Turn]) -> list[list[Turn]]:
    """The session split at each prompt (a leading reply without a prompt is dropped)."""
    out: list[list[Turn]] = []
    for turn in turns:
        if _is_prompt(turn):
            out.append([turn])
        elif out and turn.role == "assistant":
            out[-1].append(turn)
    return out


def _clip(text: str, limit: int = MESSAGE_CHARS) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[:limit].rstrip() + " …[truncated]"


def render(segment: Iterable[Turn], agent: str) -> str:
    lines: list[str] = []
    for turn in segment:
        if turn.role == "user":
            lines.append(f"[User]: {_clip(turn.text)}")
            continue
        done = 0  # the text is shown in pieces, each before the calls made after it
        for tool in turn.tools:
            at = len(turn.text) if tool.at < 0 else min(tool.at, len(turn.text))
            if at > done:
                lines += _said(turn.text[done:at], agent)
                done = at
            lines.append(f"[Tool {tool.name}]: {_clip(tool.command, 500)}")
        lines += _said(turn.text[done:], agent)
    return "\n".join(lines)


def _said(text: str, agent: str) -> list[str]:
    return [f"[{agent}]: {_clip(text)}"] if text.strip() else []


def _bounded(parts: list[str]) -> tuple[str, int]:
    """The newest parts that fit in :data:`TEXT_CHARS` (the newest one clipped if alone), and
    how many of them were kept."""
    kept: list[str] = []
    size = 0
    for part in reversed(parts):
        if kept and size + len(part) > TEXT_CHARS:
            break
        kept.append(part[-TEXT_CHARS:] if not kept else part)
        size += len(part)
    return "\n\n".join(reversed(kept)), len(kept)


def last_turn(path: str | os.PathLike[str], agent: str) -> Excerpt | None:
    """The last prompt and everything after it; None when the session has no prompt."""
    found = segments(Turns.open(path))
    if not found:
        return None
    last = found[-1]
    return Excerpt(str(last[0].uuid or ""), _bounded([render(last, agent)])[0], 1)


def uncaptured(path: str | os.PathLike[str], agent: str, captured: Container[str]) -> Excerpt | None:
    """The turns after the last one whose id is in *captured* (all of them if none is), the
    newest that fit in :data:`TEXT_CHARS`, anchored to the oldest of those."""
    found = segments(Turns.open(path))
    for i in range(len(found) - 1, -1, -1):
        if str(found[i][0].uuid or "") in captured:
            found = found[i + 1 :]
            break
    if not found:
        return None
    text, kept = _bounded([render(s, agent) for s in found])
    first = found[len(found) - kept]  # the anchor names the oldest turn the notes are about
    return Excerpt(str(first[0].uuid or ""), text, kept, str(found[-1][0].uuid or ""))
