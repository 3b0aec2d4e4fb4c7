"""One rank of the EP × TP numerical check (issue 38; ETP = 1): the reference tiny-moe on 4 gloo
ranks, ``--ep 2 --tp 2`` (tensor parallelism by the reference plan with the experts whole on
each tp rank, then expert parallelism; no data-parallel wrapper, so each rank's gradients are
its own), each ep rank its own tokens (its tp peer the same ones).  Against the whole model on
every rank: the logits of the rank's tokens, and each local expert's gradient, which under EP
gathers the slots of both ep ranks' tokens, equal the whole model's under the sum of both
ranks' losses.  Writes ``OUT_DIR/ep-tp.rank<r>.json``.

Run by ``test_ep_tp_torchrun.py`` as ``torchrun --standalone --nproc-per-node 4 THIS OUT_DIR``.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

NAME = "ep-tp"


def _tokens(ep_rank: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(10 + ep_rank)
    return torch.randint(0, 128, (2, 12), generator=generator)


def _loss(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.flatten(0, 1).float(), tokens.flatten())


def main(out: Path) -> None:
    import torch.distributed as dist

    from tensorledger.models import build_model, get_preset
    from tensorledger.workload.expert_parallel import apply_expert_parallel
    from tensorledger.workload.layout import Layout
    from tensorledger.workload.parallel import build_mesh
    from tensorledger.workload.tensor_parallel import apply_tensor_parallel

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    layout = Layout(ep=2, tp=2)
    mesh = build_mesh(layout)
    config = get_preset("tiny-moe")
    assert config.moe is not None
    config = dataclasses.replace(config, moe=dataclasses.replace(config.moe, aux_loss_coef=0.0))
    torch.manual_seed(0)  # the same weights on every rank
    whole = build_model(config, "cpu", torch.float32)
    laid = copy.deepcopy(whole)
    apply_tensor_parallel(laid, mesh["tp"], None, sp=False, experts=True)
    apply_expert_parallel(laid, mesh["ep"])
    ep_rank = mesh["ep"].get_local_rank()
    mine = _tokens(ep_rank)
    logits = laid(mine)
    _loss(logits, mine).backward()
    reference = whole(mine)
    # the whole model under both ep ranks' losses: what the local experts' gradients gather
    total = sum(_loss(whole(_tokens(r)), _tokens(r)) for r in range(2))
    total.backward()  # type: ignore[union-attr]
    local = 3  # 6 experts over 2 ep ranks
    first = ep_rank * local
    grad_gap = 0.0
    for index, block in enumerate(laid.blocks):
        for key in ("gate", "up", "down"):
            ours = getattr(block.mlp.experts, key).grad
            theirs = getattr(whole.blocks[index].mlp.experts, key).grad[first:first + local]
            grad_gap = max(grad_gap, float((ours - theirs).abs().max()))
    record = {"logits": float((logits - reference).abs().max()), "expert_grads": grad_gap,
              "grad_scale": float(whole.blocks[0].mlp.experts.gate.grad.abs().max())}
    (out / f"{NAME}.rank{rank}.json").write_text(json.dumps(record))
    dist.destroy_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
