"""Layered configuration for the `memsearch` command.

Precedence, lowest to highest:

1. built-in defaults;
2. ``--default-collection`` (a fallback that integrations pass; any
   configured collection wins over it);
3. the global file ``~/.memsearch/config.toml`` (``$HOME`` is honoured);
4. the project file ``.memsearch.toml`` in the current directory, limited to
   low-risk indexing keys: a repository you open must not be able to redirect
   your Milvus URI, credentials, provider or model;
5. command-line flags.

String values of the form ``env:VAR`` are read from the environment when the
configuration is used, so files need not hold secrets. Secrets are masked
whenever configuration is shown. This module imports only the standard
library at import time (TOML support is loaded when a file is read or
written) so that CLI start-up stays fast.
"""

from __future__ import annotations

import copy
import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

PROJECT_CONFIG_NAME = ".memsearch.toml"
ENV_PREFIX = "env:"

# -- defaults: the only place each one is written ------------------------------------------

DEFAULT_MILVUS_URI = "~/.memsearch/milvus.db"
DEFAULT_COLLECTION = "memsearch_chunks"
DEFAULT_PROVIDER = "onnx"
#: Model used when ``embedding.model`` is empty, per provider.
DEFAULT_MODELS = {
    "onnx": "all-MiniLM-L6-v2",
    "openai": "text-embedding-3-small",
    "ollama": "nomic-embed-text",
}
DEFAULT_MAX_CHUNK_SIZE = 1500
#: Largest chunk, in characters: four UTF-8 bytes each still fit the store's
#: 65,535-byte content field, so a chunk is always stored under its own id.
MAX_CHUNK_SIZE_LIMIT = 16_383
DEFAULT_OVERLAP_LINES = 2
MAX_OVERLAP_LINES = 1000
DEFAULT_DEBOUNCE_MS = 1500


class ConfigError(ValueError):
    """A configuration file or value is invalid (one-line message)."""


def _str(value: Any) -> str:
    if not isinstance(value, str):
        raise ConfigError("expected a string")
    return value


def _int(minimum: int, maximum: int | None = None) -> Callable[[Any], int]:
    def check(value: Any) -> int:
        if isinstance(value, str):
            try:
                value = int(value.strip())
            except ValueError:
                raise ConfigError("expected an integer") from None
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError("expected an integer")
        if value < minimum:
            raise ConfigError(f"must be >= {minimum}")
        if maximum is not None and value > maximum:
            raise ConfigError(f"must be <= {maximum}")
        return value

    return check


def _str_list(value: Any) -> list[str]:
    """A list of strings; on the command line a JSON array or comma-separated text."""
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            import json

            try:
                value = json.loads(text)
            except ValueError:
                raise ConfigError("expected a JSON array of strings") from None
        else:
            return [p.strip() for p in text.split(",") if p.strip()]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError("expected a list of strings")
    return list(value)


# dotted key -> (default, parser). The file layout is ``[section] field = value``.
SCHEMA: dict[str, tuple[Any, Callable[[Any], Any]]] = {
    "milvus.uri": (DEFAULT_MILVUS_URI, _str),
    "milvus.token": ("", _str),
    "milvus.collection": (DEFAULT_COLLECTION, _str),
    "embedding.provider": (DEFAULT_PROVIDER, _str),
    "embedding.model": ("", _str),
    "embedding.batch_size": (0, _int(0)),
    "embedding.base_url": ("", _str),
    "embedding.api_key": ("", _str),
    # Bounded so a chunk always fits the store's content field and a project
    # file cannot make indexing explode.
    "chunking.max_chunk_size": (DEFAULT_MAX_CHUNK_SIZE, _int(1, MAX_CHUNK_SIZE_LIMIT)),
    "chunking.overlap_lines": (DEFAULT_OVERLAP_LINES, _int(0, MAX_OVERLAP_LINES)),
    "indexing.ignore_files": ([], _str_list),
    "indexing.exclude": ([], _str_list),
    "watch.debounce_ms": (DEFAULT_DEBOUNCE_MS, _int(0)),
    "reranker.model": ("", _str),
}

#: Keys a project file may set: nothing that changes where data goes, which
#: credentials are sent, or which code/model is fetched.
PROJECT_ALLOWED = frozenset(
    {
        "milvus.collection",
        "embedding.batch_size",
        "chunking.max_chunk_size",
        "chunking.overlap_lines",
        "indexing.ignore_files",
        "indexing.exclude",
        "watch.debounce_ms",
    }
)

_SECRET_FIELDS = ("api_key", "token", "password", "secret")


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


def _get(d: Mapping[str, Any], key: str) -> Any:
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
    for key, value in flatten(data).items():
        if key in SCHEMA:
            set_path(data, key, parse_value(key, value, str(path)))
    return data


def parse_value(key: str, value: Any, where: str) -> Any:
    """*value* converted and checked for *key* (strings from the command line
    become ints or lists); the error names the key and where it came from."""
    try:
        return SCHEMA[key][1](value)
    except ConfigError as exc:
        shown = mask(value) if is_secret(key) else value
        raise ConfigError(f"bad config value {key} = {shown!r} in {where}: {exc}") from None


def filter_project(data: Mapping[str, Any], where: str = PROJECT_CONFIG_NAME) -> tuple[dict[str, Any], list[str]]:
    """Split a project file into checked allowed values and the dotted keys it may not set."""
    allowed: dict[str, Any] = {}
    rejected: list[str] = []
    for key, value in flatten(data).items():
        if isinstance(value, str) and value.strip().startswith("env:"):
            # A repository's file must not read the environment (secrets).
            rejected.append(key)
        elif key in PROJECT_ALLOWED:
            set_path(allowed, key, parse_value(key, value, where))
        else:
            rejected.append(key)
    return allowed, rejected


def save_file(data: Mapping[str, Any], path: Path) -> None:
    """Write *data* as TOML atomically (a crash never leaves half a file)."""
    import tomli_w

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        # Owner-only: the global file may hold an API key or token.
        with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb") as f:
            tomli_w.dump(dict(data), f)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


# -- resolution --------------------------------------------------------------------------


def resolve(
    overrides: Mapping[str, Any] | None = None,
    *,
    default_collection: str | None = None,
    resolve_env: bool = True,
    warn: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """The effective configuration as a nested dict.

    *overrides* maps dotted keys to command-line values (``None`` = not
    given). *warn* receives one line when the project file sets keys it may
    not (they are ignored). With *resolve_env*, ``env:VAR`` values are
    replaced by the variable's value (an unset variable is an error).
    """
    result = defaults()
    if default_collection is not None:
        set_path(result, "milvus.collection", default_collection)
    result = deep_merge(result, load_file(global_config_path()))
    project_path = project_config_path()
    allowed, rejected = filter_project(load_file(project_path, check=False), str(project_path))
    if rejected and warn is not None:
        warn(
            f"warning: {project_path} may not set {', '.join(rejected)}; ignored "
            f"(use {global_config_path()} or a command-line flag)"
        )
    result = deep_merge(result, allowed)
    for key, value in (overrides or {}).items():
        if value is not None:
            set_path(result, key, parse_value(key, value, "command-line option") if key in SCHEMA else value)
    if resolve_env:
        result = _resolve_env(result)
    if not _get(result, "embedding.model"):
        provider = str(_get(result, "embedding.provider")).strip().lower()
        set_path(result, "embedding.model", DEFAULT_MODELS.get(provider, ""))
    return result


def resolve_env_ref(value: str, key: str = "") -> str:
    """``env:VAR`` → the value of ``$VAR``; other strings unchanged."""
    if not value.startswith(ENV_PREFIX):
        return value
    var = value[len(ENV_PREFIX) :].strip()
    env = os.environ.get(var)
    if not var or env is None:
        where = f" (for {key})" if key else ""
        raise ConfigError(f"environment variable {var!r}{where} is not set")
    return env


def _resolve_env(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out[k] = _resolve_env(v, key + ".")
        elif isinstance(v, str):
            out[k] = resolve_env_ref(v, key)
        else:
            out[k] = v
    return out


def get_value(cfg: Mapping[str, Any], key: str) -> Any:
    """A value by dotted key; a section name returns the section."""
    try:
        return _get(cfg, key)
    except KeyError:
        raise ConfigError(f"unknown config key {key!r}; known keys: {', '.join(SCHEMA)}") from None


def set_value(key: str, raw: Any, *, project: bool = False) -> tuple[Any, Path]:
    """Validate *raw* for *key*, write it to the global or project file and
    return the stored value and the file written."""
    if key not in SCHEMA:
        raise ConfigError(f"unknown config key {key!r}; known keys: {', '.join(SCHEMA)}")
    if project and key not in PROJECT_ALLOWED:
        raise ConfigError(
            f"a project file may not set {key}; allowed there: {', '.join(sorted(PROJECT_ALLOWED))} "
            "(write it to the global config instead)"
        )
    value = parse_value(key, raw, "command-line option")
    path = project_config_path() if project else global_config_path()
    data = load_file(path, check=False)
    set_path(data, key, value)
    save_file(data, path)
    return value, path


# -- display -----------------------------------------------------------------------------


def is_secret(key: str) -> bool:
    return key.rsplit(".", 1)[-1].lower() in _SECRET_FIELDS


def mask(value: Any) -> Any:
    """``sk-abcdef…`` → ``sk-***``; ``env:VAR`` references are not secrets and stay."""
    if not isinstance(value, str) or not value or value.startswith(ENV_PREFIX):
        return value
    return value[:3] + "***" if len(value) >= 12 else "***"


def masked(d: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """A copy of a config dict with every secret masked."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out[k] = masked(v, key + ".")
        else:
            out[k] = mask(v) if is_secret(key) else v
    return out


def for_display(cfg: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """A config dict (resolved with ``resolve_env=False``) as it may be shown:
    ``env:VAR`` references of ordinary keys are resolved, secrets are masked
    and their references are shown as written."""
    out: dict[str, Any] = {}
    for k, v in cfg.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out[k] = for_display(v, key + ".")
        elif is_secret(key):
            out[k] = mask(v)
        elif isinstance(v, str):
            out[k] = resolve_env_ref(v, key)
        else:
            out[k] = v
    return out
