"""The activations closed form under bf16 autocast, term by term by hand (mutation, issue 42):
each linear layer's bf16 cast of its input and of its weight, the fp32 stream a checkpointed
layer keeps, the fp32 log-softmax and the head's copy; and the tensor-parallel refusals by
name."""

from __future__ import annotations

import pytest

from tensorledger.errors import InputError
from tensorledger.napkin.activations import ActivationMemory, activation_memory
from tensorledger.napkin.transformer import TransformerConfig

# SwiGLU, RMSNorm, RoPE: d = 12, 4 query heads of 6 (q_dim 24 ≠ d), 2 KV heads (kv_dim 12),
# d_ff 20, vocabulary 11, 2 layers.
SWIGLU = TransformerConfig(name="s", vocab_size=11, context_length=32, d_model=12, n_layers=2,
                           n_heads=4, n_kv_heads=2, head_dim=6, d_ff=20, mlp="swiglu",
                           norm="rmsnorm", positions="rope", bias=False)
# GELU, LayerNorm, learned positions: d = 12, 4 heads of 3 (q_dim = kv_dim = 12), d_ff 20.
GELU = TransformerConfig(name="g", vocab_size=11, context_length=13, d_model=12, n_layers=2,
                         n_heads=4, d_ff=20)


def _whole(memory: ActivationMemory) -> bool:
    return all(type(value) is int for value in (
        memory.norms_bytes_per_layer, memory.attention_bytes_per_layer,
        memory.mlp_bytes_per_layer, memory.per_layer_bytes, memory.layers_bytes,
        memory.embeddings_bytes, memory.final_norm_bytes, memory.loss_bytes, memory.total_bytes,
        memory.weight_copies_bytes))


def test_swiglu_under_autocast_term_by_term() -> None:
    m = activation_memory(SWIGLU, 3, 5, 2, autocast=True)  # n = 3·5 = 15 tokens, a = 2
    assert m.autocast is True and _whole(m)
    # a norm: fp32 input 4·15·12 = 720, rsqrt 4·15 = 60, fp32 normalised input 720: 1500
    assert (m.final_norm_bytes, m.norms_bytes_per_layer) == (1500, 2 * 1500)
    # q, k, v 15·(24 + 2·12)·2 = 1440, output 15·24·2 = 720, log-sum-exp 4·3·4·5 = 240,
    # cos and sin cast apart for q and k 4·5·6·2 = 240, the q/k/v and output projections'
    # bf16 inputs 3·15·12·2 = 1080: 3720
    assert m.attention_bytes_per_layer == 1440 + 720 + 240 + 240 + 1080
    # gate, SiLU, up, product 4·15·20·2 = 2400; the gate and up inputs 2·15·12·2 = 720
    assert m.mlp_bytes_per_layer == 2400 + 720
    # weights 2·12·24 + 2·12·12 + 3·12·20 = 1584, 2 bytes each: 3168 a layer
    assert m.per_layer_bytes == 3000 + 3720 + 3120 + 3168  # 13,008
    assert m.layers_bytes == 2 * 13008
    assert m.embeddings_bytes == 8 * 15  # token ids; RoPE has no position index
    # log-softmax fp32 15·11·4 = 660, targets 8·15 = 120, weight 4, the head's input cast
    # 15·12·2 = 360 and its weight's cast 2·11·12 = 264: 1408
    assert m.loss_bytes == 660 + 120 + 4 + 360 + 264
    assert m.total_bytes == 26016 + 120 + 1500 + 1408  # 29,044
    assert m.weight_copies_bytes == 2 * 3168 + 264  # 6600


def test_gelu_under_autocast_casts_one_mlp_input_and_two_matrices() -> None:
    m = activation_memory(GELU, 3, 5, 2, autocast=True)  # n = 15
    # GELU's input and output 2·15·20·2 = 1200, the up projection's cast input 15·12·2 = 360
    assert m.mlp_bytes_per_layer == 1200 + 360
    # LayerNorm: fp32 input 720, mean and rstd 2·4·15 = 120: 840 a norm
    # attention: q, k, v 15·36·2 = 1080, output 360, log-sum-exp 240, casts 1080: 2760
    # weights 2·12·12 + 2·12·12 + 2·12·20 = 1056, 2 bytes each: 2112
    assert m.per_layer_bytes == 2 * 840 + 2760 + 1560 + 2112  # 8112
    assert m.weight_copies_bytes == 2 * 2112 + 2 * 11 * 12  # the layers' and the head's: 4488


def test_a_checkpointed_layer_keeps_its_fp32_stream_under_autocast() -> None:
    m = activation_memory(SWIGLU, 3, 5, 2, checkpointed=True, autocast=True)
    assert _whole(m)
    assert m.per_layer_bytes == 15 * 12 * 4  # the layer's input, fp32: 720
    assert m.layers_bytes == 2 * 720
    # no layer keeps its weights' casts (they are made again in backward); the head's stays
    assert m.weight_copies_bytes == 2 * 11 * 12  # 264
    assert m.total_bytes == 1440 + 120 + 1500 + 1408  # 4468
    # without autocast the stream is in the parameters' 2 bytes
    plain = activation_memory(SWIGLU, 3, 5, 2, checkpointed=True)
    assert plain.per_layer_bytes == 15 * 12 * 2  # 360
    assert (plain.autocast, plain.weight_copies_bytes) == (False, 0)


def test_without_autocast_no_weight_copies_are_saved() -> None:
    m = activation_memory(SWIGLU, 3, 5, 2)
    assert (m.autocast, m.weight_copies_bytes) == (False, 0)
    assert m.loss_bytes == 15 * 11 * 2 + 8 * 15 + 4  # log-softmax in 2 bytes, targets, weight


def test_tensor_parallelism_without_sequence_parallelism_keeps_whole_norms() -> None:
    # every rank runs the norms on all 15 tokens: RMSNorm in fp32 saves 4·15·12 + 4·15 +
    # 4·15·12 and its fp32 output 15·12·4: 720 + 60 + 720 + 720 = 2220
    m = activation_memory(SWIGLU, 3, 5, 4, tp=2)
    assert m.norms_bytes_per_layer == 2 * 2220
    assert m.final_norm_bytes == 2220


def test_sequence_parallel_norms_under_autocast_are_whole_bytes() -> None:
    # 3·6 = 18 tokens, 9 a rank: 4·9·12 + 4·9 + 4·9·12 = 900 a norm
    m = activation_memory(SWIGLU, 3, 6, 2, tp=2, sequence_parallel=True, autocast=True)
    assert (m.norms_bytes_per_layer, m.final_norm_bytes) == (1800, 900)
    assert _whole(m)
    kept = activation_memory(SWIGLU, 3, 6, 2, checkpointed=True, tp=2,
                             sequence_parallel=True, autocast=True)
    assert kept.per_layer_bytes == 9 * 12 * 4 and _whole(kept)  # its 9 tokens' fp32 stream


def test_tensor_parallelism_names_what_it_does_not_divide() -> None:
    with pytest.raises(InputError, match=r"^tensor parallelism of 3 does not divide the 4 heads "
                                         r"of s$"):
        activation_memory(SWIGLU, 3, 6, tp=3)
    with pytest.raises(InputError, match=r"^tensor parallelism of 4 does not divide the 2 "
                                         r"key/value heads of s$"):
        activation_memory(SWIGLU, 3, 6, tp=4)
    odd = TransformerConfig(name="odd", vocab_size=11, context_length=13, d_model=12,
                            n_layers=2, n_heads=4, d_ff=9)
    with pytest.raises(InputError, match=r"^tensor parallelism of 2 does not divide the 9 MLP "
                                         r"width of odd$"):
        activation_memory(odd, 3, 6, tp=2)
    with pytest.raises(InputError, match=r"^tp must be a whole number >= 1, got 0$"):
        activation_memory(SWIGLU, 3, 6, tp=0)
