"""tensorledger: resource accounting for language-model training in PyTorch.

Importing the package does not import torch: the napkin math, units, hardware catalog and
format metadata answer without it.  Subpackages that need torch load it when first used.
"""

from __future__ import annotations

from typing import Any

from tensorledger.errors import TensorLedgerError
from tensorledger.hardware import Hardware, get_hardware

__version__ = "0.1.0"

__all__ = ["Hardware", "Meter", "TensorLedgerError", "__version__", "get_hardware", "trace"]


def __getattr__(name: str) -> Any:
    # `tensorledger.trace(step, ...)`, loading torch only on first use.  The subpackage of the
    # same name is callable (it calls `tensorledger.trace.trace`), so the attribute works
    # before and after Python binds the subpackage to it.
    if name == "trace":
        import importlib

        return importlib.import_module("tensorledger.trace")
    if name == "Meter":  # the live meter for a training loop (imports torch)
        from tensorledger.bench.meter import Meter

        return Meter
    raise AttributeError(f"module 'tensorledger' has no attribute {name!r}")
