"""Issue 39, item 2: KV bytes per token against the published figures, derived by hand."""

from __future__ import annotations

import pytest

from tensorledger.errors import ConfigError, InputError, ModelError, UnknownNameError
from tensorledger.napkin.kvcache import (
    KV_PRESETS,
    KvLayout,
    get_kv_layout,
    kv_cache,
    kv_layout_from_hf,
    resolve_cache_dtype,
)


@pytest.mark.parametrize(("model", "dtype", "expected", "attention"), [
    ("llama-2-7b", "fp16", 2 * 32 * 32 * 128 * 2, "mha"),  # 524,288: K and V, 32 layers, 32 heads
    ("llama-3-8b", "bf16", 2 * 32 * 8 * 128 * 2, "gqa"),  # 131,072: 8 KV heads
    ("llama-3-70b", "bf16", 2 * 80 * 8 * 128 * 2, "gqa"),  # 327,680: 80 layers
    ("deepseek-v3", "bf16", 61 * (512 + 64) * 2, "mla"),  # 70,272: latent + RoPE key, no 2×
    ("falcon-7b", "bf16", 2 * 32 * 1 * 64 * 2, "mqa"),  # 8,192: one KV head
    ("llama-3-8b", "fp8", 2 * 32 * 8 * 128 * 1, "gqa"),  # 65,536: one byte an element
    ("llama-3-8b", "fp4", 2 * 32 * 8 * 128 // 2, "gqa"),  # 32,768: half a byte
])
def test_bytes_per_token_match_the_published_figures(model: str, dtype: str, expected: int,
                                                     attention: str) -> None:
    layout = get_kv_layout(model)
    assert layout.bytes_per_token(dtype) == expected
    assert layout.attention == attention


def test_the_done_when_figures_literally() -> None:
    assert get_kv_layout("llama-2-7b").bytes_per_token("fp16") == 524_288
    assert get_kv_layout("llama-3-8b").bytes_per_token("bf16") == 131_072
    assert get_kv_layout("llama-3-70b").bytes_per_token("bf16") == 327_680
    assert get_kv_layout("deepseek-v3").bytes_per_token("bf16") == 70_272


def test_mla_decompressed_is_what_mha_of_its_heads_would_hold() -> None:
    mla = get_kv_layout("deepseek-v3")
    # 128 heads · (key 128 + 64, value 128) = 40,960 elements a layer, against 576 latent
    assert mla.decompressed_elements_per_token_per_layer == 128 * (192 + 128)
    assert mla.elements_per_token_per_layer == 576


def test_sliding_window_layers_hold_at_most_the_window() -> None:
    mistral = get_kv_layout("mistral-7b-v0.1")
    per_token = 2 * 8 * 128 * 2  # 4,096 bytes a layer
    # context 32,768: each of 32 layers holds 4,096 tokens, not 32,768
    assert kv_cache(mistral, 1, 32768).total_bytes == 32 * 4096 * per_token
    # below the window the cache grows with the context
    assert kv_cache(mistral, 3, 1000).total_bytes == 3 * 32 * 1000 * per_token


def test_hybrid_gemma2_alternates_local_and_global() -> None:
    gemma = get_kv_layout("gemma-2-9b")
    assert gemma.layer_windows[:4] == (4096, None, 4096, None)  # the first layer local
    per_layer_token = 2 * 8 * 256 * 2  # 8,192 bytes
    # 8192 tokens: 21 global layers hold 8192, 21 local ones 4096
    assert kv_cache(gemma, 2, 8192).total_bytes == 2 * (21 * 8192 + 21 * 4096) * per_layer_token
    # a single formula (every layer full) would say 42 · 8192: 4/3 of this
    full = 2 * 42 * 8192 * per_layer_token
    assert full / kv_cache(gemma, 2, 8192).total_bytes == pytest.approx(4 / 3)


def test_paged_blocks_round_each_layer_up() -> None:
    tiny = KvLayout(name="t", n_layers=3, n_heads=6, n_kv_heads=2, head_dim=5, v_head_dim=7)
    # 2 heads · (5 + 7) = 24 elements a token a layer; 17 tokens in blocks of 16 → 32 slots
    assert kv_cache(tiny, 1, 17, "fp32", block_size=16).total_bytes == 3 * 32 * 24 * 4
    assert kv_cache(tiny, 1, 17, "fp32").total_bytes == 3 * 17 * 24 * 4
    assert tiny.attention == "gqa"


def test_hf_configs_give_the_same_caches_as_the_presets() -> None:
    deepseek = {"model_type": "deepseek_v3", "num_hidden_layers": 61, "num_attention_heads": 128,
                "kv_lora_rank": 512, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128,
                "v_head_dim": 128, "hidden_size": 7168}
    assert kv_layout_from_hf(deepseek, "ds").bytes_per_token("bf16") == 61 * 576 * 2
    gemma2 = {"model_type": "gemma2", "num_hidden_layers": 42, "num_attention_heads": 16,
              "num_key_value_heads": 8, "head_dim": 256, "hidden_size": 3584,
              "sliding_window": 4096}
    assert kv_layout_from_hf(gemma2, "g").layer_windows == KV_PRESETS["gemma-2-9b"].layer_windows
    typed = dict(gemma2, model_type="gemma3_text",
                 layer_types=["full_attention"] * 41 + ["sliding_attention"])
    assert kv_layout_from_hf(typed, "g").sliding_layers == 1
    qwen = dict(gemma2, model_type="qwen2", use_sliding_window=False)
    assert kv_layout_from_hf(qwen, "q").sliding_layers == 0  # the window is off
    falcon = {"model_type": "falcon", "num_hidden_layers": 32, "num_attention_heads": 71,
              "hidden_size": 4544, "multi_query": True}
    assert kv_layout_from_hf(falcon, "f").bytes_per_token("bf16") == 2 * 32 * 64 * 2


@pytest.mark.parametrize("raw", [
    {"num_attention_heads": 4},  # no layers
    {"num_hidden_layers": 2, "num_attention_heads": 4},  # no head width
    {"num_hidden_layers": 2, "num_attention_heads": 4, "head_dim": 8, "num_key_value_heads": 3},
    {"num_hidden_layers": True, "num_attention_heads": 4, "head_dim": 8},
    {"num_hidden_layers": 2, "num_attention_heads": 4, "head_dim": 8, "sliding_window": 0},
    {"num_hidden_layers": 2, "num_attention_heads": 4, "head_dim": 8, "sliding_window": 4,
     "layer_types": ["full_attention"]},
    {"num_hidden_layers": 2, "num_attention_heads": 4, "kv_lora_rank": 8,
     "qk_rope_head_dim": 0, "qk_nope_head_dim": 0},
])
def test_bad_configs_are_refused_naming_the_field(raw: dict[str, object]) -> None:
    with pytest.raises(ConfigError):
        kv_layout_from_hf({"model_type": "x", **raw}, "bad")


def test_refusals() -> None:
    with pytest.raises(UnknownNameError):
        get_kv_layout("llama-7")
    with pytest.raises(InputError, match="not stored as bool"):
        resolve_cache_dtype("bool")
    with pytest.raises(InputError):
        kv_cache(get_kv_layout("tiny"), 0, 8)
    with pytest.raises(ModelError):
        KvLayout(name="m", n_layers=2, n_heads=4, n_kv_heads=3, head_dim=8)
