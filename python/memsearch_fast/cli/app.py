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


def _stdin_is_tty() -> bool:
    try:
        return sys.stdin is not None and sys.stdin.isatty()
    except (AttributeError, ValueError):
        return False


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
