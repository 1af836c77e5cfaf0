"""The update hint on SessionStart's status line, without ever waiting on the network.

memsearch-fast is not on PyPI, so there is no public "latest version" to ask.
What the hint compares the installed package (``__version__``) with:

- the version of the plugin the hooks run from, a local file: Claude Code's
  plugin manifest (``$CLAUDE_PLUGIN_ROOT/.claude-plugin/plugin.json``), the
  OpenCode or OpenClaw plugin's ``package.json``, or for Codex the clone's
  ``pyproject.toml`` (``$MEMSEARCH_PLUGIN_ROOT`` names the folder). A newer
  plugin (a marketplace update, a ``git pull`` of the checkout) than the
  installed command means the package was not reinstalled;
- only when ``MEMSEARCH_UPDATE_URL`` names one, a package index's JSON
  document (PyPI's ``/pypi/<name>/json`` shape, or ``{"version": "…"}``). The
  hook never fetches it: it reads the answer cached in
  ``~/.memsearch/cache/update-check.json`` and, when that is missing, for
  another URL or 24 h old, starts ``python -m memsearch_fast.agents.update``
  detached, which asks with a 3 s timeout and writes the cache. Unset (the
  default) or ``MEMSEARCH_OFFLINE=1``: no network at all.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from pathlib import Path

from memsearch_fast.config import environment

CACHE = "~/.memsearch/cache/update-check.json"
#: How long an answer of the index (or its failure) is kept before asking again.
MAX_AGE_S = 24 * 3600
FETCH_TIMEOUT_S = 3.0
REINSTALL = "reinstall from the clone: pipx install --force . (or uv tool install --force .)"
_VERSION = re.compile(r"v?(\d+(?:\.\d+)*)(.*)")
_PRE = re.compile(r"[.\-_]?(a|b|c|rc|alpha|beta|pre|preview|dev)\d*", re.I)


def parse(version: str) -> tuple[tuple[int, ...], int] | None:
    """A sortable form of *version* (a pre-release before its release); None if it is none."""
    m = _VERSION.fullmatch(version.strip())
    if not m:
        return None
    parts = [int(p) for p in m.group(1).split(".")]
    parts += [0] * (4 - len(parts))
    return tuple(parts), 0 if _PRE.match(m.group(2)) else 1


def newer(candidate: str, installed: str) -> bool:
    a, b = parse(candidate), parse(installed)
    return a is not None and b is not None and a > b


def _manifest_version(path: str) -> str:
    """The ``version`` of a JSON manifest ('' when there is none)."""
    try:
        with open(path, encoding="utf-8") as f:
            value = json.load(f).get("version", "")
    except (OSError, ValueError, AttributeError):
        return ""
    return value if isinstance(value, str) else ""


_PROJECT_VERSION = re.compile(r'(?ms)^\[project\]\s*$.*?^version\s*=\s*"([^"]+)"')


def _clone_version(root: str) -> str:
    """The package version of the clone a plugin folder (``<clone>/hooks/<agent>``) belongs to."""
    try:
        with open(os.path.join(root, os.pardir, os.pardir, "pyproject.toml"), encoding="utf-8") as f:
            m = _PROJECT_VERSION.search(f.read(1 << 16))
    except OSError:
        return ""
    return m.group(1) if m else ""


def plugin_version(env: dict[str, str] | os._Environ[str] = os.environ) -> str:
    """The version of the plugin the hook runs from ('' when none): Claude Code's manifest
    (``$CLAUDE_PLUGIN_ROOT``); else ``$MEMSEARCH_PLUGIN_ROOT``, which the OpenCode and OpenClaw
    plugins (their ``package.json``) and the Codex hooks (the clone's ``pyproject.toml``) set."""
    root = env.get("CLAUDE_PLUGIN_ROOT", "")
    if root:
        return _manifest_version(os.path.join(root, ".claude-plugin", "plugin.json"))
    root = environment.text("MEMSEARCH_PLUGIN_ROOT", env)
    if not root:
        return ""
    return _manifest_version(os.path.join(root, "package.json")) or _clone_version(root)


def _cache_path() -> Path:
    return Path(os.path.expanduser(CACHE))


def _read_cache() -> dict[str, object]:
    try:
        value = json.loads(_cache_path().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def _write_cache(entry: dict[str, object]) -> None:
    from memsearch_fast._os import write_atomic

    path = _cache_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, (json.dumps(entry) + "\n").encode("utf-8"), mode=0o600, fsync=False)


def index_version(url: str, now: float | None = None) -> str:
    """The index's version as last cached for *url*; a refresh is started (detached) when
    the cache is missing, for another URL, or older than :data:`MAX_AGE_S`."""
    now = time.time() if now is None else now
    entry = _read_cache()
    checked = entry.get("checked_at")
    fresh = entry.get("url") == url and isinstance(checked, (int, float)) and 0 <= now - checked < MAX_AGE_S
    if not fresh and not environment.flag("MEMSEARCH_OFFLINE"):
        _write_cache({"url": url, "checked_at": now, "pending": True})  # one refresh per 24 h, even if it fails
        _start_refresh(url)
        return ""
    latest = entry.get("latest")
    return latest if fresh and isinstance(latest, str) else ""


def _start_refresh(url: str) -> None:
    import subprocess

    subprocess.Popen(
        [sys.executable, "-m", "memsearch_fast.agents.update", url],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        close_fds=True,
    )


def hint(installed: str) -> str:
    """The status line's update note ('' when up to date or unknown); never raises."""
    try:
        shipped = plugin_version()
        if shipped and newer(shipped, installed):
            return f"update: the plugin is v{shipped}, the installed package v{installed}; {REINSTALL}"
        url = environment.text("MEMSEARCH_UPDATE_URL").strip()
        if url:
            latest = index_version(url)
            if latest and newer(latest, installed):
                return f"update: v{latest} available (MEMSEARCH_UPDATE_URL)"
    except Exception:  # noqa: BLE001 - a hint must never cost the session its status line
        return ""
    return ""


def refresh(url: str) -> int:
    """Ask the index once (3 s at most) and cache its version or the failure."""
    import urllib.request

    entry: dict[str, object] = {"url": url, "checked_at": time.time()}
    try:
        with urllib.request.urlopen(url, timeout=FETCH_TIMEOUT_S) as response:
            data = json.loads(response.read(1 << 20))
        info = data.get("info") if isinstance(data.get("info"), dict) else data
        version = info.get("version")
        if not isinstance(version, str) or parse(version) is None:
            raise ValueError("no version in the answer")
        entry["latest"] = version
    except Exception as exc:  # noqa: BLE001 - recorded; the hint just stays silent
        entry["error"] = f"{type(exc).__name__}: {exc}"[:300]
    _write_cache(entry)
    return 0 if "latest" in entry else 1


if __name__ == "__main__":
    sys.exit(refresh(sys.argv[1]) if len(sys.argv) == 2 else 2)
