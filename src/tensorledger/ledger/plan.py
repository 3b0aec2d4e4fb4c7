"""The planner's closed forms checked by a trace: a layout of the plan laid out by
torch.distributed's own code on a fake process group (the workload layer), one step traced,
and its per-rank bytes set beside the closed form's.

The step is of one micro-batch without a pipeline.  With one, torch's schedule runs
:func:`traced_microbatches` of them (1F1B: one more than the stages, its steady state) on a
rank of the stage the closed form finds busiest, each stage laid out over its ranks, and the
closed form is of the same micro-batch count.

What is compared, for that step with its optimizer step:

- **state**: parameters, gradients and optimizer state a rank holds after the step, against
  :func:`tensorledger.plan.rank_memory`'s ``states_bytes``;
- **activations**: the saved activations' high point, against the closed form's layers, token
  ids, final norm and loss (the ledger counts the token ids as an input, so 8 bytes per token
  are added to the traced figure to compare like with like; a layer being recomputed is left
  to the peak, so the figure of a checkpointed last stage, whose saved tensors peak while a
  layer is recomputed, is not like for like);
- **peak**: the traced step's peak against the closed form's total;
- **sent**: the bytes the rank's collectives send, against :func:`tensorledger.plan.sent_bytes`.

A LoRA plan's layouts are traced with the same adapters (peft's, on the reference model)
where the workload lays them out: one device, FSDP2 or DDP.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from tensorledger.errors import InputError
from tensorledger.napkin.adapters import LoraShape
from tensorledger.plan.estimate import (
    LayoutChoice,
    PlanSetup,
    layer_activation_bytes,
    rank_memory,
)
from tensorledger.plan.stages import pipeline_ranks
from tensorledger.plan.traffic import Verified, sent_bytes
from tensorledger.trace.aggregate import communication
from tensorledger.workload import resolve_workload, trace_workload
from tensorledger.workload.layout import Layout, resolve_layout
from tensorledger.workload.run import trace_pipeline_rank
from tensorledger.workload.schedules import StageLayers
from tensorledger.workload.spec import Lora

__all__ = ["traceable_layout", "traced_microbatches", "verify_choice"]

_INDEX_BYTES = 8  # int64 token ids


def traced_microbatches(choice: LayoutChoice) -> int:
    """The micro-batches a pipeline's traced step runs: one more than the stages under the
    single-stage schedules, two rounds of them under the multi-stage ones, or the choice's own
    when fewer.  That is enough for the step's steady state: the first stage holds as many
    micro-batches in flight as with any more (but GPipe's and looped BFS's, which hold them
    all), and forwards run beside the gradients of earlier backwards."""
    if choice.pp == 1:
        return 1
    if choice.chunks > 1:
        return min(choice.accumulation, 2 * choice.pp)
    return min(choice.accumulation, choice.pp + 1)


def traceable_layout(choice: LayoutChoice, lora: LoraShape | None = None) -> Layout | str:
    """The workload layout that runs ``choice``, or why the tracer cannot lay it out yet
    (with ``lora``'s adapters: FSDP or DDP alone, as the workload lays peft's out)."""
    if lora is not None:
        if choice.tp > 1 or choice.pp > 1 or choice.cp > 1:
            return "LoRA adapters are traced under FSDP or DDP alone, not TP, PP or CP yet"
        if lora.nf4 and choice.count > 1:
            return "a QLoRA base is traced on one device only"
        if choice.zero == 1:
            return "LoRA under ZeRO-1 is not traced yet"
    if choice.pp > 1:
        if choice.schedule == "1f1b" and choice.accumulation < choice.pp:
            return "torch's 1F1B runs at least as many micro-batches as stages"
        if choice.zero in (0, 1) and choice.dp > 1:
            return "DDP (and ZeRO-1 under it) within pipeline stages is not traced"
        within = traceable_layout(dataclasses.replace(choice, pp=1, schedule="none",
                                                      chunks=1, accumulation=1,
                                                      stage_layers=()))
        if isinstance(within, str):
            return within
        uneven = len(set(choice.stage_layers)) > 1
        return dataclasses.replace(
            within, pp=choice.pp, microbatches=traced_microbatches(choice),
            schedule=choice.schedule, chunks=choice.chunks,
            stage_layers=StageLayers(given=choice.stage_layers) if uneven else None)
    if choice.checkpoint == "selective":
        return "a workload checkpoints whole blocks; selective checkpointing is traced by " \
            "'tensorledger checkpoint'"
    if choice.ep > 1:  # the trace's dp · fsdp · ep is the planner's dp, fsdp · ep its shard
        if choice.zero == 0:
            return (resolve_layout(ep=choice.ep, tp=choice.tp) if choice.dp == choice.ep
                    else "DDP beside EP is traced over the ep ranks alone")
        if choice.shard == choice.ep:
            return "FSDP over the ep ranks alone (the experts unsharded) is not traced"
        return resolve_layout(dp=choice.replicas, fsdp=choice.shard // choice.ep,
                              zero=choice.zero, ep=choice.ep, tp=choice.tp)
    if choice.cp > 1:  # FSDP over the ZeRO group and the context-parallel ranks
        return resolve_layout(dp=choice.replicas, fsdp=choice.shard, zero=choice.zero,
                              tp=choice.tp, sp=choice.sp, cp=choice.cp)
    if choice.zero == 0:
        return resolve_layout(dp=choice.dp, tp=choice.tp, sp=choice.sp)
    if choice.zero == 1:
        if choice.replicas > 1:
            return "ZeRO-1 is laid out over one shard group, without replicas"
        return resolve_layout(fsdp=choice.shard, zero=1, tp=choice.tp, sp=choice.sp)
    if choice.shard == 1:
        return "a ZeRO stage needs a shard group of more than one rank"
    return resolve_layout(dp=choice.replicas, fsdp=choice.shard, zero=choice.zero, tp=choice.tp,
                          sp=choice.sp)


def verify_choice(setup: PlanSetup, choice: LayoutChoice, model: str,
                  progress: Callable[[str], None] | None = None) -> Verified:
    """Trace one micro-batch step of ``choice`` on fake ranks and set it beside the closed
    form (of the same choice with one micro-batch per step)."""
    layout = traceable_layout(choice, setup.lora)
    if isinstance(layout, str):
        raise InputError(f"{choice.describe()}: {layout}")
    lora = None if setup.lora is None else Lora(
        rank=setup.lora.rank, alpha=setup.lora.rank, targets=setup.lora.targets,
        nf4=setup.lora.nf4)
    from tensorledger.ledger.memory import memory_of

    micro = traced_microbatches(choice)
    one = dataclasses.replace(choice, accumulation=micro)
    memory = rank_memory(setup, one)
    work = resolve_workload(model, batch=choice.micro_batch * micro, seq=setup.seq_len,
                            precision=setup.precision.name, optimizer=setup.optimizer.name,
                            checkpoint=choice.checkpoint == "full", device="fake",
                            layout=layout, lora=lora)
    if progress is not None:
        progress(f"tracing {work.model} as {layout.describe()}")
    # under a pipeline, a rank of the stage the closed form finds the busiest
    run = trace_pipeline_rank(work, memory.rank) if choice.pp > 1 else trace_workload(work)
    ledger = memory_of(run)
    sent = sum(c.bytes_sent for c in communication(run.trace))
    # a recomputed layer's activations are live only while it runs: the peak's, not saved
    _, transient = layer_activation_bytes(setup, choice.micro_batch, choice.tp, choice.sp,
                                          choice.checkpoint, ep=choice.ep)
    # the token ids of the micro-batches in flight: a rank without the embedding holds none
    loads, _, _, _ = pipeline_ranks(setup, one)
    in_flight = next(load.first_in_flight for load in loads if load.rank == memory.rank)
    tokens = choice.micro_batch * setup.seq_len // choice.cp * in_flight
    where = f", {memory.stage} stage, {micro} micro-batches" if choice.pp > 1 else ""
    return Verified(layout=f"{choice.describe()}, micro-batch {choice.micro_batch}, "
                    f"checkpoint {choice.checkpoint}{where}", traced_layout=layout.describe(),
                    closed_state_bytes=memory.states_bytes,
                    traced_state_bytes=(ledger.params_bytes + ledger.grads_bytes
                                        + ledger.optimizer_state_bytes),
                    closed_activation_bytes=(memory.activations_bytes - transient
                                             + memory.logits_bytes),
                    traced_activation_bytes=ledger.saved_activation_bytes
                    + _INDEX_BYTES * tokens,
                    closed_total_bytes=memory.total_bytes, traced_peak_bytes=ledger.peak_bytes,
                    closed_sent_bytes=sent_bytes(setup, one).total_bytes,
                    traced_sent_bytes=sent, traced_peak_by_category=ledger.by_category(),
                    traced_peak_op=f"{ledger.peak_op} ({ledger.peak_phase})")
