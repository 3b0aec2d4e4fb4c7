"""Action lists replayed by hand (issue 42's mutation run of
``tensorledger.workload.schedule_order``): small hand-built lists where a count going the wrong
way, a rank with nothing to do or an action nobody can run changes the answer.

Times as the module's: a forward 1 unit, an input half 1, a weight half 1, a full backward 2.
"""

from __future__ import annotations

import pytest
from torch.distributed.pipelining.schedules import _Action, _ComputationType

from tensorledger.errors import TraceError
from tensorledger.workload.pipeline import action_lists
from tensorledger.workload.schedule_order import order_bubble, order_timeline

F, B, IN, W = (_ComputationType.FORWARD, _ComputationType.FULL_BACKWARD,
              _ComputationType.BACKWARD_INPUT, _ComputationType.BACKWARD_WEIGHT)


def _a(stage: int, kind: _ComputationType, micro: int) -> _Action:
    return _Action(stage, kind, micro)


def test_stages_and_ranks_of_torchs_lists() -> None:
    one = order_timeline(action_lists("1f1b", 4, 8))
    assert (one.ranks, one.stages) == (4, 4)
    looped = order_timeline(action_lists("interleaved-1f1b", 4, 8, 2))
    assert (looped.ranks, looped.stages) == (4, 8)  # 2 stages a rank: 4 · 2


def test_order_bubble_is_the_timelines() -> None:
    # 1F1B, p = 4, m = 8: (p − 1)/(m + p − 1) = 3/11
    assert order_bubble(action_lists("1f1b", 4, 8)) == pytest.approx(3 / 11)


def test_a_stage_entered_again_after_a_backward_counts_up_from_one_less() -> None:
    # one stage: F, B, F, F; a send (computes nothing) and a wait skipped
    order = {0: [_a(0, F, 0), _a(0, _ComputationType.SEND_F, 0), _a(0, B, 0), None,
                 _a(0, F, 1), _a(0, F, 2)]}
    t = order_timeline(order)
    # in flight 1, 0 (the backward leaves one), 1, 2: the peak is 2
    assert t.in_flight == (2,) and t.rank_in_flight == (2,)
    assert (t.length, t.busy) == (5, 5)  # 1 + 2 + 1 + 1, one rank never idle


def test_a_rank_of_waits_only_holds_nothing() -> None:
    order = {0: [_a(0, F, 0), _a(0, B, 0)], 1: [None, None]}
    t = order_timeline(order)
    assert (t.ranks, t.stages) == (2, 1)
    assert t.rank_in_flight == (1, 0) and t.in_flight == (1,)
    assert (t.length, t.busy) == (3, 3)  # 1 + 2 on rank 0
    assert t.bubble_fraction == pytest.approx(1 - 3 / (2 * 3))  # rank 1 idle: 1/2


def test_a_full_backward_after_an_input_half_leaves_the_weight_half_to_free_it() -> None:
    # stage 1's micro-batch 0: its input half, a full backward, then its weight half, which
    # still reads the saved inputs: only the weight half takes it out of flight
    order = {0: [_a(0, F, 0), _a(0, F, 1)],
             1: [_a(1, F, 0), _a(1, IN, 0), _a(1, B, 0), _a(1, F, 1), _a(1, W, 0)]}
    t = order_timeline(order)
    # stage 1: F → 1, I → 1, B → 1 (split: not out), F → 2, W → 1; stage 0: two forwards
    assert t.in_flight == (2, 2) and t.rank_in_flight == (2, 2)
    # rank 0: F 0-1, F 1-2; rank 1: F(1,0) 1-2, I 2-3, B 3-5, F(1,1) 5-6, W 6-7
    assert (t.length, t.busy) == (7, 2 + 1 + 1 + 2 + 1 + 1)


def test_a_backward_whose_forward_never_runs_is_refused() -> None:
    with pytest.raises(TraceError, match="do not progress"):
        order_timeline({0: [_a(0, B, 0)]})
