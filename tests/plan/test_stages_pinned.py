"""stages.py pinned: the ranks a pipeline's memory is taken from include the heaviest middle
rank even where an end rank is heavier still."""

from __future__ import annotations

from tensorledger.plan.pipeline import SchedulePricer
from tensorledger.plan.stages import rank_loads


def test_the_heaviest_middle_rank_is_kept_beside_heavier_ends() -> None:
    # 1F1B over 4 ranks, 8 micro-batches: stage s holds min(4 − s, 8) = 4, 3, 2, 1.  Cut
    # 4, 1, 1, 4: rank 0 holds 4 blocks × 4 = 16, rank 1 1 × 3 = 3, rank 2 1 × 2 = 2, rank 3
    # 4 × 1 = 4; of the middle ranks rank 1 is the heaviest both ways
    figures = SchedulePricer().figures("1f1b", 4, 8, 1)
    loads = rank_loads((4, 1, 1, 4), figures)
    assert [(r.rank, r.layers, r.held_layers) for r in loads] == [(0, 4, 16), (3, 4, 4),
                                                                   (1, 1, 3)]
