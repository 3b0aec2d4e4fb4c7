"""Tracing on a GPU target against tracing this machine's program: llama-3-8b, batch 1, seq
8192, the mixed-bf16 training step on fake tensors, traced as an H100 runs it (attention
routed to flash, AdamW's foreach kernels) and as this CPU runs it (its own attention kernel,
the per-parameter loop), in turns in one process so drift hits both alike.

Target: the H100 trace costs at most 1.2 × the CPU trace.
Prints a table, then one line of JSON with unit-suffixed keys.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import time

from tensorledger.hardware import get_hardware
from tensorledger.hardware.target import CPU, target_of
from tensorledger.workload import resolve_workload, trace_workload

MODEL, BATCH, SEQ, TARGET_RATIO = "llama-3-8b", 1, 8192, 1.2


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seq", type=int, default=SEQ)
    args = parser.parse_args()
    targets = {"h100": target_of(get_hardware("h100")), "cpu": CPU}
    times: dict[str, list[float]] = {name: [] for name in targets}
    ops: dict[str, int] = {}
    for _ in range(args.repeats):
        for name, target in targets.items():
            work = resolve_workload(MODEL, batch=BATCH, seq=args.seq, target=target)
            gc.collect()
            start = time.perf_counter()
            run = trace_workload(work)
            times[name].append(time.perf_counter() - start)
            ops[name] = len(run.trace.records)
    median = {name: statistics.median(values) for name, values in times.items()}
    ratio = median["h100"] / median["cpu"]
    print(f"{MODEL}, batch {BATCH} × seq {args.seq}, mixed-bf16 train step on fake tensors, "
          f"{args.repeats} runs each")
    print(f"{'target':<8}{'median s':>10}{'min s':>10}{'max s':>10}{'ops':>10}")
    for name in targets:
        print(f"{name:<8}{median[name]:>10.2f}{min(times[name]):>10.2f}"
              f"{max(times[name]):>10.2f}{ops[name]:>10,}")
    verdict = "meets" if ratio <= TARGET_RATIO else "misses"
    print(f"H100 / CPU trace time: {ratio:.2f} ({verdict} the target of {TARGET_RATIO})")
    print(json.dumps({"model": MODEL, "seq": args.seq, "h100_trace_time_s": median["h100"],
                      "cpu_trace_time_s": median["cpu"], "ratio": ratio,
                      "h100_ops": ops["h100"], "cpu_ops": ops["cpu"]}))


if __name__ == "__main__":
    main()
