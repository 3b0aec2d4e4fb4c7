"""Expert parallelism of the reference MoE presets (issue 38): their ``RoutedExperts`` are
recognised and laid out by :mod:`tensorledger.workload.expert_parallel` like transformers'.

tiny-moe: d = 64, 2 layers, E = 6 routed experts, top-k 2.  A step of batch 2 × seq 15 = 30
tokens: 60 token-slots a layer; fp32, 256 bytes a slot; balanced: 10 slots an expert.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from tensorledger.models import build_model, get_preset
from tensorledger.workload import resolve_workload, trace_workload
from tensorledger.workload.expert_parallel import expert_modules
from tensorledger.workload.layout import resolve_layout

E, LAYERS = 6, 2
B, S = 2, 15
SLOTS = B * S * 2  # 60
ROW = 64 * 4  # 256 bytes


def _trace(**layout: Any) -> Any:
    work = resolve_workload("tiny-moe", batch=B, seq=S, step="train", precision="fp32",
                            device="fake", layout=resolve_layout(**layout))
    return trace_workload(work)


@pytest.mark.parametrize("ep", [2, 3])
def test_balanced_all_to_all_bytes_by_hand(ep: int) -> None:
    run = _trace(ep=ep)
    forward = [r.collective for r in run.trace.records if r.collective is not None
               and r.collective.kind == "all-to-all" and r.phase == "forward"]
    # balanced: 10 slots an expert, E / EP of them a rank: each rank keeps 60 / EP and sends
    # the rest, (EP − 1) / EP of them: 30 (EP 2), 40 (EP 3); it runs what every rank sends its
    # experts, 60 / EP from each: 60 slots
    kept = SLOTS // ep
    leave = SLOTS - kept
    assert (leave * ROW) == {2: 7_680, 3: 10_240}[ep]
    counts = (E * 8, E * 8 * (ep - 1) // ep, E * 8 * (ep - 1) // ep)
    dispatch = (SLOTS * ROW, leave * ROW, leave * ROW)
    combine = (SLOTS * ROW, leave * ROW, leave * ROW)
    assert [(c.size_bytes, c.bytes_sent, c.bytes_received) for c in forward] == [
        counts, dispatch, combine] * LAYERS
    assert not run.trace.uncovered
    # a rank holds E / EP experts of each layer: 3 matrices of 64 × 32 each
    single = _trace()
    experts = E * 3 * 64 * 32
    assert sum(single.param_numels) - sum(run.param_numels) == LAYERS * experts * (ep - 1) // ep
    assert run.model_params == single.model_params


@pytest.mark.parametrize("preset", ["tiny-moe", "mixtral-8x7b", "qwen3-30b-a3b",
                                    "deepseek-v3"])
def test_every_reference_moe_preset_has_experts_to_shard(preset: str) -> None:
    config = get_preset(preset)
    assert config.moe is not None
    dense = config.moe.first_dense_layers
    small = dataclasses.replace(config, n_layers=dense + 2, mtp_depth=0)
    found = expert_modules(build_model(small, "meta"))
    # one block of routed experts per MoE layer, after the dense ones
    assert [name for name, _ in found] == [f"blocks.{i}.mlp.experts"
                                           for i in range(dense, dense + 2)]
    assert all(module.gate.shape[0] == config.moe.n_experts for _, module in found)
    resolve_workload(preset, seq=16, layout=resolve_layout(ep=2, fsdp=2))  # accepted
