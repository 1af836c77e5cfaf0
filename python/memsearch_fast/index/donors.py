"""Content-addressed vectors: a chunk whose content already has a stored
vector from the run's model reuses it, whatever file that vector came from.

:class:`Donors` maps a content hash to the id of a stored row with that
content. It is fed by the manifest (every chunk of every recorded file: a
renamed, moved or copied file finds its text there), by the rows of vanished
and changed files read from the store when there is no manifest, by the
unchanged chunks of the files read, and by every row this run writes. A hit
is fetched by id and used only if its id is the one its source, lines, the
chunk's content hash and the run's model give (ids hash all four), so a
stale or foreign entry costs a lookup, never a wrong vector. Texts identical to one being embedded in this
run wait for it in the embed stage instead.

The index is compact: 8 bytes of content hash and the 8-byte id, 16 bytes a
chunk in sorted arrays, plus a small dict of recent additions merged into
them in bulk; a 100 MB corpus (~120,000 chunks) costs ~2 MB.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from memsearch_fast._core import compute_chunk_id, content_hash
from memsearch_fast.index.embed import Pending
from memsearch_fast.store.manifest import RECORD, pack

if TYPE_CHECKING:
    import numpy as np

    from memsearch_fast.index.protocol import IndexStore

#: Fields fetched to learn what a stored row holds.
LEARN_FIELDS = ["chunk_hash", "content", "source", "start_line", "end_line"]
#: Fields fetched to reuse a row's vector: its id is checked against the one
#: (source, lines, the chunk's content hash, the run's model) give, which
#: proves the content and the model without fetching the text.
FETCH_FIELDS = ["chunk_hash", "source", "start_line", "end_line", "embedding"]

#: Recent additions kept in a dict before they are merged into the sorted arrays.
_MERGE_AT = 65_536
#: Lookups answered by a scan of the records not yet sorted before they are
#: sorted: an edit's few chunks need no sort of every chunk the manifest
#: records (0.26 s at 1.2 M chunks, where a scan takes 0.03-0.1 s), and a run
#: of many lookups pays the sort once.
_SCANS_MAX = 2


class Donors:
    """Content hash → id of a stored row whose vector the run's model made."""

    def __init__(self, model: str) -> None:
        self.model = model
        self._keys: np.ndarray | None = None  # sorted content-hash prefixes (uint64)
        self._ids: np.ndarray | None = None  # the ids, in the same order
        self._recent: dict[bytes, bytes] = {}
        self._pending = bytearray()  # packed records not looked at yet: appending is all a run pays until a lookup
        self._loaders: list[Callable[[], bytes]] = []
        self._scans = 0  # lookups answered by scans of the pending records so far
        # id of a chunk given a stored vector -> the id of the row it came from: where
        # the span pass finds the stored spans of a moved or copied chunk
        self.gave: dict[str, str] = {}

    def __len__(self) -> int:
        arrays = 0 if self._keys is None else len(self._keys)
        return arrays + len(self._recent) + len(self._pending) // RECORD

    # -- feeding -----------------------------------------------------------------------

    def defer(self, loader: Callable[[], bytes]) -> None:
        """Packed records to load at the first lookup (in a worker thread), if any comes."""
        self._loaders.append(loader)

    def add_packed(self, packed: bytes) -> None:
        self._pending += packed[: len(packed) - len(packed) % RECORD]

    def written(self, pairs: Iterable[tuple[str, str]]) -> None:
        """Rows this run wrote (and Milvus acknowledged): donors from now on."""
        self._pending += pack(pairs)

    def learn_rows(self, rows: Iterable[dict[str, Any]]) -> bytes:
        """Packed records of stored rows that the run's model made (checked by id)."""
        out = bytearray()
        for r in rows:
            h = content_hash(r["content"])
            cid = r["chunk_hash"]
            if len(cid) == 16 and cid == self._id(r, h):
                out += bytes.fromhex(h[:16]) + bytes.fromhex(cid)
        return bytes(out)

    async def learn(self, store: IndexStore, sources: list[str]) -> None:
        """Add the stored rows of ``sources`` (read page by page in a worker thread)."""
        if sources:
            packed = await asyncio.to_thread(
                lambda: b"".join(self.learn_rows(page) for page in store.iter_rows_for_sources(sources, LEARN_FIELDS))
            )
            self.add_packed(packed)

    def _absorb(self) -> None:
        """Make pending records searchable: into the dict while few, else one
        merge into the sorted arrays (so merges stay rare as the index grows)."""
        pending, self._pending = bytes(self._pending), bytearray()
        arrays = 0 if self._keys is None else len(self._keys)
        if len(self._recent) + len(pending) // RECORD < max(_MERGE_AT, arrays // 4):
            for i in range(0, len(pending), RECORD):
                self._recent[pending[i : i + 8]] = pending[i + 8 : i + RECORD]
            return
        import numpy as np

        extra = b"".join(k + v for k, v in self._recent.items()) + pending
        self._recent.clear()
        rec = np.frombuffer(extra, dtype=np.dtype([("h", ">u8"), ("i", ">u8")]))
        keys = rec["h"].astype(np.uint64)
        ids = rec["i"].astype(np.uint64)
        if self._keys is not None and self._ids is not None:
            keys = np.concatenate([self._keys, keys])
            ids = np.concatenate([self._ids, ids])
        order = np.argsort(keys, kind="stable")
        self._keys, self._ids = keys[order], ids[order]

    async def _load(self) -> None:
        loaders, self._loaders = self._loaders, []
        for loader in loaders:
            self.add_packed(await asyncio.to_thread(loader))

    # -- lookup ------------------------------------------------------------------------

    def lookup(self, hashes: list[str]) -> list[str | None]:
        """The donor id for each content hash, or None."""
        if self._pending and (self._scans >= _SCANS_MAX or len(self._pending) // RECORD < _MERGE_AT):
            self._absorb()
        out: list[str | None] = [None] * len(hashes)
        rest: list[int] = []
        for i, h in enumerate(hashes):
            hit = self._recent.get(bytes.fromhex(h[:16]))
            if hit is not None:
                out[i] = hit.hex()
            else:
                rest.append(i)
        if rest and self._keys is not None and self._ids is not None and len(self._keys):
            import numpy as np

            q = np.frombuffer(b"".join(bytes.fromhex(hashes[i][:16]) for i in rest), dtype=">u8").astype(np.uint64)
            pos = np.minimum(np.searchsorted(self._keys, q), len(self._keys) - 1)
            found = self._keys[pos] == q
            for j, i in enumerate(rest):
                if found[j]:
                    out[i] = int(self._ids[pos[j]]).to_bytes(8, "big").hex()
        rest = [i for i in rest if out[i] is None]
        if rest and self._pending:
            self._scans += 1
            self._scan(hashes, rest, out)
        return out

    def _scan(self, hashes: list[str], rest: list[int], out: list[str | None]) -> None:
        """Look the hashes at *rest* up in the records not yet sorted (first one wins, as in the arrays)."""
        import numpy as np

        rec = np.frombuffer(bytes(self._pending), dtype=np.dtype([("h", ">u8"), ("i", ">u8")]))
        keys = rec["h"].astype(np.uint64)
        q = np.frombuffer(b"".join(bytes.fromhex(hashes[i][:16]) for i in rest), dtype=">u8").astype(np.uint64)
        qs = np.sort(q)
        pos = np.minimum(np.searchsorted(qs, keys), len(qs) - 1)
        first: dict[int, int] = {}
        for j in np.flatnonzero(qs[pos] == keys).tolist():
            first.setdefault(int(keys[j]), int(rec["i"][j]))
        for i, key in zip(rest, q.tolist(), strict=True):
            hit = first.get(key)
            if hit is not None:
                out[i] = hit.to_bytes(8, "big").hex()

    async def resolve(self, store: IndexStore, items: list[Pending]) -> tuple[list[Pending], list[Pending]]:
        """Split ``items`` into those given a stored vector and those still to embed."""
        if not items:
            return [], []
        if self._loaders:
            await self._load()
        if not len(self):
            return [], items
        wanted: dict[str, list[Pending]] = {}
        rest: list[Pending] = []
        for p, cid in zip(items, self.lookup([p.chunk.content_hash for p in items]), strict=True):
            if cid is None:
                rest.append(p)
            else:
                wanted.setdefault(cid, []).append(p)
        if not wanted:
            return [], rest
        rows = await asyncio.to_thread(store.rows_for_ids, list(wanted), FETCH_FIELDS)
        found = {r["chunk_hash"]: r for r in rows}
        reused: list[Pending] = []
        for cid, ps in wanted.items():
            r = found.get(cid)
            for p in ps:
                if r is not None and cid == self._id(r, p.chunk.content_hash):
                    p.vector = list(r["embedding"])
                    reused.append(p)
                    self.gave[p.chunk_id] = cid
                else:
                    rest.append(p)
        return reused, rest

    def _id(self, row: dict[str, Any], content_hash_hex: str) -> str:
        return compute_chunk_id(row["source"], row["start_line"], row["end_line"], content_hash_hex, self.model)
