"""``memsearch-hook PLATFORM EVENT``: the hook entry point, without the CLI's start-up.

The same as ``memsearch hook PLATFORM EVENT``, for the agents' hot paths
(UserPromptSubmit runs before every prompt): it imports neither Typer nor
anything it does not use, so a call costs the interpreter's start and the
event itself. On a system the hooks cannot run on (Windows, :mod:`.posix`)
every event answers with one line saying so.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence

from memsearch_fast.agents import posix


def usage() -> str:
    from memsearch_fast.agents import hooks

    return "usage: memsearch-hook PLATFORM EVENT  (platforms: {}; events: {})".format(
        ", ".join(hooks.PLATFORMS), ", ".join(hooks.EVENTS)
    )


def not_here(platform: str, event: str, reason: str) -> int:
    """A system the hooks cannot run on: the reason in one line (the status line on
    SessionStart, stderr always) and the answer that changes nothing."""
    print(reason, file=sys.stderr)
    if event == "session-start":
        sys.stdout.write(json.dumps({"systemMessage": reason}) + "\n")
    elif not (platform == "codex" and event in ("stop", "pre-compact")):  # as hooks.answer: nothing there
        sys.stdout.write("{}\n")
    sys.stdout.flush()
    return 0


def dispatch(platform: str, event: str, job: str | None = None) -> int:
    """Run one event and print its answer; the exit status (2 for a usage error)."""
    reason = posix.unsupported()
    if reason:  # before anything POSIX-only is imported
        return not_here(platform, event, reason)
    from memsearch_fast.agents import hooks

    if platform not in hooks.PLATFORMS:
        print(f"Error: unknown platform {platform!r}; expected one of {', '.join(hooks.PLATFORMS)}", file=sys.stderr)
        return 2
    if event in hooks.WORKERS and job:  # the detached workers of stop, pre-compact and session-end
        from pathlib import Path

        if hooks.disabled():
            return 0
        if event == "maintain":
            from memsearch_fast.agents import maintain

            return maintain.run(Path(job))
        from memsearch_fast.agents import capture

        return capture.run(Path(job))
    if event not in hooks.EVENTS:
        print(f"Error: unknown event {event!r}; expected one of {', '.join(hooks.EVENTS)}", file=sys.stderr)
        return 2
    output = hooks.run(platform, event)
    if output is not None:
        sys.stdout.write(json.dumps(output, ensure_ascii=False) + "\n")
        sys.stdout.flush()
    return 0


def main(argv: Sequence[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    job = None
    if "--job" in args:
        i = args.index("--job")
        job = args[i + 1] if i + 1 < len(args) else None
        del args[i : i + 2]
    if len(args) != 2 or args[0] in ("-h", "--help"):
        print(usage(), file=sys.stderr if args[:1] not in (["-h"], ["--help"]) else sys.stdout)
        sys.exit(0 if args[:1] in (["-h"], ["--help"]) else 2)
    sys.exit(dispatch(args[0], args[1], job))


if __name__ == "__main__":
    main()
