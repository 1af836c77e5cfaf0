"""OpenCode's session database (``~/.local/share/opencode/opencode.db``, SQLite).

OpenCode keeps no transcript file: its journal anchors name the database and
the turn's message id (``<!-- session:ses_… turn:msg_… db:PATH -->``). A
``message`` row holds ``{"role", …}`` as JSON in ``data``; its ``part`` rows
hold the text (``{"type": "text", "text"}``; ``synthetic`` ones are
OpenCode's own and not shown) and the tool calls (``{"type": "tool", "tool",
"state": {"input", "output"}}``), in time order.

``--turn`` names a message (its id or a prefix): the turns of its session
around it are shown. It may also name a session, then all its turns are.
Without it, the newest session is shown. The database is opened read-only
and only the one session is read.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

from memsearch_fast.recall.transcript.records import ToolCall, Turn, clip, command_of
from memsearch_fast.recall.transcript.stream import TranscriptError


def _connect(path: Path) -> sqlite3.Connection:
    try:
        conn = sqlite3.connect(f"file:{quote(str(path.resolve()))}?mode=ro", uri=True, timeout=5)
        conn.execute("SELECT 1 FROM message LIMIT 1").fetchall()
        conn.execute("SELECT 1 FROM part LIMIT 1").fetchall()
    except sqlite3.Error as exc:
        raise TranscriptError(f"{path} is not an OpenCode session database ({exc})") from None
    return conn


def _json(raw: Any) -> dict[str, Any]:
    try:
        value = json.loads(raw)
    except (TypeError, ValueError, RecursionError):
        return {}
    return value if isinstance(value, dict) else {}


def _session(conn: sqlite3.Connection, wanted: str | None) -> tuple[str | None, bool]:
    """The session to show, and whether *wanted* names a turn in it (else the whole session)."""
    if wanted:
        pattern = wanted.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
        row = conn.execute(
            "SELECT session_id FROM message WHERE id LIKE ? ESCAPE '\\' ORDER BY time_created, id LIMIT 1",
            (pattern,),
        ).fetchone()
        if row:
            return str(row[0]), True
        row = conn.execute(
            "SELECT session_id FROM message WHERE session_id LIKE ? ESCAPE '\\' LIMIT 1", (pattern,)
        ).fetchone()
        if row:
            return str(row[0]), False
        raise TranscriptError(f"no OpenCode turn or session matches {wanted!r}")
    row = conn.execute("SELECT session_id FROM message ORDER BY time_created DESC, id DESC LIMIT 1").fetchone()
    return (str(row[0]) if row else None), False


def _turn(conn: sqlite3.Connection, message_id: str, data: dict[str, Any]) -> Turn | None:
    role = data.get("role")
    if role not in ("user", "assistant"):
        return None
    turn = Turn(role=str(role), uuid=message_id)
    parts = conn.execute("SELECT data FROM part WHERE message_id = ? ORDER BY time_created, id", (message_id,))
    for (raw,) in parts:
        part = _json(raw)
        if part.get("type") == "text" and not part.get("synthetic") and isinstance(part.get("text"), str):
            turn.text = (turn.text + "\n" + part["text"].strip()).strip()
        elif part.get("type") == "tool":
            raw_state = part.get("state")
            state: dict[str, Any] = raw_state if isinstance(raw_state, dict) else {}
            output = state.get("output") if isinstance(state.get("output"), str) else state.get("error", "")
            turn.tools.append(
                ToolCall(part.get("tool", ""), command_of(state.get("input", {})), clip(str(output or "")))
            )
    return turn if turn.text or turn.tools else None


def _turns(conn: sqlite3.Connection, session: str) -> Iterator[Turn]:
    rows = conn.execute(
        "SELECT id, data FROM message WHERE session_id = ? ORDER BY time_created, id", (session,)
    ).fetchall()
    for message_id, raw in rows:
        turn = _turn(conn, str(message_id), _json(raw))
        if turn is not None:
            yield turn


def select(path: Path, wanted: str | None, context: int) -> list[Turn]:
    """The turns to show from the database at *path* (see the module's note)."""
    conn = _connect(path)
    try:
        session, is_turn = _session(conn, wanted)
        if session is None:
            return []
        turns = list(_turns(conn, session))
    finally:
        conn.close()
    if is_turn and wanted:
        # By id prefix alone: OpenCode's ids start with their time, so neighbours share 8 characters.
        at = next((i for i, t in enumerate(turns) if str(t.uuid).startswith(wanted)), None)
        if at is not None:
            return turns[max(0, at - context) : at + context + 1]
    return turns
