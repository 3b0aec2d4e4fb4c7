"""Closed forms of parallel training: ZeRO bytes per rank, communication volumes, Korthikanti's
activations with tensor and sequence parallelism, and the pipeline bubble — each against hand
arithmetic."""

from __future__ import annotations

import pytest

from tensorledger.errors import InputError
from tensorledger.napkin import (
    TransformerConfig,
    ddp_comm_volume,
    fsdp_comm_volume,
    pipeline_bubble,
    preset_params,
    tp_activation_bytes,
    tp_comm_volume,
    zero_bytes,
    zero_comm_volume,
    zero_table,
)
from tensorledger.napkin.activations import korthikanti_layer_bytes

# llama-3-8b, by hand: per layer q and o 2·4096·4096 + k and v 2·4096·1024 = 41,943,040, MLP
# 3·4096·14336 = 176,160,768, two RMSNorms 2·4096: 218,112,000; 32 layers 6,979,584,000; token
# embedding and untied head 2·128256·4096 = 1,050,673,152; final norm 4096.
P = 8_030_261_248


def test_llama_3_8b_parameter_count() -> None:
    assert P == 32 * 218_112_000 + 2 * 128_256 * 4096 + 4096
    assert preset_params("llama-3-8b").params == P


# The ZeRO paper's mixed-precision Adam: 2 (bf16 weights) + 2 (bf16 grads) + 12 (fp32 master,
# momentum, variance) = 16 bytes per parameter: the "bf16-master" recipe.  Per rank, stage 1
# shards the 12, stage 2 the 12 and the grads' 2, stage 3 all 16.  P is a multiple of 64.
ZERO_TABLE = {
    # ranks: (stage 0, stage 1, stage 2, stage 3)
    1: (128_484_179_968,      # 16 · P
        128_484_179_968,      # 4 · P + 12 · P
        128_484_179_968,      # 2 · P + 14 · P
        128_484_179_968),     # 16 · P
    2: (128_484_179_968,      # 16 · P
        80_302_612_480,       # 4 · 8,030,261,248 + 12 · 4,015,130,624
        72_272_351_232,       # 2 · 8,030,261,248 + 14 · 4,015,130,624
        64_242_089_984),      # 16 · 4,015,130,624
    8: (128_484_179_968,
        44_166_436_864,       # 32,121,044,992 + 12 · 1,003,782,656
        30_113_479_680,       # 16,060,522,496 + 14 · 1,003,782,656
        16_060_522_496),      # 16 · 1,003,782,656
    64: (128_484_179_968,
         33_626_718_976,      # 32,121,044,992 + 12 · 125,472,832
         17_817_142_144,      # 16,060,522,496 + 14 · 125,472,832
         2_007_565_312),      # 16 · 125,472,832
}


@pytest.mark.parametrize("ranks", sorted(ZERO_TABLE))
def test_zero_table_llama_3_8b(ranks: int) -> None:
    rows = zero_table(P, ranks, "bf16-master", "adam")
    assert tuple(r.total_bytes for r in rows) == ZERO_TABLE[ranks]
    for row in rows:
        assert row.params_bytes + row.grads_bytes + row.master_bytes + row.optimizer_bytes == (
            row.total_bytes)
        assert row.unsharded_bytes == 16 * P
        assert row.breakdown.total_bytes_per_param == 16.0


def test_zero_generalises_to_every_recipe() -> None:
    # mixed-bf16 + AdamW: fp32 params 4 and grads 4, no master, state 8; 8 ranks
    shard = P // 8  # 1,003,782,656
    z1 = zero_bytes(P, 8, 1, "mixed-bf16", "adamw")
    assert (z1.params_bytes, z1.grads_bytes, z1.master_bytes, z1.optimizer_bytes) == (
        4 * P, 4 * P, 0, 8 * shard)
    z3 = zero_bytes(P, 8, 3, "lecture", "adamw")  # 2 + 2 + 0 + 8 = 12 per parameter
    assert z3.total_bytes == 12 * shard == 12_045_391_872
    # 8-bit Adam: 2 one-byte states and 2 fp32 scales per 2048 values: 2 + 8/2048 per param
    z2 = zero_bytes(2048 * 64, 64, 2, "bf16", "adam8bit")
    assert z2.optimizer_bytes == round((2 + 8 / 2048) * 2048)  # 4100 for a shard of 2048


def test_zero_uneven_shards_round_up() -> None:
    z = zero_bytes(10, 4, 3, "fp32", "sgd")  # ⌈10/4⌉ = 3 parameters of 4 + 4 bytes
    assert (z.shard_params, z.total_bytes) == (3, 24)


def test_fsdp_comm_volume_llama_3_8b_on_8_ranks() -> None:
    # forward all-gather + backward all-gather + reduce-scatter, each (N−1)/N of the bytes
    bf16 = fsdp_comm_volume(P, 8, "bf16-master")
    assert bf16.sent_bytes_per_rank == 3 * 7 / 8 * (2 * P)  # 42,158,871,552
    assert bf16.sent_bytes_per_rank == 42_158_871_552
    assert [(c.kind, c.phase, c.size_bytes) for c in bf16.collectives] == [
        ("all-gather", "forward", 2 * P), ("all-gather", "backward", 2 * P),
        ("reduce-scatter", "backward", 2 * P)]
    fp32 = fsdp_comm_volume(P, 8, "mixed-bf16")  # fp32 parameters and gradients
    assert fp32.sent_bytes_per_rank == 84_317_743_104  # 3 · 7/8 · 32,121,044,992
    assert zero_comm_volume(P, 8, 3, "mixed-bf16") == fp32


def test_ddp_and_zero_1_2_send_the_same() -> None:
    ddp = ddp_comm_volume(P, 8, "mixed-bf16")
    assert ddp.sent_bytes_per_rank == 2 * 7 / 8 * 4 * P == 56_211_828_736
    for stage in (1, 2):  # reduce-scatter of the grads + all-gather of the parameters
        assert zero_comm_volume(P, 8, stage, "mixed-bf16").sent_bytes_per_rank == (
            ddp.sent_bytes_per_rank)
    assert zero_comm_volume(P, 8, 0, "mixed-bf16") == ddp
    # bf16-master: bf16 grads reduce-scattered, bf16 weights gathered: half the bytes
    assert zero_comm_volume(P, 8, 1, "bf16-master").sent_bytes_per_rank == 7 / 8 * 4 * P


def test_one_rank_sends_nothing() -> None:
    assert fsdp_comm_volume(P, 1, "bf16").sent_bytes_per_rank == 0.0


def test_tp_comm_volume_llama_3_8b() -> None:
    # b = 1, s = 8192, h = 4096, bf16: each all-reduce is of 8192·4096·2 = 67,108,864 bytes and
    # sends 2·7/8 of it; 2 forward + 2 backward per layer, 32 layers: 128 of them
    tp = tp_comm_volume(1, 8192, 4096, 32, 8)
    assert tp.sent_bytes_per_rank == 128 * 2 * 7 / 8 * 67_108_864 == 15_032_385_536
    sp = tp_comm_volume(1, 8192, 4096, 32, 8, sequence_parallel=True)
    assert sp.sent_bytes_per_rank == tp.sent_bytes_per_rank  # 256 × 7/8 × S: the same
    assert sum(c.count for c in sp.collectives) == 256


# Korthikanti et al. 2022's GPT-3 175B: a = 96 heads, s = 2048, h = 12288 (5·a·s/h = 80),
# b = 1, t = 8 (their Table 3); s·b·h = 25,165,824.
SBH = 2048 * 12288


def test_korthikanti_gpt3() -> None:
    alone = tp_activation_bytes(2048, 1, 12288, 96)
    assert alone.bytes_per_layer == SBH * (34 + 80) == 2_868_903_936
    tp = tp_activation_bytes(2048, 1, 12288, 96, tp=8)
    assert tp.bytes_per_layer == SBH * (10 + 24 / 8 + 80 / 8) == 578_813_952  # 23 · s·b·h
    assert tp.replicated_bytes == 10 * SBH
    sp = tp_activation_bytes(2048, 1, 12288, 96, tp=8, sequence_parallel=True)
    assert sp.bytes_per_layer == SBH / 8 * 114 == 358_612_992
    # a second path: the activations module's per-layer figure without parallelism
    gpt3 = TransformerConfig(vocab_size=50257, context_length=2048, d_model=12288,
                             n_layers=96, n_heads=96)
    assert korthikanti_layer_bytes(gpt3, 1, 2048) == alone.bytes_per_layer


def test_korthikanti_forms_agree_at_t_1_and_shapes_all_differ() -> None:
    # s = 24, b = 3, h = 40, a = 5: s·b·h = 2880, 5·a·s·s·b = 43,200
    plain = tp_activation_bytes(24, 3, 40, 5).bytes_per_layer
    assert plain == 34 * 2880 + 43_200 == 141_120
    assert tp_activation_bytes(24, 3, 40, 5, sequence_parallel=True).bytes_per_layer == plain
    assert tp_activation_bytes(24, 3, 40, 5, tp=4).bytes_per_layer == (
        10 * 2880 + (24 * 2880 + 43_200) / 4)  # 28,800 + 28,080 = 56,880
    assert tp_activation_bytes(24, 3, 40, 5, tp=4, sequence_parallel=True).bytes_per_layer == (
        141_120 / 4)


@pytest.mark.parametrize(("stages", "micro", "chunks", "fraction", "to_compute"), [
    (4, 8, 1, 3 / 11, 3 / 8),     # (p−1)/(m+p−1); Narayanan's (p−1)/m
    (4, 8, 2, 3 / 19, 3 / 16),    # interleaved: (p−1)/(v·m+p−1)
    (1, 5, 1, 0.0, 0.0),          # no pipeline, no bubble
    (8, 1, 1, 7 / 8, 7.0),        # one micro-batch: the stages take turns
])
def test_pipeline_bubble(stages: int, micro: int, chunks: int, fraction: float,
                         to_compute: float) -> None:
    b = pipeline_bubble(stages, micro, chunks)
    assert b.bubble_fraction == pytest.approx(fraction)
    assert b.bubble_to_compute == pytest.approx(to_compute)


@pytest.mark.parametrize(("call", "fragment"), [
    (lambda: zero_bytes(P, 8, 4, "bf16", "adam"), "ZeRO stage must be 0, 1, 2 or 3"),
    (lambda: zero_bytes(P, 8, True, "bf16", "adam"), "ZeRO stage"),
    (lambda: zero_bytes(-1, 8, 1, "bf16", "adam"), "params must be a whole number"),
    (lambda: zero_bytes(P, 0, 1, "bf16", "adam"), "ranks must be a whole number from 1"),
    (lambda: zero_bytes(P, 8, 1, "fp12", "adam"), "fp12"),
    (lambda: pipeline_bubble(4, 6, 2), "multiple of stages"),
    (lambda: pipeline_bubble(0, 6), "stages"),
    (lambda: tp_activation_bytes(0, 1, 1, 1), "seq_len"),
    (lambda: tp_comm_volume(1, 8, 16, 2, 0), "tp must be"),
])
def test_refusals(call, fragment: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(InputError, match=fragment):
        call()


# ------------------------------------------------------------- ZeRO as torch implements it

def test_torch_zero_chunks_rows_with_padding_and_keeps_the_gathered_model() -> None:
    from tensorledger.napkin.parallel import torch_zero_bytes

    shapes = [(10, 3), (5,), ()]  # 30 + 5 + 1 = 36 values
    # 4 ranks: rank 0 gets ⌈10/4⌉ = 3 rows of 3, ⌈5/4⌉ = 2, and the scalar: 9 + 2 + 1 = 12
    z3 = torch_zero_bytes(shapes, 4, 3, "fp32", "adamw")  # 4 + 4 + 8 bytes per value
    assert (z3.params, z3.shard_params) == (36, 12)
    assert (z3.params_bytes, z3.grads_bytes, z3.master_bytes, z3.optimizer_bytes) == (
        48, 48, 0, 96)
    assert z3.total_bytes == 192 and z3.state_tensors == 3 and z3.partition == "torch"
    z2 = torch_zero_bytes(shapes, 4, 2, "fp32", "adamw")
    assert z2.params_bytes == 4 * (36 + 12)  # the whole gathered model beside the chunk
    assert (z2.grads_bytes, z2.optimizer_bytes) == (48, 96)
    z0 = torch_zero_bytes(shapes, 4, 0, "fp32", "adamw")
    assert z0.total_bytes == 16 * 36 == z0.unsharded_bytes
    assert z0.total_bytes == zero_bytes(36, 4, 0, "fp32", "adamw").total_bytes


def test_torch_zero1_deals_whole_tensors_largest_first_to_the_least_loaded() -> None:
    from tensorledger.napkin.parallel import torch_zero_bytes

    # sizes 8, 5, 4, 3, 1 on 2 ranks: 8 → r0; 5 → r1; 4 → r1 (9); 3 → r0 (11); 1 → r1 (10)
    shapes = [(3,), (8,), (1,), (5,), (4,)]
    z = torch_zero_bytes(shapes, 2, 1, "fp32", "adamw")
    assert (z.shard_params, z.state_tensors) == (11, 2)
    assert (z.params_bytes, z.grads_bytes) == (4 * 21, 4 * 21)  # nothing else sharded
    assert z.optimizer_bytes == 8 * 11
    # a tie goes to the lowest rank: two 4s on 2 ranks, one each; rank 0 has the first
    tie = torch_zero_bytes([(4,), (4,)], 2, 1, "fp32", "adamw")
    assert (tie.shard_params, tie.state_tensors) == (4, 1)
    # bf16-master keeps its fp32 master with the state: 4 B of master per value held
    master = torch_zero_bytes(shapes, 2, 1, "bf16-master", "adamw")
    assert master.master_bytes == 4 * 11


def test_torch_zero_refuses_no_shapes_and_bad_stages() -> None:
    from tensorledger.napkin.parallel import torch_zero_bytes

    with pytest.raises(InputError, match="shapes"):
        torch_zero_bytes([], 2, 1, "fp32", "adamw")
    with pytest.raises(InputError, match="stage"):
        torch_zero_bytes([(2,)], 2, 4, "fp32", "adamw")
    with pytest.raises(InputError, match="dimension"):
        torch_zero_bytes([(2, -1)], 2, 3, "fp32", "adamw")
