"""stages.py pinned: the ranks a pipeline's memory is taken from include the heaviest middle
rank even where an end rank is heavier still."""

from __future__ import annotations

from tensorledger.plan.pipeline import SchedulePricer
from tensorledger.plan.stages import rank_loads, stage_imbalance


def test_the_heaviest_middle_rank_is_kept_beside_heavier_ends() -> None:
    # 1F1B over 4 ranks, 8 micro-batches: stage s holds min(4 − s, 8) = 4, 3, 2, 1.  Cut
    # 4, 1, 1, 4: rank 0 holds 4 blocks × 4 = 16, rank 1 1 × 3 = 3, rank 2 1 × 2 = 2, rank 3
    # 4 × 1 = 4; of the middle ranks rank 1 is the heaviest both ways
    figures = SchedulePricer().figures("1f1b", 4, 8, 1)
    loads = rank_loads((4, 1, 1, 4), figures)
    assert [(r.rank, r.layers, r.held_layers) for r in loads] == [(0, 4, 16), (3, 4, 4),
                                                                   (1, 1, 3)]


def test_of_two_equally_heavy_middle_ranks_the_first_is_kept() -> None:
    # GPipe over 4 ranks, 2 micro-batches: every stage holds 2.  Cut 1, 2, 2, 1: ranks 1 and
    # 2 both hold 2 blocks × 2 = 4: the lower rank stands for them
    figures = SchedulePricer().figures("gpipe", 4, 2, 1)
    assert [r.rank for r in rank_loads((1, 2, 2, 1), figures)] == [0, 3, 1]


def test_the_most_held_and_the_most_blocks_are_two_middle_ranks() -> None:
    # 1F1B, 4 ranks, 8 micro-batches (4, 3, 2, 1 in flight), cut 1, 3, 4, 1: rank 1 holds
    # 3 × 3 = 9, rank 2 4 × 2 = 8 but 4 blocks to rank 1's 3: both kept
    figures = SchedulePricer().figures("1f1b", 4, 8, 1)
    assert [r.rank for r in rank_loads((1, 3, 4, 1), figures)] == [0, 3, 1, 2]


def test_stage_imbalance_of_stages_of_no_block() -> None:
    # no work at all: an imbalance of 1 and no rank holding a block
    figures = SchedulePricer().figures("gpipe", 2, 2, 1)
    assert stage_imbalance((0, 0), figures, 1.0, 0.0) == (1.0, 0)


def test_imbalance_of_work_below_one_unit_a_token() -> None:
    # a block costs 0.25 (any unit), no head: GPipe over 2 ranks, cut 1, 2: rank work 0.25
    # and 0.5, total 0.75 (below 1 but above 0): 0.5 · 2 / 0.75 = 4/3, the most blocks 2
    figures = SchedulePricer().figures("gpipe", 2, 2, 1)
    imbalance, most = stage_imbalance((1, 2), figures, 0.25, 0.0)
    assert imbalance == 0.5 * 2 / 0.75
    assert most == 2
