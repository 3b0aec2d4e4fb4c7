"""The ``memory`` pipeline: a workload → its traced steady-state step → the memory ledger."""

from __future__ import annotations

from collections.abc import Callable

from tensorledger.errors import InputError, TensorLedgerError
from tensorledger.hardware import Hardware
from tensorledger.memory.ledger import KvCacheFacts, MemoryLedger, StepFacts, memory_ledger
from tensorledger.workload import StepTrace, Workload, trace_workload

__all__ = ["kv_cache_facts", "memory_of", "memory_report", "step_facts"]


def kv_cache_facts(run: StepTrace) -> KvCacheFacts | None:
    """The KV cache a prefill or decode step left, beside napkin's closed form of the same
    batch × tokens in the traced cache's dtype (None for a step without a cache)."""
    cache = run.cache
    if cache is None:
        return None
    from tensorledger.napkin.kvcache import kv_cache, kv_layout, kv_layout_from_hf

    work = run.work
    closed: int | None = None
    try:
        if work.source.builder == "reference" and work.source.config is not None:
            layout = kv_layout(work.source.config)
        else:
            layout = kv_layout_from_hf(work.source.hf_config or {}, work.source.label)
        closed = kv_cache(layout, work.batch, cache.tokens_after, cache.dtype).total_bytes
    except TensorLedgerError:  # a config napkin cannot read the cache of: the trace stands
        closed = None
    layers = ", ".join(f"{count} × {kind}" for kind, count in cache.kinds.items())
    return KvCacheFacts(cache_class=cache.cache_class, layers=layers, dtype=cache.dtype,
                        context=cache.context, tokens_after=cache.tokens_after,
                        bytes_before=cache.bytes_before, storage_bytes=cache.storage_bytes,
                        tensor_bytes=cache.tensor_bytes, closed_form_bytes=closed)


def step_facts(run: StepTrace) -> StepFacts:
    """The plain facts of a traced step that the memory analysis reads beside the trace."""
    work = run.work
    return StepFacts(model=work.model, step=work.step.name, batch=work.batch, seq_len=work.seq,
                     precision=work.precision, optimizer=work.optimizer, device=work.device,
                     checkpointed=work.checkpoint, param_numels=run.param_numels,
                     config=work.source.config, ranks=work.layout.count,
                     layout=work.layout.describe(),
                     tensor_parallel=work.layout.tp,
                     sequence_parallel=work.layout.sp, pipeline_stages=work.layout.pp,
                     adapters=work.lora is not None, offloaded_bytes=run.offloaded_bytes,
                     params_offloaded_bytes=run.params_offloaded_bytes,
                     frozen_tensors=run.frozen_tensors, trained_tensors=run.trained_tensors,
                     routing=work.routing_note,
                     kv_cache=kv_cache_facts(run), context_parallel=work.layout.cp)


def memory_report(work: Workload, hardware: Hardware | None = None, count: int = 1,
                  progress: Callable[[str], None] | None = None,
                  budget_bytes: float | None = None) -> MemoryLedger:
    """Trace ``work``'s first and steady-state steps and account the memory of the latter.

    >>> from tensorledger.workload import resolve_workload
    >>> ledger = memory_report(resolve_workload("tiny", batch=1, seq=8, precision="fp32"))
    >>> ledger.params_bytes + ledger.grads_bytes + ledger.optimizer_state_bytes == (
    ...     ledger.recipe.total_bytes)
    True
    """
    return memory_of(trace_workload(work, first_step=True, progress=progress), hardware, count,
                     budget_bytes)


def memory_of(run: StepTrace, hardware: Hardware | None = None, count: int = 1,
              budget_bytes: float | None = None) -> MemoryLedger:
    """The memory ledger of a traced step (its first step beside it, when traced).  A step
    traced as one rank of a layout is already per device: ``count`` must then be 1 or the
    layout's.  ``budget_bytes``: the usable bytes of a device, in place of its memory less
    the reserve it keeps (``napkin.headroom``)."""
    if hardware is not None and budget_bytes is not None and not (
            0 < budget_bytes <= hardware.memory_bytes):
        raise InputError(f"--budget must be above 0 and at most {hardware.id}'s "
                         f"{hardware.memory_bytes / 1e9:g} GB, got {budget_bytes / 1e9:g} GB")
    if not run.work.layout.single:
        if count not in (1, run.work.layout.count):
            raise InputError(f"--count {count} is not the layout's {run.work.layout.count} "
                             "devices; drop --count")
        count = 1
    first = (run.first_step, run.first_step_tags) if run.first_step is not None else None
    return memory_ledger(run.trace, run.tags, step_facts(run), hardware=hardware, count=count,
                         first_step=first, measured_peak_bytes=run.measured_peak_bytes,
                         budget_bytes=budget_bytes)
