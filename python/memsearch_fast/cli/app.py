"""The ``memsearch`` command line.

Commands and flags follow memsearch 0.4.23 so scripts and agent plugins
written for it keep working. This module holds the application, the error
guard and the entry point; the command modules beside it only parse
arguments, resolve configuration and print; the work happens in
:mod:`memsearch_fast.api`.
Heavy modules (the Rust core, onnxruntime, pymilvus, numpy, rich) are imported
inside the commands that need them, so ``memsearch --help`` and agent hooks
start fast. Every error is reported as one line on stderr with a non-zero exit
status; set ``MEMSEARCH_DEBUG=1`` to get the traceback instead.
"""

import contextlib
import functools
import os
import sys
from collections.abc import Callable, Sequence
from typing import Annotated, Any, Literal, NoReturn, TypeVar

import typer
from typer.core import TyperCommand

from memsearch_fast import __version__
from memsearch_fast.errors import describe

_F = TypeVar("_F", bound=Callable[..., Any])

#: Exit status for usage errors (and commands this version does not provide yet).
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
INTERRUPTED_MESSAGE = "interrupted; what was written is kept, rerun to finish"


class Command(TyperCommand):
    """A command whose usage line reads as the reference's (``QUERY``, ``PATHS...``).

    In plain help (a pipe) arguments appear only in the usage line, as in
    memsearch 0.4.23; rich help lists them in their own panel.
    """

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        pieces = [self.options_metavar] if self.options_metavar else []
        for param in self.get_params(ctx):
            if param.param_type_name == "argument":
                name = (param.metavar or param.name or "").upper()
                optional = not param.required
                name = f"{name}..." if param.nargs != 1 else name
                pieces.append(f"[{name}]" if optional else name)
        return pieces

    def format_options(self, ctx: Any, formatter: Any) -> None:
        rows = [
            row
            for param in self.get_params(ctx)
            if param.param_type_name == "option" and (row := param.get_help_record(ctx)) is not None
        ]
        if rows:
            with formatter.section("Options"):
                formatter.write_dl(rows)


class Typer(typer.Typer):
    """Typer whose commands are :class:`Command` unless told otherwise."""

    def command(self, *args: Any, cls: type[TyperCommand] | None = None, **kwargs: Any) -> Callable[[_F], _F]:
        decorate: Callable[[_F], _F] = super().command(*args, cls=cls or Command, **kwargs)
        return decorate


app = Typer(
    name="memsearch",
    help="memsearch — semantic memory search for markdown knowledge bases.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
config_app = Typer(help="Manage memsearch configuration.", no_args_is_help=True)
model_app = Typer(help="Manage local embedding models.", no_args_is_help=True)
skills_app = Typer(
    help="Distill, capture, list, and install candidate skills from memory (procedural memory).",
    no_args_is_help=True,
)
app.add_typer(config_app, name="config")
app.add_typer(model_app, name="model")
app.add_typer(skills_app, name="skills")

_APPS = (app, config_app, model_app, skills_app)


def err(line: str) -> None:
    typer.echo(line, err=True)


def fail(message: str, code: int = 1) -> NoReturn:
    err(f"Error: {message}")
    raise typer.Exit(code)


def _is_cli_signal(exc: BaseException) -> bool:
    """Exit/abort/usage exceptions that the command-line framework handles itself."""
    return type(exc).__module__.split(".")[0] in ("typer", "click")


def _debug() -> bool:
    """``MEMSEARCH_DEBUG`` is set: errors keep their traceback."""
    from memsearch_fast.config import environment

    return environment.flag("MEMSEARCH_DEBUG")


def guard(func: _F) -> _F:
    """Turn any error into one line on stderr and Ctrl-C into exit 130."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except KeyboardInterrupt:
            if _debug():
                raise
            err(INTERRUPTED_MESSAGE)
            raise typer.Exit(EXIT_INTERRUPTED) from None
        except BrokenPipeError:
            # The reader went away (`memsearch search … | head`): stop quietly.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            raise typer.Exit(1) from None
        except Exception as exc:
            if _is_cli_signal(exc) or _debug():
                raise
            fail(describe(exc))

    return wrapper  # type: ignore[return-value]


def run(coro: Any) -> Any:
    """Run a coroutine, on uvloop when it is installed (the `uvloop` extra)."""
    try:
        import uvloop
    except ImportError:
        import asyncio

        return asyncio.run(coro)
    return uvloop.run(coro)


def stdin_is_tty() -> bool:
    try:
        return sys.stdin is not None and sys.stdin.isatty()
    except (AttributeError, ValueError):
        return False


def _stdout_is_tty() -> bool:
    try:
        return sys.stdout is not None and sys.stdout.isatty()
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
        with contextlib.suppress(AttributeError, OSError, ValueError):
            stream.reconfigure(encoding="utf-8", errors="replace")  # type: ignore[union-attr]


def _help_style() -> None:
    """Rich help panels on a terminal, plain text in a pipe (and no rich import there).

    Colour follows rich's own rules: none when ``NO_COLOR`` is set.
    """
    mode: Literal["rich"] | None = "rich" if _stdout_is_tty() and os.environ.get("TERM") != "dumb" else None
    for sub in _APPS:
        sub.rich_markup_mode = mode


def main(argv: Sequence[str] | None = None) -> None:
    """Console-script entry point; errors that escape a command still end in one line."""
    _utf8_streams()
    _help_style()
    try:
        app(args=list(argv) if argv is not None else None, prog_name="memsearch")
    except KeyboardInterrupt:
        if _debug():
            raise
        err(INTERRUPTED_MESSAGE)
        sys.exit(EXIT_INTERRUPTED)
    except Exception as exc:
        if _debug():
            raise
        err(f"Error: {describe(exc)}")
        sys.exit(1)
