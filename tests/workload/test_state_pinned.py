"""The per-parameter state of one real step, counted by hand (issue 42's mutation run of
``tensorledger.workload.state``)."""

from __future__ import annotations

from torch import nn

from tensorledger.workload.state import state_after_step


def test_adamw_state_of_a_linear_layer_by_hand() -> None:
    # a 4 → 2 linear layer: 8 weights + 2 biases = 10 fp32 parameters in 2 tensors, 40 B
    state = state_after_step(nn.Linear(4, 2), "adamw", "fp32")
    assert (state.precision, state.optimizer) == ("fp32", "adamw")
    assert (state.n_params, state.n_tensors) == (10, 2)
    assert state.params_bytes == 40 and state.grads_bytes == 40  # a gradient each, fp32
    assert state.master_bytes == 0  # fp32 weights need no master copy
    # AdamW: two moments of 40 B and one fp32 step counter (4 B) for each of the 2 tensors
    assert state.optimizer_bytes == 2 * 40 + 2 * 4 == 88
    assert state.total_bytes == 40 + 40 + 88 == 168
