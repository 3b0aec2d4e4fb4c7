"""experts.py pinned: the MoE blocks a rank holds, the layout the experts' gradients are
reduced over, and an all-to-all's buffer, by hand."""

from __future__ import annotations

import dataclasses

import pytest

from tensorledger.hardware import get_hardware
from tensorledger.napkin.recipes import resolve_optimizer, resolve_precision
from tensorledger.napkin.transformer import get_preset
from tensorledger.plan.estimate import LayoutChoice, PlanSetup
from tensorledger.plan.experts import (
    alltoall_buffer_bytes,
    expert_choice,
    expert_count,
    expert_degrees,
    expert_matmul,
    moe_layer_saved_bytes,
    moe_layers,
    padded_experts,
    with_experts,
)

H100 = get_hardware("h100")
_MOE = get_preset("tiny-moe")
# tiny-moe (d 64, 6 experts, top 2) of 3 blocks, the first dense
MOE3 = dataclasses.replace(_MOE, n_layers=3,
                           moe=dataclasses.replace(_MOE.moe, first_dense_layers=1))


def test_moe_layers_leave_out_the_dense_block_on_the_first_stage_only() -> None:
    assert moe_layers(MOE3, 3, True) == 2  # 3 less the dense one
    assert moe_layers(MOE3, 3, False) == 3  # a later stage: all its blocks are MoE ones
    assert moe_layers(MOE3, 0, True) == 0  # never below none
    assert moe_layers(get_preset("tiny"), 2, True) == 0  # a dense model has none


@pytest.mark.parametrize(("zero", "shard", "expected_shard"), [(2, 4, 2), (3, 4, 2),
                                                               (0, 1, 1)])
def test_expert_choice_reduces_over_dp_over_ep(zero: int, shard: int,
                                               expected_shard: int) -> None:
    choice = LayoutChoice(dp=8, tp=2, pp=1, zero=zero, shard=shard, ep=2)
    # 8 / 2 = 4 data-parallel ranks hold the same experts; ZeRO-2/3 shard them over
    # shard / ep; ranks tp · ep = 4 apart; no expert parallelism within
    assert expert_choice(choice) == dataclasses.replace(choice, dp=4, shard=expected_shard,
                                                        tp=4, ep=1)


def _setup(config, seq: int) -> PlanSetup:  # type: ignore[no-untyped-def]
    return PlanSetup(config, H100, 4, seq, 8, resolve_precision("fp32"),
                     resolve_optimizer("adamw"), 80e9)


def test_an_all_to_all_buffer_takes_whole_tokens() -> None:
    # 2 sequences of 15 tokens over cp 2: ⌊30 / 2⌋ = 15 tokens a rank, × 2 slots × 64 × 4 B
    choice = LayoutChoice(dp=4, tp=1, pp=1, micro_batch=2, ep=2, cp=2)
    assert alltoall_buffer_bytes(_setup(MOE3, 15), choice, 4) == 15 * 2 * 64 * 4
    # 1 sequence of 15: ⌊15 / 2⌋ = 7 tokens
    one = dataclasses.replace(choice, micro_batch=1)
    assert alltoall_buffer_bytes(_setup(MOE3, 15), one, 4) == 7 * 2 * 64 * 4


def test_an_all_to_all_buffer_needs_routed_experts() -> None:
    with pytest.raises(AssertionError):
        alltoall_buffer_bytes(_setup(get_preset("tiny"), 16),
                              LayoutChoice(dp=4, tp=1, pp=1), 4)


def test_padded_experts_are_whole_where_the_group_divides_them() -> None:
    # tiny-moe's 6 experts on one ep rank over a group of 2: each rank 3 whole experts, so
    # the count handed in (6,145, not even a multiple of 6) comes back as it is
    assert padded_experts(6145, 2, 1, MOE3) == 6145


def test_moe_layer_saved_bytes_split_over_tp_without_ep() -> None:
    # tiny-moe, 16 tokens in fp32 at TP 2 (no EP: the routed experts split too): 32 slots;
    # router 16·6·4 + 32·8 + 32·4 + 16·4 = 832; order 2·32·8 + 6·4 = 536; routed (32·64·4 +
    # 4·32·32·4 + 32·4 + 2·32·64·4) / 2 = 20,544; shared 4·16·48·4 / 2 = 6,144; balance 6·4
    assert moe_layer_saved_bytes(_MOE, 16, 4, False, tp=2) == (
        832 + 536 + 20_544 + 6_144 + 24, 0)


def test_moe_layer_saved_bytes_without_renormalised_weights() -> None:
    # no renormalisation of the top-k weights: no sum saved, 16 · 4 B fewer than the 54,768 B
    # of tiny-moe's 16 fp32 tokens (the doctest's)
    plain = dataclasses.replace(_MOE, moe=dataclasses.replace(_MOE.moe, norm_topk=False))
    assert moe_layer_saved_bytes(plain, 16, 4, False) == (54_768 - 16 * 4, 0)


def test_moe_layer_saved_bytes_of_one_expert_a_token_without_a_balance_loss() -> None:
    # top 1 (nothing to renormalise), no balance loss; 16 fp32 tokens, 16 slots: router
    # 16·6·4 + 16·8 + 16·4 = 576; order 2·16·8 + 6·4 = 280; routed 16·64·4 + 4·16·32·4 +
    # 16·4 + 2·16·64·4 = 20,544; shared 4·16·48·4 = 12,288
    one = dataclasses.replace(_MOE, moe=dataclasses.replace(_MOE.moe, top_k=1,
                                                            aux_loss_coef=0.0))
    assert moe_layer_saved_bytes(one, 16, 4, False) == (576 + 280 + 20_544 + 12_288, 0)


def test_moe_layer_saved_bytes_under_autocast_without_shared_experts() -> None:
    # no shared expert: only the router's input is cast (16 · 64 · 2 B = 2,048); the bf16
    # copies 2 · (64·6 router + 3·6·64·32 experts) = 74,496 B; in bf16: router 832, order
    # 536, routed 32·64·2 + 4·32·32·2 + 32·2 + 2·32·64·2 = 20,544, balance 24
    alone = dataclasses.replace(_MOE, moe=dataclasses.replace(_MOE.moe, n_shared=0))
    assert moe_layer_saved_bytes(alone, 16, 2, True) == (
        832 + 536 + 20_544 + 24 + 2_048 + 74_496, 74_496)


def test_moe_layer_saved_bytes_are_whole_bytes_under_autocast() -> None:
    # EP 4 over 6 experts (a rank holds ⌊6/4⌋ = 1 expert's weights): 16 bf16 tokens, 32
    # slots; router 832; order 3·32·8 + 1·4 = 772; routed whole on the rank 20,544; shared
    # 4·16·48·2 = 6,144; balance 24; casts 16·64·2·3 = 6,144; copies 2 · (64·6 + 3·1·64·32 +
    # 3·64·48) = 31,488
    saved, copies = moe_layer_saved_bytes(_MOE, 16, 2, True, ep=4)
    assert (saved, copies) == (832 + 772 + 20_544 + 6_144 + 24 + 6_144 + 31_488, 31_488)
    assert type(saved) is int and type(copies) is int


def test_moe_layer_saved_bytes_under_ep_keep_routed_experts_whole_at_tp_2() -> None:
    # tiny-moe, 16 fp32 tokens at TP 2 with EP 2: a rank's routed experts are whole, so the
    # routed part is not halved (the shared experts are); 32 slots; router 16·6·4 + 32·8 +
    # 32·4 + 16·4 = 832; order 3·32·8 + (6/2)·4 = 780; routed 32·64·4 + 4·32·32·4 + 32·4 +
    # 2·32·64·4 = 41,088; shared 4·16·48·4 / 2 = 6,144; balance 6·4 = 24
    assert moe_layer_saved_bytes(_MOE, 16, 4, False, tp=2, ep=2) == (
        832 + 780 + 41_088 + 6_144 + 24, 0)


def test_expert_degrees_divide_the_experts_and_the_group_their_state_spans() -> None:
    setup = PlanSetup(_MOE, H100, 12, 16, 12, resolve_precision("fp32"),
                      resolve_optimizer("adamw"), 1e12)
    # tiny-moe's 6 experts; ZeRO-0 over dp 6: gcd(6, 6) = 6, so 1 and each divisor above
    # 1 of 6: 2, 3, 6
    assert expert_degrees(setup, 6, 1, False, 0, 1, None) == (1, 2, 3, 6)
    # ZeRO-2 and 3 over a shard group of 4 (dp 12): gcd(6, 4) = 2
    assert expert_degrees(setup, 12, 1, False, 2, 4, None) == (1, 2)
    assert expert_degrees(setup, 12, 1, False, 3, 4, None) == (1, 2)
    # ZeRO-1, context parallelism, sequence parallelism: no expert parallelism
    assert expert_degrees(setup, 6, 1, False, 1, 6, None) == (1,)
    assert expert_degrees(setup, 6, 2, False, 0, 1, None) == (1,)
    assert expert_degrees(setup, 6, 1, True, 0, 1, None) == (1,)
    # a fixed ep alone, where searched
    assert expert_degrees(setup, 6, 1, False, 0, 1, 3) == (3,)
    assert expert_degrees(setup, 6, 1, False, 0, 1, 4) == ()


def test_expert_matmul_rows_and_routed_share_by_hand() -> None:
    # MOE3: 3 blocks, the first dense (2 MoE blocks), d 64, 6 experts of d_expert 32, top 2
    setup = PlanSetup(MOE3, H100, 12, 16, 12, resolve_precision("fp32"),
                      resolve_optimizer("adamw"), 1e12)
    # routed FLOPs a token: 3 × 2 blocks × 2 · 3 · 2 · 64 · 32 = 294,912, over 1e6
    routed = 3.0 * 2 * 2 * 3 * 2 * 64 * 32
    # EP 3, micro-batch 3: 3 · 16 = 48 tokens, 48 · 2 · 3 / 6 = 48 rows an expert, whole
    share, flops = expert_matmul(setup, LayoutChoice(dp=6, tp=2, pp=1, micro_batch=3, ep=3),
                                 1e6)
    assert share == routed / 1e6
    assert flops == 2.0 * 48 * 64 * 32
    # no EP: 48 · 2 · 1 / 6 = 16 rows, the columns split over TP 2
    _, flops = expert_matmul(setup, LayoutChoice(dp=6, tp=2, pp=1, micro_batch=3), 1e6)
    assert flops == 2.0 * 16 * 64 * 32 / 2
    # CP 2: 3 · 16 // 2 = 24 tokens a rank, 24 · 2 · 3 / 6 = 24 rows
    _, flops = expert_matmul(setup, LayoutChoice(dp=3, cp=2, tp=2, pp=1, micro_batch=3,
                                                 ep=3), 1e6)
    assert flops == 2.0 * 24 * 64 * 32
    dense = PlanSetup(get_preset("tiny"), H100, 12, 16, 12, resolve_precision("fp32"),
                      resolve_optimizer("adamw"), 1e12)
    assert expert_matmul(dense, LayoutChoice(dp=12, tp=1, pp=1), 1e6) == (0.0, 0.0)
    assert (expert_count(MOE3), expert_count(get_preset("tiny"))) == (6, 0)


def test_with_experts_pairs_each_sharding_with_its_expert_degrees() -> None:
    setup = PlanSetup(_MOE, H100, 6, 16, 6, resolve_precision("fp32"),
                      resolve_optimizer("adamw"), 1e12)
    # DP 6, no SP: ZeRO-0 takes ep 1, 2, 3, 6 (gcd(6 experts, dp 6) = 6); ZeRO-1 none
    assert list(with_experts(setup, [(0, 1), (1, 6)], 6, 1, False, None)) == [
        (0, 1, 1), (0, 1, 2), (0, 1, 3), (0, 1, 6), (1, 6, 1)]
    # SP on: ep 1 alone
    assert list(with_experts(setup, [(0, 1), (1, 6)], 6, 1, True, None)) == [
        (0, 1, 1), (1, 6, 1)]
