"""Facts about the machine that several stages size themselves by."""

from __future__ import annotations

import os


def available_cpus() -> int:
    """Cores this process may use (respects CPU affinity and container cpusets)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)
