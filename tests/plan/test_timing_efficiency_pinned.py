"""matmul_efficiency pinned: the chip's published fraction read at the size of the layer's
largest matmul on the rank (a profile's measured one, or the closed form's MLP up-projection
2·b·s·h·d_ff/t), a mixture of experts' routed share blended at one expert's grouped GEMM,
the asked efficiency as it is, and 1 for a chip that publishes none.  The sizes are chosen
on the H100's curve (3.4e7 to 1.4e11 FLOPs), where a different size reads a different
fraction."""

from __future__ import annotations

import dataclasses

import pytest

from tensorledger.hardware import get_hardware
from tensorledger.napkin.recipes import resolve_optimizer, resolve_precision
from tensorledger.napkin.transformer import TransformerConfig, get_preset
from tensorledger.plan.estimate import LayoutChoice, PlanSetup
from tensorledger.plan.model import search_model
from tensorledger.plan.profile import ModelProfile
from tensorledger.plan.timing import matmul_efficiency
from tests.plan.made_up import made_up_profile

H100 = get_hardware("h100")
CURVE = H100.efficiency
assert CURVE is not None


def _setup(config: TransformerConfig | ModelProfile, dtype: str = "bf16",
           hardware: object = H100, efficiency: float | None = None) -> PlanSetup:
    return PlanSetup(config, hardware, 8, 16, 8, resolve_precision("bf16"),  # type: ignore[arg-type]
                     resolve_optimizer("adamw"), 1e12, efficiency=efficiency, dtype=dtype)


def test_a_profiles_largest_matmul_sets_the_fraction() -> None:
    # 10^7 FLOPs a token in its largest matmul: 2 sequences of 16 / CP 2 = 16 tokens, over
    # TP 2: 8 · 10^7 = 8e7 FLOPs
    setup = _setup(made_up_profile(largest_matmul_flops_per_token=1e7))
    choice = LayoutChoice(dp=2, cp=2, tp=2, pp=1, micro_batch=2)
    expected = CURVE.matmul_fraction("bf16", 2 * (16 // 2) * 1e7 / 2)
    assert expected != CURVE.matmul_fraction("bf16", 2 * 16 * 1e7 / 2)  # the size tells
    assert matmul_efficiency(setup, choice) == expected


def test_the_closed_forms_mlp_up_projection_sets_the_fraction() -> None:
    # d 1,024 and d_ff 4,096: 2 · 2 sequences · 16 / CP 2 tokens · 1,024 · 4,096 / TP 2
    wide = dataclasses.replace(get_preset("tiny"), d_model=1024, d_ff=4096)
    choice = LayoutChoice(dp=2, cp=2, tp=2, pp=1, micro_batch=2)
    flops = 2.0 * 2 * (16 // 2) * 1024 * 4096 / 2
    assert flops == 67_108_864
    assert matmul_efficiency(_setup(wide), choice) == CURVE.matmul_fraction("bf16", flops)
    # fp8's curve is its own
    assert matmul_efficiency(_setup(wide, "fp8"), choice) == CURVE.matmul_fraction("fp8", flops)
    assert CURVE.matmul_fraction("fp8", flops) != CURVE.matmul_fraction("bf16", flops)


def test_the_asked_efficiency_or_none_published_is_taken_as_it_is() -> None:
    wide = dataclasses.replace(get_preset("tiny"), d_model=1024, d_ff=4096)
    choice = LayoutChoice(dp=8, tp=1, pp=1)
    assert matmul_efficiency(_setup(wide, efficiency=0.25), choice) == 0.25
    bare = dataclasses.replace(H100, efficiency=None)
    assert matmul_efficiency(_setup(wide, hardware=bare), choice) == 1.0


def test_a_mixture_of_experts_blends_the_routed_share_at_one_experts_gemm() -> None:
    # tiny-moe (6 experts, top 2, 2 blocks) widened: d 1,024, each expert's d_expert 4,096,
    # the dense MLP's d_ff 4,096
    base = get_preset("tiny-moe")
    assert base.moe is not None
    moe = dataclasses.replace(base, d_model=1024, d_ff=4096,
                              moe=dataclasses.replace(base.moe, d_expert=4096))
    assert moe.moe is not None
    k, experts = moe.moe.top_k, moe.moe.n_experts
    assert (k, experts, moe.n_layers, moe.moe.first_dense_layers) == (2, 6, 2, 0)
    setup = _setup(moe)
    choice = LayoutChoice(dp=4, tp=2, pp=1, ep=2, micro_batch=2)
    # the routed FLOPs a token: 3 × 2 · 3 · k · d · f a block, 2 blocks
    share = 3.0 * 2 * 2 * 3 * 2 * 1024 * 4096 / search_model(setup).flops_per_token
    assert 0 < share < 1
    # 32 tokens × k 2 × ep 2 / 6 experts rows an expert, whole on the tp ranks (EP)
    rows = 32 * 2 * 2 / 6
    routed = CURVE.matmul_fraction("bf16", 2.0 * rows * 1024 * 4096)
    dense = CURVE.matmul_fraction("bf16", 2.0 * 2 * 16 * 1024 * 4096 / 2)
    assert routed != dense
    assert matmul_efficiency(setup, choice) == pytest.approx(
        1.0 / ((1.0 - share) / dense + share / routed), rel=1e-12)
    # in fp8 both read fp8's curve
    routed8 = CURVE.matmul_fraction("fp8", 2.0 * rows * 1024 * 4096)
    dense8 = CURVE.matmul_fraction("fp8", 2.0 * 2 * 16 * 1024 * 4096 / 2)
    assert routed8 != routed
    assert matmul_efficiency(_setup(moe, "fp8"), choice) == pytest.approx(
        1.0 / ((1.0 - share) / dense8 + share / routed8), rel=1e-12)


def test_a_rank_takes_whole_tokens_of_a_sequence_cp_cuts() -> None:
    # CP 3 (not a cut the search makes) of 16 tokens: ⌊16 / 3⌋ = 5 tokens a rank
    profile = made_up_profile(largest_matmul_flops_per_token=1e7)
    choice = LayoutChoice(dp=1, cp=3, tp=1, pp=1, micro_batch=2)
    assert matmul_efficiency(_setup(profile), choice) == CURVE.matmul_fraction(
        "bf16", 2 * 5 * 1e7)
    wide = dataclasses.replace(get_preset("tiny"), d_model=1024, d_ff=4096)
    assert matmul_efficiency(_setup(wide), choice) == CURVE.matmul_fraction(
        "bf16", 2.0 * 2 * 5 * 1024 * 4096)
