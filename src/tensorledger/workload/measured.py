"""A second way to the memory of a step, without the trace: run one real training step and
measure its tensors directly — the per-parameter state on the module and optimizer (see
:mod:`.state`), the saved activations through ``saved_tensors_hooks`` (see :mod:`.saved`).
Tests hold the traced timeline against it."""

from __future__ import annotations

from dataclasses import dataclass

from tensorledger.workload.saved import SavedActivations, saved_activations
from tensorledger.workload.spec import Workload
from tensorledger.workload.state import StateBytes, measure_state
from tensorledger.workload.step import placement, prepare

__all__ = ["StepMemory", "measure_step_memory"]


@dataclass(frozen=True)
class StepMemory:
    """The state after one training step and what its forward saved for backward."""

    work: Workload
    state: StateBytes
    saved: SavedActivations


def measure_step_memory(work: Workload) -> StepMemory:
    """One training step of ``work`` (its first), measured tensor by tensor.

    >>> from tensorledger.workload.spec import resolve_workload
    >>> m = measure_step_memory(resolve_workload("tiny", batch=2, seq=16, optimizer="sgd",
    ...                                          precision="fp32"))
    >>> m.state.params_bytes == m.state.grads_bytes == 4 * m.state.n_params
    True
    """
    with placement(work.device) as target:
        step = prepare(work, target)
        assert step.optimizer is not None, "a training step"
        with step.guard():
            saved, loss = saved_activations(step.module, step.loss)
            loss.backward()  # type: ignore[no-untyped-call]
            step.optimizer.step()
        state = measure_state(step.module, step.optimizer)
    return StepMemory(work=work, state=state, saved=saved)
