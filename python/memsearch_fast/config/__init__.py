"""Layered configuration for the `memsearch` command.

Precedence, lowest to highest:

1. built-in defaults;
2. ``--default-collection`` (a fallback that integrations pass; any
   configured collection wins over it);
3. the global file ``~/.memsearch/config.toml`` (``$HOME`` is honoured);
4. the project file ``.memsearch.toml`` in the current directory, limited to
   low-risk indexing keys (:mod:`memsearch_fast.config.files`);
5. command-line flags.

String values of the form ``env:VAR`` are read from the environment when the
configuration is used, so files need not hold secrets. Secrets are masked
whenever configuration is shown (:mod:`memsearch_fast.config.display`). The
keys, defaults and parsers are in :mod:`memsearch_fast.config.schema`. Only
the standard library is imported at import time, so that CLI start-up stays fast.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memsearch_fast.config.files import (
    deep_merge,
    defaults,
    filter_project,
    get_path,
    global_config_path,
    load_file,
    parse_value,
    project_config_path,
    save_file,
    set_path,
)
from memsearch_fast.config.schema import (
    DEFAULT_MODELS,
    NAMED_SCHEMA,
    PROJECT_ALLOWED,
    ConfigError,
    canonical_key,
    entry,
    lazy_env,
    outside_project_range,
    resolve_env_ref,
    unknown_key,
)

if TYPE_CHECKING:
    # Loaded when a configuration is resolved: building its dataclasses costs start-up time.
    from memsearch_fast.config.settings import Settings

__all__ = [
    "ConfigError",
    "get_value",
    "merged",
    "resolve",
    "set_value",
]


def resolve(
    overrides: Mapping[str, Any] | None = None,
    *,
    default_collection: str | None = None,
    resolve_env: bool = True,
    warn: Callable[[str], None] | None = None,
) -> Settings:
    """The effective configuration (arguments as :func:`merged` takes them)."""
    from memsearch_fast.config.settings import Settings

    return Settings.from_dict(
        merged(overrides, default_collection=default_collection, resolve_env=resolve_env, warn=warn)
    )


def merged(
    overrides: Mapping[str, Any] | None = None,
    *,
    default_collection: str | None = None,
    resolve_env: bool = True,
    warn: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """The effective configuration as a nested dict, as ``config get`` and
    ``config list`` show it (keys the schema does not know included).

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
            set_path(result, key, parse_value(key, value, "command-line option") if entry(key) else value)
    _complete_named_providers(result)
    if resolve_env:
        result = _resolve_env(result)
    if not get_path(result, "embedding.model"):
        provider = str(get_path(result, "embedding.provider")).strip().lower()
        set_path(result, "embedding.model", DEFAULT_MODELS.get(provider, ""))
    return result


def _complete_named_providers(cfg: dict[str, Any]) -> None:
    """``llm.providers`` always present, each named provider with all its
    fields (unset ones empty), so resolved output has memsearch 0.4.23's shape."""
    llm = cfg.setdefault("llm", {})
    providers = llm.setdefault("providers", {})
    if not isinstance(providers, dict):
        return
    empty = {key.rsplit(".", 1)[1]: default for key, (default, _) in NAMED_SCHEMA.items()}
    for name, spec in providers.items():
        if isinstance(spec, dict):
            providers[name] = {**empty, **spec}


def _resolve_env(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out[k] = _resolve_env(v, key + ".")
        elif isinstance(v, str) and not lazy_env(key):
            out[k] = resolve_env_ref(v, key)
        else:
            out[k] = v
    return out


def get_value(cfg: Mapping[str, Any], key: str) -> Any:
    """A value by dotted key; a section name returns the section."""
    try:
        return get_path(cfg, canonical_key(key))
    except KeyError:
        raise unknown_key(key) from None


def set_value(key: str, raw: Any, *, project: bool = False) -> tuple[Any, Path]:
    """Validate *raw* for *key*, write it to the global or project file and
    return the stored value and the file written."""
    key = canonical_key(key)
    if entry(key) is None:
        raise unknown_key(key)
    if project and key not in PROJECT_ALLOWED:
        raise ConfigError(
            f"a project file may not set {key}; allowed there: {', '.join(sorted(PROJECT_ALLOWED))} "
            "(write it to the global config instead)"
        )
    value = parse_value(key, raw, "command-line option")
    bounds = outside_project_range(key, value) if project else None
    if bounds is not None:
        raise ConfigError(
            f"a project file may set {key} only from {bounds[0]} to {bounds[1]} (write it to the global config)"
        )
    path = project_config_path() if project else global_config_path()
    data = load_file(path, check=False)
    set_path(data, key, value)
    save_file(data, path)
    return value, path
