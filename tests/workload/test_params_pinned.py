"""Pins of workload/params.py's arithmetic and words (issue 42: its mutants)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tensorledger.workload.params import _routed_expert, _routing_words, active_params, model_params


def test_active_params_floors_the_chosen_share_of_routed_experts() -> None:
    # routed: experts.0.w, 5; total 5 + 4 = 9; active 9 − 5 + ⌊5 · 1 / 2⌋ = 4 + 2 = 6
    named = {"moe.experts.0.w": (5, (5,)), "attn.q": (4, (4,))}
    got = active_params(named, 2, 1)
    assert got == 6 and isinstance(got, int)


def test_active_params_counts_stacked_experts_and_keeps_the_rest() -> None:
    # stacked (3, 2): 6 routed; 3 dense; active 3 + ⌊6 · 2 / 3⌋ = 3 + 4 = 7
    named = {"layer.experts.gate_up_proj": (6, (3, 2)), "norm.w": (3, (3,))}
    assert active_params(named, 3, 2) == 7
    # every expert chosen: all 9 active
    assert active_params(named, 3, 3) == 9


def test_routed_expert_by_index_under_experts() -> None:
    # the index decides, whatever the shape
    assert _routed_expert("layers.0.mlp.experts.3.w1.weight", (5, 7), 8)


def test_routed_expert_by_stacked_first_dimension() -> None:
    assert _routed_expert("mlp.experts.gate_up_proj", (8, 4, 4), 8)
    assert not _routed_expert("mlp.experts.gate_up_proj", (4, 8), 8)
    # "experts" last: nothing after it, the shape decides
    assert _routed_expert("mlp.experts", (8,), 8)
    assert not _routed_expert("mlp.experts", (3,), 8)
    # a 0-dim tensor under experts is not routed
    assert not _routed_expert("mlp.experts.scale", (), 8)


def test_shared_experts_and_other_names_are_not_routed() -> None:
    assert not _routed_expert("mlp.shared_expert.w", (8, 2), 8)
    assert not _routed_expert("mlp.shared_experts.0.w", (8, 2), 8)
    assert not _routed_expert("attn.q", (8, 8), 8)


def test_routing_words() -> None:
    assert _routing_words(8, 2) == "2 of 8 routed experts per token, shared ones always"


def test_model_params_of_a_dense_preset_says_closed_form() -> None:
    counted = model_params("gpt2")
    # GPT-2 small: 124,439,808 parameters (the published count with tied embeddings)
    assert counted.params == 124_439_808
    assert counted.active_params is None and counted.routing == ""
    assert counted.source == "closed-form total from the preset (embeddings and head included)"
    assert counted.model == "gpt2"


def test_model_params_of_a_transformers_built_config_sums_its_tensors(tmp_path: Path) -> None:
    """A Llama config.json transformers builds: the count is the built module's, even though
    the closed forms have a config for it.  Hidden 8, 1 layer, 2 heads of 4 (KV 2), MLP 16,
    vocabulary 32, untied: embeddings and head 2 · 32 · 8 = 512; attention 4 · 8 · 8 = 256;
    MLP 3 · 8 · 16 = 384; two layer norms and the final one 3 · 8 = 24; total 1,176."""
    pytest.importorskip("transformers")
    raw = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "vocab_size": 32,
           "hidden_size": 8, "intermediate_size": 16, "num_hidden_layers": 1,
           "num_attention_heads": 2, "num_key_value_heads": 2,
           "max_position_embeddings": 16, "tie_word_embeddings": False}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(raw))
    counted = model_params(str(path))
    assert counted.params == 1_176 and counted.model == str(path)
    assert counted.source.startswith("sum of parameter numel of ")
    assert counted.source.endswith(", built on fake tensors")
    assert counted.active_params is None and counted.routing == ""


def test_model_params_of_a_moe_preset_gives_active_count_and_routing() -> None:
    """Mixtral 8x7B by hand (as in test_active_params): per layer attention
    4096 · (4096 + 1024 + 1024 + 4096) = 41,943,040, router 8 · 4096 = 32,768, norms 8,192;
    an expert 3 · 4096 · 14,336 = 176,160,768; outside the layers 2 · 32,000 · 4096 + 4096."""
    per_layer_dense = 41_943_040 + 32_768 + 8_192
    expert = 3 * 4096 * 14_336
    outside = 2 * 32_000 * 4096 + 4096
    counted = model_params("mixtral-8x7b")
    assert counted.params == 32 * (per_layer_dense + 8 * expert) + outside
    assert counted.active_params == 32 * (per_layer_dense + 2 * expert) + outside
    assert counted.routing == "2 of 8 routed experts per token, shared ones always"
