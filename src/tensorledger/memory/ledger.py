"""The memory ledger of one training step: state, activations, peak, and whether it fits.

A pure function of a traced step (its records and storage tags, see :mod:`.timeline`): the
per-parameter state at the end of the step, the saved activations at their high point, and
the peak with its op and phase — of the steady-state step, when the optimizer state already
exists, with the first step's peak beside it.  Beside them sit the closed forms they are
checked against — napkin's recipe bytes and activation memory — and whether the peak fits a
chip beside the reserve the device keeps (``napkin.headroom``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tensorledger.display import view
from tensorledger.errors import InputError
from tensorledger.hardware import Hardware
from tensorledger.memory.host import host_category_peaks, phase_work
from tensorledger.memory.timeline import MEMORY_CATEGORIES, MemoryTimeline, build_timeline
from tensorledger.napkin.activations import ActivationMemory, activation_memory
from tensorledger.napkin.adapters import adapter_recipe, frozen_bytes
from tensorledger.napkin.context import context_parallel_rank
from tensorledger.napkin.headroom import device_headroom
from tensorledger.napkin.recipes import Optimizer, Precision, RecipeBytes, recipe_bytes
from tensorledger.napkin.transformer import TransformerConfig
from tensorledger.summary import show_bytes, summary
from tensorledger.trace.records import Trace

__all__ = ["Fit", "KvCacheFacts", "MemoryLedger", "MemoryPart", "Offload", "ParamOffload",
           "StepFacts", "memory_ledger"]


@dataclass(frozen=True)
class Fit:
    """Whether the step's peak fits on ``count`` devices of ``hardware``, beside the reserve
    the device keeps (``napkin.headroom``), or within a ``--budget`` given in its place."""

    hardware: str
    count: int
    device_memory_bytes: float
    # Data parallel: every device holds a whole replica and its peak.
    replica_peak_bytes: int
    fits_replicated: bool
    # Fully sharded (ZeRO-3): parameters, gradients and optimizer state split over devices,
    # activations and temporaries not.
    sharded_peak_bytes: int
    fits_sharded: bool
    # what the device keeps beside the replica's peak (0 under a budget), and what it is
    reserve_bytes: float = 0.0
    reserve: str = ""
    budget_bytes: float | None = None  # the usable bytes a user gave in place of the reserve

    @property
    def usable_bytes(self) -> float:
        """What the replica's peak is held against: the budget given, else the device's memory
        less the reserve it keeps beside that peak."""
        if self.budget_bytes is not None:
            return self.budget_bytes
        return self.device_memory_bytes - self.reserve_bytes

    @property
    def margin_bytes(self) -> float:
        """Usable bytes left beside the replica's peak (negative: by how much it is over)."""
        return self.usable_bytes - self.replica_peak_bytes


@dataclass(frozen=True)
class StepFacts:
    """What the ledger needs to know of the step besides its trace (all plain values)."""

    model: str
    step: str  # forward, forward-backward or train
    batch: int
    seq_len: int
    precision: Precision
    optimizer: Optimizer
    device: str
    checkpointed: bool
    param_numels: Sequence[int]  # one entry per parameter tensor, tied ones once
    config: TransformerConfig | None  # the reference Transformer's, for the closed forms
    ranks: int = 1  # devices of the layout the step is one rank of (its tensors are shards)
    layout: str = ""  # that layout, in words ("FSDP ZeRO-3 × 8 · TP × 8")
    tensor_parallel: int = 1  # a tensor-parallel rank saves its split of the activations
    sequence_parallel: bool = False  # ... and its share of the sequence around the norms
    context_parallel: int = 1  # a context-parallel rank saves its 1/cp of the sequence's
    pipeline_stages: int = 1  # a pipeline rank saves its stage's, for its micro-batches
    adapters: bool = False  # LoRA/QLoRA: a frozen base (its stored dtype, or NF4) and adapters
    offloaded_bytes: tuple[int, int] | None = None  # activations to the host and back
    # --offload params: FSDP2's shard copies to the device and gradient shards to the host
    params_offloaded_bytes: tuple[int, int] | None = None
    frozen_tensors: Sequence[tuple[int, int, bool]] = ()  # adapters' base: (n, width, NF4)
    trained_tensors: Sequence[tuple[int, int]] = ()  # the adapters: (n, width)
    routing: str = ""  # a mixture of experts: the tokens each routed expert receives
    kv_cache: KvCacheFacts | None = None  # prefill and decode: the cache the step left

    def __repr__(self) -> str:  # pragma: no mutate block (presentation: the summary line)
        return summary("StepFacts", f"{self.model} {self.step}",
                       f"batch {self.batch} × seq {self.seq_len}", self.precision.name,
                       self.optimizer.name, f"{len(self.param_numels)} parameter tensors")


@dataclass(frozen=True)
class KvCacheFacts:
    """The KV cache a prefill or decode step left, as traced, and napkin's closed form of it."""

    cache_class: str  # DynamicCache (transformers), KVCache (the reference model's)
    layers: str  # its layers by kind, in words
    dtype: str
    context: int  # tokens a sequence before the step (0: prefill)
    tokens_after: int  # tokens a sequence after it
    bytes_before: int  # the storages the step started from
    storage_bytes: int  # the storages it left: what memory holds
    tensor_bytes: int  # what the cache's tensors show (a view may keep a larger storage)
    closed_form_bytes: int | None  # napkin.kvcache's for batch × tokens_after; None: no layout

    @property
    def closed_form_gap_bytes(self) -> int | None:
        """The traced storages less napkin's closed form (None without one)."""
        return None if self.closed_form_bytes is None else (
            self.storage_bytes - self.closed_form_bytes)

    def __repr__(self) -> str:  # pragma: no mutate block (presentation: the summary line)
        return summary("KvCacheFacts", f"{self.cache_class} ({self.layers})",
                       f"{self.context} → {self.tokens_after} tokens",
                       f"{show_bytes(self.storage_bytes)} {self.dtype}")


@dataclass(frozen=True)
class MemoryPart:
    """One row of the memory breakdown: the traced figure and the closed form beside it."""

    category: str  # parameter, gradient, optimizer_state or saved_activation
    measured_bytes: int  # from the traced step (saved activations: their high point)
    closed_form_bytes: int | None  # napkin's; None where there is none (autocast activations)


@dataclass(frozen=True)
class Offload:
    """Activations moved to the host and back, priced on the chip's host link (per
    direction; None where the chip states none)."""

    to_host_bytes: int  # in forward, device to host
    to_device_bytes: int  # in backward, host to device
    host_link_bytes_per_s: float | None
    host_link: str  # "PCIe 5.0 x16 of h100-sxm", or why there is no figure

    @property
    def to_host_s(self) -> float | None:
        link = self.host_link_bytes_per_s
        return None if link is None else self.to_host_bytes / link

    @property
    def to_device_s(self) -> float | None:
        link = self.host_link_bytes_per_s
        return None if link is None else self.to_device_bytes / link


@dataclass(frozen=True)
class ParamOffload:
    """FSDP2's ``CPUOffloadPolicy`` (``--offload params``): the rank's state in host memory,
    the copies each step makes over the chip's host link (per direction; None where the
    chip states none), and the optimizer step run on the host's CPU, not the device."""

    to_device_bytes: int  # parameter shards copied to the device before the all-gathers
    to_host_bytes: int  # gradient shards copied to the host after the reduce-scatters
    host_link_bytes_per_s: float | None
    host_link: str  # "PCIe 5.0 x16 of h100-sxm", or why there is no figure
    host_parameter_bytes: int  # each host category's most live at once
    host_gradient_bytes: int
    host_optimizer_state_bytes: int  # the master copy of bf16-master included
    host_temporary_bytes: int  # what the optimizer step makes on the host
    optimizer_ops: int  # the optimizer step's ops: host work, priced on no device
    optimizer_flops: int
    optimizer_bytes: int  # read and written

    @property
    def to_device_s(self) -> float | None:
        link = self.host_link_bytes_per_s
        return None if link is None else self.to_device_bytes / link

    @property
    def to_host_s(self) -> float | None:
        link = self.host_link_bytes_per_s
        return None if link is None else self.to_host_bytes / link


@dataclass(frozen=True)
class MemoryLedger:
    """Everything ``tensorledger memory`` reports about one step."""

    model: str
    step: str
    batch: int
    seq_len: int
    optimizer: str
    precision: str
    device: str
    checkpointed: bool
    params_bytes: int
    grads_bytes: int
    optimizer_state_bytes: int  # the master copy of bf16-master included
    saved_activation_bytes: int  # the high point
    peak_bytes: int  # of the steady-state step (optimizer state already live)
    peak_op: str
    peak_phase: str
    peak_module: str
    first_step_peak_bytes: int | None  # the very first step's, when traced
    recipe: RecipeBytes  # napkin's prediction of the state
    activations_closed_form: ActivationMemory | None  # reference models without autocast
    timeline: MemoryTimeline
    fit: Fit | None
    ranks: int = 1  # the step is one rank of a layout of this many devices: figures per rank
    layout: str = ""
    kv_cache_bytes: int = 0  # live at the end of the step (prefill and decode)
    kv_cache: KvCacheFacts | None = None
    routing: str = ""  # a mixture of experts: the routing the step assumed ('' without)
    adapters: bool = False  # the recipe's closed form (every parameter trained) does not apply
    # with adapters: the frozen base's bytes and the adapters' recipe (napkin.adapters); None
    # where no closed form is set beside
    adapter_closed_form: tuple[int, RecipeBytes] | None = None
    offload: Offload | None = None  # --offload activations: the host's share and its link
    # --offload params: the state on the host (then what params_bytes, grads_bytes and
    # optimizer_state_bytes count), the copies each way, the optimizer step's host work
    param_offload: ParamOffload | None = None

    @property
    def host_peak_bytes(self) -> int:
        """The most host memory live at once: the offloaded activations, and with
        ``--offload params`` the state and the optimizer step's temporaries."""
        return self.timeline.host_peak_bytes

    def parts(self) -> tuple[MemoryPart, ...]:
        """The breakdown ``tensorledger memory`` tabulates: state and saved activations,
        measured beside the closed form (the optimizer state includes a master copy).  With
        adapters the state's closed form is napkin.adapters' (the frozen base in its stored
        dtype or NF4, the adapters trained), and the activations have none here (a frozen
        linear saves no input for its weight's gradient)."""
        recipe, closed = self.recipe, self.activations_closed_form
        if self.kv_cache is not None:  # inference: no gradients, no optimizer, nothing saved
            return (MemoryPart("parameter", self.params_bytes, recipe.params_bytes),
                    MemoryPart("kv_cache", self.kv_cache_bytes,
                               self.kv_cache.closed_form_bytes))
        state = not self.adapters
        params: int | None = recipe.params_bytes
        grads: int | None = recipe.grads_bytes
        optimizer: int | None = recipe.optimizer_bytes + recipe.master_bytes
        if self.adapters:
            params = grads = optimizer = None
            if self.adapter_closed_form is not None:
                frozen, adapters = self.adapter_closed_form
                params = frozen + adapters.params_bytes
                grads = adapters.grads_bytes
                optimizer = adapters.optimizer_bytes + adapters.master_bytes
        if self.step == "forward":  # no gradients, no optimizer, nothing saved
            return (MemoryPart("parameter", self.params_bytes, params),)
        if self.step == "forward-backward":  # no optimizer step
            return (MemoryPart("parameter", self.params_bytes, params),
                    MemoryPart("gradient", self.grads_bytes, grads),
                    MemoryPart("saved_activation", self.saved_activation_bytes,
                               None if closed is None or not state or self.offload is not None
                               else closed.total_bytes))
        return (MemoryPart("parameter", self.params_bytes, params),
                MemoryPart("gradient", self.grads_bytes, grads),
                MemoryPart("optimizer_state", self.optimizer_state_bytes, optimizer),
                MemoryPart("saved_activation", self.saved_activation_bytes,
                           None if closed is None or not state or self.offload is not None
                           else closed.total_bytes))

    def by_category(self) -> dict[str, int]:
        """Live bytes by category at the peak (parameter, gradient, optimizer_state,
        saved_activation, temporary); they add up to :attr:`peak_bytes`."""
        return self.timeline.peak.by_category()

    def __repr__(self) -> str:  # pragma: no mutate block (presentation: the summary line)
        live = self.by_category()
        return summary("MemoryLedger", f"{self.model} {self.step}",
                       f"peak {show_bytes(self.peak_bytes)} after {self.peak_op} "
                       f"({self.peak_phase})",
                       *(f"{c} {show_bytes(live[c])}" for c in MEMORY_CATEGORIES if live[c]))

    def __rich__(self) -> object:  # pragma: no mutate block (presentation: rich tables)
        return view("rich", self)

    def _repr_html_(self) -> str:  # pragma: no mutate block (presentation: HTML tables, plot)
        return str(view("html", self))


def _fit(timeline: MemoryTimeline, chip: Hardware, count: int, ranks: int,
         budget_bytes: float | None) -> Fit:
    peak = timeline.peak
    state = peak.parameter_bytes + peak.gradient_bytes + peak.optimizer_state_bytes
    sharded = peak.total_bytes - state + -(-state // count)
    if budget_bytes is not None:
        return Fit(hardware=chip.name, count=count, device_memory_bytes=chip.memory_bytes,
                   replica_peak_bytes=peak.total_bytes,
                   fits_replicated=peak.total_bytes <= budget_bytes,
                   sharded_peak_bytes=sharded, fits_sharded=sharded <= budget_bytes,
                   budget_bytes=budget_bytes)
    headroom = device_headroom(max(ranks, count))
    usable = headroom.largest_peak(chip.memory_bytes)
    return Fit(hardware=chip.name, count=count, device_memory_bytes=chip.memory_bytes,
               replica_peak_bytes=peak.total_bytes,
               fits_replicated=peak.total_bytes <= usable,
               sharded_peak_bytes=sharded, fits_sharded=sharded <= usable,
               reserve_bytes=headroom.reserve_bytes(peak.total_bytes),
               reserve=headroom.describe())


def memory_ledger(trace: Trace, tags: Mapping[int, str], facts: StepFacts, *,
                  hardware: Hardware | None = None, count: int = 1,
                  first_step: tuple[Trace, Mapping[int, str]] | None = None,
                  measured_peak_bytes: int | None = None,
                  budget_bytes: float | None = None) -> MemoryLedger:
    """Account the memory of a traced step (a pure function: nothing runs here).  Whether it
    fits ``hardware`` counts the device's reserve (``napkin.headroom``) unless
    ``budget_bytes`` gives the usable bytes in its place."""
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise InputError(f"count must be a whole number >= 1, got {count!r}")
    timeline = dataclasses.replace(build_timeline(trace, tags),
                                   measured_peak_bytes=measured_peak_bytes)
    end = timeline.points[-1] if timeline.points else timeline.start
    saved = max((p.saved_activation_bytes for p in timeline.points), default=0)
    grads = max((p.gradient_bytes for p in timeline.points), default=0)
    recipe = recipe_bytes(facts.precision, facts.optimizer, list(facts.param_numels))
    closed = None
    # a data-parallel rank saves what one device saves for its batch, a tensor-parallel one
    # its split (the closed form follows it); a pipeline stage's is not described
    # (none for fp8 recipes: torchao's linears save no bf16 weight copy, the form's autocast
    # case does)
    # (none for a mixture of experts or latent attention: napkin's form is the dense block's)
    dense = facts.config is not None and facts.config.moe is None and facts.config.mla is None
    if dense and facts.config is not None and facts.pipeline_stages == 1 and \
            not facts.precision.float8:
        autocast = facts.precision.autocast  # fp32 weights, bf16 compute
        width = 4 if facts.precision.param_bytes == 4 and not autocast else 2
        if facts.context_parallel > 1:  # its share, and what torch's ring adds
            ring = context_parallel_rank(facts.config, facts.batch, facts.seq_len,
                                         facts.context_parallel, width,
                                         tp=facts.tensor_parallel, autocast=autocast,
                                         checkpointed=facts.checkpointed,
                                         sequence_parallel=facts.sequence_parallel)
            closed = dataclasses.replace(ring.activations,
                                         total_bytes=ring.saved_activation_bytes)
        else:
            closed = activation_memory(facts.config, facts.batch, facts.seq_len, width,
                                       facts.checkpointed, tp=facts.tensor_parallel,
                                       sequence_parallel=facts.sequence_parallel,
                                       autocast=autocast)
    first_peak = None
    if first_step is not None:
        first_peak = build_timeline(*first_step).peak.total_bytes
    peak = timeline.peak
    adapter_closed = None
    if facts.adapters and facts.trained_tensors:
        widths = {width for _, width in facts.trained_tensors}
        trained = None if len(widths) != 1 else adapter_recipe(
            facts.precision, facts.optimizer, [n for n, _ in facts.trained_tensors],
            widths.pop())
        if trained is not None:
            adapter_closed = (frozen_bytes(facts.frozen_tensors), trained)
    offload = None
    link = None if hardware is None else hardware.host_link_bytes_per_s
    host_link = ("no chip named" if hardware is None else
                 f"{hardware.host_link_kind} of {hardware.id}" if link is not None
                 else f"{hardware.id} states no host link")
    if facts.offloaded_bytes is not None:
        offload = Offload(*facts.offloaded_bytes, host_link_bytes_per_s=link,
                          host_link=host_link)
    params_bytes, state_bytes = end.parameter_bytes, end.optimizer_state_bytes
    param_offload = None
    if facts.params_offloaded_bytes is not None:
        host = host_category_peaks(trace, tags)
        ops, flops, moved = phase_work(trace, "optimizer")
        param_offload = ParamOffload(
            *facts.params_offloaded_bytes, host_link_bytes_per_s=link, host_link=host_link,
            host_parameter_bytes=host["host_parameter"],
            host_gradient_bytes=host["host_gradient"],
            host_optimizer_state_bytes=host["host_optimizer_state"],
            host_temporary_bytes=host["host_temporary"], optimizer_ops=ops,
            optimizer_flops=flops, optimizer_bytes=moved)
        # the state is the host's: the breakdown counts it there, the device's peak without it
        params_bytes, grads = host["host_parameter"], host["host_gradient"]
        state_bytes = host["host_optimizer_state"]
    return MemoryLedger(model=facts.model, step=facts.step, batch=facts.batch,
                        seq_len=facts.seq_len,
                        optimizer=recipe.optimizer, precision=recipe.precision,
                        device=facts.device, checkpointed=facts.checkpointed,
                        params_bytes=params_bytes, grads_bytes=grads,
                        optimizer_state_bytes=state_bytes,
                        saved_activation_bytes=saved, peak_bytes=peak.total_bytes,
                        peak_op=peak.op, peak_phase=peak.phase, peak_module=peak.module,
                        first_step_peak_bytes=first_peak, recipe=recipe,
                        activations_closed_form=closed, timeline=timeline,
                        fit=None if hardware is None else _fit(timeline, hardware, count,
                                                               facts.ranks, budget_bytes),
                        ranks=facts.ranks, layout=facts.layout, adapters=facts.adapters,
                        offload=offload, adapter_closed_form=adapter_closed,
                        param_offload=param_offload,
                        routing=facts.routing,

                        kv_cache_bytes=end.kv_cache_bytes, kv_cache=facts.kv_cache)
