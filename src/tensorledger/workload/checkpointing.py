"""Apply a checkpointing policy (:mod:`tensorledger.plan.checkpoint`) to a module, and trace a
training step of it.

Each segment of the policy becomes one :class:`CheckpointedSegment` in ``model.blocks`` (the
blocks it covers after the first become ``nn.Identity``, so a model that loops over its blocks
runs unchanged).  A segment runs ``torch.utils.checkpoint.checkpoint`` (non-reentrant) with
``early_stop=False``, so backward recomputes all of it, as the planner counts; a selective
segment passes ``create_selective_checkpoint_contexts`` a policy that keeps (MUST_SAVE) the
outputs of matmul and attention ops — by the cost registry's category, as the trace counts
them — and recomputes (PREFER_RECOMPUTE) everything else.

>>> from tensorledger.models import DeepNetwork
>>> from tensorledger.plan.checkpoint import sqrt_segments
>>> net = apply_policy(DeepNetwork(8, 5, device="meta"), sqrt_segments(5))
>>> [type(b).__name__ for b in net.blocks]
['CheckpointedSegment', 'Identity', 'Identity', 'MatmulBlock', 'MatmulBlock']
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, cast

import torch
from torch import nn
from torch.utils.checkpoint import (
    CheckpointPolicy as TorchPolicy,
)
from torch.utils.checkpoint import (
    checkpoint,
    create_selective_checkpoint_contexts,
)

from tensorledger.costs.registry import lookup
from tensorledger.errors import InputError
from tensorledger.models.deep import DeepNetwork
from tensorledger.plan.checkpoint import KEPT_CATEGORIES, CheckpointPolicy, Segment
from tensorledger.trace.records import Trace
from tensorledger.trace.storage import storage_key
from tensorledger.workload.run import TaggingRecorder, record_step
from tensorledger.workload.spec import Workload
from tensorledger.workload.step import placement, prepare

__all__ = ["CheckpointedSegment", "PolicyTrace", "apply_policy", "keeps_output",
           "trace_deep_network", "trace_module_step", "trace_workload_with_policy"]


def keeps_output(func: Any) -> bool:
    """True for the ops whose outputs selective checkpointing keeps: matmul and attention.

    >>> keeps_output(torch.ops.aten.mm.default), keeps_output(torch.ops.aten.gelu.default)
    (True, False)
    """
    rule = lookup(str(func).rsplit(".", 1)[0])
    return rule is not None and rule.category in KEPT_CATEGORIES


def _selective_policy(ctx: Any, func: Any, *args: Any, **kwargs: Any) -> TorchPolicy:
    return TorchPolicy.MUST_SAVE if keeps_output(func) else TorchPolicy.PREFER_RECOMPUTE


def _selective_contexts() -> tuple[Any, Any]:
    contexts = create_selective_checkpoint_contexts(  # type: ignore[no-untyped-call]
        _selective_policy)
    return cast(tuple[Any, Any], contexts)


class CheckpointedSegment(nn.Module):
    """Blocks run one after another, recomputed together in backward (or selectively)."""

    def __init__(self, blocks: Sequence[nn.Module], mode: str = "full") -> None:
        super().__init__()
        self.segment = nn.Sequential(*blocks)
        self.mode = mode

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.mode == "selective":
            return cast(torch.Tensor, checkpoint(self.segment, x, use_reentrant=False,
                                                 early_stop=False,
                                                 context_fn=_selective_contexts))
        return cast(torch.Tensor, checkpoint(self.segment, x, use_reentrant=False,
                                             early_stop=False))


def apply_policy(model: nn.Module, policy: CheckpointPolicy) -> nn.Module:
    """Wrap ``model.blocks`` as ``policy`` says, in place; return the model."""
    blocks = getattr(model, "blocks", None)
    if not isinstance(blocks, nn.ModuleList):
        raise InputError(f"{type(model).__name__} has no .blocks list to checkpoint")
    if len(blocks) != policy.n_blocks:
        raise InputError(f"the policy {policy.name!r} is for {policy.n_blocks} blocks; "
                         f"{type(model).__name__} has {len(blocks)}")
    if any(isinstance(b, CheckpointedSegment | nn.Identity) for b in blocks):
        raise InputError(f"{type(model).__name__} is already checkpointed")
    segment: Segment
    for segment in policy.segments:
        inside = [blocks[i] for i in range(segment.start, segment.stop)]
        blocks[segment.start] = CheckpointedSegment(inside, segment.mode)
        for i in range(segment.start + 1, segment.stop):
            blocks[i] = nn.Identity()
    return model


@dataclass(frozen=True)
class PolicyTrace:
    """The trace of one training step and its storage categories (see ``StepTrace.tags``)."""

    trace: Trace
    tags: dict[int, str]


def trace_module_step(module: nn.Module, loss: Callable[[], torch.Tensor]) -> PolicyTrace:
    """Trace ``loss().backward()`` of ``module`` (no optimizer), tagging parameters, saved
    activations and gradients as :func:`tensorledger.workload.run.record_step` does."""
    recorder = TaggingRecorder()
    params = list(module.parameters())
    param_keys = {storage_key(p) for p in params}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        if storage_key(tensor) not in param_keys:
            recorder.tag([tensor], "saved_activation")
        return tensor

    with recorder:
        recorder.tag(params, "parameter")
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            value = loss()
        value.backward()  # type: ignore[no-untyped-call]
        recorder.tag(params, "parameter")
        recorder.tag((p.grad for p in params), "gradient")
        for p in params:
            p.grad = None
    return PolicyTrace(recorder.trace, recorder.tags)


def trace_workload_with_policy(work: Workload, policy: CheckpointPolicy | None
                               ) -> PolicyTrace:
    """Trace ``work``'s step (a reference model, one device, not ``--checkpoint``) with
    ``policy`` applied to its blocks (None: as it is)."""
    if work.checkpoint:
        raise InputError("the workload is already checkpointed (--checkpoint); give the "
                         "policy instead")
    if not work.layout.single:
        raise InputError("checkpointing policies are traced on one device")
    if work.device == "meta" and policy is not None and policy.segments:
        # on meta, torch's checkpoint finds the reference Transformer's recomputed tensors'
        # metadata unlike the forward's and raises (the deep network is fine there)
        raise InputError("a checkpointed step of a workload is traced on fake or real tensors, "
                         "not meta; use device='fake'")
    with placement(work.device) as target:
        step = prepare(work, target)
        if policy is not None:
            apply_policy(step.module, policy)
        if work.step.optimizer:
            step.run()  # the steady state: optimizer state exists
        trace, tags = record_step(step)
    return PolicyTrace(trace, tags)



def trace_deep_network(d_model: int, n_layers: int, batch: int, activation: str = "gelu",
                       policy: CheckpointPolicy | None = None, device: str = "meta"
                       ) -> PolicyTrace:
    """Trace a training step (forward, loss = mean of the squared outputs, backward) of the
    lecture's deep network on ``device``, ``policy`` applied (None: as it is)."""
    with placement(device) as target:
        net = DeepNetwork(d_model, n_layers, activation, device=target)
        if policy is not None:
            apply_policy(net, policy)
        x = torch.ones(batch, d_model, device=target)
        return trace_module_step(net, lambda: net(x).square().mean())
