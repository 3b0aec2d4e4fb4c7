"""One rank of the real runs of issue 40 over gloo on the CPU, each laid out by torch's and
peft's own calls (not the library's): writes what the rank held and issued in its second step
as ``OUT_DIR/<name>.rank<r>.json``.

- ``offload``: the tiny preset, FSDP2 ``fully_shard`` on each block and the root with
  ``CPUOffloadPolicy(pin_memory=False)`` (no accelerator to pin for), AdamW.
- ``lora``: a tiny Llama from transformers, peft's ``get_peft_model`` (r 8 on q_proj, v_proj),
  FSDP2 on each decoder layer and the root, AdamW over the adapters.

Run by ``test_offload_lora_torchrun.py`` as ``torchrun --standalone --nproc-per-node 2 THIS
OUT_DIR``.
"""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path
from typing import Any

import torch
from torch import nn

BATCH, SEQ = 2, 16  # the tiny preset's per-rank batch
LORA_BATCH, LORA_SEQ = 2, 12


def _local(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.to_local() if hasattr(tensor, "to_local") else tensor


def _nbytes(tensors: Any) -> int:
    return sum(_local(t).numel() * t.element_size() for t in tensors)


def _run(name: str, model: nn.Module, tokens: torch.Tensor, loss: Any, out_dir: Path,
         rank: int) -> None:
    from tensorledger.trace import Recorder

    params = list(dict.fromkeys(p for p in model.parameters()))
    trained = [p for p in params if p.requires_grad]
    optimizer = torch.optim.AdamW(trained, lr=1e-3)
    held: dict[str, Any] = {}

    def step() -> None:
        loss(model, tokens).backward()
        held["grad_bytes"] = _nbytes(p.grad for p in trained if p.grad is not None)
        held["grad_devices"] = sorted({_local(p.grad).device.type for p in trained
                                       if p.grad is not None})
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    step()  # FSDP's lazy set-up and the optimizer state
    with Recorder() as recorder:
        step()
    state = [v for s in optimizer.state.values() for v in s.values()
             if isinstance(v, torch.Tensor)]
    result = {
        "param_bytes": _nbytes(params),
        "param_devices": sorted({_local(p).device.type for p in params}),
        "optimizer_state_bytes": _nbytes(state),
        "collectives": [[r.phase, r.collective.kind, r.collective.group_size,
                         r.collective.size_bytes]
                        for r in recorder.trace.records if r.collective is not None],
        **held,
    }
    (out_dir / f"{name}.rank{rank}.json").write_text(json.dumps(result))


def _lm_loss(model: nn.Module, tokens: torch.Tensor) -> torch.Tensor:
    logits = model(tokens)
    logits = getattr(logits, "logits", logits)
    return nn.functional.cross_entropy(logits.flatten(0, 1).float(), tokens.flatten())


def main(out_dir: Path) -> None:
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import CPUOffloadPolicy, fully_shard

    from tensorledger.models import build_model, get_preset

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    mesh = init_device_mesh("cpu", (world,))
    torch.manual_seed(0)

    config = get_preset("tiny")
    model = build_model(config, "cpu")
    policy = CPUOffloadPolicy(pin_memory=False)
    for block in model.blocks:
        fully_shard(block, mesh=mesh, offload_policy=policy)
    fully_shard(model, mesh=mesh, offload_policy=policy)
    tokens = torch.randint(0, config.vocab_size, (BATCH, SEQ))
    _run("offload", model, tokens, _lm_loss, out_dir, rank)

    import peft
    import transformers

    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from tests.workload.hf_configs import TINY

    raw = {k: v for k, v in TINY["llama"].items() if k != "model_type"}
    llama = transformers.AutoModelForCausalLM.from_config(transformers.LlamaConfig(**raw))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        wrapped = peft.get_peft_model(llama, peft.LoraConfig(
            r=8, lora_alpha=8, target_modules=["q_proj", "v_proj"]))
    for layer in wrapped.base_model.model.model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(wrapped, mesh=mesh)
    tokens = torch.randint(0, raw["vocab_size"], (LORA_BATCH, LORA_SEQ))
    _run("lora", wrapped, tokens, _lm_loss, out_dir, rank)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
