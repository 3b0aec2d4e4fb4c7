"""Devices named by users: one check, before any work, for every command that runs a step.

torch is imported inside the function, so importing this module stays torch-free.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from tensorledger.errors import DeviceError, InputError

if TYPE_CHECKING:
    import torch

__all__ = ["resolve_device"]


def resolve_device(text: str, allowed: Sequence[str] = ("cpu", "cuda", "meta")
                   ) -> torch.device:
    """``cpu``, ``cuda``, ``cuda:1``, ``meta``, ...: a torch device that exists here.

    >>> resolve_device("cpu")
    device(type='cpu')
    """
    import torch

    try:
        device = torch.device(text)
    except (RuntimeError, TypeError, ValueError):
        raise InputError(f"unknown device {text!r}; known: {', '.join(allowed)}") from None
    if device.type not in allowed:
        raise InputError(f"device {text!r} cannot be used here; known: {', '.join(allowed)}")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise DeviceError(f"no CUDA device is available here for {text!r}; use "
                          f"{' or '.join(a for a in allowed if a != 'cuda')}")
    if device.type == "cuda" and device.index is not None and (
            device.index >= torch.cuda.device_count()):
        raise DeviceError(f"{text!r} does not exist: this machine has "
                          f"{torch.cuda.device_count()} CUDA device(s)")
    return device
