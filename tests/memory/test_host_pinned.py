"""The host's share of a step on one hand-made trace (mutation, issue 42): each host
category's own high point, a storage freed twice counted once, untagged and device storages
left out, and the work of one phase."""

from __future__ import annotations

from tensorledger.memory.host import host_category_peaks, phase_work
from tensorledger.trace.records import OpRecord, Trace


def _record(i: int, phase: str, flops: int, read: int, written: int,
            created: tuple[tuple[int, int], ...], freed: tuple[int, ...] = ()) -> OpRecord:
    return OpRecord(i, "aten.add_", "optim", phase, "elementwise", (), (), (), (), flops, read,
                    written, True, flops, created, freed)


STEP = Trace(records=(
    _record(0, "forward", 10, 3, 4, ((3, 100), (4, 50))),
    _record(1, "optimizer", 20, 5, 6, ((5, 30),), (3,)),
    _record(2, "optimizer", 7, 1, 2, ((6, 40),), (4, 99)),
    _record(3, "backward", 0, 0, 0, ((7, 16), (8, 20), (9, 130), (10, 1000)), (3, 5)),
), uncovered={}, device="fake:cpu", storages_preexisting=((1, 64), (2, 8)))
TAGS = {1: "host_parameter", 3: "host_temporary", 4: "host_temporary", 5: "host_optimizer_state",
        6: "host_temporary", 7: "host_gradient", 8: "host_optimizer_state",
        9: "host_temporary", 10: "parameter"}


def test_each_host_category_has_its_own_high_point() -> None:
    assert host_category_peaks(STEP, TAGS) == {
        "host_activation": 0,  # none in this step, still a row
        "host_parameter": 64,  # preexisting, never freed (storage 2 is untagged)
        "host_gradient": 16,
        # 30 live after op 1, freed in op 3 before 20 more: never past 30
        "host_optimizer_state": 30,
        # 100 + 50 = 150 in op 0; − 100 − 50 + 40 = 40 by op 2; the second free of storage 3
        # is no free (99 was never alive); + 130 = 170 in op 3
        "host_temporary": 170,
    }


def test_phase_work_counts_ops_flops_and_bytes_of_one_phase() -> None:
    assert phase_work(STEP, "optimizer") == (2, 27, 14)  # ops 1 and 2: 20 + 7; 5+6 + 1+2
    assert phase_work(STEP, "forward") == (1, 10, 7)  # 3 + 4
