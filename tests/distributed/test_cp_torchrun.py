"""Context parallelism, fake and real: real gloo ranks (CPU) under ``torchrun`` running torch's
ring attention issue, on each rank, the same collectives — op, kind, group size, bytes, phase,
order — hold the same parameter bytes and run the same matmul and attention FLOPs as rank 0
of the fake process group predicts (``trace_parallel_step`` with ``Layout(cp=...)``).

Gloo is CPU-only, and torch's ring has no CPU kernel: the real ranks run the ring the library
registers for the CPU's fused attention kernel (torch's own ring template), as the fake rank
does when the target is this CPU.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from tensorledger.models import build_model, get_preset
from tensorledger.workload.layout import Layout
from tensorledger.workload.parallel import trace_parallel_step
from tests.distributed.cp_torchrun import CP_LAYOUTS, TOKENS_SHAPE
from tests.distributed.launch import torchrun
from tests.distributed.parallel_torchrun import summary

SCRIPT = Path(__file__).with_name("cp_torchrun.py")
TINY = get_preset("tiny")


def _launch(out: Path, ranks: int) -> dict[str, list[dict[str, Any]]]:
    return torchrun(SCRIPT, out, ranks, CP_LAYOUTS[ranks])


@pytest.mark.parametrize("ranks", sorted(CP_LAYOUTS))
def test_real_cp_ranks_match_the_fake_prediction(tmp_path: Path, ranks: int) -> None:
    real = _launch(tmp_path, ranks)
    for name, fields in CP_LAYOUTS[ranks].items():
        step = trace_parallel_step(lambda: build_model(TINY, "cpu"),
                                   lambda: torch.zeros(TOKENS_SHAPE, dtype=torch.long),
                                   Layout(**fields))
        records = step.trace.records
        predicted = summary(records, [], step.trace.uncovered)
        predicted["params_per_rank"] = step.params_per_rank
        predicted["param_bytes_per_rank"] = step.param_bytes_per_rank
        predicted["attention_flops"] = sum(r.flops_causal_halved for r in records
                                           if "scaled_dot_product" in r.op)
        assert predicted["uncovered"] == {}
        # the ring per layer: an all-gather of K and V forward, again backward, and 2
        # permutes of their fp32 gradients: K = 2·b·kv_heads·s_r·d·4 = 2·2·2·32·16·4 = 16,384
        ring = [c for c in predicted["collectives"] if c[1].startswith("_c10d_functional")]
        assert sum(c[5] for c in ring) == 2 * 4 * 16_384
        # causal-halved attention forward 2·b·h·s²·d/cp per layer = 2·2·4·64²·16/2 = 524,288,
        # backward 2.5 × that: 2 layers · 3.5 · 524,288
        assert predicted["attention_flops"] == 2 * 3.5 * 524_288
        for rank in real[name]:
            rank = dict(rank)
            assert rank.pop("grad_bytes") == step.grad_bytes_per_rank
            assert rank == predicted, name
