"""One rank of the expert-parallel fake-versus-real test: a tiny Hugging Face Mixtral (built
from its config by transformers, its default grouped-GEMM experts) laid out by the library's
``build_mesh`` / ``parallelize`` / ``make_optimizer`` over gloo, one training step recorded
with the routing forced balanced (:class:`~tensorledger.workload.routed.RoutedMode` on real
tensors); writes what the rank saw as ``OUT_DIR/<name>.rank<r>.json``.

With 2 ranks ``--ep 2`` (DDP over the ep ranks for the non-experts; its first step recorded, as
the fake trace records it); with 4 ranks ``--ep 2 --fsdp 2`` (FSDP2; the second step).

Run by ``test_ep_torchrun.py`` as ``torchrun --standalone --nproc-per-node N THIS OUT_DIR``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import torch
from torch import nn

#: A tiny Mixtral: hidden 40, 2 layers, 4 experts (2 a token), expert width 24.
CONFIG: dict[str, Any] = {
    "vocab_size": 97, "hidden_size": 40, "intermediate_size": 24, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 12,
    "num_local_experts": 4, "num_experts_per_tok": 2, "max_position_embeddings": 64}
TOKENS_SHAPE = (2, 12)  # one rank's batch: 24 tokens, 48 token-slots
#: name → Layout fields, by world size
EP_LAYOUTS: dict[int, dict[str, dict[str, int]]] = {2: {"ep": {"ep": 2}},
                                                     4: {"ep-fsdp": {"ep": 2, "fsdp": 2}}}


def mixtral() -> nn.Module:
    import transformers

    transformers.logging.set_verbosity_error()  # type: ignore[no-untyped-call]
    config = transformers.MixtralConfig(**CONFIG)
    return transformers.MixtralForCausalLM(config)


def loss(output: Any) -> torch.Tensor:
    return output.logits.float().pow(2).mean()


def routed() -> Any:
    from tensorledger.workload.routed import RoutedMode

    return RoutedMode(CONFIG["num_local_experts"], CONFIG["num_experts_per_tok"])


def summary(trace: Any) -> dict[str, Any]:
    """What the fake and the real rank are compared on (besides the state they hold)."""
    from tensorledger.memory import build_timeline

    records = trace.records
    return {
        "collectives": [[r.phase, r.op, r.collective.kind, r.collective.group_size,
                         r.collective.size_bytes, r.collective.bytes_sent,
                         r.collective.bytes_received]
                        for r in records if r.collective is not None],
        "uncovered": dict(trace.uncovered),
        "matmul_flops": sum(r.flops for r in records if r.category == "matmul"),
        "peak_bytes": build_timeline(trace, {}).peak_bytes,
    }


def _record(name: str, layout: Any, tokens: torch.Tensor, out_dir: Path, rank: int) -> None:
    from tensorledger.trace.storage import local_tensor
    from tensorledger.workload.parallel import _state_bytes as state_bytes
    from tensorledger.workload.parallel import (
        build_mesh,
        fsdp_storage_events,
        grad_bytes,
        make_optimizer,
        parallelize,
    )
    from tests.distributed.gloo_recorder import gloo_recorder

    mesh = build_mesh(layout)
    torch.manual_seed(0)
    with routed():
        model = parallelize(mixtral(), layout, mesh)
        optimizer = make_optimizer(layout, mesh, model.parameters(),
                                   lambda params: torch.optim.AdamW(params, lr=1e-3))
        grads = [0]

        def step() -> None:
            loss(model(tokens)).backward()  # type: ignore[no-untyped-call]
            grads[0] = grad_bytes(model.parameters())
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

        if layout.strategy != "ddp":  # DDP's first step is the one traced (as on fake)
            step()
        with gloo_recorder() as recorder, fsdp_storage_events(recorder):
            step()
    params = [local_tensor(p) for p in dict.fromkeys(model.parameters())]
    result = summary(recorder.trace)
    result |= {"params_per_rank": sum(p.numel() for p in params),
               "param_bytes_per_rank": sum(p.numel() * p.element_size() for p in params),
               "grad_bytes": grads[0], "optimizer_state_bytes": state_bytes(optimizer)}
    (out_dir / f"{name}.rank{rank}.json").write_text(json.dumps(result))


def main(out_dir: Path) -> None:
    import torch.distributed as dist

    from tensorledger.workload.layout import Layout

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    tokens = torch.zeros(TOKENS_SHAPE, dtype=torch.long)
    for name, fields in EP_LAYOUTS[world].items():
        _record(name, Layout(**fields), tokens, out_dir, rank)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
