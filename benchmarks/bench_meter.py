"""The meter's own cost: the same training loop bare and metered, side by side.

Tiny preset, batch 8 × 32 tokens, AdamW, one thread: a step of 10 ms or more on a CPU.  Bare
and metered steps alternate, one each (so machine load hits both alike); the ratio of their
median times per step is the overhead, target under 1% (ratio < 1.01).  Beside it, the meter's
time per step measured alone (empty steps: its bookkeeping, a JSON line, an interval every 10
steps), a figure far less noisy than the difference of two step times on a shared machine.
Recording the first step (once per shape) is reported apart.  Last, the meter's MFU (its median
over the metered steps) against MFU from the harness's timing of the bare steps (traced FLOPs /
median / peak), on the real clock: target within 5%.

Prints a table, then one JSON line.
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from tensorledger.bench import measure
from tensorledger.bench.meter import Meter
from tensorledger.hardware import Hardware
from tensorledger.models import build_model, get_preset

PAIRS = 200
BATCH, SEQ = 8, 32
EMPTY_STEPS = 5000
# A made-up peak: the ratios below do not depend on it.
CHIP = Hardware(id="bench-cpu", name="benchmark CPU", memory_bytes=1.0,
                memory_bandwidth_bytes_per_s=1.0, dense_flop_per_s={"fp32": 1e12})


def main() -> None:
    torch.set_num_threads(1)
    torch.manual_seed(0)
    config = get_preset("tiny")
    model = build_model(config, "cpu")
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    tokens = torch.randint(0, config.vocab_size, (BATCH, SEQ))

    def step() -> None:
        logits = model(tokens)
        F.cross_entropy(logits.reshape(-1, config.vocab_size), tokens.reshape(-1)).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    with tempfile.TemporaryDirectory() as folder:
        meter = Meter(model, hardware=CHIP, every=10, warmup_steps=0, quiet=True,
                      jsonl=Path(folder) / "meter.jsonl")
        for _ in range(3):  # warm both paths up; the first metered step is recorded
            step()
        started = time.perf_counter()
        with meter.step():
            step()
        recording_s = time.perf_counter() - started

        # pairs of one bare step (timed by the harness, one sample each) and one metered step
        # (timed around the `with`), in turn first and second, so load hits both alike
        bare: list[float] = []
        metered: list[float] = []

        def bare_step() -> None:
            bare.append(measure(step, warmup=0, min_repeats=1, max_repeats=1,
                                budget_s=0).median_s)

        def metered_step() -> None:
            started = time.perf_counter()
            with meter.step():
                step()
            metered.append(time.perf_counter() - started)

        for pair in range(PAIRS):
            first, second = (bare_step, metered_step) if pair % 2 else (metered_step, bare_step)
            first()
            second()
        summary = meter.close()

        # the meter alone: empty steps on a one-layer model (one recorded, then bookkeeping)
        idle = Meter(torch.nn.Linear(2, 2), hardware=CHIP, every=10, quiet=True,
                     jsonl=Path(folder) / "idle.jsonl")
        with idle.step(tokens=1):
            pass
        started = time.perf_counter()
        for _ in range(EMPTY_STEPS):
            with idle.step(tokens=1):
                pass
        self_s = (time.perf_counter() - started) / EMPTY_STEPS
        idle.close()

    flops = meter.recordings[0].flops
    mfu_harness = flops / statistics.median(bare) / CHIP.dense_flop_per_s["fp32"]
    mfu_meter = summary.mfu_median or float("nan")

    bare_s, metered_s = statistics.median(bare), statistics.median(metered)
    ratio = metered_s / bare_s
    # each pair ran back to back under the same load: the median of their ratios is steadier
    pair_ratio = statistics.median(m / b for m, b in zip(metered, bare, strict=True))
    self_fraction = self_s / bare_s
    rows = [
        ("bare step, median s", f"{bare_s:.5f}"),
        ("metered step, median s", f"{metered_s:.5f}"),
        ("ratio of medians metered / bare", f"{ratio:.4f}  (target < 1.01)"),
        ("median ratio within a pair", f"{pair_ratio:.4f}  (target < 1.01)"),
        ("meter alone, s/step (empty steps)", f"{self_s:.2e}"),
        ("meter alone / bare step", f"{self_fraction:.2%}"),
        ("recorded first step, s (apart)",
         f"{recording_s:.4f}  ({recording_s / bare_s:.1f}× a step)"),
        ("MFU meter (median) / harness", f"{mfu_meter:.5f} / {mfu_harness:.5f} = "
         f"{mfu_meter / mfu_harness:.3f}  (target within 5%)"),
    ]
    width = max(len(name) for name, _ in rows) + 2
    print(f"meter overhead: tiny preset, batch {BATCH}×{SEQ}, AdamW, 1 thread, {PAIRS} pairs of "
          "steps")
    for name, value in rows:
        print(f"{name:<{width}}{value}")
    print(json.dumps({
        "benchmark": "meter_overhead", "pairs": PAIRS,
        "bare_step_time_s": bare_s, "metered_step_time_s": metered_s, "ratio": ratio,
        "pair_ratio": pair_ratio,
        "meter_self_time_s_per_step": self_s, "meter_self_fraction": self_fraction,
        "recording_step_time_s": recording_s, "mfu_meter": mfu_meter,
        "mfu_harness": mfu_harness, "mfu_ratio": mfu_meter / mfu_harness,
        "step_at_least_10ms": bare_s >= 0.010,
        "pass": (pair_ratio < 1.01 and self_fraction < 0.01
                 and abs(mfu_meter / mfu_harness - 1) <= 0.05),
    }))


if __name__ == "__main__":
    main()
