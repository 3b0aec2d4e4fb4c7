"""checkpoint.py's hand-written profiles and the budget search pinned: what
``synthetic_profile`` fills in by default, the exact fit of a budget (``<=``, not ``<``), a
budget that is no whole number of bytes, and ties in recompute time broken by FLOPs."""

from __future__ import annotations

import dataclasses

import pytest

from tensorledger.errors import InputError
from tensorledger.plan.checkpoint import (
    BlockProfile,
    CheckpointPolicy,
    CheckpointProfile,
    Segment,
    _ordinal,
    _prune,
    _State,
    every_kth_block,
    kept_for_backward_bytes,
    no_checkpointing,
    optimal_under_budget,
    predict_policy,
    profile_blocks,
    synthetic_profile,
)
from tensorledger.trace.records import OpRecord, Trace


def test_synthetic_profile_fills_each_block_by_hand() -> None:
    p = synthetic_profile(3, input_bytes=10, interior_bytes=30, forward_flops=[100, 200, 300],
                          cheap_flops=[7, 8, 9], backward_extra_bytes=5, flop_per_s=4.0)
    assert p.hardware == "synthetic"
    assert [b.path for b in p.blocks] == ["blocks.0", "blocks.1", "blocks.2"]
    # the first block has no input of its own (0 bytes, not saved); the others save theirs
    assert [(b.input_bytes, b.input_saved) for b in p.blocks] == [(0, False), (10, True),
                                                                   (10, True)]
    # seconds are FLOPs / 4 FLOP/s
    assert [b.forward_time_s for b in p.blocks] == [25.0, 50.0, 75.0]
    assert [b.cheap_time_s for b in p.blocks] == [1.75, 2.0, 2.25]
    # while a block's backward runs: 5 extra + its 30 inside + its input (none for block 0)
    assert [b.backward_overhead_bytes for b in p.blocks] == [35, 45, 45]


def test_synthetic_profile_defaults() -> None:
    p = synthetic_profile(2, input_bytes=10, interior_bytes=30, forward_flops=100)
    assert [(b.must_save_bytes, b.cheap_flops, b.cheap_time_s) for b in p.blocks] == [
        (0, 0, 0.0), (0, 0, 0.0)]
    # 100 FLOPs at the default 1e12 FLOP/s
    assert [b.forward_time_s for b in p.blocks] == [100 / 1e12, 100 / 1e12]
    assert (p.outside_bytes, p.outside_early_bytes, p.overhead_bytes) == (0, 0, 0)
    assert [b.backward_overhead_bytes for b in p.blocks] == [30, 40]


def test_a_budget_the_plain_chain_meets_exactly_needs_no_checkpointing() -> None:
    p = synthetic_profile(4, input_bytes=10, interior_bytes=30, forward_flops=100)
    # no checkpointing keeps 30 + 3 · (30 + 10) = 150 B; the last block's backward stage is
    # its 40 beside the 110 before it: 150 B as well, so a budget of 150 B fits it exactly
    # (full segments only: a selective one of no cheap FLOPs would cost nothing)
    best = optimal_under_budget(p, 150, modes=("full",))
    assert best.policy.segments == ()
    assert (best.peak_bytes, best.recompute_flops) == (150, 0)


@pytest.mark.parametrize("budget", [150.0, True, "150"])
def test_a_budget_must_be_a_whole_number_of_bytes(budget: object) -> None:
    p = synthetic_profile(2, input_bytes=10, interior_bytes=30, forward_flops=100)
    with pytest.raises(InputError, match="whole number of bytes"):
        optimal_under_budget(p, budget)  # type: ignore[arg-type]


def _block(path: str, flops: int, time_s: float, input_bytes: int, overhead: int
           ) -> BlockProfile:
    return BlockProfile(path=path, input_bytes=input_bytes, input_saved=input_bytes > 0,
                        interior_bytes=100, must_save_bytes=0, forward_flops=flops,
                        cheap_flops=0, forward_time_s=time_s, cheap_time_s=0.0,
                        backward_overhead_bytes=overhead)


def _two_blocks(time_0: float, time_1: float) -> CheckpointProfile:
    # block 0: 100 B inside, no input, 200 FLOPs, 100 B live in its backward; block 1: 100 B
    # inside and its saved 10 B input, 100 FLOPs, 40 B live in its backward.  Kept whole they
    # hold 100 + 110 = 210 B; under a budget of 150 B (nothing outside) these fit:
    #   block 0 alone checkpointed: keeps 0 + 110 = 110 B; stages 100 (its own backward)
    #     and 40 (block 1's, nothing before it kept)
    #   block 1 alone: keeps 100 + 10 = 110 B; its stage 100 before it + 10 − 10 + 40 = 140
    #   both: keep 0 + 10 B
    return CheckpointProfile(blocks=(_block("blocks.0", 200, time_0, 0, 100),
                                     _block("blocks.1", 100, time_1, 10, 40)),
                             outside_bytes=0, outside_early_bytes=0, overhead_bytes=0,
                             hardware="by hand")


def test_the_least_recompute_time_wins_however_small_the_times() -> None:
    # block 0 alone recomputes 200 FLOPs in 1e-20 s, block 1 alone 100 FLOPs in 2e-20 s, both
    # 300 in 3e-20 s: the fastest is block 0, though it has more FLOPs.  Times this small
    # are told apart only if nothing (as 1 s) is added to every one of them
    best = optimal_under_budget(_two_blocks(1e-20, 2e-20), 150, modes=("full",))
    assert [(s.start, s.stop) for s in best.policy.segments] == [(0, 1)]
    assert (best.recompute_flops, best.recompute_time_s) == (200, 1e-20)


def test_the_budget_search_tries_every_mode_of_a_segment() -> None:
    # modes tried selective first: block 0 alone, selective, keeps its 30 B of matmul outputs
    # and block 1 its 30 + 10 = 40 B: 70 B, past 40 B; fully checkpointed it keeps 0 B
    # (its input is none) and block 1 40 B: peak max(40 (block 1's backward: 40 beside 0),
    # 30 (block 0's own)) = 40 B.  The full segment is there only if the selective one's
    # misfit does not end the search of that segment's modes
    p = synthetic_profile(2, input_bytes=10, interior_bytes=30, forward_flops=100,
                          must_save_bytes=30, cheap_flops=10)
    best = optimal_under_budget(p, 40, modes=("selective", "full"))
    assert [(s.start, s.stop, s.mode) for s in best.policy.segments] == [(0, 1, "full")]
    assert (best.peak_bytes, best.recompute_flops) == (40, 100)
    assert best.policy.name == "optimal within 40 bytes"


def test_ties_in_recompute_time_go_to_fewer_flops() -> None:
    # no time at all for either: block 1 alone (100 FLOPs) beats block 0 alone (200) and
    # both (300)
    best = optimal_under_budget(_two_blocks(0.0, 0.0), 150, modes=("full",))
    assert [(s.start, s.stop) for s in best.policy.segments] == [(1, 2)]
    assert best.recompute_flops == 100


def _record(index: int, module: str, phase: str, created: tuple[tuple[int, int], ...] = (),
            freed: tuple[int, ...] = (), flops: int = 0, category: str = "matmul"
            ) -> OpRecord:
    return OpRecord(index=index, op="aten.mm.default", module=module, phase=phase,
                    category=category, input_shapes=(), input_dtypes=(), output_shapes=(),
                    output_dtypes=(), flops=flops, bytes_read=0, bytes_written=0, covered=True,
                    flops_causal_halved=flops, storages_created=created, storages_freed=freed)


def test_kept_for_backward_counts_saved_and_temporaries_but_not_state() -> None:
    trace = Trace(
        records=(
            _record(0, "M", "forward", ((10, 100), (11, 20), (12, 30), (13, 40), (14, 5))),
            _record(1, "M", "backward", ((15, 1000),), freed=(10,)),
            _record(2, "M", "backward", ((16, 2000),))),
        uncovered={}, device="meta", storages_preexisting=((1, 1000), (2, 7), (3, 64)))
    tags = {1: "parameter", 2: "saved_activation", 10: "saved_activation", 11: "parameter",
            12: "gradient", 13: "optimizer_state"}
    # live as backward starts: the saved input 2 (7 B, from before the step) and the
    # untagged temporary 14 (5 B); 10 is freed by the first backward op, 11-13 are state,
    # 3 is an untagged storage from before the step, 15 and 16 come after: 7 + 5 = 12 B
    assert kept_for_backward_bytes(trace, tags) == 12


def test_profile_blocks_overheads_by_hand() -> None:
    blocks = ("M.blocks.0", "M.blocks.1")
    trace = Trace(
        records=(
            _record(0, "M.blocks.0", "forward", ((10, 100), (11, 8))),
            _record(1, "M.blocks.1", "forward", ((12, 50), (13, 4))),
            _record(2, "M", "forward", ((14, 6), (15, 3))),
            _record(3, "M", "backward", ((16, 2),), freed=(14, 15)),
            _record(4, "M.blocks.1", "backward", ((17, 20),), freed=(12, 10)),
            _record(5, "M", "backward", ((18, 9),), freed=(11, 13, 16))),
        uncovered={}, device="meta", storages_preexisting=((1, 1000), (2, 7)),
        storages_freed_at_end=(2, 17, 18))
    tags = {1: "parameter", 2: "saved_activation", 10: "saved_activation",
            11: "saved_activation", 12: "saved_activation", 13: "saved_activation",
            14: "saved_activation"}
    p = profile_blocks(trace, tags, paths=blocks)
    # block 0 keeps 10 (100 B) inside, its output 11 (8 B) is block 1's saved input; block 1
    # keeps 12 (50 B) inside; its output 13 (4 B), the loss's 14 (6 B) and the model's
    # input 2 (7 B, freed only after the last op) lie outside: 17 B, of which 14 is freed by
    # record 3, before the blocks' backward starts at record 4 (6 B early)
    assert [(b.interior_bytes, b.input_bytes, b.input_saved) for b in p.blocks] == [
        (100, 0, False), (50, 8, True)]
    assert (p.outside_bytes, p.outside_early_bytes) == (17, 6)
    # live but not saved before the blocks' backward (14 counted as not saved: early):
    # 1,000 B of parameters, then + 6 + 3 at record 2 = 1,009 B; record 3 frees those 9
    # and makes 2 (1,002 B)
    assert p.overhead_bytes == 1009
    # record 4 (block 1's backward) frees 12 and 10 and makes 17: live 1,000 + 7 + 8 + 4 +
    # 2 + 20 = 1,041 B, of which saved 7 + 8 + 4 = 19 B, and block 1 owns its input 11
    # (8 B): 1,041 − 19 + 8 = 1,030 B; block 0 runs no backward op of its own here: 0
    assert [b.backward_overhead_bytes for b in p.blocks] == [0, 1030]


BLOCKS_3 = ("M.blocks.0", "M.blocks.1", "M.blocks.2")


def _three_blocks() -> Trace:
    return Trace(
        records=(
            _record(0, "M.blocks.0", "forward", ((20, 100), (21, 8)), flops=10),
            _record(1, "M.blocks.1", "forward", ((22, 50), (23, 4)), flops=20),
            _record(2, "M.blocks.2", "forward", ((24, 30), (25, 2)), flops=40),
            _record(3, "M.blocks.2", "forward", flops=5, category="pointwise"),
            _record(4, "M.blocks.2", "forward", flops=7, category="pointwise"),
            _record(5, "M", "forward", ((26, 6), (27, 1))),
            _record(6, "M.blocks.2", "backward", ((28, 16),), freed=(26, 27, 24)),
            _record(7, "M.blocks.1", "backward", ((29, 10),), freed=(23,)),
            _record(8, "M.blocks.0", "backward", ((30, 5),), freed=(22, 20, 21)),
            _record(9, "M", "backward", freed=(25, 28, 29, 30))),
        uncovered={}, device="meta", storages_preexisting=((1, 1000),))


THREE_TAGS = {1: "parameter", 20: "saved_activation", 21: "saved_activation",
              22: "saved_activation", 24: "saved_activation", 25: "saved_activation",
              26: "saved_activation", 27: "saved_activation"}


def test_profile_blocks_of_three_by_hand() -> None:
    times = [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 0.0, 0.0, 0.0, 0.0]
    p = profile_blocks(_three_blocks(), THREE_TAGS, times, paths=BLOCKS_3, hardware="h100")
    assert p.hardware == "h100"
    assert [b.path for b in p.blocks] == list(BLOCKS_3)
    # outputs: 21 (saved: block 1's saved input), 23 (not saved), 25 (the model's output)
    assert [(b.input_bytes, b.input_saved) for b in p.blocks] == [(0, False), (8, True),
                                                                   (4, False)]
    assert [b.interior_bytes for b in p.blocks] == [100, 50, 30]
    # the matmuls' outputs: 100 + 8, 50 + 4, 30 + 2
    assert [b.must_save_bytes for b in p.blocks] == [108, 54, 32]
    # FLOPs 10, 20, 40 + 5 + 7 = 52, the cheap ones 5 + 7 = 12; seconds 1, 2, 4 + 8 + 16 = 28,
    # the cheap ones 8 + 16 = 24
    assert [(b.forward_flops, b.cheap_flops) for b in p.blocks] == [(10, 0), (20, 0), (52, 12)]
    assert [(b.forward_time_s, b.cheap_time_s) for b in p.blocks] == [
        (1.0, 0.0), (2.0, 0.0), (28.0, 24.0)]
    # outside: the output 25 (2 B), the loss's 26 and 27 (6 + 1 B), those two freed by
    # record 6, the blocks' first backward op: 7 B early
    assert (p.outside_bytes, p.outside_early_bytes) == (9, 7)
    # before the blocks' backward: 1,000 B of parameters + 4 (23, not saved) + 6 + 1 (early,
    # so not counted as saved) = 1,011 B
    assert p.overhead_bytes == 1011
    # record 6 (block 2): live 1,000 + 100 + 8 + 50 + 4 + 2 + 16 = 1,180 B, saved 100 + 8 +
    # 50 + 2 = 160 B, block 2 owning none of them: 1,020 B.  Record 7 (block 1): 23 freed,
    # 29 made: 1,186 B live, saved 160 B, block 1 owning its 50 inside and its 8 B input:
    # 1,186 − 160 + 58 = 1,084 B.  Record 8 (block 0): 22, 20, 21 freed, 30 made: 1,033 B
    # live, saved 2 (the output, no block's), owning nothing: 1,031 B
    assert [b.backward_overhead_bytes for b in p.blocks] == [1031, 1084, 1020]


def test_profile_blocks_without_op_times_has_no_seconds() -> None:
    p = profile_blocks(_three_blocks(), THREE_TAGS, paths=BLOCKS_3)
    assert p.hardware == ""
    assert [(b.forward_time_s, b.cheap_time_s) for b in p.blocks] == [(0.0, 0.0)] * 3


def test_profile_blocks_names_the_first_block_that_made_nothing() -> None:
    trace = Trace(records=(_record(0, "M.blocks.0", "forward", ((20, 8),)),
                           _record(1, "M.blocks.1", "forward"),
                           _record(2, "M.blocks.2", "forward"),
                           _record(3, "M.blocks.0", "backward")),
                  uncovered={}, device="meta")
    with pytest.raises(InputError, match=r"^block M\.blocks\.1 created no tensor in the "
                       "forward pass$"):
        profile_blocks(trace, {}, paths=BLOCKS_3)


def test_a_three_block_prediction_by_hand() -> None:
    p = profile_blocks(_three_blocks(), THREE_TAGS, paths=BLOCKS_3)
    # kept whole: 100 + (50 + 8, its saved input) + 30 (block 2's 4 B input is not saved), and
    # the 9 B outside: 197 B
    assert predict_policy(p, no_checkpointing(3)).saved_bytes == 197


def _hand(interior: int, input_bytes: int, saved: bool, overhead: int) -> BlockProfile:
    return BlockProfile(path="b", input_bytes=input_bytes, input_saved=saved,
                        interior_bytes=interior, must_save_bytes=0, forward_flops=1,
                        cheap_flops=0, forward_time_s=0.0, cheap_time_s=0.0,
                        backward_overhead_bytes=overhead)


# A: 100 B inside, no input, 100 B live in its backward; B: 20 B inside, a 10 B input it does
# not save, 5 B in its backward; C: 20 B inside, a 10 B input it saves, 1,000 B in its backward
A, B, C = _hand(100, 0, False, 100), _hand(20, 10, False, 5), _hand(20, 10, True, 1000)


def _chain(*blocks: BlockProfile) -> CheckpointProfile:
    return CheckpointProfile(blocks=blocks, outside_bytes=0, outside_early_bytes=0,
                             overhead_bytes=0, hardware="by hand")


def test_an_unsaved_input_is_not_kept_by_its_block() -> None:
    # A and B kept whole: 100 + 20 (B's input not saved) = 120 B
    assert predict_policy(_chain(A, B), no_checkpointing(2)).saved_bytes == 120


def test_a_segment_starting_at_an_unsaved_input() -> None:
    # A kept (100 B; its backward 100 B), B recomputed: it keeps its 10 B input, and its
    # backward holds that input (not counted in its 5 B: it does not save it) beside the
    # 100 B before it: 100 + 10 + 5 = 115 B; at the end 110 B kept
    policy = CheckpointPolicy("b", 2, (Segment(1, 2),))
    assert predict_policy(_chain(A, B), policy).peak_bytes == 115


def test_a_segment_brings_back_only_what_its_blocks_save() -> None:
    # one segment of A, B, C: C's backward has A's 100 B and B's 20 B back (not B's unsaved
    # input) beside its own 1,000 B: 1,120 B
    policy = CheckpointPolicy("abc", 3, (Segment(0, 3),))
    assert predict_policy(_chain(A, B, C), policy).peak_bytes == 1120


def test_every_kth_block_wants_a_whole_k() -> None:
    with pytest.raises(InputError, match="k >= 1"):
        every_kth_block(4, 2.0)  # type: ignore[arg-type]


def test_ordinals_of_the_teens_past_a_hundred() -> None:
    # 211 ends in 11: "th", whatever its last digit
    assert _ordinal(211) == "211th"


def test_a_saved_storage_freed_only_at_the_end_is_not_early() -> None:
    # the model's input, storage 10 (3 B, saved, from before the step), freed after the last
    # of the 10 records: outside, late.  Its id is the records' count, which a free-at-end
    # marker must not be confused with
    trace = dataclasses.replace(_three_blocks(), storages_preexisting=((1, 1000), (10, 3)),
                                storages_freed_at_end=(10,))
    p = profile_blocks(trace, {**THREE_TAGS, 10: "saved_activation"}, paths=BLOCKS_3)
    # outside 9 + 3 = 12 B, early still the loss's 7 B
    assert (p.outside_bytes, p.outside_early_bytes) == (12, 7)


def test_a_segment_starting_at_a_saved_input() -> None:
    # A kept (100 B), C recomputed: it keeps its 10 B input, which its own 1,000 B backward
    # figure already counts (C saves it): 100 + 10 − 10 + 1,000 = 1,100 B
    policy = CheckpointPolicy("c", 2, (Segment(1, 2),))
    assert predict_policy(_chain(A, C), policy).peak_bytes == 1100


def test_a_blocks_saved_input_is_its_own_though_the_one_before_is_not() -> None:
    # the three-block trace with block 0's output 21 not saved and block 1's output 23 saved
    tags = {**{k: v for k, v in THREE_TAGS.items() if k != 21}, 23: "saved_activation"}
    p = profile_blocks(_three_blocks(), tags, paths=BLOCKS_3)
    assert [b.input_saved for b in p.blocks] == [False, False, True]
    # before the blocks' backward: 1,000 + 8 (21, not saved) + 6 + 1 (the loss's, early)
    assert p.overhead_bytes == 1015
    # record 6 (block 2): live 1,000 + 100 + 8 + 50 + 4 + 2 + 16 = 1,180 B, saved 100 + 50 + 4
    # + 2 = 156 B, block 2 owning its saved input 23 (4 B): 1,028 B.  Record 7 (block 1): 23
    # freed, 29 made: 1,186 B, saved 152 B, block 1 owning its 50 B inside: 1,084 B.
    # Record 8 (block 0): 1,033 B live, saved 2 B: 1,031 B
    assert [b.backward_overhead_bytes for b in p.blocks] == [1031, 1084, 1028]


def test_a_storage_saved_in_backward_lies_outside_the_blocks() -> None:
    # storage 28 (16 B), made by block 2's backward, tagged saved: no block's inside
    p = profile_blocks(_three_blocks(), {**THREE_TAGS, 28: "saved_activation"},
                       paths=BLOCKS_3)
    assert [b.interior_bytes for b in p.blocks] == [100, 50, 30]
    assert p.outside_bytes == 9 + 16


def _one_block_under_overhead(cheap_flops: int = 0) -> CheckpointProfile:
    # one block: no input (the chain's first), 30 B inside, 100 FLOPs (cheap ones as given),
    # so 30 B live in its backward; 30 B of overhead (nothing outside) beside whatever it keeps
    return synthetic_profile(1, input_bytes=10, interior_bytes=30, forward_flops=100,
                             cheap_flops=cheap_flops, overhead_bytes=30)


def test_a_segment_that_keeps_exactly_the_room_left_and_meets_the_budget_fits() -> None:
    # budget 30 less the 30 B overhead leaves 0 B of room: kept whole the block's 30 B do not
    # fit; checkpointed it keeps 0 B (its input is none), exactly the room, and its backward
    # has 30 B live, exactly the budget: it fits (<=, not <), recomputing its 100 FLOPs; peak
    # the larger of 30 + 0 (overhead and kept) and 30 (the backward)
    best = optimal_under_budget(_one_block_under_overhead(), 30, modes=("full",))
    assert [(s.start, s.stop, s.mode) for s in best.policy.segments] == [(0, 1, "full")]
    assert (best.peak_bytes, best.recompute_flops) == (30, 100)


def test_a_selective_only_search_makes_selective_segments() -> None:
    # only selective tried: the block's segment keeps its 0 B must-save (and no input) and
    # recomputes its 10 cheap FLOPs, not the 100 of a full one
    best = optimal_under_budget(_one_block_under_overhead(cheap_flops=10), 30,
                                modes=("selective",))
    assert [(s.start, s.stop, s.mode) for s in best.policy.segments] == [(0, 1, "selective")]
    assert best.recompute_flops == 10


def test_a_chain_of_no_blocks_whose_overhead_passes_the_budget_is_refused() -> None:
    empty = CheckpointProfile(blocks=(), outside_bytes=0, outside_early_bytes=0,
                              overhead_bytes=50, hardware="by hand")
    # nothing to keep: the peak is the 50 B overhead alone, which a budget of 50 B meets
    assert optimal_under_budget(empty, 50).peak_bytes == 50
    # 40 B leaves −10 B of room: no policy, not the empty one with a peak past the budget
    with pytest.raises(InputError):
        optimal_under_budget(empty, 40)


def test_the_front_drops_a_state_that_keeps_more_bytes_for_the_same_time() -> None:
    fast = _State(kept=100, time_s=1.0, flops=10, segments=())
    tie = _State(kept=200, time_s=1.0, flops=10, segments=())  # more bytes, no faster
    faster = _State(kept=300, time_s=0.5, flops=10, segments=())  # more bytes, but faster
    # sorted by bytes kept: 100, 200, 300; 200 is not strictly faster than 100's (1.0, 10),
    # 300's (0.5, 10) is: the staircase is 100 then 300
    assert _prune([faster, tie, fast]) == [fast, faster]
