"""memsearch 0.4's own Claude Code plugin, left enabled beside this one.

Its SessionStart, Stop and SessionEnd hooks stop every Milvus Lite engine of the
user (they look for any ``milvus_lite/lib/milvus`` process), this product's
included, at each of their events. SessionStart says so once, with the
command that disables it.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

#: The plugin's key in Claude Code's ``enabledPlugins`` (name @ marketplace).
OLD_PLUGIN = "memsearch@memsearch-plugins"
_TOLD = "told"


def enabled_old_plugin(project_dir: str | None = None) -> str:
    """The key of memsearch 0.4's plugin when a Claude Code settings file enables it, else ""."""
    files = [Path.home() / ".claude" / "settings.json"]
    if project_dir:
        files += [Path(project_dir) / ".claude" / name for name in ("settings.json", "settings.local.json")]
    enabled = False
    for path in files:  # later files override earlier ones, as Claude Code reads them
        with contextlib.suppress(OSError, ValueError, AttributeError, TypeError):
            plugins = json.loads(path.read_text(encoding="utf-8")).get("enabledPlugins") or {}
            if OLD_PLUGIN in plugins:
                enabled = plugins[OLD_PLUGIN] is True
    return OLD_PLUGIN if enabled else ""


def notice(key: str) -> str:
    return (
        f"note: memsearch 0.4's plugin ({key}) is enabled too; its hooks stop every Milvus Lite engine, "
        f"this one's included: disable it with `claude plugin disable {key}`"
    )


def tell_once(project_dir: str | None = None) -> str:
    """:func:`notice` the first time the old plugin is seen enabled, else "" (what was
    told is kept in ``~/.memsearch/told``; a file that cannot be written says it again)."""
    from memsearch_fast._os import append_private, read_regular

    key = enabled_old_plugin(project_dir)
    if not key:
        return ""
    folder = Path.home() / ".memsearch"
    told: list[str] = []
    with contextlib.suppress(OSError, ValueError):
        told = read_regular(folder / _TOLD, 4096).decode("utf-8", "replace").split()
    if key in told:
        return ""
    with contextlib.suppress(OSError, ValueError):
        os.makedirs(folder, mode=0o700, exist_ok=True)
        append_private(folder, _TOLD, f"{key}\n".encode())
    return notice(key)
