"""Configuration files: TOML reading and writing, merging, and the project-file filter.

The project file ``.memsearch.toml`` in the current directory may set only
low-risk indexing keys: a repository you open must not be able to redirect
your Milvus URI, credentials, provider or model. TOML support is loaded when
a file is read or written, so that CLI start-up stays fast.
"""

from __future__ import annotations

import copy
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from memsearch_fast.config.display import mask
from memsearch_fast.config.schema import (
    PLUGIN_ALIASES,
    PROJECT_ALLOWED,
    SCHEMA,
    ConfigError,
    entry,
    is_secret,
    outside_project_range,
    unknown_key,
)

PROJECT_CONFIG_NAME = ".memsearch.toml"


def global_config_path() -> Path:
    """``~/.memsearch/config.toml``, resolved against ``$HOME`` at call time."""
    return Path(os.path.expanduser("~")) / ".memsearch" / "config.toml"


def project_config_path() -> Path:
    return Path.cwd() / PROJECT_CONFIG_NAME


# -- nested dict helpers -----------------------------------------------------------------


def defaults() -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, (default, _) in SCHEMA.items():
        set_path(out, key, copy.deepcopy(default))
    return out


def set_path(d: dict[str, Any], key: str, value: Any) -> None:
    """Set a dotted key in a nested dict, creating sections as needed."""
    parts = key.split(".")
    for part in parts[:-1]:
        nxt = d.get(part)
        if not isinstance(nxt, dict):
            nxt = d[part] = {}
        d = nxt
    d[parts[-1]] = value


def get_path(d: Mapping[str, Any], key: str) -> Any:
    cur: Any = d
    for part in key.split("."):
        if not isinstance(cur, Mapping) or part not in cur:
            raise KeyError(key)
        cur = cur[part]
    return cur


def flatten(d: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}}`` → ``{"a.b": 1}``."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out


def deep_merge(base: dict[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """Merge *override* into a copy of *base*; ``None`` means "not set"."""
    merged = dict(base)
    for k, v in override.items():
        if v is None:
            continue
        if isinstance(v, Mapping) and isinstance(merged.get(k), dict):
            merged[k] = deep_merge(merged[k], v)
        else:
            merged[k] = copy.deepcopy(v)
    return merged


# -- files -------------------------------------------------------------------------------


def load_file(path: Path, *, check: bool = True) -> dict[str, Any]:
    """A TOML file as a dict ({} when missing); with *check*, values of known
    keys are validated and normalised."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        import tomli as tomllib

    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except FileNotFoundError:
        return {}
    except IsADirectoryError:
        raise ConfigError(f"config path {path} is a directory") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"cannot parse {path}: {exc}") from None
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from None
    if not check:
        return data
    plugins = data.get("plugins")
    if isinstance(plugins, dict):
        for alias, platform in PLUGIN_ALIASES.items():
            if isinstance(plugins.get(alias), dict):
                table = plugins.pop(alias)
                plugins[platform] = deep_merge(table, plugins.get(platform) or {})
    for key, value in flatten(data).items():
        if entry(key) is not None:
            set_path(data, key, parse_value(key, value, str(path)))
    return data


def parse_value(key: str, value: Any, where: str) -> Any:
    """*value* converted and checked for *key* (strings from the command line
    become ints or lists); the error names the key and where it came from."""
    spec = entry(key)
    if spec is None:
        raise unknown_key(key)
    try:
        return spec[1](value)
    except ConfigError as exc:
        shown = mask(value) if is_secret(key) else value
        raise ConfigError(f"bad config value {key} = {shown!r} in {where}: {exc}") from None


def filter_project(data: Mapping[str, Any], where: str = PROJECT_CONFIG_NAME) -> tuple[dict[str, Any], list[str]]:
    """Split a project file into checked allowed values and the dotted keys it may
    not set (with the value and the range, for a value outside ``schema.PROJECT_RANGES``)."""
    allowed: dict[str, Any] = {}
    rejected: list[str] = []
    for key, value in flatten(data).items():
        if isinstance(value, str) and value.strip().startswith("env:"):
            # A repository's file must not read the environment (secrets).
            rejected.append(key)
        elif key in PROJECT_ALLOWED:
            checked = parse_value(key, value, where)
            bounds = outside_project_range(key, checked)
            if bounds is not None:
                rejected.append(f"{key} = {checked} (a project file: {bounds[0]}-{bounds[1]})")
                continue
            set_path(allowed, key, checked)
        else:
            rejected.append(key)
    return allowed, rejected


def save_file(data: Mapping[str, Any], path: Path) -> None:
    """Write *data* as TOML atomically (a crash never leaves half a file)."""
    import tomli_w

    from memsearch_fast._os import write_atomic

    path.parent.mkdir(parents=True, exist_ok=True)
    # Owner-only (the global file may hold an API key or token), never through a planted link.
    write_atomic(path, tomli_w.dumps(dict(data)).encode("utf-8"))
