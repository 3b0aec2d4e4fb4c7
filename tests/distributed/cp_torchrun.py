"""One rank of the context-parallel fake-versus-real test: the tiny preset laid out by the
library's ``build_mesh`` / ``parallelize`` / ``make_optimizer`` with ``--cp`` (CP 2 on 2
ranks; CP 2 × FSDP 2 on 4), the sequence cut by torch's ``context_parallel`` and attention run
as its ring over gloo on real CPU tensors (the CPU's fused kernel in each ring block, through
:func:`tensorledger.workload.context_parallel.cpu_ring_attention`).  The second step is
recorded; the rank writes what it saw as ``OUT_DIR/<name>.rank<r>.json``.

Run by ``test_cp_torchrun.py`` as ``torchrun --standalone --nproc-per-node N THIS OUT_DIR``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import torch

#: One batch of the tiny preset: b 2, s 64 (each of 2 cp ranks: 2 chunks of 16 tokens).
TOKENS_SHAPE = (2, 64)

#: The layouts by world size: name → Layout fields.
CP_LAYOUTS: dict[int, dict[str, dict[str, Any]]] = {
    2: {"cp": {"cp": 2}},
    4: {"cp-fsdp": {"cp": 2, "fsdp": 2}},
}


def _step(model: torch.nn.Module, tokens: torch.Tensor, optimizer: torch.optim.Optimizer
          ) -> int:
    """One training step; the gradient bytes the rank held after backward."""
    from tensorledger.workload.parallel import grad_bytes

    model(tokens).float().pow(2).mean().backward()
    grads = grad_bytes(model.parameters())
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return grads


def main(out_dir: Path) -> None:
    import torch.distributed as dist

    from tensorledger.models import build_model, get_preset
    from tensorledger.trace import Recorder
    from tensorledger.workload.context_parallel import sequence_sharded
    from tensorledger.workload.layout import Layout
    from tensorledger.workload.parallel import build_mesh, make_optimizer, parallelize
    from tests.distributed.parallel_torchrun import summary

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    config = get_preset("tiny")
    for name, fields in CP_LAYOUTS[world].items():
        torch.manual_seed(0)  # the cp ranks of a batch hold the same tokens before the cut
        tokens = torch.randint(0, config.vocab_size, TOKENS_SHAPE)
        layout = Layout(**fields)
        mesh = build_mesh(layout)
        model = parallelize(build_model(config, "cpu"), layout, mesh)
        optimizer = make_optimizer(layout, mesh, model.parameters(),
                                   lambda params: torch.optim.AdamW(params, lr=1e-3))
        with sequence_sharded(mesh["cp"], [tokens]):
            _step(model, tokens, optimizer)
            with Recorder() as recorder:
                grads = _step(model, tokens, optimizer)
        result = summary(recorder.trace.records, list(model.parameters()),
                         recorder.trace.uncovered)
        result["grad_bytes"] = grads
        result["attention_flops"] = sum(r.flops_causal_halved for r in recorder.trace.records
                                        if "scaled_dot_product" in r.op)
        (out_dir / f"{name}.rank{rank}.json").write_text(json.dumps(result))
    dist.destroy_process_group()


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    main(Path(sys.argv[1]))
