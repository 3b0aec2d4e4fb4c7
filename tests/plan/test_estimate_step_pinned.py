"""step_time term by term, as the module's docstring writes it: the model's FLOPs and the
recomputation each checkpoint adds, one micro-batch's roofline, the exposed data-parallel
communication, and the tensor-parallel collectives (all-reduces, or an all-gather and a
reduce-scatter under SP; five of them, five and a half under SP, with full recomputation).
The model's counts, the collectives' seconds and the data-parallel seconds are asked of the
functions that price them (each pinned in its own file); the arithmetic that joins them is
written here."""

from __future__ import annotations

import pytest

from tensorledger.hardware import get_hardware
from tensorledger.napkin.recipes import resolve_optimizer, resolve_precision
from tensorledger.napkin.transformer import get_preset
from tensorledger.plan.estimate import LayoutChoice, PlanSetup, rank_memory, step_time
from tensorledger.plan.model import search_model
from tensorledger.plan.timing import collective_s, dp_comm_s
from tensorledger.roofline.collectives import CollectiveKind

H100 = get_hardware("h100")
TINY = get_preset("tiny")  # 2 layers, d_model 64
PEAK = H100.peak_flop_per_s("bf16")
BANDWIDTH = H100.memory_bandwidth_bytes_per_s


def _setup(count: int, attention: str = "flash", batch: int = 4) -> PlanSetup:
    # fp32 (4-byte parameters and gradients), sequences of 16 tokens (4 of them: 64 tokens a
    # step), half the peak
    return PlanSetup(TINY, H100, count, 16, batch, resolve_precision("fp32"),
                     resolve_optimizer("adamw"), 1e12, efficiency=0.5, attention=attention)


def test_ddp_with_full_recomputation_term_by_term() -> None:
    # 8 sequences (128 tokens) over DP 2: 4 a rank, in 4 micro-batches of 1
    setup = _setup(2, batch=8)
    choice = LayoutChoice(dp=2, tp=1, pp=1, micro_batch=1, accumulation=4, checkpoint="full")
    model = search_model(setup)
    memory = rank_memory(setup, choice)
    time = step_time(setup, choice, memory)
    model_flops = float(model.flops_per_token) * 128
    recompute = float(model.forward_per_token) * 128  # full: one more forward
    assert (time.model_flops, time.recompute_flops) == (model_flops, recompute)
    # a micro-batch on a rank: 1/(2 ranks · 4 micro-batches) of the FLOPs, against its
    # weight traffic: the parameters × 2 × (4 + 4) bytes
    flops_micro = (model_flops + recompute) / (2 * 4)
    bytes_micro = memory.stage_params * 2 * (4 + 4)
    assert time.intensity_flop_per_byte == pytest.approx(flops_micro / bytes_micro, rel=1e-12)
    compute = 4 * max(flops_micro / (PEAK * 0.5), bytes_micro / BANDWIDTH)
    assert time.compute_s == pytest.approx(compute, rel=1e-12)
    assert time.memory_bound == (flops_micro / bytes_micro < PEAK * 0.5 / BANDWIDTH)
    assert (time.imbalance, time.bubble_to_compute, time.tp_comm_s) == (1.0, 0.0, 0.0)
    dp = dp_comm_s(setup, choice, memory, 2, params=memory.stage_params)
    assert dp > 0 and time.dp_comm_s == pytest.approx(dp, rel=1e-12)
    # overlapped but for the last of 2 layers' bucket
    exposed = max(0.0, dp - compute) + dp / 2
    assert time.dp_exposed_s == pytest.approx(exposed, rel=1e-12)
    step = compute + exposed
    assert time.step_s == pytest.approx(step, rel=1e-12)
    assert time.tokens_per_s == pytest.approx(128 / step, rel=1e-12)
    assert time.mfu == pytest.approx(model_flops / (step * 2 * PEAK), rel=1e-12)
    assert time.hfu == pytest.approx((model_flops + recompute) / (step * 2 * PEAK), rel=1e-12)
    assert (time.efficiency, time.cp_comm_s, time.ep_comm_s) == (0.5, 0.0, 0.0)


@pytest.mark.parametrize(("sp", "checkpoint", "per_layer"), [
    (False, "none", 4.0), (False, "full", 5.0), (True, "none", 4.0), (True, "full", 5.5)])
def test_tensor_parallel_collectives_per_layer(sp: bool, checkpoint: str,
                                               per_layer: float) -> None:
    # TP 2 on 2 devices, 4 sequences in micro-batches of 2 (m = 2): a collective moves one
    # micro-batch's 2 · 16 tokens × d_model 64 in the activations' dtype
    setup = _setup(2)
    choice = LayoutChoice(dp=1, tp=2, pp=1, sp=sp, micro_batch=2, accumulation=2,
                          checkpoint=checkpoint)
    model = search_model(setup)
    closed, _ = model.activations(setup, 2, 1, False, False)
    size = float(closed.dtype_bytes * 2 * 16 * 64)
    if sp:
        one = (collective_s(setup, CollectiveKind.ALL_GATHER, size, 2, 1)
               + collective_s(setup, CollectiveKind.REDUCE_SCATTER, size, 2, 1))
    else:
        one = collective_s(setup, CollectiveKind.ALL_REDUCE, size, 2, 1)
    assert one > 0
    time = step_time(setup, choice, rank_memory(setup, choice))
    # 2 layers × per_layer collectives × 2 micro-batches
    assert time.tp_comm_s == pytest.approx(2 * per_layer * 2 * one, rel=1e-12)


def test_selective_recomputation_is_the_attention_forward() -> None:
    setup = _setup(1, attention="eager")
    choice = LayoutChoice(dp=1, tp=1, pp=1, micro_batch=4, accumulation=1,
                          checkpoint="selective")
    model = search_model(setup)
    time = step_time(setup, choice, rank_memory(setup, choice))
    assert time.recompute_flops == float(model.attention_forward_per_token) * 64
    assert 0 < time.recompute_flops < float(model.forward_per_token) * 64
    none = LayoutChoice(dp=1, tp=1, pp=1, micro_batch=4, accumulation=1)
    assert step_time(setup, none, rank_memory(setup, none)).recompute_flops == 0.0
