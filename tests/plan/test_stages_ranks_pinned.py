"""pipeline_ranks pinned: the ranks, the pace and the bubble of a schedule and cut are worked
out once per search and read back (a floor apart from the schedule's own figures), and one
stage holds every block with no imbalance and no bubble."""

from __future__ import annotations

from tensorledger.hardware import get_hardware
from tensorledger.napkin.recipes import resolve_optimizer, resolve_precision
from tensorledger.napkin.transformer import get_preset
from tensorledger.plan.estimate import LayoutChoice, PlanSetup
from tensorledger.plan.model import search_model
from tensorledger.plan.stages import RankLoad, pipeline_ranks

TINY = get_preset("tiny")  # 2 blocks


def _setup() -> PlanSetup:
    return PlanSetup(TINY, get_hardware("h100"), 2, 16, 8, resolve_precision("fp32"),
                     resolve_optimizer("adamw"), 1e12)


def test_one_stage_holds_every_block() -> None:
    loads, imbalance, most, bubble = pipeline_ranks(_setup(), LayoutChoice(dp=2, tp=1, pp=1))
    assert loads == (RankLoad(rank=0, layers=2, held_layers=2, first=True, last=True,
                              first_in_flight=1),)
    assert (imbalance, most, bubble) == (1.0, 2, 0.0)


def test_a_pipelines_ranks_are_remembered_and_read_back() -> None:
    setup = _setup()
    choice = LayoutChoice(dp=1, tp=1, pp=2, accumulation=4, schedule="1f1b")
    held = pipeline_ranks(setup, choice)
    # 1F1B over 2 ranks, 4 micro-batches: (p − 1)/m = 1/4 of compute idle
    assert held[3] == 0.25
    pipelines = search_model(setup).pipelines
    assert pipelines[("1f1b", 2, 4, 1, (1, 1), False)] == held
    # its floor apart: one micro-batch a stage, no bubble
    floor = pipeline_ranks(setup, choice, floor=True)
    assert floor[3] == 0.0 and pipelines[("1f1b", 2, 4, 1, (1, 1), True)] == floor
    pipelines[("1f1b", 2, 4, 1, (1, 1), False)] = ((), 9.0, 9, 9.0)  # read back, not again
    assert pipeline_ranks(setup, choice) == ((), 9.0, 9, 9.0)
