"""Fake and real pipeline ranks agree beyond one stage per rank: the 2-rank ``torchrun`` launch
(``parallel_torchrun.py``, shared with the other layouts) also steps ``SHAPED_RUNS`` of
``pipeline_torchrun.py`` over gloo with torch's own ``PipelineStage`` and schedules:

- interleaved 1F1B with 3 chunks: tiny with 6 blocks in 6 stages, rank r holding r, r + 2, r + 4;
- ZBV (zero bubble, backward split into input and weight halves): 4 blocks in 4 stages placed
  in a V, rank 0 holding stages 0 and 3, rank 1 stages 1 and 2;
- an uneven 2-stage 1F1B: 3 blocks cut 1 + 2.

Each real rank issues the same send/recv (op, direction, bytes, phase, order), runs the same
matmul FLOPs and holds the same parameter bytes as that rank of the fake group predicts.

Tiny's parts by hand (``test_pipeline.py``): a block 36 992 parameters (36 864 of them in the
matrices a token meets), the token embedding and the head 128·64 = 8192 each, the final norm
64; the whole batch 4 × 16 tokens, d_model 64, fp32.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from tensorledger.models import get_preset
from tensorledger.workload.pipeline import trace_pipeline_step
from tests.distributed.pipeline_torchrun import BATCH, SEQ, SHAPED_RUNS
from tests.distributed.pipeline_torchrun import summary as pipeline_summary

TINY = get_preset("tiny")
F32, BLOCK, MATRICES, TABLE, NORM = 4, 36_992, 36_864, 8192, 64
TOKENS = BATCH * SEQ  # 64

#: name → per rank: (parameters, matmul FLOPs, sends, receives), by hand
EXPECTED = {
    # rank 0: embedding + 3 blocks; rank 1: 3 blocks + norm + head.  6 · 64 tokens · matrices.
    # Sends of rank 0: stage 0's 4 activations, stages 2 and 4: 4 activations and 4 gradients
    # each = 20; rank 1 the same 20 the other way (stage 5's activations are the loss's)
    "interleaved-3": ((TABLE + 3 * BLOCK, 6 * TOKENS * 3 * MATRICES, 20, 20),
                      (3 * BLOCK + NORM + TABLE, 6 * TOKENS * (3 * MATRICES + TABLE), 20, 20)),
    # rank 0: embedding, blocks 0 and 3, norm, head; rank 1: blocks 1 and 2 (their exchange
    # stays on rank 1).  Rank 0 sends stage 0's 4 activations and stage 3's 4 gradients
    "zbv-4": ((TABLE + 2 * BLOCK + NORM + TABLE, 6 * TOKENS * (2 * MATRICES + TABLE), 8, 8),
              (2 * BLOCK, 6 * TOKENS * 2 * MATRICES, 8, 8)),
    # stage 0: embedding + 1 block; stage 1: 2 blocks + norm + head; 2 micro-batches each way
    "uneven-1f1b": ((TABLE + BLOCK, 6 * TOKENS * MATRICES, 2, 2),
                    (2 * BLOCK + NORM + TABLE, 6 * TOKENS * (2 * MATRICES + TABLE), 2, 2)),
}


@pytest.mark.parametrize("name", list(SHAPED_RUNS))
@pytest.mark.parametrize("rank", [0, 1])
def test_each_real_rank_of_a_shaped_pipeline_matches_its_fake_prediction(
        real2: dict[str, list[dict[str, Any]]], name: str, rank: int) -> None:
    schedule, microbatches, chunks, layers, stage_layers = SHAPED_RUNS[name]
    config = dataclasses.replace(TINY, n_layers=layers)
    step = trace_pipeline_step(config, BATCH, SEQ, 2, microbatches, schedule, stage=rank,
                               chunks=chunks, stage_layers=stage_layers)
    predicted = pipeline_summary(step.trace.records, [])
    predicted["params_per_rank"] = step.params_per_rank
    predicted["param_bytes_per_rank"] = step.param_bytes_per_rank
    predicted["uncovered"] = dict(step.trace.uncovered)
    assert real2[name][rank] == predicted
    params, flops, sends, receives = EXPECTED[name][rank]
    assert predicted["params_per_rank"] == params
    assert predicted["param_bytes_per_rank"] == F32 * params
    assert predicted["matmul_flops"] == flops
    # each message one micro-batch's residual stream: b/m · s · d · 4 bytes
    message = BATCH // microbatches * SEQ * 64 * F32
    sent = [p2p[4] for p2p in predicted["p2p"] if p2p[4]]
    received = [p2p[5] for p2p in predicted["p2p"] if p2p[5]]
    assert (sent, received) == ([message] * sends, [message] * receives)
