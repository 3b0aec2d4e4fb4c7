"""The LoRA saved-activation closed form pinned by hand (mutation, issue 42): an adapter's own
saved tensors by width, a block's five terms with and without a gradient through its input,
and how ``lora_activation_memory`` puts them together.  One made-up model where every width
differs: d 20, 4 heads of 6 (q 24), 2 KV heads (kv 12), d_ff 36, vocab 50, 3 layers; r 5;
batch 2 × seq 7 = 14 tokens.  (tests/plan/test_plan_lora.py holds the form against traced
steps; these are the fast pins.)"""

from __future__ import annotations

import dataclasses

from tensorledger.napkin.activations import activation_memory
from tensorledger.napkin.adapters import LoraShape, _block_bytes, _Shape, lora_activation_memory
from tensorledger.napkin.transformer import TransformerConfig


def _config(mlp: str = "swiglu", norm: str = "rmsnorm", positions: str = "rope"
            ) -> TransformerConfig:
    return TransformerConfig(vocab_size=50, context_length=16, d_model=20, n_layers=3,
                             n_heads=4, n_kv_heads=2, head_dim=6, d_ff=36, mlp=mlp, norm=norm,
                             positions=positions, bias=False, name="made-up")


def _shape(targets: tuple[str, ...], a: int, t: int = 1, mine: int = 14,
           autocast: bool = False, config: TransformerConfig | None = None) -> _Shape:
    return _Shape(config or _config(), LoraShape(5, targets), n=14, seq_len=7, a=a, t=t,
                  mine=mine, autocast=autocast)


def test_fp32_adapters_over_an_fp32_base_save_only_the_low_rank_values() -> None:
    shape = _shape(("query",), a=4)
    assert shape.shared
    assert shape.adapter("query", True) == 280  # 14 tokens · r 5 · 4 B, the input shared
    assert not _shape(("query",), a=4, autocast=True).shared  # autocast casts it
    assert not _shape(("query",), a=2).shared


def test_fp32_adapters_over_a_16_bit_base_save_their_cast_input() -> None:
    shape = _shape(("query", "output", "down"), a=2, t=3)
    assert shape.adapter("query", True) == 1_400  # column-parallel: 14·20·4 + 14·5·4 = 1,120 + 280
    assert shape.adapter("output", True) == 728  # row-parallel: 14·(24 // 3)·4 + 280 = 448 + 280
    assert shape.adapter("down", True) == 952  # 14·(36 // 3)·4 + 280 = 672 + 280
    # a rank's whole columns: 14·(24 // 5)·4 + 280 = 224 + 280
    assert _shape(("output",), a=2, t=5).adapter("output", True) == 504


def test_autocast_adapters_save_bf16_casts() -> None:
    shape = _shape(("query", "down"), a=2, t=3, autocast=True)
    # input 14·20·2 = 560, B's input 14·5·2 = 140, B's cast 2·5·24 // 3 = 80, A's 2·5·20 // 3 = 66
    assert shape.adapter("query", True) == 846
    assert shape.adapter("query", False) == 780  # A's cast only for an input's gradient
    # 14·(36 // 3)·2 = 336, 140, B's cast 2·5·20 // 3 = 66, A's 2·5·36 // 3 = 120
    assert shape.adapter("down", True) == 662


def test_a_frozen_norm_keeps_its_input_and_statistics() -> None:
    assert _shape((), a=2, mine=7).norm == 588  # RMSNorm: 4·7·20 + 4·7
    layer = _config(norm="layernorm")
    assert _shape((), a=2, config=layer).norm == 672  # LayerNorm: 14·20·2 + 8·14
    assert _shape((), a=2, autocast=True, config=layer).norm == 1_232  # fp32: 14·20·4 + 112


# A block's terms, as (norms, attention, MLP, adapters, weight casts).  bf16 below: RMSNorm
# 4·14·20 + 4·14 = 1,176; attention (14·(24 + 2·12)·2 + 14·24·2) + 4·2 sequences·4 heads·7 =
# 2,016 + 224 = 2,240; RoPE's cos and sin 2·7·6·2 = 168 a rotated projection; SwiGLU
# 14·36·2·3 = 3,024; an adapter reading d 20: 14·20·4 + 14·5·4 = 1,400.


def test_a_bf16_block_with_query_and_value_adapted() -> None:
    shape = _shape(("query", "value"), a=2)
    # both norms; query and key rotated: 2,240 + 2·168; two adapters
    assert _block_bytes(shape, stream_grad=True) == (2_352, 2_576, 3_024, 2_800, 0)
    # the first block: no attention norm, the key unrotated (its input needs no gradient)
    assert _block_bytes(shape, stream_grad=False) == (1_176, 2_408, 3_024, 2_800, 0)


def test_a_first_block_with_only_up_adapted_saves_the_mlp_alone() -> None:
    shape = _shape(("up",), a=2)
    # no norm, no attention, no RoPE table: SwiGLU's up output alone, 14·36·2
    assert _block_bytes(shape, stream_grad=False) == (0, 0, 1_008, 1_400, 0)
    assert _block_bytes(shape, stream_grad=True) == (2_352, 2_576, 3_024, 1_400, 0)
    gate = _shape(("gate",), a=2)  # SiLU's input and output, 2·1,008
    assert _block_bytes(gate, stream_grad=False) == (0, 0, 2_016, 1_400, 0)
    value = _shape(("value",), a=2)  # the value alone: the attention core, no RoPE table
    assert _block_bytes(value, stream_grad=False) == (1_176, 2_240, 3_024, 1_400, 0)
    output = _shape(("output",), a=2)  # the MLP norm; the attention needs nothing saved
    # output reads 24: 14·24·4 + 280 = 1,624
    assert _block_bytes(output, stream_grad=False) == (1_176, 0, 3_024, 1_624, 0)


def test_the_gate_alone_gives_the_down_projections_input_a_gradient() -> None:
    shape = _shape(("gate", "down"), a=2, autocast=True)
    # SiLU's input and output 2·1,008; gate 560 + 140 + 2·5·36 + 0 (no A cast) = 1,060;
    # down 14·36·2 + 140 + 2·5·20 + 2·5·36 = 1,008 + 140 + 200 + 360 = 1,708;
    # casts: the down projection's alone, 2·36·20 (the gate's input needs no gradient)
    assert _block_bytes(shape, stream_grad=False) == (0, 0, 2_016, 2_768, 1_440)


def test_an_fp32_block_shares_the_norm_outputs_with_its_adapters() -> None:
    shape = _shape(("query", "output", "up", "down"), a=4)
    # norms 2·1,176 + the two norm outputs 2·14·20·4 = 2,352 + 2,240
    # attention (14·48·4 + 14·24·4) + 224 = 4,256, one fp32 RoPE table set 2·7·6·4 = 336
    # SwiGLU 14·36·4·3 = 6,048 and the down input 14·36·4 = 2,016; four B inputs 4·280
    assert _block_bytes(shape, stream_grad=True) == (4_592, 4_592, 8_064, 1_120, 0)
    output = _shape(("output",), a=4)
    # the first block: the MLP norm; the attention's output for its adapter, 14·24·4
    assert _block_bytes(output, stream_grad=False) == (1_176, 1_344, 6_048, 280, 0)
    five = _shape(("output",), a=4, t=5)
    # 14·24·4 // 5 = 268; SwiGLU 14·(36 // 5)·4·3 = 1,176
    assert _block_bytes(five, stream_grad=False) == (1_176, 268, 1_176, 280, 0)


def test_weight_casts_on_seven_ranks_round_down() -> None:
    shape = _shape(("value",), a=2, t=7, autocast=True)
    # attention (1,344 + 672) // 7 + 4·2·(4 // 7)·7 = 288, RoPE 2·168; SwiGLU 14·5·2·3 = 420;
    # value 560 + 140 + 2·5·12 // 7 + 2·5·20 // 7 = 560 + 140 + 17 + 28;
    # casts 2·(20·48 // 7 + 24·20 // 7 + 2·20·5 + 5·20) = 2·(137 + 68 + 200 + 100)
    assert _block_bytes(shape, stream_grad=True) == (2_352, 624, 420, 745, 1_010)


def test_an_autocast_block_on_two_ranks_with_sequence_parallel() -> None:
    shape = _shape(("key", "gate", "down"), a=2, t=2, mine=7, autocast=True)
    # norms 2·(4·7·20 + 4·7) = 2·588; attention (1,344 + 672) // 2 + 4·2·2·7 = 1,120 + 2·168
    # SwiGLU 14·18·2·3 = 1,512
    # key 14·20·2 + 140 + 2·5·12 // 2 + 2·5·20 // 2 = 560 + 140 + 60 + 100 = 860
    # gate 560 + 140 + 2·5·36 // 2 + 100 = 980; down 14·18·2 + 140 + 100 + 180 = 924
    # casts 2·(20·48 // 2 + 24·20 // 2 + 2·20·18 + 18·20) = 2·(480 + 240 + 720 + 360)
    assert _block_bytes(shape, stream_grad=True) == (1_176, 1_456, 1_512, 2_764, 3_600)
    # first block: one norm, only the key rotated, key's A cast gone (760), no q/k/v casts
    assert _block_bytes(shape, stream_grad=False) == (588, 1_288, 1_512, 2_664, 2_640)


def test_gelu_layernorm_blocks() -> None:
    gelu = _config(mlp="gelu", norm="layernorm", positions="learned")
    up = _shape(("up",), a=2, config=gelu)
    assert _block_bytes(up, stream_grad=False) == (0, 0, 1_008, 1_400, 0)  # GELU's input
    down = _shape(("down",), a=2, config=gelu)
    # LayerNorm 2·(14·20·2 + 8·14); attention 2,240 (no RoPE); GELU 1,008;
    # down reads 36: 14·36·4 + 280
    assert _block_bytes(down, stream_grad=True) == (1_344, 2_240, 1_008, 2_296, 0)
    value = _shape(("value",), a=2, autocast=True, config=gelu)
    # LayerNorm fp32 2·1,232; value 560 + 140 + 2·5·12 + 2·5·20 = 1,020
    # casts 2·(20·48 + 24·20 + 20·36 + 36·20) = 2·2,880
    assert _block_bytes(value, stream_grad=True) == (2_464, 2_240, 1_008, 1_020, 5_760)


def test_an_fp32_step_with_the_head_adapted() -> None:
    config = _config()
    lora = LoraShape(5, ("query", "value", "head"))
    m = lora_activation_memory(config, lora, 2, 7, 4)
    full = activation_memory(config, 2, 7, 4)
    # a block: norms 2,352 + the attention norm's output 1,120; attention 4,256 + 336;
    # SwiGLU 6,048; two B inputs 560: 3,472 + 4,592 + 6,048 + 560
    assert m.activations.per_layer_bytes == 14_672
    assert m.adapters_bytes_per_layer == 560
    assert m.first_layer_less_bytes == 1_176  # the first attention norm
    assert m.activations.norms_bytes_per_layer == 3_472
    assert m.activations.attention_bytes_per_layer == 4_592
    assert m.activations.mlp_bytes_per_layer == 6_608  # 6,048 + 560
    assert m.activations.layers_bytes == 42_840  # 3·14,672 − 1,176
    # the final norm 1,176, its output for the head's A 14·20·4 = 1,120, B's input 280
    assert m.activations.final_norm_bytes == 2_576
    assert m.activations.loss_bytes == full.loss_bytes
    assert m.activations.weight_copies_bytes == 0
    assert m.activations.total_bytes == 42_840 + full.embeddings_bytes + 2_576 + full.loss_bytes


def test_an_autocast_step_on_two_ranks() -> None:
    config = _config()
    lora = LoraShape(5, ("key", "gate", "down"))
    m = lora_activation_memory(config, lora, 2, 7, 2, tp=2, autocast=True)
    full = activation_memory(config, 2, 7, 2, tp=2, autocast=True)
    a = m.activations
    # as the two-rank block above, its norms on all 14 tokens: 2·1,176 (the first block 1,176)
    assert a.per_layer_bytes == 11_684  # 2,352 + 1,456 + 1,512 + 2,764 + 3,600
    assert m.first_layer_less_bytes == 2_404  # 11,684 − (1,176 + 1,288 + 1,512 + 2,664 + 2,640)
    assert a.layers_bytes == 32_648  # 3·11,684 − 2,404
    assert a.norms_bytes_per_layer == 2_352
    assert a.mlp_bytes_per_layer == 4_276  # 1,512 + 2,764
    assert a.attention_bytes_per_layer == 1_456  # under the full fine-tune's (no input casts)
    assert a.final_norm_bytes == 1_176  # 4·14·20 + 4·14
    assert a.loss_bytes == full.loss_bytes - 560  # no cast of the frozen head's input, 14·20·2
    # two later blocks' casts 2·3,600, the first's 2,640, the head's 2·50·20 // 2
    assert a.weight_copies_bytes == 10_840
    assert a.total_bytes == 32_648 + full.embeddings_bytes + 1_176 + full.loss_bytes - 560


def test_sequence_parallel_norms_run_on_a_ranks_tokens() -> None:
    config = _config()
    lora = LoraShape(5, ("up",))
    m = lora_activation_memory(config, lora, 7, 2, tp=2, sequence_parallel=True)  # 2 B
    # 14 tokens, 7 a rank: RMSNorm 4·7·20 + 4·7 = 588, the final norm alone
    assert m.activations.final_norm_bytes == 588
    # SwiGLU 14·(36 / 2)·2·3 = 1,512 and up's adapter 14·20·4 + 14·5·4 = 1,400 (bf16 base)
    assert m.activations.mlp_bytes_per_layer == 2_912
    kept = lora_activation_memory(config, lora, 7, 2, tp=2, sequence_parallel=True,
                                  checkpointed=True)
    full = activation_memory(config, 7, 2, checkpointed=True, tp=2, sequence_parallel=True)
    assert kept.activations.per_layer_bytes == full.per_layer_bytes  # the full form's, with SP
    assert kept.activations.loss_bytes == full.loss_bytes
    assert kept.activations.total_bytes == full.total_bytes - full.final_norm_bytes + 588


def test_the_heads_cast_on_three_ranks_rounds_down() -> None:
    config = dataclasses.replace(_config(), n_heads=3, n_kv_heads=3)
    m = lora_activation_memory(config, LoraShape(5, ("value",)), 2, 7, tp=3,
                               checkpointed=True, autocast=True)
    assert m.activations.weight_copies_bytes == 666  # 2·50·20 // 3, no block's (recomputed)


def test_a_checkpointed_autocast_step_keeps_the_full_layers() -> None:
    config = _config()
    lora = LoraShape(5, ("value", "head"))
    m = lora_activation_memory(config, lora, 2, 7, 2, checkpointed=True, autocast=True)
    full = activation_memory(config, 2, 7, 2, checkpointed=True, autocast=True)
    a = m.activations
    assert a.per_layer_bytes == full.per_layer_bytes
    assert m.first_layer_less_bytes == 0
    assert a.layers_bytes == 3 * full.per_layer_bytes
    # RMSNorm 1,176 and the head's adapter: 14·20·2 + 14·5·2 + 2·5·50 + 2·5·20 = 560 + 140
    # + 500 + 200 (not shared: no norm output)
    assert a.final_norm_bytes == 2_576
    assert a.weight_copies_bytes == 2_000  # the head's cast alone: 2·50·20
    assert a.total_bytes == 3 * full.per_layer_bytes + full.embeddings_bytes + 2_576 \
        + full.loss_bytes - 560
