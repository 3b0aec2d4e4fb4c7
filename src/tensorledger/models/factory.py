"""User models: ``path/to/file.py:make_model`` names a function that returns an ``nn.Module``.

The file is imported under a private module name; the factory is called with no arguments.
Whatever goes wrong inside the user's code becomes a :class:`~tensorledger.errors.ModelError`
that names the factory and gives the first line of the error, so the CLI prints one line.
"""

from __future__ import annotations

import hashlib
import importlib.util
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from tensorledger.errors import ConfigError, ModelError

__all__ = ["FactorySpec", "call_factory", "is_factory_spec", "load_factory", "parse_factory_spec"]

Factory = Callable[[], nn.Module]


def is_factory_spec(text: str) -> bool:
    """``True`` for text shaped like ``file.py:function``."""
    path, colon, function = text.rpartition(":")
    return bool(colon) and path.endswith(".py") and bool(function)


@dataclass(frozen=True)
class FactorySpec:
    """The parts of ``file.py:function``."""

    path: Path
    function: str

    def __str__(self) -> str:
        return f"{self.path}:{self.function}"


def parse_factory_spec(text: str) -> FactorySpec:
    """Split ``file.py:function`` and check that the file exists and the name is an identifier."""
    path, colon, function = text.rpartition(":")
    if not colon or not path.endswith(".py") or not function.isidentifier():
        raise ModelError(f"model factory {text!r} is not of the form path/to/file.py:function")
    file = Path(path)
    if not file.is_file():
        raise ConfigError(f"model factory file not found: {file}")
    return FactorySpec(file, function)


def _first_line(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    first = lines[0].strip() if lines else ""
    return f"{type(error).__name__}: {first}" if first else type(error).__name__


def load_factory(spec: FactorySpec) -> Factory:
    """Import the file and return its factory function (not yet called)."""
    digest = hashlib.sha1(str(spec.path.resolve()).encode()).hexdigest()[:12]
    module_name = f"_tensorledger_user_{digest}"
    loader_spec = importlib.util.spec_from_file_location(module_name, spec.path)
    if loader_spec is None or loader_spec.loader is None:
        raise ConfigError(f"cannot import {spec.path} as a Python file")
    module = importlib.util.module_from_spec(loader_spec)
    sys.modules[module_name] = module
    try:
        loader_spec.loader.exec_module(module)
    except Exception as error:
        sys.modules.pop(module_name, None)
        raise ModelError(f"importing {spec.path} for factory {spec.function!r} failed: "
                         f"{_first_line(error)}") from None
    factory = getattr(module, spec.function, None)
    if not callable(factory):
        defined = sorted(name for name, value in vars(module).items()
                         if callable(value) and not name.startswith("_")
                         and getattr(value, "__module__", None) == module_name)
        raise ModelError(f"{spec.path} defines no function {spec.function!r}; functions "
                         f"there: {', '.join(defined) or 'none'}")
    return factory  # type: ignore[no-any-return]


def call_factory(factory: Factory, name: str, device: str | torch.device = "meta") -> nn.Module:
    """Call ``factory()`` with ``device`` as the default device; check that it made a Module."""
    try:
        with torch.device(device):
            model = factory()
    except Exception as error:
        raise ModelError(f"model factory {name!r} raised {_first_line(error)}") from None
    if not isinstance(model, nn.Module):
        raise ModelError(f"model factory {name!r} returned {type(model).__name__}, "
                         "not a torch.nn.Module")
    return model
