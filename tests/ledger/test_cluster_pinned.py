"""The cluster's step pinned by hand (issue 42's mutation run of ``tensorledger.ledger.cluster``):
the stretch by the bubble, tokens/s, MFU and HFU, steps of no time, and ``cluster_step``'s
ranks, data parallelism, bubble and in-flight count for each kind of layout."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from tensorledger.ledger.cluster import ClusterStep, cluster_step, pipeline_bubble_of


def _step(**fields: Any) -> ClusterStep:
    values: dict[str, Any] = {
        "ranks": 8, "layout": "FSDP × 4, PP × 2", "data_parallel": 4, "tokens": 100,
        "rank_time_s": 0.3, "overlapped_time_s": 0.15, "communication_s": 0.05,
        "pipeline_bubble": 0.25, "rank_flops": 8e12, "peak_flop_per_s": 1e14}
    values.update(fields)
    return ClusterStep(**values)


def test_the_cluster_step_by_hand() -> None:
    step = _step(recomputed=True, recomputed_flops=2e12)
    assert step.stretch == pytest.approx(4 / 3)  # 1 / (1 − 0.25)
    assert step.step_s == pytest.approx(0.4)  # 0.3 × 4/3
    assert step.overlapped_step_s == pytest.approx(0.2)  # 0.15 × 4/3
    assert step.exposed_communication_s == pytest.approx(0.15)  # 0.3 − 0.15
    # 4 data-parallel ranks × 100 tokens = 400 tokens over 0.4 s and over 0.2 s
    assert step.tokens_per_s == pytest.approx((1000.0, 2000.0))
    # MFU (8 − 2) TFLOP / (100 TFLOP/s × 0.4 s) = 0.15; HFU 8 / 40 = 0.2
    assert step.mfu == pytest.approx(0.15)
    assert step.hfu == pytest.approx(0.2)


def test_a_step_of_no_time_has_no_rate() -> None:
    step = _step(rank_time_s=0.0, overlapped_time_s=0.0)
    assert step.tokens_per_s == (0.0, 0.0) and step.mfu == 0.0 and step.hfu == 0.0
    # a serial step of time but none overlapped: only the overlapped rate is 0
    assert _step(overlapped_time_s=0.0, pipeline_bubble=0.0).tokens_per_s == (
        pytest.approx(400 / 0.3), 0.0)
    assert _step(peak_flop_per_s=0.0).mfu == 0.0 and _step(peak_flop_per_s=0.0).hfu == 0.0


def test_a_cluster_step_defaults_to_nothing_recomputed_and_napkins_bubble() -> None:
    step = _step()
    assert not step.recomputed and step.recomputed_flops == 0.0 and step.in_flight is None
    assert step.bubble_source == "(p − 1)/(v·m + p − 1)"
    assert step.mfu == step.hfu == pytest.approx(0.2)  # 8 TFLOP / (100 TFLOP/s × 0.4 s)


def _work(single: bool = False, count: int = 8, data_parallel: int = 4, pp: int = 1,
          checkpoint: bool = False, schedule: str = "1f1b", chunks: int = 1) -> Any:
    layout = SimpleNamespace(count=count, single=single, data_parallel=data_parallel, pp=pp,
                             schedule=schedule, microbatches=4, chunks=chunks,
                             describe=lambda: "FSDP × 8")
    return SimpleNamespace(layout=layout, tokens=100, checkpoint=checkpoint)


PREDICTION = SimpleNamespace(time_s=0.3, overlapped_time_s=0.15, communication_s=0.05,
                             flops=8e12, recomputed_flops=2e12)


def test_cluster_step_of_a_layout() -> None:
    step = cluster_step(_work(checkpoint=True), PREDICTION, 1e14)  # type: ignore[arg-type]
    assert step == ClusterStep(
        ranks=8, layout="FSDP × 8", data_parallel=4, tokens=100, rank_time_s=0.3,
        overlapped_time_s=0.15, communication_s=0.05, pipeline_bubble=0.0, rank_flops=8e12,
        peak_flop_per_s=1e14, recomputed=True, recomputed_flops=2e12,
        bubble_source="1f1b's action lists", in_flight=None)
    assert type(step.rank_flops) is float and type(step.recomputed_flops) is float
    # a count beside a layout of several devices is not read
    again = cluster_step(_work(), PREDICTION, 1e14, count=3)  # type: ignore[arg-type]
    assert (again.ranks, again.data_parallel, again.layout) == (8, 4, "FSDP × 8")


def test_cluster_step_of_one_device_and_of_independent_replicas() -> None:
    one = _work(single=True, count=1, data_parallel=1)
    step = cluster_step(one, PREDICTION, 1e14)  # type: ignore[arg-type]
    assert (step.ranks, step.data_parallel, step.layout) == (1, 1, "one device")
    step = cluster_step(one, PREDICTION, 1e14, count=3)  # type: ignore[arg-type]
    assert (step.ranks, step.data_parallel, step.layout) == (3, 3, "3 independent replicas")
    step = cluster_step(one, PREDICTION, 1e14, count=2)  # type: ignore[arg-type]
    assert (step.ranks, step.data_parallel, step.layout) == (2, 2, "2 independent replicas")
    step = cluster_step(one, PREDICTION, 1e14, count=1)  # type: ignore[arg-type]
    assert (step.ranks, step.data_parallel, step.layout) == (1, 1, "one device")


def test_a_traced_pipelines_timeline_sets_the_bubble_and_in_flight() -> None:
    timeline = SimpleNamespace(bubble_fraction=0.25, rank_in_flight=(3, 2))
    step = cluster_step(_work(pp=2), PREDICTION, 1e14,  # type: ignore[arg-type]
                        pipeline=timeline)  # type: ignore[arg-type]
    assert step.pipeline_bubble == 0.25 and step.in_flight == 3  # the traced rank's, rank 0


def test_a_pipelines_bubble_is_its_schedules_by_hand() -> None:
    # 1F1B over 2 ranks and 4 micro-batches: (p − 1)/(m + p − 1) = 1/5
    assert pipeline_bubble_of(_work(pp=2)) == pytest.approx(1 / 5)
    assert pipeline_bubble_of(_work(pp=1)) == 0.0
    step = cluster_step(_work(pp=2), PREDICTION, 1e14)  # type: ignore[arg-type]
    assert step.pipeline_bubble == pytest.approx(1 / 5) and step.in_flight is None


def test_a_pipelines_bubble_is_of_its_own_chunk_count() -> None:
    # interleaved 1F1B, 2 ranks of 3 stages each, 4 micro-batches: (p − 1)/(v·m + p − 1)
    # = 1/(12 + 1) = 1/13 (not the 1/9 of the schedule's default 2 chunks)
    work = _work(pp=2, schedule="interleaved-1f1b", chunks=3)
    assert pipeline_bubble_of(work) == pytest.approx(1 / 13)
