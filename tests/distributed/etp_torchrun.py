"""One rank of the EP × TP × ETP numerical check (issue 38; torchtitan's ETP = TP): the
reference tiny-moe on 4 gloo ranks, ``--ep 2 --tp 2 --etp 2`` (tensor parallelism by the
reference plan, then expert parallelism with each local expert's hidden width split over the tp
pair; no data-parallel wrapper, so each rank's gradients are its own), each ep rank its own
tokens (its tp peer the same ones).  Against the whole model on every rank:

- the logits of the rank's tokens (the experts' output all-reduced over tp in forward);
- each local expert's gradient, this tp rank's slice of its hidden width: under EP it gathers
  the slots of both ep ranks' tokens, so it equals the whole model's under the sum of both
  ranks' losses;
- the first block's router gradient under the rank's own loss: it reaches the router through
  the second block's experts' input gradient, all-reduced over tp in backward (without that
  all-reduce it would hold half the hidden features' share).

Dropless (``etp``) and with a capacity of 1.0 (``etp-capacity``: the (E, C, d) buffers).
Writes ``OUT_DIR/<name>.rank<r>.json``.  Run by ``test_etp_torchrun.py`` as ``torchrun
--standalone --nproc-per-node 4 THIS OUT_DIR``.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

NAME, CAPACITY = "etp", "etp-capacity"
NAMES = (NAME, CAPACITY)  # dropless, and each expert's slots padded to a capacity


def _tokens(ep_rank: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(20 + ep_rank)
    return torch.randint(0, 128, (2, 12), generator=generator)


def _loss(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.flatten(0, 1).float(), tokens.flatten())


def _compare(name: str, mesh: Any, rank: int, out: Path) -> None:
    """The whole model and the laid-out one on this rank's tokens; their gaps written out (a
    function of its own, so that its tensors and the collectives' work behind them are freed
    before the process group is destroyed, as ep_reference_torchrun.py does)."""
    from tensorledger.models import build_model, get_preset
    from tensorledger.workload.expert_parallel import apply_expert_parallel
    from tensorledger.workload.tensor_parallel import apply_tensor_parallel

    config = get_preset("tiny-moe")
    assert config.moe is not None
    moe = dataclasses.replace(config.moe, aux_loss_coef=0.0,
                              capacity_factor=1.0 if name == CAPACITY else 0.0)
    config = dataclasses.replace(config, moe=moe)
    torch.manual_seed(0)  # the same weights on every rank
    whole = build_model(config, "cpu", torch.float32)
    laid = copy.deepcopy(whole)
    apply_tensor_parallel(laid, mesh["tp"], None, sp=False, experts=True)
    apply_expert_parallel(laid, mesh["ep"], tp=mesh["tp"])
    ep_rank, tp_rank = mesh["ep"].get_local_rank(), mesh["tp"].get_local_rank()
    mine = _tokens(ep_rank)
    logits = laid(mine)
    _loss(logits, mine).backward()
    reference = whole(mine)
    router = whole.blocks[0].mlp.router.proj.weight
    (router_grad,) = torch.autograd.grad(_loss(reference, mine), [router])
    # the whole model under both ep ranks' losses: what the local experts' gradients gather
    total = sum(_loss(whole(_tokens(r)), _tokens(r)) for r in range(2))
    total.backward()  # type: ignore[union-attr]
    local, half = 3, 16  # 6 experts over 2 ep ranks; a width of 32 over 2 tp ranks
    first, column = ep_rank * local, tp_rank * half
    grad_gap = 0.0
    for index, block in enumerate(laid.blocks):
        theirs = whole.blocks[index].mlp.experts
        for key, dim in (("gate", 2), ("up", 2), ("down", 1)):
            ours = getattr(block.mlp.experts, key).grad
            expected = getattr(theirs, key).grad[first:first + local].narrow(dim, column, half)
            assert ours.shape == expected.shape, (key, ours.shape, expected.shape)
            grad_gap = max(grad_gap, float((ours - expected).abs().max()))
    ours_router = laid.blocks[0].mlp.router.proj.weight.grad
    record = {"logits": float((logits - reference).abs().max()), "expert_grads": grad_gap,
              "grad_scale": float(whole.blocks[0].mlp.experts.gate.grad.abs().max()),
              "router_grad": float((ours_router - router_grad).abs().max()),
              "router_scale": float(router_grad.abs().max())}
    (out / f"{name}.rank{rank}.json").write_text(json.dumps(record))


def main(out: Path) -> None:
    import torch.distributed as dist

    from tensorledger.workload.layout import Layout
    from tensorledger.workload.parallel import build_mesh

    dist.init_process_group("gloo")
    mesh = build_mesh(Layout(ep=2, tp=2, etp=2))
    for name in NAMES:
        _compare(name, mesh, dist.get_rank(), out)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
