"""profile.py pinned: a profile's parameter count takes every part at one rank (the head's
split part whole), and the doctests' hand-written example holds the figures their comments
work from."""

from __future__ import annotations

import dataclasses

from tensorledger.plan.profile import Split, _example, tp_collectives


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
