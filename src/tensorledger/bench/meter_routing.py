"""The routing a mixture of experts ran on in the meter's recorded step, measured on the real
batch.

A dropless MoE sends every token-slot (a token times each of the k experts it chose) through
one expert's matrices, so a layer's expert FLOPs are 2 · (tokens · k) · (the expert's matrix
sizes) however the slots are split between the experts: the recorded count holds for every
later step of the same shapes, whichever way those route.  What routing does change is the
work per expert (the busiest expert sets a grouped kernel's time and, under expert
parallelism, a rank's), so the meter says what it measured.

Measured from the experts' grouped matrix product (``aten._grouped_mm``, transformers' default
``grouped_mm`` experts and :mod:`tensorledger.models.moe`'s ``grouped`` path): its ``offs`` are
the cumulative rows of each expert's group, read on the real tensors during the recorded step
(forward calls only; one MoE layer's products share one ``offs``).  Experts run as a loop of
one product per expert show no ``offs``: no routing is reported for them (their FLOPs are
counted as they ran all the same).  Under expert parallelism a rank's groups are its own
experts, the token-slots its all-to-all gave them.

>>> import torch
>>> x, w = torch.ones(6, 8), torch.ones(3, 8, 4)
>>> with RoutingProbe() as probe:
...     _ = torch._grouped_mm(x, w, offs=torch.tensor([4, 4, 6], dtype=torch.int32))
>>> probe.calls
[(4, 0, 2)]
>>> layer = layer_routing("moe.experts", [(4, 0, 2), (2, 2, 2)])
>>> layer.tokens_per_expert, round(layer.max_over_mean, 3)
((6, 2, 4), 1.5)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from tensorledger.trace.records import Trace

__all__ = ["LayerRouting", "RoutingProbe", "layer_routing", "measured_routing"]

_GROUPED_MM = torch.ops.aten._grouped_mm.default
_GROUPED_MM_OP = "aten._grouped_mm.default"


@dataclass(frozen=True)
class LayerRouting:
    """The token-slots each expert of one MoE layer received in the recorded step (summed
    over its micro-batches)."""

    module: str  # the experts' module, fully qualified as in the trace
    tokens_per_expert: tuple[int, ...]
    max_over_mean: float  # the busiest expert's slots over the mean: 1 is balanced

    @property
    def slots(self) -> int:
        """Token-slots in all: tokens · k."""
        return sum(self.tokens_per_expert)


def layer_routing(module: str, calls: Sequence[Sequence[int]]) -> LayerRouting:
    """One layer's routing from the per-expert rows of each of its routings (one a
    micro-batch)."""
    counts = tuple(sum(column) for column in zip(*calls, strict=True))
    mean = sum(counts) / len(counts) if counts else 0.0
    return LayerRouting(module=module, tokens_per_expert=counts,
                        max_over_mean=max(counts) / mean if mean > 0 else 0.0)


class RoutingProbe(TorchDispatchMode):  # type: ignore[no-untyped-call]
    """Note the groups of every forward ``aten._grouped_mm`` with ``offs`` on real tensors.

    ``calls`` holds one tuple of rows per group per call, in call order (for pairing with the
    trace's records of the same op); a call whose ``offs`` is the previous call's tensor (the
    second product of the same layer) is noted as ``None``."""

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.calls: list[tuple[int, ...] | None] = []
        self._last: Any = None

    def __torch_dispatch__(self, func: Any, types: Any, args: Sequence[Any] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if func is _GROUPED_MM and torch._C._current_graph_task_id() == -1:
            offs = kwargs.get("offs", args[2] if len(args) > 2 else None)
            self.calls.append(self._groups(offs))
        return out

    def _groups(self, offs: Any) -> tuple[int, ...] | None:
        if (not isinstance(offs, torch.Tensor) or offs.device.type == "meta"
                or type(offs) is not torch.Tensor):  # fake tensors and subclasses: no values
            return None
        if self._last is not None and self._last() is offs:
            return None
        import weakref

        self._last = weakref.ref(offs)
        ends = [int(v) for v in offs.tolist()]
        return tuple(end - start for start, end in zip([0, *ends[:-1]], ends, strict=True))

    @property
    def seen(self) -> tuple[tuple[int, ...], ...]:
        """Every routing noted (``calls`` less the repeats)."""
        return tuple(c for c in self.calls if c is not None)


def measured_routing(trace: Trace, calls: Sequence[tuple[int, ...] | None]
                     ) -> tuple[LayerRouting, ...]:
    """Each MoE layer's routing: the probe's calls paired, in order, with the trace's forward
    ``aten._grouped_mm`` records (their module names the layer); () when they do not pair
    (a probe that saw other calls than the recorder)."""
    modules = [r.module for r in trace.records
               if r.op == _GROUPED_MM_OP and r.phase != "backward"]
    if len(modules) != len(calls):
        return ()
    by_module: dict[str, list[tuple[int, ...]]] = {}
    for module, groups in zip(modules, calls, strict=True):
        if groups is not None:
            by_module.setdefault(module, []).append(groups)
    try:
        return tuple(layer_routing(module, seen) for module, seen in by_module.items())
    except ValueError:  # a layer whose calls had different numbers of groups
        return ()
