"""Pipeline schedules' names, placement and checks, and ``--stage-layers``, pinned by hand
(issue 42's mutation run of ``tensorledger.workload.schedules``)."""

from __future__ import annotations

import pytest

from tensorledger.errors import InputError
from tensorledger.workload.schedules import (
    Schedule,
    StageLayers,
    check_schedule,
    resolve_schedule,
)

S = Schedule


def test_which_schedules_hold_several_stages_and_split_the_backward() -> None:
    # GPipe and 1F1B: one stage a rank (torch's PipelineScheduleSingle); the rest several
    assert [s.interleaved for s in S] == [False, False, True, True, True, True]
    assert [s.default_chunks() for s in S] == [1, 1, 2, 2, 2, 2]
    # only the zero-bubble ones run input and weight gradients as two actions
    assert [s.split_backward for s in S] == [False, False, False, False, True, True]


def test_torch_class_names() -> None:
    assert [s.torch_name for s in S] == [
        "ScheduleGPipe", "Schedule1F1B", "ScheduleInterleaved1F1B", "ScheduleLoopedBFS",
        "ScheduleInterleavedZeroBubble", "ScheduleZBVZeroBubble"]


def test_placement_a_loop_or_a_v() -> None:
    # a loop: rank, rank + pp, rank + 2·pp = 1, 1 + 4, 1 + 8
    assert S.INTERLEAVED_1F1B.placement(4, 3, rank=1) == (1, 5, 9)
    assert S.GPIPE.placement(4, 1, rank=3) == (3,)
    # a V: rank and 2·pp − 1 − rank = 2·3 − 1 − 0 = 5; the chunks are not read
    assert S.ZBV.placement(3, 7, rank=0) == (0, 5)
    assert S.ZBV.placement(3, 2, rank=2) == (2, 3)  # 6 − 1 − 2 = 3


@pytest.mark.parametrize(("name", "schedule"), [
    (" GPipe ", S.GPIPE), ("1F1B", S.ONE_F_ONE_B), ("interleaved-1f1b", S.INTERLEAVED_1F1B),
    ("Interleaved1F1B", S.INTERLEAVED_1F1B), ("LoopedBFS", S.LOOPED_BFS),
    ("looped-bfs", S.LOOPED_BFS), ("interleaved-zb", S.INTERLEAVED_ZERO_BUBBLE),
    ("InterleavedZeroBubble", S.INTERLEAVED_ZERO_BUBBLE),
    ("interleaved-zero-bubble", S.INTERLEAVED_ZERO_BUBBLE), ("ZBVZeroBubble", S.ZBV),
    ("zbv", S.ZBV), (S.LOOPED_BFS, S.LOOPED_BFS),
])
def test_every_spelling_resolves(name: str | Schedule, schedule: Schedule) -> None:
    assert resolve_schedule(name) is schedule


def test_an_unknown_schedule_names_the_known_ones() -> None:
    with pytest.raises(InputError, match=r"unknown pipeline schedule 'zb-h1'; known: gpipe, "
                       r"1f1b, interleaved-1f1b, looped-bfs, interleaved-zb, zbv$"):
        resolve_schedule("zb-h1")


@pytest.mark.parametrize(("schedule", "pp", "m", "chunks"), [
    (S.GPIPE, 4, 1, 1),  # GPipe takes any m
    (S.ONE_F_ONE_B, 4, 4, 1),  # m = pp: a micro-batch per stage, just enough
    (S.ZBV, 4, 1, 2),  # exactly two chunks
    (S.LOOPED_BFS, 4, 9, 3),  # no rounds to split into
    (S.INTERLEAVED_1F1B, 4, 8, 2),  # rounds 8 // 4 = 2; 8 % 2 = 0
    (S.INTERLEAVED_1F1B, 4, 3, 2),  # rounds max(1, 3 // 4 = 0) = 1; 3 % 1 = 0
    (S.INTERLEAVED_1F1B, 4, 5, 2),  # rounds 5 // 4 = 1
    (S.INTERLEAVED_ZERO_BUBBLE, 4, 12, 2),  # rounds 3; 12 % 3 = 0
])
def test_schedules_torch_builds_pass(schedule: Schedule, pp: int, m: int, chunks: int) -> None:
    check_schedule(schedule, pp, m, chunks)


@pytest.mark.parametrize(("schedule", "pp", "m", "chunks", "message"), [
    # the list names every schedule of several stages a rank, in the enum's order
    (S.GPIPE, 4, 8, 2, "gpipe runs one stage per rank; --chunks 2 needs a schedule of "
     "several: interleaved-1f1b, looped-bfs, interleaved-zb, zbv$"),
    (S.ONE_F_ONE_B, 4, 8, 2, "1f1b runs one stage per rank"),
    (S.ZBV, 4, 8, 1, "zbv runs exactly 2 stages per rank"),
    (S.ZBV, 4, 8, 3, "got --chunks 3"),
    (S.ONE_F_ONE_B, 4, 3, 1, "--microbatches 3 < 4 stages"),  # 3 = pp − 1
    (S.INTERLEAVED_1F1B, 4, 9, 2, "in 2 equal rounds"),  # 9 // 4 = 2; 9 % 2 = 1
    # 14 // 4 = 3 rounds; 14 % 3 = 2
    (S.INTERLEAVED_ZERO_BUBBLE, 4, 14, 2, "--microbatches 14 does not divide by 3: use a "
     "multiple of 4"),
])
def test_schedules_torch_refuses_are_refused(schedule: Schedule, pp: int, m: int, chunks: int,
                                             message: str) -> None:
    with pytest.raises(InputError, match=message):
        check_schedule(schedule, pp, m, chunks)


def test_stage_layers_parse_shorter_ends() -> None:
    both = StageLayers.parse("first-1,last-1")
    assert (both.given, both.first_less, both.last_less) == ((), 1, 1)
    last = StageLayers.parse(" LAST-2 ")  # trimmed and read in lower case
    assert (last.given, last.first_less, last.last_less) == ((), 0, 2)
    first = StageLayers.parse("first-3")
    assert (first.first_less, first.last_less) == (3, 0)


def test_stage_layers_parse_counts() -> None:
    assert StageLayers.parse("3, 4,...,4,3").given == (3, 4, None, 4, 3)
    assert StageLayers.parse("1").given == (1,)  # 1 is the least count


@pytest.mark.parametrize(("text", "message"), [
    ("first-1,first-2", "names first and last once each"),  # 2 parts, 1 name
    ("...,3", "'...' repeats the count before it"),  # nothing before it
    ("3,...,...", "'...' repeats the count before it"),  # a repeat before it
    ("0,3", "block counts of 1 or more"),
    ("first-1,3", "got 'first-1' in 'first-1,3'"),  # a mix reads as counts
    ("3,,4", "a comma list"),
    ("", "a comma list"),
])
def test_stage_layers_refused(text: str, message: str) -> None:
    with pytest.raises(InputError, match=message):
        StageLayers.parse(text)


@pytest.mark.parametrize(("text", "layers", "stages", "counts"), [
    ("3,4,...,4,3", 14, 4, (3, 4, 4, 3)),  # the repeat stands for 4 − 4 = 0 stages
    ("3,4,...,4,3", 26, 7, (3, 4, 4, 4, 4, 4, 3)),  # 7 − 4 = 3 repeats of 4: 3 + 5·4 + 3
    ("2,...,5,...", 21, 6, (2, 2, 2, 5, 5, 5)),  # 6 − 2 = 4 over 2 gaps: 2 each; 3·2 + 3·5
    ("3,...,4", 7, 2, (3, 4)),  # 2 − 2 = 0 missing: the gap is empty
    ("5,6", 11, 2, (5, 6)),
    ("first-1,last-1", 10, 4, (2, 3, 3, 2)),  # (10 + 2) / 4 = 3 a stage, the ends 1 less
    ("first-2", 7, 3, (1, 3, 3)),  # (7 + 2) / 3 = 3; the first 3 − 2 = 1, still a block
    ("last-1", 11, 3, (4, 4, 3)),  # (11 + 1) / 3 = 4
])
def test_stage_layers_counts(text: str, layers: int, stages: int,
                             counts: tuple[int, ...]) -> None:
    assert StageLayers.parse(text).counts(layers, stages) == counts
    assert sum(counts) == layers


def test_no_stage_layers_is_an_even_cut() -> None:
    assert StageLayers().counts(8, 4) == (2, 2, 2, 2)  # 8 / 4, no end shorter
    assert StageLayers().describe() == "even"


@pytest.mark.parametrize(("text", "layers", "stages", "message"), [
    ("3,4", 8, 3, "gives 2 counts for 3 stages"),  # one missing and no '...'
    ("3,...,4,5", 12, 2, "gives 3 counts for 2 stages"),  # 2 − 3 = −1: too many
    ("2,...,5,...", 21, 5, "gives 2 counts for 5 stages"),  # 5 − 2 = 3 over 2 gaps
    ("3,4", 8, 2, r"--stage-layers 3,4 add up to 7 blocks, not the model's 8"),
    ("first-1,last-1", 9, 4, "9 layers do not split into 4 stages with the first 1 and the "
     "last 1 shorter"),  # (9 + 2) % 4 = 3
    ("first-3", 6, 3, "leaves a stage with no block: 0,3,3"),  # (6 + 3) / 3 = 3; 3 − 3 = 0
])
def test_stage_layers_that_do_not_fit_are_refused(text: str, layers: int, stages: int,
                                                  message: str) -> None:
    with pytest.raises(InputError, match=message):
        StageLayers.parse(text).counts(layers, stages)


@pytest.mark.parametrize(("text", "described"), [
    ("3,4,...,4,3", "3,4,...,4,3"),
    ("first-1,last-2", "first-1,last-2"),
    ("first-1", "first-1"),
    ("last-2", "last-2"),
])
def test_stage_layers_described_as_given(text: str, described: str) -> None:
    assert StageLayers.parse(text).describe() == described
