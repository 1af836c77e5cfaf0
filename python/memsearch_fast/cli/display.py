"""What the CLI prints: the index progress bar and text forms of results.

rich is imported only when a progress bar is actually drawn (an interactive
terminal without ``--quiet``), so other commands never pay for it.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any, TextIO

from memsearch_fast.index import NullProgress

# Search output and its tiers live beside the other recall verbs (the MCP server
# renders them too); the names the commands use are re-exported here.
from memsearch_fast.recall.search import APPROX_TOKENIZER as APPROX_TOKENIZER
from memsearch_fast.recall.search import SNIPPET_CHARS as SNIPPET_CHARS
from memsearch_fast.recall.search import approx_tokens as approx_tokens
from memsearch_fast.recall.search import format_search as format_search
from memsearch_fast.recall.search import json_default
from memsearch_fast.recall.search import plural as _plural
from memsearch_fast.recall.search import render_search as render_search
from memsearch_fast.recall.search import to_json as to_json
from memsearch_fast.recall.search import token_counter as token_counter


class _Counts:
    """What a run has done so far, and the ETA both progress forms show.

    The work is the bytes of text the model reads (``Progress.work``), not
    chunks or files: chunks differ a hundredfold in length, the embed stage
    takes them sorted by length and a long one as its spans, and files are
    read well ahead of the model. The work still to come is what is queued
    plus what the files not yet read will queue (their bytes at the work per
    byte of the files read so far), done at the rate since the first text
    was queued. Until some work is done the ETA is unknown (None), and 0 once
    every file is read and every queued chunk embedded. A run that reports
    no work (a service of an older version) is measured in chunks and files.
    """

    def __init__(self) -> None:
        self.files = self.files_done = self.chunks = self.embedded = 0
        self.size = self.size_done = self.text = self.text_done = 0
        self.started = 0.0
        self.queued_at: float | None = None

    def read(self, files: int, chunks: int, size: int) -> None:
        self.files_done += files
        self.chunks += chunks
        self.size_done += size

    def work(self, queued: int, done: int, now: float) -> None:
        self.text += queued
        self.text_done += done
        if queued and self.queued_at is None:
            self.queued_at = now

    def rate(self, now: float) -> float:
        return self.embedded / max(now - self.started, 1e-6)

    def fraction(self) -> float:
        """The share of the run's work done (files read, before anything is queued)."""
        expected = self.expected()
        if expected:
            return min(1.0, (self.text_done if self.text else self.embedded) / expected)
        return self.files_done / self.files if self.files else 1.0

    def expected(self) -> float:
        """The work of the whole run: bytes of text (chunks, when no work is reported)."""
        if not self.text:
            return self.chunks / self.files_done * self.files if self.files_done else 0.0
        if self.files_done >= self.files:
            return float(self.text)
        if self.size and self.size_done:
            return self.text + self.text / self.size_done * max(0, self.size - self.size_done)
        return self.text / max(self.files_done, 1) * self.files

    def eta(self, now: float) -> float | None:
        done = self.text_done if self.text else self.embedded
        left = max(0.0, self.expected() - done)
        if not left and self.files_done >= self.files:
            return 0.0
        if done <= 0:
            return None
        took = now - (self.queued_at if self.queued_at is not None else self.started)
        return round(left * max(took, 1e-6) / done, 1)


def _clock(seconds: float | None) -> str:
    if seconds is None:
        return "estimating"
    s = int(seconds + 0.5)
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"


class RichProgress:
    """A live bar on stderr: files read, chunks queued and embedded, chunks/s, ETA."""

    def __init__(self, stream: TextIO | None = None) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn

        self._progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            TaskProgressColumn(),
            TextColumn("{task.fields[detail]}"),
            TimeElapsedColumn(),
            TextColumn("ETA {task.fields[eta]}"),
            console=Console(file=stream or sys.stderr),
            transient=True,
        )
        self._task: Any = None
        self._spans: Any = None
        self._spans_started = 0.0
        self._counts = _Counts()

    def start(self, files: int, size: int = 0) -> None:
        self._counts.files, self._counts.size = files, size
        self._counts.started = time.perf_counter()
        # The bar is the share of the work done (bytes of text embedded), in thousandths.
        self._task = self._progress.add_task("indexing", total=1000, detail="", eta="estimating")
        self._progress.start()

    def files_done(self, files: int, chunks: int, size: int = 0) -> None:
        self._counts.read(files, chunks, size)
        self._update()

    def chunks_embedded(self, n: int) -> None:
        self._counts.embedded += n
        self._update()

    def work(self, queued: int, done: int) -> None:
        self._counts.work(queued, done, time.perf_counter())
        self._update()

    def _update(self) -> None:
        c, now = self._counts, time.perf_counter()
        self._progress.update(
            self._task,
            completed=round(c.fraction() * 1000),
            detail=f"{c.files_done}/{c.files} files read, {c.embedded}/{c.chunks} chunks embedded "
            f"({c.rate(now):.0f}/s)",
            eta=_clock(c.eta(now)),
        )

    def spans_done(self, done: int, total: int) -> None:
        now = time.perf_counter()
        if self._spans is None:  # the span pass: a second bar once the chunks are written
            self._spans = self._progress.add_task("span vectors", total=total, detail="chunks", eta="estimating")
            self._spans_started = now
        took = now - self._spans_started
        eta = _clock((total - done) * took / done) if done and took > 0 else "estimating"
        self._progress.update(self._spans, completed=done, eta=eta)

    def finish(self) -> None:
        self._progress.stop()


class JsonProgress:
    """Progress for tools: a JSON line on stderr at most every ``interval`` seconds.

    ``{"event": "progress", "files_done", "files", "chunks", "embedded",
    "chunks_per_s", "done", "eta_s"}``: files read, the chunks they queued for
    embedding, those embedded, the share of the work done and the ETA of
    :class:`_Counts`; during the span
    pass also ``span_chunks_done`` and ``span_chunks``.
    """

    def __init__(self, stream: TextIO | None = None, interval: float = 2.0) -> None:
        self._stream = stream or sys.stderr
        self._interval = interval
        self._counts = _Counts()
        self._spans: tuple[int, int] | None = None
        self._last = 0.0

    def start(self, files: int, size: int = 0) -> None:
        self._counts.files, self._counts.size = files, size
        self._counts.started = self._last = time.perf_counter()

    def files_done(self, files: int, chunks: int, size: int = 0) -> None:
        self._counts.read(files, chunks, size)
        self._maybe_emit()

    def chunks_embedded(self, n: int) -> None:
        self._counts.embedded += n
        self._maybe_emit()

    def work(self, queued: int, done: int) -> None:
        self._counts.work(queued, done, time.perf_counter())
        self._maybe_emit()

    def spans_done(self, done: int, total: int) -> None:
        self._spans = (done, total)
        if done in (0, total):
            self._emit(time.perf_counter())
        else:
            self._maybe_emit()

    def finish(self) -> None:
        self._emit(time.perf_counter())

    def _maybe_emit(self) -> None:
        now = time.perf_counter()
        if now - self._last >= self._interval:
            self._emit(now)

    def _emit(self, now: float) -> None:
        self._last = now
        c = self._counts
        line = {
            "event": "progress",
            "files_done": c.files_done,
            "files": c.files,
            "chunks": c.chunks,
            "embedded": c.embedded,
            "chunks_per_s": round(c.rate(now), 1),
            "done": round(c.fraction(), 4),
            "eta_s": c.eta(now),
        }
        if self._spans is not None:  # the span pass, after the chunks: chunks given their span vectors
            line["span_chunks_done"], line["span_chunks"] = self._spans
        try:
            self._stream.write(to_json_line(line) + "\n")
            self._stream.flush()
        except (OSError, ValueError):
            pass  # progress must never fail a run


def make_progress(
    quiet: bool = False, stream: TextIO | None = None, *, json_lines: bool = False
) -> NullProgress | RichProgress | JsonProgress:
    """A bar when a person is watching (stderr is a terminal), JSON lines for
    tools (``-j``), nothing with ``--quiet``."""
    stream = stream or sys.stderr
    if quiet:
        return NullProgress()
    if json_lines:
        return JsonProgress(stream)
    if not _isatty(stream):
        return NullProgress()
    return RichProgress(stream)


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


# -- JSON --------------------------------------------------------------------------------


def to_json_line(data: Any) -> str:
    """One compact JSON document on one line (event streams)."""
    return json.dumps(data, ensure_ascii=False, default=json_default, separators=(",", ":"))


# -- text forms ---------------------------------------------------------------------------


def format_get(result: dict[str, Any]) -> str:
    """The lines of a ``get``, as they are in the file."""
    return str(result.get("content", ""))


def format_expand(result: dict[str, Any]) -> str:
    out = [f"Source: {result['source']} (lines {result['start_line']}-{result['end_line']})"]
    if result.get("heading"):
        out.append(f"Heading: {result['heading']}")
    anchor = result.get("anchor")
    if anchor:
        out.append(f"Session: {anchor['session']}  Turn: {anchor['turn']}")
        out.append(f"Transcript: {anchor['transcript']}")
    out.append("")
    out.append(result.get("content", ""))
    return "\n".join(out)


def format_index_report(report: Any) -> str:
    """The summary on stdout; failures are listed separately (see `format_failures`)."""
    return "\n".join(
        [
            f"Indexed {_plural(report.indexed, 'chunk')}.",
            f"  files:   {report.files} scanned, {report.changed} changed, "
            f"{report.unchanged} unchanged, {len(report.failed)} failed",
            f"  chunks:  {report.embedded} embedded, {report.reused} reused, {report.deleted} deleted "
            f"({report.chunks} in scanned files)",
            f"  sources: {report.sources_removed} removed",
            *_spans(report),
            *_hidden(report),
            f"  reads:   {_reads(report)}",
            f"  time:    {report.seconds:.2f} s",
        ]
    )


def _spans(report: Any) -> list[str]:
    """The span pass's line, when it had work."""
    sp = getattr(report, "spans", None)
    if sp is None or not (sp.chunks or sp.removed):
        return []
    return [
        f"  sentence vectors: {sp.embedded} embedded, {sp.reused} reused, "
        f"in {_plural(sp.chunks, 'chunk')}; {sp.removed} removed"
    ]


def _hidden(report: Any) -> list[str]:
    """What the scan left out by rule (hidden folders and files), and how to index it."""
    paths = list(getattr(report, "hidden", None) or {})
    hidden = [os.path.basename(h) for h in paths]
    if not hidden:
        return []
    shown = ", ".join(printable(h) for h in hidden[:3]) + (f" and {len(hidden) - 3} more" if len(hidden) > 3 else "")
    return [
        f"  hidden:  {_plural(sum(report.hidden.values()), 'markdown file')} skipped in hidden folders and files "
        f"({shown}); name one as a path to index it (memsearch index PATH {printable(_near(paths[0]))})"
    ]


def _near(path: str) -> str:
    """*path* relative to the working directory when it lies under it."""
    rel = os.path.relpath(path)
    return path if rel.startswith("..") else rel


def _reads(report: Any) -> str:
    """Files read and chunked, against those the manifest let the run skip unread."""
    if report.manifest:
        skipped = max(0, report.files - report.read)
        return f"{_plural(report.read, 'file')} read, {skipped} unchanged since the last run skipped unread"
    return f"{_plural(report.read, 'file')} read (a full run: no record of a previous run to trust)"


def printable(text: str) -> str:
    """``text`` with control characters escaped (``\\n``, ``\\x1b``), and bytes a
    file name holds that are not UTF-8 (surrogate escapes) as ``\\xNN``: a
    file name printed in a list can neither start a line of its own nor move
    the cursor."""
    if text.isprintable():
        return text
    out = []
    for ch in text:
        code = ord(ch)
        if ch.isprintable() or ch == " ":
            out.append(ch)
        elif ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif 0xDC80 <= code <= 0xDCFF:  # an undecodable byte of a file name (surrogateescape)
            out.append(f"\\x{code - 0xDC00:02x}")
        elif code < 0x100:
            out.append(f"\\x{code:02x}")
        else:
            out.append(f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}")
    return "".join(out)


_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def format_failures(report: Any) -> list[str]:
    """One line per failed file (``path: reason``) and a note on lossy decoding;
    file names and reasons are :func:`printable`, so each entry stays one line."""
    lines: list[str] = []
    if report.failed:
        lines.append(f"{_plural(len(report.failed), 'file')} could not be indexed:")
        lines.extend(
            f"  {printable(path)}: {printable(reason)}" if path else f"  {printable(reason)}"
            for path, reason in report.failed
        )
    if report.invalid_utf8:
        lines.append(
            f"warning: {_plural(len(report.invalid_utf8), 'file')} had invalid UTF-8 "
            "(indexed with replacement characters):"
        )
        lines.extend(f"  {printable(path)}" for path in report.invalid_utf8)
    return lines


def index_report_dict(report: Any) -> dict[str, Any]:
    return dict(report.as_dict())


def format_stats(stats: dict[str, Any]) -> str:
    lines = [
        f"Total indexed chunks: {stats['chunks']}",
        f"Files: {stats['files']}",
        *(
            [f"Sentence vectors: {stats['span_vectors']} (in {_plural(stats.get('span_chunks', 0), 'chunk')})"]
            if stats.get("span_vectors")
            else []
        ),
        f"Dimension: {stats['dimension'] if stats['dimension'] is not None else '-'}",
        f"Collection: {stats['collection']}",
        f"URI: {stats['uri']}",
    ]
    if stats.get("model"):
        lines.append(f"Model (configured): {stats['provider']}/{stats['model']}")
    return "\n".join(lines)


def format_config(data: dict[str, Any], label: str) -> str:
    """A config dict as TOML under a ``# label`` line."""
    import tomli_w

    body = tomli_w.dumps(data) if data else "(empty)"  # TOML's own last newline kept, as 0.4.23 prints it
    return f"# {label}\n\n{body}"
