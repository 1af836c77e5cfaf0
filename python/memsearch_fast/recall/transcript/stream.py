"""Reading a transcript as a stream: records, format detection, finished turns.

Nothing here holds the file: lines are read one at a time, and a turn is kept
only until nothing later in the file can change it, which is when its tool
calls have their results (usually the next record). A call whose result never
comes would hold every later turn back, so when the held turns grow past a
bound the rest of the file is read ahead to settle every waiting call (its
result, or none) and the held turns go on their way. Later calls that the
read-ahead finds never answered are remembered, so one read-ahead serves a
whole file of interrupted tool calls.

Lines are split and decoded the way a text-mode ``open(..., encoding="utf-8")``
reads them (``\\n``, ``\\r\\n`` and ``\\r`` end a line), except that bytes
that are not UTF-8 become U+FFFD instead of stopping the read. A line that is
not a JSON object, such as the half-written last line of a session that is
still going, is skipped.
"""

from __future__ import annotations

import json
import os
from collections import deque
from collections.abc import Hashable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

from memsearch_fast.errors import MemsearchError
from memsearch_fast.recall.transcript import claude, codex, openclaw
from memsearch_fast.recall.transcript.records import Call, Format, NewTurn, Result, ToolCall, Turn

#: How many records are looked at to recognise the format (as memsearch 0.4.23 does).
DETECT_RECORDS = 80
#: Turns held back waiting for a tool result, before the rest of the file is read ahead.
HELD_TURNS = 1_000
HELD_CHARS = 4_000_000
#: Later calls followed at once while reading ahead.
TRACKED_CALLS = 50_000

#: A call's place in the file: the offset after its line, and its rank among the calls on that line.
Position = tuple[int, int]


class TranscriptError(MemsearchError):
    """The transcript cannot be shown (one-line message)."""


class UnknownFormatError(TranscriptError):
    """The file is not a Claude Code, Codex or OpenClaw transcript."""


FORMATS = (codex.FORMAT, openclaw.FORMAT, claude.FORMAT)


def _record(text: bytes) -> dict[str, Any] | None:
    """The JSON object on one line, or None (blank, malformed, or not an object)."""
    stripped = text.decode("utf-8", "replace").strip()
    if not stripped:
        return None
    try:
        value = json.loads(stripped)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def _records(raw: bytes) -> tuple[dict[str, Any], ...]:
    """The JSON objects on one ``\\n``-terminated line (a lone ``\\r`` also ends a line)."""
    if b"\r" not in raw:
        record = _record(raw)
        return () if record is None else (record,)
    return tuple(r for r in map(_record, raw.splitlines()) if r is not None)


#: The longest record read; a longer one (a 120 MB tool output, a torn last
#: line) is skipped to its end without being held, so memory stays bounded.
MAX_RECORD_BYTES = 4 << 20


def _raw_lines(f: BinaryIO) -> Iterator[tuple[int, bytes | None]]:
    """(length, bytes) of each line of *f*; bytes None for a line over :data:`MAX_RECORD_BYTES`."""
    while True:
        raw = f.readline(MAX_RECORD_BYTES)
        if not raw:
            return
        if len(raw) < MAX_RECORD_BYTES or raw.endswith(b"\n"):
            yield len(raw), raw
            continue
        size = len(raw)
        while not raw.endswith(b"\n"):
            raw = f.readline(1 << 20)
            if not raw:
                break
            size += len(raw)
        yield size, None


def lines(path: Path, start: int = 0) -> Iterator[tuple[int, tuple[dict[str, Any], ...]]]:
    """(offset after the line, its records) for every line from byte *start* on."""
    with path.open("rb") as f:
        if start:
            f.seek(start)
        offset = start
        for size, raw in _raw_lines(f):
            offset += size
            yield offset, () if raw is None else _records(raw)


def resolve(path: str | os.PathLike[str]) -> Path:
    p = Path(path).expanduser()
    if not p.is_file():
        raise TranscriptError(f"transcript not found: {p}")
    return p


def detect(path: Path) -> tuple[Format | None, int]:
    """The file's format and the byte offset of the line that shows it.

    ``(None, 0)`` for a file with nothing in it yet: empty, blank, or the
    first record half-written. Raises :class:`UnknownFormatError` when the
    first records match no format, or when the file holds text but no JSON
    object at all (markdown, a binary file).
    """
    seen = 0
    garbage = False
    start = 0
    with path.open("rb") as f:
        for size, raw in _raw_lines(f):
            if raw is None:
                start += size
                continue
            records = _records(raw)
            for record in records:
                for fmt in FORMATS:
                    if fmt.recognizes(record):
                        return fmt, start
                seen += 1
                if seen >= DETECT_RECORDS:
                    break
            if seen >= DETECT_RECORDS:
                break
            if not records and raw.strip() and (raw.endswith((b"\n", b"\r")) or not raw.lstrip().startswith(b"{")):
                garbage = True  # a line that is not (the start of) a JSON object
            start += len(raw)
    if seen or garbage:
        raise UnknownFormatError(
            "unrecognized transcript format (not a Claude Code, Codex or OpenClaw session); "
            "read the file directly to locate the relevant turns"
        )
    return None, 0


class Turns:
    """The turns of a transcript, in order, each handed on once it is final."""

    def __init__(self, path: Path, fmt: Format | None, start: int) -> None:
        self.path = path
        self.format = fmt
        self.start = start

    @classmethod
    def open(cls, path: str | os.PathLike[str]) -> Turns:
        p = resolve(path)
        fmt, start = detect(p)
        return cls(p, fmt, start)

    @property
    def has_ids(self) -> bool:
        """Whether turns may carry ids that ``--turn`` can match (older Codex rollouts have none:
        no turn matches, and every turn is shown)."""
        return self.format is not None

    def __iter__(self) -> Iterator[Turn]:
        if self.format is None:
            return
        parser = self.format.parser()
        held: deque[tuple[Turn, int]] = deque()
        held_chars = 0
        waiting: dict[Hashable, ToolCall] = {}
        unanswered: set[Position] = set()  # calls found (by reading ahead) never to get a result
        for offset, records in lines(self.path, self.start):
            calls = 0
            for record in records:
                for event in parser.feed(record):
                    if isinstance(event, NewTurn):
                        weight = event.turn.weight()
                        held.append((event.turn, weight))
                        held_chars += weight
                    elif isinstance(event, Call):
                        _register(event, waiting)
                        if unanswered and (offset, calls) in unanswered:
                            unanswered.discard((offset, calls))
                            event.tool.waiting = False
                        calls += 1
                    else:
                        _answer(event, waiting)
            if (len(held) > HELD_TURNS or held_chars > HELD_CHARS) and _blocked(held[0][0]):
                unanswered |= self._read_ahead(offset, waiting)
            while held and not _blocked(held[0][0]) and held[0][0] is not parser.open_turn:
                turn, weight = held.popleft()
                held_chars -= weight
                yield turn
        _settle(waiting)
        for turn, _ in held:
            yield turn

    def _read_ahead(self, offset: int, waiting: dict[Hashable, ToolCall]) -> set[Position]:
        """Settle every waiting call from the rest of the file, as reading on would.

        A call gets the first result filed under its id, unless a later call
        takes the id first (then it never gets one). Reading stops once every
        waiting call is settled; on the way, later calls that are shown never
        to get a result are noted (up to :data:`TRACKED_CALLS` at a time), so
        that they do not hold turns back in their turn, and are returned.
        """
        assert self.format is not None
        parser = self.format.parser()
        undecided = {key: tool for key, tool in waiting.items() if tool.waiting}
        tracked: dict[Hashable, Position] = {}  # later calls still without a result
        proven: set[Position] = set()
        for end, records in lines(self.path, offset):
            calls = 0
            for record in records:
                for event in parser.feed(record):
                    if isinstance(event, NewTurn):
                        continue
                    tool = undecided.pop(event.key, None)
                    if tool is not None and isinstance(event, Result):
                        tool.output = event.output
                    if isinstance(event, Result):
                        tracked.pop(event.key, None)
                        continue
                    earlier = tracked.get(event.key)
                    if earlier is not None:
                        proven.add(earlier)  # its id is taken before any result came
                    if earlier is not None or len(tracked) < TRACKED_CALLS:
                        tracked[event.key] = (end, calls)
                    calls += 1
            if not undecided:
                break
        else:
            proven.update(tracked.values())  # the file ended with these still unanswered
        _settle(waiting)
        return proven


def _register(event: Call, waiting: dict[Hashable, ToolCall]) -> None:
    earlier = waiting.get(event.key)
    if earlier is not None:
        earlier.waiting = False  # its id is taken: no result will reach it
    event.tool.waiting = True
    waiting[event.key] = event.tool


def _answer(event: Result, waiting: dict[Hashable, ToolCall]) -> None:
    tool = waiting.pop(event.key, None)
    if tool is not None:
        tool.output = event.output
        tool.waiting = False


def _settle(waiting: dict[Hashable, ToolCall]) -> None:
    """Nothing more will answer these calls."""
    for tool in waiting.values():
        tool.waiting = False
    waiting.clear()


def _blocked(turn: Turn) -> bool:
    return any(t.waiting for t in turn.tools)
