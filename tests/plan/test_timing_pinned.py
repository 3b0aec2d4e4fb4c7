"""timing.py pinned: the expert all-to-alls of a step, by hand from the ring formulas
(collective_time called on each buffer): a dispatch in the stream's width, a combine in the
compute dtype's, the counts' int64s, over the MoE blocks a rank holds (the leading dense
block left out on a rank without a pipeline), per micro-batch."""

from __future__ import annotations

import dataclasses

from tensorledger.hardware import get_hardware
from tensorledger.napkin.recipes import resolve_optimizer, resolve_precision
from tensorledger.napkin.transformer import get_preset
from tensorledger.plan.estimate import LayoutChoice, PlanSetup
from tensorledger.plan.timing import ep_comm_s, ring_layer_s
from tensorledger.roofline.collectives import CollectiveKind, collective_time

H100 = get_hardware("h100")
_MOE = get_preset("tiny-moe")
# tiny-moe (d 64, 6 experts, top 2) of 3 blocks, the first dense
MOE3 = dataclasses.replace(_MOE, n_layers=3,
                           moe=dataclasses.replace(_MOE.moe, first_dense_layers=1))


def _a2a(size: float) -> float:
    # an all-to-all over 2 ranks 1 apart, both on one node of 8
    return collective_time(CollectiveKind.ALL_TO_ALL, size, 2, H100, ranks_per_node=2).time_s


def test_expert_all_to_alls_under_autocast_without_a_pipeline() -> None:
    setup = PlanSetup(MOE3, H100, 4, 16, 8, resolve_precision("mixed-bf16"),
                      resolve_optimizer("adamw"), 80e9)
    choice = LayoutChoice(dp=4, tp=1, pp=1, ep=2, micro_batch=1, accumulation=2)
    # 16 tokens × 2 slots × 64 values: the dispatch in fp32 (the stream under autocast)
    # 8,192 B, the combine in bf16 4,096 B; the counts 6 experts × 8 B = 48 B
    one = _a2a(8192.0) + _a2a(4096.0)
    counts = _a2a(48.0)
    # 2 MoE blocks (3 less the dense one: no pipeline, the rank holds the first) × 2
    # micro-batches × (2 dispatch-combine pairs, forward and backward, + 1 count exchange)
    expected = 2 * 2 * (2 * one + counts)
    assert ep_comm_s(setup, choice, 3) == expected


def test_expert_all_to_alls_of_a_pipeline_stage() -> None:
    setup = PlanSetup(MOE3, H100, 8, 16, 8, resolve_precision("fp32"),
                      resolve_optimizer("adamw"), 80e9)
    choice = LayoutChoice(dp=4, tp=1, pp=2, ep=2, micro_batch=1, accumulation=4,
                          schedule="1f1b")
    # fp32 without autocast: both 8,192 B; under a pipeline all 3 blocks count; 4
    # micro-batches
    one = _a2a(8192.0) + _a2a(8192.0)
    expected = 3 * 4 * (2 * one + _a2a(48.0))
    assert ep_comm_s(setup, choice, 3) == expected


def test_the_ring_exchange_of_a_layer_by_hand() -> None:
    setup = PlanSetup(get_preset("tiny"), H100, 4, 16, 8, resolve_precision("fp32"),
                      resolve_optimizer("adamw"), 80e9)
    choice = LayoutChoice(dp=1, cp=4, tp=1, pp=1, zero=3, micro_batch=2)
    # a rank's keys and values: 2 (K and V) · 2 sequences · 2 kv heads · 16/4 tokens · 16
    # · 4 B = 2,048 B; their fp32 gradients the same 2,048 B
    kv = grad = 2 * 2 * 2 * 4 * 16 * 4

    def on_node(kind: CollectiveKind, size: float) -> float:
        # 4 ranks 1 apart, all on one node of 8
        return collective_time(kind, size, 4, H100, ranks_per_node=4).time_s

    # forward's and backward's all-gathers of the 4 ranks' keys and values, and 4 passes of
    # the gradients to the next rank
    expected = (2 * on_node(CollectiveKind.ALL_GATHER, 4.0 * kv)
                + 4 * on_node(CollectiveKind.SEND_RECV, float(grad)))
    assert ring_layer_s(setup, choice) == expected


def test_expert_all_to_alls_of_a_model_of_one_key_value_head() -> None:
    # one key/value head (no tensor parallelism could split it): the all-to-alls are the
    # same as above, read from the rank's own unsplit closed form
    config = dataclasses.replace(MOE3, n_kv_heads=1)
    setup = PlanSetup(config, H100, 4, 16, 8, resolve_precision("mixed-bf16"),
                      resolve_optimizer("adamw"), 80e9)
    choice = LayoutChoice(dp=4, tp=1, pp=1, ep=2, micro_batch=1, accumulation=2)
    expected = 2 * 2 * (2 * (_a2a(8192.0) + _a2a(4096.0)) + _a2a(48.0))
    assert ep_comm_s(setup, choice, 3) == expected
