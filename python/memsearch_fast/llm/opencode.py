"""A clean room for ``opencode run``: the user's models and logins, none of their plugins.

OpenCode loads every plugin, MCP server, agent and instruction file it is
configured with, in the global config and in the project's. The nested run
that writes a summary needs only a model, so it gets:

- the user's own config (``~/.config/opencode/opencode.json[c]``,
  ``config.json``, ``$OPENCODE_CONFIG``, ``$OPENCODE_CONFIG_DIR``,
  ``$OPENCODE_CONFIG_CONTENT``), cut down to the keys that choose and reach a
  model (:data:`KEPT`), handed over in ``OPENCODE_CONFIG_CONTENT``, so nothing
  that may hold a key is written to disk;
- no project config (``OPENCODE_DISABLE_PROJECT_CONFIG``): a cloned
  repository may not pick the model or the endpoint its journals are sent to;
- config and data folders of its own (``~/.memsearch/cache/opencode-run``),
  so its session stays out of the user's session list; the login file
  (``auth.json``) is linked, never copied;
- that folder as its working directory, so no project instruction file is read.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from pathlib import Path
from typing import Any

#: The config keys a summary needs: which model, and how to reach it.
KEPT = ("provider", "model", "small_model", "enabled_providers", "disabled_providers")
ROOT = "~/.memsearch/cache/opencode-run"

_JSONC_TOKENS = re.compile(r'"(?:\\.|[^"\\])*"|//[^\n]*|/\*.*?\*/|,(?=\s*[}\]])', re.S)
_FILE_REF = re.compile(r"\{file:([^}]+)\}")


def read_jsonc(text: str) -> dict[str, Any]:
    """An OpenCode config text (JSON with comments and trailing commas); {} when unreadable."""
    stripped = _JSONC_TOKENS.sub(lambda m: m.group(0) if m.group(0).startswith('"') else "", text)
    try:
        value = json.loads(stripped)
    except (ValueError, RecursionError):
        return {}
    return value if isinstance(value, dict) else {}


def _absolute_refs(value: Any, base: Path) -> Any:
    """``{file:./key.txt}`` resolved against the config's folder, as OpenCode does, since the
    cut-down config no longer lives there."""
    if isinstance(value, str):

        def fix(m: re.Match[str]) -> str:
            ref = m.group(1)
            path = Path(ref).expanduser()
            return m.group(0) if ref.startswith("~") or path.is_absolute() else f"{{file:{base / path}}}"

        return _FILE_REF.sub(fix, value)
    if isinstance(value, dict):
        return {k: _absolute_refs(v, base) for k, v in value.items()}
    if isinstance(value, list):
        return [_absolute_refs(v, base) for v in value]
    return value


def _merge(into: dict[str, Any], other: dict[str, Any]) -> dict[str, Any]:
    out = dict(into)
    for key, value in other.items():
        old = out.get(key)
        out[key] = _merge(old, value) if isinstance(old, dict) and isinstance(value, dict) else value
    return out


def _files(env: dict[str, str]) -> list[Path]:
    """The user's config files, in OpenCode's order (later wins); never the project's."""
    config_home = Path(env.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    folders = [config_home / "opencode"]
    if env.get("OPENCODE_CONFIG_DIR"):
        folders.append(Path(env["OPENCODE_CONFIG_DIR"]).expanduser())
    found = [folders[0] / name for name in ("config.json", "opencode.json", "opencode.jsonc")]
    if env.get("OPENCODE_CONFIG"):
        found.append(Path(env["OPENCODE_CONFIG"]).expanduser())
    found += [folder / name for folder in folders[1:] for name in ("opencode.json", "opencode.jsonc")]
    return [path for path in found if path.is_file()]


def user_config(env: dict[str, str]) -> dict[str, Any]:
    """The user's OpenCode config, merged and cut down to :data:`KEPT`."""
    merged: dict[str, Any] = {}
    for path in _files(env):
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        merged = _merge(merged, _absolute_refs(read_jsonc(text), path.parent))
    if env.get("OPENCODE_CONFIG_CONTENT"):
        merged = _merge(merged, read_jsonc(env["OPENCODE_CONFIG_CONTENT"]))
    return {key: merged[key] for key in KEPT if key in merged}


def isolated(env: dict[str, str]) -> tuple[dict[str, str], Path]:
    """The environment and working directory for ``opencode run``, built from *env*."""
    root = Path(os.path.expanduser(ROOT))
    config_home, data_home = root / "config", root / "data"
    (config_home / "opencode").mkdir(parents=True, exist_ok=True)
    (data_home / "opencode").mkdir(parents=True, exist_ok=True)
    user_data = Path(env.get("XDG_DATA_HOME") or Path.home() / ".local" / "share") / "opencode"
    _link(data_home / "opencode" / "auth.json", user_data / "auth.json")
    content = user_config(env)
    out = {k: v for k, v in env.items() if k not in ("OPENCODE_CONFIG", "OPENCODE_CONFIG_DIR")}
    out.update(
        OPENCODE_CONFIG_CONTENT=json.dumps(content),
        OPENCODE_DISABLE_PROJECT_CONFIG="true",
        XDG_CONFIG_HOME=str(config_home),
        XDG_DATA_HOME=str(data_home),
    )
    return out, root


def _link(link: Path, target: Path) -> None:
    """*link* leads to *target* (the login stays where OpenCode keeps it), or is absent."""
    with contextlib.suppress(OSError):
        if os.readlink(link) == str(target) and target.is_file():
            return
    with contextlib.suppress(OSError):
        link.unlink(missing_ok=True)
        if target.is_file():
            link.symlink_to(target)
