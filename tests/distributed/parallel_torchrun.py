"""One rank of the fake-versus-real test: FSDP2, DDP and DTensor tensor parallelism over gloo
on the CPU, each recorded for one training step; writes what the rank saw as
``OUT_DIR/<strategy>.rank<r>.json``.

FSDP and TP record their second step (as :func:`tensorledger.workload.parallel.trace_parallel_step`
does), DDP its first; DDP runs as users run it, with its own built-in all-reduce.

Run by ``test_parallel_torchrun.py`` as ``torchrun --standalone --nproc-per-node 2 THIS OUT_DIR``.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn


class Mlp(nn.Module):
    """A replicated projection, then a Megatron MLP (column- then row-parallel)."""

    def __init__(self) -> None:
        super().__init__()
        self.pre = nn.Linear(24, 24, bias=False)
        self.up = nn.Linear(24, 40)
        self.down = nn.Linear(40, 24)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(torch.relu(self.up(self.pre(x))))


def summary(records: Any, params: list[torch.Tensor], uncovered: dict[str, int]
            ) -> dict[str, Any]:
    """What the fake and the real rank are compared on."""
    local = [p.to_local() if hasattr(p, "to_local") else p for p in params]
    return {
        "collectives": [[r.phase, r.op, r.collective.kind, r.collective.group_size,
                         r.collective.size_bytes, r.collective.bytes_sent,
                         r.collective.bytes_received]
                        for r in records if r.collective is not None],
        "uncovered": dict(uncovered),
        "params_per_rank": sum(p.numel() for p in local),
        "param_bytes_per_rank": sum(p.numel() * p.element_size() for p in local),
        "matmul_flops": sum(r.flops for r in records if r.category == "matmul"
                            and r.phase in ("forward", "backward")),
    }


def _run(name: str, model: nn.Module, inputs: torch.Tensor, warm_up: bool, out_dir: Path,
         rank: int) -> None:
    from tensorledger.trace import Recorder

    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    step: Callable[[], None]

    def step() -> None:
        model(inputs).float().pow(2).mean().backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    if warm_up:
        step()
    with Recorder() as recorder:
        step()
    result = summary(recorder.trace.records, list(model.parameters()), recorder.trace.uncovered)
    (out_dir / f"{name}.rank{rank}.json").write_text(json.dumps(result))


def main(out_dir: Path) -> None:
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        parallelize_module,
    )
    from torch.nn.parallel import DistributedDataParallel

    from tensorledger.models import build_model, get_preset
    from tensorledger.workload.parallel import shard_units

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    mesh = init_device_mesh("cpu", (world,))
    config = get_preset("tiny")
    torch.manual_seed(0)
    tokens = torch.randint(0, config.vocab_size, (2, 16))

    fsdp = build_model(config, "cpu")
    for unit in shard_units(fsdp):
        fully_shard(unit, mesh=mesh)
    fully_shard(fsdp, mesh=mesh)
    _run("fsdp", fsdp, tokens, True, out_dir, rank)

    _run("ddp", DistributedDataParallel(build_model(config, "cpu")), tokens, False, out_dir,
         rank)

    tp = Mlp()
    parallelize_module(tp, mesh, {"up": ColwiseParallel(), "down": RowwiseParallel()})
    _run("tp", tp, torch.ones(3, 5, 24), True, out_dir, rank)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
