"""Forward FLOPs per token pinned term by term on a biased GELU model and on a mixture of
experts with latent attention and a dense first layer (mutation, issue 42); every size differs."""

from __future__ import annotations

import dataclasses

from tensorledger.napkin.moe import MLAConfig, MoEConfig
from tensorledger.napkin.params import parameter_count
from tensorledger.napkin.transformer import TransformerConfig, forward_flops_per_token

# GELU, LayerNorm, biases: d 24, 4 query heads and 2 kv heads of 5 (q 20, kv 10), ff 40,
# vocab 11, 2 layers
GELU = TransformerConfig(name="g", vocab_size=11, context_length=13, d_model=24, n_layers=2,
                         n_heads=4, n_kv_heads=2, head_dim=5, d_ff=40)


def test_a_biased_gelu_model_term_by_term() -> None:
    f = forward_flops_per_token(GELU, seq_len=7)
    # the biases are no matmul: Q 24·20, K and V 24·10 each, O 20·24 = 1,440 matrix
    # parameters a layer; 2 layers · 2 · 1440
    assert f.attention_projections_flops == 5760
    assert f.mlp_flops == 7680  # 2 layers · 2 · 2 matrices · 24 · 40
    assert f.attention_scores_flops == 280  # 2 · 2 · 7 · 20 / 2
    assert f.attention_values_flops == 280
    assert f.head_flops == 528  # 2 · 24 · 11
    assert f.total_flops == 14528  # 5760 + 280 + 280 + 7680 + 528


# SwiGLU, RMSNorm, RoPE: d 24, 3 heads, ff 40, vocab 100, 4 layers of which the first is dense;
# E 5, k 2, d_expert 7, 3 shared of 11; latent attention r_kv 4, nope 5, rope 2, v 6
SPARSE = TransformerConfig(name="s", vocab_size=100, context_length=64, d_model=24, n_layers=4,
                           n_heads=3, d_ff=40, mlp="swiglu", norm="rmsnorm", positions="rope",
                           bias=False, tied_embeddings=False,
                           moe=MoEConfig(n_experts=5, top_k=2, d_expert=7, n_shared=3,
                                         d_shared=11, first_dense_layers=1),
                           mla=MLAConfig(kv_lora_rank=4, qk_nope_dim=5, qk_rope_dim=2,
                                         v_head_dim=6))


def test_experts_and_latent_attention_term_by_term() -> None:
    f = forward_flops_per_token(SPARSE, seq_len=8)
    # latent attention: query 24 · 3 · 7 = 504, kv down 24 · 6 = 144, kv up 4 · 3 · 11 = 132,
    # out 3 · 6 · 24 = 432: 1,212 a layer; 4 layers · 2 · 1212
    assert f.attention_projections_flops == 9696
    # one dense SwiGLU layer 2 · 3 · 24 · 40 = 5,760; three sparse ones, each 2 · the active
    # router 24 · 5 + 2 of 3 · 24 · 7 + shared 3 · 24 · 33 = 120 + 1,008 + 2,376 = 3,504
    assert f.mlp_flops == 26784  # 5760 + 3 · 2 · 3504
    # scores over nope + rope = 7 a head: 4 · 2 · 8 · 21 / 2; values over v 6: 4 · 2 · 8 · 18 / 2
    assert f.attention_scores_flops == 672
    assert f.attention_values_flops == 576
    assert type(f.attention_values_flops) is int  # halving 2·s·width stays whole
    assert f.head_flops == 4800  # 2 · 24 · 100
    assert f.total_flops == 9696 + 26784 + 672 + 576 + 4800


def test_a_multi_token_prediction_depth_copies_the_last_layer() -> None:
    # one depth: the last layer, a 2d × d projection and 3 norms. GELU with biases, d 24:
    # attention 24·20 + 20 + 2·(24·10 + 10) + 20·24 + 24 = 1,504; MLP 2·24·40 + 40 + 24 =
    # 1,984; two LayerNorms 2·48 = 96: a layer of 3,584; + 2·24² + 3·48 = 4,880
    gelu = dataclasses.replace(GELU, mtp_depth=1)
    assert parameter_count(gelu).mtp_params == 4880
    # with experts the last layer is a sparse one: latent attention 1,212, experts 5,016
    # (router 120 + 5 · 504 + shared 2,376), two RMSNorms 48 and the kv latent's norm 4 =
    # 6,280 (a dense one would be 1,212 + 3·24·40 + 52 = 4,144); two depths of
    # 6,280 + 2·24² + 3·24
    assert parameter_count(dataclasses.replace(SPARSE, mtp_depth=2)).mtp_params == 15008
