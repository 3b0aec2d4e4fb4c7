"""Tensor-parallel plans: which module of a model is split how across the ``tp`` ranks.

:class:`TpStyle` names a module's split (column- or row-wise); :func:`default_tp_plan` gives
the reference model's Megatron plan (sequence-parallel with ``sp``) or a Hugging Face model's
own, :func:`reference_tp_plan` the same for a part of the reference model (a pipeline stage),
and :func:`apply_tensor_parallel` lays a plan on a model with torch's ``parallelize_module``,
its tied parameters tied again.  :mod:`tensorledger.workload.parallel`, which runs the
sharded step, re-exports these names.

Per block the projections that make heads and hidden features are column-parallel, the
outputs that sum them row-parallel (an MLP without a gate has only ``up``):

>>> from torch import nn
>>> block = nn.Module()
>>> block.mlp = nn.Module()
>>> plan = reference_tp_plan([("blocks.0", block)], embedding=False, head=False, sp=False)
>>> def split(kind):
...     return sorted(path for path, style in plan.items() if type(style).__name__ == kind)
>>> split("ColwiseParallel")  # doctest: +NORMALIZE_WHITESPACE
['blocks.0.attention.key', 'blocks.0.attention.query', 'blocks.0.attention.value',
 'blocks.0.mlp.up']
>>> split("RowwiseParallel")
['blocks.0.attention.output', 'blocks.0.mlp.down']
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from enum import Enum
from typing import TYPE_CHECKING

from torch import nn

from tensorledger.errors import InputError

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.tensor.parallel import ParallelStyle

__all__ = ["TpStyle", "apply_tensor_parallel", "default_tp_plan", "reference_tp_plan"]



class TpStyle(Enum):
    """The parallel style of one module of a tensor-parallel plan."""

    COLWISE = "colwise"  # weight split by output features; output sharded on its last dim
    ROWWISE = "rowwise"  # weight split by input features; output all-reduced


# Hugging Face plan entries (transformers' ALL_PARALLEL_STYLES names) that torch's own styles
# express; the others (packed, MoE, local) are refused by name.
_HF_STYLES = ("colwise", "rowwise", "colwise_rep", "colwise_gather_output", "rowwise_rep",
              "rowwise_split_input", "embedding_rowwise", "sequence_parallel")


def _hf_style(style: str) -> ParallelStyle:
    from torch.distributed.tensor import Replicate
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        SequenceParallel,
    )

    if style == "colwise":
        return ColwiseParallel()
    if style == "rowwise":
        return RowwiseParallel()
    if style in ("colwise_rep", "colwise_gather_output"):
        return ColwiseParallel(output_layouts=Replicate())
    if style in ("rowwise_rep", "rowwise_split_input"):
        return RowwiseParallel(input_layouts=Replicate())
    if style == "embedding_rowwise":
        return RowwiseParallel(input_layouts=Replicate())
    return SequenceParallel(use_local_output=True)


def _hugging_face_plan(model: nn.Module) -> dict[str, ParallelStyle]:
    """The model's own plan (``model.tp_plan``, else its config's ``base_model_tp_plan`` under
    the base model's prefix), with ``*`` matched against the module paths."""
    plan: Mapping[str, str] = dict(getattr(model, "_tp_plan", None) or {})
    if not plan:
        config_plan = getattr(getattr(model, "config", None), "base_model_tp_plan", None) or {}
        base = getattr(model, "base_model", model)
        prefix = next((f"{path}." for path, module in model.named_modules()
                       if module is base and path), "")
        plan = {f"{prefix}{key}": value for key, value in config_plan.items()}
    if not plan:
        raise InputError(f"{type(model).__name__} has no tensor-parallel plan in transformers "
                         "(no _tp_plan nor config.base_model_tp_plan); pass tp_plan= yourself")
    paths = [path for path, _ in model.named_modules() if path]
    styles: dict[str, ParallelStyle] = {}
    for pattern, style in plan.items():
        if style not in _HF_STYLES:
            raise InputError(f"{type(model).__name__}'s plan gives {pattern!r} the style "
                             f"{style!r}, which torch's own styles do not express; known: "
                             f"{', '.join(_HF_STYLES)}")
        matcher = re.compile(re.escape(pattern).replace(r"\*", r"[^.]+") + r"\Z")
        styles.update({path: _hf_style(style) for path in paths if matcher.match(path)})
    return styles


def default_tp_plan(model: nn.Module, sp: bool = False,
                    experts: bool = False) -> dict[str, ParallelStyle]:
    """A Megatron plan (module path → torch ``ParallelStyle``) for ``model``.

    The reference :class:`~tensorledger.models.transformer.TransformerLM`: per block, the
    query, key and value projections and the MLP's up and gate are column-parallel (each rank
    computes its heads, its hidden features) and the attention and MLP outputs row-parallel
    (partial sums reduced), each half taking its input as one replicated DTensor so its input
    gradient is reduced once (Megatron's *f*), not once per projection; the embedding is split
    by vocabulary rows (input replicated) and the head by vocabulary columns with its logits
    gathered, so the loss sees whole logits (as torchtitan's llama does them).

    With ``sp`` (sequence parallelism, Korthikanti et al. 2022) the residual stream between the
    blocks is split on the sequence (``Shard(1)``): the norms run on their sequence shard, each
    half all-gathers its input and reduce-scatters its output (where it would all-reduce), the
    embedding reduce-scatters and the head gathers the final norm's shards.

    A reference mixture of experts is planned beside expert parallelism alone (``experts``:
    see :func:`reference_tp_plan`).

    A Hugging Face model brings its own plan (``model._tp_plan`` or its config's
    ``base_model_tp_plan``); ``sp`` does not apply to it.  Any other model needs a plan passed
    to :func:`parallelize`.
    """
    from tensorledger.models.transformer import TransformerLM

    if not isinstance(model, TransformerLM):
        if hasattr(model, "config") and hasattr(model, "base_model"):
            if sp:
                raise InputError("sequence parallelism is planned for the reference models "
                                 "only; a Hugging Face model runs tensor parallelism without it")
            return _hugging_face_plan(model)
        raise InputError(f"no default tensor-parallel plan for {type(model).__name__}; pass "
                         "tp_plan= (module path → TpStyle or a torch ParallelStyle)")
    if sp and model.position_embedding is not None:
        raise InputError(f"sequence parallelism splits the residual stream before "
                         f"{model.config.name}'s learned position embedding is added; use rope "
                         "positions or no --sp")
    return reference_tp_plan([(f"blocks.{i}", block) for i, block in enumerate(model.blocks)],
                             embedding=True, head=True, sp=sp, experts=experts)


def reference_tp_plan(blocks: Iterable[tuple[str, nn.Module]], *, embedding: bool, head: bool,
                      sp: bool, experts: bool = False) -> dict[str, ParallelStyle]:
    """:func:`default_tp_plan` of the reference model's parts: its ``blocks`` (path, block),
    and the embedding, the head and the final norm where the module holds them (a pipeline
    stage holds some blocks, the first stage the embedding, the last the head and norm).

    A mixture of experts in place of a block's MLP is planned beside expert parallelism
    (``experts``; torchtitan's ETP = 1): its router and routed experts are not split over
    ``tp`` — every tp rank holds its ep rank's experts whole and runs them on the block's
    whole (replicated) input, the same tokens as its tp peers —, and its shared experts are
    split as the dense MLP is (up and gate column-, down row-parallel, the input taken as one
    replicated DTensor so its gradient is reduced once).  Without sequence parallelism only:
    its sequence shards would send each tp rank's own tokens to the experts.  (ETP = TP splits
    the routed experts' hidden width over ``tp`` outside this plan, as plain tensors:
    :mod:`.expert_tensor_parallel`.)
    """
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        PrepareModuleInput,
        RowwiseParallel,
        SequenceParallel,
    )

    stream = Shard(1) if sp else Replicate()  # the residual stream between the halves
    plan: dict[str, ParallelStyle] = {}
    if embedding:
        plan["token_embedding"] = RowwiseParallel(input_layouts=Replicate(),
                                                  output_layouts=stream)
    if head:
        plan["head"] = ColwiseParallel(input_layouts=stream, output_layouts=Replicate())
        if sp:
            plan["final_norm"] = SequenceParallel()
    from tensorledger.models.latent import LatentAttention
    from tensorledger.models.moe import MoE

    for block, module in blocks:
        mlp = getattr(module, "mlp", None)
        mixture = isinstance(mlp, MoE)
        if isinstance(getattr(module, "attention", None), LatentAttention) or (
                mixture and not experts):
            raise InputError("tensor parallelism has no plan for the reference mixture of "
                             "experts without --ep, nor for latent attention, yet (routed "
                             "experts shard by expert parallelism: give --ep N beside --tp); "
                             "drop --tp")
        if mixture and sp:
            raise InputError("--sp beside --ep: the experts take the whole sequence each tp "
                             "rank holds, not its shard; drop --sp")
        half_input = PrepareModuleInput(input_layouts=(stream,),
                                        desired_input_layouts=(Replicate(),))
        plan[f"{block}.attention"] = half_input
        for name in ("query", "key", "value"):
            plan[f"{block}.attention.{name}"] = ColwiseParallel()
        plan[f"{block}.attention.output"] = RowwiseParallel(output_layouts=stream)
        if isinstance(mlp, MoE):
            if mlp.shared is not None:
                plan[f"{block}.mlp.shared"] = PrepareModuleInput(
                    input_layouts=(Replicate(),), desired_input_layouts=(Replicate(),))
                plan[f"{block}.mlp.shared.gate"] = ColwiseParallel()
                plan[f"{block}.mlp.shared.up"] = ColwiseParallel()
                plan[f"{block}.mlp.shared.down"] = RowwiseParallel()
        else:
            plan[f"{block}.mlp"] = half_input
            for name in ("up", "gate") if hasattr(module.mlp, "gate") else ("up",):
                plan[f"{block}.mlp.{name}"] = ColwiseParallel()
            plan[f"{block}.mlp.down"] = RowwiseParallel(output_layouts=stream)
        if sp:
            plan[f"{block}.attention_norm"] = SequenceParallel()
            plan[f"{block}.mlp_norm"] = SequenceParallel()
    return plan


def _styles(model: nn.Module, tp_plan: Mapping[str, TpStyle | ParallelStyle]
            ) -> dict[str, ParallelStyle]:
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    if not tp_plan:
        raise InputError("tensor parallelism needs a plan: module path → colwise or rowwise")
    known = dict(model.named_modules())
    missing = [path for path in tp_plan if path not in known]
    if missing:
        raise InputError(f"the tensor-parallel plan names {missing[0]!r}, which is no module of "
                         f"the model; known: {', '.join(p for p in known if p) or '(none)'}")
    return {path: (ColwiseParallel() if style is TpStyle.COLWISE else RowwiseParallel())
            if isinstance(style, TpStyle) else style for path, style in tp_plan.items()}


def _tied(model: nn.Module) -> list[list[tuple[nn.Module, str]]]:
    """The parameter slots sharing one parameter (tied embeddings), each group in module order."""
    slots: dict[int, list[tuple[nn.Module, str]]] = {}
    for module in model.modules():
        for name, param in module._parameters.items():
            if param is not None:
                slots.setdefault(id(param), []).append((module, name))
    return [group for group in slots.values() if len(group) > 1]


def apply_tensor_parallel(model: nn.Module, mesh: DeviceMesh,
                          tp_plan: Mapping[str, TpStyle | ParallelStyle] | None,
                          sp: bool, experts: bool = False) -> None:
    """Lay ``tp_plan`` (else :func:`default_tp_plan`, ``experts`` beside expert parallelism)
    on ``model`` over ``mesh`` (its ``tp`` dimension), in place; parameters tied before (tied
    embeddings) are tied again."""
    from torch.distributed.tensor.parallel import parallelize_module

    styles = default_tp_plan(model, sp, experts) if tp_plan is None else _styles(model, tp_plan)
    tied = _tied(model)
    parallelize_module(model, mesh, styles)
    # each style registers a new parameter: tie them again, if they were sharded alike
    for group in tied:
        (first, first_name), *others = group
        param = first._parameters[first_name]
        for module, name in others:
            other = module._parameters[name]
            if getattr(other, "placements", None) != getattr(param, "placements", None):
                raise InputError(f"the tensor-parallel plan shards the tied parameter "
                                 f"{type(module).__name__}.{name} unlike its twin; untie it or "
                                 "give both modules one style")
            module._parameters[name] = param
