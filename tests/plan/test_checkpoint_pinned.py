"""checkpoint.py's hand-written profiles and the budget search pinned: what
``synthetic_profile`` fills in by default, the exact fit of a budget (``<=``, not ``<``), a
budget that is no whole number of bytes, and ties in recompute time broken by FLOPs."""

from __future__ import annotations

import pytest

from tensorledger.errors import InputError
from tensorledger.plan.checkpoint import (
    BlockProfile,
    CheckpointProfile,
    optimal_under_budget,
    synthetic_profile,
)


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


def _block(path: str, flops: int, time_s: float, input_bytes: int) -> BlockProfile:
    return BlockProfile(path=path, input_bytes=input_bytes, input_saved=input_bytes > 0,
                        interior_bytes=100, must_save_bytes=0, forward_flops=flops,
                        cheap_flops=0, forward_time_s=time_s, cheap_time_s=0.0,
                        backward_overhead_bytes=100 + input_bytes)


def test_the_least_recompute_time_wins_however_small_the_times() -> None:
    # two blocks, each 100 B inside; block 1 saves its 10 B input.  Kept whole they hold
    # 100 + 110 = 210 B; a budget of 150 B forces one of them into a segment:
    #   block 0 alone: keeps 0 + 110 = 110 B, recomputes 200 FLOPs in 1e-20 s
    #   block 1 alone: keeps 100 + 10 = 110 B, recomputes 100 FLOPs in 2e-20 s
    # (both together keep 0 B but recompute both).  The faster is block 0, though it has
    # more FLOPs: times this small are told apart only if no 1 s is added to them
    profile = CheckpointProfile(blocks=(_block("blocks.0", 200, 1e-20, 0),
                                        _block("blocks.1", 100, 2e-20, 10)),
                                outside_bytes=0, outside_early_bytes=0, overhead_bytes=0,
                                hardware="by hand")
    best = optimal_under_budget(profile, 150, modes=("full",))
    assert [(s.start, s.stop) for s in best.policy.segments] == [(0, 1)]
    assert (best.recompute_flops, best.recompute_time_s) == (200, 1e-20)
