"""The Transformer closed forms pinned field by field, on a config where every size differs
(vocab 11, context 13, d_model 24, 2 layers, 4 query heads of 10 over 2 KV heads, d_ff 36), and
the preset builders against the published configs they copy."""

from __future__ import annotations

import dataclasses

import pytest

from tensorledger.errors import InputError, ModelError
from tensorledger.napkin.transformer import (
    PRESETS,
    ForwardFlops,
    TrainingFlops,
    TransformerConfig,
    _gpt2,
    _llama,
    forward_flops_per_token,
    parameter_count,
    preset_params,
    preset_summaries,
    transformer_training_flops,
)

ODD = TransformerConfig(name="odd", vocab_size=11, context_length=13, d_model=24, n_layers=2,
                        n_heads=4, n_kv_heads=2, head_dim=10, d_ff=36, mlp="swiglu",
                        norm="rmsnorm", positions="rope", tied_embeddings=False, bias=False)


def test_forward_flops_per_token_every_field() -> None:
    # q_dim = 4·10 = 40, kv_dim = 2·10 = 20, s = 5
    # projections 2 layers · (2·24·(40 + 2·20) + 2·40·24) = 2 · (3840 + 1920) = 11520
    # MLP 2 layers · 2 · 3 matrices · 24 · 36 = 10368; head 2 · 24 · 11 = 528
    # scores full 2 layers · 2 · 5 · 40 = 800, halved 400; values the same
    halved = ForwardFlops(model="odd", seq_len=5, convention="causal-halved", embeddings_flops=0,
                          attention_projections_flops=11520, attention_scores_flops=400,
                          attention_values_flops=400, mlp_flops=10368, norms_flops=0,
                          head_flops=528, total_flops=11520 + 400 + 400 + 10368 + 528)
    assert forward_flops_per_token(ODD, 5) == halved
    full = dataclasses.replace(halved, convention="full", attention_scores_flops=800,
                               attention_values_flops=800, total_flops=11520 + 1600 + 10368 + 528)
    assert forward_flops_per_token(ODD, 5, "full") == full
    # the default sequence is the context, 13: halved scores 2 · 13 · 40 = 1040
    assert forward_flops_per_token(ODD).seq_len == 13
    assert forward_flops_per_token(ODD).attention_scores_flops == 1040


def test_one_token_of_context_is_enough_and_a_bool_is_not_a_length() -> None:
    # s = 1: halved scores 2 layers · 1 · 40 = 80
    assert forward_flops_per_token(ODD, 1).attention_scores_flops == 80
    for bad in (0, True):
        with pytest.raises(InputError, match=r"^seq_len must be a whole number >= 1"):
            forward_flops_per_token(ODD, bad)


def test_training_flops_every_field() -> None:
    # matmul FLOPs outside attention 11520 + 10368 + 528 = 22416 → 11208 matmul params;
    # 6 · 11208 = 67248; attention 3 · (400 + 400) = 2400; per token 69648 = 3 · 23216
    t = transformer_training_flops(ODD, 7.0, 5)
    assert t == TrainingFlops(model="odd", seq_len=5, convention="causal-halved", tokens=7.0,
                              matmul_params=11208, params_flops_per_token=67248,
                              attention_flops_per_token=2400, flops_per_token=69648,
                              flops=69648 * 7.0)
    assert isinstance(t.matmul_params, int)
    # the default convention is causal-halved; no tokens is no training
    assert transformer_training_flops(ODD, 7.0) == transformer_training_flops(
        ODD, 7.0, None, "causal-halved")
    with pytest.raises(InputError, match=r"^tokens must be a positive number"):
        transformer_training_flops(ODD, 0.0)


def test_parameter_count_names_its_model() -> None:
    # per layer: q 24·40, k and v 2·24·20, o 40·24 = 2880; MLP 3·24·36 = 2592; norms 2·24
    # two layers 2·5520 = 11040, final norm 24, embedding and head 2·11·24 = 528
    count = parameter_count(ODD)
    assert (count.model, count.total_params) == ("odd", 11040 + 24 + 528)
    p = preset_params("gpt2")
    assert (p.model, p.params) == ("gpt2", parameter_count(PRESETS["gpt2"]).total_params)


def test_preset_summaries_are_every_preset_with_its_count() -> None:
    # a second path: the preset table and parameter_count, one by one
    rows = preset_summaries()
    assert [r.name for r in rows] == list(PRESETS)
    for row in rows:
        assert row.config is PRESETS[row.name]
        assert row.params == parameter_count(PRESETS[row.name])


def test_llama_builder_matches_the_published_config() -> None:
    # Meta-Llama-3-8B config.json: hidden_size 4096, intermediate_size 14336, 32 layers, 32
    # heads, 8 key_value heads, vocab 128256, max_position_embeddings 8192, rms_norm_eps 1e-5,
    # rope_theta 500000, tie_word_embeddings false, no biases, SiLU-gated MLP
    published = TransformerConfig(name="llama-3-8b", vocab_size=128256, context_length=8192,
                                  d_model=4096, n_layers=32, n_heads=32, n_kv_heads=8,
                                  head_dim=128, d_ff=14336, mlp="swiglu", norm="rmsnorm",
                                  positions="rope", tied_embeddings=False, bias=False,
                                  dropout=0.0, norm_eps=1e-5, rope_theta=500000.0)
    built = _llama("llama-3-8b", 128256, 8192, 4096, 32, 32, 8, 14336, 500000.0)
    assert built == published == PRESETS["llama-3-8b"]


def test_gpt2_builder_matches_the_published_config() -> None:
    # GPT-2 medium (Radford et al. 2019, Table 2; HF config n_embd 1024, n_layer 24, n_head
    # 16, n_ctx 1024, vocab 50257, layer_norm_epsilon 1e-5, tied head, biases, GELU 4×)
    published = TransformerConfig(name="gpt2-medium", vocab_size=50257, context_length=1024,
                                  d_model=1024, n_layers=24, n_heads=16, n_kv_heads=16,
                                  head_dim=64, d_ff=4096, mlp="gelu", norm="layernorm",
                                  positions="learned", tied_embeddings=True, bias=True,
                                  dropout=0.0, norm_eps=1e-5, rope_theta=10000.0)
    assert _gpt2("gpt2-medium", 1024, 24, 16) == published == PRESETS["gpt2-medium"]


def test_default_d_ff() -> None:
    base = dict(vocab_size=11, context_length=13, d_model=24, n_layers=2, n_heads=3)
    # GELU: 4 · 24 = 96
    assert TransformerConfig(**base).d_ff == 96  # type: ignore[arg-type]
    # SwiGLU: ⌈8 · 24 / 3⌉ = 64, rounded up to a multiple of 256: 256
    swiglu = TransformerConfig(**base, mlp="swiglu", norm="rmsnorm", bias=False)  # type: ignore[arg-type]
    assert swiglu.d_ff == 256


@pytest.mark.parametrize(("change", "message"), [
    ({"d_model": 0}, "model 'probe': d_model must be a whole number >= 1, got 0"),
    ({"n_kv_heads": -1}, "model 'probe': n_kv_heads must be a whole number >= 0 (0 derives it), "
                         "got -1"),
    ({"norm_eps": 0.0}, "model 'probe': norm_eps and rope_theta must be positive"),
    ({"rope_theta": 0.0}, "model 'probe': norm_eps and rope_theta must be positive"),
])
def test_a_refused_config_says_which_size_and_what_was_wanted(change: dict[str, object],
                                                               message: str) -> None:
    fields: dict[str, object] = dict(name="probe", vocab_size=11, context_length=13, d_model=24,
                                     n_layers=2, n_heads=3)
    with pytest.raises(ModelError) as caught:
        TransformerConfig(**{**fields, **change})  # type: ignore[arg-type]
    assert str(caught.value) == message


def test_small_positive_eps_and_theta_are_fine() -> None:
    config = TransformerConfig(vocab_size=11, context_length=13, d_model=24, n_layers=2,
                               n_heads=3, norm_eps=1e-9, rope_theta=0.5)
    assert (config.norm_eps, config.rope_theta) == (1e-9, 0.5)
