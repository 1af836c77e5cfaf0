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

from memsearch_fast.errors import MemsearchError

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
    "voyage": "voyage-3-lite",
    "google": "gemini-embedding-001",
    "jina": "jina-embeddings-v4",
    "mistral": "mistral-embed",
    "local": "all-MiniLM-L6-v2",
}
DEFAULT_MAX_CHUNK_SIZE = 1500
#: Largest chunk, in characters: four UTF-8 bytes each still fit the store's
#: 65,535-byte content field, so a chunk is always stored under its own id.
MAX_CHUNK_SIZE_LIMIT = 16_383
DEFAULT_OVERLAP_LINES = 2
MAX_OVERLAP_LINES = 1000
DEFAULT_DEBOUNCE_MS = 1500
#: Results of a search (the CLI, the MCP tool, the search service), as memsearch 0.4.23.
DEFAULT_TOP_K = 5
#: Results of ``MemSearch.search`` and ``MilvusStore.search`` (the reference API's default).
API_TOP_K = 10
#: Where the manifest of a collection on a Milvus server lives (a local
#: database keeps its manifests beside the database file).
DEFAULT_MANIFEST_DIR = "~/.memsearch/manifests"
#: A file modified less than this many seconds before an index run started is
#: recorded without its mtime, so the next run reads it again: a second write
#: within the file system's timestamp granularity would keep size and mtime.
MANIFEST_RACY_SECONDS = 2.0
#: Chunks the embed stage sorts by length before cutting them into batches:
#: chunks of similar length share a batch, so the provider pads little.
EMBED_SORT_WINDOW = 2048
#: ``search.sync``: "off", or "lazy" (a search first re-indexes the files
#: changed since the last index of the collection's recorded paths).
SEARCH_SYNC_MODES = ("off", "lazy")
DEFAULT_SEARCH_SYNC = "off"


class ConfigError(MemsearchError, ValueError):
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


def _choice(*choices: str) -> Callable[[Any], str]:
    def check(value: Any) -> str:
        if isinstance(value, str) and value.strip().lower() in choices:
            return value.strip().lower()
        raise ConfigError(f"expected one of: {', '.join(choices)}")

    return check


def _milvus_uri(value: Any) -> str:
    """A local database path or a server URI; ``foo://bar`` is neither (it would
    become a directory ``foo:`` and a database ``bar`` in it)."""
    import re

    uri = _str(value)
    scheme = re.match(r"^([A-Za-z][A-Za-z0-9+.-]*)://", uri)
    if scheme and scheme.group(1).lower() not in ("http", "https", "tcp", "grpc"):
        raise ConfigError(
            f"unsupported Milvus URI scheme {scheme.group(1)!r}: use a local database path, "
            "http(s)://host:port or tcp://host:port"
        )
    return uri


def _bool(value: Any) -> bool:
    """A boolean; on the command line true/false, yes/no, on/off or 1/0."""
    if isinstance(value, str):
        word = value.strip().lower()
        if word in ("1", "true", "yes", "on"):
            return True
        if word in ("0", "false", "no", "off"):
            return False
    if not isinstance(value, bool):
        raise ConfigError("expected true or false")
    return value


#: LLM protocols (``llm.provider``, ``llm.providers.<name>.type``) and the model
#: each uses when none is configured: the reference's choices where it has one;
#: ``claude-code`` and ``codex`` are the host agents' own CLIs.
DEFAULT_LLM_MODELS = {
    "openai": "gpt-5-mini",
    "openai-compatible": "gpt-5-mini",
    "anthropic": "claude-sonnet-4-6",
    "gemini": "gemini-3-flash-preview",
    "ollama": "llama3.2",
    "claude-code": "haiku",
    "codex": "gpt-5.1-codex-mini",
}
#: Agent platforms with a ``[plugins.<platform>]`` table (``claude_code`` is
#: accepted for ``claude-code``, as the reference does).
PLUGIN_PLATFORMS = ("claude-code", "codex", "opencode", "openclaw", "dsh")
_PLUGIN_ALIASES = {"claude_code": "claude-code"}
_Spec = tuple[Any, Callable[[Any], Any]]  # (default, parser)


def _maintenance_task(**extra: _Spec) -> dict[str, _Spec]:
    return {
        "enabled": (False, _bool),
        "provider": ("native", _str),
        "model": ("", _str),
        "min_interval_hours": (24, _int(0)),
        "input_dir": (".memsearch/memory", _str),
        **extra,
    }


#: task -> field -> (default, parser), the same for every platform.
_PLUGIN_TASKS: dict[str, dict[str, _Spec]] = {
    "summarize": {"enabled": (True, _bool), "provider": ("", _str), "model": ("", _str)},
    "project_review": _maintenance_task(output_file=(".memsearch/PROJECT.md", _str)),
    "user_profile": _maintenance_task(output_file=(".memsearch/USER.md", _str)),
    "memory_to_skill": _maintenance_task(min_occurrences=(3, _int(0)), paths=([], _str_list)),
}

# dotted key -> (default, parser). The file layout is ``[section] field = value``.
SCHEMA: dict[str, tuple[Any, Callable[[Any], Any]]] = {
    "milvus.uri": (DEFAULT_MILVUS_URI, _milvus_uri),
    "milvus.token": ("", _str),
    "milvus.collection": (DEFAULT_COLLECTION, _str),
    "embedding.provider": (DEFAULT_PROVIDER, _str),
    "embedding.model": ("", _str),
    "embedding.batch_size": (0, _int(0)),
    "embedding.base_url": ("", _str),
    "embedding.api_key": ("", _str),
    # Deprecated by the reference in favour of [llm] and [prompts]; still read
    # (and listed where memsearch 0.4.23 lists them).
    "compact.llm_provider": ("openai", _str),
    "compact.llm_model": ("", _str),
    "compact.prompt_file": ("", _str),
    "compact.base_url": ("", _str),
    "compact.api_key": ("", _str),
    # Bounded so a chunk always fits the store's content field and a project
    # file cannot make indexing explode.
    "chunking.max_chunk_size": (DEFAULT_MAX_CHUNK_SIZE, _int(1, MAX_CHUNK_SIZE_LIMIT)),
    "chunking.overlap_lines": (DEFAULT_OVERLAP_LINES, _int(0, MAX_OVERLAP_LINES)),
    "indexing.ignore_files": ([], _str_list),
    "indexing.exclude": ([], _str_list),
    "watch.debounce_ms": (DEFAULT_DEBOUNCE_MS, _int(0)),
    "search.sync": (DEFAULT_SEARCH_SYNC, _choice(*SEARCH_SYNC_MODES)),
    "reranker.model": ("", _str),
    # The LLM that `compact` uses (empty provider: compact.llm_provider).
    "llm.provider": ("", _str),
    "llm.model": ("", _str),
    "llm.base_url": ("", _str),
    "llm.api_key": ("", _str),
    # Prompt template files; empty = the built-in prompt.
    **{
        f"prompts.{name}": ("", _str)
        for name in ("compact", "summarize", "project_review", "user_profile", "memory_to_skill")
    },
    **{
        f"plugins.{platform}.{task}.{field}": spec
        for platform in PLUGIN_PLATFORMS
        for task, task_fields in _PLUGIN_TASKS.items()
        for field, spec in task_fields.items()
    },
}
#: Keys with a free name in them (``*``): the named LLM providers that
#: ``plugins.<platform>.summarize.provider`` picks.
NAMED_SCHEMA: dict[str, _Spec] = {
    f"llm.providers.*.{field}": ("", _str) for field in ("type", "model", "base_url", "api_key")
}
#: Sections whose ``env:VAR`` values are read only when an LLM is called, so an
#: unset variable there does not break indexing or search.
_LAZY_ENV_SECTIONS = ("llm.", "compact.")

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
        "search.sync",
    }
)

_SECRET_FIELDS = ("api_key", "token", "password", "secret")


def canonical_key(key: str) -> str:
    """*key* with a plugin platform alias replaced (``plugins.claude_code.…`` → ``plugins.claude-code.…``)."""
    parts = key.split(".")
    if len(parts) > 1 and parts[0] == "plugins" and parts[1] in _PLUGIN_ALIASES:
        parts[1] = _PLUGIN_ALIASES[parts[1]]
    return ".".join(parts)


def _entry(key: str) -> _Spec | None:
    """The (default, parser) of a known key, named-provider keys included."""
    if key in SCHEMA:
        return SCHEMA[key]
    parts = key.split(".")
    if len(parts) == 4 and parts[2]:
        return NAMED_SCHEMA.get(".".join((parts[0], parts[1], "*", parts[3])))
    return None


def _unknown_key(key: str) -> ConfigError:
    """The error for an unknown key, naming the keys of its section (or the sections)."""
    parts = key.split(".")
    if parts[0] == "plugins":  # 100+ keys: describe them
        fields = ", ".join(_PLUGIN_TASKS.get(parts[2], {})) if len(parts) > 2 else ""
        return ConfigError(
            f"unknown config key {key!r}; plugin keys are plugins.<platform>.<task>.<field>, platform one of "
            f"{', '.join(PLUGIN_PLATFORMS)}, task one of {', '.join(_PLUGIN_TASKS)}"
            + (f"; {parts[2]} fields: {fields}" if fields else "")
        )
    known = [k for k in (*SCHEMA, *NAMED_SCHEMA) if k.split(".", 1)[0] == parts[0]]
    if not known:
        known = list(dict.fromkeys(k.split(".", 1)[0] for k in SCHEMA))
    return ConfigError(f"unknown config key {key!r}; known keys: {', '.join(known)}")


def _lazy_env(key: str) -> bool:
    return key.startswith(_LAZY_ENV_SECTIONS)


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
    plugins = data.get("plugins")
    if isinstance(plugins, dict):
        for alias, platform in _PLUGIN_ALIASES.items():
            if isinstance(plugins.get(alias), dict):
                table = plugins.pop(alias)
                plugins[platform] = deep_merge(table, plugins.get(platform) or {})
    for key, value in flatten(data).items():
        if _entry(key) is not None:
            set_path(data, key, parse_value(key, value, str(path)))
    return data


def parse_value(key: str, value: Any, where: str) -> Any:
    """*value* converted and checked for *key* (strings from the command line
    become ints or lists); the error names the key and where it came from."""
    entry = _entry(key)
    if entry is None:
        raise _unknown_key(key)
    try:
        return entry[1](value)
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

    from memsearch_fast._os import write_atomic

    path.parent.mkdir(parents=True, exist_ok=True)
    # Owner-only (the global file may hold an API key or token), never through a planted link.
    write_atomic(path, tomli_w.dumps(dict(data)).encode("utf-8"))


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
            set_path(result, key, parse_value(key, value, "command-line option") if _entry(key) else value)
    _complete_named_providers(result)
    if resolve_env:
        result = _resolve_env(result)
    if not _get(result, "embedding.model"):
        provider = str(_get(result, "embedding.provider")).strip().lower()
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
        elif isinstance(v, str) and not _lazy_env(key):
            out[k] = resolve_env_ref(v, key)
        else:
            out[k] = v
    return out


def get_value(cfg: Mapping[str, Any], key: str) -> Any:
    """A value by dotted key; a section name returns the section."""
    try:
        return _get(cfg, canonical_key(key))
    except KeyError:
        raise _unknown_key(key) from None


def set_value(key: str, raw: Any, *, project: bool = False) -> tuple[Any, Path]:
    """Validate *raw* for *key*, write it to the global or project file and
    return the stored value and the file written."""
    key = canonical_key(key)
    if _entry(key) is None:
        raise _unknown_key(key)
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
    and their references, and those of the LLM sections, are shown as written."""
    out: dict[str, Any] = {}
    for k, v in cfg.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out[k] = for_display(v, key + ".")
        elif is_secret(key):
            out[k] = mask(v)
        elif isinstance(v, str) and not _lazy_env(key):
            out[k] = resolve_env_ref(v, key)
        else:
            out[k] = v
    return out
