"""Checkpointing policies predicted from a per-block table, by hand; the budget-optimal policy
against every policy there is (brute force) and against the standard ones (hypothesis)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tensorledger.errors import InputError
from tensorledger.plan.checkpoint import (
    CheckpointPolicy,
    CheckpointProfile,
    Segment,
    every_block,
    every_kth_block,
    no_checkpointing,
    optimal_under_budget,
    predict_policy,
    selective,
    sqrt_segments,
    standard_policies,
    synthetic_profile,
)


def _spans(policy: CheckpointPolicy) -> list[tuple[int, int]]:
    return [(s.start, s.stop) for s in policy.segments]


def test_the_standard_policies_segments() -> None:
    assert _spans(no_checkpointing(5)) == []
    assert _spans(every_block(3)) == [(0, 1), (1, 2), (2, 3)]
    # torchtitan counts layers from 1 and wraps every k-th: 0-based 2, 5 for k = 3
    assert _spans(every_kth_block(8, 3)) == [(2, 3), (5, 6)]
    assert _spans(every_kth_block(4, 1)) == _spans(every_block(4))
    # ⌈√16⌉ = 4: segments [0,4) [4,8) [8,12); the last, [12,16), stays (checkpoint_sequential)
    assert _spans(sqrt_segments(16)) == [(0, 4), (4, 8), (8, 12)]
    assert _spans(sqrt_segments(10)) == [(0, 4), (4, 8)]  # ⌈√10⌉ = 4; blocks 8, 9 stay
    assert _spans(sqrt_segments(2)) == []  # ⌈√2⌉ = 2: one segment, the last: none
    assert _spans(sqrt_segments(1)) == []
    assert {s.mode for s in selective(3).segments} == {"selective"}
    assert [p.name for p in standard_policies(4)] == [
        "none", "every block", "every 2nd block", "sqrt(L) segments", "selective"]


@pytest.mark.parametrize("bad", [
    lambda: CheckpointPolicy("x", 4, (Segment(0, 2), Segment(1, 3))),   # overlap
    lambda: CheckpointPolicy("x", 4, (Segment(2, 2),)),                  # empty
    lambda: CheckpointPolicy("x", 4, (Segment(3, 5),)),                  # past the end
    lambda: CheckpointPolicy("x", 4, (Segment(0, 1, "some"),)),          # unknown mode
    lambda: every_kth_block(4, 0),
    lambda: sqrt_segments(0),
    lambda: every_block(True),  # type: ignore[arg-type]
])
def test_malformed_policies_are_refused(bad: object) -> None:
    with pytest.raises(InputError):
        bad()  # type: ignore[operator]


# Five blocks where every figure differs, so a dropped term or a wrong index shows:
# inputs x = (0, 11, 13, 17, 19) (block 0's input lives outside), insides a = (100, 200, 300,
# 400, 500), matmul outputs m = (7, 8, 9, 10, 12), forward FLOPs f = (1000, 2000, 3000, 4000,
# 5000), cheap FLOPs c = (10, 20, 30, 40, 50); outside O = 1000 of which the loss's 600 is
# freed before the blocks' backward; overhead 5000; a block's backward has 3 bytes beside it.
X = (0, 11, 13, 17, 19)
A = (100, 200, 300, 400, 500)
PROFILE = synthetic_profile(5, input_bytes=X, interior_bytes=A, forward_flops=(1000, 2000, 3000,
                            4000, 5000), must_save_bytes=(7, 8, 9, 10, 12),
                            cheap_flops=(10, 20, 30, 40, 50), outside_bytes=1000,
                            outside_early_bytes=600, overhead_bytes=5000,
                            backward_extra_bytes=3, flop_per_s=1.0)


def test_no_checkpointing_by_hand() -> None:
    r = predict_policy(PROFILE, no_checkpointing(5))
    # K = Σa + Σx = 1500 + 60 = 1560; saved = O + K = 2560
    assert r.saved_bytes == 2560
    # peak = overhead + late outside + K = 5000 + 400 + 1560 = 6960; the last block's backward
    # (3 + 500 + 19 beside the 1019 the others keep, + 400) is far below
    assert r.peak_bytes == 6960
    assert (r.recompute_flops, r.recompute_time_s) == (0, 0.0)


def test_every_block_by_hand() -> None:
    r = predict_policy(PROFILE, every_block(5))
    # K = Σx = 60 (each block keeps its input); saved = 1060
    assert r.saved_bytes == 1060
    # start: 5000 + 400 + 60 = 5460; stages are overhead-free here (3 + a_i + x_i + ...)
    assert r.peak_bytes == 5460
    assert r.recompute_flops == 15000  # 1000 + 2000 + 3000 + 4000 + 5000
    assert r.recompute_time_s == 15000.0  # at 1 FLOP/s


def test_sqrt_segments_by_hand() -> None:
    # ⌈√5⌉ = 3: segment [0, 3); blocks 3, 4 keep theirs
    r = predict_policy(PROFILE, sqrt_segments(5))
    # K = x_0 (0) + (a_3 + x_3) + (a_4 + x_4) = 0 + 417 + 519 = 936
    assert r.saved_bytes == 1000 + 936
    assert r.peak_bytes == 5000 + 400 + 936
    assert r.recompute_flops == 6000  # 1000 + 2000 + 3000


def test_selective_by_hand() -> None:
    r = predict_policy(PROFILE, selective(5))
    # K = Σ(x_i + m_i) = 60 + 46 = 106
    assert r.saved_bytes == 1000 + 106
    assert r.recompute_flops == 150  # Σc = 10 + 20 + 30 + 40 + 50


def test_a_segments_recomputation_can_set_the_peak() -> None:
    # No overhead and no outside: the peak is the backward of a segment with its insides back.
    p = synthetic_profile(4, input_bytes=10, interior_bytes=(100, 100, 100, 1000),
                          forward_flops=1)
    r = predict_policy(p, CheckpointPolicy("last three", 4, (Segment(1, 4),)))
    # kept: block 0 (100) + segment input x_1 (10) = 110
    assert r.saved_bytes == 110
    # backward of block 3 inside [1, 4): a_0 (100) + x_1 (10) + a_1 + x_2 + a_2 (210)
    # + block 3's own a_3 + x_3 (1010) = 1330
    assert r.peak_bytes == 1330


def test_a_kept_blocks_backward_can_set_the_peak() -> None:
    # 1000 bytes of gradients and temporaries beside each block's backward, nothing else
    p = synthetic_profile(2, input_bytes=10, interior_bytes=100, forward_flops=(7, 9),
                          backward_extra_bytes=1000)
    # none: block 1's backward has 1000 + its a_1 + x_1 (110) beside block 0's 100: 1210
    assert predict_policy(p, no_checkpointing(2)).peak_bytes == 1210
    # within 1150 only block 0 checkpointed fits: its recomputation 1000 + a_0 = 1100, then
    # block 1's backward 1110 with nothing before it kept (x_0 lives outside)
    best = optimal_under_budget(p, 1150, modes=("full",))
    assert [(s.start, s.stop) for s in best.policy.segments] == [(0, 1)]
    assert (best.peak_bytes, best.recompute_flops) == (1110, 7)


def test_the_policy_must_match_the_model() -> None:
    with pytest.raises(InputError, match="for 4 blocks; the model has 5"):
        predict_policy(PROFILE, every_block(4))


# ---- the budget-optimal policy -------------------------------------------------------------
def _all_policies(n: int, modes: tuple[str, ...] = ("full", "selective")
                  ) -> Iterator[CheckpointPolicy]:
    """Every way to cut n blocks into kept blocks and checkpointed segments."""
    def cuts(start: int) -> Iterator[tuple[Segment, ...]]:
        if start == n:
            yield ()
            return
        for rest in cuts(start + 1):  # block `start` kept
            yield rest
        for stop in range(start + 1, n + 1):
            for mode in modes:
                for rest in cuts(stop):
                    yield (Segment(start, stop, mode), *rest)
    for segments in cuts(0):
        yield CheckpointPolicy("any", n, segments)


def _profiles(max_blocks: int) -> st.SearchStrategy[CheckpointProfile]:
    @st.composite
    def build(draw: st.DrawFn) -> CheckpointProfile:
        n = draw(st.integers(1, max_blocks))
        ints = st.lists(st.integers(0, 1000), min_size=n, max_size=n)
        outside = draw(st.integers(0, 2000))
        return synthetic_profile(
            n, input_bytes=draw(ints), interior_bytes=draw(ints), forward_flops=draw(ints),
            must_save_bytes=draw(ints), cheap_flops=draw(ints), outside_bytes=outside,
            outside_early_bytes=draw(st.integers(0, outside)),
            overhead_bytes=draw(st.integers(0, 3000)),
            backward_extra_bytes=draw(st.integers(0, 3000)), flop_per_s=1.0)
    return build()


@settings(max_examples=60, deadline=None)
@given(profile=_profiles(5), budget=st.integers(0, 12000))
def test_the_optimum_is_the_fastest_of_every_policy_that_fits(profile: CheckpointProfile,
                                                              budget: int) -> None:
    n = len(profile.blocks)
    fitting = [r for r in (predict_policy(profile, p) for p in _all_policies(n))
               if r.peak_bytes <= budget]
    if not fitting:
        with pytest.raises(InputError, match="no checkpointing policy"):
            optimal_under_budget(profile, budget)
        return
    best = optimal_under_budget(profile, budget)
    assert best == predict_policy(profile, best.policy)
    assert best.peak_bytes <= budget
    assert best.recompute_time_s == min(r.recompute_time_s for r in fitting)


@settings(max_examples=30, deadline=None)
@given(profile=_profiles(12), budget=st.integers(0, 30000))
def test_the_optimum_is_never_slower_than_a_standard_policy_that_fits(
        profile: CheckpointProfile, budget: int) -> None:
    n = len(profile.blocks)
    try:
        best = optimal_under_budget(profile, budget)
    except InputError:
        best = None
    for policy in (no_checkpointing(n), every_block(n), sqrt_segments(n),
                   every_kth_block(n, 2), selective(n)):
        known = predict_policy(profile, policy)
        if known.peak_bytes <= budget:
            assert best is not None, policy.name
            assert best.recompute_time_s <= known.recompute_time_s, policy.name
    if best is not None:
        assert best.peak_bytes <= budget


def test_no_policy_fits_says_so() -> None:
    # the overhead and the loss's late part alone are 5400 bytes
    with pytest.raises(InputError, match=r"within 5,399 bytes.*5,400 bytes are needed"):
        optimal_under_budget(PROFILE, 5399)
    with pytest.raises(InputError, match="whole number of bytes"):
        optimal_under_budget(PROFILE, -1)
    with pytest.raises(InputError, match="modes"):
        optimal_under_budget(PROFILE, 10**6, modes=("some",))


def test_a_roomy_budget_recomputes_nothing() -> None:
    best = optimal_under_budget(PROFILE, 10**6)
    assert best.policy.segments == () and best.recompute_flops == 0
