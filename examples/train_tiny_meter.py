"""Train tensorledger's ``tiny`` preset on the CPU for a few hundred steps, with the live meter.

    python examples/train_tiny_meter.py                    # 200 steps, a few seconds
    python examples/train_tiny_meter.py --steps 50 --accumulate 4 --jsonl meter.jsonl
    python examples/train_tiny_meter.py --hardware local   # after `tensorledger probe`

The meter takes two lines: ``Meter(model, ...)`` and ``with meter.step():`` around each
optimizer step (here around all the micro-batches of gradient accumulation too).  It prints a
line every ``--every`` steps on stderr and a summary at the end.

The CPU is in no catalog: without ``--hardware`` the meter uses the profile ``tensorledger
probe`` wrote, and when there is none this script measures a 512×512 fp32 matmul for a moment
and uses its rate as the peak (a rough one: say so when you quote the MFU).
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator, Sequence

import torch
import torch.nn.functional as F
from cpu_peak import example_hardware  # beside this script

from tensorledger.bench.meter import Meter, MeterSummary
from tensorledger.models import build_model, get_preset


def batches(vocab: int, batch: int, seq: int, seed: int) -> Iterator[torch.Tensor]:
    """Token sequences that count upwards from a random start: easy to learn."""
    generator = torch.Generator().manual_seed(seed)
    while True:
        start = torch.randint(0, vocab, (batch, 1), generator=generator)
        yield (start + torch.arange(seq)) % vocab


def main(argv: Sequence[str] | None = None) -> MeterSummary:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200, help="optimizer steps")
    parser.add_argument("--batch", type=int, default=4, help="sequences per micro-batch")
    parser.add_argument("--seq", type=int, default=32, help="tokens per sequence")
    parser.add_argument("--accumulate", type=int, default=1, help="micro-batches per step")
    parser.add_argument("--autocast", action="store_true", help="bf16 autocast (CPU)")
    parser.add_argument("--hardware", help="catalog id, TOML file or 'local'")
    parser.add_argument("--every", type=int, default=50, help="steps per meter line")
    parser.add_argument("--jsonl", help="write the meter's JSON lines here")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    args = parser.parse_args(argv)

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    config = get_preset("tiny")
    model = build_model(config, "cpu")
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    hardware = example_hardware(args.hardware, ("fp32", "bf16") if args.autocast else ("fp32",))

    meter = Meter(model, hardware=hardware, every=args.every, jsonl=args.jsonl)
    data = batches(config.vocab_size, args.batch, args.seq, seed=0)
    loss = torch.zeros(())
    for _ in range(args.steps):
        micro = [next(data) for _ in range(args.accumulate)]  # "data loading": outside
        with meter.step():
            for tokens in micro:
                with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.autocast):
                    logits = model(tokens[:, :-1])
                loss = F.cross_entropy(logits.float().reshape(-1, config.vocab_size),
                                       tokens[:, 1:].reshape(-1))
                (loss / args.accumulate).backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
    summary = meter.close()
    mfu = "n/a" if summary.mfu is None else f"{summary.mfu:.3f}"
    print(f"final loss {loss.item():.3f} after {args.steps} steps; MFU {mfu} against "
          f"{hardware.id} ({hardware.name})")
    return summary


if __name__ == "__main__":
    main()
