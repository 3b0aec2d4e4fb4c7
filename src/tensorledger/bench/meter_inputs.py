"""What the meter reads from a forward's arguments: the tokens it runs and the shapes that
decide whether a step is counted again."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import torch

from tensorledger.errors import InputError

__all__ = ["ShapeKey", "check_tokens", "model_device", "shape_key", "token_ids"]

#: The shapes and dtypes of a forward's tensor arguments (:func:`shape_key`).
ShapeKey = tuple[Hashable, ...]


def shape_key(args: tuple[Any, ...], kwargs: dict[str, Any]) -> ShapeKey:
    """The shapes and dtypes of a forward's tensor arguments: a step with a new key is counted
    again."""
    parts: list[Hashable] = []
    for value in args:
        if isinstance(value, torch.Tensor):
            parts.append((tuple(value.shape), value.dtype))
    for name, value in kwargs.items():
        if isinstance(value, torch.Tensor):
            parts.append((name, tuple(value.shape), value.dtype))
    return tuple(parts)


def token_ids(args: tuple[Any, ...], kwargs: dict[str, Any]) -> int | None:
    """The tokens of a forward: its ``input_ids``, else its first integer tensor; None."""
    ids = kwargs.get("input_ids")
    if isinstance(ids, torch.Tensor):
        return int(ids.numel())
    for value in args:
        if isinstance(value, torch.Tensor) and not value.is_floating_point() and (
                not value.is_complex() and value.dtype != torch.bool):
            return int(value.numel())
    return None


def check_tokens(tokens: object) -> int | None:
    """A step's stated tokens, checked: a positive whole number, or None."""
    if tokens is None:
        return None
    if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens <= 0:
        raise InputError(f"tokens must be a positive whole number (the tokens of this optimizer "
                         f"step on this rank), got {tokens!r}")
    return tokens


def model_device(model: torch.nn.Module | None, device: str | None) -> torch.device:
    """``device`` where given, else where the model's first parameter (or buffer) lives, else
    the CPU."""
    if device is not None:
        return torch.device(device)
    if model is not None:
        for tensor in (*model.parameters(), *model.buffers()):
            return tensor.device
    return torch.device("cpu")
