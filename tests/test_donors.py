"""The donor index answers the same whether its records are sorted or scanned."""

from __future__ import annotations

import random

from memsearch_fast.index import donors as donors_mod
from memsearch_fast.index.donors import Donors
from memsearch_fast.store.manifest import pack


def _hex(rng: random.Random) -> str:
    return f"{rng.getrandbits(64):016x}"


def test_an_edit_scans_the_records_and_finds_what_the_sorted_index_finds() -> None:
    rng = random.Random(7)
    pairs = [(_hex(rng), _hex(rng)) for _ in range(donors_mod._MERGE_AT + 5_000)]
    pairs += [(pairs[10][0], _hex(rng)), (pairs[20][0], _hex(rng))]  # a content stored twice: the first wins
    queries = [pairs[i][0] for i in (0, 10, 20, 4_321, len(pairs) - 3)] + [_hex(rng) for _ in range(5)]

    scanned = Donors("m")
    scanned.add_packed(pack(pairs))
    got = scanned.lookup(queries)
    assert scanned._keys is None, "a few hashes are answered without sorting every record"

    sorted_ = Donors("m")
    sorted_.add_packed(pack(pairs))
    sorted_._absorb()
    assert sorted_._keys is not None
    want = sorted_.lookup(queries)
    assert got == want
    assert got[:5] == [pairs[i][1] for i in (0, 10, 20, 4_321, len(pairs) - 3)]
    assert got[5:] == [None] * 5

    # Past the scans' budget the records are sorted once, and answer the same.
    for _ in range(donors_mod._SCANS_MAX - 1):
        assert scanned.lookup(queries) == want and scanned._keys is None
    many = [pairs[i][0] for i in range(2_000)]
    assert scanned.lookup(many) == [pairs[i][1] for i in range(len(many))]
    assert scanned._keys is not None
    assert scanned.lookup(queries) == want
