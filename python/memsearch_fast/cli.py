"""The ``memsearch`` command line.

Commands and flags follow memsearch 0.4.23 so scripts and agent plugins
written for it keep working. This module only parses arguments, resolves
configuration and prints; the work happens in :mod:`memsearch_fast.core`.
Heavy modules (the Rust core, onnxruntime, pymilvus, numpy, rich) are imported
inside the commands that need them, so ``memsearch --help`` and agent hooks
start fast. Every error is reported as one line on stderr with a non-zero exit
status; set ``MEMSEARCH_DEBUG=1`` to get the traceback instead.
"""

import functools
import os
import sys
from collections.abc import Callable, Sequence
from typing import Annotated, Any, NoReturn, Optional, TypeVar

import typer

from memsearch_fast import __version__
from memsearch_fast import config as cfgmod

_F = TypeVar("_F", bound=Callable[..., Any])

#: Exit status for commands this version does not provide yet, and usage errors.
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
INTERRUPTED_MESSAGE = "interrupted; what was written is kept, rerun to finish"

app = typer.Typer(
    name="memsearch",
    help="memsearch — semantic memory search for markdown knowledge bases.",
    add_completion=False,
    no_args_is_help=True,
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
)
config_app = typer.Typer(help="Manage memsearch configuration.", no_args_is_help=True, rich_markup_mode=None)
model_app = typer.Typer(help="Manage local embedding models.", no_args_is_help=True, rich_markup_mode=None)
skills_app = typer.Typer(
    help="Distill, capture, list, and install candidate skills from memory (procedural memory).",
    no_args_is_help=True,
    rich_markup_mode=None,
)
app.add_typer(config_app, name="config")
app.add_typer(model_app, name="model")
app.add_typer(skills_app, name="skills")


# -- output and errors -------------------------------------------------------------------


def _err(line: str) -> None:
    typer.echo(line, err=True)


def _fail(message: str, code: int = 1) -> NoReturn:
    _err(f"Error: {message}")
    raise typer.Exit(code)


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    own = type(exc).__module__.startswith("memsearch_fast")
    if isinstance(exc, (ValueError, OSError)) or own:
        # Our exceptions carry one-line, user-facing messages already.
        return text or type(exc).__name__
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _is_cli_signal(exc: BaseException) -> bool:
    """Exit/abort/usage exceptions that the command-line framework handles itself."""
    return type(exc).__module__.split(".")[0] in ("typer", "click")


def _guard(func: _F) -> _F:
    """Turn any error into one line on stderr and Ctrl-C into exit 130."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except KeyboardInterrupt:
            if os.environ.get("MEMSEARCH_DEBUG"):
                raise
            _err(INTERRUPTED_MESSAGE)
            raise typer.Exit(EXIT_INTERRUPTED) from None
        except BrokenPipeError:
            # The reader went away (`memsearch search … | head`): stop quietly.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            raise typer.Exit(1) from None
        except Exception as exc:
            if _is_cli_signal(exc) or os.environ.get("MEMSEARCH_DEBUG"):
                raise
            _fail(_one_line(exc))

    return wrapper  # type: ignore[return-value]


def _not_available(command: str) -> NoReturn:
    _fail(f"'memsearch {command}' is not available in memsearch-fast {__version__} yet", EXIT_USAGE)


def _run(coro: Any) -> Any:
    """Run a coroutine, on uvloop when it is installed (the `uvloop` extra)."""
    try:
        import uvloop
    except ImportError:
        import asyncio

        return asyncio.run(coro)
    return uvloop.run(coro)


# -- configuration ------------------------------------------------------------------------

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


# -- shared options ------------------------------------------------------------------------


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


def _version(value: bool) -> None:
    if value:
        typer.echo(f"memsearch-fast, version {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Show the version and exit."),
    ] = False,
) -> None:
    """memsearch — semantic memory search for markdown knowledge bases."""


# -- index / search / expand ----------------------------------------------------------------


@app.command()
@_guard
def index(
    paths: Annotated[list[str], typer.Argument(metavar="PATHS", show_default=False)],
    milvus_token: MilvusToken = None,
    milvus_uri: MilvusUri = None,
    default_collection: DefaultCollection = None,
    collection: Collection = None,
    api_key: ApiKey = None,
    base_url: BaseUrl = None,
    batch_size: BatchSize = None,
    model: Model = None,
    provider: Provider = None,
    exclude: Exclude = None,
    ignore_file: IgnoreFile = None,
    force: Annotated[bool, typer.Option("--force", help="Re-index all files.")] = False,
    max_chunk_size: MaxChunkSize = None,
    description: Description = None,
    workers: Annotated[
        Optional[int], _int("--workers", min=1, help="Parallel inference/chunking workers (default: CPU count).")
    ] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar and no summary.")] = False,
    json_output: Annotated[bool, typer.Option("--json-output", "-j", help="Print the summary as JSON.")] = False,
) -> None:
    """Index markdown files from PATHS."""
    from memsearch_fast import display

    for p in paths:
        if not os.path.exists(os.path.expanduser(p)):
            _fail(f"path does not exist: {p}", EXIT_USAGE)
    cfg = _settings(
        default_collection,
        provider=provider,
        model=model,
        batch_size=batch_size,
        base_url=base_url,
        api_key=api_key,
        collection=collection,
        milvus_uri=milvus_uri,
        milvus_token=milvus_token,
        max_chunk_size=max_chunk_size,
    )
    ms = _memsearch(
        cfg,
        paths,
        exclude=exclude or (),
        ignore_files=ignore_file or (),
        description=description or "",
        workers=workers,
    )
    progress = display.make_progress(quiet=quiet or json_output)
    try:
        report = _run(ms.index_with_report(force=force, progress=progress))
    finally:
        progress.finish()
        ms.close()
    if json_output:
        typer.echo(display.to_json(display.index_report_dict(report)))
    elif not quiet:
        typer.echo(display.format_index_report(report))
    for line in display.format_failures(report):
        _err(line)
    if report.failed:
        raise typer.Exit(1)


@app.command()
@_guard
def search(
    query: Annotated[str, typer.Argument(metavar="QUERY", show_default=False)],
    top_k: Annotated[int, _int("--top-k", "-k", min=1, help="Number of results.")] = 5,
    source_prefix: Annotated[
        Optional[str],
        typer.Option(
            "--source-prefix", metavar="PATH", help="Only search chunks whose source path starts with this prefix."
        ),
    ] = None,
    milvus_token: MilvusToken = None,
    milvus_uri: MilvusUri = None,
    default_collection: DefaultCollection = None,
    collection: Collection = None,
    api_key: ApiKey = None,
    base_url: BaseUrl = None,
    batch_size: BatchSize = None,
    model: Model = None,
    provider: Provider = None,
    reranker_model: Annotated[
        Optional[str],
        _text("--reranker-model", help="Cross-encoder model for reranking (empty string disables)."),
    ] = None,
    json_output: JsonOutput = False,
) -> None:
    """Search indexed memory for QUERY."""
    from memsearch_fast import display

    cfg = _settings(
        default_collection,
        provider=provider,
        model=model,
        batch_size=batch_size,
        base_url=base_url,
        api_key=api_key,
        collection=collection,
        milvus_uri=milvus_uri,
        milvus_token=milvus_token,
        reranker_model=reranker_model,
    )
    if reranker_model:
        _err("warning: reranking is not supported by this version; --reranker-model is ignored")
    ms = _memsearch(cfg)
    try:
        if not _collection_exists(ms):
            _fail(_missing_collection(cfg))
        results = _run(ms.search(query, top_k=top_k, source_prefix=source_prefix))
    finally:
        ms.close()
    typer.echo(display.to_json(results) if json_output else display.format_search(results))


@app.command()
@_guard
def expand(
    chunk_hash: Annotated[str, typer.Argument(metavar="CHUNK_HASH", show_default=False)],
    section: Annotated[
        bool,
        typer.Option(
            "--section/--no-section", help="Show full heading section (default) or only the chunk's own lines."
        ),
    ] = True,
    lines: Annotated[
        Optional[int], _int("--lines", "-n", min=0, help="Show N lines before/after instead of full section.")
    ] = None,
    json_output: JsonOutput = False,
    milvus_token: MilvusToken = None,
    milvus_uri: MilvusUri = None,
    default_collection: DefaultCollection = None,
    collection: Collection = None,
    api_key: ApiKey = None,
    base_url: BaseUrl = None,
    batch_size: BatchSize = None,
    model: Model = None,
    provider: Provider = None,
) -> None:
    """Expand a memory chunk to show full context.

    Look up CHUNK_HASH in the index, then read the source markdown file to
    return the surrounding context (full heading section by default, or the
    chunk's own lines with --no-section).

    Part of the progressive disclosure workflow (search -> expand ->
    transcript).
    """
    from memsearch_fast import display

    cfg = _settings(
        default_collection,
        provider=provider,
        model=model,
        batch_size=batch_size,
        base_url=base_url,
        api_key=api_key,
        collection=collection,
        milvus_uri=milvus_uri,
        milvus_token=milvus_token,
    )
    ms = _memsearch(cfg)
    try:
        result = ms.expand(chunk_hash, section=section, lines=lines)
        if result is None:
            if not _collection_exists(ms):
                _fail(_missing_collection(cfg))
            _fail(f"chunk not found: {chunk_hash}")
    finally:
        ms.close()
    warning = result.pop("warning", None)
    if warning:
        _err(f"warning: {warning}")
    typer.echo(display.to_json(result) if json_output else display.format_expand(result))


# -- stats / reset ------------------------------------------------------------------------


@app.command()
@_guard
def stats(
    collection: Collection = None,
    default_collection: DefaultCollection = None,
    milvus_uri: MilvusUri = None,
    milvus_token: MilvusToken = None,
    json_output: JsonOutput = False,
) -> None:
    """Show statistics about the index."""
    from memsearch_fast import display

    cfg = _settings(default_collection, collection=collection, milvus_uri=milvus_uri, milvus_token=milvus_token)
    store = _memsearch(cfg)._read_store()
    try:
        if not store.exists:
            _fail(_missing_collection(cfg))
        info = {
            "chunks": store.count(),
            "files": store.count_sources(),
            "dimension": store.dimension,
            "collection": cfg["milvus"]["collection"],
            "uri": cfg["milvus"]["uri"],
            "provider": cfg["embedding"]["provider"],
            "model": cfg["embedding"]["model"],
        }
    finally:
        store.close()
    typer.echo(display.to_json(info) if json_output else display.format_stats(info))


@app.command()
@_guard
def reset(
    collection: Collection = None,
    default_collection: DefaultCollection = None,
    milvus_uri: MilvusUri = None,
    milvus_token: MilvusToken = None,
    yes: Annotated[bool, typer.Option("--yes", help="Confirm the action without prompting.")] = False,
) -> None:
    """Drop all indexed data."""
    cfg = _settings(default_collection, collection=collection, milvus_uri=milvus_uri, milvus_token=milvus_token)
    name = cfg["milvus"]["collection"]
    if not yes:
        if not _stdin_is_tty():
            _fail(f"refusing to drop collection '{name}' without confirmation; pass --yes")
        if not typer.confirm(f"This will delete all indexed data in collection '{name}'. Continue?"):
            _fail("aborted; nothing was dropped")
    store = _memsearch(cfg)._read_store()
    try:
        if not store.exists:
            typer.echo(f"Collection '{name}' does not exist; nothing to drop.")
            return
        store.drop()
    finally:
        store.close()
    typer.echo(f"Dropped collection '{name}'.")


def _stdin_is_tty() -> bool:
    try:
        return sys.stdin is not None and sys.stdin.isatty()
    except (AttributeError, ValueError):
        return False


# -- config -------------------------------------------------------------------------------


def _show_value(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()  # shell hooks compare against "true"/"false"
    if isinstance(value, (list, dict)):
        import json

        return json.dumps(value, ensure_ascii=False)
    return str(value)


@config_app.command("get", short_help="Get a resolved config value (e.g. memsearch config get milvus.uri).")
@_guard
def config_get(
    key: Annotated[str, typer.Argument(metavar="KEY", show_default=False)],
    default_collection: Annotated[
        Optional[str],
        _text("--default-collection", help="Fallback collection name; explicit config takes precedence."),
    ] = None,
) -> None:
    """Get a resolved config value (e.g. memsearch config get milvus.uri)."""
    cfg = cfgmod.resolve(default_collection=default_collection, resolve_env=False, warn=_err)
    typer.echo(_show_value(cfgmod.get_value(cfgmod.for_display(cfg), key)))


@config_app.command("set", short_help="Set a config value (e.g. memsearch config set milvus.uri http://host:19530).")
@_guard
def config_set(
    key: Annotated[str, typer.Argument(metavar="KEY", show_default=False)],
    value: Annotated[str, typer.Argument(metavar="VALUE", show_default=False)],
    project: Annotated[bool, typer.Option("--project", help="Write to project config.")] = False,
) -> None:
    """Set a config value (e.g. memsearch config set milvus.uri http://host:19530)."""
    stored, path = cfgmod.set_value(key, value, project=project)
    shown = cfgmod.mask(stored) if cfgmod.is_secret(key) else stored
    typer.echo(f"Set {key} = {_show_value(shown)} in {path}")


@config_app.command("list")
@_guard
def config_list(
    resolved: Annotated[bool, typer.Option("--resolved", help="Show fully resolved config (default).")] = False,
    global_: Annotated[bool, typer.Option("--global", help="Show global config file only.")] = False,
    project: Annotated[bool, typer.Option("--project", help="Show project config file only.")] = False,
    json_output: JsonOutput = False,
    default_collection: Annotated[
        Optional[str],
        _text(
            "--default-collection",
            help="Fallback collection for resolved output; explicit config takes precedence.",
        ),
    ] = None,
) -> None:
    """Show configuration."""
    from memsearch_fast import display

    if resolved + global_ + project > 1:
        _fail("choose one of --resolved, --global, --project", EXIT_USAGE)
    if global_:
        path = cfgmod.global_config_path()
        data, label = cfgmod.masked(cfgmod.load_file(path, check=False)), f"Global ({path})"
    elif project:
        path = cfgmod.project_config_path()
        data, label = cfgmod.masked(cfgmod.load_file(path, check=False)), f"Project ({path})"
    else:
        cfg = cfgmod.resolve(default_collection=default_collection, resolve_env=False, warn=_err)
        data, label = cfgmod.for_display(cfg), "Resolved (all sources merged)"
    if json_output:
        import json

        typer.echo(json.dumps(data, ensure_ascii=False))
    else:
        typer.echo(display.format_config(data, label))


@config_app.command("init")
@_guard
def config_init(
    project: Annotated[
        bool, typer.Option("--project", help="Write allowlisted local indexing keys to .memsearch.toml.")
    ] = False,
) -> None:
    """Interactive configuration wizard.

    Prompts for each setting, showing the file's current value (or the
    default) as the answer to keep. When stdin is not a terminal nothing is
    asked: the current values are written.
    """
    target = cfgmod.project_config_path() if project else cfgmod.global_config_path()
    existing = cfgmod.load_file(target)
    # The wizard edits the target file: its own values over the defaults.
    current = cfgmod.deep_merge(cfgmod.defaults(), existing)
    ask = _stdin_is_tty()
    keys = sorted(cfgmod.PROJECT_ALLOWED) if project else [k for k in cfgmod.SCHEMA if k != "reranker.model"]
    flat_existing = cfgmod.flatten(existing)
    typer.echo(f"Writing {'project' if project else 'global'} configuration to {target}")
    if not ask:
        typer.echo("stdin is not a terminal: writing the current values without prompting.")
    data = existing
    for key in keys:
        value = cfgmod.get_value(current, key)
        if key == "indexing.ignore_files" and key not in flat_existing:
            value = [".gitignore"]  # new configurations respect .gitignore
        if ask:
            value = _prompt_value(key, value)
        if cfgmod.is_secret(key) and not value:
            continue
        cfgmod.set_path(data, key, cfgmod.parse_value(key, value, str(target)))
    cfgmod.save_file(data, target)
    typer.echo(f"Config saved to {target}")


def _prompt_value(key: str, current: Any) -> Any:
    """One prompt; secrets are hidden and never echoed as the default."""
    if cfgmod.is_secret(key):
        entered = typer.prompt(
            f"  {key} (env:VAR recommended; empty keeps the current value)",
            default="",
            show_default=False,
            hide_input=True,
        )
        return entered or current
    if isinstance(current, list):
        entered = typer.prompt(f"  {key} (comma-separated)", default=",".join(current), show_default=True)
        return [p.strip() for p in entered.split(",") if p.strip()]
    return typer.prompt(f"  {key}", default=current, type=type(current))


# -- model --------------------------------------------------------------------------------


@model_app.command("import")
@_guard
def model_import(
    src: Annotated[str, typer.Argument(metavar="SRC", show_default=False, help="Checkpoint directory or .zip of one.")],
    name: Annotated[
        Optional[str], _text("--name", help="Name to use with -m (default: the directory name).")
    ] = None,
    quantize: Annotated[
        bool, typer.Option("--quantize/--no-quantize", help="Also write an int8 model (used by default when present).")
    ] = True,
) -> None:
    """Convert a BERT-family sentence-transformers checkpoint to ONNX for local use."""
    from memsearch_fast.embeddings.convert import import_model

    path = import_model(src, name=name, quantize=quantize)
    typer.echo(f"Imported model to {path}")
    typer.echo(f"Use it with: memsearch index -m {name or path.name} PATHS...")


# -- commands this version does not provide yet -------------------------------------------


@app.command()
@_guard
def watch(
    paths: Annotated[list[str], typer.Argument(metavar="PATHS", show_default=False)],
    milvus_token: MilvusToken = None,
    milvus_uri: MilvusUri = None,
    default_collection: DefaultCollection = None,
    collection: Collection = None,
    api_key: ApiKey = None,
    base_url: BaseUrl = None,
    batch_size: BatchSize = None,
    model: Model = None,
    provider: Provider = None,
    exclude: Exclude = None,
    ignore_file: IgnoreFile = None,
    debounce_ms: Annotated[Optional[int], _int("--debounce-ms", help="Debounce delay in ms.")] = None,
    max_chunk_size: MaxChunkSize = None,
    description: Description = None,
) -> None:
    """Watch PATHS for markdown changes and auto-index."""
    _not_available("watch")


@app.command()
@_guard
def compact(
    source: Annotated[Optional[str], _text("--source", "-s", help="Only compact chunks from this source.")] = None,
    output_dir: Annotated[
        Optional[str],
        typer.Option("--output-dir", "-o", metavar="PATH", help="Directory to write the compact summary into."),
    ] = None,
    llm_provider: Annotated[Optional[str], _text("--llm-provider", help="LLM for summarization.")] = None,
    llm_model: Annotated[Optional[str], _text("--llm-model", help="Override LLM model.")] = None,
    llm_base_url: Annotated[
        Optional[str], _text("--llm-base-url", help="OpenAI-compatible base URL for the LLM.")
    ] = None,
    llm_api_key: Annotated[Optional[str], _text("--llm-api-key", help="API key for the LLM provider.")] = None,
    prompt: Annotated[
        Optional[str], _text("--prompt", help="Custom prompt template (must contain {chunks}).")
    ] = None,
    prompt_file: Annotated[
        Optional[str], typer.Option("--prompt-file", metavar="PATH", help="Read prompt template from file.")
    ] = None,
    milvus_token: MilvusToken = None,
    milvus_uri: MilvusUri = None,
    default_collection: DefaultCollection = None,
    collection: Collection = None,
    api_key: ApiKey = None,
    base_url: BaseUrl = None,
    batch_size: BatchSize = None,
    model: Model = None,
    provider: Provider = None,
) -> None:
    """Compress stored memories into a summary."""
    _not_available("compact")


@app.command()
@_guard
def transcript(
    path: Annotated[str, typer.Argument(metavar="PATH", show_default=False)],
    turn: Annotated[
        Optional[str],
        _text("--turn", "-t", help="Target turn/session id (prefix match); shows surrounding context."),
    ] = None,
    context: Annotated[int, _int("--context", "-c", help="Turns of context to show before/after --turn.")] = 3,
    json_output: JsonOutput = False,
) -> None:
    """Show original conversation turns, with tool calls, from a session transcript.

    L3 of progressive recall (search -> expand -> transcript): pass the
    transcript path from a journal anchor to recover the exact commands,
    flags, and paths the journal summary drops.
    """
    _not_available("transcript")


_PLUGIN_HELP = "Plugin platform name (claude-code, codex, opencode, openclaw)."


@app.command()
@_guard
def summarize(
    plugin: Annotated[str, _text("--plugin", help=_PLUGIN_HELP)],
    agent_name: Annotated[str, _text("--agent-name", help="Agent display name for the summarize prompt.")] = "",
) -> None:
    """Summarize stdin using a configured memsearch-managed LLM provider."""
    _not_available("summarize")


@skills_app.command("add")
@_guard
def skills_add(
    name: Annotated[str, _text("--name", help="Skill name (slugified to the command and directory name).")],
    description: Annotated[
        str, _text("--description", help="One line: what the skill does and when it should trigger.")
    ],
    body_file: Annotated[
        str,
        typer.Option(
            "--body-file",
            metavar="FILENAME",
            help="File containing the SKILL.md body (markdown, no frontmatter). Use - for stdin.",
        ),
    ],
) -> None:
    """Persist an agent-drafted skill as a candidate (manual capture path)."""
    _not_available("skills add")


@skills_app.command("distill")
@_guard
def skills_distill(
    plugin: Annotated[str, _text("--plugin", help=_PLUGIN_HELP)],
    force: Annotated[bool, typer.Option("--force", help="Run even if input is unchanged or not yet due.")] = False,
) -> None:
    """Mine recent memory journals for recurring workflows using a configured API provider."""
    _not_available("skills distill")


@skills_app.command("install")
@_guard
def skills_install(
    name: Annotated[str, typer.Argument(metavar="NAME", show_default=False)],
    path: Annotated[
        Optional[list[str]],
        typer.Option("--path", help="Install destination (repeatable). E.g. .claude/skills"),
    ] = None,
) -> None:
    """Install a candidate skill into one or more agent skill directories."""
    _not_available("skills install")


@skills_app.command("list")
@_guard
def skills_list(json_output: JsonOutput = False) -> None:
    """List candidate and installed skills in the store."""
    _not_available("skills list")


@skills_app.command("status")
@_guard
def skills_status(
    json_output: JsonOutput = False,
    hint: Annotated[
        bool, typer.Option("--hint", help="Print only the startup hint when candidate skill versions are pending.")
    ] = False,
) -> None:
    """Show whether candidate skills need review and installation."""
    _not_available("skills status")


# -- entry point --------------------------------------------------------------------------


def _utf8_streams() -> None:
    """Paths and notes are often non-ASCII; never fail on a narrow terminal encoding."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.reconfigure(encoding="utf-8", errors="replace")  # type: ignore[union-attr]
        except (AttributeError, OSError, ValueError):
            pass


def main(argv: Optional[Sequence[str]] = None) -> None:
    """Console-script entry point; errors that escape a command still end in one line."""
    _utf8_streams()
    try:
        app(args=list(argv) if argv is not None else None, prog_name="memsearch")
    except KeyboardInterrupt:
        if os.environ.get("MEMSEARCH_DEBUG"):
            raise
        _err(INTERRUPTED_MESSAGE)
        sys.exit(EXIT_INTERRUPTED)
    except Exception as exc:
        if os.environ.get("MEMSEARCH_DEBUG"):
            raise
        _err(f"Error: {_one_line(exc)}")
        sys.exit(1)


if __name__ == "__main__":
    main()
