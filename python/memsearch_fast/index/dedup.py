"""Dedup stage: decide, per file, which chunks need a vector.

Chunk ids hash (source, line range, content, model), so an unchanged file
yields exactly the ids already stored and costs no embedding and no Milvus
call (with a manifest it is not even read). A changed file is diffed against
its stored ids: new ids are embedded (or take the stored vector of identical
content, :mod:`.donors`, so a line inserted at the top of a long file
re-embeds only the chunks whose text changed), and ids that disappeared are
deleted.
"""

from __future__ import annotations

import os
from collections.abc import Container, Iterable, Mapping
from dataclasses import dataclass, field

from memsearch_fast._core import Chunk, FileChunks
from memsearch_fast.store.manifest import Entry


@dataclass(slots=True)
class FilePlan:
    """What the rest of the pipeline must do for one file."""

    source: str
    new: list[tuple[str, Chunk]] = field(default_factory=list)  # (chunk id, chunk) to store
    stale: set[str] = field(default_factory=set)  # stored ids the file no longer yields
    had_rows: bool = False  # the file had rows before: its old vectors may be reused
    pairs: list[tuple[str, str]] = field(default_factory=list)  # (content hash, chunk id) of every row it yields


class Dedup:
    """Holds the ids stored per source and diffs each file against them.

    Ids are held packed: the 8 bytes of each 16-hex-digit id, concatenated per
    source, ~10 bytes an id where a list of rows plus sets of strings cost
    ~330. A many-gigabyte index then needs tens of MB here, not gigabytes.
    Ids of any other form (a collection written by another tool) are kept as
    strings.
    """

    def __init__(self, model: str, stored: Iterable[tuple[str, str]] = (), *, force: bool = False) -> None:
        self.model = model
        self.force = force
        self.by_source: dict[str, bytes] = {}
        self.odd: dict[str, list[str]] = {}
        self.add(stored)

    def add(self, stored: Iterable[tuple[str, str]]) -> None:
        """Take in more stored ``(id, source)`` pairs (a run with a manifest
        asks only about files whose entries know none, a batch at a time)."""
        packed: dict[str, bytearray] = {}
        for chunk_id, source in stored:
            digest = _digest(chunk_id)
            if digest is None:
                self.odd.setdefault(source, []).append(chunk_id)
            else:
                buf = packed.get(source)
                if buf is None:
                    packed[source] = buf = bytearray()
                buf += digest
        while packed:  # one copy at a time
            source, buf = packed.popitem()
            self.by_source[source] = self.by_source.get(source, b"") + bytes(buf)
        for source in self.odd:
            self.by_source.setdefault(source, b"")

    def take_recorded(self, files: Iterable[FileChunks], entries: Mapping[str, Entry]) -> list[str]:
        """Take the ids a trusted manifest's entries recorded for ``files`` (a scan of
        the store by source costs in proportion to the corpus); returns the files
        whose entry knows none: the store must say."""
        known, ask = _recorded((fc.path for fc in files), entries)
        self.by_source.update(known)
        return ask

    def stored_ids(self, source: str) -> set[str]:
        """The ids stored for ``source`` (unpacked for one file at a time)."""
        buf = self.by_source.get(source, b"")
        ids = {buf[i : i + _DIGEST].hex() for i in range(0, len(buf), _DIGEST)}
        ids.update(self.odd.get(source, ()))
        return ids

    def plan(self, fc: FileChunks) -> FilePlan:
        """Diff one successfully read file against what is stored for it."""
        old = self.stored_ids(fc.path)
        self.keep(fc.path)
        plan = FilePlan(source=fc.path, had_rows=bool(old))
        model = self.model
        seen: set[str] = set()
        for chunk in fc.chunks:
            cid = chunk.chunk_id(model)
            if cid in seen:
                continue  # identical chunk twice in one file: one row
            seen.add(cid)
            plan.pairs.append((chunk.content_hash, cid))
            if self.force or cid not in old:
                plan.new.append((cid, chunk))
        plan.stale = old - seen
        return plan

    def keep(self, source: str) -> None:
        """Forget ``source``: seen, or unreadable (its rows stay until it can be read)."""
        self.by_source.pop(source, None)
        self.odd.pop(source, None)

    def orphans(
        self, roots: Iterable[str], *, unlisted: Iterable[str] = (), seen: Container[str] = frozenset()
    ) -> list[str]:
        """Stored sources under a directory root that the scan did not see
        (``seen``, or planned already), except under directories the scan
        could not list."""
        return vanished(self.by_source, roots, unlisted=unlisted, seen=seen)


def vanished(
    sources: Iterable[str], roots: Iterable[str], *, unlisted: Iterable[str] = (), seen: Container[str] = frozenset()
) -> list[str]:
    """The ``sources`` under a directory root that are not ``seen``, except
    under directories the scan could not list (files there may still exist),
    and except hidden files that still exist: the scan skips them by rule, so
    they came from a run of their own (the hooks' ``.memsearch/memory`` inside
    a project): ``memsearch index PROJECT`` into that collection removed the
    journals, and the hooks' next lazy sync put them back, run after run."""
    prefixes = tuple(r.rstrip("/") + "/" for r in roots)
    if not prefixes:
        return []
    keep = tuple(d.rstrip("/") + "/" for d in unlisted)
    return sorted(
        s
        for s in sources
        if s.startswith(prefixes)
        and s not in seen
        and not (keep and s.startswith(keep))
        and not (_hidden_under(s, prefixes) and os.path.lexists(s))
    )


def recorded_rows(
    sources: Iterable[str], entries: Mapping[str, Entry] | None
) -> tuple[dict[str, list[str]], list[str]]:
    """The stored ids of vanished ``sources`` as a trusted manifest's ``entries``
    recorded them (those with rows), and the sources whose entries know none: their
    rows are looked up in the store (all of them without a manifest)."""
    if entries is None:
        return {}, list(sources)
    known, ask = _recorded(sources, entries)
    return {
        s: [ids[i : i + _DIGEST].hex() for i in range(0, len(ids), _DIGEST)] for s, ids in known.items() if ids
    }, ask


def _recorded(sources: Iterable[str], entries: Mapping[str, Entry]) -> tuple[dict[str, bytes], list[str]]:
    """The packed ids each source's entry recorded, and the sources whose entries know none."""
    known: dict[str, bytes] = {}
    ask: list[str] = []
    for source in sources:
        entry = entries.get(source)
        ids = None if entry is None else entry.recorded_ids()
        if ids is None:
            ask.append(source)
        else:
            known[source] = ids
    return known, ask


def _hidden_under(source: str, prefixes: tuple[str, ...]) -> bool:
    """Whether *source* lies in a hidden file or directory below the root it is under."""
    root = max((p for p in prefixes if source.startswith(p)), key=len)
    return any(part.startswith(".") for part in source[len(root) :].split("/"))


_DIGEST = 8  # chunk ids are the first 16 hex digits of a SHA-256
_HEX = frozenset("0123456789abcdef")


def _digest(chunk_id: str) -> bytes | None:
    """The 8 bytes of a 16-digit lowercase hex id, or None for any other id."""
    if len(chunk_id) != 2 * _DIGEST or not _HEX.issuperset(chunk_id):
        return None
    return bytes.fromhex(chunk_id)
