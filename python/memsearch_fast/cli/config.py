"""`config get/set/list/init`."""

from typing import Annotated, Any

import typer

from memsearch_fast import config as cfgmod
from memsearch_fast.cli.app import (
    config_app,
    err,
    guard,
    stdin_is_tty,
)
from memsearch_fast.cli.options import JsonOutput, text
from memsearch_fast.config import display as config_display
from memsearch_fast.config import files, schema


def _show_value(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()  # shell hooks compare against "true"/"false"
    if isinstance(value, (list, dict)):
        import json

        return json.dumps(value, ensure_ascii=False)
    return str(value)


@config_app.command("get", short_help="Get a resolved config value (e.g. memsearch config get milvus.uri).")
@guard
def config_get(
    key: Annotated[str, typer.Argument(metavar="KEY", show_default=False)],
    default_collection: Annotated[
        str | None,
        text("--default-collection", help="Fallback collection name; explicit config takes precedence."),
    ] = None,
) -> None:
    """Get a resolved config value (e.g. memsearch config get milvus.uri)."""
    cfg = cfgmod.merged(default_collection=default_collection, resolve_env=False, warn=err)
    typer.echo(_show_value(cfgmod.get_value(config_display.for_display(cfg), key)))


@config_app.command("set", short_help="Set a config value (e.g. memsearch config set milvus.uri http://host:19530).")
@guard
def config_set(
    key: Annotated[str, typer.Argument(metavar="KEY", show_default=False)],
    value: Annotated[str, typer.Argument(metavar="VALUE", show_default=False)],
    project: Annotated[bool, typer.Option("--project", help="Write to project config.")] = False,
) -> None:
    """Set a config value (e.g. memsearch config set milvus.uri http://host:19530)."""
    stored, path = cfgmod.set_value(key, value, project=project)
    shown = config_display.mask(stored) if schema.is_secret(key) else stored
    typer.echo(f"Set {key} = {_show_value(shown)} in {path}")


def _mode(name: str) -> Any:
    """A callback recording *name* when its flag is given: click calls them in
    command-line order, so the last of --resolved/--global/--project wins (as 0.4.23)."""

    def record(ctx: typer.Context, value: bool) -> bool:
        if value:
            ctx.meta["config_list_mode"] = name
        return value

    return record


@config_app.command("list")
@guard
def config_list(
    ctx: typer.Context,
    resolved: Annotated[
        bool, typer.Option("--resolved", help="Show fully resolved config (default).", callback=_mode("resolved"))
    ] = False,
    global_: Annotated[
        bool, typer.Option("--global", help="Show global config file only.", callback=_mode("global"))
    ] = False,
    project: Annotated[
        bool, typer.Option("--project", help="Show project config file only.", callback=_mode("project"))
    ] = False,
    json_output: JsonOutput = False,
    default_collection: Annotated[
        str | None,
        text(
            "--default-collection",
            help="Fallback collection for resolved output; explicit config takes precedence.",
        ),
    ] = None,
) -> None:
    """Show configuration."""
    from memsearch_fast.cli import display

    mode = ctx.meta.get("config_list_mode", "resolved")
    if mode == "global":
        path = files.global_config_path()
        data, label = config_display.masked(files.load_file(path, check=False)), f"Global ({path})"
    elif mode == "project":
        path = files.project_config_path()
        data = config_display.masked(files.load_file(path, check=False))
        label = f"Project ({files.PROJECT_CONFIG_NAME})"  # always the current directory's, as 0.4.23 names it
    else:
        cfg = cfgmod.merged(default_collection=default_collection, resolve_env=False, warn=err)
        data, label = config_display.for_display(cfg), "Resolved (all sources merged)"
    if json_output:
        import json

        typer.echo(json.dumps(data, ensure_ascii=False))
    else:
        typer.echo(display.format_config(data, label))


@config_app.command("init")
@guard
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
    target = files.project_config_path() if project else files.global_config_path()
    existing = files.load_file(target)
    # The wizard edits the target file: its own values over the defaults.
    current = files.deep_merge(files.defaults(), existing)
    ask = stdin_is_tty()
    keys = sorted(schema.PROJECT_ALLOWED) if project else [k for k in schema.SCHEMA if _asked(k)]
    flat_existing = files.flatten(existing)
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
        if schema.is_secret(key) and not value:
            continue
        files.set_path(data, key, files.parse_value(key, value, str(target)))
    files.save_file(data, target)
    typer.echo(f"Config saved to {target}")


def _asked(key: str) -> bool:
    """What the global wizard asks: what the reference's asks, less its advanced
    maintenance tasks (no command uses them yet); not the reranker, the
    deprecated [compact] table or the dsh plugin."""
    parts = key.split(".")
    if parts[0] == "plugins":
        return parts[1] != "dsh" and parts[2] == "summarize"
    if parts[0] == "prompts":
        return parts[1] in ("compact", "summarize")
    return key != "reranker.model" and parts[0] != "compact"


#: One line per question of the wizard: what the setting does (``plugins.*``
#: keys by their last part, for every platform alike).
_EXPLAIN = {
    "milvus.uri": "where the index lives: a local database file, or http(s)://host:port of a Milvus server",
    "milvus.token": "the Milvus server's or Zilliz Cloud's token (empty for a local database)",
    "milvus.collection": "the collection the commands use when none is given",
    "embedding.provider": "what turns text into vectors: onnx (local, no key), openai, ollama, voyage, google, "
    "jina, mistral or local",
    "embedding.model": "the provider's model (empty: its default)",
    "embedding.batch_size": "texts per embedding request or inference batch (0: the provider's default)",
    "embedding.base_url": "an OpenAI-compatible or other server of your own (empty: the provider's endpoint)",
    "embedding.api_key": "the embedding provider's API key",
    "chunking.max_chunk_size": "the longest chunk, in characters; longer sections are split",
    "chunking.overlap_lines": "lines repeated between the pieces of a split section",
    "indexing.ignore_files": "ignore files (gitignore syntax) whose rules every index and watch run follows",
    "indexing.exclude": "gitignore-style patterns of paths never indexed",
    "watch.debounce_ms": "quiet time after the last change before watch re-indexes, in milliseconds",
    "search.sync": "off, or lazy: search first re-indexes files changed since the last run",
    "llm.provider": "the LLM type for [llm] (openai, anthropic, gemini, ollama...; empty: none)",
    "llm.model": "the [llm] model",
    "llm.base_url": "the [llm] server (empty: the provider's endpoint)",
    "llm.api_key": "the [llm] API key",
    "prompts.compact": "a prompt file for compact (empty: the built-in prompt)",
    "prompts.summarize": "a prompt file for the hooks' turn notes (empty: the built-in prompt)",
    "enabled": "whether this agent's Stop hook writes turn notes",
    "provider": "the LLM that writes this agent's turn notes: native (the agent's own CLI), a type, or a "
    "[llm.providers.NAME] name",
    "model": "that LLM's model (empty: its default)",
}


def _explain(key: str) -> str:
    return _EXPLAIN.get(key) or (_EXPLAIN.get(key.rsplit(".", 1)[-1], "") if key.startswith("plugins.") else "")


def _prompt_value(key: str, current: Any) -> Any:
    """One prompt, after a line saying what the setting does; secrets are
    hidden and never echoed as the default."""
    about = _explain(key)
    if about:
        typer.echo(f"  # {about}")
    if schema.is_secret(key):
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
