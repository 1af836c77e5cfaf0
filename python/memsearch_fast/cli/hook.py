"""`memsearch hook PLATFORM EVENT`: the one implementation behind the agent plugins in ``hooks/``."""

from typing import Annotated

import typer

from memsearch_fast.cli.app import app, guard

_EVENTS = "session-start, user-prompt, stop, pre-compact, session-end, locate"


@app.command()
@guard
def hook(
    platform: Annotated[
        str, typer.Argument(metavar="PLATFORM", help="claude-code, codex, opencode or openclaw.", show_default=False)
    ],
    event: Annotated[str, typer.Argument(metavar="EVENT", help=f"{_EVENTS}.", show_default=False)],
    job: Annotated[str | None, typer.Option("--job", hidden=True)] = None,
) -> None:
    """Run an agent hook: the agent's JSON on stdin, the agent's JSON on stdout.

    Always exits 0 with one JSON object (nothing for Codex's Stop, which
    rejects {}); problems go to .memsearch/hooks.log. MEMSEARCH_DISABLE=1
    makes every event print {} and touch nothing. `memsearch-hook PLATFORM
    EVENT` is the same without the CLI's start-up time.
    """
    from memsearch_fast.agents.main import dispatch

    code = dispatch(platform, event, job)
    if code:
        raise typer.Exit(code)
