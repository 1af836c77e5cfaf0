"""The environment registry: every ``MEMSEARCH_*`` name the package and hooks/ read is
declared, the readers parse as declared, and docs/environment.md is up to date."""

from __future__ import annotations

import ast
import importlib
import math
import re
from pathlib import Path

import pytest

from memsearch_fast.config import environment
from memsearch_fast.config.environment import VARIABLES, declared, flag, integer, number, switched, text

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "python" / "memsearch_fast"
REGISTRY = PKG / "config" / "environment.py"
#: A name, not the tail of another (click's ``_MEMSEARCH_COMPLETE`` is click's own).
TOKEN = re.compile(r"(?<![A-Za-z0-9_])MEMSEARCH_[A-Z0-9_]+")
#: An undeclared name, built so that this file holds no such token.
UNDECLARED = "MEMSEARCH" + "_NOT_DECLARED"


def _sources() -> dict[Path, str]:
    """The package's Python and Rust sources, and every text file under hooks/."""
    files = [*PKG.rglob("*.py"), *PKG.rglob("*.pyi"), *(ROOT / "rust").glob("*.rs")]
    files += [p for p in (ROOT / "hooks").rglob("*") if p.is_file() and "node_modules" not in p.parts]
    out: dict[Path, str] = {}
    for path in sorted(files):
        try:
            out[path] = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue  # not a source file
    return out


SOURCES = _sources()


def _tokens(where: Path) -> set[str]:
    """The names in the sources under *where*, the registry's own aside."""
    return {
        t
        for path, body in SOURCES.items()
        if path.is_relative_to(where) and path != REGISTRY
        for t in TOKEN.findall(body)
    }


def test_every_name_read_in_the_package_and_the_hooks_is_declared() -> None:
    found: dict[str, set[str]] = {}
    for path, body in SOURCES.items():
        for token in TOKEN.findall(body):
            found.setdefault(token, set()).add(path.relative_to(ROOT).as_posix())
    # A name ending in "_" is a prefix (``MEMSEARCH_LITE_*`` in a docstring): some declared
    # name starts with it, or it is one the registry leaves out on purpose.
    prefixes = {t for t in found if t.endswith("_")}
    for prefix in prefixes:
        known = prefix in environment.EXCLUDED or any(name.startswith(prefix) for name in VARIABLES)
        assert known, f"{prefix}* ({sorted(found[prefix])}) names nothing declared"
    undeclared = {t: sorted(found[t]) for t in found.keys() - prefixes if t not in VARIABLES}
    assert not undeclared, f"declare these in memsearch_fast/config/environment.py: {undeclared}"


def test_every_declared_name_is_read_where_it_says() -> None:
    """No declaration outlives its reader."""
    package = _tokens(PKG)
    hooks = _tokens(ROOT / "hooks")
    for var in VARIABLES.values():
        if "python" in var.read_by:
            assert var.name in package, f"{var.name}: declared read by the package, which never names it"
        if "hooks" in var.read_by:
            assert var.name in hooks, f"{var.name}: declared read by hooks/, which never names it"


def _module_constants(tree: ast.Module) -> dict[str, str]:
    """Module-level ``NAME = "MEMSEARCH_..."`` assignments."""
    out: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            for target in node.targets:
                if isinstance(target, ast.Name) and node.value.value.startswith("MEMSEARCH_"):
                    out[target.id] = node.value.value
    return out


def _reads_environ(node: ast.AST) -> ast.expr | None:
    """The key of ``os.environ.get(K)``, ``os.getenv(K)``, ``env.get(K)`` or ``os.environ[K]``, else None."""
    if isinstance(node, ast.Call) and node.args:
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr == "getenv":
            return node.args[0]
        if isinstance(func, ast.Attribute) and func.attr == "get":
            owner = func.value
            name = owner.attr if isinstance(owner, ast.Attribute) else owner.id if isinstance(owner, ast.Name) else ""
            if name in ("environ", "env"):
                return node.args[0]
    if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
        owner = node.value
        if isinstance(owner, ast.Attribute) and owner.attr == "environ":
            return node.slice
    return None


def test_the_package_reads_memsearch_variables_only_through_the_registry() -> None:
    trees = {path: ast.parse(path.read_text(encoding="utf-8")) for path in sorted(PKG.rglob("*.py"))}
    constants: dict[str, str] = {}
    for tree in trees.values():
        constants.update(_module_constants(tree))
    direct = []
    for path, tree in trees.items():
        if path == REGISTRY:
            continue
        for node in ast.walk(tree):
            key = _reads_environ(node)
            if key is None:
                continue
            if isinstance(key, ast.Constant) and isinstance(key.value, str):
                name = key.value
            elif isinstance(key, (ast.Name, ast.Attribute)):
                name = constants.get(key.id if isinstance(key, ast.Name) else key.attr, "")
            else:
                name = ""
            if name.startswith("MEMSEARCH_"):
                direct.append(f"{path.relative_to(ROOT)}:{node.lineno} reads {name}")
    assert not direct, "read these through memsearch_fast.config.environment:\n" + "\n".join(direct)


# -- the readers -----------------------------------------------------------------------------------


@pytest.mark.parametrize("raw", ["0", "off", "false", "no", " OFF ", "False", "\tNo\n"])
def test_a_switch_that_is_on_turns_off_with_the_false_words(raw: str) -> None:
    assert flag("MEMSEARCH_SPANS", {"MEMSEARCH_SPANS": raw}) is False


@pytest.mark.parametrize("raw", [None, "", "1", "on", "yes", "2", "disabled"])
def test_anything_else_leaves_a_switch_that_is_on(raw: str | None) -> None:
    env = {} if raw is None else {"MEMSEARCH_DENSE_INDEX": raw}
    assert flag("MEMSEARCH_DENSE_INDEX", env) is True


@pytest.mark.parametrize(("raw", "on"), [("1", True), (" TRUE ", True), ("Yes", True), ("on", True), ("0", False)])
def test_a_switch_that_is_off_turns_on_with_the_true_words(raw: str, on: bool) -> None:
    assert flag("MEMSEARCH_DISABLE", {"MEMSEARCH_DISABLE": raw}) is on
    assert flag("MEMSEARCH_DISABLE", {}) is False
    assert flag("MEMSEARCH_OFFLINE", {"MEMSEARCH_OFFLINE": "2"}) is False


def test_a_set_switch_is_on_with_any_value() -> None:
    assert flag("MEMSEARCH_DEBUG", {"MEMSEARCH_DEBUG": "0"}) is True
    assert flag("MEMSEARCH_DEBUG", {"MEMSEARCH_DEBUG": ""}) is False
    assert flag("MEMSEARCH_IN_STOP_WORKER", {}) is False


def test_another_programs_switch_reads_the_same_words() -> None:
    assert switched(" on ") and not switched(None) and not switched("0")
    assert switched(None, default=True) and not switched("off", default=True)


def test_integers_parse_and_fall_back_as_declared() -> None:
    name = "MEMSEARCH_COMPACT_PART_CHARS"  # 1000 at least, else the default
    assert integer(name, env={name: " 5000 "}) == 5000
    assert integer(name, env={name: "1000"}) == 1000
    for bad in ("999", "-1", "", "5k", "2.5"):
        assert integer(name, env={name: bad}) == 60_000, bad
    assert integer(name, env={}) == 60_000
    assert integer(name, 12_345, env={name: "x"}) == 12_345  # the caller's default wins over the declared one
    rows = "MEMSEARCH_DENSE_INDEX_MIN_ROWS"  # clamps: below 0 is 0
    assert integer(rows, env={rows: "-5"}) == 0
    assert integer(rows, env={rows: "abc"}) == 20_000
    dims = "MEMSEARCH_SPAN_DIMS"  # 0 is a value; below it, the default
    assert integer(dims, env={dims: "0"}) == 0
    assert integer(dims, env={dims: "-1"}) == 128


def test_numbers_parse_and_fall_back_as_declared() -> None:
    lease = "MEMSEARCH_WATCH_LEASE_S"  # above 0, else the default
    assert number(lease, env={lease: "2.5"}) == 2.5
    for bad in ("0", "-1", "nan", "", "soon"):
        assert number(lease, env={lease: bad}) == 120.0, bad
    idle = "MEMSEARCH_ENGINE_IDLE_S"  # 0 turns it off
    assert number(idle, env={idle: "0"}) == 0.0
    assert number(idle, env={idle: "-3"}) == 120.0
    mb = "MEMSEARCH_MAX_FILE_MB"  # clamps
    assert number(mb, env={mb: "-1"}) == 0.0
    assert number(mb, env={mb: "nan"}) == 16.0
    assert number("MEMSEARCH_HOOK_DEADLINE", env={}) == 0.0


def test_text_is_returned_as_set() -> None:
    assert text("MEMSEARCH_DIR", {"MEMSEARCH_DIR": " ~/x "}) == " ~/x "
    assert text("MEMSEARCH_DIR", {}) == ""


def test_an_undeclared_name_or_the_wrong_reader_is_refused() -> None:
    for read in (flag, integer, number, text):
        with pytest.raises(KeyError, match="not declared"):
            read(UNDECLARED)
    with pytest.raises(TypeError):
        integer("MEMSEARCH_SPANS")
    with pytest.raises(TypeError):
        flag("MEMSEARCH_DIR")
    with pytest.raises(TypeError):
        number("MEMSEARCH_SPAN_DIMS")


def test_every_default_has_its_kind() -> None:
    types = {"flag": bool, "set": bool, "int": int, "float": float, "str": str, "path": str}
    for var in VARIABLES.values():
        assert type(var.default) is types[var.kind], var.name
        assert var.meaning and var.name.startswith("MEMSEARCH_"), var.name
        assert var.read_by in (environment.PYTHON, environment.HOOKS, environment.BOTH), var.name


#: The modules' own defaults (what the callers pass), as the registry declares them.
CONSTANTS = {
    "MEMSEARCH_COMPACT_PART_CHARS": ("memsearch_fast.agents.compact", "DEFAULT_PART_CHARS", 1.0),
    "MEMSEARCH_SUMMARIZE_TIMEOUT": ("memsearch_fast.agents.capture", "DEFAULT_TIMEOUT_S", 1.0),
    "MEMSEARCH_MAX_FILE_MB": ("memsearch_fast.index.chunk", "DEFAULT_MAX_FILE_MB", 1.0),
    "MEMSEARCH_SPAN_DIMS": ("memsearch_fast.store.spans.basis", "DIMS", 1.0),
    "MEMSEARCH_SPAN_SHORTLIST": ("memsearch_fast.store.copy.spans", "SHORTLIST", 1.0),
    "MEMSEARCH_DENSE_INDEX_MIN_ROWS": ("memsearch_fast.store.copy.dense_index", "DEFAULT_MIN_ROWS", 1.0),
    "MEMSEARCH_DENSE_INDEX_MAX_ROWS": ("memsearch_fast.store.copy.dense_index", "DEFAULT_MAX_ROWS", 1.0),
    "MEMSEARCH_SEARCH_UNLOAD_S": ("memsearch_fast.serve.search", "DEFAULT_UNLOAD_S", 1.0),
    "MEMSEARCH_WATCH_LEASE_S": ("memsearch_fast.serve.watchers", "DEFAULT_LEASE_S", 1.0),
    "MEMSEARCH_ENGINE_IDLE_S": ("memsearch_fast.serve.keeper", "DEFAULT_IDLE_S", 1.0),
    "MEMSEARCH_ENGINE_LOADED": ("memsearch_fast.serve.keeper", "DEFAULT_LOADED", 1.0),
    "MEMSEARCH_LITE_IDLE_TIMEOUT": ("memsearch_fast.lite.settings", "DEFAULT_IDLE_TIMEOUT", 1.0),
    "MEMSEARCH_LITE_START_TIMEOUT": ("memsearch_fast.lite.settings", "DEFAULT_START_TIMEOUT", 1.0),
    "MEMSEARCH_LITE_WARN_GB": ("memsearch_fast.lite.size", "WARN_BYTES", 1e-9),
}


@pytest.mark.parametrize("name", sorted(CONSTANTS))
def test_the_declared_default_is_the_one_the_caller_passes(name: str) -> None:
    module, attr, scale = CONSTANTS[name]
    value = getattr(importlib.import_module(module), attr) * scale
    assert math.isclose(value, float(declared(name).default)), f"{module}.{attr} = {value}, declared {name}"


def test_the_callers_keep_their_rules(monkeypatch: pytest.MonkeyPatch) -> None:
    from memsearch_fast.agents import hooks
    from memsearch_fast.index import chunk
    from memsearch_fast.lite import size

    for name in ("MEMSEARCH_HOOK_DEADLINE", "MEMSEARCH_MAX_FILE_MB", "MEMSEARCH_LITE_WARN_GB"):
        monkeypatch.delenv(name, raising=False)
    assert hooks._deadline("user-prompt") == 4.0
    assert size.warn_bytes() == size.WARN_BYTES
    assert chunk.max_file_limit() == 16 << 20
    monkeypatch.setenv("MEMSEARCH_HOOK_DEADLINE", "-1")
    assert hooks._deadline("stop") == 25.0
    monkeypatch.setenv("MEMSEARCH_HOOK_DEADLINE", "3")
    assert hooks._deadline("stop") == 3.0
    monkeypatch.setenv("MEMSEARCH_LITE_WARN_GB", "-2")
    assert size.warn_bytes() == 0
    monkeypatch.setenv("MEMSEARCH_LITE_WARN_GB", "1.5")
    assert size.warn_bytes() == 1_500_000_000
    monkeypatch.setenv("MEMSEARCH_MAX_FILE_MB", "-1")
    assert chunk.max_file_limit() == 0


def test_the_keeper_reads_its_two_numbers(monkeypatch: pytest.MonkeyPatch) -> None:
    from memsearch_fast.serve.keeper import Keeper

    monkeypatch.setenv("MEMSEARCH_ENGINE_IDLE_S", "0")  # 0 turns the idle rule off
    monkeypatch.setenv("MEMSEARCH_ENGINE_LOADED", "1")
    keeper = Keeper.from_env("", "", lambda _name: False)
    assert (keeper.idle_s, keeper.loaded) == (0.0, 1)
    monkeypatch.setenv("MEMSEARCH_ENGINE_IDLE_S", "-1")
    monkeypatch.setenv("MEMSEARCH_ENGINE_LOADED", "many")
    keeper = Keeper.from_env("", "", lambda _name: False)
    assert (keeper.idle_s, keeper.loaded) == (120.0, 3)


def test_docs_environment_md_is_generated_from_the_registry() -> None:
    doc = (ROOT / "docs" / "environment.md").read_text(encoding="utf-8")
    assert doc == environment.markdown(), (
        "docs/environment.md is stale: python -m memsearch_fast.config.environment > docs/environment.md"
    )
