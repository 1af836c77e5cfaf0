"""Options shared by several commands, declared once, and turning flags into settings.

A command takes an option group as one parameter (``milvus: MilvusOptions``);
:func:`flatten` splices the group's options into its signature where that
parameter stands, and hands it the group as one frozen value. Flags left
unset are ``None`` and fall through to the config files and then the
defaults (:func:`memsearch_fast.config.resolve`).
"""

import functools
import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

from memsearch_fast import config as cfgmod
from memsearch_fast.cli.app import err

if TYPE_CHECKING:
    from memsearch_fast.config.settings import Settings

_F = TypeVar("_F", bound=Callable[..., Any])

#: Where an option group's field keeps its typer declaration.
OPTION = "option"

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
_PROVIDERS = "onnx (the default: local, no key), openai, ollama, voyage, google, jina, mistral or local"
Provider = Annotated[
    str | None, text("--provider", "-p", help=f"Embedding provider: {_PROVIDERS}.", rich_help_panel=_EMBEDDING)
]
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


@dataclass(frozen=True)
class MilvusOptions:
    """Where the index lives."""

    milvus_token: str | None = field(default=None, metadata={OPTION: MilvusToken})
    milvus_uri: str | None = field(default=None, metadata={OPTION: MilvusUri})
    default_collection: str | None = field(default=None, metadata={OPTION: DefaultCollection})
    collection: str | None = field(default=None, metadata={OPTION: Collection})


@dataclass(frozen=True)
class EmbeddingOptions:
    """Which model turns text into vectors."""

    api_key: str | None = field(default=None, metadata={OPTION: ApiKey})
    base_url: str | None = field(default=None, metadata={OPTION: BaseUrl})
    batch_size: int | None = field(default=None, metadata={OPTION: BatchSize})
    model: str | None = field(default=None, metadata={OPTION: Model})
    provider: str | None = field(default=None, metadata={OPTION: Provider})


@dataclass(frozen=True)
class FileOptions:
    """Which files an index or watch run reads, beyond the configured lists."""

    exclude: tuple[str, ...] = field(default=(), metadata={OPTION: Exclude})
    ignore_file: tuple[str, ...] = field(default=(), metadata={OPTION: IgnoreFile})


#: Each group with every flag unset: the default of a group parameter (a command
#: called through :func:`flatten` always gets the groups the flags make).
MILVUS = MilvusOptions()
EMBEDDING = EmbeddingOptions()
FILES = FileOptions()
#: What :func:`flatten` splices into a command.
Group = MilvusOptions | EmbeddingOptions | FileOptions
GROUPS: tuple[type[Group], ...] = (MilvusOptions, EmbeddingOptions, FileOptions)


def _group(value: Any) -> type[Group] | None:
    return value if isinstance(value, type) and value in GROUPS else None


def flatten(func: _F) -> _F:
    """Splice the options of each option-group parameter (``milvus: MilvusOptions``)
    into the command where that parameter stands.

    Each option is declared once, on its group's field, instead of in every
    command; the command receives the group as one frozen value.
    """
    sig = inspect.signature(func)
    params: list[inspect.Parameter] = []
    groups: dict[str, type[Group]] = {}
    for p in sig.parameters.values():
        group = _group(p.annotation)
        if group is None:
            params.append(p)
            continue
        groups[p.name] = group
        for f in fields(group):
            params.append(
                inspect.Parameter(
                    f.name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None, annotation=f.metadata[OPTION]
                )
            )
    if not groups:
        raise TypeError(f"{func.__name__} takes no option group")

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        for name, group in groups.items():
            given = {f.name: kwargs.pop(f.name, None) for f in fields(group)}
            if group is FileOptions:
                given = {k: tuple(v or ()) for k, v in given.items()}
            kwargs[name] = group(**given)
        return func(*args, **kwargs)

    wrapper.__signature__ = sig.replace(parameters=params)  # type: ignore[attr-defined]
    wrapper.__annotations__ = {p.name: p.annotation for p in params if p.annotation is not p.empty}
    return wrapper  # type: ignore[return-value]


def settings(*groups: MilvusOptions | EmbeddingOptions, **flags: Any) -> "Settings":
    """Resolved configuration: defaults < global file < project file < flags."""
    given = {f.name: getattr(g, f.name) for g in groups for f in fields(g)}
    given.update(flags)
    overrides = {FLAG_KEYS[name]: value for name, value in given.items() if name in FLAG_KEYS and value is not None}
    cfg = cfgmod.resolve(overrides, default_collection=given.get("default_collection"), warn=err)
    return _own_database(cfg)


def _own_database(cfg: "Settings") -> "Settings":
    """*cfg* with the index moved beside memsearch 0.4.23's default database
    when that stands at the default path (:mod:`memsearch_fast.lite.fallback`);
    the first command that does so says it on stderr."""
    import dataclasses

    from memsearch_fast.lite import fallback

    uri = fallback.effective_uri(cfg.milvus.uri)
    if uri == cfg.milvus.uri:
        return cfg
    line = fallback.tell_once("cli")
    if line:
        err(line)
    return dataclasses.replace(cfg, milvus=dataclasses.replace(cfg.milvus, uri=uri))


def memsearch(
    cfg: "Settings",
    paths: Sequence[str] = (),
    files: FileOptions = FILES,
    description: str | None = None,
    **extra: Any,
) -> Any:
    """A :class:`~memsearch_fast.api.MemSearch` for the resolved settings.

    The scan flags in *files* add to the configured lists; ``extra`` goes to
    ``MemSearch`` as is (``workers``, ``dense_index``).
    """
    from memsearch_fast.api import MemSearch
    from memsearch_fast.embeddings import check_key

    emb = cfg.embedding
    check_key(emb.provider, api_key=emb.api_key or None, base_url=emb.base_url or None)
    return MemSearch.from_config(
        cfg,
        paths,
        description=description or "",
        ignore_files=files.ignore_file,
        exclude=files.exclude,
        **extra,
    )


def missing_collection(cfg: "Settings") -> str:
    return (
        f"collection '{cfg.milvus.collection}' does not exist at {cfg.milvus.uri}; "
        "run 'memsearch index PATH' to build it"
    )
