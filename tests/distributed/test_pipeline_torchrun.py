"""Fake and real pipelines agree: two gloo ranks under ``torchrun --nproc-per-node 2`` (CPU),
each stepping its stage of the tiny preset through GPipe and 1F1B with 2 and 4 micro-batches
(within the 2-rank launch of ``parallel_torchrun.py``: see conftest.py), issue on each rank
the same send/recv — op, direction, bytes, phase, order — run the same matmul FLOPs and hold
the same parameter bytes as that rank of the fake process group predicts
(:func:`trace_pipeline_step` with ``stage`` = the rank).

The real ranks run torch's own ``PipelineStage``, whose warm-up vote is really exchanged; the
fake rank's stage supplies the vote's answer (see :mod:`tensorledger.workload.pipeline`).
"""

from __future__ import annotations

from typing import Any

import pytest

from tensorledger.models import get_preset
from tensorledger.workload.pipeline import trace_pipeline_step
from tests.distributed.pipeline_torchrun import BATCH, RUNS, SEQ, summary

TINY = get_preset("tiny")
F32 = 4


@pytest.mark.parametrize("name", list(RUNS))
@pytest.mark.parametrize("rank", [0, 1])
def test_each_real_rank_matches_its_fake_prediction(real2: dict[str, list[dict[str, Any]]],
                                                    name: str, rank: int) -> None:
    schedule, microbatches = RUNS[name]
    step = trace_pipeline_step(TINY, BATCH, SEQ, 2, microbatches, schedule, stage=rank)
    predicted = summary(step.trace.records, [])
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
