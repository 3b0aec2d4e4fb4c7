"""One rank of the meter's torchrun test: DDP over gloo on the CPU, tiny preset, a batch size
per rank (2 + rank) so the ranks' FLOPs, tokens/s and MFU differ.

Run by ``test_meter_torchrun.py`` as ``torchrun --standalone --nproc-per-node 2 THIS OUT_DIR``.
"""

from __future__ import annotations

import gc
import sys
from pathlib import Path


def main(out_dir: Path) -> None:
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel

    from tensorledger.bench.meter import Meter
    from tensorledger.hardware import Hardware
    from tensorledger.models import build_model, get_preset

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    config = get_preset("tiny")
    model = build_model(config, "cpu")
    ddp = DistributedDataParallel(model)
    optimizer = torch.optim.AdamW(ddp.parameters(), lr=1e-3)
    chip = Hardware(id="test-cpu", name="a made-up CPU", memory_bytes=64e9,
                    memory_bandwidth_bytes_per_s=50e9, dense_flop_per_s={"fp32": 100e9})
    meter = Meter(model, hardware=chip, every=4, warmup_steps=1, quiet=True,
                  jsonl=out_dir / "meter.jsonl")
    tokens = torch.randint(0, config.vocab_size, (2 + rank, 16))
    for _ in range(12):
        with meter.step():
            logits = ddp(tokens)
            loss = F.cross_entropy(logits.reshape(-1, config.vocab_size), tokens.reshape(-1))
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
    meter.close()
    # Drop DDP (its reducer, through hooks on the model's parameters, keeps the process group
    # alive) so that destroying the group joins gloo's worker threads now. Left to the
    # interpreter's exit, a worker that releases the last all_gather's tensors after Python
    # has begun to shut down aborts the rank (about one run in ten).
    del ddp, optimizer, model
    gc.collect()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
