"""The probe's low-precision ops whose CPU kernels run far below their bytes at the stream
rate: GELU, log-softmax and the embedding's backward, each forward and backward kernel
replayed alone (``probe_tensors.kernel_calls``), as (bytes moved by the trace's rules, bytes/s)
over sizes.  In GPT-2 small's bf16 step on a 2-core EPYC (issue 43), priced at the bf16 stream
rate: GELU 0.9 ms against 6.4 ms measured, its backward 1.4 against 6.6, the log-softmax 0.7
against 4.3, its backward 1.1 against 7.2, the embedding's backward 17.5 against 44.8.  The
curves are named by the op (``hardware.kernels.op_curve``), so an op the probe timed is priced
from its own kernel's rate."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from tensorledger.bench.probe_tensors import by_direction, kernel_calls, torch_dtype

if TYPE_CHECKING:
    from tensorledger.bench.probe import _Timer

__all__ = ["OP_KINDS", "OpPoint", "op_label", "op_points"]

#: The ops timed, by the name the plan gives them.
OP_KINDS = ("gelu", "gelu-tanh", "log_softmax", "embedding")
#: The kernel variant a kind runs (``OpRecord.variant``): GELU's tanh approximation (GPT-2's
#: ``gelu_new``) ran 4.3 times slower than the exact GELU forward in bf16, 2.2 times backward.
_VARIANTS = {"gelu-tanh": "tanh"}
#: An embedding's table: 16 × rows rows of width / 4 (a vocabulary's table grows with its
#: rows, not its width), looked up by 256 tokens.
_TABLE_ROWS = 16
_TABLE_NARROWING = 4
_TOKENS = 256


@dataclass(frozen=True)
class OpPoint:
    kind: str  # of OP_KINDS
    direction: str  # "forward" or "backward"
    op: str  # the aten packet: "aten.gelu_backward"
    variant: str  # the kernel an argument chose (``OpRecord.variant``): "tanh", or ""
    dtype: str
    rows: int  # of its (rows, width) input; an embedding's table is (16 · rows, width / 4)
    width: int
    bytes_moved: int  # by the trace's rules
    median_s: float
    bytes_per_s: float


def op_label(kind: str, dtype: str, rows: int, width: int, direction: str) -> str:
    return f"{kind} {dtype} {rows} × {width} {direction}"


def _step(kind: str, dtype: str, rows: int, width: int, device: torch.device
          ) -> tuple[Callable[[], None], tuple[torch.Tensor, ...], str]:
    """One forward and backward of ``kind``, the tensors it leaves gradients on, its
    category."""
    import torch.nn.functional as functional

    dt = torch_dtype(dtype)
    if kind == "embedding":
        size = (rows * _TABLE_ROWS, max(1, width // _TABLE_NARROWING))
        table = torch.randn(*size, device=device).to(dt).requires_grad_()
        tokens = torch.randint(0, size[0], (_TOKENS,), device=device)
        grad = torch.randn(_TOKENS, size[1], device=device).to(dt)
        return (lambda: functional.embedding(tokens, table).backward(grad),  # type: ignore[no-untyped-call]
                (table,), "embedding")
    x = torch.randn(rows, width, device=device).to(dt).requires_grad_()
    grad = torch.randn(rows, width, device=device).to(dt)
    if kind in ("gelu", "gelu-tanh"):
        approximate = _VARIANTS.get(kind, "none")
        return (lambda: functional.gelu(x, approximate=approximate).backward(grad),  # type: ignore[no-untyped-call]
                (x,), "elementwise")
    return (lambda: functional.log_softmax(x, -1).backward(grad),  # type: ignore[no-untyped-call]
            (x,), "normalization")


def op_points(timer: _Timer, kind: str, dtype: str, rows: int, width: int,
              budget_s: float) -> list[OpPoint]:
    """``kind``'s forward and backward kernels in ``dtype`` at (``rows``, ``width``), each
    replayed alone: its bytes by the trace's rules over its median."""
    step, tensors, category = _step(kind, dtype, rows, width, timer.device)
    moved = by_direction(step, category, "bytes", tensors)
    calls = kernel_calls(step, category)
    for tensor in tensors:
        tensor.grad = None
    points = []
    for direction in ("forward", "backward"):
        call = calls[direction]
        result = timer(call.run, op_label(kind, dtype, rows, width, direction),
                       budget_s=budget_s, min_repeats=3, warmup=1)
        points.append(OpPoint(kind, direction, call.op, _VARIANTS.get(kind, ""), dtype, rows,
                              width, moved[direction], result.median_s,
                              moved[direction] / result.median_s))
    return points
