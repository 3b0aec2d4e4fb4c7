"""Context parallelism inside pipeline stages, fake and real: 4 real gloo ranks under
``torchrun`` (CP 2 × PP 2, the tiny preset, 1F1B over 2 micro-batches; ``cp_pipeline_torchrun.py``)
issue, rank by rank, the same collectives — the ring's all-gathers and permutations, FSDP's
gathers and reductions over the cp ranks, the stages' sends and receives: op, kind, group size,
bytes, phase, order — run the same matmul and attention FLOPs and hold the same parameter
bytes as the first rank of their stage on the fake group predicts (``trace_pipeline_step``
with ``within=Layout(cp=2)``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tensorledger.models import get_preset
from tensorledger.workload.layout import Layout
from tensorledger.workload.pipeline import trace_pipeline_step
from tests.distributed.cp_pipeline_torchrun import (
    BATCH,
    CP,
    MICROBATCHES,
    PP,
    SCHEDULE,
    SEQ,
    result_of,
)
from tests.distributed.launch import torchrun

SCRIPT = Path(__file__).with_name("cp_pipeline_torchrun.py")
TINY = get_preset("tiny")


def _launch(out: Path) -> list[dict[str, Any]]:
    return torchrun(SCRIPT, out, PP * CP, ["cp-pp"])["cp-pp"]


def test_real_cp_pipeline_ranks_match_the_fake_prediction(tmp_path: Path) -> None:
    real = _launch(tmp_path)
    # pp outermost on the mesh: ranks 0, 1 are stage 0's cp ranks, 2, 3 stage 1's
    assert [rank["stage"] for rank in real] == [0, 0, 1, 1]
    for stage in range(PP):
        step = trace_pipeline_step(TINY, BATCH, SEQ, PP, MICROBATCHES, SCHEDULE, stage=stage,
                                   within=Layout(cp=CP))
        predicted = result_of(step.trace.records, [], step.trace.uncovered)
        predicted["params_per_rank"] = step.params_per_rank
        predicted["param_bytes_per_rank"] = step.param_bytes_per_rank
        assert predicted["uncovered"] == {}
        # the ring of 1 layer, 2 micro-batches of b 2 (fp32, the CPU kernel): K = 2·2·2·16·16·4
        # = 8,192 bytes; (cp − 1)·K forward, (cp − 1)·K + cp·K backward: 4·8,192 each
        ring = [c for c in predicted["collectives"] if c[1].startswith("_c10d_functional")]
        assert sum(c[5] for c in ring) == MICROBATCHES * 4 * 8_192
        # causal-halved forward 2·b·h·s²·d/cp = 2·2·4·32²·16/2 = 131,072 a micro-batch,
        # backward 2.5 × that
        assert predicted["attention_flops"] == MICROBATCHES * 3.5 * 131_072
        for rank in real[stage * CP:(stage + 1) * CP]:
            rank = dict(rank)
            assert rank.pop("stage") == stage
            assert rank == predicted, stage
