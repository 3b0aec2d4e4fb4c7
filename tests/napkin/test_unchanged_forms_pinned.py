"""Napkin forms unchanged since issue 17, pinned where its mutation run left them untold
(mutation, issue 42): a cache layout's refusals by name and its defaults, the dtypes a cache
may take, per-head query/key norms, experts with every layer dense and a prediction depth, the
non-embedding count, stateless scales, SwiGLU's default width, a bool for a size."""

from __future__ import annotations

from typing import Any

import pytest

from tensorledger.errors import InputError, ModelError
from tensorledger.napkin.kvcache import KvLayout, kv_layout, resolve_cache_dtype
from tensorledger.napkin.moe import MoEConfig
from tensorledger.napkin.params import parameter_count
from tensorledger.napkin.recipes import Optimizer, bytes_per_param
from tensorledger.napkin.transformer import TransformerConfig

LLAMA_LIKE: dict[str, Any] = {"mlp": "swiglu", "norm": "rmsnorm", "positions": "rope",
                              "bias": False}
MAX = 16777216  # 2^24, the largest field a cache layout takes


def _layout(**fields: Any) -> KvLayout:
    base: dict[str, Any] = {"name": "k", "n_layers": 3, "n_heads": 6, "n_kv_heads": 2,
                               "head_dim": 10, "v_head_dim": 6}
    return KvLayout(**{**base, **fields})


def test_a_cache_layout_refuses_each_field_by_name() -> None:
    with pytest.raises(ModelError, match=rf"^model 'k': n_heads must be a whole number from 1 "
                                         rf"to {MAX}, got 0$"):
        _layout(n_heads=0)
    with pytest.raises(ModelError, match=rf"^model 'k': v_head_dim must be a whole number from "
                                         rf"0 to {MAX}, got -1$"):
        _layout(v_head_dim=-1)
    with pytest.raises(ModelError, match=rf"^model 'k': sliding window must be a whole number "
                                         rf"from 1 to {MAX}, got 0$"):
        _layout(windows=(None, 0, 4))
    with pytest.raises(ModelError, match=r"head_dim must be .* got 2\.5$"):
        _layout(head_dim=2.5)  # in range, but no whole number
    with pytest.raises(ModelError, match=r"n_layers must be .* got True$"):
        _layout(n_layers=True)  # a bool is no count
    assert _layout(windows=(None, 1, 1)).cached_tokens(5) == (5, 1, 1)  # a window of 1 token


def test_a_cache_layout_defaults_to_bf16_unpaged() -> None:
    layout = _layout()
    # 2 KV heads · (10 + 6) = 32 elements a token a layer, 3 layers, 2 bytes: 192
    assert layout.bytes_per_token() == 192 == layout.bytes_per_token("bf16")
    # 5 tokens, no paging (pages of 1): 5 · 192 = 960 (pages of 2 would hold 6 tokens)
    assert layout.sequence_bytes(5) == 960 == layout.sequence_bytes(5, "bf16", 1)


def test_the_reference_layout_keeps_the_model_name() -> None:
    config = TransformerConfig(name="named", vocab_size=11, context_length=13, d_model=12,
                               n_layers=2, n_heads=4, n_kv_heads=2)
    assert kv_layout(config) == KvLayout(name="named", n_layers=2, n_heads=4, n_kv_heads=2,
                                         head_dim=3)


def test_a_cache_is_stored_in_4_to_32_bits_of_a_number_format() -> None:
    assert resolve_cache_dtype("int4").bits == 4
    assert resolve_cache_dtype("fp4").bits == 4
    assert resolve_cache_dtype("fp32").bits == 32
    for name in ("tf32", "e8m0", "bool", "fp64"):  # tf32 and e8m0 have the right widths
        with pytest.raises(InputError, match=r"^a KV cache is not stored as "):
            resolve_cache_dtype(name)


def test_per_head_query_and_key_norms_add_two_head_widths_a_layer() -> None:
    config = TransformerConfig(vocab_size=11, context_length=13, d_model=12, n_layers=2,
                               n_heads=2, d_ff=20, qk_norm=True, **LLAMA_LIKE)
    # a layer: two RMSNorm scales of 12 and a query and a key norm of the head width 6: 36;
    # two layers and the final norm: 2 · 36 + 12 = 84
    assert parameter_count(config).norms_params == 84


def test_experts_counted_active_over_sparse_layers_and_the_prediction_depth() -> None:
    moe = MoEConfig(n_experts=4, top_k=1, d_expert=5, first_dense_layers=1)
    config = TransformerConfig(vocab_size=11, context_length=13, d_model=12, n_layers=3,
                               n_heads=2, d_ff=20, moe=moe, mtp_depth=1, **LLAMA_LIKE)
    count = parameter_count(config)
    assert count.active_params is not None
    # 2 sparse layers and the prediction depth's block (the last layer's kind) each run 1 of
    # 4 experts of 3 · 12 · 5 = 180: (2 + 1) · 3 · 180 left out of the active count
    assert count.total_params - count.active_params == (2 + 1) * 3 * 180
    # the token table 11 · 12 (RoPE: no position table) is all the embeddings
    assert count.non_embedding_params == count.total_params - 11 * 12


def test_experts_with_every_layer_dense_leave_every_parameter_active() -> None:
    moe = MoEConfig(n_experts=4, top_k=1, d_expert=5, first_dense_layers=3)
    config = TransformerConfig(vocab_size=11, context_length=13, d_model=12, n_layers=3,
                               n_heads=2, d_ff=20, moe=moe, **LLAMA_LIKE)
    count = parameter_count(config)
    assert count.active_params == count.total_params


def test_an_optimizer_without_states_keeps_no_scales() -> None:
    stateless = Optimizer("scaled", "scales but no state", 0, scale_bytes_per_param=0.5)
    assert bytes_per_param("fp32", stateless).optimizer_bytes_per_param == 0.0
    # with one state the scales count: 1 · 4 + 0.5
    one = Optimizer("scaled1", "one state and its scales", 1, scale_bytes_per_param=0.5)
    assert bytes_per_param("fp32", one).optimizer_bytes_per_param == 4.5


def _swiglu_width(d_model: int) -> int:
    return TransformerConfig(vocab_size=11, context_length=13, d_model=d_model, n_layers=1,
                             n_heads=2, **LLAMA_LIKE).d_ff


def test_swiglu_default_width_is_two_thirds_of_4d_rounded_up_to_256() -> None:
    assert _swiglu_width(96) == 256  # 8 · 96 / 3 = 256 exactly: one multiple
    assert _swiglu_width(100) == 512  # ⌈800 / 3⌉ = 267: two multiples
    assert _swiglu_width(192) == 512  # 8 · 192 / 3 = 512
    assert type(_swiglu_width(100)) is int


def test_a_bool_is_not_a_size() -> None:
    with pytest.raises(ModelError, match=r"^model 'custom': d_model must be a whole number >= 1, "
                                         r"got True$"):
        TransformerConfig(vocab_size=11, context_length=13, d_model=True, n_layers=2, n_heads=1)
