"""checkpoint.py's hand-written profiles and the budget search pinned: what
``synthetic_profile`` fills in by default, the exact fit of a budget (``<=``, not ``<``), a
budget that is no whole number of bytes, and ties in recompute time broken by FLOPs."""

from __future__ import annotations

import pytest

from tensorledger.errors import InputError
from tensorledger.plan.checkpoint import (
    BlockProfile,
    CheckpointProfile,
    kept_for_backward_bytes,
    optimal_under_budget,
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
            freed: tuple[int, ...] = ()) -> OpRecord:
    return OpRecord(index=index, op="aten.mm.default", module=module, phase=phase,
                    category="matmul", input_shapes=(), input_dtypes=(), output_shapes=(),
                    output_dtypes=(), flops=0, bytes_read=0, bytes_written=0, covered=True,
                    flops_causal_halved=0, storages_created=created, storages_freed=freed)


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
