"""tensorledger: resource accounting for language-model training in PyTorch.

Importing the package does not import torch: the napkin math, units, hardware catalog and
format metadata answer without it.  Subpackages that need torch load it when first used.
"""

from __future__ import annotations

from typing import Any

from tensorledger.errors import TensorLedgerError
from tensorledger.hardware import Hardware, get_hardware

__version__ = "0.1.0"

__all__ = ["Hardware", "Meter", "TensorLedgerError", "__version__", "account", "get_hardware",
           "render", "trace", "trace_model"]


def account(model: Any, hardware: str | Hardware = "h100", *, count: int = 1,
            tokens: float | None = None, usd_per_device_hour: float | None = None,
            **options: Any) -> Any:
    """The whole ledger of one workload: ``model`` is a preset, a config.json, a factory
    ``file.py:name`` or a resolved :class:`~tensorledger.workload.Workload`; ``options`` are
    the workload's (``batch``, ``seq``, ``step``, ``precision``, ``optimizer``, ``device``,
    ``checkpoint``, ``optimizer_kernel``); the step traced is ``hardware``'s program (its
    attention and optimizer kernels; :mod:`tensorledger.hardware.target`).  Returns a frozen
    :class:`~tensorledger.ledger.Ledger`, which renders in the terminal (rich), in Jupyter
    and as JSON.

    >>> import tensorledger
    >>> ledger = tensorledger.account("tiny", "a100", batch=2, seq=16, tokens=1e9)
    >>> ledger.trace.flops == ledger.roofline.flops and ledger.run.tokens == 1e9
    True
    """
    from tensorledger.hardware.target import target_of
    from tensorledger.ledger.account import account_workload
    from tensorledger.workload import Workload, resolve_workload

    chip = get_hardware(hardware) if isinstance(hardware, str) else hardware
    work = model if isinstance(model, Workload) else resolve_workload(
        model, **{"target": target_of(chip), **options})
    return account_workload(work, chip, count=count, run_tokens=tokens,
                            usd_per_device_hour=usd_per_device_hour)


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
    if name == "trace_model":  # a preset, config.json or factory → its traced step (torch)
        from tensorledger.workload import trace_model

        return trace_model
    if name == "render":  # any result as the CLI's tables, for rich.print (imports rich and torch)
        from tensorledger.report.render import render

        return render
    raise AttributeError(f"module 'tensorledger' has no attribute {name!r}")
