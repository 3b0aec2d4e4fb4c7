"""The layout search: every way to spread a training step over ``count`` devices, priced in
closed form (:mod:`tensorledger.plan.estimate`), the feasible ones ranked by step time and
each rejected one with the constraint that binds it.

The space, for count N = dp · cp · tp · pp:

- ``tp``: a divisor of N, at most the devices of one node, dividing the query and key/value
  heads, the MLP width and the vocabulary (:func:`tensorledger.napkin.tp_indivisible`);
  sequence parallelism on or off beside it (on needs tp to divide a rank's tokens);
- ``pp``: a divisor of N / tp, at most the layers;
- ``cp``: context parallelism (ring attention, :mod:`tensorledger.napkin.context`), 1 or a
  divisor of N / (tp · pp) that cuts the sequence into 2·cp chunks and leaves a rank at least
  ``MIN_CP_TOKENS`` of them (reference models, flash attention); it shards the parameters
  with the ZeRO group (ZeRO-2 or 3 over shard · cp ranks);
- ``zero`` 0 to 3 and ``shard``, a divisor (> 1; any with cp) of dp that one sharded copy
  spans;
- the batch split: micro-batch × accumulation × dp = the global batch in sequences; with a
  pipeline the accumulation steps are its micro-batches;
- ``schedule``: every one the pricer prices (torch's six with the action-list pricer that
  ``plan`` uses: GPipe, 1F1B, interleaved 1F1B, looped BFS and interleaved zero-bubble with
  2, 3 or 4 chunks a rank, ZBV with 2), refused where torch would refuse it (too few
  micro-batches, rounds that do not divide them);
- ``stage_layers``: the blocks of each of the pp · chunks stages, every cut of
  :func:`tensorledger.plan.pipeline.stage_splits` (even; as even as they go with the lighter
  stages at the ends; the first and last or the last alone k blocks shorter): Llama 3 405B
  ran 126 layers on 16 stages as 7, 8 × 14, 7.  The slowest rank sets the pace, the head's
  FLOPs counted on the last;
- ``checkpoint`` none, full, and selective (with eager attention only; see the estimate).

A configuration is counted as searched once it is fully specified, or once a constraint
rejects the partial layout it belongs to (a tp that divides no heads is one rejection, not one
per micro-batch size): reasons are ``divisibility``, ``global batch`` and ``memory per rank``.

>>> from tensorledger.hardware import get_hardware
>>> from tensorledger.napkin.transformer import get_preset
>>> plan = plan_layouts(get_preset("llama-3-8b"), get_hardware("h100"), 8, seq_len=4096,
...                     global_batch_seqs=64)
>>> plan.searched > plan.feasible > 0, plan.best is plan.ranked[0]
(True, True)
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from tensorledger.errors import InputError
from tensorledger.hardware import Hardware
from tensorledger.napkin.adapters import FULL_FINE_TUNE, LoraShape, step_words
from tensorledger.napkin.headroom import device_headroom
from tensorledger.napkin.parallel import tp_indivisible
from tensorledger.napkin.recipes import resolve_optimizer, resolve_precision
from tensorledger.napkin.transformer import TransformerConfig
from tensorledger.plan.estimate import (
    LayoutChoice,
    LayoutEstimate,
    PlanSetup,
    estimate,
    rank_memory,
    step_time,
)
from tensorledger.plan.experts import ASSUMPTION as EXPERTS_ASSUMPTION
from tensorledger.plan.experts import expert_count, with_experts
from tensorledger.plan.fixed import LARGEST_COUNT, MIN_CP_TOKENS, FixedDims, _check
from tensorledger.plan.pipeline import SchedulePricer, schedule_chunks, stage_splits
from tensorledger.plan.profile import ModelProfile
from tensorledger.plan.traffic import Verified

__all__ = ["LARGEST_COUNT", "MIN_CP_TOKENS", "REASONS", "FixedDims", "LayoutPlan",
           "NoLayoutError", "Rejection",
           "divisors", "pareto_frontier", "plan_layouts", "plan_setup"]

T = TypeVar("T")

#: Reasons a configuration is rejected, in the order they are checked.
REASONS = ("divisibility", "global batch", "memory per rank")
#: Rejections kept per reason (the closest to feasible first for memory); the rest are counted.
KEPT_REJECTIONS = 5

ASSUMPTIONS = (
    "compute at the catalog's dense peak × the matmul efficiency (the chip's published "
    "fraction at each layout's largest matmul, unless --efficiency); MFU counts the model's "
    "FLOPs against the dense peak, HFU the recomputed ones too",
    "activations: the reference model's closed form for the rank's tp/sp split and the recipe "
    "(exact against traced ranks); flash attention stores no s² scores unless --attention "
    "eager (Korthikanti et al.'s 5·a·s²·b/t); under context parallelism napkin's ring rank "
    "at s/cp tokens (exact against traced ranks)",
    "tensor-parallel communication and the context-parallel ring's exchange exposed; "
    "data-parallel overlapped except the last layer's bucket; pipeline send/receive not priced",
    "ranks ordered tp (inside a node), then cp, then dp, then pp; collectives priced by the "
    "ring formulas",
)


def _pipelines(setup: PlanSetup) -> str:
    """How the search priced its pipelines."""
    return (f"pipeline bubble and micro-batches in flight per stage: {setup.schedules.source} "
            f"({', '.join(setup.schedules.names)}; a forward, an input-gradient and a "
            "weight-gradient action the same time); the slowest rank sets the pace: its "
            "blocks, and on the last the head's FLOPs")


def _assumptions(config: TransformerConfig | ModelProfile) -> tuple[str, ...]:
    """The search's assumptions; a measured profile's in place of the closed form's."""
    if not isinstance(config, ModelProfile):
        return ASSUMPTIONS
    measured = (f"parameters, FLOPs, saved activations, the loss's temporaries and "
                f"tensor-parallel bytes: {config.name}'s profile, {config.source}")
    return (ASSUMPTIONS[0], measured, *ASSUMPTIONS[2:], *config.notes)


class NoLayoutError(InputError):
    """No configuration is feasible; the message names the constraint that binds."""


@dataclass(frozen=True)
class Rejection:
    """A configuration (or partial layout) the search refused, and why."""

    choice: LayoutChoice
    reason: str  # one of REASONS
    detail: str
    memory_bytes: float | None = None  # with reason "memory per rank"


@dataclass(frozen=True)
class LayoutPlan:
    """The result of a search: feasible layouts ranked by step time, rejections counted."""

    model: str
    hardware: str
    count: int
    seq_len: int
    global_batch_seqs: int
    global_batch_tokens: int
    precision: str
    optimizer: str
    attention: str
    efficiency: float | None  # given by the caller; None: the chip's expected (per layout)
    peak_flop_per_s: float
    budget_bytes: float
    tokens: float | None
    searched: int
    feasible: int
    rejected_by_reason: dict[str, int]
    ranked: tuple[LayoutEstimate, ...]  # the best ``top``, fastest first
    rejected: tuple[Rejection, ...]  # a few per reason
    assumptions: tuple[str, ...] = field(default=ASSUMPTIONS)
    notes: tuple[str, ...] = ()  # what the caller adds (how a token batch was rounded)
    verified: tuple[Verified, ...] = ()  # the top layouts traced (``plan --verify``)
    max_pp: int | None = None  # the most pipeline stages searched, when the caller capped it
    #: the feasible layouts no other beats on both step time and memory per rank, fastest first
    frontier: tuple[LayoutEstimate, ...] = ()
    reserve: str = ""  # what the device keeps beside the budget, when none was given
    fixed: FixedDims | None = None  # the dimensions the caller fixed; the search filled the rest
    lora: LoraShape | None = None  # the step is a LoRA (QLoRA) fine-tune of these adapters
    # what one step trains, in words: "full fine-tune", "LoRA fine-tune, r=8 on query, value"
    step: str = FULL_FINE_TUNE

    @property
    def best(self) -> LayoutEstimate:
        return self.ranked[0]


@functools.lru_cache(maxsize=4096)
def divisors(n: int) -> tuple[int, ...]:
    """The divisors of ``n`` in increasing order.

    >>> divisors(12)
    (1, 2, 3, 4, 6, 12)
    """
    small, large = [], []
    d = 1
    while d * d <= n:
        if n % d == 0:
            small.append(d)
            if d * d != n:
                large.append(n // d)
        d += 1
    return (*small, *reversed(large))


def _splits_sequence(config: TransformerConfig | ModelProfile) -> bool:
    return not isinstance(config, ModelProfile) or config.sequence_parallel


def _checkpoints(attention: str, fixed: str | None = None,
                 config: TransformerConfig | ModelProfile | None = None) -> tuple[str, ...]:
    searched: tuple[str, ...] = (("none", "selective", "full") if attention == "eager"
                                 else ("none", "full"))
    if isinstance(config, ModelProfile):  # the policies it was traced under
        searched = tuple(c for c in searched if c in config.checkpoints)
    return searched if fixed is None else tuple(c for c in searched if c == fixed)


@dataclass
class _Tally:
    searched: int = 0
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(REASONS, 0))
    kept: dict[str, list[Rejection]] = field(
        default_factory=lambda: {reason: [] for reason in REASONS})

    def reject(self, choice: LayoutChoice, reason: str, detail: str,
               memory_bytes: float | None = None) -> None:
        self.searched += 1
        self.counts[reason] += 1
        kept = self.kept[reason]
        if reason == "memory per rank":
            assert memory_bytes is not None
            if len(kept) < KEPT_REJECTIONS or memory_bytes < (kept[-1].memory_bytes or 0.0):
                kept.append(Rejection(choice, reason, detail, memory_bytes))
                kept.sort(key=lambda r: r.memory_bytes or 0.0)
                del kept[KEPT_REJECTIONS:]
        elif len(kept) < KEPT_REJECTIONS and all(
                _kind(r.detail) != _kind(detail) for r in kept):
            kept.append(Rejection(choice, reason, detail))


def _kind(detail: str) -> str:
    """What a rejection's detail says, numbers aside: one example of each kind is kept."""
    return re.sub(r"[0-9,.]+", "#", detail)


def _degrees(setup: PlanSetup, tally: _Tally, fixed: FixedDims
             ) -> Iterator[tuple[int, int, int, int, bool]]:
    """(dp, cp, tp, pp, sp) layouts that divide the model; the others are tallied as rejected.
    Degrees other than the ``fixed`` ones are left out: neither searched nor rejected."""
    config, count = setup.config, setup.count
    per_node = setup.hardware.devices_per_node or 1
    for tp in divisors(count) if fixed.tp is None else (fixed.tp,):
        if tp > per_node:
            tally.reject(LayoutChoice(dp=1, tp=tp, pp=1), "divisibility",
                         f"tp {tp} spans nodes ({per_node} devices per node)")
            continue
        bad = (config.tp_indivisible(tp) if isinstance(config, ModelProfile)
               else tp_indivisible(config, tp))
        if bad is not None and not bad[1]:
            tally.reject(LayoutChoice(dp=1, tp=tp, pp=1), "divisibility",
                         f"tp {tp}: {config.name} has no tensor-parallel plan")
            continue
        if bad is not None:
            tally.reject(LayoutChoice(dp=1, tp=tp, pp=1), "divisibility",
                         f"tp {tp} does not divide the {bad[1]:,} {bad[0]}")
            continue
        rest = count // tp
        pps: tuple[int, ...] = (((fixed.pp,) if rest % fixed.pp == 0 else ())
                                if fixed.pp is not None else divisors(rest))
        for pp in pps:
            if setup.max_pp is not None and pp > setup.max_pp:
                continue  # left out by the caller: neither searched nor rejected
            if pp > config.n_layers:
                tally.reject(LayoutChoice(dp=rest // pp, tp=tp, pp=pp), "divisibility",
                             f"pp {pp} exceeds the {config.n_layers} layers")
                continue
            for cp in _cps(setup, rest // pp, fixed):
                dp = rest // pp // cp
                if fixed.dp is not None and dp != fixed.dp:
                    continue
                tokens = setup.seq_len // cp
                for sp in (False, True) if tp > 1 and _splits_sequence(config) else (False,):
                    if fixed.sp is not None and sp != fixed.sp:
                        continue
                    if sp and tokens % tp:
                        tally.reject(LayoutChoice(dp=dp, cp=cp, tp=tp, pp=pp, sp=True),
                                     "divisibility", f"sp: tp {tp} does not divide the "
                                     f"{tokens} tokens of a rank's sequence")
                        continue
                    yield dp, cp, tp, pp, sp


def _cps(setup: PlanSetup, ranks: int, fixed: FixedDims) -> tuple[int, ...]:
    """Context-parallel degrees of ``ranks`` data-parallel ranks: the fixed one, else 1 and
    each that cuts the sequence into 2·cp chunks of a reference model under flash attention,
    leaving a rank at least ``MIN_CP_TOKENS`` tokens."""
    if fixed.cp is not None:
        return (fixed.cp,) if ranks % fixed.cp == 0 else ()
    if isinstance(setup.config, ModelProfile) or setup.attention != "flash" or setup.lora:
        return (1,)
    s = setup.seq_len
    return tuple(c for c in divisors(ranks)
                 if c == 1 or (s % (2 * c) == 0 and s // c >= MIN_CP_TOKENS))


def _shardings(dp: int, fixed: FixedDims, cp: int = 1) -> Iterator[tuple[int, int]]:
    """(zero, shard) of ``dp`` data-parallel ranks: plain data parallelism, then each ZeRO
    stage over each shard group; those the ``fixed`` stage or group leave out are skipped.
    With context parallelism the parameters are sharded over the group and the cp ranks
    (FSDP: ZeRO-2 or 3, a group of 1 sharding over the cp ranks alone)."""
    if cp > 1:
        shards = divisors(dp) if fixed.shard is None else (
            (fixed.shard,) if dp % fixed.shard == 0 else ())
        for shard in shards:
            for zero in (2, 3) if fixed.zero is None else (
                    (fixed.zero,) if fixed.zero >= 2 else ()):
                yield zero, shard
        return
    if fixed.zero in (None, 0) and fixed.shard in (None, 1):
        yield 0, 1
    if fixed.zero == 0:
        return
    shards = divisors(dp)[1:] if fixed.shard is None else (
        (fixed.shard,) if fixed.shard > 1 and dp % fixed.shard == 0 else ())
    for shard in shards:
        for zero in (1, 2, 3) if fixed.zero is None else (fixed.zero,):
            yield zero, shard


def _schedules(setup: PlanSetup, pp: int, fixed: FixedDims, tally: _Tally,
               point: LayoutChoice) -> Iterator[tuple[str, int, tuple[int, ...]]]:
    """(schedule, chunks, stage layers) of a pipeline of ``pp`` ranks: every schedule the
    pricer prices, its chunks, and the stage cuts of the blocks
    (:func:`tensorledger.plan.pipeline.stage_splits`); the fixed ones alone."""
    if pp == 1:
        if fixed.schedule is None and fixed.chunks is None:  # a fixed schedule: a pipeline
            yield "none", 1, ()
        return
    layers = setup.config.n_layers
    for schedule in setup.schedules.names:
        if fixed.schedule not in (None, schedule):
            continue
        for v in schedule_chunks(schedule, fixed.stage_chunks):
            if pp * v > layers:
                tally.reject(dataclasses.replace(point, schedule=schedule, chunks=v),
                             "divisibility", f"{schedule} × {v}: {pp * v} stages for "
                             f"{layers} layers")
                continue
            cuts = ((fixed.stage_layers,) if fixed.stage_layers is not None
                    else stage_splits(layers, pp * v))
            for cut in cuts:
                yield schedule, v, cut


def plan_setup(config: TransformerConfig | ModelProfile, hardware: Hardware, count: int, *,
               seq_len: int,
               global_batch_seqs: int, precision: str = "bf16-master", optimizer: str = "adamw",
               budget_bytes: float | None = None, efficiency: float | None = None,
               attention: str = "flash", max_pp: int | None = None,
               schedules: SchedulePricer | None = None,
               lora: LoraShape | None = None) -> PlanSetup:
    """What a search of ``count`` devices shares, its options checked (one line each): the
    one :func:`plan_layouts` searches, and that a traced check of its layouts prices.
    ``schedules`` prices the pipeline schedules (default: GPipe and 1F1B in closed form;
    :class:`tensorledger.ledger.schedules.ActionListPricer` replays torch's for all);
    ``lora`` prices a LoRA (QLoRA) fine-tune of a preset instead of a full one."""
    _check("count", count, LARGEST_COUNT)
    _check("seq_len", seq_len, config.context_length)
    if isinstance(config, ModelProfile) and (config.seq_len, config.precision) != (
            seq_len, resolve_precision(precision).name):
        raise InputError(f"{config.name}'s profile was measured at seq {config.seq_len:,} "
                         f"under {config.precision}; measure it at seq {seq_len:,} under "
                         f"{precision} to plan those")
    _check("global batch (sequences)", global_batch_seqs, 1 << 32)
    budget = device_headroom(count).largest_peak(hardware.memory_bytes) if budget_bytes is None \
        else budget_bytes
    if not 0 < budget <= hardware.memory_bytes:
        raise InputError(f"the memory budget must be above 0 and at most {hardware.id}'s "
                         f"{hardware.memory_bytes / 1e9:g} GB, got {budget / 1e9:g} GB")
    return PlanSetup(config=config, hardware=hardware, count=count, seq_len=seq_len,
                     global_batch_seqs=global_batch_seqs,
                     precision=resolve_precision(precision),
                     optimizer=resolve_optimizer(optimizer), budget_bytes=budget,
                     efficiency=efficiency, attention=attention, max_pp=max_pp,
                     schedules=SchedulePricer() if schedules is None else schedules,
                     lora=lora)


def plan_layouts(config: TransformerConfig | ModelProfile, hardware: Hardware, count: int, *,
                 seq_len: int,
                 global_batch_seqs: int, precision: str = "bf16-master",
                 optimizer: str = "adamw", budget_bytes: float | None = None,
                 efficiency: float | None = None, attention: str = "flash",
                 tokens: float | None = None,
                 top: int = 10, max_pp: int | None = None,
                 fixed: FixedDims | None = None,
                 schedules: SchedulePricer | None = None,
                 lora: LoraShape | None = None) -> LayoutPlan:
    """Search every layout of ``count`` devices; raise :class:`NoLayoutError` when none fits.

    ``global_batch_seqs`` sequences of ``seq_len`` tokens make one optimizer step;
    ``budget_bytes`` caps the memory of one rank (default: the device's less the reserve it
    keeps, ``napkin.headroom``: the CUDA context, NCCL's buffers, fragmentation); ``tokens`` adds
    days of training to each ranked layout; ``max_pp`` leaves out layouts of more pipeline
    stages (1: no pipeline); ``fixed`` keeps the search to layouts with those dimensions (all
    of them fixed: one layout evaluated), refusing in one line dimensions no layout can have;
    ``lora`` plans a LoRA or QLoRA fine-tune (adapters trained on a frozen base; no context
    parallelism searched).
    """
    _check("top", top, 10_000)
    if tokens is not None and not tokens > 0:
        raise InputError(f"tokens must be a positive number, got {tokens!r}")
    setup = plan_setup(config, hardware, count, seq_len=seq_len,
                       global_batch_seqs=global_batch_seqs, precision=precision,
                       optimizer=optimizer, budget_bytes=budget_bytes, efficiency=efficiency,
                       attention=attention, max_pp=max_pp, schedules=schedules, lora=lora)
    fix = fixed if fixed is not None and fixed.given else FixedDims()
    fix.check(setup)
    budget = setup.budget_bytes
    tally = _Tally()
    feasible: list[tuple[float, float, LayoutChoice]] = []
    closest_batch = None
    for dp, cp, tp, pp, sp in _degrees(setup, tally, fix):
        degrees = LayoutChoice(dp=dp, cp=cp, tp=tp, pp=pp, sp=sp)
        if global_batch_seqs % dp:
            why = ("smaller than" if global_batch_seqs < dp else "not a multiple of")
            tally.reject(degrees, "global batch",
                         f"{_sequences(global_batch_seqs)} is {why} the data-parallel "
                         f"degree {dp:,}")
            closest_batch = dp if closest_batch is None else min(closest_batch, dp)
            continue
        per_rank = global_batch_seqs // dp
        micros = divisors(per_rank)
        if fix.accumulation is not None:
            if per_rank % fix.accumulation:
                tally.reject(degrees, "global batch",
                             f"{_sequences(per_rank)} a data-parallel rank (DP {dp:,}) do not "
                             f"split into {fix.accumulation:,} micro-batches")
                continue
            micros = (per_rank // fix.accumulation,)
        shardings = tuple(with_experts(setup, _shardings(dp, fix, cp), dp, cp, sp, fix.ep))
        if not shardings:
            tally.reject(degrees, "divisibility",
                         f"DP {dp:,} leaves no shard group" + (
                             f" of {fix.shard:,}" if fix.shard else " above 1 rank") + (
                             f" for ZeRO-{fix.zero}" if fix.zero is not None else ""))
        pipelines = tuple(_schedules(setup, pp, fix, tally, degrees))
        for zero, shard, ep in shardings:
            for schedule, v, cut in pipelines:
                for checkpoint in _checkpoints(attention, fix.checkpoint, config):
                    # memory grows with the micro-batch (b · min(p, m) = min(p·b, B) in
                    # flight): past the first that does not fit, none does
                    past = None
                    for micro in micros:
                        m = per_rank // micro
                        point = LayoutChoice(dp=dp, tp=tp, pp=pp, zero=zero, shard=shard,
                                             sp=sp, micro_batch=micro, accumulation=m,
                                             schedule=schedule, chunks=v,
                                             checkpoint=checkpoint, cp=cp, stage_layers=cut,
                                             ep=ep)
                        if past is not None:  # before the schedule is priced: no replay
                            tally.reject(point, "memory per rank", f"more than {past}",
                                         math.inf)
                            continue
                        if pp > 1 and not setup.schedules.known(schedule, pp, m, v):
                            # a lower bound first: spare torch's lists of a layout that
                            # cannot fit with one micro-batch in flight a stage
                            least = rank_memory(setup, point, floor=True).total_bytes
                            if least > budget:
                                tally.reject(point, "memory per rank", f"at least "
                                             f"{least / 1e9:.2f} GB > {budget / 1e9:g} GB",
                                             least)
                                past = f"{least / 1e9:.1f} GB (micro-batch {micro})"
                                continue
                        if pp > 1:
                            figures = setup.schedules.figures(schedule, pp, m, v)
                            if isinstance(figures, str):
                                tally.reject(point, "divisibility", figures)
                                continue
                        memory = rank_memory(setup, point)
                        if memory.total_bytes > budget:
                            tally.reject(point, "memory per rank",
                                         f"{memory.total_bytes / 1e9:.2f} GB > "
                                         f"{budget / 1e9:g} GB", memory.total_bytes)
                            past = f"{memory.total_bytes / 1e9:.1f} GB (micro-batch {micro})"
                            continue
                        tally.searched += 1
                        time = step_time(setup, point, memory)
                        feasible.append((time.step_s, memory.total_bytes, point))
    if not feasible:
        raise NoLayoutError(_why_none(setup, tally, closest_batch, fixed=fix))
    feasible.sort(key=lambda item: (item[0], item[1]))  # fastest, then the least memory
    ranked = tuple(estimate(setup, choice, tokens) for _, _, choice in feasible[:top])
    frontier = tuple(estimate(setup, choice, tokens) for choice in pareto_frontier(feasible))
    rejected = tuple(r for reason in REASONS for r in tally.kept[reason])
    return LayoutPlan(model=config.name, hardware=hardware.id, count=count, seq_len=seq_len,
                      global_batch_seqs=global_batch_seqs,
                      global_batch_tokens=setup.tokens_per_step,
                      precision=setup.precision.name, optimizer=setup.optimizer.name,
                      attention=attention, efficiency=efficiency,
                      peak_flop_per_s=hardware.peak_flop_per_s(setup.dtype),
                      budget_bytes=budget, tokens=tokens, searched=tally.searched,
                      feasible=len(feasible), rejected_by_reason=dict(tally.counts),
                      ranked=ranked, rejected=rejected, max_pp=max_pp, frontier=frontier,
                      reserve="" if budget_bytes is not None else
                      device_headroom(count).describe(),
                      fixed=fix if fix.given else None,
                      assumptions=(*_assumptions(config), _pipelines(setup),
                                   *_fine_tune(lora),
                                   *((EXPERTS_ASSUMPTION,) if expert_count(config) else ())),
                      lora=lora,
                      step=step_words(lora))


def _fine_tune(lora: LoraShape | None) -> tuple[str, ...]:
    """The assumption a LoRA plan rests on, in one line."""
    if lora is None:
        return ()
    base = ("its linears (but the head) in 4-bit NF4 with block scales, dequantised at each "
            "use" if lora.nf4 else "in its stored dtype")
    return (f"{lora.describe()}: the base frozen, {base}; fp32 adapters alone get gradients "
            "and optimizer state (reduced over data parallelism), split over TP as their "
            "linears; no frozen weight's gradient (base 4·N FLOPs a token, adapters 6·n); "
            "no context parallelism searched",)


def pareto_frontier(points: Sequence[tuple[float, float, T]]) -> list[T]:
    """The points no other beats on both step time and memory: walking from the fastest, each
    that needs less memory than every faster one (``points`` sorted by time, then memory).

    >>> pareto_frontier([(1.0, 9.0, "a"), (1.0, 9.5, "b"), (2.0, 5.0, "c"), (3.0, 6.0, "d"),
    ...                  (4.0, 1.0, "e")])
    ['a', 'c', 'e']
    """
    kept: list[T] = []
    least = math.inf
    for _, memory, item in points:
        if memory < least:
            kept.append(item)
            least = memory
    return kept


def _sequences(n: int) -> str:
    return f"{n:,} sequence{'' if n == 1 else 's'}"


def _why_none(setup: PlanSetup, tally: _Tally, closest_batch: int | None,
              fixed: FixedDims | None = None) -> str:
    """One line naming the constraint that binds, the furthest one the search got to."""
    where = f"{setup.config.name} on {setup.count:,} × {setup.hardware.id}"
    if fixed is not None and fixed.given:
        return _why_none_fixed(setup, tally, fixed, where)
    memory = tally.kept["memory per rank"]
    if memory:
        least = memory[0]
        return (f"{where} fits in no layout: memory per rank binds, the least is "
                f"{(least.memory_bytes or 0.0) / 1e9:.1f} GB ({least.choice.describe()}, "
                f"checkpoint {least.choice.checkpoint}) against a budget of "
                f"{setup.budget_bytes / 1e9:g} GB; use more devices, a smaller model or "
                "shorter sequences")
    if closest_batch is not None:
        gb = setup.global_batch_seqs
        why = ("is smaller than" if gb < closest_batch else "is not a multiple of")
        return (f"{where}: the global batch binds, {_sequences(gb)} {why} the smallest "
                f"data-parallel degree the layouts leave, {closest_batch:,}; use a global "
                f"batch that is a multiple of {closest_batch:,} sequences, or fewer devices")
    first = tally.kept["divisibility"]
    detail = first[0].detail if first else "no layout"
    return (f"{where}: divisibility binds, no layout divides the model ({detail}); use a "
            "device count with divisors the model's heads and layers accept")


def _why_none_fixed(setup: PlanSetup, tally: _Tally, fixed: FixedDims, where: str) -> str:
    """One line for a search the caller narrowed: the fixed layout's memory against the budget
    when that binds, else the first rejection of the furthest reason reached."""
    mine = f"{where} with {fixed.describe()} (fixed by you)"
    memory = tally.kept["memory per rank"]
    if memory:
        least = memory[0]
        return (f"{mine} does not fit: memory per rank {(least.memory_bytes or 0.0) / 1e9:.1f}"
                f" GB ({least.choice.describe()}, micro-batch {least.choice.micro_batch} × "
                f"{least.choice.accumulation}, checkpoint {least.choice.checkpoint}) against a "
                f"budget of {setup.budget_bytes / 1e9:g} GB; fix fewer dimensions or ones "
                "that shard more")
    for reason in ("global batch", "divisibility"):
        kept = tally.kept[reason]
        if kept:
            return f"{mine}: {reason} binds, {kept[0].detail}; fix fewer dimensions or others"
    return f"{mine}: no layout has these dimensions; fix fewer of them or others"
