"""The probe's fused causal attention (``scaled_dot_product_attention``): its forward and
its backward kernels timed apart and alone (replayed as a step's per-op timer sees them), in
a dtype, at a sequence length and head width, each at two head counts.

The FLOPs are the trace's own (attention counted in full, the backward 2.5× the forward),
so a rate is on the scale the roofline divides an op's traced FLOPs by.  A call costs time
of its own beside its heads' (the kernel's set-up, its thread team's start and finish): on a
2-core EPYC, the fp32 forward kernel over 32 tokens of width 16 took 7.4 µs for 2 sequences ×
heads and 22.2 µs for 16, about 5.3 µs a call and 1.06 µs a head.  Read as a rate a head at
one head count, and timed from Python through autograd, that priced the tiny preset's 64
heads 2.7–3 times too slow (issue 43).  Two head counts give both figures: a head's time is
the slope between the two calls, the call's own time the rest (:attr:`AttentionPoint.call_s`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from tensorledger.bench.probe_tensors import by_direction, kernel_calls, torch_dtype

if TYPE_CHECKING:
    from tensorledger.bench.probe import MatmulPoint, _Timer

__all__ = ["AttentionPoint", "attention_label", "attention_points", "attention_sweep",
           "few_heads_label", "without_team_check"]


@dataclass(frozen=True)
class AttentionPoint:
    dtype: str
    direction: str  # "forward" or "backward"
    seq: int
    head_dim: int
    flops: int  # of this direction's op at ``heads``, by the trace's rules (in full)
    median_s: float
    flop_per_s: float
    heads: int = 1  # sequences × heads the op ran: its FLOPs per head are flops / heads
    few_heads: int = 0  # the smaller call's sequences × heads; 0: not timed (or set aside)
    few_s: float = 0.0  # the smaller call's median

    @property
    def head_flops(self) -> float:
        """FLOPs of one sequence and head: the size the profile's curves are read at."""
        return self.flops / self.heads

    def _fit(self) -> tuple[float, float]:
        """(seconds a head, seconds a call apart from its heads)."""
        mean = self.median_s / self.heads
        if self.few_s > 0 and self.heads > self.few_heads > 0:
            slope = (self.median_s - self.few_s) / (self.heads - self.few_heads)
            if 0 < slope < mean:
                return slope, self.median_s - self.heads * slope
        return mean, 0.0

    @property
    def head_s(self) -> float:
        """Seconds a call takes a head: the slope between the two head counts timed; the
        call's time over its heads where the smaller call was not timed, or where the slope
        leaves the call no time of its own (noise, or a kernel whose calls cost nothing
        apart from their heads).

        >>> timed = AttentionPoint("fp32", "forward", 32, 16, 16 * 65536, 20e-6, 0.0, 16, 2, 6e-6)
        >>> round(timed.head_s * 1e6, 9), round(timed.call_s * 1e6, 9)  # (20 − 6) / 14; 20 − 16
        (1.0, 4.0)
        >>> round(timed.head_flop_per_s / 1e9, 6)  # 65,536 FLOPs a head in 1 µs
        65.536
        >>> steep = AttentionPoint("fp32", "forward", 32, 16, 16 * 65536, 20e-6, 0.0, 16, 2, 1e-6)
        >>> round(steep.head_s * 1e6, 9), steep.call_s  # (20 − 1) / 14 above 20 / 16: the mean
        (1.25, 0.0)
        """
        return self._fit()[0]

    @property
    def call_s(self) -> float:
        """Seconds a call takes apart from its heads (0 where :attr:`head_s` is the mean)."""
        return self._fit()[1]

    @property
    def head_flop_per_s(self) -> float:
        """A head's rate: its FLOPs over :attr:`head_s` (the ``attention-head`` curve's)."""
        return self.head_flops / self.head_s


def attention_label(dtype: str, seq: int, head_dim: int, direction: str,
                    few_heads: int = 0) -> str:
    """The timer's label of an attention figure: its call at the plan's heads, or with
    ``few_heads`` its smaller call.

    >>> attention_label("bf16", 40, 8, "forward"), attention_label("fp32", 16, 8, "forward", 2)
    ('attention bf16 40 d8 forward', 'attention fp32 16 d8 forward, 2 heads')
    """
    label = f"attention {dtype} {seq} d{head_dim} {direction}"
    return f"{label}, {few_heads} heads" if few_heads else label


def few_heads_label(point: AttentionPoint) -> str:
    """The timer's label of ``point``'s smaller call."""
    return attention_label(point.dtype, point.seq, point.head_dim, point.direction,
                           point.few_heads)


def _calls(timer: _Timer, dtype: str, shape: tuple[int, int, int, int],
           label: Callable[[str], str], budget_s: float) -> tuple[dict[str, int], float, float]:
    """The traced FLOPs by direction and the medians of the forward and the backward
    kernels of causal attention at ``shape`` (:func:`~probe_tensors.kernel_calls`: the
    kernels alone, as a step's per-op timer sees them; the forward's inputs requiring grad,
    so it keeps what the backward needs, as in a training step); ``label``: a direction's
    figure's label."""
    from torch.nn.functional import scaled_dot_product_attention

    kind = torch_dtype(dtype)
    q, k, v = (torch.randn(*shape, device=timer.device).to(kind).requires_grad_()
               for _ in range(3))
    grad = torch.randn(*shape, device=timer.device).to(kind)

    def step() -> None:
        out = scaled_dot_product_attention(q, k, v, is_causal=True)
        out.backward(grad)  # type: ignore[no-untyped-call]

    flops = by_direction(step, "attention", "flops", (q, k, v))
    kernels = kernel_calls(step, "attention")
    for tensor in (q, k, v):
        tensor.grad = None
    forward, backward = (timer(kernels[d].run, label(d), budget_s=budget_s,
                               min_repeats=3, warmup=1) for d in ("forward", "backward"))
    return flops, forward.median_s, backward.median_s


def attention_points(timer: _Timer, dtype: str, seq: int, head_dim: int, *, batch: int,
                     heads: int, few_heads: int, budget_s: float
                     ) -> tuple[AttentionPoint, AttentionPoint]:
    """Causal attention in ``dtype`` at (``batch``, ``heads``, ``seq``, ``head_dim``) and at
    ``few_heads`` heads (none where not fewer): the forward and the backward."""
    flops, forward_s, backward_s = _calls(
        timer, dtype, (batch, heads, seq, head_dim),
        lambda direction: attention_label(dtype, seq, head_dim, direction), budget_s)
    few = batch * few_heads if 0 < few_heads < heads else 0
    few_forward_s = few_backward_s = 0.0
    if few:
        _, few_forward_s, few_backward_s = _calls(
            timer, dtype, (batch, few_heads, seq, head_dim),
            lambda direction: attention_label(dtype, seq, head_dim, direction, few), budget_s)
    count = batch * heads
    return (AttentionPoint(dtype, "forward", seq, head_dim, flops["forward"], forward_s,
                           flops["forward"] / forward_s, count, few, few_forward_s),
            AttentionPoint(dtype, "backward", seq, head_dim, flops["backward"], backward_s,
                           flops["backward"] / backward_s, count, few, few_backward_s))


@contextmanager
def without_team_check(timer: _Timer) -> Iterator[None]:
    """``timer`` with its one-thread check off inside the block.  A CPU's fused attention
    kernel runs slower for the rest of a process once its thread count has changed (at 32
    tokens of width 16, 16 heads: 21 µs before ``torch.set_num_threads(1)`` and back, 40 µs
    after, where matmuls, norms and elementwise ops run as before), so the probe times
    attention first and without that check."""
    team, timer.team = timer.team, False
    try:
        yield
    finally:
        timer.team = team


def _fp32_point(timer: _Timer, seq: int, budget_s: float) -> MatmulPoint:
    """Causal attention forward and backward at (batch 4, heads 8, seq, head dim 64), fp32,
    as one step from Python.

    Its FLOPs are counted by the trace's own rules (attention counted in full, the backward
    2.5× the forward), so the rate is on the scale the roofline divides traced FLOPs by.
    """
    from torch.nn.functional import scaled_dot_product_attention

    from tensorledger.bench.probe import MatmulPoint

    device = timer.device
    q, k, v = (torch.randn(4, 8, seq, 64, device=device, requires_grad=True) for _ in range(3))
    grad = torch.randn(4, 8, seq, 64, device=device)

    def step() -> None:
        out = scaled_dot_product_attention(q, k, v, is_causal=True)
        out.backward(grad)  # type: ignore[no-untyped-call]

    flops = sum(by_direction(step, "attention", "flops", (q, k, v)).values())
    result = timer(step, f"attention fp32 {seq}", budget_s=budget_s, min_repeats=3, warmup=1)
    return MatmulPoint("fp32", seq, flops, result.median_s, flops / result.median_s)


def attention_sweep(timer: _Timer, seqs: Sequence[int], budget_s: float, slow_call_s: float,
                    say: Callable[[str], None]) -> list[MatmulPoint]:
    """fp32 causal attention's forward and backward together at each of ``seqs``, the
    ``attention.fp32`` curve (the points kept), without the one-thread check; the sweep
    stops after a call slower than ``slow_call_s``."""
    attention: list[MatmulPoint] = []
    with without_team_check(timer):
        for seq in sorted(seqs):
            say(f"attention fp32, sequence {seq}")
            point = _fp32_point(timer, seq, budget_s)
            if timer.kept(f"attention fp32 {seq}"):
                attention.append(point)
            if point.median_s > slow_call_s:
                break
    return attention
