"""Closed-form counts pinned field by field on shapes where every size differs (mutation,
issue 42): a mixture-of-experts layer's parameters and FLOPs, latent attention's matrices, a
LoRA fine-tune's adapters and frozen base, a KV cache, the active-parameter FLOP count."""

from __future__ import annotations

import pytest

from tensorledger.errors import InputError
from tensorledger.hardware import get_hardware
from tensorledger.napkin.adapters import LoraShape, adapter_counts
from tensorledger.napkin.kvcache import KvLayout, kv_cache
from tensorledger.napkin.moe import (
    MLAConfig,
    MoEConfig,
    MoELayerFlops,
    MoELayerParams,
    mla_attention_params,
    moe_layer_flops,
    moe_layer_params,
)
from tensorledger.napkin.training import training_time
from tensorledger.napkin.transformer import TransformerConfig


def _sparse(**fields: object) -> TransformerConfig:
    return TransformerConfig(name="s", vocab_size=100, context_length=64, n_layers=4,
                             mlp="swiglu", norm="rmsnorm", positions="rope", bias=False,
                             tied_embeddings=False, **fields)  # type: ignore[arg-type]


# d 24, E 5, k 2, d_expert 7, S 3 shared of 11
MOE = _sparse(d_model=24, n_heads=3, moe=MoEConfig(n_experts=5, top_k=2, d_expert=7,
                                                   n_shared=3, d_shared=11))


def test_moe_layer_params_every_field() -> None:
    assert moe_layer_params(MOE) == MoELayerParams(
        router_params=120,  # 24 · 5
        routed_params=2520,  # 5 · 3 · 24 · 7 (504 each)
        shared_params=2376,  # 3 · 24 · (3 · 11)
        total_params=5016,  # 120 + 2520 + 2376
        active_params=3504)  # 120 + 2 · 504 + 2376


def test_moe_layer_flops_dropless_every_field() -> None:
    assert moe_layer_flops(MOE, tokens=10) == MoELayerFlops(
        tokens=10, routed_slots=20,  # 10 · k 2
        router_flops=2400,  # 2 · 10 · 24 · 5
        experts_flops=20160,  # 3 · 2 · 20 · 24 · 7
        shared_flops=47520,  # 3 · 2 · 10 · 24 · 3 · 11
        total_flops=70080)  # 2400 + 20160 + 47520


def test_moe_layer_flops_with_a_capacity_pads_every_expert() -> None:
    capped = _sparse(d_model=24, n_heads=3, moe=MoEConfig(n_experts=5, top_k=2, d_expert=7,
                                                          capacity_factor=1.25))
    got = moe_layer_flops(capped, tokens=10)
    # capacity ⌈1.25 · 10 · 2 / 5⌉ = 5 a expert, 5 experts: 25 slots
    assert got.routed_slots == 25
    assert got.experts_flops == 25200  # 3 · 2 · 25 · 24 · 7
    assert moe_layer_flops(MOE, tokens=1).routed_slots == 2  # one token is enough


@pytest.mark.parametrize("tokens", [0, True, 1.5])
def test_moe_layer_flops_refuses_what_is_not_a_token_count(tokens: object) -> None:
    with pytest.raises(InputError, match=f"^tokens must be a whole number >= 1, got {tokens!r}$"):
        moe_layer_flops(MOE, tokens=tokens)  # type: ignore[arg-type]


def test_latent_attention_params_with_and_without_a_query_latent() -> None:
    # d 24, h 3, r_kv 4, nope 5, rope 2, v 6: query width 3 · 7 = 21
    mla = MLAConfig(kv_lora_rank=4, qk_nope_dim=5, qk_rope_dim=2, v_head_dim=6)
    # query 24 · 21 = 504, kv down 24 · (4 + 2) = 144, kv up 4 · 3 · (5 + 6) = 132,
    # out 3 · 6 · 24 = 432
    assert mla_attention_params(_sparse(d_model=24, n_heads=3, mla=mla)) == 1212
    low = MLAConfig(kv_lora_rank=4, qk_nope_dim=5, qk_rope_dim=2, v_head_dim=6, q_lora_rank=8)
    # query 24 · 8 + 8 · 21 = 360 instead of 504
    assert mla_attention_params(_sparse(d_model=24, n_heads=3, mla=low)) == 1068


# d 128, 4 query heads of 64 (q 256), one kv head (kv 64), SwiGLU of 384, vocab 100, 3 layers:
# query 128·256 = 32,768, key and value 128·64 = 8,192 (not whole NF4 blocks of 16,384),
# output 32,768, gate and up 128·384 = 49,152, down 49,152
DENSE = TransformerConfig(name="d", vocab_size=100, context_length=64, d_model=128, n_layers=3,
                          n_heads=4, n_kv_heads=1, head_dim=64, d_ff=384, mlp="swiglu",
                          norm="rmsnorm", positions="rope", bias=False, tied_embeddings=False)


def test_qlora_counts_every_field() -> None:
    lora = LoraShape(rank=4, targets=("query", "value", "down", "head"), nf4=True)
    got = adapter_counts(DENSE, lora)
    # query 4·(128+256) = 1536, value 4·(128+64) = 768, down 4·(384+128) = 2048
    assert got.layer_params == 4352
    assert got.head_params == 912  # 4 · (128 + 100)
    assert got.params == 13968  # 3 · 4352 + 912
    assert got.layer_rank_values == 12  # r 4 · 3 adapted linears in a block
    assert got.layer_matrices == 229376  # 32768 + 2 · 8192 + 32768 + 3 · 49152
    assert got.layer_quantized == 212992  # all but key and value
    # NF4 at 2 bytes (the default): 32,768 → 16,384 + 512 + (2 + 17) · 2 = 16,934 (twice);
    # 49,152 → 24,576 + 768 + (3 + 17) · 2 = 25,384 (three times)
    assert got.layer_quantized_bytes == 110020
    assert adapter_counts(DENSE, lora, itemsize=2) == got


def test_lora_without_nf4_or_head_quantizes_nothing() -> None:
    got = adapter_counts(DENSE, LoraShape(rank=4, targets=("key", "up")))
    # key 4 · (128 + 64) = 768, up 4 · (128 + 384) = 2048; 3 · 2816
    assert (got.layer_params, got.head_params, got.params) == (2816, 0, 8448)
    assert (got.layer_quantized, got.layer_quantized_bytes) == (0, 0)
    assert got.layer_rank_values == 8


LAYOUT = KvLayout(name="kv", n_layers=4, n_heads=6, n_kv_heads=2, head_dim=10, v_head_dim=6,
                  windows=(None, 5, None, 5))


def test_kv_cache_every_field() -> None:
    got = kv_cache(LAYOUT, batch=3, context=8, dtype="fp8", block_size=4)
    assert (got.model, got.attention, got.dtype) == ("kv", "gqa", "fp8_e4m3fn")
    assert (got.batch, got.context, got.block_size) == (3, 8, 4)
    # 2 kv heads · (10 + 6) = 32 elements a layer; 4 layers at 1 byte: 128
    assert got.bytes_per_token == 128
    # layers hold 8, 5, 8, 5 tokens, in pages of 4: 8 + 8 + 8 + 8 = 32 tokens · 32 bytes
    assert got.sequence_bytes == 1024
    assert got.total_bytes == 3072  # 3 · 1024
    assert (got.sliding_layers, got.n_layers) == (2, 4)


def test_kv_cache_defaults_and_the_largest_page() -> None:
    plain = kv_cache(LAYOUT, 1, 8)
    assert (plain.dtype, plain.block_size) == ("bf16", 1)
    # 2^63 − 1 is still a page size: each of 4 layers one page of it, 32 elements · 2 bytes
    assert kv_cache(LAYOUT, 1, 8, block_size=2**63 - 1).sequence_bytes == 4 * (2**63 - 1) * 64


@pytest.mark.parametrize(("change", "name"), [
    ({"batch": 0}, "batch"), ({"batch": True}, "batch"), ({"context": 0}, "context"),
    ({"block_size": 0}, "block_size"),
])
def test_kv_cache_refuses_by_name(change: dict[str, object], name: str) -> None:
    args: dict[str, object] = {"batch": 1, "context": 8, **change}
    value = change[name]
    with pytest.raises(InputError,
                       match=rf"^{name} must be a whole number from 1 to 2\^63 - 1, "
                             rf"got {value!r}$"):
        kv_cache(LAYOUT, **args)  # type: ignore[arg-type]


def test_active_params_equal_to_the_total_are_accepted_and_a_bad_one_named() -> None:
    h100 = get_hardware("h100")
    # a dense model given as its own active count: 6 · 4e9 · 1e12
    assert training_time(h100, 8, 0.5, params=4e9, tokens=1e12,
                         active_params=4e9).flops == 2.4e22
    with pytest.raises(InputError, match=r"^active params must be a positive number"):
        training_time(h100, 8, 0.5, params=4e9, tokens=1e12, active_params=0)
