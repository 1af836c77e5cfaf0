"""What an index run reports: its counts, and the progress it tells as it goes."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from memsearch_fast.index.span_pass import SpanReport


@dataclass
class IndexReport:
    """What an index run did; `failed` lists (path, one-line reason)."""

    files: int = 0
    changed: int = 0
    unchanged: int = 0
    failed: list[tuple[str, str]] = field(default_factory=list)
    invalid_utf8: list[str] = field(default_factory=list)
    chunks: int = 0
    embedded: int = 0
    reused: int = 0
    deleted: int = 0
    sources_removed: int = 0
    seconds: float = 0.0
    #: Files read and chunked (with a manifest, only those whose size or mtime changed).
    read: int = 0
    #: Whether a manifest was trusted (False: a full run, which writes a fresh one).
    manifest: bool = False
    #: The span pass (:mod:`memsearch_fast.index.span_pass`); None when it did not run.
    spans: SpanReport | None = None
    #: Hidden entries the scan skipped that hold markdown, and the markdown files under them.
    hidden: dict[str, int] = field(default_factory=dict)

    @property
    def indexed(self) -> int:
        """Chunks written in this run (embedded or with a reused vector)."""
        return self.embedded + self.reused

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> IndexReport:
        """The report :meth:`as_dict` gave (the service's run, read back by the CLI)."""
        from memsearch_fast.index.span_pass import SpanReport

        names = {f.name for f in dataclasses.fields(cls)} - {"failed", "spans"}
        spans = data.get("spans")
        return cls(
            **{k: v for k, v in data.items() if k in names},
            failed=[(str(f["path"]), str(f["reason"])) for f in data.get("failed") or []],
            spans=SpanReport(**spans) if isinstance(spans, dict) else None,
        )

    def as_dict(self) -> dict[str, Any]:
        """The report as ``index -j`` prints it (and the service streams it to ``watch``)."""
        return {
            "indexed": self.indexed,
            "files": self.files,
            "changed": self.changed,
            "unchanged": self.unchanged,
            "failed": [{"path": p, "reason": r} for p, r in self.failed],
            "invalid_utf8": list(self.invalid_utf8),
            "chunks": self.chunks,
            "embedded": self.embedded,
            "reused": self.reused,
            "deleted": self.deleted,
            "sources_removed": self.sources_removed,
            "read": self.read,
            "manifest": self.manifest,
            "spans": None if self.spans is None else dataclasses.asdict(self.spans),
            "hidden": dict(self.hidden),
            "seconds": round(self.seconds, 3),
        }


class Progress(Protocol):
    """Receives progress; the CLI draws it, library callers may ignore it.

    ``start(files, size)``: the files of the run and the bytes of those to read;
    ``files_done(files, chunks, size)``: files read and planned (or skipped
    as unchanged), how many of their chunks were queued for embedding, and
    the files' bytes;
    ``chunks_embedded(n)``: chunks embedded since (never more than queued);
    ``work(queued, done)``: the work, in UTF-8 bytes of the texts the model
    reads: queued, and embedded (or spared by a stored vector) since; chunks
    differ a hundredfold in length and a long one is embedded as its spans
    (optional, as ``spans_done``);
    ``spans_done(done, total)``: the span pass after the chunks, chunks given
    their span vectors of those it has to do (optional: called only where a
    progress object has it)."""

    def start(self, files: int, size: int = 0) -> None: ...
    def files_done(self, files: int, chunks: int, size: int = 0) -> None: ...
    def chunks_embedded(self, n: int) -> None: ...
    def finish(self) -> None: ...


class NullProgress:
    """Draws nothing: library callers, pipes, logs and ``--quiet``."""

    def start(self, files: int, size: int = 0) -> None: ...
    def files_done(self, files: int, chunks: int, size: int = 0) -> None: ...
    def chunks_embedded(self, n: int) -> None: ...
    def work(self, queued: int, done: int) -> None: ...
    def spans_done(self, done: int, total: int) -> None: ...
    def finish(self) -> None: ...


@dataclass
class RunCounts:
    """Counts a run as it goes, for those who cannot watch it drawn: a service's
    ``status`` says how far its watcher's run is."""

    files: int = 0
    read: int = 0
    queued: int = 0
    embedded: int = 0

    def start(self, files: int, size: int = 0) -> None:
        self.files = files

    def files_done(self, files: int, chunks: int, size: int = 0) -> None:
        self.read += files
        self.queued += chunks

    def chunks_embedded(self, n: int) -> None:
        self.embedded += n

    def finish(self) -> None: ...
