"""Trace a workload's step: the steady-state step of training, every op and every storage.

A training run's costs are decided from its second step on, when the optimizer state exists:
:func:`trace_workload` runs a warm-up step first (free on meta and fake tensors), then records
the next one.  Storages are tagged as they are recognised — parameters, gradients, optimizer
state (the master copy of ``bf16-master`` included), saved activations (through autograd's
``saved_tensors_hooks``) — so the memory analysis is a pure function of the result.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field

import torch

from tensorledger.summary import show_count, summary
from tensorledger.trace.kernels import target_program
from tensorledger.trace.recorder import Recorder
from tensorledger.trace.records import OpRecord, Trace
from tensorledger.trace.storage import local_tensor as local
from tensorledger.trace.storage import storage_key
from tensorledger.workload.context_parallel import RING_NOTE
from tensorledger.workload.inference import TracedCache
from tensorledger.workload.qlora import dequantization_note, flat_tensors
from tensorledger.workload.schedule_order import OrderTimeline
from tensorledger.workload.spec import Workload, resolve_workload
from tensorledger.workload.step import PreparedStep, laid_out, prepare

__all__ = ["StepTrace", "TaggingRecorder", "device_records", "gathered_events", "parts_of",
           "record_step",
           "saved_tagger", "trace_model", "trace_pipeline_rank", "trace_workload"]


class TaggingRecorder(Recorder):
    """A trace recorder that also remembers which storages are which kind of memory."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: dict[int, str] = {}

    def tag(self, tensors: Iterable[torch.Tensor | None], category: str) -> None:
        for tensor in tensors:
            if tensor is None:
                continue
            for part in flat_tensors(local(tensor)):  # an NF4 weight: its inner tensors
                known = self._live.get(storage_key(part))
                if known is not None:
                    self.tags.setdefault(known[0], category)

    def made_by(self, records: Iterable[OpRecord], category: str) -> None:
        """Tag what ``records`` created and nothing tagged yet (the optimizer step's
        temporaries, when it runs on the host)."""
        for record in records:
            for number, _ in record.storages_created:
                self.tags.setdefault(number, category)

    def hold(self, tensors: Iterable[torch.Tensor], category: str) -> int:
        """Register ``tensors``' storages as live before the step and tag them (a decode
        step's KV cache, which the step may free before any op reads it); their distinct
        bytes."""
        held: dict[int, int] = {}
        for tensor in tensors:
            storage = local(tensor).untyped_storage()
            number, _ = self._storage_id(storage, None)
            self.tags.setdefault(number, category)
            held[number] = int(storage.nbytes())
        return sum(held.values())


@dataclass(frozen=True)
class StepTrace:
    """A workload, its module's parameter count and the trace of one (steady-state) step.

    ``tags`` maps storage ids of the trace to memory categories (untagged: temporary).
    ``first_step`` is the trace of the very first step, when asked for (``memory``): it has
    no optimizer state until its optimizer step, so its peak can differ.
    """

    work: Workload
    param_numels: tuple[int, ...]  # one per parameter tensor, tied ones once; local shards
    trace: Trace
    param_parts: tuple[tuple[str, int], ...] = ()  # parameters by part, largest first
    tags: dict[int, str] = field(default_factory=dict)
    first_step: Trace | None = None
    first_step_tags: dict[int, str] = field(default_factory=dict)
    measured_peak_bytes: int | None = None  # torch.cuda.max_memory_allocated on cuda
    assumptions: tuple[str, ...] = ()  # what the trace decided that values would have
    model_params: int = 0  # the whole model's parameters (all ranks' shards together)
    trainable_params: int | None = None  # with adapters (LoRA): those trained; None: all
    active_params: int | None = None  # a mixture of experts: the parameters a token runs
    # --offload activations: bytes copied to the host in forward and back in backward
    offloaded_bytes: tuple[int, int] | None = None
    # --offload params: FSDP2's shard copies to the device and gradient copies to the host
    params_offloaded_bytes: tuple[int, int] | None = None
    # with adapters: the frozen tensors (elements, bytes an element, NF4) and the trained ones
    # (elements, bytes an element), for the closed forms (napkin.adapters)
    frozen_tensors: tuple[tuple[int, int, bool], ...] = ()
    trained_tensors: tuple[tuple[int, int], ...] = ()
    cache: TracedCache | None = None  # prefill and decode: the KV cache the step left
    # a pipeline's schedule replayed from torch's own action lists (bubble, in flight)
    pipeline: OrderTimeline | None = None

    @property
    def params(self) -> int:
        """Parameters this rank holds (the whole model on a single device)."""
        return sum(self.param_numels)

    @property
    def tokens(self) -> int:
        return self.work.tokens

    def __repr__(self) -> str:
        return summary("StepTrace", repr(self.work), show_count(self.params, "params"),
                       repr(self.trace))


def device_records(run: StepTrace) -> tuple[OpRecord, ...]:
    """The ops the device runs: all of them, but with ``--offload params`` the optimizer
    step's, which FSDP2's CPUOffloadPolicy runs on the host's CPU (the memory ledger counts
    them as host work: ``ParamOffload.optimizer_flops``)."""
    if "params" not in run.work.offload:
        return run.trace.records
    return tuple(r for r in run.trace.records if r.phase != "optimizer")


def parts_of(step: PreparedStep) -> tuple[tuple[str, int], ...]:
    """Parameters by part: the reference model's parts (embeddings, attention, mlp, norms,
    head), else by module path up to the first layer index (``model.layers``, ``lm_head``);
    LoRA adapters are a part of their own."""
    from tensorledger.models.transformer import TransformerLM

    counts: dict[str, int] = {}
    module = step.module
    if isinstance(module, torch.nn.parallel.DistributedDataParallel):
        module = module.module  # DDP holds the model whole: its parts are the model's
    named = dict(module.named_parameters())  # tied tensors once
    if step.lora is not None:
        module = module.get_base_model()  # type: ignore[operator]  # peft's wrapper: the model
        named = dict(module.named_parameters())
        adapters = {name: p for name, p in named.items() if ".lora_" in name}
        counts["lora adapters"] = sum(p.numel() for p in adapters.values())
        named = {name: p for name, p in named.items() if name not in adapters}
    if isinstance(module, TransformerLM):
        from tensorledger.models.build import parameter_parts

        for name, part in parameter_parts(module).items():
            if name in named:  # not an adapter
                counts[part] = counts.get(part, 0) + named[name].numel()
    else:
        for name, parameter in named.items():
            pieces = name.split(".")[:-1] or ["(root)"]
            cut = next((i for i, p in enumerate(pieces) if p.isdigit()), len(pieces))
            key = ".".join(pieces[:max(cut, 1)])
            counts[key] = counts.get(key, 0) + parameter.numel()
    return tuple(sorted(counts.items(), key=lambda item: -item[1]))


def saved_tagger(recorder: TaggingRecorder, params: Iterable[torch.Tensor]
                 ) -> Callable[[torch.Tensor], torch.Tensor]:
    """A ``saved_tensors_hooks`` pack hook that tags what autograd saves, but the parameters,
    as saved activations."""
    param_keys = {storage_key(part) for p in params
                  for part in (local(p), *flat_tensors(local(p)))}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        if storage_key(local(tensor)) not in param_keys:
            recorder.tag([tensor], "saved_activation")
        return tensor

    return pack


def gathered_events(recorder: TaggingRecorder, strategy: str) -> AbstractContextManager[None]:
    """Under FSDP (``strategy`` fsdp or hsdp), FSDP's storage events told to ``recorder``, a
    gathered parameter tagged a parameter while it is live (not an activation it saves)."""
    if strategy not in ("fsdp", "hsdp"):
        return nullcontext()
    from tensorledger.workload.parallel import fsdp_storage_events

    return fsdp_storage_events(recorder, lambda t: recorder.tag([t], "parameter"))


def record_step(step: PreparedStep) -> tuple[Trace, dict[int, str]]:
    """Run one step under a tagging recorder."""
    return _record(step)[:2]


def _record(step: PreparedStep) -> tuple[Trace, dict[int, str], TracedCache | None]:
    """:func:`record_step`, and the KV cache a prefill or decode step left: its storages are
    tagged ``kv_cache``, the cache the step starts from registered before its first op."""
    step.cache_before()  # a decode step's cache primed before the recorder starts
    recorder = TaggingRecorder()
    params = step.parameters
    pack = saved_tagger(recorder, params)

    def state() -> list[torch.Tensor]:
        if step.optimizer is None:
            return []
        return [*step.optimizer.master_tensors(), *step.optimizer.state_tensors()]

    # the inputs are cut to this rank's chunks of the sequence before the recorder starts,
    # as a data loader would hand them over
    # --offload params: the shards, their gradients and the optimizer state are the host's,
    # and so is what the optimizer step (run on the CPU) makes
    host = "host_" if step.params_offloaded is not None else ""
    strategy = "fsdp" if host else step.work.layout.strategy  # one device: a 1-rank FSDP2
    with step.sequence_sharded(), recorder, gathered_events(recorder, strategy), \
            step.guard(), step.params_moved(lambda t: recorder.tag([t], "host_gradient")):
        recorder.tag(params, host + "parameter")
        recorder.tag(state(), host + "optimizer_state")
        cached = None
        if step.inference is not None:
            # every weight is in memory for the step, read or not (a prefill's embedding rows)
            recorder.hold(params, "parameter")
            # the primed cache is handed to the step, as a generation loop does: the tensors
            # it replaces are freed where they are
            held = recorder.hold(step.cache_before(), "kv_cache")
            step.forward(own_cache=True)
            recorder.tag(step.inference.tensors(step.inference.cache), "kv_cache")
            cached = step.inference.facts(held)
        elif not step.work.step.backward:
            # every weight is in memory for a forward too, whichever ops read it (FSDP's
            # shards are read by no op of a forward: their gathered copies are)
            recorder.hold(params, host + "parameter")
            step.forward()
        else:
            with step.saved_hooks(pack, lambda t: recorder.tag([t], "host_activation")):
                loss = step.loss()
            loss.backward()  # type: ignore[no-untyped-call]
            recorder.tag(params, host + "parameter")
            recorder.tag((p.grad for p in params), host + "gradient")
            if step.optimizer is not None:
                start = len(recorder.records)
                step.optimizer.step()
                step.after_optimizer_step()
                recorder.tag(params, host + "parameter")
                recorder.tag(state(), host + "optimizer_state")
                if host:
                    recorder.made_by(recorder.records[start:], "host_temporary")
            step.drop_gradients()
    return recorder.trace, recorder.tags, cached


def trace_workload(work: Workload, first_step: bool = False,
                   progress: Callable[[str], None] | None = None) -> StepTrace:
    """Build the workload's module on its device and trace its steady-state step.

    With ``first_step`` the warm-up step is traced as well (its peak is shown beside; not for
    a rank of a layout, whose first step sets the sharding up);
    ``progress`` is told each stage as it starts (the core never prints).  A workload laid out
    over several devices is traced as rank 0 of a fake process group: every rank runs the same
    step on its shards.  Its warm-up step runs whatever the step kind (FSDP's lazy set-up and
    DTensor's sharding cache fill there), except under DDP (ZeRO-1 included), whose second
    step rebuilds its gradient buckets from real memory: its first step is the one traced.

    >>> from tensorledger.workload.spec import resolve_workload
    >>> run = trace_workload(resolve_workload("tiny", batch=1, seq=8, step="forward"))
    >>> dict(run.trace.uncovered), run.tokens
    ({}, 8)
    """
    say = progress or (lambda _: None)
    layout = work.layout
    if layout.pp > 1:
        return _pipeline_rank(work, say)
    notes: list[str] = []
    with laid_out(work, notes) as (target, mesh):
        where = work.device if layout.single else (f"rank 0 of {layout.count} fake ranks "
                                                   f"({layout.describe()})")
        say(f"building {work.model} on {where}")
        step = prepare(work, target, mesh)
        # one entry into context parallelism for the warm-up and traced steps (see
        # context_parallel.sequence_sharded)
        with step.sequence_sharded():
            first: Trace | None = None
            first_tags: dict[int, str] = {}
            sharded = not layout.single or step.params_offloaded is not None
            warm_up = work.step.optimizer or sharded
            if layout.strategy in ("ddp", "zero1"):  # DDP's second step reads real memory
                warm_up = False
                if layout.tp > 1 and work.step.backward:
                    say("filling DTensor's sharding cache (a step DDP does not sync)")
                    step.warm_without_sync()
                if work.step.optimizer:
                    say("creating the optimizer state (an optimizer step on zero gradients)")
                    step.prime_optimizer()
            if warm_up:
                say("running the first step (optimizer state)" if work.step.optimizer else
                    "running a first step (sharding set-up)")
                if first_step and not sharded:  # a rank's first step is the sharding set-up
                    first, first_tags = record_step(step)
                else:
                    step.run()
            on_cuda = torch.device(target).type == "cuda"
            if on_cuda:
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
            say(f"tracing the {work.step.name} step")
            trace, tags, cached = _record(step)
            measured = None
            if on_cuda:
                torch.cuda.synchronize()
                measured = int(torch.cuda.max_memory_allocated())
    frozen, trained = _adapter_tensors(step)
    return StepTrace(work=work, param_numels=tuple(local(p).numel() for p in step.parameters),
                     trace=trace, param_parts=parts_of(step), tags=tags, first_step=first,
                     first_step_tags=first_tags, measured_peak_bytes=measured,
                     model_params=_whole_params(step),
                     trainable_params=None if step.lora is None else
                     sum(p.numel() for p in step.parameters if p.requires_grad),
                     assumptions=tuple(notes) + _adapter_notes(step, trace)
                     + (() if step.float8 is None else (step.float8.describe(),))
                     + _offload_notes(step)
                     + ((work.routing_note,) if work.routing_note else ())
                     + ((RING_NOTE,) if layout.cp > 1 else ()),
                     active_params=_active(step), cache=cached,
                     offloaded_bytes=None if step.offloaded is None else
                     (step.offloaded.to_host_bytes, step.offloaded.to_device_bytes),
                     frozen_tensors=frozen, trained_tensors=trained,
                     params_offloaded_bytes=None if step.params_offloaded is None else
                     (step.params_offloaded.to_device_bytes,
                      step.params_offloaded.to_host_bytes))


def _whole_params(step: PreparedStep) -> int:
    """The whole model's parameters (``expert_parallel.whole_params``: expert-parallel blocks
    hold 1/EP of theirs on a rank; under DDP beside tensor parallelism each parameter is its
    local shard between forwards, its DTensor's spec kept beside it)."""
    from tensorledger.workload.expert_parallel import whole_params

    return whole_params(step.module, step.parameters)


def _adapter_notes(step: PreparedStep, trace: Trace) -> tuple[str, ...]:
    """LoRA's adapters and, over an NF4 base, what dequantising it cost."""
    if step.lora is None:
        return ()
    if step.lora.base is None:
        return (step.lora.describe(),)
    return step.lora.describe(), dequantization_note(trace)


def _adapter_tensors(step: PreparedStep) -> tuple[tuple[tuple[int, int, bool], ...],
                                                   tuple[tuple[int, int], ...]]:
    """With adapters, the frozen and the trained tensors, by size and width."""
    if step.lora is None:
        return (), ()
    frozen = tuple((local(p).numel(), p.element_size(), type(p).__name__ == "NF4Tensor")
                   for p in step.parameters if not p.requires_grad)
    trained = tuple((local(p).numel(), p.element_size())
                    for p in step.parameters if p.requires_grad)
    return frozen, trained


def _offload_notes(step: PreparedStep) -> tuple[str, ...]:
    """What --offload moved, in the step traced."""
    notes: tuple[str, ...] = ()
    shards = step.params_offloaded
    if shards is not None:
        notes = (f"parameters offloaded by FSDP2's CPUOffloadPolicy (shards, gradients and "
                 f"optimizer state in host memory, the optimizer step on the CPU): "
                 f"{shards.to_device_bytes:,} bytes of shards copied to the device before "
                 f"the all-gathers, {shards.to_host_bytes:,} bytes of gradient shards to the "
                 f"host after the reduce-scatters",)
    moved = step.offloaded
    if moved is None:
        return notes
    return (*notes, f"activations offloaded by torch's save_on_cpu (every tensor autograd "
            f"saves, weights included): {moved.to_host_bytes:,} bytes to the host in forward, "
            f"{moved.to_device_bytes:,} back in backward")


def _active(step: PreparedStep) -> int | None:
    """The parameters one token runs through, for a mixture-of-experts config.json."""
    from tensorledger.workload.params import active_params, routing

    routed = routing(step.work.source)
    if routed is None or not step.work.layout.single:
        return None
    named = {name: (local(p).numel(), tuple(local(p).shape))
             for name, p in step.module.named_parameters()}
    return active_params(named, *routed)


def _pipeline_rank(work: Workload, say: Callable[[str], None]) -> StepTrace:
    return trace_pipeline_rank(work, 0, say)


def trace_pipeline_rank(work: Workload, stage: int = 0,
                        progress: Callable[[str], None] | None = None) -> StepTrace:
    """A rank of pipeline stage ``stage`` of ``work``'s layout (the first stage by default: it
    holds the embeddings and feeds the schedule), traced by
    :func:`tensorledger.workload.pipeline.trace_pipeline_step` with the workload's recipe,
    optimizer and checkpointing, each stage laid out over the layout's other degrees."""
    import dataclasses

    from tensorledger.napkin.transformer import parameter_count
    from tensorledger.workload.pipeline import trace_pipeline_step

    config = work.source.config
    assert config is not None  # resolve_workload refuses a pipeline of anything else
    layout = work.layout
    if progress is not None:
        progress(f"tracing a rank of stage {stage} of {layout.describe()} on fake ranks")
    within = dataclasses.replace(layout, pp=1, microbatches=1, schedule="1f1b", chunks=1,
                                 stage_layers=None)
    with target_program(work.target):
        piped = trace_pipeline_step(config, work.batch, work.seq, layout.pp,
                                    layout.microbatches, layout.schedule, stage=stage,
                                    chunks=layout.chunks, within=within,
                                    precision=work.precision.name,
                                    optimizer=work.optimizer.name, checkpoint=work.checkpoint,
                                    optimizer_kernel=work.optimizer_kernel,
                                    stage_layers=layout.stage_counts(config.n_layers,
                                                                     config.name),
                                    routing=work.routing)
    return StepTrace(work=work, param_numels=piped.param_numels, trace=piped.trace,
                     tags=piped.tags, model_params=parameter_count(config).total_params,
                     pipeline=piped.timeline,
                     assumptions=((work.routing_note,) if work.routing_note else ())
                     + ((RING_NOTE,) if layout.cp > 1 else ()))


def trace_model(model: str, **options: object) -> StepTrace:
    """:func:`trace_workload` of :func:`resolve_workload` — the shortest way from a model to
    its trace.

    >>> run = trace_model("tiny", batch=1, seq=8, step="forward", precision="fp32")
    >>> run.work.device, run.trace.flops > 0
    ('meta', True)
    """
    return trace_workload(resolve_workload(model, **options))  # type: ignore[arg-type]
