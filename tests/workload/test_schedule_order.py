"""Every schedule of ``torch.distributed.pipelining`` for p = 4 ranks and m = 8 micro-batches
(v = 2 and 4 stages a rank where it takes several): the bubble and the micro-batches in flight
replayed from torch's own action lists (``action_lists`` → ``order_timeline``) against a hand
derivation of each.

Times (schedule_order's): a forward 1 unit, a backward's input half 1, its weight half 1, a
full backward 2.  A rank then computes 3·v·m units: 3·8 = 24 (v = 1), 48 (v = 2), 96 (v = 4).
"""

from __future__ import annotations

from fractions import Fraction

import pytest

from tensorledger.errors import InputError
from tensorledger.workload.pipeline import action_lists
from tensorledger.workload.schedule_order import order_timeline

P, M = 4, 8


def _timeline(schedule: str, v: int | None = None):  # type: ignore[no-untyped-def]
    return order_timeline(action_lists(schedule, P, M, v))


def _bubble(idle_units: int, v: int) -> Fraction:
    """The share of a step of 3·v·m busy units plus ``idle_units`` that is idle."""
    return Fraction(idle_units, 3 * v * M + idle_units)


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_fill_drain_and_1f1b_idle_p_minus_1_forwards_and_backwards(schedule: str) -> None:
    t = _timeline(schedule)
    # the last rank's first forward waits p − 1 = 3 forwards, the first rank's last backward
    # p − 1 backwards: (p − 1)·(1 + 2) = 9 idle units a rank; 24 + 9 = 33 in all
    assert t.length == 33 and t.busy == P * 24
    assert t.bubble_fraction == pytest.approx(float(_bubble(9, 1)))  # 9/33 = 3/11
    assert float(_bubble(9, 1)) == pytest.approx(3 / 11)  # napkin's (p − 1)/(m + p − 1)


def test_fill_drain_holds_every_micro_batch_on_every_stage() -> None:
    # every forward runs before the first backward: m = 8 in flight on each stage
    assert _timeline("gpipe").in_flight == (8, 8, 8, 8)


def test_1f1b_stage_s_holds_p_minus_s() -> None:
    # stage s runs p − s forwards of warm-up before its first backward (4, 3, 2, 1), then one
    # forward after each backward: never more
    t = _timeline("1f1b")
    assert t.in_flight == (4, 3, 2, 1) and t.rank_in_flight == (4, 3, 2, 1)


@pytest.mark.parametrize(("v", "length"), [
    (2, 48 + 9),  # 3·v·m + 3·(p − 1) = 57: the fill and drain of one stage's chunk
    (4, 96 + 9),  # 105
])
@pytest.mark.parametrize("schedule", ["interleaved-1f1b", "looped-bfs"])
def test_interleaved_and_looped_bfs_shrink_the_bubble_by_v(schedule: str, v: int,
                                                            length: int) -> None:
    t = _timeline(schedule, v)
    assert t.length == length and t.busy == P * 3 * v * M
    # (p − 1)/(v·m + p − 1): 3/19 for v = 2, 3/35 for v = 4
    assert t.bubble_fraction == pytest.approx(float(_bubble(9, v)))
    assert float(_bubble(9, v)) == pytest.approx(3 / (v * M + 3))


@pytest.mark.parametrize(("v", "ranks"), [
    # torch's warm-up for rank r: (v − 1)·(m / rounds) + 2·(p − 1 − r) forwards, rounds =
    # m // p = 2, so m / rounds = 4; then one more forward before the first backward:
    # v = 2: 4 + 6 + 1 = 11, 4 + 4 + 1 = 9, 7, 5; v = 4: 12 + 6 + 1 = 19, 17, 15, 13
    (2, (11, 9, 7, 5)),
    (4, (19, 17, 15, 13)),
])
def test_interleaved_1f1b_rank_r_holds_its_warm_up_plus_one(v: int,
                                                           ranks: tuple[int, ...]) -> None:
    t = _timeline("interleaved-1f1b", v)
    assert t.rank_in_flight == ranks
    # rank 0, v = 2: forwards go 4 at a time to stages 0, 4, 0, 4 (micro-batches 0-3, 0-3,
    # 4-7, 4-7); its 11 forwards before the first backward are stage 0's 0-5 and stage 4's 0-3,
    # then stage 0's 6 and 7 go in while stage 4's gradients come back: stage 0 holds all 8,
    # stage 4 never more than its first 4
    if v == 2:
        assert (t.in_flight[0], t.in_flight[4]) == (8, 4)


@pytest.mark.parametrize("v", [2, 4])
def test_looped_bfs_runs_every_micro_batch_of_a_stage_at_once(v: int) -> None:
    t = _timeline("looped-bfs", v)
    # each stage runs all m forwards before any backward; a rank holds all v of its stages'
    assert t.in_flight == (8,) * (P * v)
    assert t.rank_in_flight == (8 * v,) * P


@pytest.mark.parametrize(("schedule", "v"), [("interleaved-zb", 2), ("interleaved-zb", 4),
                                             ("zbv", 2)])
def test_zero_bubble_schedules_leave_only_the_first_forwards_fill(schedule: str, v: int) -> None:
    t = _timeline(schedule, v)
    # the last rank's first forward waits for p − 1 = 3 forwards before it, and the weight
    # halves fill every later gap: the step is 3·v·m + 3 = 51 (v = 2), 99 (v = 4), each rank
    # idle 3 units of it; bubble 3/51 = 1/17, 3/99 = 1/33 (against 1F1B's 9 idle units)
    assert t.length == 3 * v * M + 3
    assert t.bubble_fraction == pytest.approx(float(_bubble(3, v)))


def test_zbv_stage_in_flight_by_its_place_in_the_v() -> None:
    t = _timeline("zbv")
    # rank r holds stages r and 2p − 1 − r.  Its first chunk runs 2(p − r) − 1 forwards, then
    # r more beside the second chunk's, then one more before its first input gradient:
    # 2p − r = 8, 7, 6, 5 for stages 0-3.  Its second chunk: r forwards in warm-up, then one
    # whose input and weight gradients follow at once: r + 1 = 4, 3, 2, 1 for stages 4-7
    # (stage 4 is rank 3's, stage 7 rank 0's)
    assert t.in_flight == (8, 7, 6, 5, 4, 3, 2, 1)
    # rank r: (2p − r − 1) + r = 7 after the paired warm-up, + 1 second-chunk forward = 2p = 8
    assert t.rank_in_flight == (8,) * P


def test_interleaved_zero_bubble_holds_weight_halves_back() -> None:
    t = _timeline("interleaved-zb", 2)
    # rank 3 (torch's list): 3F0-3F3, then 7F0 7I0 … 7F3 7I3 with the weight halves held back
    # until 7W0: stage 7 keeps 4 in flight beside stage 3's 4 = 8; rank 0: 0F0-0F3, 4F0-4F3
    # before 4I0 = 8.  Every rank peaks at v·m/rounds = 8, each chunk at m = 8 (its
    # first chunk) or m/rounds = 4 (its second)
    assert t.rank_in_flight == (8, 8, 8, 8)
    assert t.in_flight == (8, 8, 8, 8, 4, 4, 4, 4)


@pytest.mark.parametrize(("schedule", "m", "chunks", "message"), [
    ("1f1b", 3, None, "1f1b needs a micro-batch per stage at least; --microbatches 3 < 4"),
    ("interleaved-1f1b", 9, 2, "runs the micro-batches in 2 equal rounds"),
    ("interleaved-zb", 11, 2, "--microbatches 11 does not divide by 2"),
    ("zbv", 8, 3, "zbv runs exactly 2 stages per rank"),
    ("gpipe", 8, 2, "gpipe runs one stage per rank"),
])
def test_a_schedule_torch_would_refuse_is_refused_in_one_line(schedule: str, m: int,
                                                              chunks: int | None,
                                                              message: str) -> None:
    with pytest.raises(InputError, match=message):
        action_lists(schedule, P, m, chunks)


def test_the_times_move_a_zero_bubble_schedules_bubble_not_1f1bs() -> None:
    order = action_lists("zbv", P, M)
    # weight halves free (W = 0): nothing fills the gaps they filled; 1F1B's bubble holds
    # for any split of forward and backward time
    assert order_timeline(order, backward_weight=0).bubble_fraction > _timeline(
        "zbv").bubble_fraction
    one = action_lists("1f1b", P, M)
    assert order_timeline(one, forward=1, backward_input=3, backward_weight=2
                          ).bubble_fraction == pytest.approx(3 / 11)
