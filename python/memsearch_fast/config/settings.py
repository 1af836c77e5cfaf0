"""The resolved configuration as frozen dataclasses, one per ``[section]``.

Readers use attributes (``settings.milvus.uri``), so mypy checks every key a
module reads; the fields mirror :data:`memsearch_fast.config.schema.SCHEMA`
(a test keeps the two in step). Values are as resolved: with
``resolve_env=False`` a string may still be an ``env:VAR`` reference.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, is_dataclass
from typing import Any, get_args, get_origin, get_type_hints

from memsearch_fast.config.schema import PLUGIN_PLATFORMS, ConfigError


@dataclass(frozen=True)
class Milvus:
    uri: str
    token: str
    collection: str


@dataclass(frozen=True)
class Embedding:
    provider: str
    model: str
    batch_size: int
    base_url: str
    api_key: str


@dataclass(frozen=True)
class Compact:
    """The deprecated ``[compact]`` keys, still read after ``[llm]``."""

    llm_provider: str
    llm_model: str
    prompt_file: str
    base_url: str
    api_key: str


@dataclass(frozen=True)
class Chunking:
    max_chunk_size: int
    overlap_lines: int


@dataclass(frozen=True)
class Indexing:
    ignore_files: tuple[str, ...]
    exclude: tuple[str, ...]


@dataclass(frozen=True)
class Watch:
    debounce_ms: int


@dataclass(frozen=True)
class Search:
    sync: str


@dataclass(frozen=True)
class Reranker:
    model: str


@dataclass(frozen=True)
class LLMProvider:
    """A named provider, ``[llm.providers.<name>]``."""

    type: str
    model: str
    base_url: str
    api_key: str


@dataclass(frozen=True)
class LLM:
    provider: str
    model: str
    base_url: str
    api_key: str
    providers: Mapping[str, LLMProvider]
    #: Names under ``llm.providers`` that are not tables: an error only when one is picked,
    #: so a broken LLM entry never stops indexing or search.
    malformed_providers: frozenset[str] = field(default=frozenset(), metadata={"key": False})


@dataclass(frozen=True)
class Prompts:
    """Prompt template files; empty = the built-in prompt."""

    compact: str
    summarize: str
    project_review: str
    user_profile: str
    memory_to_skill: str


@dataclass(frozen=True)
class SummarizeTask:
    enabled: bool
    provider: str
    model: str


@dataclass(frozen=True)
class MaintenanceTask:
    """``project_review`` and ``user_profile``."""

    enabled: bool
    provider: str
    model: str
    min_interval_hours: int
    input_dir: str
    output_file: str


@dataclass(frozen=True)
class MemoryToSkillTask:
    enabled: bool
    provider: str
    model: str
    min_interval_hours: int
    input_dir: str
    min_occurrences: int
    paths: tuple[str, ...]


@dataclass(frozen=True)
class Plugin:
    """``[plugins.<platform>]``: the same tasks for every platform."""

    summarize: SummarizeTask
    project_review: MaintenanceTask
    user_profile: MaintenanceTask
    memory_to_skill: MemoryToSkillTask


@dataclass(frozen=True)
class Settings:
    """The effective configuration (:func:`memsearch_fast.config.resolve`)."""

    milvus: Milvus
    embedding: Embedding
    compact: Compact
    chunking: Chunking
    indexing: Indexing
    watch: Watch
    search: Search
    reranker: Reranker
    llm: LLM
    prompts: Prompts
    #: platform (``claude-code``, ``codex``, ...) -> its tasks.
    plugins: Mapping[str, Plugin]

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Settings:
        """Settings from a resolved nested dict (every known key present)."""
        built: Settings = _build(cls, data, "")
        return built

    def to_dict(self) -> dict[str, Any]:
        """The nested dict of the configuration keys (lists as lists)."""
        out: dict[str, Any] = _unbuild(self)
        return out


def _build(cls: Any, data: Any, where: str) -> Any:
    if not isinstance(data, Mapping):
        raise ConfigError(f"config section {where.rstrip('.') or 'root'} must be a table")
    hints = get_type_hints(cls)
    kwargs: dict[str, Any] = {}
    for f in fields(cls):
        if f.metadata.get("key", True) is False:
            continue
        key, hint = f"{where}{f.name}", hints[f.name]
        value: Any = data.get(f.name)
        if is_dataclass(hint):
            value = _build(hint, value, key + ".")
        elif get_origin(hint) is Mapping:
            value = _build_named(get_args(hint)[1], value, key, cls is Settings)
        elif get_origin(hint) is tuple:
            value = tuple(value)
        kwargs[f.name] = value
    if cls is LLM:
        providers = data.get("providers")
        if isinstance(providers, Mapping):
            kwargs["malformed_providers"] = frozenset(k for k, v in providers.items() if not isinstance(v, Mapping))
    return cls(**kwargs)


def _build_named(cls: Any, data: Any, where: str, platforms: bool) -> dict[str, Any]:
    """``plugins`` (the known platforms) or ``llm.providers`` (the tables among them)."""
    if not isinstance(data, Mapping):
        if platforms:
            raise ConfigError(f"config section {where} must be a table")
        return {}
    if platforms:
        return {p: _build(cls, data.get(p), f"{where}.{p}.") for p in PLUGIN_PLATFORMS}
    return {k: _build(cls, v, f"{where}.{k}.") for k, v in data.items() if isinstance(v, Mapping)}


def _unbuild(value: Any) -> Any:
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: _unbuild(getattr(value, f.name)) for f in fields(value) if f.metadata.get("key", True)}
    if isinstance(value, Mapping):
        return {k: _unbuild(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return list(value)
    return value
