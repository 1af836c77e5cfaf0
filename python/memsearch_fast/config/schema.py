"""The configuration keys: their defaults, parsers and who may set them.

Each key is written ``[section] field = value`` in a file and ``section.field``
on the command line. String values of the form ``env:VAR`` are read from the
environment when the configuration is used, so files need not hold secrets.
Only the standard library is imported here, so that CLI start-up stays fast.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from memsearch_fast.config.tuning import FALSE_WORDS, TRUE_WORDS
from memsearch_fast.errors import MemsearchError

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
#: What a project file (a repository one clones) may set chunking to: a
#: chunk no smaller than half the default (at most twice the rows of the same
#: notes) and a few lines of overlap. Smaller chunks and longer overlaps
#: multiply the index of a few KB into gigabytes (1,000 lines of 25 bytes with
#: 50-character chunks and 1,000 lines of overlap: 249,107 chunks); the user's
#: own config and command-line flags may still set them.
PROJECT_RANGES = {
    "chunking.max_chunk_size": (DEFAULT_MAX_CHUNK_SIZE // 2, MAX_CHUNK_SIZE_LIMIT),
    "chunking.overlap_lines": (0, 10),
}


def outside_project_range(key: str, value: Any) -> tuple[int, int] | None:
    """The range a project file may set *key* in, when *value* lies outside it."""
    bounds = PROJECT_RANGES.get(key)
    if bounds is None or not isinstance(value, int) or bounds[0] <= value <= bounds[1]:
        return None
    return bounds


DEFAULT_DEBOUNCE_MS = 1500
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
    if not uri.strip():
        # An empty path would resolve to the current directory.
        raise ConfigError(f"is empty: give a local database path (default {DEFAULT_MILVUS_URI}) or http(s)://host:port")
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
        if word in TRUE_WORDS:
            return True
        if word in FALSE_WORDS:
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
PLUGIN_ALIASES = {"claude_code": "claude-code"}
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
PLUGIN_TASKS: dict[str, dict[str, _Spec]] = {
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
        for task, task_fields in PLUGIN_TASKS.items()
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
LAZY_ENV_SECTIONS = ("llm.", "compact.")

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

SECRET_FIELDS = ("api_key", "token", "password", "secret")


def canonical_key(key: str) -> str:
    """*key* with a plugin platform alias replaced (``plugins.claude_code.…`` → ``plugins.claude-code.…``)."""
    parts = key.split(".")
    if len(parts) > 1 and parts[0] == "plugins" and parts[1] in PLUGIN_ALIASES:
        parts[1] = PLUGIN_ALIASES[parts[1]]
    return ".".join(parts)


def entry(key: str) -> _Spec | None:
    """The (default, parser) of a known key, named-provider keys included."""
    if key in SCHEMA:
        return SCHEMA[key]
    parts = key.split(".")
    if len(parts) == 4 and parts[2]:
        return NAMED_SCHEMA.get(".".join((parts[0], parts[1], "*", parts[3])))
    return None


def unknown_key(key: str) -> ConfigError:
    """The error for an unknown key, naming the keys of its section (or the sections)."""
    parts = key.split(".")
    if parts[0] == "plugins":  # 100+ keys: describe them
        fields = ", ".join(PLUGIN_TASKS.get(parts[2], {})) if len(parts) > 2 else ""
        return ConfigError(
            f"unknown config key {key!r}; plugin keys are plugins.<platform>.<task>.<field>, platform one of "
            f"{', '.join(PLUGIN_PLATFORMS)}, task one of {', '.join(PLUGIN_TASKS)}"
            + (f"; {parts[2]} fields: {fields}" if fields else "")
        )
    known = [k for k in (*SCHEMA, *NAMED_SCHEMA) if k.split(".", 1)[0] == parts[0]]
    if not known:
        known = list(dict.fromkeys(k.split(".", 1)[0] for k in SCHEMA))
    return ConfigError(f"unknown config key {key!r}; known keys: {', '.join(known)}")


def lazy_env(key: str) -> bool:
    return key.startswith(LAZY_ENV_SECTIONS)


def is_secret(key: str) -> bool:
    return key.rsplit(".", 1)[-1].lower() in SECRET_FIELDS


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
