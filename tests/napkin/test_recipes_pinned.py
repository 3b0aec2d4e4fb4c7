"""A recipe over tensors that include an empty one (a 0-element buffer is a real tensor)."""

from __future__ import annotations

from tensorledger.napkin.recipes import recipe_bytes


def test_an_empty_tensor_adds_a_step_counter_and_no_parameters() -> None:
    r = recipe_bytes("fp32", "adam", [0, 10])
    # 10 params in 2 tensors: 4·10 = 40 B of parameters and of gradients; Adam's two fp32
    # moments 2·4·10 = 80 and a 4-byte step counter per tensor, 2·4 = 8: 88
    assert (r.precision, r.optimizer, r.n_params, r.n_tensors) == ("fp32", "adam", 10, 2)
    assert (r.params_bytes, r.grads_bytes, r.optimizer_bytes, r.step_bytes) == (40, 40, 88, 8)
