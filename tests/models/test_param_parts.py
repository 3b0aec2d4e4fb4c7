"""The closed-form parameter count equals sum(p.numel()) of the built model, part by part."""

from __future__ import annotations

from collections import Counter

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tensorledger.models import build_model, parameter_parts
from tensorledger.napkin import PRESETS, TransformerConfig, parameter_count


def measured_parts(config: TransformerConfig) -> Counter[str]:
    """sum(p.numel()) per part, from the parameters of the model built on the meta device."""
    model = build_model(config, "meta")
    parts = parameter_parts(model)
    measured: Counter[str] = Counter()
    for name, parameter in model.named_parameters():
        assert parameter.is_meta
        measured[parts[name]] += parameter.numel()
    assert sum(measured.values()) == sum(p.numel() for p in model.parameters())
    return measured


def assert_parts_match(config: TransformerConfig) -> None:
    count = parameter_count(config)
    measured = measured_parts(config)
    expected = {part: params for part, params in count.parts().items() if params}
    assert dict(measured) == expected
    assert sum(measured.values()) == count.total_params


@pytest.mark.parametrize("name", list(PRESETS))
def test_preset_counts_match_built_model(name: str) -> None:
    assert_parts_match(PRESETS[name])


@st.composite
def small_configs(draw: st.DrawFn) -> TransformerConfig:
    n_kv_heads = draw(st.integers(1, 4))
    n_heads = n_kv_heads * draw(st.integers(1, 3))
    positions = draw(st.sampled_from(["learned", "rope"]))
    head_dim = draw(st.integers(1, 6)) * (2 if positions == "rope" else 1)
    norm = draw(st.sampled_from(["layernorm", "rmsnorm"]))
    return TransformerConfig(
        vocab_size=draw(st.integers(1, 50)), context_length=draw(st.integers(1, 40)),
        d_model=draw(st.integers(1, 24)), n_layers=draw(st.integers(1, 3)), n_heads=n_heads,
        n_kv_heads=n_kv_heads, head_dim=head_dim, d_ff=draw(st.integers(0, 40)),
        mlp=draw(st.sampled_from(["gelu", "swiglu"])), norm=norm, positions=positions,
        tied_embeddings=draw(st.booleans()),
        bias=draw(st.booleans()) if norm == "layernorm" else False)


@settings(max_examples=50, deadline=None)
@given(small_configs())
def test_drawn_config_counts_match_built_model(config: TransformerConfig) -> None:
    assert_parts_match(config)


def test_tied_head_shares_the_token_table() -> None:
    model = build_model(PRESETS["gpt2"], "meta")
    assert model.head.weight is model.token_embedding.weight
    assert "head.weight" not in dict(model.named_parameters())
    untied = build_model(PRESETS["tiny"], "meta", torch.bfloat16)
    assert untied.head.weight is not untied.token_embedding.weight
    assert {p.dtype for p in untied.parameters()} == {torch.bfloat16}
