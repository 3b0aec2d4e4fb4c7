"""Memory of one dense tensor: elements × bytes per element."""

from __future__ import annotations

import math
from dataclasses import dataclass

from tensorledger.dtypes import resolve_dtype, tensor_bytes

__all__ = ["TensorMemory", "tensor_memory"]


@dataclass(frozen=True)
class TensorMemory:
    shape: tuple[int, ...]
    dtype: str
    bits_per_element: int
    elements: int
    bytes: int


def tensor_memory(shape: tuple[int, ...], dtype: str) -> TensorMemory:
    """Bytes of a dense tensor of ``shape`` in ``dtype``.

    >>> tensor_memory((4, 8), "fp32").bytes
    128
    """
    resolved = resolve_dtype(dtype)
    return TensorMemory(shape=tuple(shape), dtype=resolved.name, bits_per_element=resolved.bits,
                        elements=math.prod(shape), bytes=tensor_bytes(shape, resolved))
