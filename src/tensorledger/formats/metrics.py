"""Quantization error: MSE, SQNR, relative errors, underflow and saturation; schemes compared.

All sums run in fp64.  SQNR = 10·log10(Σx² / Σ(x − x̂)²) dB; relative errors are taken over the
non-zero elements of x; "underflowed" counts non-zero elements that became zero.

>>> import torch
>>> m = error_metrics(torch.tensor([1.0, 2.0, 4.0, 0.5]), torch.tensor([1.0, 2.0, 3.0, 0.0]))
>>> m.mse, m.max_rel_error, m.underflow_fraction  # (1² + 0.5²) / 4; 0.5 lost entirely
(0.3125, 1.0, 0.25)
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import torch

from tensorledger.errors import ShapeError
from tensorledger.formats.blocks import Quantized, Scheme, quantize_scheme, resolve_scheme
from tensorledger.formats.quantize import Rounding

__all__ = ["MAX_QUANTIZE_ELEMENTS", "WORKING_MULTIPLE", "Comparison", "ErrorMetrics",
           "SchemeResult", "compare_schemes", "error_metrics", "quantize_memory_bytes"]

#: The most elements quantized at once (a 1 GiB fp32 tensor).
MAX_QUANTIZE_ELEMENTS = 2**28
#: Working memory of one scheme at a time, in multiples of the input's fp32 bytes: the cast
#: works in place on one fp32 copy and a few integer and mask tensors (measured at 3.1 to 4.6
#: for every scheme, stochastic rounding the most), and the metrics run in fixed-size chunks.
WORKING_MULTIPLE = 6


def quantize_memory_bytes(elements: int) -> int:
    """Peak bytes of ``compare_schemes`` on an fp32 tensor: the input and its working memory."""
    return (1 + WORKING_MULTIPLE) * 4 * elements


@dataclass(frozen=True)
class ErrorMetrics:
    """How far a dequantized tensor is from the original."""

    elements: int
    mse: float
    sqnr_db: float
    max_abs_error: float
    max_rel_error: float
    mean_rel_error: float
    underflow_fraction: float


#: Elements compared at a time: the fp64 working copies stay a few MiB whatever the tensor.
METRICS_CHUNK = 2**20


def error_metrics(original: torch.Tensor, dequantized: torch.Tensor) -> ErrorMetrics:
    """Compare two tensors of one shape, in fp64, a chunk of :data:`METRICS_CHUNK` elements at
    a time (sums and maxima carried across chunks)."""
    if original.shape != dequantized.shape:
        raise ShapeError(f"cannot compare shapes {tuple(original.shape)} and "
                         f"{tuple(dequantized.shape)}")
    flat_x = original.detach().reshape(-1)
    flat_q = dequantized.detach().reshape(-1)
    elements = flat_x.numel()
    if elements == 0:
        raise ShapeError("cannot compare empty tensors")
    squared = signal = rel_sum = 0.0
    rel_count = underflowed = 0
    abs_maxima: list[float] = []
    rel_maxima: list[float] = []
    for start in range(0, elements, METRICS_CHUNK):
        x = flat_x[start:start + METRICS_CHUNK].to("cpu", torch.float64)
        # a copy always (an fp64 tensor on the CPU would otherwise be the caller's own), which
        # the error then reuses
        q = flat_q[start:start + METRICS_CHUNK].to("cpu", torch.float64, copy=True)
        error = q.sub_(x)
        squared += float(error.square().sum())
        signal += float(x.square().sum())
        abs_maxima.append(float(error.abs().max()))
        nonzero = x != 0
        relative = error[nonzero].abs_().div_(x[nonzero].abs_())
        if relative.numel():
            rel_maxima.append(float(relative.max()))
            rel_sum += float(relative.sum())
            rel_count += relative.numel()
        underflowed += int(torch.count_nonzero(
            nonzero & (flat_q[start:start + METRICS_CHUNK].to("cpu") == 0)))
    if squared == 0:
        sqnr = math.inf
    elif signal == 0:
        sqnr = -math.inf
    else:
        sqnr = 10 * math.log10(signal / squared)
    return ErrorMetrics(
        elements=elements,
        mse=squared / elements,
        sqnr_db=sqnr,
        max_abs_error=float(torch.tensor(abs_maxima, dtype=torch.float64).max()),
        max_rel_error=float(torch.tensor(rel_maxima, dtype=torch.float64).max())
        if rel_maxima else 0.0,
        mean_rel_error=rel_sum / rel_count if rel_count else 0.0,
        underflow_fraction=underflowed / elements,
    )


@dataclass(frozen=True)
class SchemeResult:
    """One row of a comparison: the scheme, its storage and its error."""

    scheme: str
    description: str
    element_format: str
    block_shape: tuple[int, ...]
    scale_format: str | None
    packed_bytes: int
    bits_per_value: float
    saturated_fraction: float
    error: ErrorMetrics


@dataclass(frozen=True)
class Comparison:
    """Several schemes applied to one tensor."""

    source: str
    shape: tuple[int, ...]
    elements: int
    fp32_bytes: int
    axis: int
    rounding: str
    results: tuple[SchemeResult, ...]

    @property
    def best(self) -> SchemeResult:
        """The scheme with the highest SQNR (the first such one on a tie)."""
        return max(self.results, key=lambda r: r.error.sqnr_db)


def scheme_result(x: torch.Tensor, quantized: Quantized, scheme: Scheme) -> SchemeResult:
    return SchemeResult(
        scheme=quantized.scheme, description=scheme.description,
        element_format=quantized.element_format, block_shape=quantized.block_shape,
        scale_format=quantized.scale_format, packed_bytes=quantized.packed_bytes,
        bits_per_value=quantized.bits_per_value,
        saturated_fraction=quantized.saturated / quantized.elements,
        error=error_metrics(x, quantized.dequantized))


def compare_schemes(x: torch.Tensor, schemes: Iterable[str], *, source: str = "tensor",
                    axis: int = -1, rounding: Rounding = "nearest",
                    seed: int | None = None) -> Comparison:
    """Quantize ``x`` with each scheme and measure the error of each."""
    resolved = [resolve_scheme(name) for name in schemes]
    rows = tuple(scheme_result(x, quantize_scheme(x, s, axis=axis, rounding=rounding, seed=seed),
                               s) for s in resolved)
    return Comparison(source=source, shape=tuple(x.shape), elements=x.numel(),
                      fp32_bytes=4 * x.numel(), axis=axis, rounding=rounding, results=rows)
