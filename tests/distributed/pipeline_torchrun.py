"""One rank of the fake-versus-real pipeline test: the tiny preset cut into 2 stages, each
schedule of :data:`RUNS` stepped twice over gloo on the CPU with torch's own ``PipelineStage``
(the second step recorded, as :func:`tensorledger.workload.pipeline.trace_pipeline_step`
records it); writes what the rank saw as ``OUT_DIR/<name>.rank<r>.json``.

Run within the two-rank launch of ``parallel_torchrun.py`` (one launch for both tests), or
alone as ``torchrun --standalone --nproc-per-node 2 THIS OUT_DIR``.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

import torch

BATCH, SEQ = 4, 16  # the whole batch the first stage splits into micro-batches
#: name → (schedule, micro-batches)
RUNS = {"gpipe-2": ("gpipe", 2), "gpipe-4": ("gpipe", 4), "1f1b-2": ("1f1b", 2),
        "1f1b-4": ("1f1b", 4)}
#: name → (schedule, micro-batches, stages a rank, tiny's layers, blocks of each stage): the
#: interleaved schedule with 3 chunks, the zero-bubble ZBV (a V of 2 stages a rank, backward
#: split into input and weight halves) and an uneven 2-stage 1F1B
SHAPED_RUNS: dict[str, tuple[str, int, int, int, tuple[int, ...] | None]] = {
    "interleaved-3": ("interleaved-1f1b", 4, 3, 6, None),
    "zbv-4": ("zbv", 4, 2, 4, None),
    "uneven-1f1b": ("1f1b", 2, 1, 3, (1, 2)),
}


def summary(records: Any, params: list[torch.Tensor]) -> dict[str, Any]:
    """What the fake and the real rank are compared on."""
    return {
        "p2p": [[r.phase, r.op, r.collective.kind, r.collective.group_size,
                 r.collective.bytes_sent, r.collective.bytes_received]
                for r in records if r.collective is not None],
        "matmul_flops": sum(r.flops for r in records if r.category == "matmul"
                            and r.phase != "optimizer"),
        "params_per_rank": sum(p.numel() for p in params),
        "param_bytes_per_rank": sum(p.numel() * p.element_size() for p in params),
    }


def run_pipelines(out_dir: Path, rank: int, world: int) -> None:
    """Step and record each schedule of :data:`RUNS` on this rank of an initialised group."""
    import torch.distributed as dist

    from tensorledger.models import get_preset
    from tensorledger.trace import Recorder
    from tensorledger.workload.pipeline import (
        build_pipeline_rank,
        resolve_schedule,
        run_pipeline_step,
    )

    tiny = get_preset("tiny")
    runs = {**{name: (schedule, m, 1, tiny.n_layers, None) for name, (schedule, m) in RUNS.items()},
            **SHAPED_RUNS}
    for name, (schedule, microbatches, chunks, layers, stage_layers) in runs.items():
        config = dataclasses.replace(tiny, n_layers=layers)
        torch.manual_seed(0)  # the first rank's inputs are the last rank's targets
        tokens = torch.randint(0, config.vocab_size, (BATCH, SEQ))
        kind = resolve_schedule(schedule)
        modules, runner = build_pipeline_rank(config, world, rank, chunks, kind, microbatches,
                                              BATCH // microbatches, SEQ,
                                              stage_layers=stage_layers)
        held = kind.placement(world, chunks, rank)
        params = [p for module in modules for p in module.parameters()]
        optimizer = torch.optim.AdamW(params, lr=1e-3)

        def step() -> None:
            run_pipeline_step(runner, held, world * chunks, tokens)  # noqa: B023
            optimizer.step()  # noqa: B023
            optimizer.zero_grad(set_to_none=True)  # noqa: B023

        step()
        with Recorder() as recorder:
            step()
        result = summary(recorder.trace.records, params)
        result["uncovered"] = dict(recorder.trace.uncovered)
        (out_dir / f"{name}.rank{rank}.json").write_text(json.dumps(result))
        dist.barrier()


def main(out_dir: Path) -> None:
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    run_pipelines(out_dir, dist.get_rank(), dist.get_world_size())
    dist.destroy_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
