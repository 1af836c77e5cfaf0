"""The common shape every transcript format is parsed into, and the text rules they share.

A format parser turns one JSON record into events: a new turn, a tool call
that waits for its result (by id), or a tool result (by id). The stream
(:mod:`.stream`) pairs results with their calls and hands on turns once
nothing later in the file can change them.

Values copied from the file (a turn's id, a tool's name) keep their JSON type,
so ``-j`` prints them as the file has them; text, commands and outputs are
always strings.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeAlias

#: Tool output kept per call, in characters: commands are the point, output is a hint.
MAX_OUTPUT_CHARS = 200
OUTPUT_CUT = " …[truncated]"

#: Keys of a tool's input that hold what it ran, most telling first.
_COMMAND_KEYS = ("command", "cmd", "query", "pattern", "file_path", "path")


@dataclass(slots=True)
class ToolCall:
    name: Any
    command: str  # in full: the exact invocation is what recall is for
    output: str = ""
    #: Registered under an id and still expecting its result.
    waiting: bool = False
    #: Where in its turn's text the call came (characters), for showing text and calls in
    #: their order; -1: after all of it.
    at: int = -1


@dataclass(slots=True)
class Turn:
    role: str  # "user" or "assistant"
    uuid: Any = ""
    text: str = ""
    tools: list[ToolCall] = field(default_factory=list)
    #: Written by the agent itself (a skill body, a command wrapper, a compaction
    #: summary), not typed by the user: shown, but never a turn's prompt.
    meta: bool = False

    def as_json(self) -> dict[str, Any]:
        return {
            "role": self.role,
            "uuid": self.uuid,
            "text": self.text,
            "tools": [{"name": t.name, "command": t.command, "output": t.output} for t in self.tools],
        }

    def weight(self) -> int:
        """Rough size in characters, for bounding what waits in memory."""
        return 64 + len(self.text) + sum(64 + len(t.command) + len(t.output) for t in self.tools)


@dataclass(slots=True)
class NewTurn:
    turn: Turn


@dataclass(slots=True)
class Call:
    """*tool* (already in a turn) waits for the result filed under *key*."""

    key: Hashable
    tool: ToolCall


@dataclass(slots=True)
class Result:
    key: Hashable
    output: str


Event: TypeAlias = NewTurn | Call | Result


class Parser(Protocol):
    """Turns records into events; one per read of a file (some formats keep state)."""

    #: A turn that later records may still extend (it is not final yet).
    open_turn: Turn | None

    def feed(self, record: dict[str, Any]) -> list[Event]: ...


@dataclass(frozen=True, slots=True)
class Format:
    name: str
    #: Whether a record shows that a file is in this format.
    recognizes: Callable[[dict[str, Any]], bool]
    parser: Callable[[], Parser]


def as_key(value: Any) -> Hashable | None:
    """A tool-call id usable for pairing, or None (missing, empty or not a scalar)."""
    if not value or isinstance(value, (list, dict)):
        return None
    key: Hashable = value
    return key


def as_text(content: Any) -> str:
    """Plain text of a message body: a string, or the text blocks of a block list."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    parts: list[str] = []
    for block in content:
        if isinstance(block, str):
            parts.append(block)
        elif isinstance(block, dict) and block.get("type") == "text":
            text = block.get("text")
            if isinstance(text, str):
                parts.append(text)
    return "\n".join(p for p in parts if p)


def append_text(text: str, more: Any) -> str:
    """*text* with another paragraph, trailing space trimmed (non-strings add nothing)."""
    if not isinstance(more, str):
        return text
    return text + (("\n" if text else "") + more).rstrip()


def clip(output: str) -> str:
    output = output.strip()
    if len(output) <= MAX_OUTPUT_CHARS:
        return output
    return output[:MAX_OUTPUT_CHARS] + OUTPUT_CUT


def dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def command_of(tool_input: Any) -> str:
    """What a tool ran: its command (or query, pattern, path) when it has one, else its input as JSON."""
    if isinstance(tool_input, dict):
        for key in _COMMAND_KEYS:
            value = tool_input.get(key)
            if value:
                return _words(value) if isinstance(value, list) else str(value)
        return dumps(tool_input)
    if isinstance(tool_input, list):
        return _words(tool_input)
    return str(tool_input)


def _words(values: list[Any]) -> str:
    return " ".join(v if isinstance(v, str) else str(v) for v in values)
