"""The lecture's deep network by default: ReLU, not checkpointed, fp32."""

from __future__ import annotations

from tensorledger.napkin.activations import deep_network_activations


def test_the_default_deep_network_is_relu_uncheckpointed_in_fp32() -> None:
    # D = 24, L = 3, B = 5: ReLU keeps L + 1 = 4 tensors of B·D = 120 values: 480 values,
    # 4 bytes each: 1920 bytes
    default = deep_network_activations(24, 3, 5)
    assert default == deep_network_activations(24, 3, 5, "relu", False, 4)
    assert (default.activation, default.kept_values, default.kept_bytes) == ("relu", 480, 1920)
