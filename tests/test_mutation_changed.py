"""scripts/mutation_changed.py names the mutants of exactly the functions a change touched."""

from __future__ import annotations

import importlib.util
import subprocess
from pathlib import Path
from types import ModuleType

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "mutation_changed.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("mutation_changed", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _git(root: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=root,
                   check=True, capture_output=True)


MODULE = '''def untouched(x):
    return x + 1


def edited(x):
    return x * 2


class Box:
    def size(self):
        return 3

    def weight(self):
        return 4
'''


def test_only_the_changed_functions_and_new_files_are_named(tmp_path: Path) -> None:
    script = _load()
    (tmp_path / "pyproject.toml").write_text(
        '[tool.mutmut]\nsource_paths = ["src/pkg"]\n')
    package = tmp_path / "src" / "pkg"
    package.mkdir(parents=True)
    (package / "mod.py").write_text(MODULE)
    (tmp_path / "outside.py").write_text("def elsewhere():\n    return 0\n")
    _git(tmp_path, "init", "-q", "-b", "main")
    _git(tmp_path, "add", "-A")
    _git(tmp_path, "commit", "-q", "-m", "base")
    assert script.mutant_globs("main", tmp_path) == []
    # edit one function and one method, add a new module, and touch a file outside the paths
    edited = MODULE.replace("x * 2", "x * 3").replace("return 4", "return 5")
    (package / "mod.py").write_text(edited)
    (package / "new.py").write_text("def fresh():\n    return 1\n")
    (tmp_path / "outside.py").write_text("def elsewhere():\n    return 1\n")
    assert sorted(script.mutant_globs("main", tmp_path)) == [
        "pkg.mod.x_edited__mutmut_*",
        "pkg.mod.xǁBoxǁweight__mutmut_*",
        "pkg.new.x_fresh__mutmut_*",
    ]
