"""``memsearch transcript``: the original conversation behind a memory (L3 of recall).

Journals are summaries; the exact commands, flags and paths behind them live
in the agent's own session file, which a journal names in its anchor
(``<!-- session:… turn:… transcript:PATH -->``). This package reads that file
(a Claude Code session, a Codex rollout or an OpenClaw session, recognised
from its first records; or OpenCode's session database, :mod:`.opencode`)
into turns with their tool calls and outputs, and prints them in memsearch
0.4.23's text or JSON form: all turns, or the turn named by ``--turn`` (an
id prefix) with ``--context`` turns each side.

The file is streamed, never loaded: a turn is kept only as long as a later
record can still change it, ``--turn`` keeps a window of the last few turns,
and text output stops reading at its size cap. Standard library only, so the
command starts fast.

One module per format (:mod:`.claude`, :mod:`.codex`, :mod:`.openclaw`), the
shared shape in :mod:`.records`, reading in :mod:`.stream`, printing in
:mod:`.render`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TypeAlias

from memsearch_fast.recall.transcript import render
from memsearch_fast.recall.transcript.records import MAX_OUTPUT_CHARS, ToolCall, Turn
from memsearch_fast.recall.transcript.render import MAX_RENDER_CHARS
from memsearch_fast.recall.transcript.stream import TranscriptError, Turns, UnknownFormatError

__all__ = [
    "MAX_OUTPUT_CHARS",
    "MAX_RENDER_CHARS",
    "ToolCall",
    "TranscriptError",
    "Turn",
    "Turns",
    "UnknownFormatError",
    "select",
    "show_text",
    "write_json",
]

PathArg: TypeAlias = str | os.PathLike[str]


def select(path: PathArg, turn: str | None = None, context: int = 3, *, exchange: bool = False) -> Iterable[Turn]:
    """The turns to show: the window around the first turn whose id matches *turn*,
    else (no *turn*, or no turn matches it) every turn, read as they are consumed.
    With *exchange*, the window is that turn's whole exchange (its prompt and every
    record up to the next prompt) and *context* counts exchanges (an OpenCode session
    keeps a reply in one message: its window is the same either way).

    Raises :class:`TranscriptError` (or OSError) when the file cannot be shown.
    """
    if context < 0:
        raise ValueError("context must be 0 or more")
    if _is_database(path):
        from memsearch_fast.recall.transcript import opencode

        return opencode.select(Path(path).expanduser(), turn, context)
    turns = Turns.open(path)
    if turn and turns.has_ids:
        found = (render.exchange_window if exchange else render.window)(turns, turn, context)
        if found is not None:
            return found
    return turns


def _is_database(path: PathArg) -> bool:
    """Whether *path* is an SQLite file (OpenCode's session database)."""
    try:
        with Path(path).expanduser().open("rb") as f:
            return f.read(16) == b"SQLite format 3\x00"
    except OSError:
        return False


def show_text(path: PathArg, turn: str | None = None, context: int = 3, *, exchange: bool = False) -> str:
    """The transcript as text (at most :data:`MAX_RENDER_CHARS`, then a cut mark)."""
    return render.text(select(path, turn, context, exchange=exchange))


def write_json(
    path: PathArg,
    write: Callable[[str], object],
    turn: str | None = None,
    context: int = 3,
    *,
    exchange: bool = False,
) -> None:
    """The transcript as a JSON array, handed to *write* a turn at a time."""
    render.write_json(select(path, turn, context, exchange=exchange), write)
