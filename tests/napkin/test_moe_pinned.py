"""The mixture-of-experts and latent-attention configs pinned field by field (mutation, issue
42): the refusals at each boundary by name, the capacity's rounding, the preset builders
against the published config.json files (the builders run at import, before a mutant is
switched on, so these tests call them again)."""

from __future__ import annotations

import math

import pytest

from tensorledger.errors import InputError, ModelError
from tensorledger.napkin.moe import MLAConfig, MoEConfig, mla_norm_params
from tensorledger.napkin.transformer import (
    PRESETS,
    TransformerConfig,
    _deepseek_v3,
    _moe_presets,
    _sparse,
)


def test_the_smallest_moe_is_accepted_and_d_shared_defaults_to_d_expert() -> None:
    # E = 2 (the least), k = 1 and k = E (both ends), d_expert 1, S = 0, first dense 0
    low = MoEConfig(n_experts=2, top_k=1, d_expert=1)
    assert low.d_shared == 1  # 0 takes d_expert
    assert MoEConfig(n_experts=3, top_k=3, d_expert=5, n_shared=0, d_shared=0,
                     first_dense_layers=0).d_shared == 5
    assert MoEConfig(n_experts=3, top_k=2, d_expert=5, d_shared=7).d_shared == 7


@pytest.mark.parametrize(("change", "message"), [
    ({"n_experts": 1}, "mixture of experts: n_experts must be a whole number >= 2, got 1"),
    ({"d_expert": 0}, "mixture of experts: d_expert must be a whole number >= 1, got 0"),
    ({"d_expert": True}, "mixture of experts: d_expert must be a whole number >= 1, got True"),
    ({"d_expert": 2.5}, "mixture of experts: d_expert must be a whole number >= 1, got 2.5"),
    ({"n_shared": -1}, "mixture of experts: n_shared must be a whole number >= 0, got -1"),
    ({"d_shared": -1}, "mixture of experts: d_shared must be a whole number >= 0, got -1"),
    ({"first_dense_layers": -1},
     "mixture of experts: first_dense_layers must be a whole number >= 0, got -1"),
    ({"top_k": True}, r"mixture of experts: top_k \(True\) must be between 1 and n_experts \(3\)"),
    ({"top_k": 0}, r"mixture of experts: top_k \(0\) must be between 1 and n_experts \(3\)"),
    ({"top_k": 4}, r"mixture of experts: top_k \(4\) must be between 1 and n_experts \(3\)"),
    ({"routed_scale": -0.5}, "mixture of experts: routed_scale must be a finite number >= 0"),
    ({"capacity_factor": math.inf},
     "mixture of experts: capacity_factor must be a finite number >= 0"),
    ({"aux_loss_coef": "1"}, "mixture of experts: aux_loss_coef must be a finite number >= 0"),
    ({"bias_update_rate": 0.001}, "mixture of experts: bias_update_rate updates the expert bias"),
])
def test_a_refused_moe_names_its_field(change: dict[str, object], message: str) -> None:
    fields: dict[str, object] = {"n_experts": 3, "top_k": 2, "d_expert": 5, **change}
    with pytest.raises(ModelError, match=f"^{message}"):
        MoEConfig(**fields)  # type: ignore[arg-type]


def test_a_bias_update_with_its_bias_is_accepted() -> None:
    moe = MoEConfig(n_experts=3, top_k=2, d_expert=5, expert_bias=True, bias_update_rate=0.001)
    assert moe.bias_update_rate == 0.001


def test_capacity_at_one_token_and_its_rounding() -> None:
    moe = MoEConfig(n_experts=8, top_k=2, d_expert=4, capacity_factor=1.25)
    # ⌈1.25 · 1 · 2 / 8⌉ = ⌈0.3125⌉ = 1, at most 1 token
    assert moe.capacity(tokens=1) == 1
    with pytest.raises(InputError, match=r"^a router sees 1 token or more, got 0"):
        moe.capacity(tokens=0)
    # 0.25 · 17 · 1 = 4.25 over E = 2: ⌈2.125⌉ = 3 (rounding the product to a whole 4 gives 2)
    quarter = MoEConfig(n_experts=2, top_k=1, d_expert=4, capacity_factor=0.25)
    assert quarter.capacity(tokens=17) == 3
    # 1.0000000002 · 2 · 1 = 2.0000000004, rounded to 9 digits 2.0: ⌈2 / 2⌉ = 1 (kept to 10
    # digits it would be ⌈1.0000000002⌉ = 2)
    near = MoEConfig(n_experts=2, top_k=1, d_expert=4, capacity_factor=1.0000000002)
    assert near.capacity(tokens=2) == 1


def test_describe_names_the_routing() -> None:
    assert (MoEConfig(n_experts=8, top_k=2, d_expert=4).describe()
            == "top-2 of 8 routed experts, softmax router, dropless")
    assert (MoEConfig(n_experts=6, top_k=3, d_expert=4, n_shared=2, router="sigmoid",
                      expert_bias=True, capacity_factor=1.25).describe()
            == "top-3 of 6 routed experts + 2 shared, sigmoid router, expert bias, "
               "capacity factor 1.25 (tokens past it dropped)")


def test_the_smallest_latent_attention_is_accepted() -> None:
    mla = MLAConfig(kv_lora_rank=1, qk_nope_dim=1, qk_rope_dim=2, v_head_dim=1, q_lora_rank=0)
    assert mla.qk_head_dim == 3  # 1 + 2
    assert MLAConfig(kv_lora_rank=3, qk_nope_dim=5, qk_rope_dim=4, v_head_dim=7).qk_head_dim == 9


@pytest.mark.parametrize(("change", "message"), [
    ({"kv_lora_rank": 0}, "latent attention: kv_lora_rank must be a whole number >= 1, got 0"),
    ({"qk_nope_dim": 0}, "latent attention: qk_nope_dim must be a whole number >= 1, got 0"),
    ({"v_head_dim": 0}, "latent attention: v_head_dim must be a whole number >= 1, got 0"),
    ({"q_lora_rank": -1}, "latent attention: q_lora_rank must be a whole number >= 0, got -1"),
    ({"qk_rope_dim": 0}, "latent attention: qk_rope_dim must be a whole number >= 2, got 0"),
    ({"qk_rope_dim": 3}, "latent attention: qk_rope_dim must be even"),
])
def test_a_refused_latent_attention_names_its_field(change: dict[str, object],
                                                    message: str) -> None:
    fields: dict[str, object] = {"kv_lora_rank": 3, "qk_nope_dim": 5, "qk_rope_dim": 4,
                                 "v_head_dim": 7, **change}
    with pytest.raises(ModelError, match=f"^{message}"):
        MLAConfig(**fields)  # type: ignore[arg-type]


def test_latent_norms_are_both_ranks() -> None:
    config = _body(name="m", vocab_size=10, context_length=8, d_model=16, n_layers=1,
                   n_heads=2, mla=MLAConfig(kv_lora_rank=4, qk_nope_dim=3, qk_rope_dim=2,
                                            v_head_dim=5, q_lora_rank=6))
    assert mla_norm_params(config) == 10  # r_q 6 + r_kv 4


def _body(**fields: object) -> TransformerConfig:
    """A Llama-style body: SwiGLU, RMSNorm, RoPE, untied, no biases."""
    return TransformerConfig(mlp="swiglu", norm="rmsnorm", positions="rope",
                             tied_embeddings=False, bias=False, dropout=0.0,
                             **fields)  # type: ignore[arg-type]


# mistralai/Mixtral-8x7B-v0.1 config.json: vocab 32000, max_position_embeddings 32768, hidden
# 4096, 32 layers, 32 heads, 8 key_value heads (head 4096 / 32 = 128), intermediate 14336,
# rms_norm_eps 1e-5, rope_theta 1e6, 8 local experts, 2 per token, router_aux_loss_coef 0.02
MIXTRAL = _body(name="mixtral-8x7b", vocab_size=32000, context_length=32768, d_model=4096,
                n_layers=32, n_heads=32, n_kv_heads=8, head_dim=128, d_ff=14336,
                norm_eps=1e-5, rope_theta=1e6,
                moe=MoEConfig(n_experts=8, top_k=2, d_expert=14336, n_shared=0, d_shared=14336,
                              router="softmax", norm_topk=True, routed_scale=1.0,
                              expert_bias=False, bias_update_rate=0.0, aux_loss_coef=0.02,
                              capacity_factor=0.0, first_dense_layers=0,
                              experts_impl="grouped"),
                mla=None, qk_norm=False, mtp_depth=0)
# Qwen/Qwen3-30B-A3B config.json: vocab 151936, max_position_embeddings 40960, hidden 2048,
# 48 layers, 32 heads, 4 key_value heads, head_dim 128, intermediate 6144, rms_norm_eps 1e-6,
# rope_theta 1e6, 128 experts, 8 per token, moe_intermediate 768, norm_topk_prob true,
# router_aux_loss_coef 0.001, q/k norms
QWEN3 = _body(name="qwen3-30b-a3b", vocab_size=151936, context_length=40960, d_model=2048,
              n_layers=48, n_heads=32, n_kv_heads=4, head_dim=128, d_ff=6144, norm_eps=1e-6,
              rope_theta=1e6, moe=MoEConfig(n_experts=128, top_k=8, d_expert=768,
                                            aux_loss_coef=0.001),
              qk_norm=True)
# deepseek-ai/DeepSeek-V3 config.json: vocab 129280, max_position_embeddings 163840, hidden
# 7168, 61 layers, 128 heads (and 128 key_value heads), intermediate 18432, rms_norm_eps 1e-6,
# rope_theta 10000, 256 routed experts, 8 per token, moe_intermediate 2048, 1 shared expert,
# sigmoid scoring, routed_scaling_factor 2.5, first_k_dense_replace 3, q_lora_rank 1536,
# kv_lora_rank 512, qk_nope 128, qk_rope 64, v_head 128, num_nextn_predict_layers 1; the
# paper's (§4.2) bias speed γ 0.001 and balance loss α 0.0001
DEEPSEEK_MOE = MoEConfig(n_experts=256, top_k=8, d_expert=2048, n_shared=1, d_shared=2048,
                         router="sigmoid", norm_topk=True, routed_scale=2.5, expert_bias=True,
                         bias_update_rate=0.001, aux_loss_coef=0.0001, capacity_factor=0.0,
                         first_dense_layers=3, experts_impl="grouped")
DEEPSEEK_MLA = MLAConfig(kv_lora_rank=512, qk_nope_dim=128, qk_rope_dim=64, v_head_dim=128,
                         q_lora_rank=1536)


def _deepseek(name: str, mtp_depth: int) -> TransformerConfig:
    return _body(name=name, vocab_size=129280, context_length=163840, d_model=7168,
                 n_layers=61, n_heads=128, n_kv_heads=128, head_dim=128, d_ff=18432,
                 norm_eps=1e-6, rope_theta=10000.0, moe=DEEPSEEK_MOE, mla=DEEPSEEK_MLA,
                 qk_norm=False, mtp_depth=mtp_depth)


# the tiny test model: every size different (E 6, k 2, d_expert 32, one shared of 48)
TINY = _body(name="tiny-moe", vocab_size=128, context_length=32, d_model=64, n_layers=2,
             n_heads=4, n_kv_heads=2, head_dim=16, d_ff=128, norm_eps=1e-5,
             rope_theta=10000.0, moe=MoEConfig(n_experts=6, top_k=2, d_expert=32, n_shared=1,
                                               d_shared=48, aux_loss_coef=0.01))


def test_the_moe_presets_match_their_published_configs() -> None:
    built = _moe_presets()
    assert built == (MIXTRAL, QWEN3, _deepseek("deepseek-v3", 0),
                     _deepseek("deepseek-v3-mtp", 1), TINY)
    assert tuple(PRESETS[c.name] for c in built) == built


def test_the_deepseek_builder_takes_its_name_and_depth() -> None:
    assert _deepseek_v3("ds", 2) == _deepseek("ds", 2)


def test_the_sparse_body_defaults_to_no_latent_attention_no_qk_norm_no_mtp() -> None:
    moe = MoEConfig(n_experts=3, top_k=2, d_expert=5)
    built = _sparse("s", 50, 16, 24, 2, 4, 2, 6, 40, 1e-6, 5000.0, moe)
    assert built == _body(name="s", vocab_size=50, context_length=16, d_model=24, n_layers=2,
                          n_heads=4, n_kv_heads=2, head_dim=6, d_ff=40, norm_eps=1e-6,
                          rope_theta=5000.0, moe=moe, mla=None, qk_norm=False, mtp_depth=0)
