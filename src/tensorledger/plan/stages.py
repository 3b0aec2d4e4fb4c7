"""Which pipeline rank a layout's memory and pace are set by: each rank's blocks, the
micro-batches its stages hold in flight (the schedule's own figures,
:mod:`tensorledger.plan.pipeline`), and whether it holds the embedding or the head.

A rank of a pipeline of p ranks holds its schedule's stages (one, or ``chunks`` of them:
``r, r + p, …`` in a loop, ``r`` and ``2p − 1 − r`` for ZBV), each of the blocks the layout
cuts it (``stage_layers``).  Its saved activations are Σ over its stages of blocks × the
micro-batches that stage holds in flight; the first stage adds the token ids of its
micro-batches, the last the final norm and loss of one.

Pace: every rank computes its stages' blocks (and the last one the head, whose training
FLOPs, 6·d·V a token, are most of a block's in a large-vocabulary model: Llama 3 405B's
head is 0.66 of a block); the slowest rank sets the pace, ``imbalance`` = its work over the
average rank's (1 for an even cut with no head).  The embedding is a lookup: no FLOPs.

>>> from tensorledger.plan.pipeline import SchedulePricer
>>> figures = SchedulePricer().figures("1f1b", 4, 8, 1)
>>> [(r.rank, r.layers, r.held_layers) for r in rank_loads((3, 4, 4, 3), figures)]
[(0, 3, 12), (3, 3, 3), (1, 4, 12)]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from tensorledger.errors import InputError
from tensorledger.napkin.transformer import TransformerConfig
from tensorledger.plan.model import search_model as _model
from tensorledger.plan.pipeline import ScheduleFigures, balanced_cut
from tensorledger.plan.profile import ModelProfile

if TYPE_CHECKING:
    from tensorledger.plan.estimate import LayoutChoice, PlanSetup

__all__ = ["RankLoad", "pipeline_ranks", "rank_loads", "schedule_figures", "stage_counts",
           "stage_imbalance"]


@dataclass(frozen=True)
class RankLoad:
    """What one pipeline rank holds: its blocks, and those times their micro-batches."""

    rank: int
    layers: int  # blocks over the rank's stages
    held_layers: int  # Σ blocks × micro-batches in flight, over its stages
    first: bool  # holds the model's first stage (the embedding, the token ids)
    last: bool  # holds the model's last stage (the final norm, the head, the loss)
    first_in_flight: int  # micro-batches the first stage holds (0 on other ranks)


def _load(rank: int, counts: tuple[int, ...], figures: ScheduleFigures) -> RankLoad:
    stages = figures.rank_stages[rank]
    last = len(counts) - 1
    inflight = figures.stage_in_flight
    return RankLoad(rank=rank, layers=sum(counts[s] for s in stages),
                    held_layers=sum(counts[s] * inflight[s] for s in stages),
                    first=0 in stages, last=last in stages,
                    first_in_flight=inflight[0] if 0 in stages else 0)


def rank_loads(counts: tuple[int, ...], figures: ScheduleFigures) -> tuple[RankLoad, ...]:
    """The ranks that can hold the most: the first stage's, the last stage's, and of the
    others the one holding the most blocks × micro-batches (then the most blocks) and the one
    holding the most blocks (then the most blocks × micro-batches), each once.  Memory per
    rank is the largest of theirs: every other rank holds no embedding or head, and no more
    saved blocks nor parameters than those two."""
    p = figures.pp
    loads = [_load(r, counts, figures) for r in range(p)]
    ends = [load for load in loads if load.first or load.last]
    middle = [load for load in loads if not (load.first or load.last)]
    picked = {load.rank: load for load in sorted(ends, key=lambda load: not load.first)}
    if middle:
        for heaviest in (max(middle, key=lambda load: (load.held_layers, load.layers,
                                                       -load.rank)),
                         max(middle, key=lambda load: (load.layers, load.held_layers,
                                                       -load.rank))):
            picked.setdefault(heaviest.rank, heaviest)
    return tuple(picked.values())


def stage_imbalance(counts: tuple[int, ...], figures: ScheduleFigures, layer_flops: float,
                    head_flops: float) -> tuple[float, int]:
    """(the slowest rank's work over the average rank's, the most blocks a rank holds), a
    block costing ``layer_flops`` and the head ``head_flops`` (a token's, any unit).

    >>> from tensorledger.plan.pipeline import SchedulePricer
    >>> even = SchedulePricer().figures("1f1b", 4, 8, 1)
    >>> stage_imbalance((3, 4, 4, 3), even, 1.0, 0.0)   # 4 against 14 / 4
    (1.1428571428571428, 4)
    """
    last = len(counts) - 1
    work = []
    most = 0
    for stages in figures.rank_stages:
        layers = sum(counts[s] for s in stages)
        most = max(most, layers)
        work.append(layers * layer_flops + (head_flops if last in stages else 0.0))
    total = sum(work)
    return (max(work) * len(work) / total if total > 0 else 1.0), most


def stage_counts(config: TransformerConfig | ModelProfile, choice: LayoutChoice
                 ) -> tuple[int, ...]:
    """The blocks of each of the choice's pp · chunks stages: its ``stage_layers``, else as
    even as they go (the first cut of :func:`tensorledger.plan.pipeline.stage_splits`)."""
    if choice.stage_layers:
        return choice.stage_layers
    return balanced_cut(config.n_layers, choice.pp * choice.chunks)


def schedule_figures(setup: PlanSetup, choice: LayoutChoice) -> ScheduleFigures:
    """The choice's schedule priced by ``setup.schedules``; refused in one line."""
    figures = setup.schedules.figures(choice.schedule, choice.pp, choice.accumulation,
                                      choice.chunks)
    if isinstance(figures, str):
        raise InputError(f"{choice.describe()}: {figures}")
    return figures


def pipeline_ranks(setup: PlanSetup, choice: LayoutChoice, floor: bool = False
                   ) -> tuple[tuple[RankLoad, ...], float, int, float]:
    """(the ranks that can hold the most, the pace's imbalance, the most blocks a rank
    holds, the bubble over compute) of the choice, remembered per schedule and cut; with
    ``floor``, of the pricer's floor figures (no schedule's lists built)."""
    counts = stage_counts(setup.config, choice)
    model = _model(setup)
    if choice.pp == 1:
        layers = setup.config.n_layers
        return (RankLoad(0, layers, layers, True, True, 1),), 1.0, layers, 0.0
    key = (choice.schedule, choice.pp, choice.accumulation, choice.chunks, counts, floor)
    held = model.pipelines.get(key)
    if held is None:
        figures = (setup.schedules.floor(choice.schedule, choice.pp, choice.accumulation,
                                         choice.chunks) if floor
                   else schedule_figures(setup, choice))
        head = model.head_flops_per_token
        layer = (model.flops_per_token - head) / setup.config.n_layers
        imbalance, most = stage_imbalance(counts, figures, layer, head)
        held = (rank_loads(counts, figures), imbalance, most, figures.bubble_to_compute)
        model.pipelines[key] = held
    return held  # type: ignore[return-value]
