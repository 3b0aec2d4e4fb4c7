"""The lecture's deep network by default (ReLU, not checkpointed, fp32); the reference model's
closed form names its step and refuses a bad size by name."""

from __future__ import annotations

import pytest

from tensorledger.errors import InputError
from tensorledger.napkin.activations import (
    activation_memory,
    deep_network_activations,
    korthikanti_layer_bytes,
)
from tensorledger.napkin.transformer import TransformerConfig


def test_the_default_deep_network_is_relu_uncheckpointed_in_fp32() -> None:
    # D = 24, L = 3, B = 5: ReLU keeps L + 1 = 4 tensors of B·D = 120 values: 480 values,
    # 4 bytes each: 1920 bytes
    default = deep_network_activations(24, 3, 5)
    assert default == deep_network_activations(24, 3, 5, "relu", False, 4)
    assert (default.activation, default.kept_values, default.kept_bytes) == ("relu", 480, 1920)


def test_the_closed_form_names_its_step_and_refuses_by_name() -> None:
    config = TransformerConfig(name="odd", vocab_size=11, context_length=13, d_model=24,
                               n_layers=2, n_heads=3)
    closed = activation_memory(config, 3, 5, 4)
    assert (closed.model, closed.batch, closed.seq_len, closed.dtype_bytes) == ("odd", 3, 5, 4)
    for bad, name in (({"batch": 0, "seq_len": 5}, "batch"), ({"batch": 3, "seq_len": 0},
                                                               "seq_len")):
        with pytest.raises(InputError, match=rf"^{name} must be a whole number >= 1, got 0$"):
            activation_memory(config, **bad)
    with pytest.raises(InputError, match=r"^batch must be a whole number >= 1, got True$"):
        activation_memory(config, True, 5)  # a bool is not a batch


@pytest.mark.parametrize("checkpointed", [False, True])
def test_the_closed_form_parts_add_up(checkpointed: bool) -> None:
    # a second path through the record: its parts, recombined as the docstring states
    config = TransformerConfig(name="odd", vocab_size=11, context_length=13, d_model=24,
                               n_layers=2, n_heads=3)
    m = activation_memory(config, 3, 5, 4, checkpointed)
    assert m.checkpointed is checkpointed
    whole_layer = m.norms_bytes_per_layer + m.attention_bytes_per_layer + m.mlp_bytes_per_layer
    # checkpointed, a layer keeps only its input: b·s·d·4 = 3·5·24·4 = 1440
    assert m.per_layer_bytes == (1440 if checkpointed else whole_layer)
    assert m.layers_bytes == 2 * m.per_layer_bytes
    assert m.total_bytes == m.layers_bytes + m.embeddings_bytes + m.final_norm_bytes + m.loss_bytes
    # the final norm saves what one of a layer's two norms saves
    assert 2 * m.final_norm_bytes == m.norms_bytes_per_layer
    assert m.korthikanti_layer_bytes == korthikanti_layer_bytes(config, 3, 5)
