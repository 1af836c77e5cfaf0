"""Codex CLI rollouts (``~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl``).

The conversation is read from ``event_msg`` records: ``user_message`` opens a
user turn and ``agent_message`` adds a paragraph to the assistant turn that
follows it. Tool calls are ``response_item`` records: ``function_call``
(name, JSON-encoded arguments, ``call_id``) joins the same assistant turn and
``function_call_output`` answers it by ``call_id``; ``custom_tool_call``
(``apply_patch`` edits: name, raw ``input``) and ``custom_tool_call_output``
the same (0.4.23 drops them, and with them every file edit). A user turn's
id is the ``turn_id`` of the ``turn_context`` (or ``task_started``) record
that opens it, the id Codex hands its hooks; older rollouts have none, and
``--turn`` then shows every turn. Everything else (``session_meta``,
reasoning, token counts, the ``response_item`` copies of messages) shows
nothing.

An assistant turn stays open, gathering paragraphs and calls, until the next
non-empty user message.
"""

from __future__ import annotations

import contextlib
import json
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
    clip,
    command_of,
    dumps,
)


def recognizes(record: dict[str, Any]) -> bool:
    # turn_context too: it may hold the first turn's id, before any message.
    return record.get("type") in ("event_msg", "response_item", "turn_context")


class Parser:
    def __init__(self) -> None:
        #: The assistant turn later records may still extend.
        self.open_turn: Turn | None = None
        #: The turn id announced for the next user message, and the last one given out
        #: (a compaction repeats its turn's ``turn_context``).
        self._next_id = ""
        self._used_id = ""

    def feed(self, record: dict[str, Any]) -> list[Event]:
        payload = record.get("payload")
        if not isinstance(payload, dict):
            payload = {}
        kind = record.get("type")
        item = payload.get("type")
        if kind == "turn_context" or (kind == "event_msg" and item == "task_started"):
            turn_id = payload.get("turn_id")
            if isinstance(turn_id, str) and turn_id and turn_id != self._used_id:
                self._next_id = turn_id
        elif kind == "event_msg":
            if item == "user_message":
                return self._user(str(payload.get("message", "")).strip())
            if item == "agent_message":
                return self._agent(str(payload.get("message", "")).strip())
        elif kind == "response_item":
            if item in ("function_call", "custom_tool_call"):
                return self._call(payload, "arguments" if item == "function_call" else "input")
            if item in ("function_call_output", "custom_tool_call_output"):
                key = as_key(payload.get("call_id"))
                if key is not None:
                    out = payload.get("output", "")
                    return [Result(key, clip(out if isinstance(out, str) else dumps(out)))]
        return []

    def _user(self, text: str) -> list[Event]:
        if not text:
            return []
        self.open_turn = None
        turn_id, self._used_id = self._next_id, self._next_id or self._used_id
        self._next_id = ""
        return [NewTurn(Turn("user", turn_id, text=text))]

    def _assistant(self, events: list[Event]) -> Turn:
        if self.open_turn is None:
            self.open_turn = Turn("assistant")
            events.append(NewTurn(self.open_turn))
        return self.open_turn

    def _agent(self, text: str) -> list[Event]:
        events: list[Event] = []
        if text:
            turn = self._assistant(events)
            turn.text = append_text(turn.text, text)
        return events

    def _call(self, payload: dict[str, Any], field: str) -> list[Event]:
        args = payload.get(field, "")
        if isinstance(args, str) and field == "arguments":
            with contextlib.suppress(ValueError, RecursionError):  # not JSON: shown as written
                args = json.loads(args)
        events: list[Event] = []
        turn = self._assistant(events)
        tool = ToolCall(payload.get("name", "tool"), command_of(args), at=len(turn.text))
        turn.tools.append(tool)
        key = as_key(payload.get("call_id"))
        if key is not None:
            events.append(Call(key, tool))
        return events


FORMAT = Format("codex", recognizes, Parser)
