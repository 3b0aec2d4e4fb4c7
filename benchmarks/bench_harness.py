"""Our timing harness against torch.utils.benchmark.Timer on the same 2048² fp32 matmul.

Both time the same function in the same process, alternating three rounds so machine load hits
both alike; the medians must agree within 5%.  Prints a table, then one JSON line.
"""

from __future__ import annotations

import json
import statistics

import torch
from torch.utils import benchmark

from tensorledger.bench import measure

N = 2048
ROUNDS = 3


def main() -> None:
    a = torch.randn(N, N)
    b = torch.randn(N, N)
    ours: list[float] = []
    theirs: list[float] = []
    for _ in range(ROUNDS):
        ours.append(measure(lambda: a @ b, budget_s=2.0, min_repeats=5).median_s)
        timer = benchmark.Timer("a @ b", globals={"a": a, "b": b},
                                num_threads=torch.get_num_threads())  # its default is 1
        theirs.append(timer.blocked_autorange(min_run_time=2.0).median)
    ours_s, theirs_s = statistics.median(ours), statistics.median(theirs)
    ratio = ours_s / theirs_s
    flops = 2 * N**3
    print(f"{'timer':<34}{'median s':>10}{'GFLOP/s':>10}")
    print(f"{'tensorledger.bench.measure':<34}{ours_s:>10.4f}{flops / ours_s / 1e9:>10.1f}")
    print(f"{'torch.utils.benchmark.Timer':<34}{theirs_s:>10.4f}{flops / theirs_s / 1e9:>10.1f}")
    print(f"ratio ours / Timer = {ratio:.3f} (target within 0.95–1.05)")
    print(json.dumps({"benchmark": "harness_vs_torch_timer", "n": N, "rounds": ROUNDS,
                      "ours_median_s": ours_s, "timer_median_s": theirs_s, "ratio": ratio,
                      "pass": abs(ratio - 1) <= 0.05}))


if __name__ == "__main__":
    main()
