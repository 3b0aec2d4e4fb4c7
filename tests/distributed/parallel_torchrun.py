"""One rank of the fake-versus-real test: each layout recorded for one training step over gloo
on the CPU; writes what the rank saw as ``OUT_DIR/<name>.rank<r>.json``.

With 2 ranks: FSDP2 (ZeRO-3, and ZeRO-2), DDP and a column/row-parallel MLP, built with torch's
APIs directly; then ZeRO-1 (DDP + ``ZeroRedundancyOptimizer``), TP and TP + SP on the tiny
preset, laid out by the same :func:`~tensorledger.workload.parallel.build_mesh`,
:func:`~tensorledger.workload.parallel.parallelize` and
:func:`~tensorledger.workload.parallel.make_optimizer` the fake trace uses (on a real group they
keep DDP's built-in all-reduce), and the 2-stage pipelines of ``pipeline_torchrun.py``.  With
4 ranks: FSDP × TP 2 × 2, HSDP 2 × 2, and DDP and ZeRO-1 beside TP 2 × 2.

Sharded layouts record their second step (as
:func:`tensorledger.workload.parallel.trace_parallel_step` does), DDP and ZeRO-1 their first.

Run by ``test_parallel_torchrun.py`` as ``torchrun --standalone --nproc-per-node N THIS OUT_DIR``.
"""

from __future__ import annotations

import importlib
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

TOKENS_SHAPE = (2, 16)  # one rank's batch of the tiny preset: b 2, s 16


class Mlp(nn.Module):
    """A replicated projection, then a Megatron MLP (column- then row-parallel)."""

    def __init__(self) -> None:
        super().__init__()
        self.pre = nn.Linear(24, 24, bias=False)
        self.up = nn.Linear(24, 40)
        self.down = nn.Linear(40, 24)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(torch.relu(self.up(self.pre(x))))


def summary(records: Any, params: list[torch.Tensor], uncovered: Mapping[str, int]
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
         rank: int, optimizer: torch.optim.Optimizer | None = None, fsdp: bool = False) -> None:
    """Record ``model``'s step; under FSDP2 (``fsdp``) with its storage resizes told to the
    recorder and gloo's own buffers booked as the fake rank books them (``gloo_recorder``),
    and its live-memory peak written too."""
    from tensorledger.memory import build_timeline
    from tensorledger.trace import Recorder
    from tensorledger.workload.parallel import fsdp_storage_events

    # the parameters as laid out, before a forward: DDP beside tensor parallelism leaves its
    # DTensors as plain attributes after one, out of model.parameters()
    held = list(model.parameters())
    optimizer = optimizer or torch.optim.AdamW(held, lr=1e-3)

    from tensorledger.workload.parallel import grad_bytes

    grads = [0]

    def step() -> None:
        model(inputs).float().pow(2).mean().backward()
        grads[0] = grad_bytes(held)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    if warm_up:
        step()
    recorder = importlib.import_module("gloo_recorder").gloo_recorder() if fsdp else Recorder()
    with recorder, fsdp_storage_events(recorder):
        step()
    result = summary(recorder.trace.records, held, recorder.trace.uncovered)
    if fsdp:
        result["peak_bytes"] = build_timeline(recorder.trace, {}).peak_bytes
    result["grad_bytes"] = grads[0]
    inner = getattr(optimizer, "optim", optimizer)  # ZeRO-1's own partition
    result["optimizer_state_bytes"] = sum(
        (v.to_local() if hasattr(v, "to_local") else v).numel() * v.element_size()
        for state in inner.state.values() for v in state.values() if isinstance(v, torch.Tensor))
    (out_dir / f"{name}.rank{rank}.json").write_text(json.dumps(result))


#: The layouts run through the library's own functions, by world size: name → Layout fields.
LAYOUTS: dict[int, dict[str, dict[str, Any]]] = {
    2: {"zero1": {"fsdp": 2, "zero": 1}, "tp-tiny": {"tp": 2},
        "tp-sp": {"tp": 2, "sp": True}, "fsdp-zero2": {"fsdp": 2, "zero": 2}},
    4: {"fsdp-tp": {"fsdp": 2, "tp": 2}, "hsdp": {"dp": 2, "fsdp": 2},
        # DDP and ZeRO-1 beside TP (issue 37): DDP over the data-parallel slice of the mesh
        "ddp-tp": {"dp": 2, "tp": 2}, "zero1-tp": {"fsdp": 2, "zero": 1, "tp": 2}},
}


def _torch_apis(out_dir: Path, rank: int, world: int, tokens: torch.Tensor) -> None:
    """FSDP2, DDP and TP wrapped by torch's own calls, independent of the library's."""
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

    config = get_preset("tiny")
    mesh = init_device_mesh("cpu", (world,))
    fsdp = build_model(config, "cpu")
    for unit in shard_units(fsdp):
        fully_shard(unit, mesh=mesh)
    fully_shard(fsdp, mesh=mesh)
    _run("fsdp", fsdp, tokens, True, out_dir, rank, fsdp=True)

    _run("ddp", DistributedDataParallel(build_model(config, "cpu")), tokens, False, out_dir,
         rank)

    tp = Mlp()
    parallelize_module(tp, mesh, {"up": ColwiseParallel(), "down": RowwiseParallel()})
    _run("tp", tp, torch.ones(3, 5, 24), True, out_dir, rank)


def main(out_dir: Path) -> None:
    import torch.distributed as dist

    from tensorledger.models import build_model, get_preset
    from tensorledger.workload.layout import Layout
    from tensorledger.workload.parallel import build_mesh, make_optimizer, parallelize

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    config = get_preset("tiny")
    torch.manual_seed(0)  # every rank draws the same tokens: tensor-parallel ranks need them
    tokens = torch.randint(0, config.vocab_size, TOKENS_SHAPE)
    if world == 2:
        _torch_apis(out_dir, rank, world, tokens)
    for name, fields in LAYOUTS[world].items():
        layout = Layout(**fields)
        mesh = build_mesh(layout)
        model = parallelize(build_model(config, "cpu"), layout, mesh)
        optimizer = make_optimizer(layout, mesh, model.parameters(),
                                   lambda params: torch.optim.AdamW(params, lr=1e-3))
        _run(name, model, tokens, layout.strategy not in ("ddp", "zero1"), out_dir, rank,
             optimizer, fsdp=layout.strategy in ("fsdp", "hsdp"))
    if world == 2:  # the pipelines too, in the same launch (one start-up, not two)
        importlib.import_module("pipeline_torchrun").run_pipelines(out_dir, rank, world)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
