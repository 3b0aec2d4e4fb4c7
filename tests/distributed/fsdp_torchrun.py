"""One rank of the fake-versus-real FSDP test: FSDP2 over gloo on the CPU, tiny preset, each
unit of :func:`tensorledger.workload.parallel.shard_units` sharded and then the root, the
second training step recorded; writes what the rank saw as ``OUT_DIR/fsdp.rank<r>.json``.

Run by ``test_fsdp_torchrun.py`` as ``torchrun --standalone --nproc-per-node 2 THIS OUT_DIR``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main(out_dir: Path) -> None:
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    from tensorledger.models import build_model, get_preset
    from tensorledger.trace import Recorder
    from tensorledger.workload.parallel import shard_units

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    mesh = init_device_mesh("cpu", (world,))
    torch.manual_seed(0)
    config = get_preset("tiny")
    model = build_model(config, "cpu")
    for unit in shard_units(model):
        fully_shard(unit, mesh=mesh)
    fully_shard(model, mesh=mesh)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    tokens = torch.randint(0, config.vocab_size, (2, 16))

    def step() -> None:
        model(tokens).float().pow(2).mean().backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    step()
    with Recorder() as recorder:
        step()
    records = recorder.trace.records
    collectives = [[r.phase, r.op, r.collective.kind, r.collective.group_size,
                    r.collective.size_bytes, r.collective.bytes_sent, r.collective.bytes_received]
                   for r in records if r.collective is not None]
    params = [p.to_local() for p in model.parameters()]  # type: ignore[operator]
    result = {
        "collectives": collectives,
        "uncovered": dict(recorder.trace.uncovered),
        "params_per_rank": sum(p.numel() for p in params),
        "param_bytes_per_rank": sum(p.numel() * p.element_size() for p in params),
        "matmul_flops": sum(r.flops for r in records if r.category == "matmul"
                            and r.phase in ("forward", "backward")),
    }
    (out_dir / f"fsdp.rank{rank}.json").write_text(json.dumps(result))
    dist.destroy_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
