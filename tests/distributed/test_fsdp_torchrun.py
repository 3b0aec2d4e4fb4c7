"""Fake and real agree: FSDP2 on the tiny preset under ``torchrun --nproc-per-node 2`` (gloo,
CPU) issues, on each real rank, the same collectives — op, kind, group size, bytes — in the
same order and phase, holds the same parameter bytes and runs the same matmul FLOPs as rank 0
of the fake process group predicts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import torch

from tensorledger.models import build_model, get_preset
from tensorledger.workload.parallel import Strategy, trace_parallel_step

SCRIPT = Path(__file__).with_name("fsdp_torchrun.py")
TINY = get_preset("tiny")


def test_fsdp_collectives_on_real_ranks_match_the_fake_prediction(tmp_path: Path) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
         str(SCRIPT), str(tmp_path)], capture_output=True, text=True, timeout=180, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    real = [json.loads((tmp_path / f"fsdp.rank{r}.json").read_text()) for r in (0, 1)]

    fake = trace_parallel_step(lambda: build_model(TINY, "cpu"),
                               lambda: torch.randint(0, TINY.vocab_size, (2, 16)),
                               Strategy.FSDP, 2)
    predicted = [[r.phase, r.op, r.collective.kind, r.collective.group_size,
                  r.collective.size_bytes, r.collective.bytes_sent, r.collective.bytes_received]
                 for r in fake.trace.records if r.collective is not None]
    matmul = sum(r.flops for r in fake.trace.records
                 if r.category == "matmul" and r.phase in ("forward", "backward"))
    assert len(predicted) == 8  # 3 all-gathers forward, 2 backward, 3 reduce-scatters
    for rank in real:
        assert rank["collectives"] == predicted
        assert rank["uncovered"] == {}
        assert rank["params_per_rank"] == fake.params_per_rank
        assert rank["param_bytes_per_rank"] == fake.param_bytes_per_rank
        assert rank["matmul_flops"] == matmul
