"""The mutant names of the functions a change touched, for an incremental mutation run.

    python scripts/mutation_changed.py [BASE]      # BASE defaults to origin/main, else main

prints one glob per changed function of the packages in ``[tool.mutmut] source_paths``
(``tensorledger.napkin.fit.x_fit_memory__mutmut_*``; a method is
``tensorledger.plan.estimate.xǁClassǁmethod__mutmut_*``), for ``mutmut run GLOB...``; the
Makefile's ``mutation-changed`` target runs them.  A function counts as changed when a line
of it differs from BASE (committed or not); a file new since BASE counts whole.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef, import-not-found, unused-ignore]


ROOT = Path(__file__).resolve().parent.parent
SEPARATOR = "ǁ"  # mutmut 3's class/method separator in mutant names


def _git(root: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True,
                          check=True).stdout


def _base(argv: list[str]) -> str:
    if argv:
        return argv[0]
    for ref in ("origin/main", "main"):
        if subprocess.run(["git", "rev-parse", "--verify", "-q", ref], cwd=ROOT,
                          capture_output=True).returncode == 0:
            return ref
    raise SystemExit("no base ref: give one, e.g. scripts/mutation_changed.py HEAD~3")


def changed_lines(root: Path, base: str, paths: list[str]) -> dict[str, set[int] | None]:
    """Path → the line numbers changed since ``base`` in the working tree (None: the whole
    file is new)."""
    new = set(_git(root, "diff", "--name-only", "--diff-filter=A", base, "--", *paths).split())
    new |= set(_git(root, "ls-files", "--others", "--exclude-standard", "--", *paths).split())
    lines: dict[str, set[int] | None] = {p: None for p in new if p.endswith(".py")}
    current: str | None = None
    for row in _git(root, "diff", "-U0", base, "--", *paths).splitlines():
        if row.startswith("+++ "):
            name = row[4:].removeprefix("b/")
            current = name if name.endswith(".py") and name not in lines else None
            if current is not None:
                lines.setdefault(current, set())
        elif row.startswith("@@") and current is not None:
            match = re.search(r"\+(\d+)(?:,(\d+))?", row)
            assert match is not None
            start, count = int(match.group(1)), int(match.group(2) or 1)
            # a pure deletion (count 0) touches the line it sat before
            target = lines[current]
            assert target is not None
            target.update(range(start, start + max(count, 1)))
    return lines


def _functions(tree: ast.Module) -> list[tuple[str, int, int]]:
    """(mangled name, first line, last line) of each top-level function and method."""
    found = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            found.append((f"x_{node.name}", node.lineno, node.end_lineno or node.lineno))
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    found.append((f"x{SEPARATOR}{node.name}{SEPARATOR}{item.name}",
                                  item.lineno, item.end_lineno or item.lineno))
    return found


def mutant_globs(base: str, root: Path = ROOT) -> list[str]:
    config = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["mutmut"]
    globs = []
    for path, lines in sorted(changed_lines(root, base, config["source_paths"]).items()):
        if path.endswith("__init__.py") or not (root / path).exists():
            continue
        module = path.removeprefix("src/").removesuffix(".py").replace("/", ".")
        tree = ast.parse((root / path).read_text())
        for name, first, last in _functions(tree):
            if lines is None or lines & set(range(first, last + 1)):
                globs.append(f"{module}.{name}__mutmut_*")
    return globs


if __name__ == "__main__":
    print("\n".join(mutant_globs(_base(sys.argv[1:]))))
