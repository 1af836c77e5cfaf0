"""Every ``MEMSEARCH_*`` environment variable, declared once, and the readers that parse them.

A variable that is read here is declared here (name, type, default, meaning), so
the switch words and number rules are the same everywhere, a reader cannot read
a name nobody declared, and docs/environment.md is generated from the table
(``python -m memsearch_fast.config.environment``; tests/test_environment.py
checks the file and that every name in the package and in hooks/ is declared).
The hooks' shell and JavaScript shims cannot import this module: they read
their variables themselves, but those are declared here too (``read_by``).

Not declared: the prefixes in :data:`EXCLUDED`, the settings tests/ and benches/
read for themselves (``MEMSEARCH_TEST_OS_NAME``, which the package reads, is
declared). Standard library only, no dataclasses: the hooks import it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Literal, NamedTuple

from memsearch_fast.config.tuning import FALSE_WORDS, TRUE_WORDS

#: flag: on/off words (see :func:`flag`); set: any non-empty value is on;
#: int, float: numbers (see :func:`integer`, :func:`number`); str, path: text as given.
Kind = Literal["flag", "set", "int", "float", "str", "path"]
Value = bool | int | float | str

PYTHON = "python"
HOOKS = "hooks"
BOTH = "python, hooks"


class Variable(NamedTuple):
    """One declared variable (a tuple: no dataclasses on the hooks' import path)."""

    name: str
    kind: Kind
    default: Value
    meaning: str
    #: Set by memsearch itself for its own children, or a test seam: not a user's knob.
    internal: bool = False
    #: Who reads it: the Python package, the hooks' shims (shell, JavaScript, hooks/codex/install.py), or both.
    read_by: str = PYTHON
    #: Numbers below it (or equal to it, with *above*) are out of range.
    minimum: float | None = None
    above: bool = False
    #: An out-of-range number becomes the minimum (else the default).
    clamp: bool = False
    #: What other values do, where the kind's rule does not say it.
    other: str = ""
    #: The default as docs/environment.md shows it, where the value alone would not say it.
    shown: str = ""

    def otherwise(self) -> str:
        """What a value other than the documented ones does."""
        if self.other:
            return self.other
        if self.kind == "flag":
            words = FALSE_WORDS if self.default else TRUE_WORDS
            state = "off" if self.default else "on"
            return f"{state} with {'/'.join(words)} (any case); anything else: {'on' if self.default else 'off'}"
        if self.kind == "set":
            return "on with any non-empty value (`0` too)"
        if self.kind in ("int", "float"):
            what = "not a whole number" if self.kind == "int" else "not a number"
            if self.minimum is None:
                return f"{what}: the default"
            bound = f"{'at most' if self.above else 'below'} {_shown(self.minimum)}"
            if self.clamp:
                return f"{what}: the default; {bound}: {_shown(self.minimum)}"
            return f"{what} or {bound}: the default"
        return ""


def _shown(value: Value) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


_ALL = (
    # -- where memory lives, and the hooks ----------------------------------------------------
    Variable(
        "MEMSEARCH_DIR",
        "path",
        "",
        "The memory folder instead of each project's `.memsearch` (relative paths are the project's, `~` expands); "
        "one folder for every project shares their memory",
    ),
    Variable("MEMSEARCH_DISABLE", "flag", False, "Every hook does nothing; the plugins' tools say so", read_by=BOTH),
    Variable(
        "MEMSEARCH_NO_WATCH",
        "flag",
        False,
        "The hooks start no watcher and hold no watch lease (set for the hooks' own workers and agent CLIs)",
    ),
    Variable(
        "MEMSEARCH_HOOK_DEADLINE",
        "float",
        0.0,
        "Seconds every hook event may take (0: each event's own, under the agent's timeout: SessionStart 8, "
        "UserPromptSubmit 4, Stop and PreCompact 25)",
        minimum=0,
        above=True,
    ),
    Variable(
        "MEMSEARCH_SUMMARIZE_TIMEOUT",
        "float",
        100.0,
        "Seconds the capture worker's summarizer may take",
        minimum=0,
        above=True,
    ),
    Variable(
        "MEMSEARCH_CODEX_PROFILE",
        "str",
        "",
        "The Codex profile (`codex exec -p`) that writes Codex's notes and maintenance answers when Codex's own "
        "CLI does (unset or blank: Codex's default; spaces around it are dropped)",
    ),
    Variable(
        "MEMSEARCH_COMPACT_PART_CHARS",
        "int",
        60_000,
        "Characters of text summarized in one request by `compact` (longer texts go in parts)",
        minimum=1000,
    ),
    Variable(
        "MEMSEARCH_CMD",
        "str",
        "",
        "The `memsearch` command the hooks run when it is not on PATH: a path (spaces allowed) or a command line "
        "(the JavaScript plugins also take a JSON array)",
        read_by=HOOKS,
    ),
    Variable(
        "MEMSEARCH_PLUGIN_TIMEOUT_MS",
        "float",
        0.0,
        "Caps every deadline of the OpenCode and OpenClaw plugins, in milliseconds (0: no cap)",
        read_by=HOOKS,
        minimum=0,
        above=True,
    ),
    Variable(
        "MEMSEARCH_UPDATE_URL",
        "str",
        "",
        "A package index's JSON URL whose version the status line compares (asked by a detached refresh, "
        "cached 24 h); unset: no index is asked",
    ),
    Variable(
        "MEMSEARCH_OFFLINE",
        "flag",
        False,
        "No network: no model download (`HF_HUB_OFFLINE` too), no update check",
    ),
    Variable(
        "MEMSEARCH_DEBUG",
        "set",
        False,
        "Errors show their traceback instead of one line; a search the service left to the CLI says why",
    ),
    # -- indexing and search -------------------------------------------------------------------
    Variable(
        "MEMSEARCH_MODELS_DIR",
        "path",
        "",
        "The model cache (unset: `~/.memsearch/models`)",
    ),
    Variable(
        "MEMSEARCH_MAX_FILE_MB",
        "float",
        16.0,
        "The largest file indexed, in MiB (0: no limit)",
        minimum=0,
        clamp=True,
    ),
    Variable("MEMSEARCH_SPANS", "flag", True, "Span vectors are written beside the chunk vectors"),
    Variable(
        "MEMSEARCH_LITE_PK_INDEX",
        "flag",
        True,
        "A Milvus Lite 2.x database's primary keys are indexed when its engine starts (off: left as the engine makes "
        "them, for comparisons)",
    ),
    Variable(
        "MEMSEARCH_SPAN_STORE",
        "str",
        "",
        "`collection` keeps a Milvus Lite database's span vectors in a companion collection, as before (unset: in "
        "the file `<database>.spans` beside it)",
    ),
    Variable(
        "MEMSEARCH_SPAN_SCAN_MAX",
        "int",
        150_000,
        "Spans of a span file that a search without the in-memory copy scores one by one; past them, the spans of "
        "the chunks the dense and BM25 lists found",
        minimum=0,
        clamp=True,
    ),
    Variable(
        "MEMSEARCH_SPAN_DIMS",
        "int",
        128,
        "Dimensions a new collection's span vectors keep (0: every one)",
        minimum=0,
    ),
    Variable(
        "MEMSEARCH_SPAN_SHORTLIST",
        "int",
        4000,
        "Chunks, nearest by sign bits, whose span codes are scored (0: all)",
        minimum=0,
    ),
    Variable("MEMSEARCH_DENSE_INDEX", "flag", True, "Long-lived processes keep the vectors in memory"),
    Variable(
        "MEMSEARCH_DENSE_INDEX_MIN_ROWS",
        "int",
        20_000,
        "Rows a collection needs for the in-memory copy",
        minimum=0,
        clamp=True,
    ),
    Variable(
        "MEMSEARCH_DENSE_INDEX_MAX_ROWS",
        "int",
        200_000,
        "Chunks past which a collection's in-memory copy is a lean one (own vectors as codes)",
        minimum=0,
        clamp=True,
    ),
    Variable(
        "MEMSEARCH_LEAN_COPY_MAX_ROWS",
        "int",
        5_000_000,
        "Chunks past which a collection gets no in-memory copy at all",
        minimum=0,
        clamp=True,
    ),
    # -- the database's service ----------------------------------------------------------------
    Variable("MEMSEARCH_SEARCH_SERVICE", "flag", True, "`memsearch search` asks the database's service"),
    Variable(
        "MEMSEARCH_SEARCH_UNLOAD_S",
        "float",
        300.0,
        "Seconds without a search after which the service drops its models",
        minimum=0,
        above=True,
    ),
    Variable("MEMSEARCH_WATCH_SERVICE", "flag", True, "`memsearch watch` lets the database's service watch"),
    Variable("MEMSEARCH_INDEX_SERVICE", "flag", True, "`memsearch index` runs in the service when it holds the model"),
    Variable(
        "MEMSEARCH_WATCH_LEASE_S",
        "float",
        120.0,
        "Seconds a hook's watch lease lives without renewal",
        minimum=0,
        above=True,
    ),
    Variable(
        "MEMSEARCH_ENGINE_IDLE_S",
        "float",
        120.0,
        "Seconds after which the engine releases an unused collection (0: never)",
        minimum=0,
    ),
    Variable(
        "MEMSEARCH_ENGINE_LOADED",
        "int",
        3,
        "Collections the engine keeps loaded at most (0: no cap)",
        minimum=0,
    ),
    Variable(
        "MEMSEARCH_LITE_MODE",
        "str",
        "",
        "`server`: a local database is shared through one server process; `embedded`: opened in this process "
        "(unset: `server` on POSIX, `embedded` elsewhere)",
        other="a warning, then the unset default",
    ),
    Variable(
        "MEMSEARCH_LITE_IDLE_TIMEOUT",
        "float",
        600.0,
        "Seconds without clients before the Lite server exits",
        minimum=0,
        above=True,
    ),
    Variable(
        "MEMSEARCH_LITE_START_TIMEOUT",
        "float",
        120.0,
        "Seconds to wait for a Lite server to open a database",
        minimum=0,
        above=True,
    ),
    Variable(
        "MEMSEARCH_LITE_WARN_GB",
        "float",
        4 * 1024**3 / 1e9,
        "Database size, in GB, from which `index` and `status` say Lite no longer serves well (0: never)",
        minimum=0,
        clamp=True,
        shown="`4.294967296` (4 GiB)",
    ),
    # -- internal ------------------------------------------------------------------------------
    Variable(
        "MEMSEARCH_PLUGIN_ROOT",
        "path",
        "",
        "The plugin's folder, whose version the status line compares; set by the OpenCode and OpenClaw "
        "plugins and the Codex hooks",
        internal=True,
        read_by=BOTH,
    ),
    Variable(
        "MEMSEARCH_IN_STOP_WORKER",
        "set",
        False,
        "Set for the agent CLI the Stop worker summarizes with: its own hooks do nothing",
        internal=True,
    ),
    Variable(
        "MEMSEARCH_SHIM_HOPS",
        "int",
        0,
        "Claude Code's shell shims count themselves, so that a PATH leading back to them gives up",
        internal=True,
        other="set by the shims",
        read_by=HOOKS,
    ),
    Variable(
        "MEMSEARCH_TEST_OS_NAME",
        "str",
        "",
        "Tests' seam: replaces `os.name` in the hooks' POSIX check (`agents/posix.py`, hooks/codex/install.py)",
        internal=True,
        read_by=BOTH,
    ),
)

#: The declared variables by name.
VARIABLES: dict[str, Variable] = {v.name: v for v in _ALL}

#: Prefixes left undeclared on purpose, and why (a name under them that the package reads is still declared).
EXCLUDED = {
    "MEMSEARCH_TEST_": "the test harness's settings, read by tests/ alone (README, docs/testing.md)",
    "MEMSEARCH_BENCH_": "the benchmarks' sizes and rounds, read by benches/ alone (docs/performance.md)",
}


def declared(name: str) -> Variable:
    """The declaration of *name*; raises :class:`KeyError` for a name nobody declared."""
    try:
        return VARIABLES[name]
    except KeyError:
        raise KeyError(f"{name} is not declared in memsearch_fast.config.environment") from None


def _raw(var: Variable, env: Mapping[str, str] | None, kinds: tuple[Kind, ...]) -> str | None:
    if var.kind not in kinds:
        raise TypeError(f"{var.name} is declared {var.kind}, not read as {'/'.join(kinds)}")
    return (os.environ if env is None else env).get(var.name)


def flag(name: str, env: Mapping[str, str] | None = None) -> bool:
    """A switch: one that is off by default turns on with :data:`TRUE_WORDS`, one that is on
    turns off with :data:`FALSE_WORDS` (any case, spaces around ignored); anything else,
    or unset, leaves the default. A ``set`` variable is on with any non-empty value."""
    var = declared(name)
    raw = _raw(var, env, ("flag", "set"))
    return bool(raw) if var.kind == "set" else switched(raw, bool(var.default))


def switched(raw: str | None, default: bool = False) -> bool:
    """A switch's state from its value *raw* (None: unset), by :func:`flag`'s rule;
    for another program's switch that memsearch honours (``HF_HUB_OFFLINE``)."""
    word = (raw or "").strip().lower()
    return word not in FALSE_WORDS if default else word in TRUE_WORDS


def _ranged(var: Variable, value: float, default: float) -> float:
    if value != value:  # NaN: no number
        return default
    low = var.minimum
    if low is None or value > low or (value == low and not var.above):
        return value
    return low if var.clamp else default


def integer(name: str, default: int | None = None, env: Mapping[str, str] | None = None) -> int:
    """A whole number (``int()``'s syntax); unset, unparsable or out of range: *default*
    (else the declared one), or the minimum for a variable that clamps."""
    var = declared(name)
    raw = _raw(var, env, ("int",))
    fallback = int(var.default) if default is None else default
    try:
        value = int(raw) if raw is not None else fallback
    except ValueError:
        return fallback
    return int(_ranged(var, value, fallback))


def number(name: str, default: float | None = None, env: Mapping[str, str] | None = None) -> float:
    """A number (``float()``'s syntax; NaN counts as none); unset, unparsable or out of
    range: *default* (else the declared one), or the minimum for a variable that clamps."""
    var = declared(name)
    raw = _raw(var, env, ("float",))
    fallback = float(var.default) if default is None else default
    try:
        value = float(raw) if raw is not None else fallback
    except ValueError:
        return fallback
    return float(_ranged(var, value, fallback))


def text(name: str, env: Mapping[str, str] | None = None) -> str:
    """The value as set (not stripped), or the declared default when unset."""
    var = declared(name)
    raw = _raw(var, env, ("str", "path"))
    return str(var.default) if raw is None else raw


# -- docs/environment.md -------------------------------------------------------------------------


def _default_cell(var: Variable) -> str:
    if var.shown:
        return var.shown
    if var.kind in ("str", "path") and not var.default:
        return "unset"
    return f"`{_shown(var.default)}`"


def _table(variables: list[Variable]) -> list[str]:
    rows = ["| variable | type | default | read by | meaning | other values |", "| --- | --- | --- | --- | --- | --- |"]
    for v in variables:
        cells = (f"`{v.name}`", v.kind, _default_cell(v), v.read_by, v.meaning, v.otherwise())
        rows.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return rows


def markdown() -> str:
    """docs/environment.md, from the declarations."""
    public = [v for v in _ALL if not v.internal]
    internal = [v for v in _ALL if v.internal]
    lines = [
        "# Environment variables",
        "",
        "<!-- Generated by `python -m memsearch_fast.config.environment > docs/environment.md`"
        " from python/memsearch_fast/config/environment.py; tests/test_environment.py checks it. -->",
        "",
        f"memsearch reads {len(public)} variables a user may set, and {len(internal)} that it (or a test) sets."
        " Each is declared once, in `config/environment.py`, with its type and default;"
        " the package reads them only through its readers, and a test fails when a name"
        " nobody declared is read in the package or in `hooks/`.",
        "",
        "Switches (`flag`) that are off turn on with `1`, `true`, `yes` or `on`; those that are on"
        " turn off with `0`, `false`, `no` or `off` (any case, spaces around ignored); a `set` switch"
        " is on with any value. A number that does not parse, or is out of range, leaves the default"
        " (or becomes the bound), as the last column says.",
        "",
        *_table(public),
        "",
        "## Set by memsearch itself",
        "",
        "Not knobs: the hooks and plugins set these for their own children, or tests do.",
        "",
        *_table(internal),
        "",
        "## Not declared here",
        "",
        *(f"- `{prefix}*` (but those above): {why}." for prefix, why in EXCLUDED.items()),
        "- Other programs' variables the package honours: `HF_HUB_OFFLINE`, `CLAUDE_PROJECT_DIR`,"
        " `CLAUDE_PLUGIN_ROOT`, `CODEX_HOME`, the providers' API keys and base URLs (`env:VAR`"
        " in the configuration reads any variable).",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    print(markdown(), end="")
