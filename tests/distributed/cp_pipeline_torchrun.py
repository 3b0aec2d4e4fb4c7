"""One rank of the context-parallel pipeline fake-versus-real test: the tiny preset cut into 2
stages (1F1B, 2 micro-batches), each stage laid out over 2 context-parallel ranks (FSDP over
them, torch's ring attention inside each stage's forward and backward) on 4 gloo ranks, by the
library's ``build_mesh`` and ``build_pipeline_rank`` (torch's own ``PipelineStage``, schedule,
``fully_shard`` and ``context_parallel``).  The second step is recorded; the rank writes what
it saw as ``OUT_DIR/cp-pp.rank<r>.json``.

Run by ``test_cp_pipeline_torchrun.py`` as
``torchrun --standalone --nproc-per-node 4 THIS OUT_DIR``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import torch

#: The whole batch (split into MICROBATCHES by the first stage) and sequence: each of the 2
#: cp ranks holds 2 chunks of 8 tokens of every sequence.
BATCH, SEQ, MICROBATCHES, PP, CP = 4, 32, 2, 2, 2
SCHEDULE = "1f1b"


def result_of(records: Any, params: list[torch.Tensor], uncovered: Any) -> dict[str, Any]:
    """What the fake and the real rank are compared on: every collective (the ring's, FSDP's
    and the stages' sends and receives), matmul and attention FLOPs, parameter bytes."""
    from tests.distributed.parallel_torchrun import summary

    result = summary(records, params, uncovered)
    result["attention_flops"] = sum(r.flops_causal_halved for r in records
                                    if "scaled_dot_product" in r.op)
    return result


def main(out_dir: Path) -> None:
    import torch.distributed as dist

    from tensorledger.models import get_preset
    from tensorledger.trace import Recorder
    from tensorledger.workload.context_parallel import sequence_sharded
    from tensorledger.workload.layout import Layout
    from tensorledger.workload.parallel import build_mesh
    from tensorledger.workload.pipeline import (
        build_pipeline_rank,
        resolve_schedule,
        run_pipeline_step,
    )

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    config = get_preset("tiny")
    kind = resolve_schedule(SCHEDULE)
    within = Layout(cp=CP)
    mesh = build_mesh(Layout(pp=PP, cp=CP, microbatches=MICROBATCHES, schedule=SCHEDULE))
    stage = mesh["pp"].get_local_rank()
    torch.manual_seed(0)  # every rank holds the same tokens before the cut
    tokens = torch.randint(0, config.vocab_size, (BATCH, SEQ))
    modules, runner = build_pipeline_rank(config, PP, stage, 1, kind, MICROBATCHES,
                                          BATCH // MICROBATCHES, SEQ, within=within,
                                          mesh=mesh)
    held = kind.placement(PP, 1, stage)
    params = [p for module in modules for p in module.parameters()]
    optimizer = torch.optim.AdamW(params, lr=1e-3)

    def step() -> None:
        run_pipeline_step(runner, held, PP, tokens)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    with sequence_sharded(mesh["cp"], [tokens]):
        step()
        with Recorder() as recorder:
            step()
    result = result_of(recorder.trace.records, params, recorder.trace.uncovered)
    result["stage"] = stage
    (out_dir / f"cp-pp.rank{rank}.json").write_text(json.dumps(result))
    dist.destroy_process_group()


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    main(Path(sys.argv[1]))
