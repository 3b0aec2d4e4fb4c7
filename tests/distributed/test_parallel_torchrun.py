"""Fake and real agree: FSDP2, DDP (with its own built-in all-reduce, where the fake step uses
a hook doing the same) and DTensor tensor parallelism under ``torchrun --nproc-per-node 2``
(gloo, CPU) issue, on each real rank, the same collectives — op, kind, group size, bytes, phase,
order — hold the same parameter bytes and run the same matmul FLOPs as rank 0 of the fake
process group predicts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from tensorledger.models import build_model, get_preset
from tensorledger.workload.parallel import ParallelStep, Strategy, TpStyle, trace_parallel_step
from tests.distributed.parallel_torchrun import Mlp, summary

SCRIPT = Path(__file__).with_name("parallel_torchrun.py")
TINY = get_preset("tiny")


@pytest.fixture(scope="module")
def real(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict[str, Any]]]:
    out = tmp_path_factory.mktemp("torchrun")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
         str(SCRIPT), str(out)], capture_output=True, text=True, timeout=180, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    return {name: [json.loads((out / f"{name}.rank{r}.json").read_text()) for r in (0, 1)]
            for name in ("fsdp", "ddp", "tp")}


def _tiny() -> torch.nn.Module:
    return build_model(TINY, "cpu")


def _tokens() -> torch.Tensor:
    return torch.randint(0, TINY.vocab_size, (2, 16))


def _predicted(step: ParallelStep) -> dict[str, Any]:
    # the fake rank's own parameter figures are checked against the real ones below
    result = summary(step.trace.records, [], step.trace.uncovered)
    result["params_per_rank"] = step.params_per_rank
    result["param_bytes_per_rank"] = step.param_bytes_per_rank
    return result


@pytest.mark.parametrize(("name", "predict", "collectives"), [
    ("fsdp", lambda: trace_parallel_step(_tiny, _tokens, Strategy.FSDP, 2), 8),
    ("ddp", lambda: trace_parallel_step(_tiny, _tokens, Strategy.DDP, 2), 1),
    ("tp", lambda: trace_parallel_step(Mlp, lambda: torch.ones(3, 5, 24), Strategy.TP, 2,
                                       {"up": TpStyle.COLWISE, "down": TpStyle.ROWWISE}), 2),
])
def test_real_ranks_match_the_fake_prediction(real: dict[str, list[dict[str, Any]]], name: str,
                                              predict: Any, collectives: int) -> None:
    predicted = _predicted(predict())
    # FSDP: 3 all-gathers forward, 2 backward, 3 reduce-scatters; DDP: one gradient bucket;
    # TP: the row-parallel output's all-reduce, the column-parallel input gradient's
    assert len(predicted["collectives"]) == collectives
    assert predicted["uncovered"] == {}
    for rank in real[name]:
        assert rank == predicted
