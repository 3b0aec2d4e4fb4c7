"""One rank of the reference experts' numerical check (issue 38): the reference tiny-moe's MoE
layer (6 experts, top-2, its real router on random tokens: an uneven routing that differs by
rank) run whole on each rank and laid out by ``apply_expert_parallel`` over 2 gloo ranks (3
experts a rank); writes the largest differences of the outputs and the input gradients as
``OUT_DIR/<name>.rank<r>.json``, dropless (``dropless``) and with a capacity (``capacity``).

Run by ``test_ep_reference_torchrun.py`` as ``torchrun --standalone --nproc-per-node 2 THIS
OUT_DIR``.
"""

from __future__ import annotations

import copy
import dataclasses
import gc
import json
import sys
from pathlib import Path
from typing import Any

import torch

NAMES = ("dropless", "capacity")


def _compare(name: str, mesh: Any, rank: int, out: Path) -> None:
    """The whole layer and the laid-out one on this rank's tokens; their gaps written out.  A
    function of its own, so that its tensors (and the collectives' work behind them) are
    freed before the process group is destroyed: left to the interpreter's exit, gloo's
    worker thread aborted the rank ("terminate called without an active exception") in 2
    runs of 6."""
    from tensorledger.models import get_preset
    from tensorledger.models.moe import MoE
    from tensorledger.workload.expert_parallel import apply_expert_parallel

    config = get_preset("tiny-moe")
    assert config.moe is not None
    moe = dataclasses.replace(config.moe, aux_loss_coef=0.0,
                              capacity_factor=1.0 if name == "capacity" else 0.0)
    torch.manual_seed(0)  # the same weights on every rank
    whole = MoE(dataclasses.replace(config, moe=moe))
    laid = copy.deepcopy(whole)
    apply_expert_parallel(laid, mesh)
    torch.manual_seed(1 + rank)  # each rank's own tokens
    x = torch.randn(3, 10, config.d_model)
    outputs, grads = [], []
    for layer in (whole, laid):
        given = x.clone().requires_grad_(True)
        y = layer(given)
        y.pow(2).sum().backward()
        outputs.append(y.detach())
        grads.append(given.grad)
    record = {"output": float((outputs[0] - outputs[1]).abs().max()),
              "input_grad": float((grads[0] - grads[1]).abs().max()),
              "scale": float(outputs[0].abs().max()),
              "local_experts": int(laid.experts.gate.shape[0])}
    (out / f"{name}.rank{rank}.json").write_text(json.dumps(record))


def main(out: Path) -> None:
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    mesh = init_device_mesh("cpu", (2,), mesh_dim_names=("ep",))
    for name in NAMES:
        _compare(name, mesh, rank, out)
    gc.collect()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
