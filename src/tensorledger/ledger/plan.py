"""The planner's closed forms checked by a trace: a layout of the plan laid out by
torch.distributed's own code on a fake process group (the workload layer), one micro-batch
step traced, and its per-rank bytes set beside the closed form's.

What is compared, for one micro-batch step with its optimizer step:

- **state**: parameters, gradients and optimizer state a rank holds after the step, against
  :func:`tensorledger.plan.rank_memory`'s ``states_bytes``;
- **activations**: the saved activations' high point, against the closed form's layers, token
  ids, final norm and loss (the ledger counts the token ids as an input, so 8 bytes per token
  are added to the traced figure to compare like with like; a layer being recomputed is left
  to the peak);
- **peak**: the traced step's peak against the closed form's total;
- **sent**: the bytes the rank's collectives send, against :func:`tensorledger.plan.sent_bytes`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from tensorledger.errors import InputError
from tensorledger.plan.estimate import (
    LayoutChoice,
    PlanSetup,
    Verified,
    layer_activation_bytes,
    rank_memory,
    sent_bytes,
)
from tensorledger.trace.aggregate import communication
from tensorledger.workload import resolve_workload, trace_workload
from tensorledger.workload.layout import Layout, resolve_layout

__all__ = ["traceable_layout", "verify_choice"]

_INDEX_BYTES = 8  # int64 token ids


def traceable_layout(choice: LayoutChoice) -> Layout | str:
    """The workload layout that runs ``choice``, or why the tracer cannot lay it out yet."""
    if choice.pp > 1:
        return "a pipeline beside other layouts is not traced yet"
    if choice.checkpoint == "selective":
        return "a workload checkpoints whole blocks; selective checkpointing is traced by " \
            "'tensorledger checkpoint'"
    if choice.zero == 0:
        if choice.tp > 1 and choice.dp > 1:
            return "DDP beside tensor parallelism is not laid out (FSDP is)"
        return resolve_layout(dp=choice.dp, tp=choice.tp, sp=choice.sp)
    if choice.zero == 1:
        if choice.tp > 1 or choice.replicas > 1:
            return "ZeRO-1 is laid out over one shard group without tensor parallelism"
        return resolve_layout(fsdp=choice.shard, zero=1)
    if choice.shard == 1:
        return "a ZeRO stage needs a shard group of more than one rank"
    return resolve_layout(dp=choice.replicas, fsdp=choice.shard, zero=choice.zero, tp=choice.tp,
                          sp=choice.sp)


def verify_choice(setup: PlanSetup, choice: LayoutChoice, model: str,
                  progress: Callable[[str], None] | None = None) -> Verified:
    """Trace one micro-batch step of ``choice`` on fake ranks and set it beside the closed
    form (of the same choice with one micro-batch per step)."""
    layout = traceable_layout(choice)
    if isinstance(layout, str):
        raise InputError(f"{choice.describe()}: {layout}")
    from tensorledger.ledger.memory import memory_of

    work = resolve_workload(model, batch=choice.micro_batch, seq=setup.seq_len,
                            precision=setup.precision.name, optimizer=setup.optimizer.name,
                            checkpoint=choice.checkpoint == "full", device="fake",
                            layout=layout)
    if progress is not None:
        progress(f"tracing {work.model} as {layout.describe()}")
    run = trace_workload(work)
    ledger = memory_of(run)
    one = dataclasses.replace(choice, accumulation=1)
    memory = rank_memory(setup, one)
    sent = sum(c.bytes_sent for c in communication(run.trace))
    # a recomputed layer's activations are live only while it runs: the peak's, not saved
    _, transient = layer_activation_bytes(setup, choice.micro_batch, choice.tp, choice.sp,
                                          choice.checkpoint)
    tokens = choice.micro_batch * setup.seq_len
    return Verified(layout=f"{choice.describe()}, micro-batch {choice.micro_batch}, "
                    f"checkpoint {choice.checkpoint}", traced_layout=layout.describe(),
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
