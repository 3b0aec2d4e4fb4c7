"""Closed forms of napkin.transformer: published totals, FLOPs by part, training FLOPs."""

from __future__ import annotations

import pytest

from tensorledger.errors import InputError, ModelError, UnknownNameError
from tensorledger.napkin import (
    PRESETS,
    TransformerConfig,
    forward_flops_per_token,
    get_preset,
    parameter_count,
    preset_params,
    transformer_training_flops,
)


def test_gpt2_small_published_total() -> None:
    count = parameter_count(get_preset("gpt2"))
    # tokens 50257·768 = 38,597,376; positions 1024·768 = 786,432
    assert count.embeddings_params == 38_597_376 + 786_432
    # per layer: attention 4·768² + 4·768 = 2,362,368; MLP 8·768² + 3072 + 768 = 4,722,432;
    # two LayerNorms 2·2·768 = 3,072 → 7,087,872; × 12 = 85,054,464; final norm 1,536
    assert count.per_layer_params == 2_362_368 + 4_722_432 + 3_072
    assert count.head_params == 0  # tied
    # 38,597,376 + 786,432 + 85,054,464 + 1,536 = 124,439,808
    assert count.total_params == 124_439_808


def test_llama_2_7b_published_total() -> None:
    count = parameter_count(get_preset("llama-2-7b"))
    # per layer: attention 4·4096² = 67,108,864; MLP 3·4096·11008 = 135,266,304;
    # two RMSNorms 2·4096 = 8,192 → 202,383,360; × 32 = 6,476,267,520
    assert count.per_layer_params == 202_383_360
    # + embeddings 32000·4096 = 131,072,000 + head 131,072,000 + final norm 4,096
    assert count.total_params == 6_476_267_520 + 2 * 131_072_000 + 4_096 == 6_738_415_616


def test_llama_3_8b_published_total() -> None:
    count = parameter_count(get_preset("llama-3-8b"))
    # attention: Q and O 2·4096² = 33,554,432; K and V 2·4096·(8·128) = 8,388,608 → 41,943,040
    assert count.attention_params == 32 * 41_943_040
    # MLP 3·4096·14336 = 176,160,768; norms 8,192 → layer 218,112,000; × 32 = 6,979,584,000
    assert count.per_layer_params == 218_112_000
    # + 2 · 128256·4096 = 1,050,673,152 + final norm 4,096
    assert count.total_params == 6_979_584_000 + 1_050_673_152 + 4_096 == 8_030_261_248


def test_llama_3_70b_published_total() -> None:
    count = parameter_count(get_preset("llama-3-70b"))
    # attention 2·8192² + 2·8192·1024 = 150,994,944; MLP 3·8192·28672 = 704,643,072;
    # norms 16,384 → layer 855,654,400; × 80 = 68,452,352,000
    assert count.per_layer_params == 150_994_944 + 704_643_072 + 16_384
    # + 2 · 128256·8192 = 2,101,346,304 + final norm 8,192
    assert count.total_params == 68_452_352_000 + 2_101_346_304 + 8_192 == 70_553_706_496


def test_gpt2_family_and_405b_totals() -> None:
    # GPT-2 family (Hugging Face checkpoints): 12·L·d² + 13·L·d + (50257 + 1024)·d + 2·d
    for name, d, layers in (("gpt2-medium", 1024, 24), ("gpt2-large", 1280, 36),
                            ("gpt2-xl", 1600, 48)):
        expected = 12 * layers * d * d + 13 * layers * d + (50257 + 1024) * d + 2 * d
        assert parameter_count(get_preset(name)).total_params == expected
    assert parameter_count(get_preset("gpt2-medium")).total_params == 354_823_168
    assert parameter_count(get_preset("gpt2-xl")).total_params == 1_557_611_200
    # 405B: layer 2·16384² + 2·16384·1024 + 3·16384·53248 + 2·16384 = 3,187,703,808
    layer = 2 * 16384**2 + 2 * 16384 * 1024 + 3 * 16384 * 53248 + 2 * 16384
    assert layer == 3_187_703_808
    total = 126 * layer + 2 * 128256 * 16384 + 16384
    assert parameter_count(get_preset("llama-3-405b")).total_params == total == 405_853_388_800


def test_parts_add_up_for_every_preset() -> None:
    for config in PRESETS.values():
        count = parameter_count(config)
        assert sum(count.parts().values()) == count.total_params
        assert count.non_embedding_params == count.total_params - count.embeddings_params


def test_forward_flops_gpt2_by_part() -> None:
    full = forward_flops_per_token(get_preset("gpt2"), 1024, "full")
    # projections: 12 · (2·768·(768 + 2·768) + 2·768·768) = 12 · 4,718,592
    assert full.attention_projections_flops == 12 * 4_718_592 == 56_623_104
    # MLP 12 · 2 · 2 · 768 · 3072 = 113,246,208; head 2 · 768 · 50257 = 77,194,752
    assert full.mlp_flops == 113_246_208
    assert full.head_flops == 77_194_752
    # scores and values, each 12 · 2 · 1024 · 768 = 18,874,368
    assert full.attention_scores_flops == full.attention_values_flops == 18_874_368
    assert full.total_flops == 56_623_104 + 113_246_208 + 77_194_752 + 2 * 18_874_368
    causal = forward_flops_per_token(get_preset("gpt2"), 1024, "causal-halved")
    assert causal.convention == "causal-halved"
    assert causal.attention_scores_flops == 9_437_184  # half of 18,874,368
    assert full.total_flops - causal.total_flops == 18_874_368
    # Kaplan Table 1: 2N + 2·n_layer·n_ctx·d_attn with N the non-embedding parameters,
    # which counts biases (not matmuls) and leaves out the head; remove both to compare.
    count = parameter_count(get_preset("gpt2"))
    biases_and_norms = 12 * (4 * 768 + 3072 + 768 + 4 * 768) + 2 * 768
    matmul_params = count.non_embedding_params - biases_and_norms
    kaplan = 2 * matmul_params + 2 * 12 * 1024 * 768
    assert causal.total_flops - causal.head_flops == kaplan


def test_gqa_shrinks_key_value_projections() -> None:
    flops = forward_flops_per_token(get_preset("llama-3-8b"), 8192, "full")
    # 32 · (2·4096·(4096 + 2·1024) + 2·4096·4096) = 32 · 83,886,080
    assert flops.attention_projections_flops == 32 * 83_886_080
    # scores at s = 8192: 32 · 2 · 8192 · 4096 = 2,147,483,648
    assert flops.attention_scores_flops == 2_147_483_648


def test_training_flops_is_three_forwards() -> None:
    config = get_preset("llama-3-70b")
    training = transformer_training_flops(config, 15e12, 8192, "full")
    forward = forward_flops_per_token(config, 8192, "full")
    assert training.flops_per_token == 3 * forward.total_flops
    # matmul parameters = parameters less the token table, norms (no biases in Llama)
    count = parameter_count(config)
    assert training.matmul_params == count.total_params - 128256 * 8192 - count.norms_params
    assert training.params_flops_per_token == 6 * training.matmul_params
    # attention: 3 · (2 · 80 · 2 · 8192 · 8192) = 3 · 21,474,836,480
    assert training.attention_flops_per_token == 3 * 21_474_836_480
    assert training.flops == training.flops_per_token * 15e12


def test_preset_params_names_its_source() -> None:
    used = preset_params("LLAMA-3-70B")
    assert used.params == 70_553_706_496 and "closed-form" in used.source


@pytest.mark.parametrize(("changes", "fragment"), [
    ({"n_kv_heads": 3}, "multiple of n_kv_heads"),
    ({"d_model": 65}, "not a multiple of n_heads"),
    ({"n_layers": 0}, "n_layers must be"),
    ({"mlp": "relu"}, "unknown mlp"),
    ({"norm": "rmsnorm"}, "RMSNorm has no bias"),
    ({"positions": "rope", "head_dim": 7}, "even head_dim"),
    ({"dropout": 1.0}, "dropout"),
    ({"vocab_size": True}, "vocab_size"),
])
def test_bad_configs_raise_model_error(changes: dict[str, object], fragment: str) -> None:
    base: dict[str, object] = {"vocab_size": 10, "context_length": 8, "d_model": 64,
                               "n_layers": 1, "n_heads": 4}
    with pytest.raises(ModelError, match=fragment):
        TransformerConfig(**{**base, **changes})  # type: ignore[arg-type]


def test_unknown_preset_and_bad_arguments() -> None:
    with pytest.raises(UnknownNameError, match="llama-3-8b"):
        get_preset("llama-9")
    with pytest.raises(InputError, match="convention"):
        forward_flops_per_token(get_preset("tiny"), 8, "quarter")
    with pytest.raises(InputError, match="seq_len"):
        forward_flops_per_token(get_preset("tiny"), 0)


def test_swiglu_default_hidden_size_is_llamas_rule() -> None:
    config = TransformerConfig(vocab_size=10, context_length=8, d_model=4096, n_layers=1,
                               n_heads=32, mlp="swiglu", norm="rmsnorm", bias=False)
    # ⌈8·4096/3⌉ = 10923, rounded up to a multiple of 256 = 11008 (Llama-2-7B)
    assert config.d_ff == 11008


def test_shares_add_up_to_one() -> None:
    from tensorledger.napkin.transformer import get_preset, parameter_count

    count = parameter_count(get_preset("gpt2"))
    shares = count.shares()
    assert sum(shares.values()) == pytest.approx(1.0)
    assert shares["head"] == 0.0  # gpt2 ties its head to the token table
    assert shares["embeddings"] == pytest.approx(
        (50257 * 768 + 1024 * 768) / 124_439_808)  # token + position tables / total
