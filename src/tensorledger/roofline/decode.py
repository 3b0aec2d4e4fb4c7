"""A prefill or decode step read as serving reads it: time per token, tokens/s, and what bounds it.

Every sequence of a decode step gets one token per step, so the step's time *is* the time per
output token; a prefill step's is the time to the first token.  Two figures, from the same
:class:`~tensorledger.roofline.model.RooflinePrediction`:

- **kernels back to back** (``streamed_time_s``): each op's compute or memory time at the
  chip's expected rates, without the fixed cost per op — what a serving engine attains when the
  step is one captured graph (CUDA graphs in vLLM and SGLang) and no kernel waits for a launch.
  At small batch a decode step is memory-bound: ≈ (weights + cache bytes) / expected bandwidth.
- **eager** (``eager_time_s``): the prediction's step time, a launch cost per op included, as
  a PyTorch loop runs it (a decode step is thousands of small ops; on a GPU the launches can
  cost as much as the bytes).

The step is ``memory``-bound when its ops' memory time exceeds their compute time (summed over
the ops, each at its own rate).

>>> from tensorledger.roofline.model import predict
>>> from tensorledger.hardware import get_hardware
>>> from tensorledger.trace.records import OpRecord
>>> mm = OpRecord(0, "aten.mm.default", "m", "forward", "matmul", ((1, 8), (8, 8)),
...               ("bf16", "bf16"), ((1, 8),), ("bf16",), 128, 144, 16, True, 128, (), ())
>>> figures = serving_figures(predict([mm], get_hardware("h100")), batch=1)
>>> figures.bound, figures.eager_time_s > figures.streamed_time_s
('memory', True)
"""

from __future__ import annotations

from dataclasses import dataclass

from tensorledger.roofline.model import RooflinePrediction
from tensorledger.summary import show_time, summary

__all__ = ["ServingFigures", "serving_figures"]


@dataclass(frozen=True)
class ServingFigures:
    """Time per token of a decode step (time to first token of a prefill step)."""

    batch: int  # sequences in the step: each gets one token of a decode step
    context: int | None  # decode: tokens each sequence's cache held before the step
    streamed_time_s: float  # kernels back to back, no per-op cost (a captured graph)
    eager_time_s: float  # the prediction's step: a fixed cost per op included
    launch_time_s: float  # of eager_time_s, the per-op costs
    compute_time_s: float  # the ops' compute time, each at its expected rate
    memory_time_s: float  # the ops' memory time, each at its expected bandwidth
    bytes: int  # moved by the step
    bound: str  # "memory" or "compute": the larger of the two sums

    @property
    def tokens_per_s(self) -> float:
        """Tokens a second of the whole batch, kernels back to back."""
        return self.batch / self.streamed_time_s if self.streamed_time_s > 0 else 0.0

    @property
    def tokens_per_s_per_user(self) -> float:
        """Tokens a second each sequence sees, kernels back to back."""
        return 1.0 / self.streamed_time_s if self.streamed_time_s > 0 else 0.0

    def __repr__(self) -> str:
        return summary("ServingFigures", f"{show_time(self.streamed_time_s)} a token",
                       f"{self.bound}-bound", f"eager {show_time(self.eager_time_s)}",
                       f"batch {self.batch}")


def serving_figures(prediction: RooflinePrediction, batch: int,
                    context: int | None = None) -> ServingFigures:
    """The serving figures of a predicted prefill or decode step of ``batch`` sequences (a
    decode step's against caches of ``context`` tokens)."""
    launches = sum(op.overhead_s for op in prediction.ops)
    compute = sum(op.compute_time_s for op in prediction.ops)
    memory = sum(op.memory_time_s for op in prediction.ops)
    streamed = sum(max(op.time_s - op.overhead_s, 0.0) for op in prediction.ops)
    return ServingFigures(batch=batch, context=context, streamed_time_s=streamed,
                          eager_time_s=prediction.time_s, launch_time_s=launches,
                          compute_time_s=compute, memory_time_s=memory,
                          bytes=prediction.bytes,
                          bound="memory" if memory >= compute else "compute")
