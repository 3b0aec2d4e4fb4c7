"""User code: a factory file ``path/to/file.py`` and what it defines, run inside a guard.

The factory protocol (documented in the README):

- ``name()`` (the function ``--model file.py:name`` names) returns a ``torch.nn.Module``; it is
  called with no arguments, under ``torch.device`` of the step's device.
- ``make_inputs(batch, seq)`` (optional) returns the step's inputs: a dict of keyword
  arguments (``input_ids``, ``attention_mask``, ``labels``, ...), a tuple of positional ones,
  or one tensor.  Without it the tool feeds ``batch × seq`` token ids of the model's vocabulary.
- ``loss(output, inputs)`` (optional) returns the scalar loss from the model's output and the
  inputs.  Without it: the ``.loss`` a model computed itself, else cross-entropy of the logits
  (a tensor, the first element of a tuple, or ``.logits``) against the token ids.

Whatever the user's code does — raise, ``sys.exit``, ``os._exit``, ``KeyboardInterrupt``,
print — is caught by :func:`user_code`: what it prints goes to stderr once it has run well
(stdout belongs to the tool's own output) and an escape becomes one
:class:`~tensorledger.errors.ModelError` line saying what happened and where (its prints are
dropped then, so the line stands alone).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import io
import os
import sys
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType, TracebackType
from typing import Any, NoReturn

from tensorledger.errors import ConfigError, ModelError, TensorLedgerError

__all__ = ["FactoryFile", "describe_error", "hold_user_output", "load_factory_file", "user_code"]


def _first_line(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    first = lines[0].strip() if lines else ""
    return f"{type(error).__name__}: {first}" if first else type(error).__name__


def _where(tb: TracebackType | None, files: tuple[Path, ...]) -> str:
    """``file.py:line`` of the innermost frame in one of ``files`` (else the innermost)."""
    # this module's own frames (the guard, the stand-in for os._exit) are never the place
    frames = [f for f in traceback.extract_tb(tb)
              if Path(f.filename).resolve() != Path(__file__).resolve()]
    wanted = {str(f.resolve()) for f in files}
    for frame in reversed(frames):
        if str(Path(frame.filename).resolve()) in wanted:
            return f"{Path(frame.filename).name}:{frame.lineno}"
    if frames:
        return f"{Path(frames[-1].filename).name}:{frames[-1].lineno}"
    return ""


def _module_of(tb: TracebackType | None) -> str:
    """The class of the innermost ``nn.Module`` whose method was running, or ''."""
    from torch import nn

    found = ""
    while tb is not None:
        owner = tb.tb_frame.f_locals.get("self")
        if isinstance(owner, nn.Module):
            found = type(owner).__name__
        tb = tb.tb_next
    return found


def describe_error(error: BaseException) -> str:
    """What a step's error means for the user: data-dependent ops name the device that works.

    Meta tensors have no values: ``.item()``, ``nonzero`` or a Python ``if`` on a tensor cannot
    be answered there, while FakeTensorMode answers most of them; a few (an output whose shape
    depends on values) need real tensors.
    """
    text = _first_line(error)
    lowered = text.lower()
    if "meta" in lowered and ("item()" in lowered or "_local_scalar_dense" in lowered
                              or "data-dependent" in lowered or "data dependent" in lowered):
        return (f"the model asked a tensor for its value (Tensor.item(), "
                f"aten._local_scalar_dense), which the meta device cannot answer; use --device "
                f"fake ({text})")
    func = getattr(error, "func", None)
    kind = type(error).__name__
    if kind in ("DataDependentOutputException", "DynamicOutputShapeException") or (
            "data-dependent" in lowered or "data dependent" in lowered):
        op = f"{func}" if func is not None else "an op"
        return (f"{op} needs tensor values that fake tensors do not have ({kind}); use "
                f"--device cpu on a size that fits")
    return text


@contextlib.contextmanager
def user_code(what: str, files: tuple[Path, ...] = ()) -> Iterator[None]:
    """Run user code (or a model's forward) so that nothing it does escapes as more than one
    :class:`ModelError` line; its prints go to stderr.

    >>> with user_code("the factory"):
    ...     pass
    >>> try:
    ...     with user_code("the factory"):
    ...         raise SystemExit(3)
    ... except ModelError as error:
    ...     print(error)
    the factory called sys.exit(3) (at <doctest tensorledger.workload.factory.user_code[1]>:3)
    """
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed), _exit_refused():
            yield
    except TensorLedgerError:
        raise
    except SystemExit as error:
        raise ModelError(f"{what} called sys.exit({error.code!r})"
                         + _at(error.__traceback__, files)) from None
    except _ExitCalled as error:
        raise ModelError(f"{what} called os._exit({error.status!r})"
                         + _at(error.__traceback__, files)) from None
    except KeyboardInterrupt as error:
        raise ModelError(f"{what} raised KeyboardInterrupt"
                         + _at(error.__traceback__, files)) from None
    except Exception as error:
        module = _module_of(error.__traceback__)
        inside = f" in {module}" if module else ""
        raise ModelError(f"{what} failed{inside}: {describe_error(error)}"
                         + _at(error.__traceback__, files)) from None
    # What the code printed goes to stderr once it has run well (or to the CLI's holding
    # buffer, so that a later refusal stays one line); when it fails, the line is all there is.
    (held if held is not None else sys.stderr).write(printed.getvalue())


#: Where user code's prints go after it ran well, when not straight to stderr: the CLI holds
#: them until the command has succeeded (see :func:`hold_user_output`).
held: io.StringIO | None = None


@contextlib.contextmanager
def hold_user_output() -> Iterator[io.StringIO]:
    """Hold what user code prints until the caller decides: the CLI writes it to stderr when
    the command succeeds and drops it when the command refuses (one line, nothing else)."""
    global held
    previous, held = held, io.StringIO()
    try:
        yield held
    finally:
        held = previous


class _ExitCalled(BaseException):
    """``os._exit(status)`` called by user code: raised in its place (a BaseException, like
    SystemExit, so that the user's own ``except Exception`` does not swallow it)."""

    def __init__(self, status: object) -> None:
        super().__init__(status)
        self.status = status


_real_exit = os._exit
#: ``posix`` (or ``nt``), where ``os`` found ``_exit``: ``from posix import _exit`` reaches it.
_platform: Any = sys.modules[os.name]
#: The process that entered the outermost guard, and how many guards are open.
_guarded: list[int] = []


def _refuse_exit(status: int) -> NoReturn:
    if not _guarded or os.getpid() != _guarded[0]:
        # a child the user's code forked (multiprocessing ends one with os._exit), or a call
        # after every guard has closed: the process really ends
        _real_exit(status)
    raise _ExitCalled(status)


@contextlib.contextmanager
def _exit_refused() -> Iterator[None]:
    """While user code runs, ``os._exit`` (and ``posix._exit``, the same function) raises
    :class:`_ExitCalled` instead of ending the process, which no ``try`` could catch: the
    command would end with the status the user's code chose (0, as if it had succeeded) and
    nothing said.  ``sys.exit`` needs no such help: it raises SystemExit."""
    if not _guarded:
        os._exit = _platform._exit = _refuse_exit
    _guarded.append(os.getpid())
    try:
        yield
    finally:
        _guarded.pop()
        if not _guarded:
            os._exit = _platform._exit = _real_exit


def _at(tb: TracebackType | None, files: tuple[Path, ...]) -> str:
    where = _where(tb, files)
    return f" (at {where})" if where else ""


@dataclass(frozen=True)
class FactoryFile:
    """The user's factory and its optional companions, imported from one file."""

    path: Path
    name: str
    factory: Callable[[], Any]
    make_inputs: Callable[[int, int], Any] | None
    loss: Callable[[Any, Any], Any] | None


def _import(path: Path) -> ModuleType:
    digest = hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:12]
    module_name = f"_tensorledger_user_{digest}"
    loader_spec = importlib.util.spec_from_file_location(module_name, path)
    if loader_spec is None or loader_spec.loader is None:
        raise ConfigError(f"cannot import {path} as a Python file")
    module = importlib.util.module_from_spec(loader_spec)
    sys.modules[module_name] = module
    try:
        with user_code(f"importing {path}", (path,)):
            loader_spec.loader.exec_module(module)
    except ModelError:
        sys.modules.pop(module_name, None)
        raise
    return module


def load_factory_file(path: Path, name: str) -> FactoryFile:
    """Import ``path`` (guarded) and pick its factory, ``make_inputs`` and ``loss``."""
    module = _import(path)
    factory = getattr(module, name, None)
    if not callable(factory):
        defined = sorted(key for key, value in vars(module).items()
                         if callable(value) and not key.startswith("_")
                         and getattr(value, "__module__", None) == module.__name__)
        raise ModelError(f"{path} defines no function {name!r}; functions there: "
                         f"{', '.join(defined) or 'none'}")
    companions: dict[str, Any] = {}
    for key in ("make_inputs", "loss"):
        value = getattr(module, key, None)
        if value is not None and not callable(value):
            raise ModelError(f"{path}: {key} must be a function, got {type(value).__name__}")
        companions[key] = value
    return FactoryFile(path=path, name=name, factory=factory, **companions)
