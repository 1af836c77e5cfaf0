"""Agent verbs that write memory through an LLM: `summarize`, `compact`, `skills`."""

from typing import Annotated

import typer

from memsearch_fast.cli.app import EXIT_USAGE, app, err, fail, guard, skills_app, stdin_is_tty
from memsearch_fast.cli.options import (
    EMBEDDING,
    MILVUS,
    PLUGIN_HELP,
    EmbeddingOptions,
    JsonOutput,
    MilvusOptions,
    flatten,
    text,
)


@app.command()
@guard
@flatten
def compact(
    source: Annotated[str | None, text("--source", "-s", help="Only compact chunks from this source.")] = None,
    output_dir: Annotated[
        str | None,
        typer.Option("--output-dir", "-o", metavar="PATH", help="Directory to write the compact summary into."),
    ] = None,
    llm_provider: Annotated[str | None, text("--llm-provider", help="LLM for summarization.")] = None,
    llm_model: Annotated[str | None, text("--llm-model", help="Override LLM model.")] = None,
    llm_base_url: Annotated[str | None, text("--llm-base-url", help="OpenAI-compatible base URL for the LLM.")] = None,
    llm_api_key: Annotated[str | None, text("--llm-api-key", help="API key for the LLM provider.")] = None,
    prompt: Annotated[str | None, text("--prompt", help="Custom prompt template (must contain {chunks}).")] = None,
    prompt_file: Annotated[
        str | None, typer.Option("--prompt-file", metavar="PATH", help="Read prompt template from file.")
    ] = None,
    milvus: MilvusOptions = MILVUS,
    embedding: EmbeddingOptions = EMBEDDING,
) -> None:
    """Compress stored memories into a summary.

    The selected chunks go to the LLM ([llm], else the [compact] keys, else
    OpenAI); the summary is added to OUTPUT_DIR/memory/YYYY-MM-DD.md under
    "## Memory Compact HH:MM" (atomically) and that file is indexed.
    """
    from memsearch_fast.agents import compact as compacting
    from memsearch_fast.cli.options import memsearch, settings

    cfg = settings(milvus, embedding)
    llm = {"provider": llm_provider, "model": llm_model, "base_url": llm_base_url, "api_key": llm_api_key}
    ms = memsearch(cfg)
    try:
        result = compacting.run(
            ms,
            cfg,
            source=compacting.normalize_source(source),
            output_dir=output_dir,
            llm=llm,
            prompt=prompt,
            prompt_file=prompt_file,
        )
    except compacting.CompactError as exc:
        fail(str(exc), EXIT_USAGE)
    finally:
        ms.close()
    if result.summary:
        typer.echo("Compact complete. Summary:\n")
        typer.echo(result.summary)
    elif source:
        typer.echo(f"No chunks matched source: {compacting.normalize_source(source)}")
    else:
        typer.echo("No chunks to compact.")


@app.command()
@guard
def summarize(
    plugin: Annotated[str, text("--plugin", help=PLUGIN_HELP)],
    agent_name: Annotated[str, text("--agent-name", help="Agent display name for the summarize prompt.")] = "",
) -> None:
    """Summarize stdin using a configured memsearch-managed LLM provider."""
    import sys

    from memsearch_fast import config as cfgmod
    from memsearch_fast.agents import summarize as notes

    # Usage problems first, then the route, then stdin (as the reference):
    # exit 2 for both, and an unusable answer is an error, never printed.
    try:
        platform = notes.platform_of(plugin)
        cfg = cfgmod.resolve(resolve_env=False, warn=err)
        settings = notes.route(cfg, platform)
    except (notes.UnknownPluginError, notes.NativeSummarization) as exc:
        fail(str(exc), EXIT_USAGE)
    if stdin_is_tty():
        fail("summarize reads the turn to summarize on stdin", EXIT_USAGE)
    transcript = sys.stdin.buffer.read().decode("utf-8", "replace") if sys.stdin is not None else ""
    if not transcript.strip():
        return  # nothing to summarize: no notes, as the reference
    # Without --agent-name the prompt names the plugin id, as 0.4.23 does (the hooks pass display names).
    instructions = notes.load_prompt(cfg, agent_name.strip() or platform, warn=err)
    typer.echo(notes.summarize(settings, instructions, transcript))


@skills_app.command("add")
@guard
def skills_add(
    name: Annotated[str, text("--name", help="Skill name (slugified to the command and directory name).")],
    description: Annotated[
        str, text("--description", help="One line: what the skill does and when it should trigger.")
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
    """Persist an agent-drafted skill as a candidate (manual capture path).

    The agent supplies the content; this writes a structurally-correct candidate
    (frontmatter, meta.json, git commit) without any LLM call.
    """
    import sys
    from pathlib import Path

    from memsearch_fast.agents.skills import store

    if body_file == "-":
        data = sys.stdin.buffer.read() if sys.stdin is not None else b""
    else:
        try:
            data = Path(body_file).read_bytes()
        except OSError as exc:
            fail(f"Invalid value for '--body-file': {body_file!r}: {exc.strerror or exc}", EXIT_USAGE)
    slug = store.add(name, description, data.decode("utf-8", "replace"))
    typer.echo(f"Added candidate skill: {slug}")
    typer.echo(f"Install it with: memsearch skills install {slug} --path <dir>")


@skills_app.command("distill")
@guard
def skills_distill(
    plugin: Annotated[str, text("--plugin", help=PLUGIN_HELP)],
    force: Annotated[bool, typer.Option("--force", help="Run even if input is unchanged or not yet due.")] = False,
) -> None:
    """Mine recent memory journals for recurring workflows using a configured API provider.

    This is an explicit invocation, so it runs regardless of the
    ``memory_to_skill.enabled`` flag (which only gates the background pass).
    Requires an API provider: the default ``native`` provider drives the host
    agent and only works from the background pass — for on-demand mining, use
    the ``/memory-to-skill`` skill, which reasons over the journals directly.
    """
    from memsearch_fast import config as cfgmod
    from memsearch_fast.agents import summarize as notes
    from memsearch_fast.agents.skills import distill

    try:
        platform = notes.platform_of(plugin)
    except notes.UnknownPluginError as exc:
        fail(str(exc), EXIT_USAGE)
    cfg = cfgmod.resolve(resolve_env=False, warn=err)
    if distill.provider_name(cfg, platform) == "native":
        fail(distill.native_refusal(platform), EXIT_USAGE)
    result = distill.distill(cfg, platform, force=force, warn=err)
    if result.skipped:
        typer.echo(f"Skipped: {result.reason or result.action}")
        return
    changed = result.created + result.updated
    if changed:
        typer.echo(f"Distilled {len(changed)} candidate skill(s): {', '.join(changed)}")
    else:
        typer.echo("No new candidate skills.")


@skills_app.command("install")
@guard
def skills_install(
    name: Annotated[str, typer.Argument(metavar="NAME", show_default=False)],
    path: Annotated[
        list[str] | None,
        text("--path", help="Install destination (repeatable). E.g. .claude/skills"),
    ] = None,
) -> None:
    """Install a candidate skill into one or more agent skill directories."""
    from memsearch_fast.agents.skills import store

    if not path:
        fail("no --path given. Specify where to install, e.g. --path .claude/skills", EXIT_USAGE)
    for dest in store.install(name, path):
        typer.echo(f"Installed: {dest}")


@skills_app.command("list")
@guard
def skills_list(json_output: JsonOutput = False) -> None:
    """List candidate and installed skills in the store."""
    import json

    from memsearch_fast.agents.skills import store

    _project, mem_root = store.resolve_roots()
    candidates = store.list_candidates(mem_root)
    if json_output:
        typer.echo(json.dumps(candidates, indent=2, ensure_ascii=False))
    elif not candidates:
        typer.echo("No skills in the store yet.")
    else:
        for meta in candidates:
            typer.echo(store.format_list_line(meta))


@skills_app.command("status")
@guard
def skills_status(
    json_output: JsonOutput = False,
    hint: Annotated[
        bool, typer.Option("--hint", help="Print only the startup hint when candidate skill versions are pending.")
    ] = False,
) -> None:
    """Show whether candidate skills need review and installation."""
    import json

    from memsearch_fast.agents.skills import store

    _project, mem_root = store.resolve_roots()
    summary = store.review_summary(mem_root)
    rendered = store.format_hint(summary)
    if json_output:
        typer.echo(json.dumps(summary, indent=2, ensure_ascii=False))
    elif hint:
        if rendered:
            typer.echo(rendered)
    elif not rendered:
        typer.echo("No candidate skill versions pending install.")
    else:
        typer.echo(rendered)
        typer.echo(f"New: {summary['new_count']}; updated: {summary['updated_count']}.")
