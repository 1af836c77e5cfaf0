"""Options shared by several commands, declared once, and turning flags into settings.

A command lists the groups it takes with :func:`uses`; their options are
spliced into its signature where its ``opts`` parameter stands, and reach it
as one dict. Flags left unset are ``None`` and fall through to the config
files and then the defaults (:func:`memsearch_fast.config.resolve`).
"""

import functools
import inspect
from collections.abc import Callable, Sequence
from typing import Annotated, Any, TypeVar

import typer

from memsearch_fast import config as cfgmod
from memsearch_fast.cli.app import err
from memsearch_fast.config.settings import Settings

_F = TypeVar("_F", bound=Callable[..., Any])

#: What a command receives in its ``opts`` parameter: flag name -> value (None when unset).
Flags = dict[str, Any]
#: Default for an ``opts`` parameter that follows options with defaults; :func:`uses`
#: always passes the real dict.
SPLICED: Flags = {}

#: CLI flag (parameter name) -> dotted config key.
FLAG_KEYS = {
    "provider": "embedding.provider",
    "model": "embedding.model",
    "batch_size": "embedding.batch_size",
    "base_url": "embedding.base_url",
    "api_key": "embedding.api_key",
    "collection": "milvus.collection",
    "milvus_uri": "milvus.uri",
    "milvus_token": "milvus.token",
    "max_chunk_size": "chunking.max_chunk_size",
    "debounce_ms": "watch.debounce_ms",
    "reranker_model": "reranker.model",
}


def text(*decls: str, **kw: Any) -> Any:
    """An option shown as TEXT in help, as memsearch 0.4.23 shows it."""
    return typer.Option(*decls, metavar="TEXT", **kw)


def integer(*decls: str, **kw: Any) -> Any:
    return typer.Option(*decls, metavar="INTEGER", **kw)


JsonOutput = Annotated[bool, typer.Option("--json-output", "-j", help="Output as JSON.")]
PLUGIN_HELP = "Plugin platform name (claude-code, codex, opencode, openclaw)."

_MILVUS = "Milvus"
_EMBEDDING = "Embedding"
_FILES = "Files"


def _option(*decls: str, panel: str, **kw: Any) -> Any:
    return typer.Option(*decls, rich_help_panel=panel, **kw)


MilvusToken = Annotated[str | None, text("--milvus-token", help="Milvus auth token.", rich_help_panel=_MILVUS)]
MilvusUri = Annotated[str | None, text("--milvus-uri", help="Milvus connection URI.", rich_help_panel=_MILVUS)]
DefaultCollection = Annotated[
    str | None,
    text(
        "--default-collection",
        help="Fallback collection name; explicit config and --collection take precedence.",
        rich_help_panel=_MILVUS,
    ),
]
Collection = Annotated[str | None, text("--collection", "-c", help="Milvus collection name.", rich_help_panel=_MILVUS)]
ApiKey = Annotated[
    str | None, text("--api-key", help="API key for the embedding provider.", rich_help_panel=_EMBEDDING)
]
BaseUrl = Annotated[str | None, text("--base-url", help="OpenAI-compatible API base URL.", rich_help_panel=_EMBEDDING)]
BatchSize = Annotated[
    int | None,
    integer("--batch-size", min=0, help="Embedding batch size (0 = provider default).", rich_help_panel=_EMBEDDING),
]
Model = Annotated[str | None, text("--model", "-m", help="Override embedding model.", rich_help_panel=_EMBEDDING)]
Provider = Annotated[str | None, text("--provider", "-p", help="Embedding provider.", rich_help_panel=_EMBEDDING)]
Exclude = Annotated[
    list[str] | None,
    _option("--exclude", metavar="PATTERN", help="Add a gitignore-style exclusion pattern (repeatable).", panel=_FILES),
]
IgnoreFile = Annotated[
    list[str] | None,
    _option(
        "--ignore-file",
        metavar="NAME",
        help="Discover an ignore filename within each index root (repeatable).",
        panel=_FILES,
    ),
]
MaxChunkSize = Annotated[
    int | None,
    integer("--max-chunk-size", min=1, help="Max chunk size in characters (must be >= 1).", rich_help_panel=_FILES),
]
Description = Annotated[
    str | None,
    text(
        "--description",
        help="Best-effort collection metadata written on creation; some backends may not return it.",
        rich_help_panel=_MILVUS,
    ),
]

#: Where the index lives: name -> (annotation, default).
MILVUS: dict[str, tuple[Any, Any]] = {
    "milvus_token": (MilvusToken, None),
    "milvus_uri": (MilvusUri, None),
    "default_collection": (DefaultCollection, None),
    "collection": (Collection, None),
}
#: Which model turns text into vectors.
EMBEDDING: dict[str, tuple[Any, Any]] = {
    "api_key": (ApiKey, None),
    "base_url": (BaseUrl, None),
    "batch_size": (BatchSize, None),
    "model": (Model, None),
    "provider": (Provider, None),
}
#: Which files an index or watch run reads.
FILES: dict[str, tuple[Any, Any]] = {"exclude": (Exclude, None), "ignore_file": (IgnoreFile, None)}


def uses(*groups: dict[str, tuple[Any, Any]]) -> Callable[[_F], _F]:
    """Splice the options of *groups* into a command where its ``opts`` parameter stands.

    The command is called with ``opts`` holding every group option by name,
    so each option is declared once here instead of in every command.
    """
    names = [name for group in groups for name in group]

    def decorate(func: _F) -> _F:
        sig = inspect.signature(func)
        params: list[inspect.Parameter] = []
        for p in sig.parameters.values():
            if p.name != "opts":
                params.append(p)
                continue
            for group in groups:
                for name, (annotation, default) in group.items():
                    params.append(
                        inspect.Parameter(
                            name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=default, annotation=annotation
                        )
                    )
        if len(params) != len(sig.parameters) - 1 + len(names):
            raise TypeError(f"{func.__name__} must take an 'opts' parameter")

        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            opts = {name: kwargs.pop(name, None) for name in names}
            return func(*args, opts=opts, **kwargs)

        wrapper.__signature__ = sig.replace(parameters=params)  # type: ignore[attr-defined]
        wrapper.__annotations__ = {p.name: p.annotation for p in params if p.annotation is not p.empty}
        return wrapper  # type: ignore[return-value]

    return decorate


def settings(opts: Flags, **flags: Any) -> Settings:
    """Resolved configuration: defaults < global file < project file < flags."""
    given = {**opts, **flags}
    overrides = {FLAG_KEYS[name]: value for name, value in given.items() if name in FLAG_KEYS and value is not None}
    return cfgmod.resolve(overrides, default_collection=given.get("default_collection"), warn=err)


def memsearch(cfg: Settings, paths: Sequence[str] = (), opts: Flags | None = None, **extra: Any) -> Any:
    """A :class:`~memsearch_fast.api.MemSearch` for the resolved settings.

    ``opts`` may carry the scan flags (``exclude``, ``ignore_file``), which
    add to the configured lists, and ``description``; ``extra`` goes to
    ``MemSearch`` as is (``workers``).
    """
    from memsearch_fast.api import MemSearch

    opts = opts or {}
    return MemSearch.from_config(
        cfg,
        paths,
        description=opts.get("description") or "",
        ignore_files=opts.get("ignore_file") or (),
        exclude=opts.get("exclude") or (),
        **extra,
    )


def missing_collection(cfg: Settings) -> str:
    return (
        f"collection '{cfg.milvus.collection}' does not exist at {cfg.milvus.uri}; "
        "run 'memsearch index PATH' to build it"
    )
