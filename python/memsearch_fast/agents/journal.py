"""The daily logs (``memory/YYYY-MM-DD.md``): one entry per captured turn.

An entry is ``### HH:MM``, the anchor comment that leads back to the turn
(``<!-- session:… turn:… transcript:… -->``) and the summary's bullets. The
first entry of a session in a log also writes ``## Session HH:MM`` (never
alone: a session that captured nothing leaves no trace). Appends hold an
exclusive lock on the log and go out in one write, so two sessions writing
the same day interleave whole entries, never lines.

Logs live in the project's folder, which a clone brings along: they are
opened without following links, only as regular files of the user's,
created 0600, and read boundedly (a log linked to ``/dev/zero`` is refused,
a huge one is read from its end).
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import NamedTuple

from memsearch_fast._os import open_private, read_regular, write_all, write_atomic

DAILY_LOG = re.compile(r"^\d{4}-\d{2}-\d{2}\.md$")
#: Characters per token, for bounding what a session starts with (a rough,
#: tokenizer-free estimate: hooks must not load a model).
CHARS_PER_TOKEN = 4
DEFAULT_CONTEXT_TOKENS = 1500
#: How much of a log's end SessionStart and PreCompact read (its newest entries).
TAIL_BYTES = 4 << 20


class Anchor(NamedTuple):
    session: str
    turn: str
    transcript: str
    #: What *transcript* is: a session file (``transcript``), or a host's session
    #: database (``db``: OpenCode's, where the turn is found by its message id).
    kind: str = "transcript"

    def comment(self) -> str:
        # The fields end at whitespace when read back: keep them free of it
        # and of anything that would close the comment.
        parts = (f"session:{_field(self.session)}", f"turn:{_field(self.turn)}")
        kind = "db" if self.kind == "db" and self.transcript else "transcript"
        tail = f" {kind}:{_field(self.transcript)}" if self.transcript else " transcript:"
        return f"<!-- {' '.join(parts)}{tail} -->"


def _field(value: str) -> str:
    return re.sub(r"\s+|-->", "_", value)


def entry_text(now: str, anchor: Anchor, bullets: Sequence[str], *, heading: bool) -> str:
    lines = [f"\n## Session {now}\n"] if heading else []
    lines += [f"### {now}", anchor.comment(), *bullets, ""]
    return "\n".join(lines) + "\n"


def _locked(log: Path) -> int:
    """An fd of *log* (created if missing) holding its exclusive lock.

    A writer that replaced the file (:func:`rewrite`) while we waited for the
    lock leaves us holding the old inode: then the path is opened again.
    """
    import fcntl

    log.parent.mkdir(parents=True, exist_ok=True)
    while True:
        fd = open_private(log, os.O_RDWR | os.O_CREAT | os.O_APPEND, single_link=False)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            now = os.stat(log, follow_symlinks=False)
        except FileNotFoundError:
            os.close(fd)
            continue
        except BaseException:
            os.close(fd)
            raise
        held = os.fstat(fd)
        if (held.st_dev, held.st_ino) == (now.st_dev, now.st_ino):
            return fd
        os.close(fd)


def append(log: Path, now: str, anchor: Anchor, bullets: Sequence[str]) -> None:
    """Append one entry to *log* under an exclusive lock, in one write."""
    fd = _locked(log)
    try:
        marker = f"session:{_field(anchor.session)} ".encode()
        with open(fd, "rb", closefd=False) as f:
            seen = bool(anchor.session) and any(marker in line for line in f)
        write_all(fd, entry_text(now, anchor, bullets, heading=not seen).encode("utf-8"))
    finally:
        os.close(fd)  # releases the lock


def merge(log: Path, now: str, anchor: Anchor, bullets: Sequence[str], *, into: str) -> None:
    """Write a turn's notes into the entry anchored to turn *into* of the same session
    (a PreCompact's, written while the turn was still running), so a turn keeps one
    entry: they replace that entry's notes when it is about this turn alone, and
    extend them when it also covers earlier turns. Appended when there is no such entry."""
    pattern = re.compile(rf"^<!-- session:{re.escape(_field(anchor.session))} turn:{re.escape(_field(into))} ", re.M)
    fd = _locked(log)
    try:
        with open(fd, "rb", closefd=False) as f:
            old = f.read().decode("utf-8", "replace")
        found = pattern.search(old) if anchor.session and into else None
        if found is None:
            fd_text = entry_text(now, anchor, bullets, heading=f"session:{_field(anchor.session)} " not in old)
            write_all(fd, fd_text.encode("utf-8"))
            return
        start = old.index("\n", found.start()) + 1  # the notes begin after the anchor's line
        end = re.compile(r"^#", re.M).search(old, start)
        stop = end.start() if end is not None else len(old)
        kept = old[start:stop].rstrip("\n") + "\n" if into != anchor.turn and old[start:stop].strip() else ""
        new = old[:start] + kept + "\n".join([*bullets, "", ""]) + old[stop:].lstrip("\n")
        write_atomic(log, new.encode("utf-8"), mode=os.fstat(fd).st_mode & 0o777)
    finally:
        os.close(fd)


def rewrite(log: Path, change: Callable[[str], str]) -> None:
    """Replace *log* with ``change(old text)`` atomically (a hidden temp file
    renamed over it) while holding the lock appenders take."""
    fd = _locked(log)
    try:
        with open(fd, "rb", closefd=False) as f:
            old = f.read().decode("utf-8", "replace")
        # The temp file is hidden, so scanners and watchers skip it; the log keeps its mode.
        write_atomic(log, change(old).encode("utf-8"), mode=os.fstat(fd).st_mode & 0o777)
    finally:
        os.close(fd)


def anchored_turns(memory_dir: Path, session: str, logs: int = 2) -> set[str]:
    """Turn ids of *session* already captured in the newest *logs* daily logs."""
    pattern = re.compile(rf"<!-- session:{re.escape(_field(session))} turn:(\S*) ")
    found: set[str] = set()
    for log in newest_logs(memory_dir, logs):
        with contextlib.suppress(OSError):
            found.update(m.group(1) for m in pattern.finditer(_tail(log)))
    return found


def _tail(log: Path) -> str:
    """The last :data:`TAIL_BYTES` of *log* from a line start (OSError when it is not a regular file)."""
    data = read_regular(log, TAIL_BYTES, tail=True)
    if len(data) == TAIL_BYTES:
        data = data[data.find(b"\n") + 1 :]
    return data.decode("utf-8", "replace")


def newest_logs(memory_dir: Path, count: int) -> list[Path]:
    try:
        names = sorted((n for n in os.listdir(memory_dir) if DAILY_LOG.match(n)), reverse=True)
    except OSError:
        return []
    return [memory_dir / n for n in names[:count]]


def _entries(text: str) -> Iterator[tuple[str, list[str]]]:
    """(heading, lines) of each ``###`` entry that has at least one bullet."""
    heading, body = "", list[str]()
    for line in [*text.splitlines(), "### "]:
        if line.startswith("#"):
            if heading and any(b.startswith(("- ", "* ")) for b in body):
                yield heading, [b for b in body if b.strip() and not b.startswith("<!--")]
            heading, body = (line, []) if line.startswith("### ") else ("", [])
        elif heading:
            body.append(line.rstrip())


def recent_context(memory_dir: Path, max_tokens: int = DEFAULT_CONTEXT_TOKENS) -> str:
    """The newest entries of the two newest daily logs, newest last, at most
    *max_tokens* (estimated); empty when there is nothing to show."""
    budget = max_tokens * CHARS_PER_TOKEN
    picked: list[tuple[str, list[str]]] = []  # (log name, rendered entries), newest log first
    for log in newest_logs(memory_dir, 2):
        try:
            entries = list(_entries(_tail(log)))
        except OSError:
            continue
        kept: list[str] = []
        for heading, body in reversed(entries):
            block = "\n".join([heading, *body])
            if len(block) + 1 > budget:
                budget = 0
                break
            kept.append(block)
            budget -= len(block) + 1
        if kept:
            picked.append((log.name, kept[::-1]))
        if budget <= 0:
            break
    if not picked:
        return ""
    parts = ["# Recent memory"]
    for name, blocks in reversed(picked):
        parts.append(f"\n## {name}\n")
        parts.append("\n\n".join(blocks))
    return "\n".join(parts) + "\n"
