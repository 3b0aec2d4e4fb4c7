"""timing.py's data-parallel seconds written out per ZeRO stage from the collectives that make
them (each priced by collective_s, itself checked against roofline's collective_time), the
ranks of a group on one node, and collective_s's zero for a group of one."""

from __future__ import annotations

import pytest

from tensorledger.hardware import get_hardware
from tensorledger.napkin.recipes import resolve_optimizer, resolve_precision
from tensorledger.napkin.transformer import get_preset
from tensorledger.plan.estimate import LayoutChoice, PlanSetup, rank_memory
from tensorledger.plan.model import search_model
from tensorledger.plan.timing import _per_node, collective_s, dp_comm_s
from tensorledger.roofline.collectives import CollectiveKind, collective_time

H100 = get_hardware("h100")  # 8 devices a node
AR, RS, AG = (CollectiveKind.ALL_REDUCE, CollectiveKind.REDUCE_SCATTER,
              CollectiveKind.ALL_GATHER)


def _setup(hardware: str = "h100") -> PlanSetup:
    # fp32: 4-byte parameters and gradients
    return PlanSetup(get_preset("tiny"), get_hardware(hardware), 16, 16, 48,
                     resolve_precision("fp32"), resolve_optimizer("adamw"), 1e12)


def test_ranks_of_a_group_on_one_node() -> None:
    setup = _setup()
    assert _per_node(setup, 4, 1) == 4  # gcd(4, 8 / 1)
    assert _per_node(setup, 4, 4) == 2  # members 4 apart: gcd(4, 8 / 4)
    assert _per_node(setup, 6, 1) == 2  # gcd(6, 8)
    assert _per_node(setup, 4, 16) == 1  # 8 // 16 = 0, at least 1
    assert _per_node(_setup("rtx-4090"), 4, 1) == 1  # no node size given: a node of one


def test_collective_s_is_roofline_s_and_nothing_for_one_rank() -> None:
    setup = _setup()
    assert collective_s(setup, AR, 1e6, 1, 1) == 0.0
    # 4 ranks 2 apart: gcd(4, 8 / 2) = 4 on a node
    expected = collective_time(AR, 1e6, 4, H100, ranks_per_node=4).time_s
    assert expected > 0 and collective_s(setup, AR, 1e6, 4, 2) == expected
    assert search_model(setup).collectives[(AR, 1e6, 4, 4)] == expected  # remembered
    assert collective_s(setup, AR, 1e6, 4, 2) == expected  # and read back
    # 4 ranks 4 apart: 2 a node, a different price
    assert collective_s(setup, AR, 1e6, 4, 4) == collective_time(
        AR, 1e6, 4, H100, ranks_per_node=2).time_s


PARAMS = 1000.0  # grads and weights 4 · 1,000 = 4,000 bytes each (fp32)


def _dp(setup: PlanSetup, choice: LayoutChoice, params: float | None = PARAMS) -> float:
    return dp_comm_s(setup, choice, rank_memory(setup, choice), 2, params=params)


def test_plain_data_parallelism_all_reduces_the_gradients_once() -> None:
    setup = _setup()
    choice = LayoutChoice(dp=4, tp=2, pp=1, accumulation=3)
    assert _dp(setup, choice) == collective_s(setup, AR, 4000.0, 4, 2)
    # no params given: the stage's
    memory = rank_memory(setup, choice)
    assert dp_comm_s(setup, choice, memory, 2) == collective_s(
        setup, AR, 4.0 * memory.stage_params, 4, 2)


@pytest.mark.parametrize("zero", [1, 2, 3])
def test_zero_stages_over_a_shard_group_and_its_replicas(zero: int) -> None:
    # DP 8 = 2 replicas × a shard group of 4, TP 1, 3 micro-batches, 2 gathers a pass
    setup = _setup()
    choice = LayoutChoice(dp=8, tp=1, pp=1, zero=zero, shard=4, accumulation=3)
    scatter = collective_s(setup, RS, 4000.0, 4, 1)
    gather = collective_s(setup, AG, 4000.0, 4, 1)
    # the replicas all-reduce their 4,000 / 4 bytes of shard, 2 of them 1 · 4 apart (2 on
    # a node of 8; 1 · 4 ≠ 1 + 4)
    replicas = collective_s(setup, AR, 1000.0, 2, 4)
    total = {1: scatter + gather,  # once a step
             2: 3 * scatter + gather,  # a scatter a micro-batch, one gather
             3: 3 * (scatter + 2 * gather)}[zero]  # and the gathers of every pass
    assert min(scatter, gather, replicas) > 0
    assert _dp(setup, choice) == pytest.approx(total + replicas, rel=1e-12)


@pytest.mark.parametrize("zero", [2, 3])
def test_under_a_pipeline_zero_reduces_once_a_step(zero: int) -> None:
    setup = _setup()
    choice = LayoutChoice(dp=8, tp=1, pp=2, zero=zero, shard=4, accumulation=3,
                          schedule="1f1b")
    scatter = collective_s(setup, RS, 4000.0, 4, 1)
    gather = collective_s(setup, AG, 4000.0, 4, 1)
    replicas = collective_s(setup, AR, 1000.0, 2, 4)
    # ZeRO-2: one scatter, one gather; ZeRO-3 under 1F1B: m + 1 = 4 gathers
    total = scatter + (gather if zero == 2 else 4 * gather)
    assert _dp(setup, choice) == pytest.approx(total + replicas, rel=1e-12)
