"""Agent verbs that write memory through an LLM: `summarize`, `compact`, `skills`."""

from typing import Annotated, Optional

import typer

from memsearch_fast.cli.app import _guard, _not_available, app, skills_app
from memsearch_fast.cli.options import (
    _PLUGIN_HELP,
    ApiKey,
    BaseUrl,
    BatchSize,
    Collection,
    DefaultCollection,
    JsonOutput,
    MilvusToken,
    MilvusUri,
    Model,
    Provider,
    _text,
)


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
