"""Fake and real agree: real gloo ranks under ``torchrun --nproc-per-node 2`` and ``4`` (CPU)
issue, on each rank, the same collectives — op, kind, group size, bytes, phase, order — hold the
same parameter bytes and run the same matmul FLOPs as rank 0 of the fake process group predicts.

Two launches in all (one per world size), each running its layouts in sequence
(``parallel_torchrun.py``): with 2 ranks FSDP2 ZeRO-3, DDP and a tensor-parallel MLP wrapped by
torch's own calls, then ZeRO-1, TP, TP + SP and FSDP2 ZeRO-2 on the tiny preset laid out by the
library's ``build_mesh`` / ``parallelize`` / ``make_optimizer``; with 4 ranks FSDP × TP 2 × 2
and HSDP 2 × 2.  The real DDP (and ZeRO-1's DDP) uses its built-in all-reduce, the fake one a
hook doing the same; every collective matched exactly, DDP's bucket included (all of tiny's
gradients fit in DDP's first 1 MiB bucket, so there is no bucket order to differ).

ZeRO-1's optimizer state differs between the ranks by construction (each holds its partition):
rank 0's equals the fake prediction and the ranks' states add up to the whole.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from tensorledger.memory import build_timeline
from tensorledger.models import build_model, get_preset
from tensorledger.workload.layout import Layout
from tensorledger.workload.parallel import ParallelStep, TpStyle, trace_parallel_step
from tensorledger.workload.pipeline import trace_pipeline_step
from tests.distributed.parallel_torchrun import LAYOUTS, TOKENS_SHAPE, Mlp, summary
from tests.distributed.pipeline_torchrun import BATCH, RUNS, SEQ
from tests.distributed.pipeline_torchrun import summary as pipeline_summary

TINY = get_preset("tiny")
F32 = 4


def _tiny() -> torch.nn.Module:
    return build_model(TINY, "cpu")


def _tokens() -> torch.Tensor:
    return torch.randint(0, TINY.vocab_size, TOKENS_SHAPE)


def _predicted(step: ParallelStep) -> dict[str, Any]:
    # the fake rank's own parameter figures are checked against the real ones below
    result = summary(step.trace.records, [], step.trace.uncovered)
    result["params_per_rank"] = step.params_per_rank
    result["param_bytes_per_rank"] = step.param_bytes_per_rank
    if step.layout.strategy in ("fsdp", "hsdp"):  # FSDP2's resizes told on both sides
        result["peak_bytes"] = build_timeline(step.trace, {}).peak_bytes
    return result


def _compare(real: list[dict[str, Any]], predicted: dict[str, Any]) -> None:
    assert predicted["uncovered"] == {}
    for rank in real:
        rank = dict(rank)
        rank.pop("optimizer_state_bytes")
        rank.pop("grad_bytes")
        assert rank == predicted


@pytest.mark.parametrize(("name", "predict", "collectives"), [
    ("fsdp", lambda: trace_parallel_step(_tiny, _tokens, Layout(fsdp=2)), 8),
    ("ddp", lambda: trace_parallel_step(_tiny, _tokens, Layout(dp=2)), 1),
    ("tp", lambda: trace_parallel_step(Mlp, lambda: torch.ones(3, 5, 24), Layout(tp=2),
                                       {"up": TpStyle.COLWISE, "down": TpStyle.ROWWISE}), 2),
])
def test_real_ranks_match_the_fake_prediction(real2: dict[str, list[dict[str, Any]]], name: str,
                                              predict: Any, collectives: int) -> None:
    step = predict()
    predicted = _predicted(step)
    # FSDP: 3 all-gathers forward, 2 backward, 3 reduce-scatters; DDP: one gradient bucket;
    # TP: the row-parallel output's all-reduce, the column-parallel input gradient's
    assert len(predicted["collectives"]) == collectives
    _compare(real2[name], predicted)
    assert [rank["grad_bytes"] for rank in real2[name]] == [step.grad_bytes_per_rank] * 2


@pytest.mark.parametrize(("ranks", "name"), [
    (ranks, name) for ranks, layouts in LAYOUTS.items() for name in layouts])
def test_library_layouts_on_real_ranks_match_the_fake_prediction(
        request: pytest.FixtureRequest, ranks: int, name: str) -> None:
    real = request.getfixturevalue(f"real{ranks}")[name]
    layout = Layout(**LAYOUTS[ranks][name])
    step = trace_parallel_step(_tiny, _tokens, layout)
    assert step.trace.records and any(r.collective for r in step.trace.records)
    _compare(real, _predicted(step))
    states = [rank["optimizer_state_bytes"] for rank in real]
    assert states[0] == step.optimizer_state_bytes_per_rank
    # the gradients rank 0 holds after backward: the same bytes as the fake rank's
    assert real[0]["grad_bytes"] == step.grad_bytes_per_rank > 0
    if layout.strategy == "zero1" and layout.tp > 1:
        # ranks 0 and 2 hold one TP shard (45 376 values: half of tiny's 90 432 but its 320
        # norm weights, which every TP rank keeps whole), partitioned between them by whole
        # tensors: together two fp32 moments of the shard and a step counter per tensor (21)
        assert states[0] + states[2] == 2 * F32 * 45_376 + 21 * F32
    elif layout.strategy == "zero1":
        # each rank's AdamW holds two fp32 moments of its own partition and a 4-byte step
        # counter per parameter tensor: together, those of all 21 of tiny's tensors
        params = sum(p.numel() for p in _tiny().parameters())
        assert sum(states) == 2 * F32 * params + 21 * F32
        assert states[0] != states[1]
    else:
        assert len(set(states)) == 1


# ---- pipelines: the 2-rank launch steps each schedule of pipeline_torchrun.RUNS too; each real
# stage issues the same send/recv (op, direction, bytes, phase, order), runs the same matmul
# FLOPs and holds the same parameter bytes as that rank of the fake group predicts
# (trace_pipeline_step with ``stage`` = the rank; torch's own PipelineStage on the real ranks,
# whose warm-up vote the fake rank's stage answers: see tensorledger.workload.pipeline)

@pytest.mark.parametrize("name", list(RUNS))
@pytest.mark.parametrize("rank", [0, 1])
def test_each_real_pipeline_rank_matches_its_fake_prediction(real2: dict[str, list[dict[str, Any]]],
                                                             name: str, rank: int) -> None:
    schedule, microbatches = RUNS[name]
    step = trace_pipeline_step(TINY, BATCH, SEQ, 2, microbatches, schedule, stage=rank)
    predicted = pipeline_summary(step.trace.records, [])
    predicted["params_per_rank"] = step.params_per_rank
    predicted["param_bytes_per_rank"] = step.param_bytes_per_rank
    predicted["uncovered"] = dict(step.trace.uncovered)
    assert real2[name][rank] == predicted
    # by hand: m messages each way, each b/m · s · d · 4 bytes (m 2: 8192, m 4: 4096)
    message = BATCH // microbatches * SEQ * 64 * F32
    sent = [p2p[4] for p2p in predicted["p2p"] if p2p[4]]
    received = [p2p[5] for p2p in predicted["p2p"] if p2p[5]]
    assert sent == received == [message] * microbatches
    # stage 0: embedding 8192 + block 36 992; stage 1: block 36 992 + norm 64 + head 8192
    assert predicted["param_bytes_per_rank"] == F32 * (45_184, 45_248)[rank]
    # 6 · 64 tokens · the matrices (36 864 per block, 8192 the head)
    assert predicted["matmul_flops"] == 6 * 64 * (36_864, 36_864 + 8192)[rank]
