"""What the CLI prints: the index progress bar and text forms of results.

rich is imported only when a progress bar is actually drawn (an interactive
terminal without ``--quiet``), so other commands never pay for it.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

from memsearch_fast.pipeline import NullProgress

#: Search hits longer than this are cut in text output (as memsearch 0.4.23 does).
SNIPPET_CHARS = 500


class RichProgress:
    """A live bar on stderr: files done, chunks seen and embedded, chunks/s, ETA."""

    def __init__(self, stream: TextIO | None = None) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self._progress = Progress(
            TextColumn("[bold]indexing"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("files"),
            TextColumn("{task.fields[chunks]} chunks, {task.fields[embedded]} embedded ({task.fields[rate]}/s)"),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            console=Console(file=stream or sys.stderr),
            transient=True,
        )
        self._task: Any = None
        self._chunks = 0
        self._embedded = 0
        self._started = 0.0

    def start(self, files: int) -> None:
        self._started = time.perf_counter()
        self._task = self._progress.add_task("index", total=files, chunks=0, embedded=0, rate="0")
        self._progress.start()

    def files_done(self, files: int, chunks: int) -> None:
        self._chunks += chunks
        self._progress.update(self._task, advance=files, chunks=self._chunks)

    def chunks_embedded(self, n: int) -> None:
        self._embedded += n
        elapsed = max(time.perf_counter() - self._started, 1e-6)
        self._progress.update(self._task, embedded=self._embedded, rate=f"{self._embedded / elapsed:.0f}")

    def finish(self) -> None:
        self._progress.stop()


class JsonProgress:
    """Progress for tools: a JSON line on stderr at most every ``interval`` seconds.

    ``{"event": "progress", "files_done", "files", "chunks", "embedded",
    "chunks_per_s", "eta_s"}``; the ETA assumes the files still to come hold
    as many chunks per file as those done, all to be embedded at the current rate.
    """

    def __init__(self, stream: TextIO | None = None, interval: float = 2.0) -> None:
        self._stream = stream or sys.stderr
        self._interval = interval
        self._files = self._files_done = self._chunks = self._embedded = 0
        self._started = self._last = 0.0

    def start(self, files: int) -> None:
        self._files = files
        self._started = self._last = time.perf_counter()

    def files_done(self, files: int, chunks: int) -> None:
        self._files_done += files
        self._chunks += chunks
        self._maybe_emit()

    def chunks_embedded(self, n: int) -> None:
        self._embedded += n
        self._maybe_emit()

    def finish(self) -> None:
        self._emit(time.perf_counter())

    def _maybe_emit(self) -> None:
        now = time.perf_counter()
        if now - self._last >= self._interval:
            self._emit(now)

    def _emit(self, now: float) -> None:
        self._last = now
        elapsed = max(now - self._started, 1e-6)
        rate = self._embedded / elapsed
        eta: float | None = None
        if self._files_done and rate > 0:
            expected = self._chunks / self._files_done * self._files
            eta = round(max(0.0, expected - self._embedded) / rate, 1)
        line = {
            "event": "progress",
            "files_done": self._files_done,
            "files": self._files,
            "chunks": self._chunks,
            "embedded": self._embedded,
            "chunks_per_s": round(rate, 1),
            "eta_s": eta,
        }
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


def _json_default(obj: Any) -> Any:
    """numpy scalars/arrays and other odd values from Milvus rows."""
    if hasattr(obj, "tolist"):
        return obj.tolist()
    if hasattr(obj, "item"):
        return obj.item()
    return str(obj)


def to_json(data: Any) -> str:
    return json.dumps(data, indent=2, ensure_ascii=False, default=_json_default)


def to_json_line(data: Any) -> str:
    """One compact JSON document on one line (event streams)."""
    return json.dumps(data, ensure_ascii=False, default=_json_default, separators=(",", ":"))


# -- text forms ---------------------------------------------------------------------------


def format_search(results: list[dict[str, Any]]) -> str:
    """Hits as memsearch 0.4.23 prints them; long ones end with an expand hint."""
    if not results:
        return "No results found."
    return "\n".join(_hit_block(i, r) for i, r in enumerate(results, 1))


def _hit_block(i: int, r: dict[str, Any]) -> str:
    out = ["", f"--- Result {i} (score: {float(r.get('score') or 0):.4f}) ---", f"Source: {r.get('source', '?')}"]
    if r.get("heading"):
        out.append(f"Heading: {r['heading']}")
    content = r.get("content") or ""
    if len(content) > SNIPPET_CHARS:
        out.append(content[:SNIPPET_CHARS])
        out.append(f"  ... [truncated, run 'memsearch expand {r.get('chunk_hash', '')}' for full content]")
    else:
        out.append(content)
    return "\n".join(out)


# -- search output tiers (--budget, --digest, --min-score) ------------------------------

#: Name reported for the fallback token count (providers without a local tokenizer).
APPROX_TOKENIZER = "chars/4 (approximation)"

TokenCounter = Callable[[str], int]


def approx_tokens(text: str) -> int:
    """Characters / 4, rounded up: the count for HTTP providers, whose tokenizer is remote."""
    return (len(text) + 3) // 4


def token_counter(provider: Any) -> tuple[TokenCounter, str]:
    """A token count with the embedding model's own tokenizer, and its name.

    The ONNX provider's loaded ``tokenizer.json`` is reused (copied once without
    its truncation and padding, so long hits count in full and the provider's
    own settings stay untouched); other providers fall back to
    :func:`approx_tokens`.
    """
    tok = getattr(provider, "_tokenizer", None)
    if tok is None or not hasattr(tok, "to_str"):
        return approx_tokens, APPROX_TOKENIZER
    full = type(tok).from_str(tok.to_str())
    full.no_truncation()
    full.no_padding()

    def count(text: str) -> int:
        return len(full.encode(text, add_special_tokens=False).ids)

    name = os.path.basename(str(getattr(provider, "model_name", "onnx")).rstrip(os.sep)) or "onnx"
    return count, f"{name} tokenizer.json"


def digest_line(r: dict[str, Any]) -> str:
    """``source:start-end heading score`` (the heading left out when empty)."""
    where = f"{r.get('source', '?')}:{r.get('start_line', 0)}-{r.get('end_line', 0)}"
    heading = " ".join(str(r.get("heading") or "").split())
    score = f"{float(r.get('score') or 0):.4f}"
    return f"{where} {heading} {score}" if heading else f"{where} {score}"


def digest_hit(r: dict[str, Any]) -> dict[str, Any]:
    """A hit without its content: what ``--digest -j`` carries."""
    keys = ("source", "start_line", "end_line", "heading", "score", "chunk_hash")
    return {k: r.get(k) for k in keys}


def render_search(
    results: list[dict[str, Any]],
    *,
    json_output: bool = False,
    digest: bool = False,
    budget: int | None = None,
    min_score: float | None = None,
    count: TokenCounter = approx_tokens,
    tokenizer: str = APPROX_TOKENIZER,
) -> str:
    """Search output with the agent tiers applied: ``--min-score`` first, then
    ``--budget`` over the hits as printed (each hit counted alone, in its text,
    digest or JSON form; whole hits kept in rank order, the rest dropped).

    Without a tier flag ``-j`` prints the bare list of memsearch 0.4.23; with
    one it prints an object: ``results`` (that list, or digests), ``dropped``
    (hits cut by the budget), ``below_min_score``, ``budget``, ``tokens`` (used
    by ``results``) and ``tokenizer`` (null without ``--budget``).
    """
    if not (digest or budget is not None or min_score is not None):
        return to_json(results) if json_output else format_search(results)
    below = 0
    if min_score is not None:
        kept = [r for r in results if float(r.get("score") or 0) >= min_score]
        below, results = len(results) - len(kept), kept
    items: list[Any] = [digest_hit(r) for r in results] if digest and json_output else results
    if json_output:
        blocks = [to_json(item) for item in items]
    elif digest:
        blocks = [digest_line(r) for r in results]
    else:
        blocks = [_hit_block(i, r) for i, r in enumerate(results, 1)]
    used, shown = 0, len(blocks)
    if budget is not None:
        for i, block in enumerate(blocks):
            n = count(block)
            if used + n > budget:
                shown = i
                break
            used += n
    dropped = len(blocks) - shown
    if json_output:
        return to_json(
            {
                "results": items[:shown],
                "dropped": dropped,
                "below_min_score": below,
                "budget": budget,
                "tokens": used if budget is not None else None,
                "tokenizer": tokenizer if budget is not None else None,
            }
        )
    lines = blocks[:shown] if shown else ["No results found."]
    if dropped:
        lines.append(
            f"[{_plural(dropped, 'more hit')} dropped to stay within --budget {budget} tokens "
            f"({used} used, {tokenizer})]"
        )
    return "\n".join(lines)


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


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def format_index_report(report: Any) -> str:
    """The summary on stdout; failures are listed separately (see `format_failures`)."""
    return "\n".join(
        [
            f"Indexed {report.indexed} chunks.",
            f"  files:   {report.files} scanned, {report.changed} changed, "
            f"{report.unchanged} unchanged, {len(report.failed)} failed",
            f"  chunks:  {report.embedded} embedded, {report.reused} reused, {report.deleted} deleted "
            f"({report.chunks} in scanned files)",
            f"  sources: {report.sources_removed} removed",
            f"  time:    {report.seconds:.2f} s",
        ]
    )


def format_failures(report: Any) -> list[str]:
    """One line per failed file (``path: reason``) and a note on lossy decoding."""
    lines: list[str] = []
    if report.failed:
        lines.append(f"{_plural(len(report.failed), 'file')} could not be indexed:")
        lines.extend(f"  {path}: {reason}" if path else f"  {reason}" for path, reason in report.failed)
    if report.invalid_utf8:
        lines.append(
            f"warning: {_plural(len(report.invalid_utf8), 'file')} had invalid UTF-8 "
            "(indexed with replacement characters):"
        )
        lines.extend(f"  {path}" for path in report.invalid_utf8)
    return lines


def index_report_dict(report: Any) -> dict[str, Any]:
    return {
        "indexed": report.indexed,
        "files": report.files,
        "changed": report.changed,
        "unchanged": report.unchanged,
        "failed": [{"path": p, "reason": r} for p, r in report.failed],
        "invalid_utf8": list(report.invalid_utf8),
        "chunks": report.chunks,
        "embedded": report.embedded,
        "reused": report.reused,
        "deleted": report.deleted,
        "sources_removed": report.sources_removed,
        "seconds": round(report.seconds, 3),
    }


def format_stats(stats: dict[str, Any]) -> str:
    lines = [
        f"Total indexed chunks: {stats['chunks']}",
        f"Files: {stats['files']}",
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

    body = tomli_w.dumps(data).rstrip() if data else "(empty)"
    return f"# {label}\n\n{body}"
