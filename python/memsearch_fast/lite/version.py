"""Which Milvus Lite generation is installed."""

from __future__ import annotations


def milvus_lite_major() -> int | None:
    """Major version of the installed milvus-lite (None when absent)."""
    import importlib.metadata

    try:
        return int(importlib.metadata.version("milvus-lite").split(".")[0])
    except (importlib.metadata.PackageNotFoundError, ValueError):
        return None
