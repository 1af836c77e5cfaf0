"""`memsearch hook PLATFORM EVENT`: the one implementation behind the agent plugins in ``hooks/``."""

from typing import Annotated

import typer

from memsearch_fast.cli.app import app, guard

# The names agents.hooks accepts (PLATFORMS, EVENTS; a test keeps them equal),
# written here so that `--help` does not import the hooks.
_PLATFORMS = "claude-code, codex, opencode or openclaw"
_EVENTS = "session-start, user-prompt, stop, pre-compact, session-end or locate"
_HELP = f"""Run an agent hook: the agent's JSON on stdin, the agent's JSON on stdout.

\b
PLATFORM: {_PLATFORMS}
EVENT: {_EVENTS}
(locate prints the project's memory directory and collection, for skills)

Always exits 0 with one JSON object (nothing for Codex's Stop, which rejects
{{}}); problems go to .memsearch/hooks.log. MEMSEARCH_DISABLE=1 makes every
event print {{}} and touch nothing. `memsearch-hook PLATFORM EVENT` is the same
without the CLI's start-up time.
"""


@app.command(help=_HELP)
@guard
def hook(
    platform: Annotated[str, typer.Argument(metavar="PLATFORM", help=f"{_PLATFORMS}.", show_default=False)],
    event: Annotated[str, typer.Argument(metavar="EVENT", help=f"{_EVENTS}.", show_default=False)],
    job: Annotated[str | None, typer.Option("--job", hidden=True)] = None,
) -> None:
    """Run an agent hook (see ``_HELP``)."""
    from memsearch_fast.agents.main import dispatch

    code = dispatch(platform, event, job)
    if code:
        raise typer.Exit(code)
