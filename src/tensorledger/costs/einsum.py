"""The cost of an einsum written with named axes, and the matmul it amounts to.  No torch.

Axes are words separated by spaces, operands by commas (the einops style)::

    "batch seq1 hidden, batch seq2 hidden -> batch seq1 seq2"

FLOPs: with P the product of every axis size, a product of two operands costs P multiplies
and, when an axis is summed, P adds: 2·P, which is 2·M·N·K for a matmul.  Each further
operand adds P multiplies; one operand costs P adds when it sums an axis and nothing when it
only permutes.  Bytes: every operand read once and the output written once.

>>> cost = einsum_cost("batch seq1 hidden, batch seq2 hidden -> batch seq1 seq2",
...                    {"batch": 2, "seq1": 3, "seq2": 3, "hidden": 4}, "bf16")
>>> cost.flops, cost.bytes_read, cost.bytes_written  # 2 * (2*3*3*4); 2 * (24 + 24); 2 * 18
(144, 96, 36)
>>> m = cost.matmul
>>> (m.batch_axes, m.m_axes, m.n_axes, m.k_axes), (m.batch, m.m, m.n, m.k)
((('batch',), ('seq1',), ('seq2',), ('hidden',)), (2, 3, 3, 4))
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache

from tensorledger.dtypes import resolve_dtype, tensor_bytes
from tensorledger.errors import EinsumError

__all__ = ["EinsumCost", "EquivalentMatmul", "ParsedEinsum", "einsum_cost", "parse_einsum"]

_AXIS = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


@dataclass(frozen=True)
class ParsedEinsum:
    """The axes of each operand and of the output, in order."""

    inputs: tuple[tuple[str, ...], ...]
    output: tuple[str, ...]

    @property
    def axes(self) -> tuple[str, ...]:
        """Every axis once, in order of first appearance."""
        return tuple(dict.fromkeys(a for term in self.inputs for a in term))


@dataclass(frozen=True)
class EquivalentMatmul:
    """The batched matmul (batch × (M×K)·(K×N)) a two-operand einsum amounts to."""

    batch_axes: tuple[str, ...]
    m_axes: tuple[str, ...]
    n_axes: tuple[str, ...]
    k_axes: tuple[str, ...]
    batch: int
    m: int
    n: int
    k: int
    flops: int  # 2 · batch · M · N · K


@dataclass(frozen=True)
class EinsumCost:
    pattern: str
    sizes: dict[str, int]
    dtype: str
    flops: int
    bytes_read: int
    bytes_written: int
    bytes: int
    intensity_flop_per_byte: float
    matmul: EquivalentMatmul | None  # for two operands


def _terms(text: str, where: str, pattern: str) -> tuple[str, ...]:
    axes = tuple(text.split())
    for axis in axes:
        if not _AXIS.match(axis):
            raise EinsumError(f"invalid axis name {axis!r} in the {where} of {pattern!r}; "
                              "axes are words such as 'batch' or 'seq1', separated by spaces")
    seen: set[str] = set()
    for axis in axes:
        if axis in seen:
            raise EinsumError(f"axis {axis!r} appears twice in the {where} of {pattern!r}")
        seen.add(axis)
    return axes


@lru_cache(maxsize=256)
def parse_einsum(pattern: str) -> ParsedEinsum:
    """Parse ``"a b, b c -> a c"``; raise EinsumError naming what is wrong."""
    if pattern.count("->") != 1:
        raise EinsumError(f"an einsum pattern needs exactly one '->': {pattern!r}")
    left, right = pattern.split("->")
    operands = left.split(",")
    if any(not o.strip() for o in operands):
        raise EinsumError(f"an operand of {pattern!r} has no axes")
    inputs = tuple(_terms(o, f"operand {i + 1}", pattern) for i, o in enumerate(operands))
    output = _terms(right, "output", pattern)
    known = {a for term in inputs for a in term}
    for axis in output:
        if axis not in known:
            raise EinsumError(f"output axis {axis!r} appears in no operand of {pattern!r}")
    return ParsedEinsum(inputs, output)


def _matmul(parsed: ParsedEinsum, sizes: Mapping[str, int]) -> EquivalentMatmul | None:
    if len(parsed.inputs) != 2:
        return None
    a, b = set(parsed.inputs[0]), set(parsed.inputs[1])
    out = set(parsed.output)
    order = parsed.axes
    batch = tuple(x for x in order if x in a and x in b and x in out)
    m = tuple(x for x in order if x in a and x not in b and x in out)
    n = tuple(x for x in order if x in b and x not in a and x in out)
    # axes summed in only one operand are reduced before the product: counted with K there
    k = tuple(x for x in order if x not in out)

    def size(axes: tuple[str, ...]) -> int:
        return math.prod(sizes[x] for x in axes)

    return EquivalentMatmul(batch, m, n, k, size(batch), size(m), size(n), size(k),
                            2 * size(batch) * size(m) * size(n) * size(k))


def einsum_cost(pattern: str, sizes: Mapping[str, int], dtype: str = "fp32") -> EinsumCost:
    """FLOPs, bytes and arithmetic intensity of an einsum with the given axis sizes."""
    parsed = parse_einsum(pattern)
    resolved = resolve_dtype(dtype)
    for axis in parsed.axes:
        if axis not in sizes:
            raise EinsumError(f"no size for axis {axis!r} of {pattern!r}; give {axis}=N")
    for axis, value in sizes.items():
        if axis not in parsed.axes:
            raise EinsumError(f"axis {axis!r} is not in {pattern!r}; axes: "
                              f"{', '.join(parsed.axes)}")
        if value < 1:
            raise EinsumError(f"axis {axis!r} must have a positive size, not {value}")
    every = math.prod(sizes[a] for a in parsed.axes)
    summed = any(a not in parsed.output for a in parsed.axes)
    flops = (len(parsed.inputs) - 1) * every + (every if summed else 0)
    read = sum(tensor_bytes(tuple(sizes[a] for a in term), resolved) for term in parsed.inputs)
    written = tensor_bytes(tuple(sizes[a] for a in parsed.output), resolved)
    total = read + written
    return EinsumCost(pattern, dict(sizes), resolved.name, flops, read, written, total,
                      flops / total if total else math.nan, _matmul(parsed, sizes))
