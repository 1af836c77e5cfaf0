"""Claude Code sessions (``~/.claude/projects/<project>/<session>.jsonl``).

Records of type ``user`` and ``assistant`` carry an API message. An
assistant message's blocks are text, ``tool_use`` (name, input, id) and
thinking (skipped); a user message is either a prompt (a string or text
blocks) or the ``tool_result`` blocks answering earlier ``tool_use`` ids, in
which case any text beside them is not a prompt and is dropped. Every other
record (``summary``, ``system``, ``file-history-snapshot``, progress and
queue records) is metadata and shows nothing. A turn's id is the record's
``uuid``, the id that journal anchors name. User records marked ``isMeta``,
``isCompactSummary`` or ``isSidechain`` (a subagent's prompt, which an older
layout writes after the user's) are the agent's own text: shown, never a prompt.
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
    append_text,
    as_key,
    as_text,
    clip,
    command_of,
)


def recognizes(record: dict[str, Any]) -> bool:
    return record.get("type") in ("user", "assistant") and "message" in record


class Parser:
    #: Claude Code turns are complete in one record.
    open_turn: Turn | None = None

    def feed(self, record: dict[str, Any]) -> list[Event]:
        kind = record.get("type")
        message = record.get("message")
        content = message.get("content", "") if isinstance(message, dict) else ""
        if kind == "user":
            return _user(record, content)
        if kind == "assistant":
            return _assistant(record, content)
        return []


def _is_result(block: Any) -> bool:
    return isinstance(block, dict) and block.get("type") == "tool_result"


def _user(record: dict[str, Any], content: Any) -> list[Event]:
    if isinstance(content, list) and any(_is_result(b) for b in content):
        events: list[Event] = []
        for block in content:
            if _is_result(block):
                key = as_key(block.get("tool_use_id"))
                if key is not None:
                    events.append(Result(key, clip(as_text(block.get("content", "")))))
        return events
    text = as_text(content).strip()
    meta = any(record.get(flag) is True for flag in ("isMeta", "isCompactSummary", "isSidechain"))
    return [NewTurn(Turn("user", record.get("uuid", ""), text, meta=meta))] if text else []


def _assistant(record: dict[str, Any], content: Any) -> list[Event]:
    turn = Turn("assistant", record.get("uuid", ""))
    calls: list[Event] = []
    for block in content if isinstance(content, list) else ():
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind == "text":
            turn.text = append_text(turn.text, block.get("text", ""))
        elif kind == "tool_use":
            tool = ToolCall(block.get("name", "tool"), command_of(block.get("input", {})), at=len(turn.text))
            turn.tools.append(tool)
            key = as_key(block.get("id"))
            if key is not None:
                calls.append(Call(key, tool))
    if not (turn.text or turn.tools):
        return []
    return [NewTurn(turn), *calls]


FORMAT = Format("claude", recognizes, Parser)
