"""Predicted against measured step time on this machine: probe, then the tiny transformer.

Probes this device into a temporary profile, traces and predicts one forward+backward step of
the tiny preset (batch 8, seq 256), runs the same step for real, and prints the per-category
errors and the whole-step error (target within 25%).  Prints a table, then one JSON line.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import torch

from tensorledger.bench import probe, profile_toml
from tensorledger.hardware import load_hardware_file
from tensorledger.ledger.roofline import roofline_report
from tensorledger.workload import resolve_workload


def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "local.toml"
        path.write_text(profile_toml(probe("cpu", progress=lambda s: print(
            f"probing {s}", file=sys.stderr))))
        chip = load_hardware_file(path)
    work = resolve_workload("tiny", batch=8, seq=256, step="forward-backward",
                            precision="fp32", device="cpu")
    run = roofline_report(work, chip, measure_step=True, budget_s=5.0)
    comparison = run.comparison
    assert comparison is not None
    print(f"tiny, batch 8 × seq 256, forward+backward, {torch.get_num_threads()} threads")
    print(f"{'category':<16}{'ops':>6}{'predicted ms':>14}{'measured ms':>14}{'error':>9}")
    for c in comparison.categories:
        print(f"{c.category:<16}{c.ops:>6}{c.predicted_s * 1e3:>14.3f}{c.measured_s * 1e3:>14.3f}"
              f"{c.error:>+9.1%}")
    print(f"{'(between ops)':<16}{'':>6}{'':>14}{comparison.unattributed_s * 1e3:>14.3f}")
    print(f"{'whole step':<16}{'':>6}{comparison.predicted_step_s * 1e3:>14.3f}"
          f"{comparison.measured_step_s * 1e3:>14.3f}{comparison.error:>+9.1%}")
    print(json.dumps({
        "benchmark": "roofline_tiny_cpu", "predicted_step_time_s": comparison.predicted_step_s,
        "measured_step_time_s": comparison.measured_step_s,
        "relative_error": comparison.error, "target_abs_relative_error": 0.25,
        "pass": abs(comparison.error) <= 0.25,
        "categories": {c.category: {"predicted_time_s": c.predicted_s,
                                    "measured_time_s": c.measured_s} for c in
                       comparison.categories},
        "measured_mfu": comparison.measured_mfu, "predicted_mfu": comparison.predicted_mfu}))


if __name__ == "__main__":
    main()
