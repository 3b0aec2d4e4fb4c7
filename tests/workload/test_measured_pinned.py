"""One real step measured tensor by tensor (issue 42's mutation run of
``tensorledger.workload.measured``): what comes back is the workload's, and its forward's
saves are those of ``saved_activations`` run by hand on the same module."""

from __future__ import annotations

import pytest

from tensorledger.workload.measured import measure_step_memory
from tensorledger.workload.saved import saved_activations
from tensorledger.workload.spec import resolve_workload
from tensorledger.workload.step import placement, prepare


def _tiny(step: str = "train"):  # type: ignore[no-untyped-def]
    return resolve_workload("tiny", batch=2, seq=16, optimizer="sgd", precision="fp32",
                            step=step)


def test_the_measured_step_carries_its_workload_and_its_forwards_saves() -> None:
    work = _tiny()
    measured = measure_step_memory(work)
    assert measured.work is work
    with placement(work.device) as target:  # the same step built again, its forward alone
        step = prepare(work, target)
        with step.guard():
            by_hand, _ = saved_activations(step.module, step.loss)
    assert measured.saved == by_hand
    assert measured.saved.total_bytes > 0


def test_a_forward_step_has_no_optimizer_step_to_measure() -> None:
    with pytest.raises(AssertionError, match=r"^a training step"):
        measure_step_memory(_tiny("forward"))
