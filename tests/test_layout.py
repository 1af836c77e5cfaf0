"""The package's shape: no import circle, nothing imports the CLI, every module imports alone."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "python" / "memsearch_fast"


def _modules() -> dict[str, Path]:
    out: dict[str, Path] = {}
    for path in sorted(PKG.rglob("*.py")):
        parts = ["memsearch_fast", *path.relative_to(PKG).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


MODULES = _modules()


def _walk(node: ast.AST) -> list[ast.AST]:
    """Every node below *node*, ``if TYPE_CHECKING:`` blocks included: a circle
    of type-only imports is still two modules that cannot be read apart."""
    out: list[ast.AST] = []
    for child in ast.iter_child_nodes(node):
        out.append(child)
        out.extend(_walk(child))
    return out


def _imports(path: Path) -> set[str]:
    """memsearch_fast modules imported by *path*, at module level or lazily inside a function."""
    found: set[str] = set()
    for node in _walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        else:
            continue
        found.update(n for n in names if n in MODULES)
    return found


def _graph() -> dict[str, set[str]]:
    """Imports (lazy ones too: a lazy import back is still a circle), plus the
    packages every import passes through."""
    graph: dict[str, set[str]] = {}
    for name, path in MODULES.items():
        deps = set()
        for dep in _imports(path):
            parts = dep.split(".")
            deps.update(".".join(parts[:i]) for i in range(2, len(parts) + 1))
        deps.discard(name)
        # A package's own submodules run after it: importing them is not a cycle back.
        graph[name] = {d for d in deps if d in MODULES and not name.startswith(d + ".")}
    return graph


def test_no_import_circle() -> None:
    graph = _graph()
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for dep in sorted(graph[node]):
            if state.get(dep) == 1:
                cycle = [*stack[stack.index(dep) :], dep]
                raise AssertionError("import circle: " + " -> ".join(cycle))
            if dep not in state:
                visit(dep)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)


def test_nothing_outside_the_cli_imports_it() -> None:
    for name, path in MODULES.items():
        if name.startswith("memsearch_fast.cli") or name == "memsearch_fast.__main__":
            continue
        cli = {d for d in _imports(path) if d.startswith("memsearch_fast.cli")}
        assert not cli, f"{name} imports {sorted(cli)}"


#: Third-party modules the package's modules import: loaded once, before the
#: forks, so each fork pays for the package's own imports alone.
_PRELOADED = ("numpy", "typer", "mcp", "orjson", "anyio", "pymilvus", "onnxruntime")

_IMPORT_EACH = """
import importlib, os, sys
for heavy in sys.argv[1].split(","):
    try:
        importlib.import_module(heavy)
    except ImportError:
        pass
failed = []
for name in sys.argv[2:]:
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # a child imports one module into an interpreter no package module is in
        os.close(r)
        code = 0
        try:
            importlib.import_module(name)
        except BaseException as e:
            os.write(w, f"{name}: {type(e).__name__}: {e}".encode()[:4000])
            code = 1
        os._exit(code)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        message = f.read().decode()
    _, status = os.waitpid(pid, 0)
    if status:
        failed.append(message or f"{name}: exit status {status}")
print("\\n".join(failed))
"""


@pytest.mark.slow(reason="imports each of the package's modules in an interpreter of its own")
def test_every_module_imports_alone() -> None:
    """Each in an interpreter holding no module of the package (a fork of one
    that imported only the third-party libraries): an order-dependent circle
    would fail here."""
    names = [n for n in MODULES if not n.endswith("__main__")]
    cmd = [sys.executable, "-c", _IMPORT_EACH, ",".join(_PRELOADED), *names]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "", out.stdout


#: The floors of the house, lowest first: a module imports only from its own
#: floor or below (lazy and type-only imports included).
FLOORS = [
    {"_core", "_os", "errors", "parallelism"},
    {"config"},
    {"lite", "embeddings"},
    {"store", "llm"},
    {"index", "recall"},
    {"api"},
    {"serve", "agents"},
    {"cli", "__main__", ""},  # "": the package's own lazy re-exports
]


def _floor(module: str) -> int:
    room = module.split(".")[1] if "." in module else ""
    for i, rooms in enumerate(FLOORS):
        if room in rooms:
            return i
    raise AssertionError(f"{module} is on no floor: add its room to FLOORS")


def test_no_import_runs_up_the_floors() -> None:
    up = [
        f"{name} (floor {_floor(name)}) imports {dep} (floor {_floor(dep)})"
        for name, deps in _graph().items()
        for dep in sorted(deps)
        if _floor(dep) > _floor(name)
    ]
    assert not up, "\n".join(up)


#: Modules at the top of the package, beside the rooms: the facade, the
#: errors, the pool plan, the OS helpers and the package's own entry points.
LOOSE = {"__init__", "__main__", "_os", "api", "errors", "parallelism"}
#: A module past this many lines holds more than one role: split it by role.
MAX_LINES = 500


def test_rooms_hold_the_modules() -> None:
    loose = {p.stem for p in PKG.glob("*.py")}
    assert loose <= LOOSE, f"modules loose at the package top: {sorted(loose - LOOSE)}; give them a room"


def test_no_module_holds_more_than_one_role() -> None:
    long = {
        name: n
        for name, path in MODULES.items()
        if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert not long, f"modules over {MAX_LINES} lines: {long}"


def test_the_architecture_table_names_every_module() -> None:
    """docs/architecture.md says where a change belongs: a new module gets its place there."""
    doc = (PKG.parents[1] / "docs" / "architecture.md").read_text(encoding="utf-8")
    unnamed = []
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG)
        if path.stem == "__init__" and len(rel.parts) > 1:
            continue  # a room is named by its folder
        names = (f"`{rel.as_posix()}`", rel.as_posix(), f"`{path.stem}`", f"`{path.stem}.py`")
        if not any(n in doc for n in names):
            unnamed.append(rel.as_posix())
    assert not unnamed, f"modules docs/architecture.md does not place: {unnamed}"


def _slow(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    return any("mark.slow" in ast.unparse(d) for d in node.decorator_list)


def test_every_test_module_has_a_test_in_the_quick_tier() -> None:
    """`pytest -m "not slow"` is the tier for a change in hand: it must reach every
    module, so a module all of whose tests are slow keeps its cheapest one quick."""
    tests = PKG.parents[1] / "tests"
    only_slow = []
    for path in sorted(tests.rglob("test_*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        funcs = [
            n
            for n in tree.body
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name.startswith("test_")
        ]
        if funcs and all(_slow(f) for f in funcs):
            only_slow.append(path.relative_to(tests).as_posix())
    assert not only_slow, f"test modules without a quick test: {only_slow}"
