"""Gradient accumulation: split a global batch into micro-batches that fit a memory budget.

For ``count`` data-parallel ranks (ZeRO stage ``zero`` over all of them, no tensor or
pipeline parallelism) every split micro-batch × accumulation × count = the global batch (in
sequences) is priced by :mod:`tensorledger.plan.estimate`: the activations of one micro-batch,
the memory per rank, and the step time from the roofline of one micro-batch.  Smaller
micro-batches hold fewer activations but read every weight (and write every gradient) once
per micro-batch: their arithmetic intensity falls and, below the chip's ridge point, the step
becomes memory-bound and slower.  The chosen split is the fastest that fits.

The model is a reference model's config (its closed form) or any model's measured
:class:`~tensorledger.plan.profile.ModelProfile` (a ``config.json`` of any architecture, a
factory: :func:`tensorledger.ledger.profile.measure_profile`), as :func:`plan_layouts` takes.
Compute is priced at the catalog's dense peak × the chip's published matmul efficiency at the
micro-batch's largest matmul (``roofline``'s expected time), unless ``efficiency`` is given;
each split carries the ideal bound (the whole dense peak) beside it.

>>> from tensorledger.hardware import get_hardware
>>> from tensorledger.napkin.transformer import get_preset
>>> p = plan_accumulation(get_preset("llama-3-8b"), get_hardware("h100"), seq_len=4096,
...                       global_batch_seqs=64, count=8, zero=3)
>>> p.chosen.micro_batch * p.chosen.accumulation * 8
64
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from tensorledger.errors import InputError
from tensorledger.hardware import Hardware
from tensorledger.napkin.adapters import FULL_FINE_TUNE, LoraShape, step_words
from tensorledger.napkin.transformer import TransformerConfig
from tensorledger.plan.estimate import CHECKPOINTS, LayoutChoice, rank_memory, step_time
from tensorledger.plan.layouts import NoLayoutError, divisors, plan_setup
from tensorledger.plan.profile import ModelProfile

__all__ = ["AccumulationOption", "AccumulationPlan", "plan_accumulation"]


@dataclass(frozen=True)
class AccumulationOption:
    """One split of the global batch on one data-parallel rank."""

    micro_batch: int  # sequences per micro-batch
    accumulation: int  # micro-batches per step
    activation_bytes: float  # saved activations of one micro-batch (logits included)
    memory_bytes: float  # everything one rank holds at the peak
    fits: bool
    intensity_flop_per_byte: float  # one micro-batch: FLOPs / weight traffic
    memory_bound: bool
    step_s: float  # at the expected efficiency (the chip's published one, or the one given)
    tokens_per_s: float
    efficiency: float = 1.0  # the share of the dense peak the matmuls were taken to reach
    ideal_step_s: float = 0.0  # the same step at the whole dense peak: the bound
    mfu: float = 0.0  # model FLOPs / (step · count · dense peak), recomputation left out
    hfu: float = 0.0  # the FLOPs that ran, recomputation included, over the same


@dataclass(frozen=True)
class AccumulationPlan:
    model: str
    hardware: str
    count: int
    zero: int
    checkpoint: str
    seq_len: int
    global_batch_seqs: int
    budget_bytes: float
    options: tuple[AccumulationOption, ...]  # every split, micro-batch ascending
    chosen: AccumulationOption  # the fastest that fits
    efficiency: float | None = None  # given by the caller; None: the chip's published ones
    peak_flop_per_s: float = 0.0  # the dense peak of the recipe's dtype
    profiled: bool = False  # the model's figures come from a traced profile
    step: str = FULL_FINE_TUNE  # or a LoRA (QLoRA) fine-tune: LoraShape.fine_tune()


def plan_accumulation(config: TransformerConfig | ModelProfile, hardware: Hardware, *,
                      seq_len: int,
                      global_batch_seqs: int, count: int = 1, zero: int = 0,
                      checkpoint: str = "none", precision: str = "bf16-master",
                      optimizer: str = "adamw", budget_bytes: float | None = None,
                      efficiency: float | None = None, attention: str = "flash",
                      lora: LoraShape | None = None) -> AccumulationPlan:
    """Every micro-batch × accumulation split of ``global_batch_seqs`` over ``count`` ranks
    (of a LoRA fine-tune with ``lora``, as :func:`~tensorledger.plan.plan_layouts` prices
    one); raise :class:`~tensorledger.plan.NoLayoutError` when not even one sequence fits."""
    if checkpoint not in CHECKPOINTS:
        raise InputError(f"unknown checkpoint {checkpoint!r}; known: {', '.join(CHECKPOINTS)}")
    if isinstance(zero, bool) or zero not in (0, 1, 2, 3):
        raise InputError(f"ZeRO stage must be 0, 1, 2 or 3, got {zero!r}")
    if global_batch_seqs < count or global_batch_seqs % count:
        raise InputError(f"the global batch of {global_batch_seqs:,} sequences does not split "
                         f"over {count:,} data-parallel ranks; use a multiple of {count:,}")
    setup = plan_setup(config, hardware, count, seq_len=seq_len,
                       global_batch_seqs=global_batch_seqs, precision=precision,
                       optimizer=optimizer, budget_bytes=budget_bytes, efficiency=efficiency,
                       attention=attention, lora=lora)
    bound = dataclasses.replace(setup, efficiency=1.0)
    budget = setup.budget_bytes
    per_rank = global_batch_seqs // count
    shard = count if zero else 1
    options = []
    for micro in divisors(per_rank):
        choice = LayoutChoice(dp=count, tp=1, pp=1, zero=zero, shard=shard, micro_batch=micro,
                              accumulation=per_rank // micro, checkpoint=checkpoint)
        memory = rank_memory(setup, choice)
        time = step_time(setup, choice, memory)
        ideal = step_time(bound, choice, rank_memory(bound, choice))
        options.append(AccumulationOption(
            micro_batch=micro, accumulation=choice.accumulation,
            activation_bytes=memory.activations_bytes + memory.logits_bytes,
            memory_bytes=memory.total_bytes, fits=memory.total_bytes <= budget,
            intensity_flop_per_byte=time.intensity_flop_per_byte,
            memory_bound=time.memory_bound, step_s=time.step_s,
            tokens_per_s=time.tokens_per_s, efficiency=time.efficiency,
            ideal_step_s=ideal.step_s, mfu=time.mfu, hfu=time.hfu))
    fitting = [o for o in options if o.fits]
    if not fitting:
        least = options[0]
        raise NoLayoutError(f"{config.name} on {count:,} × {hardware.id}: memory per rank "
                            f"binds, one sequence of {seq_len:,} needs "
                            f"{least.memory_bytes / 1e9:.1f} GB against "
                            f"{budget / 1e9:g} GB; shard more (ZeRO-3), checkpoint, or use "
                            "more devices")
    chosen = min(fitting, key=lambda o: (o.step_s, -o.micro_batch))
    return AccumulationPlan(model=config.name, hardware=hardware.id, count=count, zero=zero,
                            checkpoint=checkpoint, seq_len=seq_len,
                            global_batch_seqs=global_batch_seqs, budget_bytes=budget,
                            options=tuple(options), chosen=chosen, efficiency=efficiency,
                            peak_flop_per_s=hardware.peak_flop_per_s(setup.dtype),
                            profiled=isinstance(config, ModelProfile),
                            step=step_words(lora))
