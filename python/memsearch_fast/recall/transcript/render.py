"""Choosing the turns to show, and printing them as text or JSON.

Text is capped: past :data:`MAX_RENDER_CHARS` it is cut and marked, so
reading stops as soon as the cap is reached. JSON is not capped; it is
written turn by turn as the turns arrive.
"""

from __future__ import annotations

import itertools
import json
from collections import deque
from collections.abc import Callable, Generator, Iterable, Iterator
from typing import Any

from memsearch_fast.recall.transcript.records import Turn

#: Text output longer than this is cut (JSON is not).
MAX_RENDER_CHARS = 12_000
TRANSCRIPT_CUT = "\n…[transcript truncated]\n"


def matches(turn: Turn, wanted: str) -> bool:
    """*wanted* is a prefix of the turn's id, or starts with the id's first 8 characters."""
    ident = turn.uuid
    return isinstance(ident, str) and bool(ident) and (ident.startswith(wanted) or wanted.startswith(ident[:8]))


def window(turns: Iterable[Turn], wanted: str, context: int) -> list[Turn] | None:
    """The first turn matching *wanted* with up to *context* turns each side, or None."""
    before: deque[Turn] = deque(maxlen=context)
    rest = iter(turns)
    try:
        for turn in rest:
            if matches(turn, wanted):
                return [*before, turn, *itertools.islice(rest, context)]
            before.append(turn)
        return None
    finally:
        _close(rest)


def _is_prompt(turn: Turn) -> bool:
    return turn.role == "user" and not turn.meta


def _exchanges(turns: Iterable[Turn]) -> Generator[list[Turn], None, None]:
    """The turns grouped by exchange: a prompt and every record after it up to the next."""
    current: list[Turn] = []
    for turn in turns:
        if current and _is_prompt(turn):
            yield current
            current = []
        current.append(turn)
    if current:
        yield current


def exchange_window(turns: Iterable[Turn], wanted: str, context: int) -> list[Turn] | None:
    """The whole exchange holding the first turn matching *wanted*, with up to *context*
    exchanges each side, or None: Claude Code writes each of a reply's blocks (its text,
    each tool call) as a record of its own, so records cut a turn anywhere."""
    before: deque[list[Turn]] = deque(maxlen=context)
    source = iter(turns)
    rest = _exchanges(source)
    try:
        for exchange in rest:
            if any(matches(turn, wanted) for turn in exchange):
                return [t for ex in (*before, exchange, *itertools.islice(rest, context)) for t in ex]
            before.append(exchange)
        return None
    finally:
        rest.close()
        _close(source)


def _block(turn: Turn) -> str:
    lines = ["### User" if turn.role == "user" else "### Assistant"]
    if turn.text:
        lines.append(turn.text)
    for tool in turn.tools:
        lines.append(f"- $ [{tool.name}] {tool.command}")
        if tool.output:
            lines.append(f"  → {tool.output}")
    return "\n".join(lines) + "\n\n"


def text(turns: Iterable[Turn]) -> str:
    """Markdown-ish text: a heading per turn, its text, ``- $ [tool] command`` and ``  → output``."""
    parts: list[str] = []
    size = 0
    rest = iter(turns)
    try:
        for turn in rest:
            block = _block(turn)
            parts.append(block)
            size += len(block)
            if size >= MAX_RENDER_CHARS:
                parts = ["".join(parts)]
                if len(parts[0].rstrip()) >= MAX_RENDER_CHARS:
                    break  # nothing after this can show
    finally:
        _close(rest)
    body = "".join(parts).rstrip()
    if len(body) >= MAX_RENDER_CHARS:
        return body[:MAX_RENDER_CHARS] + TRANSCRIPT_CUT
    return body + "\n"


def write_json(turns: Iterable[Turn], write: Callable[[str], object]) -> None:
    """A JSON array of turns, one turn written at a time.

    The same text as ``json.dumps(turns, indent=2, ensure_ascii=False)``,
    built around the fixed shape of a turn so that only the values go
    through the encoder.
    """
    first = True
    for turn in turns:
        write(("[\n" if first else ",\n") + _turn_json(turn))
        first = False
    write("[]" if first else "\n]")


_encode = json.JSONEncoder(ensure_ascii=False).encode


def _json_value(value: Any, indent: str) -> str:
    """*value* as it reads nested at *indent* in an indented document."""
    if isinstance(value, (dict, list)) and value:
        return json.dumps(value, indent=2, ensure_ascii=False).replace("\n", "\n" + indent)
    return _encode(value)


def _turn_json(turn: Turn) -> str:
    head = (
        f'  {{\n    "role": {_encode(turn.role)},\n    "uuid": {_json_value(turn.uuid, "    ")},\n'
        f'    "text": {_encode(turn.text)},\n    "tools": '
    )
    if not turn.tools:
        return head + "[]\n  }"
    tools = ",\n".join(
        f'      {{\n        "name": {_json_value(t.name, "        ")},\n'
        f'        "command": {_encode(t.command)},\n        "output": {_encode(t.output)}\n      }}'
        for t in turn.tools
    )
    return f"{head}[\n{tools}\n    ]\n  }}"


def _close(it: Iterator[Turn]) -> None:
    close = getattr(it, "close", None)
    if close is not None:
        close()
