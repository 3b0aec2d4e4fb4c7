"""The house's imports, walked from the source: no circle between its folders, and no door around
the import contract.

lint-imports checks the layers, but sees only the import statements; ``importlib.import_module``
with a module's name in a string is an import it cannot see.  This walk reads every module's
syntax tree (every import statement, inside functions too; an ``if TYPE_CHECKING:`` block is
not run, so it is left out) and counts such a call as the import it is.  The one dependency of
the core on presentation is tensorledger.display's, declared in pyproject's ``ignore_imports``;
the walk leaves out exactly what is declared there.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

import tensorledger

if sys.version_info >= (3, 11):
    import tomllib
else:  # a dependency below 3.11 (pyproject)
    import tomli as tomllib

SRC = Path(tensorledger.__file__).parent
PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"
ROOT = "tensorledger"
DOOR = ("tensorledger.display", "tensorledger.report.views")
#: Presentation: the only folders that may name tensorledger.report.
PRESENTATION = {"report", "cli"}

Edge = tuple[str, str]  # (importer, imported), dotted module names


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _named_module(call: ast.Call) -> str | None:
    """The module an ``importlib.import_module(...)`` / ``__import__(...)`` call names, as far
    as its first argument's text says (an f-string up to its first placeholder)."""
    func = call.func
    called = (func.attr if isinstance(func, ast.Attribute) else
              func.id if isinstance(func, ast.Name) else None)
    if called not in ("import_module", "__import__") or not call.args:
        return None
    arg = call.args[0]
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return arg.value
    if isinstance(arg, ast.JoinedStr) and arg.values and isinstance(arg.values[0], ast.Constant):
        return str(arg.values[0].value).rstrip(".") or None
    return None


def _walk(node: ast.AST) -> Iterator[ast.AST]:
    """Every node under *node*, the bodies of ``if TYPE_CHECKING:`` left out."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and _is_type_checking(child.test):
            for other in child.orelse:
                yield other
                yield from _walk(other)
            continue
        yield child
        yield from _walk(child)


def _imports(path: Path) -> Iterator[str]:
    module = _module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in _walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            if base == ROOT:  # `from tensorledger import units`: the submodule
                yield from (f"{ROOT}.{alias.name}" for alias in node.names)
            else:
                yield base
        elif isinstance(node, ast.Call):
            named = _named_module(node)
            if named is not None:
                yield named


def _edges() -> set[Edge]:
    return {(_module_name(path), imported) for path in sorted(SRC.rglob("*.py"))
            for imported in _imports(path) if imported.split(".")[0] == ROOT}


def _declared() -> set[Edge]:
    contracts = tomllib.loads(PYPROJECT.read_text())["tool"]["importlinter"]["contracts"]
    declared = set()
    for contract in contracts:
        for line in contract.get("ignore_imports", []):
            importer, _, imported = line.partition("->")
            declared.add((importer.strip(), imported.strip()))
    return declared


def _folder(module: str) -> str:
    """The room a module lives in: its top-level package or module (the root package's own
    ``__init__`` is the front door, a room of its own)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ROOT


def _circles(edges: set[Edge]) -> list[list[str]]:
    """The folder graph's strongly connected components of more than one folder (Tarjan)."""
    graph: dict[str, set[str]] = {}
    for importer, imported in edges:
        a, b = _folder(importer), _folder(imported)
        graph.setdefault(a, set())
        graph.setdefault(b, set())
        if a != b:
            graph[a].add(b)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_walk_sees_imports_inside_functions_and_importlib_calls() -> None:
    edges = _edges()
    assert DOOR in edges  # an import statement inside display.view's body
    assert ("tensorledger.report.render", "tensorledger.ledger.account") in edges
    # a string passed to importlib is an import (tensorledger.__getattr__ loads the tracer so)
    assert ("tensorledger", "tensorledger.trace") in edges
    # report/meter.py names the meter's records for its annotations only: not an import that runs
    assert ("tensorledger.report.meter", "tensorledger.bench.meter_records") not in edges


def test_a_circle_is_found() -> None:
    edges = {("tensorledger.a.x", "tensorledger.b.y"), ("tensorledger.b.z", "tensorledger.c"),
             ("tensorledger.c", "tensorledger.a"), ("tensorledger.d", "tensorledger.a.x")}
    assert _circles(edges) == [["a", "b", "c"]]
    assert _circles(edges - {("tensorledger.c", "tensorledger.a")}) == []


def test_the_contract_declares_one_door() -> None:
    # every contract that would see the door declares the same one, and nothing else
    assert _declared() == {DOOR}


def test_no_circle_between_folders() -> None:
    assert _circles(_edges() - _declared()) == []


def test_the_core_opens_no_importlib_door_to_presentation() -> None:
    doors = set()
    for path in sorted(SRC.rglob("*.py")):
        module = _module_name(path)
        if _folder(module) in PRESENTATION:
            continue
        for node in _walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call):
                named = _named_module(node)
                if named is not None and named.startswith(f"{ROOT}.report"):
                    doors.add((module, named))
    assert doors == set()

