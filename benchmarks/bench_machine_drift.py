"""Is this machine quiet enough for bench_roofline?  One fixed step, timed without a break.

Builds bench_roofline's first workload, the tiny preset's fp32 AdamW training step (batch
4 × 32), on the CPU and runs it back to back for ``--seconds``, then prints the median step
of each ``--window`` seconds and how far those medians spread (slowest / fastest − 1).
bench_roofline asks one prediction to land within 10% of runs minutes apart, which needs the
slowest run at most 11/9 of the fastest (a spread of 22.2%); where one unchanged step spreads
wider than that from window to window, the machine, not the model, decides whether the target
is met.  Prints one JSON line at the end.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

from bench_roofline import ALLOWED_SPREAD, WORKLOADS  # a script: benchmarks/ is on the path
from tensorledger.workload import prepare, resolve_workload


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument("--window", type=float, default=10.0)
    args = parser.parse_args()
    if not 0 < args.window <= args.seconds:
        sys.exit("--window must be above 0 and at most --seconds")
    label, source, batch, seq = WORKLOADS[0]  # bench_roofline's first workload
    work = resolve_workload(source, batch=batch, seq=seq, precision="fp32", device="cpu")
    step = prepare(work, "cpu")
    for _ in range(3):  # optimizer state, allocator, caches
        step.run()
    started = time.perf_counter()
    windows: dict[int, list[float]] = {}
    while (now := time.perf_counter()) - started < args.seconds:
        step.run()
        windows.setdefault(int((now - started) // args.window), []).append(
            time.perf_counter() - now)
    medians = [statistics.median(times) for _, times in sorted(windows.items())]
    spread = max(medians) / min(medians) - 1
    every = statistics.median(t for times in windows.values() for t in times)
    print(f"{label}, fp32 train step, back to back for {args.seconds:g} s: median "
          f"{every * 1e3:.2f} ms; median of each {args.window:g} s (ms):")
    print("  " + " ".join(f"{m * 1e3:.1f}" for m in medians))
    verdict = ("quiet enough" if spread <= ALLOWED_SPREAD else
               "not quiet enough: the machine alone exceeds bench_roofline's targets")
    print(f"windows spread {spread:.1%} (slowest / fastest − 1; bench_roofline needs at most "
          f"{ALLOWED_SPREAD:.1%}): {verdict}")
    print(json.dumps({"benchmark": "machine_drift", "seconds": args.seconds,
                      "window_s": args.window, "steps": sum(map(len, windows.values())),
                      "median_step_s": every, "window_medians_s": medians, "spread": spread,
                      "allowed_spread": ALLOWED_SPREAD, "quiet": spread <= ALLOWED_SPREAD}))


if __name__ == "__main__":
    main()
