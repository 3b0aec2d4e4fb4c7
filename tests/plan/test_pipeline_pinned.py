"""pipeline.py's closed forms pinned: 1F1B with exactly a micro-batch a stage, GPipe with
fewer, and every field of the figures they return."""

from __future__ import annotations

from tensorledger.plan.pipeline import (
    ScheduleFigures,
    SchedulePricer,
    describe_stages,
    schedule_chunks,
    shorter_ends_cut,
    stage_splits,
)


def test_1f1b_with_a_micro_batch_a_stage() -> None:
    # p = m = 4: bubble (4 − 1)/(4 + 4 − 1) = 3/7; stage s holds min(4 − s, 4)
    assert SchedulePricer().figures("1f1b", 4, 4, 1) == ScheduleFigures(
        schedule="1f1b", pp=4, microbatches=4, chunks=1, bubble_fraction=3 / 7,
        stage_in_flight=(4, 3, 2, 1), rank_stages=((0,), (1,), (2,), (3,)),
        source="closed form (equal to torch's action lists)")


def test_1f1b_refuses_fewer_micro_batches_than_stages() -> None:
    assert SchedulePricer().figures("1f1b", 4, 3, 1) == (
        "1f1b needs a micro-batch per stage at least; 3 < 4 stages")


def test_gpipe_takes_fewer_micro_batches_than_stages() -> None:
    # bubble 3/(2 + 3) = 3/5; every stage holds both micro-batches
    assert SchedulePricer().figures("gpipe", 4, 2, 1) == ScheduleFigures(
        schedule="gpipe", pp=4, microbatches=2, chunks=1, bubble_fraction=3 / 5,
        stage_in_flight=(2, 2, 2, 2), rank_stages=((0,), (1,), (2,), (3,)),
        source="closed form (equal to torch's action lists)")


def test_known_says_what_is_priced() -> None:
    pricer = SchedulePricer()
    assert not pricer.known("1f1b", 4, 4, 1)
    pricer.figures("1f1b", 4, 4, 1)
    assert pricer.known("1f1b", 4, 4, 1)


def test_the_floor_of_a_zbv_pipeline() -> None:
    # no bubble, one micro-batch in flight on each of the 2 · 2 stages, ZBV's V placement
    assert SchedulePricer().floor("zbv", 2, 8, 2) == ScheduleFigures(
        schedule="zbv", pp=2, microbatches=8, chunks=2, bubble_fraction=0.0,
        stage_in_flight=(1, 1, 1, 1), rank_stages=((0, 3), (1, 2)),
        source="a floor: one micro-batch in flight a stage")


def test_describe_stages_folds_a_pair() -> None:
    assert describe_stages((7, 8, 8, 7)) == "7,8×2,7"


def test_schedule_chunks_of_a_fixed_count() -> None:
    assert schedule_chunks("1f1b", 1) == (1,)
    assert schedule_chunks("1f1b", 2) == ()  # one stage a rank
    assert schedule_chunks("zbv", 2) == (2,)
    assert schedule_chunks("zbv", 3) == ()  # exactly 2 (a V)
    assert schedule_chunks("looped-bfs", 2) == (2,)
    assert schedule_chunks("looped-bfs", 1) == ()  # a multi-stage schedule needs 2 or more
    assert schedule_chunks("looped-bfs") == (2, 4)


def test_stage_splits_of_one_block_a_stage() -> None:
    assert stage_splits(4, 4) == ((1, 1, 1, 1),)
    assert stage_splits(3, 4) == ()  # more stages than blocks


def test_shorter_ends_of_two_stages() -> None:
    # 4 blocks + 1 + 1 over 2 stages: 3 each, less one at each end
    assert shorter_ends_cut(4, 2, 1, 1) == (2, 2)


def test_stage_splits_take_one_block_shorter_ends_only() -> None:
    # 9 over 4: as even as they go (2, 2, 3, 2); 9 + 1 + 1 and 9 + 1 do not divide by 4
    assert stage_splits(9, 4) == ((2, 2, 3, 2),)
    # 7 over 4: (1, 2, 2, 2), and 7 + 1 = 8 cut 2, 2, 2, 1 (a stage of one block is one)
    assert stage_splits(7, 4) == ((1, 2, 2, 2), (2, 2, 2, 1))


def test_a_loop_places_stages_r_r_plus_p_and_so_on() -> None:
    # 2 ranks of 3 stages each: rank 0 holds 0, 0 + 2, 0 + 4; rank 1 holds 1, 3, 5
    assert SchedulePricer().placement("interleaved-1f1b", 2, 3) == ((0, 2, 4), (1, 3, 5))
    # ZBV's V: rank r holds r and 2·2 − 1 − r
    assert SchedulePricer().placement("zbv", 2, 2) == ((0, 3), (1, 2))
