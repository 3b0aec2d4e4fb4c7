"""A parameter count's parts and shares, a cache layout's bytes per token per layer and
Gemma's alternating windows at a period of 3 (mutation, issue 42)."""

from __future__ import annotations

from tensorledger.napkin.kvcache import KvLayout, _alternating
from tensorledger.napkin.params import ParameterCount


def _count(mtp: int) -> ParameterCount:
    return ParameterCount(model="m", embeddings_params=10, attention_params=20, mlp_params=30,
                          norms_params=4, head_params=6, total_params=70 + mtp,
                          per_layer_params=27, non_embedding_params=60 + mtp, mtp_params=mtp)


def test_parts_are_in_forward_order_and_mtp_only_when_there_is_one() -> None:
    assert list(_count(0).parts().items()) == [
        ("embeddings", 10), ("attention", 20), ("mlp", 30), ("norms", 4), ("head", 6)]
    assert list(_count(5).parts().items())[-1] == ("mtp", 5)
    assert len(_count(5).parts()) == 6


def test_shares_are_each_part_over_the_total() -> None:
    # 80 in all: 10/80, 20/80, 30/80, 4/80, 6/80, 10/80
    assert _count(10).shares() == {"embeddings": 0.125, "attention": 0.25, "mlp": 0.375,
                                   "norms": 0.05, "head": 0.075, "mtp": 0.125}


def test_bytes_per_token_per_layer() -> None:
    layout = KvLayout(name="k", n_layers=3, n_heads=6, n_kv_heads=2, head_dim=10, v_head_dim=6)
    # 2 kv heads · (10 + 6) = 32 elements; bf16 (the default) 64 bytes, fp8 32, fp32 128
    assert layout.bytes_per_token_per_layer() == 64.0
    assert layout.bytes_per_token_per_layer("fp8") == 32.0
    assert layout.bytes_per_token_per_layer("fp32") == 128.0


def test_every_third_layer_is_global() -> None:
    # layers 1..5 (1-based): the 3rd is global, the others slide over 7 tokens
    assert _alternating(5, 7, 3) == (7, 7, None, 7, 7)
