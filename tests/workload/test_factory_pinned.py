"""The guard around user code, piece by piece (issue 42's mutation run of
``tensorledger.workload.factory``): the one line an error becomes, where it says the error
happened, and how a factory file is imported and picked apart."""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from tensorledger.errors import ConfigError, ModelError
from tensorledger.workload import factory
from tensorledger.workload.factory import describe_error, load_factory_file


def _traceback_of(call: Any) -> Any:
    try:
        call()
    except BaseException as error:  # the test wants whatever it raises
        return error.__traceback__
    raise AssertionError("the call did not raise")


def _two_files(tmp_path: Path) -> tuple[Path, Path, Any]:
    """``outer.py`` calls ``inner.py``'s function, which raises on its line 2."""
    inner = tmp_path / "inner.py"
    inner.write_text("def boom():\n    raise ValueError('x')\n")
    outer = tmp_path / "outer.py"
    outer.write_text("def call(f):\n    pass\n    f()\n")
    scope_inner: dict[str, Any] = {}
    exec(compile(inner.read_text(), str(inner), "exec"), scope_inner)
    scope_outer: dict[str, Any] = {}
    exec(compile(outer.read_text(), str(outer), "exec"), scope_outer)
    return inner, outer, lambda: scope_outer["call"](scope_inner["boom"])


# ---- the first line ---------------------------------------------------------------------------
def test_the_first_line_is_the_type_and_the_first_stripped_line_of_the_message() -> None:
    # "\n  first  \nsecond": stripped "first  \nsecond", its first line stripped "first"
    assert factory._first_line(ValueError("\n  first  \nsecond")) == "ValueError: first"


def test_an_empty_or_blank_message_leaves_the_type_alone() -> None:
    assert factory._first_line(ValueError()) == "ValueError"  # no lines at all
    assert factory._first_line(KeyError("")) == "KeyError: ''"  # KeyError's str is its repr
    assert factory._first_line(RuntimeError("   \n  ")) == "RuntimeError"  # stripped to ""


# ---- where ------------------------------------------------------------------------------------
def test_where_names_the_innermost_frame_in_the_given_files(tmp_path: Path) -> None:
    inner, outer, call = _two_files(tmp_path)
    tb = _traceback_of(call)
    assert factory._where(tb, (outer,)) == "outer.py:3"  # outer's line 3 calls f()
    assert factory._where(tb, (inner, outer)) == "inner.py:2"  # the innermost of both
    # none given (or none of them in the traceback): the innermost frame of all
    assert factory._where(tb, ()) == "inner.py:2"
    assert factory._where(tb, (tmp_path / "other.py",)) == "inner.py:2"
    assert factory._at(tb, (outer,)) == " (at outer.py:3)"


def test_where_finds_a_file_named_by_a_relative_path(tmp_path: Path, monkeypatch: Any) -> None:
    _, _, call = _two_files(tmp_path)
    tb = _traceback_of(call)
    monkeypatch.chdir(tmp_path)
    assert factory._where(tb, (Path("outer.py"),)) == "outer.py:3"  # resolved, then compared


def test_where_of_no_traceback_is_empty_and_so_is_at() -> None:
    assert factory._where(None, ()) == ""
    assert factory._at(None, ()) == ""


def test_the_guards_own_frames_are_never_the_place() -> None:
    # _refuse_exit raises in factory.py itself: only the test's frame is left
    factory._guarded.append(os.getpid())
    try:
        tb = _traceback_of(lambda: factory._refuse_exit(5))
    finally:
        factory._guarded.pop()
    # the innermost frame left is this test's (or, under mutmut, its trampoline's): not
    # factory.py's, even when factory.py is one of the files asked for
    assert factory._where(tb, ()).split(":")[0] not in ("", "factory.py")
    assert factory._where(tb, (Path(factory.__file__),)).split(":")[0] not in ("", "factory.py")


# ---- the module ------------------------------------------------------------------------------
class _Inner(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise RuntimeError("inside")


class _Outer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = _Inner()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(x)


def test_the_module_is_the_innermost_whose_method_ran() -> None:
    tb = _traceback_of(lambda: _Outer()(torch.zeros(1)))
    assert factory._module_of(tb) == "_Inner"  # _Outer's forward ran too, further out
    tb = _traceback_of(lambda: _Outer().forward(torch.zeros(1)))
    assert factory._module_of(tb) == "_Inner"


def test_no_module_in_the_traceback_is_empty() -> None:
    assert factory._module_of(_traceback_of(lambda: 1 / 0)) == ""
    assert factory._module_of(None) == ""


def test_a_module_failure_is_named_in_the_guards_line() -> None:
    with pytest.raises(ModelError, match=r"^the step failed in _Inner: RuntimeError: inside"), \
            factory.user_code("the step"):
        _Outer()(torch.zeros(1))


# ---- describe_error ---------------------------------------------------------------------------
@pytest.mark.parametrize("message", [
    "Tensor.item() cannot be called on meta tensors",
    "aten._local_scalar_dense on a Meta tensor",
    "meta: data-dependent expression",
    "META data dependent branch",
])
def test_a_value_asked_of_a_meta_tensor_points_to_fake(message: str) -> None:
    text = describe_error(RuntimeError(message))
    assert text == ("the model asked a tensor for its value (Tensor.item(), "
                    "aten._local_scalar_dense), which the meta device cannot answer; use "
                    f"--device fake (RuntimeError: {message})")


def test_meta_alone_or_item_alone_is_passed_through() -> None:
    assert describe_error(RuntimeError("meta tensors here")) == "RuntimeError: meta tensors here"
    assert describe_error(RuntimeError("item() failed")) == "RuntimeError: item() failed"


class DataDependentOutputException(RuntimeError):
    def __init__(self, func: object = None) -> None:
        super().__init__("no values")
        self.func = func


class DynamicOutputShapeException(RuntimeError):
    pass


def test_a_data_dependent_op_on_fake_points_to_cpu() -> None:
    assert describe_error(DataDependentOutputException("aten.nonzero.default")) == (
        "aten.nonzero.default needs tensor values that fake tensors do not have "
        "(DataDependentOutputException); use --device cpu on a size that fits")
    # no op on the error: "an op"
    assert describe_error(DynamicOutputShapeException("shape")) == (
        "an op needs tensor values that fake tensors do not have "
        "(DynamicOutputShapeException); use --device cpu on a size that fits")


@pytest.mark.parametrize("message", ["a Data-Dependent guard", "data dependent control flow"])
def test_a_data_dependent_message_of_any_type_points_to_cpu(message: str) -> None:
    assert describe_error(ValueError(message)) == (
        "an op needs tensor values that fake tensors do not have (ValueError); use --device "
        "cpu on a size that fits")


def test_another_error_is_its_first_line() -> None:
    assert describe_error(ValueError("bad\nmore")) == "ValueError: bad"


# ---- os._exit ----------------------------------------------------------------------------------
def test_exit_called_keeps_its_status() -> None:
    assert factory._ExitCalled(7).status == 7
    assert factory._ExitCalled(7).args == (7,)


class _Ended(Exception):
    """The stand-in for the real os._exit: the process would end here."""


def test_exit_refused_only_in_the_guarding_process(monkeypatch: Any) -> None:
    def real_exit(status: int) -> None:
        raise _Ended(status)

    monkeypatch.setattr(factory, "_real_exit", real_exit)
    monkeypatch.setattr(factory, "_guarded", [])
    with pytest.raises(_Ended, match=r"^3$"):  # no guard open: the process really ends
        factory._refuse_exit(3)
    monkeypatch.setattr(factory, "_guarded", [os.getpid() + 1])
    with pytest.raises(_Ended, match=r"^4$"):  # a child's: it ends too
        factory._refuse_exit(4)
    # the guard's own process (the outermost guard's entry is first): refused
    monkeypatch.setattr(factory, "_guarded", [os.getpid(), os.getpid() + 1])
    with pytest.raises(factory._ExitCalled) as caught:
        factory._refuse_exit(5)
    assert caught.value.status == 5


# ---- importing a factory file ------------------------------------------------------------------
def _module_name(path: Path) -> str:
    # sha1 of the resolved path, its first 12 hex digits
    return "_tensorledger_user_" + hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:12]


def test_a_factory_file_is_imported_under_a_name_of_its_path(tmp_path: Path) -> None:
    path = tmp_path / "f.py"
    path.write_text("import torch\n"
                    "def make():\n    return torch.nn.Linear(2, 3)\n"
                    "def make_inputs(b, s):\n    return torch.zeros(b, s)\n"
                    "def _hidden():\n    pass\n")
    loaded = load_factory_file(path, "make")
    name = _module_name(path)
    try:
        assert sys.modules[name].__name__ == name
        assert loaded.factory.__module__ == name
        assert loaded.path == path and loaded.name == "make"
        assert loaded.make_inputs is not None and loaded.make_inputs(2, 3).shape == (2, 3)
        assert loaded.loss is None
    finally:
        sys.modules.pop(name, None)


def test_a_file_that_fails_to_import_leaves_no_module_behind(tmp_path: Path) -> None:
    path = tmp_path / "bad.py"
    path.write_text("x = 1\nraise ValueError('no')\n")
    with pytest.raises(ModelError, match=r"^importing .*bad\.py failed: ValueError: no "
                                         r"\(at bad\.py:2\)$"):
        load_factory_file(path, "make")
    assert _module_name(path) not in sys.modules


def test_a_file_python_cannot_import_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "model.txt"  # no loader for a .txt
    path.write_text("x = 1\n")
    with pytest.raises(ConfigError, match=r"^cannot import .*model\.txt as a Python file$"):
        load_factory_file(path, "make")


def test_a_missing_function_lists_the_files_own_public_functions(tmp_path: Path) -> None:
    path = tmp_path / "g.py"
    # `join` is imported (another module's), `_private` private, `value` not callable
    path.write_text("from os.path import join\nvalue = 3\n"
                    "def zeta():\n    pass\n"
                    "def alpha():\n    pass\n"
                    "def _private():\n    pass\n"
                    "class Beta:\n    pass\n")
    try:
        with pytest.raises(ModelError) as caught:
            load_factory_file(path, "make")
        assert str(caught.value) == (f"{path} defines no function 'make'; functions there: "
                                     "Beta, alpha, zeta")  # sorted
    finally:
        sys.modules.pop(_module_name(path), None)


def test_a_file_of_no_functions_says_none(tmp_path: Path) -> None:
    path = tmp_path / "h.py"
    path.write_text("make = 3\n")  # not callable: not the factory either
    try:
        with pytest.raises(ModelError) as caught:
            load_factory_file(path, "make")
        assert str(caught.value).endswith("; functions there: none")
    finally:
        sys.modules.pop(_module_name(path), None)


@pytest.mark.parametrize("key", ["make_inputs", "loss"])
def test_a_companion_that_is_not_a_function_is_refused(tmp_path: Path, key: str) -> None:
    path = tmp_path / f"c_{key}.py"
    path.write_text(f"def make():\n    pass\n{key} = 3\n")
    try:
        with pytest.raises(ModelError) as caught:
            load_factory_file(path, "make")
        assert str(caught.value) == f"{path}: {key} must be a function, got int"
    finally:
        sys.modules.pop(_module_name(path), None)


def test_both_companions_are_taken(tmp_path: Path) -> None:
    path = tmp_path / "both.py"
    path.write_text("def make():\n    pass\ndef make_inputs(b, s):\n    return 'in'\n"
                    "def loss(o, i):\n    return 'loss'\n")
    try:
        loaded = load_factory_file(path, "make")
        assert loaded.make_inputs is not None and loaded.make_inputs(1, 1) == "in"
        assert loaded.loss is not None and loaded.loss(None, None) == "loss"
    finally:
        sys.modules.pop(_module_name(path), None)


def test_an_import_failure_is_placed_in_the_factory_file_not_deeper(tmp_path: Path) -> None:
    path = tmp_path / "deep.py"
    # line 2 runs code compiled as helper.py, which raises on its line 1: the innermost frame
    # is helper.py's, but the place named is the factory file's own line
    path.write_text("x = 1\nexec(compile('raise ValueError(1)', 'helper.py', 'exec'))\n")
    with pytest.raises(ModelError, match=r"ValueError: 1 \(at deep\.py:2\)$"):
        load_factory_file(path, "make")


def test_a_failing_file_that_took_itself_out_of_sys_modules_is_still_one_line(
        tmp_path: Path) -> None:
    path = tmp_path / "gone.py"
    path.write_text("import sys\ndel sys.modules[__name__]\nraise ValueError('after')\n")
    with pytest.raises(ModelError, match=r"ValueError: after \(at gone\.py:3\)$"):
        load_factory_file(path, "make")  # nothing left to pop: no KeyError
    assert _module_name(path) not in sys.modules


def test_a_callable_without_a_module_is_left_out_of_the_listing(tmp_path: Path) -> None:
    path = tmp_path / "odd.py"
    # an object that answers no __module__ (any object may sit in a user's file)
    path.write_text("class Odd:\n"
                    "    def __call__(self):\n        pass\n"
                    "    def __getattribute__(self, name):\n"
                    "        if name == '__module__':\n            raise AttributeError(name)\n"
                    "        return object.__getattribute__(self, name)\n"
                    "odd = Odd()\n")
    try:
        with pytest.raises(ModelError) as caught:
            load_factory_file(path, "make")
        assert str(caught.value).endswith("; functions there: Odd")  # the class, not `odd`
    finally:
        sys.modules.pop(_module_name(path), None)
