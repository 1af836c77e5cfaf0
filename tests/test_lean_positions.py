"""A refreshed lean copy's positions (:class:`memsearch_fast.store.copy.lean.Shifted`)
are those a dict of its ids gives, through any chain of refreshes."""

from __future__ import annotations

import random

from memsearch_fast.store.copy.lean import Shifted


def test_positions_shifted_through_refreshes_are_a_dicts() -> None:
    rng = random.Random(3)
    ids = [f"{i:016x}" for i in range(500)]
    index: dict[str, int] | Shifted = {cid: i for i, cid in enumerate(ids)}
    fresh = 1000
    for _ in range(20):  # each refresh: some rows dropped (a changed file's), its new rows appended
        removed = sorted(rng.sample(range(len(ids)), rng.randint(0, 12)))
        kept = [cid for i, cid in enumerate(ids) if i not in set(removed)]
        dropped = [ids[i] for i in removed]
        new = [f"{fresh + j:016x}" for j in range(rng.randint(0, 9))]
        fresh += len(new)
        ids = kept + new
        index = Shifted(index, removed, {cid: len(kept) + j for j, cid in enumerate(new)}, ids)
        want = {cid: i for i, cid in enumerate(ids)}
        assert dict(index.items()) == want
        assert len(index) == len(ids)
        assert not any(cid in index for cid in dropped)
        gone = f"{fresh + 5:016x}"
        assert gone not in index and index.get(gone) is None and 7 not in index
    assert isinstance(index, Shifted) and index.depth == 20
