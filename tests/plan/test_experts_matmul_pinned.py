"""expert_matmul pinned: the routed experts' share of a token's training FLOPs (3 × 2 · 3 ·
k · d · f a MoE block, the leading dense blocks left out) and one expert's up-projection on a
rank (T·k·ep/E rows of d × f, split over TP without EP), by hand on tiny-moe (d 64, 6 experts
of d 32, top 2)."""

from __future__ import annotations

import dataclasses

from tensorledger.hardware import get_hardware
from tensorledger.napkin.recipes import resolve_optimizer, resolve_precision
from tensorledger.napkin.transformer import TransformerConfig, get_preset
from tensorledger.plan.estimate import LayoutChoice, PlanSetup
from tensorledger.plan.experts import expert_count, expert_matmul
from tests.plan.made_up import made_up_profile

_MOE = get_preset("tiny-moe")
assert _MOE.moe is not None
# 3 blocks, the first dense
MOE3 = dataclasses.replace(_MOE, n_layers=3,
                           moe=dataclasses.replace(_MOE.moe, first_dense_layers=1))


def _setup(config: TransformerConfig) -> PlanSetup:
    return PlanSetup(config, get_hardware("h100"), 4, 16, 8, resolve_precision("fp32"),
                     resolve_optimizer("adamw"), 1e12)


def test_the_routed_share_and_one_experts_rows_without_ep() -> None:
    # 2 MoE blocks × 3 × 2 · 3 · 2 · 64 · 32 = 147,456 routed FLOPs a token, of 10^6
    # 3 sequences of 16 over CP 2: 24 tokens, × 2 slots / 6 experts = 8 rows an expert,
    # its columns split over TP 2: 2 · 8 · 64 · 32 / 2
    choice = LayoutChoice(dp=2, cp=2, tp=2, pp=1, micro_batch=3)
    share, flops = expert_matmul(_setup(MOE3), choice, 1e6)
    assert share == 3.0 * 2 * 2 * 3 * 2 * 64 * 32 / 1e6 == 0.147456
    assert flops == 2.0 * 8 * 64 * 32 / 2 == 16_384


def test_expert_parallelism_makes_each_expert_taller_and_whole() -> None:
    # EP 2: 24 · 2 · 2 / 6 = 16 rows an expert, whole on each TP rank
    choice = LayoutChoice(dp=2, cp=2, tp=2, pp=1, micro_batch=3, ep=2)
    _, flops = expert_matmul(_setup(MOE3), choice, 1e6)
    assert flops == 2.0 * 16 * 64 * 32 == 65_536


def test_a_rank_takes_whole_tokens_of_a_sequence_cp_cuts() -> None:
    # 16 tokens over CP 3 (not a cut the search makes): ⌊16 / 3⌋ = 5 tokens, 5 · 2 / 6 rows
    choice = LayoutChoice(dp=1, cp=3, tp=1, pp=1, micro_batch=1)
    _, flops = expert_matmul(_setup(MOE3), choice, 1e6)
    assert flops == 2.0 * (5 * 2 / 6) * 64 * 32


def test_no_routed_experts_no_share() -> None:
    choice = LayoutChoice(dp=1, tp=1, pp=1)
    assert expert_matmul(_setup(get_preset("tiny")), choice, 1e6) == (0.0, 0.0)
    profiled = PlanSetup(made_up_profile(), get_hardware("h100"), 1, 16, 8,
                         resolve_precision("fp32"), resolve_optimizer("adamw"), 1e12)
    assert expert_matmul(profiled, choice, 1e6) == (0.0, 0.0)
    assert (expert_count(MOE3), expert_count(get_preset("tiny")),
            expert_count(made_up_profile())) == (6, 0, 0)
