"""profile.py pinned: a profile's parameter count takes every part at one rank (the head's
split part whole), and the doctests' hand-written example holds the figures their comments
work from."""

from __future__ import annotations

import dataclasses

from tensorledger.hardware import get_hardware
from tensorledger.napkin.activations import ActivationMemory
from tensorledger.napkin.recipes import resolve_optimizer, resolve_precision
from tensorledger.plan.estimate import PlanSetup
from tensorledger.plan.model import search_model
from tensorledger.plan.profile import Split, _example, profile_activations, tp_collectives


def test_params_take_the_heads_split_part_whole() -> None:
    p = dataclasses.replace(_example(), head=Split(whole=10.0, split=100.0))
    # 1,000 (embedding) + 4 · (20 + 280) (blocks) + (10 + 100) (head) = 2,310
    assert p.params() == 2310


def test_the_doctest_example_is_the_one_its_comments_describe() -> None:
    p = _example()
    assert (p.name, p.source, p.seq_len, p.precision) == ("example", "by hand", 16, "fp32")
    assert (p.n_layers, p.d_model, p.vocab_size, p.context_length) == (4, 8, 100, 16)
    # embedding 1,000 all split, a block 20 whole + 280 split, a head of 500 whole
    assert (p.embedding, p.block, p.head) == (Split(0.0, 1000.0), Split(20.0, 280.0),
                                              Split(500.0, 0.0))
    # training FLOPs a token: 4 blocks · 1,800 + 3,000 outside = 10,200; forward 4 · 600 +
    # 1,000 = 3,400; the largest matmul 200
    assert p.flops_per_token() == 10_200.0
    assert p.forward_flops_per_token() == 3_400.0
    assert p.largest_matmul_flops_per_token == 200.0
    # 4 all-reduces of 512 B a token: 10 tokens, 1,280 B each
    assert tp_collectives(p, False, False, 10) == (4.0, 1280.0)


def test_tp_collectives_of_a_split_the_profile_did_not_measure() -> None:
    # the example measured no sequence-parallel block: nothing to price
    assert tp_collectives(_example(), True, False, 10) == (0.0, 0.0)


def test_tp_collectives_under_sequence_parallelism_pair_up() -> None:
    p = dataclasses.replace(_example(), tp_sent_per_token={(True, False): 512.0},
                            tp_collectives={(True, False): 4.0})
    # 4 collectives under SP are 2 pairs (a gather and a scatter each): 512 · 10 / 2 B each
    assert tp_collectives(p, True, False, 10) == (2.0, 2560.0)


def test_tp_indivisible_of_sizes_tp_divides() -> None:
    p = dataclasses.replace(_example(), tensor_parallel=True,
                            tp_sizes=(("attention heads", 8), ("MLP width", 12)))
    assert p.tp_indivisible(2) is None  # 8 and 12 both even
    assert p.tp_indivisible(4) is None  # 4 divides 8 and 12
    assert p.tp_indivisible(8) == ("MLP width", 12)  # 8 divides 8, not 12


def test_profile_activations_of_a_micro_batch_by_hand() -> None:
    p = dataclasses.replace(_example(), block_saved={(False, True): Split(10.0, 20.0)},
                            other_saved={False: Split(3.0, 4.0)})
    # 2 sequences of 16 tokens = 32 tokens at TP 2: a block 32 · (10 + 20/2) = 640 B, the loss
    # 32 · (3 + 4/2) = 160 B, the token ids 8 · 32 = 256 B; 4 blocks
    assert profile_activations(p, 2, 16, 2, False, True, 2, True) == ActivationMemory(
        model="example", batch=2, seq_len=16, dtype_bytes=2, checkpointed=True,
        norms_bytes_per_layer=0, attention_bytes_per_layer=0, mlp_bytes_per_layer=0,
        per_layer_bytes=640, layers_bytes=4 * 640, embeddings_bytes=256, final_norm_bytes=0,
        loss_bytes=160, total_bytes=4 * 640 + 256 + 160, korthikanti_layer_bytes=0,
        autocast=True)


def test_a_search_of_a_profile_has_no_selective_recompute_and_its_heads_flops() -> None:
    p = dataclasses.replace(_example(), head=Split(10.0, 100.0))
    setup = PlanSetup(p, get_hardware("h100"), 2, 16, 4, resolve_precision("fp32"),
                      resolve_optimizer("adamw"), 80e9)
    model = search_model(setup)
    assert model.attention_forward_per_token == 0.0
    assert model.head_flops_per_token == 6.0 * 100  # 3 × 2 FLOPs a split head parameter
