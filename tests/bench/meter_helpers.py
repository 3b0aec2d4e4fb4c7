"""What the meter tests share: a clock that moves only when told, a tiny-preset training step,
and a made-up CPU chip whose peaks differ per dtype (so the wrong peak changes the answer)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from tensorledger.hardware import Hardware
from tensorledger.models import build_model, get_preset

# fp32 100 GFLOP/s, bf16 300 GFLOP/s: MFU against the wrong one is off by 3×.
TEST_CPU = Hardware(id="test-cpu", name="a made-up CPU", memory_bytes=64e9,
                    memory_bandwidth_bytes_per_s=50e9,
                    dense_flop_per_s={"fp32": 100e9, "bf16": 300e9})


class FakeClock:
    """Reads the time without moving it; ``advance`` moves it."""

    def __init__(self) -> None:
        self.now_s = 0.0

    def __call__(self) -> float:
        return self.now_s

    def advance(self, seconds: float) -> None:
        self.now_s += seconds


@dataclass
class TinyRun:
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    vocab: int

    def batch(self, batch: int, seq: int, seed: int = 0) -> torch.Tensor:
        generator = torch.Generator().manual_seed(seed)
        return torch.randint(0, self.vocab, (batch, seq), generator=generator)

    def micro(self, tokens: torch.Tensor, scale: float = 1.0, autocast: bool = False) -> None:
        """Forward and backward of one micro-batch."""
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            logits = self.model(tokens)
        loss = F.cross_entropy(logits.float().reshape(-1, self.vocab), tokens.reshape(-1))
        (loss * scale).backward()

    def update(self) -> None:
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)

    def step(self, tokens: torch.Tensor, autocast: bool = False) -> None:
        """One training step: forward, backward, AdamW."""
        self.micro(tokens, autocast=autocast)
        self.update()

    def accumulated(self, micro_batches: list[torch.Tensor]) -> None:
        """One optimizer step over several micro-batches."""
        for tokens in micro_batches:
            self.micro(tokens, scale=1 / len(micro_batches))
        self.update()


def tiny_run(device: str = "cpu", seed: int = 0) -> TinyRun:
    torch.manual_seed(seed)
    config = get_preset("tiny")
    model = build_model(config, device)
    return TinyRun(model, torch.optim.AdamW(model.parameters(), lr=1e-3), config.vocab_size)


def timed(step: Callable[[], None], clock: FakeClock, durations: list[float]
          ) -> Callable[[], None]:
    """``step`` followed by the clock moving by the next of ``durations`` (cycling)."""
    state = {"i": 0}

    def run() -> None:
        step()
        clock.advance(durations[state["i"] % len(durations)])
        state["i"] += 1

    return run
