"""Checkpointing policies applied with torch.utils.checkpoint and traced: the planner's
prediction from one un-checkpointed trace against the trace of the step with the policy."""

from __future__ import annotations

from functools import cache

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tensorledger.errors import InputError
from tensorledger.hardware import get_hardware
from tensorledger.ledger.checkpointing import (
    checkpoint_profile,
    deep_network_checks,
    traced_figures,
    workload_checks,
)
from tensorledger.plan.checkpoint import (
    CheckpointProfile,
    every_block,
    no_checkpointing,
    optimal_under_budget,
    predict_policy,
    sqrt_segments,
    standard_policies,
)
from tensorledger.workload import resolve_workload
from tensorledger.workload.checkpointing import trace_deep_network

H100 = get_hardware("h100")

# The deep network: B = 512 rows of D = 64, fp32, GELU; one activation is B·D·4 = 131072 bytes.
B, D = 512, 64
UNIT = B * D * 4


def test_sqrt_l_on_the_deep_network_l16() -> None:
    check, = deep_network_checks(D, 16, B, "gelu", [sqrt_segments(16)], H100)
    predicted = check.prediction
    # ⌈√16⌉ = 4: segments [0,4) [4,8) [8,12) recomputed: 12 blocks of a D×D matmul on B rows
    # (2·B·D·D = 4194304) and a GELU (20 per element: 20·B·D = 655360) = 12 · 4849664
    assert predicted.recompute_flops == 12 * (2 * B * D * D + 20 * B * D) == 58195968
    assert check.traced_recompute_flops == predicted.recompute_flops
    # kept: the three segment inputs (x_0 is the network input) + 4 kept blocks × (input and
    # GELU input) + the last output, saved by the loss's square: 3 + 8 = 11 activations
    assert predicted.saved_bytes == 11 * UNIT
    assert check.traced_saved_bytes == pytest.approx(predicted.saved_bytes, rel=0.05)
    assert check.traced_peak_bytes == pytest.approx(predicted.peak_bytes, rel=0.05)
    # the peak is at the start of backward: parameters (16·D²·4 = 2 units) + the 11 kept
    # + the loss's backward temporaries (output, its square's gradient, ...)
    assert 13 * UNIT < predicted.peak_bytes < 20 * UNIT


@cache
def _deep_profile(n_layers: int) -> CheckpointProfile:
    return checkpoint_profile(trace_deep_network(32, n_layers, 128, "gelu"), H100)


@pytest.mark.parametrize("n_layers", [3, 16])
def test_every_policy_on_the_deep_network(n_layers: int) -> None:
    for check in deep_network_checks(32, n_layers, 128, "gelu", standard_policies(n_layers, 3),
                                     H100):
        name = check.prediction.policy.name
        assert check.traced_recompute_flops == check.prediction.recompute_flops, name
        assert abs(check.saved_error) < 0.05, name
        assert check.peak_error <= 0.05, name  # selective's peak is an upper bound


@settings(max_examples=25, deadline=None)
@given(n_layers=st.sampled_from([2, 5, 9, 16]), fraction=st.floats(0.0, 1.2))
def test_the_budget_optimum_on_traced_deep_networks(n_layers: int, fraction: float) -> None:
    profile = _deep_profile(n_layers)
    everything = predict_policy(profile, no_checkpointing(n_layers)).peak_bytes
    budget = int(fraction * everything)
    try:
        best = optimal_under_budget(profile, budget)
    except InputError:
        best = None
    for policy in (no_checkpointing(n_layers), every_block(n_layers), sqrt_segments(n_layers)):
        known = predict_policy(profile, policy)
        if known.peak_bytes <= budget:
            assert best is not None and best.recompute_time_s <= known.recompute_time_s
    if best is not None:
        assert best.peak_bytes <= budget


def test_the_optimum_traced_fits_its_budget() -> None:
    # a budget between √L's peak and every block's: the optimum must beat √L in time and
    # really fit when traced
    profile = _deep_profile(16)
    sqrt_peak = predict_policy(profile, sqrt_segments(16)).peak_bytes
    every_peak = predict_policy(profile, every_block(16)).peak_bytes
    budget = max(sqrt_peak, every_peak) + 1
    best = optimal_under_budget(profile, budget)
    plain = trace_deep_network(32, 16, 128, "gelu")
    saved, peak, recompute = traced_figures(plain, trace_deep_network(32, 16, 128, "gelu",
                                                                      best.policy))
    assert saved == pytest.approx(best.saved_bytes, rel=0.05)
    assert peak <= budget
    assert peak == pytest.approx(best.peak_bytes, rel=0.05)
    assert recompute == best.recompute_flops
    assert best.recompute_time_s <= min(
        predict_policy(profile, p).recompute_time_s for p in (sqrt_segments(16),
                                                              every_block(16)))


def test_every_policy_on_the_tiny_preset() -> None:
    # fake tensors: torch's checkpoint checks recomputed metadata, which meta tensors lack
    work = resolve_workload("tiny", batch=2, seq=24, precision="fp32", step="forward-backward",
                            device="fake")
    checks = workload_checks(work, standard_policies(2, 2), H100)
    assert [c.prediction.policy.name for c in checks] == [
        "none", "every block", "every 2nd block", "sqrt(L) segments", "selective"]
    for check in checks:
        name = check.prediction.policy.name
        assert check.traced_saved_bytes == pytest.approx(check.prediction.saved_bytes,
                                                         rel=0.05), name
        assert check.traced_recompute_flops == check.prediction.recompute_flops, name
    by_name = {c.prediction.policy.name: c.prediction for c in checks}
    # ⌈√2⌉ = 2: one segment, the last, left alone: √L is no checkpointing for two blocks
    assert by_name["sqrt(L) segments"].saved_bytes == by_name["none"].saved_bytes
    # every block recomputes the whole forward of both blocks; every 2nd only block 1
    assert by_name["every block"].recompute_flops == 2 * by_name["every 2nd block"].recompute_flops
    # selective recomputes only the cheap ops: far fewer FLOPs, more bytes kept than full
    assert 0 < by_name["selective"].recompute_flops < by_name["every block"].recompute_flops / 10
    assert by_name["every block"].saved_bytes < by_name["selective"].saved_bytes < (
        by_name["none"].saved_bytes)


def test_what_cannot_be_profiled_is_refused() -> None:
    import torch

    from tensorledger.models import DeepNetwork
    from tensorledger.plan.checkpoint import block_paths, kept_for_backward_bytes, profile_blocks
    from tensorledger.trace import trace

    net = DeepNetwork(4, 2, device="meta")
    forward_only = trace(net, torch.ones(3, 4, device="meta"))
    assert block_paths(forward_only) == ("DeepNetwork.blocks.0", "DeepNetwork.blocks.1")
    with pytest.raises(InputError, match=r"no module list '\.layers\.0'"):
        block_paths(forward_only, "layers")
    with pytest.raises(InputError, match="no backward phase"):
        kept_for_backward_bytes(forward_only, {})
    with pytest.raises(InputError, match="needs a step with a backward pass"):
        profile_blocks(forward_only, {})
    step = trace_deep_network(4, 2, 3)
    with pytest.raises(InputError, match="1 op times for"):
        profile_blocks(step.trace, step.tags, [0.0])
