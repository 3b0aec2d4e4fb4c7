"""FixedDims' refusals, each at its edge: counts from 1 to 2^20 (no bool, no float), a ZeRO
stage of 0 to 3, a known schedule, chunks only where a schedule places several stages (ZBV
exactly 2), a known checkpoint, and stage layers that cut pp × chunks stages of a block or
more; and what stays accepted beside each."""

from __future__ import annotations

import pytest

from tensorledger.errors import InputError
from tensorledger.plan.fixed import LARGEST_COUNT, FixedDims


@pytest.mark.parametrize("name", ["dp", "tp", "pp", "shard", "accumulation", "chunks", "cp",
                                  "ep"])
def test_every_count_is_a_whole_number_from_1_to_the_largest(name: str) -> None:
    assert LARGEST_COUNT == 2 ** 20
    for good in (1, 2 ** 20):
        assert getattr(FixedDims(**{name: good}), name) == good  # type: ignore[arg-type]
    for bad in (0, -1, 2 ** 20 + 1, True, 2.0):
        with pytest.raises(InputError, match=f"fixed {name} must be a whole number from 1 to "
                                             "1,048,576"):
            FixedDims(**{name: bad})  # type: ignore[arg-type]


def test_the_zero_stage_is_0_to_3_and_no_bool() -> None:
    for good in (0, 1, 2, 3):
        assert FixedDims(zero=good).zero == good
    for bad in (4, -1, True, False, 2.5):
        with pytest.raises(InputError, match="ZeRO stage must be 0, 1, 2 or 3"):
            FixedDims(zero=bad)  # type: ignore[arg-type]


def test_a_schedule_is_one_the_planner_prices() -> None:
    assert FixedDims(schedule="zbv").schedule == "zbv"
    with pytest.raises(InputError, match="unknown schedule 'ZBV'; the planner prices gpipe, "
                                         "1f1b, interleaved-1f1b"):
        FixedDims(schedule="ZBV")


def test_chunks_need_a_schedule_of_several_stages_and_zbv_exactly_2() -> None:
    assert FixedDims(schedule="1f1b", chunks=1).chunks == 1  # one stage a rank: fine
    assert FixedDims(schedule="interleaved-1f1b", chunks=3).chunks == 3
    assert FixedDims(schedule="zbv", chunks=2).chunks == 2
    assert FixedDims(chunks=3).chunks == 3  # no schedule fixed: the search picks one
    with pytest.raises(InputError, match="1f1b runs one stage per rank; 2 chunks need one of "
                                         "interleaved-1f1b, looped-bfs, interleaved-zb, zbv"):
        FixedDims(schedule="1f1b", chunks=2)
    for chunks in (1, 3):
        with pytest.raises(InputError, match=rf"zbv runs exactly 2 stages per rank \(a V\), not "
                                             f"{chunks}"):
            FixedDims(schedule="zbv", chunks=chunks)


def test_a_checkpoint_is_a_known_one() -> None:
    assert FixedDims(checkpoint="selective").checkpoint == "selective"
    with pytest.raises(InputError, match="unknown checkpoint 'FULL'; known: none, selective, "
                                         "full"):
        FixedDims(checkpoint="FULL")


def test_stage_layers_cut_pp_times_chunks_stages_of_a_block_or_more() -> None:
    assert FixedDims(pp=2, stage_layers=(1, 3)).stage_layers == (1, 3)
    assert FixedDims(pp=2, stage_layers=(1, 2, 2, 1)).stage_chunks == 2  # 4 stages / pp 2
    assert FixedDims(pp=2, chunks=2, stage_layers=(1, 2, 2, 1)).stage_chunks == 2
    with pytest.raises(InputError, match=r"fix its stages \(--pp\) too"):
        FixedDims(stage_layers=(2, 2))
    for bad in ((), (0, 4), (2, 2, 2)):
        with pytest.raises(InputError, match=r"are not pp \(2\) × chunks stages of 1 block"):
            FixedDims(pp=2, stage_layers=bad)
    with pytest.raises(InputError, match="stage layers give 4 stages, not pp × chunks = 6"):
        FixedDims(pp=2, chunks=3, stage_layers=(1, 2, 2, 1))
