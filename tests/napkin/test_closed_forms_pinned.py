"""Closed forms at configurations where the usual shortcuts give a different answer: heads ×
head_dim ≠ d_model, grouped-query attention, untied embeddings, learned against rotary
positions, MFU ≠ 1, and device counts on exact multiples.

Two configurations of the same widths: d_model 40, 6 query heads of 8 (q_dim 48 ≠ 40), 3
key/value heads (kv_dim 24), d_ff 72, vocabulary 100, context 32, 3 layers.
"""

from __future__ import annotations

import math

import pytest

from tensorledger.hardware import get_hardware
from tensorledger.napkin import (
    TransformerConfig,
    devices_for_duration,
    devices_needed,
    flop_budget,
    forward_flops_per_token,
    parameter_count,
    training_time,
    transformer_training_flops,
)
from tensorledger.napkin.activations import activation_memory, korthikanti_layer_bytes

H100 = get_hardware("h100")
PEAK = 989.5e12  # dense bf16

LLAMA_LIKE = TransformerConfig(vocab_size=100, context_length=32, d_model=40, n_layers=3,
                               n_heads=6, n_kv_heads=3, head_dim=8, d_ff=72, mlp="swiglu",
                               norm="rmsnorm", positions="rope", tied_embeddings=False,
                               bias=False, name="llama-like")
GPT_LIKE = TransformerConfig(vocab_size=100, context_length=32, d_model=40, n_layers=3,
                             n_heads=6, n_kv_heads=3, head_dim=8, d_ff=72, name="gpt-like")


def test_configs_are_the_shapes_that_matter() -> None:
    for config in (LLAMA_LIKE, GPT_LIKE):
        assert (config.q_dim, config.kv_dim, config.d_model) == (48, 24, 40)


def test_parameter_count_with_gqa_rope_and_an_untied_head() -> None:
    count = parameter_count(LLAMA_LIKE)
    # per layer: Q 40·48 + K, V 2·40·24 + O 48·40 = 1920 + 1920 + 1920 = 5760;
    # SwiGLU 3·40·72 = 8640; two RMSNorm scales 2·40 = 80
    assert count.per_layer_params == 5760 + 8640 + 80 == 14480
    assert count.attention_params == 3 * 5760 == 17280
    assert count.mlp_params == 3 * 8640 == 25920
    assert count.norms_params == 3 * 80 + 40 == 280  # and the final norm
    assert count.embeddings_params == 100 * 40 == 4000  # rotary: no position table
    assert count.head_params == 100 * 40 == 4000  # untied: a second V·d matrix
    assert count.total_params == 4000 + 17280 + 25920 + 280 + 4000 == 51480


def test_parameter_count_with_learned_positions_biases_and_a_tied_head() -> None:
    count = parameter_count(GPT_LIKE)
    # attention 5760 + biases q 48 + k, v 2·24 + o 40 = 5896; GELU MLP 2·40·72 + 72 + 40 =
    # 5872; two LayerNorms with shifts 2·2·40 = 160
    assert count.per_layer_params == 5896 + 5872 + 160 == 11928
    assert count.embeddings_params == 100 * 40 + 32 * 40 == 5280  # token and position tables
    assert count.head_params == 0  # tied
    assert count.total_params == 5280 + 3 * 11928 + 80 == 41144


def test_forward_flops_count_attention_scores_over_heads_times_head_dim() -> None:
    full = forward_flops_per_token(LLAMA_LIKE, 20, "full")
    # Q, K, V: 2·40·(48 + 2·24) = 7680; O: 2·48·40 = 3840; per layer 11520, 3 layers
    assert full.attention_projections_flops == 3 * (7680 + 3840) == 34560
    # scores: 2·s·q_dim per token and layer = 2·20·48 = 1920 (d_model would give 1600)
    assert full.attention_scores_flops == 3 * 2 * 20 * 48 == 5760
    assert full.attention_values_flops == 5760
    assert full.mlp_flops == 3 * 2 * 3 * 40 * 72 == 51840
    assert full.head_flops == 2 * 40 * 100 == 8000
    assert full.total_flops == 34560 + 5760 + 5760 + 51840 + 8000 == 105920
    halved = forward_flops_per_token(LLAMA_LIKE, 20, "causal-halved")
    assert (halved.attention_scores_flops, halved.attention_values_flops) == (2880, 2880)
    assert halved.total_flops == 105920 - 5760 == 100160
    # the sequence length defaults to the context, 32: 3·2·32·48 = 9216
    assert forward_flops_per_token(LLAMA_LIKE, convention="full").attention_scores_flops == 9216
    # a tied head still does its matmul: 2·d·V per token
    assert forward_flops_per_token(GPT_LIKE, 20, "full").head_flops == 8000


def test_training_flops_with_gqa() -> None:
    t = transformer_training_flops(LLAMA_LIKE, 1000.0, 20, "full")
    assert t.matmul_params == (34560 + 51840 + 8000) // 2 == 47200
    assert t.params_flops_per_token == 6 * 47200 == 283200
    assert t.attention_flops_per_token == 3 * (5760 + 5760) == 34560
    assert t.flops_per_token == 283200 + 34560 == 317760 == 3 * 105920
    assert t.flops == 317760 * 1000.0


# ---- time, budget and devices at MFU 0.4 on an H100 (989.5e12 dense bf16)

def test_flop_budget_applies_mfu() -> None:
    budget = flop_budget(H100, 3, 1000.0, mfu=0.4)
    assert budget.flops == pytest.approx(989.5e12 * 0.4 * 3 * 1000.0)  # 1.1874e18, not 2.97e18
    assert budget.steps[-1].value == budget.flops
    assert budget.mfu == 0.4


def test_training_time_applies_mfu_and_count() -> None:
    result = training_time(H100, 3, 0.4, flops=1.1874e18)
    assert result.time_s == pytest.approx(1000.0)  # 1.1874e18 / (989.5e12 · 0.4 · 3)
    assert result.cluster_flop_per_s == pytest.approx(PEAK * 0.4 * 3)


@pytest.mark.parametrize(("devices_worth", "expected"), [
    (5.0, 5),    # an exact multiple: 5 devices, not 6
    (5.5, 6),    # half a device more needs a whole one
    (0.01, 1),   # never fewer than one
])
def test_devices_for_a_deadline(devices_worth: float, expected: int) -> None:
    per_device = PEAK * 0.4 * 1000.0  # FLOPs one device does in 1000 s at MFU 0.4
    result = devices_for_duration(H100, 1000.0, 0.4, flops=devices_worth * per_device)
    assert result.devices_exact == pytest.approx(devices_worth)  # at MFU 1: 0.4 × as many
    assert result.devices == expected
    assert result.time_days_with_devices == pytest.approx(
        devices_worth * per_device / (PEAK * 0.4 * expected) / 86400)
    assert result.steps[-1].value == expected


def test_devices_needed_on_an_exact_multiple_of_memory() -> None:
    # mixed-bf16 AdamW: 4 + 4 + 8 = 16 bytes per parameter; 15e9 parameters = 240e9 bytes,
    # exactly 3 H100s of 80e9
    assert devices_needed(H100, 15e9, "mixed-bf16", "adamw").devices == 3
    assert devices_needed(H100, 15e9 + 1e6, "mixed-bf16", "adamw").devices == 4
    assert devices_needed(H100, 1.0, "mixed-bf16", "adamw").devices == 1
    assert math.isclose(devices_needed(H100, 15e9, "mixed-bf16", "adamw").total_bytes, 240e9)


# ---- activation memory: rotary tables by dtype, learned-position bytes, Korthikanti's s²

def test_activations_with_rope_in_16_bits() -> None:
    m = activation_memory(LLAMA_LIKE, batch=2, seq_len=20, dtype_bytes=2)
    n = 2 * 20  # tokens
    # RMSNorm: fp32 input 4·n·d + fp32 rsqrt 4·n + fp32 normalised 4·n·d + output n·d·2
    assert m.norms_bytes_per_layer == 2 * (6400 + 160 + 6400 + 3200) == 32320
    # q, k, v 40·96·2 + output 40·48·2 + fp32 log-sum-exp 4·2·6·20; cos and sin cast apart
    # for q and k in 16 bits: four tables of s·head_dim = 20·8 at 2 bytes
    assert m.attention_bytes_per_layer == 7680 + 3840 + 960 + 4 * 20 * 8 * 2 == 13760
    assert m.mlp_bytes_per_layer == 4 * n * 72 * 2 == 23040
    assert m.per_layer_bytes == 32320 + 13760 + 23040 == 69120
    assert m.embeddings_bytes == 8 * n == 320  # token ids only: no position index
    assert m.loss_bytes == n * 100 * 2 + 8 * n + 4 == 8324
    assert m.total_bytes == 3 * 69120 + 320 + 16160 + 8324 == 232164


def test_activations_with_rope_in_fp32() -> None:
    m = activation_memory(LLAMA_LIKE, batch=2, seq_len=20, dtype_bytes=4)
    # two fp32 tables (cos, sin) of 20·8: 2·160·4 = 1280 (four 16-bit ones are also 1280,
    # so the width and the count are pinned by this test and the one above together)
    assert m.attention_bytes_per_layer == 40 * 96 * 4 + 40 * 48 * 4 + 960 + 2 * 20 * 8 * 4
    assert m.attention_bytes_per_layer == 25280


def test_activations_with_learned_positions_and_checkpointing() -> None:
    m = activation_memory(GPT_LIKE, batch=2, seq_len=20, dtype_bytes=4)
    # LayerNorm: input and output n·d·4 each + fp32 mean and rstd 2·4·n
    assert m.norms_bytes_per_layer == 2 * (6400 + 320 + 6400) == 26240
    assert m.attention_bytes_per_layer == 15360 + 7680 + 960 == 24000  # no rotary tables
    assert m.mlp_bytes_per_layer == 2 * 40 * 72 * 4 == 23040  # GELU: input and output
    assert m.embeddings_bytes == 8 * 40 + 8 * 20 == 480  # token ids and the position index
    assert m.total_bytes == 3 * 73280 + 480 + 13120 + 16324 == 249764
    kept = activation_memory(GPT_LIKE, batch=2, seq_len=20, dtype_bytes=4, checkpointed=True)
    assert kept.per_layer_bytes == 40 * 40 * 4 == 6400  # each layer keeps its input
    assert kept.total_bytes == 3 * 6400 + 480 + 13120 + 16324 == 49124


def test_korthikanti_keeps_the_s_squared_term() -> None:
    # s·b·h·34 + 5·a·s²·b = 20·2·40·34 + 5·6·20²·2 = 54400 + 24000
    assert korthikanti_layer_bytes(LLAMA_LIKE, 2, 20) == 54400 + 24000 == 78400
    # doubling s doubles the first term and quadruples the second
    assert korthikanti_layer_bytes(LLAMA_LIKE, 2, 40) == 2 * 54400 + 4 * 24000
    assert activation_memory(LLAMA_LIKE, 2, 20).korthikanti_layer_bytes == 78400
