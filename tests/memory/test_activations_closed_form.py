"""The closed-form activation memory of napkin against what autograd really saves."""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tensorledger.models import DeepNetwork, build_model
from tensorledger.napkin import PRESETS, TransformerConfig
from tensorledger.napkin.activations import activation_memory, deep_network_activations
from tensorledger.workload.saved import saved_activations
from tensorledger.workload.step import checkpoint_blocks, lm_loss, placement


def _measured(config: TransformerConfig, batch: int, seq: int, dtype: torch.dtype,
              checkpointed: bool = False) -> int:
    with placement("fake") as device:
        model = build_model(config, device, dtype)
        if checkpointed:
            checkpoint_blocks(model)
        tokens = torch.zeros(batch, seq, dtype=torch.long)
        targets = torch.ones(batch, seq, dtype=torch.long)
        saved, _ = saved_activations(model, lambda: lm_loss(model, tokens, targets))
    return saved.total_bytes


# (napkin's activation form is the dense block's: the mixtures of experts and latent
# attention have none, and `memory` shows none for them; test_moe_memory_has_no_dense_form)
@pytest.mark.parametrize("seq", [32, 96])
@pytest.mark.parametrize("name", sorted(p for p, c in PRESETS.items()
                                        if c.moe is None and c.mla is None))
def test_every_preset_within_5_percent(name: str, seq: int) -> None:
    config = PRESETS[name]
    measured = _measured(config, 1, seq, torch.float32)
    predicted = activation_memory(config, 1, seq, dtype_bytes=4).total_bytes
    assert measured == pytest.approx(predicted, rel=0.05)


@pytest.mark.parametrize("name", ["gpt2", "llama-3-8b", "tiny"])
def test_bf16_and_checkpointed_within_5_percent(name: str) -> None:
    config = PRESETS[name]
    for dtype, width in ((torch.bfloat16, 2), (torch.float32, 4)):
        for checkpointed in (False, True):
            measured = _measured(config, 2, 48, dtype, checkpointed)
            predicted = activation_memory(config, 2, 48, width, checkpointed).total_bytes
            assert measured == pytest.approx(predicted, rel=0.05), (dtype, checkpointed)


def test_llama_fp32_is_exact_term_by_term() -> None:
    # fp32 Llama-style: every term of the closed form is one saved storage, nothing rounded.
    config = PRESETS["tiny"]
    assert _measured(config, 2, 24, torch.float32) == activation_memory(
        config, 2, 24, 4).total_bytes


@st.composite
def _configs(draw: st.DrawFn) -> tuple[TransformerConfig, int, int]:
    kv_heads = draw(st.integers(1, 3))
    heads = kv_heads * draw(st.integers(1, 3))
    head_dim = 2 * draw(st.integers(1, 6))
    llama = draw(st.booleans())
    config = TransformerConfig(
        vocab_size=draw(st.integers(8, 64)), context_length=64,
        d_model=draw(st.integers(4, 48)), n_layers=draw(st.integers(1, 3)), n_heads=heads,
        n_kv_heads=kv_heads, head_dim=head_dim, d_ff=draw(st.integers(4, 96)),
        mlp="swiglu" if llama else "gelu", norm="rmsnorm" if llama else "layernorm",
        positions="rope" if draw(st.booleans()) else "learned",
        tied_embeddings=draw(st.booleans()), bias=not llama and draw(st.booleans()))
    return config, draw(st.integers(1, 3)), draw(st.integers(2, 40))


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_configs())
def test_drawn_small_configs_within_5_percent(drawn: tuple[TransformerConfig, int, int]
                                              ) -> None:
    config, batch, seq = drawn
    torch.set_num_threads(1)
    measured = _measured(config, batch, seq, torch.float32)
    predicted = activation_memory(config, batch, seq, 4).total_bytes
    assert measured == pytest.approx(predicted, rel=0.05)


@pytest.mark.parametrize("activation", ["relu", "gelu"])
@pytest.mark.parametrize("checkpointed", [False, True])
def test_deep_network_closed_form_is_exact(activation: str, checkpointed: bool) -> None:
    d, layers, batch = 12, 4, 3
    net = DeepNetwork(d, layers, activation, checkpointed=checkpointed, device="meta")
    saved, _ = saved_activations(net, lambda: net(torch.ones(batch, d, device="meta")))
    closed = deep_network_activations(d, layers, batch, activation, checkpointed)
    assert saved.total_bytes == closed.kept_bytes
    assert closed.napkin_values == layers * batch * d  # the lecture's L·B·D = 144


def test_deep_network_checkpointing_halves_gelu_but_not_relu() -> None:
    gelu = deep_network_activations(64, 10, 8, "gelu")
    gelu_ck = deep_network_activations(64, 10, 8, "gelu", checkpointed=True)
    relu = deep_network_activations(64, 10, 8, "relu")
    relu_ck = deep_network_activations(64, 10, 8, "relu", checkpointed=True)
    assert gelu.kept_tensors == 20 and gelu_ck.kept_tensors == 10  # 2L → L
    assert relu.kept_tensors == 11 and relu_ck.kept_tensors == 10  # L+1 → L


def test_moe_memory_has_no_dense_form(cli) -> None:  # type: ignore[no-untyped-def]
    """A mixture of experts saves what its routing decides (per chosen expert): the dense
    block's closed form would be a wrong figure, so `memory` gives none for tiny-moe."""
    data = cli("memory", "--model", "tiny-moe", "--batch", "1", "--seq", "16", "--precision",
               "fp32", "--json").json()
    assert data["saved_activation_bytes"] > 0
    assert data["activations_closed_form"] is None
