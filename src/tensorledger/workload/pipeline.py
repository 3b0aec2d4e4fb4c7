"""Pipeline parallelism: one rank of a ``torch.distributed.pipelining`` step, traced on a fake
process group under fake tensors.

The reference :class:`~tensorledger.models.transformer.TransformerLM` is cut by blocks into
``pp × chunks`` stage modules, even or of the block counts given (:func:`split_stages`: the
first holds the embeddings, the last the final norm and the head); rank ``r`` of ``pp`` holds
stages ``r, r + pp, …`` (one unless the schedule runs several a rank), or ``r`` and
``2·pp − 1 − r`` under ZBV.  torch's own ``PipelineStage`` and every schedule of
``torch.distributed.pipelining`` that runs on a fake group (GPipe, 1F1B, interleaved 1F1B,
looped BFS, interleaved zero bubble, ZBV: :class:`~tensorledger.workload.schedules.Schedule`)
run unchanged on that rank of a fake process group of ``pp`` ranks: the recorder sees the
rank's arithmetic on its micro-batches and every ``send`` / ``recv`` it issues (activations
forward, their gradients backward).  The schedule's own action lists give the bubble and the
micro-batches in flight (:mod:`~tensorledger.workload.schedule_order`).

A stage can itself be laid out over several ranks (``within``: data-parallel, FSDP2, DTensor
tensor and sequence parallelism, as :func:`~tensorledger.workload.parallel.parallelize` lays a
whole model out; :func:`stage_tp_plan` is the reference plan of the parts a stage holds).  The
fake group then has ``pp × within.count`` ranks on a mesh with ``pp`` outermost, the stages talk
over its ``pp`` group, and torch's ``PipelineStage`` drives FSDP as it does on real ranks: the
gradient sync off until the step's last backward, then one reduce-scatter.  Under expert
parallelism (``within.ep``) each stage's MoE layers shard their experts over the stage's ep
ranks and move their token-slots by all-to-all within them, once per micro-batch
(:mod:`~tensorledger.workload.expert_parallel`); a stage of dense layers alone holds none.
Under context parallelism (``within.cp``) the whole batch's token ids are cut to the rank's
chunks of the sequence before the schedule splits them, and every stage's attention runs as
torch's ring over the ``cp`` ranks (:mod:`~tensorledger.workload.context_parallel`).  The workload's
recipe (bf16 autocast over each stage's forward and the loss for ``mixed-bf16``; bf16
parameters with fp32 masters for ``bf16-master``), optimizer and block checkpointing apply.

One detail of running it on the fake group.  Before its first step a schedule lets the stages
vote, rank to rank, whether every stage was given its tensors' shapes (static) or must learn
them from its neighbour (dynamic), and reads the vote back with ``.item()``.  On the fake group
nothing arrives and a fake tensor has no value to read, so that one read fails.  Every stage
here is given its shapes, so the vote's answer is known — static — and the stage used on a
fake group supplies it (after issuing the vote's own send and receive, in the warm-up step,
which is not recorded).  Dynamic inference could not run on a fake group at all: it pickles
shapes into tensors and sends them, and the receiver unpickles what never came.

>>> from tensorledger.models import get_preset
>>> step = trace_pipeline_step(get_preset("tiny"), batch=2, seq=16, pp=2, microbatches=2,
...                            schedule="gpipe")
>>> step.sends, step.sent_bytes      # 2 micro-batches' activations, each 1 · 16 · 64 · 4 bytes
(2, 8192)
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Sequence
from contextlib import AbstractContextManager, ExitStack, nullcontext
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import torch
import torch.nn.functional as F
from torch import nn

from tensorledger.errors import InputError, TensorLedgerError, TraceError
from tensorledger.napkin.recipes import resolve_precision
from tensorledger.napkin.transformer import TransformerConfig
from tensorledger.trace.records import Trace
from tensorledger.workload.layout import SINGLE, Layout
from tensorledger.workload.parallel import fake_process_group
from tensorledger.workload.routing import BALANCED, Routing
from tensorledger.workload.schedule_order import OrderTimeline, order_bubble, order_timeline
from tensorledger.workload.schedules import Schedule, check_schedule, resolve_schedule

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.pipelining import PipelineStage
    from torch.distributed.pipelining.schedules import _PipelineSchedule

    from tensorledger.models.transformer import TransformerLM

__all__ = [
    "OrderTimeline",
    "PipelineStep",
    "Schedule",
    "StageModule",
    "action_lists",
    "build_pipeline_rank",
    "order_bubble",
    "order_timeline",
    "resolve_schedule",
    "run_pipeline_step",
    "split_stages",
    "trace_pipeline_step",
]


# ---- the stages -------------------------------------------------------------------------------


class StageModule(nn.Module):
    """Consecutive blocks of a reference Transformer, with the embeddings on the first stage
    and the final norm and head on the last.  The parts are the model's own modules under
    their own names (``blocks`` keyed by the block's index in the whole model), so a stage's
    parameters and records read as the model's."""

    def __init__(self, model: TransformerLM, blocks: range, first: bool, last: bool) -> None:
        super().__init__()
        self.token_embedding = model.token_embedding if first else None
        self.position_embedding = model.position_embedding if first else None
        self.dropout = model.dropout if first else None
        self.blocks = nn.ModuleDict({str(index): model.blocks[index] for index in blocks})
        self.final_norm = model.final_norm if last else None
        self.head = model.head if last else None
        self.autocast = False  # run forward under bf16 autocast (the mixed-bf16 recipe)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.autocast:
            return self._forward(x)
        with torch.autocast(device_type=x.device.type, dtype=torch.bfloat16):
            return self._forward(x)

    def _forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.token_embedding is not None:  # x is the token ids (b, s)
            tokens = x
            x = self.token_embedding(tokens)
            if self.position_embedding is not None:
                x = x + self.position_embedding(torch.arange(tokens.shape[1],
                                                             device=tokens.device))
            if self.dropout is not None:
                x = self.dropout(x)
        for block in self.blocks.values():
            x = block(x)
        if self.final_norm is not None and self.head is not None:
            x = self.head(self.final_norm(x))
        return x


def split_stages(model: nn.Module, pp: int, chunks: int = 1,
                 stage_layers: Sequence[int] | None = None) -> list[StageModule]:
    """Cut a reference :class:`~tensorledger.models.transformer.TransformerLM` into
    ``pp × chunks`` stages, in order: of equal block counts, or of ``stage_layers`` blocks.

    The stages share the model's modules (nothing is copied).  Refused in one line: a stage
    count that does not divide the layers, and tied embeddings across stages (the token table
    would live on the first stage and the head on the last).

    >>> from tensorledger.models import build_model, get_preset
    >>> stages = split_stages(build_model(get_preset("tiny")), 2)
    >>> [list(stage.blocks) for stage in stages], stages[0].head is None
    ([['0'], ['1']], True)
    """
    from tensorledger.models.transformer import TransformerLM

    if not isinstance(model, TransformerLM):
        raise InputError(f"pipeline stages are cut from the reference TransformerLM; got "
                         f"{type(model).__name__}")
    for name, value in (("pp", pp), ("chunks", chunks)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InputError(f"--{name} must be a whole number >= 1, got {value!r}")
    config = model.config
    layers, count = config.n_layers, pp * chunks
    if stage_layers is None and layers % count:
        what = (f"--pp {pp} does" if chunks == 1
                else f"--pp {pp} × {chunks} chunks = {count} stages do")
        raise InputError(f"{what} not divide {config.name}'s {layers} layers; use a stage count "
                         f"that divides {layers}")
    if count > 1 and config.tied_embeddings:
        raise InputError(f"{config.name} ties its head to its token embedding, which pipeline "
                         "stages would split apart; untie them or use no --pp")
    if stage_layers is None:
        stage_layers = [layers // count] * count
    elif len(stage_layers) != count or sum(stage_layers) != layers or min(stage_layers) < 1:
        raise InputError(f"stage layers {','.join(map(str, stage_layers))} are not {count} "
                         f"stages of 1 block or more adding up to {config.name}'s {layers}")
    starts = [sum(stage_layers[:index]) for index in range(count + 1)]
    return [StageModule(model, range(starts[index], starts[index + 1]),
                        first=index == 0, last=index == count - 1) for index in range(count)]


# ---- the traced step --------------------------------------------------------------------------


@dataclass(frozen=True)
class PipelineStep:
    """The trace of one training step of one pipeline rank, and what the rank holds.

    Sends and receives are the recorded step's ``send`` / ``recv`` ops: on the first rank of
    a non-interleaved pipeline the sends are the micro-batches' activations and the receives
    their gradients (the last rank: the other way round).
    """

    schedule: Schedule
    pp: int  # pipeline ranks
    chunks: int  # stages per rank (1 unless interleaved)
    microbatches: int
    rank: int  # the traced rank: it holds stages rank, rank + pp, …
    stages: tuple[int, ...]
    trace: Trace
    params_per_rank: int
    param_bytes_per_rank: int
    optimizer_state_bytes_per_rank: int  # AdamW's two moments and its step counters
    sends: int
    sent_bytes: int
    receives: int
    received_bytes: int
    # the high point of the autograd-saved tensors of the micro-batches in flight
    saved_activation_peak_bytes: int
    # of the schedule's own action lists (order_bubble); None where it exposes none
    bubble_fraction: float | None
    # the schedule's action lists replayed (order_timeline): length, in-flight micro-batches
    timeline: OrderTimeline | None = None
    param_numels: tuple[int, ...] = ()  # one per parameter tensor the rank holds
    tags: dict[int, str] = field(default_factory=dict)  # storage id → memory category


def _vote_stage_class() -> type[PipelineStage]:
    from torch.distributed.pipelining import PipelineStage

    class FakeGroupStage(PipelineStage):
        """A ``PipelineStage`` for a fake group: the warm-up vote's answer is supplied."""

        def _warmup_backward_result(self, received_result: torch.Tensor | None = None
                                    ) -> torch.Tensor:
            super()._warmup_backward_result(received_result)  # its send and receive
            # every stage was given its shapes: all voted static (1); a tensor made from a
            # literal keeps its value under fake tensors, so the schedule can read it back
            return torch.tensor([1], dtype=torch.int32)

    return FakeGroupStage


def _examples(config: TransformerConfig, micro: int, seq: int, first: bool, last: bool,
              dtype: torch.dtype, stream_seq: int, logits_dtype: torch.dtype
              ) -> tuple[torch.Tensor, torch.Tensor]:
    """A stage's input and output of one micro-batch, for torch's static shape inference:
    the residual stream between stages holds ``stream_seq`` tokens (the rank's sequence shard
    under sequence parallelism), the last stage's logits are whole (gathered)."""
    stream = torch.empty(micro, stream_seq, config.d_model, dtype=dtype, requires_grad=True)
    inputs = torch.zeros(micro, seq, dtype=torch.long) if first else stream
    outputs = (torch.empty(micro, seq, config.vocab_size, dtype=logits_dtype,
                           requires_grad=True)
               if last else stream.detach().clone().requires_grad_(True))
    return inputs, outputs


def _check(config: TransformerConfig, batch: int, seq: int, pp: int, microbatches: int,
           schedule: Schedule, rank: int, chunks: int) -> None:
    for name, value in (("batch", batch), ("seq", seq), ("pp", pp),
                        ("microbatches", microbatches), ("chunks", chunks)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InputError(f"--{name} must be a whole number >= 1, got {value!r}")
    if pp < 2:
        raise InputError(f"pipelining needs --pp 2 or more ranks, got {pp}")
    if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < pp:
        raise InputError(f"the traced pipeline rank is 0 to {pp - 1}, got {rank!r}")
    if batch % microbatches:
        raise InputError(f"--batch {batch} does not split into {microbatches} micro-batches; "
                         f"use a batch that divides by {microbatches}")
    check_schedule(schedule, pp, microbatches, chunks)
    if seq > config.context_length:
        raise InputError(f"--seq {seq} is longer than {config.name}'s context of "
                         f"{config.context_length}")


def _make_schedule(schedule: Schedule, stages: list[PipelineStage], microbatches: int,
                   autocast: bool = False) -> _PipelineSchedule:
    from torch.distributed.pipelining import schedules

    def loss(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        # the workload's own loss (tensorledger.workload.step.lm_loss), under the recipe's
        # autocast as the forward is
        if not autocast:
            return F.cross_entropy(logits.flatten(0, 1), target.flatten())
        with torch.autocast(device_type=logits.device.type, dtype=torch.bfloat16):
            return F.cross_entropy(logits.flatten(0, 1), target.flatten())

    kind = getattr(schedules, schedule.torch_name)
    if schedule.interleaved:
        return cast("_PipelineSchedule", kind(list(stages), microbatches, loss_fn=loss))
    return cast("_PipelineSchedule", kind(stages[0], microbatches, loss_fn=loss))


def _saved_peak(trace: Trace, saved: set[int]) -> int:
    """The high point of the live bytes of the storages in ``saved``, replayed from the trace."""
    live: dict[int, int] = {}
    peak = 0
    for record in trace.records:
        for storage in record.storages_freed:
            live.pop(storage, None)
        for storage, nbytes in record.storages_created:
            if storage in saved:
                live[storage] = nbytes
        peak = max(peak, sum(live.values()))
    return peak


def stage_tp_plan(stage: StageModule, sp: bool, experts: bool = False) -> dict[str, Any]:
    """The reference model's tensor-parallel plan (:func:`~tensorledger.workload.parallel.
    default_tp_plan`) for the parts one stage holds, under their names in the stage."""
    from tensorledger.workload.parallel import reference_tp_plan

    if sp and stage.position_embedding is not None:
        raise InputError("sequence parallelism splits the residual stream before the learned "
                         "position embedding is added; use rope positions or no --sp")
    blocks = [(f"blocks.{key}", getattr(block, "block", block))
              for key, block in stage.blocks.items()]
    return reference_tp_plan(blocks, embedding=stage.token_embedding is not None,
                             head=stage.head is not None, sp=sp, experts=experts)


def _checkpoint_stage(stage: nn.Module) -> nn.Module:
    from tensorledger.workload.step import CheckpointedBlock

    blocks = cast(nn.ModuleDict, stage.blocks)
    for key in list(blocks.keys()):
        blocks[key] = CheckpointedBlock(blocks[key])
    return stage


def build_pipeline_rank(config: TransformerConfig, pp: int, rank: int, chunks: int,
                        schedule: Schedule, microbatches: int, micro: int, seq: int,
                        stage_class: type[PipelineStage] | None = None, *,
                        within: Layout = SINGLE, mesh: DeviceMesh | None = None,
                        precision: str = "fp32", checkpoint: bool = False,
                        stage_layers: Sequence[int] | None = None
                        ) -> tuple[list[nn.Module], _PipelineSchedule]:
    """The stage modules of pipeline rank ``rank`` (a fresh reference model cut by
    :func:`split_stages`) and the schedule over them, on the process group already
    initialised (fake or real).

    ``within`` lays each stage out over the ranks that share it (data-parallel, FSDP and
    tensor-parallel degrees, ``pp`` = 1) on ``mesh``, the whole layout's device mesh with its
    ``pp`` dimension outermost (:func:`~tensorledger.workload.parallel.build_mesh`), as
    :func:`~tensorledger.workload.parallel.parallelize` lays a model out: tensor parallelism
    by :func:`stage_tp_plan`, then ``checkpoint`` (every block of the stage), then FSDP or
    DDP; the stages talk over the mesh's ``pp`` group.  ``precision`` is the recipe: the
    parameters' dtype, and bf16 autocast over each stage's forward and the loss for
    ``mixed-bf16``.
    """
    from torch.distributed.pipelining import PipelineStage

    from tensorledger.models import build_model
    from tensorledger.workload.parallel import parallelize
    from tensorledger.workload.precision import param_dtype

    recipe = resolve_precision(precision)
    dtype = param_dtype(recipe)
    autocast = recipe.autocast
    stage_kind = stage_class or PipelineStage
    if not within.single and mesh is None:
        raise TensorLedgerError("a pipeline laid out within its stages needs the layout's mesh")
    modules = split_stages(build_model(config, "cpu", dtype), pp, chunks, stage_layers)
    count = len(modules)
    tp = within.tp
    # under context parallelism a rank's stages see its chunks of the sequence alone
    local_seq = seq // within.cp
    stream_seq = local_seq // tp if within.sp else local_seq
    logits_dtype = torch.bfloat16 if autocast else dtype
    group = mesh["pp"].get_group() if mesh is not None else None
    held = schedule.placement(pp, chunks, rank)
    stages, laid = [], []
    for index in held:
        module: nn.Module = modules[index]
        modules[index].autocast = autocast
        if not within.single:
            plan = (stage_tp_plan(modules[index], within.sp, within.ep > 1) if tp > 1
                    else None)
            module = parallelize(module, within, cast("DeviceMesh", mesh), plan,
                                 between=_checkpoint_stage if checkpoint else None, stage=True)
        elif checkpoint:
            module = _checkpoint_stage(module)
        inputs, outputs = _examples(config, micro, local_seq, index == 0, index == count - 1,
                                    dtype, stream_seq, logits_dtype)
        stages.append(stage_kind(module, index, count, torch.device("cpu"),
                                 input_args=inputs, output_args=outputs, group=group))
        laid.append(module)
    return laid, _make_schedule(schedule, stages, microbatches, autocast)


def _sequence_sharded(within: Layout, mesh: DeviceMesh | None, tokens: torch.Tensor
                      ) -> AbstractContextManager[None]:
    """Under context parallelism, the whole batch's token ids (the first stage's inputs and
    the last's targets: one tensor) cut to this rank's chunks of the sequence before the
    schedule splits them into micro-batches, and every stage's attention run as torch's
    ring over the mesh's ``cp`` ranks (:mod:`.context_parallel`); else nothing."""
    if within.cp == 1:
        return nullcontext()
    from tensorledger.workload.context_parallel import sequence_sharded

    assert mesh is not None  # a layout within the stages has its mesh
    return sequence_sharded(mesh["cp"], [tokens], within.cp_rotate)


def action_lists(schedule: str | Schedule, pp: int, microbatches: int,
                 chunks: int | None = None) -> dict[int, list[Any]]:
    """torch's own action lists of ``schedule`` (``pipeline_order``: rank → its actions), as
    the schedule builds them for ``pp`` ranks of ``chunks`` stages and ``microbatches``
    micro-batches: built over stand-in stages (a 2 × 2 linear map each) on a fake group, no
    step run.  :func:`~tensorledger.workload.schedule_order.order_timeline` replays them.

    >>> order = action_lists("zbv", 2, 4)         # rank 0 holds the V's first and last stage
    >>> sorted({action.stage_index for action in order[0] if action is not None})
    [0, 3]
    """
    from torch.distributed.pipelining import PipelineStage

    kind = resolve_schedule(schedule)
    chunks = kind.default_chunks() if chunks is None else chunks
    for name, value in (("pp", pp), ("microbatches", microbatches), ("chunks", chunks)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InputError(f"--{name} must be a whole number >= 1, got {value!r}")
    check_schedule(kind, pp, microbatches, chunks)
    count = pp * chunks
    with fake_process_group(pp, rank=0):
        example = torch.zeros(1, 2)
        stages = [PipelineStage(nn.Linear(2, 2), index, count, torch.device("cpu"),
                                input_args=example, output_args=example)
                  for index in kind.placement(pp, chunks, 0)]
        runner = (_compute_only(kind, stages, microbatches) if kind.interleaved
                  else _make_schedule(kind, stages, microbatches))
    order = getattr(runner, "pipeline_order", None)
    if order is None:  # the single-stage schedules of an older torch keep no lists
        raise TraceError(f"torch's {kind.torch_name} keeps no action lists to replay")
    return cast(dict[int, list[Any]], order)


def _compute_only(kind: Schedule, stages: list[PipelineStage], microbatches: int
                  ) -> _PipelineSchedule:
    """A multi-stage schedule built for its compute action lists alone: torch's class with
    its lowering to send/receive and unshard actions skipped (the replay drops those; the
    lowering is most of the time a large schedule takes to build)."""
    from torch.distributed.pipelining import schedules

    def no_comms(self: Any, actions: Any, format: str = "compute_only") -> None:
        self.pipeline_order_with_comms = None

    base = getattr(schedules, kind.torch_name)
    lean = type(base.__name__, (base,), {"_prepare_schedule_with_comms": no_comms})
    return cast("_PipelineSchedule", lean(list(stages), microbatches,
                                          loss_fn=lambda logits, target: logits.sum()))


def run_pipeline_step(schedule: _PipelineSchedule, stages: Sequence[int], count: int,
                      tokens: torch.Tensor) -> None:
    """One step of ``schedule`` on the rank holding ``stages`` of ``count``: the first stage
    feeds the tokens, the last scores them against the same tokens (a next-token loss's
    shapes)."""
    args = (tokens,) if 0 in stages else ()
    target = tokens if count - 1 in stages else None
    schedule.step(*args, target=target)


def trace_pipeline_step(config: TransformerConfig, batch: int, seq: int, pp: int,
                        microbatches: int, schedule: str | Schedule, stage: int = 0,
                        chunks: int | None = None, *, within: Layout = SINGLE,
                        precision: str = "fp32", optimizer: str = "adamw",
                        checkpoint: bool = False, optimizer_kernel: str = "for-loop",
                        stage_layers: Sequence[int] | None = None,
                        routing: Routing = BALANCED) -> PipelineStep:
    """Trace the training step (the schedule's forward and backward of every micro-batch with
    a cross-entropy loss on the last stage, then the optimizer) of pipeline rank ``stage`` of
    ``pp``, on a rank of that stage of a fake process group under fake tensors.

    ``batch`` is the whole batch the first stage splits into ``microbatches``; ``chunks`` is
    the stages per rank of the multi-stage schedules (default 2; 1 otherwise; ZBV's are 2);
    ``stage_layers`` the blocks of each of the ``pp × chunks`` stages (even by default).  ``within``
    lays each stage out over ``within.count`` ranks (data-parallel, FSDP, tensor-parallel;
    :func:`build_pipeline_rank`): the fake group then has ``pp × within.count`` ranks and the
    traced one is the first of its stage's.  ``precision``, ``optimizer`` and ``checkpoint``
    are the workload's recipe, optimizer and block checkpointing.  A warm-up step (the vote,
    buffers, lazy FSDP set-up, optimizer state) runs first; the second is recorded.  A
    mixture of experts' routers route as ``routing`` says (:class:`.routed.RoutedMode`).
    """
    from torch._subclasses.fake_tensor import FakeTensorMode

    from tensorledger.trace.grouped import GroupedMMMode
    from tensorledger.trace.storage import local_tensor as local
    from tensorledger.workload.parallel import build_mesh
    from tensorledger.workload.precision import RecipeOptimizer
    from tensorledger.workload.routed import RoutedMode
    from tensorledger.workload.run import TaggingRecorder, gathered_events, saved_tagger
    from tensorledger.workload.step import zero1_optimizer

    kind = resolve_schedule(schedule)
    chunks = kind.default_chunks() if chunks is None else chunks
    _check(config, batch, seq, pp, microbatches, kind, stage, chunks)
    if within.pp != 1:
        raise InputError("within is the layout of one stage's ranks: its pp must be 1")
    if within.cp > 1 and seq % (2 * within.cp):
        raise InputError(f"--cp {within.cp} splits each sequence into 2 × {within.cp} chunks; "
                         f"--seq {seq:,} does not divide by {2 * within.cp}")
    if within.strategy in ("ddp", "zero1"):
        # a stage's second step (the recorded one) would rebuild DDP's buckets from the
        # order its gradients came in, reading memory fake tensors do not have
        raise InputError("DDP (and ZeRO-1 under it) within pipeline stages is not traced; "
                         "shard the stages' data-parallel ranks with --fsdp N (--zero 2 or 3)")
    count = pp * chunks
    whole = dataclasses.replace(within, pp=pp, microbatches=microbatches, schedule=kind.value)
    try:
        with fake_process_group(whole.count, rank=stage * within.count):
            mesh = None if within.single else build_mesh(whole)
            routed: AbstractContextManager[object] = nullcontext() if config.moe is None \
                else RoutedMode(config.moe.n_experts, config.moe.top_k, routing)
            with FakeTensorMode(), GroupedMMMode(), routed, warnings.catch_warnings(), \
                    ExitStack() as stack:
                # FSDP2 warns that a unit returns a view which an in-place op would cut from
                # its backward hook; the stages read their outputs out of place
                warnings.filterwarnings("ignore", "FSDP2-wrapped module .* returned a view "
                                        "tensor", UserWarning)
                modules, runner = build_pipeline_rank(
                    config, pp, stage, chunks, kind, microbatches, batch // microbatches, seq,
                    _vote_stage_class(), within=within, mesh=mesh, precision=precision,
                    checkpoint=checkpoint, stage_layers=stage_layers)
                held = kind.placement(pp, chunks, stage)
                params = list(dict.fromkeys(p for module in modules
                                            for p in module.parameters()))
                steps = RecipeOptimizer(params, optimizer, precision,
                                        inner=zero1_optimizer(within, mesh, optimizer,
                                                              optimizer_kernel),
                                        kernel=optimizer_kernel)
                tokens = torch.randint(0, config.vocab_size, (batch, seq))

                def step() -> None:
                    run_pipeline_step(runner, held, count, tokens)
                    steps.step()
                    for p in params:
                        p.grad = None

                # one entry for both steps (see context_parallel.sequence_sharded)
                stack.enter_context(_sequence_sharded(within, mesh, tokens))
                step()  # the warm-up: the vote, the stages' buffers, the optimizer state
                recorder = TaggingRecorder()

                def held_state() -> list[torch.Tensor]:
                    return [*steps.master_tensors(), *steps.state_tensors()]

                with recorder, gathered_events(recorder, within.strategy), \
                        torch.autograd.graph.saved_tensors_hooks(
                            saved_tagger(recorder, params), lambda t: t):
                    recorder.tag(params, "parameter")
                    recorder.tag(held_state(), "optimizer_state")
                    run_pipeline_step(runner, held, count, tokens)
                    recorder.tag(params, "parameter")  # met by the step's ops by now
                    recorder.tag((p.grad for p in params), "gradient")
                    steps.step()
                    recorder.tag(params, "parameter")
                    recorder.tag(held_state(), "optimizer_state")
                    for p in params:
                        p.grad = None
                locals_ = [local(p) for p in params]
                numel = sum(p.numel() for p in locals_)
                nbytes = sum(p.numel() * p.element_size() for p in locals_)
                state = sum(local(v).numel() * v.element_size() for v in held_state())
    except TensorLedgerError:
        raise
    except Exception as error:
        # a stage wraps what its forward raised in a RuntimeError of its own: a refusal of
        # the library's (the ring's, say) is passed on as it was raised
        cause: BaseException | None = error
        while cause is not None and not isinstance(cause, TensorLedgerError):
            cause = cause.__cause__ or cause.__context__
        if cause is not None:
            raise cause from None
        raise TraceError(f"the {kind.value} pipeline step of rank {stage} of {pp} raised "
                         f"{type(error).__name__}: {error}") from error
    trace = recorder.trace
    p2p = [r.collective for r in trace.records
           if r.collective is not None and r.collective.kind == "send-recv"]
    sends = [c for c in p2p if c.bytes_sent]
    receives = [c for c in p2p if c.bytes_received]
    saved = {storage for storage, category in recorder.tags.items()
             if category == "saved_activation"}
    order = cast(dict[int, list[Any]] | None, getattr(runner, "pipeline_order", None))
    timeline = order_timeline(order) if order else None
    return PipelineStep(
        schedule=kind, pp=pp, chunks=chunks, microbatches=microbatches, rank=stage,
        stages=held, trace=trace, params_per_rank=numel, param_bytes_per_rank=nbytes,
        optimizer_state_bytes_per_rank=state, sends=len(sends),
        sent_bytes=sum(c.bytes_sent for c in sends), receives=len(receives),
        received_bytes=sum(c.bytes_received for c in receives),
        saved_activation_peak_bytes=_saved_peak(trace, saved),
        bubble_fraction=None if timeline is None else timeline.bubble_fraction,
        timeline=timeline,
        param_numels=tuple(p.numel() for p in locals_), tags=dict(recorder.tags))
