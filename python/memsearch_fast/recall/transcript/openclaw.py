"""OpenClaw sessions (``~/.openclaw/agents/<agent>/sessions/<id>.jsonl``).

Conversation records are ``{"type": "message", "id", "message": {"role",
"content"}}``; the ``session``, ``model_change``, ``thinking_level_change``
and ``custom`` records show nothing. User and assistant messages become turns
(their id is the record's ``id``): text blocks, and ``toolCall`` blocks whose
input is ``input``, ``parameters`` or ``arguments``. A tool's output is
either a ``toolResult`` block later in the same message (it answers the call
just before it) or a separate ``toolResult``-role message naming the call by
``toolCallId``.

memsearch 0.4.23 knows only the first two of each: ``arguments`` and
``toolResult`` messages are what OpenClaw writes today, and without them
every command it ran would read ``{}`` with no output, so this parser reads
them too. A file written the way 0.4.23 expects prints exactly as there.
"""

from __future__ import annotations

from typing import Any

from memsearch_fast.recall.transcript.records import (
    Call,
    Event,
    Format,
    NewTurn,
    Result,
    ToolCall,
    Turn,
    as_key,
    as_text,
    clip,
    command_of,
)


def recognizes(record: dict[str, Any]) -> bool:
    message = record.get("message")
    return record.get("type") == "message" and isinstance(message, dict) and "role" in message


class Parser:
    #: Every OpenClaw message is complete in one record.
    open_turn: Turn | None = None

    def feed(self, record: dict[str, Any]) -> list[Event]:
        message = record.get("message")
        if record.get("type") != "message" or not isinstance(message, dict):
            return []
        role = message.get("role", "")
        content = message.get("content", "")
        if role == "toolResult":
            key = as_key(message.get("toolCallId"))
            return [] if key is None else [Result(key, clip(as_text(content)))]
        if role not in ("user", "assistant"):
            return []
        turn = Turn(role, record.get("id", ""), as_text(content).strip())
        unanswered: list[tuple[ToolCall, Any]] = []
        for block in content if isinstance(content, list) else ():
            if not isinstance(block, dict):
                continue
            kind = block.get("type")
            if kind == "toolCall":
                tool = ToolCall(block.get("name", block.get("toolName", "tool")), command_of(_input(block)))
                turn.tools.append(tool)
                unanswered.append((tool, block.get("id")))
            elif kind == "toolResult" and turn.tools:
                result = block.get("text", block.get("content", ""))
                turn.tools[-1].output = clip(result if isinstance(result, str) else as_text(result))
                if unanswered and unanswered[-1][0] is turn.tools[-1]:
                    unanswered.pop()
        if not (turn.text or turn.tools):
            return []
        events: list[Event] = [NewTurn(turn)]
        for tool, ident in unanswered:
            key = as_key(ident)
            if key is not None:
                events.append(Call(key, tool))
        return events


def _input(block: dict[str, Any]) -> Any:
    for key in ("input", "parameters", "arguments"):
        if key in block:
            return block[key]
    return {}


FORMAT = Format("openclaw", recognizes, Parser)
