"""Options shared by several commands, and turning flags into settings."""

from collections.abc import Sequence
from typing import Annotated, Any, Optional

import typer

from memsearch_fast import config as cfgmod
from memsearch_fast.cli.app import _err

# CLI flag (parameter name) -> dotted config key.
_FLAG_KEYS = {
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


def _settings(default_collection: Optional[str] = None, **flags: Any) -> dict[str, Any]:
    overrides = {_FLAG_KEYS[name]: value for name, value in flags.items() if value is not None}
    return cfgmod.resolve(overrides, default_collection=default_collection, warn=_err)


def _memsearch(
    cfg: dict[str, Any],
    paths: Sequence[str] = (),
    *,
    exclude: Sequence[str] = (),
    ignore_files: Sequence[str] = (),
    description: str = "",
    workers: Optional[int] = None,
) -> Any:
    from memsearch_fast.core import MemSearch

    emb, milvus, chunking, indexing = cfg["embedding"], cfg["milvus"], cfg["chunking"], cfg["indexing"]
    return MemSearch(
        list(paths),
        embedding_provider=emb["provider"],
        embedding_model=emb["model"] or None,
        embedding_batch_size=emb["batch_size"],
        embedding_base_url=emb["base_url"] or None,
        embedding_api_key=emb["api_key"] or None,
        milvus_uri=milvus["uri"],
        milvus_token=milvus["token"] or None,
        collection=milvus["collection"],
        description=description,
        max_chunk_size=chunking["max_chunk_size"],
        overlap_lines=chunking["overlap_lines"],
        ignore_files=list(dict.fromkeys([*indexing["ignore_files"], *ignore_files])),
        exclude=list(dict.fromkeys([*indexing["exclude"], *exclude])),
        workers=workers,
    )


def _missing_collection(cfg: dict[str, Any]) -> str:
    return (
        f"collection '{cfg['milvus']['collection']}' does not exist at {cfg['milvus']['uri']}; "
        "run 'memsearch index PATH' to build it"
    )


def _collection_exists(ms: Any) -> bool:
    """Checked before loading a model: a search must not create an empty collection."""
    return bool(ms._read_store().exists)  # kept open: the search reuses it


def _text(*decls: str, **kw: Any) -> Any:
    """An option shown as TEXT in help, as memsearch 0.4.23 shows it."""
    return typer.Option(*decls, metavar="TEXT", **kw)


def _int(*decls: str, **kw: Any) -> Any:
    return typer.Option(*decls, metavar="INTEGER", **kw)


MilvusToken = Annotated[Optional[str], _text("--milvus-token", help="Milvus auth token.")]


MilvusUri = Annotated[Optional[str], _text("--milvus-uri", help="Milvus connection URI.")]


DefaultCollection = Annotated[
    Optional[str],
    _text(
        "--default-collection", help="Fallback collection name; explicit config and --collection take precedence."
    ),
]


Collection = Annotated[Optional[str], _text("--collection", "-c", help="Milvus collection name.")]


ApiKey = Annotated[Optional[str], _text("--api-key", help="API key for the embedding provider.")]


BaseUrl = Annotated[Optional[str], _text("--base-url", help="OpenAI-compatible API base URL.")]


BatchSize = Annotated[
    Optional[int], _int("--batch-size", min=0, help="Embedding batch size (0 = provider default).")
]


Model = Annotated[Optional[str], _text("--model", "-m", help="Override embedding model.")]


Provider = Annotated[Optional[str], _text("--provider", "-p", help="Embedding provider.")]


Exclude = Annotated[
    Optional[list[str]],
    typer.Option("--exclude", metavar="PATTERN", help="Add a gitignore-style exclusion pattern (repeatable)."),
]


IgnoreFile = Annotated[
    Optional[list[str]],
    typer.Option(
        "--ignore-file", metavar="NAME", help="Discover an ignore filename within each index root (repeatable)."
    ),
]


MaxChunkSize = Annotated[
    Optional[int], _int("--max-chunk-size", min=1, help="Max chunk size in characters (must be >= 1).")
]


Description = Annotated[
    Optional[str],
    _text(
        "--description",
        help="Best-effort collection metadata written on creation; some backends may not return it.",
    ),
]


JsonOutput = Annotated[bool, typer.Option("--json-output", "-j", help="Output as JSON.")]


_PLUGIN_HELP = "Plugin platform name (claude-code, codex, opencode, openclaw)."
