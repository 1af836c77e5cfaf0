"""`memsearch hook PLATFORM EVENT`: the one implementation behind the agent plugins in ``hooks/``."""

from typing import Annotated

import typer

from memsearch_fast.cli.app import EXIT_USAGE, app, fail, guard

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
    makes every event print {} and touch nothing.
    """
    import json
    import sys

    from memsearch_fast.agents import hooks

    if platform not in hooks.PLATFORMS:
        fail(f"unknown platform {platform!r}; expected one of {', '.join(hooks.PLATFORMS)}", EXIT_USAGE)
    if event == "capture" and job:  # the detached worker of stop and pre-compact
        from pathlib import Path

        from memsearch_fast.agents import capture

        raise typer.Exit(0 if hooks.disabled() else capture.run(Path(job)))
    if event not in hooks.EVENTS:
        fail(f"unknown event {event!r}; expected one of {_EVENTS}", EXIT_USAGE)
    output = hooks.run(platform, event)
    if output is not None:
        sys.stdout.write(json.dumps(output, ensure_ascii=False) + "\n")
