"""Dedup stage: decide, per file, which chunks need a vector.

Chunk ids hash (source, line range, content, model), so an unchanged file
yields exactly the ids already stored and costs no embedding and no Milvus
call. A changed file is diffed against its stored ids: new ids are embedded
(or reuse the stored vector of identical content, so a line inserted at the
top of a long file re-embeds only the chunks whose text changed), and ids
that disappeared are deleted.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from memsearch_fast._core import Chunk, FileChunks


@dataclass(slots=True)
class FilePlan:
    """What the rest of the pipeline must do for one file."""

    source: str
    new: list[tuple[str, Chunk]] = field(default_factory=list)  # (chunk id, chunk) to store
    stale: set[str] = field(default_factory=set)  # stored ids the file no longer yields
    had_rows: bool = False  # the file had rows before: its old vectors may be reused


class Dedup:
    """Holds the ids stored per source and diffs each file against them."""

    def __init__(self, model: str, stored: Iterable[tuple[str, str]], *, force: bool = False) -> None:
        self.model = model
        self.force = force
        self.by_source: dict[str, set[str]] = {}
        for chunk_id, source in stored:
            self.by_source.setdefault(source, set()).add(chunk_id)

    def plan(self, fc: FileChunks) -> FilePlan:
        """Diff one successfully read file against what is stored for it."""
        old = self.by_source.pop(fc.path, set())
        plan = FilePlan(source=fc.path, had_rows=bool(old))
        model = self.model
        seen: set[str] = set()
        for chunk in fc.chunks:
            cid = chunk.chunk_id(model)
            if cid in seen:
                continue  # identical chunk twice in one file: one row
            seen.add(cid)
            if self.force or cid not in old:
                plan.new.append((cid, chunk))
        plan.stale = old - seen
        return plan

    def keep(self, source: str) -> None:
        """A file that could not be read keeps its rows until it can."""
        self.by_source.pop(source, None)

    def orphans(self, roots: Iterable[str], *, unlisted: Iterable[str] = ()) -> list[str]:
        """Stored sources under a directory root that the scan did not see,
        except under directories the scan could not list."""
        prefixes = tuple(r.rstrip("/") + "/" for r in roots)
        if not prefixes:
            return []
        keep = tuple(d.rstrip("/") + "/" for d in unlisted)
        return sorted(s for s in self.by_source if s.startswith(prefixes) and not (keep and s.startswith(keep)))
