"""Which turns are captured: a claim per turn, so a host that fires Stop twice for one
turn journals it once, and a PreCompact's mark on the turn it caught still running,
so that turn's Stop writes into the PreCompact's entry instead of a second one
(:func:`memsearch_fast.agents.journal.merge`). Files in ``.memsearch/turns/``,
named by a hash of the session and turn ids."""

from __future__ import annotations

import contextlib
import hashlib
import os
import time
from pathlib import Path

from memsearch_fast._os import read_regular, write_atomic

#: Claims of captured turns kept before the oldest are pruned, and the age they may reach then.
CLAIMS_KEPT = 500
CLAIM_MAX_AGE_S = 2 * 86400


def turn_file(memsearch_dir: str, session: str, turn: str) -> Path:
    return Path(memsearch_dir) / "turns" / hashlib.sha256(f"{session}\0{turn}".encode()).hexdigest()[:24]


def claim(memsearch_dir: str, session: str, turn: str) -> bool:
    """Claim one turn for capture; False when it was claimed already (a host may fire
    Stop twice for one turn, and its second capture would write a second entry)."""
    path = turn_file(memsearch_dir, session, turn)
    folder = path.parent
    folder.mkdir(parents=True, exist_ok=True)
    try:
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY | getattr(os, "O_NOFOLLOW", 0), 0o600))
    except FileExistsError:
        return False
    names = os.listdir(folder)
    if len(names) > CLAIMS_KEPT:
        old = time.time() - CLAIM_MAX_AGE_S
        for other in names:
            with contextlib.suppress(OSError):
                if (folder / other).stat().st_mtime < old:
                    (folder / other).unlink()
    return True


def claimed(memsearch_dir: str, session: str, turn: str) -> bool:
    """Whether *turn*'s Stop ran (its notes may still be on their way to the log)."""
    return turn_file(memsearch_dir, session, turn).is_file()


def mark_compacted(memsearch_dir: str, session: str, turn: str, anchor: str) -> None:
    """PreCompact caught *turn* before it ended, in its entry anchored to turn *anchor*."""
    with contextlib.suppress(OSError):
        marker = turn_file(memsearch_dir, session, turn).with_suffix(".compacted")
        marker.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(marker, anchor.encode("utf-8"))


def compacted(memsearch_dir: str, session: str, turn: str) -> str:
    """The turn a PreCompact's entry is anchored to, when it covered *turn* before it ended ('' if none)."""
    try:
        return (
            read_regular(turn_file(memsearch_dir, session, turn).with_suffix(".compacted"), 4096)
            .decode("utf-8", "replace")
            .strip()
        )
    except OSError:
        return ""
