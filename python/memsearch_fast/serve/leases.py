"""A watched root's leases: who holds one, and for how long.

A lease names its holder and, where known, its pid (with the pid's start
time, so a reused pid is another holder); it lapses when that process is gone
or when it is not renewed within its seconds, which a request may ask for up
to :data:`MAX_LEASE_S` (one asking for ever kept the service up for good).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

#: The longest a lease may ask to last between renewals.
MAX_LEASE_S = 3600.0


def pid_start(pid: int) -> str | None:
    """The start time of *pid* (clock ticks since boot), None when it is gone: a
    pid reused by another process is another holder."""
    from memsearch_fast._os import pid_alive

    if not pid_alive(pid):
        return None
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            return f.read().rsplit(")", 1)[-1].split()[19]
    except (OSError, IndexError):
        return "?"  # alive, start unknown (no /proc)


@dataclass
class Lease:
    holder: str
    pid: int | None
    started: str | None
    ttl: float
    expires: float  # monotonic

    def lapsed(self, now: float) -> str:
        if now >= self.expires:
            return "not renewed"
        if self.pid is not None and pid_start(self.pid) != self.started:
            return f"pid {self.pid} exited"
        return ""


def ttl_of(asked: Any, default: float) -> float:
    """A lease's seconds: *asked* when a number from 1 s to :data:`MAX_LEASE_S`, bounded to that, else *default*."""
    try:
        ttl = float(asked)
    except (TypeError, ValueError):
        return default
    return min(MAX_LEASE_S, max(1.0, ttl)) if math.isfinite(ttl) and ttl > 0 else default
